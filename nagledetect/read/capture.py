"""Read a capture batch by batch into decoded TCP columns, with the accounting of every packet."""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import Future
from dataclasses import dataclass

import numpy as np

from nagledetect.read import skips
from nagledetect.read.accounting import Accounting, ProgressCallback
from nagledetect.read.compressed import capture_bytes
from nagledetect.read.decode import DecodedBatch, decode_batch
from nagledetect.read.libpcap import CaptureReader
from nagledetect.read.raw import RawBatch
from nagledetect.read.threads import executor

RECORD_HEADER_BYTES = 16
SMALLEST_TCP_RECORD_BYTES = RECORD_HEADER_BYTES + 40
"""A record header and the smallest IPv4 + TCP headers: a TCP packet's record is rarely smaller."""
MOST_EXPECTED_PACKETS = 1 << 28
"""A cap on the estimate, so room reserved for a huge file stays within what Linux lends."""


DecodedColumns = tuple[dict[str, np.ndarray], dict[str, np.ndarray]]



def expected_tcp_packets(path: str) -> int:
    """A generous estimate of a capture's TCP packets from its size, for reserving room (too
    high costs nothing: room never written takes no memory; too low only costs a move)."""
    return min(capture_bytes(path) // SMALLEST_TCP_RECORD_BYTES, MOST_EXPECTED_PACKETS)


def decoded_batches(path: str, bpf_filter: str | None = None,
                    progress: ProgressCallback | None = None
                    ) -> tuple[Accounting, Iterator[DecodedColumns]]:
    """Open `path` and return its accounting and a generator of decoded TCP batches.

    Each batch is a dict of packet columns (with `frame`, 1-based file positions as in
    Wireshark, and `time_us`) and a dict of its SACK blocks (`row` = packet index within the
    batch, `left_raw`, `right_raw`). `progress(packets, bytes)` is called after each batch
    (bytes estimated as pcap records: 16-byte headers plus captured bytes); a `progress` with a
    `decompressing(done, total)` method is also told how a compressed capture's decompression
    gets on, before the first batch. The accounting is
    complete once the generator is exhausted. Opening happens now, so a file that cannot be
    read fails here, before any output. A caller that may stop early closes the generator
    (`contextlib.closing`): its reading and decoding threads are then shut down in the
    caller's thread, not by whichever thread the garbage collector runs in (the decoding
    thread cannot join itself).
    """
    reader = CaptureReader(path, bpf_filter,
                           decompression_progress=getattr(progress, "decompressing", None))
    accounting = Accounting(path=path, linktype=reader.linktype)
    return accounting, _batches(reader, accounting, progress)


def _batches(reader: CaptureReader, accounting: Accounting,
             progress: ProgressCallback | None) -> Iterator[DecodedColumns]:
    """Each batch is decoded on a thread of its own while the caller takes in the one before
    (numpy lets go of the GIL in the gathers), as libpcap reads the one after; in the caller's
    thread for a capture too small to be `threaded`."""
    bytes_read = 0
    with executor(1 if reader.threaded else 0, "decode") as decoder:
        pending: Future | None = None
        for batch in reader.batches():
            accounting.packets_read += len(batch)
            if progress:
                bytes_read += int(batch.caplens.sum()) + RECORD_HEADER_BYTES * len(batch)
                progress(accounting.packets_read, bytes_read)
            decoding = decoder.submit(_decoded, reader, batch, accounting)
            if pending is not None and (columns := pending.result()) is not None:
                yield columns
            pending = decoding
        if pending is not None and (columns := pending.result()) is not None:
            yield columns
    _note_truncation(reader, accounting)


def _note_truncation(reader: CaptureReader, accounting: Accounting) -> None:
    accounting.cut_short = reader.decompression_cut_short or reader.truncation
    if reader.decompression_cut_short:
        accounting.warnings.append(f"compressed capture cut short "
                                   f"({reader.decompression_cut_short}); analysed what it held")
    if reader.read_here:
        accounting.warnings.append(reader.read_here)
    if reader.truncation:
        accounting.warnings.append(f"capture cut short ({reader.truncation}); "
                                   f"analysed the {accounting.packets_read} packets before it")


def _decoded(reader: CaptureReader, batch: RawBatch, accounting: Accounting
             ) -> DecodedColumns | None:
    """One batch's TCP packets as columns (None when it holds none), its skips counted. With
    a filter, the TCP packets it excludes are kept too, with an `accepted` column False, and
    counted as excluded: connection ids are Wireshark's tcp.stream of the unfiltered file,
    which counts the conversations they start (`flows.streams`)."""
    accepted = reader.filter_mask(batch)
    decoded = decode_batch(batch.buf, batch.offsets, batch.caplens, batch.linktype)
    codes = _skip_codes(decoded.skip_codes, len(batch), batch.linktype, accepted)
    accounting.add_skipped(skips.count_reasons(codes))
    accounting.tcp_packets += int((codes == skips.KEPT).sum())
    if not decoded.columns or len(decoded.columns["batch_index"]) == 0:
        return None
    columns = decoded.columns
    in_batch = columns.pop("batch_index")
    columns["frame"] = (batch.first_frame + in_batch).astype(np.uint32)
    columns["time_us"] = batch.time_us[in_batch]
    columns["captured_bytes"] = batch.caplens[in_batch].astype(np.uint32)
    if accepted is not None:
        columns["accepted"] = accepted[in_batch]
    return columns, decoded.sack_blocks


def _skip_codes(decoded: np.ndarray | None, count: int, linktype: int,
                accepted: np.ndarray | None) -> np.ndarray:
    """Each packet's skip code (`decoded`: decoding's, None for a link type not decoded),
    a packet the filter excludes counted as excluded whatever its decoding said."""
    codes = decoded if decoded is not None else np.full(count, skips.LINK_TYPE_BASE + linktype)
    if accepted is None:
        return codes
    return np.where(accepted, codes, skips.EXCLUDED_BY_FILTER)


_KeptBatch = tuple[RawBatch, "np.ndarray | None"]
"""A batch read raw, with which of its packets the filter accepts (None: no filter)."""


@dataclass
class RawCapture:
    """A small capture read whole but not yet decoded, so that several can be decoded in one
    pass (`decoded_together`): its packets, as positions in its batches' buffers, with their
    frames, times and whether the filter accepts them; all of one link type (a capture whose
    interfaces differ is read as several, sharing one accounting)."""

    accounting: Accounting
    linktype: int
    buffers: list[np.ndarray]
    batch: np.ndarray
    """Which of `buffers` each packet lies in."""
    offsets: np.ndarray
    caplens: np.ndarray
    frames: np.ndarray
    time_us: np.ndarray
    accepted: np.ndarray | None
    """Which packets the filter accepts (None without a filter)."""


def read_raw(path: str, bpf_filter: str | None = None) -> list[RawCapture]:
    """Read `path` whole without decoding it (its filter applied to each packet): one piece
    for each run of batches of one link type (one for nearly every capture; its accounting,
    shared, is complete once `decoded_together` has decoded them all)."""
    reader = CaptureReader(path, bpf_filter)
    accounting = Accounting(path=path, linktype=reader.linktype)
    pieces: list[list[_KeptBatch]] = []
    for raw in reader.batches():
        accounting.packets_read += len(raw)
        if not pieces or pieces[-1][0][0].linktype != raw.linktype:
            pieces.append([])
        pieces[-1].append((raw, reader.filter_mask(raw)))
    _note_truncation(reader, accounting)
    if not pieces:
        return [_raw_piece(accounting, reader.linktype, [])]
    return [_raw_piece(accounting, piece[0][0].linktype, piece) for piece in pieces]


def _raw_piece(accounting: Accounting, linktype: int, batches: list[_KeptBatch]) -> RawCapture:
    numbers = [np.full(len(raw), number) for number, (raw, _) in enumerate(batches)]
    columns = [numbers, [raw.offsets for raw, _ in batches], [raw.caplens for raw, _ in batches],
               [raw.first_frame + np.arange(len(raw)) for raw, _ in batches],
               [raw.time_us for raw, _ in batches]]
    filtered = any(accepted is not None for _, accepted in batches)
    accepted = (np.concatenate([np.zeros(0, dtype=bool), *(accepted for _, accepted in batches)])
                if filtered else None)
    return RawCapture(accounting, linktype, [raw.buf for raw, _ in batches],
                      *(np.concatenate([np.zeros(0, dtype=np.int64), *parts])
                        for parts in columns), accepted)


def decoded_together(captures: list[RawCapture], numbers: list[int], frame_offsets: list[int]
                     ) -> DecodedColumns | None:
    """The TCP packets of several captures of one link type, decoded in one pass (a small
    capture's decoding is mostly the fixed cost of some hundred numpy calls), as one batch of
    columns with a `capture` column (each one's number in `numbers`) and frames offset by
    `frame_offsets`; None when none holds a TCP packet. Each capture's accounting is completed
    as its own decoding would complete it; its buffers are let go once joined into one."""
    linktype = captures[0].linktype
    if any(capture.linktype != linktype for capture in captures):
        raise ValueError("captures decoded together must share one link type")
    if not any(len(capture.offsets) for capture in captures):
        return None
    bases = np.cumsum([0, *(len(buffer) for capture in captures for buffer in capture.buffers)])
    first_buffer = np.cumsum([0, *(len(capture.buffers) for capture in captures)])
    buffer = np.concatenate([buffer for capture in captures for buffer in capture.buffers])
    for capture in captures:
        capture.buffers = []
    capture_of = np.repeat(np.arange(len(captures)), [len(c.offsets) for c in captures])
    offsets = np.concatenate([c.offsets + bases[first_buffer[i] + c.batch]
                              for i, c in enumerate(captures)])
    caplens = np.concatenate([c.caplens for c in captures])
    decoded = decode_batch(buffer, offsets, caplens, linktype)
    _count_each(captures, decoded)
    if not decoded.columns or len(decoded.columns["batch_index"]) == 0:
        return None
    columns = decoded.columns
    kept = columns.pop("batch_index")
    frames = np.concatenate([c.frames + offset for c, offset in zip(captures, frame_offsets)])
    columns["frame"] = frames[kept].astype(np.uint32)
    columns["time_us"] = np.concatenate([c.time_us for c in captures])[kept]
    columns["captured_bytes"] = caplens[kept].astype(np.uint32)
    columns["capture"] = np.asarray(numbers, dtype=np.uint64)[capture_of[kept]]
    if captures[0].accepted is not None:
        columns["accepted"] = np.concatenate([c.accepted for c in captures])[kept]
    return columns, decoded.sack_blocks


def _count_each(captures: list[RawCapture], decoded: DecodedBatch) -> None:
    """Each capture's TCP packets and skips by reason, from the packets decoded together (the
    captures' packets one after another)."""
    bounds = np.cumsum([0, *(len(capture.offsets) for capture in captures)]).tolist()
    for capture, start, stop in zip(captures, bounds[:-1], bounds[1:]):
        codes = _skip_codes(None if decoded.skip_codes is None else decoded.skip_codes[start:stop],
                            stop - start, capture.linktype, capture.accepted)
        capture.accounting.tcp_packets += int((codes == skips.KEPT).sum())
        capture.accounting.add_skipped(skips.count_reasons(codes))
