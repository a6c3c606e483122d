"""How a capture's tables travel to another process (a `-j` worker's or a Dask worker's results
to the process that writes the reports).

Why: a run over many small captures sends thousands of results, and unpickling a small pandas
frame costs more than the rest of a small capture's result. So an empty table travels as a
reference to one frame of its columns, which the receiving process makes once and shares (its
tables are only read there: reporters never change a table), and the slices of one table (a
group of small captures' connections and parity rows) travel as the table, pickled once per
message, and their rows. They arrive as `TableRows`, not frames: a frame of its own for each
capture's slice took about 3 KB of the receiving process's memory and 50 microseconds, more
than the rest of a small capture's result, and the reports join consecutive captures' rows
back into one frame anyway (`joined_rows`).
"""

from __future__ import annotations

import pickle
import weakref
from dataclasses import fields
from functools import lru_cache
from typing import Any

import numpy as np
import pandas as pd


def sent_fields(record: Any) -> tuple:
    """A dataclass's fields, in order, its tables as `sent_table` sends them."""
    return tuple(sent_table(getattr(record, field.name)) for field in fields(record))


def sent_table(value: Any) -> Any:
    """`value` as pickled for another process: an empty table as a reference to the one frame
    of its columns the receiving process shares; a slice made by `row_slice` as its table and
    rows; any other value as it is."""
    if not isinstance(value, pd.DataFrame):
        return value
    if not value.empty:
        cut = _ROW_SLICES.get(id(value))
        return _RowSlice(*cut[1:]) if cut is not None and cut[0]() is value else value
    known = _SHARED_TABLES.get(id(value))
    if known is not None and known[0] is value:
        return known[1]
    return _EmptyTable(pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL))


def shared_table(table: pd.DataFrame) -> pd.DataFrame:
    """`table`, an empty table made once and never changed, noted so that it is pickled once,
    not each time it is sent."""
    _SHARED_TABLES.setdefault(id(table), (table, _EmptyTable(
        pickle.dumps(table, protocol=pickle.HIGHEST_PROTOCOL))))
    return table


class _EmptyTable:
    """An empty table on its way to another process: its pickled bytes name its columns."""

    def __init__(self, pickled: bytes) -> None:
        self.pickled = pickled

    def __reduce__(self) -> tuple:
        return shared_empty_table, (self.pickled,)


def row_slice(table: pd.DataFrame, start: int, stop: int) -> pd.DataFrame:
    """Rows `start` to `stop` of `table`, numbered from 0, noted as a slice of it: slices of one
    table sent to another process together (a group of small captures' results) send the table
    once, and are cut from it again there (each slice unpickled as a frame of its own cost
    more than the rest of a small capture's result)."""
    rows = table.iloc[start:stop]
    rows.index = pd.RangeIndex(stop - start)
    _ROW_SLICES[id(rows)] = (weakref.ref(rows), table, start, stop)
    weakref.finalize(rows, _ROW_SLICES.pop, id(rows), None)
    return rows


class _RowSlice:
    """A slice of a table on its way to another process: the table (pickled once however many
    slices of it go in one message) and the rows, which arrive as `TableRows`."""

    def __init__(self, table: pd.DataFrame, start: int, stop: int) -> None:
        self.table, self.start, self.stop = table, start, stop

    def __reduce__(self) -> tuple:
        return TableRows, (self.table, self.start, self.stop)


class TableRows:
    """Rows `start` to `stop` of a table that holds other captures' rows too: one capture's
    connections (or parity rows) as they arrive from the process that analysed it with others.
    Read through `ColumnReader`, `rows_frame` and `joined_rows`, which take a frame as well."""

    __slots__ = ("table", "start", "stop")

    def __init__(self, table: pd.DataFrame, start: int, stop: int) -> None:
        self.table, self.start, self.stop = table, start, stop

    def __len__(self) -> int:
        return self.stop - self.start

    @property
    def empty(self) -> bool:
        return self.stop == self.start

    @property
    def dtypes(self) -> pd.Series:
        return self.table.dtypes

    def __reduce__(self) -> tuple:
        return TableRows, (self.table, self.start, self.stop)


Rows = pd.DataFrame | TableRows
"""A capture's table: a frame, or its rows of a table shared with other captures."""


class ColumnReader:
    """A column's values of a capture's rows, each column of a shared table read once: taking
    a column of a frame costs pandas some 15 microseconds, and a document over 16,170 small
    captures read four of each capture's (a second in all)."""

    def __init__(self) -> None:
        self._read: dict[tuple[int, str], tuple[pd.DataFrame, np.ndarray]] = {}
        """By the table's id and the column's name: the table (held, so that its id is not
        taken by another) and the column."""

    def __call__(self, rows: Rows, name: str) -> np.ndarray:
        if not isinstance(rows, TableRows):
            return rows[name].to_numpy()
        key = (id(rows.table), name)
        if key not in self._read:
            self._read[key] = (rows.table, rows.table[name].to_numpy())
        return self._read[key][1][rows.start:rows.stop]


def rows_frame(rows: Rows) -> pd.DataFrame:
    """The rows as a frame of their own, numbered from 0 (sent to another process, a frame cut
    from a table travels as the table and its rows: `row_slice`)."""
    if isinstance(rows, TableRows):
        return row_slice(rows.table, rows.start, rows.stop)
    return rows


def rows_part(rows: Rows, begin: int, end: int) -> Rows:
    """Rows `begin` to `end` of the rows."""
    if isinstance(rows, TableRows):
        return TableRows(rows.table, rows.start + begin, rows.start + end)
    return rows if (begin, end) == (0, len(rows)) else rows.iloc[begin:end]


def joined_rows(pieces: list[Rows]) -> pd.DataFrame | None:
    """The pieces as one frame, numbered from 0; None where joining them would change a
    column's dtype (an empty table need not have the others' dtypes). Consecutive rows of one
    shared table (a group's captures, in order) are taken in one cut, not joined."""
    runs: list[pd.DataFrame] = []
    held: TableRows | None = None
    for piece in pieces:
        if (isinstance(piece, TableRows) and held is not None and piece.table is held.table
                and piece.start == held.stop):
            held = TableRows(held.table, held.start, piece.stop)
            continue
        if held is not None:
            runs.append(rows_frame(held))
        held = piece if isinstance(piece, TableRows) else None
        if held is None:
            runs.append(piece)
    if held is not None:
        runs.append(rows_frame(held))
    if len(runs) == 1:
        return runs[0]
    joined = pd.concat(runs, ignore_index=True)
    return joined if joined.dtypes.equals(runs[0].dtypes) else None


_ROW_SLICES: dict[int, tuple[weakref.ref, pd.DataFrame, int, int]] = {}
"""The slices `row_slice` made, while they live: by id, with the table and rows they hold."""
_SHARED_TABLES: dict[int, tuple[pd.DataFrame, _EmptyTable]] = {}
"""The tables `shared_table` noted (kept here, so that no other table takes their ids)."""


@lru_cache(maxsize=64)
def shared_empty_table(pickled: bytes) -> Any:
    """The one frame of this process for an empty table pickled as `pickled`."""
    return pickle.loads(pickled)  # noqa: S301 - bytes this program's own worker pickled
