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
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from nagledetect.flows.grouped import group_first_positions, group_starts
from nagledetect.table import Table

if TYPE_CHECKING:
    import pandas as pd

FLAG_FIN = 0x01
FLAG_SYN = 0x02
FLAG_RST = 0x04
FLAG_ACK = 0x10
PORT_REUSE_SILENCE_US = 300 * 1_000_000
EPHEMERAL_PORT_START = 49152

PortsAt = Callable[[np.ndarray], tuple[np.ndarray, np.ndarray]]


def split_port_reuse(pair: np.ndarray, pair_first: np.ndarray, flags: np.ndarray,
                     seq_raw: np.ndarray, time_us: np.ndarray, stream: np.ndarray | None = None
                     ) -> tuple[np.ndarray, np.ndarray]:
    """Connection number per packet (file order): 4-tuples split where a new lifetime starts,
    connections numbered in order of their first packet in the file (as Wireshark); and each
    connection's first packet.

    `pair` numbers the 4-tuples in order of their first packet, at `pair_first` (as
    `EndpointPairs` does), so without port reuse the connection is the pair. Only a pair with
    a SYN after its first packet can be reused: the lifetime test runs on its packets alone.
    Packets that carry their conversation's number in the unfiltered file (`stream`, see
    `flows.streams`) are split where it changes instead: their SYNs may be filtered out.
    """
    if stream is not None:
        starts = stream_changes(pair, stream)
        if not len(starts):
            return pair, pair_first
        reusable = np.zeros(len(pair_first), dtype=bool)
        reusable[pair[starts]] = True
        return _numbered_by_first_packet(pair, pair_first, starts,
                                         np.flatnonzero(reusable[pair]))
    syn_rows = np.flatnonzero((flags & (FLAG_SYN | FLAG_ACK)) == FLAG_SYN)
    later_syns = syn_rows[syn_rows != pair_first[pair[syn_rows]]]
    if not len(later_syns):
        return pair, pair_first
    reusable = np.zeros(len(pair_first), dtype=bool)
    reusable[pair[later_syns]] = True
    rows = np.flatnonzero(reusable[pair])
    lifetime_starts = rows[new_lifetimes(pair[rows], flags[rows], seq_raw[rows], time_us[rows])]
    if not len(lifetime_starts):
        return pair, pair_first
    return _numbered_by_first_packet(pair, pair_first, lifetime_starts, rows)


def stream_changes(pair: np.ndarray, stream: np.ndarray,
                   stream_before: np.ndarray | None = None) -> np.ndarray:
    """Positions (ascending) of the packets whose stream differs from that of their pair's
    packet before them (`stream_before`, by pair: the stream of its latest packet before these
    rows, -1 for none)."""
    order = np.argsort(pair, kind="stable")
    sorted_pair = pair[order]
    sorted_stream = stream[order]
    previous = np.empty_like(sorted_stream)
    previous[1:] = sorted_stream[:-1]
    starts = group_starts(sorted_pair)
    previous[starts] = (-1 if stream_before is None
                        else stream_before[sorted_pair[starts]])
    return np.sort(order[(previous >= 0) & (previous != sorted_stream)])


@dataclass
class PairsBefore:
    """What the lifetime rule needs of each 4-tuple's packets before the rows it is given (a
    part read a slice at a time), indexed by pair number."""

    seen: np.ndarray
    """bool: the pair has packets before (so its first row given is not its first packet)."""
    syn_seq: np.ndarray
    """int64: the sequence number of its latest SYN, -1 where it had none."""
    closed: np.ndarray
    """bool: a FIN or RST since its latest SYN (or since its first packet, without one)."""
    last_us: np.ndarray
    """int64: the time of its latest packet."""


