"""Sequence and acknowledgement numbers unwrapped to 64-bit values relative to each direction's ISN.

Within one direction, consecutive raw values differ by less than 2**31 (TCP's own window rule),
so the signed 32-bit difference between neighbours is the true step even across a wrap; a
running sum of steps gives the unwrapped value. The base is the initial sequence number from the
SYN (so the first data byte is 1, as in Wireshark), or the first seen value minus one.
"""

from __future__ import annotations

import numba
import numpy as np

NO_ACK = np.iinfo(np.int64).min


def relative_numbers(group: np.ndarray, has_ack: np.ndarray, seq_raw: np.ndarray,
                     ack_raw: np.ndarray, base_raw: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Sequence numbers relative to their direction's ISN, and ACK numbers (of the packets with
    the ACK flag; NO_ACK elsewhere) relative to the peer direction's ISN.

    The columns are in direction order (`group`: connection * 2 + direction, ascending);
    `base_raw` holds each group's raw ISN (-1 where the group has no packets: then the peer's
    first ACK counts as 1, like a first sequence number seen mid-connection).
    """
    return _unwrapped(group, has_ack, seq_raw.astype(np.int64), ack_raw.astype(np.int64),
                      base_raw)


@numba.njit(cache=True, nogil=True)
def _wrapped_distance(value, base):
    """value - base on the 32-bit circle, as a signed number."""
    distance = (value - base) & 0xFFFFFFFF
    return distance - (1 << 32) if distance >= 1 << 31 else distance


@numba.njit(cache=True, nogil=True)
def _unwrapped(group, has_ack, seq_raw, ack_raw, base_raw):
    rel_seq = np.empty(len(group), np.int64)
    rel_ack = np.full(len(group), NO_ACK, np.int64)
    previous_ack = -1
    for i in range(len(group)):
        if i == 0 or group[i] != group[i - 1]:
            rel_seq[i] = _wrapped_distance(seq_raw[i], base_raw[group[i]])
            previous_ack = -1
        else:
            rel_seq[i] = rel_seq[i - 1] + _wrapped_distance(seq_raw[i], seq_raw[i - 1])
        if not has_ack[i]:
            continue
        if previous_ack < 0:
            peer_base = base_raw[group[i] ^ 1]
            if peer_base < 0:
                peer_base = (ack_raw[i] - 1) & 0xFFFFFFFF
            rel_ack[i] = _wrapped_distance(ack_raw[i], peer_base)
        else:
            rel_ack[i] = rel_ack[previous_ack] + _wrapped_distance(ack_raw[i],
                                                                  ack_raw[previous_ack])
        previous_ack = i
    return rel_seq, rel_ack
