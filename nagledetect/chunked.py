"""Sequences whose items are made a range at a time (`ChunkedSequence`): a capture's findings
read back from a spill file, a document's entries, made when a reader asks for them, so that a
million of them never exist at once."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

RECORDS_PER_CHUNK = 2048


class ChunkedSequence(Sequence):
    """A sequence whose items are made (read, converted) a range at a time: iteration goes
    RECORDS_PER_CHUNK items at a time, so a million items never exist at once. Subclasses give
    the length and `items(start, stop)`."""

    def __len__(self) -> int:
        raise NotImplementedError

    def items(self, start: int, stop: int) -> list[Any]:
        raise NotImplementedError

    def __getitem__(self, index: Any) -> Any:
        if isinstance(index, slice):
            start, stop, step = index.indices(len(self))
            if step != 1:
                return [self[position] for position in range(start, stop, step)]
            return self.items(start, stop) if start < stop else []
        position = index + len(self) if index < 0 else index
        if not 0 <= position < len(self):
            raise IndexError(index)
        return self.items(position, position + 1)[0]

    def __iter__(self) -> Iterator[Any]:
        for start in range(0, len(self), RECORDS_PER_CHUNK):
            yield from self.items(start, min(start + RECORDS_PER_CHUNK, len(self)))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Sequence) and list(self) == list(other)

    def take(self, positions: Sequence[int] | np.ndarray) -> list[Any]:
        """The items at these positions, in that order, made a run of neighbours at a time; a
        sequence that can make scattered items together says how."""
        ordered = np.asarray(positions, dtype=np.int64)
        breaks = (np.flatnonzero(np.diff(ordered) != 1) + 1).tolist()
        return [item for run in np.split(ordered, breaks) if len(run)
                for item in self.items(int(run[0]), int(run[-1]) + 1)]


def take(records: Sequence[Any], positions: Sequence[int] | np.ndarray) -> list[Any]:
    """The records at these positions: a sequence whose items are made when read makes only
    those (`ChunkedSequence.take`), a list is indexed."""
    if isinstance(records, ChunkedSequence):
        return records.take(positions)
    return [records[position] for position in np.asarray(positions, dtype=np.int64).tolist()]
