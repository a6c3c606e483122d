"""The headline: a small segment Nagle held until the peer's ACK released it.

In one direction (SPEC section 4.1): the receiver's pure ACK acknowledges exactly everything the
sender had sent (more would mean the capture missed data, and its timing proves nothing), no
data from the receiver came in between (else it is think time), the sender retransmitted nothing
(else it is loss recovery) and the window was open (else it is a zero window). Then a small
segment (or a super-segment's small tail) left after that ACK, and the release is tied to the ACK
only where physics allows it:

- at a remote vantage, no sooner than the tap-to-sender round trip measured on the connection
  (less a tolerance for timestamp jitter): the ACK has to reach the sender and the released
  segment come back; a segment seen sooner left before the ACK could release it;
- near the sender, within a few times the sender's own turnaround (its handshake answer, or its
  quickest ACK), as a kernel releases held data while it processes the ACK.

Linux's Nagle (Minshall's) also lets a burst's small tail go at the ACK of the burst's small
beginning, full segments still unacknowledged: those tails are paired with that ACK
(`earlier_releases.py`) and pass the same timing tests.

Two kinds: `nagle-delack-stall` when that ACK came a delayed-ACK time after the data (far longer
than the round trip, at most 500 ms, RFC 1122's limit), `nagle-rtt-hold` when it was the ordinary
ACK one round trip after the data (on a long path, Nagle's whole cost). Either way the stall
lasts from the previous data segment to the released one.

A trace cannot show when a write happened. A sender whose small data sometimes follows such an
ACK later than it could have been released, or sooner than the ACK could reach it, writes on its
own clock: its "releases" may be paced writes that happened to follow the ACK, so its finding
says so, its confidence is low and its time is an upper bound. A one-way stream whose held data
accumulates is named stream coalescing instead (found first); a one-round-trip hold where the
receiver sends no data at all delayed a stream's delivery, not an exchange: low as well. So is
a sender seen sending small segments in flight together (`small_in_flight`), which no Nagle
allows: what held its data was not Nagle.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from nagledetect.detectors import kinds
from nagledetect.detectors.delack_timer import (
    LONE_SEGMENTS,
    STACK_FAMILIES,
    delayed_acks,
    lone_segments_of,
    ordinary_acks,
    receiver_side_rtt_ms,
)
from nagledetect.detectors.earlier_releases import TAIL_PREV_TIME, EarlierReleases
from nagledetect.detectors.full_segment_gaps import FullSegmentGaps
from nagledetect.detectors.model import (
    DetectorInput,
    Finding,
    StallEvents,
    counted_ms,
    split_events,
)
from nagledetect.events.segments import role_in
from nagledetect.flows.connections import by_connection, rtt_measured
from nagledetect.flows.grouped import KeyGroups, found_in_sorted, group_starts, rows_holding
from nagledetect.table import Table

KIND = kinds.NAGLE_DELACK_STALL
RTT_HOLD_KIND = kinds.NAGLE_RTT_HOLD
STREAM_COALESCING_KIND = kinds.STREAM_COALESCING

MIN_STALL_MS = 10.0
"""The shortest stall either kind reports: a gap shorter than this is named by no detector."""
SENDER_TURNAROUND_FACTOR = 4.0
"""Near the sender, a release within this many times its own turnaround is tied to the ACK."""
MIN_REACTION_LIMIT_MS = 0.5
"""Near the sender, the reaction limit never falls below this (a turnaround of a few us on a veth
says little about how fast the same host releases data while busy: releases of 0.25-0.45 ms are
seen from a virtual machine whose handshake answers took 0.03-0.2 ms)."""
REACTION_RTT_FACTOR = 1.3
REACTION_RTT_SLACK_MS = 1.0
"""At a remote vantage, a release arrives at most this late after one round trip to the sender."""
CAUSALITY_TOLERANCE_SHARE = 0.03
CAUSALITY_JITTER_MS = 0.5
"""A release may arrive this much sooner than the measured tap-to-sender round trip (the larger of
the two): timestamp jitter, and a minimum round trip measured on few packets."""
UNKNOWN_RTT_REACTION_LIMIT_MS = 5.0
LATE_HORIZON_FACTOR = 2.0
LATE_HORIZON_MS = 10.0
"""Small data later than the reaction limit but within this horizon (twice the limit plus 10 ms)
competed with a release: it shows that the sender writes on its own clock."""
OWN_CLOCK_MIN = 2
OWN_CLOCK_SHARE = 0.1
"""A direction writes on its own clock when at least this many, and this share, of its small
segments after an all-acknowledging ACK were not tied to it."""
OWN_CLOCK_LATE_SHARE = 0.2
"""... counting those later than the sender reacts only where they are this share or more:
jitter on the path (a queue on the way, a busy delay line) makes a few releases late, a sender
on its own clock a good share of them. Data sent too soon for the ACK, or written on after a
release, cannot be a late release and always counts."""
TIMER_MATCH_SHARE = 0.25
MIN_INDEPENDENT_SAMPLES = 3
"""A host's fingerprinted timer counts as independent evidence for a finding only when it rests
on at least this many samples besides the finding's own ACKs, and on no fewer than those."""
CLUSTER_SPREAD_SHARE = 0.1
REPEATED = 3
TINY_WRITE_BYTES = 16
TINY_WRITE_FACTOR = 4
MAX_TINY_WRITES = 16

