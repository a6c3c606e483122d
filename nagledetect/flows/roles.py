"""The role of every packet in its connection: data, pure ACK, retransmission, keep-alive...

Roles follow the meanings Wireshark's TCP analysis gives them, so a user can cross-check a
frame: retransmission (data, SYN or FIN at sequence space already sent), out-of-order (old
sequence space within 3 ms of the segment that last advanced the stream, not ending where the
stream had got to),
keep-alive (one byte or none at next-sequence minus one), zero-window probe (one new byte sent
into a zero window), duplicate ACK (bare ACK repeating the previous ACK and a non-zero window),
window update (same ACK and sequence, new window). RST wins over everything.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from nagledetect.flows.connections import FLAG_FIN, FLAG_RST, FLAG_SYN
from nagledetect.flows.grouped import group_first_positions, grouped_cummax, previous_in_group

ROLES = (
    "data", "pure_ack", "window_update", "dup_ack", "retransmission", "out_of_order",
    "keepalive", "zero_window_probe", "syn", "fin", "rst",
)
ROLE = {name: code for code, name in enumerate(ROLES)}
OUT_OF_ORDER_WINDOW_US = 3_000
NONE_YET = -(1 << 62)

PeerAt = Callable[[np.ndarray], dict[str, np.ndarray]]


@dataclass
class DirectionsBefore:
    """What the role rules read of each direction group's packets before the rows given (a
    part read a slice at a time), indexed by group number (connection * 2 + direction)."""

    seen: np.ndarray
    max_end: np.ndarray
    """The highest sequence end sent (NONE_YET where none)."""
    rel_seq: np.ndarray
    rel_ack: np.ndarray
    window_raw: np.ndarray
    payload_bytes: np.ndarray
    flags: np.ndarray
    """The latest packet's values (the peer's latest, read by the other group)."""
    advance_us: np.ndarray
    """The time of the latest packet that advanced the stream."""


def sequence_ends(direction_view: dict[str, np.ndarray], starts: np.ndarray,
                  group: np.ndarray | None = None, before: DirectionsBefore | None = None
                  ) -> tuple[np.ndarray, np.ndarray]:
    """Each packet's sequence end (SYN and FIN count one) and the highest end its group sent
    before it (NONE_YET for a group's first packet)."""
    flags = direction_view["flags"]
    end = (direction_view["rel_seq"] + direction_view["payload_bytes"].astype(np.int64)
           + ((flags & (FLAG_SYN | FLAG_FIN)) != 0))
    max_end_before = previous_in_group(grouped_cummax(end, starts), starts, NONE_YET)
    if before is not None:
        np.maximum(max_end_before, before.max_end[group], out=max_end_before)
    return end, max_end_before


def assign_roles(direction_view: dict[str, np.ndarray], starts: np.ndarray,
                 peer_at: PeerAt, group: np.ndarray | None = None,
                 before: DirectionsBefore | None = None,
                 ends: tuple[np.ndarray, np.ndarray] | None = None) -> np.ndarray:
    """Role code per packet; inputs are in direction order (connection, direction, time).

    `peer_at(rows)` gives the other direction's latest `window_raw`, `rel_seq`,
    `payload_bytes`, `flags` at those packets' times (-1 when it has sent nothing yet): asked
    only for the few packets whose role depends on the peer (zero-window probe and duplicate
    ACK candidates). `before`: what came before each group's first row here (`group`: each
    row's group number), where the rows continue a part read a slice at a time; `ends`:
    `sequence_ends` of the rows, where the caller has made them already.
    """
    flags = direction_view["flags"]
    payload = direction_view["payload_bytes"].astype(np.int64)
    seq = direction_view["rel_seq"]
    ack = direction_view["rel_ack"]
    window = direction_view["window_raw"].astype(np.int64)
    end, max_end_before = ends or sequence_ends(direction_view, starts, group, before)
    previous = {"seen": ~starts, "rel_ack": previous_in_group(ack, starts, NONE_YET),
                "window_raw": previous_in_group(window, starts, -1),
                "rel_seq": previous_in_group(seq, starts, NONE_YET)}
    if before is not None:
        _continued(previous, starts, group, before)
    has_previous = previous["seen"]
    role = np.full(len(flags), ROLE["pure_ack"], dtype=np.uint8)

    carries_data = payload > 0
    fin_or_syn = (flags & (FLAG_FIN | FLAG_SYN)) != 0
    keepalive = has_previous & (payload <= 1) & (seq == max_end_before - 1) & ~fin_or_syn
    old_data = has_previous & (seq < max_end_before) & ~keepalive
    same_ack = has_previous & (ack == previous["rel_ack"])
    same_window = window == previous["window_raw"]
    same_seq = seq == previous["rel_seq"]
    bare = ~carries_data & ((flags & (FLAG_SYN | FLAG_FIN | FLAG_RST)) == 0)
    probe_rows = np.flatnonzero((payload == 1) & (seq == max_end_before))
    repeat_rows = np.flatnonzero(bare & same_ack & same_window & (window != 0))
    peer = peer_at(np.concatenate((probe_rows, repeat_rows)))  # one search for both
    probes = len(probe_rows)
    into_zero_window = peer["window_raw"][:probes] == 0
    answers_keepalive = ((peer["payload_bytes"][probes:] <= 1)
                         & (ack[repeat_rows] == peer["rel_seq"][probes:] + 1)
                         & ((peer["flags"][probes:] & (FLAG_SYN | FLAG_FIN)) == 0))

    role[carries_data] = ROLE["data"]
    role[bare & same_ack & same_seq & ~same_window] = ROLE["window_update"]
    role[repeat_rows[~answers_keepalive]] = ROLE["dup_ack"]
    role[probe_rows[into_zero_window]] = ROLE["zero_window_probe"]
    role[~carries_data & ((flags & FLAG_FIN) != 0)] = ROLE["fin"]
    role[(flags & FLAG_SYN) != 0] = ROLE["syn"]
    role[(carries_data | fin_or_syn) & old_data] = ROLE["retransmission"]
    old_segments = np.flatnonzero(carries_data & old_data)
    since_advance_us = direction_view["time_us"][old_segments] - _latest_advance_us(
        direction_view["time_us"], starts, end, max_end_before, old_segments,
        None if before is None else before.advance_us[group[old_segments]])
    fills_hole = (end[old_segments] != max_end_before[old_segments]) & (
        since_advance_us < OUT_OF_ORDER_WINDOW_US)
    role[old_segments[fills_hole]] = ROLE["out_of_order"]
    role[keepalive] = ROLE["keepalive"]
    role[(flags & FLAG_RST) != 0] = ROLE["rst"]
    return role


def _continued(previous: dict[str, np.ndarray], starts: np.ndarray, group: np.ndarray,
               before: DirectionsBefore) -> None:
    """The previous packet of each group's first row: the group's latest before, if any."""
    first = np.flatnonzero(starts)
    seen = before.seen[group[first]]
    previous["seen"][first] = seen
    for name, missing in (("rel_ack", NONE_YET), ("window_raw", -1), ("rel_seq", NONE_YET)):
        previous[name][first] = np.where(seen, getattr(before, name)[group[first]], missing)


def _latest_advance_us(time_us: np.ndarray, starts: np.ndarray, end: np.ndarray,
                       max_end_before: np.ndarray, rows: np.ndarray,
                       advance_before_us: np.ndarray | None) -> np.ndarray:
    """At `rows` (old data, never a group's first packet of all): the time of the latest
    segment of its group that advanced the stream (a group's first packet always advances it),
    before these rows where none here did (`advance_before_us`, at `rows`)."""
    advancing = np.flatnonzero(end > max_end_before)
    found = np.searchsorted(advancing, rows, side="right") - 1
    latest = advancing[np.maximum(found, 0)] if len(advancing) else np.zeros(len(rows), dtype=np.int64)
    if advance_before_us is None:
        return time_us[latest]
    group_first = group_first_positions(starts)[rows]
    here = (found >= 0) & (latest >= group_first)
    return np.where(here, time_us[latest], advance_before_us)
