"""Fuzzing the capture reader and both ways of rebuilding connections through Python (hypothesis,
derandomized: the same examples on every run, about 25 s in all).

Real captures (microsecond pcap, the same records as a nanosecond and a big-endian pcap,
pcapng, gzip-compressed pcap and pcapng) and a hand-built pcapng of real frames under every
link type and packet block read here are mutated where readers get hurt: record and block
headers (lengths set to 0, to 258 MiB, to one byte too many...), interface options and packet
headers, bytes overwritten, bits flipped, bytes inserted or removed, the file cut. Compressed
sources are mutated before compression (the reader meets the damage after decompressing) or
after (the decompressor meets it).

The compiled core (`_core.decode_file`, `_core.Reader`) must never panic (a panic surfaces as
pyo3's PanicException, or as the core's "internal error ...; please report this"), must
account for every packet it hands over, and must refuse a file only with its own one-line
CaptureError (FilterError for a filter that does not compile for a mutated link type). Both
ways of rebuilding connections (`nagledetect.api.load_capture`, and `load_capture_numpy` as
the parts of a large capture take them) must raise nothing but InputError. A hang trips
faulthandler's watchdog, which ends the run with every thread's stack.
"""

from __future__ import annotations

import faulthandler
import gzip
import struct
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nagledetect.api import load_capture, load_capture_numpy
from nagledetect.errors import InputError
from nagledetect.read import skips
from tests.conftest import SAMPLE_TRACES
from tests.pcapng_builder import (
    interface,
    obsolete_packet,
    packet,
    section,
    simple_packet,
)

_core = pytest.importorskip("nagledetect._core")

PCAP_HEADER_BYTES = 24
RECORD_HEADER_BYTES = 16
PACKET_HEADER_BYTES = 80
"""Packet bytes mutated as headers: link, IP (with IPv6 extensions) and TCP with options."""
RECORDS_KEPT = 24
HANG_S = 20
"""Far more than any example takes (a few ms): past it, the reader is stuck."""
SLOWEST_EXAMPLE_S = 5.0
WORDS = (0, 1, 11, 12, 13, 0x7FFF_FFFF, 0x8000_0000, 0xFFFF_FFFF, 65_535, 65_536, 262_144,
         262_145, 16 * 1024 * 1024, 16 * 1024 * 1024 + 4, 270_532_608)
"""32-bit values a damaged length or count takes: the limits libpcap checks, either side."""
FILTERS = (None, "tcp", "tcp port 80 or vlan")
LINKTYPE_NULL, LINKTYPE_ETHERNET, LINKTYPE_RAW, LINKTYPE_SLL, LINKTYPE_SLL2 = 0, 1, 101, 113, 276
LINKTYPE_PPP, LINKTYPE_FDDI, LINKTYPE_PPP_HDLC, LINKTYPE_PPP_ETHER = 9, 10, 50, 51
LINKTYPE_C_HDLC, LINKTYPE_NFLOG = 104, 239
LINKTYPE_IEEE802_11, LINKTYPE_RADIOTAP, LINKTYPE_PPI = 105, 127, 192


def _records(data: bytes, order: str = "<") -> list[tuple[int, int]]:
    """(record start, captured length) of each whole record of a classic pcap file."""
    found, position = [], PCAP_HEADER_BYTES
    while position + RECORD_HEADER_BYTES <= len(data):
        caplen = struct.unpack_from(order + "I", data, position + 8)[0]
        if position + RECORD_HEADER_BYTES + caplen > len(data):
            break
        found.append((position, caplen))
        position += RECORD_HEADER_BYTES + caplen
    return found


def _first_records(name: str) -> bytes:
    data = (SAMPLE_TRACES / name).read_bytes()
    position, caplen = _records(data)[RECORDS_KEPT - 1]
    return data[:position + RECORD_HEADER_BYTES + caplen]


def _rewritten(data: bytes, order: str, nanoseconds: bool) -> bytes:
    """A little-endian microsecond pcap's records written in `order`, times in nanoseconds
    if asked (the same packets: what tcpdump -r shows of both is the same)."""
    magic = 0xA1B2_3C4D if nanoseconds else 0xA1B2_C3D4
    header = struct.pack(order + "IHH", magic, 2, 4) + data[8:16]
    header += struct.pack(order + "II", *struct.unpack_from("<II", data, 16))
    body = []
    for position, caplen in _records(data):
        seconds, fraction, _, wire_bytes = struct.unpack_from("<IIII", data, position)
        body.append(struct.pack(order + "IIII", seconds, fraction * 1000 if nanoseconds
                                else fraction, caplen, wire_bytes))
        body.append(data[position + RECORD_HEADER_BYTES:position + RECORD_HEADER_BYTES + caplen])
    return header + b"".join(body)


