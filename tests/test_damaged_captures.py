"""Damaged capture files, as tcpdump and tshark meet them: a record header claiming 258 MiB or
more than the file's snapshot length, a pcapng block whose length is damaged, a file cut inside
a record. The read ends there with a one-line warning and the packets before it are analysed,
tcpdump's count of them (its libpcap stops at the same place), by the command line and by the
compiled core's reader. Then copies of corpus captures corrupted at random (a fixed
seed): the command line never shows a traceback or "please report this", exits 0 or 2, and
the core refuses a file only with its one-line CaptureError.
"""

from __future__ import annotations

import json
import os
import random
import struct
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.conftest import PROJECT, corpus_file, require_tool

_core = pytest.importorskip("nagledetect._core")

PCAP_HEADER_BYTES = 24
RECORD_HEADER_BYTES = 16
ENHANCED_PACKET = 6
CLAIMING_258_MIB = 258 * 1024 * 1024
DAMAGED_RECORD = 6
"""The record (or packet block) damaged, 1-based: 5 packets come before it."""


def _records(data: bytes, order: str) -> list[int]:
    """Where each record of a classic pcap file starts."""
    found, position = [], PCAP_HEADER_BYTES
    while position + RECORD_HEADER_BYTES <= len(data):
        found.append(position)
        position += RECORD_HEADER_BYTES + struct.unpack_from(order + "I", data, position + 8)[0]
    return found


def _packet_blocks(data: bytes) -> list[int]:
    """Where each enhanced packet block of a little-endian pcapng file starts."""
    found, position = [], 0
    while position + 12 <= len(data):
        block_type, length = struct.unpack_from("<II", data, position)
        if block_type == ENHANCED_PACKET:
            found.append(position)
        position += length
    return found


def _caplen_set(value: int) -> Callable[[bytes, int, str], bytes]:
    def damage(data: bytes, record: int, order: str) -> bytes:
        damaged = bytearray(data)
        struct.pack_into(order + "I", damaged, record + 8, value)
        return bytes(damaged)
    return damage


def _late_time_then(damage: Callable[[bytes, int, str], bytes]
                    ) -> Callable[[bytes, int, str], bytes]:
    """`damage`, after a record (the third) whose time is past 2^31 s: libpcap hands it over
    signed, as a negative time (issue 34's OverflowError, "please report this", nothing
    analysed, when the records before a damaged one were read again one by one)."""
    def damaged_after_late(data: bytes, record: int, order: str) -> bytes:
        damaged = bytearray(damage(data, record, order))
        struct.pack_into(order + "I", damaged, _records(data, order)[2], 0x9000_0000)
        return bytes(damaged)
    return damaged_after_late


def _cut(after: int) -> Callable[[bytes, int, str], bytes]:
    def damage(data: bytes, record: int, order: str) -> bytes:
        return data[:record + after]
    return damage


def _block_length_set(value: Callable[[int], int]) -> Callable[[bytes, int, str], bytes]:
    def damage(data: bytes, block: int, order: str) -> bytes:
        damaged = bytearray(data)
        length = struct.unpack_from("<I", data, block + 4)[0]
        struct.pack_into("<I", damaged, block + 4, value(length))
        return bytes(damaged)
    return damage


PCAP_SOURCES = {"zeek/http__get.pcap": "<",  # microseconds, little-endian, snaplen 65535
                "zeek/http__get-to-ssh-server.pcap": "<",  # nanoseconds, snaplen 2000
                "tcpdump/pptp.pcap": ">"}  # big-endian
