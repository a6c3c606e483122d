"""From decoded packet columns to the two tables everything else reads: packets and connections.

Packets keep file order; each gets its connection, its direction (0 = client to server), its
sequence and ACK numbers relative to the ISNs, its scaled window, its role, and how many wire
segments it stands for (a payload longer than the MSS is a TSO/GSO/GRO super-segment).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from nagledetect.flows import connections as conn_rules
from nagledetect.flows.connections import FLAG_ACK, FLAG_SYN
from nagledetect.flows.grouped import group_starts, last_index_where
from nagledetect.flows.handshake import handshake_table
from nagledetect.flows.roles import ROLES, assign_roles
from nagledetect.flows.sequence import relative_ack, relative_sequence
from nagledetect.flows.vantage import ack_lags_us, vantage_table
from nagledetect.read.capture import PacketColumns

PACKET_COLUMNS = (
    "frame", "time_us", "connection", "direction", "flags", "payload_bytes", "rel_seq",
    "rel_ack", "seq_raw", "ack_raw", "window_raw", "window_bytes", "role", "wire_segments",
    "super_segment", "opt_has_timestamp", "opt_timestamp_value", "opt_timestamp_echo",
    "opt_sack_block_count", "captured_bytes", "payload_from_capture",
)


@dataclass
class FlowTables:
    packets: pd.DataFrame
    connections: pd.DataFrame
    sack_blocks: pd.DataFrame


def build_flows(packets: PacketColumns) -> FlowTables:
    """Connections, directions, relative numbers and roles for every decoded TCP packet."""
    columns = dict(packets.columns)
    if not columns or len(columns["frame"]) == 0:
        return _empty_tables()
    pair, src_is_low, _ = conn_rules.pair_keys(columns)
    connection = conn_rules.split_port_reuse(pair, columns["flags"], columns["seq_raw"],
                                             columns["time_us"])
    from_client, guessed = conn_rules.client_is_source(
        connection, columns["flags"], src_is_low, columns["src_port"], columns["dst_port"])
    columns["connection"] = connection
    columns["direction"] = np.where(from_client, 0, 1).astype(np.uint8)
    count = int(connection.max()) + 1
    handshake = handshake_table(columns, count)
    _number_and_classify(columns, count, handshake)
    table = _connection_table(columns, count, handshake, guessed)
    sack = _sack_table(packets.sack_blocks, columns)
    packet_frame = pd.DataFrame({name: columns[name] for name in PACKET_COLUMNS})
    packet_frame["role"] = pd.Categorical.from_codes(packet_frame["role"], categories=ROLES)
    return FlowTables(packet_frame, table, sack)


def _direction_order(columns: dict[str, np.ndarray]) -> np.ndarray:
    """Permutation sorting packets by (connection, direction), time order kept within each."""
    group = columns["connection"] * 2 + columns["direction"]
    return np.argsort(group, kind="stable")


def _number_and_classify(columns: dict[str, np.ndarray], count: int,
                         handshake: pd.DataFrame) -> None:
    """Relative seq/ack, scaled windows, roles and wire segments, written into `columns`."""
    order = _direction_order(columns)
    group = (columns["connection"] * 2 + columns["direction"])[order]
    starts = group_starts(group)
    view = {name: columns[name][order] for name in
            ("flags", "seq_raw", "ack_raw", "payload_bytes", "window_raw", "time_us")}
    base = _sequence_bases(view, group, starts, count)
    sequential = np.cumsum(starts) - 1
    view["rel_seq"] = relative_sequence(view["seq_raw"], starts, sequential, base[group[starts]])
    has_ack = (view["flags"] & FLAG_ACK) != 0
    view["rel_ack"] = relative_ack(view["ack_raw"], has_ack, group, base[group ^ 1])
    inverse = np.empty_like(order)
    inverse[order] = np.arange(len(order))
    peer = {name: _peer_latest(columns, order, values[inverse]) for name, values in
            (("window_raw", view["window_raw"]), ("rel_seq", view["rel_seq"]),
             ("payload_bytes", view["payload_bytes"]), ("flags", view["flags"]))}
    view["role"] = assign_roles(view, starts, peer)
    for name in ("rel_seq", "rel_ack", "role"):
        columns[name] = view[name][inverse]
    columns["window_bytes"] = _scaled_window(columns, handshake)
    mss = handshake["effective_mss"].to_numpy()[columns["connection"]]
    payload = columns["payload_bytes"].astype(np.int64)
    columns["wire_segments"] = np.where(mss > 0, -(-payload // np.maximum(mss, 1)), 1).astype(np.uint32)
    columns["super_segment"] = payload > np.maximum(mss, 1)


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


def _peer_latest(columns: dict[str, np.ndarray], order: np.ndarray,
                 values: np.ndarray) -> np.ndarray:
    """For each packet (returned in direction order): the peer's latest value of `values`
    (given in file order) at that time; -1 where the peer has sent nothing yet."""
    by_connection = np.argsort(columns["connection"], kind="stable")
    starts = group_starts(columns["connection"][by_connection])
    direction = columns["direction"][by_connection]
    ordered = values[by_connection].astype(np.int64)
    last = {d: last_index_where(direction == d, starts) for d in (0, 1)}
    peer_last = np.where(direction == 0, last[1], last[0])
    latest = np.where(peer_last >= 0, ordered[np.maximum(peer_last, 0)], -1)
    in_file_order = np.empty_like(by_connection)
    in_file_order[by_connection] = np.arange(len(by_connection))
    return latest[in_file_order][order]


def _scaled_window(columns: dict[str, np.ndarray], handshake: pd.DataFrame) -> np.ndarray:
    """Window in bytes: raw << sender's scale when both sides agreed to scaling (not on SYNs)."""
    connection = columns["connection"]
    scaling = handshake["window_scaling"].to_numpy()[connection]
    scale = np.where(columns["direction"] == 0,
                     handshake["window_scale_client"].to_numpy()[connection],
                     handshake["window_scale_server"].to_numpy()[connection]).astype(np.int64)
    apply = scaling & ((columns["flags"] & FLAG_SYN) == 0)
    shift = np.where(apply, np.clip(scale, 0, 14), 0)
    return columns["window_raw"].astype(np.int64) << shift


