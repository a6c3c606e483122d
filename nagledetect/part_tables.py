"""The packet and message tables of a capture analysed in parts, for `--tables`.

Why: those tables are as long as the capture (a 100 M-packet capture would need tens of
gigabytes held whole). Each part's tables are spilled a chunk of rows at a time, in the part's
own order, and read back merged into the order of a one-part run (packets by frame, messages by
number), with capture-wide connection and message numbers: only a chunk of each part is in
memory at once.
"""

from __future__ import annotations

import os
import pickle
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from nagledetect.stored import SpillFile, by_reference, pickled
from nagledetect.table import Table

ROWS_PER_CHUNK = 65_536
TABLE_KEYS = {"packets": "frame", "messages": "message"}
"""Each table's order in a one-part run: a column whose values are unique in the capture."""
ChunkFix = Callable[[int, str, pd.DataFrame], pd.DataFrame]
"""Called with a chunk's part, its table's name and its rows: the rows with capture-wide ids."""


@dataclass
class SpilledTables:
    """Where each part's chunks of each table lie in the spill file, in the part's order."""

    spill: SpillFile
    chunks: dict[str, dict[int, list[tuple[int, int]]]] = field(
        default_factory=lambda: {name: {} for name in TABLE_KEYS})

    def add(self, part: int, name: str, table: pd.DataFrame) -> None:
        self.add_chunks(part, name, (table.iloc[start:start + ROWS_PER_CHUNK]
                                     for start in range(0, len(table), ROWS_PER_CHUNK)))

    def add_chunks(self, part: int, name: str, chunks: Iterable[pd.DataFrame]) -> None:
        pieces, lengths = pickled([chunk for chunk in chunks if len(chunk)])
        offsets = self.spill.append_each(pieces)
        self.chunks[name][part] = list(zip(offsets.tolist(), lengths.tolist()))

    def add_written(self, part: int, name: str, written: WrittenChunks) -> None:
        """Chunks a part's worker pickled to a file of its own (`WrittenChunks`), copied into
        the spill one at a time; the file is removed."""
        placed = []
        for piece in written.pieces():
            placed.append((int(self.spill.append_each([piece])[0]), len(piece)))
        self.chunks[name][part] = placed
        written.remove()


@dataclass
class WrittenChunks:
    """A table's chunks pickled one after another to a file, as a part read a slice at a time
    makes its packet table (`--tables`): only a chunk is held at once, on either side."""

    path: str
    lengths: list[int] = field(default_factory=list)

    def write(self, table: pd.DataFrame) -> None:
        """Append the table's rows, ROWS_PER_CHUNK to a chunk."""
        pieces, lengths = pickled([table.iloc[start:start + ROWS_PER_CHUNK]
                                   for start in range(0, len(table), ROWS_PER_CHUNK)])
        with open(self.path, "ab") as out:
            for piece in pieces:
                out.write(piece)
        self.lengths += lengths.tolist()

    def pieces(self) -> Iterator[bytes]:
        if not self.lengths:
            return
        with open(self.path, "rb") as handle:
            for length in self.lengths:
                yield handle.read(length)

    def remove(self) -> None:
        if os.path.exists(self.path):
            os.unlink(self.path)


class PartTables:
    """A capture's packet and message tables, read from its parts' spilled chunks in the order
    and with the numbering of a one-part run."""

    def __init__(self, spilled: SpilledTables, fix: ChunkFix) -> None:
        self._spilled = spilled
        self._fix = fix

    @property
    def spill(self) -> SpillFile:
        return self._spilled.spill

    def packets(self) -> Iterator[pd.DataFrame]:
        return self._merged("packets")

    def messages(self) -> Iterator[pd.DataFrame]:
        return self._merged("messages")

    def __reduce__(self) -> tuple:
        if self._spilled.spill.sent_by_reference:
            return by_reference(self)
        return TablesInMemory, (list(self.packets()), list(self.messages()))

    def _merged(self, name: str) -> Iterator[pd.DataFrame]:
        streams = [self._part_chunks(part, name, chunks)
                   for part, chunks in sorted(self._spilled.chunks[name].items())]
        return merged_by(TABLE_KEYS[name], streams)

    def _part_chunks(self, part: int, name: str, chunks: list[tuple[int, int]]
                     ) -> Iterator[pd.DataFrame]:
        for offset, length in chunks:
            yield self._fix(part, name, pickle.loads(self._spilled.spill.read(offset, length)))


class TablesInMemory:
    """Tables as PartTables gives them, held in memory (a capture's tables sent to another
    process): `Table`s of a capture analysed whole, one of each (never merged by key, which
    reads DataFrames: `merged_by` takes the chunks of several parts)."""

    def __init__(self, packets: list[Table | pd.DataFrame],
                 messages: list[Table | pd.DataFrame]) -> None:
        self._tables = {"packets": packets, "messages": messages}

    def packets(self) -> Iterator[Table | pd.DataFrame]:
        return iter(self._tables["packets"])

    def messages(self) -> Iterator[Table | pd.DataFrame]:
        return iter(self._tables["messages"])


def merged_by(key: str, streams: list[Iterator[pd.DataFrame]]) -> Iterator[pd.DataFrame]:
    """The rows of several streams of chunks, each sorted by `key` (unique across them), as one
    stream sorted by it: each round hands out every row up to the smallest last key of the
    chunks at hand, so at most one chunk of each stream is held."""
    if len(streams) == 1:
        yield from streams[0]
        return
    current = {index: chunk for index, stream in enumerate(streams)
               if (chunk := next(stream, None)) is not None}
    while current:
        bound = min(chunk[key].iat[-1] for chunk in current.values())
        taken = []
        for index in list(current):
            chunk = current[index]
            cut = int(np.searchsorted(chunk[key].to_numpy(), bound, side="right"))
            taken.append(chunk.iloc[:cut])
            if cut < len(chunk):
                current[index] = chunk.iloc[cut:]
            elif (following := next(streams[index], None)) is not None:
                current[index] = following
            else:
                del current[index]
        yield pd.concat(taken).sort_values(key, kind="stable")


def tables_on_disk(tables: PartTables | TablesInMemory, spill: SpillFile) -> PartTables:
    """Tables held in memory (as another process sent them), appended to `spill` in the same
    order; tables already on disk as they are."""
    if isinstance(tables, PartTables):
        return tables
    spilled = SpilledTables(spill)
    for name in TABLE_KEYS:
        spilled.add_chunks(0, name, getattr(tables, name)())
    return PartTables(spilled, _as_they_are)


def _as_they_are(part: int, name: str, rows: pd.DataFrame) -> pd.DataFrame:
    return rows