PCAP_DAMAGE = {
    "claims 258 MiB": _caplen_set(CLAIMING_258_MIB),
    "claims 258 MiB after a late time": _late_time_then(_caplen_set(CLAIMING_258_MIB)),
    # libpcap reads up to its maximum (262144) and keeps the snapshot length of it: here
    # the file ends first
    "claims more than the snapshot length": _caplen_set(200_000),
    "cut inside its data": _cut(RECORD_HEADER_BYTES + 4),
    "cut inside its header": _cut(9),
}
PCAPNG_SOURCE = "zeek/mysql__caching_sha2_password-after-auth-switch.pcapng"
PCAPNG_DAMAGE = {
    "block claims 258 MiB": _block_length_set(lambda length: CLAIMING_258_MIB),
    "block length under 12": _block_length_set(lambda length: 10),
    "block length not whole words": _block_length_set(lambda length: length + 2),
    "block length unlike its trailer": _block_length_set(lambda length: length + 64),
    "cut inside a block": _cut(30),
}
CASES = [(source, name) for source in PCAP_SOURCES for name in PCAP_DAMAGE]
CASES += [(PCAPNG_SOURCE, name) for name in PCAPNG_DAMAGE]


def _damaged(source: str, name: str, folder: Path) -> Path:
    data = corpus_file(source).read_bytes()
    if source in PCAP_SOURCES:
        order = PCAP_SOURCES[source]
        damaged = PCAP_DAMAGE[name](data, _records(data, order)[DAMAGED_RECORD - 1], order)
    else:
        damaged = PCAPNG_DAMAGE[name](data, _packet_blocks(data)[DAMAGED_RECORD - 1], "<")
    path = folder / f"{Path(source).stem}-{name.replace(' ', '-')}{Path(source).suffix}"
    path.write_bytes(damaged)
    return path


def _tcpdump_packets(path: Path, folder: Path) -> int:
    """How many packets tcpdump reads before it stops: those it writes out again (as a
    well-formed pcap in this machine's byte order)."""
    written = folder / f"{path.name}.tcpdump.pcap"
    subprocess.run([require_tool("tcpdump"), "-r", str(path), "-w", str(written)],
                   capture_output=True, check=False)
    return len(_records(written.read_bytes(), "<"))


def _analysed(paths: list[Path]) -> tuple[subprocess.CompletedProcess, dict]:
    """One `analyze --format json` run over the files (one process for all: a failure in one
    cannot hide behind another, as each must be in `captures` or `not_analysed`)."""
    run = subprocess.run([sys.executable, "-m", "nagledetect", "analyze", "--format", "json",
                          *map(str, paths)], capture_output=True, text=True, timeout=300,
                         cwd=PROJECT, env={**os.environ, "PYTHONPATH": str(PROJECT)})
    return run, json.loads(run.stdout) if run.stdout else {}


def test_a_damaged_record_ends_the_read_with_tcpdumps_packets(tmp_path: Path) -> None:
    """Every case: tcpdump reads the 5 packets before the damaged record (checked here too,
    so that the damage is where it is meant to be), and so do both paths, with one warning
    saying the capture was cut short, and `cut_short` in the JSON document saying why."""
    paths = [_damaged(source, name, tmp_path) for source, name in CASES]
    run, document = _analysed(paths)
    assert run.returncode == 0, run.stderr
    captures = {capture["path"]: capture for capture in document["captures"]}
    warnings = run.stderr.splitlines()
    for path in paths:
        expected = _tcpdump_packets(path, tmp_path)
        assert expected == DAMAGED_RECORD - 1, path.name
        capture = captures[str(path)]
        assert capture["packets"] == expected, path.name
        assert capture["balanced"], path.name
        assert capture["cut_short"], path.name
        cut = [w for w in warnings if w.startswith(f"nagledetect: warning: {path}: capture cut "
                                                  "short")]
        assert len(cut) == 1 and f"analysed the {expected} packets before it" in cut[0], path
        decoded = _core.decode_file(str(path))
        assert len(decoded["packets"]["frame"]) == expected, path.name
        assert len(decoded["warnings"]) == 1 and "cut short" in decoded["warnings"][0], path


def test_an_undamaged_file_is_read_to_its_end() -> None:
    """The same captures undamaged: `cut_short` null, tcpdump's whole count (14 packets in
    http__get.pcap, as `capinfos -c` counts them)."""
    path = corpus_file("zeek/http__get.pcap")
    run, document = _analysed([path])
    assert run.returncode == 0 and run.stderr == ""
    assert document["captures"][0]["cut_short"] is None
    assert document["captures"][0]["packets"] == 14


