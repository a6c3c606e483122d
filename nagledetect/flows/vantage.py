"""Where the capture was taken, and the round-trip time on each side of the tap.

From the handshake: SYN -> SYN/ACK is the round trip between the tap and the server, SYN/ACK ->
ACK the round trip between the tap and the client (the SYN and SYN/ACK each answered, where
one was sent again; `HandshakeTimes`). From the data: the smallest lag from a data
segment to the first ACK that covers it, per direction (delayed ACKs only make lags longer, so
the minimum is the round trip). A receiver holds an ACK 500 ms at most (RFC 1122, 4.2.3.2); a
longer lag is taken as idle time, not a round trip: the receiver had nothing to say, and its
ACK went out with whatever it said after the pause (or the capture missed the ACK), and it is
left out. (A path of more than half a second of round trip, rare, then shows its round trip
only in a handshake.) A busy host answers a SYN late, so where both are known the smaller one
is taken.

A side whose round trip is under a third of the total holds the tap: "client" or "server";
otherwise "middle". Each round trip includes the far host's reaction (tens of microseconds,
a few hundred on a busy host): where neither side's round trip is longer than half a
millisecond, both may be reactions alone, the tap's place cannot be told and it is "unknown".
"""

from __future__ import annotations

import numpy as np

from nagledetect.flows.connections import FLAG_ACK, FLAG_FIN, FLAG_RST, FLAG_SYN, rtt_sources
from nagledetect.flows.grouped import first_per_key, group_starts, last_per_key

NEAR_SIDE_SHARE = 1 / 3
MAX_ACK_DELAY_US = 500_000
"""The longest a receiver may hold an ACK (RFC 1122, 4.2.3.2): a longer lag is idle time."""
DISTINCT_ROUND_TRIP_US = 500
"""A tap-side round trip no longer than this may be the far host's reaction alone."""
VALUE_SPAN = 1 << 40
NOT_YET = np.iinfo(np.int64).max


