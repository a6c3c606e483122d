"""From decoded packet columns to the two tables everything else reads: packets and connections.

Packets keep file order; each gets its connection, its direction (0 = client to server), its
sequence and ACK numbers relative to the ISNs, its scaled window, its role, and how many wire
segments it stands for (a payload longer than the MSS is a TSO/GSO/GRO super-segment).
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from functools import partial
from typing import Any

import numpy as np
import pandas as pd

from nagledetect.flows import connections as conn_rules
from nagledetect.flows.connections import FLAG_ACK, FLAG_SYN
from nagledetect.flows.endpoints import EndpointPairs, packet_ports
from nagledetect.flows.grouped import group_starts
from nagledetect.flows.handshake import handshake_table
from nagledetect.flows.roles import ROLES, DirectionsBefore, assign_roles
from nagledetect.flows.sequence import relative_ack, relative_sequence
from nagledetect.flows.tables import (
    PACKET_COLUMNS,
    FlowTables,
    connection_endpoints,
)
from nagledetect.flows.vantage import HandshakeTimes, ack_lags_us, vantage_table
from nagledetect.read.capture import DecodedColumns
from nagledetect.read.threads import executor

CHUNK_PACKETS = 1 << 20
"""Packets numbered and classified at a time (whole connections): bounds the temporaries."""
CLASSIFY_THREADS = max(1, min(2, os.cpu_count() or 1))
"""Chunks classified at once: numpy lets go of the GIL in the long array operations, so two
threads nearly halve the time on two cores (more would hold more temporaries for less)."""



HANDSHAKE_OPTION_COLUMNS = ("opt_mss", "opt_window_scale", "opt_sack_permitted")
"""Read by the handshake table only, and let go after it."""

ADDRESS_COLUMNS = ("src_0", "src_1", "src_2", "src_3", "dst_0", "dst_1", "dst_2", "dst_3",
                   "src_port", "dst_port", "ip_version", "tcp_header_bytes")


def _collect(batches: Iterable[DecodedColumns], expected_packets: int
             ) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray], EndpointPairs]:
    """Join the batches, replacing per-packet addresses by an endpoint-pair number."""
    pairs = EndpointPairs()
    packets = GrowingColumns(expected_packets)
    sack_blocks = GrowingColumns()
    for columns, sack in batches:
        pair, src_is_low = pairs.assign(columns)
        compact = {name: values for name, values in columns.items() if name not in ADDRESS_COLUMNS}
        compact["pair"] = pair.astype(np.int32)
        compact["src_is_low"] = src_is_low
        packets.append(compact)
        sack_blocks.append({"frame": columns["frame"][sack["row"]], "left_raw": sack["left_raw"],
                            "right_raw": sack["right_raw"]})
    return packets.columns(), sack_blocks.columns(), pairs


class GrowingColumns:
    """Columns appended a batch at a time into arrays with room to grow.

    Why: joining a list of batches at the end needs the batches and the joined copy at once
    (twice the capture). Here each batch is copied in and let go. Room is made for
    `expected_rows` at the first copy (and doubled when outgrown); room not yet written is never
    touched, so it takes no memory. A single batch is kept as it is, with no copy.
    """

    def __init__(self, expected_rows: int = 0) -> None:
        self._arrays: dict[str, np.ndarray] = {}
        self._expected_rows = expected_rows
        self._room = 0
        self._owned = False
        self.length = 0

    def append(self, batch: dict[str, np.ndarray]) -> None:
        rows = len(next(iter(batch.values()), ()))
        if not self._arrays:
            self._arrays = dict(batch)
            self._room = rows
        else:
            if not self._owned or self.length + rows > self._room:
                self._make_room(self.length + rows)
            for name, values in batch.items():
                self._arrays[name][self.length:self.length + rows] = values
        self.length += rows

    def _make_room(self, needed: int) -> None:
        """Move the columns into new arrays with room for `needed` rows or more."""
        room = max(needed, self._expected_rows, 2 * self._room)
        for name, old in self._arrays.items():
            grown = np.empty(room, dtype=old.dtype)
            grown[:self.length] = old[:self.length]
            self._arrays[name] = grown
        self._room = room
        self._owned = True

    def columns(self) -> dict[str, np.ndarray]:
        """The joined columns (empty when nothing was appended)."""
        return {name: array[:self.length] for name, array in self._arrays.items()}


def build_flows(batches: Iterable[DecodedColumns], expected_packets: int = 0) -> FlowTables:
    """Connections, directions, relative numbers and roles for every decoded TCP packet
    (`expected_packets`, an estimate, saves moving the columns as they grow)."""
    columns, sack, pairs = _collect(batches, expected_packets)
    if not columns:
        return _empty_tables()
    pair = columns["pair"]
    pair_rows = pairs.rows
    src_is_low = columns["src_is_low"]
    stream = columns.pop("stream", None)
    connection, first_rows = conn_rules.split_port_reuse(
        pair, pairs.first_packets, columns["flags"], columns["seq_raw"], columns["time_us"],
        stream)
    from_client, guessed = conn_rules.client_is_source(
        connection, first_rows, columns["flags"], src_is_low,
        partial(packet_ports, pair_rows, pair, src_is_low))
    del pair, src_is_low
    count = len(first_rows)
    columns["connection"] = connection.astype(np.int32, copy=False)
    del connection
    columns["direction"] = (~from_client).view(np.uint8)
    del from_client
    endpoints = _connection_endpoints(columns, pair_rows, first_rows)
    if stream is not None:
        endpoints["stream"] = stream[first_rows]
    del stream
    handshake = handshake_table(columns, count, endpoints["ip_version"])
    for name in HANDSHAKE_OPTION_COLUMNS:
        del columns[name]
    group = _direction_groups(columns)
    totals = _number_and_classify(columns, group, handshake, count)
    del group
    table = connection_table(totals, count, endpoints, handshake, guessed,
                              vantage_table(_handshake_times(columns, count),
                                            totals["ack_lag_us"]))
    packet_frame = pd.DataFrame({name: columns.pop(name) for name in PACKET_COLUMNS}, copy=False)
    packet_frame["role"] = pd.Categorical.from_codes(packet_frame["role"], categories=ROLES)
    return FlowTables(packet_frame, table, _sack_table(sack))


def _direction_groups(columns: dict[str, np.ndarray]) -> np.ndarray:
    """Each packet's direction group, connection * 2 + direction (32-bit where it fits: a
    narrower key sorts and gathers faster)."""
    connection = columns["connection"]
    if len(connection) and int(connection.max()) >= np.iinfo(np.int32).max // 2:
        connection = connection.astype(np.int64)
    return connection * 2 + columns["direction"]


def _number_and_classify(columns: dict[str, np.ndarray], group: np.ndarray,
                         handshake: dict[str, np.ndarray], count: int) -> dict[str, np.ndarray]:
    """Relative seq/ack, roles, scaled windows and wire segments, written into `columns`; returns
    the totals of each direction group (index connection * 2 + direction): its packets, payload
    bytes, first and last times, and smallest data -> ACK lag.

    The per-direction work runs in direction order (connection, direction, time), a chunk of
    whole connections at a time, so its temporaries are bounded by the chunk, not the capture.
    """
    totals = {"packets": np.bincount(group, minlength=2 * count),
              "payload_bytes": np.zeros(2 * count, dtype=np.int64),
              "first_us": np.full(2 * count, np.iinfo(np.int64).max),
              "last_us": np.full(2 * count, np.iinfo(np.int64).min),
              "ack_lag_us": np.full(2 * count, -1, dtype=np.int64)}
    order = np.argsort(group, kind="stable")
    packets = len(order)
    columns["rel_seq"] = np.empty(packets, dtype=np.int64)
    columns["rel_ack"] = np.empty(packets, dtype=np.int64)
    columns["role"] = np.empty(packets, dtype=np.uint8)
    index_type = np.int32 if packets < np.iinfo(np.int32).max else np.int64
    chunks = [order[start:stop].astype(index_type)
              for start, stop in _connection_chunks(totals["packets"])]
    del order
    threads = min(CLASSIFY_THREADS, len(chunks))
    with executor(threads if threads > 1 else 0, "classify") as pool:
        for first_group, chunk_totals in pool.map(partial(_classify_chunk, columns), chunks):
            for name, values in chunk_totals.items():
                totals[name][first_group:first_group + len(values)] = values
    del chunks
    columns["window_bytes"] = scaled_window(columns, group, handshake)
    columns["wire_segments"], columns["super_segment"] = wire_segments(columns, handshake)
    return totals


def _connection_chunks(group_packets: np.ndarray) -> list[tuple[int, int]]:
    """[start, stop) ranges of the direction order, about CHUNK_PACKETS each, cut only where a
    connection starts (the direction order holds connection 0's packets, then connection 1's...)."""
    connection_starts = np.concatenate(([0], np.cumsum(group_packets.reshape(-1, 2).sum(axis=1))))
    packets = int(connection_starts[-1])
    targets = np.arange(CHUNK_PACKETS, packets, CHUNK_PACKETS)
    cuts = connection_starts[np.searchsorted(connection_starts, targets, side="right") - 1]
    cuts = np.unique(np.concatenate(([0], cuts, [packets])))
    return list(zip(cuts[:-1].tolist(), cuts[1:].tolist()))


def _classify_chunk(columns: dict[str, np.ndarray], rows: np.ndarray
                    ) -> tuple[int, dict[str, np.ndarray]]:
    """Number and classify the packets `rows` (direction order, whole connections): writes
    rel_seq, rel_ack and role at those rows; returns the chunk's first direction group and its
    groups' totals."""
    rows = rows.astype(np.intp)  # a narrower index is widened by every gather that uses it
    connection = columns["connection"][rows].astype(np.int64)
    first_connection = int(connection[0])
    group = (connection - first_connection) * 2 + columns["direction"][rows]
    del connection
    groups = int(group[-1]) // 2 * 2 + 2
    starts = group_starts(group)
    view = {name: columns[name][rows] for name in
            ("flags", "seq_raw", "ack_raw", "payload_bytes", "window_raw", "time_us")}
    base = _sequence_bases(view, group, starts, groups // 2)
    view["rel_seq"] = relative_sequence(view["seq_raw"], starts, base[group[starts]])
    has_ack = (view["flags"] & FLAG_ACK) != 0
    view["rel_ack"] = relative_ack(view["ack_raw"], has_ack, group, base[group ^ 1])
    del has_ack, base
    for name in ("rel_seq", "rel_ack"):
        columns[name][rows] = view[name]
    columns["role"][rows] = assign_roles(view, starts, partial(peer_values, view, rows, group))
    totals = _chunk_totals(view, group, starts)
    totals["ack_lag_us"] = ack_lags_us(view, group, groups)
    return first_connection * 2, totals


def _chunk_totals(view: dict[str, np.ndarray], group: np.ndarray,
                  starts: np.ndarray) -> dict[str, np.ndarray]:
    """Payload bytes and first and last times of a chunk's direction groups (`group`: each
    packet's group within the chunk, ascending; whole connections)."""
    first = np.flatnonzero(starts)
    present = group[first]
    count = int(group[-1]) // 2 * 2 + 2
    totals = {"payload_bytes": np.zeros(count, dtype=np.int64),
              "first_us": np.full(count, np.iinfo(np.int64).max),
              "last_us": np.full(count, np.iinfo(np.int64).min)}
    totals["payload_bytes"][present] = np.add.reduceat(view["payload_bytes"], first, dtype=np.int64)
    totals["first_us"][present] = np.minimum.reduceat(view["time_us"], first)
    totals["last_us"][present] = np.maximum.reduceat(view["time_us"], first)
    return totals


def _sequence_bases(view: dict[str, np.ndarray], group: np.ndarray, starts: np.ndarray,
                    count: int) -> np.ndarray:
    """Raw ISN per direction group (index conn*2+dir): the SYN's seq, else first seq - 1."""
    base = np.full(count * 2, -1, dtype=np.int64)
    first = np.flatnonzero(starts)
    base[group[first]] = (view["seq_raw"][first].astype(np.int64) - 1) & 0xFFFFFFFF
    syn_rows = np.flatnonzero((view["flags"] & FLAG_SYN) != 0)
    groups_with_syn, first_syn = np.unique(group[syn_rows], return_index=True)
    base[groups_with_syn] = view["seq_raw"][syn_rows[first_syn]]
    return base


def peer_values(view: dict[str, np.ndarray], rows: np.ndarray, group: np.ndarray,
                 at: np.ndarray, before: DirectionsBefore | None = None) -> dict[str, np.ndarray]:
    """The window, sequence, payload and flags of the latest packet the peer sent before each
    packet at `at` (positions in direction order), -1 where the peer has sent nothing yet
    (`before`: the peer's latest packet before these rows, where they continue earlier ones).

    `rows` are the packets' file positions (time order), `group` their direction groups
    (connection * 2 + direction, ascending). Keyed by (group, file position), the packets are
    in ascending order, so one binary search finds the last peer packet before each one.
    """
    span = np.int64(rows.max()) + 1
    peer_group = group[at] ^ 1
    found = np.searchsorted(group * span + rows, peer_group * span + rows[at], side="left") - 1
    safe = np.maximum(found, 0)
    sent = (found >= 0) & (group[safe] == peer_group)
    values = {name: np.where(sent, view[name][safe], -1).astype(np.int64)
              for name in ("window_raw", "rel_seq", "payload_bytes", "flags")}
    if before is not None:
        earlier = ~sent & before.seen[peer_group]
        for name, column in values.items():
            column[earlier] = getattr(before, name)[peer_group[earlier]]
    return values


def scaled_window(columns: dict[str, np.ndarray], group: np.ndarray,
                   handshake: dict[str, np.ndarray]) -> np.ndarray:
    """Window in bytes: raw << sender's scale when both sides agreed to scaling (not on SYNs)."""
    scale = np.stack([handshake["window_scale_client"], handshake["window_scale_server"]], axis=1)
    scaling = handshake["window_scaling"].astype(bool)[:, None]
    shift = np.where(scaling, np.clip(scale, 0, 14), 0).astype(np.uint8).ravel()[group]
    shift[np.flatnonzero(columns["flags"] & FLAG_SYN)] = 0
    window_bytes = columns["window_raw"].astype(np.int64)
    return np.left_shift(window_bytes, shift, out=window_bytes)


def wire_segments(columns: dict[str, np.ndarray], handshake: dict[str, np.ndarray]
                   ) -> tuple[np.ndarray, np.ndarray]:
    """Wire segments each packet stands for (its payload over the connection's effective MSS,
    rounded up; 1 where the MSS is unknown) and whether it is a super-segment (longer than
    the MSS and than one frame carries: a payload that fits a frame crossed the wire as one).
    Only super-segments need the division; a block of packets at a time, so the temporaries
    stay small."""
    effective_mss = handshake["effective_mss"]
    unknown = effective_mss <= 0
    mss_floor = np.maximum(effective_mss, 1).astype(np.int32)
    single_frame = np.maximum(mss_floor, handshake["frame_payload_limit_bytes"]).astype(np.int32)
    packets = len(columns["connection"])
    wire_segments = np.empty(packets, dtype=np.uint32)
    super_segment = np.empty(packets, dtype=bool)
    for start in range(0, packets, CHUNK_PACKETS):
        block = slice(start, start + CHUNK_PACKETS)
        connection = columns["connection"][block]
        payload = columns["payload_bytes"][block]
        mss = mss_floor[connection]
        np.greater(payload, single_frame[connection], out=super_segment[block])
        wire = ((payload > 0) | unknown[connection]).astype(np.uint32)
        rows = np.flatnonzero(super_segment[block])
        wire[rows] = np.where(unknown[connection[rows]], 1,
                              -(-payload[rows].astype(np.int64) // mss[rows]))
        wire_segments[block] = wire
    return wire_segments, super_segment


def _handshake_times(columns: dict[str, np.ndarray], count: int) -> dict[str, np.ndarray]:
    """The handshake's times (`vantage.HandshakeTimes`), read a block of packets at a time in
    file order, so the temporaries stay small."""
    times = HandshakeTimes(count)
    for start in range(0, len(columns["flags"]), CHUNK_PACKETS):
        block = slice(start, start + CHUNK_PACKETS)
        times.add(*(columns[name][block] for name in
                    ("flags", "direction", "connection", "time_us", "payload_bytes")))
    return times.times_us


def _connection_endpoints(columns: dict[str, np.ndarray], pair_rows: np.ndarray,
                          first_rows: np.ndarray) -> dict[str, Any]:
    """Client and server address and port of each connection, from its first packet
    (`first_rows`); the endpoint-pair columns are let go here, their last use."""
    client_is_low = columns.pop("src_is_low")[first_rows] == (columns["direction"][first_rows] == 0)
    return connection_endpoints(pair_rows[columns.pop("pair")[first_rows]], client_is_low,
                                columns["frame"][first_rows])


def connection_table(totals: dict[str, np.ndarray], count: int, endpoints: dict[str, Any],
                      handshake: dict[str, np.ndarray], guessed: np.ndarray,
                      vantage: dict[str, np.ndarray]) -> pd.DataFrame:
    """One row per connection: endpoints, counts each way, handshake options, RTT, vantage
    (`totals` per direction group, as `_number_and_classify` returns them). The columns are
    made first and framed once: inserting them one by one cost a capture of a few packets
    more than building its connections. The frame copies them into one block per dtype: a
    table sent to another process (a part's, a small capture's) unpickles in half the time of
    one with a block per column."""
    table = {"id": np.arange(count), **endpoints}
    table["start_us"] = totals["first_us"].reshape(count, 2).min(axis=1)
    table["end_us"] = totals["last_us"].reshape(count, 2).max(axis=1)
    table["duration_s"] = (table["end_us"] - table["start_us"]) / 1e6
    for direction, name in ((0, "client_to_server"), (1, "server_to_client")):
        table[f"packets_{name}"] = totals["packets"][direction::2]
        table[f"bytes_{name}"] = totals["payload_bytes"][direction::2]
    table["client_guessed"] = guessed
    return pd.DataFrame({**table, **handshake, **vantage})


def _sack_table(sack: dict[str, np.ndarray]) -> pd.DataFrame:
    """SACK blocks by frame, raw edges as on the wire (few packets carry them)."""
    if not sack:
        sack = {name: np.zeros(0, dtype=np.uint32) for name in ("frame", "left_raw", "right_raw")}
    return pd.DataFrame(sack)


def _empty_tables() -> FlowTables:
    packets = pd.DataFrame({name: np.zeros(0, dtype=np.int64) for name in PACKET_COLUMNS})
    return FlowTables(packets, pd.DataFrame({"id": np.zeros(0, dtype=np.int64)}),
                      _sack_table({}))
