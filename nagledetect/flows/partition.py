"""Split a capture's decoded packets into parts that each hold whole connections, on disk.

Why: a capture larger than memory can then be analysed part by part, with a peak set by the
part, not the capture. Packets go to a part by the hash of their endpoint pair (well mixed, so
parts come out even), so both directions and every reuse of a 4-tuple land in the same part
and each part is a complete capture of its own connections; frame numbers stay those of the
file. Each batch appends one block to each part's file (its row count, then each column's
values, in one `writev`), in file order; a part is read back by joining its blocks column by
column.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterable
from pathlib import Path
from typing import BinaryIO

import numpy as np

from nagledetect.flows.endpoints import pair_hashes
from nagledetect.read.capture import DecodedColumns

SACK_DTYPE = np.dtype([("frame", "<u4"), ("left_raw", "<u4"), ("right_raw", "<u4")])


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
            part = (pair_hashes(columns) % np.uint64(self.count)).astype(np.int64)
            order = np.argsort(part, kind="stable")
            bounds = np.searchsorted(part[order], np.arange(self.count + 1))
            ordered = self._in_part_order(columns, order)
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
                _write_block(self._packets[index], [values[start:stop] for values in ordered])
                sack_records[sack_bounds[index]:sack_bounds[index + 1]].tofile(self._sacks[index])

    def _in_part_order(self, columns: dict[str, np.ndarray], order: np.ndarray) -> list[np.ndarray]:
        """The batch's columns, each gathered into part order (a contiguous copy per column)."""
        dtype = np.dtype([(name, values.dtype) for name, values in columns.items()])
        if self._dtype is None:
            self._dtype = dtype
        elif dtype != self._dtype:
            raise RuntimeError("decoded batches changed their columns")
        return [values[order] for values in columns.values()]

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


def _write_block(handle: BinaryIO, columns: list[np.ndarray]) -> None:
    """One block of a part file: its row count, then each column's values, in one system call."""
    buffers = [np.int64(len(columns[0])).tobytes(), *columns]
    handle.flush()
    if os.writev(handle.fileno(), buffers) != sum(memoryview(b).nbytes for b in buffers):
        raise OSError(f"{handle.name}: short write of a part file (is the disk full?)")


def _read_blocks(path: str, dtype: np.dtype) -> dict[str, np.ndarray]:
    """A part file's blocks joined column by column."""
    raw = np.fromfile(path, dtype=np.uint8)
    pieces: dict[str, list[np.ndarray]] = {name: [] for name in dtype.names}
    position = 0
    while position < len(raw):
        rows = int(raw[position:position + 8].view(np.int64)[0])
        position += 8
        for name in dtype.names:
            size = rows * dtype[name].itemsize
            pieces[name].append(raw[position:position + size].view(dtype[name]))
            position += size
    return {name: np.concatenate(values) for name, values in pieces.items()}


def load_part(files: tuple[str, str, np.dtype]) -> DecodedColumns:
    """One part's packets as a batch of columns, SACK rows pointing into it."""
    packets_path, sack_path, dtype = files
    columns = _read_blocks(packets_path, dtype)
    sack = np.fromfile(sack_path, dtype=SACK_DTYPE)
    rows = np.searchsorted(columns["frame"], sack["frame"])
    return columns, {"row": rows, "left_raw": sack["left_raw"].copy(),
                     "right_raw": sack["right_raw"].copy()}
