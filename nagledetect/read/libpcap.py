"""Batches of raw packets from a pcap or pcapng file, read by libpcap through pcapy-ng.

`next_batch` crosses the C/Python boundary once per batch, not once per packet, and releases the
GIL while libpcap reads: so the next batch is read on a second thread while the caller decodes
the current one. libpcap gives timestamps in microseconds (it converts nanosecond files), so
times are kept as integer microseconds: exact for what libpcap hands over.
"""

from __future__ import annotations

import os
import weakref
from collections.abc import Callable, Iterator

import numpy as np
import pcapy

from nagledetect.errors import InputError
from nagledetect.read.compressed import (
    DecompressedCopy,
    DecompressionProgress,
    file_compression,
    first_bytes,
)
from nagledetect.read.decode import pad_batch
from nagledetect.read.inputs import PCAPNG_MAGIC
from nagledetect.read.pcapng import PcapngReader
from nagledetect.read.raw import RawBatch
from nagledetect.read.threads import THREADED_MIN_BYTES, executor

BATCH_PACKETS = 65_536
FILTER_SNAPLEN = 262_144
UINT32_MASK = 0xFFFF_FFFF


def _open(path: str, source: str) -> object:
    """Open a capture (read from `source`: the file itself, or its decompressed copy), turning
    every way it can fail into one InputError line naming `path`."""
    if not os.path.exists(path):
        raise InputError(f"{path}: no such file")
    if os.path.isdir(path):
        raise InputError(f"{path}: is a directory, not a capture file")
    if not os.access(path, os.R_OK):
        raise InputError(f"{path}: permission denied")
    if os.path.getsize(path) == 0:
        raise InputError(f"{path}: empty file, not a capture")
    try:
        return pcapy.open_offline(source)
    except pcapy.PcapError as error:
        message = str(error)
        if "unknown file format" in message:
            message = "not a pcap or pcapng capture" + (
                "" if source == path else f" (once decompressed from {file_compression(path)})")
        raise InputError(f"{path}: {message}") from None


def _decompressed_copy(path: str, progress: DecompressionProgress | None
                       ) -> DecompressedCopy | None:
    """A copy to read when the capture is compressed (None: read the file itself)."""
    try:
        compression = file_compression(path)
    except OSError:
        return None
    return DecompressedCopy(path, compression, progress) if compression else None


def _unpack(packet_bytes: bytes, packed_meta: bytes, first_frame: int, linktype: int
            ) -> RawBatch:
    meta = np.frombuffer(packed_meta, dtype=np.uint32).reshape(-1, 4)
    time_us = meta[:, 0].astype(np.int64) * 1_000_000 + meta[:, 1]
    return RawBatch(pad_batch(packet_bytes), meta[:, 2].astype(np.int64),
                    meta[:, 3].astype(np.int64), time_us, first_frame, linktype)


def _is_pcapng(path: str) -> bool:
    return first_bytes(path) == PCAPNG_MAGIC


def _read_here_warning(mixture: str | None, frames_read: int, refusal: str) -> str:
    """One line: why libpcap stopped (what the file mixes, in the file's own values: libpcap's
    words are relayed only when it mixes nothing that libpcap refuses, as they can misname a
    snapshot length as a "type"), and what nagledetect's own pcapng reader read."""
    if mixture is None:
        return (f"libpcap stopped reading this file ({refusal}); nagledetect's own pcapng "
                f"reader read it from frame {frames_read + 1} on")
    if frames_read == 0:
        return (f"the file mixes {mixture}: libpcap stops at such a file, so nagledetect's own "
                "pcapng reader read it whole, each packet by its own interface")
    return (f"the file mixes {mixture}: libpcap stops at such a file, so it read frames 1-"
            f"{frames_read} and nagledetect's own pcapng reader the rest, each packet by its "
            "own interface")


def _nothing() -> None:
    """What letting go of a reader of an uncompressed capture removes."""


