"""Nagle stalls found in real Linux TCP carried in a tunnel: sample_traces/vxlan-overlay.pcap
(recipe in sample_traces/README.md), captured on the underlay, every TCP packet inside VXLAN.

Checked by hand in tshark (`-E occurrence=l`, the inner headers): one TCP conversation,
192.168.77.1:49842 -> 192.168.77.2:9100, `tcp.stream` 0, all in UDP to port 4789. Frame 27:
the client's 100-byte header at 1.028440 s; frame 28: the server's pure ACK at 1.072071 (43.6
ms later: its delayed-ACK timer); frame 29: the 100-byte body 28 us after that ACK. Twenty
exchanges; the first is ACKed at once (Linux's quick ACKs at a connection's start), so 19 stalls.
"""

from __future__ import annotations

from nagledetect.analysis import analyze_capture
from nagledetect.detectors import kinds
from tests.conftest import SAMPLE_TRACES

VXLAN = SAMPLE_TRACES / "vxlan-overlay.pcap"


def test_the_stalls_inside_vxlan_are_found_with_their_frames() -> None:
    analysis = analyze_capture(str(VXLAN))
    stalls = [finding for finding in analysis.findings if finding.kind == kinds.NAGLE_DELACK_STALL]
    assert len(stalls) == 1
    stall = stalls[0]
    assert stall.sender == "192.168.77.1:49842" and len(stall.events) == 19
    events = stall.events
    triples = set(zip(events.last_data_frame.tolist(), events.ack_frame.tolist(),
                      events.released_frame.tolist()))
    assert (27, 28, 29) in triples
    assert analysis.capture.accounting.tcp_packets == 107  # tshark -Y tcp: 107 frames, all in VXLAN
