"""Data segments in their context: what came before each one in its own direction and from the peer.

A Nagle/delayed-ACK stall is read off three packets: the sender's last data before the hold, the
receiver's pure ACK that finally acknowledges it, and the held segment that leaves right after
that ACK. This module gives every new-data segment the columns those tests need, computed for
all connections at once: the previous data segment of the same direction, the peer's latest
packet before it, what was outstanding, and whether the peer sent data in between.
"""

from __future__ import annotations

import numba
import numpy as np
import pandas as pd

from nagledetect.flows.connections import by_connection
from nagledetect.flows.roles import ROLE, ROLES

_ROLE_NAMES = pd.Index([*ROLES, "none"])
"""Role names by code, and "none" after them for a packet that does not exist: the categories
of the peer role columns (categorical, as the packets' role: made from codes, compared by code)."""
PURE_ACK_ROLES = ("pure_ack", "dup_ack", "window_update")
RETRANSMISSION_ROLES = ("retransmission", "out_of_order")
NONE = -1
NO_END_YET = -(1 << 62)
"""Below any sequence end: the highest end before a connection's first packet."""


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
    direction = packets["direction"].to_numpy()[order]
    role = packets["role"].cat.codes.to_numpy()[order]
    payload = packets["payload_bytes"].to_numpy()[order].astype(np.int64)
    is_new_data = (role == ROLE["data"]) & (payload > 0)
    end = packets["rel_seq"].to_numpy()[order] + payload
    selected = np.flatnonzero(is_new_data)
    selected = selected[np.argsort(packets["frame"].to_numpy()[order[selected]], kind="stable")]
    context = _context(selected, connection, direction, role, payload, end, is_new_data)
    table = _segment_rows(packets, order, selected, context)
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


def _context(selected: np.ndarray, connection: np.ndarray, direction: np.ndarray,
             role: np.ndarray, payload: np.ndarray, end: np.ndarray,
             is_new_data: np.ndarray) -> dict[str, np.ndarray]:
    """For each selected segment (positions in connection order), from its own direction's view
    of the connection: the previous new-data segment, the peer's latest and next packets, its
    own next data segment, the peer data segments and own retransmissions since the previous
    one (since the connection's start when there is none), and the highest sequence end sent
    before it (-1 when nothing was)."""
    slot = np.full(len(connection), -1, dtype=np.int64)
    slot[selected] = np.arange(len(selected))
    retransmitted = np.isin(role, [ROLE[name] for name in RETRANSMISSION_ROLES])
    names = ("previous_data", "peer_latest", "peer_next", "own_next_data", "sent_max",
             "peer_data_between", "own_retransmissions_between")
    return dict(zip(names, _context_walk(connection, direction, payload, end, is_new_data,
                                         retransmitted, slot, len(selected))))


