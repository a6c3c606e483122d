"""Build a large pcap by replicating a real capture with new addresses.

Each copy of the source gets its own IPv4 addresses (so its connections are new connections)
and a time offset (so copies follow each other, as a long capture would); records are cut to
`--snaplen` bytes as a capture taken with `tcpdump -s 128` would be. The source must be a
classic little-endian microsecond pcap with Ethernet + IPv4 framing, such as the lab's traces.

    python3 benchmarks/make_large_capture.py sample_traces/seed003-nagle.pcap /tmp/big.pcap \
        --packets 10000000
"""

from __future__ import annotations

import argparse
import struct
from pathlib import Path

import numpy as np

PCAP_HEADER_BYTES = 24
RECORD_HEADER_BYTES = 16
IPV4_SRC_IN_FRAME = 14 + 12
MICRO_MAGIC = 0xA1B2C3D4


def _template(source: Path, snaplen: int) -> tuple[bytes, np.ndarray, np.ndarray, np.ndarray]:
    """File header, one copy's records (cut to snaplen), and where each IPv4 address sits."""
    data = source.read_bytes()
    if struct.unpack("<I", data[:4])[0] != MICRO_MAGIC or struct.unpack("<I", data[20:24])[0] != 1:
        raise SystemExit(f"{source}: need a little-endian microsecond pcap with Ethernet framing")
    header = data[:16] + struct.pack("<I", snaplen) + data[20:24]
    records: list[bytes] = []
    address_positions: list[int] = []
    time_positions: list[int] = []
    position, written = PCAP_HEADER_BYTES, 0
    while position + RECORD_HEADER_BYTES <= len(data):
        seconds, micros, caplen, wirelen = struct.unpack("<IIII", data[position:position + 16])
        frame = data[position + 16:position + 16 + caplen][:snaplen]
        if frame[12:14] == b"\x08\x00" and len(frame) >= IPV4_SRC_IN_FRAME + 8:
            address_positions.append(written + 16 + IPV4_SRC_IN_FRAME)
        time_positions.append(written)
        record = struct.pack("<IIII", seconds, micros, len(frame), wirelen) + frame
        records.append(record)
        written += len(record)
        position += RECORD_HEADER_BYTES + caplen
    body = np.frombuffer(b"".join(records), dtype=np.uint8).copy()
    return header, body, np.array(address_positions), np.array(time_positions)


def build(source: Path, target: Path, packets: int, snaplen: int) -> int:
    """Write at least `packets` packets to `target`; returns how many were written."""
    header, body, addresses, times = _template(source, snaplen)
    both = np.concatenate([addresses, addresses + 4])
    original = body[both[:, None] + np.arange(4)].copy()
    _, host = np.unique(original.view(np.uint32).ravel(), return_inverse=True)
    base_seconds = body[times[:, None] + np.arange(4)].copy().view("<u4").ravel()
    span_s = int(base_seconds.max() - base_seconds.min()) + 1
    copies = -(-packets // len(times))
    with target.open("wb") as out:
        out.write(header)
        for copy in range(copies):
            new = np.empty((len(both), 4), dtype=np.uint8)
            new[:, 0] = 10 + host.ravel()
            new[:, 1:] = [(copy >> 16) & 0xFF, (copy >> 8) & 0xFF, copy & 0xFF]
            body[both[:, None] + np.arange(4)] = new
            stamp = (base_seconds + np.uint32(copy * span_s)).astype("<u4").view(np.uint8)
            body[times[:, None] + np.arange(4)] = stamp.reshape(-1, 4)
            out.write(body.tobytes())
    return copies * len(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("source", type=Path)
    parser.add_argument("target", type=Path)
    parser.add_argument("--packets", type=int, default=10_000_000)
    parser.add_argument("--snaplen", type=int, default=128)
    arguments = parser.parse_args()
    written = build(arguments.source, arguments.target, arguments.packets, arguments.snaplen)
    print(f"wrote {written} packets to {arguments.target}")


if __name__ == "__main__":
    main()
