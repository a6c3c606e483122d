"""Pass 1 over packets read a slice at a time: each packet's connection, and what must be known
of every connection before its packets can be numbered (docs/performance.md, "The twentieth
round").

A slice is any run of consecutive packets in file order. A connection's later packets can
change what its earlier ones mean: a SYN seen late makes its sender the client and gives the
ISN, a SYN/ACK announces the MSS, a payload size decides an estimated MSS. So the facts are
carried from slice to slice in columns per endpoint pair, per connection and per sending
endpoint (the direction is known only at the end), and `finish` gives the connection table a
whole run makes, less the columns that read numbered packets (round trips and vantage, which
pass 2 adds). The rules themselves are the whole run's (`connections`, `handshake`, `build`):
this module only carries their inputs across the cuts.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from nagledetect.flows.build import connection_endpoints, connection_table
from nagledetect.flows.connections import (
    FLAG_ACK,
    FLAG_FIN,
    FLAG_RST,
    FLAG_SYN,
    PairsBefore,
    client_is_low,
    latest_lifetime,
    new_lifetimes,
    stream_changes,
)
from nagledetect.flows.endpoints import EndpointPairs, packet_ports
from nagledetect.flows.grouped import last_per_key
from nagledetect.flows.handshake import OPTION_COLUMNS, full_looking, handshake_columns, size_counts_of

HANDSHAKE_PACKETS = {"syn": FLAG_SYN, "syn_ack": FLAG_SYN | FLAG_ACK}
"""The flags (of SYN and ACK) of the two packets a connection's handshake table reads."""
NOT_YET = np.iinfo(np.int64).max
CONNECTION_MISSING: dict[str, object] = {
    "first_frame": 0, "stream": -1, "pair": -1, "first_sender_is_low": False, "uses_timestamps": False,
    **{f"{packet}_{name}": missing for packet in HANDSHAKE_PACKETS
       for name, missing in {**OPTION_COLUMNS, "sender_is_low": np.int8(-1)}.items()}}
"""Per-connection columns and their values before they are known."""
COPIED_FROM = {"first_frame": "frame", **{f"{packet}_{name}": name for packet in HANDSHAKE_PACKETS
                                          for name in OPTION_COLUMNS}}
"""The packet column each per-connection column copies."""


class KeyedColumns:
    """Columns indexed by a number that only grows (a pair, a connection, a sending side), each
    holding its `missing` value (whose dtype it takes: a numpy scalar's, or numpy's for a plain
    value) for a number not written yet."""

    def __init__(self, missing: dict[str, object]) -> None:
        self._missing = {name: np.asarray(value)[()] for name, value in missing.items()}
        self._arrays = {name: np.zeros(0, dtype=value.dtype) for name, value in self._missing.items()}
        self.count = 0

    def grow(self, count: int) -> None:
        """Make room for numbers below `count` (doubling, so growing costs little)."""
        self.count = max(self.count, count)
        for name, old in self._arrays.items():
            if len(old) < self.count:
                grown = np.full(max(self.count, 2 * len(old)), self._missing[name], dtype=old.dtype)
                grown[:len(old)] = old
                self._arrays[name] = grown

    def __getitem__(self, name: str) -> np.ndarray:
        """The column, `count` long (a view: writing to it writes the column)."""
        return self._arrays[name][:self.count]


@dataclass
class ConnectionFacts:
    """What pass 1 knows at the end: the connection table (without round trips and vantage)
    and, for pass 2, which endpoint is each connection's client, each direction group's raw
    ISN (index connection * 2 + direction, -1 where it sent nothing)."""

    table: pd.DataFrame
    client_is_low: np.ndarray
    isn_raw: np.ndarray
    later_from_us: np.ndarray
    """Per slice: no packet of the slices after it is earlier than this (NOT_YET after the
    last), so an ACK earlier than it cannot answer them."""


