"""Running operations within groups of a sorted array (per connection, per direction).

The flow code sorts packets so that each group (a connection, or one direction of it) is a
contiguous run in time order; these helpers then compute per-group running sums, maxima and
"previous value" columns for all groups at once, with no Python loop over groups.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from nagledetect import _core


def group_starts(keys: np.ndarray) -> np.ndarray:
    """True at the first element of each run of equal keys."""
    starts = np.ones(len(keys), dtype=bool)
    starts[1:] = keys[1:] != keys[:-1]
    return starts


def first_per_key(key: np.ndarray, rows: np.ndarray, count: int) -> np.ndarray:
    """The first of `rows` of each key below `count`, -1 where it has none."""
    first = np.full(count, np.iinfo(np.int64).max, dtype=np.int64)
    np.minimum.at(first, key[rows], rows)
    return np.where(first == np.iinfo(np.int64).max, -1, first)


def last_per_key(key: np.ndarray, rows: np.ndarray, count: int) -> np.ndarray:
    """The last of `rows` of each key below `count`, -1 where it has none."""
    last = np.full(count, -1, dtype=np.int64)
    np.maximum.at(last, key[rows], rows)
    return last


def group_first_positions(starts: np.ndarray) -> np.ndarray:
    """Each element's group's first position (`starts`: True at each group's first element)."""
    return np.maximum.accumulate(np.where(starts, np.arange(len(starts)), 0))


def _per_element(per_group: np.ndarray, first: np.ndarray, count: int) -> np.ndarray:
    """Each group's value repeated over its elements (`first`: the groups' first indices);
    a sequential repeat costs less than a gather by group index."""
    return np.repeat(per_group, np.diff(np.append(first, count)))


def grouped_cumsum(values: np.ndarray, starts: np.ndarray) -> np.ndarray:
    """Running sum that restarts at every group start (inclusive of the current element)."""
    total = np.cumsum(values, dtype=np.int64)
    if len(total) == 0:
        return total
    first = np.flatnonzero(starts)
    total -= _per_element(np.concatenate(([0], total[first[1:] - 1])), first, len(total))
    return total


def grouped_cummax(values: np.ndarray, starts: np.ndarray) -> np.ndarray:
    """Running maximum that restarts at every group start (inclusive).

    Each group's values are shifted into a band above the previous group's band, so one global
    `maximum.accumulate` never carries a maximum across a group boundary (the groups' spans,
    added up, must stay within 64 bits).
    """
    if len(values) == 0:
        return values.astype(np.int64)
    values = values.astype(np.int64)
    first = np.flatnonzero(starts)
    low = np.minimum.reduceat(values, first)
    high = np.maximum.reduceat(values, first)
    band = np.concatenate(([0], np.cumsum(high - low + 1)[:-1]))
    offset = _per_element(band - low, first, len(values))
    shifted = values + offset
    np.maximum.accumulate(shifted, out=shifted)
    shifted -= offset
    return shifted


def previous_in_group(values: np.ndarray, starts: np.ndarray, missing) -> np.ndarray:
    """The previous element's value within the group; `missing` at each group's first element."""
    previous = np.empty_like(values)
    previous[0:1] = missing
    previous[1:] = values[:-1]
    previous[starts] = missing
    return previous


def first_occurrences(codes: np.ndarray) -> np.ndarray:
    """Index of each code's first occurrence, for codes numbered in order of first sight (as
    pandas' factorize numbers them, and connections are numbered): the running maximum of the
    codes steps up exactly there."""
    if len(codes) == 0:
        return np.zeros(0, dtype=np.int64)
    running = np.maximum.accumulate(codes)
    steps = np.ones(len(codes), dtype=bool)
    steps[1:] = running[1:] != running[:-1]
    return np.flatnonzero(steps)


class KeyGroups:
    """Rows grouped by equal integer keys, reduced group by group with numpy.

    Why: the detectors reduce small tables (a part's stalls, gaps, messages) per connection or
    direction, where a pandas groupby costs more to set up than its sums and medians take.
    Groups come in key order, as a sorted pandas groupby gives them; the rows are sorted only
    when they do not come in key order already (they mostly do: connection order). NaN values
    are skipped, as pandas skips them.
    """

    def __init__(self, *keys: np.ndarray) -> None:
        rows = len(keys[0])
        self.order = key_order(*keys)
        ordered = [self.rows_of(key) for key in keys]
        change = np.zeros(rows, dtype=bool)
        change[:1] = True
        for key in ordered:
            change[1:] |= key[1:] != key[:-1]
        self.first = np.flatnonzero(change)
        self.sizes = np.diff(np.append(self.first, rows))
        self.keys = tuple(key[self.first] for key in ordered)

    def __len__(self) -> int:
        return len(self.first)

    def rows_of(self, values: np.ndarray) -> np.ndarray:
        """`values` (one per row) in group order."""
        return values if self.order is None else values[self.order]

    def slices(self) -> list[slice]:
        """Each group's rows, as a slice of the group order (`rows_of`)."""
        return [slice(first, first + size)
                for first, size in zip(self.first.tolist(), self.sizes.tolist())]

    def by_key(self, per_group: list[Any]) -> dict[tuple, Any]:
        """Each group's keys, as a tuple of Python values, mapped to its item of `per_group`."""
        return dict(zip(zip(*(key.tolist() for key in self.keys)), per_group))

    def counts_by_key(self) -> dict[tuple, int]:
        """Each group's keys, as a tuple of Python values, mapped to how many rows it has."""
        return self.by_key(self.sizes.tolist())

    def sum(self, values: np.ndarray) -> np.ndarray:
        """Each group's sum (of counts, for a mask)."""
        ordered = self.rows_of(values)
        if ordered.dtype.kind == "b":
            return self._summed(ordered.astype(np.int64))
        if ordered.dtype.kind == "f":
            return self._summed(np.where(np.isnan(ordered), 0.0, ordered))
        return self._summed(ordered)

    def mean(self, values: np.ndarray) -> np.ndarray:
        """Each group's mean (NaN where a group has no value)."""
        ordered = self.rows_of(values).astype(np.float64)
        present = ~np.isnan(ordered)
        with np.errstate(invalid="ignore", divide="ignore"):
            return (self._summed(np.where(present, ordered, 0.0))
                    / self._summed(present.astype(np.int64)))

    def median(self, values: np.ndarray) -> np.ndarray:
        """Each group's median: the middle value, or the mean of the two middle ones, as pandas
        computes it (NaN where a group has no value); selected group by group by the core."""
        ordered = np.ascontiguousarray(self.rows_of(values), dtype=np.float64)
        return _core.group_medians(ordered, self.first.astype(np.int64))

    def _summed(self, ordered: np.ndarray) -> np.ndarray:
        if not len(self.first):
            return np.zeros(0, dtype=ordered.dtype)
        return np.add.reduceat(ordered, self.first)


def key_order(*keys: np.ndarray) -> np.ndarray | None:
    """The rows' positions sorted by the keys (the first key first, ties in row order), or None
    when they are in that order already (checked in one pass, cheaper than sorting)."""
    tied = np.ones(max(len(keys[0]) - 1, 0), dtype=bool)
    for key in keys:
        if (tied & (key[1:] < key[:-1])).any():
            return np.lexsort(keys[::-1])
        tied &= key[1:] == key[:-1]
    return None


def joined_columns(parts: list[dict[str, np.ndarray]],
                   order: np.ndarray | None = None) -> dict[str, np.ndarray]:
    """Row sets of the same columns (a slice's each) joined column by column, each part's
    column let go once joined (`parts` is emptied), and ordered by `order` if given: the
    joined rows are then held once, not twice (a part of a huge connection keeps millions of
    event rows)."""
    names = list(parts[0])
    joined = {}
    for name in names:
        joined[name] = np.concatenate([part.pop(name) for part in parts])
        if order is not None:
            joined[name] = joined[name][order]
    parts.clear()
    return joined


def distinct(values: np.ndarray) -> np.ndarray:
    """The distinct values, sorted: `np.unique` without its hash table, which numpy 2.4 takes
    when no index, inverse or count is asked for, and which was ten times slower than a sort
    on a million values of many kinds (1.08 s against 0.10 s)."""
    ordered = np.sort(values)
    return ordered[group_starts(ordered)]


def found_in_sorted(ordered: np.ndarray, wanted: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Where each of `wanted` lies in `ordered` (sorted, not empty), and whether it is there:
    its position (the last where it would lie past the end), and True where it is found."""
    position = np.minimum(np.searchsorted(ordered, wanted), len(ordered) - 1)
    return position, ordered[position] == wanted


def rows_holding(values: np.ndarray, wanted: np.ndarray) -> np.ndarray:
    """The row of `values` (each distinct, in any order) holding each of `wanted`; -1 where
    none does."""
    if not len(values):
        return np.full(len(wanted), -1, dtype=np.int64)
    order = np.argsort(values, kind="stable")
    position, found = found_in_sorted(values[order], wanted)
    return np.where(found, order[position], -1)
