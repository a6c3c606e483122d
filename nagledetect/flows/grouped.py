"""Groups of a sorted array (per connection, per direction): where each run of equal keys starts.

The flow code sorts packets so that each group (a connection, or one direction of it) is a
contiguous run in time order; the running states within groups are walked by compiled loops in
the modules that own their rules (`sequence`, `roles`, `vantage`, `events.segments`).
"""

from __future__ import annotations

import numpy as np


def group_starts(keys: np.ndarray) -> np.ndarray:
    """True at the first element of each run of equal keys."""
    starts = np.ones(len(keys), dtype=bool)
    starts[1:] = keys[1:] != keys[:-1]
    return starts


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
