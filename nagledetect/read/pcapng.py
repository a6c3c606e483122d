"""The packets of a pcapng file that libpcap refuses, read here.

Why: libpcap stops at the first interface whose link type or snapshot length differs from the
first interface's, and at a section in the other byte order, so a capture
merged from captures taken different ways (mergecap keeps one interface for each) yields
nothing from there on, where tshark reads it whole. Here each packet keeps its own interface's
link type and timestamp resolution, and batches are cut where the link type changes. The blocks
are chained by their lengths, so finding them takes one Python step a block; the fields of a
batch's packet blocks are then read at once through header tables, as packet headers are. It is
slower than libpcap, and used only for the files libpcap refuses.
"""

from __future__ import annotations

import mmap
import struct
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from nagledetect.read.decode import LINKTYPE_NAMES, pad_batch
from nagledetect.read.layout import Header
from nagledetect.read.raw import RawBatch

SECTION_HEADER = 0x0A0D0D0A
BYTE_ORDERS = {b"\x4d\x3c\x2b\x1a": "<", b"\x1a\x2b\x3c\x4d": ">"}
"""The section header's byte-order magic 0x1A2B3C4D as each order writes it."""
INTERFACE_DESCRIPTION = 1
OBSOLETE_PACKET = 2
SIMPLE_PACKET = 3
ENHANCED_PACKET = 6
SMALLEST_BLOCK_BYTES = 12
LARGEST_BLOCK_BYTES = 16 * 1024 * 1024
"""libpcap refuses a longer block (a damaged length, for the link types read here)."""
OPTION_END = 0
OPTION_TIME_RESOLUTION = 9
OPTION_TIME_OFFSET = 14
DEFAULT_TIME_RESOLUTION = 6
"""Microseconds, when an interface does not say (if_tsresol absent)."""
BINARY_RESOLUTION = 0x80
RESOLUTION_NAMES = {0: "seconds", 3: "milliseconds", 6: "microseconds", 9: "nanoseconds"}
BYTE_ORDER_NAMES = {"<": "little-endian", ">": "big-endian"}
MOST_VALUES_NAMED = 4
"""Values of one property listed in the warning before the rest are only counted."""
WIDEST_BINARY_FRACTION = 44
"""Fraction bits kept when a binary resolution is converted (2^44 x 10^6 fits in 64 bits)."""


@dataclass(frozen=True)
class _PacketLayout:
    """Where a packet block type keeps its fields and its packet's bytes."""

    header: Header
    data_offset: int
    trailer_bytes: int
    """Bytes of the block that are neither its packet nor padding: header fields and the
    trailing length."""


def _layouts(byte_order: str) -> dict[int, _PacketLayout]:
    enhanced = Header("enhanced packet", ("length", 4, 4), ("interface", 8, 4),
                      ("time_high", 12, 4), ("time_low", 16, 4), ("caplen", 20, 4),
                      byte_order=byte_order)
    obsolete = Header("obsolete packet", ("length", 4, 4), ("interface", 8, 2),
                      ("time_high", 12, 4), ("time_low", 16, 4), ("caplen", 20, 4),
                      byte_order=byte_order)
    simple = Header("simple packet", ("length", 4, 4), ("wire_length", 8, 4),
                    byte_order=byte_order)
    return {ENHANCED_PACKET: _PacketLayout(enhanced, 28, 32),
            OBSOLETE_PACKET: _PacketLayout(obsolete, 28, 32),
            SIMPLE_PACKET: _PacketLayout(simple, 12, 16)}


LAYOUTS = {order: _layouts(order) for order in BYTE_ORDERS.values()}
PACKET_BLOCKS = frozenset(LAYOUTS["<"])
BLOCK_HEADS = {order: struct.Struct(order + "II") for order in BYTE_ORDERS.values()}
"""A block's type and total length, in each byte order."""
BLOCK_TRAILERS = {order: struct.Struct(order + "I") for order in BYTE_ORDERS.values()}
"""A block's total length repeated at its end, in each byte order."""