@numba.njit(cache=True, nogil=True)
def _context_walk(connection, direction, payload, end, is_new_data, retransmitted, slot,
                  count):
    """`_context` in two walks over the packets in connection order: forwards for what came
    before each segment, backwards for what comes after. Per connection and direction it keeps
    the latest packet, the latest new-data segment, the highest end, and running counts of data
    segments and retransmissions (read again at the latest new-data segment)."""
    previous = np.full(count, -1, np.int64)
    peer_latest = np.full(count, -1, np.int64)
    peer_next = np.full(count, -1, np.int64)
    own_next = np.full(count, -1, np.int64)
    sent_max = np.full(count, -1, np.int64)
    peer_data_between = np.zeros(count, np.int64)
    own_retransmissions_between = np.zeros(count, np.int64)
    latest_packet = np.empty(2, np.int64)
    latest_new_data = np.empty(2, np.int64)
    highest_end = np.empty(2, np.int64)
    data_segments_sent = np.empty(2, np.int64)
    retransmissions_sent = np.empty(2, np.int64)
    peer_data_at_latest = np.empty(2, np.int64)
    retransmissions_at_latest = np.empty(2, np.int64)
    for i in range(len(connection)):
        connection_start = i == 0 or connection[i] != connection[i - 1]
        if connection_start:
            latest_packet[:] = -1
            latest_new_data[:] = -1
            highest_end[:] = NO_END_YET
            data_segments_sent[:] = 0
            retransmissions_sent[:] = 0
        mine = direction[i]
        peer = 1 - mine
        k = slot[i]
        if k >= 0:
            previous[k] = latest_new_data[mine]
            peer_latest[k] = latest_packet[peer]
            sent_max[k] = -1 if connection_start else highest_end[mine]
            peer_data_between[k] = data_segments_sent[peer]
            if latest_new_data[mine] >= 0:
                peer_data_between[k] -= peer_data_at_latest[mine]
                own_retransmissions_between[k] = (retransmissions_sent[mine]
                                                  - retransmissions_at_latest[mine])
        latest_packet[mine] = i
        highest_end[mine] = max(highest_end[mine], end[i])
        highest_end[peer] = max(highest_end[peer], -1)
        data_segments_sent[mine] += payload[i] > 0
        retransmissions_sent[mine] += retransmitted[i]
        if is_new_data[i]:
            latest_new_data[mine] = i
            peer_data_at_latest[mine] = data_segments_sent[peer]
            retransmissions_at_latest[mine] = retransmissions_sent[mine]
    next_packet = np.empty(2, np.int64)
    next_data = np.empty(2, np.int64)
    for i in range(len(connection) - 1, -1, -1):
        if i == len(connection) - 1 or connection[i] != connection[i + 1]:
            next_packet[:] = -1
            next_data[:] = -1
        mine = direction[i]
        k = slot[i]
        if k >= 0:
            peer_next[k] = next_packet[1 - mine]
            own_next[k] = next_data[mine]
        next_packet[mine] = i
        if payload[i] > 0:
            next_data[mine] = i
    return (previous, peer_latest, peer_next, own_next, sent_max, peer_data_between,
            own_retransmissions_between)


def _segment_rows(packets: pd.DataFrame, order: np.ndarray, selected: np.ndarray,
                  context: dict[str, np.ndarray]) -> pd.DataFrame:
    """The segments' own columns and their context packets' columns (`selected` and the
    context's indices are positions in connection order, `order` maps them to packet rows)."""
    column = {name: packets[name].to_numpy() for name in
              ("frame", "time_us", "payload_bytes", "rel_seq", "rel_ack", "window_bytes",
               "wire_segments", "connection", "direction")}
    column["role"] = packets["role"].cat.codes.to_numpy()
    column["end_seq"] = column["rel_seq"] + column["payload_bytes"]

    def at(name: str, index: np.ndarray, missing: int = NONE) -> np.ndarray:
        return _take(column[name], order, index, missing)

    def packet_at(prefix: str, index: np.ndarray) -> dict[str, np.ndarray]:
        """Frame, time, role, payload and ACK of the packets at `index` (none where -1)."""
        return {f"{prefix}_frame": at("frame", index),
                f"{prefix}_time_us": at("time_us", index),
                f"{prefix}_role": pd.Categorical.from_codes(at("role", index, len(ROLES)),
                                                           categories=_ROLE_NAMES),
                f"{prefix}_payload_bytes": at("payload_bytes", index),
                f"{prefix}_ack": at("rel_ack", index)}

    segment = order[selected]
    previous = context["previous_data"]
    peer = context["peer_latest"]
    return pd.DataFrame({
        "frame": at("frame", selected),
        "time_us": at("time_us", selected),
        "connection": column["connection"][segment],
        "direction": column["direction"][segment],
        **{name: at(name, selected) for name in
           ("payload_bytes", "rel_seq", "end_seq", "wire_segments")},
        "sent_max_before": context["sent_max"],
        **{f"prev_{name}": at(name, previous) for name in
           ("frame", "time_us", "payload_bytes", "end_seq")},
        **packet_at("peer", peer),
        "peer_window_bytes": at("window_bytes", peer),
        "peer_data_between": context["peer_data_between"],
        **packet_at("next_peer", context["peer_next"]),
        "next_own_data_time_us": at("time_us", context["own_next_data"]),
        "own_retransmissions_between": context["own_retransmissions_between"],
    }, copy=False)


@numba.njit(cache=True, nogil=True)
def _take(values, order, index, missing):
    """values[order[index]] as 64-bit integers, `missing` where the index is -1: one pass, with
    no temporaries (the context columns are a score of such gathers)."""
    taken = np.empty(len(index), np.int64)
    for k in range(len(index)):
        taken[k] = values[order[index[k]]] if index[k] >= 0 else missing
    return taken
