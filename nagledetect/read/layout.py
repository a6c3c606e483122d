"""Declarative header layouts and the vectorised field gather that reads them.

Each header is a table of fields (name, byte offset, width, bit mask, shift), as in dpkt's
header tables; `gather_fields` reads one field for a whole batch of packets at once with numpy,
so no per-packet Python object is ever built.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

_WIDTH_DTYPES = {1: np.uint8, 2: np.uint16, 4: np.uint32}


@dataclass(frozen=True)
class Field:
    """One big-endian header field: `width` bytes at `offset`, then `(value & mask) >> shift`."""

    name: str
    offset: int
    width: int
    mask: int = 0
    shift: int = 0


def _fields(*specs: tuple) -> dict[str, Field]:
    return {spec[0]: Field(*spec) for spec in specs}


ETHERNET = _fields(("ethertype", 12, 2))
VLAN_TAG = _fields(("ethertype", 2, 2))
LINUX_SLL = _fields(("protocol", 14, 2))
LINUX_SLL2 = _fields(("protocol", 0, 2))
BSD_NULL = _fields(("family", 0, 4))

IPV4 = _fields(
    ("version", 0, 1, 0xF0, 4),
    ("header_words", 0, 1, 0x0F),
    ("total_length", 2, 2),
    ("more_fragments", 6, 1, 0x20, 5),
    ("fragment_offset", 6, 2, 0x1FFF),
    ("protocol", 9, 1),
    ("src", 12, 4),
    ("dst", 16, 4),
)
IPV6 = _fields(
    ("payload_length", 4, 2),
    ("next_header", 6, 1),
    ("src_hi", 8, 4),
    ("src_mid_hi", 12, 4),
    ("src_mid_lo", 16, 4),
    ("src_lo", 20, 4),
    ("dst_hi", 24, 4),
    ("dst_mid_hi", 28, 4),
    ("dst_mid_lo", 32, 4),
    ("dst_lo", 36, 4),
)
IPV6_EXTENSION = _fields(("next_header", 0, 1), ("length_units", 1, 1))
IPV6_FRAGMENT = _fields(("fragment_offset", 2, 2, 0xFFF8, 3))
IPV6_JUMBO_OPTION = _fields(("option_type", 2, 1), ("jumbo_length", 4, 4))

TCP = _fields(
    ("src_port", 0, 2),
    ("dst_port", 2, 2),
    ("seq", 4, 4),
    ("ack", 8, 4),
    ("header_words", 12, 1, 0xF0, 4),
    ("flags", 12, 2, 0x01FF),
    ("window", 14, 2),
)
TCP_OPTION = _fields(("kind", 0, 1), ("length", 1, 1))
TCP_OPTION_VALUES = _fields(
    ("mss", 2, 2),
    ("window_scale", 2, 1),
    ("timestamp_value", 2, 4),
    ("timestamp_echo", 6, 4),
    ("sack_left", 0, 4),
    ("sack_right", 4, 4),
)


def gather_field(buf: np.ndarray, positions: np.ndarray, field: Field) -> np.ndarray:
    """Read `field` at `positions + field.offset` for every packet; `buf` must be padded."""
    start = positions + field.offset
    value = buf[start].astype(np.uint32)
    for byte in range(1, field.width):
        value = (value << 8) | buf[start + byte]
    if field.mask:
        value &= field.mask
    if field.shift:
        value >>= field.shift
    return value.astype(_WIDTH_DTYPES[field.width], copy=False)
