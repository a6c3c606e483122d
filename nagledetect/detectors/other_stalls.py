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

import numpy as np
import pandas as pd

from nagledetect.detectors.model import (
    DetectorInput,
    Finding,
    counted_ms,
    released_frames,
    split_events,
)
from nagledetect.detectors.nagle_stall import KIND as STALL_KIND
from nagledetect.detectors.stream_coalescing import KIND as STREAM_KIND
from nagledetect.flows.connections import by_connection
from nagledetect.flows.grouped import KeyGroups
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


def _gaps(columns: DetectorInput) -> dict[str, np.ndarray]:
    """Gaps between consecutive new-data segments of each connection above the threshold, as
    columns (a capture has few gaps: a frame of them costs more than their work)."""
    segments = columns.segments
    order = np.argsort(segments["connection"].to_numpy(), kind="stable")  # segments: frame order
    connection, frame, time_us, direction = (
        segments[name].to_numpy()[order] for name in ("connection", "frame", "time_us",
                                                      "direction"))
    gap_us = np.diff(time_us)
    before = np.flatnonzero((connection[1:] == connection[:-1]) & (gap_us > GAP_MIN_MS * 1000))
    after = before + 1
    rtt_ms = np.nan_to_num(by_connection(columns.connections, "rtt_ms", connection[after]), nan=0.0)
    above = gap_us[before] > np.maximum(GAP_MIN_MS, RTT_MULTIPLE * rtt_ms) * 1000
    before, after = before[above], after[above]
    return {"connection": connection[after],
            "before_frame": frame[before], "after_frame": frame[after],
            "before_time_us": time_us[before], "after_time_us": time_us[after],
            "before_direction": direction[before], "after_direction": direction[after]}


def _packets_within(packets: pd.DataFrame, gaps: dict[str, np.ndarray],
                    mask: np.ndarray) -> np.ndarray:
    """For each gap: does any packet selected by `mask` lie strictly inside it (same connection)."""
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
    gaps = _gaps(columns)
    released = released_frames(columns.earlier_findings, (STALL_KIND, STREAM_KIND))
    packets = columns.packets
    role = packets["role"].cat.codes.to_numpy()
    retransmitted = _packets_within(packets, gaps, np.isin(
        role, (ROLE["retransmission"], ROLE["out_of_order"])))
    zero_window = _packets_within(packets, gaps, (packets["window_bytes"].to_numpy() == 0)
                                  & (role != ROLE["rst"]) & (role != ROLE["syn"]))
    server_answers = (gaps["before_direction"] == 0) & (gaps["after_direction"] == 1)
    cause = np.where(server_answers, _CAUSE_CODE["think-time"], _CAUSE_CODE["idle"])
    cause = np.where(zero_window, _CAUSE_CODE["zero-window"], cause)
    cause = np.where(retransmitted, _CAUSE_CODE["loss-recovery"], cause)
    cause = np.where(np.isin(gaps["after_frame"], released), _CAUSE_CODE[STALL_KIND], cause)
    return {**gaps, "cause": cause, "gap_s": (gaps["after_time_us"] - gaps["before_time_us"]) / 1e6}


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
