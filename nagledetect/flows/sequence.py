"""Sequence and acknowledgement numbers unwrapped to 64-bit values relative to each direction's ISN.

Within one direction, consecutive raw values differ by less than 2**31 (TCP's own window rule),
so the signed 32-bit difference between neighbours is the true step even across a wrap; a
running sum of steps gives the unwrapped value. The base is the initial sequence number from the
SYN (so the first data byte is 1, as in Wireshark), or the first seen value minus one.
"""

from __future__ import annotations

import numpy as np

from nagledetect.flows.grouped import grouped_cumsum

NO_ACK = np.iinfo(np.int64).min


def signed_step(values: np.ndarray, starts: np.ndarray) -> np.ndarray:
    """Signed 32-bit difference from the previous element of the group (0 at group starts):
    the unsigned 32-bit difference wraps modulo 2**32, and read as signed it is the step."""
    values = values.astype(np.uint32, copy=False)
    step = np.zeros(len(values), dtype=np.int64)
    step[1:] = np.subtract(values[1:], values[:-1]).view(np.int32)
    step[starts] = 0
    return step


def unwrap_in_groups(raw: np.ndarray, starts: np.ndarray) -> np.ndarray:
    """Unwrapped value relative to each group's first element (which maps to 0)."""
    return grouped_cumsum(signed_step(raw, starts), starts)


def wrapped_distance(value: np.ndarray, base: np.ndarray) -> np.ndarray:
    """value - base on the 32-bit circle, as a signed number."""
    distance = (value.astype(np.int64) - base.astype(np.int64)) & 0xFFFFFFFF
    return np.where(distance >= 1 << 31, distance - (1 << 32), distance)


def relative_sequence(seq_raw: np.ndarray, starts: np.ndarray, base_raw: np.ndarray) -> np.ndarray:
    """Sequence numbers relative to their group's ISN (`base_raw`, one per group, in order)."""
    unwrapped = unwrap_in_groups(seq_raw, starts)
    first = np.flatnonzero(starts)
    unwrapped += np.repeat(wrapped_distance(seq_raw[first], base_raw),
                           np.diff(np.append(first, len(seq_raw))))
    return unwrapped


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
    unwrapped += np.repeat(offset, np.diff(np.append(np.flatnonzero(sub_starts), len(rows))))
    result[rows] = unwrapped
    return result
