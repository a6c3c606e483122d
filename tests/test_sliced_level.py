"""A part read a slice at a time (`sliced_level`) gives what it gives read whole.

The expected values are not the sliced code's own: each capture is also analysed whole
(`pipeline.connection_level`, whose findings the other tests check against tshark and by
hand), and the slices must give the same connection table, delayed-ACK samples, parity table
and findings, evidence rows included. Slices of one packet cut every connection at every
packet. Through `parts`, a capture's parts forced through the sliced path must give the whole
run's JSON document byte for byte.
"""

from __future__ import annotations

import io
import os
import threading
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from nagledetect import chart_data, parts
from nagledetect.analysis import analyze_capture
from nagledetect.chart_data import MAX_POINTS, ChartData, connection_charts
from nagledetect.flows.build import build_flows
from nagledetect.flows.partition import SACK_DTYPE, PartitionedPackets, load_part, part_slices
from nagledetect.pipeline import ConnectionLevel, connection_level
from nagledetect.read.capture import decoded_batches
from nagledetect.report.document import build_document, write_json
from nagledetect.sliced_level import connection_level_by_slices
from tests.conftest import SAMPLE_TRACES, assert_same_table, corpus_file

STALLED = ("seed003-nagle.pcap", "classic-phase-lock.pcap", "seed004-header-body.pcap")
"""Sample traces whose whole runs find Nagle/delayed-ACK stalls (README, sample_traces)."""
OTHERS = ("classic-stream.pcap", "seed000-nntp-lines-nodelay.pcap",
          "classic-2n-blocks-100000.pcap", "trap-think-40ms.pcap", "trap-rpc.pcap", "mixed.pcap",
          "cause-spurious.pcap", "cause-zero-window-reopens.pcap")
"""Stream coalescing, a tinygram flood, segment parity, think time, stop-and-wait, and many
connections at once (their whole runs' findings)."""
CORPUS = [
    "zeek/ssh__ssh.pcap",  # 23 connections, idle gaps, one without its handshake
    "zeek/ftp__cwd-navigation.pcap",  # stalls held by the server
    "zeek/http__connect-with-smtp.pcap",  # loss recovery
    "zeek/http__vnd.ms-cab-compressed-multi-conn.pcap",  # a retransmission D-SACKed
    "zeek/modbus__modbusBig.pcap",  # no handshakes: clients guessed, MSS estimated
    "tcpdump/kday4.pcap",  # time going backwards, no handshakes
]


def _slices(path: Path, slice_packets: int):
    def slices() -> Iterator[dict[str, np.ndarray]]:
        for columns, _ in decoded_batches(str(path))[1]:
            for start in range(0, len(columns["frame"]), slice_packets):
                yield {name: values[start:start + slice_packets]
                       for name, values in columns.items()}
    return slices


def _sack_file(path: Path, tmp_path: Path) -> str:
    """The capture's SACK blocks as a part's file holds them (`flows.partition`)."""
    out = tmp_path / "sack"
    with open(out, "wb") as handle:
        for columns, sack in decoded_batches(str(path))[1]:
            records = np.empty(len(sack["row"]), dtype=SACK_DTYPE)
            records["frame"] = columns["frame"][sack["row"]]
            records["left_raw"], records["right_raw"] = sack["left_raw"], sack["right_raw"]
            records.tofile(handle)
    return str(out)


def _assert_as_whole(path: Path, slice_packets: int, tmp_path: Path) -> ConnectionLevel:
    whole = connection_level(build_flows(decoded_batches(str(path))[1]), fingerprint=False,
                             keep_packets=False)
    numbers = tmp_path / "numbers"
    sliced = connection_level_by_slices(_slices(path, slice_packets), str(numbers),
                                        sack_path=_sack_file(path, tmp_path))
    assert not numbers.exists()
    assert_same_table(sliced.connections, whole.connections)
    assert_same_table(sliced.samples, whole.samples)
    assert_same_table(sliced.parity, whole.parity)
    assert [finding.kind for finding in sliced.findings] == [
        finding.kind for finding in whole.findings]
    for found, expected in zip(sliced.findings, whole.findings):
        assert found == expected
    return sliced


