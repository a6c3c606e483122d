"""The compiled core's reading (`nagledetect._core`, core/): whole (`decode_file`), a batch at a
time (`Reader`), and as the analysis in parts reads it (`read/capture.py`'s `decoded_batches`),
on every sample trace and every capture of the shared corpora, and on damaged, compressed and
hand-built captures whose expected packets are worked out here. Its fields are checked against
tshark, an independent decoder, in tests/test_read_vs_tshark.py; the numpy decoder it replaced
was proven equal to it on every one of these captures before it was removed.
"""

from __future__ import annotations

import bz2
import gzip
import lzma
import struct
import subprocess
import sys
import zlib
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nagledetect.errors import InputError
from nagledetect.flows.compiled import compiled_flows
from nagledetect.read import skips
from nagledetect.read.capture import decoded_batches
from nagledetect.read.columns import LINKTYPE_ETHERNET, LINKTYPE_LINUX_SLL2
from tests.conftest import CORPORA, SAMPLE_TRACES, corpus_file, require_tool
from tests.pcapng_builder import (
    block,
    interface,
    obsolete_packet,
    packet,
    real_frames,
    section,
    simple_packet,
)

_core = pytest.importorskip("nagledetect._core")

SAMPLE_CAPTURES = sorted(p.name for p in SAMPLE_TRACES.glob("*.pcap*"))
PCAP_HEADER_BYTES = 24
RECORD_HEADER_BYTES = 16
DAMAGED_CAPLEN = 270_532_608
"""A record header claiming 258 MiB, as the randomly corrupted Zeek captures of issue 34 hold."""


def _in_batches(path: Path, batch_packets: int) -> dict:
    """The capture read by `_core.Reader` in batches, joined into what `decode_file` gives
    (each batch's SACK rows moved past the packets of the batches before)."""
    reader = _core.Reader(str(path), batch_packets)
    batches = list(reader)
    assert all(0 < len(batch["packets"]["frame"]) <= batch_packets for batch in batches)
    counts = np.cumsum([0, *(len(batch["packets"]["frame"]) for batch in batches)])
    if not batches:
        # No batch: no packet, or the rows decode_file finds show the difference.
        whole = _core.decode_file(str(path))["packets"]
        return {"packets": {name: values[:0] for name, values in whole.items()},
                "warnings": reader.warnings,
                "sack_blocks": {"row": np.zeros(0, np.int64), "left_raw": np.zeros(0, np.uint32),
                                "right_raw": np.zeros(0, np.uint32)}}
    joined = {part: {name: np.concatenate([batch[part][name] for batch in batches])
                     for name in batches[0][part]} for part in ("packets", "sack_blocks")}
    joined["sack_blocks"]["row"] = np.concatenate(
        [batch["sack_blocks"]["row"] + first for batch, first in zip(batches, counts)])
    joined["warnings"] = reader.warnings
    return joined


def _same_decoding(one: dict, other: dict) -> bool:
    """Whether two decodings hold the same packets, SACK blocks (values and dtypes) and
    warnings."""
    return one["warnings"] == other["warnings"] and all(
        one[part].keys() == other[part].keys()
        and all(np.array_equal(one[part][name], other[part][name])
                and one[part][name].dtype == other[part][name].dtype for name in one[part])
        for part in ("packets", "sack_blocks"))


def _differences(path: Path, batch_packets: int | None = None) -> list[str]:
    """What differs between the core's ways of reading one capture (empty: they agree; a file
    all of them refuse agrees): whole and in batches of `batch_packets`; and as the analysis
    in parts reads it, whose TCP packets must be the whole read's and whose accounting must be
    the one pass's (`compiled_flows`), so that a capture gives one document however it is
    analysed."""
    try:
        decoded = _core.decode_file(str(path))
    except _core.CaptureError:
        with pytest.raises(_core.CaptureError):
            _core.Reader(str(path))
        with pytest.raises(InputError):
            decoded_batches(str(path))
        return []
    found = []
    if batch_packets is not None and not _same_decoding(_in_batches(path, batch_packets),
                                                        decoded):
        found.append(f"batches of {batch_packets} differ from decode_file")
    accounting, batches = decoded_batches(str(path))
    frames = [columns["frame"] for columns, _ in batches]
    packets = decoded["packets"]
    tcp_frames = packets["frame"][packets["skip"] == skips.KEPT]
    if not np.array_equal(np.concatenate([tcp_frames[:0], *frames]), tcp_frames):
        found.append("TCP packets of decoded_batches")
    _, one_pass = compiled_flows(str(path), packets=False)
    if accounting != one_pass:
        found.append(f"accounting {accounting}, one pass {one_pass}")
    return found


