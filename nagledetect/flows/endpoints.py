"""Endpoint pairs (4-tuples) numbered batch by batch, so addresses never become packet columns.

Each packet's two endpoints (address words and port) are put in a canonical order (lower
endpoint first) and hashed to 64 bits; one `np.unique` per batch finds the batch's distinct
pairs, and a dictionary gives each pair a capture-wide number. The full rows are kept once per
pair. Hash collisions are checked, not assumed away: rows that share a hash must be equal.
"""

from __future__ import annotations

import numpy as np

ENDPOINT_WORDS = 5  # four 32-bit address words (IPv4 mapped as ::ffff:a.b.c.d) and the port
_HASH_MULTIPLIERS = np.array(
    [0x9E3779B97F4A7C15, 0xC2B2AE3D27D4EB4F, 0x165667B19E3779F9, 0xD6E8FEB86659FD93,
     0xFF51AFD7ED558CCD, 0xC4CEB9FE1A85EC53, 0x94D049BB133111EB, 0xBF58476D1CE4E5B9,
     0x2545F4914F6CDD1D, 0x9FB21C651E98DF25], dtype=np.uint64)


def endpoint_rows(columns: dict[str, np.ndarray], side: str) -> np.ndarray:
    """(n, 5) uint32: the address words and port of one side of every packet."""
    words = [columns[f"{side}_{i}"] for i in range(4)]
    words.append(columns[f"{side}_port"].astype(np.uint32))
    return np.stack(words, axis=1)


def _lexically_less(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Row-wise a < b comparing columns left to right."""
    less = np.zeros(len(a), dtype=bool)
    decided = np.zeros(len(a), dtype=bool)
    for column in range(a.shape[1]):
        less |= ~decided & (a[:, column] < b[:, column])
        decided |= a[:, column] != b[:, column]
    return less


def _hash_rows(rows: np.ndarray) -> np.ndarray:
    with np.errstate(over="ignore"):
        mixed = rows.astype(np.uint64) * _HASH_MULTIPLIERS[: rows.shape[1]]
        value = np.bitwise_xor.reduce(mixed, axis=1)
        value ^= value >> np.uint64(31)
        return value * np.uint64(0xBF58476D1CE4E5B9)


def _canonical_pairs(columns: dict[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """(n, 10) rows: lower endpoint then higher endpoint; and whether the source is the lower."""
    src = endpoint_rows(columns, "src")
    dst = endpoint_rows(columns, "dst")
    src_is_low = _lexically_less(src, dst) | np.all(src == dst, axis=1)
    both = np.where(src_is_low[:, None], np.concatenate([src, dst], axis=1),
                    np.concatenate([dst, src], axis=1))
    return both, src_is_low


def pair_hashes(columns: dict[str, np.ndarray]) -> np.ndarray:
    """64-bit hash of each packet's endpoint pair, the same in both directions: the sum of the
    two endpoints' hashes, which needs no canonical ordering."""
    with np.errstate(over="ignore"):
        return (_hash_rows(endpoint_rows(columns, "src"))
                + _hash_rows(endpoint_rows(columns, "dst")))


class EndpointPairs:
    """Capture-wide numbering of endpoint pairs; `rows` holds (low endpoint, high endpoint)."""

    def __init__(self) -> None:
        self._number_of: dict[int, int] = {}
        self._rows: list[np.ndarray] = []

    def assign(self, columns: dict[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
        """Pair number and "source is the lower endpoint" for every packet of a batch."""
        both, src_is_low = _canonical_pairs(columns)
        hashes = _hash_rows(both)
        unique_hashes, first, inverse = np.unique(hashes, return_index=True, return_inverse=True)
        if not np.array_equal(both, both[first[inverse]]):
            raise RuntimeError("64-bit endpoint hash collision")
        numbers = np.empty(len(unique_hashes), dtype=np.int64)
        for index, value in enumerate(unique_hashes.tolist()):
            number = self._number_of.get(value)
            if number is None:
                number = len(self._number_of)
                self._number_of[value] = number
                self._rows.append(both[first[index]])
            numbers[index] = number
        return numbers[inverse.ravel()], src_is_low

    @property
    def rows(self) -> np.ndarray:
        """(pairs, 10) uint32: low endpoint words and port, then high endpoint words and port."""
        if not self._rows:
            return np.zeros((0, 2 * ENDPOINT_WORDS), dtype=np.uint32)
        return np.stack(self._rows)
