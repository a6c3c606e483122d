"""TCP carried in PPPoE sessions is decoded like any other TCP; PPPoE discovery and PPP link
control are skipped, each under its own name; a BPF filter selects what tcpdump's selects.

The real captures (the shared corpora) were checked in tshark:
- zeek/pppoe-over-qinq.pcap: 86 frames, all `eth:vlan:vlan:pppoes:ppp:ip:tcp` (`-T fields -e
  frame.protocols`), one connection 1.1.1.1:20394 <-> 2.2.2.2:443 (`tcp.stream` 0). Frame 19's
  IPv4 total length says 46 bytes, its PPPoE payload length 42 (2 of them the PPP protocol):
  tshark reads 40 bytes of IP ("IPv4 total length exceeds packet length (40 bytes)"), so `tcp.len`
  0, and frame 20, the server's next segment, starts at the same sequence number 3337.
  Every frame's fields are compared with tshark's in tests/test_read_vs_tshark.py.
- zeek/pppoe.pcap (`-e eth.type -e ppp.protocol -e ipv6.nxt`): 65 frames, no TCP: 4 discovery
  (0x8863: PADI, PADO, PADR, PADS), then sessions: 24 LCP (0xc021), 2 PAP (0xc023), 6 IPCP
  (0x8021), 4 IPv6CP (0x8057), and IPv6 (0x0057): 21 ICMPv6 (8 of them behind a hop-by-hop
  header) and 4 UDP (DHCPv6).
- tcpdump/pppoes.pcap: 2 LCP echo requests in a session; tcpdump/pppoe.pcap: 1 PADI.
"""

from __future__ import annotations

import os
import struct
import subprocess
import tempfile
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scapy.layers.inet import IP
from scapy.layers.inet6 import IPv6
from scapy.layers.l2 import Dot1Q, Ether
from scapy.layers.ppp import PPP, PPPoE
from scapy.packet import Packet, Raw
from scapy.utils import rdpcap, wrpcap

from nagledetect import _core, load_capture
from nagledetect.analysis import analyze_capture
from nagledetect.report.document import build_document
from tests.conftest import SAMPLE_TRACES, corpus_file, require_tool
from tests.pcapng_builder import real_frames

QINQ = "zeek/pppoe-over-qinq.pcap"
QINQ_PPPOE_LENGTH_AT = 14 + 4 + 4 + 4
"""Where a QinQ PPPoE frame holds its PPPoE payload length (Ethernet, two tags, 4 bytes in)."""
QINQ_PPP_END = QINQ_PPPOE_LENGTH_AT + 4
MOVED_UNCHANGED = ["frame", "time_us", "connection", "direction", "flags", "payload_bytes",
                   "seq_raw", "ack_raw", "window_raw", "window_bytes", "role", "wire_segments",
                   "super_segment", "opt_has_timestamp", "opt_timestamp_value",
                   "opt_timestamp_echo", "opt_sack_block_count", "payload_from_capture"]
"""The packet columns that moving a packet into a PPPoE session must leave as they were (not
`captured_bytes`: the frame grows by its new headers)."""


def test_every_tcp_frame_behind_qinq_and_pppoe_is_used() -> None:
    capture = load_capture(str(corpus_file(QINQ)))
    accounting = capture.accounting
    assert (accounting.packets_read, accounting.tcp_packets, accounting.skipped) == (86, 86, {})
    assert len(capture.connections) == 1
    frames = capture.packets.set_index("frame")
    assert int(frames.loc[19, "payload_bytes"]) == 0  # the PPPoE length, not the IP one
    assert int(frames.loc[19, "seq_raw"]) == int(frames.loc[20, "seq_raw"])


