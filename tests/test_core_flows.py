"""The compiled core's one-pass flow tables equal `build_flows`'s (the numpy path, the reference
it was proven against) on real captures: every packet's connection, direction, relative
numbers, role, scaled window and wire segments, every connection's row, every SACK block; its
data segments in context equal `data_segments`'s, its timeline gaps `GapsBySlice`'s, and its
messages (each segment's number and the message table) `number_messages`' and `messages`',
and the rows it gives the detectors (stall candidates, lone answered segments, write bursts,
payload counts) those the Python rules take of the numpy path's segments.

Differences that are not errors, each checked by hand:
  - the SACK table is compared in frame order (every reader sorts it by frame);
  - tables without rows (no TCP, or a filter that keeps none) have all the core's columns,
    typed as its tables with rows, where `build_flows([])` makes fewer, some of them int64.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from nagledetect import _core
from nagledetect.api import Capture, load_capture_numpy
from nagledetect.detectors.delack_timer import LONE_SEGMENT_COLUMNS, answered_lone
from nagledetect.detectors.nagle_stall import untimed_stalls
from nagledetect.detectors.tinygram_flood import BURST_COLUMNS
from nagledetect.events.compiled import compiled_messages, compiled_segments
from nagledetect.events.gaps import GAP_PACKET_COLUMNS, GapsBySlice
from nagledetect.events.messages import BURST_GAP_US, messages, number_messages
from nagledetect.events.payloads import SegmentPayloads
from nagledetect.events.segments import data_segments
from nagledetect.flows.build import FlowTables
from nagledetect.flows.compiled import compiled_flows
from nagledetect.flows.connections import direction_key
from nagledetect.flows.tables import FoundEvents
from nagledetect.read.accounting import Accounting
from nagledetect.table import Table, as_frame
from tests.conftest import PROJECT, SAMPLE_TRACES, corpus_file, require_tool
from tests.handbuilt import CLIENT, SERVER, segment, write

SAMPLES = sorted(path.name for path in SAMPLE_TRACES.iterdir()
                 if path.suffix in (".pcap", ".pcapng", ".gz"))
CORPUS_CASES = (
    "zeek/ipv6-http-atomic-frag.pcap",  # the clock steps back 244 us between frames 7 and 8
    "zeek/tcp__option-sack.pcap", "zeek/tcp__retransmit-fast009.pcap",  # SACK blocks
    "zeek/ssh__ssh.pcap", "zeek/http__206_example_b.pcap", "zeek/ftp__cwd-navigation.pcap",
    "zeek/tls__tls-expired-cert.pcap", "zeek/pppoe-over-qinq.pcap", "zeek/smb__smb2.pcap",
    "tcpdump/tcp-handshake-nano.pcap", "zeek/irc-dcc-send.pcapng", "zeek/empty.pcap",
    # Values the gaps read that are known only later: ACKs sent before the peer's first
    # packet gave its ISN (bgp-role, no handshake: frame 1 ACKs data not yet seen), a FIN
    # before the SYN/ACK that agreed window scaling (fin_retransmission, frames 2 and 3).
    "tcpdump/bgp-role.pcapng", "zeek/tcp__fin_retransmission.pcap", "zeek/modbus__fuzz-1011.pcap",
)


def _same_frame(reference: object, compiled: object, what: str) -> None:
    reference, compiled = as_frame(reference), as_frame(compiled)
    if not len(reference):
        assert not len(compiled) and set(reference.columns) <= set(compiled.columns), what
        return
    assert list(compiled.columns) == list(reference.columns), what
    assert len(compiled) == len(reference), what
    for name in reference.columns:
        expected, got = reference[name], compiled[name]
        assert str(got.dtype) == str(expected.dtype), f"{what}.{name}"
        pd.testing.assert_series_equal(got, expected, check_names=False, obj=f"{what}.{name}")


def _in_frame_order(sack_blocks: object) -> pd.DataFrame:
    return as_frame(sack_blocks).sort_values("frame", kind="stable", ignore_index=True)


def _assert_same(reference: Capture, flows: FlowTables, accounting: Accounting) -> None:
    _same_frame(reference.packets, flows.packets, "packets")
    _same_frame(reference.connections, flows.connections, "connections")
    _same_frame(_in_frame_order(reference.sack_blocks), _in_frame_order(flows.sack_blocks),
                "sack_blocks")
    if not reference.packets.empty:
        found = flows.found_events
        segments = data_segments(reference.packets, reference.connections)
        _same_frame(segments,
                    compiled_segments(found.segment_context, flows.packets, flows.connections),
                    "segments")
        segments["message"] = number_messages(segments)
        np.testing.assert_array_equal(found.segment_context["message"],
                                      segments["message"], err_msg="message")
        _same_frame(messages(segments), compiled_messages(found.message_rows), "messages")
        _same_detector_rows(segments, found)
    if not reference.packets.empty:
        _same_gaps(reference, flows.found_events.gap_rows)
    expected = reference.accounting
    assert (accounting.packets_read, accounting.tcp_packets, accounting.skipped,
            accounting.linktype) == (expected.packets_read, expected.tcp_packets,
                                     expected.skipped, expected.linktype)


def _same_detector_rows(segments: Table, found: FoundEvents) -> None:
    """The rows the core gives the detectors equal those the Python rules take of the numpy
    path's segments: the stall candidates, the lone answered segments, the write bursts and
    the payload counts, column by column with their dtypes."""
    _same_frame(Table(untimed_stalls(segments)), Table(found.untimed_stalls), "untimed_stalls")
    lone = np.flatnonzero(answered_lone(segments))
    _same_frame(Table({name: segments[name][lone] for name in LONE_SEGMENT_COLUMNS}),
                Table(found.lone_segments), "lone_segments")
    bursts = messages(segments.assign(message=number_messages(segments, BURST_GAP_US)))
    _same_frame(bursts.select(BURST_COLUMNS),
                Table({name: found.burst_rows[name] for name in BURST_COLUMNS}), "bursts")
    keys = np.unique(direction_key(segments))
    expected = SegmentPayloads(segments).of(keys)
    _same_frame(Table({"key": expected.key, "size": expected.size, "count": expected.count}),
                Table(found.payload_counts), "payload_counts")


def _same_gaps(reference: Capture, gap_rows: dict[str, np.ndarray]) -> None:
    """The core's gap rows equal `GapsBySlice`'s over the whole packet table, column by column
    (values; the numpy path's dtypes vary by column, the core's are all int64)."""
    gaps = GapsBySlice(len(reference.connections))
    gaps.add(reference.packets[list(GAP_PACKET_COLUMNS)], reference.sack_blocks)
    expected = gaps.gaps()
    assert sorted(gap_rows) == sorted(expected)
    for name, values in expected.items():
        np.testing.assert_array_equal(gap_rows[name], values.astype(np.int64), err_msg=name)


def _mixes_interfaces(accounting: Accounting) -> bool:
    return any("the file mixes interfaces" in warning for warning in accounting.warnings)


@pytest.mark.parametrize("name", SAMPLES)
def test_the_core_rebuilds_each_sample_traces_flows_as_build_flows(name: str) -> None:
    path = str(SAMPLE_TRACES / name)
    reference = load_capture_numpy(path)
    flows, accounting = compiled_flows(path)
    _assert_same(reference, flows, accounting)
    if not _mixes_interfaces(reference.accounting):
        assert accounting.warnings == reference.accounting.warnings


@pytest.mark.parametrize("name", ["seed003-nagle.pcap", "mixed.pcap", "merged-interfaces.pcapng"])
@pytest.mark.parametrize("bpf_filter", ["tcp[tcpflags] & tcp-syn == 0", "tcp port 80",
                                        "tcp and less 80"])
def test_under_a_filter_the_core_keeps_wiresharks_stream_ids(name: str, bpf_filter: str) -> None:
    """Connection ids under a filter are the unfiltered file's tcp.stream (a `stream` column),
    as the numpy path numbers them; the SYN-less filter leaves every connection without its
    handshake, so the client is guessed from the ports in both."""
    path = str(SAMPLE_TRACES / name)
    _assert_same(load_capture_numpy(path, bpf_filter), *compiled_flows(path, bpf_filter))


@pytest.mark.parametrize("name", CORPUS_CASES)
def test_the_core_rebuilds_corpus_flows_as_build_flows(name: str) -> None:
    path = str(corpus_file(name))
    reference = load_capture_numpy(path)
    flows, accounting = compiled_flows(path)
    _assert_same(reference, flows, accounting)


def test_a_clock_that_steps_back_still_gives_the_smallest_ack_lag() -> None:
    """zeek/ipv6-http-atomic-frag.pcap, checked in tshark: the server's ACK of the client's 15
    bytes (frame 6, ack 16, at 0.041740 s) comes before the data in the file (frame 8, at
    0.041713 s, after frame 7 at 0.041957 s): a lag of 27 us, the server side's round trip."""
    flows, _ = compiled_flows(str(corpus_file("zeek/ipv6-http-atomic-frag.pcap")))
    first = as_frame(flows.connections).iloc[0]
    assert first["rtt_server_side_ms"] == pytest.approx(0.027)
    assert np.isclose(first["rtt_ms"], 15.437)


