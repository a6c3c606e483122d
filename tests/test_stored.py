"""The spill file gives back exactly the bytes appended, wherever they lie.

Findings and host profiles of a capture in parts are written there by many appends of many
pieces (a part's findings are thousands of pickles, more than one `pwritev` takes at once).
"""

from __future__ import annotations

import gc
import multiprocessing
import os
import pickle
from concurrent.futures import ProcessPoolExecutor

import numpy as np
import pytest

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
    one-capture document is checked by hand elsewhere). Captures without findings share one
    empty table."""
    from nagledetect.analysis import analyze_capture, for_another_process, kept_on_disk
    from nagledetect.report.document import build_document
    from nagledetect.stored import StoredFindings
    from tests.conftest import SAMPLE_TRACES

    names = ("mixed.pcap", "seed003-nagle.pcap", "seed002-stream.pcap", "seed002-stream.pcap")
    analyses = [analyze_capture(str(SAMPLE_TRACES / name)) for name in names]
    spill = SpillFile()
    kept = [kept_on_disk(pickle.loads(pickle.dumps(for_another_process(analysis, False))), spill)
            for analysis in analyses]
    assert all(isinstance(analysis.findings, StoredFindings) for analysis in kept)
    assert [len(analysis.findings) for analysis in kept] == [len(a.findings) for a in analyses]
    assert build_document(kept) == build_document(analyses)
    # seed002 (a one-way stream of 100-byte writes every 3 ms, never 10 ms apart: tshark) has
    # no finding, and its two runs share one empty table
    assert [len(analysis.findings) for analysis in kept[2:]] == [0, 0]
    assert kept[2].findings is kept[3].findings


def test_a_run_keeps_findings_in_memory_until_its_room_is_full() -> None:
    """A run over many captures keeps each result's findings in memory while they (and their
    evidence rows) fit in its room, then on disk; either way the document is the same.
    seed003 has 3 findings (a stall, idle time, stop-and-wait) and mixed.pcap 17 (`nagledetect
    --format json`, the documents' `findings` listed and counted by hand)."""
    from nagledetect.analysis import FINDING_BYTES, RunKeeping, analyze_capture
    from nagledetect.report.document import build_document
    from nagledetect.stored import StoredFindings
    from tests.conftest import SAMPLE_TRACES

    analyses = [analyze_capture(str(SAMPLE_TRACES / name))
                for name in ("seed003-nagle.pcap", "mixed.pcap", "seed003-nagle.pcap")]
    assert [len(analysis.findings) for analysis in analyses] == [3, 17, 3]
    sizes = [sum(FINDING_BYTES + finding.events.rows.nbytes for finding in analysis.findings)
             for analysis in analyses]
    keeping = RunKeeping(SpillFile(), room_bytes=sizes[0] + sizes[1])
    kept = [keeping.kept(analysis) for analysis in analyses]
    assert [isinstance(analysis.findings, StoredFindings) for analysis in kept] == [
        False, False, True]
    assert keeping.held_bytes == sizes[0] + sizes[1]
    assert build_document(kept) == build_document(analyses)


def _open_files() -> int:
    """Open descriptors once the collector has run, so that a file an earlier test left in a
    reference cycle cannot close in the middle of a count."""
    gc.collect()
    return len(os.listdir("/proc/self/fd"))


def test_an_adopted_spill_reads_its_bytes_from_the_adopting_file() -> None:
    """A run over many captures keeps one open file: each capture's spill moves its bytes to
    the shared one and closes its own, and what it read before it reads after."""
    shared, own = SpillFile(), SpillFile()
    shared.append([b"shared bytes"])
    pieces = [bytes([index % 251]) * 1000 for index in range(20_000)]
    offsets = own.append_each(pieces)
    before = _open_files()
    shared.adopt(own)
    assert _open_files() == before - 1
    assert shared.size == len(b"shared bytes") + sum(map(len, pieces))
    assert [own.read(int(o), 1000) for o in offsets[[0, 7, -1]]] == [pieces[i] for i in (0, 7, -1)]
    assert shared.read(0, 12) == b"shared bytes"
    shared.adopt(own)
    assert shared.size == len(b"shared bytes") + sum(map(len, pieces))
    with pytest.raises(ValueError, match="adopted"):
        own.append([b"more"])


def _in_parts_for_parent(path: str, folder: str):
    """What a worker of a many-capture run does with a capture in parts (`cli`), in parts
    small enough for a sample trace."""
    from nagledetect.analysis import analyze_capture, for_another_process

    analysis = analyze_capture(path, keep_tables=True, part_bytes=os.path.getsize(path) // 5 + 1,
                               spill=SpillFile(folder))
    handed = for_another_process(analysis, True)
    return len(pickle.dumps(handed.findings)), handed


def test_a_worker_hands_its_spill_file_over_by_name(tmp_path) -> None:
    """A worker process analyses a capture in parts into a named spill file; its findings,
    hosts and tables cross the pipe as where they lie (the findings of mixed.pcap as 3.1 kB,
    most of it their Nagle family's summaries as columns, against 23.5 kB as records), the
    parent takes the file over (gone from the folder) and adopts it into its own: the same
    document and tables as a run in one process, whose document the other tests check by
    hand."""
    from nagledetect.analysis import analyze_capture, kept_on_disk
    from nagledetect.report.document import build_document
    from nagledetect.report.tables import write_tables
    from nagledetect.stored import StoredFindings, StoredHosts
    from tests.conftest import SAMPLE_TRACES

    path = str(SAMPLE_TRACES / "mixed.pcap")
    folder = tmp_path / "handover"
    folder.mkdir()
    with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
        by_reference, handed = pool.submit(_in_parts_for_parent, path, str(folder)).result()
    assert not list(folder.iterdir())
    assert isinstance(handed.findings, StoredFindings) and isinstance(handed.hosts, StoredHosts)
    shared = SpillFile()
    shared.append([b"an earlier capture's records"])
    kept = kept_on_disk(handed, shared)
    assert shared.size == len(b"an earlier capture's records") + handed.findings.spill.size
    as_records = len(pickle.dumps(list(kept.findings)))
    assert by_reference * 5 < as_records, (by_reference, as_records)
    whole = analyze_capture(path, keep_tables=True)
    assert build_document([kept]) == build_document([whole])
    write_tables([whole], tmp_path / "whole", "csv")
    write_tables([kept], tmp_path / "kept", "csv")
    for name in ("packets", "connections", "messages", "findings"):
        expected = (tmp_path / "whole" / f"{name}.csv").read_bytes()
        assert expected.count(b"\n") > 1, name
        assert (tmp_path / "kept" / f"{name}.csv").read_bytes() == expected, name


def test_captures_in_parts_one_after_another_share_one_spill_file() -> None:
    """`-j 1` over many captures: each capture in parts spills to the file it is given, so the
    run holds one open file however many captures it reads, and the findings read back equal
    those of a capture with a file of its own."""
    from nagledetect.analysis import analyze_capture, kept_on_disk, spills_read_by
    from tests.conftest import SAMPLE_TRACES

    paths = [str(SAMPLE_TRACES / name) for name in ("mixed.pcap", "classic-phase-lock.pcap")]
    shared = SpillFile()
    before = _open_files()
    kept = [kept_on_disk(analyze_capture(path, part_bytes=os.path.getsize(path) // 4 + 1,
                                         spill=shared), shared) for path in paths]
    assert _open_files() == before
    assert all(spills_read_by(analysis) == [shared] for analysis in kept)
    alone = [analyze_capture(path, part_bytes=os.path.getsize(path) // 4 + 1) for path in paths]
    assert [list(a.findings) for a in kept] == [list(a.findings) for a in alone]


def test_a_spill_whose_bytes_were_adopted_cannot_adopt_another() -> None:
    """An adopted spill reads its adopter's descriptor and has closed its own: adopting into it
    would hand a third spill a descriptor about to be reused, so it is refused."""
    first, second, third = SpillFile(), SpillFile(), SpillFile()
    second.append([b"second"])
    first.adopt(second)
    with pytest.raises(ValueError, match="adopted"):
        second.adopt(third)
    assert second.read(0, 6) == b"second"


def test_stored_hosts_are_looked_up_by_their_whole_address() -> None:
    """Hosts are held as fixed-width text in address order; a lookup, the iteration and the
    profiles give back Python strings, and an address that only begins like a held one
    (10.0.0.1 of 10.0.0.10), is longer than every held one or has a character the held text
    cannot hold is not found. The profiles are hand-made: their values are what the lookups
    must return."""
    from nagledetect.detectors.model import HostValues
    from nagledetect.stored import HostColumns, host_rows

    addresses = ["10.0.0.10", "2001:db8::2", "10.0.0.9"]
    values = HostValues(addresses, [40.0, None, 200.0], [1.5, None, 0.25], [12, 0, 30],
                        ["linux", "unknown", "windows"], [None, None, None])
    columns = HostColumns(SpillFile())
    columns.add(host_rows(values))
    hosts, _ = columns.by_address()
    assert list(hosts) == ["10.0.0.10", "10.0.0.9", "2001:db8::2"]
    assert all(isinstance(address, str) for address in hosts)
    assert hosts["10.0.0.9"].delack_timer_ms == 200.0
    assert hosts["10.0.0.9"].stack_family == "windows"
    assert hosts["2001:db8::2"].delack_timer_ms is None
    for missing in ("10.0.0.1", "10.0.0.100", "2001:db8::2:1234:5678", "h\u00f4te"):
        with pytest.raises(KeyError):
            hosts[missing]
    assert [profile.address for profile in hosts.values()] == list(hosts)


def test_stored_hosts_give_each_phase_lock_to_its_own_host() -> None:
    """Only the hosts tested for phase locking keep where their test lies; read in any window,
    each test comes back with its host and every other host has none. Hand-made profiles: the
    tests are what the reads must return."""
    from nagledetect.detectors.model import HostValues
    from nagledetect.stored import HostColumns, host_rows

    addresses = [f"10.0.{index // 256}.{index % 256}" for index in range(40)]
    locked = {"10.0.0.0", "10.0.0.17", "10.0.0.39"}
    locks = [{"period_ms": 200.0, "host": address} if address in locked else None
             for address in addresses]
    values = HostValues(addresses, [40.0] * 40, [1.0] * 40, [9] * 40, ["linux"] * 40, locks)
    columns = HostColumns(SpillFile())
    columns.add(host_rows(values))
    hosts, _ = columns.by_address()
    for start, stop in ((0, 40), (1, 17), (17, 18), (18, 39), (39, 45), (5, 5)):
        read = hosts.host_values(start, stop)
        expected = {address: lock for address, lock in zip(addresses, locks)}
        assert len(read.phase_lock) == min(stop, 40) - start
        assert read.phase_lock == [expected[address] for address in read.address]
    assert hosts["10.0.0.17"].phase_lock == {"period_ms": 200.0, "host": "10.0.0.17"}
    assert hosts["10.0.0.18"].phase_lock is None and hosts["10.0.0.18"].stack_family == "linux"


def test_ranking_columns_joined_across_captures_keep_each_findings_kind_and_advice() -> None:
    """Kinds and advice are held as codes of each capture's distinct values; joined across
    captures whose findings name them in different orders, each finding still reads as its own
    kind and advice (checked against the findings themselves)."""
    from nagledetect.analysis import analyze_capture
    from nagledetect.stored import RankingColumns, joined_ranking
    from tests.conftest import SAMPLE_TRACES

    found = [list(analyze_capture(str(SAMPLE_TRACES / name), charts=False).findings)
             for name in ("seed003-nagle.pcap", "cause-rto.pcap", "mixed.pcap")]
    pieces = [RankingColumns.of(findings) for findings in found]
    assert pieces[0].kinds != pieces[1].kinds[:len(pieces[0].kinds)]
    joined = joined_ranking(pieces)
    every = [finding for findings in found for finding in findings]
    assert [joined.kinds[code] for code in joined.kind_codes] == [f.kind for f in every]
    assert [joined.advice[code] for code in joined.advice_codes] == [
        tuple(f.advice) for f in every]
    assert joined.time_lost_s.tolist() == [f.time_lost_s for f in every]
    assert len(set(joined.kinds)) == len(joined.kinds)


def test_a_stored_table_reads_as_the_table_it_was() -> None:
    """A table kept on disk a chunk of rows at a time gives back its columns, its rows at
    scattered, repeated or negative positions across chunks (in the order asked), where a mask
    holds, in slices, and chunk by chunk, as the table in memory does; a column given as
    fixed-width text comes back as the strings it holds, as a table holds text. Pickled for a
    process that cannot read its spill file, it travels as that table. The table is made here:
    its values are what the reads must return."""
    from nagledetect.ordering import as_text
    from nagledetect.stored import ROWS_PER_STORED_CHUNK, StoredRows
    from nagledetect.table import Table

    rows = 2 * ROWS_PER_STORED_CHUNK + 123
    addresses = [f"10.0.{row // 250 % 250}.{row % 250}" for row in range(rows)]
    held = Table({"id": np.arange(rows), "port": (np.arange(rows) % 65_536).astype(np.int32),
                  "rtt_ms": np.linspace(0.0, 1.0, rows),
                  "source": np.array(["handshake", "ack lags"], dtype=object)[np.arange(rows) % 2],
                  "address": addresses})
    stored = StoredRows.of_columns(SpillFile(), rows, ((name, as_text(held[name]) if name ==
                                                        "address" else held[name])
                                                       for name in held), {})
    assert len(stored) == rows and stored.columns == held.columns and "port" in stored
    for name in held:
        assert np.array_equal(stored[name], held[name]) and stored[name].dtype == held[name].dtype
    assert stored["address"][-1] == addresses[-1] and isinstance(stored["address"][0], str)
    with pytest.raises(KeyError):
        stored["missing"]
    scattered = np.array([rows - 1, 5, ROWS_PER_STORED_CHUNK, 5, ROWS_PER_STORED_CHUNK - 1, -3])
    mask = np.arange(rows) % 3 == 0
    for picked in (scattered, mask, slice(ROWS_PER_STORED_CHUNK - 2, ROWS_PER_STORED_CHUNK + 3),
                   slice(None, None, -7), np.zeros(0, dtype=np.int64), []):
        assert stored.take(picked).equals(held.take(picked)), picked
    with pytest.raises(IndexError):
        stored.take([rows])
    assert [len(chunk) for chunk in stored.chunks()] == [ROWS_PER_STORED_CHUNK] * 2 + [123]
    assert pickle.loads(pickle.dumps(stored)).equals(held)
    assert stored.take(slice(0, 2)).records()[1]["address"] == "10.0.0.1"
