"""The compiled core's BPF `--filter` (core/src/bpf.rs) against tcpdump.

tcpdump is the reference: `tcpdump -r F -w OUT FILTER` writes the packets its filter accepts,
and those must be, byte for byte and in order, the packets of F whose `accepted` the core sets
(both files' packets read by scapy's raw reader, an independent one). The analysis in parts
reads through the same filter (`decoded_batches`): the same TCP frames, the same excluded.
"""

from __future__ import annotations

import bz2
import gzip
import lzma
import struct
import subprocess
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from scapy.utils import RawPcapReader

from nagledetect.errors import InputError
from nagledetect.read import skips
from nagledetect.read.capture import decoded_batches
from nagledetect.read.columns import LINKTYPE_ETHERNET
from tests.conftest import CORPORA, SAMPLE_TRACES, require_tool
from tests.pcapng_builder import interface, obsolete_packet, packet, section, simple_packet

_core = pytest.importorskip("nagledetect._core")

FILTERS = ["tcp port 9000", "src host 10.77.0.1", "tcp[tcpflags] & tcp-syn != 0", "udp",
           "vlan and tcp", "pppoes and tcp"]
CORPUS_FILTERS = [*FILTERS, "vlan and vlan and pppoes and tcp", "vlan and vlan and vlan and tcp",
                  "ip6", "tcp port 80"]
"""Also each encapsulation of the corpus files in full (libpcap's `vlan` and `pppoes` move its
offsets past one tag or header each, so `vlan and tcp` takes no PPPoE or double-tagged frame),
and IPv6 on BSD loopback."""
SAMPLE_CAPTURES = sorted(p.name for p in SAMPLE_TRACES.glob("*.pcap"))
CORPUS_CAPTURES = [
    # VLAN, QinQ and PPPoE: the encapsulations `vlan` and `pppoes` look into.
    "zeek/pppoe-over-qinq.pcap", "zeek/http-vlan-0.pcap", "zeek/q-in-q.pcap",
    "zeek/vlan-qinqinq.pcap", "zeek/vlan-pcp-dei.pcapng", "tcpdump/pppoes.pcap",
    "tcpdump/802.1ad_QinQ.pcap",
    # Every other link type the core decodes: Linux cooked v1 and v2, BSD loopback, raw IP
    # (228 and 12); Ethernet with UDP beside TCP; and a damaged file's ATM (LINKTYPE 106,
    # libpcap's DLT 19 on Linux).
    "tcpdump/resp_1_benchmark.pcap", "zeek/tls__openjdk-25.0.2-zeek.org.pcap",
    "zeek/http__connect-with-header.pcap",
    "zeek/http__261__variant-01-chunk_2pow64_overflow.pcap", "zeek/rotation.pcap",
    "tcpdump/mptcp-v1.pcap", "tcpdump/bgp-4byte-asn.pcap", "tcpdump/heap-overflow-2.pcap",
]
MERGED = SAMPLE_TRACES / "merged-interfaces.pcapng"
COMPRESSORS: dict[str, Callable[[bytes], bytes]] = {
    "gzip": gzip.compress, "bzip2": bz2.compress, "xz": lzma.compress}


def _raw_packets(path: Path) -> list[bytes]:
    """Every packet of a capture as scapy's raw reader reads it (no filter), in file order."""
    with RawPcapReader(str(path)) as reader:
        return [bytes(data) for data, _ in reader]


def _tcpdump(path: Path, expression: str, out: Path) -> subprocess.CompletedProcess:
    return subprocess.run([require_tool("tcpdump"), "-r", str(path), "-w", str(out), expression],
                          capture_output=True, text=True, timeout=60, check=False)


def _assert_agree(path: Path, expression: str, tmp_path: Path) -> None:
    out = tmp_path / "accepted.pcap"
    tcpdump = _tcpdump(path, expression, out)
    try:
        decoded = _core.decode_file(str(path), expression)
    except _core.FilterError as error:
        # A filter libpcap refuses for the file's link type: tcpdump too.
        assert tcpdump.returncode != 0
        assert str(error).split(": ", 1)[1] in tcpdump.stderr
        with pytest.raises(InputError, match="invalid filter"):
            decoded_batches(str(path), expression)
        return
    assert tcpdump.returncode == 0, tcpdump.stderr
    accepted = decoded["packets"]["accepted"]
    raw = _raw_packets(path)
    assert len(accepted) == len(raw)
    assert [data for data, kept in zip(raw, accepted) if kept] == _raw_packets(out)
    assert decoded["excluded_by_filter"] == int((~accepted).sum())
    # What streams.py takes: the TCP rows, excluded ones included, each with `accepted`.
    accounting, batches = decoded_batches(str(path), expression)
    parts_rows = [(batch["frame"], batch["accepted"]) for batch, _ in batches]
    tcp = decoded["packets"]["skip"] == skips.KEPT
    frames = np.concatenate([np.zeros(0, np.uint32), *(f for f, _ in parts_rows)])
    tcp_accepted = np.concatenate([np.zeros(0, bool), *(a for _, a in parts_rows)])
    assert np.array_equal(decoded["packets"]["frame"][tcp], frames)
    assert np.array_equal(accepted[tcp], tcp_accepted)
    assert accounting.skipped.get("excluded by filter", 0) == decoded["excluded_by_filter"]


