"""The headline: a small segment held by Nagle until the peer's delayed ACK released it.

In one direction (SPEC section 4.1): the receiver's pure ACK acknowledges exactly everything the
sender had sent (more would mean the capture missed data, and its timing proves nothing); that
ACK came a delayed-ACK time after the sender's previous data (far longer than the round trip,
and at most 500 ms, RFC 1122's limit); and a small segment (or a super-segment's small tail)
left right after the ACK, within the time the sender needs to react as seen from the tap:
microseconds at the sender, one round trip between tap and sender elsewhere (between half and
1.3 times that round trip, plus 1 ms; no lower bound when that round trip is under 1 ms).
No data from the receiver came in between (else it is think time), the sender retransmitted
nothing (else it is loss recovery) and the window was open (else it is a zero window). The
stall lasts from the previous data segment to the released one. A one-way stream whose held
data accumulates is named stream coalescing instead (found first).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import pandas as pd

from nagledetect.detectors.delack_timer import (
    MIN_DELAYED_HOLD_MS,
    RTT_MULTIPLE,
    receiver_side_rtt_ms,
)
from nagledetect.detectors.model import (
    DetectorInput,
    Finding,
    StallEvents,
    counted_ms,
    split_events,
)
from nagledetect.events.segments import PURE_ACK_ROLES, role_in
from nagledetect.flows.connections import by_connection
from nagledetect.flows.grouped import KeyGroups

KIND = "nagle-delack-stall"
STREAM_COALESCING_KIND = "stream-coalescing"
MIN_REACTION_LIMIT_MS = 1.0
REACTION_RTT_FACTOR = 1.3
REACTION_FLOOR_FACTOR = 0.5
MAX_DELAYED_HOLD_MS = 600.0
UNKNOWN_RTT_REACTION_LIMIT_MS = 5.0
TIMER_MATCH_SHARE = 0.25
REPEATED = 3
TINY_WRITE_BYTES = 16
TINY_WRITE_FACTOR = 4
MAX_TINY_WRITES = 16


def sender_side_rtt_ms(connections: pd.DataFrame, connection: np.ndarray,
                       direction: np.ndarray) -> np.ndarray:
    """Round trip between the tap and the sender of each (connection, direction); NaN if unknown."""
    return receiver_side_rtt_ms(connections, connection, 1 - direction)


STALL_COLUMNS = ("connection", "direction", "frame", "time_us", "payload_bytes", "tail_bytes",
                 "mss", "prev_frame", "prev_time_us", "prev_payload_bytes", "peer_frame")
"""The segment columns a stall keeps (the others are let go before rows are selected)."""
UNTIMED_STALL_COLUMNS = (*STALL_COLUMNS, "peer_time_us", "message")
"""What `untimed_stalls` keeps of a segment: the stall's columns, what the timing tests read,
and its message (segment parity asks which messages a stall released)."""
UNTIMED_STALLS = "untimed_stalls"
"""The shared table of `untimed_stalls` (`DetectorInput.shared`): a part read a slice at a
time hands it over made from its slices."""


def stall_candidates(columns: DetectorInput) -> dict[str, np.ndarray]:
    """Columns of every segment that passes the stall test, with its ACK delay and reaction
    time (made once for this detector and stream coalescing)."""
    return columns.shared("stall_candidates", _stall_candidates)


def _stall_candidates(columns: DetectorInput) -> dict[str, np.ndarray]:
    return timed_stalls(untimed_stall_table(columns), columns.connections)


def untimed_stall_table(columns: DetectorInput) -> dict[str, np.ndarray]:
    """`untimed_stalls` of every segment, made once (the stall test and segment parity read
    it)."""
    return columns.shared(UNTIMED_STALLS, untimed_of_segments)


def untimed_of_segments(columns: DetectorInput) -> dict[str, np.ndarray]:
    """The maker of `UNTIMED_STALLS` where the segment table is held (a whole run)."""
    return untimed_stalls(columns.segments)


def untimed_stalls(segments: pd.DataFrame) -> dict[str, np.ndarray]:
    """The segments that pass the packet tests, each on its own row and context (so a part
    read a slice at a time takes them a slice at a time), and whose ACK came 10 ms or more
    after the data (no hold of `MIN_DELAYED_HOLD_MS` can come of a shorter lag, whatever the
    round trips, which are known only once every packet has been read). In frame order, as
    the segments come."""
    passed = np.flatnonzero(
        segments["is_small"].to_numpy()
        & (segments["prev_frame"].to_numpy() >= 0)
        & role_in(segments["peer_role"], PURE_ACK_ROLES)
        & (segments["peer_time_us"].to_numpy() > segments["prev_time_us"].to_numpy())
        & (segments["peer_ack"].to_numpy() == segments["sent_max_before"].to_numpy())
        & (segments["peer_data_between"].to_numpy() == 0)
        & (segments["own_retransmissions_between"].to_numpy() == 0)
        & (segments["peer_window_bytes"].to_numpy() > 0))
    found = {name: segments[name].to_numpy()[passed] for name in UNTIMED_STALL_COLUMNS}
    lagged = (found["peer_time_us"] - found["prev_time_us"]) / 1000 >= MIN_DELAYED_HOLD_MS
    return {name: values[lagged] for name, values in found.items()}


def timed_stalls(untimed: dict[str, np.ndarray], connections: pd.DataFrame
                 ) -> dict[str, np.ndarray]:
    """The timing tests on the segments that passed the packet tests (most segments fail
    those: the timing columns are made for few rows), with each stall's ACK delay and
    reaction time."""
    found = {name: untimed[name] for name in STALL_COLUMNS}
    connection, direction = found["connection"], found["direction"]
    rtt_ms = by_connection(connections, "rtt_ms", connection)
    rtt_known = ~np.isnan(rtt_ms)
    total_rtt_ms = np.nan_to_num(rtt_ms, nan=0.0)
    peer_time_us = untimed["peer_time_us"]
    reaction_ms = (found["time_us"] - peer_time_us) / 1000
    sender_rtt_ms = sender_side_rtt_ms(connections, connection, direction)
    reaction_limit_ms = np.where(
        rtt_known, np.maximum(MIN_REACTION_LIMIT_MS, REACTION_RTT_FACTOR * sender_rtt_ms + 1.0),
        UNKNOWN_RTT_REACTION_LIMIT_MS)
    reaction_floor_ms = np.where(rtt_known & (sender_rtt_ms > MIN_REACTION_LIMIT_MS),
                                 REACTION_FLOOR_FACTOR * sender_rtt_ms, 0.0)
    ack_lag_ms = (peer_time_us - found["prev_time_us"]) / 1000
    hold_ms = ack_lag_ms - receiver_side_rtt_ms(connections, connection, direction)
    timed = ((reaction_ms >= reaction_floor_ms) & (reaction_ms <= reaction_limit_ms)
             & (hold_ms >= np.maximum(MIN_DELAYED_HOLD_MS, RTT_MULTIPLE * total_rtt_ms))
             & (hold_ms <= MAX_DELAYED_HOLD_MS))
    found = {name: values[timed] for name, values in found.items()}
    found.update(reaction_ms=reaction_ms[timed], reaction_limit_ms=reaction_limit_ms[timed],
                 hold_ms=hold_ms[timed],
                 stall_s=(found["time_us"] - found["prev_time_us"]) / 1e6)
    return found


class StallStats(NamedTuple):
    """One (connection, direction)'s stalls: the medians and shares its finding reports."""

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


