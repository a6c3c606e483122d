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
from functools import cached_property, partial
from typing import TYPE_CHECKING, Any

import numpy as np

from nagledetect.flows.connections import by_connection
from nagledetect.flows.grouped import group_starts, grouped_cummax
from nagledetect.flows.roles import ROLE, ROLES
from nagledetect.table import Table, codes

if TYPE_CHECKING:
    import pandas as pd

_ROLE_NAMES = (*ROLES, "none")
"""Role names by code, and "none" after them for a packet that does not exist: the words of
the peer role columns (held as codes, as the packets' role, and compared by code)."""
CODED_SEGMENT_COLUMNS = {"peer_role": _ROLE_NAMES, "next_peer_role": _ROLE_NAMES}
PURE_ACK_ROLES = ("pure_ack", "dup_ack", "window_update")
RETRANSMISSION_ROLES = ("retransmission", "out_of_order")
NONE = -1


def role_in(roles: Any, names: tuple[str, ...]) -> np.ndarray:
    """Whether each row of a role column (its codes, or a pandas categorical) is one of
    `names`, compared by code (a categorical's isin costs a small capture more than the rest
    of its test). Codes past the roles ("none") are none of them."""
    return np.isin(codes(roles), [ROLE[name] for name in names])


def data_segments(packets: Table | pd.DataFrame, connections: Table | pd.DataFrame) -> Table:
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
    connection = np.asarray(packets["connection"])[order]
    starts = group_starts(connection)
    direction = np.asarray(packets["direction"])[order]
    role = _with_none_slot(codes(packets["role"]), order, len(ROLES))
    payload = _with_none_slot(np.asarray(packets["payload_bytes"]), order, NONE)
    end = _with_none_slot(np.asarray(packets["rel_seq"]), order, NONE)
    end[:-1] += payload[:-1]
    is_new_data = (role[:-1] == ROLE["data"]) & (payload[:-1] > 0)
    selected = np.flatnonzero(is_new_data)
    selected = selected[np.argsort(np.asarray(packets["frame"])[order[selected]], kind="stable")]
    context = _context(selected, direction, starts, role[:-1], payload[:-1], end[:-1],
                       is_new_data)
    del is_new_data, starts
    context["segment"] = selected
    made = {"role": role, "payload_bytes": payload, "end": end}
    del role, payload, end
    connection, direction = connection[selected], direction[selected]
    rows = _segment_rows(context, made, partial(_padded_column, packets, order))
    del context, order
    names = list(rows)
    table = {name: rows.pop(name) for name in names[:2]}
    table["connection"], table["direction"] = connection, direction
    table.update((name, rows.pop(name)) for name in names[2:])
    return segment_table(table, connections)


def segment_table(columns: dict[str, Any], connections: Table | pd.DataFrame) -> Table:
    """The segment table of its `SEGMENT_COLUMNS` (after frame, time_us, connection and
    direction), with each segment's MSS, the part after its last full MSS (`tail_bytes`) and
    whether it is small (a tail)."""
    mss = by_connection(connections, "effective_mss", columns["connection"])
    columns["mss"] = mss
    columns["tail_bytes"] = columns["payload_bytes"] % np.maximum(mss, 1)
    columns["is_small"] = columns["tail_bytes"] > 0
    return Table(columns, CODED_SEGMENT_COLUMNS)


def _connection_order(packets: Table | pd.DataFrame) -> np.ndarray:
    """Rows sorted by connection, then frame (packet tables are in frame order already)."""
    frame = np.asarray(packets["frame"])
    if len(frame) > 1 and not (frame[1:] > frame[:-1]).all():
        return np.lexsort((frame, np.asarray(packets["connection"])))
    return np.argsort(np.asarray(packets["connection"]), kind="stable")


OWN, PEER = 0, 1
"""Which direction's running value a segment reads: its own, or its peer's."""