class ConnectionsBySlice:
    """Pass 1: feed the slices in file order to `paired` and then `add`, then call
    `finish`."""

    def __init__(self) -> None:
        self._endpoint_pairs = EndpointPairs()
        self._pairs = KeyedColumns({"connection": -1, "seen": False, "syn_seq": -1,
                                    "closed": False, "last_us": 0, "stream": -1})
        self._connections = KeyedColumns(CONNECTION_MISSING)
        self._sides = KeyedColumns({"packets": 0, "payload_bytes": 0, "first_us": NOT_YET,
                                    "last_us": -NOT_YET - 1, "first_seq": -1, "syn_seq": -1})
        self._size_counts = size_counts_of(np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64))
        self._slice_first_us: list[int] = []
        self._carries_streams = False

    def paired(self, columns: dict[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
        """The first step of `add`, for the next slice (decoded columns, file order): each
        packet's endpoint pair, numbered on from those of earlier slices, and whether its
        source is the lower endpoint. It carries state of its own only, so it can run a slice
        ahead of `add`."""
        return self._endpoint_pairs.assign(columns)

    def add(self, columns: dict[str, np.ndarray], pair: np.ndarray, src_is_low: np.ndarray
            ) -> np.ndarray:
        """Take the next slice, with what `paired` gave for it: each packet's connection
        number, as a whole run numbers them (its direction is `src_is_low ==
        client_is_low[connection]`, once known)."""
        if not self._connections.count:
            self._connections = KeyedColumns(_typed_as(CONNECTION_MISSING, columns))
            self._carries_streams = "stream" in columns
        self._slice_first_us.append(int(columns["time_us"].min(initial=NOT_YET)))
        known_pairs = self._pairs.count
        self._pairs.grow(int(pair.max(initial=known_pairs - 1)) + 1)
        new_rows = np.flatnonzero(pair >= known_pairs)
        new_pair_first = new_rows[np.unique(pair[new_rows], return_index=True)[1]]
        lifetime_starts = self._lifetime_starts(columns, pair, new_pair_first)
        connection, first_rows = self._numbered(pair, new_pair_first, lifetime_starts)
        self._note_pairs(columns, pair)
        self._note_connections(columns, connection, first_rows, pair, src_is_low)
        self._note_sides(columns, connection, src_is_low)
        return connection

    def _lifetime_starts(self, columns: dict[str, np.ndarray], pair: np.ndarray,
                         new_pair_first: np.ndarray) -> np.ndarray:
        """Slice positions of the SYNs that start a new lifetime of a pair seen before them
        (of the packets whose conversation's number changes, where they carry it: see
        `split_port_reuse`)."""
        if "stream" in columns:
            return stream_changes(pair, columns["stream"], self._pairs["stream"])
        flags = columns["flags"]
        syn_rows = np.flatnonzero((flags & (FLAG_SYN | FLAG_ACK)) == FLAG_SYN)
        later_syns = np.setdiff1d(syn_rows, new_pair_first, assume_unique=True)
        if not len(later_syns):
            return later_syns
        reusable = np.zeros(self._pairs.count, dtype=bool)
        reusable[pair[later_syns]] = True
        rows = np.flatnonzero(reusable[pair])
        pairs = self._pairs
        before = PairsBefore(pairs["seen"], pairs["syn_seq"], pairs["closed"], pairs["last_us"])
        return rows[new_lifetimes(pair[rows], flags[rows], columns["seq_raw"][rows],
                                  columns["time_us"][rows], before)]

    def _numbered(self, pair: np.ndarray, new_pair_first: np.ndarray,
                  lifetime_starts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Each packet's connection, new connections numbered on from those of earlier slices
        in order of their first packet; and the slice positions of those first packets."""
        first_rows = np.sort(np.concatenate((new_pair_first, lifetime_starts)))
        first_number = self._connections.count

        def number_starting_at(rows: np.ndarray) -> np.ndarray:
            return first_number + np.searchsorted(first_rows, rows)

        current = self._pairs["connection"]
        current[pair[new_pair_first]] = number_starting_at(new_pair_first)
        connection = current[pair]
        if len(lifetime_starts):
            affected = np.zeros(self._pairs.count, dtype=bool)
            affected[pair[lifetime_starts]] = True
            rows = np.flatnonzero(affected[pair])
            in_lifetime, lifetime = latest_lifetime(pair, rows, lifetime_starts)
            connection[rows[in_lifetime]] = number_starting_at(lifetime_starts[lifetime])
            last = last_per_key(pair, rows, self._pairs.count)
            reused = np.flatnonzero(last >= 0)
            current[reused] = connection[last[reused]]
        self._connections.grow(self._connections.count + len(first_rows))
        return connection, first_rows

    def _note_pairs(self, columns: dict[str, np.ndarray], pair: np.ndarray) -> None:
        """What the lifetime rule reads of each pair's packets so far (`PairsBefore`)."""
        flags = columns["flags"]
        last = last_per_key(pair, np.arange(len(pair)), self._pairs.count)
        last_syn = last_per_key(pair, np.flatnonzero((flags & (FLAG_SYN | FLAG_ACK)) == FLAG_SYN),
                              self._pairs.count)
        last_close = last_per_key(pair, np.flatnonzero(flags & (FLAG_FIN | FLAG_RST)),
                                self._pairs.count)
        present = np.flatnonzero(last >= 0)
        pairs = self._pairs
        pairs["seen"][present] = True
        pairs["last_us"][present] = columns["time_us"][last[present]]
        if "stream" in columns:
            pairs["stream"][present] = columns["stream"][last[present]]
        with_syn = last_syn[present] >= 0
        pairs["syn_seq"][present[with_syn]] = columns["seq_raw"][last_syn[present[with_syn]]]
        pairs["closed"][present] = np.where(with_syn, last_close[present] > last_syn[present],
                                            pairs["closed"][present] | (last_close[present] >= 0))

    def _note_connections(self, columns: dict[str, np.ndarray], connection: np.ndarray,
                          first_rows: np.ndarray, pair: np.ndarray, src_is_low: np.ndarray) -> None:
        """Each new connection's first packet, each connection's first SYN and SYN/ACK, whether
        it carried timestamps, and its full-looking payload sizes while it has no handshake."""
        known = self._connections
        new = connection[first_rows]
        known["first_frame"][new] = columns["frame"][first_rows]
        if "stream" in columns:
            known["stream"][new] = columns["stream"][first_rows]
        known["pair"][new] = pair[first_rows]
        known["first_sender_is_low"][new] = src_is_low[first_rows]
        handshake_flags = columns["flags"] & (FLAG_SYN | FLAG_ACK)
        for packet, wanted in HANDSHAKE_PACKETS.items():
            rows = np.flatnonzero(handshake_flags == wanted)
            conn, first = np.unique(connection[rows], return_index=True)
            fresh = known[f"{packet}_frame"][conn] == 0
            conn, rows = conn[fresh], rows[first[fresh]]
            for name in OPTION_COLUMNS:
                known[f"{packet}_{name}"][conn] = columns[name][rows]
            known[f"{packet}_sender_is_low"][conn] = src_is_low[rows]
        known["uses_timestamps"][connection[columns["opt_has_timestamp"]]] = True
        self._note_sizes(columns["payload_bytes"], connection)

    def _note_sizes(self, payload: np.ndarray, connection: np.ndarray) -> None:
        """Counts of full-looking payload sizes, kept only for connections with no SYN or
        SYN/ACK so far (the others' MSS is announced, or the default)."""
        known = self._connections
        estimated = (known["syn_frame"] == 0) & (known["syn_ack_frame"] == 0)
        rows = np.flatnonzero(full_looking(payload) & estimated[connection])
        counts = self._size_counts[estimated[self._size_counts["connection"]]]
        if len(rows):
            counts = pd.concat([counts, size_counts_of(connection[rows], payload[rows])])
            counts = counts.groupby(["connection", "size"], as_index=False)["n"].sum()
        self._size_counts = counts

    def _note_sides(self, columns: dict[str, np.ndarray], connection: np.ndarray,
                    src_is_low: np.ndarray) -> None:
        """Packets, payload bytes, first and last times, first sequence number and first SYN's
        of each sending side (connection * 2, plus 1 where the sender is the higher end)."""
        sides = self._sides
        sides.grow(2 * self._connections.count)
        side = connection.astype(np.int64) * 2 + ~src_is_low
        time_us = columns["time_us"]
        np.add.at(sides["packets"], side, 1)
        np.add.at(sides["payload_bytes"], side, columns["payload_bytes"].astype(np.int64))
        np.minimum.at(sides["first_us"], side, time_us)
        np.maximum.at(sides["last_us"], side, time_us)
        seq = columns["seq_raw"].astype(np.int64)
        for name, rows in (("first_seq", np.arange(len(side))),
                           ("syn_seq", np.flatnonzero(columns["flags"] & FLAG_SYN))):
            present, first = np.unique(side[rows], return_index=True)
            fresh = sides[name][present] < 0
            sides[name][present[fresh]] = seq[rows[first[fresh]]]

    def finish(self) -> ConnectionFacts:
        """The connection table a whole run makes (less round trips and vantage), and what
        pass 2 needs to number the packets."""
        known = self._connections
        count = known.count
        pair_rows = self._endpoint_pairs.rows
        pair = known["pair"]
        first_sender_is_low = known["first_sender_is_low"]
        low, guessed = client_is_low(
            known["syn_sender_is_low"], known["syn_ack_sender_is_low"], first_sender_is_low,
            lambda chosen: packet_ports(pair_rows, pair, first_sender_is_low,
                                        np.flatnonzero(chosen)))
        endpoints = connection_endpoints(pair_rows[pair], low, known["first_frame"])
        handshake = handshake_columns(
            *({name: known[f"{packet}_{name}"] for name in OPTION_COLUMNS}
              for packet in HANDSHAKE_PACKETS),
            known["uses_timestamps"], endpoints["ip_version"],
            lambda needed: self._size_counts[needed[self._size_counts["connection"]]])
        totals = {name: self._by_direction(name, low) for name in
                  ("packets", "payload_bytes", "first_us", "last_us")}
        if self._carries_streams:
            endpoints["stream"] = known["stream"].astype(np.int64)
        table = connection_table(totals, count, endpoints, handshake, guessed, {})
        isn = np.where(self._by_direction("syn_seq", low) >= 0, self._by_direction("syn_seq", low),
                       (self._by_direction("first_seq", low) - 1) & 0xFFFFFFFF)
        isn[self._by_direction("packets", low) == 0] = -1
        later_from_us = np.minimum.accumulate(
            np.append(self._slice_first_us, NOT_YET)[::-1])[::-1][1:]
        return ConnectionFacts(table, low, isn, later_from_us)

    def _by_direction(self, name: str, client_is_low: np.ndarray) -> np.ndarray:
        """A sending side's column by direction group (connection * 2 + direction)."""
        by_side = self._sides[name][:2 * self._connections.count].reshape(-1, 2)
        return np.where(client_is_low[:, None], by_side, by_side[:, ::-1]).ravel()


def _typed_as(values: dict[str, object], columns: dict[str, np.ndarray]) -> dict[str, object]:
    """The missing values, typed as the packet column each copies (so the table's dtypes are a
    whole run's)."""
    return {name: np.asarray(value, dtype=columns[COPIED_FROM[name]].dtype)[()]
            if name in COPIED_FROM else value for name, value in values.items()}
