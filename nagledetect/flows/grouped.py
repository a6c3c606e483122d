"""Running operations within groups of a sorted array (per connection, per direction).

The flow code sorts packets so that each group (a connection, or one direction of it) is a
contiguous run in time order; these helpers then compute per-group running sums, maxima and
"previous value" columns for all groups at once, with no Python loop over groups.
"""

from __future__ import annotations

import numpy as np


def group_starts(keys: np.ndarray) -> np.ndarray:
    """True at the first element of each run of equal keys."""
    starts = np.ones(len(keys), dtype=bool)
    starts[1:] = keys[1:] != keys[:-1]
    return starts


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