@pytest.mark.parametrize("batch_packets", [None, 1, 7, 1000])
@pytest.mark.parametrize("name", SAMPLE_CAPTURES)
def test_sample_traces_read_alike_every_way(name: str, batch_packets: int | None) -> None:
    """Whole (decode_file) and in batches of 1, 7 and 1,000 packets (Reader)."""
    assert _differences(SAMPLE_TRACES / name, batch_packets) == []


@pytest.mark.parametrize("batch_packets", [None, 7])
@pytest.mark.parametrize("corpus", ["tcpdump", "zeek"])
def test_every_corpus_capture_reads_alike_every_way(corpus: str,
                                                    batch_packets: int | None) -> None:
    """Every file of the corpus (tcpdump's holds its fuzzed and damaged regression captures:
    odd link types, FCS bits in the link-type field, nanosecond fractions past a second),
    whole and in batches of 7 packets."""
    folder = CORPORA / corpus
    if not folder.is_dir():
        pytest.skip(f"corpus {corpus} not present")
    files = sorted(p for p in folder.iterdir() if p.is_file() and p.suffix != ".md")
    differing = {p.name: found for p in files if (found := _differences(p, batch_packets))}
    assert differing == {}, f"{len(files) - len(differing)} of {len(files)} agree"


def test_each_pcapng_packet_is_read_by_its_own_interface() -> None:
    """merged-interfaces.pcapng (mergecap of an Ethernet capture and a Linux cooked v2 one
    with nanosecond stamps, interleaved; libpcap refuses it after its first interface): each
    packet's link type is its interface's and its time its interface's clock, as tshark reads
    them (`capinfos`: interface 0 Ethernet, 1 SLL2 with resolution 10^-9)."""
    path = SAMPLE_TRACES / "merged-interfaces.pcapng"
    tshark = require_tool("tshark")
    fields = subprocess.run([tshark, "-r", str(path), "-T", "fields", "-e", "frame.interface_id",
                             "-e", "frame.time_epoch"], capture_output=True, text=True,
                            check=True).stdout.split()
    interfaces = np.array(fields[0::2], dtype=np.int64)
    whole_s, fraction = zip(*(stamp.split(".") for stamp in fields[1::2]))
    time_us = np.array(whole_s, dtype=np.int64) * 1_000_000 + np.array(
        [digits[:6] for digits in fraction], dtype=np.int64)
    packets = _core.decode_file(str(path))["packets"]
    assert len(set(interfaces.tolist())) == 2
    assert np.array_equal(packets["linktype"],
                          np.where(interfaces == 0, LINKTYPE_ETHERNET, LINKTYPE_LINUX_SLL2))
    assert np.array_equal(packets["time_us"], time_us)
    assert np.array_equal(packets["frame"], np.arange(1, len(interfaces) + 1))


def test_pcapng_byte_orders_clocks_and_every_packet_block(tmp_path: Path) -> None:
    """The hand-built file of tests/test_pcapng_reader.py (cases no capture here has, around
    real packets): a big-endian section whose interface counts 2^-20 s ticks from an offset of
    100 s, with an enhanced, an obsolete and a simple packet block (no time: 0), then a
    little-endian section with a nanosecond interface. Times worked out by hand there."""
    frames = real_frames(8)[4:]
    ticks = (5 << 20) + (1 << 19)  # 5.5 s
    body = section(">") + interface(LINKTYPE_ETHERNET, order=">", resolution=0x80 | 20,
                                    offset_s=100)
    body += packet(frames[0][1], ticks, order=">")
    body += obsolete_packet(frames[1][1], ticks + (1 << 10), order=">")
    body += simple_packet(frames[2][1], order=">")
    body += section() + interface(LINKTYPE_ETHERNET, nanoseconds=True)
    body += packet(frames[3][1], 1_700_000_000_123_456_789)
    path = tmp_path / "orders.pcapng"
    path.write_bytes(body)
    decoded = _core.decode_file(str(path))
    assert decoded["packets"]["time_us"].tolist() == [105_500_000, 105_500_976, 0,
                                                       1_700_000_000_123_456]
    assert decoded["warnings"] == []
    assert _differences(path) == []


