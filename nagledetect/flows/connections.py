"""Group TCP packets into connections and decide which side is the client.

A connection is a 4-tuple plus a lifetime: a new SYN (with a new initial sequence number) after
a FIN or RST on the same 4-tuple, or after a long silence, starts a new connection (port reuse).

Client and server come from the handshake: the sender of the first SYN is the client; without a
SYN, the receiver of a SYN/ACK is the client. Without either (a capture that starts
mid-connection), the rule is: the endpoint on the lower port is the server when only one port is
below 49152 (the IANA ephemeral range) or, failing that, the lower port is the server; on equal
ports, the sender of the first packet is the client. Such connections are flagged `client_guessed`.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pandas as pd

from nagledetect.flows.grouped import group_starts

FLAG_FIN = 0x01
FLAG_SYN = 0x02
FLAG_RST = 0x04
FLAG_ACK = 0x10
PORT_REUSE_SILENCE_US = 300 * 1_000_000
EPHEMERAL_PORT_START = 49152

PortsAt = Callable[[np.ndarray], tuple[np.ndarray, np.ndarray]]


def split_port_reuse(pair: np.ndarray, pair_first: np.ndarray, flags: np.ndarray,
                     seq_raw: np.ndarray, time_us: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Connection number per packet (file order): 4-tuples split where a new lifetime starts,
    connections numbered in order of their first packet in the file (as Wireshark); and each
    connection's first packet.

    `pair` numbers the 4-tuples in order of their first packet, at `pair_first` (as
    `EndpointPairs` does), so without port reuse the connection is the pair. Only a pair with
    a SYN after its first packet can be reused: the lifetime test runs on its packets alone.
    """
    syn_rows = np.flatnonzero((flags & (FLAG_SYN | FLAG_ACK)) == FLAG_SYN)
    later_syns = syn_rows[syn_rows != pair_first[pair[syn_rows]]]
    if not len(later_syns):
        return pair, pair_first
    reusable = np.zeros(len(pair_first), dtype=bool)
    reusable[pair[later_syns]] = True
    rows = np.flatnonzero(reusable[pair])
    lifetime_starts = rows[_new_lifetimes(pair[rows], flags[rows], seq_raw[rows], time_us[rows])]
    if not len(lifetime_starts):
        return pair, pair_first
    return _numbered_by_first_packet(pair, pair_first, lifetime_starts, rows)


def _new_lifetimes(pair: np.ndarray, flags: np.ndarray, seq_raw: np.ndarray,
                   time_us: np.ndarray) -> np.ndarray:
    """Positions (ascending) of the SYNs that start a new lifetime of their 4-tuple: a new ISN
    after a FIN or RST since the 4-tuple's previous SYN, or after a long silence."""
    order = np.argsort(pair, kind="stable")
    sorted_flags = flags[order]
    starts = group_starts(pair[order])
    is_syn_only = (sorted_flags & (FLAG_SYN | FLAG_ACK)) == FLAG_SYN
    closings_so_far = np.cumsum((sorted_flags & (FLAG_FIN | FLAG_RST)) != 0)
    syn_positions = np.flatnonzero(is_syn_only & ~starts)
    previous_syn = _previous_syn_position(is_syn_only, starts)
    before = previous_syn[syn_positions]
    closed_between = closings_so_far[syn_positions - 1] > np.where(
        before >= 0, closings_so_far[np.maximum(before, 0)], _group_base(closings_so_far,
                                                                        starts)[syn_positions])
    new_isn = (before < 0) | (seq_raw[order][syn_positions] != seq_raw[order][np.maximum(before, 0)])
    silence = (time_us[order][syn_positions] - time_us[order][syn_positions - 1]) > PORT_REUSE_SILENCE_US
    return np.sort(order[syn_positions[new_isn & (closed_between | silence)]])


def _previous_syn_position(is_syn_only: np.ndarray, starts: np.ndarray) -> np.ndarray:
    """For each position, the position of the previous SYN in the same 4-tuple (-1 if none)."""
    positions = np.where(is_syn_only, np.arange(len(is_syn_only)), -1)
    latest = np.maximum.accumulate(positions)
    shifted = np.concatenate(([-1], latest[:-1]))
    group_first = np.maximum.accumulate(np.where(starts, np.arange(len(starts)), 0))
    return np.where(shifted >= group_first, shifted, -1)


def _group_base(running: np.ndarray, starts: np.ndarray) -> np.ndarray:
    """The running total just before each element's group began."""
    first = np.maximum.accumulate(np.where(starts, np.arange(len(starts)), 0))
    return np.where(first > 0, running[first - 1], 0)


