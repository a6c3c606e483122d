"""A table as the analysis passes it along: named numpy columns of one length.

The core's output, the events and the detectors' inputs are all tables of this kind. They need
only columns by name, rows by position or mask, and a few columns held as codes of a fixed
vocabulary (a packet's role); pandas would cost a small capture more to import than to analyse,
so it is imported only where a caller asks for a DataFrame (`to_pandas`: `load_capture`,
`--tables`, the HTML report's charts).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    import pandas as pd


class Table:
    """Columns of equal length by name, in order. A column named in `coded` holds the codes of
    its vocabulary (code i is `coded[name][i]`); reading it gives the codes.

    Columns are shared, not copied, by every method that returns a table: a table is handed
    on, and its columns are read, not written in place.
    """

    __slots__ = ("_columns", "_coded")

    def __init__(self, columns: Mapping[str, Any] | None = None,
                 coded: Mapping[str, Sequence[str]] | None = None) -> None:
        self._columns: dict[str, np.ndarray] = {
            name: _column(values) for name, values in (columns or {}).items()}
        self._coded: dict[str, tuple[str, ...]] = {
            name: tuple(words) for name, words in (coded or {}).items() if name in self._columns}
        lengths = {len(values) for values in self._columns.values()}
        if len(lengths) > 1:
            raise ValueError(f"columns of different lengths: {sorted(lengths)}")

    @classmethod
    def _of_columns(cls, columns: dict[str, np.ndarray], coded: dict[str, tuple[str, ...]]
                    ) -> Table:
        """A table of columns made from this class's own (arrays of one length already, and
        their vocabularies): rows taken or columns picked need no checking again."""
        table = cls.__new__(cls)
        table._columns = columns
        table._coded = {name: words for name, words in coded.items() if name in columns}
        return table

    @classmethod
    def of_pandas(cls, frame: pd.DataFrame) -> Table:
        """A DataFrame's columns (categoricals as their codes and categories), not copied."""
        columns: dict[str, np.ndarray] = {}
        coded: dict[str, Sequence[str]] = {}
        for name in frame.columns:
            values = frame[name]
            if hasattr(values, "cat"):
                columns[name] = values.cat.codes.to_numpy()
                coded[name] = [str(word) for word in values.cat.categories]
            else:
                columns[name] = values.to_numpy()
        return cls(columns, coded)

    def to_pandas(self) -> pd.DataFrame:
        """The table as a DataFrame (coded columns as categoricals)."""
        import pandas as pd

        frame = pd.DataFrame(dict(self._columns), copy=False)
        for name, words in self._coded.items():
            frame[name] = pd.Categorical.from_codes(self._columns[name], categories=list(words))
        return frame

    @property
    def columns(self) -> list[str]:
        return list(self._columns)

    @property
    def coded(self) -> dict[str, tuple[str, ...]]:
        """The vocabulary of each coded column."""
        return dict(self._coded)

    @property
    def empty(self) -> bool:
        return not len(self)

    def __len__(self) -> int:
        for values in self._columns.values():
            return len(values)
        return 0

    def __contains__(self, name: object) -> bool:
        return name in self._columns

    def __iter__(self) -> Iterator[str]:
        return iter(self._columns)

    def __getitem__(self, name: str) -> np.ndarray:
        return self._columns[name]

    def __setitem__(self, name: str, values: Any) -> None:
        values = _column(values)
        if self._columns and len(values) != len(self):
            raise ValueError(f"column {name} has {len(values)} rows, the table {len(self)}")
        self._columns[name] = values
        self._coded.pop(name, None)

    def __repr__(self) -> str:
        return f"Table({len(self)} rows: {', '.join(self._columns)})"

    def select(self, names: Iterable[str]) -> Table:
        """These columns, in this order."""
        return Table._of_columns({name: self._columns[name] for name in names}, self._coded)

    def without(self, names: Iterable[str]) -> Table:
        dropped = set(names)
        return Table._of_columns({name: values for name, values in self._columns.items()
                                  if name not in dropped}, self._coded)

    def take(self, rows: np.ndarray | slice) -> Table:
        """The rows at these positions (or where a boolean mask holds, or a slice), in that
        order."""
        return Table._of_columns({name: values[rows] for name, values in self._columns.items()},
                                 self._coded)

    def assign(self, **columns: Any) -> Table:
        """A table with these columns added or replaced (the others shared)."""
        table = Table._of_columns(dict(self._columns), self._coded)
        for name, values in columns.items():
            table[name] = values
        return table

    def with_codes(self, name: str, values: np.ndarray, words: Sequence[str]) -> Table:
        """A table with this coded column added or replaced: `values` are codes of `words`."""
        table = self.assign(**{name: values})
        table._coded[name] = tuple(words)
        return table

    def labels(self, name: str) -> np.ndarray:
        """A column's values as Python objects, coded columns as their words."""
        values = self._columns[name]
        words = self._coded.get(name)
        if words is None:
            return values.astype(object)
        return np.array(words + ("",), dtype=object)[values]

    def records(self) -> list[dict[str, Any]]:
        """One dict a row, of Python values (coded columns as their words)."""
        names = list(self._columns)
        lists = [self.labels(name).tolist() if name in self._coded
                 else self._columns[name].tolist() for name in names]
        return [dict(zip(names, row)) for row in zip(*lists)]

    def equals(self, other: Table) -> bool:
        """Same columns in the same order, same codes, same values and dtypes (NaN equal)."""
        if self.columns != other.columns or self._coded != other._coded:
            return False
        return all(_same_column(self[name], other[name]) for name in self._columns)


def object_column(values: Sequence[Any]) -> np.ndarray:
    """Values as a column of objects, each held as it is (numpy would make a list of equal
    tuples a two-dimensional array)."""
    return np.fromiter(values, dtype=object, count=len(values))


def _column(values: Any) -> np.ndarray:
    """Values as a column: text as Python strings (objects), as pandas holds it, also where
    there are none."""
    if isinstance(values, list) and not values:
        return np.zeros(0, dtype=object)
    column = np.asarray(values)
    return column.astype(object) if column.dtype.kind == "U" else column


def _same_column(left: np.ndarray, right: np.ndarray) -> bool:
    if left.dtype != right.dtype or left.shape != right.shape:
        return False
    if left.dtype.kind == "f":
        return bool(np.array_equal(left, right, equal_nan=True))
    return bool(np.array_equal(left, right))


def concatenated(tables: Sequence[Table]) -> Table:
    """The rows of every table one after another (the first table's columns and codes; every
    table must have them)."""
    if not tables:
        return Table()
    first = tables[0]
    return Table({name: np.concatenate([table[name] for table in tables])
                  for name in first.columns}, first.coded)


def codes(column: Any) -> np.ndarray:
    """A coded column's codes, from a `Table` (its column holds them) or from a pandas
    categorical (the numpy path's tables)."""
    categorical = getattr(column, "cat", None)
    return np.asarray(column) if categorical is None else categorical.codes.to_numpy()


def as_table(table: Table | pd.DataFrame) -> Table:
    """A table as the analysis reads it: a `Table` as it is, a DataFrame's columns (see
    `Table.of_pandas`)."""
    return table if isinstance(table, Table) else Table.of_pandas(table)


def as_frame(table: Table | pd.DataFrame) -> pd.DataFrame:
    """A table as a DataFrame (for the readers that want pandas: charts, `--tables`)."""
    return table.to_pandas() if isinstance(table, Table) else table