def _group_stats(stalls: dict[str, np.ndarray]) -> list[StallStats]:
    """One row per (connection, direction), in that order."""
    groups = KeyGroups(stalls["connection"], stalls["direction"])
    previous_bytes = stalls["prev_payload_bytes"]
    mss = stalls["mss"]
    columns = (
        groups.keys[0], groups.keys[1], groups.sizes, groups.sum(stalls["stall_s"]),
        *(groups.median(stalls[name]) for name in (
            "stall_s", "hold_ms", "reaction_ms", "reaction_limit_ms", "tail_bytes",
            "prev_payload_bytes")),
        groups.mean(previous_bytes < mss), groups.mean(previous_bytes == mss))
    return [StallStats(*row) for row in zip(*(column.tolist() for column in columns))]


def _subkind(stats: StallStats) -> str:
    """write-write-read when the data before the hold was itself small; a 2N-segment tail when
    it was a full segment; otherwise a small tail after larger data."""
    if stats.previous_small >= 0.5:
        return "write-write-read"
    return "2n-segment-tail" if stats.previous_full >= 0.5 else "small-tail"


def _confidence(reaction_ms: float, limit_ms: float, hold_ms: float, count: int,
                timer_ms: float | None, mss_estimated: bool) -> tuple[str, list[str]]:
    reasons = []
    score = 0
    if reaction_ms <= 0.5 * limit_ms:
        score += 1
        reasons.append(f"held data left {reaction_ms * 1000:.0f} us (median) after the ACK")
    if timer_ms and abs(hold_ms - timer_ms) <= TIMER_MATCH_SHARE * timer_ms:
        score += 1
        reasons.append(f"ACK delay {hold_ms:.1f} ms matches the receiver's "
                       f"delayed-ACK timer ({timer_ms:.1f} ms)")
    if count >= REPEATED:
        score += 1
        reasons.append(f"repeated {count} times")
    if mss_estimated:
        score -= 1
        reasons.append("MSS estimated (no handshake in the capture)")
    level = "high" if score >= 3 else "medium" if score == 2 else "low"
    return level, reasons


