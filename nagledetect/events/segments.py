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

from nagledetect.flows.connections import by_connection
from nagledetect.flows.grouped import (
    group_starts,
    grouped_cummax,
    grouped_cumsum,
    last_index_where,
    previous_in_group,
)
from nagledetect.flows.roles import ROLE, ROLES

_ROLE_NAMES = pd.Index([*ROLES, "none"])
"""Role names by code, and "none" after them for a packet that does not exist: the categories
of the peer role columns (categorical, as the packets' role: made from codes, compared by code)."""
PURE_ACK_ROLES = ("pure_ack", "dup_ack", "window_update")
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

    The context is computed in connection order (time kept within a connection) for each
    direction, picked per packet by its direction, and the segments are then put in frame order.
    """
    order = _connection_order(packets)
    connection = packets["connection"].to_numpy()[order]
    starts = group_starts(connection)
    direction = packets["direction"].to_numpy()[order]
    role = packets["role"].cat.codes.to_numpy()[order]
    payload = packets["payload_bytes"].to_numpy()[order].astype(np.int64)
    is_new_data = (role == ROLE["data"]) & (payload > 0)
    end = packets["rel_seq"].to_numpy()[order] + payload
    columns = {name: packets[name].to_numpy()[order].astype(np.int64) for name in
               ("frame", "time_us", "rel_seq", "rel_ack", "window_bytes", "wire_segments")}
    selected = np.flatnonzero(is_new_data)
    selected = selected[np.argsort(columns["frame"][selected], kind="stable")]
    context = _context_by_direction(selected, direction, starts, role, payload, end, is_new_data)
    table = _segment_rows(selected, context, columns, connection, direction, role, payload, end)
    table["mss"] = by_connection(connections, "effective_mss", table["connection"].to_numpy())
    full = np.maximum(table["mss"].to_numpy(), 1)
    table["tail_bytes"] = np.where(table["payload_bytes"] % full == 0, np.where(
        table["payload_bytes"] < full, table["payload_bytes"], 0), table["payload_bytes"] % full)
    table["is_small"] = table["tail_bytes"] > 0
    return table


def _connection_order(packets: pd.DataFrame) -> np.ndarray:
    """Rows sorted by connection, then frame (packet tables are in frame order already)."""
    frame = packets["frame"].to_numpy()
    if len(frame) > 1 and not (frame[1:] > frame[:-1]).all():
        return np.lexsort((frame, packets["connection"].to_numpy()))
    return np.argsort(packets["connection"].to_numpy(), kind="stable")


def _context_by_direction(selected, direction, starts, role, payload, end, is_new_data) -> dict:
    """For each selected segment, from its own direction's view of the connection: the previous
    new-data segment, the peer's latest and next packets, its own next data segment, the peer
    data segments and own retransmissions since the previous one, and the highest sequence end
    sent before it. Each quantity is computed for one direction at a time and only the selected
    rows are kept, so the temporaries stay one column of the packets at a time."""
    retransmitted = np.isin(role, [ROLE[name] for name in RETRANSMISSION_ROLES])
    sides = [np.flatnonzero(direction[selected] == side) for side in (0, 1)]

    def pick(compute, *at_rows: np.ndarray) -> list[np.ndarray]:
        """compute(mine) per direction, read at the selected rows of that direction (and at
        each index array of `at_rows`, given per selected row)."""
        picked = [np.empty(len(selected), dtype=np.int64) for _ in range(1 + len(at_rows))]
        for side, rows in zip((0, 1), sides):
            values = compute(direction == side)
            for result, where in zip(picked, (selected, *at_rows)):
                result[rows] = values[np.maximum(where[rows], 0)]
        return picked

    (previous,) = pick(lambda mine: _latest_before(mine & is_new_data, starts))
    context = {"previous_data": previous}
    for name, compute in (
            ("peer_latest", lambda mine: _latest_before(~mine, starts)),
            ("peer_next", lambda mine: _earliest_after(~mine, starts)),
            ("own_next_data", lambda mine: _earliest_after(mine & (payload > 0), starts)),
            ("sent_max", lambda mine: previous_in_group(
                grouped_cummax(np.where(mine, end, NONE), starts), starts, NONE))):
        (context[name],) = pick(compute)
    has_previous = previous >= 0
    for name, compute in (
            ("peer_data_between", lambda mine: grouped_cumsum(~mine & (payload > 0), starts)),
            ("own_retransmissions_between",
             lambda mine: grouped_cumsum(mine & retransmitted, starts))):
        at_segment, at_previous = pick(compute, previous)
        context[name] = at_segment - np.where(has_previous, at_previous, 0)
    return context


def _segment_rows(selected, context, columns, connection, direction, role, payload,
                  end) -> pd.DataFrame:
    previous = context["previous_data"]
    peer = context["peer_latest"]
    peer_next = context["peer_next"]
    own_next = context["own_next_data"]

    def at(values: np.ndarray, index: np.ndarray, missing) -> np.ndarray:
        return np.where(index >= 0, values[np.maximum(index, 0)], missing)

    def packet_at(prefix: str, index: np.ndarray) -> dict[str, np.ndarray]:
        """Frame, time, role, payload and ACK of the packets at `index` (none where -1)."""
        return {f"{prefix}_frame": at(columns["frame"], index, NONE),
                f"{prefix}_time_us": at(columns["time_us"], index, NONE),
                f"{prefix}_role": pd.Categorical.from_codes(
                    np.where(index >= 0, role[np.maximum(index, 0)], len(ROLES)),
                    categories=_ROLE_NAMES),
                f"{prefix}_payload_bytes": at(payload, index, NONE),
                f"{prefix}_ack": at(columns["rel_ack"], index, NONE)}

    return pd.DataFrame({
        "frame": columns["frame"][selected],
        "time_us": columns["time_us"][selected],
        "connection": connection[selected],
        "direction": direction[selected],
        "payload_bytes": payload[selected],
        "rel_seq": columns["rel_seq"][selected],
        "end_seq": end[selected],
        "wire_segments": columns["wire_segments"][selected],
        "sent_max_before": context["sent_max"],
        "prev_frame": at(columns["frame"], previous, NONE),
        "prev_time_us": at(columns["time_us"], previous, NONE),
        "prev_payload_bytes": at(payload, previous, NONE),
        "prev_end_seq": at(end, previous, NONE),
        **packet_at("peer", peer),
        "peer_window_bytes": at(columns["window_bytes"], peer, NONE),
        "peer_data_between": context["peer_data_between"],
        **packet_at("next_peer", peer_next),
        "next_own_data_time_us": at(columns["time_us"], own_next, NONE),
        "own_retransmissions_between": np.where(
            previous >= 0, context["own_retransmissions_between"], 0),
    }, copy=False)
