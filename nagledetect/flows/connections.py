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

import numpy as np
import pandas as pd

from nagledetect.flows.grouped import first_occurrences, group_starts

FLAG_FIN = 0x01
FLAG_SYN = 0x02
FLAG_RST = 0x04
FLAG_ACK = 0x10
PORT_REUSE_SILENCE_US = 300 * 1_000_000
EPHEMERAL_PORT_START = 49152


def split_port_reuse(pair: np.ndarray, flags: np.ndarray, seq_raw: np.ndarray,
                     time_us: np.ndarray) -> np.ndarray:
    """Connection number per packet (file order): 4-tuples split where a new lifetime starts."""
    order = np.argsort(pair, kind="stable")
    sorted_pair = pair[order]
    sorted_flags = flags[order]
    starts = group_starts(sorted_pair)
    is_syn_only = (sorted_flags & (FLAG_SYN | FLAG_ACK)) == FLAG_SYN
    closing = (sorted_flags & (FLAG_FIN | FLAG_RST)) != 0
    closings_so_far = np.cumsum(closing)
    syn_positions = np.flatnonzero(is_syn_only & ~starts)
    new_lifetime = np.zeros(len(pair), dtype=bool)
    if len(syn_positions):
        previous_syn = _previous_syn_position(is_syn_only, starts)
        before = previous_syn[syn_positions]
        closed_between = closings_so_far[syn_positions - 1] > np.where(
            before >= 0, closings_so_far[np.maximum(before, 0)], _group_base(closings_so_far,
                                                                            starts)[syn_positions])
        new_isn = (before < 0) | (seq_raw[order][syn_positions] != seq_raw[order][np.maximum(before, 0)])
        silence = (time_us[order][syn_positions] - time_us[order][syn_positions - 1]) > PORT_REUSE_SILENCE_US
        new_lifetime[syn_positions] = new_isn & (closed_between | silence)
    return _numbered_by_first_packet(order, starts | new_lifetime)


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


def _numbered_by_first_packet(order: np.ndarray, first_of_connection: np.ndarray) -> np.ndarray:
    """Connection number per packet (file order), numbered in order of each connection's first
    packet in the file (as Wireshark). `order` sorts the packets by 4-tuple, file order kept
    within each, so a connection's first entry there is its first packet."""
    first_position = order[first_of_connection]
    rank = np.empty(len(first_position), dtype=np.int64)
    rank[np.argsort(first_position)] = np.arange(len(first_position))
    connection = np.empty(len(order), dtype=np.int64)
    connection[order] = rank[np.cumsum(first_of_connection) - 1]
    return connection


def client_is_source(connection: np.ndarray, flags: np.ndarray, src_is_low: np.ndarray,
                     src_port: np.ndarray, dst_port: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per packet: does it go client -> server; per connection: was the client guessed.

    Each connection gets a reference packet whose direction is known (its first SYN, else its
    first SYN/ACK, else its first packet with the port rule); every other packet's direction
    follows from whether it has the same source endpoint as the reference. Connections are
    numbered in order of their first packet, as `split_port_reuse` numbers them.
    """
    count = int(connection.max()) + 1 if len(connection) else 0
    reference = np.full(count, -1, dtype=np.int64)
    reference_from_client = np.zeros(count, dtype=bool)
    syn_only = (flags & (FLAG_SYN | FLAG_ACK)) == FLAG_SYN
    syn_ack = (flags & (FLAG_SYN | FLAG_ACK)) == (FLAG_SYN | FLAG_ACK)
    for mask, from_client in ((syn_only, True), (syn_ack, False)):
        conn, rows = _first_rows(connection, np.flatnonzero(mask), reference)
        reference[conn] = rows
        reference_from_client[conn] = from_client
    guessed = reference < 0
    rows = first_occurrences(connection)[guessed]
    conn = connection[rows]
    reference[conn] = rows
    reference_from_client[conn] = _client_by_port_rule(src_port[rows], dst_port[rows])
    same_source = src_is_low == src_is_low[reference[connection]]
    from_client_side = reference_from_client[connection]
    return np.where(same_source, from_client_side, ~from_client_side), guessed


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
    ids = connections["id"].to_numpy()
    if len(ids) and ids[0] == 0 and ids[-1] == len(ids) - 1 and (np.diff(ids) == 1).all():
        return connections[column].to_numpy()[connection]
    return connections.set_index("id")[column].reindex(connection).to_numpy()