def _handbuilt_pcapng(frames: list[bytes]) -> bytes:
    """Real Ethernet frames (IPv4 and IPv6) under each link type decoded here, in enhanced,
    simple and obsolete packet blocks, a VLAN tag, two sections of either byte order."""
    ip = [frame[14:] for frame in frames]
    vlan = frames[0][:12] + b"\x81\x00\x00\x05" + frames[0][12:]
    sll = struct.pack(">HHH8sH", 0, 1, 6, b"\x02" * 8, 0x0800)
    sll2 = struct.pack(">HHIHBB8s", 0x0800, 0, 2, 1, 0, 6, b"\x02" * 8)
    body = section() + interface(LINKTYPE_ETHERNET) + interface(LINKTYPE_RAW, nanoseconds=True)
    body += interface(LINKTYPE_NULL, resolution=0x80 | 20, offset_s=7)
    body += packet(frames[0], 1) + packet(vlan, 2) + packet(ip[1], 3_000, interface_id=1)
    body += packet(struct.pack("<I", 2) + ip[2], 4 << 20, interface_id=2)
    body += simple_packet(frames[3]) + obsolete_packet(frames[4], 5)
    body += section(">") + interface(LINKTYPE_SLL, order=">", snaplen=96)
    body += interface(LINKTYPE_SLL2, order=">", snaplen=0)
    body += packet(sll + ip[5][:80], 6, order=">", wire_bytes=len(ip[5]) + 16)
    body += packet(sll2 + ip[6], 7, interface_id=1, order=">", comment="real frame")
    return body


def _in_udp(port: int, payload: bytes) -> bytes:
    """An Ethernet frame of IPv4 (10.9.0.1 -> 10.9.0.2) and UDP to `port`, lengths set."""
    datagram = struct.pack(">HHHH", 50000, port, 8 + len(payload), 0) + payload
    ip = struct.pack(">BBHHHBBH4s4s", 0x45, 0, 20 + len(datagram), 0, 0x4000, 64, 17, 0,
                     bytes([10, 9, 0, 1]), bytes([10, 9, 0, 2]))
    return b"\x02" * 12 + b"\x08\x00" + ip + datagram


def _in_gre(protocol: int, payload: bytes) -> bytes:
    """An Ethernet frame of IPv4 (10.9.0.1 -> 10.9.0.2) and GRE of `protocol`."""
    gre = struct.pack(">HH", 0, protocol) + payload
    ip = struct.pack(">BBHHHBBH4s4s", 0x45, 0, 20 + len(gre), 0, 0x4000, 64, 47, 0,
                     bytes([10, 9, 0, 1]), bytes([10, 9, 0, 2]))
    return b"\x02" * 12 + b"\x08\x00" + ip + gre


def _encapsulated_pcapng(frames: list[bytes]) -> bytes:
    """Real frames' IPv4 packets under the other link types decoded here (PPP framed and not,
    Cisco HDLC, FDDI, NFLOG, PPPoE without Ethernet, 802.11 alone, under radiotap (its data
    padded) and PPI) and inside the other encapsulations (GTP-U with an extension header, GRE
    in UDP, 802.1ah, VN-Tag, LLC/SNAP, Aruba's GRE), one each."""
    ip = [frame[14:] for frame in frames]
    snap = b"\xaa\xaa\x03\x00\x00\x00\x08\x00"
    wlan = b"\x88\x01\x00\x00" + b"\x0a" * 18 + b"\x10\x00\x00\x00"  # QoS data, to the AP
    radiotap = struct.pack("<BBHIQB7x", 0, 0, 24, 0x3, 7, 0x20)
    nflog = b"\x02\x00\x00\x01" + struct.pack("<HH", 4 + len(ip[4]), 9)
    gtp = struct.pack(">BBHI", 0x34, 0xFF, 4 + 4 + len(ip[5]), 1) + b"\x00\x00\x00\x85"
    gtp += b"\x01\x10\x05\x00"
    links = [(LINKTYPE_PPP, b"\xff\x03\x00\x21" + ip[0]), (LINKTYPE_PPP, b"\x21" + ip[1]),
             (LINKTYPE_PPP_HDLC, b"\x0f\x00\x08\x00" + ip[2]),
             (LINKTYPE_C_HDLC, b"\x8f\x00\x08\x00" + ip[3]),
             (LINKTYPE_NFLOG, nflog + ip[4]),
             (LINKTYPE_PPP_ETHER, struct.pack(">BBHH", 0x11, 0, 1, 2 + len(ip[6])) + b"\x00\x21"
              + ip[6]),
             (LINKTYPE_FDDI, b"\x50" * 13 + snap + ip[0]),
             (LINKTYPE_IEEE802_11, wlan + snap + ip[1]),
             (LINKTYPE_RADIOTAP, radiotap + wlan + b"\x00\x00" + snap + ip[2]),
             (LINKTYPE_PPI, struct.pack("<BBHI", 0, 0, 8, LINKTYPE_IEEE802_11) + wlan + snap + ip[3])]
    ethernet = [_in_udp(2152, gtp + ip[5]), _in_udp(4754, b"\x00\x00\x08\x00" + ip[1]),
                frames[2][:12] + b"\x88\xe7\x00\x00\x00\x01" + b"\x02" * 12 + frames[2][12:],
                frames[3][:12] + b"\x89\x26\x00\x00\x00\x00" + frames[3][12:],
                frames[4][:12] + struct.pack(">H", len(snap) + len(ip[4])) + snap + ip[4],
                _in_gre(0x8200, wlan + snap + ip[5])]
    body = section() + b"".join(interface(linktype) for linktype, _ in links)
    body += interface(LINKTYPE_ETHERNET)
    for index, (_, data) in enumerate(links):
        body += packet(data, 10 + index, interface_id=index)
    for index, frame in enumerate(ethernet):
        body += packet(frame, 20 + index, interface_id=len(links))
    return body