def test_the_session_capture_in_parts_gives_the_one_part_document() -> None:
    """The connection's gaps (retransmission timeouts, a long think time) are found as they
    are in one part when the capture is cut into five."""
    path = corpus_file(QINQ)
    whole = build_document([analyze_capture(str(path))])
    split = build_document([analyze_capture(str(path), part_bytes=os.path.getsize(path) // 5 + 1)])
    assert whole["findings"], "the comparison needs findings to mean something"
    assert split == whole


@pytest.mark.parametrize("relative, skipped", [
    ("zeek/pppoe.pcap", {
        "not IP (ethertype 0x8863: PPPoE discovery)": 4,
        "not IP (PPP protocol 0xc021: LCP)": 24,
        "not IP (PPP protocol 0xc023: PAP)": 2,
        "not IP (PPP protocol 0x8021: IPCP)": 6,
        "not IP (PPP protocol 0x8057: IPv6CP)": 4,
        "not TCP (ICMPv6)": 21,
        "not TCP (UDP)": 4,
    }),
    ("tcpdump/pppoes.pcap", {"not IP (PPP protocol 0xc021: LCP)": 2}),
    ("tcpdump/pppoe.pcap", {"not IP (ethertype 0x8863: PPPoE discovery)": 1}),
])
def test_discovery_and_link_control_are_skipped_by_name(relative: str, skipped: dict) -> None:
    accounting = load_capture(str(corpus_file(relative))).accounting
    assert accounting.tcp_packets == 0
    assert accounting.skipped == skipped
    assert accounting.balanced


def _tcpdump_count(path: Path, expression: str) -> int:
    output = subprocess.run([require_tool("tcpdump"), "-nn", "-r", str(path), expression],
                            capture_output=True, text=True, check=True).stdout
    return len(output.splitlines())


@pytest.mark.parametrize("expression, tcp_packets", [
    ("tcp port 443", 0),  # libpcap looks for IP right after the Ethernet header
    ("pppoes and tcp port 443", 0),  # ... or right after one, untagged, PPPoE header
    ("vlan and pppoes", 0),  # one tag, then another tag where PPPoE is looked for
    ("vlan and vlan and pppoes and tcp port 443", 86),
    ("vlan and vlan and pppoes and tcp port 80", 0),
])
def test_a_filter_selects_what_tcpdump_selects(expression: str, tcp_packets: int) -> None:
    """The counts in the table were read from tcpdump 4.99.3 / libpcap 1.10.3 by hand; the
    test also asks the tcpdump installed."""
    path = corpus_file(QINQ)
    accounting = load_capture(str(path), bpf_filter=expression).accounting
    accepted = accounting.packets_read - accounting.skipped.get("excluded by filter", 0)
    assert accepted == _tcpdump_count(path, expression) == tcp_packets
    assert accounting.tcp_packets == tcp_packets


def _in_session(frame: Packet, tags: int, compressed: bool) -> Packet:
    """A real Ethernet frame's IP packet re-sent in a PPPoE session (behind `tags` VLAN tags),
    its PPPoE length the whole IP packet's as on the wire, its PPP protocol field one byte
    when `compressed` (RFC 1661 PFC)."""
    ip = frame.payload
    ip_bytes = ip.len if isinstance(ip, IP) else 40 + ip.plen
    protocol = 0x21 if isinstance(ip, IP) else 0x57
    link = Ether(src=frame.src, dst=frame.dst)
    for vlan in range(tags):
        link = link / Dot1Q(vlan=100 + vlan)
    if compressed:
        session = PPPoE(sessionid=7, len=1 + ip_bytes) / Raw(bytes([protocol]) + bytes(ip))
    else:
        session = PPPoE(sessionid=7, len=2 + ip_bytes) / PPP(proto=protocol) / Raw(bytes(ip))
    wrapped = link / session
    wrapped.time = frame.time
    wrapped.wirelen = frame.wirelen + len(wrapped) - len(frame)
    return wrapped


def _rewrapped(source: str, tmp_path: Path, tags: int, compressed: bool) -> tuple[Path, Path]:
    """A sample trace (real Linux TCP) and the same packets with each IP packet moved into a
    PPPoE session; ARP and other frames left as they were."""
    original = SAMPLE_TRACES / source
    frames = rdpcap(str(original))
    rewrapped = [_in_session(frame, tags, compressed) if isinstance(frame.payload, (IP, IPv6))
                 else frame for frame in frames]
    path = tmp_path / f"pppoe-{tags}-{compressed}-{source}"
    wrpcap(str(path), rewrapped)
    return original, path


@pytest.mark.parametrize("source, tags, compressed", [
    ("seed003-nagle.pcap", 0, False),                  # IPv4, untagged
    ("seed004-header-body-server.pcap", 1, False),     # IPv6, cut at 128 bytes, one tag
    ("seed003-nagle.pcap", 0, True),                   # a one-byte PPP protocol field
])
def test_real_connections_moved_into_a_session_decode_as_before(tmp_path, source, tags,
                                                                compressed) -> None:
    """No capture here carries IPv6 or untagged TCP in PPPoE, so real packets are moved into a
    session by hand: every TCP field and every finding must stay what it was without PPPoE,
    and tshark must read the moved packets as this project does."""
    original, path = _rewrapped(source, tmp_path, tags, compressed)
    before, after = load_capture(str(original)), load_capture(str(path))
    assert after.accounting.skipped == before.accounting.skipped
    assert after.accounting.tcp_packets == before.accounting.tcp_packets > 0
    for column in MOVED_UNCHANGED:
        np.testing.assert_array_equal(after.packets[column], before.packets[column], column)
    assert after.connections.equals(before.connections)
    require_tool("tshark")
    theirs = subprocess.run(
        ["tshark", "-n", "-r", str(path), "-Y", "tcp", "-T", "fields", "-e", "frame.number",
         "-e", "ip.src", "-e", "ipv6.src", "-e", "tcp.srcport", "-e", "tcp.seq_raw",
         "-e", "tcp.ack_raw", "-e", "tcp.len"],
        capture_output=True, text=True, check=True).stdout
    ours = after.packets.merge(after.connections, left_on="connection", right_on="id")
    from_client = ours["direction"] == 0
    source = np.where(from_client, ours["client_address"], ours["server_address"])
    port = np.where(from_client, ours["client_port"], ours["server_port"])
    mine = "".join(
        f"{f}\t{'' if ':' in a else a}\t{a if ':' in a else ''}\t{p}\t{s}\t{k}\t{n}\n"
        for f, a, p, s, k, n in zip(ours["frame"], source, port, ours["seq_raw"],
                                    ours["ack_raw"], ours["payload_bytes"]))
    assert mine == theirs


def _session_frames() -> list[bytearray]:
    """The first 30 frames of the QinQ PPPoE capture."""
    return [bytearray(data) for _, data in real_frames(30, corpus_file(QINQ))]


def _decoded(frames: list[bytearray]) -> dict[str, np.ndarray]:
    """The frames written as a classic pcap (Ethernet) and read by the core."""
    header = struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 262_144, 1)
    records = b"".join(struct.pack("<IIII", 0, 0, len(data), len(data)) + data
                       for data in frames)
    with tempfile.NamedTemporaryFile(suffix=".pcap") as capture:
        capture.write(header + records)
        capture.flush()
        return _core.decode_file(capture.name)["packets"]


@settings(max_examples=600, derandomize=True, deadline=None)
@given(edits=st.lists(st.tuples(st.integers(0, 29), st.integers(12, 40), st.integers(0, 255)),
                      max_size=20),
       cuts=st.lists(st.tuples(st.integers(0, 29), st.integers(0, 80)), max_size=6))
def test_corrupted_session_headers_are_decoded_or_skipped_never_fatal(edits, cuts) -> None:
    """Bytes of the tags, the PPPoE header, the PPP protocol and the IP header changed at
    random, frames cut: every packet is read, no payload is negative, and where the tags and
    the PPPoE header were left alone, none reaches past what the PPPoE length says was carried
    (2 bytes of PPP protocol, at least 20 of IP header)."""
    frames = _session_frames()
    for packet, offset, value in edits:
        frames[packet][offset] = value
    for packet, length in cuts:
        frames[packet] = frames[packet][:length]
    packets = _decoded(frames)
    assert len(packets["frame"]) == len(frames)
    kept = np.flatnonzero(packets["skip"] == 0)
    payload = packets["payload_bytes"].astype(np.int64)[kept]
    assert (payload >= 0).all()
    carried = payload + packets["tcp_header_bytes"][kept]
    link_intact = {packet for packet, offset, _ in edits if offset < QINQ_PPP_END}
    for row, bytes_carried in zip(kept.tolist(), carried.tolist()):
        if row not in link_intact and len(frames[row]) >= QINQ_PPP_END:
            stated = int.from_bytes(frames[row][QINQ_PPPOE_LENGTH_AT:QINQ_PPPOE_LENGTH_AT + 2],
                                    "big")
            assert bytes_carried <= stated - 2 - 20


@pytest.mark.parametrize("expression, accepted, tcp_packets", [
    ("pppoes and tcp port 9000", 234, 234),
    ("tcp port 9000", 0, 0),
    ("pppoes", 244, 234),  # the 10 IPv6 frames (neighbour discovery, MLD) too
])
def test_a_filter_on_an_untagged_session_selects_what_tcpdump_selects(
        tmp_path, expression: str, accepted: int, tcp_packets: int) -> None:
    """seed003-nagle.pcap's IP packets moved into an untagged session; the counts were read
    from tcpdump by hand (244 IP frames, 234 of them TCP, 2 ARP frames left outside)."""
    _, path = _rewrapped("seed003-nagle.pcap", tmp_path, tags=0, compressed=False)
    accounting = load_capture(str(path), bpf_filter=expression).accounting
    assert accounting.packets_read - accounting.skipped.get("excluded by filter", 0) == accepted
    assert _tcpdump_count(path, expression) == accepted
    assert accounting.tcp_packets == tcp_packets
