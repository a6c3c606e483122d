"""Fingerprint each receiving host's delayed-ACK timer from the data, never from an assumption.

A sample is the pure ACK that answers a lone unacknowledged segment: when the segment left,
everything before it was acknowledged; the sender sent no more data and the receiver no data
before that ACK, which acknowledges the segment and nothing after it. The receiver's holding
time is the ACK's lag at the tap minus the round trip between the tap and the receiver.
Holding times of 10 ms or more (and well above that round trip), and no longer than a delayed
ACK may be held, are delayed ACKs; their mode is the timer. Stack families by timer (SPEC
section 2): Linux 40 ms minimum, BSD/macOS about 100 ms, Windows 200 ms.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

from nagledetect.detectors.model import DetectorInput, HostProfile, HostValues
from nagledetect.events.segments import NONE, PURE_ACK_ROLES, role_in
from nagledetect.flows.connections import by_connection, direction_key, rtt_measured
from nagledetect.flows.grouped import first_per_key, joined_columns
from nagledetect.ordering import factorize_in_name_order
from nagledetect.table import Table, codes

if TYPE_CHECKING:
    import pandas as pd

MIN_DELAYED_HOLD_MS = 10.0
RTT_MULTIPLE = 1.5
MAX_DELAYED_HOLD_MS = 600.0
"""No delayed ACK is held longer: RFC 1122 allows 500 ms, Windows' TcpDelAckTicks 600 ms. A
longer hold is something else (the receiving application, an ACK the capture missed)."""
ORDINARY_ACK_FACTOR = 1.5
ORDINARY_ACK_SLACK_MS = 2.0
"""An ACK whose lag is at most this multiple of the tap-to-receiver round trip, plus the slack,
was not delayed (its receiver answered as soon as the data came)."""

HISTOGRAM_BIN_MS = 2.0
MODE_WINDOW = 0.2
STACK_FAMILIES = (
    (30.0, 70.0, "Linux-like (40 ms)"),
    (70.0, 150.0, "BSD/macOS-like (100 ms)"),
    (150.0, 300.0, "Windows-like (200 ms)"),
)


def ordinary_acks(ack_lag_ms: np.ndarray, receiver_rtt_ms: np.ndarray) -> np.ndarray:
    """Whether each ACK came as soon as its receiver could answer, or was held less than a
    delayed ACK's least beyond the round trip (a receiver's global tick that fired just after
    the data came: what waited for it waited the round trip); `receiver_side_rtt_ms`: 0 where
    unknown, then only within the slack; callers trust it only against a round trip the
    handshake measured."""
    return ((ack_lag_ms <= ORDINARY_ACK_FACTOR * receiver_rtt_ms + ORDINARY_ACK_SLACK_MS)
            | (ack_lag_ms - receiver_rtt_ms < MIN_DELAYED_HOLD_MS))


def delayed_acks(hold_ms: np.ndarray, ordinary: np.ndarray, measured: np.ndarray,
                 receiver_rtt_ms: np.ndarray) -> np.ndarray:
    """Whether each ACK was delayed: held (its lag less the round trip to its receiver) at
    most `MAX_DELAYED_HOLD_MS`, and, against a round trip the handshake `measured`, later than
    an ordinary ACK and held 10 ms or more, however short beside the path (a receiver whose ACKs
    fire on a global tick holds some for a few ms); against an estimate, well above it."""
    beyond_path = hold_ms >= np.maximum(MIN_DELAYED_HOLD_MS, RTT_MULTIPLE * receiver_rtt_ms)
    beyond_ordinary = measured & ~ordinary & (hold_ms >= MIN_DELAYED_HOLD_MS)
    return (beyond_path | beyond_ordinary) & (hold_ms <= MAX_DELAYED_HOLD_MS)


def receiver_side_rtt_ms(connections: Table, connection: np.ndarray,
                          direction: np.ndarray) -> np.ndarray:
    """Round trip between the tap and the receiver of each (connection, direction); 0 if unknown."""
    to_server = by_connection(connections, "rtt_server_side_ms", connection)
    to_client = by_connection(connections, "rtt_client_side_ms", connection)
    return np.nan_to_num(np.where(direction == 0, to_server, to_client), nan=0.0)


SAMPLE_SEGMENT_COLUMNS = ("connection", "direction", "frame", "time_us", "payload_bytes",
                          "rel_seq", "end_seq", "peer_ack", "peer_window_bytes",
                          "next_peer_frame", "next_peer_time_us", "next_peer_role",
                          "next_peer_ack", "next_own_data_time_us")
"""The segment columns `delack_samples` reads: a part keeps only these for it, once its
detectors are done."""


def answered_lone(segments: Table | pd.DataFrame, next_own_data_time_us: np.ndarray | None = None
                  ) -> np.ndarray:
    """Which segments are lone (everything before them acknowledged when they left) and
    answered by the peer's next packet, a pure ACK of exactly up to their end, before their
    sender's next data: the segments a sample is taken from. An ACK of more answers what came
    after the segment (its sender's FIN, acknowledged at once), not the segment. A segment
    that filled the receiver's window is none: its ACK comes when the receiving application
    reads, not when a timer fires.
    `next_own_data_time_us`: that column, where the caller knows better than the segments (a
    slice's last segments)."""
    next_own_us = (np.asarray(segments["next_own_data_time_us"]) if next_own_data_time_us is None
                   else next_own_data_time_us)
    peer_ack = np.asarray(segments["peer_ack"])
    return ((peer_ack >= np.asarray(segments["rel_seq"]))
            & (np.asarray(segments["end_seq"]) - peer_ack < np.asarray(segments["peer_window_bytes"]))
            & role_in(segments["next_peer_role"], PURE_ACK_ROLES)
            & (np.asarray(segments["next_peer_ack"]) == np.asarray(segments["end_seq"]))
            & ((next_own_us < 0) | (next_own_us > np.asarray(segments["next_peer_time_us"]))))


LONE_SEGMENT_COLUMNS = ("connection", "direction", "frame", "time_us", "payload_bytes",
                        "next_peer_frame", "next_peer_time_us")
"""What a sample is made of, once its segment is known to be lone and answered."""


LONE_SEGMENTS = "lone_segments"
"""The shared table of the lone answered segments (`LONE_SEGMENT_COLUMNS`, frame order): the
compiled core and a part read a slice at a time hand it over made."""


def lone_segments_of(columns: DetectorInput) -> dict[str, np.ndarray]:
    """The maker of `LONE_SEGMENTS` where the segment table is held (a whole run)."""
    if columns.segments.empty:
        return {name: np.zeros(0, dtype=np.int64) for name in LONE_SEGMENT_COLUMNS}
    return _lone_rows(columns.segments)


def _lone_rows(segments: Table) -> dict[str, np.ndarray]:
    """The `LONE_SEGMENT_COLUMNS` of the segments lone and answered."""
    lone = np.flatnonzero(answered_lone(segments))
    return {name: np.asarray(segments[name])[lone] for name in LONE_SEGMENT_COLUMNS}


def delack_samples(segments: Table, connections: Table) -> Table:
    """Delayed-ACK holding times, one row per lone segment answered by a pure ACK."""
    return samples_of(_lone_rows(segments), connections)


def samples_of(lone: Mapping[str, np.ndarray], connections: Table) -> Table:
    """The samples of lone answered segments (`LONE_SEGMENT_COLUMNS`, in frame order)."""

    def column(name: str) -> np.ndarray:
        return lone[name]

    lone_connection, lone_direction = column("connection"), column("direction")
    ack_time_us = column("next_peer_time_us")
    lag_ms = (ack_time_us - column("time_us")) / 1000
    rtt_ms = receiver_side_rtt_ms(connections, lone_connection, lone_direction)
    hold_ms = lag_ms - rtt_ms
    measured = rtt_measured(connections, lone_connection)
    receiver = np.where(lone_direction == 0,
                        by_connection(connections, "server_address", lone_connection),
                        by_connection(connections, "client_address", lone_connection))
    samples = Table({
        "host": receiver,
        "connection": lone_connection,
        "direction": lone_direction,
        "data_frame": column("frame"),
        "ack_frame": column("next_peer_frame"),
        "ack_time_s": ack_time_us / 1e6,
        "hold_ms": hold_ms,
        "delayed": delayed_acks(hold_ms, ordinary_acks(lag_ms, rtt_ms), measured, rtt_ms),
    })
    return samples


class SamplesBySlice:
    """The samples of a part read a slice at a time. A segment's answer (the peer's next
    packet, its own next data) may lie in a later slice: a segment that may be a sample waits
    for it, and is let go once its own next data is no later than every packet still to come
    (the peer's answer cannot then come before it), so in a capture in time order only a
    direction's latest segment waits. A sample is kept as the six values it is made of.
    It reads a part's pandas tables (`events.by_slice`), importing pandas only then."""

    def __init__(self) -> None:
        self._waiting: pd.DataFrame | None = None
        self._lone: list[dict[str, np.ndarray]] = []
        self._joined: dict[str, np.ndarray] | None = None

    def add(self, segments: pd.DataFrame, packets: pd.DataFrame, later_from_us: int) -> None:
        """Take a slice's segments and packets (`events.by_slice.SegmentsBySlice`, frame
        order); `later_from_us`: no packet of a later slice is earlier. The segments waiting
        from earlier slices are answered by this slice's first packets; the lone ones answered
        are kept, and those that may still be."""
        import pandas as pd

        candidates = segments[list(SAMPLE_SEGMENT_COLUMNS)]
        if self._waiting is not None:
            candidates = pd.concat([_answered_by(self._waiting, packets), candidates],
                                   ignore_index=True)
        candidates = candidates[np.asarray(candidates["peer_ack"])
                                >= np.asarray(candidates["rel_seq"])]
        peer_known = np.asarray(candidates["next_peer_frame"]) >= 0
        own_time = np.asarray(candidates["next_own_data_time_us"])
        peer_time = np.asarray(candidates["next_peer_time_us"])
        own_later = (own_time < 0) & (later_from_us > peer_time)
        done = peer_known & ((own_time >= 0) | own_later)
        self._keep_lone(candidates[done], np.where(own_later[done], NONE, own_time[done]))
        hopeless = ~peer_known & (own_time >= 0) & (own_time <= later_from_us)
        self._waiting = candidates[~done & ~hopeless].reset_index(drop=True)

    def lone(self) -> dict[str, np.ndarray]:
        """The lone answered segments of every slice added, once the last has been, in frame
        order (`LONE_SEGMENT_COLUMNS`): segments still waiting for the peer's next packet had
        no answer; those answered, waiting for their sender's next data, were lone. Joined
        once, for the detectors and then the samples."""
        if self._joined is not None:
            return self._joined
        if self._waiting is not None:
            waiting = self._waiting[np.asarray(self._waiting["next_peer_frame"]) >= 0]
            self._keep_lone(waiting, np.full(len(waiting), NONE))
            self._waiting = None
        kept = self._lone or [{name: np.zeros(0, dtype=np.int64) for name in LONE_SEGMENT_COLUMNS}]
        frame = np.concatenate([rows["frame"] for rows in kept])
        self._joined = joined_columns(kept, np.argsort(frame, kind="stable"))
        self._lone = []
        return self._joined

    def samples(self, connections: Table) -> Table:
        """The delayed-ACK samples of every slice added, once the last has been (`lone`)."""
        return samples_of(self.lone(), connections)

    def _keep_lone(self, segments: pd.DataFrame, next_own_data_time_us: np.ndarray) -> None:
        """Keep what a sample is made of, of the segments lone and answered (their sender's
        next data as the caller knows it)."""
        lone = answered_lone(segments, next_own_data_time_us)
        self._lone.append({name: np.asarray(segments[name])[lone] for name in LONE_SEGMENT_COLUMNS})


def _answered_by(waiting: pd.DataFrame, packets: pd.DataFrame) -> pd.DataFrame:
    """The waiting segments with what this slice's first packets say: the first of the peer's
    group where none has come yet, and the first data of their own where none has."""
    from nagledetect.events.by_slice import written_at

    if not len(waiting):
        return waiting
    waiting = waiting.copy()
    group = direction_key(packets)
    waiting_group = direction_key(waiting)
    count = int(max(group.max(initial=-1), waiting_group.max())) + 2
    first = first_per_key(group, np.arange(len(group)), count)
    first_data = first_per_key(group, np.flatnonzero(np.asarray(packets["payload_bytes"]) > 0), count)
    peer_unknown = np.asarray(waiting["next_peer_frame"]) < 0
    peer_row = np.where(peer_unknown, first[waiting_group ^ 1], -1)
    answered = np.flatnonzero(peer_row >= 0)
    for column, source in (("next_peer_frame", "frame"), ("next_peer_time_us", "time_us"),
                           ("next_peer_ack", "rel_ack")):
        written_at(waiting, column, answered, np.asarray(packets[source])[peer_row[answered]])
    written_at(waiting, "next_peer_role", answered,
               codes(packets["role"])[peer_row[answered]])
    own_row = np.where(np.asarray(waiting["next_own_data_time_us"]) < 0,
                       first_data[waiting_group], -1)
    found = np.flatnonzero(own_row >= 0)
    written_at(waiting, "next_own_data_time_us", found,
               np.asarray(packets["time_us"])[own_row[found]])
    return waiting


def _modal_timers(host: np.ndarray, hold_ms: np.ndarray, count: int
                  ) -> tuple[np.ndarray, np.ndarray]:
    """Per host (codes 0..count-1; NaN without delayed samples): the timer, the median of the
    samples near the histogram mode (2 ms bins from 0, the lowest bin on a tie), and their
    interquartile spread. One pass over all hosts: big captures have hundreds of thousands."""
    timer = np.full(count, np.nan)
    spread = np.full(count, np.nan)
    if len(hold_ms) == 0:
        return timer, spread
    highest = np.full(count, HISTOGRAM_BIN_MS)
    np.maximum.at(highest, host, hold_ms)
    last_bin = np.ceil((highest + HISTOGRAM_BIN_MS) / HISTOGRAM_BIN_MS).astype(np.int64) - 2
    bins = np.minimum(np.floor(hold_ms / HISTOGRAM_BIN_MS).astype(np.int64), last_bin[host])
    width = int(bins.max()) + 1
    keys, counts = np.unique(host.astype(np.int64) * width + bins, return_counts=True)
    key_host, key_bin = np.divmod(keys, width)
    best = np.lexsort((key_bin, -counts, key_host))
    first = best[np.r_[True, key_host[best][1:] != key_host[best][:-1]]]
    centre = np.full(count, np.nan)
    centre[key_host[first]] = (key_bin[first] * 2 + 1) * HISTOGRAM_BIN_MS / 2
    near = np.abs(hold_ms - centre[host]) <= MODE_WINDOW * centre[host] + HISTOGRAM_BIN_MS
    order = np.lexsort((hold_ms[near], host[near]))
    near_host, near_hold = host[near][order], hold_ms[near][order]
    starts = np.searchsorted(near_host, np.arange(count))
    sizes = np.bincount(near_host, minlength=count)
    seen = sizes > 0
    quartiles = [_sorted_quantile(near_hold, starts[seen], sizes[seen], q) for q in (0.25, 0.75)]
    timer[seen] = _sorted_quantile(near_hold, starts[seen], sizes[seen], 0.5)
    spread[seen] = quartiles[1] - quartiles[0]
    return timer, spread


def _sorted_quantile(values: np.ndarray, starts: np.ndarray, sizes: np.ndarray,
                     quantile: float) -> np.ndarray:
    """Linear-interpolation quantile (numpy's default) of sorted runs values[start:start+size]."""
    position = (sizes - 1) * quantile
    below = np.floor(position).astype(np.int64)
    weight = position - below
    low = values[starts + below]
    high = values[starts + np.minimum(below + 1, sizes - 1)]
    return np.where(weight >= 0.5, high - (high - low) * (1 - weight), low + (high - low) * weight)


def stack_family(timer_ms: float | None) -> str:
    if timer_ms is None:
        return "unknown"
    for low, high, name in STACK_FAMILIES:
        if low <= timer_ms < high:
            return name
    return "other"


def host_codes(host: np.ndarray, categories: Any = None) -> tuple[np.ndarray, list[str]]:
    """Each sample's host as a code into the addresses of the hosts present, in name order.

    Codes into `categories` (a capture in parts makes them, in name order) are renumbered to
    the hosts present; a column of strings is factorized."""
    if categories is None:
        host_code, addresses = factorize_in_name_order(np.asarray(host, dtype=object))
        return host_code, [str(address) for address in addresses.tolist()]
    categories = np.asarray(categories, dtype=object)
    host_code = np.asarray(host).astype(np.int64)
    present = np.flatnonzero(np.bincount(host_code, minlength=len(categories)))
    renumbered = np.zeros(len(categories), dtype=np.int64)
    renumbered[present] = np.arange(len(present))
    return renumbered[host_code], [str(address) for address in categories[present].tolist()]


def sample_hosts(samples: Table, rows: np.ndarray | slice = slice(None)
                 ) -> tuple[np.ndarray, list[str]]:
    """`host_codes` of the samples' host column at `rows` (codes where it is coded)."""
    words = samples.coded.get("host")
    return host_codes(samples["host"][rows], words)


def fingerprint_hosts(samples: Table) -> dict[str, HostProfile]:
    """One profile per host that acknowledged a lone segment at least once."""
    return host_fingerprints(samples).profiles()


def host_fingerprints(samples: Table) -> HostFingerprints:
    """Every host's fingerprint as columns (see `HostFingerprints`), hosts in name order."""
    if samples.empty:
        return HostFingerprints([], np.zeros(0), np.zeros(0), np.zeros(0, np.int64), np.zeros(0),
                                np.zeros(0, np.int64), np.zeros(0), np.zeros(0, np.int64),
                                np.zeros(0, np.int64))
    host_code, addresses = sample_hosts(samples)
    order = np.argsort(host_code, kind="stable")

    def ordered(name: str) -> np.ndarray:
        return np.asarray(samples[name])[order]

    code = host_code[order]
    starts = np.searchsorted(code, np.arange(len(addresses) + 1))
    hold_ms = ordered("hold_ms")
    delayed = ordered("delayed")
    timer_ms, spread_ms = _modal_timers(code[delayed], hold_ms[delayed], len(addresses))
    delayed_count = np.bincount(code[delayed], minlength=len(addresses))
    return HostFingerprints(
        addresses, timer_ms, spread_ms, delayed_count, np.round(hold_ms, 3), starts,
        ordered("ack_time_s")[delayed], ordered("connection").astype(np.int64)[delayed],
        np.concatenate(([0], np.cumsum(delayed_count))))


class HostFingerprints(Mapping[str, HostProfile]):
    """Every host's delayed-ACK fingerprint as columns, one entry per host, and its samples
    grouped by host (entry i's holding times are `rounded_ms[starts[i]:starts[i + 1]]`, its
    delayed ACKs' times and connections the same slice of the delayed ones).

    Read as a mapping it gives each host's `HostProfile`, made when first asked for and kept,
    so that a change made to it (phase locking refines a locked host's timer) shows in
    `host_values`: a capture in parts fingerprints up to millions of hosts, and making a profile
    for each took most of its host step, where only the hosts phase locking tests need one.
    """

    def __init__(self, addresses: list[str], timer_ms: np.ndarray, spread_ms: np.ndarray,
                 delayed_samples: np.ndarray, rounded_ms: np.ndarray, starts: np.ndarray,
                 ack_time_s: np.ndarray, ack_connections: np.ndarray,
                 delayed_starts: np.ndarray) -> None:
        self.addresses = addresses
        self._timer_ms = timer_ms
        self._spread_ms = spread_ms
        self._delayed_samples = delayed_samples
        self._rounded_ms = rounded_ms
        self._starts = starts
        self._ack_time_s = ack_time_s
        self._ack_connections = ack_connections
        self._delayed_starts = delayed_starts
        self._made: dict[int, HostProfile] = {}
        self._index: dict[str, int] = {}

    def __len__(self) -> int:
        return len(self.addresses)

    def __iter__(self) -> Iterator[str]:
        return iter(self.addresses)

    def __getitem__(self, address: str) -> HostProfile:
        if not self._index:
            self._index = {name: index for index, name in enumerate(self.addresses)}
        return self._profile(self._index[address])

    def split(self, bounds: np.ndarray) -> list[HostFingerprints]:
        """The fingerprints of hosts `bounds[k]` to `bounds[k + 1]` as a set of their own, for
        each k (hosts of several captures fingerprinted at once, cut back per capture)."""
        pieces = []
        for first, after in zip(bounds[:-1].tolist(), bounds[1:].tolist()):
            samples = slice(self._starts[first], self._starts[after])
            delayed = slice(self._delayed_starts[first], self._delayed_starts[after])
            pieces.append(HostFingerprints(
                self.addresses[first:after], self._timer_ms[first:after],
                self._spread_ms[first:after], self._delayed_samples[first:after],
                self._rounded_ms[samples], self._starts[first:after + 1] - samples.start,
                self._ack_time_s[delayed], self._ack_connections[delayed],
                self._delayed_starts[first:after + 1] - delayed.start))
        return pieces

    def timers_ms(self) -> list[float | None]:
        """Each host's timer as fingerprinted (None: no delayed ACK)."""
        return [None if math.isnan(timer) else timer for timer in self._timer_ms.tolist()]

    def profiles(self) -> dict[str, HostProfile]:
        """Every host's profile, in order."""
        return {address: self._profile(index) for index, address in enumerate(self.addresses)}

    def host_values(self) -> HostValues:
        """Every host's values as its profile holds them now (the phase-lock test None where
        none was made), without making the profiles not made yet."""
        timers = self.timers_ms()
        values = HostValues(
            list(self.addresses), timers,
            [None if timer is None else spread
             for timer, spread in zip(timers, self._spread_ms.tolist())],
            self._delayed_samples.tolist(), [stack_family(timer) for timer in timers],
            [None] * len(self.addresses))
        for index, profile in self._made.items():
            values.set_row(index, profile)
        return values

    def _profile(self, index: int) -> HostProfile:
        if index not in self._made:
            timer = self._timer_ms[index]
            timer = None if math.isnan(timer) else float(timer)
            begin, end = self._starts[index], self._starts[index + 1]
            first, after = self._delayed_starts[index], self._delayed_starts[index + 1]
            self._made[index] = HostProfile(
                address=self.addresses[index], delack_timer_ms=timer,
                delack_spread_ms=None if timer is None else float(self._spread_ms[index]),
                delack_samples=int(self._delayed_samples[index]),
                stack_family=stack_family(timer), delays_ms=self._rounded_ms[begin:end],
                ack_times_s=self._ack_time_s[first:after],
                ack_connections=self._ack_connections[first:after])
        return self._made[index]
