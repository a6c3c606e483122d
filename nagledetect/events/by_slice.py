"""Data segments and messages of a part read a slice at a time (docs/performance.md, "The
twenty-first round", step 3).

Each slice's packets (pass 2's columns, `flows.numbering`) are made into segments by the whole
run's `data_segments`; a segment whose context lies before the cut takes it from what each
direction group's packets before it left: its latest new-data segment, its latest packet (the
peer's context), the highest sequence end sent, and the peer's data packets and its own
retransmissions since its latest new-data segment.

What a segment's context reads after it (the peer's next packet, its sender's next data) is
read only by the delayed-ACK samples, which wait for it (`delack_timer.SamplesBySlice`): a
slice's segments read it where the slice holds it.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from nagledetect.events.messages import (
    IDLE_GAP_US,
    median_from_counts,
    median_per_message,
    message_table,
    no_messages,
)
from nagledetect.events.segments import NONE, RETRANSMISSION_ROLES, data_segments, role_in
from nagledetect.flows.connections import direction_key
from nagledetect.flows.facts import KeyedColumns
from nagledetect.flows.grouped import first_per_key, grouped_cumsum, joined_columns, last_per_key
from nagledetect.flows.roles import ROLE
from nagledetect.table import Table

LOOK_AHEAD_COLUMNS = ("next_peer_frame", "next_peer_time_us", "next_peer_role", "next_peer_ack",
                      "next_own_data_time_us")
"""The segment columns read after the segment: a slice's segments leave them out."""
PEER_CONTEXT = {"peer_frame": "frame", "peer_time_us": "time_us", "peer_role": "role",
                "peer_ack": "rel_ack", "peer_window_bytes": "window_bytes"}
PREVIOUS_CONTEXT = {"prev_frame": "frame", "prev_time_us": "time_us",
                    "prev_payload_bytes": "payload_bytes"}
DIRECTION_MISSING = {
    "new_data_seen": False, **{f"new_data_{name}": 0 for name in PREVIOUS_CONTEXT.values()},
    "latest_seen": False, **{f"latest_{name}": 0 for name in PEER_CONTEXT.values()},
    "sent_max": NONE, "connection_seen": False, "peer_data_since": 0,
    "retransmissions_since": 0}
"""Per direction group, what its packets before the cut leave for the segments after it."""


