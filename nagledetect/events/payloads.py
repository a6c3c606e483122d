"""How often each payload size occurs in a direction's data segments.

Stream coalescing reads a direction's segment count and write size (the payloads' common
divisor, or the smallest), tinygram floods its median payload: each for a few directions,
known only once every message is. A whole run counts them from its segment table when asked
(`SegmentPayloads`); a part read a slice at a time (docs/performance.md, "The twenty-second
round") counts every direction's as its slices come (`PayloadsBySlice`), so that no detector
needs the segment table, which such a part never makes whole.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING

import numpy as np

from nagledetect.events.messages import median_from_counts
from nagledetect.flows.connections import direction_key
from nagledetect.flows.grouped import group_starts
from nagledetect.table import Table

if TYPE_CHECKING:
    import pandas as pd

PAYLOAD_SIZES = "payload_sizes"
"""The name detectors share it under (`DetectorInput.shared`)."""
SIZE_BITS = 32
"""A payload size fits 32 bits: a count key is the direction key above them."""


@dataclass(frozen=True)
class PayloadCounts:
    """Rows of (direction key, payload size, segments of that size), sorted by key, then size;
    the directions' figures in key order (`keys`)."""

    key: np.ndarray
    size: np.ndarray
    count: np.ndarray

    @cached_property
    def _first(self) -> np.ndarray:
        return np.flatnonzero(group_starts(self.key))

    def keys(self) -> np.ndarray:
        return self.key[self._first]

    def segments(self) -> np.ndarray:
        """Each direction's data segments."""
        return np.add.reduceat(self.count, self._first) if len(self.key) else self.count

    def smallest(self) -> np.ndarray:
        return self.size[self._first]

    def common_divisor(self) -> np.ndarray:
        """The greatest common divisor of each direction's payloads."""
        return np.gcd.reduceat(self.size, self._first) if len(self.key) else self.size

    def median(self) -> np.ndarray:
        """Each direction's median payload, as `KeyGroups.median` takes it of the segments."""
        return median_from_counts(self.key, self.size, self.count)


def _counted(keyed_sizes: np.ndarray, weights: np.ndarray | None = None) -> PayloadCounts:
    """`keyed_sizes` (direction key << SIZE_BITS | size), each `weights` times (once when
    None), counted."""
    if weights is None:  # counts alone: np.unique sorts the values, without an argsort
        values, count = np.unique(keyed_sizes, return_counts=True)
    else:
        values, inverse = np.unique(keyed_sizes, return_inverse=True)
        count = np.bincount(inverse, weights=weights).astype(np.int64)
    return PayloadCounts(values >> SIZE_BITS, values & ((1 << SIZE_BITS) - 1), count)


def _keyed_sizes(segments: Table | pd.DataFrame) -> np.ndarray:
    return (direction_key(segments) << SIZE_BITS) | np.asarray(segments["payload_bytes"]).astype(
        np.int64)


class SegmentPayloads:
    """The counts of a segment table held whole, made for the directions asked for."""

    def __init__(self, segments: Table | pd.DataFrame) -> None:
        self._segments = segments

    def of(self, keys: np.ndarray) -> PayloadCounts:
        """The counts of the directions of `keys` (`direction_key`s) that have segments."""
        wanted = np.isin(direction_key(self._segments), keys)
        return _counted(_keyed_sizes(self._segments)[wanted])


class CountedPayloads:
    """Every direction's counts, counted already (by the compiled core)."""

    def __init__(self, counts: PayloadCounts) -> None:
        self._counts = counts

    def of(self, keys: np.ndarray) -> PayloadCounts:
        """The counts of the directions of `keys` that have segments."""
        return _of_keys(self._counts, keys)


class PayloadsBySlice:
    """The counts of every direction, its segments given a slice at a time (`add`). Each
    slice's counts are kept, and joined when they outgrow what was joined before (a part of
    a few huge connections has a few thousand sizes in all)."""

    def __init__(self, join_rows: int = 65_536) -> None:
        self._joined = PayloadCounts(*(np.zeros(0, dtype=np.int64),) * 3)
        self._pending: list[PayloadCounts] = []
        self._pending_rows = 0
        self._join_rows = join_rows
        """Rows beyond twice the joined ones that the slices' counts may hold unjoined."""

    def add(self, segments: Table | pd.DataFrame) -> None:
        counts = _counted(_keyed_sizes(segments))
        self._pending.append(counts)
        self._pending_rows += len(counts.key)
        if self._pending_rows > 2 * len(self._joined.key) + self._join_rows:
            self._join()

    def _join(self) -> None:
        parts = [self._joined, *self._pending]
        keyed = np.concatenate([(part.key << SIZE_BITS) | part.size for part in parts])
        self._joined = _counted(keyed, np.concatenate([part.count for part in parts]))
        self._pending, self._pending_rows = [], 0

    def of(self, keys: np.ndarray) -> PayloadCounts:
        """The counts of the directions of `keys` that have segments."""
        self._join()
        return _of_keys(self._joined, keys)


def _of_keys(counts: PayloadCounts, keys: np.ndarray) -> PayloadCounts:
    wanted = np.isin(counts.key, keys)
    return PayloadCounts(counts.key[wanted], counts.size[wanted], counts.count[wanted])
