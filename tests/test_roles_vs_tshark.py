"""Packet roles checked against Wireshark's TCP analysis flags on real captures.

Duplicate ACKs, window updates and keep-alives must agree frame for frame with tshark.
Retransmission versus out-of-order is a timing heuristic in both tools (Wireshark also uses the
handshake RTT), so for those the check is that the same frames are called old sequence space.
"""

from __future__ import annotations

import subprocess

import pytest

from nagledetect import load_capture
from tests.conftest import corpus_file, require_tool

CAPTURES = [
    "zeek/tcp__ssh-dups.pcap",               # every packet captured several times
    "zeek/http__206_example_b.pcap",         # zero windows, out-of-order, window updates
    "zeek/http__m57-long-49583-80.pcap",
    "zeek/tcp__reassembly.pcap",
    "zeek/ssh__ssh.pcap",
    "zeek/tcp__retransmit-fast009.pcap",     # fast retransmit after three duplicate ACKs
    "zeek/smb__smb3_multichannel.pcap",      # keep-alives
]


def _tshark_frames(path, display_filter: str) -> set[int]:
    output = subprocess.run(["tshark", "-n", "-r", str(path), "-Y", display_filter, "-T", "fields",
                             "-e", "frame.number"], capture_output=True, text=True, check=True).stdout
    return {int(value) for value in output.split()}


def _our_frames(roles: dict[int, str], *names: str) -> set[int]:
    return {frame for frame, role in roles.items() if role in names}


@pytest.mark.parametrize("relative", CAPTURES)
def test_roles_agree_with_wireshark_analysis(relative: str) -> None:
    require_tool("tshark")
    path = corpus_file(relative)
    packets = load_capture(str(path)).packets
    roles = dict(zip(packets["frame"].tolist(), packets["role"].astype(str)))
    assert _our_frames(roles, "dup_ack") == _tshark_frames(path, "tcp.analysis.duplicate_ack")
    assert _our_frames(roles, "keepalive") == _tshark_frames(path, "tcp.analysis.keep_alive")
    assert _our_frames(roles, "window_update") <= _tshark_frames(path, "tcp.analysis.window_update")
    old = _tshark_frames(path, "tcp.analysis.retransmission || tcp.analysis.out_of_order")
    assert _our_frames(roles, "retransmission", "out_of_order") == old
