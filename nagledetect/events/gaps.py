"""The gaps of each connection's timeline (SPEC section 4.8), made a slice of packets at a time.

A connection's timeline is the packets by which either side tried to move it on: new data, a
retransmission, a SYN or SYN/ACK, a keep-alive or a zero-window probe. A gap is the time from
one of them to the next (either direction) when it is 10 ms or more. Each gap keeps what the
packets of its span tell about its cause: the span is the gap's first packet and every packet
after it up to the next timeline packet, the gap's last, excluded. Of the side opposite the
gap's last packet (its peer, whose window and ACKs the sender read) it keeps the dup ACKs, the
smallest non-zero right window edge, the latest ACK; of either side, the first zero window;
of the side of its last packet, the furthest sequence end its data had reached before it.
After a retransmission, the peer's first ACK that covers it is kept too (it tells whether the
original had arrived), and whether the peer reported it as a duplicate: a D-SACK (RFC 2883:
the first SACK block of an ACK lies below its cumulative ACK) that begins within the
retransmitted range, where there are at least as many such D-SACKs after it as there are
retransmissions of that range from it on (each duplicate that arrived brings one, so the
last ones sent are the spurious ones).

A whole run feeds its packet table as one slice; a part read a slice at a time feeds each
slice in turn, the span still open at a cut carried to the next, so both give the same rows.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from nagledetect.events.segments import RETRANSMISSION_ROLES, role_in
from nagledetect.flows.connections import FLAG_SYN
from nagledetect.flows.grouped import (
    group_starts,
    grouped_cummax,
    joined_columns,
    rows_holding,
)
from nagledetect.flows.roles import ROLE
from nagledetect.table import Table, codes

if TYPE_CHECKING:
    import pandas as pd

GAP_MIN_US = 10_000
"""A gap this long or longer is named (inclusive)."""
EVENT_KINDS = ("new_data", "retransmission", "syn", "syn_retry", "probe", "keepalive")
EVENT = {name: code for code, name in enumerate(EVENT_KINDS)}
NOT_EVENT = -1
GAP_PACKET_COLUMNS = ("frame", "connection", "role", "window_bytes", "time_us", "direction",
                      "payload_bytes", "flags", "rel_seq", "rel_ack", "ack_raw")
"""The packet columns the gaps read."""
_NO_EDGE = np.iinfo(np.int64).max
_NO_ACK = np.iinfo(np.int64).min
NO_SENT_END = np.iinfo(np.int64).min
"""`after_sent_end` where the side had sent no data before the gap's last packet."""

_SPAN = {"zero_frame": 0, "dup_acks": 0, "dup_frame": 0, "edge": _NO_EDGE, "edge_frame": 0,
         "edge_window": 0, "ack": _NO_ACK, "ack_frame": 0}
"""Per span and direction, what its packets tell (missing values): the first zero window's
frame, the dup ACKs' count and latest frame, the smallest non-zero right window edge (ACK plus
window) with its frame and window, the latest ACK with its frame."""
_OPENER = {"has": False, "frame": 0, "time_us": 0, "direction": 0, "kind": 0, "end": 0,
           "peer_edge": -1}
"""Per connection, the timeline packet that opened its latest span (a part's earlier slices)."""


def event_kinds(packets: Table | pd.DataFrame) -> np.ndarray:
    """Each packet's timeline kind (a code of `EVENT_KINDS`), NOT_EVENT for the rest."""
    role = codes(packets["role"])
    payload = np.asarray(packets["payload_bytes"])
    syn = (np.asarray(packets["flags"]) & FLAG_SYN) != 0
    kind = np.full(len(role), NOT_EVENT, dtype=np.int8)
    kind[(role == ROLE["data"]) & (payload > 0)] = EVENT["new_data"]
    kind[role_in(packets["role"], RETRANSMISSION_ROLES) & (payload > 0)] = EVENT["retransmission"]
    kind[role == ROLE["zero_window_probe"]] = EVENT["probe"]
    kind[role == ROLE["keepalive"]] = EVENT["keepalive"]
    kind[syn & (role == ROLE["syn"])] = EVENT["syn"]
    kind[syn & (role == ROLE["retransmission"])] = EVENT["syn_retry"]
    return kind