CORRUPTED_SOURCES = ("zeek/http__get.pcap", "zeek/http__get-to-ssh-server.pcap",
                     "tcpdump/pptp.pcap", PCAPNG_SOURCE, "zeek/dnp3__dnp3_file_write.pcap",
                     "zeek/http__261__variant-04-te_cl_desync.pcap")
COPIES = 12


def _corrupted(data: bytes, rng: random.Random) -> bytes:
    """1-16 bytes overwritten or bit-flipped anywhere (file header included), the file cut
    at random, or both."""
    damaged = bytearray(data)
    how = rng.choice(("overwrite", "flip", "cut", "flip and cut"))
    if how != "cut":
        for _ in range(rng.randint(1, 16)):
            position = rng.randrange(len(damaged))
            damaged[position] = (rng.randrange(256) if how == "overwrite"
                                 else damaged[position] ^ 1 << rng.randrange(8))
    if how.endswith("cut"):
        damaged = damaged[:rng.randrange(len(damaged) + 1)]
    return bytes(damaged)


def test_randomly_corrupted_copies_never_end_in_a_traceback(tmp_path: Path) -> None:
    """The corruption that found issue 34's OverflowError, seeded here, over the two files it
    hit among others (dnp3__dnp3_file_write.pcap, the http__261 variant)."""
    rng = random.Random(34)
    paths = []
    for source in CORRUPTED_SOURCES:
        data = corpus_file(source).read_bytes()
        for copy in range(COPIES):
            path = tmp_path / f"{copy}-{Path(source).name}"
            path.write_bytes(_corrupted(data, rng))
            paths.append(path)
    run, document = _analysed(paths)
    assert run.returncode in (0, 2), run.stderr
    assert "Traceback" not in run.stderr and "please report this" not in run.stderr
    assert all(line.startswith("nagledetect: ") for line in run.stderr.splitlines())
    seen = [c["path"] for c in document["captures"]] + [n["path"] for n in document["not_analysed"]]
    assert sorted(seen) == sorted(map(str, paths))
    assert all(capture["balanced"] for capture in document["captures"])
    for path in paths:
        try:
            _core.decode_file(str(path))
        except _core.CaptureError as error:
            assert "\n" not in str(error) and "please report this" not in str(error)


def _rewritten_with_version(data: bytes, minor: int, wire_first: list[bool]) -> bytes:
    """A little-endian pcap's records under file version 2.`minor`, each record's two length
    fields in the order `wire_first` says (cycled): length on the wire first, as libpcap
    before 0.4 wrote them, or captured length first. Every packet is cut to 60 bytes, so the
    two lengths differ."""
    header = bytearray(data[:PCAP_HEADER_BYTES])
    struct.pack_into("<H", header, 6, minor)
    records = []
    for number, position in enumerate(_records(data, "<")):
        seconds, fraction, caplen, wire_bytes = struct.unpack_from("<IIII", data, position)
        kept = min(caplen, 60)
        lengths = ((wire_bytes, kept) if wire_first[number % len(wire_first)]
                   else (kept, wire_bytes))
        start = position + RECORD_HEADER_BYTES
        records.append(struct.pack("<IIII", seconds, fraction, *lengths) + data[start:start + kept])
    return bytes(header) + b"".join(records)


