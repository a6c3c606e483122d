"""Detectors against ground truth: every sample trace's manifest says, from the application's own
timing, how many exchanges of each connection stalled and which side held the data.

The expected numbers are the manifests' (application-measured), never this tool's output.
"""

from __future__ import annotations

import json

import pytest

from nagledetect import load_capture
from nagledetect.analysis import run_detectors
from nagledetect.detectors.kinds import (
    NAGLE_DELACK_STALL,
    NAGLE_FAMILY,
    NAGLE_RTT_HOLD,
    OTHER_GAP_CAUSES,
)
from nagledetect.report.document import build_document
from tests.conftest import SAMPLE_TRACES

MANIFESTS = sorted(SAMPLE_TRACES.glob("*.json"))
ONE_EXCHANGE_STREAMS = {"classic-stream-answered"}
"""Captures of one exchange made of a paced stream of writes: the application sees one stalled
exchange where the packets show a hold per ACK cycle, so stalls and exchanges are not counted
alike (checked in `test_a_byte_back_at_the_end_leaves_a_stream_one_way`)."""
COUNTED_MANIFESTS = [path for path in MANIFESTS if path.stem not in ONE_EXCHANGE_STREAMS]


def _document(manifest_path):
    manifest = json.loads(manifest_path.read_text())
    capture = SAMPLE_TRACES / manifest["capture"]["file"]
    return manifest, build_document([run_detectors(load_capture(str(capture)))])


def _connection_id(document, truth) -> int:
    for connection in document["connections"]:
        if {connection["client"], connection["server"]} == {truth["client"], truth["server"]}:
            return connection["id"]
    raise AssertionError(f"connection {truth['client']} -> {truth['server']} not in the capture")


def _unproven(finding) -> bool:
    """A finding that says it cannot tell a hold from a paced write (its time an upper bound),
    that no exchange waited on it (a one-way stream), or that its sender does not run Nagle:
    low, what a clean paced writer, stream or TCP_NODELAY sender may still show."""
    details = finding["details"]
    return finding["confidence"]["level"] == "low" and bool(
        details.get("time_lost_upper_bound") or details.get("one_way_stream")
        or details.get("small_in_flight"))


@pytest.mark.parametrize("manifest_path", COUNTED_MANIFESTS, ids=[p.stem for p in COUNTED_MANIFESTS])
def test_stall_count_and_holder_match_the_application(manifest_path) -> None:
    """The Nagle holds of either kind (delayed ACK, or one round trip for an ordinary ACK) the
    application measured; a clean connection may show only findings that say they are
    unproven."""
    manifest, document = _document(manifest_path)
    for truth in manifest["connections"]:
        connection = _connection_id(document, truth)
        stalls = [f for f in document["findings"]
                  if f["kind"] in (NAGLE_DELACK_STALL, NAGLE_RTT_HOLD)
                  and f["connection"] == connection]
        found = sum(f["count"] for f in stalls)
        expected = truth["expected"]["nagle_stalls"]
        if truth["expected"]["clean"]:
            assert all(_unproven(f) for f in stalls), (truth["flow"], [f["summary"] for f in stalls])
            continue
        assert abs(found - expected) <= 0.1 * expected, (truth["flow"], found, expected)
        holder = truth["client"] if truth["expected"]["holder"] == "client" else truth["server"]
        assert {f["sender"] for f in stalls} == {holder}


@pytest.mark.parametrize("manifest_path", MANIFESTS, ids=[p.stem for p in MANIFESTS])
def test_linux_receivers_fingerprint_at_about_40_ms_and_never_phase_lock(manifest_path) -> None:
    manifest, document = _document(manifest_path)
    if any(c["stack"] != "linux" for c in manifest["connections"]):
        pytest.skip("not a Linux-only capture")
    for host in document["hosts"]:
        if host["delack_samples"] >= 5:
            assert 36 <= host["delack_timer_ms"] <= 50, host
            assert host["stack_family"].startswith("Linux")
        assert not (host["phase_lock"] or {}).get("locked"), host
    assert not [f for f in document["findings"] if f["kind"] == "phase-lock"]


def _kinds(name: str) -> set[str]:
    _, document = _document(SAMPLE_TRACES / f"{name}.json")
    return {finding["kind"] for finding in document["findings"]}


def test_nodelay_with_many_small_writes_is_a_tinygram_flood() -> None:
    """seed003-nodelay: 15 two-byte writes per request leave as 15 packets (tcpdump shows 15
    length-2 segments per exchange); seed 000's line-by-line server with NODELAY likewise."""
    assert "tinygram-flood" in _kinds("seed003-nodelay")
    assert "tinygram-flood" in _kinds("seed000-nntp-lines-nodelay")
    assert "tinygram-flood" not in _kinds("seed003-cork")
    assert "tinygram-flood" not in _kinds("seed000-nntp-whole")


