"""pcapng files that libpcap refuses (interfaces that differ in link type or snapshot length, as
mergecap writes them) are read whole by nagledetect's own pcapng reader.

sample_traces/merged-interfaces.pcapng (recipe in its README), checked in tshark (`-T fields -e
frame.number -e frame.interface_id -e frame.time_epoch`, `-Y icmpv6`, `-Y arp`): 315 frames,
246 on interface 0 (Ethernet, microseconds: seed003-nagle.pcap) and 69 on interface 1 (Linux
cooked v2, nanoseconds), interleaved; 10 ICMPv6 and 2 ARP frames, the other 303 TCP. Frame 1 at
1795370344.443528000; frame 61, the first on interface 1, at 1795370344.943528000; frame 77 (2
bytes from port 49908) at 1795370344.993809876; frame 84 (the ACK from port 7007) at
1795370345.035395900, 41.586 ms later; frame 85 (4 bytes) at 1795370345.035405746, 9.8 us after
the ACK; frame 315 at 1795370346.736009000. capinfos: interface 0 Ethernet, capture length 128,
microseconds; interface 1 Linux cooked v2 (pcapng link type 276), capture length 262144,
nanoseconds. tcpdump stops at once: "an interface has a type 276 different from the type of the
first interface".
"""

from __future__ import annotations

import struct
import subprocess
import sys

import pytest

from nagledetect import load_capture
from nagledetect.read.libpcap import CaptureReader
from nagledetect.read.pcapng import PcapngReader
from tests.conftest import SAMPLE_TRACES, corpus_file
from tests.pcapng_builder import (
    interface,
    obsolete_packet,
    packet,
    section,
    simple_packet,
)

MERGED = SAMPLE_TRACES / "merged-interfaces.pcapng"
ETHERNET = 1


def _real_frames(count: int) -> list[tuple[int, bytes]]:
    """(time_us, frame bytes) of the first packets of a real Linux capture."""
    batch = next(CaptureReader(str(SAMPLE_TRACES / "seed003-nagle.pcap")).batches())
    return [(int(batch.time_us[i]), batch.buf[batch.offsets[i]:batch.offsets[i] + batch.caplens[i]]
             .tobytes()) for i in range(count)]


def test_the_merged_sample_is_read_whole_each_packet_by_its_interface() -> None:
    capture = load_capture(str(MERGED))
    accounting = capture.accounting
    assert (accounting.packets_read, accounting.tcp_packets) == (315, 303)
    assert accounting.skipped == {"not TCP (ICMPv6)": 10, "not IP (ethertype 0x0806)": 2}
    # The compiled core reads every interface natively: nothing to warn of (the numpy
    # path, through libpcap, says how it read on; test below).
    assert accounting.warnings == []
    time_us = dict(zip(capture.packets["frame"].tolist(), capture.packets["time_us"].tolist()))
    assert time_us[61] == 1795370344943528
    assert time_us[77] == 1795370344993809  # nanoseconds truncated, as libpcap does
    assert time_us[84] == 1795370345035395
    assert time_us[315] == 1795370346736009


def test_the_merged_sample_shows_the_stalls_of_both_captures() -> None:
    """The loopback connection's stalls at the frames and times above; seed003's connection
    keeps the 39 stalls it has alone (tests/test_text_evidence.py)."""
    text = subprocess.run([sys.executable, "-m", "nagledetect", "--verbose", str(MERGED)],
                          capture_output=True, text=True, check=True).stdout
    assert "frame 77 last data -> frame 84 ACK (+41.6 ms hold) -> frame 85 released (+10 us)" in text
    assert "9 stalls of 41.7 ms (median)" in text
    assert "39 stalls of 41.5 ms (median)" in text


def test_a_file_refused_midway_is_read_on_from_where_libpcap_stopped(tmp_path) -> None:
    """An interface with another snapshot length after four packets: libpcap reads those (two
    batches of two), then refuses; the rest are read here, in batches of two as well, numbered
    on from frame 5."""
    frames = _real_frames(8)
    body = section() + interface(ETHERNET)
    body += b"".join(packet(data, time_us) for time_us, data in frames[:4])
    body += interface(ETHERNET, snaplen=128)
    body += b"".join(packet(data, time_us, interface_id=1) for time_us, data in frames[4:])
    path = tmp_path / "midway.pcapng"
    path.write_bytes(body)
    reader = CaptureReader(str(path), batch_packets=2)
    batches = list(reader.batches())
    assert [batch.first_frame for batch in batches] == [1, 3, 5, 7]
    assert [t for batch in batches for t in batch.time_us.tolist()] == [t for t, _ in frames]
    read = [batch.buf[o:o + c].tobytes() for batch in batches
            for o, c in zip(batch.offsets.tolist(), batch.caplens.tolist())]
    assert read == [data for _, data in frames]
    assert reader.read_here == (
        "the file mixes interfaces of different snapshot lengths (65,535 bytes, 128 bytes): "
        "libpcap stops at such a file, so it read frames 1-4 and nagledetect's own pcapng reader "
        "the rest, each packet by its own interface")
    assert reader.truncation is None