@pytest.mark.parametrize("minor, wire_first", [(2, [True]), (3, [True, False]), (4, [False])])
def test_old_pcap_versions_are_read_as_libpcap_reads_them(tmp_path: Path, minor: int,
                                                          wire_first: list[bool]) -> None:
    """Files of version 2.0-2.2 state each record's length on the wire first, 2.3 files
    either way (the captured length is the smaller), 2.4 files the captured length first:
    the core reads the same packets as tcpdump (all 14 of http__get.pcap, cut to 60 bytes, as
    written here), with their lengths on the wire."""
    original = corpus_file("zeek/http__get.pcap").read_bytes()
    path = tmp_path / f"version-2.{minor}.pcap"
    path.write_bytes(_rewritten_with_version(original, minor, wire_first))
    written = tmp_path / "tcpdump.pcap"
    subprocess.run([require_tool("tcpdump"), "-r", str(path), "-w", str(written)],
                   capture_output=True, check=True)
    by_tcpdump = written.read_bytes()
    expected = [by_tcpdump[p + RECORD_HEADER_BYTES:p + RECORD_HEADER_BYTES
                           + struct.unpack_from("<I", by_tcpdump, p + 8)[0]]
                for p in _records(by_tcpdump, "<")]
    assert len(expected) == 14 and all(len(packet) == 60 for packet in expected)
    decoded = _core.decode_file(str(path))
    assert decoded["warnings"] == []
    assert len(decoded["packets"]["frame"]) == len(expected)
    wire_bytes = [struct.unpack_from("<I", by_tcpdump, p + 12)[0]
                  for p in _records(by_tcpdump, "<")]
    assert decoded["packets"]["captured_bytes"].tolist() == [len(p) for p in expected]
    assert decoded["packets"]["wire_bytes"].tolist() == wire_bytes
    assert decoded["packets"]["seq_raw"].tolist() == [
        struct.unpack_from(">I", packet, 38)[0] for packet in expected]  # Ethernet + IPv4


@pytest.mark.parametrize("major, minor", [(2, 5), (3, 4), (1, 0)])
def test_a_pcap_version_libpcap_refuses_is_refused_by_both_paths(tmp_path: Path, major: int,
                                                                 minor: int) -> None:
    """A damaged file version: tcpdump stops at once; so do both paths, in libpcap's words."""
    damaged = bytearray(corpus_file("zeek/http__get.pcap").read_bytes())
    struct.pack_into("<HH", damaged, 4, major, minor)
    path = tmp_path / "damaged-version.pcap"
    path.write_bytes(damaged)
    tcpdump = subprocess.run([require_tool("tcpdump"), "-r", str(path), "-w", "/dev/null"],
                             capture_output=True, text=True)
    words = ("archaic pcap savefile format" if major < 2
             else f"unsupported pcap savefile version {major}.{minor}")
    assert tcpdump.returncode == 1 and words in tcpdump.stderr
    run, _ = _analysed([path])
    assert run.returncode == 2 and run.stderr.strip().endswith(words)
    with pytest.raises(_core.CaptureError, match=words):
        _core.decode_file(str(path))


def _first_blocks_damaged(data: bytes, how: str) -> bytes:
    """A pcapng file damaged before its first interface description (its second block)."""
    damaged = bytearray(data)
    section_bytes = struct.unpack_from("<I", data, 4)[0]
    if how == "section version 1.1":
        struct.pack_into("<HH", damaged, 12, 1, 1)
    elif how == "section length under 12":
        struct.pack_into("<I", damaged, 4, 8)
    elif how == "a packet block first":
        first_packet = _packet_blocks(data)[0]
        packet_bytes = struct.unpack_from("<I", data, first_packet + 4)[0]
        damaged = (damaged[:section_bytes] + damaged[first_packet:first_packet + packet_bytes]
                   + damaged[section_bytes:])
    else:
        damaged = damaged[:section_bytes]
    return bytes(damaged)


@pytest.mark.parametrize("how", ["section version 1.1", "section length under 12",
                                 "a packet block first", "no interface at all"])
def test_a_pcapng_file_damaged_before_its_first_interface_is_refused(tmp_path: Path,
                                                                     how: str) -> None:
    """libpcap opens a pcapng file once it has read its first interface description: tcpdump
    refuses these at once, and so do both paths, with one line."""
    path = tmp_path / "damaged-start.pcapng"
    path.write_bytes(_first_blocks_damaged(corpus_file(PCAPNG_SOURCE).read_bytes(), how))
    tcpdump = subprocess.run([require_tool("tcpdump"), "-r", str(path), "-w", "/dev/null"],
                             capture_output=True, text=True)
    assert tcpdump.returncode == 1 and "reading from file" not in tcpdump.stderr
    run, _ = _analysed([path])
    assert run.returncode == 2 and len(run.stderr.splitlines()) == 1
    with pytest.raises(_core.CaptureError) as refusal:
        _core.decode_file(str(path))
    assert str(refusal.value).startswith(f"{path}: ") and "\n" not in str(refusal.value)