def test_connections_finished_while_the_pass_goes_on_give_the_same_tables(
        tmp_path: Path) -> None:
    """A long capture's closed connections are finished and let go as the pass goes on (after
    two minutes of silence and 10,000 packets of others); their tables equal the numpy path's,
    which holds the whole capture. The capture is the sample traces replicated one copy after
    another with new addresses (`make_large_capture.py`): 61,394 packets over 348 s (capinfos),
    so the copies' connections, closed a FIN each way, fall silent while later copies run."""
    path = tmp_path / "copies.pcap"
    subprocess.run([sys.executable, str(PROJECT / "benchmarks" / "make_large_capture.py"),
                    str(SAMPLE_TRACES), str(path), "--packets", "60000"],
                   check=True, capture_output=True)
    made = _core.flow_tables([str(path)], None, False)
    assert made["captures"][0]["connections_ended_silent"] > len(made["connections"]["stream"]) // 2
    reference = load_capture_numpy(str(path))
    flows, accounting = compiled_flows(str(path))
    _assert_same(reference, flows, accounting)
    for name in ("gaps", "messages", "bursts", "untimed_stalls", "lone_segments",
                 "payload_counts"):
        for column, values in made[name].items():
            np.testing.assert_array_equal(values, getattr(flows.found_events, _FOUND[name])[column],
                                          err_msg=f"{name}.{column}")