def new_lifetimes(pair: np.ndarray, flags: np.ndarray, seq_raw: np.ndarray, time_us: np.ndarray,
                  before: PairsBefore | None = None) -> np.ndarray:
    """Positions (ascending) of the SYNs that start a new lifetime of their 4-tuple: a new ISN
    after a FIN or RST since the 4-tuple's previous SYN, or after a long silence. The rows hold
    every packet of their pairs from the first (`before` is None), or every packet after
    those `before` tells of."""
    order = np.argsort(pair, kind="stable")
    sorted_pair = pair[order]
    sorted_flags = flags[order]
    sorted_seq = seq_raw[order].astype(np.int64)
    sorted_time = time_us[order]
    starts = group_starts(sorted_pair)
    is_syn_only = (sorted_flags & (FLAG_SYN | FLAG_ACK)) == FLAG_SYN
    closing = ((sorted_flags & (FLAG_FIN | FLAG_RST)) != 0).astype(np.int64)
    closings_before = np.cumsum(closing) - closing
    seen = np.zeros(len(order), dtype=bool) if before is None else before.seen[sorted_pair]
    syn_positions = np.flatnonzero(is_syn_only & (~starts | seen))
    previous = _previous_syn_position(is_syn_only, starts)[syn_positions]
    group_first = group_first_positions(starts)[syn_positions]
    has_previous = previous >= 0
    safe_previous = np.maximum(previous, 0)
    earlier = _before_rows(before, sorted_pair[syn_positions])
    closed_between = np.where(
        has_previous,
        closings_before[syn_positions] > closings_before[safe_previous] + closing[safe_previous],
        (closings_before[syn_positions] > closings_before[group_first]) | earlier.closed)
    previous_seq = np.where(has_previous, sorted_seq[safe_previous], earlier.syn_seq)
    new_isn = (previous_seq < 0) | (sorted_seq[syn_positions] != previous_seq)
    previous_us = np.where(syn_positions == group_first, earlier.last_us,
                           sorted_time[np.maximum(syn_positions - 1, 0)])
    silence = (sorted_time[syn_positions] - previous_us) > PORT_REUSE_SILENCE_US
    return np.sort(order[syn_positions[new_isn & (closed_between | silence)]])


def _before_rows(before: PairsBefore | None, pair: np.ndarray) -> PairsBefore:
    """What `before` says of each of `pair` (nothing seen where it is None)."""
    if before is None:
        count = len(pair)
        return PairsBefore(np.zeros(count, dtype=bool), np.full(count, -1, dtype=np.int64),
                           np.zeros(count, dtype=bool), np.zeros(count, dtype=np.int64))
    return PairsBefore(before.seen[pair], before.syn_seq[pair], before.closed[pair],
                       before.last_us[pair])


def _previous_syn_position(is_syn_only: np.ndarray, starts: np.ndarray) -> np.ndarray:
    """For each position, the position of the previous SYN in the same 4-tuple (-1 if none)."""
    positions = np.where(is_syn_only, np.arange(len(is_syn_only)), -1)
    latest = np.maximum.accumulate(positions)
    shifted = np.concatenate(([-1], latest[:-1]))
    group_first = group_first_positions(starts)
    return np.where(shifted >= group_first, shifted, -1)


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
    in_lifetime, lifetime = latest_lifetime(pair, rows, lifetime_starts)
    connection[rows[in_lifetime]] = number[len(pair_first) + lifetime]
    return connection, first_packets[by_position]


def latest_lifetime(pair: np.ndarray, rows: np.ndarray, lifetime_starts: np.ndarray
                    ) -> tuple[np.ndarray, np.ndarray]:
    """For the packets at `rows`: whether a lifetime of their pair starts at or before them
    among `lifetime_starts` (positions of SYNs), and, where one does, the index in
    `lifetime_starts` of the latest."""
    lifetime_pair = pair[lifetime_starts].astype(np.int64)
    by_pair = np.lexsort((lifetime_starts, lifetime_pair))
    span = np.int64(len(pair))
    found = np.searchsorted(lifetime_pair[by_pair] * span + lifetime_starts[by_pair],
                            pair[rows].astype(np.int64) * span + rows, side="right") - 1
    in_lifetime = (found >= 0) & (lifetime_pair[by_pair][np.maximum(found, 0)] == pair[rows])
    return in_lifetime, by_pair[found[in_lifetime]]


def client_is_source(connection: np.ndarray, first_rows: np.ndarray, flags: np.ndarray,
                     src_is_low: np.ndarray, ports_at: PortsAt) -> tuple[np.ndarray, np.ndarray]:
    """Per packet: does it go client -> server; per connection: was the client guessed (see
    `client_is_low`; `ports_at(rows)`: the source and destination ports of those packets)."""
    count = len(first_rows)
    senders = []
    for wanted in (FLAG_SYN, FLAG_SYN | FLAG_ACK):
        rows = np.flatnonzero((flags & (FLAG_SYN | FLAG_ACK)) == wanted)
        conn, first = np.unique(connection[rows], return_index=True)
        sender_is_low = np.full(count, -1, dtype=np.int8)
        sender_is_low[conn] = src_is_low[rows[first]]
        senders.append(sender_is_low)
    low, guessed = client_is_low(*senders, src_is_low[first_rows],
                                 lambda chosen: ports_at(first_rows[chosen]))
    return src_is_low == low[connection], guessed


