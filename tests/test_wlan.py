"""TCP in 802.11 data frames: under the 802.11, radiotap and PPI link types, and in Aruba's GRE.

The frames are real: the 802.11 QoS data frames an Aruba access point tunnelled to its
controller (`zeek/tunnels__gre-aruba.pcap`, 2,407 frames, every one TCP in Wireshark), taken
out of their GRE and written under each link type (radiotap with a timestamp and flags, with
its data padding too), with frames of the other kinds beside them (a beacon, a null data
frame, an encrypted, a fragmented and an aggregate one, made from a real one by their flags).
The expected values are tshark's on the same files: which frames carry TCP, their fields,
their tcp.stream; the skipped frames are counted by what they are.
"""

from __future__ import annotations

import struct
import subprocess
from pathlib import Path

import pytest

from nagledetect import load_capture
from tests.conftest import corpus_file, require_tool
from tests.test_stream_ids import _mismatches

ARUBA = "zeek/tunnels__gre-aruba.pcap"
FRAMES_TAKEN = 60
QOS_HEADER_BYTES = 26
"""An Aruba frame's MAC header: a QoS data frame between a station and an access point."""
LINKTYPE_IEEE802_11, LINKTYPE_RADIOTAP, LINKTYPE_PPI = 105, 127, 192
RADIOTAP_TSFT_AND_FLAGS = 0x3
RADIOTAP_DATA_PAD = 0x20


def _wlan_frames(count: int) -> list[bytes]:
    """The first `count` 802.11 frames of the Aruba capture (Ethernet, a VLAN tag, IPv4 with
    its header length, GRE of 4 bytes, then the frame)."""
    data = corpus_file(ARUBA).read_bytes()
    frames, position = [], 24
    while len(frames) < count:
        caplen = struct.unpack_from("<I", data, position + 8)[0]
        packet = data[position + 16:position + 16 + caplen]
        ip_header = (packet[18] & 0x0F) * 4
        frames.append(packet[18 + ip_header + 4:])
        position += 16 + caplen
    return frames


def _others(frame: bytes) -> list[tuple[bytes, str]]:
    """Frames that carry no TCP to analyse, made from a real QoS data frame, each with the
    reason it is skipped for."""
    beacon = bytes([0x80, 0]) + frame[2:24] + bytes(12)
    null = bytes([0xC8, frame[1]]) + frame[2:QOS_HEADER_BYTES]
    protected = frame[:1] + bytes([frame[1] | 0x40]) + frame[2:]
    fragment = frame[:1] + bytes([frame[1] | 0x04]) + frame[2:]
    aggregate = frame[:24] + bytes([frame[24] | 0x80]) + frame[25:]
    return [(beacon, "802.11 frame without data (management, control, null data)"),
            (null, "802.11 frame without data (management, control, null data)"),
            (protected, "802.11 data frame encrypted"),
            (fragment, "802.11 fragment (not put back together)"),
            (aggregate, "802.11 A-MSDU (several packets in one frame, not decoded)")]


def _radiotap(frame: bytes, padded: bool) -> bytes:
    """A radiotap header with a timestamp (aligned to 8) and flags; `padded`: the data pad
    flag, and 2 bytes of padding after the 26-byte MAC header, as a driver writes them."""
    flags = RADIOTAP_DATA_PAD if padded else 0
    header = struct.pack("<BBHI", 0, 0, 24, RADIOTAP_TSFT_AND_FLAGS) + struct.pack(
        "<QB", 1_700_000_000_000_000, flags) + bytes(7)
    if padded:
        frame = frame[:QOS_HEADER_BYTES] + b"\x00\x00" + frame[QOS_HEADER_BYTES:]
    return header + frame


def _pcap(path: Path, linktype: int, frames: list[bytes]) -> Path:
    with open(path, "wb") as out:
        out.write(struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 65535, linktype))
        for index, frame in enumerate(frames):
            out.write(struct.pack("<IIII", 1_700_000_000, index * 1000, len(frame), len(frame)))
            out.write(frame)
    return path


def _captures(folder: Path) -> dict[str, tuple[Path, dict[str, int]]]:
    """Each link type's file, and the skips it should count."""
    frames = _wlan_frames(FRAMES_TAKEN)
    others = _others(frames[0])
    mixed = frames[:20] + [frame for frame, _ in others] + frames[20:]
    skipped: dict[str, int] = {}
    for _, reason in others:
        skipped[reason] = skipped.get(reason, 0) + 1
    radiotap = [_radiotap(frame, padded=index % 2 == 1) for index, frame in enumerate(mixed)]
    ppi = [struct.pack("<BBHI", 0, 0, 8, LINKTYPE_IEEE802_11) + frame for frame in mixed]
    return {"802.11": (_pcap(folder / "wlan.pcap", LINKTYPE_IEEE802_11, mixed), skipped),
            "radiotap": (_pcap(folder / "radiotap.pcap", LINKTYPE_RADIOTAP, radiotap), skipped),
            "PPI": (_pcap(folder / "ppi.pcap", LINKTYPE_PPI, ppi), skipped)}


def _tshark_tcp(path: Path) -> list[tuple[int, ...]]:
    out = subprocess.run([require_tool("tshark"), "-n", "-r", str(path), "-Y", "tcp", "-T",
                          "fields", "-e", "frame.number", "-e", "tcp.srcport", "-e",
                          "tcp.dstport", "-e", "tcp.seq_raw", "-e", "tcp.len"],
                         capture_output=True, text=True, check=True).stdout
    return [tuple(int(value) for value in line.split("\t")) for line in out.splitlines()]


@pytest.mark.parametrize("link", ["802.11", "radiotap", "PPI"])
def test_tcp_in_80211_frames_is_what_tshark_reads(tmp_path: Path, link: str) -> None:
    path, skipped = _captures(tmp_path)[link]
    expected = _tshark_tcp(path)
    assert len(expected) == FRAMES_TAKEN  # every data frame, none of the others
    capture = load_capture(str(path))
    packets = capture.packets.sort_values("frame")
    connections = capture.connections.set_index("id")
    ours = []
    for row in packets.itertuples():
        connection = connections.loc[row.connection]
        ports = (connection.client_port, connection.server_port)
        source, destination = ports if row.direction == 0 else ports[::-1]
        ours.append((row.frame, source, destination, row.seq_raw, row.payload_bytes))
    assert ours == expected
    assert capture.accounting.skipped == skipped
    assert _mismatches(path) == []


def test_tcp_in_arubas_gre_is_the_80211_frames(tmp_path: Path) -> None:
    """Every frame of the Aruba capture is TCP in Wireshark, inside GRE protocol 0x8200;
    Wireshark dissects 0x8200 to 0x8370 by 0x10 so (asked with each value in turn): one more
    of them, and one beside them that it does not."""
    path = corpus_file(ARUBA)
    assert len(load_capture(str(path)).packets) == 2407 == len(_tshark_tcp(path))
    assert _mismatches(path) == []
    data = path.read_bytes()
    caplen = struct.unpack_from("<I", data, 24 + 8)[0]
    packet = data[40:40 + caplen]
    ip_start = 18
    gre_start = ip_start + (packet[ip_start] & 0x0F) * 4
    frames = [packet[:gre_start + 2] + struct.pack(">H", protocol) + packet[gre_start + 4:]
              for protocol in (0x8370, 0x8380)]
    built = _pcap(tmp_path / "aruba.pcap", 1, frames)
    assert [row[0] for row in _tshark_tcp(built)] == [1]
    assert load_capture(str(built)).packets["frame"].tolist() == [1]