@pytest.mark.parametrize("damage", [
    struct.pack("<II", 6, 7) + b"\0" * 8,
    packet(b"\x00" * 60, 0, interface_id=3),
])
def test_a_damaged_pcapng_block_ends_the_read_where_it_lies(tmp_path: Path, damage: bytes) -> None:
    """A block of length 7 (not a multiple of 4), or a packet naming an interface its section
    lacks: the three packets before it are kept, with a warning, read whole or in batches of
    one, two or seven (the damage inside a batch or at its start)."""
    frames = real_frames(4)
    body = section() + interface(LINKTYPE_ETHERNET)
    body += b"".join(packet(data, time_us) for time_us, data in frames[:3])
    path = tmp_path / "damaged.pcapng"
    path.write_bytes(body + damage + packet(frames[3][1], frames[3][0]))
    decoded = _core.decode_file(str(path))
    assert len(decoded["packets"]["frame"]) == 3 and len(decoded["warnings"]) == 1
    for batch_packets in (1, 2, 7):
        assert _differences(path, batch_packets) == []


def _records(data: bytes) -> list[tuple[int, int]]:
    """(header position, captured length) of every record of a little-endian classic pcap."""
    found, position = [], PCAP_HEADER_BYTES
    while position + RECORD_HEADER_BYTES <= len(data):
        caplen = struct.unpack_from("<I", data, position + 8)[0]
        found.append((position, caplen))
        position += RECORD_HEADER_BYTES + caplen
    return found


def _big_endian_nanoseconds(data: bytes) -> bytes:
    """The same capture written big-endian with nanosecond stamps (each microsecond stamp
    times 1,000 plus 999 ns, which truncation must drop again)."""
    magic, major, minor, zone, sigfigs, snaplen, linktype = struct.unpack_from("<IHHiIII", data)
    assert magic == 0xA1B2C3D4
    out = [struct.pack(">IHHiIII", 0xA1B23C4D, major, minor, zone, sigfigs, snaplen, linktype)]
    for position, caplen in _records(data):
        seconds, micro, _, wire = struct.unpack_from("<IIII", data, position)
        out.append(struct.pack(">IIII", seconds, micro * 1000 + 999, caplen, wire))
        start = position + RECORD_HEADER_BYTES
        out.append(data[start:start + caplen])
    return b"".join(out)


def test_big_endian_nanosecond_pcap_gives_the_same_packets(tmp_path: Path) -> None:
    original = SAMPLE_TRACES / "seed003-nagle.pcap"
    converted = tmp_path / "big-endian-nano.pcap"
    converted.write_bytes(_big_endian_nanoseconds(original.read_bytes()))
    before = _core.decode_file(str(original))["packets"]
    after = _core.decode_file(str(converted))["packets"]
    assert before.keys() == after.keys()
    for name, values in before.items():
        assert np.array_equal(values, after[name]), name
    assert _differences(converted) == []


def test_a_damaged_record_header_ends_the_read_there(tmp_path: Path) -> None:
    """Record 40 of seed003-nagle.pcap made to claim 258 MiB: the 39 packets before it are
    decoded, with a warning, as libpcap reads them (tcpdump -r stops there too)."""
    data = bytearray((SAMPLE_TRACES / "seed003-nagle.pcap").read_bytes())
    position, _ = _records(bytes(data))[39]
    struct.pack_into("<I", data, position + 8, DAMAGED_CAPLEN)
    damaged = tmp_path / "damaged.pcap"
    damaged.write_bytes(bytes(data))
    decoded = _core.decode_file(str(damaged))
    assert len(decoded["packets"]["frame"]) == 39
    assert len(decoded["warnings"]) == 1 and "record 40" in decoded["warnings"][0]
    assert _differences(damaged) == []


def test_a_file_cut_inside_a_record_keeps_the_records_before(tmp_path: Path) -> None:
    data = (SAMPLE_TRACES / "seed003-nagle.pcap").read_bytes()
    position, _ = _records(data)[10]
    cut = tmp_path / "cut.pcap"
    cut.write_bytes(data[:position + RECORD_HEADER_BYTES + 5])
    decoded = _core.decode_file(str(cut))
    assert len(decoded["packets"]["frame"]) == 10
    assert "record 11" in decoded["warnings"][0]
    assert _differences(cut) == []