class GapsBySlice:
    """Feed a connection set's packets slice by slice, in frame order (`add`), then read every
    gap (`gaps`)."""

    def __init__(self, connection_count: int) -> None:
        self._opener = {name: np.full(connection_count, missing, dtype=_dtype(missing))
                        for name, missing in _OPENER.items()}
        self._span = {name: np.full(2 * connection_count, missing, dtype=np.int64)
                      for name, missing in _SPAN.items()}
        self._latest_window = np.full(2 * connection_count, -1, dtype=np.int64)
        self._latest_edge = np.full(2 * connection_count, -1, dtype=np.int64)
        self._furthest_sent = np.full(2 * connection_count, NO_SENT_END, dtype=np.int64)
        self._gaps: list[dict[str, np.ndarray]] = []
        self._covers: list[dict[str, np.ndarray]] = []
        self._dsacks: list[dict[str, np.ndarray]] = []
        self._retransmissions: list[dict[str, np.ndarray]] = []

    def add(self, packets: Table | pd.DataFrame, sack_blocks: Table | pd.DataFrame | None = None) -> None:
        """Take one slice's packets (`GAP_PACKET_COLUMNS`, frame order) and the SACK blocks
        of those packets (`frame`, `left_raw`, `right_raw`, each packet's blocks in option
        order; blocks of other frames are ignored)."""
        if not len(packets):
            return
        if sack_blocks is not None and len(sack_blocks):
            self._dsacks.append(_dsack_rows(packets, sack_blocks))
        order = np.argsort(np.asarray(packets["connection"]), kind="stable")
        rows = {name: np.asarray(packets[name])[order] for name in
                ("frame", "connection", "window_bytes", "time_us", "direction", "payload_bytes",
                 "rel_seq", "rel_ack")}
        rows["connection"] = rows["connection"].astype(np.int64)
        rows["direction"] = rows["direction"].astype(np.int64)
        rows["frame"] = rows["frame"].astype(np.int64)
        rows["role"] = codes(packets["role"])[order]
        rows["kind"] = event_kinds(packets)[order]
        rows["end"] = rows["rel_seq"] + rows["payload_bytes"].astype(np.int64)
        resent = rows["kind"] == EVENT["retransmission"]
        self._retransmissions.append({"key": rows["connection"][resent] * 2
                                      + rows["direction"][resent],
                                      "seq": rows["rel_seq"][resent],
                                      "frame": rows["frame"][resent]})
        _SliceGaps(rows, self).run()

    def gaps(self) -> dict[str, np.ndarray]:
        """Every gap, in connection then frame order, with `cover_frame` and `cover_time_us`:
        after a gap that ends in a retransmission, the peer's first ACK covering it (0: none)."""
        if not self._gaps:
            return _no_gaps()
        gaps = [dict(rows) for rows in self._gaps]
        order = np.lexsort(tuple(np.concatenate([rows[name] for rows in gaps])
                                 for name in ("after_frame", "connection")))
        joined = joined_columns(gaps, order)
        cover_frame, cover_time_us = self._first_covers(joined)
        return {**joined, "cover_frame": cover_frame, "cover_time_us": cover_time_us,
                "dsack_frame": self._dsack_frames(joined)}

    def _dsack_frames(self, gaps: dict[str, np.ndarray]) -> np.ndarray:
        """Each gap's first D-SACK proving the retransmission that ends it spurious (0: none;
        see the module's note)."""
        frame = np.zeros(len(gaps["connection"]), dtype=np.int64)
        if not self._dsacks:
            return frame
        dsacks = _by_key_then(joined_columns([dict(rows) for rows in self._dsacks]), "left")
        resent = _by_key_then(joined_columns([dict(rows) for rows in self._retransmissions]),
                              "seq")
        lost = np.flatnonzero(gaps["after_kind"] == EVENT["retransmission"])
        key = gaps["connection"][lost].astype(np.int64) * 2 + gaps["after_direction"][lost]
        has = np.searchsorted(dsacks["key"], key, "right") > np.searchsorted(dsacks["key"], key)
        for row, row_key in zip(lost[has].tolist(), key[has].tolist()):
            seq, end, after = (int(gaps[name][row]) for name in ("after_seq", "after_end",
                                                                   "after_frame"))
            reported = _within(dsacks, row_key, "left", seq, end)
            reported = reported[reported > after]
            again = _within(resent, row_key, "seq", seq, end)
            if len(reported) and len(reported) >= np.count_nonzero(again >= after):
                frame[row] = reported.min()
        return frame

    def _first_covers(self, gaps: dict[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
        """Each gap's first covering ACK after its last packet (0 where none was seen)."""
        frame = np.zeros(len(gaps["connection"]), dtype=np.int64)
        time_us = np.zeros(len(frame), dtype=np.int64)
        if not self._covers:
            return frame, time_us
        covers = joined_columns([dict(rows) for rows in self._covers])
        key = covers["connection"] * (1 << 32) + covers["event_frame"]
        order = np.lexsort((covers["ack_frame"], key))
        key, first = key[order], group_starts(key[order])
        key, ack_frame, ack_time = key[first], covers["ack_frame"][order][first], \
            covers["ack_time_us"][order][first]
        wanted = gaps["connection"].astype(np.int64) * (1 << 32) + gaps["after_frame"]
        at = np.minimum(np.searchsorted(key, wanted), max(len(key) - 1, 0))
        found = key[at] == wanted
        frame[found], time_us[found] = ack_frame[at[found]], ack_time[at[found]]
        return frame, time_us


def _dsack_rows(packets: Table | pd.DataFrame, sack_blocks: Table | pd.DataFrame) -> dict[str, np.ndarray]:
    """The D-SACKs among the slice's packets: each packet's first SACK block where it lies
    below the packet's cumulative ACK, in relative sequence numbers of the direction it
    acknowledges (`key`: connection * 2 + that direction)."""
    block_frame = np.asarray(sack_blocks["frame"]).astype(np.int64)
    order = np.argsort(block_frame, kind="stable")
    first = order[group_starts(block_frame[order])]
    packet_frame = np.asarray(packets["frame"]).astype(np.int64)
    at = np.minimum(np.searchsorted(packet_frame, block_frame[first]), len(packet_frame) - 1)
    here = packet_frame[at] == block_frame[first]
    first, at = first[here], at[here]
    ack_raw = np.asarray(packets["ack_raw"])[at].astype(np.int64)
    below = (ack_raw - np.asarray(sack_blocks["left_raw"])[first].astype(np.int64)) & 0xFFFFFFFF
    duplicate = (below > 0) & (below < 1 << 31) & (
        codes(packets["role"])[at] != ROLE["syn"])
    at, below = at[duplicate], below[duplicate]
    direction = np.asarray(packets["direction"])[at].astype(np.int64)
    return {"key": np.asarray(packets["connection"])[at].astype(np.int64) * 2 + 1 - direction,
            "left": np.asarray(packets["rel_ack"])[at] - below,
            "frame": packet_frame[at]}


def _by_key_then(rows: dict[str, np.ndarray], within: str) -> dict[str, np.ndarray]:
    """The rows sorted by `key`, then by the `within` column."""
    order = np.lexsort((rows[within], rows["key"]))
    return {name: values[order] for name, values in rows.items()}


def _within(rows: dict[str, np.ndarray], key: int, column: str, low: int, high: int
            ) -> np.ndarray:
    """The frames of the rows (sorted by `_by_key_then`) of `key` whose `column` lies in
    [low, high)."""
    start, stop = np.searchsorted(rows["key"], key), np.searchsorted(rows["key"], key, "right")
    values = rows[column][start:stop]
    return rows["frame"][start:stop][np.searchsorted(values, low):np.searchsorted(values, high)]


def _dtype(missing: object) -> type:
    return bool if isinstance(missing, bool) else np.int64


def _no_gaps() -> dict[str, np.ndarray]:
    names = (*GAP_COLUMNS, "cover_frame", "cover_time_us", "dsack_frame")
    return {name: np.zeros(0, dtype=np.int64) for name in names}


GAP_COLUMNS = ("connection", "before_frame", "after_frame", "before_time_us", "after_time_us",
               "before_direction", "after_direction", "before_kind", "after_kind", "after_seq",
               "after_end", "after_payload_bytes", "zero_frame", "peer_dup_acks",
               "peer_dup_frame", "peer_edge", "peer_edge_frame", "peer_edge_window", "peer_ack",
               "peer_ack_frame", "peer_window_before", "before_end", "peer_edge_at_start",
               "after_sent_end")


class _SliceGaps:
    """One slice's work for `GapsBySlice` (its rows sorted by connection, frame order kept)."""

    def __init__(self, rows: dict[str, np.ndarray], carried: GapsBySlice) -> None:
        self.rows = rows
        self.carried = carried
        count = len(rows["frame"])
        self.count = count
        connection = rows["connection"]
        self.starts = group_starts(connection)
        position = np.arange(count)
        self.low = np.maximum.accumulate(np.where(self.starts, position, 0))
        self.is_event = rows["kind"] != NOT_EVENT
        latest = np.maximum.accumulate(np.where(self.is_event, position, -1))
        self.opener = np.where(latest >= self.low, latest, -1)
        """Each row's span: the latest timeline row at or before it here, -1: the carried one."""
        self.local, self.local_connection = _local_numbers(connection, self.starts)
        self.edges = rows["rel_ack"] + rows["window_bytes"].astype(np.int64)
        """Each row's window edge (its ACK plus its window): how far its peer may send."""

    def run(self) -> None:
        events = np.flatnonzero(self.is_event)
        key = self._span_keys()
        spans = self._span_aggregates(key)
        self._merge_carried(spans)
        self._gap_rows(events, self._previous_event(events), spans)
        self._covers()
        self._carry(events, spans)

    def _previous_event(self, rows: np.ndarray) -> np.ndarray:
        """The timeline row before each of `rows` here (-1: none here, the carried one)."""
        return np.where(rows > self.low[rows], self.opener[np.maximum(rows - 1, 0)], -1)

    def _span_keys(self) -> np.ndarray:
        """Each row's span key times two plus its direction: a span opened here is keyed by
        its opener's row, a carried one by `count` plus its connection's local number."""
        span = np.where(self.opener >= 0, self.opener, self.count + self.local)
        return span * 2 + self.rows["direction"]

    def _span_aggregates(self, key: np.ndarray) -> dict[str, np.ndarray]:
        rows = self.rows
        size = 2 * (self.count + len(self.local_connection))
        spans = {name: np.full(size, missing, dtype=np.int64) for name, missing in _SPAN.items()}
        role, window, frame = rows["role"], rows["window_bytes"], rows["frame"]
        counted = (role != ROLE["syn"]) & (role != ROLE["rst"])
        zero = np.flatnonzero(counted & (window == 0))
        spans["zero_frame"][:] = _first_frame(key[zero], frame[zero], size)
        dup = np.flatnonzero(role == ROLE["dup_ack"])
        spans["dup_acks"][:] = np.bincount(key[dup], minlength=size)
        np.maximum.at(spans["dup_frame"], key[dup], frame[dup])
        open_rows = np.flatnonzero(counted & (window > 0))
        edge = rows["rel_ack"][open_rows] + window[open_rows]
        np.minimum.at(spans["edge"], key[open_rows], edge)
        at_edge = open_rows[edge == spans["edge"][key[open_rows]]]
        spans["edge_frame"][:] = _first_frame(key[at_edge], frame[at_edge], size)
        edge_row = _row_of_frame(frame, spans["edge_frame"])
        spans["edge_window"][:] = np.where(edge_row >= 0, window[edge_row], 0)
        acked = np.flatnonzero(role != ROLE["syn"])
        np.maximum.at(spans["ack_frame"], key[acked], frame[acked])
        ack_row = _row_of_frame(frame, spans["ack_frame"])
        spans["ack"][:] = np.where(ack_row >= 0, rows["rel_ack"][ack_row], _NO_ACK)
        return spans

    def _merge_carried(self, spans: dict[str, np.ndarray]) -> None:
        """The carried spans' earlier packets (the state) joined to their rows here."""
        state = self.carried._span
        here = (self.count + np.arange(len(self.local_connection))) * 2
        keys = np.concatenate((here, here + 1))
        held = np.concatenate((self.local_connection * 2, self.local_connection * 2 + 1))
        earlier = {name: values[held] for name, values in state.items()}
        later = {name: spans[name][keys] for name in _SPAN}
        spans["zero_frame"][keys] = np.where(earlier["zero_frame"] > 0, earlier["zero_frame"],
                                             later["zero_frame"])
        spans["dup_acks"][keys] = earlier["dup_acks"] + later["dup_acks"]
        spans["dup_frame"][keys] = np.maximum(earlier["dup_frame"], later["dup_frame"])
        earlier_edge = earlier["edge"] <= later["edge"]
        for name in ("edge", "edge_frame", "edge_window"):
            spans[name][keys] = np.where(earlier_edge, earlier[name], later[name])
        later_ack = later["ack_frame"] > 0
        for name in ("ack", "ack_frame"):
            spans[name][keys] = np.where(later_ack, later[name], earlier[name])

    def _gap_rows(self, events: np.ndarray, previous: np.ndarray,
                  spans: dict[str, np.ndarray]) -> None:
        """The gaps that end here: each timeline row after an earlier one, 10 ms or more."""
        rows, opener = self.rows, self.carried._opener
        connection = rows["connection"][events]
        carried = previous < 0
        has_previous = np.where(carried, opener["has"][connection], True)
        at = np.maximum(previous, 0)
        before = {name: np.where(carried, opener[name][connection], rows[source][at])
                  for name, source in (("frame", "frame"), ("time_us", "time_us"),
                                       ("direction", "direction"), ("kind", "kind"))}
        after_time = rows["time_us"][events]
        gap = has_previous & (after_time - before["time_us"] >= GAP_MIN_US)
        before_end = np.where(carried, opener["end"][connection], rows["end"][at])[gap]
        peer_edge_at_start = np.where(
            carried, opener["peer_edge"][connection],
            self._peer_latest_before(at, self.edges, self.carried._latest_edge))[gap]
        events, previous, connection = events[gap], previous[gap], connection[gap]
        span = np.where(previous >= 0, previous, self.count + self.local[events])
        peer_key = span * 2 + (1 - rows["direction"][events])
        self.carried._gaps.append({
            "connection": connection,
            "before_frame": before["frame"][gap], "after_frame": rows["frame"][events],
            "before_time_us": before["time_us"][gap], "after_time_us": after_time[gap],
            "before_direction": before["direction"][gap],
            "after_direction": rows["direction"][events],
            "before_kind": before["kind"][gap], "after_kind": rows["kind"][events].astype(np.int64),
            "after_seq": rows["rel_seq"][events], "after_end": rows["end"][events],
            "after_payload_bytes": rows["payload_bytes"][events].astype(np.int64),
            "zero_frame": spans["zero_frame"][peer_key],
            "peer_dup_acks": spans["dup_acks"][peer_key],
            "peer_dup_frame": spans["dup_frame"][peer_key],
            "peer_edge": spans["edge"][peer_key], "peer_edge_frame": spans["edge_frame"][peer_key],
            "peer_edge_window": spans["edge_window"][peer_key],
            "peer_ack": spans["ack"][peer_key], "peer_ack_frame": spans["ack_frame"][peer_key],
            "peer_window_before": self._peer_latest_before(
                events, rows["window_bytes"], self.carried._latest_window),
            "before_end": before_end, "peer_edge_at_start": peer_edge_at_start,
            "after_sent_end": self._furthest_sent_before(events)})

    def _furthest_sent_before(self, at: np.ndarray) -> np.ndarray:
        """The furthest sequence end of the data its own side sent before each row `at`
        (NO_SENT_END: none yet), the slices before included."""
        rows = self.rows
        direction, connection = rows["direction"], rows["connection"]
        found = self.carried._furthest_sent[connection[at] * 2 + direction[at]]
        for side in (0, 1):
            sent = np.flatnonzero((direction == side) & (rows["payload_bytes"] > 0))
            mine = np.flatnonzero(direction[at] == side)
            if not len(sent) or not len(mine):
                continue
            furthest = grouped_cummax(rows["end"][sent], group_starts(connection[sent]))
            before = np.maximum(np.searchsorted(sent, at[mine]) - 1, 0)
            here = (sent[before] < at[mine]) & (connection[sent[before]] == connection[at[mine]])
            found[mine] = np.where(here, np.maximum(found[mine], furthest[before]), found[mine])
        return found


    def _peer_latest_before(self, at: np.ndarray, values: np.ndarray, carried: np.ndarray
                            ) -> np.ndarray:
        """`values` of the peer's latest packet before each row `at` (-1: none yet), from the
        slices before where it lies there (`carried`, by connection and side)."""
        rows = self.rows
        position = np.arange(self.count)
        direction = rows["direction"]
        found = np.full(len(at), -1, dtype=np.int64)
        for side in (0, 1):
            latest = np.maximum.accumulate(np.where(direction == side, position, -1))
            mine = direction[at] != side
            before = np.maximum(at - 1, 0)
            here = mine & (at > self.low[at]) & (latest[before] >= self.low[at])
            found = np.where(here, values[latest[before]], found)
            key = rows["connection"][at] * 2 + side
            found = np.where(mine & ~here, carried[key], found)
        return found

    def _covers(self) -> None:
        """Rows whose span opened with a retransmission and that ACK it, from its peer."""
        rows, opener = self.rows, self.carried._opener
        connection = rows["connection"]
        span = np.where(self.is_event, self._previous_event(np.arange(self.count)), self.opener)
        at = np.maximum(span, 0)
        here = span >= 0
        kind = np.where(here, rows["kind"][at], opener["kind"][connection])
        has = np.where(here, True, opener["has"][connection])
        direction = np.where(here, rows["direction"][at], opener["direction"][connection])
        end = np.where(here, rows["end"][at], opener["end"][connection])
        frame = np.where(here, rows["frame"][at], opener["frame"][connection])
        covering = np.flatnonzero(has & (kind == EVENT["retransmission"])
                                  & (rows["direction"] != direction) & (rows["rel_ack"] >= end)
                                  & (rows["role"] != ROLE["syn"]))
        if len(covering):
            self.carried._covers.append({
                "connection": connection[covering], "event_frame": frame[covering],
                "ack_frame": rows["frame"][covering], "ack_time_us": rows["time_us"][covering]})

    def _carry(self, events: np.ndarray, spans: dict[str, np.ndarray]) -> None:
        """What this slice leaves for the next: each connection's open span and its opener,
        and each direction's latest window."""
        rows, carried = self.rows, self.carried
        connection = self.local_connection
        last_row = np.r_[np.flatnonzero(self.starts)[1:] - 1, self.count - 1]
        last_event = self.opener[last_row]
        span = np.where(last_event >= 0, last_event, self.count + np.arange(len(connection)))
        for side in (0, 1):
            for name in _SPAN:
                carried._span[name][connection * 2 + side] = spans[name][span * 2 + side]
        opened = last_event >= 0
        at = last_event[opened]
        for name in ("frame", "time_us", "direction", "kind", "end"):
            carried._opener[name][connection[opened]] = rows[name][at]
        carried._opener["peer_edge"][connection[opened]] = self._peer_latest_before(
            at, self.edges, carried._latest_edge)
        carried._opener["has"][connection[opened]] = True
        group = rows["connection"] * 2 + rows["direction"]
        last = np.full(2 * len(carried._opener["has"]), -1, dtype=np.int64)
        np.maximum.at(last, group, np.arange(self.count))
        seen = np.flatnonzero(last >= 0)
        carried._latest_window[seen] = rows["window_bytes"][last[seen]]
        carried._latest_edge[seen] = self.edges[last[seen]]
        sent = rows["payload_bytes"] > 0
        np.maximum.at(carried._furthest_sent, group[sent], rows["end"][sent])


def _local_numbers(connection: np.ndarray, starts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each row's connection as a number among this slice's connections, and those
    connections in order."""
    return np.cumsum(starts) - 1, connection[starts]


def _first_frame(key: np.ndarray, frame: np.ndarray, size: int) -> np.ndarray:
    """The smallest frame per key (0 where none)."""
    first = np.full(size, _NO_EDGE, dtype=np.int64)
    np.minimum.at(first, key, frame)
    return np.where(first == _NO_EDGE, 0, first)


def _row_of_frame(frame: np.ndarray, wanted: np.ndarray) -> np.ndarray:
    """The row of each wanted frame among the slice's rows (-1 for 0, not here)."""
    return np.where(wanted > 0, rows_holding(frame, wanted), -1)

