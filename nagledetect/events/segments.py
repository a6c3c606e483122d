"""Data segments in their context: what came before each one in its own direction and from the peer.

A Nagle/delayed-ACK stall is read off three packets: the sender's last data before the hold, the
receiver's pure ACK that finally acknowledges it, and the held segment that leaves right after
that ACK. This module gives every new-data segment the columns those tests need, computed for
all connections at once: the previous data segment of the same direction, the peer's latest
packet before it, what was outstanding, and whether the peer sent data in between.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

import numpy as np
import pandas as pd

from nagledetect.flows.connections import by_connection
from nagledetect.flows.grouped import group_starts, grouped_cummax
from nagledetect.flows.roles import ROLE, ROLES

_ROLE_NAMES = pd.Index([*ROLES, "none"])
"""Role names by code, and "none" after them for a packet that does not exist: the categories
of the peer role columns (categorical, as the packets' role: made from codes, compared by code)."""
PURE_ACK_ROLES = ("pure_ack", "dup_ack", "window_update")
RETRANSMISSION_ROLES = ("retransmission", "out_of_order")
NONE = -1
CONTEXT_NAMES = ("previous_data", "peer_latest", "peer_next", "own_next_data", "sent_max",
                 "peer_data_between", "own_retransmissions_between")


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
    role = _with_none_slot(packets["role"].cat.codes.to_numpy(), order, len(ROLES))
    payload = _with_none_slot(packets["payload_bytes"].to_numpy(), order, NONE)
    end = _with_none_slot(packets["rel_seq"].to_numpy(), order, NONE)
    end[:-1] += payload[:-1]
    is_new_data = (role[:-1] == ROLE["data"]) & (payload[:-1] > 0)
    selected = np.flatnonzero(is_new_data)
    selected = selected[np.argsort(packets["frame"].to_numpy()[order[selected]], kind="stable")]
    context = _context_by_direction(selected, direction, starts, role[:-1], payload[:-1],
                                    end[:-1], is_new_data)
    del is_new_data, starts
    context["segment"] = selected
    made = {"role": role, "payload_bytes": payload, "end": end}
    del role, payload, end
    connection, direction = connection[selected], direction[selected]
    table = _segment_rows(context, made, partial(_padded_column, packets, order))
    del context, order
    table.insert(2, "connection", connection)
    table.insert(3, "direction", direction)
    table["mss"] = by_connection(connections, "effective_mss", connection)
    table["tail_bytes"] = table["payload_bytes"].to_numpy() % np.maximum(table["mss"].to_numpy(), 1)
    table["is_small"] = table["tail_bytes"] > 0
    return table


def _connection_order(packets: pd.DataFrame) -> np.ndarray:
    """Rows sorted by connection, then frame (packet tables are in frame order already)."""
    frame = packets["frame"].to_numpy()
    if len(frame) > 1 and not (frame[1:] > frame[:-1]).all():
        return np.lexsort((frame, packets["connection"].to_numpy()))
    return np.argsort(packets["connection"].to_numpy(), kind="stable")


@dataclass(frozen=True)
class _SelectedRows:
    """Rows of the packets in connection order (`at`), each with its connection's first row
    (`low`) and the row after its last (`high`), read in running values over all packets: a
    running value read just before a row belongs to the row's connection when it does not lie
    before `low` (just after: when it lies before `high`), so no pass has to restart the running
    values at every connection."""

    at: np.ndarray
    low: np.ndarray
    high: np.ndarray
    count: int

    def latest_before(self, mask: np.ndarray) -> np.ndarray:
        """The latest row with `mask` strictly before each one, in its connection (else NONE)."""
        latest = np.where(mask, np.arange(self.count), NONE)
        np.maximum.accumulate(latest, out=latest)
        found = latest[np.maximum(self.at - 1, 0)]
        return np.where((self.at > self.low) & (found >= self.low), found, NONE)

    def earliest_after(self, mask: np.ndarray) -> np.ndarray:
        """The earliest row with `mask` strictly after each one, in its connection (else NONE)."""
        earliest = np.where(mask, np.arange(self.count), self.count)
        np.minimum.accumulate(earliest[::-1], out=earliest[::-1])
        found = earliest[np.minimum(self.at + 1, self.count - 1)]
        return np.where((self.at + 1 < self.high) & (found < self.high), found, NONE)

    def since(self, mask: np.ndarray, previous: np.ndarray) -> np.ndarray:
        """How many rows with `mask` lie between `previous` (one per row, NONE: the connection's
        start) and each row, that row included."""
        running = np.cumsum(mask, dtype=np.int64)
        before = np.where(previous >= 0, previous, self.low - 1)
        return running[self.at] - np.where(before >= 0, running[np.maximum(before, 0)], 0)

    def highest_before(self, values: np.ndarray, starts: np.ndarray) -> np.ndarray:
        """The highest of `values` strictly before each row, in its connection (else NONE)."""
        highest = grouped_cummax(values, starts)[np.maximum(self.at - 1, 0)]
        return np.where(self.at > self.low, highest, NONE)


def _context_by_direction(selected, direction, starts, role, payload, end, is_new_data) -> dict:
    """For each selected segment, from its own direction's view of the connection: the previous
    new-data segment, the peer's latest and next packets, its own next data segment, the peer
    data segments and own retransmissions since the previous one, and the highest sequence end
    sent before it. Each is a running value over all packets for one direction, read only at
    that direction's selected rows (`_SelectedRows`)."""
    first = np.flatnonzero(starts)
    within = np.searchsorted(first, selected, side="right") - 1
    group_first = first[within]
    group_end = np.append(first[1:], len(direction))[within]
    retransmitted = np.isin(role, [ROLE[name] for name in RETRANSMISSION_ROLES])
    context = {name: np.empty(len(selected), dtype=np.int64) for name in CONTEXT_NAMES}
    for side in (0, 1):
        mine = direction == side
        rows = np.flatnonzero(direction[selected] == side)
        at = _SelectedRows(selected[rows], group_first[rows], group_end[rows], len(direction))
        previous = at.latest_before(mine & is_new_data)
        for name, values in (
                ("previous_data", previous),
                ("peer_latest", at.latest_before(~mine)),
                ("peer_next", at.earliest_after(~mine)),
                ("own_next_data", at.earliest_after(mine & (payload > 0))),
                ("sent_max", at.highest_before(np.where(mine, end, NONE), starts)),
                ("peer_data_between", at.since(~mine & (payload > 0), previous)),
                ("own_retransmissions_between", at.since(mine & retransmitted, previous))):
            context[name][rows] = values
    return context


def _padded_column(packets: pd.DataFrame, order: np.ndarray, name: str) -> np.ndarray:
    """A packet column in connection order with the slot for -1 (see `_with_none_slot`)."""
    return _with_none_slot(packets[name].to_numpy(), order, NONE)


def _with_none_slot(values: np.ndarray, order: np.ndarray, missing: int) -> np.ndarray:
    """values[order] as 64-bit integers, and one more slot at the end holding `missing`: indexed
    with -1 (no such packet) it reads `missing`, so each context column is one gather."""
    padded = np.empty(len(order) + 1, dtype=np.int64)
    padded[:-1] = values[order]
    padded[-1] = missing
    return padded


SEGMENT_COLUMNS = (
    ("frame", "frame", "segment"), ("time_us", "time_us", "segment"),
    ("payload_bytes", "payload_bytes", "segment"), ("rel_seq", "rel_seq", "segment"),
    ("end_seq", "end", "segment"), ("wire_segments", "wire_segments", "segment"),
    ("sent_max_before", None, "sent_max"), ("prev_frame", "frame", "previous_data"),
    ("prev_time_us", "time_us", "previous_data"),
    ("prev_payload_bytes", "payload_bytes", "previous_data"),
    ("peer_frame", "frame", "peer_latest"), ("peer_time_us", "time_us", "peer_latest"),
    ("peer_role", "role", "peer_latest"), ("peer_ack", "rel_ack", "peer_latest"),
    ("peer_window_bytes", "window_bytes", "peer_latest"),
    ("peer_data_between", None, "peer_data_between"),
    ("next_peer_frame", "frame", "peer_next"), ("next_peer_time_us", "time_us", "peer_next"),
    ("next_peer_role", "role", "peer_next"), ("next_peer_ack", "rel_ack", "peer_next"),
    ("next_own_data_time_us", "time_us", "own_next_data"),
    ("own_retransmissions_between", None, "own_retransmissions_between"),
)
"""The segment table's columns (after frame and time_us come connection and direction): each
is a packet column read at the segment or at one of its context packets (-1: none), or a
context count (no packet column)."""
_CODED_SOURCES = {"role": _ROLE_NAMES}
"""Packet columns held as codes: the columns read from them are categoricals of these names."""


def _segment_rows(context: dict[str, np.ndarray], made: dict[str, np.ndarray],
                  padded: Callable[[str], np.ndarray]) -> pd.DataFrame:
    """The segments' columns: each packet column is read at every row that needs it, through
    the slot for -1 (see `_with_none_slot`), then let go, so a part of one huge connection holds
    one packet-sized copy at a time instead of seven. `made`: those already at hand, taken over
    and read first, so they go first; `padded` makes the others."""
    by_source: dict[str, list[tuple[str, str]]] = {}
    for name, source, at in SEGMENT_COLUMNS:
        by_source.setdefault(source or "", []).append((name, at))
    table: dict[str, Any] = {name: context[at] for name, at in by_source.pop("")}
    for source, uses in sorted(by_source.items(), key=lambda item: item[0] not in made):
        values = made.pop(source) if source in made else padded(source)
        categories = _CODED_SOURCES.get(source)
        for name, at in uses:
            table[name] = values[context[at]]
            if categories is not None:
                table[name] = pd.Categorical.from_codes(table[name], categories=categories)
        del values
    previous = context["previous_data"]
    table["own_retransmissions_between"] = np.where(
        previous >= 0, table["own_retransmissions_between"], 0)
    return pd.DataFrame({name: table[name] for name, _, _ in SEGMENT_COLUMNS}, copy=False)