FLIGHT_PAUSE_RTT_SHARE = 0.5
"""Flights an ACK apart pause this share of the round trip or more (`_sent_in_flights`)."""
FLIGHT_SPREAD_RTT_SHARE = 0.1
FLIGHT_SPREAD_MS = 2.0
"""A final flight that went out over this share of the round trip, and this long at least,
did not go at once: its ACKs came over as long, far more than the path's jitter."""

RELEASING_ROLES = ("pure_ack",)
"""What can release held data: an ACK that acknowledges something new. A window update or a
duplicate ACK acknowledges nothing the ACK before it had not: whatever waited for it waited for
the window."""

SMALL_IN_FLIGHT_MIN = 2
"""A sender seen this many times sending a small segment before the ACK of the small one before
it could reach it runs without Nagle (TCP_NODELAY): Linux's Nagle sends a small segment only
when no earlier small one is unacknowledged, the classic rule only when nothing is."""
IN_FLIGHT_RTT_SHARE = 0.5
IN_FLIGHT_MIN_RTT_MS = 1.0
"""A small segment that passed the tap less than this share of the round trip between the tap
and its sender after the ACK of the small one before it left the sender before that ACK could
reach it (half: room for the path's jitter); only over a round trip this long, which the
handshake measured."""

DELAYED, ORDINARY, NEITHER = 0, 1, -1
"""What kind of ACK preceded a candidate: delayed (a delayed-ACK stall), ordinary (a hold of one
round trip), or neither (a lag between the two, which proves nothing)."""


def sender_side_rtt_ms(connections: Table, connection: np.ndarray,
                       direction: np.ndarray) -> np.ndarray:
    """Round trip between the tap and the sender of each (connection, direction); NaN if unknown."""
    to_server = by_connection(connections, "rtt_server_side_ms", connection)
    to_client = by_connection(connections, "rtt_client_side_ms", connection)
    return np.where(direction == 0, to_client, to_server)


STALL_COLUMNS = ("connection", "direction", "frame", "time_us", "payload_bytes", "tail_bytes",
                 "mss", "prev_frame", "prev_time_us", "prev_payload_bytes", "peer_frame")
"""The segment columns a stall keeps (the others are let go before rows are selected)."""
FULL_GAP, FINAL_FLIGHT = "full_gap_us", "final_flight_us"
"""The longest pause between consecutive full segments of a tail's message before it, and how
long its final flight had been going out (`full_segment_gaps.py`)."""
UNTIMED_STALL_COLUMNS = (*STALL_COLUMNS, "peer_time_us", "peer_window_bytes", "message", FULL_GAP,
                         FINAL_FLIGHT)
"""What `untimed_stalls` keeps of a segment: the stall's columns, what the timing tests read,
its message (segment parity asks which messages a stall released) and the pauses before it."""
UNTIMED_STALLS = "untimed_stalls"
"""The shared table of `untimed_stalls` (`DetectorInput.shared`): a part read a slice at a
time hands it over made from its slices."""


def stall_candidates(columns: DetectorInput) -> dict[str, np.ndarray]:
    """Columns of every small segment that followed an all-acknowledging ACK, each with its
    ACK kind, reaction window and whether it was tied to the ACK (made once for this detector
    and stream coalescing)."""
    return columns.shared("stall_candidates", _stall_candidates)


def delayed_ack_releases(candidates: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The candidates a delayed ACK released (what stream coalescing reads)."""
    chosen = candidates["tied"] & (candidates["ack_kind"] == DELAYED)
    return {name: values[chosen] for name, values in candidates.items()}


def _stall_candidates(columns: DetectorInput) -> dict[str, np.ndarray]:
    return timed_stalls(untimed_stall_table(columns), columns.connections)


def untimed_stall_table(columns: DetectorInput) -> dict[str, np.ndarray]:
    """`untimed_stalls` of every segment, made once (the stall test and segment parity read
    it)."""
    return columns.shared(UNTIMED_STALLS, untimed_of_segments)


def untimed_of_segments(columns: DetectorInput) -> dict[str, np.ndarray]:
    """The maker of `UNTIMED_STALLS` where the segment table is held (a whole run)."""
    return untimed_stalls(columns.segments)


def untimed_stalls(segments: Table, earlier: EarlierReleases | None = None,
                   full_gaps: FullSegmentGaps | None = None) -> dict[str, np.ndarray]:
    """The segments that pass the packet tests: small, after a pure ACK of exactly everything
    sent, starting where that ACK ends (not across a hole in the capture), with no peer data or
    own retransmission since the previous data, and an open window. Each on its own row and
    context (so a part read a slice at a time takes them a slice at a time), and that came
    `MIN_STALL_MS` or more after the previous data (no stall of either kind is shorter,
    whatever the round trips, which are known only once every packet has been read). Beside
    them, the tails a burst's earlier ACK may have released (`earlier_releases`: `earlier`
    carries a part's open bursts from slice to slice, `full_gaps` its messages' pauses). In
    frame order, as the segments come."""
    pauses = dict(zip((FULL_GAP, FINAL_FLIGHT), (full_gaps or FullSegmentGaps()).of(segments)))

    def column(name: str) -> np.ndarray:
        return pauses[name] if name in pauses else np.asarray(segments[name])

    peer_ack = np.asarray(segments["peer_ack"])
    window_bytes = np.asarray(segments["peer_window_bytes"])
    passed = np.flatnonzero(
        np.asarray(segments["is_small"])
        & (np.asarray(segments["prev_frame"]) >= 0)
        & role_in(segments["peer_role"], RELEASING_ROLES)
        & (np.asarray(segments["peer_time_us"]) > np.asarray(segments["prev_time_us"]))
        & (peer_ack == np.asarray(segments["sent_max_before"]))
        & (np.asarray(segments["rel_seq"]) == peer_ack)
        & (np.asarray(segments["peer_data_between"]) == 0)
        & (np.asarray(segments["own_retransmissions_between"]) == 0)
        & (window_bytes > 0))
    found = {name: column(name)[passed] for name in UNTIMED_STALL_COLUMNS}
    long_enough = (found["time_us"] - found["prev_time_us"]) / 1000 >= MIN_STALL_MS
    plain = {name: values[long_enough] for name, values in found.items()}
    earlier = (earlier or EarlierReleases()).rows(segments)
    rows = rows_holding(np.asarray(segments["frame"]), earlier["frame"])
    earlier.update((name, values[rows]) for name, values in pauses.items())
    return _in_frame_order(plain, earlier)


def _in_frame_order(plain: dict[str, np.ndarray], earlier: dict[str, np.ndarray]
                    ) -> dict[str, np.ndarray]:
    """The plain test's rows and the earlier releases' (`released_earlier` 1), in frame order,
    a tail's plain row first."""
    joined = {name: np.concatenate([plain[name], earlier[name].astype(plain[name].dtype)])
              for name in UNTIMED_STALL_COLUMNS}
    joined["released_earlier"] = np.r_[np.zeros(len(plain["frame"]), dtype=np.uint8),
                                       np.ones(len(earlier["frame"]), dtype=np.uint8)]
    joined[TAIL_PREV_TIME] = np.concatenate([plain["prev_time_us"], earlier[TAIL_PREV_TIME]])
    order = np.argsort(joined["frame"], kind="stable")
    return {name: values[order] for name, values in joined.items()}


