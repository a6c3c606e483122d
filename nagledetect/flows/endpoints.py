"""Endpoint pairs (4-tuples) numbered batch by batch, so addresses never become packet columns.

Each endpoint gets a 64-bit key: for IPv4 the address and port themselves (exact), for IPv6 a
hash of its words with the top bit set (so it never equals an IPv4 key). The endpoint with the
smaller key is the pair's "low" side. The pair's two keys are mixed into one 64-bit value, the
same in both directions; a hash table (pandas' factorize, one pass) finds a batch's distinct
values, and a dictionary keyed by the exact (low, high) keys gives each pair a capture-wide
number. Collisions of the mixed value are checked, not assumed away: every packet of a value
must have the same two keys, else the batch is grouped by the two keys themselves.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from nagledetect.flows.grouped import first_occurrences
from nagledetect.read.columns import ipv4_mapped

ENDPOINT_WORDS = 5  # four 32-bit address words (IPv4 mapped as ::ffff:a.b.c.d) and the port
_WORD_MULTIPLIERS = np.array(
    [0x9E3779B97F4A7C15, 0xC2B2AE3D27D4EB4F, 0x165667B19E3779F9, 0xD6E8FEB86659FD93],
    dtype=np.uint64)
_PORT_MULTIPLIER = np.uint64(0xFF51AFD7ED558CCD)


def _endpoint_rows(columns: dict[str, np.ndarray], side: str, rows: np.ndarray) -> np.ndarray:
    """(len(rows), 5) uint32: the address words and port of one side of these packets."""
    names = [f"{side}_{i}" for i in range(4)] + [f"{side}_port"]
    return np.stack([columns[name][rows] for name in names], axis=1).astype(np.uint32)


def _mixed(value: np.ndarray) -> np.ndarray:
    """splitmix64's finaliser: every input bit reaches every output bit."""
    with np.errstate(over="ignore"):
        value = (value ^ (value >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        value = (value ^ (value >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return value ^ (value >> np.uint64(31))


_IPV6_KEY_BIT = np.uint64(1 << 63)


def endpoint_key(columns: dict[str, np.ndarray], side: str) -> np.ndarray:
    """64-bit key of one side's endpoint of every packet: address << 16 | port for IPv4
    (IPv4-mapped words), else a hash of the four words and the port with the top bit set."""
    port = columns[f"{side}_port"].astype(np.uint64)
    key = (columns[f"{side}_3"].astype(np.uint64) << np.uint64(16)) | port
    ipv4 = ipv4_mapped(*(columns[f"{side}_{index}"] for index in range(3)))
    if ipv4.all():
        return key
    with np.errstate(over="ignore"):
        hashed = port * _PORT_MULTIPLIER
        for index, multiplier in enumerate(_WORD_MULTIPLIERS):
            hashed = _mixed(hashed ^ columns[f"{side}_{index}"].astype(np.uint64) * multiplier)
    return np.where(ipv4, key, hashed | _IPV6_KEY_BIT)


def _ordered_keys(columns: dict[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Each packet's low and high endpoint keys, and whether its source is the low one."""
    src = endpoint_key(columns, "src")
    dst = endpoint_key(columns, "dst")
    src_is_low = src <= dst
    return np.minimum(src, dst), np.maximum(src, dst), src_is_low


def _pair_value(low: np.ndarray, high: np.ndarray) -> np.ndarray:
    with np.errstate(over="ignore"):
        return _mixed(_mixed(low) + high)


def _captured_pair_value(keys: tuple[np.ndarray, ...]) -> np.ndarray:
    """The pair value of (low, high) keys, mixed with the third key (the address family, and
    the capture's number in a batch of several captures)."""
    value = _pair_value(*keys[:2])
    with np.errstate(over="ignore"):
        return _mixed(value + keys[2] * _CAPTURE_MULTIPLIER)


_CAPTURE_MULTIPLIER = np.uint64(0xD6E8FEB86659FD93)


def pair_hashes(columns: dict[str, np.ndarray]) -> np.ndarray:
    """64-bit hash of each packet's endpoint pair, the same in both directions."""
    low, high, _ = _ordered_keys(columns)
    return _pair_value(low, high)


class EndpointPairs:
    """Capture-wide numbering of endpoint pairs, in order of their first packet; `rows` holds
    (low endpoint, high endpoint), `first_packets` where each was first seen."""

    def __init__(self) -> None:
        self._number_of: dict[tuple[int, ...], int] = {}
        self._rows: list[np.ndarray] = []
        """Blocks of (pairs, 10) endpoint rows, in number order."""
        self._first_packets: list[np.ndarray] = []
        self._packets_seen = 0

    def assign(self, columns: dict[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
        """Pair number and "source is the lower endpoint" for every packet of a batch. A batch
        of several captures (a `capture` column) keeps each capture's pairs apart: the capture
        is part of the pair's key, not of the endpoints' (whose order decides the low side)."""
        low, high, src_is_low = _ordered_keys(columns)
        # The family is part of the key: an IPv6 packet's IPv4-mapped addresses are held as an
        # IPv4 packet's are, and Wireshark counts them a conversation of their own.
        family = columns["ip_version"].astype(np.uint64)
        keys = (low, high, family if "capture" not in columns else
                columns["capture"].astype(np.uint64) * np.uint64(16) + family)
        codes, _ = pd.factorize(_captured_pair_value(keys))
        first = first_occurrences(codes)
        if not all(np.array_equal(key, key[first][codes]) for key in keys):
            codes, first = _grouped_exactly(keys)
        known = len(self._number_of)
        numbers = np.array([self._number_of.setdefault(key, len(self._number_of))
                            for key in zip(*(key[first].tolist() for key in keys))],
                           dtype=np.int64)
        new_pairs_first = first[numbers >= known]
        self._add_rows(columns, new_pairs_first, src_is_low)
        self._first_packets.append(new_pairs_first + self._packets_seen)
        self._packets_seen += len(codes)
        return numbers[codes], src_is_low

    def _add_rows(self, columns: dict[str, np.ndarray], rows: np.ndarray,
                  src_is_low: np.ndarray) -> None:
        """The endpoints of pairs numbered just now (seen first at `rows`, in number order),
        lower endpoint first."""
        if not len(rows):
            return
        source, destination = (_endpoint_rows(columns, side, rows) for side in ("src", "dst"))
        source_low = src_is_low[rows][:, None]
        self._rows.append(np.concatenate([np.where(source_low, source, destination),
                                          np.where(source_low, destination, source)], axis=1))

    @property
    def first_packets(self) -> np.ndarray:
        """Position of each pair's first packet among all the packets assigned, by number."""
        return np.concatenate([np.zeros(0, dtype=np.int64), *self._first_packets])

    @property
    def rows(self) -> np.ndarray:
        """(pairs, 10) uint32: low endpoint words and port, then high endpoint words and port."""
        if not self._rows:
            return np.zeros((0, 2 * ENDPOINT_WORDS), dtype=np.uint32)
        return np.concatenate(self._rows)


def packet_ports(pair_rows: np.ndarray, pair: np.ndarray, src_is_low: np.ndarray,
                 rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Source and destination ports of the packets at `rows`, from their pairs' endpoint rows
    (`EndpointPairs.rows`): ports are not packet columns."""
    low_port = pair_rows[pair[rows], ENDPOINT_WORDS - 1]
    high_port = pair_rows[pair[rows], 2 * ENDPOINT_WORDS - 1]
    source_low = src_is_low[rows]
    return np.where(source_low, low_port, high_port), np.where(source_low, high_port, low_port)


def _grouped_exactly(keys: tuple[np.ndarray, ...]) -> tuple[np.ndarray, np.ndarray]:
    """Codes by the exact (low, high, family and capture) keys, numbered in order of first sight, and
    each code's first row: the slow path taken when two pairs' mixed values collide."""
    _, first, inverse = np.unique(np.stack(keys, axis=1), axis=0, return_index=True,
                                  return_inverse=True)
    rank = np.empty(len(first), dtype=np.int64)
    rank[np.argsort(first)] = np.arange(len(first))
    return rank[inverse.ravel()], np.sort(first)