@pytest.mark.parametrize(("name", "slice_packets"), [
    *((name, slice_packets) for name in STALLED for slice_packets in (1, 7, 500)),
    *((name, 13) for name in OTHERS)])
def test_sample_trace_sliced_as_whole(name: str, slice_packets: int, tmp_path: Path) -> None:
    level = _assert_as_whole(SAMPLE_TRACES / name, slice_packets, tmp_path)
    assert level.findings, "the comparison needs findings to mean something"


def test_every_kind_is_compared(tmp_path: Path) -> None:
    """The traces above find every connection detector's kind, so each one's event rows made
    by slices are compared with the whole run's."""
    kinds = set()
    for name in (*STALLED, *OTHERS):
        kinds |= {finding.kind for finding in _assert_as_whole(
            SAMPLE_TRACES / name, 500, tmp_path).findings}
    assert kinds >= {"nagle-delack-stall", "stream-coalescing", "segment-parity",
                     "tinygram-flood", "stop-and-wait", "think-time"}


@pytest.mark.parametrize("relative", CORPUS)
def test_corpus_capture_sliced_as_whole(relative: str, tmp_path: Path) -> None:
    """Slices of 37 packets (a prime, so cuts fall everywhere in an exchange): modbusBig's
    13,000-odd packets still cross some 350 cuts."""
    _assert_as_whole(corpus_file(relative), 37, tmp_path)


def test_seed003_first_stall_by_slices(tmp_path: Path) -> None:
    """Checked by hand in tshark: the first stall of seed003-nagle is frame 40 (the data before
    the hold), 41 (the client's delayed ACK, 41.0 ms later) and 42 (the released segment)."""
    level = _assert_as_whole(SAMPLE_TRACES / "seed003-nagle.pcap", 3, tmp_path)
    stall = next(finding for finding in level.findings if finding.kind == "nagle-delack-stall")
    first = stall.events.records(slice(0, 1))[0]
    assert (first["last_data_frame"], first["delayed_ack_frame"], first["released_frame"]) == (
        40, 41, 42)
    assert stall.count == 39


def test_part_slices_join_to_the_part(tmp_path: Path) -> None:
    """A part read as slices holds the part's packets, in file order, in slices of at least
    the packets asked for (but the last)."""
    partitioned = PartitionedPackets(2, str(tmp_path))
    try:
        columns, sack = next(iter(decoded_batches(str(SAMPLE_TRACES / "mixed.pcap"))[1]))
        for start in range(0, len(columns["frame"]), 100):
            partitioned.add([({name: values[start:start + 100] for name, values in
                               columns.items()}, {name: values[:0] for name, values in
                                                  sack.items()})])
        for files in partitioned.part_files():
            whole, _ = load_part(files)
            slices = list(part_slices(files, 150))
            assert all(len(piece["frame"]) >= 150 for piece in slices[:-1])
            for name, values in whole.items():
                np.testing.assert_array_equal(np.concatenate([piece[name] for piece in slices]),
                                              values)
    finally:
        partitioned.close()


def _document(path: Path, **options) -> bytes:
    out = io.BytesIO()
    write_json(build_document([analyze_capture(str(path), charts=False, **options)]), out)
    return out.getvalue()


@pytest.mark.parametrize("name", ["seed003-nagle.pcap", "mixed.pcap", "classic-stream.pcap",
                                  "classic-2n-blocks-100000.pcap"])