def reaction_window_ms(sender_rtt_ms: np.ndarray, measured: np.ndarray
                       ) -> tuple[np.ndarray, np.ndarray]:
    """The earliest and latest a release can follow its ACK at the tap, by the round trip
    between the tap and the sender (NaN: unknown, then no lower bound and a loose upper one).
    Only a round trip `measured` by the handshake bounds it from below: one estimated from ACK
    lags includes the peer's ACK delays, so the true round trip may be far shorter."""
    known = ~np.isnan(sender_rtt_ms)
    rtt_ms = np.nan_to_num(sender_rtt_ms, nan=0.0)
    tolerance_ms = np.maximum(CAUSALITY_JITTER_MS, CAUSALITY_TOLERANCE_SHARE * rtt_ms)
    floor_ms = np.where(known & measured, np.maximum(rtt_ms - tolerance_ms, 0.0), 0.0)
    limit_ms = np.where(
        known, np.maximum(MIN_REACTION_LIMIT_MS,
                          np.minimum(SENDER_TURNAROUND_FACTOR * rtt_ms,
                                     REACTION_RTT_FACTOR * rtt_ms + REACTION_RTT_SLACK_MS)),
        UNKNOWN_RTT_REACTION_LIMIT_MS)
    return floor_ms, limit_ms


def timed_stalls(untimed: dict[str, np.ndarray], connections: Table
                 ) -> dict[str, np.ndarray]:
    """The timing tests on the segments that passed the packet tests (most segments fail
    those: the timing columns are made for few rows). Every candidate is kept with its ACK kind
    (`DELAYED`, `ORDINARY`, `NEITHER`), whether its release was tied to the ACK (`tied`), or
    shows the sender writing on its own clock (`untied`: too soon for the ACK to have reached
    the sender, or later than it reacts but within the late horizon; `continued`: written
    after a tied release in the same message, `_written_after_release`)."""
    found = {name: untimed[name]
             for name in (*STALL_COLUMNS, "message", FULL_GAP, FINAL_FLIGHT, "released_earlier")}
    in_flight = untimed[TAIL_PREV_TIME] - untimed["peer_time_us"]
    connection, direction = found["connection"], found["direction"]
    peer_time_us = untimed["peer_time_us"]
    reaction_ms = (found["time_us"] - peer_time_us) / 1000
    sender_rtt_ms = sender_side_rtt_ms(connections, connection, direction)
    measured = rtt_measured(connections, connection)
    floor_ms, limit_ms = reaction_window_ms(sender_rtt_ms, measured)
    ack_lag_ms = (peer_time_us - found["prev_time_us"]) / 1000
    receiver_rtt_ms = receiver_side_rtt_ms(connections, connection, direction)
    hold_ms = ack_lag_ms - receiver_rtt_ms
    ordinary = ordinary_acks(ack_lag_ms, receiver_rtt_ms)
    delayed = delayed_acks(hold_ms, ordinary, measured, receiver_rtt_ms)
    # An ordinary ACK is told by the round trip; one estimated from ACK lags alone may be this
    # very ACK's lag, so only a round trip the handshake measured can call an ACK ordinary.
    ack_kind = np.where(delayed, DELAYED, np.where(ordinary & measured, ORDINARY, NEITHER))
    ack_kind = np.where(_window_filled(found, untimed["peer_window_bytes"], connections), NEITHER,
                        ack_kind).astype(np.int8)
    horizon_ms = LATE_HORIZON_FACTOR * limit_ms + LATE_HORIZON_MS
    earlier = found["released_earlier"] > 0
    # A burst's earlier ACK released its tail only where the full segments after the ACK were
    # in flight when it reached the sender (sent because of it, the window held them all).
    tied = ((reaction_ms >= floor_ms) & (reaction_ms <= limit_ms) & (ack_kind != NEITHER)
            & (~earlier | (in_flight / 1000 < floor_ms)))
    untied_late = (reaction_ms > limit_ms) & (reaction_ms <= horizon_ms) & (ack_kind != NEITHER) & ~earlier
    untied = ((reaction_ms < floor_ms) & (ack_kind != NEITHER) & ~earlier) | untied_late
    late = (reaction_ms > horizon_ms) & (ack_kind != NEITHER) & ~earlier
    continued = _written_after_release(found, tied, late)
    found.update(ack_kind=ack_kind, tied=tied, untied=untied, untied_late=untied_late,
                 continued=continued,
                 reaction_ms=reaction_ms,
                 reaction_floor_ms=floor_ms, reaction_limit_ms=limit_ms,
                 sender_rtt_ms=sender_rtt_ms, causality_checked=measured, hold_ms=hold_ms,
                 ack_lag_ms=ack_lag_ms, receiver_rtt_ms=receiver_rtt_ms,
                 stall_s=(found["time_us"] - found["prev_time_us"]) / 1e6)
    # A release no sooner than the measured round trip to the sender needs no jitter allowance.
    clean = ~measured | (reaction_ms >= np.nan_to_num(sender_rtt_ms))
    standing = _one_row_per_tail(found["frame"], earlier, tied, tied & clean)
    return {name: values[standing] for name, values in found.items()}


