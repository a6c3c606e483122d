"""What the HTML charts draw is gathered by the analysis: the same for a capture analysed in
parts as held whole, and checked against tshark's own reading of the packets.

The tshark checks are independent of the code: packet sizes are tshark's `tcp.len` counts, and
exchange times are rebuilt from tshark's per-packet times (a run of the client's data packets,
then the server's answer: from the first packet of the run to the last of the answer).
"""

from __future__ import annotations

import os
import subprocess
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nagledetect.analysis import analyze_capture
from nagledetect.chart_data import LOG_EDGES_MS, LogHistogram
from nagledetect.report.document import build_document
from nagledetect.report.html import render_html
from tests.conftest import SAMPLE_TRACES, corpus_file, require_tool

SAMPLES = ["mixed.pcap", "classic-phase-lock.pcap", "seed003-nagle.pcap",
           "seed000-nntp-lines.pcap", "trap-paced-writes.pcap"]
CORPUS = ["zeek/ssh__ssh.pcap", "zeek/ftp__cwd-navigation.pcap"]


def _whole_and_split(path: Path, parts: int = 7, workers: int = 2):
    whole = analyze_capture(str(path))
    split = analyze_capture(str(path), part_bytes=os.path.getsize(path) // parts + 1,
                            workers=workers)
    assert whole.tables_kept and not split.tables_kept
    return whole, split


def _same_hosts(left, right) -> None:
    for mine, theirs in ((left.delays, right.delays), (left.phase, right.phase)):
        assert [h.address for h in mine] == [h.address for h in theirs]
        for host, other in zip(mine, theirs):
            assert np.array_equal(host.delays_ms, other.delays_ms)
            assert np.array_equal(host.ack_times_s, other.ack_times_s)
            assert host.phase_lock == other.phase_lock
    assert left.hosts_with_delays == right.hosts_with_delays
    assert left.hosts_with_phase_tests == right.hosts_with_phase_tests
    assert left.hosts_locked == right.hosts_locked


@pytest.mark.parametrize("path", [SAMPLE_TRACES / name for name in SAMPLES] + CORPUS,
                         ids=lambda p: Path(p).name)
def test_charts_of_a_capture_in_parts_equal_the_whole_ones(path) -> None:
    path = corpus_file(path) if isinstance(path, str) else path
    whole, split = _whole_and_split(path)
    mine, theirs = whole.charts, split.charts
    assert mine.exchange_ms.total, "the comparison needs exchanges to mean something"
    assert mine.exchange_ms == theirs.exchange_ms
    assert mine.stall_ms == theirs.stall_ms
    assert mine.payload_bytes == theirs.payload_bytes
    assert mine.worst == theirs.worst
    _same_hosts(mine.hosts, theirs.hosts)


@pytest.mark.parametrize("path", [SAMPLE_TRACES / "mixed.pcap", "zeek/ssh__ssh.pcap"],
                         ids=lambda p: Path(p).name)
def test_html_report_of_a_capture_in_parts_is_the_whole_ones(path) -> None:
    """Nothing the report shows needs the packet tables a capture in parts does not keep."""
    path = corpus_file(path) if isinstance(path, str) else path
    whole, split = _whole_and_split(path, parts=5, workers=1)
    pages = [render_html(build_document([analysis]), [analysis]) for analysis in (whole, split)]
    assert "red bands: data held until a delayed ACK" in pages[0]
    assert "ACK delays of" in pages[0]
    assert pages[1] == pages[0]


def _tshark_data_packets(path: Path) -> list[tuple[float, int, int, int]]:
    """(time, stream, source port, payload bytes) of every packet with a TCP payload."""
    output = subprocess.run(
        [require_tool("tshark"), "-r", str(path), "-Y", "tcp.len > 0", "-T", "fields",
         "-e", "frame.time_epoch", "-e", "tcp.stream", "-e", "tcp.srcport", "-e", "tcp.len"],
        capture_output=True, text=True, check=True).stdout
    return [(float(time), int(stream), int(port), int(size))
            for time, stream, port, size in (line.split("\t") for line in output.splitlines())]


@pytest.mark.parametrize("name", ["seed003-nagle.pcap", "mixed.pcap", "classic-phase-lock.pcap"])
def test_packet_sizes_are_tshark_tcp_len_counts(name: str) -> None:
    path = SAMPLE_TRACES / name
    expected = Counter(size for *_, size in _tshark_data_packets(path))
    sizes = analyze_capture(str(path)).charts.payload_bytes
    assert dict(zip(sizes.keys.tolist(), sizes.counts.tolist())) == dict(expected)