def test_parts_read_as_slices_give_the_whole_document(name: str, monkeypatch) -> None:
    path = SAMPLE_TRACES / name
    whole = _document(path)
    monkeypatch.setattr(parts, "SLICED_PART_PACKETS", 0)
    monkeypatch.setattr(parts, "SLICE_PACKETS", 50)
    assert _document(path, part_bytes=os.path.getsize(path) // 3 + 1) == whole


def _assert_same_charts(found: ChartData, expected: ChartData) -> None:
    for name in ("exchange_ms", "stall_ms", "payload_bytes"):
        assert getattr(found, name) == getattr(expected, name), name
    assert [sequence.connection for sequence in found.worst] == [
        sequence.connection for sequence in expected.worst]
    assert found.worst == expected.worst


@pytest.mark.parametrize(("name", "slice_packets", "points"), [
    ("seed003-nagle.pcap", 7, MAX_POINTS), ("seed003-nagle.pcap", 7, 9),
    ("classic-phase-lock.pcap", 500, 13), ("mixed.pcap", 13, 11),
    ("seed004-header-body.pcap", 1, 5)])
def test_charts_by_slices_as_whole(name: str, slice_packets: int, points: int, tmp_path: Path,
                                   monkeypatch) -> None:
    """The charts of a part read by slices (a third pass for the worst connections' graphs)
    are those drawn from its packet table held whole; with fewer points allowed than the
    traces have, the evenly spaced points chosen as the slices come are the same too."""
    monkeypatch.setattr(chart_data, "MAX_POINTS", points)
    path = SAMPLE_TRACES / name
    whole = connection_level(build_flows(decoded_batches(str(path))[1]), fingerprint=False)
    expected = connection_charts(whole.packets, whole.connections, whole.messages,
                                 whole.findings)
    sliced = connection_level_by_slices(_slices(path, slice_packets), str(tmp_path / "numbers"),
                                        charts=True)
    assert expected.worst, "the comparison needs a graph to mean something"
    if points < MAX_POINTS:
        assert any(trace.total > points for sequence in expected.worst
                   for trace in sequence.data.values())
    _assert_same_charts(sliced.charts, expected)
    assert sliced.messages.empty and not (tmp_path / "numbers").exists()


@pytest.mark.parametrize("name", ["seed003-nagle.pcap", "mixed.pcap"])
def test_parts_read_as_slices_give_the_whole_charts(name: str, monkeypatch) -> None:
    """What `report` draws of a capture whose parts are read as slices: the whole run's."""
    path = SAMPLE_TRACES / name
    whole = analyze_capture(str(path)).charts
    monkeypatch.setattr(parts, "SLICED_PART_PACKETS", 0)
    monkeypatch.setattr(parts, "SLICE_PACKETS", 50)
    sliced = analyze_capture(str(path), part_bytes=os.path.getsize(path) // 3 + 1).charts
    _assert_same_charts(sliced, whole)
    assert [h.address for h in sliced.hosts.delays] == [h.address for h in whole.hosts.delays]


def test_pass_two_works_on_three_slices_at_once(tmp_path: Path) -> None:
    """Numbering and data segments run ahead, each on a thread of its own: while the last
    stage holds the first slice, the numbering takes the second slice and the third (the
    last stage waits for that, 10 s at most; read one slice at a time it would wait in vain).
    The results stay the whole run's (the tests above)."""
    slices = _slices(SAMPLE_TRACES / "seed003-nagle.pcap", 20)
    passes = [0]
    third_taken = threading.Event()
    heard: list[tuple[bool, set[str]]] = []

    def watched() -> Iterator[dict[str, np.ndarray]]:
        passes[0] += 1
        for position, columns in enumerate(slices()):
            if passes[0] == 2 and position == 2:
                third_taken.set()
            yield columns

    def slice_read(packets: int) -> None:
        if passes[0] == 2 and not heard:
            heard.append((third_taken.wait(timeout=10),
                          {thread.name for thread in threading.enumerate()}))

    connection_level_by_slices(watched, str(tmp_path / "numbers"), slice_read=slice_read)
    assert passes[0] == 2
    taken, threads = heard[0]
    assert taken
    assert {"numbering_0", "segments_0"} <= threads