def _written_after_release(found: dict[str, np.ndarray], tied: np.ndarray, late: np.ndarray
                           ) -> np.ndarray:
    """Whether each candidate shows its sender writing on after a release tied to its ACK, in
    the same message (the sender's data with no answer between): data written long after that
    ACK (`late`), or released by a later ACK right after it, as its own small release (had it
    been written before the first release, it would have left with it: an ACK lets all the
    data Nagle held go). Either way the sender wrote its message over time, so the hold before
    may have been a pause between writes too, and the answer waited for the later data."""
    if not tied.any():
        return np.zeros(len(tied), dtype=bool)
    message, frame = found["message"], found["frame"]
    order = np.lexsort((frame[tied], message[tied]))
    released_messages, first = np.unique(message[tied][order], return_index=True)
    position, found_message = found_in_sorted(released_messages, message)
    after_release = found_message & (frame > frame[tied][order][first][position])
    released_again = tied & np.isin(found["prev_frame"], frame[tied])
    return (late & after_release) | released_again


def _one_row_per_tail(frame: np.ndarray, earlier: np.ndarray, tied: np.ndarray,
                      clean: np.ndarray) -> np.ndarray:
    """Which candidates stand (frames name tails, one capture's): of a tail's rows (its plain
    row, an earlier release), the first by being tied to its ACK, then `clean` (released no
    sooner than the round trip to the sender), then plain; an earlier release stands only
    tied (a plain row not tied stands, its sender's own clock counting it)."""
    rank = 4 * tied + 2 * clean + ~earlier
    order = np.lexsort((-rank, frame))
    best = np.zeros(len(frame), dtype=bool)
    best[order[group_starts(frame[order])]] = True
    return best & (tied | ~earlier)


def _window_filled(found: dict[str, np.ndarray], window_bytes: np.ndarray,
                   connections: Table) -> np.ndarray:
    """Whether the released segment, or the data before it, was as large as the window the ACK
    offers: then the sender waited for the window, not for Nagle. Only where the handshake gave
    the window scale (a raw window without it may read 128 times too small)."""
    scaled = by_connection(connections, "handshake", found["connection"]).astype(bool)
    largest = np.maximum(found["payload_bytes"], found["prev_payload_bytes"])
    return scaled & (largest >= window_bytes)


class StallStats(NamedTuple):
    """One (connection, direction)'s stalls of one kind: the medians and shares its finding
    reports, and how many of the direction's candidates were not tied to their ACK."""

    connection: int
    direction: int
    count: int
    lost_s: float
    median_stall_s: float
    median_hold_ms: float
    median_reaction_ms: float
    median_limit_ms: float
    median_held_bytes: float
    median_first_bytes: float
    previous_small: float
    previous_full: float
    after_full: float
    median_sender_rtt_ms: float
    median_ack_lag_ms: float
    median_receiver_rtt_ms: float
    hold_spread_ms: float
    causality_checked: float
    median_floor_ms: float
    released_earlier: int
    untied: int = 0
    untied_late: int = 0
    """Of the untied, those later than the sender reacts (the others too soon for the ACK)."""
    continued: int = 0
    """Small data written after a release in the same message: beyond the late horizon, or
    released on its own by a later ACK."""
    peer_silent: bool = False
    small_in_flight: int = 0


