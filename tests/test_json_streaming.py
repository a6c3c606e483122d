"""The JSON document is the same bytes however its findings are cut into pieces for writing.

A finding with more evidence rows than a piece holds is written a slice of rows at a time (a
huge connection's stalls would otherwise be one string of a gigabyte). The reference is the
document written with pieces too large to cut anything, on the same real captures; the
findings themselves are checked by hand in the detector tests.
"""

from __future__ import annotations

import io

import orjson
import pytest

from nagledetect.analysis import analyze_capture
from nagledetect.report import document
from nagledetect.report.document import build_document, write_json
from tests.conftest import SAMPLE_TRACES

CAPTURES = ["seed003-nagle.pcap", "mixed.pcap", "classic-phase-lock.pcap"]


def _written(analysis) -> bytes:
    out = io.BytesIO()
    write_json(build_document([analysis]), out)
    return out.getvalue()


@pytest.mark.parametrize("name", CAPTURES)
@pytest.mark.parametrize("rows_per_piece", [1, 7, None])
def test_findings_cut_into_pieces_write_the_same_bytes(name, rows_per_piece, monkeypatch):
    analysis = analyze_capture(str(SAMPLE_TRACES / name))
    whole = _written(analysis)
    most_rows = max(len(finding.events) for finding in analysis.findings)
    rows_per_piece = rows_per_piece or most_rows - 1  # None: only the largest is cut
    assert most_rows > rows_per_piece > 0  # some finding is written in slices
    monkeypatch.setattr(document, "EVIDENCE_ROWS_PER_CHUNK", rows_per_piece)
    monkeypatch.setattr(document, "ENTRIES_PER_CHUNK", 2)
    assert _written(analysis) == whole
    assert orjson.loads(whole)["schema"] == "nagledetect/1"


@pytest.mark.parametrize("name", CAPTURES)
def test_pieces_rendered_in_forked_workers_write_the_same_bytes(name, monkeypatch):
    """Two forked workers render the pieces (findings cut to a few rows, lists to 2 entries,
    and a capture in parts, whose findings and hosts are read from disk in the workers)."""
    path = SAMPLE_TRACES / name
    analyses = [analyze_capture(str(path)),
                analyze_capture(str(path), part_bytes=path.stat().st_size // 6 + 1)]
    expected = _written(analyses[0])
    monkeypatch.setattr(document, "EVIDENCE_ROWS_PER_CHUNK", 5)
    monkeypatch.setattr(document, "ENTRIES_PER_CHUNK", 2)
    for analysis in analyses:
        out = io.BytesIO()
        write_json(build_document([analysis]), out, workers=2)
        assert out.getvalue() == expected