@dataclass(frozen=True)
class _SelectedRows:
    """Rows of the packets in connection order (`at`), each with its direction (`side`), its
    connection's first row (`low`) and the row after its last (`high`), read in running values
    over all packets: a running value read just before a row belongs to the row's connection
    when it does not lie before `low` (just after: when it lies before `high`), so no pass has
    to restart the running values at every connection. The running values of both directions
    are the two rows of one (2, count) array, and each segment reads its own direction's row or
    its peer's at one flat position: one gather for all segments, none split by direction."""

    at: np.ndarray
    side: np.ndarray
    low: np.ndarray
    high: np.ndarray
    count: int

    def _flat(self, whose: int, positions: np.ndarray) -> np.ndarray:
        """Flat positions in a (2, count) array: `positions` in the row of each segment's own
        direction (OWN) or its peer's (PEER)."""
        return self._row_starts[whose] + positions

    @cached_property
    def _row_starts(self) -> tuple[np.ndarray, np.ndarray]:
        """Where each segment's own direction's row starts in a flat (2, count) array, and
        where its peer's does."""
        own = self.side.astype(np.int64) * self.count
        return own, self.count - own

    def _positions(self, masks: np.ndarray, missing: int) -> np.ndarray:
        """Each packet's position where `masks` (2, count) holds, else `missing`: 32-bit
        where positions fit (half the bytes to scan)."""
        kind = self._positions_kind
        return np.where(masks, np.arange(self.count, dtype=kind), kind(missing))

    @property
    def _positions_kind(self) -> type:
        """32-bit where positions (and counts of packets) fit."""
        return np.int32 if self.count < np.iinfo(np.int32).max else np.int64

    def latest_before(self, masks: np.ndarray, whose: int) -> np.ndarray:
        """The latest row of `whose` direction with its mask (`masks`: a row per direction)
        strictly before each one, in its connection (else NONE)."""
        latest = self._positions(masks, NONE)
        np.maximum.accumulate(latest, axis=1, out=latest)
        found = latest.ravel()[self._flat(whose, np.maximum(self.at - 1, 0))]
        return np.where((self.at > self.low) & (found >= self.low), found, np.int64(NONE))

    def earliest_after(self, masks: np.ndarray, whose: int) -> np.ndarray:
        """The earliest row of `whose` direction with its mask strictly after each one, in its
        connection (else NONE)."""
        earliest = self._positions(masks, self.count)
        np.minimum.accumulate(earliest[:, ::-1], axis=1, out=earliest[:, ::-1])
        found = earliest.ravel()[self._flat(whose, np.minimum(self.at + 1, self.count - 1))]
        return np.where((self.at + 1 < self.high) & (found < self.high), found, np.int64(NONE))

    def since(self, masks: np.ndarray, previous: np.ndarray, whose: int) -> np.ndarray:
        """How many rows of `whose` direction with its mask lie between `previous` (one per
        segment, NONE: the connection's start) and each segment, that segment included."""
        running = np.cumsum(masks, axis=1, dtype=self._positions_kind).ravel()
        before = np.where(previous >= 0, previous, self.low - 1)
        counted_before = np.where(before >= 0, running[self._flat(whose, np.maximum(before, 0))], 0)
        return (running[self._flat(whose, self.at)] - counted_before).astype(np.int64)

    def highest_before(self, end: np.ndarray, direction: np.ndarray,
                       starts: np.ndarray) -> np.ndarray:
        """The highest `end` of its own direction strictly before each segment, in its
        connection (else NONE): a direction at a time (sequence ends need 64 bits, so a
        (2, count) array of them would hold twice the bytes)."""
        before = np.maximum(self.at - 1, 0)
        highest = np.empty(len(self.at), dtype=np.int64)
        for side in (0, 1):
            running = grouped_cummax(np.where(direction == side, end, NONE), starts)
            np.copyto(highest, running[before], where=self.side == side)
        return np.where(self.at > self.low, highest, NONE)


def _context(selected: np.ndarray, direction: np.ndarray, starts: np.ndarray, role: np.ndarray,
             payload: np.ndarray, end: np.ndarray, is_new_data: np.ndarray
             ) -> dict[str, np.ndarray]:
    """For each selected segment, from its own direction's view of the connection: the previous
    new-data segment, the peer's latest and next packets, its own next data segment, the peer
    data segments and own retransmissions since the previous one, and the highest sequence end
    sent before it. Each is a running value over all packets of each direction, read only at
    the selected rows (`_SelectedRows`)."""
    first = np.flatnonzero(starts)
    within = np.searchsorted(first, selected, side="right") - 1
    count = len(direction)
    at = _SelectedRows(selected, direction[selected], first[within],
                       np.append(first[1:], count)[within], count)
    by_direction = np.stack((direction == 0, direction == 1))
    carries_data = by_direction & (payload > 0)
    retransmitted = by_direction & np.isin(role, [ROLE[name] for name in RETRANSMISSION_ROLES])
    previous = at.latest_before(by_direction & is_new_data, OWN)
    return {
        "previous_data": previous,
        "peer_latest": at.latest_before(by_direction, PEER),
        "peer_next": at.earliest_after(by_direction, PEER),
        "own_next_data": at.earliest_after(carries_data, OWN),
        "sent_max": at.highest_before(end, direction, starts),
        "peer_data_between": at.since(carries_data, previous, PEER),
        "own_retransmissions_between": at.since(retransmitted, previous, OWN),
    }


def _padded_column(packets: Table | pd.DataFrame, order: np.ndarray, name: str) -> np.ndarray:
    """A packet column in connection order with the slot for -1 (see `_with_none_slot`)."""
    return _with_none_slot(np.asarray(packets[name]), order, NONE)


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
SEGMENT_PACKET_COLUMNS = ("connection", "direction", *dict.fromkeys(
    source for _, source, _ in SEGMENT_COLUMNS if source not in (None, "end")))
"""The packet columns the segments are made from (`end` is made of two of them): a part that
keeps no packet table lets the others go before they are made."""


def _segment_rows(context: dict[str, np.ndarray], made: dict[str, np.ndarray],
                  padded: Callable[[str], np.ndarray]) -> dict[str, Any]:
    """The segments' columns: each packet column is read at every row that needs it, through
    the slot for -1 (see `_with_none_slot`), then let go, so a part of one huge connection holds
    one packet-sized copy at a time instead of seven. `made`: those already at hand, taken over
    and read first, so they go first; `padded` makes the others. Returned in
    `SEGMENT_COLUMNS` order."""
    by_source: dict[str, list[tuple[str, str]]] = {}
    for name, source, at in SEGMENT_COLUMNS:
        by_source.setdefault(source or "", []).append((name, at))
    table: dict[str, Any] = {name: context[at] for name, at in by_source.pop("")}
    for source, uses in sorted(by_source.items(), key=lambda item: item[0] not in made):
        values = made.pop(source) if source in made else padded(source)
        for name, at in uses:
            table[name] = values[context[at]]
            if name in CODED_SEGMENT_COLUMNS:
                table[name] = table[name].astype(np.int8)
        del values
    previous = context["previous_data"]
    table["own_retransmissions_between"] = np.where(
        previous >= 0, table["own_retransmissions_between"], 0)
    return {name: table[name] for name, _, _ in SEGMENT_COLUMNS}