def _group_stats(stalls: dict[str, np.ndarray]) -> list[StallStats]:
    """One row per (connection, direction), in that order."""
    groups = KeyGroups(stalls["connection"], stalls["direction"])
    previous_bytes = stalls["prev_payload_bytes"]
    mss = stalls["mss"]
    # A burst whose earlier ACK released its tail began with a small write: held because of it.
    began_small = stalls["released_earlier"] > 0
    median_hold_ms = groups.median(stalls["hold_ms"])
    per_row_median = np.zeros(len(previous_bytes))
    per_row_median[groups.order if groups.order is not None else slice(None)] = np.repeat(
        median_hold_ms, groups.sizes)
    columns = (
        groups.keys[0], groups.keys[1], groups.sizes, groups.sum(stalls["stall_s"]),
        groups.median(stalls["stall_s"]), median_hold_ms,
        *(groups.median(stalls[name]) for name in (
            "reaction_ms", "reaction_limit_ms", "tail_bytes", "prev_payload_bytes")),
        groups.mean((previous_bytes < mss) | began_small),
        groups.mean((previous_bytes == mss) & ~began_small), groups.mean(previous_bytes == mss),
        *(groups.median(stalls[name]) for name in (
            "sender_rtt_ms", "ack_lag_ms", "receiver_rtt_ms")),
        groups.median(np.abs(stalls["hold_ms"] - per_row_median)),
        groups.mean(stalls["causality_checked"]), groups.median(stalls["reaction_floor_ms"]),
        groups.sum(stalls["released_earlier"].astype(np.int64)))
    return [StallStats(*row) for row in zip(*(column.tolist() for column in columns))]


Counted = dict[tuple[int, int], int]
"""A count per (connection, direction)."""


def _counts(candidates: dict[str, np.ndarray], name: str) -> Counted:
    """Per (connection, direction), its candidates marked `name` (`untied`, `continued`)."""
    marked = candidates[name]
    if not marked.any():
        return {}
    return KeyGroups(candidates["connection"][marked], candidates["direction"][marked]).counts_by_key()


def _subkind(stats: StallStats) -> str:
    """write-write-read when the data before the hold was itself small (or the burst the tail
    ends began small, the hold's cause under Linux's Nagle); a 2N-segment tail when it was a
    full segment; otherwise a small tail after larger data."""
    if stats.previous_small >= 0.5:
        return "write-write-read"
    return "2n-segment-tail" if stats.previous_full >= 0.5 else "small-tail"


def writes_on_own_clock(stats: StallStats) -> bool:
    """Whether a direction's small data is too often untied to ACKs for its ties to prove
    holds: written too soon or too late for an ACK to have released it (the late ones where
    they are `OWN_CLOCK_LATE_SHARE` or more), or long after a release in the same message."""
    seen = stats.count + stats.untied + stats.continued
    untied = stats.untied + stats.continued
    if stats.untied_late < OWN_CLOCK_LATE_SHARE * seen:
        untied -= stats.untied_late
    return untied >= OWN_CLOCK_MIN and untied >= OWN_CLOCK_SHARE * seen


def _causality_unchecked(stats: StallStats) -> bool:
    """Whether the sender is far enough from the tap for causality to matter, and its round
    trip unknown or only estimated from ACK lags (which may exceed the true one)."""
    rtt_ms = stats.median_sender_rtt_ms
    return rtt_ms != rtt_ms or (rtt_ms > CAUSALITY_JITTER_MS and stats.causality_checked < 0.5)


def chance_explains(stats: StallStats) -> bool:
    """Whether no more releases fell in the reaction window than a sender writing on its own
    clock would put there by chance: its untied data spread over the late horizon, in
    proportion to the window's width."""
    width_ms = stats.median_limit_ms - stats.median_floor_ms
    span_ms = LATE_HORIZON_FACTOR * stats.median_limit_ms + LATE_HORIZON_MS - width_ms
    return stats.count <= stats.untied * width_ms / max(span_ms, width_ms)


def _coupling_reason(stats: StallStats) -> tuple[bool, str]:
    """Whether the releases were tied tightly to their ACKs, and the words for it."""
    reaction_ms, sender_rtt_ms = stats.median_reaction_ms, stats.median_sender_rtt_ms
    if sender_rtt_ms != sender_rtt_ms:
        return False, ("the round trip to the sender is unknown, so causality could not be "
                       "checked")
    words = f"held data left {_duration(reaction_ms)} (median) after the ACK"
    if _causality_unchecked(stats):
        return False, words + (f"; the round trip to the sender ({_duration(sender_rtt_ms)}) is "
                               "only estimated from ACK lags, so causality was checked loosely")
    if sender_rtt_ms > CAUSALITY_JITTER_MS:
        words += (f", one round trip to the sender ({_duration(sender_rtt_ms)}) as causality "
                  "requires")
        return reaction_ms <= 0.5 * (sender_rtt_ms + stats.median_limit_ms), words
    return reaction_ms <= 0.5 * stats.median_limit_ms, words + " (the sender's own reaction)"


def _duration(ms: float) -> str:
    return f"{ms * 1000:.0f} us" if ms < 1 else f"{ms:.1f} ms"


def _timer_reason(stats: StallStats, host_timer: tuple[float | None, int]) -> tuple[bool, str]:
    """Whether the ACK delays are a delayed-ACK timer's: the receiver's timer fingerprinted from
    enough other ACKs, else the delays' own tight cluster in a known stack's range."""
    timer_ms, samples = host_timer
    hold_ms = stats.median_hold_ms
    others = samples - stats.count
    if timer_ms and others >= max(MIN_INDEPENDENT_SAMPLES, stats.count):
        if abs(hold_ms - timer_ms) <= TIMER_MATCH_SHARE * timer_ms:
            return True, (f"ACK delay {hold_ms:.1f} ms matches the receiver's delayed-ACK timer "
                          f"({timer_ms:.1f} ms, from {others} other ACKs)")
    family = next((name for low, high, name in STACK_FAMILIES if low <= hold_ms < high), None)
    if family and stats.count >= REPEATED and stats.hold_spread_ms <= CLUSTER_SPREAD_SHARE * hold_ms:
        return True, (f"ACK delays cluster at {hold_ms:.1f} ms (spread {stats.hold_spread_ms:.1f} "
                      f"ms), a {family} delayed-ACK timer")
    return False, ""