def test_writes_paced_apart_with_nodelay_are_no_tinygram_flood() -> None:
    """trap-paced-nodelay: 15 two-byte writes 5 ms apart with TCP_NODELAY per request. In
    tshark (`-Y "tcp.len>0" -T fields -e frame.time_epoch -e ip.src -e tcp.len`) the client's
    300 two-byte packets follow each other 5.13-9.08 ms apart within a request (280 gaps, none
    under 1 ms): each write left alone as it was made, so there was no burst to buffer. Taken
    whole between the server's answers, each request spanned 73-79 ms and counted as 15
    packets where 1 would do."""
    assert "tinygram-flood" not in _kinds("trap-paced-nodelay")


@pytest.mark.parametrize("trap", ["trap-think-40ms", "trap-think-40ms-path", "trap-think-200ms",
                                  "trap-paced-writes"])
def test_traps_are_named_for_what_they_are(trap: str) -> None:
    kinds = _kinds(trap)
    assert "nagle-delack-stall" not in kinds
    assert kinds & {"think-time", "idle"}


@pytest.mark.parametrize("trap", ["trap-think-40ms", "trap-think-40ms-path", "trap-think-200ms"])
def test_think_time_is_the_servers_own_not_the_paths(trap: str) -> None:
    """One think-time finding per trap, its time lost the server's sleeps the manifest records
    (the application's `think_time_s` per exchange) within 5 %, every exchange counted, the
    path's round trip left out. In tshark, `trap-think-40ms-path` (40 ms delay line, tap at the
    client): each request (e.g. frame 6, 30 bytes) is answered by the server's 30 bytes 81.7 ms
    later (frame 8), the handshake's SYN to SYN/ACK 40.8 ms; on the LAN captures the answers
    come 40.3 and 200.3 ms after the requests."""
    manifest, document = _document(SAMPLE_TRACES / f"{trap}.json")
    exchanges = manifest["connections"][0]["exchanges"]
    think_s = sum(exchange["think_time_s"] for exchange in exchanges)
    found = [f for f in document["findings"] if f["kind"] == "think-time"]
    assert len(found) == 1 and found[0]["subkind"] == "response"
    assert found[0]["count"] == len(exchanges)
    assert abs(found[0]["time_lost_s"] - think_s) <= 0.05 * think_s, (found[0], think_s)


@pytest.mark.parametrize("name", ["classic-phase-lock", "classic-phase-lock-80ms-path"])
def test_classic_receiver_fingerprints_at_200_ms_and_phase_locks(name: str) -> None:
    """classic-phase-lock: the scapy peer ACKs only on a global 200 ms tick (its code), so its
    delayed ACKs share one phase across the four connections; over an 80 ms path too, where
    each ACK's hold beyond the path (0-200 ms) is often no longer than the path (tshark,
    tcp.stream 0: the 2-byte write frame 14 at 0.269851 s, the peer's pure ACK frame 21 at
    0.431253, 161.4 ms later, the 28 bytes 173 us after it; the next pair, frames 38 and 45,
    262.1 ms apart; the peer's SYN/ACK itself waited for a tick, 186.5 ms after the SYN)."""
    _, document = _document(SAMPLE_TRACES / f"{name}.json")
    peer = next(h for h in document["hosts"] if h["address"] == "10.77.0.2")
    assert 180 <= peer["delack_timer_ms"] <= 220
    lock = peer["phase_lock"]
    assert lock["locked"] and lock["period_ms"] == 200 and lock["p_value"] < 1e-6
    assert len(lock["connections"]) >= 2
    assert any(f["kind"] == "phase-lock" for f in document["findings"])


def test_one_way_small_message_stream_is_stream_coalescing() -> None:
    """classic-stream: 100-byte writes every 30 ms leave as one packet per 200 ms tick holding
    6-7 writes (tcpdump: lengths 600-700), which is coalescing, not a request/response stall."""
    kinds = _kinds("classic-stream")
    assert "stream-coalescing" in kinds and "nagle-delack-stall" not in kinds


def test_requests_each_answered_by_an_accumulated_packet_are_no_stream() -> None:
    """seed000-nntp-lines-jumbo (MTU 9000): in tshark the client sends 41 data segments, 561
    bytes (40 requests of 14 bytes and a 1-byte end), the server 133,997 bytes: 0.42 % back,
    one-way by bytes. But each article's first line (frame 26, 72 B, at 0.026641 s) waits for
    the client's delayed ACK (frame 27, 41.2 ms later) and the rest of the article leaves 66 us
    after it as one 1,986-byte packet (frame 28), each answering a request: delayed-ACK stalls
    of the server's answers, not a one-way stream's coalescing."""
    _, document = _document(SAMPLE_TRACES / "seed000-nntp-lines-jumbo.json")
    kinds = {f["kind"] for f in document["findings"]}
    assert "stream-coalescing" not in kinds
    stalls = [f for f in document["findings"] if f["kind"] == NAGLE_DELACK_STALL]
    assert [(f["sender"], f["count"]) for f in stalls] == [("10.77.0.2:9000", 39)]
    first = stalls[0]["events"][0:1][0]
    assert (first["last_data_frame"], first["delayed_ack_frame"], first["released_frame"]) == (
        26, 27, 28)


