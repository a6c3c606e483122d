"""Where the capture was taken, and the round-trip time on each side of the tap.

From the handshake: SYN -> SYN/ACK is the round trip between the tap and the server, SYN/ACK ->
ACK the round trip between the tap and the client. From the data: the smallest lag from a data
segment to the first ACK that covers it, per direction (delayed ACKs only make lags longer, so
the minimum is the round trip). A busy host answers a SYN late, so where both are known the
smaller one is taken. A side whose round trip is under a third of the total holds
the tap: "client" or "server"; otherwise "middle".
"""

from __future__ import annotations

import numba
import numpy as np
import pandas as pd

NEAR_SIDE_SHARE = 1 / 3
VALUE_SPAN = 1 << 40


def ack_lags_us(group: np.ndarray, rel_seq: np.ndarray, rel_ack: np.ndarray,
                payload: np.ndarray, time_us: np.ndarray, group_count: int) -> np.ndarray:
    """Smallest data -> covering-ACK lag per direction group (-1 where none was seen).

    The columns are in direction order; group g holds connection g // 2, direction g % 2, and
    the ACKs for group g's data are in group g ^ 1. A data segment's covering ACK is the first
    of the peer's ACKs whose running highest ACK reaches the segment's end (so one binary search
    in the peer's running maxima finds it); a lag that would be negative is not counted.
    """
    ack_rows, group_acks = _ack_rows_by_group(group, rel_ack, group_count)
    running_ack = np.empty(len(ack_rows), dtype=np.int64)
    return _smallest_lags(group, rel_seq, rel_ack, payload, time_us, ack_rows, group_acks,
                          running_ack, group_count)


def _ack_rows_by_group(group: np.ndarray, rel_ack: np.ndarray, group_count: int
                       ) -> tuple[np.ndarray, np.ndarray]:
    """Rows that carry an ACK, and where each group's run of them starts in that list."""
    ack_rows = np.flatnonzero(rel_ack >= 0)
    group_acks = np.searchsorted(group[ack_rows], np.arange(group_count + 1))
    return ack_rows, group_acks


@numba.njit(cache=True, nogil=True)
def _smallest_lags(group, rel_seq, rel_ack, payload, time_us, ack_rows, group_acks,
                   running_ack, group_count):
    for g in range(group_count):
        highest = -1
        for k in range(group_acks[g], group_acks[g + 1]):
            highest = max(highest, min(rel_ack[ack_rows[k]], VALUE_SPAN - 1))
            running_ack[k] = highest
    smallest = np.full(group_count, -1, np.int64)
    hint = -1
    hint_end = -1
    for i in range(len(group)):
        if i == 0 or group[i] != group[i - 1]:
            hint = -1
        if payload[i] <= 0:
            continue
        peer = group[i] ^ 1
        end = min(max(rel_seq[i] + payload[i], 0), VALUE_SPAN - 1)
        low = group_acks[peer]
        high = group_acks[peer + 1]
        if hint >= 0 and end >= hint_end:
            low = hint
            step = 1
            while low + step < high and running_ack[low + step] < end:
                low += step
                step *= 2
            high = min(high, low + step + 1)
        while low < high:
            middle = (low + high) // 2
            if running_ack[middle] < end:
                low = middle + 1
            else:
                high = middle
        hint = low
        hint_end = end
        if low == group_acks[peer + 1]:
            continue
        lag = time_us[ack_rows[low]] - time_us[i]
        if lag >= 0 and (smallest[group[i]] < 0 or lag < smallest[group[i]]):
            smallest[group[i]] = lag
    return smallest


def _smaller_known(first_us: np.ndarray, second_us: np.ndarray) -> np.ndarray:
    """The smaller of two round-trip estimates where both are known (-1 = unknown)."""
    both = (first_us >= 0) & (second_us >= 0)
    return np.where(both, np.minimum(first_us, second_us), np.maximum(first_us, second_us))


def vantage_table(handshake_times_us: pd.DataFrame, lags_us: np.ndarray) -> pd.DataFrame:
    """Per connection: RTT to the client side and to the server side of the tap, and vantage."""
    client_data_lag = lags_us[0::2]
    server_data_lag = lags_us[1::2]
    syn, syn_ack, ack = (handshake_times_us[c].to_numpy() for c in ("syn", "syn_ack", "ack"))
    has_handshake = (syn >= 0) & (syn_ack >= syn) & (ack >= syn_ack)
    server_side = _smaller_known(np.where(has_handshake, syn_ack - syn, -1), client_data_lag)
    client_side = _smaller_known(np.where(has_handshake, ack - syn_ack, -1), server_data_lag)
    known = (server_side >= 0) & (client_side >= 0)
    total = np.where(known, server_side + client_side, -1)
    vantage = np.full(len(total), "unknown", dtype=object)
    middle = known & (total > 0)
    vantage[middle] = "middle"
    vantage[middle & (client_side < NEAR_SIDE_SHARE * total)] = "client"
    vantage[middle & (server_side < NEAR_SIDE_SHARE * total)] = "server"
    return pd.DataFrame({
        "rtt_client_side_ms": np.where(client_side >= 0, client_side / 1000, np.nan),
        "rtt_server_side_ms": np.where(server_side >= 0, server_side / 1000, np.nan),
        "rtt_ms": np.where(known, total / 1000, np.nan),
        "rtt_source": np.where(has_handshake, "handshake", np.where(known, "ack-lag", "none")),
        "vantage": vantage,
    })