def _ipv4_tcp(data: bytes) -> list[bytes]:
    """The Ethernet frames of a little-endian pcap that carry IPv4 TCP."""
    frames = [data[p + RECORD_HEADER_BYTES:p + RECORD_HEADER_BYTES + c] for p, c in _records(data)]
    return [frame for frame in frames if frame[12:14] == b"\x08\x00" and frame[23] == 6]


def _sources() -> dict[str, bytes]:
    ipv4 = _first_records("seed003-nagle.pcap")
    ipv6 = _first_records("seed004-header-body-server.pcap")
    pcapng = (SAMPLE_TRACES / "merged-interfaces.pcapng").read_bytes()[:6000]
    frames = [ipv4[p + RECORD_HEADER_BYTES:p + RECORD_HEADER_BYTES + c]
              for p, c in _records(ipv4)[:7]]
    return {"pcap": ipv4, "pcap-ipv6": ipv6, "pcap-nanoseconds": _rewritten(ipv4, "<", True),
            "pcap-big-endian-ns": _rewritten(ipv6, ">", True), "pcapng": pcapng,
            "pcapng-handbuilt": _handbuilt_pcapng(frames),
            "pcapng-encapsulated": _encapsulated_pcapng(_ipv4_tcp(ipv4))}


SOURCES = _sources()


def _blocks(data: bytes) -> list[tuple[int, int, str]]:
    """(start, length, byte order) of each block of a pcapng file."""
    found, position, order = [], 0, "<"
    while position + 12 <= len(data):
        if data[position:position + 4] == b"\x0a\x0d\x0d\x0a":
            order = ">" if data[position + 8:position + 12] == b"\x1a\x2b\x3c\x4d" else "<"
        length = struct.unpack_from(order + "I", data, position + 4)[0]
        found.append((position, length, order))
        position += length
    return found


def _fields(data: bytes) -> tuple[list[tuple[int, str]], list[int]]:
    """Where a source's 32-bit header fields lie (position, byte order): record and block
    headers, a block's trailing length; and the bytes of its headers and packet headers."""
    words: list[tuple[int, str]] = []
    header_bytes: list[int] = list(range(PCAP_HEADER_BYTES))
    if data[:4] == b"\x0a\x0d\x0d\x0a":
        for start, length, order in _blocks(data):
            words += [(start + at, order) for at in range(0, min(length, 28), 4)]
            words.append((start + length - 4, order))
            header_bytes += range(start, start + min(length, 28 + PACKET_HEADER_BYTES))
        return words, header_bytes
    order = "<" if data[:4] in (b"\xd4\xc3\xb2\xa1", b"\x4d\x3c\xb2\xa1") else ">"
    words += [(at, order) for at in range(8, PCAP_HEADER_BYTES, 4)]
    for start, caplen in _records(data, order):
        words += [(start + at, order) for at in range(0, RECORD_HEADER_BYTES, 4)]
        header_bytes += range(start, start + RECORD_HEADER_BYTES + min(caplen, PACKET_HEADER_BYTES))
    return words, header_bytes


FIELDS = {name: _fields(data) for name, data in SOURCES.items()}

