"""Every other gap, named so it is not blamed on Nagle (SPEC section 4.8).

Each gap between consecutive new-data segments of a connection that exceeds the threshold
(10 ms, and four round trips) gets exactly one cause, in this order: a Nagle/delayed-ACK stall
already found (its released segment ends the gap: left to that finding); loss recovery (a
retransmission inside the gap); zero window (a zero window advertised inside it); think time
(the server's data ends a wait that began with the client's data: the server's application took
that long to answer); idle (anything else: the same side sends again, e.g. a paced writer, or
the client starts its next request after a pause).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from nagledetect.detectors.kinds import NAGLE_FAMILY
from nagledetect.detectors.model import (
    DetectorInput,
    Finding,
    counted_ms,
    released_frames,
    split_events,
)
from nagledetect.detectors.nagle_stall import KIND as STALL_KIND
from nagledetect.events.segments import RETRANSMISSION_ROLES, role_in
from nagledetect.flows.connections import by_connection
from nagledetect.flows.grouped import KeyGroups, joined_columns, last_per_key
from nagledetect.flows.roles import ROLE

GAP_MIN_MS = 10.0
RTT_MULTIPLE = 4
CAUSES = ("loss-recovery", "zero-window", "think-time", "idle")
ADVICE = {"loss-recovery": [], "zero-window": [], "think-time": [], "idle": []}
GAP_CAUSES = tuple(sorted((*CAUSES, STALL_KIND)))
"""What can end a gap: the categories of the cause column, in name order (as findings group)."""
_CAUSE_CODE = {cause: code for code, cause in enumerate(GAP_CAUSES)}
DESCRIPTIONS = {
    "loss-recovery": "waited for lost data to be retransmitted",
    "zero-window": "waited while the receiver's window was zero",
    "think-time": "waited for the server's application to answer",
    "idle": "had nothing to send (paced writes or pauses between messages)",
}


@dataclass
class GapsBefore:
    """Per connection, what came before the rows given (a part read a slice at a time): its
    latest new-data segment (frame, time, direction; a frame of 0 where none), and the latest
    frame of a retransmitted or out-of-order packet and of a zero window (0 where none)."""

    frame: np.ndarray
    time_us: np.ndarray
    direction: np.ndarray
    retransmitted_frame: np.ndarray
    zero_window_frame: np.ndarray


GAP_ROWS = "gap_rows"
"""The shared table of `gap_rows` (`DetectorInput.shared`): a part read a slice at a time
hands it over made from its slices (`GapsBySlice`)."""


def gaps_of_segments(columns: DetectorInput) -> dict[str, np.ndarray]:
    """The maker of `GAP_ROWS` where the segment and packet tables are held (a whole run)."""
    return gap_rows(columns.segments, columns.packets)


def gap_rows(segments: pd.DataFrame, packets: pd.DataFrame,
             before: GapsBefore | None = None) -> dict[str, np.ndarray]:
    """Gaps of more than `GAP_MIN_MS` between consecutive new-data segments of each connection
    (in frame order, either direction), each with whether a retransmission or a zero window lies
    in it: all that a gap's cause reads but the round trip (known once every packet is) and
    the stalls. `before`: what the rows given follow, where they continue a connection."""
    order = np.argsort(segments["connection"].to_numpy(), kind="stable")  # segments: frame order
    connection, frame, time_us, direction = (
        segments[name].to_numpy()[order] for name in ("connection", "frame", "time_us",
                                                      "direction"))
    first = np.ones(len(connection), dtype=bool)
    first[1:] = connection[1:] != connection[:-1]
    previous = {name: np.concatenate((values[:1], values[:-1])) for name, values in
                (("frame", frame), ("time_us", time_us), ("direction", direction))}
    has_previous = ~first
    if before is not None:
        continued = connection[first]
        for name, values in previous.items():
            values[first] = getattr(before, name)[continued]
        has_previous[first] = before.frame[continued] > 0
    gap = np.flatnonzero(has_previous & (time_us - previous["time_us"] > GAP_MIN_MS * 1000))
    gaps = {"connection": connection[gap],
            "before_frame": previous["frame"][gap], "after_frame": frame[gap],
            "before_time_us": previous["time_us"][gap], "after_time_us": time_us[gap],
            "before_direction": previous["direction"][gap], "after_direction": direction[gap]}
    for name, mask in _inside_masks(packets).items():
        gaps[name] = _packets_within(packets, gaps, mask)
        if before is not None:
            gaps[name] |= getattr(before, f"{name}_frame")[gaps["connection"]] > gaps["before_frame"]
    return gaps


def _inside_masks(packets: pd.DataFrame) -> dict[str, np.ndarray]:
    """The packets whose presence inside a gap names its cause: a retransmission (or an
    out-of-order segment), and a zero window (not on a SYN or RST)."""
    role = packets["role"].cat.codes.to_numpy()
    return {"retransmitted": role_in(packets["role"], RETRANSMISSION_ROLES),
            "zero_window": ((packets["window_bytes"].to_numpy() == 0) & (role != ROLE["rst"])
                            & (role != ROLE["syn"]))}


def gaps_after(segments: pd.DataFrame, packets: pd.DataFrame, before: GapsBefore) -> GapsBefore:
    """What the rows given leave for the next: `before`, updated in place (arrays by
    connection)."""
    connection = segments["connection"].to_numpy()
    last = last_per_key(connection, np.arange(len(connection)), len(before.frame))
    present = np.flatnonzero(last >= 0)
    for name in ("frame", "time_us", "direction"):
        getattr(before, name)[present] = segments[name].to_numpy()[last[present]]
    packet_connection = packets["connection"].to_numpy()
    frame = packets["frame"].to_numpy().astype(np.int64)
    for name, mask in _inside_masks(packets).items():
        np.maximum.at(getattr(before, f"{name}_frame"), packet_connection[mask], frame[mask])
    return before


class GapsBySlice:
    """The gaps between a connection's data segments (`other_stalls.gap_rows`) a slice at a
    time: each connection's latest segment and the latest frames of the packets that name a
    gap's cause are carried across the cut."""

    def __init__(self, connection_count: int) -> None:
        self._before = GapsBefore(*(np.zeros(connection_count, dtype=np.int64) for _ in range(5)))
        self._gaps: list[dict[str, np.ndarray]] = []

    def add(self, segments: pd.DataFrame, packets: pd.DataFrame) -> None:
        """Take the gaps that end in this slice (its segments and packets, in frame order)."""
        self._gaps.append(gap_rows(segments, packets, self._before))
        self._before = gaps_after(segments, packets, self._before)

    def gaps(self) -> dict[str, np.ndarray]:
        """Every gap, in the whole run's order (connection, then frame), once a slice or more
        has been added."""
        order = np.lexsort(tuple(np.concatenate([rows[name] for rows in self._gaps])
                                 for name in ("after_frame", "connection")))
        return joined_columns(self._gaps, order)