def test_the_warning_names_every_difference_once_in_order_of_appearance(tmp_path) -> None:
    """A little-endian section (interfaces: Ethernet in microseconds, raw IP in 2^-20 s ticks,
    Ethernet again), then a big-endian one (Ethernet in nanoseconds, snapshot length 0)."""
    body = section() + interface(ETHERNET) + interface(101, resolution=0x80 | 20)
    body += interface(ETHERNET) + section(">") + interface(ETHERNET, order=">", snaplen=0,
                                                           nanoseconds=True)
    path = tmp_path / "mixed.pcapng"
    path.write_bytes(body)
    reader = PcapngReader(str(path), 100)
    list(reader.batches())
    assert reader.mixture() == (
        "interfaces of different link types (1 Ethernet, 101 raw IP), snapshot lengths (65,535 "
        "bytes, unlimited) and timestamp resolutions (microseconds, 2^-20 s, nanoseconds) and "
        "sections of different byte orders (little-endian, big-endian)")


def test_libpcap_is_quoted_only_when_the_file_mixes_nothing_it_refuses(tmp_path) -> None:
    """Interfaces that differ only in their clocks (which libpcap reads), then a packet block
    naming an interface that does not exist: libpcap's own words say why it stopped."""
    frames = _real_frames(3)
    body = section() + interface(ETHERNET) + interface(ETHERNET, nanoseconds=True)
    body += packet(frames[0][1], frames[0][0]) + packet(frames[1][1], frames[1][0] * 1000, 1)
    body += packet(frames[2][1], frames[2][0], interface_id=2)
    path = tmp_path / "no-interface.pcapng"
    path.write_bytes(body)
    reader = CaptureReader(str(path))
    assert sum(len(batch) for batch in reader.batches()) == 2
    libpcap_words = "a packet arrived on interface 2, but there's no Interface Description Block"
    # nagledetect's own reader stops there too, so the damage is all there is to say
    assert reader.read_here is None
    assert reader.truncation is not None  # libpcap's words past these vary with its version
    assert reader.truncation.startswith(libpcap_words)


def test_big_endian_sections_binary_clocks_and_every_packet_block(tmp_path) -> None:
    """Cases no capture here has (so built by hand around real packets): a big-endian section
    whose interface counts 2^-20 s ticks from an offset of 100 s, holding an enhanced, an
    obsolete and a simple packet block (no time: 0, as libpcap gives), then a little-endian
    section with a nanosecond interface, numbered on."""
    frames = _real_frames(8)[4:]
    ticks = (5 << 20) + (1 << 19)  # 5.5 s
    body = section(">") + interface(ETHERNET, order=">", resolution=0x80 | 20, offset_s=100)
    body += packet(frames[0][1], ticks, order=">")
    body += obsolete_packet(frames[1][1], ticks + (1 << 10), order=">")
    body += simple_packet(frames[2][1], order=">")
    body += section() + interface(ETHERNET, nanoseconds=True)
    body += packet(frames[3][1], 1_700_000_000_123_456_789)
    path = tmp_path / "orders.pcapng"
    path.write_bytes(body)
    batches = list(PcapngReader(str(path), 100).batches())
    assert [batch.first_frame for batch in batches] == [1, 4]
    times = [t for batch in batches for t in batch.time_us.tolist()]
    assert times == [105_500_000, 105_500_976, 0, 1_700_000_000_123_456]  # 2^10 ticks: 976.6 us
    read = [batch.buf[o:o + c].tobytes() for batch in batches
            for o, c in zip(batch.offsets.tolist(), batch.caplens.tolist())]
    assert read == [data for _, data in frames]


