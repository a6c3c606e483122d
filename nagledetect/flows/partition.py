"""Split a capture's decoded packets into parts that each hold whole connections, on disk.

Why: a capture larger than memory can then be analysed part by part, with a peak set by the
part, not the capture. Packets go to a part by the hash of their endpoint pair (well mixed, so
parts come out even), so both directions and every reuse of a 4-tuple land in the same part
and each part is a complete capture of its own connections; frame numbers stay those of the
file. Each batch appends one block to each part's file (its row count and layout, then each
column's values, in one `writev`), in file order; a part is read back by joining its blocks
column by column.
"""

from __future__ import annotations

import errno
import os
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import BinaryIO

import numpy as np

from nagledetect.flows.endpoints import pair_hashes
from nagledetect.read.capture import DecodedColumns
from nagledetect.read.columns import IPV4_MAPPED_WORDS, ipv4_mapped

SACK_DTYPE = np.dtype([("frame", "<u4"), ("left_raw", "<u4"), ("right_raw", "<u4")])
FULL_LAYOUT = 0
"""A block with every column."""
IPV4_LAYOUT = 1
"""A block of IPv4 packets only: the address words that are the same in every IPv4-mapped
address are left out (24 of a row's 85 bytes) and filled in when the part is read."""
IMPLIED_IPV4_WORDS = {f"{side}_{index}": word for side in ("src", "dst")
                      for index, word in enumerate(IPV4_MAPPED_WORDS)}
"""The columns an IPv4 block leaves out, and the value each holds there."""


class PartitionedPackets:
    """Decoded batches routed into `count` part files under a private temporary folder."""

    def __init__(self, count: int, folder: str | None = None) -> None:
        self.count = count
        self._folder = tempfile.TemporaryDirectory(prefix="nagledetect-parts-", dir=folder)
        self._dtype: np.dtype | None = None
        self._packets = [self._open(f"packets-{part}") for part in range(count)]
        self._sacks = [self._open(f"sack-{part}") for part in range(count)]

    def _open(self, name: str) -> BinaryIO:
        return open(Path(self._folder.name) / name, "wb")  # noqa: SIM115 - closed in part_files()

    def add(self, batches: Iterable[DecodedColumns]) -> None:
        """Route every batch's rows (and their SACK blocks) to the parts of their pairs."""
        for columns, sack in batches:
            part = (pair_hashes(columns) % np.uint64(self.count)).astype(np.uint16)
            order = np.argsort(part, kind="stable")  # by radix: MAX_PARTS fits 16 bits
            bounds = np.searchsorted(part[order], np.arange(self.count + 1))
            layout = IPV4_LAYOUT if _ipv4_only(columns) else FULL_LAYOUT
            ordered = self._in_part_order(columns, order, layout)
            sack_records = np.empty(len(sack["row"]), dtype=SACK_DTYPE)
            sack_records["frame"] = columns["frame"][sack["row"]]
            sack_records["left_raw"] = sack["left_raw"]
            sack_records["right_raw"] = sack["right_raw"]
            sack_part = part[sack["row"]]
            sack_order = np.argsort(sack_part, kind="stable")
            sack_bounds = np.searchsorted(sack_part[sack_order], np.arange(self.count + 1))
            sack_records = sack_records[sack_order]
            for index in np.flatnonzero(np.diff(bounds)):
                start, stop = bounds[index], bounds[index + 1]
                _write_block(self._packets[index], layout,
                             [values[start:stop] for values in ordered])
                if sack_bounds[index + 1] > sack_bounds[index]:
                    sack_records[sack_bounds[index]:sack_bounds[index + 1]].tofile(
                        self._sacks[index])

    def _in_part_order(self, columns: dict[str, np.ndarray], order: np.ndarray,
                       layout: int) -> list[np.ndarray]:
        """The batch's columns that its block layout keeps, each gathered into part order (a
        contiguous copy per column)."""
        dtype = np.dtype([(name, values.dtype) for name, values in columns.items()])
        if self._dtype is None:
            self._dtype = dtype
        elif dtype != self._dtype:
            raise RuntimeError("decoded batches changed their columns")
        return [values[order] for name, values in columns.items()
                if _written(name, layout)]

    def part_files(self) -> list[tuple[str, str, np.dtype]]:
        """Finish writing; then each non-empty part as (packets file, SACK file, record dtype),
        for `load_part` here or in another process."""
        for handle in self._packets + self._sacks:
            handle.close()
        if self._dtype is None:
            return []
        return [(packets.name, sacks.name, self._dtype)
                for packets, sacks in zip(self._packets, self._sacks)
                if Path(packets.name).stat().st_size > 0]

    def close(self) -> None:
        for handle in self._packets + self._sacks:
            handle.close()
        self._folder.cleanup()


def _ipv4_only(columns: dict[str, np.ndarray]) -> bool:
    """Whether every row's source and destination are IPv4 (mapped) addresses."""
    return all(ipv4_mapped(*(columns[f"{side}_{index}"] for index in range(3))).all()
               for side in ("src", "dst"))