def _ordinary_ack_reason(stats: StallStats) -> tuple[bool, str]:
    """Whether the ACK that released a one-round-trip hold came as soon as the data arrived."""
    lag_ms, rtt_ms = stats.median_ack_lag_ms, stats.median_receiver_rtt_ms
    return lag_ms <= 1.25 * rtt_ms + 1.0, (
        f"the ACK came {lag_ms:.1f} ms after the data (round trip to the receiver "
        f"{rtt_ms:.1f} ms): an ordinary ACK, not a delayed one")


def _confidence(kind: str, stats: StallStats, host_timer: tuple[float | None, int],
                mss_estimated: bool) -> tuple[str, list[str]]:
    """high needs three independent signs: releases tied to the ACK, ACK timing that fits the
    kind, and repetition; repetition alone never raises it. A sender writing on its own clock
    is low whatever else holds."""
    reasons = []
    score = 0
    tight, words = _coupling_reason(stats)
    score += 1 if tight else 0
    if _causality_unchecked(stats):
        score -= 1
    reasons.append(words)
    fits, words = (_timer_reason(stats, host_timer) if kind == KIND
                   else _ordinary_ack_reason(stats))
    if fits:
        score += 1
        reasons.append(words)
    if stats.count >= REPEATED:
        score += 1
        reasons.append(f"repeated {stats.count} times")
    if stats.released_earlier:
        reasons.append(_earlier_release_words(stats))
    if mss_estimated:
        score -= 1
        reasons.append("MSS estimated (no handshake in the capture)")
    caveat = not_nagles(kind, stats)
    lowering = ([_own_clock_words(stats)] if writes_on_own_clock(stats) else []) + (
        [] if caveat is None else [_CAVEAT_WORDS[caveat].format(stats=stats)])
    if lowering:
        return "low", reasons + lowering
    level = "high" if score >= 3 else "medium" if score == 2 else "low"
    if kind == RTT_HOLD_KIND and stats.after_full >= 0.5:
        reasons.append("the data before it were full segments: a congestion window that "
                       "only the ACK of all of them opened again (an initial window of 2, as "
                       "before RFC 3390) would hold the tail the same way")
        level = "medium" if level == "high" else level
    return level, reasons


NO_NAGLE, ONE_WAY = "no-nagle", "one-way"
"""Why a hold may cost no one Nagle's time (`details.not_nagles`): its sender runs no Nagle, or
no exchange waited on a one-way stream's hold of a round trip."""
_CAVEAT_WORDS = {
    NO_NAGLE: "{stats.small_in_flight} times the sender sent a small segment before the ACK of "
              "the small one before it could reach it: it does not run Nagle (TCP_NODELAY), so "
              "what held its data was its congestion window or its application",
    ONE_WAY: "the receiver sent no data in the connection: nothing waited for an answer, so the "
             "hold delayed a one-way stream's delivery by a round trip, which no exchange paid",
}


def not_nagles(kind: str, stats: StallStats) -> str | None:
    """`NO_NAGLE` or `ONE_WAY` where the hold's time may be no one's Nagle cost, else None."""
    if stats.small_in_flight >= SMALL_IN_FLIGHT_MIN:
        return NO_NAGLE
    if kind == RTT_HOLD_KIND and stats.peer_silent:
        return ONE_WAY
    return None


def _earlier_release_words(stats: StallStats) -> str:
    return (f"{stats.released_earlier} of them released by the ACK of their burst's small "
            "first segment: Linux's Nagle holds a small segment only while an earlier small "
            "one is unacknowledged, whatever full segments are still in flight")


def _own_clock_words(stats: StallStats) -> str:
    signs = []
    if stats.untied:
        signs.append(f"{stats.untied} other small segments after such an ACK came later than the "
                     "sender reacts, or before the ACK could reach it")
    if stats.continued:
        signs.append(f"{stats.continued} small segments were written after an earlier release in "
                     "their message, with no answer between")
    return (f"{'; '.join(signs)}: the sender writes on its own clock, so a hold cannot be told "
            "from a paced write and the time is an upper bound")


def rescore(finding: Finding, receiver_timer_ms: float | None, receiver_samples: int) -> None:
    """Confidence again against the receiver's capture-wide timer, for a finding made on part of
    a capture (a part fingerprints its receivers from its own connections only)."""
    if finding.kind not in (KIND, RTT_HOLD_KIND):
        return
    stats, mss_estimated = finding.confidence_basis
    finding.confidence, finding.confidence_reasons = _confidence(
        finding.kind, stats, (receiver_timer_ms, receiver_samples), mss_estimated)


def _flood_warning(stats: StallStats) -> list[str]:
    """Seed 000's conclusion 1: with many tiny writes, TCP_NODELAY alone floods tinygrams.

    The trace cannot show write boundaries; a tiny first write followed by a held run of 4 to 16
    times its size is the seed 003 shape (15 two-byte writes), so it earns the warning.
    """
    first_bytes, held_bytes = float(stats.median_first_bytes), float(stats.median_held_bytes)
    if first_bytes <= TINY_WRITE_BYTES and (TINY_WRITE_FACTOR * first_bytes <= held_bytes
                                            <= MAX_TINY_WRITES * first_bytes):
        return [f"the held data ({held_bytes:.0f} bytes) likely came from several writes of about "
                f"{first_bytes:.0f} bytes: TCP_NODELAY alone would send each as its own packet "
                "(tinygram flood); make the writes whole first"]
    return []