def _numbered_by_first_packet(pair: np.ndarray, pair_first: np.ndarray,
                              lifetime_starts: np.ndarray, rows: np.ndarray
                              ) -> tuple[np.ndarray, np.ndarray]:
    """Connection number per packet: each pair's first lifetime starts at its first packet
    (`pair_first`), the others at `lifetime_starts` (ascending file positions, all among
    `rows`); connections are numbered in order of their first packet, which is returned too."""
    first_packets = np.concatenate((pair_first, lifetime_starts))
    by_position = np.argsort(first_packets, kind="stable")
    number = np.empty(len(first_packets), dtype=np.int64)
    number[by_position] = np.arange(len(first_packets))
    connection = number[pair]
    lifetime_pair = pair[lifetime_starts].astype(np.int64)
    by_pair = np.lexsort((lifetime_starts, lifetime_pair))
    span = np.int64(len(pair))
    found = np.searchsorted(lifetime_pair[by_pair] * span + lifetime_starts[by_pair],
                            pair[rows].astype(np.int64) * span + rows, side="right") - 1
    in_pair = (found >= 0) & (lifetime_pair[by_pair][np.maximum(found, 0)] == pair[rows])
    connection[rows[in_pair]] = number[len(pair_first) + by_pair[found[in_pair]]]
    return connection, first_packets[by_position]


def client_is_source(connection: np.ndarray, first_rows: np.ndarray, flags: np.ndarray,
                     src_is_low: np.ndarray, ports_at: PortsAt) -> tuple[np.ndarray, np.ndarray]:
    """Per packet: does it go client -> server; per connection: was the client guessed.

    Each connection gets a reference packet whose direction is known (its first SYN, else its
    first SYN/ACK, else its first packet (`first_rows`) with the port rule, from
    `ports_at(rows)`: the source and destination ports of those packets); every other packet's
    direction follows from whether it has the same source endpoint as the reference.
    """
    count = len(first_rows)
    reference = np.full(count, -1, dtype=np.int64)
    reference_from_client = np.zeros(count, dtype=bool)
    syn_only = (flags & (FLAG_SYN | FLAG_ACK)) == FLAG_SYN
    syn_ack = (flags & (FLAG_SYN | FLAG_ACK)) == (FLAG_SYN | FLAG_ACK)
    for mask, from_client in ((syn_only, True), (syn_ack, False)):
        conn, rows = _first_rows(connection, np.flatnonzero(mask), reference)
        reference[conn] = rows
        reference_from_client[conn] = from_client
    guessed = reference < 0
    rows = first_rows[guessed]
    conn = connection[rows]
    reference[conn] = rows
    reference_from_client[conn] = _client_by_port_rule(*ports_at(rows))
    client_is_low = src_is_low[reference] == reference_from_client
    return src_is_low == client_is_low[connection], guessed


def _first_rows(connection: np.ndarray, rows: np.ndarray,
                reference: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The first of `rows` in each connection that has no reference packet yet."""
    conn, first = np.unique(connection[rows], return_index=True)
    rows = rows[first]
    fresh = reference[conn] < 0
    return conn[fresh], rows[fresh]


def _client_by_port_rule(first_src_port: np.ndarray, first_dst_port: np.ndarray) -> np.ndarray:
    """True where the first packet's sender is judged the client by the documented port rule."""
    src_ephemeral = first_src_port >= EPHEMERAL_PORT_START
    dst_ephemeral = first_dst_port >= EPHEMERAL_PORT_START
    by_range = src_ephemeral != dst_ephemeral
    return np.where(by_range, src_ephemeral,
                    np.where(first_src_port == first_dst_port, True, first_src_port > first_dst_port))



def by_connection(connections: pd.DataFrame, column: str, connection: np.ndarray) -> np.ndarray:
    """`column` of the connection table for each connection id in `connection`: by position
    when the ids are the row numbers (as `build_flows` makes them; a pandas lookup by id costs
    ten times more), else by id."""
    if _ids_are_positions(connections["id"].to_numpy()):
        return connections[column].to_numpy()[connection]
    return connections.set_index("id")[column].reindex(connection).to_numpy()


def _ids_are_positions(ids: np.ndarray) -> bool:
    """Whether each connection's id is its row number, as `build_flows` numbers them."""
    return bool(len(ids) and ids[0] == 0 and ids[-1] == len(ids) - 1
                and (np.diff(ids) == 1).all())


def direction_key(table: pd.DataFrame) -> np.ndarray:
    """Each row's connection direction as one number, connection * 2 + direction (the order
    of direction groups everywhere), from a table's connection and direction columns."""
    return table["connection"].to_numpy().astype(np.int64) * 2 + table["direction"].to_numpy()

