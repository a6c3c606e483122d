"""Read a capture batch by batch into decoded TCP columns, with the accounting of every packet."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from dataclasses import dataclass, field

import numpy as np

from nagledetect.read import skips
from nagledetect.read.decode import decode_batch
from nagledetect.read.libpcap import CaptureReader, RawBatch
from nagledetect.read.threads import executor

RECORD_HEADER_BYTES = 16
SMALLEST_TCP_RECORD_BYTES = RECORD_HEADER_BYTES + 40
"""A record header and the smallest IPv4 + TCP headers: a TCP packet's record is rarely smaller."""
MOST_EXPECTED_PACKETS = 1 << 28
"""A cap on the estimate, so room reserved for a huge file stays within what Linux lends."""


@dataclass
class Accounting:
    """Packets read = TCP packets used + packets skipped, by reason; nothing is dropped silently."""

    path: str
    linktype: int
    packets_read: int = 0
    tcp_packets: int = 0
    skipped: dict[str, int] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)

    def add_skipped(self, reasons: dict[str, int]) -> None:
        for reason, count in reasons.items():
            self.skipped[reason] = self.skipped.get(reason, 0) + count

    @property
    def balanced(self) -> bool:
        return self.packets_read == self.tcp_packets + sum(self.skipped.values())


DecodedColumns = tuple[dict[str, np.ndarray], dict[str, np.ndarray]]


ProgressCallback = Callable[[int, int], None]


def expected_tcp_packets(path: str) -> int:
    """A generous estimate of a capture's TCP packets from its size, for reserving room (too
    high costs nothing: room never written takes no memory; too low only costs a move)."""
    try:
        return min(os.path.getsize(path) // SMALLEST_TCP_RECORD_BYTES, MOST_EXPECTED_PACKETS)
    except OSError:
        return 0


def decoded_batches(path: str, bpf_filter: str | None = None,
                    progress: ProgressCallback | None = None
                    ) -> tuple[Accounting, Iterator[DecodedColumns]]:
    """Open `path` and return its accounting and a generator of decoded TCP batches.

    Each batch is a dict of packet columns (with `frame`, 1-based file positions as in
    Wireshark, and `time_us`) and a dict of its SACK blocks (`row` = packet index within the
    batch, `left_raw`, `right_raw`). `progress(packets, bytes)` is called after each batch
    (bytes estimated as pcap records: 16-byte headers plus captured bytes). The accounting is
    complete once the generator is exhausted. Opening happens now, so a file that cannot be
    read fails here, before any output. A caller that may stop early closes the generator
    (`contextlib.closing`): its reading and decoding threads are then shut down in the
    caller's thread, not by whichever thread the garbage collector runs in (the decoding
    thread cannot join itself).
    """
    reader = CaptureReader(path, bpf_filter)
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
    if reader.truncation:
        accounting.warnings.append(f"capture cut short ({reader.truncation}); "
                                   f"analysed the {accounting.packets_read} packets before it")


def _decoded(reader: CaptureReader, batch: RawBatch, accounting: Accounting
             ) -> DecodedColumns | None:
    """One batch's TCP packets as columns (None when it holds none), its skips counted."""
    accepted = reader.filter_mask(batch)
    if accepted is None:
        selected, offsets, caplens = None, batch.offsets, batch.caplens
    else:
        accounting.add_skipped({skips.reason_text(skips.EXCLUDED_BY_FILTER): int((~accepted).sum())})
        selected = np.flatnonzero(accepted)
        offsets, caplens = batch.offsets[selected], batch.caplens[selected]
    decoded = decode_batch(batch.buf, offsets, caplens, reader.linktype)
    accounting.add_skipped(decoded.skipped)
    if not decoded.columns or len(decoded.columns["batch_index"]) == 0:
        return None
    columns = decoded.columns
    decoded_index = columns.pop("batch_index")
    in_batch = decoded_index if selected is None else selected[decoded_index]
    columns["frame"] = (batch.first_frame + in_batch).astype(np.uint32)
    columns["time_us"] = batch.time_us[in_batch]
    columns["captured_bytes"] = caplens[decoded_index].astype(np.uint32)
    accounting.tcp_packets += len(in_batch)
    return columns, decoded.sack_blocks