def _tshark_client_ports(path: Path) -> dict[int, int]:
    """Each stream's client port: the source of its SYN without ACK."""
    output = subprocess.run(
        [require_tool("tshark"), "-r", str(path), "-Y", "tcp.flags.syn == 1 && tcp.flags.ack == 0",
         "-T", "fields", "-e", "tcp.stream", "-e", "tcp.srcport"],
        capture_output=True, text=True, check=True).stdout
    return {int(stream): int(port) for stream, port in (line.split("\t") for line in
                                                          output.splitlines())}


@pytest.mark.parametrize("name", ["seed003-nagle.pcap", "mixed.pcap", "seed000-nntp-lines.pcap"])
def test_exchange_times_are_the_turns_tshark_shows(name: str) -> None:
    """Lab captures of clean exchanges (no loss, handshakes kept): each run of client data
    packets answered by a run of server data packets in the same stream is one exchange, timed
    from the first packet of the client's run to the last of the server's. On seed003 every
    exchange holds a delayed-ACK stall: its manifest expects about 40 ms each."""
    path = SAMPLE_TRACES / name
    clients = _tshark_client_ports(path)
    runs: dict[int, list[list]] = {}
    for time, stream, port, _ in _tshark_data_packets(path):
        sender = "client" if port == clients[stream] else "server"
        held = runs.setdefault(stream, [])
        if held and held[-1][0] == sender:
            held[-1][2] = time
        else:
            held.append([sender, time, time])
    exchanges_ms = [round((answer[2] - request[1]) * 1e6) / 1000
                    for held in runs.values() for request, answer in zip(held, held[1:])
                    if request[0] == "client"]
    charts = analyze_capture(str(path)).charts
    assert charts.exchange_ms.total == len(exchanges_ms) > 0
    assert charts.exchange_ms == LogHistogram.of(np.array(exchanges_ms))
    if name == "seed003-nagle.pcap":
        assert np.median(exchanges_ms) > 40


def test_stalls_of_seed003_are_its_39_stalls() -> None:
    """seed003-nagle.pcap: 39 stalls of about 41 ms each (checked by hand in tshark, frames
    40 -> 41 -> 42: 2 bytes at 0.274946 s, the delayed ACK at 0.315996 s, the next 28 bytes
    at 0.316018 s, a stall of 41.1 ms); the worst connection is its only one."""
    charts = analyze_capture(str(SAMPLE_TRACES / "seed003-nagle.pcap")).charts
    edges_ms, fraction = charts.stall_ms.cdf()
    assert charts.stall_ms.total == 39
    assert 40 < edges_ms[0] and edges_ms[-1] < 45 and fraction[-1] == 1
    (worst,) = charts.worst
    assert worst.connection == 0 and worst.released.total == 39
    assert 42 in worst.released.frame.tolist()
    assert np.all((worst.released_stall_ms > 40) & (worst.released_stall_ms < 45))


@settings(max_examples=200, derandomize=True, deadline=None)
@given(st.lists(st.floats(0, 2e7, allow_nan=False), max_size=40),
       st.lists(st.floats(0, 2e7, allow_nan=False), max_size=40))
def test_sparse_histograms_add_and_draw_as_dense_bin_counts_would(first, second) -> None:
    """The counts keep only their non-empty bins: adding two, and the CDF drawn from the sum,
    equal a dense count of every value over all 1,002 bins (np.bincount), done here directly."""
    values = np.array(first + second, dtype=float)
    summed = LogHistogram.of(np.array(first, dtype=float)) + LogHistogram.of(
        np.array(second, dtype=float))
    dense = np.bincount(np.searchsorted(LOG_EDGES_MS, values, side="left"),
                        minlength=len(LOG_EDGES_MS) + 1)
    assert LogHistogram.total_of([LogHistogram.of(np.array(first, dtype=float)), LogHistogram(),
                                  LogHistogram.of(np.array(second, dtype=float))]) == summed
    assert summed.keys.tolist() == np.flatnonzero(dense).tolist()
    assert summed.counts.tolist() == dense[dense > 0].tolist()
    edges, fractions = summed.cdf()
    filled = np.flatnonzero(dense)
    assert edges.tolist() == np.r_[LOG_EDGES_MS, LOG_EDGES_MS[-1]][filled].tolist()
    assert fractions.tolist() == (np.cumsum(dense)[filled] / max(len(values), 1)).tolist()
