"""The spill file gives back exactly the bytes appended, wherever they lie.

Findings and host profiles of a capture in parts are written there by many appends of many
pieces (a part's findings are thousands of pickles, more than one `pwritev` takes at once).
"""

from __future__ import annotations

import pickle

import numpy as np

from nagledetect.stored import IOV_MAX, RecordTable, SpillFile, pickled


def test_appends_of_more_pieces_than_one_system_call_takes() -> None:
    spill = SpillFile()
    pieces = [bytes([index % 251]) * (index % 7) for index in range(3 * IOV_MAX + 5)]
    first = spill.append(pieces)
    second = spill.append([b"tail"])
    joined = b"".join(pieces)
    assert first == 0 and second == len(joined) == spill.size - 4
    assert spill.read(0, len(joined)) == joined
    assert spill.read(second, 4) == b"tail"


def test_records_read_back_in_any_order() -> None:
    spill = SpillFile()
    records = [{"n": index, "values": list(range(index % 5))} for index in range(5000)]
    pieces, lengths = pickled(records)
    offsets = spill.append_each(pieces)
    assert (np.diff(offsets) == lengths[:-1]).all()
    order = np.arange(len(records))[::-1]
    table = RecordTable(spill, offsets[order], lengths[order])
    assert list(table) == records[::-1]
    assert table[3] == records[-4] and table[-1] == records[0]
    assert table[10:13] == records[::-1][10:13]
    assert table.take(np.array([7, 2])) == [records[-8], records[-3]]
    assert pickle.loads(pickle.dumps(table)) == records[::-1]


def test_stall_evidence_survives_pickling_as_rows() -> None:
    """A finding's stalls travel as one block of rows: every column comes back with its dtype
    and values, NaN (a stall kind that does not measure ACK delay) included. Checked on the
    findings of a real capture, each against itself before pickling."""
    from nagledetect.analysis import analyze_capture
    from tests.conftest import SAMPLE_TRACES

    findings = analyze_capture(str(SAMPLE_TRACES / "seed003-nagle.pcap")).findings
    with_evidence = [finding for finding in findings if len(finding.events)]
    assert with_evidence
    for finding in with_evidence:
        back = pickle.loads(pickle.dumps(finding))
        for before, after in zip(finding.events.columns(), back.events.columns()):
            assert after.dtype == before.dtype
            np.testing.assert_array_equal(after, before)
        assert back.events.records() == finding.events.records()


def test_findings_put_on_disk_read_back_as_the_same_document() -> None:
    """What a run over many captures keeps of each result: what the reporters read, sent
    through a pickle, its findings then put on disk; read back into the same document (the
    one-capture document is checked by hand elsewhere)."""
    from nagledetect.analysis import analyze_capture, for_another_process, kept_on_disk
    from nagledetect.report.document import build_document
    from nagledetect.stored import StoredFindings
    from tests.conftest import SAMPLE_TRACES

    analyses = [analyze_capture(str(SAMPLE_TRACES / name))
                for name in ("mixed.pcap", "seed003-nagle.pcap")]
    spill = SpillFile()
    kept = [kept_on_disk(pickle.loads(pickle.dumps(for_another_process(analysis, False))), spill)
            for analysis in analyses]
    assert all(isinstance(analysis.findings, StoredFindings) for analysis in kept)
    assert [len(analysis.findings) for analysis in kept] == [len(a.findings) for a in analyses]
    assert build_document(kept) == build_document(analyses)