@pytest.mark.parametrize(("content", "words"), [
    (b"", "empty file"),
    (b"GET / HTTP/1.1\r\n\r\n", "not a pcap or pcapng capture"),
    (b"\xd4\xc3\xb2\xa1\x02\x00", "truncated pcap file header"),
    (b"\x28\xb5\x2f\xfd" + bytes(20), "compressed with zstd: decompress it"),
    (gzip.compress(b"GET / HTTP/1.1\r\n\r\n", mtime=0), "not a pcap or pcapng capture"),
    (b"\x1f\x8b\x08\x00" + bytes(40), "damaged gzip data"),
])
def test_a_file_that_is_not_a_capture_raises_one_clear_error(tmp_path: Path, content: bytes,
                                                            words: str) -> None:
    path = tmp_path / "input"
    path.write_bytes(content)
    with pytest.raises(_core.CaptureError) as raised:
        _core.decode_file(str(path))
    message = str(raised.value)
    assert message.startswith(f"{path}: ") and words in message and "\n" not in message


def test_a_missing_file_raises_one_clear_error(tmp_path: Path) -> None:
    with pytest.raises(_core.CaptureError, match="no such file"):
        _core.decode_file(str(tmp_path / "absent.pcap"))


COMPRESSORS: dict[str, Callable[[bytes], bytes]] = {
    "gzip": gzip.compress,
    # Level 1: 100 kB blocks, so that a cut stream still holds whole blocks.
    "bzip2": lambda data: bz2.compress(data, compresslevel=1),
    "xz": lzma.compress,
}
LARGER_THAN_THE_BUFFER_BYTES = 1 << 20
"""The core's read buffer starts at 1 MiB: a capture larger than this is read in refills."""


