"""Captures whose timestamps go backwards (merged files, clock steps) and packets captured twice
are analysed without error; hand-built, since a live capture cannot be made to do this."""

from __future__ import annotations

from nagledetect import load_capture
from nagledetect.analysis import run_detectors
from tests.handbuilt import CLIENT, SERVER, segment, write


def test_time_going_backwards_and_duplicates(tmp_path) -> None:
    packets = [
        segment(CLIENT, SERVER, 40000, 80, "S", 100, time_s=10.0, options=[("MSS", 1460)]),
        segment(SERVER, CLIENT, 80, 40000, "SA", 900, 101, time_s=10.001, options=[("MSS", 1460)]),
        segment(CLIENT, SERVER, 40000, 80, "A", 101, 901, time_s=10.002),
        segment(CLIENT, SERVER, 40000, 80, "PA", 101, 901, 10, time_s=9.5),   # clock stepped back
        segment(CLIENT, SERVER, 40000, 80, "PA", 101, 901, 10, time_s=9.5),   # captured twice
        segment(SERVER, CLIENT, 80, 40000, "PA", 901, 111, 20, time_s=9.6),
    ]
    capture = load_capture(str(write(tmp_path / "backwards.pcap", packets)))
    analysis = run_detectors(capture)
    assert capture.accounting.balanced and capture.accounting.tcp_packets == 6
    roles = capture.packets["role"].astype(str).tolist()
    assert roles[3] == "data" and roles[4] == "retransmission"  # the duplicate, as Wireshark
    assert not [f for f in analysis.findings if f.kind == "nagle-delack-stall"]