def _handshake_times(columns: dict[str, np.ndarray], count: int) -> pd.DataFrame:
    """Time of the first SYN, the first SYN/ACK and the client's first ACK after it."""
    flags = columns["flags"]
    connection = columns["connection"]
    time_us = columns["time_us"]
    times = {}
    syn_ack_time = np.full(count, -1, dtype=np.int64)
    for name, mask in (("syn", (flags & (FLAG_SYN | FLAG_ACK)) == FLAG_SYN),
                       ("syn_ack", (flags & (FLAG_SYN | FLAG_ACK)) == (FLAG_SYN | FLAG_ACK))):
        rows = np.flatnonzero(mask)
        conn, first = np.unique(connection[rows], return_index=True)
        times[name] = np.full(count, -1, dtype=np.int64)
        times[name][conn] = time_us[rows[first]]
    syn_ack_time[:] = times["syn_ack"]
    after = ((flags & (FLAG_SYN | FLAG_ACK)) == FLAG_ACK) & (columns["direction"] == 0) & (
        syn_ack_time[connection] >= 0) & (time_us >= syn_ack_time[connection])
    rows = np.flatnonzero(after)
    conn, first = np.unique(connection[rows], return_index=True)
    times["ack"] = np.full(count, -1, dtype=np.int64)
    times["ack"][conn] = time_us[rows[first]]
    return pd.DataFrame(times)


