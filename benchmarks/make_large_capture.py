"""Build a large pcap by replicating one or several real captures with new addresses.

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

With several sources (files, or directories meaning every file in them, by name) the capture is
a mix of real traffic rather than copies of one trace of stalls. Sources of another format,
fuzzer-made ones (named *fuzz*), truncated ones, ones without an IPv4 TCP packet and ones
spanning more than `--max-source-span` seconds (captures merged across months or years, whose
gaps would push the copies past the pcap's 32-bit seconds) are skipped, and non-IPv4 records are
dropped (only IPv4 addresses are rewritten per copy). The rest are joined into one template, each
source starting 1 s after the previous one ends; every (source, address) pair is its own host,
numbered h -> 10+h/256 . h%256 . copy/256 . copy%256.

    python3 benchmarks/make_large_capture.py ../shared/corpora/zeek sample_traces /tmp/mix10.pcap \
        --packets 10000000
"""

from __future__ import annotations

import argparse
import struct
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

PCAP_HEADER_BYTES = 24
RECORD_HEADER_BYTES = 16
IPV4_SRC_IN_FRAME = 14 + 12
MICRO_MAGIC = 0xA1B2C3D4


def _is_micro_ethernet_pcap(data: bytes) -> bool:
    """A classic little-endian microsecond pcap of Ethernet frames (link type 1)."""
    return (len(data) >= PCAP_HEADER_BYTES and struct.unpack("<I", data[:4])[0] == MICRO_MAGIC
            and struct.unpack("<I", data[20:24])[0] == 1)


def _template(source: Path, snaplen: int) -> tuple[bytes, np.ndarray, np.ndarray, np.ndarray]:
    """File header, one copy's records (cut to snaplen), and where each IPv4 address sits."""
    data = source.read_bytes()
    if not _is_micro_ethernet_pcap(data):
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
    pieces = list(_stretched_pieces(body, addresses, times, packets))
    lengths = np.cumsum([0] + [len(piece) for piece, _, _ in pieces])[:-1]
    return (np.concatenate([piece for piece, _, _ in pieces]),
            np.concatenate([at + start for (_, at, _), start in zip(pieces, lengths)]),
            np.concatenate([records + start for (_, _, records), start in zip(pieces, lengths)]))