def client_is_low(syn_sender_is_low: np.ndarray, syn_ack_sender_is_low: np.ndarray,
                  first_sender_is_low: np.ndarray, first_ports: PortsAt
                  ) -> tuple[np.ndarray, np.ndarray]:
    """Per connection: is the client its lower endpoint, and was that guessed.

    The sender of the connection's first SYN is the client, else the receiver of its first
    SYN/ACK (`*_sender_is_low`: whether that packet's source is the lower endpoint, -1 where
    the connection has none), else the port rule decides on its first packet
    (`first_ports(chosen)`: the source and destination ports of the chosen connections' first
    packets).
    """
    guessed = (syn_sender_is_low < 0) & (syn_ack_sender_is_low < 0)
    low = np.where(syn_sender_is_low >= 0, syn_sender_is_low == 1, syn_ack_sender_is_low == 0)
    low[guessed] = first_sender_is_low[guessed] == _client_by_port_rule(*first_ports(guessed))
    return low, guessed


def _client_by_port_rule(first_src_port: np.ndarray, first_dst_port: np.ndarray) -> np.ndarray:
    """True where the first packet's sender is judged the client by the documented port rule."""
    src_ephemeral = first_src_port >= EPHEMERAL_PORT_START
    dst_ephemeral = first_dst_port >= EPHEMERAL_PORT_START
    by_range = src_ephemeral != dst_ephemeral
    return np.where(by_range, src_ephemeral,
                    np.where(first_src_port == first_dst_port, True, first_src_port > first_dst_port))



def by_connection(connections: Table | pd.DataFrame, column: str,
                  connection: np.ndarray) -> np.ndarray:
    """`column` of the connection table for each connection id in `connection`: by position
    when the ids are the row numbers (as `build_flows` and the core number them), else by id
    (every id asked for must be in the table)."""
    ids = np.asarray(connections["id"])
    values = np.asarray(connections[column])
    if _ids_are_positions(ids):
        if len(connection) and not (0 <= connection.min() and connection.max() < len(ids)):
            raise KeyError("connection ids that are not in the connection table")
        return values[connection]
    order = np.argsort(ids, kind="stable")
    at = order[np.minimum(np.searchsorted(ids, connection, sorter=order), len(ids) - 1)]
    if len(connection) and not (ids[at] == connection).all():
        raise KeyError("connection ids that are not in the connection table")
    return values[at]


def _ids_are_positions(ids: np.ndarray) -> bool:
    """Whether each connection's id is its row number, as `build_flows` numbers them."""
    return bool(len(ids) and ids[0] == 0 and ids[-1] == len(ids) - 1
                and (np.diff(ids) == 1).all())


def direction_key(table: Table | pd.DataFrame) -> np.ndarray:
    """Each row's connection direction as one number, connection * 2 + direction (the order
    of direction groups everywhere), from a table's connection and direction columns."""
    return np.asarray(table["connection"]).astype(np.int64) * 2 + np.asarray(table["direction"])


def rtt_sources(from_handshake: np.ndarray, known: np.ndarray, one_way: np.ndarray
                ) -> np.ndarray:
    """Where each connection's round trip comes from: both legs of the handshake; ACK lags
    (both sides of the tap known); the SYN to its sender's ACK where the capture missed the
    SYN/ACK (the whole round trip, not split at the tap); none."""
    return np.where(from_handshake, "handshake", np.where(
        known, "ack-lag", np.where(one_way, "one-way-handshake", "none")))


def rtt_measured(connections: Table | pd.DataFrame, connection: np.ndarray) -> np.ndarray:
    """Whether the handshake measured the round trip of each connection in `connection` (its
    `rtt_source`, compared once per connection rather than once per row asking)."""
    measured = np.asarray(connections["rtt_source"]) == "handshake"
    return by_connection({"id": connections["id"], "measured": measured}, "measured", connection)


def seen_one_way(packets_to_server: np.ndarray, packets_to_client: np.ndarray) -> np.ndarray:
    """Whether the capture holds only one direction of each connection (from its two packet
    counts)."""
    return (np.asarray(packets_to_server) == 0) | (np.asarray(packets_to_client) == 0)
