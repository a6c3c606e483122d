"""pcapng edge cases, hand-built around real packets from a lab capture: unknown block types,
nanosecond timestamps, hostile comments and interface names, two link types in one file."""

from __future__ import annotations

import subprocess
import sys

from nagledetect import load_capture
from tests.pcapng_builder import block, interface, packet, real_frames, section

ETHERNET, RAW_IP = 1, 101
HOSTILE = "<script>alert(1)</script>"


def test_unknown_blocks_are_skipped_and_nanoseconds_kept_to_the_microsecond(tmp_path) -> None:
    frames = real_frames(12)
    body = section() + interface(ETHERNET, nanoseconds=True)
    for index, (time_us, data) in enumerate(frames):
        body += packet(data, time_us * 1000 + 789)
        if index % 3 == 0:
            body += block(0x0BADBEEF, b"\x01\x02\x03\x04")  # a block type no reader knows
    path = tmp_path / "odd.pcapng"
    path.write_bytes(body)
    capture = load_capture(str(path))
    assert capture.accounting.packets_read == len(frames) and capture.accounting.balanced
    assert len(capture.packets) > 0
    for frame, time_us in zip(capture.packets["frame"], capture.packets["time_us"]):
        assert time_us == frames[frame - 1][0]  # written as ns + 789, read back to the us


def test_hostile_comment_and_interface_name_never_reach_the_html_raw(tmp_path) -> None:
    body = section() + interface(ETHERNET, name=HOSTILE)
    body += b"".join(packet(data, time_us, comment=HOSTILE) for time_us, data in real_frames(12))
    capture = tmp_path / "hostile.pcapng"
    capture.write_bytes(body)
    report = tmp_path / "report.html"
    result = subprocess.run([sys.executable, "-m", "nagledetect", "report", str(capture), "-o",
                             str(report)], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert HOSTILE not in report.read_text()


def test_two_link_types_in_one_file_are_each_decoded_by_their_own(tmp_path) -> None:
    """libpcap refuses the second interface (another link type); the compiled core reads both
    packets, the SYN as Ethernet and the SYN-ACK as raw IP (the real packet
    without its 14-byte Ethernet header; frames 5 and 6 of seed003-nagle.pcap in tshark), and
    says so in the accounting."""
    frames = real_frames(6)[4:]
    body = section() + interface(ETHERNET) + interface(RAW_IP)
    body += packet(frames[0][1], frames[0][0], interface_id=0)
    body += packet(frames[1][1][14:], frames[1][0], interface_id=1)
    path = tmp_path / "mixed.pcapng"
    path.write_bytes(body)
    capture = load_capture(str(path))
    assert capture.accounting.packets_read == 2 == capture.accounting.tcp_packets
    assert capture.packets["frame"].tolist() == [1, 2]
    assert capture.packets["time_us"].tolist() == [frames[0][0], frames[1][0]]
    assert capture.accounting.warnings == []
