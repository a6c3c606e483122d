"""A capture analysed in parts (bounded memory) gives the same document as a one-part run.

The expected values are not copied from the code: each part-wise document is compared with the
one-part document of the same real capture, whose findings the other tests check by hand.
Part sizes are forced small so that every capture splits into several parts.
"""

from __future__ import annotations

import os
import pickle
import subprocess
from pathlib import Path

import pandas as pd
import pytest

from nagledetect.analysis import analyze_capture
from nagledetect.api import load_capture
from nagledetect.flows.build import build_flows
from nagledetect.flows.partition import PartitionedPackets, load_part
from nagledetect.read.capture import decoded_batches
from nagledetect.report.document import build_document
from nagledetect.stored import StoredFindings, StoredHosts
from tests.conftest import SAMPLE_TRACES, corpus_file

CAPTURES = [
    SAMPLE_TRACES / "mixed.pcap",  # six connections, several scenarios
    SAMPLE_TRACES / "classic-phase-lock.pcap",  # one receiver's clock shared by 4 connections
    SAMPLE_TRACES / "seed001-blocks-99912-offload.pcap",
]
CORPUS = [
    "zeek/ssh__ssh.pcap",  # 23 connections
    "zeek/ssh__ssh_kex_mlkem.pcap",  # a median on a rounding edge: scored from exact values
    "zeek/smb__smb3_multichannel.pcap",
    "zeek/modbus__modbusBig.pcap",  # a phase-lock p-value whose sums must add in frame order
]


def _documents(path: Path, parts: int, workers: int = 1) -> tuple[dict, dict]:
    whole = analyze_capture(str(path))
    split = analyze_capture(str(path), part_bytes=os.path.getsize(path) // parts + 1,
                            workers=workers)
    assert whole.tables_kept and not split.tables_kept
    return build_document([whole]), build_document([split])


@pytest.mark.parametrize("path", CAPTURES, ids=lambda p: p.name)
def test_sample_trace_in_parts_equals_one_part(path: Path) -> None:
    whole, split = _documents(path, parts=5)
    assert whole["findings"], "the comparison needs findings to mean something"
    assert split == whole


@pytest.mark.parametrize("relative", CORPUS)
def test_corpus_capture_in_parts_equals_one_part(relative: str) -> None:
    whole, split = _documents(corpus_file(relative), parts=7)
    assert split == whole


@pytest.mark.parametrize("workers", [1, 2])
def test_many_host_buckets_equal_one_part(workers: int) -> None:
    """40 parts make 10 host buckets: each host's samples must still be fingerprinted and
    tested together, in the one-part order (with two workers, parts and buckets each run in
    worker processes)."""
    whole, split = _documents(SAMPLE_TRACES / "mixed.pcap", parts=40, workers=workers)
    assert whole["hosts"] and split == whole