class AckLags:
    """Smallest data -> covering-ACK lag per direction group (-1 where none was seen), from
    packets given a run at a time (a whole capture's at once, or a part's slice by slice).

    Group g holds connection g // 2, direction g % 2, and the ACKs for group g's data are in
    group g ^ 1. A segment's covering ACK is the first of the peer's ACKs, in file order, whose
    running highest ACK reaches the segment's end, and counts when it is not earlier in time.
    Cumulative ACKs are made monotone per group and offset by group so one `searchsorted`
    serves every group at once. Across runs, a segment waits for its ACK (its group, end and
    time are carried), and a segment whose ACK came in an earlier run looks it up among the
    ACKs that raised each group's highest ACK there (`_raised`): only those not earlier than
    every packet still to come can give a lag, so the others are kept as one boundary a run of
    them, and in a capture in time order only the latest few are kept.
    """

    def __init__(self, group_count: int) -> None:
        self._smallest_us = np.full(group_count, NOT_YET, dtype=np.int64)
        self._highest_ack = np.full(group_count, -1, dtype=np.int64)
        self._waiting = _rows("group", "end", "time_us")
        self._raised = _rows("key", "group", "time_us")
        self._acked = False
        """Whether an ACK came in an earlier run (else nothing before can answer a segment)."""

    @property
    def smallest_us(self) -> np.ndarray:
        return np.where(self._smallest_us == NOT_YET, -1, self._smallest_us)

    def add(self, view: dict[str, np.ndarray], group: np.ndarray,
            later_from_us: int | None = None) -> None:
        """Packets in direction order (`group` ascending), following those given before;
        `later_from_us`: no packet given later is earlier than this (None: none will come)."""
        group = group.astype(np.int64, copy=False)
        ack_rows = np.flatnonzero(view["rel_ack"] >= 0)
        ack_group = group[ack_rows]
        key = np.maximum.accumulate(ack_group * VALUE_SPAN
                                    + np.clip(view["rel_ack"][ack_rows], 0, VALUE_SPAN - 1))
        acks = {"key": key, "group": ack_group,
                "time_us": view["time_us"][ack_rows].astype(np.int64, copy=False)}
        data_rows = np.flatnonzero(view["payload_bytes"] > 0)
        data = {"group": group[data_rows],
                "end": np.clip(view["rel_seq"][data_rows]
                               + view["payload_bytes"][data_rows].astype(np.int64), 0, VALUE_SPAN - 1),
                "time_us": view["time_us"][data_rows].astype(np.int64, copy=False)}
        if self._acked:  # a segment acknowledged already looks its ACK up among those kept
            acked_before = data["end"] <= self._highest_ack[data["group"] ^ 1]
            self._answered(self._raised, _picked(data, acked_before))
            data = _picked(data, ~acked_before)
        still_waiting = [_picked(rows, ~self._answered(acks, rows))
                         for rows in (self._waiting, data)]
        self._waiting = {name: np.concatenate([rows[name] for rows in still_waiting])
                         for name in self._waiting}
        if later_from_us is not None:
            self._remember(acks, later_from_us)
        if len(key):
            last = np.append(ack_group[1:] != ack_group[:-1], True)
            highest = ack_group[last]
            self._highest_ack[highest] = np.maximum(self._highest_ack[highest],
                                                    key[last] - highest * VALUE_SPAN)
            self._acked = True

    def _answered(self, acks: dict[str, np.ndarray], data: dict[str, np.ndarray]) -> np.ndarray:
        """Note the lags of the segments whose covering ACK is among `acks` (keys ascending);
        returns which segments it is among them."""
        if not len(acks["key"]):
            return np.zeros(len(data["group"]), dtype=bool)
        peer = data["group"] ^ 1
        found = np.searchsorted(acks["key"], peer * VALUE_SPAN + data["end"], side="left")
        np.minimum(found, len(acks["key"]) - 1, out=found)
        answered = (acks["group"][found] == peer) & (acks["key"][found] >= peer * VALUE_SPAN
                                                     + data["end"])
        lag = acks["time_us"][found] - data["time_us"]
        counted = answered & (lag >= 0) & (lag <= MAX_ACK_DELAY_US)
        self._note_smallest(data["group"][counted], lag[counted])
        return answered

    def _note_smallest(self, group: np.ndarray, lag_us: np.ndarray) -> None:
        """Lower each group's smallest lag to these (one reduction a run of equal groups where
        the groups ascend, as a run's own segments do in direction order)."""
        if len(group) and (group[1:] >= group[:-1]).all():
            first = np.flatnonzero(group_starts(group))
            np.minimum.at(self._smallest_us, group[first], np.minimum.reduceat(lag_us, first))
        else:
            np.minimum.at(self._smallest_us, group, lag_us)

    def _remember(self, acks: dict[str, np.ndarray], later_from_us: int) -> None:
        """Keep the ACKs that raised a group's highest ACK here (beside those kept before),
        each run of those earlier than `later_from_us` as its last one, timed never."""
        key, group = acks["key"], acks["group"]
        raised = np.ones(len(key), dtype=bool)
        raised[1:] = key[1:] != key[:-1]
        raised &= key - group * VALUE_SPAN > self._highest_ack[group]
        kept = {name: np.concatenate((self._raised[name], acks[name][raised]))
                for name in self._raised}
        order = np.argsort(kept["key"], kind="stable")
        kept = {name: values[order] for name, values in kept.items()}
        kept["time_us"][kept["time_us"] < later_from_us] = NEVER
        never = kept["time_us"] == NEVER
        followed = np.zeros(len(never), dtype=bool)
        followed[:-1] = never[1:] & (kept["group"][1:] == kept["group"][:-1])
        self._raised = _picked(kept, ~(never & followed))

NEVER = np.iinfo(np.int64).min // 2
"""The time of a kept ACK that no packet still to come can follow: it gives no lag."""


def _rows(*names: str) -> dict[str, np.ndarray]:
    return {name: np.zeros(0, dtype=np.int64) for name in names}


