"""Connection facts on real captures: the estimated MSS, super-segments, round trips and vantage.

Every expected value was read off the packets with tshark (the command is in each test).
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from nagledetect import load_capture
from tests.conftest import SAMPLE_TRACES, corpus_file

MANIFESTS = sorted(SAMPLE_TRACES.glob("*.json"))


def _connection(capture, client_port: int, server_port: int):
    table = capture.connections
    rows = table[(table["client_port"] == client_port) & (table["server_port"] == server_port)]
    assert len(rows) == 1
    return rows.iloc[0]


def _packets_of(capture, connection) -> dict[int, tuple[int, int, bool]]:
    """frame -> (payload, wire segments, super-segment) of the connection's data packets."""
    packets = capture.packets
    mine = packets[(packets["connection"] == connection["id"]) & (packets["payload_bytes"] > 0)]
    return {int(row.frame): (int(row.payload_bytes), int(row.wire_segments), bool(row.super_segment))
            for row in mine.itertuples(index=False)}


def test_estimated_mss_is_the_largest_payload_that_fits_a_frame() -> None:
    """zeek dce-rpc__mapi.pcap, 192.168.0.183:1153 -> 192.168.0.2:1032, no handshake.
    `tshark -Y "tcp.port==1153 && tcp.port==1032" -T fields -e frame.number -e tcp.len -e ip.len`:
    payloads 160, 224, 1056, 1460 (frame 334, IP length 1500: one Ethernet frame), 396, ...;
    no timestamps (TCP headers of 20 bytes). The most frequent size of 536 or more was a tie
    of 1056 and 1460, and the smaller was taken, so frame 334 became a super-segment."""
    capture = load_capture(str(corpus_file("zeek/dce-rpc__mapi.pcap")))
    connection = _connection(capture, 1153, 1032)
    assert bool(connection["mss_estimated"]) and connection["effective_mss"] == 1460
    assert _packets_of(capture, connection)[334] == (1460, 1, False)


def test_a_gso_payload_larger_than_a_frame_is_a_super_segment() -> None:
    """tcpdump gso-ipv4.pcap and gso-ipv6.pcap: one packet each, no handshake, of 7240 and
    7140 bytes with timestamps (`-e tcp.len -e tcp.hdr_len`: 32-byte TCP headers). They do not
    fit a 1500-byte frame, so the MSS is Ethernet's with timestamps (IPv4 1448, IPv6 1428) and
    each is 5 wire segments (7240 = 5 x 1448, 7140 = 5 x 1428); the estimate was the payload
    itself, which made them ordinary segments."""
    for name, mss in (("gso-ipv4.pcap", 1448), ("gso-ipv6.pcap", 1428)):
        capture = load_capture(str(corpus_file(f"tcpdump/{name}")))
        connection = capture.connections.iloc[0]
        assert bool(connection["mss_estimated"]) and connection["effective_mss"] == mss, name
        assert _packets_of(capture, connection)[1] == (5 * mss, 5, True), name


def test_a_frame_that_fits_the_mtu_is_never_a_super_segment() -> None:
    """tcpdump of10_s4810.pcap: the SYN announces MSS 1380 and the SYN/ACK 1460, timestamps on,
    so the effective MSS is 1368 (`-Y "tcp.flags.syn==1" -e tcp.options.mss_val`). Frame 40
    carries 1448 bytes in an IP packet of 1500 (`-e tcp.len -e ip.len`): one frame on the wire,
    not a super-segment. Frame 19's 4104 bytes (IP length 4156) are 3 x 1368."""
    capture = load_capture(str(corpus_file("tcpdump/of10_s4810.pcap")))
    connection = capture.connections.iloc[0]
    assert connection["effective_mss"] == 1368
    packets = _packets_of(capture, connection)
    assert packets[40] == (1448, 1, False)
    assert packets[19] == (4104, 3, True)


def test_an_ack_lag_that_idle_time_explains_is_no_round_trip() -> None:
    """zeek modbus__fuzz-1011.pcap: five data packets over 1,755 s, no handshake
    (`-T fields -e frame.time_relative -e tcp.len`: 0 s, 159 s, 593 s, 1259 s, 1755 s). Each
    data -> ACK lag spans minutes of silence, longer than a receiver may hold an ACK (500 ms),
    so none is a round trip (the round trip was 825,258 ms)."""
    capture = load_capture(str(corpus_file("zeek/modbus__fuzz-1011.pcap")))
    connection = capture.connections.iloc[0]
    assert connection["rtt_source"] == "none" and np.isnan(connection["rtt_ms"])
    assert connection["vantage"] == "unknown"


