"""Endpoint pairs (4-tuples) numbered batch by batch, so addresses never become packet columns.

Each endpoint (address words and port) is hashed to 64 bits; a pair's hash is the sum of its
two endpoints' hashes, the same in both directions, and the endpoint with the smaller hash is
the pair's "low" side. A hash table (pandas' factorize, one pass) finds a batch's distinct pairs
and a dictionary gives each a capture-wide number; the full rows are kept once per pair.
Collisions are checked, not assumed away: packets that share a pair hash must have the same two
endpoint hashes.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from nagledetect.flows.grouped import first_occurrences

ENDPOINT_WORDS = 5  # four 32-bit address words (IPv4 mapped as ::ffff:a.b.c.d) and the port
_HASH_MULTIPLIERS = np.array(
    [0x9E3779B97F4A7C15, 0xC2B2AE3D27D4EB4F, 0x165667B19E3779F9, 0xD6E8FEB86659FD93,
     0xFF51AFD7ED558CCD, 0xC4CEB9FE1A85EC53, 0x94D049BB133111EB, 0xBF58476D1CE4E5B9,
     0x2545F4914F6CDD1D, 0x9FB21C651E98DF25], dtype=np.uint64)


def endpoint_rows(columns: dict[str, np.ndarray], side: str, row: int) -> np.ndarray:
    """(5,) uint32: the address words and port of one side of one packet."""
    names = [f"{side}_{i}" for i in range(4)] + [f"{side}_port"]
    return np.array([columns[name][row] for name in names], dtype=np.uint32)


def endpoint_hash(columns: dict[str, np.ndarray], side: str) -> np.ndarray:
    """64-bit hash of one side's endpoint of every packet, computed word by word (no stacking)."""
    names = [f"{side}_{i}" for i in range(4)] + [f"{side}_port"]
    with np.errstate(over="ignore"):
        value = np.zeros(len(columns[names[0]]), dtype=np.uint64)
        for name, multiplier in zip(names, _HASH_MULTIPLIERS):
            value ^= columns[name].astype(np.uint64) * multiplier
        value ^= value >> np.uint64(31)
        value *= np.uint64(0xBF58476D1CE4E5B9)
    return value


def pair_hashes(columns: dict[str, np.ndarray]) -> np.ndarray:
    """64-bit hash of each packet's endpoint pair, the same in both directions: the sum of the
    two endpoints' hashes, which needs no canonical ordering."""
    with np.errstate(over="ignore"):
        return endpoint_hash(columns, "src") + endpoint_hash(columns, "dst")


class EndpointPairs:
    """Capture-wide numbering of endpoint pairs; `rows` holds (low endpoint, high endpoint)."""

    def __init__(self) -> None:
        self._number_of: dict[int, int] = {}
        self._low_hashes: list[int] = []
        self._rows: list[np.ndarray] = []

    def assign(self, columns: dict[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
        """Pair number and "source is the lower endpoint" for every packet of a batch."""
        src_hash = endpoint_hash(columns, "src")
        dst_hash = endpoint_hash(columns, "dst")
        src_is_low = src_hash <= dst_hash
        low_hash = np.minimum(src_hash, dst_hash)
        with np.errstate(over="ignore"):
            codes, unique_hashes = pd.factorize(src_hash + dst_hash)
        first = first_occurrences(codes)
        if not np.array_equal(low_hash, low_hash[first][codes]):
            raise RuntimeError("64-bit endpoint hash collision")
        numbers = np.empty(len(unique_hashes), dtype=np.int64)
        for index, value in enumerate(unique_hashes.tolist()):
            numbers[index] = self._number(value, int(first[index]), columns, src_is_low, low_hash)
        return numbers[codes], src_is_low

    def _number(self, pair_hash: int, row: int, columns: dict[str, np.ndarray],
                src_is_low: np.ndarray, low_hash: np.ndarray) -> int:
        """The number of a pair (seen first at `row` of this batch), given on first sight."""
        number = self._number_of.get(pair_hash)
        if number is not None:
            if self._low_hashes[number] != int(low_hash[row]):
                raise RuntimeError("64-bit endpoint hash collision")
            return number
        number = len(self._number_of)
        self._number_of[pair_hash] = number
        self._low_hashes.append(int(low_hash[row]))
        sides = ("src", "dst") if src_is_low[row] else ("dst", "src")
        self._rows.append(np.concatenate([endpoint_rows(columns, side, row) for side in sides]))
        return number

    @property
    def rows(self) -> np.ndarray:
        """(pairs, 10) uint32: low endpoint words and port, then high endpoint words and port."""
        if not self._rows:
            return np.zeros((0, 2 * ENDPOINT_WORDS), dtype=np.uint32)
        return np.stack(self._rows)