def _picked(rows: dict[str, np.ndarray], chosen: np.ndarray) -> dict[str, np.ndarray]:
    return {name: values[chosen] for name, values in rows.items()}


def ack_lags_us(view: dict[str, np.ndarray], group: np.ndarray, group_count: int) -> np.ndarray:
    """Smallest data -> covering-ACK lag per direction group of packets given at once (see
    `AckLags`)."""
    lags = AckLags(group_count)
    lags.add(view, group)
    return lags.smallest_us


class HandshakeTimes:
    """Per connection, where the handshake's two round trips begin and end (-1 where unseen),
    from packets in file order given a run at a time (`times_us`): the SYN answered (the latest
    before the first SYN/ACK: a SYN sent again is the one the SYN/ACK answers), the first
    SYN/ACK, the SYN/ACK answered (the latest before the client's first pure ACK after one,
    none where the client sent its SYN again after it: it had not arrived) and that ACK. Only
    a pure ACK (no data, FIN or RST) is the handshake's third packet: a later packet standing
    in for one the capture missed lags by the client's pause, not by a round trip. Also the
    client's first pure ACK after a SYN and the latest SYN before it ("unanswered_syn",
    "unanswered_ack"): where the capture misses the SYN/ACK, the whole round trip."""

    def __init__(self, count: int) -> None:
        self.times_us = {name: np.full(count, -1, dtype=np.int64)
                         for name in ("syn", "syn_ack", "answered_syn_ack", "ack",
                                      "unanswered_syn", "unanswered_ack")}

    def add(self, flags: np.ndarray, direction: np.ndarray, connection: np.ndarray,
            time_us: np.ndarray, payload_bytes: np.ndarray) -> None:
        """Packets in file order, following those given before."""
        times = self.times_us
        count = len(times["syn"])
        connection = connection.astype(np.int64, copy=False)
        latest_syn_before = times["syn"].copy()
        handshake_flags = flags & (FLAG_SYN | FLAG_ACK)
        syn_ack_rows = np.flatnonzero(handshake_flags == (FLAG_SYN | FLAG_ACK))
        first_syn_ack = first_per_key(connection, syn_ack_rows, count)
        earlier_syn_ack = times["syn_ack"] >= 0
        syn_rows = np.flatnonzero(handshake_flags == FLAG_SYN)
        _note_last(times["syn"], connection, time_us,
                   _before(syn_rows, connection, first_syn_ack, ~earlier_syn_ack))
        fresh = ~earlier_syn_ack & (first_syn_ack >= 0)
        times["syn_ack"][fresh] = time_us[first_syn_ack[fresh]]
        pure_acks = np.flatnonzero(
            ((flags & (FLAG_SYN | FLAG_ACK | FLAG_FIN | FLAG_RST)) == FLAG_ACK)
            & (payload_bytes == 0) & (direction == 0))
        after_syn_ack = earlier_syn_ack[connection[pure_acks]] | (
            (first_syn_ack[connection[pure_acks]] >= 0)
            & (pure_acks > first_syn_ack[connection[pure_acks]]))
        ack = first_per_key(connection, pure_acks[after_syn_ack], count)
        waiting = times["ack"] < 0
        answered = last_per_key(connection, _before(syn_ack_rows, connection, ack, waiting), count)
        present = answered >= 0
        times["answered_syn_ack"][present] = time_us[answered[present]]
        syn_again = last_per_key(connection, _before(syn_rows, connection, ack, waiting), count)
        times["answered_syn_ack"][syn_again > answered] = -1
        found = waiting & (ack >= 0)
        times["ack"][found] = time_us[ack[found]]
        self._unanswered(pure_acks, syn_rows, connection, time_us, latest_syn_before)

    def _unanswered(self, pure_acks: np.ndarray, syn_rows: np.ndarray, connection: np.ndarray,
                    time_us: np.ndarray, latest_syn_before: np.ndarray) -> None:
        """The client's first pure ACK after a SYN, and the latest SYN before it (SYN/ACKs
        aside: `vantage_table` keeps the pair only where none came). `latest_syn_before`:
        each connection's latest SYN in the packets given before (while no SYN/ACK came, the
        latest of all)."""
        times = self.times_us
        count = len(latest_syn_before)
        first_syn = first_per_key(connection, syn_rows, count)
        key = connection[pure_acks]
        after_syn = (latest_syn_before[key] >= 0) | (
            (first_syn[key] >= 0) & (pure_acks > first_syn[key]))
        ack = first_per_key(connection, pure_acks[after_syn], count)
        found = (times["unanswered_ack"] < 0) & (ack >= 0)
        syn = last_per_key(connection, _before(syn_rows, connection, ack, found), count)
        times["unanswered_syn"][found] = np.where(syn >= 0, time_us[np.maximum(syn, 0)],
                                                  latest_syn_before)[found]
        times["unanswered_ack"][found] = time_us[ack[found]]