def _stretched_pieces(body: np.ndarray, addresses: np.ndarray, times: np.ndarray, packets: int
                      ) -> Iterator[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """`_stretched`'s connection a piece at a time (the handshake, then each repeat of the data
    phase, the last cut to `packets`): each piece's bytes, where its IPv4 source addresses
    sit and where its records start, within the piece. A connection of 100 M packets is
    13.7 GB: it is written a piece at a time."""
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
    yield _piece([body[records[i]:ends[i]] for i in handshake[:packets]],
                 ip[handshake[:packets]])
    left = packets - len(handshake)
    cycle_body = np.concatenate([body[records[i]:ends[i]] for i in phase])
    starts = np.cumsum([0] + [ends[i] - records[i] for i in phase])[:-1]
    cycle = 0
    while left > 0:
        copy = cycle_body.copy()
        for name, (positions, shift) in repeat.items():
            if len(positions):
                _apply(copy, starts, positions, shift * cycle, name)
        keep = min(left, len(phase))
        cut = starts[keep] if keep < len(phase) else len(copy)
        yield copy[:cut], starts[:keep][ip[phase[:keep]]] + 16 + IPV4_SRC_IN_FRAME, starts[:keep]
        left -= keep
        cycle += 1


def _piece(frames: list[np.ndarray], is_ip: np.ndarray
           ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    starts = np.cumsum([0] + [len(frame) for frame in frames])[:-1].astype(np.int64)
    joined = np.concatenate(frames) if frames else np.zeros(0, dtype=np.uint8)
    return joined, starts[is_ip] + 16 + IPV4_SRC_IN_FRAME, starts


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
    if connections == 1:
        return _one_connection(header, body, addresses, times, target, packets)
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


def _one_connection(header: bytes, body: np.ndarray, addresses: np.ndarray, times: np.ndarray,
                    target: Path, packets: int) -> int:
    """`build` with one connection: its pieces written as they are made, each host's address
    made 10+host.0.0.0 as the first copy's are."""
    original = body[addresses[:, None] + np.arange(8)].copy().view(np.uint32)
    hosts = np.unique(original.ravel())
    written = 0
    with target.open("wb") as out:
        out.write(header)
        for piece, at, records in _stretched_pieces(body, addresses, times, packets):
            both = np.concatenate([at, at + 4])
            words = piece[both[:, None] + np.arange(4)].copy().view(np.uint32).ravel()
            new = np.zeros((len(both), 4), dtype=np.uint8)
            new[:, 0] = 10 + np.searchsorted(hosts, words)
            piece[both[:, None] + np.arange(4)] = new
            out.write(piece.tobytes())
            written += len(records)
    return written


IPV4_DST_IN_FRAME = IPV4_SRC_IN_FRAME + 4
IPV4_PROTOCOL_IN_FRAME = 14 + 9
IPV4_FRAME_MINIMUM = IPV4_DST_IN_FRAME + 4
MICROS = 1_000_000
MAX_COPIES = 1 << 16
MAX_FIRST_OCTET = 223
DEFAULT_MAX_SOURCE_SPAN = 86_400
SKIP_REASONS = {
    "format": "not a little-endian microsecond Ethernet pcap",
    "truncated": "truncated record",
    "no_tcp": "no IPv4 TCP packets",
    "span": "spanning more than --max-source-span",
    "fuzz": "named *fuzz* (fuzzer-made)",
}


@dataclass
class _Mix:
    """The template built from several sources: its records, kept as parts, and what was left out."""

    frames: list[bytes] = field(default_factory=list)
    wire_lengths: list[int] = field(default_factory=list)
    micros: list[int] = field(default_factory=list)
    hosts: list[int] = field(default_factory=list)
    used: int = 0
    skipped: Counter[str] = field(default_factory=Counter)
    dropped: int = 0
    end: int | None = None


def _source_files(sources: list[Path]) -> list[Path]:
    """The files named by `sources`, in the order given; a directory stands for its files by name."""
    files: list[Path] = []
    for source in sources:
        if source.is_dir():
            files.extend(sorted((path for path in source.iterdir() if path.is_file()),
                                key=lambda path: path.name))
        else:
            files.append(source)
    return files


def _add_source(mix: _Mix, path: Path, snaplen: int, max_span: int) -> None:
    """Append `path`'s IPv4 records to `mix`, shifted to start 1 s after its end, or count a skip."""
    if "fuzz" in path.name.lower():
        mix.skipped["fuzz"] += 1
        return
    data = path.read_bytes()
    if not _is_micro_ethernet_pcap(data):
        mix.skipped["format"] += 1
        return
    frames: list[bytes] = []
    wire_lengths: list[int] = []
    micros: list[int] = []
    addresses: list[int] = []
    dropped, has_tcp, position = 0, False, PCAP_HEADER_BYTES
    while position < len(data):
        if position + RECORD_HEADER_BYTES > len(data):
            mix.skipped["truncated"] += 1
            return
        seconds, fraction, caplen, wirelen = struct.unpack_from("<IIII", data, position)
        start = position + RECORD_HEADER_BYTES
        position = start + caplen
        if position > len(data):
            mix.skipped["truncated"] += 1
            return
        frame = data[start:start + min(caplen, snaplen)]
        if frame[12:14] != b"\x08\x00" or len(frame) < IPV4_FRAME_MINIMUM:
            dropped += 1
            continue
        has_tcp = has_tcp or frame[IPV4_PROTOCOL_IN_FRAME] == 6
        frames.append(frame)
        wire_lengths.append(wirelen)
        micros.append(seconds * MICROS + fraction)
        addresses.append(int.from_bytes(frame[IPV4_SRC_IN_FRAME:IPV4_DST_IN_FRAME], "big"))
        addresses.append(int.from_bytes(frame[IPV4_DST_IN_FRAME:IPV4_FRAME_MINIMUM], "big"))
    if not has_tcp:
        mix.skipped["no_tcp"] += 1
        return
    if max(micros) - min(micros) > max_span * MICROS:
        mix.skipped["span"] += 1
        return
    # Timestamps may go backwards inside a source, so it spans its earliest to its latest packet.
    shift = 0 if mix.end is None else mix.end + MICROS - min(micros)
    mix.end = max(micros) + shift
    mix.frames.extend(frames)
    mix.wire_lengths.extend(wire_lengths)
    mix.micros.extend(stamp + shift for stamp in micros)
    mix.hosts.extend((mix.used << 32) | address for address in addresses)
    mix.used += 1
    mix.dropped += dropped


def _summary(mix: _Mix) -> str:
    reasons = ", ".join(f"{mix.skipped[reason]} {text}" for reason, text in SKIP_REASONS.items()
                        if mix.skipped[reason])
    skipped = sum(mix.skipped.values())
    return (f"sources: {mix.used} used, {skipped} skipped" + (f" ({reasons})" if reasons else "")
            + f"; {mix.dropped} non-IPv4 records dropped from the used sources")


def _put_times(body: np.ndarray, times: np.ndarray, micros: np.ndarray) -> None:
    """Write `micros` as the (seconds, microseconds) fields of the records starting at `times`."""
    stamps = np.stack([micros // MICROS, micros % MICROS], axis=1).astype("<u4")
    body[times[:, None] + np.arange(8)] = stamps.view(np.uint8).reshape(-1, 8)


def build_mix(sources: list[Path], target: Path, packets: int, snaplen: int,
              max_span: int = DEFAULT_MAX_SOURCE_SPAN) -> int:
    """Write at least `packets` packets of copies of the mix of `sources` to `target`; returns how
    many were written."""
    mix = _Mix()
    for path in _source_files(sources):
        _add_source(mix, path, snaplen, max_span)
    print(_summary(mix))
    if not mix.used:
        raise SystemExit("no usable source")
    headers = [struct.pack("<IIII", 0, 0, len(frame), wirelen)
               for frame, wirelen in zip(mix.frames, mix.wire_lengths)]
    lengths = np.array([len(frame) for frame in mix.frames], dtype=np.int64) + RECORD_HEADER_BYTES
    times = np.cumsum(lengths) - lengths
    body = np.frombuffer(b"".join(part for pair in zip(headers, mix.frames) for part in pair),
                         dtype=np.uint8).copy()
    micros = np.array(mix.micros, dtype=np.int64)
    _, host = np.unique(np.array(mix.hosts, dtype=np.int64), return_inverse=True)
    host = host.ravel()
    copies = -(-packets // len(times))
    hosts = int(host.max()) + 1
    if copies > MAX_COPIES:
        raise SystemExit(f"{copies} copies needed; at most {MAX_COPIES} fit in two address octets")
    if 10 + (hosts - 1) // 256 > MAX_FIRST_OCTET:
        raise SystemExit(f"{hosts} hosts: the first address octet would pass {MAX_FIRST_OCTET}")
    step = int(micros.max() - micros.min()) + MICROS
    if (int(micros.max()) + (copies - 1) * step) // MICROS >= 1 << 32:
        raise SystemExit(f"{copies} copies of a {step / MICROS:.0f} s template pass the pcap's "
                         "32-bit seconds; lower --max-source-span")
    addresses = np.empty(2 * len(times), dtype=np.int64)
    addresses[0::2] = times + RECORD_HEADER_BYTES + IPV4_SRC_IN_FRAME
    addresses[1::2] = times + RECORD_HEADER_BYTES + IPV4_DST_IN_FRAME
    octets = addresses[:, None] + np.arange(4)
    new = np.empty((len(addresses), 4), dtype=np.uint8)
    new[:, 0] = 10 + host // 256
    new[:, 1] = host % 256
    header = struct.pack("<IHHiIII", MICRO_MAGIC, 2, 4, 0, 0, snaplen, 1)
    with target.open("wb") as out:
        out.write(header)
        for copy in range(copies):
            new[:, 2:] = [copy >> 8, copy & 0xFF]
            body[octets] = new
            _put_times(body, times, micros + copy * step)
            out.write(body.tobytes())
    return copies * len(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("source", type=Path, nargs="+",
                        help="source captures: files and/or directories (every file in them)")
    parser.add_argument("target", type=Path)
    parser.add_argument("--packets", type=int, default=10_000_000)
    parser.add_argument("--snaplen", type=int, default=128)
    parser.add_argument("--connections", type=int,
                        help="spread the packets over this many connections (see above); "
                             "one source file only")
    parser.add_argument("--max-source-span", type=int, metavar="SECONDS",
                        help="several sources only: skip a source whose packets span more than "
                             f"this (default {DEFAULT_MAX_SOURCE_SPAN})")
    arguments = parser.parse_args()
    sources: list[Path] = arguments.source
    for source in sources:
        if not source.exists():
            parser.error(f"no such file or directory: {source}")
    if len(sources) == 1 and sources[0].is_file():
        if arguments.max_source_span is not None:
            parser.error("--max-source-span is for several sources")
        written = build(sources[0], arguments.target, arguments.packets, arguments.snaplen,
                        arguments.connections)
    else:
        if arguments.connections:
            parser.error("--connections needs exactly one source file, not several sources")
        if arguments.snaplen < IPV4_FRAME_MINIMUM:
            parser.error(f"several sources need --snaplen >= {IPV4_FRAME_MINIMUM} "
                         "to keep both IPv4 addresses")
        max_span = arguments.max_source_span
        written = build_mix(sources, arguments.target, arguments.packets, arguments.snaplen,
                            DEFAULT_MAX_SOURCE_SPAN if max_span is None else max_span)
    print(f"wrote {written} packets to {arguments.target}")


if __name__ == "__main__":
    main()