def timed_gaps(gaps: dict[str, np.ndarray], connections: pd.DataFrame) -> dict[str, np.ndarray]:
    """The gaps longer than four round trips as well (a capture has few gaps: columns, not a
    frame, cost less than their work)."""
    rtt_ms = np.nan_to_num(by_connection(connections, "rtt_ms", gaps["connection"]), nan=0.0)
    above = (gaps["after_time_us"] - gaps["before_time_us"]) > np.maximum(
        GAP_MIN_MS, RTT_MULTIPLE * rtt_ms) * 1000
    return {name: values[above] for name, values in gaps.items()}


def _packets_within(packets: pd.DataFrame, gaps: dict[str, np.ndarray],
                    mask: np.ndarray) -> np.ndarray:
    """For each gap: does any packet selected by `mask` lie in it, after its first segment and
    up to its last, that included (same connection)."""
    rows = np.flatnonzero(mask)
    if not len(rows) or not len(gaps["connection"]):
        return np.zeros(len(gaps["connection"]), dtype=bool)
    key = (packets["connection"].to_numpy()[rows].astype(np.int64) * (1 << 32)
           + packets["frame"].to_numpy()[rows])
    key.sort()
    gap_connection = gaps["connection"].astype(np.int64) * (1 << 32)
    low = gap_connection + gaps["before_frame"]
    high = gap_connection + gaps["after_frame"]
    return np.searchsorted(key, high, side="right") > np.searchsorted(key, low, side="right")