_edit = st.one_of(
    st.tuples(st.just("word"), st.integers(0, 10_000), st.sampled_from(WORDS) | st.integers(0, 2**32 - 1)),
    st.tuples(st.just("byte"), st.integers(0, 100_000), st.integers(0, 255)),
    st.tuples(st.just("flip"), st.integers(0, 100_000), st.integers(0, 7)),
    st.tuples(st.just("insert"), st.integers(0, 100_000), st.integers(1, 16)),
    st.tuples(st.just("delete"), st.integers(0, 100_000), st.integers(1, 16)),
)


def _mutated(name: str, edits: list[tuple[str, int, int]], cut: int | None) -> bytearray:
    """The source with the edits applied in turn (positions taken modulo what they index:
    a header field, a header byte, or any byte for insertions and deletions), then cut."""
    data = bytearray(SOURCES[name])
    words, header_bytes = FIELDS[name]
    for kind, where, value in edits:
        if kind == "word":
            at, order = words[where % len(words)]
            if at + 4 <= len(data):
                struct.pack_into(order + "I", data, at, value)
        elif kind in ("byte", "flip"):
            at = header_bytes[where % len(header_bytes)]
            if at < len(data):
                data[at] = value if kind == "byte" else data[at] ^ (1 << value)
        elif kind == "insert":
            at = where % (len(data) + 1)
            data[at:at] = bytes([where & 0xFF]) * value
        else:
            at = where % max(1, len(data))
            del data[at:at + value]
    return data if cut is None else data[:cut % (len(data) + 1)]


_mutation = st.tuples(st.sampled_from(sorted(SOURCES)), st.lists(_edit, min_size=1, max_size=16),
                      st.none() | st.integers(0, 2**20), st.sampled_from(["plain", "gzip-before",
                                                                           "gzip-after"]))


def _written(tmp_path: Path, mutation: tuple) -> Path:
    """The mutated capture as a file: plain, compressed after mutation (the reader meets the
    damage), or mutated after compression (the decompressor meets it; the edits then land in
    the compressed bytes, the gzip header included)."""
    name, edits, cut, compression = mutation
    if compression == "gzip-after":
        compressed = gzip.compress(SOURCES[name], mtime=0)
        data = bytearray(compressed)
        for kind, where, value in edits:
            if kind in ("byte", "flip", "word"):
                at = where % len(data)
                data[at] = value & 0xFF if kind != "flip" else data[at] ^ (1 << value)
        data = data[:cut % (len(data) + 1)] if cut is not None else data
        suffix = ".pcap.gz"
    else:
        data = _mutated(name, edits, cut)
        if compression == "gzip-before":
            data = bytearray(gzip.compress(bytes(data), mtime=0))
        suffix = ".pcap.gz" if compression == "gzip-before" else ".pcap"
    path = tmp_path / f"mutated{suffix}"
    path.write_bytes(bytes(data))
    return path


@contextmanager
def _watched() -> Iterator[None]:
    """Fail the run, with every thread's stack, if the reader hangs; and the example if it is
    slow."""
    started = time.monotonic()
    faulthandler.dump_traceback_later(HANG_S, exit=True)
    try:
        yield
    finally:
        faulthandler.cancel_dump_traceback_later()
    assert time.monotonic() - started < SLOWEST_EXAMPLE_S


def _assert_refusal(error: Exception) -> None:
    """A refusal is one line of the core's own, never a panic caught on its way out."""
    assert isinstance(error, (_core.CaptureError, _core.FilterError)), repr(error)
    message = str(error)
    assert "\n" not in message and message
    assert "please report this" not in message and "internal error" not in message, message


def _assert_accounted(decoded: dict) -> int:
    """Every row is a packet in file order, its skip code one the report has words for, every
    SACK block a kept row's; returns the rows."""
    packets = decoded["packets"]
    lengths = {len(values) for values in packets.values()}
    assert len(lengths) == 1
    rows = lengths.pop()
    assert np.array_equal(packets["frame"], np.arange(1, rows + 1))
    for code in np.unique(packets["skip"]).tolist():
        if code != skips.KEPT:
            assert skips.reason_text(code)
    sack_rows = decoded["sack_blocks"]["row"]
    assert np.all(sack_rows < rows) and np.all(packets["skip"][sack_rows] == skips.KEPT)
    for warning in decoded["warnings"]:
        assert "\n" not in warning and "please report this" not in warning, warning
    return rows