def rescore(finding: Finding, receiver_timer_ms: float | None) -> None:
    """Confidence again against the receiver's capture-wide timer, for a finding made on part of
    a capture (a part fingerprints its receivers from its own connections only)."""
    if finding.kind != KIND:
        return
    reaction_ms, limit_ms, hold_ms, mss_estimated = finding.confidence_basis
    finding.confidence, finding.confidence_reasons = _confidence(
        reaction_ms, limit_ms, hold_ms, finding.count, receiver_timer_ms, mss_estimated)


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


def _advice(subkind: str) -> list[str]:
    if subkind == "2n-segment-tail":
        return ["double-buffer", "single-write-nodelay", "resize-message", "quickack"]
    return ["single-write-nodelay", "writev", "cork", "quickack"]


def _events(stalls: dict[str, np.ndarray]) -> dict[tuple, StallEvents]:
    """Every stall's evidence, grouped by (connection, direction)."""
    return split_events(stalls, ["connection", "direction"],
                        ("prev_frame", "peer_frame", "frame", "stall_s", "prev_time_us", "hold_ms",
                         "reaction_ms"))


def detect(columns: DetectorInput) -> list[Finding]:
    stalls = columns.taken("stall_candidates", _stall_candidates)
    names = columns.direction_names()
    streams = {(f.connection, f.sender) for f in columns.earlier_findings
               if f.kind == STREAM_COALESCING_KIND}
    events = _events(stalls)
    table = _group_stats(stalls)
    connections = np.array([stats.connection for stats in table], dtype=np.int64)
    directions = np.array([stats.direction for stats in table], dtype=np.int64)
    senders, receivers = names.of(connections, directions)
    table_connections = columns.connections

    def column(name: str) -> list:
        return by_connection(table_connections, name, connections).tolist()

    receiver_hosts = [server if direction == 0 else client for server, client, direction in zip(
        column("server_address"), column("client_address"), directions.tolist())]
    findings = []
    for stats, sender, receiver, receiver_host, mss_estimated, duration_s in zip(
            table, senders, receivers, receiver_hosts,
            column("mss_estimated"), column("duration_s")):
        connection, direction = int(stats.connection), int(stats.direction)
        if (connection, sender) in streams:
            continue
        host = columns.hosts.get(str(receiver_host))
        basis = (float(stats.median_reaction_ms), float(stats.median_limit_ms),
                 float(stats.median_hold_ms), bool(mss_estimated))
        confidence, reasons = _confidence(basis[0], basis[1], basis[2], int(stats.count),
                                          host.delack_timer_ms if host else None, basis[3])
        subkind = _subkind(stats)
        findings.append(Finding(
            kind=KIND, connection=connection, sender=sender, receiver=receiver,
            count=int(stats.count), time_lost_s=float(stats.lost_s),
            share=float(stats.lost_s) / duration_s if duration_s > 0 else 0.0,
            confidence=confidence, confidence_reasons=reasons, confidence_basis=basis,
            events=events[(connection, direction)], advice=_advice(subkind), subkind=subkind,
            details={"median_ack_delay_ms": round(float(stats.median_hold_ms), 3),
                     "median_reaction_ms": round(float(stats.median_reaction_ms), 4),
                     "median_held_bytes": float(stats.median_held_bytes),
                     "warnings": _flood_warning(stats)},
            summary=(f"{sender} held small segments until {receiver}'s delayed ACK released them: "
                     f"{counted_ms(int(stats.count), 'stall', stats.median_stall_s)}"),
        ))
    return findings