def _write_block(handle: BinaryIO, layout: int, columns: list[np.ndarray]) -> None:
    """One block of a part file: its row count and layout, then the values of each column the
    layout keeps, in one system call."""
    buffers = [np.array([len(columns[0]), layout], dtype=np.int64).tobytes(), *columns]
    handle.flush()
    if os.writev(handle.fileno(), buffers) != sum(memoryview(b).nbytes for b in buffers):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), handle.name)


def part_packets(files: tuple[str, str, np.dtype]) -> int:
    """The packets in a part file, from its block headers alone (a seek per block)."""
    packets_path, _, dtype = files
    return sum(rows for rows, _ in _block_headers(packets_path, dtype))


def _block_headers(path: str, dtype: np.dtype) -> list[tuple[int, int]]:
    """Each block's row count and layout, in file order (a seek per block)."""
    headers = []
    with open(path, "rb") as handle:
        while header := handle.read(16):
            rows, layout = np.frombuffer(header, dtype=np.int64).tolist()
            headers.append((rows, layout))
            handle.seek(rows * _row_bytes(dtype, layout), os.SEEK_CUR)
    return headers


def _row_bytes(dtype: np.dtype, layout: int) -> int:
    return sum(dtype[name].itemsize for name in dtype.names if _written(name, layout))


def _written(name: str, layout: int) -> bool:
    """Whether a block of this layout holds the column's values (else they are implied)."""
    return layout == FULL_LAYOUT or name not in IMPLIED_IPV4_WORDS


def _read_blocks(path: str, dtype: np.dtype) -> dict[str, np.ndarray]:
    """A part file's blocks joined column by column (see `_read_run`)."""
    headers = _block_headers(path, dtype)
    with open(path, "rb", buffering=0) as handle:
        return _read_run(handle, headers, dtype, path)


def _read_run(handle: BinaryIO, headers: list[tuple[int, int]], dtype: np.dtype,
              path: str) -> dict[str, np.ndarray]:
    """The blocks of `headers`, next in the file, joined column by column: each block's values
    are read straight into their place in the joined columns (one copy; reading the file
    whole and then joining held the part twice). When every block is IPv4, the address words
    that only say so are one read-only value each, not a column (24 bytes a packet the part
    never fills)."""
    total = sum(rows for rows, _ in headers)
    implied = {} if any(layout == FULL_LAYOUT for _, layout in headers) else {
        name: np.broadcast_to(dtype[name].type(value), total)
        for name, value in IMPLIED_IPV4_WORDS.items()}
    columns = {name: implied.get(name, np.empty(total, dtype=dtype[name]))
               for name in dtype.names}
    start = 0
    for rows, layout in headers:
        handle.seek(16, os.SEEK_CUR)
        for name in dtype.names:
            place = columns[name][start:start + rows]
            if _written(name, layout):
                _read_exactly(handle, place, path)
            elif name not in implied:
                place[:] = IMPLIED_IPV4_WORDS[name]
        start += rows
    return columns


def part_slices(files: tuple[str, str, np.dtype], slice_packets: int
                ) -> Iterator[dict[str, np.ndarray]]:
    """A part's packets in file order, a run of its blocks at a time: each slice joins the
    blocks that bring it to `slice_packets` packets or more (a block is a batch's rows of the
    part, so a slice is about that or a batch more). Its SACK rows are read beside them
    (`sliced_level.SackBlocksBySlice`)."""
    packets_path, _, dtype = files
    headers = _block_headers(packets_path, dtype)
    with open(packets_path, "rb", buffering=0) as handle:
        run: list[tuple[int, int]] = []
        for header in headers:
            run.append(header)
            if sum(rows for rows, _ in run) >= slice_packets:
                yield _read_run(handle, run, dtype, packets_path)
                run = []
        if run:
            yield _read_run(handle, run, dtype, packets_path)


def _read_exactly(handle: BinaryIO, place: np.ndarray, path: str) -> None:
    """Fill `place` from the file (a read may return less than asked)."""
    view = memoryview(place).cast("B")
    while len(view):
        got = handle.readinto(view)
        if not got:
            raise OSError(errno.EIO, "part file ends early", path)
        view = view[got:]


def part_batches(files: tuple[str, str, np.dtype]) -> Iterator[DecodedColumns]:
    """A part as `build_flows` takes its batches: one batch, which nothing else holds while the
    connections are built (a list would keep its address columns, 38 bytes a packet, to the
    end)."""
    yield load_part(files)


def load_part(files: tuple[str, str, np.dtype]) -> DecodedColumns:
    """One part's packets as a batch of columns, SACK rows pointing into it."""
    packets_path, sack_path, dtype = files
    columns = _read_blocks(packets_path, dtype)
    sack = np.fromfile(sack_path, dtype=SACK_DTYPE)
    rows = np.searchsorted(columns["frame"], sack["frame"])
    return columns, {"row": rows, "left_raw": sack["left_raw"].copy(),
                     "right_raw": sack["right_raw"].copy()}
