"""Stop-and-wait exchanges (seed 001): request/response with at most one message outstanding,
the pipe drained between messages.

A connection qualifies when it has many exchanges, its messages strictly alternate direction,
and each new message starts only after the previous one (from the other side) was complete. It
is reported when waiting dominates: stalls were found on it, or the time between one side's
message and the other's answer is most of the connection's life. Double buffering (a second
request in flight) removes both the stalls and the idle pipe. Its time is already counted by
the stall and think-time findings, so it adds none to the ranking.
"""

from __future__ import annotations

import numpy as np

from nagledetect.detectors.model import DetectorInput, Finding
from nagledetect.detectors.nagle_stall import KIND as STALL_KIND
from nagledetect.events.endpoints import direction_endpoints

KIND = "stop-and-wait"
MIN_EXCHANGES = 10
ALTERNATION = 0.9
WAITING_SHARE = 0.5


def detect(columns: DetectorInput) -> list[Finding]:
    messages = columns.messages
    if messages.empty:
        return []
    stalled = {f.connection for f in columns.earlier_findings if f.kind == STALL_KIND}
    names = direction_endpoints(columns.connections)
    findings = []
    for connection, rows in messages.groupby("connection", sort=True):
        exchanges = int((rows["direction"] == 0).sum())
        if exchanges < MIN_EXCHANGES or len(rows) < 2 * MIN_EXCHANGES - 1:
            continue
        ordered = rows.sort_values("first_frame")
        turns = (ordered["direction"].to_numpy()[1:] != ordered["direction"].to_numpy()[:-1]).mean()
        waits_s = (ordered["start_us"].to_numpy()[1:] - ordered["end_us"].to_numpy()[:-1]) / 1e6
        duration_s = float(columns.connection_row(connection).duration_s)
        waiting_share = float(waits_s.clip(min=0).sum() / duration_s) if duration_s > 0 else 0.0
        if turns < ALTERNATION or (connection not in stalled and waiting_share < WAITING_SHARE):
            continue
        client, server = names[(int(connection), 0)]
        findings.append(Finding(
            kind=KIND, connection=int(connection), sender=client, receiver=server,
            count=exchanges, time_lost_s=0.0, share=waiting_share,
            confidence="high" if turns >= 0.99 else "medium",
            confidence_reasons=[f"{turns * 100:.0f}% of messages alternate direction",
                                f"{waiting_share * 100:.0f}% of the connection spent waiting "
                                "for the other side"],
            advice=["double-buffer"],
            details={"exchanges": exchanges, "alternation": round(float(turns), 3),
                     "waiting_share": round(waiting_share, 3),
                     "median_wait_ms": round(float(np.median(waits_s.clip(min=0))) * 1000, 3)},
            summary=(f"{exchanges} request/response exchanges, one at a time: the pipe is empty "
                     f"{waiting_share * 100:.0f}% of the time")))
    return findings