@pytest.mark.parametrize("damage, why", [
    (struct.pack("<II", 6, 7) + b"\0" * 8, "damaged block at byte"),
    (packet(b"\x00" * 60, 0, interface_id=3), "names no interface of its section"),
])
def test_a_damaged_block_ends_the_reading_where_it_lies(tmp_path, damage, why) -> None:
    frames = _real_frames(6)
    body = section() + interface(ETHERNET)
    body += b"".join(packet(data, time_us) for time_us, data in frames[:3])
    path = tmp_path / "damaged.pcapng"
    path.write_bytes(body + damage + packet(frames[3][1], frames[3][0]))
    for batch_packets in (100, 2):  # the damage in the last batch, or before a later one
        reader = PcapngReader(str(path), batch_packets)
        batches = list(reader.batches())
        assert sum(len(batch) for batch in batches) == 3
        assert reader.truncation is not None and why in reader.truncation


@pytest.mark.parametrize("name, packets", [("zeek/ldap__gap-data-missing.pcapng", 18),
                                           ("zeek/ldap__modify-request.pcapng", 17)])
def test_merged_corpus_captures_are_read_whole(name, packets) -> None:
    """126 interfaces of three link types and four snapshot lengths (capinfos); every packet on
    interface 48, all TCP (tshark: 18 and 17 frames). libpcap refuses both from the start."""
    capture = load_capture(str(corpus_file(name)))
    assert capture.accounting.packets_read == packets == capture.accounting.tcp_packets
    assert capture.packets["frame"].tolist() == list(range(1, packets + 1))


@pytest.mark.parametrize("bpf_filter, kept", [("tcp port 7007", 69), ("tcp port 9000", 234)])
def test_a_filter_is_compiled_for_each_interface_link_type(bpf_filter, kept) -> None:
    """The loopback connection (port 7007, Linux cooked v2) and seed003's (port 9000,
    Ethernet): 69 and 234 frames in tshark (`-Y tcp.port==7007`, `-Y tcp.port==9000`)."""
    accounting = load_capture(str(MERGED), bpf_filter).accounting
    assert accounting.tcp_packets == kept
    assert accounting.skipped == {"excluded by filter": 315 - kept}


def test_a_section_of_the_other_byte_order_is_read_on(tmp_path) -> None:
    """libpcap 1.9 misreads a second section written big-endian ("pcapng block size 469762048
    > maximum"); every packet of both sections is read, in order (tshark reads all 8)."""
    frames = _real_frames(8)
    body = section() + interface(ETHERNET)
    body += b"".join(packet(data, time_us) for time_us, data in frames[:4])
    body += section(">") + interface(ETHERNET, order=">")
    body += b"".join(packet(data, time_us, order=">") for time_us, data in frames[4:])
    path = tmp_path / "orders.pcapng"
    path.write_bytes(body)
    capture = load_capture(str(path))
    assert capture.accounting.packets_read == 8
    assert capture.packets["frame"].tolist() == [5, 6, 7, 8]  # frames 1-4: ICMPv6 and ARP
    assert capture.packets["time_us"].tolist() == [t for t, _ in frames[4:]]


def test_a_cut_pcapng_is_read_to_the_cut_and_says_so(tmp_path) -> None:
    """The merged sample's first 3,000 bytes: tshark reads 27 frames, then says the file
    "appears to have been cut short in the middle of a packet"."""
    path = tmp_path / "cut.pcapng"
    path.write_bytes(MERGED.read_bytes()[:3000])
    capture = load_capture(str(path))
    assert capture.accounting.packets_read == 27
    assert any("the file ends inside the block at byte" in warning
               for warning in capture.accounting.warnings)


def test_packets_of_an_interface_libpcap_cannot_filter_are_excluded_by_the_filter(tmp_path):
    """An interface of link type 147 (DLT_USER0: libpcap says "DLT 147 link-layer type
    filtering not implemented") beside an Ethernet one: with a filter, its packet is not taken
    as matching, and is counted as excluded; without one, as an unsupported link type."""
    frames = _real_frames(6)[4:]
    body = section() + interface(ETHERNET) + interface(147)
    body += packet(frames[0][1], frames[0][0]) + packet(frames[1][1], frames[1][0], 1)
    path = tmp_path / "user0.pcapng"
    path.write_bytes(body)
    filtered = load_capture(str(path), "tcp").accounting
    assert (filtered.tcp_packets, filtered.skipped) == (1, {"excluded by filter": 1})
    unfiltered = load_capture(str(path)).accounting
    assert (unfiltered.tcp_packets, unfiltered.skipped) == (1, {"unsupported link type 147": 1})