def _connection_table(columns: dict[str, np.ndarray], count: int, handshake: pd.DataFrame,
                      guessed: np.ndarray) -> pd.DataFrame:
    """One row per connection: endpoints, counts each way, handshake options, RTT, vantage."""
    connection = columns["connection"]
    first_rows = np.unique(connection, return_index=True)[1]
    first_from_client = columns["direction"][first_rows] == 0
    table = pd.DataFrame({"id": np.arange(count)})
    for side, own, other in (("client", "src", "dst"), ("server", "dst", "src")):
        words = np.stack([np.where(first_from_client, columns[f"{own}_{i}"][first_rows],
                                   columns[f"{other}_{i}"][first_rows]) for i in range(4)], axis=1)
        port = np.where(first_from_client, columns[f"{own}_port"][first_rows],
                        columns[f"{other}_port"][first_rows])
        table[f"{side}_address"] = [_format_address(row) for row in words]
        table[f"{side}_port"] = port.astype(np.int64)
    table["ip_version"] = columns["ip_version"][first_rows]
    table["first_frame"] = columns["frame"][first_rows].astype(np.int64)
    time_us = columns["time_us"]
    table["start_us"] = np.minimum.reduceat(time_us[np.argsort(connection, kind="stable")],
                                            _group_offsets(connection))
    table["end_us"] = np.maximum.reduceat(time_us[np.argsort(connection, kind="stable")],
                                          _group_offsets(connection))
    table["duration_s"] = (table["end_us"] - table["start_us"]) / 1e6
    for direction, name in ((0, "client_to_server"), (1, "server_to_client")):
        mine = columns["direction"] == direction
        table[f"packets_{name}"] = np.bincount(connection[mine], minlength=count)
        table[f"bytes_{name}"] = np.bincount(connection[mine],
                                             weights=columns["payload_bytes"][mine],
                                             minlength=count).astype(np.int64)
    table["client_guessed"] = guessed
    table = pd.concat([table, handshake], axis=1)
    lags = ack_lags_us(_lag_view(columns), _direction_groups(columns), count * 2)
    table = pd.concat([table, vantage_table(_handshake_times(columns, count), lags)], axis=1)
    return table


def _group_offsets(connection: np.ndarray) -> np.ndarray:
    return np.flatnonzero(group_starts(np.sort(connection, kind="stable")))


def _direction_groups(columns: dict[str, np.ndarray]) -> np.ndarray:
    order = _direction_order(columns)
    return (columns["connection"] * 2 + columns["direction"])[order]


def _lag_view(columns: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    order = _direction_order(columns)
    return {name: columns[name][order] for name in ("rel_ack", "rel_seq", "payload_bytes", "time_us")}


def _format_address(words: np.ndarray) -> str:
    """IPv4-mapped words print as dotted quad; others as compressed IPv6."""
    import ipaddress

    if words[0] == 0 and words[1] == 0 and words[2] == 0xFFFF:
        return str(ipaddress.IPv4Address(int(words[3])))
    value = (int(words[0]) << 96) | (int(words[1]) << 64) | (int(words[2]) << 32) | int(words[3])
    return str(ipaddress.IPv6Address(value))


def _sack_table(sack: dict[str, np.ndarray], columns: dict[str, np.ndarray]) -> pd.DataFrame:
    if not sack or len(sack.get("row", [])) == 0:
        return pd.DataFrame({"frame": np.zeros(0, np.uint32), "left_raw": np.zeros(0, np.uint32),
                             "right_raw": np.zeros(0, np.uint32)})
    return pd.DataFrame({"frame": columns["frame"][sack["row"]], "left_raw": sack["left_raw"],
                         "right_raw": sack["right_raw"]})


def _empty_tables() -> FlowTables:
    packets = pd.DataFrame({name: np.zeros(0, dtype=np.int64) for name in PACKET_COLUMNS})
    return FlowTables(packets, pd.DataFrame({"id": np.zeros(0, dtype=np.int64)}),
                      _sack_table({}, {}))