class SegmentsBySlice:
    """Feed pass 2's packet columns slice by slice (`add`): each slice's segments."""

    def __init__(self, connections: pd.DataFrame) -> None:
        self._connections = connections
        self._directions = KeyedColumns(DIRECTION_MISSING)
        self._directions.grow(2 * len(connections))

    def add(self, packets: pd.DataFrame) -> pd.DataFrame:
        """The slice's segments (`data_segments`' columns, in frame order): their
        `LOOK_AHEAD_COLUMNS` read what this slice holds, -1 past its end (the delayed-ACK
        samples, their only reader, wait for the rest: `delack_timer.SamplesBySlice`)."""
        segments = data_segments(packets, self._connections).to_pandas()
        group = segments["connection"].to_numpy().astype(np.int64) * 2 + segments["direction"].to_numpy()
        rows = _rows_of(packets, segments)
        retransmitted = role_in(packets["role"], RETRANSMISSION_ROLES)
        self._continue_context(segments, group, rows, packets, retransmitted)
        self._note(packets, retransmitted)
        return segments

    def _continue_context(self, segments: pd.DataFrame, group: np.ndarray, rows: np.ndarray,
                          packets: pd.DataFrame, retransmitted: np.ndarray) -> None:
        """Give the segments whose context lies before the cut what their groups left
        (`retransmitted`: the slice's retransmitted packets)."""
        directions = self._directions
        no_previous = np.flatnonzero(segments["prev_frame"].to_numpy() < 0)
        earlier = no_previous[directions["new_data_seen"][group[no_previous]]]
        for column, source in PREVIOUS_CONTEXT.items():
            written_at(segments, column, earlier, directions[f"new_data_{source}"][group[earlier]])
        no_peer = np.flatnonzero(segments["peer_frame"].to_numpy() < 0)
        peer_earlier = no_peer[directions["latest_seen"][group[no_peer] ^ 1]]
        for column, source in PEER_CONTEXT.items():
            written_at(segments, column, peer_earlier,
                       directions[f"latest_{source}"][group[peer_earlier] ^ 1])
        first_here = _first_of_connection_here(packets, rows)
        seen = directions["connection_seen"][group // 2 * 2]
        carried_max = directions["sent_max"][group]
        sent_max = segments["sent_max_before"].to_numpy()
        segments["sent_max_before"] = np.where(
            first_here, np.where(seen, carried_max, NONE),
            np.where(seen, np.maximum(sent_max, carried_max), sent_max))
        between = segments["peer_data_between"].to_numpy().copy()
        between[no_previous] += directions["peer_data_since"][group[no_previous]]
        segments["peer_data_between"] = between
        retransmissions = segments["own_retransmissions_between"].to_numpy().copy()
        retransmissions[earlier] = (directions["retransmissions_since"][group[earlier]]
                                    + _before_in_group(packets, retransmitted, rows[earlier]))
        segments["own_retransmissions_between"] = retransmissions

    def _note(self, packets: pd.DataFrame, retransmitted: np.ndarray) -> None:
        """What each group's packets of this slice leave for the next."""
        directions = self._directions
        group = direction_key(packets)
        role = packets["role"].cat.codes.to_numpy()
        payload = packets["payload_bytes"].to_numpy()
        everything = np.arange(len(group))
        new_data = np.flatnonzero((role == ROLE["data"]) & (payload > 0))
        last_new = last_per_key(group, new_data, len(directions["sent_max"]))
        with_new = np.flatnonzero(last_new >= 0)
        directions["new_data_seen"][with_new] = True
        for source in PREVIOUS_CONTEXT.values():
            directions[f"new_data_{source}"][with_new] = packets[source].to_numpy()[last_new[with_new]]
        last = last_per_key(group, everything, len(last_new))
        present = np.flatnonzero(last >= 0)
        directions["latest_seen"][present] = True
        for source in PEER_CONTEXT.values():
            values = role if source == "role" else packets[source].to_numpy()
            directions[f"latest_{source}"][present] = values[last[present]]
        self._note_sent_max(packets, group)
        data_rows = np.flatnonzero(payload > 0)
        directions["peer_data_since"][:] = _since(
            directions["peer_data_since"], last_new, group, data_rows, peer=True)
        directions["retransmissions_since"][:] = _since(
            directions["retransmissions_since"], last_new, group,
            np.flatnonzero(retransmitted), peer=False)

    def _note_sent_max(self, packets: pd.DataFrame, group: np.ndarray) -> None:
        """Each group's highest end as the whole run's running value has it: its own packets'
        ends, and NONE for each of its peer's packets, over the connection so far."""
        directions = self._directions
        count = len(directions["sent_max"])
        end = packets["rel_seq"].to_numpy() + packets["payload_bytes"].to_numpy().astype(np.int64)
        highest = np.full(count, np.iinfo(np.int64).min)
        np.maximum.at(highest, group, end)
        peer_rows = np.zeros(count, dtype=bool)
        peer_rows[group ^ 1] = True
        highest[peer_rows] = np.maximum(highest[peer_rows], NONE)
        connection_here = np.zeros(count // 2, dtype=bool)
        connection_here[group // 2] = True
        here = np.repeat(connection_here, 2)
        seen = directions["connection_seen"][:count]
        directions["sent_max"][here] = np.where(seen[here],
                                                np.maximum(directions["sent_max"][here], highest[here]),
                                                highest[here])
        directions["connection_seen"][here] = True


def _rows_of(packets: pd.DataFrame, segments: pd.DataFrame) -> np.ndarray:
    """Each segment's row in the slice's packets (both in frame order)."""
    return np.searchsorted(packets["frame"].to_numpy(), segments["frame"].to_numpy())


def written_at(segments: pd.DataFrame, column: str, rows: np.ndarray, values: np.ndarray) -> None:
    """Write `values` into a segment column at `rows` (codes where it is categorical)."""
    if isinstance(segments[column].dtype, pd.CategoricalDtype):
        codes = segments[column].cat.codes.to_numpy().copy()
        codes[rows] = values
        segments[column] = pd.Categorical.from_codes(codes, categories=segments[column].cat.categories)
        return
    written = segments[column].to_numpy().copy()
    written[rows] = values
    segments[column] = written


def _first_of_connection_here(packets: pd.DataFrame, rows: np.ndarray) -> np.ndarray:
    """Whether each segment (its row in the slice) is its connection's first packet here."""
    connection = packets["connection"].to_numpy()
    first = first_per_key(connection, np.arange(len(connection)), int(connection.max(initial=-1)) + 1)
    return first[connection[rows]] == rows


def _before_in_group(packets: pd.DataFrame, mask: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """How many rows of `mask` in each of `rows`' groups come before it in the slice."""
    group = direction_key(packets)
    span = np.int64(len(group) + 1)
    marked = np.flatnonzero(mask)
    keys = np.sort(group[marked] * span + marked)
    return (np.searchsorted(keys, group[rows] * span + rows)
            - np.searchsorted(keys, group[rows] * span)).astype(np.int64)


def _since(before: np.ndarray, last_new: np.ndarray, group: np.ndarray, rows: np.ndarray,
           peer: bool) -> np.ndarray:
    """Per group, the rows (of its peer's group, or its own) since its latest new-data
    segment: those of this slice after it, or all of them added to `before`."""
    count = len(before)
    counted_group = group[rows] ^ 1 if peer else group[rows]
    total = np.bincount(counted_group, minlength=count)
    after = np.bincount(counted_group, weights=rows > last_new[counted_group],
                        minlength=count).astype(np.int64)
    return np.where(last_new >= 0, after, before + total)


OPEN_MISSING = {"seen": False, "direction": 0, "last_us": 0, "messages": 0, "first_frame": 0,
                "start_us": 0, "last_frame": 0, "end_us": 0, "bytes": 0, "packets": 0,
                "wire_segments": 0, "mss": 0}
"""Per connection: its latest segment (whether it had one, its direction and time), how many
messages it began, and its last message's columns so far (still open: a later slice may go
on with it)."""
SUMMED = ("bytes", "packets", "wire_segments")


class MessagesBySlice:
    """Number a part's messages and make their table a slice at a time (`events.messages`):
    feed each slice's segments to `add`, then `finish`. A message is numbered within its
    connection as its segments come; the numbers a whole run gives (connection by connection)
    are known at the end, when every connection's count is (`numbers`). With `gap_us` of
    `messages.BURST_GAP_US` it makes the write bursts."""

    def __init__(self, connection_count: int, gap_us: int = IDLE_GAP_US) -> None:
        self._gap_us = gap_us
        self._open = KeyedColumns(OPEN_MISSING)
        self._open.grow(connection_count)
        self._open_sizes = _size_counts(np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64))
        self._closed: list[dict[str, np.ndarray]] = []
        self._dtypes: dict[str, np.dtype] = {}

    def add(self, segments: pd.DataFrame) -> np.ndarray:
        """Each segment's message number within its connection (the slice's segments, in frame
        order)."""
        order = np.lexsort((segments["frame"].to_numpy(), segments["connection"].to_numpy()))
        rows = {name: segments[name].to_numpy()[order] for name in
                ("connection", "direction", "time_us", "frame", "payload_bytes", "wire_segments",
                 "mss")}
        self._dtypes = self._dtypes or {name: values.dtype for name, values in rows.items()}
        connection = rows["connection"].astype(np.int64)
        first_here = np.r_[True, connection[1:] != connection[:-1]] if len(connection) else (
            np.zeros(0, dtype=bool))
        new = _new_messages(rows, connection, first_here, self._open, self._gap_us)
        within = self._open["messages"][connection] - 1 + grouped_cumsum(new, first_here)
        numbers = np.empty(len(order), dtype=np.int64)
        numbers[order] = within
        self._runs(rows, connection, first_here, new, within)
        return numbers

    def _runs(self, rows: dict[str, np.ndarray], connection: np.ndarray, first_here: np.ndarray,
              new: np.ndarray, within: np.ndarray) -> None:
        """Fold the slice's runs of segments into the open messages and the closed ones."""
        opened = self._open
        starts = np.flatnonzero(new | first_here)
        if not len(starts):
            return
        ends = np.r_[starts[1:], len(connection)]
        run = {"connection": connection[starts], "within": within[starts],
               "direction": rows["direction"][starts], "first_frame": rows["frame"][starts],
               "start_us": rows["time_us"][starts], "last_frame": rows["frame"][ends - 1],
               "end_us": rows["time_us"][ends - 1], "mss": rows["mss"][starts],
               "bytes": np.add.reduceat(rows["payload_bytes"].astype(np.int64), starts),
               "packets": (ends - starts).astype(np.int64),
               "wire_segments": np.add.reduceat(rows["wire_segments"].astype(np.int64), starts)}
        run_of_row = np.repeat(np.arange(len(starts)), ends - starts)
        payload = rows["payload_bytes"].astype(np.int64)
        run["median_payload_bytes"] = median_per_message(payload, run_of_row, starts, ends)
        continued = np.flatnonzero(~new[starts])
        carried = run["connection"][continued]
        for name in ("direction", "first_frame", "start_us", "mss"):
            run[name][continued] = opened[name][carried]
        for name in SUMMED:
            run[name][continued] += opened[name][carried]
        last_run = np.r_[run["connection"][1:] != run["connection"][:-1], True]
        sizes = self._sizes_of(np.union1d(continued, np.flatnonzero(last_run)), run_of_row,
                               payload, continued, carried)
        merged = sizes[np.isin(sizes["key"].to_numpy(), continued)]
        run["median_payload_bytes"][continued] = median_from_counts(
            merged["key"].to_numpy(), merged["size"].to_numpy(), merged["n"].to_numpy())
        closing = np.flatnonzero(opened["seen"] & np.isin(np.arange(opened.count),
                                                          run["connection"][new[starts]]))
        self._close_open(np.setdiff1d(closing, carried))
        self._closed.append({name: values[~last_run] for name, values in run.items()})
        self._keep_open(run, sizes, np.flatnonzero(last_run))

    def _sizes_of(self, counted: np.ndarray, run_of_row: np.ndarray, payload: np.ndarray,
                  continued: np.ndarray, carried: np.ndarray) -> pd.DataFrame:
        """The payload sizes' counts of the `counted` runs (those that go on with an open
        message, and each connection's last, which stays open), the open messages' counts
        added to the runs that go on with them; the medians of those that go on are taken
        from them (a run's own median is not its message's)."""
        rows = np.isin(run_of_row, counted)
        open_keys = self._open_sizes["key"].to_numpy()
        going_on = np.isin(open_keys, carried)
        sizes = pd.concat([_size_counts(run_of_row[rows], payload[rows]),
                           self._open_sizes[going_on].assign(
                               key=continued[np.searchsorted(carried, open_keys[going_on])])])
        return sizes.groupby(["key", "size"], as_index=False)["n"].sum()

    def _close(self, run: dict[str, np.ndarray], sizes: pd.DataFrame, chosen: np.ndarray) -> None:
        """Add the chosen runs, whole messages now, to the closed ones (their medians from
        `sizes`, keyed by run)."""
        if not len(chosen):
            return
        picked = sizes[np.isin(sizes["key"].to_numpy(), chosen)].sort_values(["key", "size"])
        closed = {name: values[chosen] for name, values in run.items()}
        closed["median_payload_bytes"] = median_from_counts(
            picked["key"].to_numpy(), picked["size"].to_numpy(), picked["n"].to_numpy())
        self._closed.append(closed)

    def _close_open(self, connections: np.ndarray) -> None:
        """Close the open messages of `connections` (each begins a new one here)."""
        if not len(connections):
            return
        opened = self._open
        run = {name: opened[name][connections].copy() for name in
               ("direction", "first_frame", "start_us", "last_frame", "end_us", "mss", *SUMMED)}
        run["connection"] = connections
        run["within"] = opened["messages"][connections] - 1
        position = np.searchsorted(connections, self._open_sizes["key"].to_numpy())
        mine = np.isin(self._open_sizes["key"].to_numpy(), connections)
        self._close(run, self._open_sizes[mine].assign(key=position[mine]),
                    np.arange(len(connections)))
        self._open_sizes = self._open_sizes[~mine]

    def _keep_open(self, run: dict[str, np.ndarray], sizes: pd.DataFrame, chosen: np.ndarray
                   ) -> None:
        """Each connection's last run here is its open message now."""
        opened = self._open
        connection = run["connection"][chosen]
        for name in ("direction", "first_frame", "start_us", "last_frame", "end_us", "mss",
                     *SUMMED):
            opened[name][connection] = run[name][chosen]
        opened["messages"][connection] = run["within"][chosen] + 1
        opened["seen"][connection] = True
        opened["last_us"][connection] = run["end_us"][chosen]
        kept = sizes[np.isin(sizes["key"].to_numpy(), chosen)]
        kept = kept.assign(key=run["connection"][kept["key"].to_numpy()])
        self._open_sizes = pd.concat([self._open_sizes[~np.isin(self._open_sizes["key"].to_numpy(),
                                                                connection)], kept])

    def finish(self) -> tuple[Table, np.ndarray]:
        """The message table a whole run makes, and each connection's first message number
        (a segment's number is its connection's first plus its number within)."""
        opened = self._open
        self._close_open(np.flatnonzero(opened["seen"]))
        first_number = np.concatenate(([0], np.cumsum(opened["messages"])[:-1]))
        if not self._closed:
            return no_messages(), first_number
        closed = joined_columns(self._closed)
        message = first_number[closed["connection"]] + closed.pop("within")
        order = np.argsort(message, kind="stable")
        table = {"message": message[order]}
        del message
        for name, source in (("connection", "connection"), ("direction", "direction"),
                             ("first_frame", "frame"), ("last_frame", "frame"),
                             ("start_us", "time_us"), ("end_us", "time_us"), ("bytes", None),
                             ("packets", None), ("wire_segments", "wire_segments"),
                             ("mss", "mss"), ("median_payload_bytes", None)):
            values = closed.pop(name)[order]
            table[name] = values if source is None else values.astype(self._dtypes[source])
        return message_table(table), first_number


def _new_messages(rows: dict[str, np.ndarray], connection: np.ndarray, first_here: np.ndarray,
                  opened: KeyedColumns, gap_us: int) -> np.ndarray:
    """Where a message begins (`messages.number_messages`' rule): a connection's first
    segment, a turn of direction, or an idle gap, the segment before a cut included."""
    direction = rows["direction"]
    time_us = rows["time_us"]
    previous_direction = np.r_[0, direction[:-1]] if len(direction) else direction
    previous_us = np.r_[0, time_us[:-1]] if len(time_us) else time_us
    previous_direction = np.where(first_here, opened["direction"][connection], previous_direction)
    previous_us = np.where(first_here, opened["last_us"][connection], previous_us)
    seen = np.where(first_here, opened["seen"][connection], True)
    return ~seen | (direction != previous_direction) | ((time_us - previous_us) > gap_us)


def _size_counts(key: np.ndarray, size: np.ndarray) -> pd.DataFrame:
    return pd.DataFrame({"key": key, "size": size}).value_counts().reset_index(name="n")