def _compressed_copy(original: Path, compression: str, folder: Path, pieces: int = 1) -> Path:
    """The capture compressed, as `pieces` streams one after another (as `gzip -c >>`
    appends them)."""
    data = original.read_bytes()
    bounds = [len(data) * piece // pieces for piece in range(pieces + 1)]
    copy = folder / f"{original.name}.{pieces}.{compression}"
    copy.write_bytes(b"".join(COMPRESSORS[compression](data[start:stop])
                              for start, stop in zip(bounds[:-1], bounds[1:])))
    return copy


@pytest.fixture(scope="module")
def larger_capture(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """About 3.6 MB of real packets (seed003-nagle.pcap replicated by
    benchmarks/make_large_capture.py), more than the read buffer holds."""
    path = tmp_path_factory.mktemp("larger") / "larger.pcap"
    subprocess.run([sys.executable, "benchmarks/make_large_capture.py",
                    str(SAMPLE_TRACES / "seed003-nagle.pcap"), str(path), "--packets", "40000"],
                   check=True, capture_output=True, cwd=Path(__file__).parent.parent)
    assert path.stat().st_size > 3 * LARGER_THAN_THE_BUFFER_BYTES
    return path


@pytest.mark.parametrize("batch_packets", [None, 1000])
def test_a_capture_larger_than_the_buffer_reads_alike_every_way(
        larger_capture: Path, batch_packets: int | None) -> None:
    assert _differences(larger_capture, batch_packets) == []


@pytest.mark.parametrize("compression", COMPRESSORS)
@pytest.mark.parametrize("name", ["seed003-nagle.pcap", "trap-bulk.pcap", "mixed.pcap",
                                  "merged-interfaces.pcapng"])
def test_a_compressed_capture_decodes_as_its_original(tmp_path: Path, name: str,
                                                      compression: str) -> None:
    original = SAMPLE_TRACES / name
    expected = _core.decode_file(str(original))
    copy = _compressed_copy(original, compression, tmp_path)
    assert _same_decoding(_core.decode_file(str(copy)), expected)
    assert _same_decoding(_in_batches(copy, 7), expected)
    # Streams one after another read on as one capture, as gzip, bzip2 and xz read them.
    assert _same_decoding(_core.decode_file(str(_compressed_copy(original, compression, tmp_path,
                                                                 pieces=3))), expected)
    assert _differences(copy, 1000) == []


@pytest.mark.parametrize("compression", COMPRESSORS)
@pytest.mark.parametrize("relative", ["zeek/smb__smb3_multichannel.pcap",
                                      "zeek/irc-dcc-send.pcapng"])
def test_a_compressed_corpus_capture_decodes_as_its_original(tmp_path: Path, relative: str,
                                                             compression: str) -> None:
    """The corpora's largest pcap and pcapng (2.6 and 1.4 MB: read in refills)."""
    original = corpus_file(relative)
    copy = _compressed_copy(original, compression, tmp_path)
    assert original.stat().st_size > LARGER_THAN_THE_BUFFER_BYTES
    assert _same_decoding(_in_batches(copy, 1000), _core.decode_file(str(original)))


def test_a_compressed_larger_capture_decodes_as_its_original(tmp_path: Path,
                                                             larger_capture: Path) -> None:
    copy = _compressed_copy(larger_capture, "gzip", tmp_path)
    assert _same_decoding(_in_batches(copy, 1000), _core.decode_file(str(larger_capture)))


LOCAL_BLOCK_TYPE = 0x8000_0001
"""A pcapng block type for local use: readers skip it."""


def test_a_block_larger_than_the_buffer_is_read_whole(tmp_path: Path) -> None:
    """A 3 MiB block of local use between real packets: the buffer grows to take it in, and
    the packets after it are read (four, no warning)."""
    frames = real_frames(4)
    body = section() + interface(LINKTYPE_ETHERNET)
    body += b"".join(packet(data, time_us) for time_us, data in frames[:2])
    body += block(LOCAL_BLOCK_TYPE, bytes(3 * LARGER_THAN_THE_BUFFER_BYTES))
    body += b"".join(packet(data, time_us) for time_us, data in frames[2:])
    path = tmp_path / "large-block.pcapng"
    path.write_bytes(body)
    decoded = _core.decode_file(str(path))
    assert decoded["packets"]["frame"].tolist() == [1, 2, 3, 4] and decoded["warnings"] == []
    assert _differences(path, 1) == []


def test_a_block_claiming_more_than_libpcaps_maximum_ends_the_read(tmp_path: Path) -> None:
    """A block header claiming 20 MiB (libpcap refuses blocks over 16 MiB), then packets: the
    two packets before it, and a warning; the buffer is not grown to wait for it."""
    frames = real_frames(4)
    body = section() + interface(LINKTYPE_ETHERNET)
    body += b"".join(packet(data, time_us) for time_us, data in frames[:2])
    body += struct.pack("<II", LOCAL_BLOCK_TYPE, 20 << 20)
    body += b"".join(packet(data, time_us) for time_us, data in frames[2:])
    path = tmp_path / "claiming.pcapng"
    path.write_bytes(body)
    decoded = _core.decode_file(str(path))
    assert len(decoded["packets"]["frame"]) == 2
    assert "claims 20971520 bytes" in decoded["warnings"][0]
    assert _differences(path, 7) == []


def _held_before_the_cut(compression: str, cut: bytes) -> bytes:
    """What Python's own decompressor gives of a stream cut short, fed a kilobyte at a time."""
    decompressor = {"gzip": lambda: zlib.decompressobj(wbits=31),
                    "bzip2": bz2.BZ2Decompressor, "xz": lzma.LZMADecompressor}[compression]()
    return b"".join(decompressor.decompress(cut[start:start + 1024])
                    for start in range(0, len(cut), 1024))


@pytest.mark.parametrize("compression", COMPRESSORS)
def test_a_cut_compressed_capture_gives_the_packets_before_the_cut(tmp_path: Path,
                                                                   compression: str) -> None:
    """trap-bulk.pcap (640 kB) compressed, and the compressed file cut at two thirds: the
    packets of the records whole in what Python's decompressor gets out of the cut stream,
    counted with `_records`, then a warning."""
    original = SAMPLE_TRACES / "trap-bulk.pcap"
    compressed = _compressed_copy(original, compression, tmp_path).read_bytes()
    cut = tmp_path / f"cut.{compression}"
    cut.write_bytes(compressed[:len(compressed) * 2 // 3])
    held = _held_before_the_cut(compression, cut.read_bytes())
    whole = sum(1 for position, caplen in _records(held)
                if position + RECORD_HEADER_BYTES + caplen <= len(held))
    assert 0 < whole < len(_records(original.read_bytes()))
    decoded = _core.decode_file(str(cut))
    assert len(decoded["packets"]["frame"]) == whole
    assert decoded["warnings"][0].startswith(f"compressed capture cut short (the {compression} "
                                             "stream ends before its end marker)")
    expected = _core.decode_file(str(original))["packets"]
    for name, values in decoded["packets"].items():
        assert np.array_equal(values, expected[name][:whole]), name
    assert _same_decoding(_in_batches(cut, 7), decoded)
    assert _differences(cut) == []


SEED_BYTES = (SAMPLE_TRACES / "seed004-header-body-server.pcap").read_bytes()[:6000]
PCAPNG_BYTES = (SAMPLE_TRACES / "merged-interfaces.pcapng").read_bytes()[:6000]
COMPRESSED_SOURCES = [compress(source) for compress in COMPRESSORS.values()
                      for source in (SEED_BYTES, PCAPNG_BYTES)]


def _decoded_or_refused(path: Path) -> None:
    """The core returns balanced columns, the same whole and in batches, or raises
    CaptureError; anything else fails."""
    try:
        decoded = _core.decode_file(str(path))
    except _core.CaptureError as error:
        assert "\n" not in str(error)
        with pytest.raises(_core.CaptureError):
            _core.Reader(str(path))
        return
    lengths = {len(values) for values in decoded["packets"].values()}
    assert len(lengths) == 1
    assert np.all(decoded["sack_blocks"]["row"] < lengths.pop())
    assert _same_decoding(_in_batches(path, 7), decoded)


@settings(max_examples=300, derandomize=True, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(source=st.sampled_from([SEED_BYTES, PCAPNG_BYTES, *COMPRESSED_SOURCES]),
       edits=st.lists(st.tuples(st.integers(0, 5999), st.integers(0, 255)), max_size=60),
       cut=st.integers(0, 6000))
def test_mutated_captures_never_crash_the_core(tmp_path: Path, source: bytes,
                                               edits: list[tuple[int, int]], cut: int) -> None:
    """Real pcap (IPv6) and pcapng bytes, plain or compressed, bytes overwritten anywhere
    (file and record headers, block lengths, packet headers, compressed data) and the file cut
    anywhere."""
    data = bytearray(source[:cut])
    for position, value in edits:
        if position < len(data):
            data[position] = value
    path = tmp_path / "mutated"
    path.write_bytes(bytes(data))
    _decoded_or_refused(path)


@settings(max_examples=300, derandomize=True, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(header=st.sampled_from([SEED_BYTES[:PCAP_HEADER_BYTES], PCAPNG_BYTES[:4]]),
       body=st.binary(max_size=2000))
def test_random_bytes_after_a_capture_magic_never_crash_the_core(tmp_path: Path, header: bytes,
                                                                 body: bytes) -> None:
    path = tmp_path / "random"
    path.write_bytes(header + body)
    _decoded_or_refused(path)


def _write_snapped_packet_blocks(path: Path) -> None:
    """A pcapng file, cut to a snapshot length of 60 bytes, of real frames longer than that in
    each packet block that states a length on the wire: enhanced, obsolete and simple (whose
    captured length is the interface's snapshot length of it), big-endian then little."""
    frames = [data for _, data in real_frames(12) if len(data) > 60][:4]
    body = section(">") + interface(LINKTYPE_ETHERNET, order=">", snaplen=60)
    body += packet(frames[0][:60], 1, order=">", wire_bytes=len(frames[0]))
    body += obsolete_packet(frames[1][:60], 2, order=">", wire_bytes=len(frames[1]))
    body += simple_packet(frames[2][:60], order=">", wire_bytes=len(frames[2]))
    body += section() + interface(LINKTYPE_ETHERNET, snaplen=60)
    body += simple_packet(frames[3][:60], wire_bytes=len(frames[3]))
    path.write_bytes(body)


@pytest.mark.parametrize("name, snapped", [("classic-stream.pcap", True),
                                           ("merged-interfaces.pcapng", False),
                                           ("seed003-nagle.pcap", False),
                                           ("snapped-blocks.pcapng", True)])
def test_wire_bytes_is_tsharks_frame_length(tmp_path: Path, name: str, snapped: bool) -> None:
    """`wire_bytes` is each record's length on the wire, tshark's frame.len, and
    `captured_bytes` its frame.cap_len. classic-stream was captured with a snapshot length of
    128 (frame 8: 166 bytes on the wire, 128 kept, `tshark -r F -c 8`); the hand-built file
    has every pcapng block that states the length (frames cut to 60 bytes)."""
    path = SAMPLE_TRACES / name
    if name == "snapped-blocks.pcapng":
        path = tmp_path / name
        _write_snapped_packet_blocks(path)
    tshark = require_tool("tshark")
    fields = subprocess.run([tshark, "-r", str(path), "-T", "fields", "-e", "frame.len",
                             "-e", "frame.cap_len"], capture_output=True, text=True,
                            check=True).stdout.split()
    packets = _core.decode_file(str(path))["packets"]
    assert packets["wire_bytes"].tolist() == [int(length) for length in fields[0::2]]
    assert packets["captured_bytes"].tolist() == [int(length) for length in fields[1::2]]
    assert bool((packets["wire_bytes"] > packets["captured_bytes"]).any()) == snapped