_FOUND = {"gaps": "gap_rows", "messages": "message_rows", "bursts": "burst_rows",
          "untimed_stalls": "untimed_stalls", "lone_segments": "lone_segments",
          "payload_counts": "payload_counts"}


def _event_tables(made: dict) -> dict[str, np.ndarray]:
    """The event tables and the connection table of a `flow_tables` result, by column."""
    return {f"{table}.{column}": np.asarray(values)
            for table, columns in made.items() if isinstance(columns, dict)
            for column, values in columns.items()}


def _assert_same_tables(got: dict, expected: dict) -> None:
    got_columns, expected_columns = _event_tables(got), _event_tables(expected)
    assert sorted(got_columns) == sorted(expected_columns)
    for name, values in expected_columns.items():
        np.testing.assert_array_equal(got_columns[name], values, err_msg=name)


@pytest.mark.parametrize("name", SAMPLES)
def test_connections_finished_as_they_go_give_the_same_tables(name: str) -> None:
    """Where a live connection's events are finished as it goes and its packets let go (as
    often as it can, every few packets as it keeps up to four; or every 7), its events equal
    those of the connection finished whole at its end, which the tests above prove equal to
    the numpy path's. Only connections whose SYN and SYN/ACK have come from each side let go
    (their finishing values are known then)."""
    path = [str(SAMPLE_TRACES / name)]
    whole = _core.flow_tables(path, None, False, let_go_packets=1 << 40)
    for every in (1, 7):
        _assert_same_tables(_core.flow_tables(path, None, False, let_go_packets=every), whole)


@pytest.mark.parametrize("name", CORPUS_CASES[:6])
def test_corpus_connections_finished_as_they_go_give_the_same_tables(name: str) -> None:
    """The same on real captures of the corpora."""
    path = [str(corpus_file(name))]
    whole = _core.flow_tables(path, None, False, let_go_packets=1 << 40)
    _assert_same_tables(_core.flow_tables(path, None, False, let_go_packets=1), whole)


