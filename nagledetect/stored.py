"""Findings and host profiles of a capture analysed in parts, kept on disk until they are written.

Why: a 100 M-packet capture has over a million findings and most of a million host profiles;
held as Python objects they take gigabytes. Each record is pickled once into an unlinked
temporary file, and the result keeps only the columns that order the records (rank, address)
and where each one lies. Records are read back a chunk at a time, in order, when a reporter
walks them. Sent to another process (a many-file run), a stored table is sent as its records.
"""

from __future__ import annotations

import os
import pickle
import tempfile
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from nagledetect.collector import collector_paused
from nagledetect.detectors.model import Finding, HostProfile

RECORDS_PER_CHUNK = 2048
RecordFix = Callable[[np.ndarray, list[Any]], None]
"""Called with the positions and the records of each chunk read, before they are handed out."""


class SpillFile:
    """Bytes appended to one unlinked temporary file and read back by position; the space goes
    back to the system when the last table that reads it is let go."""

    def __init__(self) -> None:
        self._file = tempfile.TemporaryFile(prefix="nagledetect-results-")
        self.size = 0

    def append(self, data: bytes | memoryview) -> int:
        """Write `data` at the end; its offset."""
        offset = self.size
        view = memoryview(data).cast("B")
        written = 0
        while written < len(view):
            written += os.pwrite(self._file.fileno(), view[written:], offset + written)
        self.size += len(view)
        return offset

    def read(self, offset: int, length: int) -> bytes:
        pieces = []
        while length > 0:
            piece = os.pread(self._file.fileno(), length, offset)
            if not piece:
                raise OSError(f"spill file ends before offset {offset}")
            pieces.append(piece)
            offset += len(piece)
            length -= len(piece)
        return b"".join(pieces)

    def read_rows(self, offset: int, rows: int, dtype: np.dtype) -> np.ndarray:
        return np.frombuffer(self.read(offset, rows * dtype.itemsize), dtype=dtype)


def pickled(records: Sequence[Any]) -> tuple[bytes, np.ndarray]:
    """Records pickled one by one and joined, with each one's length."""
    pieces = [pickle.dumps(record, protocol=pickle.HIGHEST_PROTOCOL) for record in records]
    return b"".join(pieces), np.array([len(piece) for piece in pieces], dtype=np.int64)


class RecordTable(Sequence):
    """Pickled records in a spill file, read in the order of `offsets` (`fix` mends each chunk
    read, e.g. to capture-wide connection ids)."""

    def __init__(self, spill: SpillFile, offsets: np.ndarray, lengths: np.ndarray,
                 fix: RecordFix | None = None) -> None:
        self._spill = spill
        self._offsets = offsets
        self._lengths = lengths
        self._fix = fix

    def __len__(self) -> int:
        return len(self._offsets)

    def __getitem__(self, index: Any) -> Any:
        if isinstance(index, slice):
            start, stop, step = index.indices(len(self))
            return self._read(np.arange(start, stop, step))
        position = index + len(self) if index < 0 else index
        if not 0 <= position < len(self):
            raise IndexError(index)
        return self._read(np.array([position]))[0]

    def __iter__(self) -> Iterator[Any]:
        for start in range(0, len(self), RECORDS_PER_CHUNK):
            yield from self._read(np.arange(start, min(start + RECORDS_PER_CHUNK, len(self))))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Sequence) and list(self) == list(other)

    def __reduce__(self) -> tuple:
        return list, (list(self),)

    def take(self, positions: np.ndarray) -> list[Any]:
        """The records at these positions, in that order."""
        return self._read(np.asarray(positions, dtype=np.int64))

    def _read(self, positions: np.ndarray) -> list[Any]:
        offsets = self._offsets[positions].tolist()
        lengths = self._lengths[positions].tolist()
        with collector_paused():
            records = [pickle.loads(self._spill.read(offset, length))
                       for offset, length in zip(offsets, lengths)]
        if self._fix is not None:
            self._fix(positions, records)
        return records


@dataclass
class PickledFindings:
    """One part's findings, pickled, with the columns that rank them capture-wide."""

    records: bytes
    lengths: np.ndarray
    kind: list[str]
    connection: np.ndarray
    time_lost_s: np.ndarray
    sender: list[str]
    receiver_host: list[str | None]
    advice: list[tuple[str, ...]]


def pickle_findings(findings: list[Finding]) -> PickledFindings:
    records, lengths = pickled(findings)
    return PickledFindings(
        records, lengths, [f.kind for f in findings],
        np.array([f.connection for f in findings], dtype=np.int64),
        np.array([f.time_lost_s for f in findings], dtype=np.float64),
        [str(f.sender) for f in findings], [f.receiver_host for f in findings],
        [tuple(f.advice) for f in findings])


class StoredFindings(RecordTable):
    """A capture's findings in rank order, read from disk; `time_lost_s` and `advice` are the
    columns a document needs to order findings across captures without reading them."""

    def __init__(self, spill: SpillFile, offsets: np.ndarray, lengths: np.ndarray,
                 time_lost_s: np.ndarray, advice: list[tuple[str, ...]],
                 fix: RecordFix | None = None) -> None:
        super().__init__(spill, offsets, lengths, fix)
        self.time_lost_s = time_lost_s
        self.advice = advice


class StoredHosts(Mapping):
    """Host profiles by address (in address order), read from disk."""

    def __init__(self, addresses: np.ndarray, profiles: RecordTable) -> None:
        self._addresses = addresses
        self._profiles = profiles

    def __getitem__(self, address: str) -> HostProfile:
        position = int(np.searchsorted(self._addresses, address))
        if position == len(self._addresses) or self._addresses[position] != address:
            raise KeyError(address)
        return self._profiles[position]

    def __iter__(self) -> Iterator[str]:
        return iter(self._addresses.tolist())

    def __len__(self) -> int:
        return len(self._addresses)

    def values(self) -> RecordTable:  # type: ignore[override]
        """The profiles as a sequence read a chunk at a time."""
        return self._profiles

    def __reduce__(self) -> tuple:
        return dict, (dict(zip(self._addresses.tolist(), self._profiles)),)
