"""Build a large pcap by replicating a real capture with new addresses.

Each copy of the source gets its own IPv4 addresses (so its connections are new connections)
and a time offset (so copies follow each other, as a long capture would); records are cut to
`--snaplen` bytes as a capture taken with `tcpdump -s 128` would be. The source must be a
classic little-endian microsecond pcap with Ethernet + IPv4 framing, such as the lab's traces.

With `--connections N` the packets are spread over N connections instead: the source's one
TCP connection becomes a unit of packets/N packets, its handshake followed by its data phase
repeated end to end (sequence, acknowledgement, TCP timestamp and capture time shifted by one
data phase per repeat, so the connection simply goes on) or cut short; the teardown is left
out, so every unit is one connection. Units are then copied as above.

    python3 benchmarks/make_large_capture.py sample_traces/seed003-nagle.pcap /tmp/big.pcap \
        --packets 10000000
    python3 benchmarks/make_large_capture.py sample_traces/seed003-nagle.pcap /tmp/ten.pcap \
        --packets 1000000 --connections 10
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


TCP_IN_FRAME = 14 + 20
SYN, FIN, RST = 0x02, 0x01, 0x04


def _field(body: np.ndarray, positions: np.ndarray) -> np.ndarray:
    """Big-endian 32-bit fields at `positions` of `body`, as int64."""
    return body[positions[:, None] + np.arange(4)].copy().view(">u4").ravel().astype(np.int64)


def _put(body: np.ndarray, positions: np.ndarray, values: np.ndarray, dtype: str) -> None:
    body[positions[:, None] + np.arange(4)] = (
        (values % (1 << 32)).astype(dtype).view(np.uint8).reshape(-1, 4))


def _stretched(body: np.ndarray, addresses: np.ndarray, times: np.ndarray, packets: int
               ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """One connection of `packets` packets: the handshake, then the data phase repeated."""
    records = times
    ends = np.r_[records[1:], len(body)]
    ip = np.isin(records, addresses - 16 - IPV4_SRC_IN_FRAME)
    tcp = ip & (body[records + 16 + 14 + 9] == 6)
    flags = body[records + 16 + TCP_IN_FRAME + 13]
    syn = tcp & ((flags & SYN) != 0)
    closing = tcp & ((flags & (FIN | RST)) != 0)
    last_syn = int(np.flatnonzero(syn).max())
    first_close = int(np.flatnonzero(closing).min()) if closing.any() else len(records)
    handshake = np.flatnonzero(tcp[:last_syn + 2])
    phase = np.arange(last_syn + 2, first_close)[tcp[last_syn + 2:first_close]]
    if len(phase) == 0:
        raise SystemExit("the source's TCP connection has no data phase to repeat")
    first = int(phase[0])
    client = body[records[first] + 16 + IPV4_SRC_IN_FRAME + 3]
    repeat = {name: _cycle_shift(body, records, phase, first_close, client, name)
              for name in ("seq", "ack", "tsval", "tsecr", "time")}
    pieces = [body[records[i]:ends[i]] for i in handshake]
    order = list(handshake)
    cycles = -(-(packets - len(handshake)) // len(phase))
    cycle_body = np.concatenate([body[records[i]:ends[i]] for i in phase])
    starts = np.cumsum([0] + [ends[i] - records[i] for i in phase])[:-1]
    for cycle in range(cycles):
        copy = cycle_body.copy()
        for name, (positions, shift) in repeat.items():
            if len(positions):
                _apply(copy, starts, positions, shift * cycle, name)
        pieces.append(copy)
        order.extend(phase)
    unit = np.concatenate(pieces)
    lengths = [ends[i] - records[i] for i in order]
    unit_records = np.cumsum([0] + lengths)[:-1]
    keep = min(packets, len(order))
    cut = unit_records[keep] if keep < len(order) else len(unit)
    unit = unit[:cut]
    unit_records = unit_records[:keep]
    is_ip = np.isin(np.array(order[:keep]), np.flatnonzero(ip))
    return unit, unit_records[is_ip] + 16 + IPV4_SRC_IN_FRAME, unit_records


def _cycle_shift(body: np.ndarray, records: np.ndarray, phase: np.ndarray, end: int,
                 client: int, name: str) -> tuple[np.ndarray, np.ndarray]:
    """Where a field sits in each data-phase record (offset within the record, or -1) and how
    much one repeat adds to it, per record."""
    tcp_at = records[phase] + 16 + TCP_IN_FRAME
    from_client = body[records[phase] + 16 + IPV4_SRC_IN_FRAME + 3] == client
    next_rec = records[end] if end < len(records) else None
    if name == "time":
        micros = (body[records[phase][:, None] + np.arange(8)].copy().view("<u4")
                  .astype(np.int64) * [1_000_000, 1]).sum(axis=1)
        after = (micros[-1] - micros[0]) + 1_000 if next_rec is None else (
            int((body[next_rec:next_rec + 8].copy().view("<u4").astype(np.int64)
                 * [1_000_000, 1]).sum()) - int(micros[0]))
        return np.zeros(len(phase), dtype=np.int64), np.full(len(phase), after)
    if name in ("seq", "ack"):
        offset = 4 if name == "seq" else 8
        data_offset = (body[tcp_at + 12] >> 4).astype(np.int64) * 4
        total = body[records[phase] + 16 + 14 + 2].astype(np.int64) * 256 + body[
            records[phase] + 16 + 14 + 3]
        payload = total - 20 - data_offset
        seq = _field(body, tcp_at + 4)
        advance = {side: int((seq[mask] + payload[mask]).max() - seq[mask].min())
                   for side, mask in ((True, from_client), (False, ~from_client))}
        mine = from_client if name == "seq" else ~from_client
        shift = np.where(mine, advance[True], advance[False])
        return np.full(len(phase), TCP_IN_FRAME + offset), shift
    has_ts = ((body[tcp_at + 12] >> 4) >= 8) & (body[tcp_at + 22] == 8)
    offset = 24 if name == "tsval" else 28
    values = _field(body, tcp_at + offset)
    spans = {side: int(values[has_ts & (from_client == side)].max()
                       - values[has_ts & (from_client == side)].min()) + 1
             if (has_ts & (from_client == side)).any() else 0 for side in (True, False)}
    sender = from_client if name == "tsval" else ~from_client
    shift = np.where(sender, spans[True], spans[False])
    return np.where(has_ts, TCP_IN_FRAME + offset, -1), shift


def _apply(copy: np.ndarray, starts: np.ndarray, offsets: np.ndarray, shift: np.ndarray,
           name: str) -> None:
    present = offsets >= 0
    if name == "time":
        at = starts + 0
        micros = (copy[at[:, None] + np.arange(8)].copy().view("<u4").astype(np.int64)
                  * [1_000_000, 1]).sum(axis=1) + shift
        _put(copy, at, micros // 1_000_000, "<u4")
        _put(copy, at + 4, micros % 1_000_000, "<u4")
        return
    at = starts[present] + 16 + offsets[present]
    _put(copy, at, _field(copy, at) + shift[present], ">u4")


def build(source: Path, target: Path, packets: int, snaplen: int,
          connections: int | None = None) -> int:
    """Write at least `packets` packets to `target`; returns how many were written."""
    header, body, addresses, times = _template(source, snaplen)
    if connections:
        body, addresses, times = _stretched(body, addresses, times, -(-packets // connections))
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
    parser.add_argument("--connections", type=int,
                        help="spread the packets over this many connections (see above)")
    arguments = parser.parse_args()
    written = build(arguments.source, arguments.target, arguments.packets, arguments.snaplen,
                    arguments.connections)
    print(f"wrote {written} packets to {arguments.target}")


if __name__ == "__main__":
    main()