@pytest.mark.parametrize("expression", FILTERS)
@pytest.mark.parametrize("name", SAMPLE_CAPTURES)
def test_sample_traces_filter_as_tcpdump(name: str, expression: str, tmp_path: Path) -> None:
    _assert_agree(SAMPLE_TRACES / name, expression, tmp_path)


@pytest.mark.parametrize("expression", CORPUS_FILTERS)
@pytest.mark.parametrize("relative", CORPUS_CAPTURES)
def test_corpus_captures_filter_as_tcpdump(relative: str, expression: str, tmp_path: Path
                                           ) -> None:
    path = CORPORA / relative
    if not path.exists():
        pytest.skip(f"corpus file {relative} not present")
    _assert_agree(path, expression, tmp_path)


def test_loopback_ipv6_as_tcpdump_not_as_a_live_capture() -> None:
    """http__connect-with-header: 58 IPv6 frames on BSD loopback, address family 30 (macOS;
    `tcpdump -xx` shows 1e00 0000 first); tcpdump's `ip6` takes all 58 (`-w` then counted),
    where libpcap compiling for a live capture would test Linux's AF_INET6 (10) and take none."""
    path = CORPORA / "zeek/http__connect-with-header.pcap"
    if not path.exists():
        pytest.skip("corpus file zeek/http__connect-with-header.pcap not present")
    accepted = _core.decode_file(str(path), "ip6")["packets"]["accepted"]
    assert (len(accepted), int(accepted.sum())) == (58, 58)


def test_the_filters_select_what_tcpdump_counts() -> None:
    """The comparisons above are not empty: the counts are `tcpdump -nr F FILTER | wc -l`'s."""
    expected = {
        ("seed003-nagle.pcap", "tcp port 9000"): (234, 12),
        ("seed003-nagle.pcap", "src host 10.77.0.1"): (100, 146),
        ("seed003-nagle.pcap", "tcp[tcpflags] & tcp-syn != 0"): (2, 244),
        # tshark: all 86 frames are eth:vlan:vlan:pppoes:ppp:ip:tcp.
        ("zeek/pppoe-over-qinq.pcap", "vlan and vlan and pppoes and tcp"): (86, 0),
        ("zeek/pppoe-over-qinq.pcap", "vlan and tcp"): (0, 86),
        ("zeek/http-vlan-0.pcap", "vlan and tcp"): (14, 0),
        ("zeek/vlan-qinqinq.pcap", "vlan and vlan and vlan and tcp"): (14, 0),
    }
    for (name, expression), (accepted, excluded) in expected.items():
        path = SAMPLE_TRACES / name if name.startswith("seed") else CORPORA / name
        if not path.exists():
            continue
        decoded = _core.decode_file(str(path), expression)
        found = (int(decoded["packets"]["accepted"].sum()), decoded["excluded_by_filter"])
        assert found == (accepted, excluded), (name, expression)


@pytest.mark.parametrize("bpf_filter, kept", [("tcp port 7007", 69), ("tcp port 9000", 234)])
def test_a_program_for_each_pcapng_link_type(bpf_filter: str, kept: int) -> None:
    """merged-interfaces.pcapng: a loopback connection (port 7007, Linux cooked v2) after
    seed003's (port 9000, Ethernet), 315 frames; tshark counts 69 and 234 (`-Y tcp.port==7007`,
    `-Y tcp.port==9000`). tcpdump refuses the file (its second interface's link type differs),
    so tshark's display filter on the same port is the witness, frame by frame."""
    decoded = _core.decode_file(str(MERGED), bpf_filter)
    accepted = decoded["packets"]["accepted"]
    assert (int(accepted.sum()), decoded["excluded_by_filter"]) == (kept, 315 - kept)
    port = bpf_filter.rsplit(" ", 1)[1]
    shown = subprocess.run([require_tool("tshark"), "-r", str(MERGED), "-Y", f"tcp.port=={port}",
                            "-T", "fields", "-e", "frame.number"], capture_output=True,
                           text=True, check=True).stdout.split()
    assert decoded["packets"]["frame"][accepted].tolist() == [int(frame) for frame in shown]


