"""Sequence and acknowledgement numbers unwrapped to 64-bit values relative to each direction's ISN.

Within one direction, consecutive raw values differ by less than 2**31 (TCP's own window rule),
so the signed 32-bit difference between neighbours is the true step even across a wrap; a
running sum of steps gives the unwrapped value. The base is the initial sequence number from the
SYN (so the first data byte is 1, as in Wireshark), or the first seen value minus one.
"""

from __future__ import annotations

import numpy as np

from nagledetect.flows.grouped import grouped_cumsum, previous_in_group

NO_ACK = np.iinfo(np.int64).min


def signed_step(values: np.ndarray, starts: np.ndarray) -> np.ndarray:
    """Signed 32-bit difference from the previous element of the group (0 at group starts)."""
    previous = previous_in_group(values, starts, 0)
    step = (values.astype(np.int64) - previous.astype(np.int64)) & 0xFFFFFFFF
    step = np.where(step >= 1 << 31, step - (1 << 32), step)
    step[starts] = 0
    return step


def unwrap_in_groups(raw: np.ndarray, starts: np.ndarray) -> np.ndarray:
    """Unwrapped value relative to each group's first element (which maps to 0)."""
    return grouped_cumsum(signed_step(raw, starts), starts)


def wrapped_distance(value: np.ndarray, base: np.ndarray) -> np.ndarray:
    """value - base on the 32-bit circle, as a signed number."""
    distance = (value.astype(np.int64) - base.astype(np.int64)) & 0xFFFFFFFF
    return np.where(distance >= 1 << 31, distance - (1 << 32), distance)


def relative_sequence(seq_raw: np.ndarray, starts: np.ndarray, group: np.ndarray,
                      base_raw: np.ndarray) -> np.ndarray:
    """Sequence numbers relative to `base_raw[group]` (the direction's ISN)."""
    unwrapped = unwrap_in_groups(seq_raw, starts)
    first = np.flatnonzero(starts)
    offset = wrapped_distance(seq_raw[first], base_raw)
    return unwrapped + offset[group]


def relative_ack(ack_raw: np.ndarray, has_ack: np.ndarray, group: np.ndarray,
                 peer_base_raw: np.ndarray) -> np.ndarray:
    """Acknowledgement numbers relative to the peer direction's ISN; NO_ACK without the ACK flag.

    `peer_base_raw` is per row (the peer direction's ISN, -1 when the peer was never seen: then
    the group's first ACK counts as 1, like a first sequence number seen mid-connection).
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
    offset = wrapped_distance(first_ack, peer_base)
    result[rows] = unwrapped + offset[np.cumsum(sub_starts) - 1]
    return result