def _before(rows: np.ndarray, connection: np.ndarray, limit: np.ndarray, open_: np.ndarray
            ) -> np.ndarray:
    """The `rows` of connections still `open_` that come before their connection's `limit`
    row (all of them where it has none, -1)."""
    key = connection[rows]
    return rows[open_[key] & ((limit[key] < 0) | (rows < limit[key]))]


def _note_last(times_us: np.ndarray, connection: np.ndarray, time_us: np.ndarray,
               rows: np.ndarray) -> None:
    """Write the time of each connection's last of `rows` into `times_us`."""
    last = last_per_key(connection, rows, len(times_us))
    present = last >= 0
    times_us[present] = time_us[last[present]]


def _smaller_known(first_us: np.ndarray, second_us: np.ndarray) -> np.ndarray:
    """The smaller of two round-trip estimates where both are known (-1 = unknown)."""
    both = (first_us >= 0) & (second_us >= 0)
    return np.where(both, np.minimum(first_us, second_us), np.maximum(first_us, second_us))


def vantage_table(handshake_times_us: dict[str, np.ndarray], lags_us: np.ndarray
                  ) -> dict[str, np.ndarray]:
    """Columns per connection: RTT to the client side and to the server side of the tap, and
    vantage (`handshake_times_us`: `HandshakeTimes.times_us`)."""
    client_data_lag = lags_us[0::2]
    server_data_lag = lags_us[1::2]
    syn, syn_ack, answered, ack, unanswered_syn, unanswered_ack = (
        handshake_times_us[name] for name in ("syn", "syn_ack", "answered_syn_ack", "ack",
                                              "unanswered_syn", "unanswered_ack"))
    server_leg = np.where((syn >= 0) & (syn_ack >= syn), syn_ack - syn, -1)
    client_leg = np.where((answered >= 0) & (ack >= answered), ack - answered, -1)
    has_handshake = (server_leg >= 0) & (client_leg >= 0)
    server_side = _smaller_known(server_leg, client_data_lag)
    client_side = _smaller_known(client_leg, server_data_lag)
    known = (server_side >= 0) & (client_side >= 0)
    unsplit = np.where((syn_ack < 0) & (unanswered_syn >= 0) & (unanswered_ack >= unanswered_syn),
                       unanswered_ack - unanswered_syn, -1)
    one_way = ~known & (unsplit >= 0)
    total = np.where(known, server_side + client_side, unsplit)
    vantage = np.full(len(total), "unknown", dtype=object)
    middle = known & (np.maximum(server_side, client_side) > DISTINCT_ROUND_TRIP_US)
    vantage[middle] = "middle"
    vantage[middle & (client_side < NEAR_SIDE_SHARE * total)] = "client"
    vantage[middle & (server_side < NEAR_SIDE_SHARE * total)] = "server"
    return {
        "rtt_client_side_ms": np.where(client_side >= 0, client_side / 1000, np.nan),
        "rtt_server_side_ms": np.where(server_side >= 0, server_side / 1000, np.nan),
        "rtt_ms": np.where(known | one_way, total / 1000, np.nan),
        "rtt_source": rtt_sources(has_handshake, known, one_way),
        "vantage": vantage,
    }