def test_stored_results_read_back_and_travel_as_records() -> None:
    """Findings and hosts of a capture in parts stay on disk; sent to another process (a
    many-file run) they arrive as plain records that give the same document, also when merged
    with a capture analysed whole."""
    path = SAMPLE_TRACES / "classic-phase-lock.pcap"
    split = analyze_capture(str(path), part_bytes=os.path.getsize(path) // 8 + 1)
    assert isinstance(split.findings, StoredFindings) and isinstance(split.hosts, StoredHosts)
    sent = pickle.loads(pickle.dumps(split))
    assert isinstance(sent.findings, list) and isinstance(sent.hosts, dict)
    other = analyze_capture(str(SAMPLE_TRACES / "mixed.pcap"))
    whole = analyze_capture(str(path))
    assert build_document([sent, other]) == build_document([split, other]) == build_document(
        [whole, other])


@pytest.mark.parametrize("workers", [1, 2])
def test_phase_lock_is_found_across_parts(workers: int) -> None:
    """The 200 ms tick is a host-wide property: with each connection in a different part it
    must still be tested over all four connections together (with two workers, in a worker
    process that reads the stalls it weighs from the parent's spill file)."""
    path = SAMPLE_TRACES / "classic-phase-lock.pcap"
    split = analyze_capture(str(path), part_bytes=os.path.getsize(path) // 8 + 1,
                            workers=workers)
    locks = [f for f in split.findings if f.kind == "phase-lock"]
    assert len(locks) == 1 and len(locks[0].details["connections"]) == 4
    assert build_document([split]) == build_document([analyze_capture(str(path))])


def test_parts_hold_whole_connections_in_file_order() -> None:
    """Every packet lands in exactly one part, both directions of a 4-tuple together, frames
    rising within a part (checked against the file's own count from the accounting)."""
    path = SAMPLE_TRACES / "mixed.pcap"
    accounting, batches = decoded_batches(str(path))
    partitioned = PartitionedPackets(4)
    try:
        partitioned.add(batches)
        parts = [load_part(files)[0] for files in partitioned.part_files()]
    finally:
        partitioned.close()
    frames = [part["frame"] for part in parts]
    assert sum(len(f) for f in frames) == accounting.tcp_packets
    assert all((f[1:] > f[:-1]).all() for f in frames)
    seen: dict[frozenset, int] = {}
    for index, part in enumerate(parts):
        for src, sport, dst, dport in zip(part["src_3"], part["src_port"], part["dst_3"],
                                          part["dst_port"]):
            key = frozenset({(int(src), int(sport)), (int(dst), int(dport))})
            assert seen.setdefault(key, index) == index
    assert len(parts) > 1


def test_sack_blocks_follow_their_packets_into_parts() -> None:
    """Every SACK block of the file comes back, once, with its own frame (87 blocks in this
    capture: `tcpdump -nr` shows them as 'sack 1 {...}' options)."""
    path = corpus_file("zeek/http__206_example_a.pcap")
    whole = load_capture(str(path)).sack_blocks
    accounting, batches = decoded_batches(str(path))
    partitioned = PartitionedPackets(5)
    try:
        partitioned.add(batches)
        parts = [build_flows([load_part(files)]).sack_blocks
                 for files in partitioned.part_files()]
    finally:
        partitioned.close()

    def rows(table: pd.DataFrame) -> list[tuple[int, int, int]]:
        return sorted(map(tuple, table[["frame", "left_raw", "right_raw"]].astype("int64")
                          .to_numpy().tolist()))
    assert len(whole) == 87
    assert rows(pd.concat(parts)) == rows(whole)


def test_a_huge_part_runs_beside_ordinary_parts_and_never_beside_another_huge_one() -> None:
    """Which parts start together, by part file size (largest first). A part larger than all
    the part files allowed in flight holds a huge connection: it starts when nothing runs or
    beside ordinary parts of up to COMPANION_PART_FILE_BYTES in all, which keep the other
    workers busy while it runs, and a second huge part waits for it (unless `--memory` makes
    room for both). Measured on the 10 M mix
    with a 3 M-packet connection appended (docs/performance.md, the twelfth round), the parts'
    wall time fell from 10.0 to 7.4 s, the whole run from 16.9 to 14.1 s."""
    from nagledetect.part_sizes import PART_BYTES, PART_FILE_BYTES_IN_FLIGHT
    from nagledetect.parts import COMPANION_PART_FILE_BYTES, _fitting

    limit = PART_FILE_BYTES_IN_FLIGHT
    huge, ordinary = limit + 1, PART_BYTES
    assert COMPANION_PART_FILE_BYTES == 2 * ordinary
    sizes = [huge, huge, ordinary, ordinary, ordinary]
    assert _fitting([0, 1, 2, 3, 4], sizes, [], 2, limit) == [0, 2]
    assert _fitting([1, 3, 4], sizes, [0], 4, limit) == [3, 4]
    assert _fitting([1, 4], sizes, [0, 2, 3], 8, limit) == []
    assert _fitting([1, 4], sizes, [2, 3], 8, limit) == [1]
    assert _fitting([1], sizes, [], 2, limit) == [1]
    mice = [ordinary] * 8
    assert _fitting(list(range(8)), mice, [], 8, limit) == list(range(6))
    assert _fitting([6, 7], mice, [0, 1, 2, 3, 4], 8, limit) == [6]
    more = 2 * huge  # --memory raised: the two huge parts run at once
    assert _fitting([0, 1, 2, 3, 4], sizes, [], 2, more) == [0, 1]


def test_a_killed_worker_beside_a_huge_part_names_the_huge_connection() -> None:
    """A worker killed while a huge connection's part ran beside ordinary ones: fewer jobs
    alone would not help, since -j 1 still analyses that part whole (5,000,000 packets at
    BYTES_PER_PART_PACKET = 240 bytes: 1.2 GB); without a huge part, fewer jobs do."""
    from nagledetect.parts import PartWorkersKilled

    beside = PartWorkersKilled([5_000_000, 310_000], huge=True).advice()
    assert beside.endswith(
        "analysing 2 parts of up to 5,000,000 packets; -j 1 analyses the largest without the "
        "others, but a connection is analysed whole, in about 1.2 GB for that part; cut the "
        "capture into pieces (editcap -c 1200000) and analyse them one at a time (-j 1), leave "
        "its largest connections out with --filter, or use a machine with more memory")
    sliced = PartWorkersKilled([5_000_000, 310_000], huge=True, sliced=True).advice()
    assert sliced.endswith(
        "-j 1 analyses the largest without the others, but that part, though read a slice at a "
        "time, holds the events of its connections (messages, delayed-ACK samples, stall "
        "candidates, gaps) to its end, up to about 0.9 GB; cut the capture into pieces "
        "(editcap -c 1200000) and analyse them one at a time (-j 1), leave its largest "
        "connections out with --filter, or use a machine with more memory")
    ordinary = PartWorkersKilled([310_000, 290_000], huge=False).advice()
    assert ordinary.endswith("2 parts of up to 310,000 packets; fewer jobs (-j) or a smaller "
                             "--memory need less memory")


def test_pieces_of_a_capture_find_its_stalls_where_they_keep_the_handshake(tmp_path) -> None:
    """What docs/user-guide.md says of a capture cut in time (`editcap`) when its huge
    connection does not fit in memory. seed003 (246 packets, its handshake at frames 5-7, 39
    stalls) cut after frame 120: the first piece finds exactly the whole capture's stalls whose
    three frames lie in it. The second piece starts mid-connection: its round trips are taken
    from ACK lags (10.3 ms to the client, whose ACKs come late, not 13 us), and its report warns
    of that; the ACK delays are measured against the round trip to the receiver (28 us), so it
    still finds the 23 stalls of frames 121-240, at low confidence (causality checked loosely,
    MSS estimated). Given the handshake's frames too (`editcap -r FILE OUT 1-8 121-240`), it
    finds the same stalls, the same frames less the 112 packets left out."""
    from tests.conftest import require_tool

    editcap = require_tool("editcap")
    whole_path = str(SAMPLE_TRACES / "seed003-nagle.pcap")
    first, second, kept = (str(tmp_path / name) for name in ("first.pcap", "second.pcap",
                                                             "kept.pcap"))
    for arguments in (["-r", whole_path, first, "1-120"], ["-r", whole_path, second, "121-240"],
                      ["-r", whole_path, kept, "1-8", "121-240"]):
        subprocess.run([editcap, "-F", "pcap", *arguments], check=True, capture_output=True)

    def stall_frames(path: str, offset: int = 0) -> list[tuple[int, int, int]]:
        found = [f for f in analyze_capture(path).findings if f.kind == "nagle-delack-stall"]
        return [(a + offset, b + offset, c + offset) for f in found for a, b, c in zip(
            *(column.tolist() for column in f.events.columns()[:3]))]

    whole = stall_frames(whole_path)
    assert len(whole) == 39
    assert stall_frames(first) == [frames for frames in whole if max(frames) <= 120]
    assert len(stall_frames(first)) == 15
    in_second = [frames for frames in whole if min(frames) >= 121 and max(frames) <= 240]
    assert stall_frames(second, offset=120) == in_second
    assert {f.confidence for f in analyze_capture(second).findings
            if f.kind == "nagle-delack-stall"} == {"low"}
    warnings = build_document([analyze_capture(second)])["captures"][0]["warnings"]
    assert any("round trip taken from ACK lags" in warning for warning in warnings)
    assert stall_frames(kept, offset=112) == in_second
    assert len(stall_frames(kept)) == 23