def _advice(kind: str, subkind: str) -> list[str]:
    """The fixes, most effective first. No receiver-side fix for a one-round-trip hold: its ACK
    was not delayed."""
    if kind == RTT_HOLD_KIND:
        return ["single-write-nodelay", "writev", "cork"]
    if subkind == "2n-segment-tail":
        return ["double-buffer", "single-write-nodelay", "resize-message", "quickack"]
    return ["single-write-nodelay", "writev", "cork", "quickack"]


def _events(stalls: dict[str, np.ndarray]) -> dict[tuple, StallEvents]:
    """Every stall's evidence, grouped by (connection, direction)."""
    return split_events(stalls, ["connection", "direction"],
                        ("prev_frame", "peer_frame", "frame", "stall_s", "prev_time_us", "hold_ms",
                         "reaction_ms"))


def detect(columns: DetectorInput) -> list[Finding]:
    candidates = columns.taken("stall_candidates", _stall_candidates)
    untied = (_counts(candidates, "untied"), _counts(candidates, "untied_late"),
              _counts(candidates, "continued"))
    in_flight = small_in_flight(columns.taken(LONE_SEGMENTS, lone_segments_of),
                                columns.connections)
    streams = {(f.connection, f.sender) for f in columns.earlier_findings
               if f.kind == STREAM_COALESCING_KIND}
    findings = []
    flights = _sent_in_flights(candidates, columns)
    for kind, ack_kind in ((KIND, DELAYED), (RTT_HOLD_KIND, ORDINARY)):
        chosen = candidates["tied"] & (candidates["ack_kind"] == ack_kind)
        if kind == RTT_HOLD_KIND:
            chosen &= ~flights
        stalls = {name: values[chosen] for name, values in candidates.items()}
        findings += _findings(columns, kind, stalls, (untied, in_flight), streams)
    return findings


def small_in_flight(lone: dict[str, np.ndarray], connections: Table) -> Counted:
    """Per (connection, direction), how often its sender sent a small segment before the ACK
    of the small one before it could reach it, told from the lone segments a pure ACK
    answered: the next one passed the tap sooner after that ACK than `IN_FLIGHT_RTT_SHARE` of
    the round trip between the tap and the sender. Seen from a tap near the receiver, as its
    ACK of each segment passes the tap at once and crosses the path after."""
    order = np.lexsort((lone["frame"], lone["direction"], lone["connection"]))
    connection, direction = lone["connection"][order], lone["direction"][order]
    if len(order) < 2:
        return {}
    small = lone["payload_bytes"][order] < by_connection(connections, "effective_mss", connection)
    rtt_ms = np.nan_to_num(sender_side_rtt_ms(connections, connection, direction))
    measured = rtt_measured(connections, connection)
    soon_ms = (lone["time_us"][order][1:] - lone["next_peer_time_us"][order][:-1]) / 1000
    hit = np.flatnonzero((connection[1:] == connection[:-1]) & (direction[1:] == direction[:-1])
                         & small[1:] & small[:-1] & measured[1:]
                         & (rtt_ms[1:] >= IN_FLIGHT_MIN_RTT_MS)
                         & (soon_ms < IN_FLIGHT_RTT_SHARE * rtt_ms[1:])) + 1
    if not len(hit):
        return {}
    return KeyGroups(connection[hit], direction[hit]).counts_by_key()


def _sent_in_flights(candidates: dict[str, np.ndarray], columns: DetectorInput) -> np.ndarray:
    """Whether a candidate's message went out in flights an ACK apart, whose last one a
    one-round-trip hold may have waited for whatever Nagle did.

    After full segments: where two consecutive full segments of the message paused half a
    round trip or more, as a congestion window in slow start sends them (2, then 4
    segments...), and the final flight went out at once, its ACKs coming together
    (`full_segment_gaps.py`). Full segments that streamed without such a pause had the ACK
    clock running, and a final flight that took a tenth of a round trip (2 ms at least) to go
    out was acknowledged over as long: either way the tail waited for the ACK of everything
    past ACKs any of which a window would have released it at, sooner than the timing tests
    allow. After small data, or where a burst's earlier ACK released the tail (the first ACK
    after the data before it, which would let a window-held tail go as well): where the
    message had been going out for half a round trip or more, flights or small writes an ACK
    apart (which a writer pacing itself gives as well)."""
    count = len(candidates["message"])
    if not count:
        return np.zeros(0, dtype=bool)
    rtt_ms = np.nan_to_num(by_connection(columns.connections, "rtt_ms", candidates["connection"]),
                           nan=np.inf)
    after_full = candidates["prev_payload_bytes"] % np.maximum(candidates["mss"], 1) == 0
    paused = candidates[FULL_GAP] / 1000 >= FLIGHT_PAUSE_RTT_SHARE * rtt_ms
    at_once = candidates[FINAL_FLIGHT] / 1000 < np.maximum(FLIGHT_SPREAD_RTT_SHARE * rtt_ms,
                                                           FLIGHT_SPREAD_MS)
    released_by_all = candidates["released_earlier"] == 0
    return np.where(after_full & released_by_all, paused & at_once,
                    _going_out_long(candidates, columns.messages, rtt_ms))