def test_an_interface_libpcap_cannot_filter_accepts_nothing(tmp_path: Path) -> None:
    """A DLT_USER0 interface (147; libpcap: "link-layer type filtering not implemented")
    after an Ethernet one: its packet is excluded, not an error."""
    seed003 = SAMPLE_TRACES / "seed003-nagle.pcap"
    tcp = _core.decode_file(str(seed003))["packets"]["skip"] == skips.KEPT
    first = _raw_packets(seed003)[int(np.argmax(tcp))]
    body = section() + interface(1) + interface(147) + packet(first, 1) + packet(first, 2, 1)
    path = tmp_path / "user0.pcapng"
    path.write_bytes(body)
    decoded = _core.decode_file(str(path), "tcp")
    assert decoded["packets"]["accepted"].tolist() == [True, False]
    assert decoded["excluded_by_filter"] == 1


@pytest.mark.parametrize("expression, message", [
    ("tcp port banana", "unknown port 'banana'"),
    ("tcp and", "can't parse filter expression: syntax error"),
])
def test_a_bad_filter_raises_libpcaps_message(expression: str, message: str, tmp_path: Path
                                              ) -> None:
    """One error (tcpdump prints libpcap's message after "tcpdump: "), the same read in parts;
    a capture without packets refuses it too, and so does the Reader."""
    path = SAMPLE_TRACES / "seed003-nagle.pcap"
    with pytest.raises(_core.FilterError) as core_error:
        _core.decode_file(str(path), expression)
    with pytest.raises(InputError) as parts_error:
        decoded_batches(str(path), expression)
    assert str(core_error.value) == str(parts_error.value)
    assert f"invalid filter {expression!r}: {message}" in str(core_error.value)
    assert message in _tcpdump(path, expression, tmp_path / "out.pcap").stderr
    empty = tmp_path / "empty.pcap"
    empty.write_bytes(path.read_bytes()[:24])
    with pytest.raises(_core.FilterError, match=message):
        _core.decode_file(str(empty), expression)
    for capture in (path, empty):
        with pytest.raises(_core.FilterError) as reader_error:
            list(_core.Reader(str(capture), 7, bpf_filter=expression))
        assert str(reader_error.value) == str(core_error.value)


def test_without_a_filter_nothing_is_excluded() -> None:
    decoded = _core.decode_file(str(SAMPLE_TRACES / "seed003-nagle.pcap"))
    assert "accepted" not in decoded["packets"]
    assert decoded["excluded_by_filter"] == 0


@pytest.mark.parametrize("relative", ["tcpdump/dhcp-rfc3004.pcap",
                                      "tcpdump/dhcpv4v6-rfc5970-rfc8572.pcap"])
def test_ip_broadcast_as_tcpdump_reading_a_file(relative: str, tmp_path: Path) -> None:
    """tcpdump reading a file compiles with netmask 0, so `ip broadcast` takes 255.255.255.255
    and 0.0.0.0 (2 of 4 and 2 of 14 packets in tcpdump: the DHCP requests), where libpcap
    compiling with an unknown netmask would refuse the expression."""
    path = CORPORA / relative
    if not path.exists():
        pytest.skip(f"corpus file {relative} not present")
    out = tmp_path / "accepted.pcap"
    assert _tcpdump(path, "ip broadcast", out).returncode == 0
    accepted = _core.decode_file(str(path), "ip broadcast")["packets"]["accepted"]
    assert int(accepted.sum()) == 2
    kept = [data for data, accepts in zip(_raw_packets(path), accepted) if accepts]
    assert kept == _raw_packets(out)


def test_length_predicates_judge_the_length_on_the_wire(tmp_path: Path) -> None:
    """classic-stream was captured with a snapshot length of 128: tcpdump's `greater 200`
    takes the 23 packets longer than that on the wire (`tcpdump -nr F 'greater 200' | wc -l`),
    which libpcap's filter machine sees only when told the length on the wire."""
    path = SAMPLE_TRACES / "classic-stream.pcap"
    accepted = _core.decode_file(str(path), "greater 200")["packets"]["accepted"]
    assert int(accepted.sum()) == 23


def test_each_pcapng_packet_block_gives_the_filter_its_length_on_the_wire(tmp_path: Path) -> None:
    """The first real frames of seed003 longer than 60 bytes (frames 1, 2 and 5: 86, 110 and
    74 bytes on the wire in `tshark -r F -T fields -e frame.len`), cut to a snapshot
    length of 60, in an enhanced, an obsolete and a simple packet block of a big-endian
    section: `greater 80` takes the first two, as tcpdump does on the same file."""
    frames = [frame for frame in _raw_packets(SAMPLE_TRACES / "seed003-nagle.pcap")
              if len(frame) > 60][:3]
    assert [len(frame) for frame in frames] == [86, 110, 74]
    body = section(">") + interface(LINKTYPE_ETHERNET, order=">", snaplen=60)
    body += packet(frames[0][:60], 1, order=">", wire_bytes=len(frames[0]))
    body += obsolete_packet(frames[1][:60], 2, order=">", wire_bytes=len(frames[1]))
    body += simple_packet(frames[2][:60], order=">", wire_bytes=len(frames[2]))
    path = tmp_path / "snapped.pcapng"
    path.write_bytes(body)
    accepted = _core.decode_file(str(path), "greater 80")["packets"]["accepted"]
    assert accepted.tolist() == [True, True, False]
    done = _tcpdump(path, "greater 80", tmp_path / "out.pcap")
    assert done.returncode == 0, done.stderr
    assert len(_raw_packets(tmp_path / "out.pcap")) == 2


