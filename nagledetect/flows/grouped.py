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


def group_ids(starts: np.ndarray) -> np.ndarray:
    """0-based index of the group each element belongs to."""
    return np.cumsum(starts) - 1


def grouped_cumsum(values: np.ndarray, starts: np.ndarray) -> np.ndarray:
    """Running sum that restarts at every group start (inclusive of the current element)."""
    total = np.cumsum(values, dtype=np.int64)
    if len(total) == 0:
        return total
    first = np.flatnonzero(starts)
    before_group = np.concatenate(([0], total[first[1:] - 1]))
    return total - np.repeat(before_group, np.diff(np.append(first, len(values))))


def grouped_cummax(values: np.ndarray, starts: np.ndarray) -> np.ndarray:
    """Running maximum that restarts at every group start (inclusive).

    Each group's values are shifted into a band above the previous group's band, so one global
    `maximum.accumulate` never carries a maximum across a group boundary.
    """
    if len(values) == 0:
        return values.astype(np.int64)
    ids = group_ids(starts)
    values = values.astype(np.int64)
    low = np.minimum.reduceat(values, np.flatnonzero(starts))
    high = np.maximum.reduceat(values, np.flatnonzero(starts))
    band = np.concatenate(([0], np.cumsum(high - low + 1)[:-1]))
    shifted = values - low[ids] + band[ids]
    return np.maximum.accumulate(shifted) - band[ids] + low[ids]


def previous_in_group(values: np.ndarray, starts: np.ndarray, missing) -> np.ndarray:
    """The previous element's value within the group; `missing` at each group's first element."""
    previous = np.empty_like(values)
    previous[0:1] = missing
    previous[1:] = values[:-1]
    previous[starts] = missing
    return previous


def last_index_where(mask: np.ndarray, starts: np.ndarray) -> np.ndarray:
    """Index of the latest element at or before each position, in the same group, where `mask`.

    -1 where there is none yet in the group. Indices grow along the array, so one global running
    maximum suffices; a maximum from an earlier group is recognised by lying before the start.
    """
    positions = np.arange(len(mask))
    latest = np.maximum.accumulate(np.where(mask, positions, -1))
    group_first = np.maximum.accumulate(np.where(starts, positions, 0))
    return np.where(latest >= group_first, latest, -1)


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
