"""How a capture's tables travel to another process (a `-j` worker's or a Dask worker's results
to the process that writes the reports).

Why: a run over many small captures sends thousands of results, and unpickling a small table
costs more than the rest of a small capture's result. So an empty table travels as a
reference to one table of its columns, which the receiving process makes once and shares (its
tables are only read there: reporters never change a table), and a group of small captures'
connections and parity rows are each capture's rows of the group's table (`TableRows`), which
travel as the table, pickled once per message, and their rows. The reports join consecutive
captures' rows back into one table anyway (`joined_rows`).
"""

from __future__ import annotations

import pickle
from dataclasses import fields
from functools import lru_cache
from typing import Any

import numpy as np

from nagledetect.stored import StoredRows
from nagledetect.table import Table, concatenated


def sent_fields(record: Any) -> tuple:
    """A dataclass's fields, in order, its tables as `sent_table` sends them."""
    return tuple(sent_table(getattr(record, field.name)) for field in fields(record))


def sent_table(value: Any) -> Any:
    """`value` as pickled for another process: an empty table as a reference to the one frame
    of its columns the receiving process shares; any other value as it is (`TableRows` as its
    table, which pickle sends once however many rows of it go in one message, and its rows)."""
    if not isinstance(value, Table) or not value.empty:
        return value
    known = _SHARED_TABLES.get(id(value))
    if known is not None and known[0] is value:
        return known[1]
    return _EmptyTable(pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL))


def shared_table(table: Table) -> Table:
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


class TableRows:
    """Rows `start` to `stop` of a table that holds other captures' rows too: one capture's
    connections (or parity rows) as the batch that analysed it with others cuts them, and as
    they arrive in another process. Read through `ColumnReader`, `rows_table` and
    `joined_rows`, which take a table as well."""

    __slots__ = ("table", "start", "stop")

    def __init__(self, table: Table, start: int, stop: int) -> None:
        self.table, self.start, self.stop = table, start, stop

    def __len__(self) -> int:
        return self.stop - self.start

    @property
    def empty(self) -> bool:
        return self.stop == self.start

    def __reduce__(self) -> tuple:
        return TableRows, (self.table, self.start, self.stop)


Rows = Table | TableRows | StoredRows
"""A capture's table: a table of its own, its rows of a table shared with other captures, or
a table kept on disk (a large capture's connections), which reads like a table."""


class ColumnReader:
    """A column's values of a capture's rows, each column of a shared table read once."""

    def __init__(self) -> None:
        self._read: dict[tuple[int, str], tuple[Table, np.ndarray]] = {}
        """By the table's id and the column's name: the table (held, so that its id is not
        taken by another) and the column."""

    def __call__(self, rows: Rows, name: str) -> np.ndarray:
        if not isinstance(rows, TableRows):
            return rows[name]
        key = (id(rows.table), name)
        if key not in self._read:
            self._read[key] = (rows.table, rows.table[name])
        return self._read[key][1][rows.start:rows.stop]


def rows_table(rows: Rows) -> Table | StoredRows:
    """The rows as a table of their own (a stored table as it is: its columns are read by
    name, its rows taken, as a table's)."""
    if not isinstance(rows, TableRows):
        return rows
    return rows.table.take(slice(rows.start, rows.stop))


def held_in(rows: Rows) -> tuple[Table | StoredRows, int]:
    """The table that holds the rows, and where in it they start."""
    if isinstance(rows, TableRows):
        return rows.table, rows.start
    return rows, 0


def rows_part(rows: Rows, begin: int, end: int) -> Rows:
    """Rows `begin` to `end` of the rows (of a stored table, in memory)."""
    if isinstance(rows, TableRows):
        return TableRows(rows.table, rows.start + begin, rows.start + end)
    if isinstance(rows, StoredRows) or (begin, end) != (0, len(rows)):
        return rows.take(slice(begin, end))
    return rows


def joined_rows(pieces: list[Rows]) -> Table | None:
    """The pieces as one table; None where joining them would change a column's dtype (an
    empty table need not have the others' dtypes) or their columns differ. Consecutive rows
    of one shared table (a group's captures, in order) are taken in one cut, not joined."""
    runs: list[Table] = []
    held: TableRows | None = None
    for piece in pieces:
        if (isinstance(piece, TableRows) and held is not None and piece.table is held.table
                and piece.start == held.stop):
            held = TableRows(held.table, held.start, piece.stop)
            continue
        if held is not None:
            runs.append(rows_table(held))
        held = piece if isinstance(piece, TableRows) else None
        if held is None:
            runs.append(piece)
    if held is not None:
        runs.append(rows_table(held))
    if len(runs) == 1:
        return runs[0]
    layout = _layout(runs[0])
    if any(_layout(run) != layout for run in runs[1:]):
        return None
    return concatenated(runs)


def _layout(table: Table) -> tuple:
    """A table's columns with their dtypes and codes."""
    return tuple((name, table[name].dtype) for name in table), table.coded


_SHARED_TABLES: dict[int, tuple[Table, _EmptyTable]] = {}
"""The tables `shared_table` noted (kept here, so that no other table takes their ids)."""


@lru_cache(maxsize=64)
def shared_empty_table(pickled: bytes) -> Any:
    """The one table of this process for an empty table pickled as `pickled`."""
    return pickle.loads(pickled)  # noqa: S301 - bytes this program's own worker pickled