@dataclass(frozen=True)
class Interface:
    """What a packet's interface says about it: its link type, snapshot length and clock."""

    linktype: int
    snaplen: int
    resolution: int = DEFAULT_TIME_RESOLUTION
    """if_tsresol: 10^-n seconds a tick, or 2^-(n & 0x7f) when the high bit is set."""
    offset_s: int = 0

    def time_us(self, ticks: np.ndarray) -> np.ndarray:
        """Ticks since the epoch as microseconds, truncated, as libpcap gives them."""
        if self.resolution & BINARY_RESOLUTION:
            bits = self.resolution & ~BINARY_RESOLUTION
            whole_s = ticks >> np.uint64(bits)
            fraction = ticks & np.uint64((1 << bits) - 1)
            if bits > WIDEST_BINARY_FRACTION:
                fraction >>= np.uint64(bits - WIDEST_BINARY_FRACTION)
                bits = WIDEST_BINARY_FRACTION
            micro = (fraction * np.uint64(1_000_000)) >> np.uint64(bits)
            time_us = whole_s.astype(np.int64) * 1_000_000 + micro.astype(np.int64)
        elif self.resolution >= DEFAULT_TIME_RESOLUTION:
            divisor = 10 ** (self.resolution - 6)
            # A resolution finer than 64 bits of ticks can count (a damaged option) gives 0,
            # as the compiled core does.
            time_us = (np.zeros(len(ticks), np.int64) if divisor >= 1 << 64
                       else (ticks // np.uint64(divisor)).astype(np.int64))
        else:
            time_us = ticks.astype(np.int64) * 10 ** (6 - self.resolution)
        return time_us + _wrapped_int64(self.offset_s * 1_000_000)


def _wrapped_int64(value: int) -> np.int64:
    """`value` on the 64-bit circle, as the compiled core's wrapping arithmetic leaves it (an
    offset from a damaged option can be any 64-bit number)."""
    return np.array(value & 0xFFFF_FFFF_FFFF_FFFF, dtype=np.uint64).view(np.int64)[()]


def _interface(block: memoryview, byte_order: str) -> Interface:
    """An interface description block: link type and snapshot length, then its options."""
    linktype, snaplen = struct.unpack_from(byte_order + "H2xI", block, 8)
    resolution, offset_s = DEFAULT_TIME_RESOLUTION, 0
    position = 16
    while position + 4 <= len(block) - 4:
        code, length = struct.unpack_from(byte_order + "HH", block, position)
        if code == OPTION_END:
            break
        if code == OPTION_TIME_RESOLUTION and length >= 1:
            resolution = block[position + 4]
        elif code == OPTION_TIME_OFFSET and length >= 8:
            (offset_s,) = struct.unpack_from(byte_order + "q", block, position + 4)
        position += 4 + (length + 3) // 4 * 4
    return Interface(linktype, snaplen, resolution, offset_s)


def _linktype_name(linktype: int) -> str:
    name = LINKTYPE_NAMES.get(linktype)
    return f"{linktype} {name}" if name else str(linktype)


def _snaplen_name(snaplen: int) -> str:
    return f"{snaplen:,} bytes" if snaplen else "unlimited"


def _resolution_name(resolution: int) -> str:
    if resolution & BINARY_RESOLUTION:
        return f"2^-{resolution & ~BINARY_RESOLUTION} s"
    return RESOLUTION_NAMES.get(resolution, f"10^-{resolution} s")


def _differing(properties: tuple[tuple[str, list[str]], ...]) -> list[str]:
    """`name (value, value...)` for each property with more than one value, the values in
    order of first appearance, the first few named."""
    phrases = []
    for name, values in properties:
        distinct = list(dict.fromkeys(values))
        if len(distinct) > 1:
            rest = len(distinct) - MOST_VALUES_NAMED
            named = ", ".join(distinct[:MOST_VALUES_NAMED]) + (f" and {rest} more" if rest > 0 else "")
            phrases.append(f"{name} ({named})")
    return phrases


def _joined(phrases: list[str]) -> str:
    """`a`, `a and b`, `a, b and c`."""
    return " and ".join(filter(None, (", ".join(phrases[:-1]), *phrases[-1:])))


class _Section:
    """The state of the section being walked: its byte order and interfaces so far."""

    def __init__(self, byte_order: str) -> None:
        self.byte_order = byte_order
        self.interfaces: list[Interface] = []


def _unreadable(length: int, position: int, file_bytes: int, trailer: int | None) -> str:
    """Why a block of this length at this position cannot be read, as libpcap judges it: its
    length too small, not whole words, past the file's end, or not repeated at its end (the
    block's `trailer`, None when it has none)."""
    if length < SMALLEST_BLOCK_BYTES or length % 4 or length > LARGEST_BLOCK_BYTES:
        return f"damaged block at byte {position} (length {length})"
    if position + length > file_bytes:
        return f"truncated: the file ends inside the block at byte {position}"
    return f"damaged block at byte {position} (length {length} at its start, {trailer} at its end)"


def _let_go(mapped: mmap.mmap, position: int) -> None:
    """Unmap the pages before `position` (they are read), so that the process holds the batch
    in flight, not the file (they stay in the page cache)."""
    mapped.madvise(mmap.MADV_DONTNEED, 0, position // mmap.PAGESIZE * mmap.PAGESIZE)


class PcapngReader:
    """Reads a pcapng file in batches of one link type each; a damaged block ends the reading
    where it lies, with `truncation` saying why, as libpcap's reader does."""

    def __init__(self, path: str, batch_packets: int) -> None:
        self.path = path
        self.batch_packets = batch_packets
        self.truncation: str | None = None
        self.interfaces: list[Interface] = []
        """Every interface of the file, in file order, whatever its section."""
        self.byte_orders: list[str] = []
        """Every section's byte order, in file order."""

    def mixture(self) -> str | None:
        """What the file mixes that libpcap does not read, in words naming the values seen:
        interfaces of different link types or snapshot lengths, sections of different byte
        orders (timestamp resolutions too, when they also differ: libpcap reads those, but
        they are read here then); None when it mixes none of what libpcap refuses."""
        interfaces = _differing((
            ("link types", [_linktype_name(i.linktype) for i in self.interfaces]),
            ("snapshot lengths", [_snaplen_name(i.snaplen) for i in self.interfaces]),
        ))
        sections = _differing((("byte orders", [BYTE_ORDER_NAMES[o] for o in self.byte_orders]),))
        if not interfaces and not sections:
            return None
        interfaces += _differing((
            ("timestamp resolutions", [_resolution_name(i.resolution) for i in self.interfaces]),
        ))
        mixed = [f"{kind} of different {_joined(phrases)}"
                 for kind, phrases in (("interfaces", interfaces), ("sections", sections)) if phrases]
        return _joined(mixed)

    def batches(self, frames_before: int = 0) -> Iterator[RawBatch]:
        """Every packet after the first `frames_before` (already read by libpcap), in file
        order; frame numbers count every packet block, as Wireshark's do."""
        with open(self.path, "rb") as handle, mmap.mmap(handle.fileno(), 0,
                                                        access=mmap.ACCESS_READ) as mapped:
            yield from self._walk(mapped, frames_before)

    def _walk(self, mapped: mmap.mmap, frames_before: int) -> Iterator[RawBatch]:
        file_bytes = np.frombuffer(mapped, dtype=np.uint8)
        view = memoryview(mapped)
        size = len(view)
        try:
            section: _Section | None = None
            head = BLOCK_HEADS["<"].unpack_from
            tail = BLOCK_TRAILERS["<"].unpack_from
            pending: list[tuple[int, int]] = []
            frames = position = 0
            while position + SMALLEST_BLOCK_BYTES <= size:
                block_type, length = head(view, position)
                if block_type == SECTION_HEADER:
                    if section and pending:
                        yield from self._packets(file_bytes, view, section, pending, frames)
                        pending = []
                        if self.truncation:
                            return
                    if (section := self._section(view, position)) is None:
                        return
                    head = BLOCK_HEADS[section.byte_order].unpack_from
                    tail = BLOCK_TRAILERS[section.byte_order].unpack_from
                    self.byte_orders.append(section.byte_order)
                    block_type, length = head(view, position)
                elif section is None:
                    self.truncation = "not a pcapng file: no section header block first"
                    return
                end = position + length
                trailer = (tail(view, end - 4)[0] if length >= SMALLEST_BLOCK_BYTES and end <= size
                           else None)
                if trailer != length or length & 3 or length > LARGEST_BLOCK_BYTES:
                    self.truncation = _unreadable(length, position, size, trailer)
                    break
                if block_type in PACKET_BLOCKS:
                    frames += 1
                    if frames > frames_before:
                        pending.append((position, block_type))
                        if len(pending) == self.batch_packets:
                            yield from self._packets(file_bytes, view, section, pending, frames)
                            pending = []
                            if self.truncation:
                                return
                            _let_go(mapped, position)
                elif block_type == INTERFACE_DESCRIPTION:
                    described = _interface(view[position:position + length], section.byte_order)
                    section.interfaces.append(described)
                    self.interfaces.append(described)
                position += length
            else:
                if position < size:
                    self.truncation = f"truncated: {size - position} bytes after the last whole block"
            if section and pending:
                yield from self._packets(file_bytes, view, section, pending, frames)
        finally:
            view.release()

    def _section(self, view: memoryview, position: int) -> _Section | None:
        byte_order = BYTE_ORDERS.get(bytes(view[position + 8:position + 12]))
        if byte_order is None:
            self.truncation = f"section header at byte {position} has no byte-order magic"
            return None
        return _Section(byte_order)

    def _packets(self, file_bytes: np.ndarray, view: memoryview, section: _Section,
                 pending: list[tuple[int, int]], frames: int) -> Iterator[RawBatch]:
        """The pending packet blocks as batches, one for each run of one link type; a block
        that cannot be read (no such interface, a packet longer than its block) ends them, and
        the reading (`truncation` says where)."""
        packets = _PacketBlocks.read(file_bytes, section, pending)
        readable = packets.readable()
        if readable < len(pending):
            position = pending[readable][0]
            self.truncation = (f"packet block at byte {position} names no interface of its "
                               "section or holds a packet longer than the block")
        first_frame = frames - len(pending) + 1
        linktypes = packets.linktype[:readable]
        cuts = [0, *(np.flatnonzero(np.diff(linktypes)) + 1).tolist(), readable]
        for start, stop in zip(cuts[:-1], cuts[1:]):
            if stop > start:
                yield packets.batch(view, start, stop, first_frame)


@dataclass
class _PacketBlocks:
    """The fields of a run of packet blocks, as columns."""

    data_at: np.ndarray
    caplen: np.ndarray
    time_us: np.ndarray
    linktype: np.ndarray
    valid: np.ndarray

    @classmethod
    def read(cls, file_bytes: np.ndarray, section: _Section,
             pending: list[tuple[int, int]]) -> _PacketBlocks:
        positions = np.array([position for position, _ in pending], dtype=np.int64)
        types = np.array([block_type for _, block_type in pending])
        count = len(pending)
        blocks = cls(np.zeros(count, np.int64), np.zeros(count, np.int64),
                     np.zeros(count, np.int64), np.zeros(count, np.int64),
                     np.zeros(count, bool))
        for block_type, layout in LAYOUTS[section.byte_order].items():
            chosen = np.flatnonzero(types == block_type)
            if len(chosen):
                blocks._fill(file_bytes, layout, block_type, chosen, positions[chosen], section)
        return blocks

    def _fill(self, file_bytes: np.ndarray, layout: _PacketLayout, block_type: int,
              chosen: np.ndarray, positions: np.ndarray, section: _Section) -> None:
        fields = layout.header.gather(file_bytes, positions)
        room = fields["length"].astype(np.int64) - layout.trailer_bytes
        interfaces = section.interfaces
        if block_type == SIMPLE_PACKET:
            interface = np.zeros(len(chosen), np.int64)
            caplen = fields["wire_length"].astype(np.int64)
            if interfaces and interfaces[0].snaplen:
                caplen = np.minimum(caplen, interfaces[0].snaplen)
            caplen = np.minimum(caplen, room)
            ticks = None
        else:
            interface = fields["interface"].astype(np.int64)
            caplen = fields["caplen"].astype(np.int64)
            ticks = (fields["time_high"].astype(np.uint64) << np.uint64(32)
                     | fields["time_low"].astype(np.uint64))
        known = interface < len(interfaces)
        self.valid[chosen] = known & (caplen <= room)
        self.data_at[chosen] = positions + layout.data_offset
        self.caplen[chosen] = caplen
        for number in np.unique(interface[known]).tolist():
            mine = interface == number
            described = interfaces[number]
            self.linktype[chosen[mine]] = described.linktype
            if ticks is not None:
                self.time_us[chosen[mine]] = described.time_us(ticks[mine])

    def readable(self) -> int:
        """How many blocks from the first can be read (up to the first that cannot)."""
        bad = np.flatnonzero(~self.valid)
        return int(bad[0]) if len(bad) else len(self.valid)

    def batch(self, view: memoryview, start: int, stop: int, first_frame: int) -> RawBatch:
        data_at = self.data_at[start:stop].tolist()
        caplens = self.caplen[start:stop]
        packet_bytes = b"".join([view[at:at + length]
                                 for at, length in zip(data_at, caplens.tolist())])
        offsets = np.concatenate([[0], np.cumsum(caplens)[:-1]]).astype(np.int64)
        return RawBatch(pad_batch(packet_bytes), offsets, caplens.copy(),
                        self.time_us[start:stop].copy(), first_frame + start,
                        int(self.linktype[start]))
