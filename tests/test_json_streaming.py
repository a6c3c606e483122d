"""The JSON document is the same bytes however its findings are cut into pieces for writing.

A finding with more evidence rows than a piece holds is written a slice of rows at a time (a
huge connection's stalls would otherwise be one string of a gigabyte). The reference is the
document written with pieces too large to cut anything, on the same real captures; the
findings themselves are checked by hand in the detector tests.
"""

from __future__ import annotations

import io
import os
import threading
import time

import numpy as np
import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nagledetect.analysis import analyze_capture
from nagledetect.chunked import ChunkedSequence
from nagledetect.detectors.model import StallEvents
from nagledetect.report import document, evidence_text, turns
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
def test_evidence_text_is_what_orjson_writes_for_the_rows(name):
    """The evidence rows are written from columns by the core (`evidence_texts`); the
    reference is the whole document dumped by orjson with each finding's rows as dicts
    (`StallEvents.records`, rounded one value at a time), which is how the rows were written
    before."""
    analysis = analyze_capture(str(SAMPLE_TRACES / name))
    built = build_document([analysis])
    plain = {key: list(value) if isinstance(value, ChunkedSequence) else value
             for key, value in built.items()}
    plain["findings"] = [dict(entry, events=entry["events"].records())
                         for entry in plain["findings"]]
    assert sum(len(entry["events"]) for entry in plain["findings"]) > 20
    assert _written(analysis) == orjson.dumps(plain, option=orjson.OPT_INDENT_2) + b"\n"


_DOUBLES = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True),
    st.floats(min_value=-1e3, max_value=1e3),
    st.integers(-10**7, 10**7).map(lambda n: n / 2_000),        # halves at the third place
    st.integers(0, 10**12).map(lambda n: n * 10.0 ** -6),        # micro-units, tiny to epoch
    st.sampled_from([0.0, -0.0, 1e-6, 5e-7, 1.5e-5, 1e15, 1e16, 9.999e15, 0.0635, 2.5]))


@pytest.mark.filterwarnings("ignore:overflow encountered in multiply")
@settings(max_examples=300, derandomize=True, deadline=None, database=None)
@given(findings=st.lists(st.lists(st.tuples(
    st.integers(0, 2**32 - 1), st.integers(-1, 2**32 - 1), st.integers(0, 2**31),
    _DOUBLES, _DOUBLES, _DOUBLES, _DOUBLES), max_size=6), min_size=1, max_size=5))
def test_evidence_numbers_are_what_orjson_writes_for_them(findings):
    """Every kind of double the rows can hold (any magnitude, halves where the document
    rounds, not a number, infinities, negative zero), in findings of none to six rows: the
    core's text is orjson's for the same rows as dicts."""
    events = [StallEvents.of(*(np.array(column, dtype=dtype) for column, dtype in zip(
        zip(*rows) if rows else [[]] * 7, ("u4", "i8", "i8", "f8", "f8", "f8", "f8"))))
              for rows in findings]
    expected = [orjson.dumps({"events": rows.records()}, option=orjson.OPT_INDENT_2)
                for rows in events]
    for text, reference in zip(evidence_text.evidence_texts(events), expected):
        assert b'{\n  "events": ' + text.replace(b"\n    ", b"\n") + b"\n}" == reference


