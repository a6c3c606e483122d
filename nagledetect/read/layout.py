"""Declarative header layouts, read for a whole batch of packets at once.

Each header is a table of fields (name, byte offset, width, bit mask, shift), as in dpkt's
header tables. The table becomes a numpy structured dtype with big-endian fields (network
order; a capture file's own blocks are in the order its writer chose); `gather`
copies the header bytes of every packet in one fancy-indexing step (through a view of the batch
buffer as header-sized items starting at every byte) and views them through that dtype, so no
per-packet Python object is ever built and each field costs one vectorised conversion.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

_UNSIGNED_FORMATS = {1: "u1", 2: "u2", 4: "u4"}


@dataclass(frozen=True)
class Field:
    """One unsigned header field: `width` bytes at `offset`, then `(value & mask) >> shift`."""

    name: str
    offset: int
    width: int
    mask: int = 0
    shift: int = 0


class Header:
    """A header layout: its fields and the structured dtype that reads them."""

    def __init__(self, name: str, *specs: tuple, byte_order: str = ">") -> None:
        self.name = name
        self.fields = {spec[0]: Field(*spec) for spec in specs}
        self.itemsize = max(f.offset + f.width for f in self.fields.values())
        self.dtype = np.dtype({
            "names": list(self.fields),
            "formats": [byte_order + _UNSIGNED_FORMATS[f.width] for f in self.fields.values()],
            "offsets": [f.offset for f in self.fields.values()],
            "itemsize": self.itemsize,
        })
        self._item = np.dtype((np.void, self.itemsize))

    @classmethod
    def stacked(cls, name: str, *layers: tuple[str, Header, int]) -> Header:
        """Headers that follow each other at fixed offsets, as one layout: (prefix, header,
        offset) each, fields named `prefix_field`. One gather then reads them all."""
        return cls(name, *((f"{prefix}_{f.name}", offset + f.offset, f.width, f.mask, f.shift)
                           for prefix, header, offset in layers for f in header.fields.values()))

    def gather(self, buf: np.ndarray, positions: np.ndarray) -> HeaderValues:
        """This header at `positions` of every packet. A position too near the end of `buf` is
        moved back to fit (what it then reads lies past its packet's capture, which the
        decoder's length checks never use); `buf` must hold the layout at least once."""
        last = len(buf) - self.itemsize
        items = np.ndarray((last + 1,), dtype=self._item, buffer=buf, strides=(1,))
        return HeaderValues(self, items[np.minimum(positions, last)].view(self.dtype))


class HeaderValues:
    """The gathered headers of a batch; `values[name]` is one field as a native array."""

    def __init__(self, header: Header, records: np.ndarray) -> None:
        self._header = header
        self._records = records

    def rows(self, index: np.ndarray) -> HeaderValues:
        """The headers of some packets only (by position in the batch)."""
        item = np.dtype((np.void, self._header.itemsize))
        return HeaderValues(self._header, self._records.view(item)[index].view(self._header.dtype))

    def __getitem__(self, name: str) -> np.ndarray:
        field = self._header.fields[name]
        value = self._records[name]
        native = value.astype(value.dtype.newbyteorder("=")) if field.width > 1 else value.copy()
        if field.mask:
            native &= field.mask
        if field.shift:
            native >>= field.shift
        return native


ETHERNET = Header("ethernet", ("ethertype", 12, 2))
VLAN_TAG = Header("vlan", ("ethertype", 2, 2))
PPPOE_SESSION = Header(
    "pppoe session",
    ("version_type", 0, 1),
    ("code", 1, 1),
    ("payload_length", 4, 2),
    ("ppp_protocol", 6, 2),
)
"""RFC 2516's 6-byte PPPoE header, then the PPP protocol field (RFC 1661), 2 bytes unless
compressed to its low byte (RFC 1661 PFC: a compressed field is one odd byte)."""
LINUX_SLL = Header("sll", ("protocol", 14, 2))
LINUX_SLL2 = Header("sll2", ("protocol", 0, 2))
BSD_NULL = Header("null", ("family", 0, 4))
IP_VERSION = Header("ip", ("version", 0, 1, 0xF0, 4))

IPV4 = Header(
    "ipv4",
    ("version", 0, 1, 0xF0, 4),
    ("header_words", 0, 1, 0x0F),
    ("total_length", 2, 2),
    ("fragment_offset", 6, 2, 0x1FFF),
    ("protocol", 9, 1),
    ("src", 12, 4),
    ("dst", 16, 4),
)
IPV6 = Header(
    "ipv6",
    ("payload_length", 4, 2),
    ("next_header", 6, 1),
    ("src_0", 8, 4), ("src_1", 12, 4), ("src_2", 16, 4), ("src_3", 20, 4),
    ("dst_0", 24, 4), ("dst_1", 28, 4), ("dst_2", 32, 4), ("dst_3", 36, 4),
)
IPV6_EXTENSION = Header(
    "ipv6 extension",
    ("next_header", 0, 1),
    ("length_units", 1, 1),
    ("fragment_offset", 2, 2, 0xFFF8, 3),
)
IPV6_JUMBO_OPTION = Header("ipv6 jumbo", ("option_type", 2, 1), ("jumbo_length", 4, 4))

TCP = Header(
    "tcp",
    ("src_port", 0, 2),
    ("dst_port", 2, 2),
    ("seq", 4, 4),
    ("ack", 8, 4),
    ("header_words", 12, 1, 0xF0, 4),
    ("flags", 12, 2, 0x01FF),
    ("window", 14, 2),
)
TCP_OPTION = Header("tcp option", ("kind", 0, 1), ("length", 1, 1))
TCP_NOP_NOP_TIMESTAMP = Header("nop nop timestamp", ("layout", 0, 4), ("value", 4, 4), ("echo", 8, 4))
TCP_MSS_OPTION = Header("mss", ("mss", 2, 2))
TCP_WINDOW_SCALE_OPTION = Header("window scale", ("shift", 2, 1))
TCP_TIMESTAMP_OPTION = Header("timestamp", ("value", 2, 4), ("echo", 6, 4))
TCP_SACK_BLOCK = Header("sack block", ("left", 0, 4), ("right", 4, 4))

ETHERNET_IPV4_TCP = Header.stacked(
    "ethernet + ipv4 without options + tcp",
    ("ethernet", ETHERNET, 0),
    ("ipv4", IPV4, 14),
    ("tcp", TCP, 34),
)
"""The layout of nearly every packet of an Ethernet capture, read in one gather."""
