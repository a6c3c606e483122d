"""A minimal pcapng writer for hand-built edge cases (block layout from the pcapng spec):
section headers in either byte order, interface descriptions with options, enhanced, simple
and obsolete packet blocks, and blocks of a type no reader knows; and the real frames of a lab
capture to build them around."""

from __future__ import annotations

import struct
from pathlib import Path

SEED003 = Path(__file__).parent.parent / "sample_traces" / "seed003-nagle.pcap"
PCAP_HEADER_BYTES = 24
RECORD_HEADER_BYTES = 16
SHB, IDB, OPB, SPB, EPB = 0x0A0D0D0A, 0x00000001, 0x00000002, 0x00000003, 0x00000006
OPTION_COMMENT, OPTION_IF_NAME, OPTION_IF_TSRESOL, OPTION_IF_TSOFFSET = 1, 2, 9, 14


def _pad(data: bytes) -> bytes:
    return data + b"\0" * (-len(data) % 4)


def _options(options: list[tuple[int, bytes]], order: str) -> bytes:
    if not options:
        return b""
    body = b"".join(struct.pack(order + "HH", code, len(value)) + _pad(value)
                    for code, value in options)
    return body + struct.pack(order + "HH", 0, 0)


def block(block_type: int, body: bytes, order: str = "<") -> bytes:
    length = 12 + len(body)
    return struct.pack(order + "II", block_type, length) + body + struct.pack(order + "I", length)


def section(order: str = "<") -> bytes:
    return block(SHB, struct.pack(order + "IHHq", 0x1A2B3C4D, 1, 0, -1), order)


def interface(linktype: int, name: str = "", nanoseconds: bool = False, order: str = "<",
              snaplen: int = 65535, resolution: int | None = None,
              offset_s: int | None = None) -> bytes:
    options = [(OPTION_IF_NAME, name.encode())] if name else []
    if nanoseconds:
        options.append((OPTION_IF_TSRESOL, bytes([9])))
    if resolution is not None:
        options.append((OPTION_IF_TSRESOL, bytes([resolution])))
    if offset_s is not None:
        options.append((OPTION_IF_TSOFFSET, struct.pack(order + "q", offset_s)))
    return block(IDB, struct.pack(order + "HHI", linktype, 0, snaplen) + _options(options, order),
                 order)


def packet(data: bytes, time_units: int, interface_id: int = 0, comment: str = "",
           order: str = "<", wire_bytes: int | None = None) -> bytes:
    options = [(OPTION_COMMENT, comment.encode())] if comment else []
    header = struct.pack(order + "IIIII", interface_id, time_units >> 32,
                         time_units & 0xFFFFFFFF, len(data), wire_bytes or len(data))
    return block(EPB, header + _pad(data) + _options(options, order), order)


def simple_packet(data: bytes, order: str = "<", wire_bytes: int | None = None) -> bytes:
    """A simple packet block: it states only the length on the wire (`wire_bytes`, default
    the data's); readers keep the interface's snapshot length of it."""
    return block(SPB, struct.pack(order + "I", wire_bytes or len(data)) + _pad(data), order)


def obsolete_packet(data: bytes, time_units: int, interface_id: int = 0,
                    order: str = "<", wire_bytes: int | None = None) -> bytes:
    header = struct.pack(order + "HHIIII", interface_id, 0, time_units >> 32,
                         time_units & 0xFFFFFFFF, len(data), wire_bytes or len(data))
    return block(OPB, header + _pad(data), order)


def real_frames(count: int, capture: Path = SEED003) -> list[tuple[int, bytes]]:
    """(time_us, frame bytes) of the first `count` packets of a real Linux capture (a
    little-endian microsecond pcap), walked record by record, to build files around."""
    data = capture.read_bytes()
    frames, position = [], PCAP_HEADER_BYTES
    while len(frames) < count and position + RECORD_HEADER_BYTES <= len(data):
        seconds, micro, caplen = struct.unpack_from("<III", data, position)
        start = position + RECORD_HEADER_BYTES
        frames.append((seconds * 1_000_000 + micro, data[start:start + caplen]))
        position = start + caplen
    return frames