def test_a_byte_back_at_the_end_leaves_a_stream_one_way() -> None:
    """classic-stream-answered: the classic stream's 150 writes of 100 bytes, 30 ms apart, as one
    request that the peer answers with one byte; the client then writes its one-byte end
    marker. Checked in tshark (`-T fields -e frame.number -e ip.src -e tcp.len`): 15,001 bytes
    to the server, 1 back (frame 60); after each pure ACK of the 200 ms tick one accumulated
    packet leaves 31-69 us later: frame 11 with 200 bytes, then 23 of 400-700 bytes (frames
    13-47 and 51-59 odd; 11 of 600, 11 of 700, one of 400), 3 writes or more each."""
    _, document = _document(SAMPLE_TRACES / "classic-stream-answered.json")
    connection = document["connections"][0]
    assert (connection["bytes"]["client_to_server"], connection["bytes"]["server_to_client"]) == (
        15_001, 1)
    coalescing = [f for f in document["findings"] if f["kind"] == "stream-coalescing"]
    assert len(coalescing) == 1
    finding = coalescing[0]
    assert finding["sender"] == "10.77.0.1:51552" and finding["count"] == 23
    assert finding["details"]["write_bytes"] == 100
    assert finding["details"]["median_accumulated_bytes"] == 600


def test_fixed_size_blocks_get_the_seed_001_arithmetic() -> None:
    """100,000 = 69 x 1448 + 88 (seed 001); 69 x 1448 = 99,912 and 70 x 1448 = 101,360."""
    _, document = _document(SAMPLE_TRACES / "classic-2n-blocks-100000.json")
    parity = next(f for f in document["findings"] if f["kind"] == "segment-parity")
    arithmetic = parity["details"]["arithmetic"]
    assert arithmetic["message_bytes"] == 100_000 and arithmetic["mss"] == 1448
    assert (arithmetic["full_segments"], arithmetic["remainder_bytes"]) == (69, 88)
    assert arithmetic["nearest_smaller_ok_bytes"] == 99_912
    assert arithmetic["nearest_larger_ok_bytes"] == 101_360
    stalls = [f for f in document["findings"] if f["kind"] == "nagle-delack-stall"]
    assert {f["subkind"] for f in stalls} == {"2n-segment-tail"}


def test_tinygram_warning_on_tiny_writes_only() -> None:
    """seed003-nagle: 2 bytes leave, 28 are held (14 writes of 2 bytes, per the manifest), so
    disabling Nagle alone would flood; seed004's 6-byte header then one 276-byte body would not."""
    def warnings(name: str) -> list[str]:
        _, document = _document(SAMPLE_TRACES / f"{name}.json")
        stall = next(f for f in document["findings"] if f["kind"] == "nagle-delack-stall")
        return stall["details"]["warnings"]

    assert warnings("seed003-nagle")
    assert not warnings("seed004-header-body")


def test_parity_table_is_in_the_document() -> None:
    """classic-2n-blocks-100000: every 100,000-byte block needs 70 segments (even) with an
    88-byte partial tail, so all its classed messages fall in one row."""
    _, document = _document(SAMPLE_TRACES / "classic-2n-blocks-100000.json")
    rows = [r for r in document["segment_parity"] if r["direction"] == "server_to_client"]
    assert [(r["segments"], r["last_segment"]) for r in rows] == [("even", "partial")]
    assert rows[0]["stall_rate"] >= 0.9


def test_stalls_are_found_without_a_handshake() -> None:
    """The same capture with every SYN excluded by a BPF filter: the MSS must be estimated, the
    39 stalls the client measured are still found, and the confidence says why it is lower."""
    capture = load_capture(str(SAMPLE_TRACES / "seed003-nagle.pcap"),
                           "not (tcp[tcpflags] & tcp-syn != 0)")
    assert bool(capture.connections["mss_estimated"].iloc[0])
    stalls = [f for f in run_detectors(capture).findings if f.kind == "nagle-delack-stall"]
    assert sum(f.count for f in stalls) == 39
    assert any("MSS estimated" in reason for f in stalls for reason in f.confidence_reasons)


@pytest.mark.parametrize("manifest_path", MANIFESTS, ids=[p.stem for p in MANIFESTS])
def test_data_nagle_held_is_never_called_idle(manifest_path) -> None:
    """No gap named by another cause ends at a segment a Nagle-family finding released (in
    classic-stream, the 22 accumulated packets of frames 10-58 each end a ~200 ms gap: those
    gaps are the stream's, and only the 192.7 ms before frame 8 is idle)."""
    _, document = _document(manifest_path)
    released = {row["released_frame"] for f in document["findings"] if f["kind"] in NAGLE_FAMILY
                for row in f["events"]}
    others = {row["released_frame"] for f in document["findings"]
              if f["kind"] in OTHER_GAP_CAUSES for row in f["events"]}
    assert released or not any(f["kind"] in NAGLE_FAMILY for f in document["findings"])
    assert not released & others
