"""pcapng files that libpcap refuses (interfaces that differ in link type or snapshot length, as
mergecap writes them) are read whole by the compiled core, as tshark reads them.

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

import subprocess
import sys

import pytest

from nagledetect import _core, load_capture
from tests.conftest import SAMPLE_TRACES, corpus_file
from tests.pcapng_builder import interface, packet, real_frames, section

MERGED = SAMPLE_TRACES / "merged-interfaces.pcapng"
ETHERNET = 1


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


def test_a_file_libpcap_refuses_midway_is_read_whole(tmp_path) -> None:
    """An interface with another snapshot length after four packets (libpcap reads those, then
    refuses): all eight are read, in batches of two as well, numbered as in the file."""
    frames = real_frames(8)
    body = section() + interface(ETHERNET)
    body += b"".join(packet(data, time_us) for time_us, data in frames[:4])
    body += interface(ETHERNET, snaplen=128)
    body += b"".join(packet(data, time_us, interface_id=1) for time_us, data in frames[4:])
    path = tmp_path / "midway.pcapng"
    path.write_bytes(body)
    reader = _core.Reader(str(path), 2)
    batches = [batch["packets"] for batch in reader]
    assert [batch["frame"].tolist() for batch in batches] == [[1, 2], [3, 4], [5, 6], [7, 8]]
    assert [t for batch in batches for t in batch["time_us"].tolist()] == [t for t, _ in frames]
    assert [c for batch in batches for c in batch["captured_bytes"].tolist()] == [
        len(data) for _, data in frames]
    assert reader.warnings == [] and reader.cut_short is None


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
    frames = real_frames(8)
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
    frames = real_frames(6)[4:]
    body = section() + interface(ETHERNET) + interface(147)
    body += packet(frames[0][1], frames[0][0]) + packet(frames[1][1], frames[1][0], 1)
    path = tmp_path / "user0.pcapng"
    path.write_bytes(body)
    filtered = load_capture(str(path), "tcp").accounting
    assert (filtered.tcp_packets, filtered.skipped) == (1, {"excluded by filter": 1})
    unfiltered = load_capture(str(path)).accounting
    assert (unfiltered.tcp_packets, unfiltered.skipped) == (1, {"unsupported link type 147": 1})
