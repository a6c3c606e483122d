"""Sequence and acknowledgement numbers unwrapped to 64-bit values relative to each direction's ISN.

Within one direction, consecutive raw values differ by less than 2**31 (TCP's own window rule),
so the signed 32-bit difference between neighbours is the true step even across a wrap; a
running sum of steps gives the unwrapped value. The base is the initial sequence number from the
SYN (so the first data byte is 1, as in Wireshark), or the first seen value minus one.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from nagledetect.flows.grouped import grouped_cumsum

NO_ACK = np.iinfo(np.int64).min


def signed_step(values: np.ndarray, starts: np.ndarray) -> np.ndarray:
    """Signed 32-bit difference from the previous element of the group (0 at group starts):
    the unsigned 32-bit difference wraps modulo 2**32, and read as signed it is the step."""
    values = values.astype(np.uint32, copy=False)
    step = np.zeros(len(values), dtype=np.int64)
    step[1:] = _signed_difference(values[1:], values[:-1])
    step[starts] = 0
    return step


def _signed_difference(later: np.ndarray, earlier: np.ndarray) -> np.ndarray:
    """`later - earlier` of 32-bit unsigned values, read as the signed step between them."""
    return np.subtract(later, earlier).view(np.int32)


def unwrap_in_groups(raw: np.ndarray, starts: np.ndarray) -> np.ndarray:
    """Unwrapped value relative to each group's first element (which maps to 0)."""
    return grouped_cumsum(signed_step(raw, starts), starts)


def wrapped_distance(value: np.ndarray, base: np.ndarray) -> np.ndarray:
    """value - base on the 32-bit circle, as a signed number."""
    distance = (value.astype(np.int64) - base.astype(np.int64)) & 0xFFFFFFFF
    return np.where(distance >= 1 << 31, distance - (1 << 32), distance)


class Latest(NamedTuple):
    """Each direction group's latest value before the rows given (a part read a slice at a
    time), indexed by group number: raw and relative, and whether it had one."""

    seen: np.ndarray
    raw: np.ndarray
    relative: np.ndarray


def _first_values(raw_first: np.ndarray, base_raw: np.ndarray, groups: np.ndarray,
                  latest: Latest | None) -> np.ndarray:
    """The relative value of each group's first row: its distance from the base, or, where
    the group's latest value is known (`latest` at `groups`), a step on from it."""
    first = wrapped_distance(raw_first, base_raw)
    if latest is None:
        return first
    step = _signed_difference(raw_first.astype(np.uint32), latest.raw[groups].astype(np.uint32))
    return np.where(latest.seen[groups], latest.relative[groups] + step, first)


def relative_sequence(seq_raw: np.ndarray, starts: np.ndarray, base_raw: np.ndarray,
                      group: np.ndarray | None = None, latest: Latest | None = None) -> np.ndarray:
    """Sequence numbers relative to their group's ISN (`base_raw`, one per group, in order);
    `latest`: where a group continues rows given before (`group`: each row's group number)."""
    unwrapped = unwrap_in_groups(seq_raw, starts)
    first = np.flatnonzero(starts)
    groups = None if group is None else group[first]
    unwrapped += np.repeat(_first_values(seq_raw[first], base_raw, groups, latest),
                           np.diff(np.append(first, len(seq_raw))))
    return unwrapped


def relative_ack(ack_raw: np.ndarray, has_ack: np.ndarray, group: np.ndarray,
                 peer_base_raw: np.ndarray, latest: Latest | None = None) -> np.ndarray:
    """Acknowledgement numbers relative to the peer direction's ISN; NO_ACK without the ACK flag.

    `peer_base_raw` is per row (the peer direction's ISN, -1 when the peer was never seen: then
    the group's first ACK counts as 1, like a first sequence number seen mid-connection).
    `latest`: each group's latest ACK before these rows, where it continues rows given before.
    """
    result = np.full(len(ack_raw), NO_ACK, dtype=np.int64)
    rows = np.flatnonzero(has_ack)
    if len(rows) == 0:
        return result
    sub_group = group[rows]
    sub_starts = np.ones(len(rows), dtype=bool)
    sub_starts[1:] = sub_group[1:] != sub_group[:-1]
    unwrapped = unwrap_in_groups(ack_raw[rows], sub_starts)
    first = rows[sub_starts]
    first_ack = ack_raw[first].astype(np.int64)
    peer_base = np.where(peer_base_raw[first] >= 0, peer_base_raw[first], (first_ack - 1) & 0xFFFFFFFF)
    offset = _first_values(first_ack, peer_base, group[first], latest)
    unwrapped += np.repeat(offset, np.diff(np.append(np.flatnonzero(sub_starts), len(rows))))
    result[rows] = unwrapped
    return result
