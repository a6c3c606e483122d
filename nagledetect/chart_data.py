"""What the HTML report's charts draw, gathered by the analysis while its tables are at hand.

A capture analysed in parts keeps no packet, message or sample tables, so the charts cannot be
drawn from them afterwards. Each part (or a capture held whole) yields the same small, bounded
summary: distributions as counts that add up across parts and captures, the time-sequence
points of its connections that lost the most time to stalls, and, after the host step, the ACK
delays of the busiest hosts. The reporter only draws them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, TypeVar

import numpy as np

from nagledetect.detectors import nagle_stall
from nagledetect.detectors.model import Finding, HostProfile
from nagledetect.flows.grouped import found_in_sorted, key_order
from nagledetect.table import Table

if TYPE_CHECKING:
    import pandas as pd

MAX_POINTS = 20_000
"""Points of one trace that a browser is asked to draw; more are evenly sampled."""
WORST_CONNECTIONS = 3
"""Connections whose time-sequence graph is drawn: those that lost the most time to stalls."""
MAX_HOST_CHARTS = 6
"""Hosts whose ACK delays (and phase, when tested) are drawn: those with the most samples."""
CLIENT_TO_SERVER = 0
"""A message's direction from the connection's client."""
BINS_PER_DECADE = 100
LOG_EDGES_MS = 10.0 ** (np.arange(-3 * BINS_PER_DECADE, 7 * BINS_PER_DECADE + 1)
                        / BINS_PER_DECADE)
"""Upper edges of the duration bins, 1 us to 10^7 ms: a cumulative count at each edge is exact,
and edges 2.3 % apart draw the same curve as every value would."""


CountsT = TypeVar("CountsT", bound="Counts")


@dataclass
class Counts:
    """How many values fell on each key (a non-negative integer), kept for the keys that have
    some only, in key order. Why sparse: a report over an archive keeps every capture's counts
    until it draws them, and most of a dense histogram's 1,002 bins (or a size count's 1,500)
    are empty: 28 KB a capture of zeros."""

    keys: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    counts: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))

    @classmethod
    def of_keys(cls, keys: np.ndarray) -> Counts:
        found, counts = np.unique(keys.astype(np.int64), return_counts=True)
        return cls(found, counts.astype(np.int64))

    @classmethod
    def total_of(cls: type[CountsT], many: Iterable[Counts]) -> CountsT:
        """All of `many` added up in one pass (one by one, each sum would sort the keys held so
        far again: a report adds thousands of captures' counts)."""
        many = list(many)
        keys = np.concatenate([np.zeros(0, np.int64), *(counts.keys for counts in many)])
        found, where = np.unique(keys, return_inverse=True)
        counts = np.bincount(where, minlength=len(found), weights=np.concatenate(
            [np.zeros(0, np.int64), *(counts.counts for counts in many)]))
        return cls(found, counts.astype(np.int64))

    def __add__(self: CountsT, other: Counts) -> CountsT:
        return self.total_of([self, other])

    def __eq__(self, other: object) -> bool:
        return (type(other) is type(self) and np.array_equal(self.keys, other.keys)
                and np.array_equal(self.counts, other.counts))

    @property
    def total(self) -> int:
        return int(self.counts.sum())

    def fractions_at_or_below(self) -> np.ndarray:
        """The fraction of values at or below each key."""
        return np.cumsum(self.counts) / max(self.total, 1)


class LogHistogram(Counts):
    """Durations counted in LOG_EDGES_MS bins (the keys): bin i holds (edge i-1, edge i], bin 0
    everything up to the first edge, the last bin everything above the last."""

    @classmethod
    def of(cls, values_ms: np.ndarray) -> LogHistogram:
        return cls.of_keys(np.searchsorted(LOG_EDGES_MS, values_ms, side="left"))

    def cdf(self) -> tuple[np.ndarray, np.ndarray]:
        """The fraction of values at or below each edge that closes a non-empty bin."""
        edges = np.r_[LOG_EDGES_MS, LOG_EDGES_MS[-1]]
        return edges[self.keys], self.fractions_at_or_below()


class SizeCounts(Counts):
    """How many data packets carry each payload size (the keys, in bytes): exact."""

    @classmethod
    def of(cls, sizes: np.ndarray) -> SizeCounts:
        return cls.of_keys(sizes)

    def cdf(self) -> tuple[np.ndarray, np.ndarray]:
        """The fraction of packets at or below each size seen."""
        return self.keys, self.fractions_at_or_below()


def sampled_positions(total: int) -> np.ndarray:
    """The positions of a trace's points that are drawn: all of them, or MAX_POINTS evenly
    spaced, the first and the last included."""
    if total > MAX_POINTS:
        return np.linspace(0, total - 1, MAX_POINTS).astype(int)
    return np.arange(total)


@dataclass
class Trace:
    """Up to MAX_POINTS evenly sampled points of one trace, and how many there were."""

    time_s: np.ndarray
    value: np.ndarray
    frame: np.ndarray
    total: int

    @classmethod
    def sampled(cls, time_s: np.ndarray, value: np.ndarray, frame: np.ndarray) -> Trace:
        chosen = sampled_positions(len(time_s))
        return cls(time_s[chosen], value[chosen], frame[chosen], len(time_s))

    def __eq__(self, other: object) -> bool:
        return (isinstance(other, Trace) and self.total == other.total
                and all(np.array_equal(a, b) for a, b in zip(
                    (self.time_s, self.value, self.frame), (other.time_s, other.value, other.frame))))


@dataclass
class TimeSequence:
    """A connection's time-sequence graph: per direction its data segments (sequence end) and
    the other side's ACKs, and the segments a delayed ACK released, with their stalls. Times are
    seconds since the connection's first packet."""

    connection: int
    stall_lost_s: float
    first_frame: int
    data: dict[int, Trace]
    acks: dict[int, Trace]
    released: Trace
    released_stall_ms: np.ndarray

    def __eq__(self, other: object) -> bool:
        return (isinstance(other, TimeSequence) and self.connection == other.connection
                and self.stall_lost_s == other.stall_lost_s and self.data == other.data
                and self.acks == other.acks and self.released == other.released
                and np.array_equal(self.released_stall_ms, other.released_stall_ms))


@dataclass(eq=False)
class HostCharts:
    """The busiest hosts' profiles with their samples (for the phase plot, those whose delayed
    ACKs are locked to a clock tick: a plot of an unlocked host invites a wrong reading), and
    how many hosts there were to pick from."""

    delays: list[HostProfile] = field(default_factory=list)
    phase: list[HostProfile] = field(default_factory=list)
    hosts_with_delays: int = 0
    hosts_with_phase_tests: int = 0
    hosts_locked: int = 0


@dataclass(eq=False)
class ChartData:
    """Everything the HTML charts of one capture draw."""

    exchange_ms: LogHistogram = field(default_factory=LogHistogram)
    stall_ms: LogHistogram = field(default_factory=LogHistogram)
    payload_bytes: SizeCounts = field(default_factory=SizeCounts)
    worst: list[TimeSequence] = field(default_factory=list)
    hosts: HostCharts = field(default_factory=HostCharts)

    def add_counts(self, other: ChartData) -> None:
        """Another part's counts added to these. Its worst connections are the caller's to
        weigh (`worst_first`): only the caller knows which part each came from."""
        self.exchange_ms += other.exchange_ms
        self.stall_ms += other.stall_ms
        self.payload_bytes += other.payload_bytes


def worst_first(sequences: list[TimeSequence]) -> list[TimeSequence]:
    """The WORST_CONNECTIONS that lost the most time to stalls; ties go to the earlier
    connection (by first frame, as connections are numbered)."""
    ordered = sorted(sequences, key=lambda s: (-s.stall_lost_s, s.first_frame))
    return ordered[:WORST_CONNECTIONS]


def exchange_times_ms(messages: Table | pd.DataFrame) -> np.ndarray:
    """Each exchange's time, from the first byte of a client's message to the last byte of the
    server's answer (the next message of the same connection, sent the other way): what the
    client waited, a Nagle hold in the request or the answer included."""
    if messages.empty:
        return np.zeros(0)
    order = key_order(np.asarray(messages["connection"]), np.asarray(messages["first_frame"]))

    def column(name: str) -> np.ndarray:
        values = np.asarray(messages[name])
        return values if order is None else values[order]

    connection, direction = column("connection"), column("direction")
    answered = ((connection[1:] == connection[:-1]) & (direction[:-1] == CLIENT_TO_SERVER)
                & (direction[1:] != CLIENT_TO_SERVER))
    exchange_us = column("end_us")[1:] - column("start_us")[:-1]
    return exchange_us[answered] / 1000


def connection_charts(packets: Table | pd.DataFrame, connections: Table | pd.DataFrame,
                      message_table: Table | pd.DataFrame, findings: Sequence[Finding]) -> ChartData:
    """The charts' share of one part, or of a capture held whole, before the host step."""
    stalls = [finding for finding in findings if finding.kind == nagle_stall.KIND]
    stall_s = np.concatenate([np.zeros(0)] + [finding.events.stall_s for finding in stalls])
    payload = np.asarray(packets["payload_bytes"]) if len(packets) else np.zeros(0, np.int64)
    return ChartData(LogHistogram.of(exchange_times_ms(message_table)),
                     LogHistogram.of(1000 * stall_s), SizeCounts.of(payload[payload > 0]),
                     _worst_connections(packets, connections, stalls))


def _worst_connections(packets: Table | pd.DataFrame, connections: Table | pd.DataFrame,
                       stalls: list[Finding]) -> list[TimeSequence]:
    return [_time_sequence(packets, connection, lost_s, first_frame,
                           [f for f in stalls if f.connection == connection])
            for connection, lost_s, first_frame in _worst_ranked(connections, stalls)]


def _worst_ranked(connections: Table | pd.DataFrame, stalls: list[Finding]
                  ) -> list[tuple[int, float, int]]:
    """The connections whose time-sequence graph is drawn, with their stall time and first
    frame. Ranked by stall time in microseconds, as the document gives each finding's, so that
    the choice does not hang on the last bits of a sum."""
    lost: dict[int, float] = {}
    for finding in stalls:
        lost[finding.connection] = round(lost.get(finding.connection, 0.0)
                                         + round(finding.time_lost_s, 6), 6)
    first_frame = np.asarray(connections["first_frame"]) if len(connections) else np.zeros(0)
    chosen = sorted(lost, key=lambda c: (-lost[c], first_frame[c]))[:WORST_CONNECTIONS]
    return [(connection, lost[connection], int(first_frame[connection])) for connection in chosen]


def _time_sequence(packets: Table | pd.DataFrame, connection: int, lost_s: float, first_frame: int,
                   stalls: list[Finding]) -> TimeSequence:
    mine = np.flatnonzero(np.asarray(packets["connection"]) == connection)

    def column(name: str) -> np.ndarray:
        return np.asarray(packets[name])[mine]

    time_us = column("time_us")
    time_s = (time_us - time_us.min()) / 1e6
    direction = column("direction")
    payload = column("payload_bytes")
    sequence_end = column("rel_seq") + payload
    rel_ack = column("rel_ack")
    frame = column("frame")
    data, acks = {}, {}
    for side in (0, 1):
        sent = (direction == side) & (payload > 0)
        if not sent.any():
            continue
        acked = (direction != side) & (rel_ack > 0)
        data[side] = Trace.sampled(time_s[sent], sequence_end[sent], frame[sent])
        acks[side] = Trace.sampled(time_s[acked], rel_ack[acked], frame[acked])
    released_frames = np.concatenate([f.events.released_frame for f in stalls])
    stall_ms = 1000 * np.concatenate([f.events.stall_s for f in stalls])
    marked = np.flatnonzero(np.isin(frame, released_frames))
    by_frame = dict(zip(released_frames.tolist(), stall_ms.tolist()))
    return TimeSequence(connection, lost_s, first_frame, data, acks,
                        Trace(time_s[marked], sequence_end[marked], frame[marked], len(marked)),
                        np.array([by_frame[f] for f in frame[marked].tolist()]))


class ChartsBySlice:
    """The charts' share of a part read a slice at a time (`sliced_level`), which never holds
    its packet table: give each slice's packets to `add` (pass 2), then, once the findings are
    known, each slice's packets again to `add_again` for the worst connections' graphs (a
    third pass, `worst`), and take `charts`. The same as `connection_charts` of the part held
    whole: each trace's totals are counted in the first of those passes, so the points drawn
    are chosen as they come in the second."""

    def __init__(self, connection_count: int) -> None:
        self._payloads: list[SizeCounts] = []
        self._sent = np.zeros(2 * connection_count, dtype=np.int64)
        self._acked = np.zeros(2 * connection_count, dtype=np.int64)
        self._first_us = np.full(connection_count, np.iinfo(np.int64).max)
        self._worst: list[tuple[int, float, int]] = []
        self._stalls: list[Finding] = []
        self._released: dict[int, np.ndarray] = {}
        self._drawn: dict[tuple, np.ndarray] = {}
        self._kept: dict[tuple, list[np.ndarray]] = {}
        self._seen: dict[tuple, int] = {}

    def add(self, packets: Table | pd.DataFrame) -> None:
        """Count a slice's payload sizes and each direction's data and ACK points."""
        payload = np.asarray(packets["payload_bytes"])
        self._payloads.append(SizeCounts.of(payload[payload > 0]))
        connection = np.asarray(packets["connection"]).astype(np.int64)
        direction = np.asarray(packets["direction"]).astype(np.int64)
        count = len(self._sent)
        self._sent += np.bincount(2 * connection + direction, weights=payload > 0,
                                  minlength=count).astype(np.int64)
        self._acked += np.bincount(2 * connection + 1 - direction,
                                   weights=np.asarray(packets["rel_ack"]) > 0,
                                   minlength=count).astype(np.int64)
        np.minimum.at(self._first_us, connection, np.asarray(packets["time_us"]))

    def worst(self, connections: Table | pd.DataFrame, findings: Sequence[Finding]) -> list[int]:
        """The connections whose graphs are drawn (none: no third pass is needed)."""
        self._stalls = [finding for finding in findings if finding.kind == nagle_stall.KIND]
        self._worst = _worst_ranked(connections, self._stalls)
        chosen = [connection for connection, _, _ in self._worst]
        for connection in chosen:
            self._released[connection] = np.sort(np.concatenate([np.zeros(0, np.int64)] + [
                f.events.released_frame for f in self._stalls if f.connection == connection]))
            for side in (0, 1):
                key = 2 * connection + side
                self._drawn[connection, "data", side] = sampled_positions(int(self._sent[key]))
                self._drawn[connection, "acks", side] = sampled_positions(int(self._acked[key]))
        return chosen

    def add_again(self, packets: Table | pd.DataFrame) -> None:
        """Keep the drawn points of the worst connections among a slice's packets."""
        connection = np.asarray(packets["connection"])
        for chosen, _, _ in self._worst:
            mine = np.flatnonzero(connection == chosen)
            if len(mine):
                self._keep_points(chosen, {name: np.asarray(packets[name])[mine] for name in
                                           ("time_us", "direction", "payload_bytes", "rel_seq",
                                            "rel_ack", "frame")})

    def _keep_points(self, connection: int, rows: dict[str, np.ndarray]) -> None:
        payload = rows["payload_bytes"]
        sequence_end = rows["rel_seq"] + payload
        traces = [((connection, "released"),
                   _in_sorted(rows["frame"], self._released[connection]), sequence_end)]
        for side in (0, 1):
            traces.append(((connection, "data", side), (rows["direction"] == side) & (payload > 0),
                           sequence_end))
            traces.append(((connection, "acks", side),
                           (rows["direction"] != side) & (rows["rel_ack"] > 0), rows["rel_ack"]))
        for trace, selected, value in traces:
            where = np.flatnonzero(selected)
            if trace in self._drawn:
                seen = self._seen.get(trace, 0)
                self._seen[trace] = seen + len(where)
                where = where[_in_sorted(seen + np.arange(len(where)), self._drawn[trace])]
            self._kept.setdefault(trace, []).append(
                (rows["time_us"][where], value[where], rows["frame"][where]))

    def charts(self, message_table: Table | pd.DataFrame) -> ChartData:
        stall_s = np.concatenate([np.zeros(0)] + [f.events.stall_s for f in self._stalls])
        return ChartData(LogHistogram.of(exchange_times_ms(message_table)),
                         LogHistogram.of(1000 * stall_s), SizeCounts.total_of(self._payloads),
                         [self._time_sequence(*worst) for worst in self._worst])

    def _points(self, trace: tuple) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """A trace's kept points: seconds since its connection's first packet, value, frame."""
        time_us, value, frame = (np.concatenate(column) for column in zip(*self._kept[trace]))
        return (time_us - self._first_us[trace[0]]) / 1e6, value, frame

    def _time_sequence(self, connection: int, lost_s: float, first_frame: int) -> TimeSequence:
        data, acks = {}, {}
        for side in (0, 1):
            total = int(self._sent[2 * connection + side])
            if total:
                data[side] = Trace(*self._points((connection, "data", side)), total)
                acks[side] = Trace(*self._points((connection, "acks", side)),
                                   int(self._acked[2 * connection + side]))
        time_s, value, frame = self._points((connection, "released"))
        by_frame = {}
        for finding in self._stalls:
            if finding.connection == connection:
                by_frame.update(zip(finding.events.released_frame.tolist(),
                                    (1000 * finding.events.stall_s).tolist()))
        return TimeSequence(connection, lost_s, first_frame, data, acks,
                            Trace(time_s, value, frame, len(time_s)),
                            np.array([by_frame[f] for f in frame.tolist()]))


def _in_sorted(values: np.ndarray, chosen: np.ndarray) -> np.ndarray:
    """Whether each value is one of `chosen` (sorted, made once for every slice it is asked
    of: a connection's released frames, a trace's drawn positions)."""
    return found_in_sorted(chosen, values)[1] if len(chosen) else np.zeros(len(values), dtype=bool)


def busiest_hosts(hosts: Mapping[str, HostProfile],
                  with_samples: Callable[[list[HostProfile]], list[HostProfile]] = list
                  ) -> HostCharts:
    """The MAX_HOST_CHARTS hosts with the most delayed-ACK samples, and as many of those whose
    phase is locked; ties in address order. `with_samples` fills in the per-sample arrays of
    the chosen profiles where the profiles were stored without them."""
    profiles = sorted(hosts.values(), key=lambda h: (-h.delack_samples, h.address))
    delays = [h for h in profiles if h.delack_samples > 0]
    tested = [h for h in profiles if h.phase_lock]
    phase = [h for h in tested if h.phase_lock["locked"]]
    chosen = with_samples(_unique(delays[:MAX_HOST_CHARTS] + phase[:MAX_HOST_CHARTS]))
    by_address = {h.address: _in_value_order(h) for h in chosen}
    return HostCharts([by_address[h.address] for h in delays[:MAX_HOST_CHARTS]],
                      [by_address[h.address] for h in phase[:MAX_HOST_CHARTS]],
                      len(delays), len(tested), len(phase))


def _in_value_order(profile: HostProfile) -> HostProfile:
    """The samples sorted, so that they do not depend on how the work was split (a whole
    capture yields them in segment order, the host step of one in parts by connection)."""
    by_time = np.argsort(profile.ack_times_s, kind="stable")
    return replace(profile, delays_ms=np.sort(profile.delays_ms),
                   ack_times_s=profile.ack_times_s[by_time],
                   ack_connections=profile.ack_connections[by_time])


def _unique(profiles: list[HostProfile]) -> list[HostProfile]:
    return list({profile.address: profile for profile in profiles}.values())
