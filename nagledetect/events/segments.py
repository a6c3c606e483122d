"""Data segments in their context: what came before each one in its own direction and from the peer.

A Nagle/delayed-ACK stall is read off three packets: the sender's last data before the hold, the
receiver's pure ACK that finally acknowledges it, and the held segment that leaves right after
that ACK. This module gives every new-data segment the columns those tests need, computed for
all connections at once: the previous data segment of the same direction, the peer's latest
packet before it, what was outstanding, and whether the peer sent data in between.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from nagledetect.flows.grouped import (
    group_starts,
    grouped_cummax,
    grouped_cumsum,
    last_index_where,
    previous_in_group,
)

PURE_ACK_ROLES = ("pure_ack", "dup_ack", "window_update")
NEW_DATA_ROLES = ("data",)
RETRANSMISSION_ROLES = ("retransmission", "out_of_order")
NONE = -1


def _latest_before(mask: np.ndarray, starts: np.ndarray) -> np.ndarray:
    """Index of the latest element with `mask` strictly before each one, in the same group."""
    return previous_in_group(last_index_where(mask, starts), starts, NONE)


def _earliest_after(mask: np.ndarray, starts: np.ndarray) -> np.ndarray:
    """Index of the earliest element with `mask` strictly after each one, in the same group."""
    count = len(mask)
    ends = np.zeros(count, dtype=bool)
    ends[:-1] = starts[1:]
    if count:
        ends[-1] = True
    reversed_latest = _latest_before(mask[::-1], ends[::-1])[::-1]
    return np.where(reversed_latest >= 0, count - 1 - reversed_latest, NONE)


def data_segments(packets: pd.DataFrame, connections: pd.DataFrame) -> pd.DataFrame:
    """One row per new-data segment, with its context (frames are Wireshark frame numbers).

    Columns: frame, time_us, connection, direction, payload_bytes, rel_seq, end_seq, mss,
    tail_bytes (the part after the last full MSS; the whole payload when under one MSS),
    wire_segments; prev_* for the previous new-data segment of the same direction;
    peer_* for the peer's latest packet before it (frame, time, role, ack, window); and
    sent_max_before (highest sequence end sent before it in its direction).
    """
    by_connection = packets.sort_values(["connection", "frame"], kind="stable")
    connection = by_connection["connection"].to_numpy()
    starts = group_starts(connection)
    direction = by_connection["direction"].to_numpy()
    role = by_connection["role"].astype(str).to_numpy()
    payload = by_connection["payload_bytes"].to_numpy().astype(np.int64)
    is_new_data = np.isin(role, NEW_DATA_ROLES) & (payload > 0)
    end = by_connection["rel_seq"].to_numpy() + payload
    columns = {name: by_connection[name].to_numpy().astype(np.int64) for name in
               ("frame", "time_us", "rel_seq", "rel_ack", "window_bytes", "wire_segments")}
    rows = {}
    for side in (0, 1):
        mine = direction == side
        previous_data = _latest_before(mine & is_new_data, starts)
        peer_latest = _latest_before(~mine, starts)
        peer_next = _earliest_after(~mine, starts)
        own_next_data = _earliest_after(mine & (payload > 0), starts)
        peer_data_seen = grouped_cumsum(~mine & (payload > 0), starts)
        own_retransmissions = grouped_cumsum(mine & np.isin(role, RETRANSMISSION_ROLES), starts)
        sent_max = previous_in_group(grouped_cummax(np.where(mine, end, NONE), starts), starts, NONE)
        selected = np.flatnonzero(mine & is_new_data)
        rows[side] = _segment_rows(selected, previous_data, peer_latest, peer_data_seen, sent_max,
                                   columns, connection, direction, role, payload, end)
        rows[side] = rows[side].assign(**_next_columns(selected, peer_next, own_next_data,
                                                       columns, role, payload))
        previous = np.maximum(previous_data[selected], 0)
        rows[side]["own_retransmissions_between"] = np.where(
            previous_data[selected] >= 0,
            own_retransmissions[selected] - own_retransmissions[previous], 0)
    table = pd.concat([rows[0], rows[1]], ignore_index=True).sort_values("frame", kind="stable")
    mss = connections.set_index("id")["effective_mss"]
    table["mss"] = mss.reindex(table["connection"]).to_numpy()
    full = np.maximum(table["mss"].to_numpy(), 1)
    table["tail_bytes"] = np.where(table["payload_bytes"] % full == 0, np.where(
        table["payload_bytes"] < full, table["payload_bytes"], 0), table["payload_bytes"] % full)
    table["is_small"] = table["tail_bytes"] > 0
    return table.reset_index(drop=True)


def _next_columns(selected, peer_next, own_next_data, columns, role, payload) -> dict:
    """What follows a segment: the peer's next packet, and this side's next data segment."""
    peer = peer_next[selected]
    has_peer = peer >= 0
    own = own_next_data[selected]
    safe_peer = np.maximum(peer, 0)
    return {
        "next_peer_frame": np.where(has_peer, columns["frame"][safe_peer], NONE),
        "next_peer_time_us": np.where(has_peer, columns["time_us"][safe_peer], NONE),
        "next_peer_role": np.where(has_peer, role[safe_peer], "none"),
        "next_peer_payload_bytes": np.where(has_peer, payload[safe_peer], NONE),
        "next_peer_ack": np.where(has_peer, columns["rel_ack"][safe_peer], NONE),
        "next_own_data_time_us": np.where(own >= 0, columns["time_us"][np.maximum(own, 0)], NONE),
    }


def _segment_rows(selected, previous_data, peer_latest, peer_data_seen, sent_max, columns,
                  connection, direction, role, payload, end) -> pd.DataFrame:
    previous = previous_data[selected]
    peer = peer_latest[selected]
    has_previous = previous >= 0
    has_peer = peer >= 0
    safe_previous = np.maximum(previous, 0)
    safe_peer = np.maximum(peer, 0)

    def at(values: np.ndarray, index: np.ndarray, present: np.ndarray, missing) -> np.ndarray:
        return np.where(present, values[index], missing)

    return pd.DataFrame({
        "frame": columns["frame"][selected],
        "time_us": columns["time_us"][selected],
        "connection": connection[selected],
        "direction": direction[selected],
        "payload_bytes": payload[selected],
        "rel_seq": columns["rel_seq"][selected],
        "end_seq": end[selected],
        "wire_segments": columns["wire_segments"][selected],
        "sent_max_before": sent_max[selected],
        "prev_frame": at(columns["frame"], safe_previous, has_previous, NONE),
        "prev_time_us": at(columns["time_us"], safe_previous, has_previous, NONE),
        "prev_payload_bytes": at(payload, safe_previous, has_previous, NONE),
        "prev_end_seq": at(end, safe_previous, has_previous, NONE),
        "peer_frame": at(columns["frame"], safe_peer, has_peer, NONE),
        "peer_time_us": at(columns["time_us"], safe_peer, has_peer, NONE),
        "peer_role": at(role, safe_peer, has_peer, "none"),
        "peer_payload_bytes": at(payload, safe_peer, has_peer, NONE),
        "peer_ack": at(columns["rel_ack"], safe_peer, has_peer, NONE),
        "peer_window_bytes": at(columns["window_bytes"], safe_peer, has_peer, NONE),
        "peer_data_between": peer_data_seen[selected] - at(peer_data_seen, safe_previous,
                                                            has_previous, 0),
    })