def _core_reads(path: Path, bpf_filter: str | None, batch_packets: int) -> None:
    """decode_file and Reader agree on how many packets the file holds, or refuse it alike."""
    try:
        whole = _core.decode_file(str(path), bpf_filter=bpf_filter)
    except Exception as error:  # noqa: BLE001 - which refusal it is, is what is checked
        _assert_refusal(error)
        with pytest.raises(type(error)):
            for _ in _core.Reader(str(path), batch_packets=batch_packets, bpf_filter=bpf_filter):
                pass
        return
    rows = _assert_accounted(whole)
    in_batches = 0
    for batch in _core.Reader(str(path), batch_packets=batch_packets, bpf_filter=bpf_filter):
        frames = batch["packets"]["frame"]
        assert np.array_equal(frames, np.arange(in_batches + 1, in_batches + len(frames) + 1))
        in_batches += len(frames)
    assert in_batches == rows


@settings(max_examples=2500, derandomize=True, deadline=None, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(mutation=_mutation, bpf_filter=st.sampled_from(FILTERS), batch_packets=st.integers(1, 9))
def test_mutated_captures_never_panic_the_core(tmp_path: Path, mutation: tuple,
                                               bpf_filter: str | None, batch_packets: int) -> None:
    path = _written(tmp_path, mutation)
    with _watched():
        _core_reads(path, bpf_filter, batch_packets)


def _batches_read(path: Path, bpf_filter: str | None) -> None:
    try:
        for _ in _core.FlowBatches(str(path), bpf_filter, 16, 1 << 40, let_go_packets=1,
                                   settle_first=True):
            pass
    except (_core.CaptureError, _core.FilterError) as error:
        assert "please report this" not in str(error), error


@settings(max_examples=700, derandomize=True, deadline=None, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(mutation=_mutation, bpf_filter=st.sampled_from(FILTERS))
def test_mutated_captures_raise_only_input_errors_when_analysed(
        tmp_path: Path, mutation: tuple, bpf_filter: str | None) -> None:
    """Both ways a capture is read and its connections rebuilt: the compiled core's one pass
    (flows and events included) and the numpy path that large captures still take; and the
    core's pass a batch at a time, each connection letting its packets go as often as it can
    after a first pass has learnt what it is finished with."""
    path = _written(tmp_path, mutation)
    with _watched():
        _batches_read(path, bpf_filter)
    for load in (load_capture, load_capture_numpy):
        with _watched():
            try:
                capture = load(str(path), bpf_filter)
            except InputError as error:
                assert str(error) and "\n" not in str(error)
                assert "please report this" not in str(error)
                continue
        assert capture.accounting.balanced
        if capture.accounting.cut_short:
            assert any(capture.accounting.cut_short in w for w in capture.accounting.warnings)


@settings(max_examples=800, derandomize=True, deadline=None, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(head=st.sampled_from([SOURCES["pcap"][:PCAP_HEADER_BYTES],
                             SOURCES["pcap-big-endian-ns"][:PCAP_HEADER_BYTES],
                             SOURCES["pcapng-handbuilt"][:28]]),
       body=st.binary(max_size=3000))
def test_random_bytes_after_a_file_header_never_panic_the_core(tmp_path: Path, head: bytes,
                                                               body: bytes) -> None:
    path = tmp_path / "random.pcap"
    path.write_bytes(head + body)
    with _watched():
        _core_reads(path, None, 4)


def test_the_sources_are_read_whole_by_both_paths(tmp_path: Path) -> None:
    """Unmutated, each source is read whole by both paths: the same packet count (the records
    kept, or for the hand-built pcapng its 8 packet blocks, counted in `_handbuilt_pcapng`),
    so the mutations start from captures both read; the pcap files with no warning; every
    packet of the encapsulated one (10 links, 6 encapsulations) decoded as TCP."""
    expected = {"pcap": RECORDS_KEPT, "pcap-ipv6": RECORDS_KEPT, "pcap-nanoseconds": RECORDS_KEPT,
                "pcap-big-endian-ns": RECORDS_KEPT, "pcapng-handbuilt": 8,
                "pcapng-encapsulated": 16}
    for name, data in SOURCES.items():
        path = tmp_path / f"{name}.pcap"
        path.write_bytes(data)
        decoded = _core.decode_file(str(path))
        capture = load_capture(str(path))
        assert decoded["warnings"] == [] or name == "pcapng", (name, decoded["warnings"])
        assert len(decoded["packets"]["frame"]) == capture.accounting.packets_read, name
        if name in expected:
            assert capture.accounting.packets_read == expected[name], name
            assert capture.accounting.cut_short is None, name
        if name.startswith("pcap-") or name == "pcap":
            assert capture.accounting.warnings == [], name
        if name == "pcapng-encapsulated":
            assert capture.accounting.tcp_packets == expected[name]