class CaptureReader:
    """Reads one capture file in batches; remembers a truncation instead of failing on it. A
    compressed capture is read from its decompressed copy (`compressed`), removed once the
    batches are read or the reader is let go."""

    def __init__(self, path: str, bpf_filter: str | None = None,
                 batch_packets: int = BATCH_PACKETS,
                 decompression_progress: DecompressionProgress | None = None) -> None:
        self.path = path
        self.batch_packets = batch_packets
        copy = (_decompressed_copy(path, decompression_progress) if os.path.isfile(path)
                else None)
        self.source = copy.path if copy else path
        """The file read: the capture, or its decompressed copy."""
        self.decompression_cut_short = copy.cut_short if copy else None
        self._remove_copy: Callable[[], None] = (weakref.finalize(self, copy.remove) if copy
                                                 else _nothing)
        try:
            self._reader = _open(path, self.source)
        except InputError:
            self._remove_copy()
            raise
        self.linktype = int(self._reader.datalink())
        self.truncation: str | None = None
        self.read_here: str | None = None
        """Why the file was read without libpcap from some point on, and how (None: it was
        not)."""
        self._rest: Iterator[RawBatch] | None = None
        self._filter_expression = bpf_filter
        self._filters: dict[int, pcapy.BPFProgram | None] = (
            {self.linktype: self._compile(bpf_filter, self.linktype)} if bpf_filter else {})
        self.threaded = os.path.getsize(self.source) >= THREADED_MIN_BYTES
        """Whether batches are read, and decoded, on threads of their own."""

    @staticmethod
    def _compile(expression: str, linktype: int) -> pcapy.BPFProgram:
        try:
            return pcapy.compile(linktype, FILTER_SNAPLEN, expression, 1, 0xFFFFFFFF)
        except pcapy.PcapError as error:
            raise InputError(f"invalid filter {expression!r}: {error}") from None

    def batches(self) -> Iterator[RawBatch]:
        """Every packet of the file, in file order, in batches; one batch is read ahead (on a
        thread of its own when the file is large enough to be `threaded`). A pcapng file whose
        interfaces libpcap refuses is read on from there by `PcapngReader`."""
        with executor(1 if self.threaded else 0, "libpcap") as reader:
            ahead = reader.submit(self._next_batch, 0)
            while True:
                batch = ahead.result()
                if batch is None:
                    break
                ahead = reader.submit(self._next_batch, batch.first_frame - 1 + len(batch))
                yield batch
        if self._rest is not None:
            yield from self._rest
        self._remove_copy()

    def _next_batch(self, frames_read: int) -> RawBatch | None:
        """The batch after `frames_read` packets; None at the end of the file (or of what a
        read error left readable, which `_rest` then yields: in a pcapng file, all that
        `PcapngReader` can read from there, since libpcap also stops at what the format allows
        and it does not take (interfaces unlike the first, a section of the other byte
        order))."""
        try:
            packet_bytes, packed_meta = self._reader.next_batch(self.batch_packets)
        except pcapy.PcapError as error:
            message = str(error)
            self._rest = (self._read_here(frames_read, message) if _is_pcapng(self.source)
                          else iter(list(self._salvage_after_error(frames_read, message))))
            return None
        if not packed_meta:
            return None
        return _unpack(packet_bytes, packed_meta, frames_read + 1, self.linktype)

    def _read_here(self, frames_read: int, refusal: str) -> Iterator[RawBatch]:
        """The packets after `frames_read`, read without libpcap (see `pcapng`). When that
        reader stops where libpcap did, at a damaged block of a file that mixes nothing
        libpcap refuses, the damage is all there is to say: in libpcap's words (`truncation`),
        as for a pcap file."""
        reader = PcapngReader(self.source, self.batch_packets)
        frames_here = frames_read
        for batch in reader.batches(frames_read):
            frames_here += len(batch)
            yield batch
        self.truncation = reader.truncation
        mixture = reader.mixture()
        libpcap_frames = self._frames_before_error(frames_read)
        if mixture is not None or reader.truncation is None or frames_here > libpcap_frames:
            self.read_here = _read_here_warning(mixture, libpcap_frames, refusal)
        else:
            self.truncation = refusal

    def _reopened_after(self, frames_read: int) -> object:
        """libpcap's reader of the file, reopened, past its first `frames_read` packets."""
        reader = _open(self.path, self.source)
        to_skip = frames_read
        while to_skip:
            _, packed_meta = reader.next_batch(min(to_skip, self.batch_packets))
            to_skip -= len(packed_meta) // 16
        return reader

    def _frames_before_error(self, frames_read: int) -> int:
        """How many packets libpcap reads before its error (a failed batch hands none of its
        packets over, so they are counted again one by one)."""
        reader = self._reopened_after(frames_read)
        frames = frames_read
        while True:
            try:
                header, _ = reader.next()
            except pcapy.PcapError:
                return frames
            if header is None:
                return frames
            frames += 1

    def _salvage_after_error(self, frames_read: int, message: str) -> Iterator[RawBatch]:
        """A failed batch loses the packets it held: reopen, skip what was read, go one by one."""
        self.truncation = message
        reader = self._reopened_after(frames_read)
        packets: list[bytes] = []
        meta: list[tuple[int, int, int, int]] = []
        offset = 0
        while True:
            try:
                header, data = reader.next()
            except pcapy.PcapError:
                break
            if header is None:
                break
            seconds, microseconds = header.getts()
            # libpcap's header fields are signed; `next_batch` packs them unsigned, as here.
            meta.append((seconds & UINT32_MASK, microseconds & UINT32_MASK, offset, len(data)))
            packets.append(data)
            offset += len(data)
        if meta:
            yield _unpack(b"".join(packets), np.array(meta, dtype=np.uint32).tobytes(),
                          frames_read + 1, self.linktype)

    def filter_mask(self, batch: RawBatch) -> np.ndarray | None:
        """Which packets of the batch the BPF filter accepts (None without a filter: all), the
        filter compiled for the batch's link type. A pcapng interface of a link type that
        libpcap cannot filter (it says "link-layer type filtering not implemented") has none of
        its packets accepted: the filter cannot say they match."""
        if self._filter_expression is None:
            return None
        if batch.linktype not in self._filters:
            try:
                self._filters[batch.linktype] = self._compile(self._filter_expression,
                                                              batch.linktype)
            except InputError:
                self._filters[batch.linktype] = None
        program = self._filters[batch.linktype]
        if program is None:
            return np.zeros(len(batch), dtype=bool)
        raw = batch.buf
        accept = program.filter
        return np.fromiter(
            (accept(raw[o:o + c].tobytes()) != 0 for o, c in zip(batch.offsets, batch.caplens)),
            dtype=bool, count=len(batch))