def _going_out_long(candidates: dict[str, np.ndarray], messages: Table,
                    rtt_ms: np.ndarray) -> np.ndarray:
    """Whether each candidate's message had been going out for half a round trip or more
    before the data ahead of it."""
    if messages.empty:
        return np.zeros(len(candidates["message"]), dtype=bool)
    ids = messages["message"]
    order = np.argsort(ids, kind="stable")
    position, found = found_in_sorted(ids[order], candidates["message"])
    start_us = messages["start_us"][order][position]
    return found & ((candidates["prev_time_us"] - start_us) / 1000
                    >= FLIGHT_PAUSE_RTT_SHARE * rtt_ms)


def _findings(columns: DetectorInput, kind: str, stalls: dict[str, np.ndarray],
              counts: tuple[tuple[Counted, Counted, Counted], Counted],
              streams: set[tuple[int, str]]) -> list[Finding]:
    """One finding per (connection, direction) of one kind's stalls (`counts`: per direction,
    its candidates untied to their ACK, of them those later than the sender reacts, and those
    written long after a release; and its small segments sent in flight together)."""
    (untied, untied_late, continued), in_flight = counts
    if kind == RTT_HOLD_KIND:
        stalls = _at_least_min_stall(stalls)
    events = _events(stalls)
    table = _group_stats(stalls)
    connections = np.array([stats.connection for stats in table], dtype=np.int64)
    directions = np.array([stats.direction for stats in table], dtype=np.int64)
    silent = _peer_silent(columns.connections, connections, directions)
    table = [stats._replace(untied=untied.get((stats.connection, stats.direction), 0),
                            untied_late=untied_late.get((stats.connection, stats.direction), 0),
                            continued=continued.get((stats.connection, stats.direction), 0),
                            small_in_flight=in_flight.get((stats.connection, stats.direction), 0),
                            peer_silent=quiet) for stats, quiet in zip(table, silent)]
    senders, receivers = columns.direction_names().of(connections, directions)
    table_connections = columns.connections

    def column(name: str) -> list:
        return by_connection(table_connections, name, connections).tolist()

    receiver_hosts = [server if direction == 0 else client for server, client, direction in zip(
        column("server_address"), column("client_address"), directions.tolist())]
    findings = []
    for stats, sender, receiver, receiver_host, mss_estimated, duration_s in zip(
            table, senders, receivers, receiver_hosts,
            column("mss_estimated"), column("duration_s")):
        if (stats.connection, sender) in streams or chance_explains(stats):
            continue
        findings.append(_finding(kind, stats, sender, receiver, _host_timer(columns, receiver_host),
                                 bool(mss_estimated), duration_s,
                                 events[(stats.connection, stats.direction)]))
    return findings


def _peer_silent(connections: Table, ids: np.ndarray, directions: np.ndarray) -> list[bool]:
    """Whether the receiver of each (connection, direction) sent no data in the connection."""
    to_client = by_connection(connections, "bytes_server_to_client", ids)
    to_server = by_connection(connections, "bytes_client_to_server", ids)
    return (np.where(directions == 0, to_client, to_server) == 0).tolist()


def _at_least_min_stall(stalls: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    kept = stalls["stall_s"] * 1000 >= MIN_STALL_MS
    return {name: values[kept] for name, values in stalls.items()}


def _host_timer(columns: DetectorInput, address: object) -> tuple[float | None, int]:
    host = columns.hosts.get(str(address))
    return (host.delack_timer_ms, host.delack_samples) if host else (None, 0)


def _finding(kind: str, stats: StallStats, sender: str, receiver: str,
             host_timer: tuple[float | None, int], mss_estimated: bool, duration_s: float,
             events: StallEvents) -> Finding:
    confidence, reasons = _confidence(kind, stats, host_timer, mss_estimated)
    subkind = _subkind(stats)
    upper_bound = writes_on_own_clock(stats)
    return Finding(
        kind=kind, connection=stats.connection, sender=sender, receiver=receiver,
        count=stats.count, time_lost_s=stats.lost_s,
        share=stats.lost_s / duration_s if duration_s > 0 else 0.0,
        confidence=confidence, confidence_reasons=reasons,
        confidence_basis=(stats, mss_estimated),
        events=events, advice=_advice(kind, subkind), subkind=subkind,
        details={"median_ack_delay_ms": round(stats.median_hold_ms, 3),
                 "median_reaction_ms": round(stats.median_reaction_ms, 4),
                 "median_held_bytes": stats.median_held_bytes,
                 "sender_rtt_ms": (None if stats.median_sender_rtt_ms != stats.median_sender_rtt_ms
                                   else round(stats.median_sender_rtt_ms, 3)),
                 "untied_releases": stats.untied,
                 "written_after_release": stats.continued,
                 "released_by_burst_start": stats.released_earlier,
                 "time_lost_upper_bound": upper_bound,
                 "one_way_stream": stats.peer_silent,
                 "small_in_flight": stats.small_in_flight,
                 "not_nagles": not_nagles(kind, stats),
                 "warnings": _flood_warning(stats)},
        summary=_summary(kind, stats, sender, receiver, upper_bound))


def _summary(kind: str, stats: StallStats, sender: str, receiver: str, upper_bound: bool) -> str:
    counted = counted_ms(stats.count, "stall", stats.median_stall_s)
    if upper_bound:
        counted = f"up to {stats.lost_s:.3f} s in {counted}; a hold cannot be told from a paced write"
    if kind == RTT_HOLD_KIND:
        return (f"{sender} held a small segment until {receiver}'s ordinary ACK of the data before "
                f"it came back, one round trip: {counted}")
    return (f"{sender} held small segments until {receiver}'s delayed ACK released them: "
            f"{counted}")
