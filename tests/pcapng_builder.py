"""A minimal pcapng writer for hand-built edge cases (block layout from the pcapng spec):
section header, interface descriptions with options, enhanced packets with comments, and
blocks of a type no reader knows."""

from __future__ import annotations

import struct

SHB, IDB, EPB = 0x0A0D0D0A, 0x00000001, 0x00000006
OPTION_COMMENT, OPTION_IF_NAME, OPTION_IF_TSRESOL = 1, 2, 9


def _pad(data: bytes) -> bytes:
    return data + b"\0" * (-len(data) % 4)


def _options(options: list[tuple[int, bytes]]) -> bytes:
    if not options:
        return b""
    body = b"".join(struct.pack("<HH", code, len(value)) + _pad(value) for code, value in options)
    return body + struct.pack("<HH", 0, 0)


def block(block_type: int, body: bytes) -> bytes:
    length = 12 + len(body)
    return struct.pack("<II", block_type, length) + body + struct.pack("<I", length)


def section() -> bytes:
    return block(SHB, struct.pack("<IHHq", 0x1A2B3C4D, 1, 0, -1))


def interface(linktype: int, name: str = "", nanoseconds: bool = False) -> bytes:
    options = [(OPTION_IF_NAME, name.encode())] if name else []
    if nanoseconds:
        options.append((OPTION_IF_TSRESOL, bytes([9])))
    return block(IDB, struct.pack("<HHI", linktype, 0, 65535) + _options(options))


def packet(data: bytes, time_units: int, interface_id: int = 0, comment: str = "") -> bytes:
    options = [(OPTION_COMMENT, comment.encode())] if comment else []
    header = struct.pack("<IIIII", interface_id, time_units >> 32, time_units & 0xFFFFFFFF,
                         len(data), len(data))
    return block(EPB, header + _pad(data) + _options(options))
