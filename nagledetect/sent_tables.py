"""How a capture's tables travel to another process (a `-j` worker's or a Dask worker's results
to the process that writes the reports).

Why: a run over many small captures sends thousands of results, and unpickling a small pandas
frame costs more than the rest of a small capture's result. So an empty table travels as a
reference to one frame of its columns, which the receiving process makes once and shares (its
tables are only read there: reporters never change a table), and the slices of one table (a
group of small captures' connections) travel as the table, pickled once per message, and their
rows, cut again on arrival.
"""

from __future__ import annotations

import pickle
import weakref
from dataclasses import fields
from functools import lru_cache
from typing import Any

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
    slices of it go in one message) and the rows."""

    def __init__(self, table: pd.DataFrame, start: int, stop: int) -> None:
        self.table, self.start, self.stop = table, start, stop

    def __reduce__(self) -> tuple:
        return row_slice, (self.table, self.start, self.stop)


_ROW_SLICES: dict[int, tuple[weakref.ref, pd.DataFrame, int, int]] = {}
"""The slices `row_slice` made, while they live: by id, with the table and rows they hold."""
_SHARED_TABLES: dict[int, tuple[pd.DataFrame, _EmptyTable]] = {}
"""The tables `shared_table` noted (kept here, so that no other table takes their ids)."""


@lru_cache(maxsize=64)
def shared_empty_table(pickled: bytes) -> Any:
    """The one frame of this process for an empty table pickled as `pickled`."""
    return pickle.loads(pickled)  # noqa: S301 - bytes this program's own worker pickled