def _accepted_in_batches(path: Path, expression: str, batch_packets: int) -> tuple[np.ndarray, int]:
    """The frames the filter accepts, read by `_core.Reader` in batches, and the batches'
    `excluded_by_filter` summed (each checked against its own `accepted`)."""
    frames, excluded = [np.zeros(0, np.uint32)], 0
    for batch in _core.Reader(str(path), batch_packets, bpf_filter=expression):
        packets = batch["packets"]
        assert 0 < len(packets["frame"]) <= batch_packets
        assert batch["excluded_by_filter"] == int((~packets["accepted"]).sum())
        frames.append(packets["frame"][packets["accepted"]])
        excluded += batch["excluded_by_filter"]
    return np.concatenate(frames), excluded


@pytest.mark.parametrize("compression", COMPRESSORS)
@pytest.mark.parametrize("name, expression, kept", [
    ("seed003-nagle.pcap", "tcp port 9000", 234), ("merged-interfaces.pcapng", "tcp port 7007", 69)])
def test_a_filter_through_compressed_input_and_batches(tmp_path: Path, name: str,
                                                       expression: str, kept: int,
                                                       compression: str) -> None:
    """The filter kept across batches of 7 and read through gzip, bzip2 and xz accepts the
    frames decode_file accepts on the plain file (234 and 69: tcpdump's and tshark's counts in
    the tests above), and the batches' excluded counts add up to decode_file's."""
    original = SAMPLE_TRACES / name
    whole = _core.decode_file(str(original), expression)
    expected = whole["packets"]["frame"][whole["packets"]["accepted"]]
    assert len(expected) == kept
    copy = tmp_path / f"{name}.{compression}"
    copy.write_bytes(COMPRESSORS[compression](original.read_bytes()))
    compressed = _core.decode_file(str(copy), expression)
    assert np.array_equal(compressed["packets"]["accepted"], whole["packets"]["accepted"])
    for path in (original, copy):
        frames, excluded = _accepted_in_batches(path, expression, 7)
        assert np.array_equal(frames, expected)
        assert excluded == whole["excluded_by_filter"]


def _written_big_endian(data: bytes) -> bytes:
    """A little-endian BSD loopback pcap as a big-endian host writes it: file and record
    headers, and each packet's address family word (written in the host's order), swapped."""
    out = [struct.pack(">IHHiIII", *struct.unpack_from("<IHHiIII", data))]
    position = 24
    while position + 16 <= len(data):
        seconds, micro, caplen, wire = struct.unpack_from("<IIII", data, position)
        start = position + 16
        family = struct.unpack_from("<I", data, start)[0]
        out += [struct.pack(">IIIII", seconds, micro, caplen, wire, family),
                data[start + 4:start + caplen]]
        position = start + caplen
    return b"".join(out)


def test_a_compressed_big_endian_capture_is_filtered_in_its_byte_order(tmp_path: Path) -> None:
    """http__connect-with-header written big-endian (its 58 packets' family 30 as 00 00 00 1e):
    tcpdump's `ip6` takes all 58 (`tcpdump -nr F ip6 | wc -l`). Gzipped, the file's first bytes
    are gzip's, so only the header the reader decompresses tells the filter the byte order;
    compiled for little-endian, `ip6` would take none (bpf.rs's loopback test)."""
    source = CORPORA / "zeek/http__connect-with-header.pcap"
    if not source.exists():
        pytest.skip("corpus file zeek/http__connect-with-header.pcap not present")
    plain = tmp_path / "big-endian.pcap"
    plain.write_bytes(_written_big_endian(source.read_bytes()))
    out = tmp_path / "accepted.pcap"
    assert _tcpdump(plain, "ip6", out).returncode == 0
    assert len(_raw_packets(out)) == 58
    copy = tmp_path / "big-endian.pcap.gz"
    copy.write_bytes(gzip.compress(plain.read_bytes()))
    decoded = _core.decode_file(str(copy), "ip6")
    assert (int(decoded["packets"]["accepted"].sum()), decoded["excluded_by_filter"]) == (58, 0)
    frames, excluded = _accepted_in_batches(copy, "ip6", 7)
    assert (len(frames), excluded) == (58, 0)