@pytest.fixture(scope="module")
def long_bulk(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """trap-bulk.pcap's transfer repeated in one connection of 200,000 packets, its handshake
    once at the start (tcpdump: 2 packets with SYN, none with FIN)."""
    path = tmp_path_factory.mktemp("long") / "bulk200k.pcap"
    subprocess.run([sys.executable, str(PROJECT / "benchmarks" / "make_large_capture.py"),
                    str(SAMPLE_TRACES / "trap-bulk.pcap"), str(path), "--packets", "200000",
                    "--connections", "1"], check=True, capture_output=True)
    return path


def _batches(path: Path, live_packets: int) -> tuple[_core.FlowBatches, list[dict]]:
    batches = _core.FlowBatches(str(path), None, 1 << 20, live_packets)
    return batches, list(batches)


def test_a_long_connection_lets_its_packets_go_as_it_goes(long_bulk: Path) -> None:
    """The one connection of 200,000 packets passes a pass that allows 20,000 live packets:
    it lets its packets go as it goes. Its tables are those of the pass that holds it whole."""
    batches, handed = _batches(long_bulk, 20_000)
    assert not batches.over_budget and len(handed) == 1
    assert batches.capture["packets_read"] == 200_000
    _assert_same_tables(handed[0], _core.flow_tables([str(long_bulk)], None, False,
                                                     let_go_packets=1 << 40))


def test_a_long_connection_seen_without_its_handshake_lets_go_after_a_first_pass(
        long_bulk: Path, tmp_path: Path) -> None:
    """The same capture begun after the handshake (editcap drops its first 3 frames: SYN,
    SYN/ACK, ACK): the connection's client, the bases its numbers count from and its MSS are
    known only at its end, so it holds its packets, outgrows the 20,000 allowed, and says so
    (`unsettled`). Read twice, first through the flow tracker alone to learn them
    (`settle_first`), it lets its packets go, and its tables are those of the whole pass."""
    cut = tmp_path / "mid-connection.pcap"
    subprocess.run([require_tool("editcap"), str(long_bulk), str(cut), "1-3"], check=True)
    batches, handed = _batches(cut, 20_000)
    assert batches.over_budget and batches.unsettled and not handed
    assert 20_000 <= batches.packets_read < 199_997
    settled = _core.FlowBatches(str(cut), None, 1 << 20, 20_000, settle_first=True)
    handed = list(settled)
    assert not settled.over_budget and len(handed) == 1
    whole = _core.flow_tables([str(cut)], None, False, let_go_packets=1 << 40)
    assert whole["connections"]["mss_estimated"].tolist() == [True]
    _assert_same_tables(handed[0], whole)


@pytest.mark.parametrize("name", SAMPLES)
def test_connections_let_go_with_what_a_first_pass_learnt_give_the_same_tables(
        name: str) -> None:
    """Under a filter that drops every SYN, no connection is seen with its handshake: each
    lets its packets go as often as it can (every few packets: it keeps up to four), finished
    with what a first pass learnt of it, and the tables equal the whole pass's."""
    path, no_syn = str(SAMPLE_TRACES / name), "tcp[tcpflags] & tcp-syn == 0"
    whole = _core.flow_tables([path], no_syn, False, let_go_packets=1 << 40)
    handed = list(_core.FlowBatches(path, no_syn, 1 << 40, 1 << 40, let_go_packets=1,
                                    settle_first=True))
    if not handed:
        assert not len(whole["connections"]["stream"])
        return
    assert len(handed) == 1
    _assert_same_tables(handed[0], whole)


def test_a_handshake_from_one_side_does_not_let_go_early(tmp_path: Path) -> None:
    """A connection whose first SYN and first SYN/ACK both come from the client (hand-built:
    a real stack does not send that) has no base yet for the server's numbers: the server's
    later SYN/ACK (frame 7) moves it, so the connection cannot let go before its end. Counted
    from the server's first packet less one, frame 5's 100 bytes, 50 ms after the client's
    pure ACK of everything, start at 1,461 where that ACK ends: a stall candidate; counted from
    the ISN frame 7 gives, they do not (as the connection finished whole says)."""
    packets = [
        segment(CLIENT, SERVER, 40000, 80, "S", 1000, time_s=1.000),
        segment(CLIENT, SERVER, 40000, 80, "SA", 1000, 5000, time_s=1.001),
        segment(SERVER, CLIENT, 80, 40000, "PA", 5000, 1001, payload=1460, time_s=1.002),
        segment(CLIENT, SERVER, 40000, 80, "A", 1001, 6460, time_s=1.003),
        segment(SERVER, CLIENT, 80, 40000, "PA", 6460, 1001, payload=100, time_s=1.053),
        segment(CLIENT, SERVER, 40000, 80, "A", 1001, 6560, time_s=1.054),
        segment(SERVER, CLIENT, 80, 40000, "SA", 9000, 1001, time_s=1.055),
    ]
    path = [str(write(tmp_path / "one-sided-handshake.pcap", packets))]
    whole = _core.flow_tables(path, None, False, let_go_packets=1 << 40)
    assert whole["connections"]["handshake"].tolist() == [True]
    assert whole["untimed_stalls"]["frame"].tolist() == []
    _assert_same_tables(_core.flow_tables(path, None, False, let_go_packets=1), whole)


def test_charts_keep_every_packet_however_full_the_pass() -> None:
    """The charts read every packet of a connection when it ends, so a pass that gives them
    lets none go, even when its live connections outgrow the packets allowed: trap-bulk.pcap's
    one connection of 4,667 packets (tshark -Y tcp) through a pass allowed 300 stops, handing
    over nothing; allowed them all, its chart rows are every one of its packets."""
    path = str(SAMPLE_TRACES / "trap-bulk.pcap")
    squeezed = _core.FlowBatches(path, None, 1 << 20, 300, chart_packets=True)
    assert not list(squeezed) and squeezed.over_budget and not squeezed.unsettled
    whole = _core.FlowBatches(path, None, 1 << 20, 1 << 40, chart_packets=True)
    assert [len(batch["chart_packets"]["frame"]) for batch in whole] == [4_667]