def classify_gaps(columns: DetectorInput) -> dict[str, np.ndarray]:
    """The gaps, each with its cause (`cause`, its code in `GAP_CAUSES`) and length (`gap_s`)."""
    gaps = timed_gaps(columns.taken(GAP_ROWS, gaps_of_segments), columns.connections)
    return gap_causes(gaps, released_frames(columns.earlier_findings, NAGLE_FAMILY))


def gap_causes(gaps: dict[str, np.ndarray], released: np.ndarray) -> dict[str, np.ndarray]:
    """Each gap's cause (the first that holds: a stall released its last segment, a
    retransmission or a zero window lies in it, the server answered the client, else idle)."""
    server_answers = (gaps["before_direction"] == 0) & (gaps["after_direction"] == 1)
    cause = np.where(server_answers, _CAUSE_CODE["think-time"], _CAUSE_CODE["idle"])
    cause = np.where(gaps["zero_window"], _CAUSE_CODE["zero-window"], cause)
    cause = np.where(gaps["retransmitted"], _CAUSE_CODE["loss-recovery"], cause)
    cause = np.where(np.isin(gaps["after_frame"], released), _CAUSE_CODE[STALL_KIND], cause)
    kept = {name: values for name, values in gaps.items()
            if name not in ("retransmitted", "zero_window")}
    return {**kept, "cause": cause, "gap_s": (gaps["after_time_us"] - gaps["before_time_us"]) / 1e6}


def detect(columns: DetectorInput) -> list[Finding]:
    gaps = classify_gaps(columns)
    named_here = np.isin(gaps["cause"], [_CAUSE_CODE[name] for name in CAUSES])
    gaps = {name: values[named_here] for name, values in gaps.items()}
    events = split_events(gaps, ["connection", "cause"],
                          ("before_frame", "after_frame", "after_frame", "gap_s", "before_time_us",
                           None, None))
    stats = _gap_stats(gaps)
    findings = []
    durations_s = by_connection(columns.connections, "duration_s", stats["connection"]).tolist()
    for connection, code, count, lost_s, median_gap_s, duration_s in zip(
            *(stats[name].tolist() for name in ("connection", "cause", "count", "lost_s",
                                                 "median_gap_s")), durations_s):
        cause = GAP_CAUSES[code]
        findings.append(Finding(
            kind=cause, connection=connection, sender=None, receiver=None, count=count,
            time_lost_s=lost_s, share=lost_s / duration_s if duration_s > 0 else 0.0,
            confidence="high", confidence_reasons=["named by what ended each gap"],
            events=events[(connection, code)], advice=ADVICE[cause],
            details={"median_gap_ms": round(median_gap_s * 1000, 3)},
            summary=(f"{counted_ms(count, 'gap', median_gap_s)}: "
                     f"the connection {DESCRIPTIONS[cause]}")))
    return findings


def _gap_stats(gaps: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Columns of one row per (connection, cause), in that order: the gaps' count, sum and
    median (the gaps' cause as its code in `GAP_CAUSES`, in name order)."""
    gap_s = gaps["gap_s"]
    groups = KeyGroups(gaps["connection"], gaps["cause"])
    return {"connection": groups.keys[0], "cause": groups.keys[1], "count": groups.sizes,
            "lost_s": groups.sum(gap_s), "median_gap_s": groups.median(gap_s)}