@pytest.mark.parametrize("name", CAPTURES)
def test_pieces_written_by_forked_workers_in_turn_write_the_same_bytes(name, monkeypatch,
                                                                         tmp_path):
    """Two forked workers render the pieces and write them to the file in turn (findings cut
    to a few rows, lists to 2 entries, and a capture in parts, whose findings and hosts are
    read from disk in the workers); to a pipe as well, read by a thread meanwhile."""
    path = SAMPLE_TRACES / name
    analyses = [analyze_capture(str(path)),
                analyze_capture(str(path), part_bytes=path.stat().st_size // 6 + 1)]
    expected = _written(analyses[0])
    monkeypatch.setattr(document, "EVIDENCE_ROWS_PER_CHUNK", 5)
    monkeypatch.setattr(document, "ENTRIES_PER_CHUNK", 2)
    for analysis in analyses:
        with open(tmp_path / "out.json", "wb") as out:
            out.write(b"before ")
            write_json(build_document([analysis]), out, workers=2)
            out.write(b" after")
        assert (tmp_path / "out.json").read_bytes() == b"before " + expected + b" after"
    assert _written_to_pipe(analyses[1]) == expected


def _written_to_pipe(analysis) -> bytes:
    read_end, write_end = os.pipe()
    received: list[bytes] = []
    with open(read_end, "rb") as source:
        reader = threading.Thread(target=lambda: received.append(source.read()))
        reader.start()
        with open(write_end, "wb") as out:
            write_json(build_document([analysis]), out, workers=2)
        reader.join()
    return received[0]


def _failing_render(index: int) -> bytes:
    if index == 3:
        raise ValueError("piece 3 cannot be rendered")
    return b"%d;" % index


def _dying_render(index: int) -> bytes:
    if index == 2:
        os._exit(9)
    return b"%d;" % index


def _write(index: int, rendered: bytes, out) -> None:
    out.write(rendered)


@pytest.mark.parametrize("render, error, failing", [(_failing_render, ValueError, 3),
                                                    (_dying_render, RuntimeError, 2)])
def test_a_failing_worker_stops_the_others_and_its_error_is_raised(render, error, failing,
                                                                    tmp_path):
    """Pieces before the failing one may be written, in order; none from it on (a worker
    blocked on the failed turn stops instead of waiting for ever). Worker 0 renders the even
    pieces, worker 1 the odd ones, so piece 0 is written before either fails."""
    with open(tmp_path / "out", "wb") as out, pytest.raises(error):
        turns.write_in_turns(40, render, _write, out.fileno(), workers=2)
    pieces = (tmp_path / "out").read_bytes().split(b";")[:-1]
    assert pieces == [b"%d" % index for index in range(len(pieces))]
    assert 1 <= len(pieces) <= failing


def _slow_write(index: int, rendered: bytes, out) -> None:
    if index == 1:
        time.sleep(1.0)
    out.write(rendered)


def _dying_late_render(index: int) -> bytes:
    if index == 2:
        time.sleep(0.3)
        os._exit(9)
    return b"%d;" % index


def _failing_late_render(index: int) -> bytes:
    if index == 2:
        time.sleep(0.3)
        raise ValueError("piece 2 cannot be rendered")
    return b"%d;" % index


@pytest.mark.parametrize("render", [_dying_late_render, _failing_late_render])
def test_a_worker_failing_while_another_writes_still_stops_the_writer(render, tmp_path):
    """Worker 1 is writing piece 1 (for 1 s) when worker 0 fails on piece 2 (0.3 s in) and the turn is
    marked failed. Passing its turn on must not overwrite that mark: it did once, and worker 1
    then waited for ever for piece 3's turn (found by looping the test above; a hang, so the
    call runs in a thread that must end)."""
    raised: list[BaseException] = []

    def writing() -> None:
        with open(tmp_path / "out", "wb") as out:
            try:
                turns.write_in_turns(40, render, _slow_write, out.fileno(), workers=2)
            except (RuntimeError, ValueError) as error:
                raised.append(error)

    thread = threading.Thread(target=writing, daemon=True)
    thread.start()
    thread.join(timeout=30)
    assert not thread.is_alive(), "the writing workers never stopped"
    assert len(raised) == 1
    assert (tmp_path / "out").read_bytes() == b"0;1;"


def test_a_closed_pipe_raises_broken_pipe_in_the_caller():
    """A reader that goes away (`| head`) ends the writing with BrokenPipeError, as it does
    when one process writes, so the CLI handles both alike."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    big = b"x" * (1 << 20)
    with open(write_end, "wb") as out, pytest.raises(BrokenPipeError):
        turns.write_in_turns(8, lambda index: big, _write, out.fileno(), workers=2)


def _connection_entries(analyses) -> list:
    return orjson.loads(_written_all(analyses))["connections"]


def _written_all(analyses) -> bytes:
    out = io.BytesIO()
    write_json(build_document(analyses), out)
    return out.getvalue()


@pytest.mark.parametrize("ports_as_floats", [False, True])
def test_connections_of_several_captures_are_each_captures_own_entries(ports_as_floats) -> None:
    """The connection entries of several captures (their tables joined to be written) are each
    capture's entries alone, with the capture's position, each keeping its own id (Wireshark's
    tcp.stream in its file: mixed.pcap has 6 connections, seed003 1, in tshark's `-z
    conv,tcp`). Where a column's
    dtype differs between the tables (seed003's ports made floats in a copy), joining would
    change the others' values (48162 -> 48162.0): they are written one by one instead."""
    analyses = [analyze_capture(str(SAMPLE_TRACES / name)) for name in
                ("mixed.pcap", "seed003-nagle.pcap", "mixed.pcap")]
    if ports_as_floats:
        connections = analyses[1].capture.connections
        analyses[1].capture.connections = connections.assign(
            client_port=connections["client_port"].astype(float))
    alone = [_connection_entries([analysis]) for analysis in analyses]
    assert [len(entries) for entries in alone] == [6, 1, 6]
    assert isinstance(alone[1][0]["client"], str) and isinstance(alone[0][0]["id"], int)
    expected = [{**entry, "capture": position}
                for position, entries in enumerate(alone) for entry in entries]
    assert _written_all(analyses).count(b'"capture":') >= 13
    assert _connection_entries(analyses) == expected
    assert orjson.dumps(_connection_entries(analyses)) == orjson.dumps(expected)


@pytest.mark.parametrize("bounds", [[0, 0, 3, 3, 3, 7, 8, 8], [0, 5], [0, 0, 0], [0, 1, 2, 3]])
def test_a_chunk_touches_exactly_the_captures_whose_positions_it_covers(bounds) -> None:
    """Captures laid end to end (some empty: equal bounds): every chunk [start, stop) is cut
    into the ranges of the captures it overlaps, found by bisection, as a scan of every capture
    would find them."""
    for start in range(bounds[-1] + 1):
        for stop in range(start, bounds[-1] + 2):
            scanned = [(capture, low, max(start, low) - low, min(stop, high) - low)
                       for capture, (low, high) in enumerate(zip(bounds[:-1], bounds[1:]))
                       if max(start, low) < min(stop, high)]
            assert list(document._spans(bounds, start, stop)) == scanned, (start, stop)
