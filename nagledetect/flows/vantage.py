"""Where the capture was taken, and the round-trip time on each side of the tap.

From the handshake: SYN -> SYN/ACK is the round trip between the tap and the server, SYN/ACK ->
ACK the round trip between the tap and the client. From the data: the smallest lag from a data
segment to the first ACK that covers it, per direction (delayed ACKs only make lags longer, so
the minimum is the round trip). A busy host answers a SYN late, so where both are known the
smaller one is taken. A side whose round trip is under a third of the total holds
the tap: "client" or "server"; otherwise "middle".
"""

from __future__ import annotations

import numpy as np

from nagledetect.flows.grouped import group_starts

NEAR_SIDE_SHARE = 1 / 3
VALUE_SPAN = 1 << 40


def ack_lags_us(view: dict[str, np.ndarray], group: np.ndarray, group_count: int) -> np.ndarray:
    """Smallest data -> covering-ACK lag per direction group (-1 where none was seen).

    `view` is in direction order; group g holds connection g // 2, direction g % 2, and the
    ACKs for group g's data are in group g ^ 1. Cumulative ACKs are made monotone per group and
    offset by group so one `searchsorted` serves every group at once.
    """
    group = group.astype(np.int64)
    ack = view["rel_ack"]
    ack_rows = np.flatnonzero(ack >= 0)
    ack_group = group[ack_rows]
    key = ack_group * VALUE_SPAN + np.clip(ack[ack_rows], 0, VALUE_SPAN - 1)
    key = np.maximum.accumulate(key)
    data_rows = np.flatnonzero(view["payload_bytes"] > 0)
    data_group = group[data_rows]
    data_end = view["rel_seq"][data_rows] + view["payload_bytes"][data_rows].astype(np.int64)
    peer = data_group ^ 1
    wanted = peer * VALUE_SPAN + np.clip(data_end, 0, VALUE_SPAN - 1)
    found = np.searchsorted(key, wanted, side="left")
    valid = found < len(key)
    found = np.minimum(found, max(len(key) - 1, 0))
    if len(key):
        valid &= ack_group[found] == peer
    lag = view["time_us"][ack_rows[found]] - view["time_us"][data_rows] if len(key) else found
    valid &= lag >= 0
    smallest = np.full(group_count, -1, dtype=np.int64)
    if valid.any():
        lag_group = data_group[valid]  # ascending: the view is in direction order
        first = np.flatnonzero(group_starts(lag_group))
        smallest[lag_group[first]] = np.minimum.reduceat(lag[valid], first)
    return smallest


def _smaller_known(first_us: np.ndarray, second_us: np.ndarray) -> np.ndarray:
    """The smaller of two round-trip estimates where both are known (-1 = unknown)."""
    both = (first_us >= 0) & (second_us >= 0)
    return np.where(both, np.minimum(first_us, second_us), np.maximum(first_us, second_us))


def vantage_table(handshake_times_us: dict[str, np.ndarray], lags_us: np.ndarray
                  ) -> dict[str, np.ndarray]:
    """Columns per connection: RTT to the client side and to the server side of the tap, and
    vantage."""
    client_data_lag = lags_us[0::2]
    server_data_lag = lags_us[1::2]
    syn, syn_ack, ack = (handshake_times_us[c] for c in ("syn", "syn_ack", "ack"))
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
    return {
        "rtt_client_side_ms": np.where(client_side >= 0, client_side / 1000, np.nan),
        "rtt_server_side_ms": np.where(server_side >= 0, server_side / 1000, np.nan),
        "rtt_ms": np.where(known, total / 1000, np.nan),
        "rtt_source": np.where(has_handshake, "handshake", np.where(known, "ack-lag", "none")),
        "vantage": vantage,
    }
