"""Read a capture batch by batch into decoded TCP columns, with the accounting of every packet.

The compiled core reads, filters and decodes (`_core.Reader`); here its batches keep only their
TCP packets, in the columns the flows are built from, and their skips are counted as the core's
one pass counts them, so that a capture read this way is accounted for as one read by the pass.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator

import numpy as np

from nagledetect import _core
from nagledetect.errors import InputError
from nagledetect.read import skips
from nagledetect.read.accounting import Accounting, ProgressCallback
from nagledetect.read.compressed import capture_bytes
from nagledetect.read.threads import THREADED_MIN_BYTES, ahead

RECORD_HEADER_BYTES = 16
SMALLEST_TCP_RECORD_BYTES = RECORD_HEADER_BYTES + 40
"""A record header and the smallest IPv4 + TCP headers: a TCP packet's record is rarely smaller."""
MOST_EXPECTED_PACKETS = 1 << 28
"""A cap on the estimate, so room reserved for a huge file stays within what Linux lends."""
BATCH_PACKETS = 65_536
NOT_FLOW_COLUMNS = ("skip", "linktype", "wire_bytes")
"""Columns of the core's batches that the flows do not read."""


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
    Wireshark, and `time_us`; with a filter, `accepted`: the TCP packets it excludes are kept,
    for connection ids are Wireshark's tcp.stream of the unfiltered file) and a dict of its
    SACK blocks (`row` = packet index within the batch, `left_raw`, `right_raw`).
    `progress(packets, bytes)` is called after each batch (bytes of the file, decompressed,
    read so far). The accounting is complete once the
    generator is exhausted. Opening happens now, so a file that cannot be read, or a filter
    that does not compile, fails here with `InputError`, before any output. A caller that may
    stop early closes the generator (`contextlib.closing`), which lets its reading thread go.
    """
    try:
        reader = _core.Reader(path, BATCH_PACKETS, bpf_filter=bpf_filter)
        # The filter is compiled for the link type of the first packet: read it now.
        first_batch = next(reader, None)
    except (_core.CaptureError, _core.FilterError) as error:
        raise InputError(str(error)) from None
    # As the one pass: the first packet's link type (a pcapng file's may not be its first
    # interface's), else the file's.
    linktype = (int(first_batch["packets"]["linktype"][0]) if first_batch is not None
                else reader.linktype or 0)
    accounting = Accounting(path=path, linktype=linktype)
    return accounting, _batches(reader, first_batch, accounting, progress,
                                capture_bytes(path) >= THREADED_MIN_BYTES)


def _batches(reader: _core.Reader, first_batch: dict | None, accounting: Accounting,
             progress: ProgressCallback | None, threaded: bool) -> Iterator[DecodedColumns]:
    """The reader's batches (the first read already), the next read on a thread of its own
    while the caller takes in this one (the core lets go of the GIL as it reads) where the
    capture is large enough to gain from it. The reader is asked nothing else until it has
    ended: it may be reading on another thread meanwhile."""
    read = itertools.chain([] if first_batch is None else [first_batch], _read(reader))
    skipped: dict[int, int] = {}
    for batch in ahead(read, "read") if threaded else read:
        packets = batch["packets"]
        accounting.packets_read += len(packets["frame"])
        if progress:
            progress(accounting.packets_read, batch["bytes_read"])
        if (columns := _counted(batch, skipped)) is not None:
            yield columns
    accounting.add_skipped(skips.reasons(skipped))
    accounting.tcp_packets = accounting.packets_read - sum(skipped.values())
    accounting.warnings = list(reader.warnings)
    accounting.cut_short = reader.cut_short
    accounting.clock_step_us = reader.clock_step_us
    accounting.clock_spacing_us = reader.clock_spacing_us


def _read(reader: _core.Reader) -> Iterator[dict]:
    try:
        yield from reader
    except (_core.CaptureError, _core.FilterError) as error:
        raise InputError(str(error)) from None


def _counted(batch: dict, skipped: dict[int, int]) -> DecodedColumns | None:
    """One batch's TCP packets as columns (None when it holds none), its skips counted into
    `skipped` by code: a packet the filter excludes as excluded whatever its decoding said."""
    packets = batch["packets"]
    codes = packets["skip"]
    if "accepted" in packets:
        codes = np.where(packets["accepted"], codes, skips.EXCLUDED_BY_FILTER)
    found, counts = np.unique(codes[codes != skips.KEPT], return_counts=True)
    for code, count in zip(found.tolist(), counts.tolist()):
        skipped[code] = skipped.get(code, 0) + count
    tcp = packets["skip"] == skips.KEPT
    if not tcp.any():
        return None
    columns = {name: values[tcp] for name, values in packets.items()
               if name not in NOT_FLOW_COLUMNS}
    sack_blocks = dict(batch["sack_blocks"])
    sack_blocks["row"] = (np.cumsum(tcp) - 1)[sack_blocks["row"]]
    return columns, sack_blocks
