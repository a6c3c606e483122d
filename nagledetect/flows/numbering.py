"""Pass 2 over packets read a slice at a time: each packet's direction, relative numbers, role,
scaled window and wire segments, as a whole run gives them (docs/performance.md, "The
twentieth round").

Pass 1 (`facts`) says which endpoint is each connection's client, each direction's ISN and the
handshake. A slice's packets are then put in direction order and numbered by the whole run's
rules (`sequence`, `roles`, `build`); each direction group goes on from what its packets before
the cut left: its latest raw and relative sequence and ACK numbers, the highest end it sent,
its latest packet's window, payload and flags (which the peer's roles read) and when it last
advanced the stream. That is a few values a direction, whatever the connection's length,
and the segments still waiting for their ACK (`vantage.AckLags`).
"""

from __future__ import annotations

from dataclasses import fields
from functools import partial

import numpy as np
import pandas as pd

from nagledetect.flows.build import PACKET_COLUMNS, peer_values, scaled_window, wire_segments
from nagledetect.flows.connections import FLAG_ACK
from nagledetect.flows.facts import ConnectionFacts, KeyedColumns
from nagledetect.flows.grouped import group_starts
from nagledetect.flows.roles import NONE_YET, DirectionsBefore, assign_roles, sequence_ends
from nagledetect.flows.sequence import NO_ACK, Latest, relative_ack, relative_sequence
from nagledetect.flows.vantage import AckLags, HandshakeTimes, vantage_table

HANDSHAKE_COLUMNS = ("window_scale_client", "window_scale_server", "window_scaling",
                     "effective_mss", "frame_payload_limit_bytes")
"""The connection table's columns that scale windows and count wire segments."""
DIRECTION_MISSING = {"seen": False, "max_end": NONE_YET, "rel_seq": NONE_YET, "rel_ack": NO_ACK,
                     "window_raw": -1, "payload_bytes": -1, "flags": -1, "advance_us": 0,
                     "seq_raw": 0, "ack_seen": False, "ack_raw": 0, "ack_relative": 0}
"""Per direction group: `DirectionsBefore`, then what unwrapping sequence and ACK numbers
goes on from."""
VIEW_COLUMNS = ("flags", "seq_raw", "ack_raw", "payload_bytes", "window_raw", "time_us")


class PacketsBySlice:
    """Pass 2: feed the slices in file order to `add`, each with what pass 1 said of it."""

    def __init__(self, facts: ConnectionFacts) -> None:
        self._facts = facts
        self._handshake = {name: facts.table[name].to_numpy() for name in HANDSHAKE_COLUMNS}
        self._directions = KeyedColumns(DIRECTION_MISSING)
        self._directions.grow(len(facts.isn_raw))
        self._ack_lags = AckLags(len(facts.isn_raw))
        self._handshake_times = HandshakeTimes(len(facts.table))
        self._slices = 0

    def add(self, columns: dict[str, np.ndarray], connection: np.ndarray,
            source_is_low: np.ndarray) -> dict[str, np.ndarray]:
        """The packet columns (`build.PACKET_COLUMNS`, file order) of the next slice, given
        the connection and source side pass 1 gave each of its packets."""
        direction = (source_is_low != self._facts.client_is_low[connection]).view(np.uint8)
        group = connection.astype(np.int64) * 2 + direction
        order = np.argsort(group, kind="stable")
        in_order = group[order]
        starts = group_starts(in_order)
        view = {name: columns[name][order] for name in VIEW_COLUMNS}
        self._numbered(view, in_order, starts)
        before = self._before()
        ends = sequence_ends(view, starts, in_order, before)
        role = assign_roles(view, starts, partial(peer_values, view, order, in_order,
                                                  before=before), in_order, before, ends)
        self._note(view, in_order, ends)
        self._ack_lags.add(view, in_order, int(self._facts.later_from_us[self._slices]))
        self._slices += 1
        self._handshake_times.add(columns["flags"], direction, connection, columns["time_us"],
                                  columns["payload_bytes"])
        packets = {name: columns[name] for name in PACKET_COLUMNS if name in columns}
        packets["connection"] = connection.astype(np.int32)
        packets["direction"] = direction
        for name, values in (("rel_seq", view["rel_seq"]), ("rel_ack", view["rel_ack"]),
                             ("role", role)):
            packets[name] = np.empty_like(values)
            packets[name][order] = values
        packets["window_bytes"] = scaled_window(columns, group, self._handshake)
        packets["wire_segments"], packets["super_segment"] = wire_segments(packets, self._handshake)
        return {name: packets[name] for name in PACKET_COLUMNS}

    def connections(self) -> pd.DataFrame:
        """The connection table a whole run makes, once every slice has been added: pass 1's
        with the round trips and vantage, which read the numbered packets."""
        vantage = vantage_table(self._handshake_times.times_us, self._ack_lags.smallest_us)
        return self._facts.table.assign(**vantage)

    def _before(self) -> DirectionsBefore:
        return DirectionsBefore(**{field.name: self._directions[field.name]
                                   for field in fields(DirectionsBefore)})

    def _numbered(self, view: dict[str, np.ndarray], group: np.ndarray,
                  starts: np.ndarray) -> None:
        """Relative sequence and ACK numbers, in direction order, going on from each group's
        latest before the slice."""
        directions = self._directions
        isn = self._facts.isn_raw
        view["rel_seq"] = relative_sequence(
            view["seq_raw"], starts, isn[group[starts]], group,
            Latest(directions["seen"], directions["seq_raw"], directions["rel_seq"]))
        view["rel_ack"] = relative_ack(
            view["ack_raw"], (view["flags"] & FLAG_ACK) != 0, group, isn[group ^ 1],
            Latest(directions["ack_seen"], directions["ack_raw"], directions["ack_relative"]))

    def _note(self, view: dict[str, np.ndarray], group: np.ndarray,
              ends: tuple[np.ndarray, np.ndarray]) -> None:
        """What each group's packets of this slice leave for the next (`ends`: their
        `sequence_ends`)."""
        directions = self._directions
        end, max_end_before = ends
        last = _last_of_runs(group, np.arange(len(group)))
        latest = group[last]
        directions["seen"][latest] = True
        directions["max_end"][latest] = np.maximum(max_end_before[last], end[last])
        for name in ("rel_seq", "rel_ack", "window_raw", "payload_bytes", "flags", "seq_raw"):
            directions[name][latest] = view[name][last]
        advanced = _last_of_runs(group, np.flatnonzero(end > max_end_before))
        directions["advance_us"][group[advanced]] = view["time_us"][advanced]
        acked = _last_of_runs(group, np.flatnonzero(view["rel_ack"] != NO_ACK))
        directions["ack_seen"][group[acked]] = True
        directions["ack_raw"][group[acked]] = view["ack_raw"][acked]
        directions["ack_relative"][group[acked]] = view["rel_ack"][acked]


def _last_of_runs(group: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """The last of `rows` (ascending, over `group` ascending) in each group they touch."""
    runs = group[rows]
    last = np.ones(len(rows), dtype=bool)
    last[:-1] = runs[1:] != runs[:-1]
    return rows[last]