def test_a_fin_standing_in_for_the_missing_third_packet_is_no_round_trip() -> None:
    """zeek http__bro.org-filtered.pcap, tcp.stream 0 (`-Y "tcp.stream==0" -T fields
    -e frame.number -e frame.time_relative -e tcp.flags.str`): SYN at 0 s (frame 1), SYN/ACK at
    0.078046 s (frame 2), then nothing from the client until its FIN/ACK at 8.303572 s (frame
    22): the filter left the handshake's ACK out. The client's side was 8,225.5 ms; the
    server's is the SYN -> SYN/ACK 78.046 ms."""
    capture = load_capture(str(corpus_file("zeek/http__bro.org-filtered.pcap")))
    connection = capture.connections.iloc[0]
    assert connection["first_frame"] == 1
    assert connection["rtt_server_side_ms"] == pytest.approx(78.046)
    assert np.isnan(connection["rtt_client_side_ms"])
    assert connection["vantage"] == "unknown"


def test_a_syn_sent_again_after_the_syn_ack_voids_it() -> None:
    """zeek rdp__rdp-x509.pcap (`-T fields -e frame.number -e frame.time_relative -e ip.src
    -e tcp.flags.str`): SYN at 0 s, SYN/ACKs at 0.000080 and 2.300813 s, the client's SYN again
    at 2.996685 s (it had received neither SYN/ACK), its pure ACK at 7.142217 s. That ACK
    answers a SYN/ACK the capture does not hold, so the 4,841 ms from frame 3 is no round trip;
    the server's side is the SYN -> SYN/ACK 0.080 ms. Nor does the data give the client's side:
    the server's 19 bytes (frame 7 at 7.146965 s, again as frame 8 at 10.053809 s) are first
    acknowledged by frame 11 at 11.046634 s (`-e tcp.seq_raw -e tcp.ack_raw -e tcp.len`),
    0.99 s after the later copy, and its 1405 bytes of frames 12-13 never are."""
    capture = load_capture(str(corpus_file("zeek/rdp__rdp-x509.pcap")))
    connection = capture.connections.iloc[0]
    assert connection["rtt_server_side_ms"] == pytest.approx(0.080)
    assert np.isnan(connection["rtt_client_side_ms"])


def test_a_round_trip_of_a_millisecond_places_the_tap() -> None:
    """classic-2n-blocks-100000, captured at the client: the client's handshake ACK left 47 us
    after the SYN/ACK (frames 6-7), the server's side takes a millisecond or more (SYN -> SYN/ACK
    29.3 ms, frames 3-6, the user-space peer; its ACKs of the client's data 1.0 ms or more
    after it). The tap is at the client."""
    capture = load_capture(str(SAMPLE_TRACES / "classic-2n-blocks-100000.pcap"))
    connection = capture.connections.iloc[0]
    assert connection["rtt_client_side_ms"] <= 0.047
    assert connection["rtt_server_side_ms"] >= 1.0
    assert connection["vantage"] == "client"


def test_sub_millisecond_round_trips_leave_the_vantage_unknown() -> None:
    """seed003-nagle, captured at the client on a veth pair: SYN -> SYN/ACK 15 us, SYN/ACK -> ACK
    12 us (frames 5-7): each side's round trip is a host's reaction, so which side the tap is on
    cannot be told (it was called "server")."""
    capture = load_capture(str(SAMPLE_TRACES / "seed003-nagle.pcap"))
    connection = capture.connections.iloc[0]
    assert max(connection["rtt_client_side_ms"], connection["rtt_server_side_ms"]) < 0.5
    assert connection["vantage"] == "unknown"


@pytest.mark.parametrize("manifest_path", MANIFESTS, ids=[p.stem for p in MANIFESTS])
def test_vantage_is_the_manifest_side_or_unknown(manifest_path) -> None:
    """Every lab capture's manifest says where tcpdump ran (`capture.side`): a vantage named is
    that side, never another."""
    manifest = json.loads(manifest_path.read_text())
    capture = load_capture(str(SAMPLE_TRACES / manifest["capture"]["file"]))
    named = set(capture.connections["vantage"]) - {"unknown"}
    assert named <= {manifest["capture"]["side"]}, named
