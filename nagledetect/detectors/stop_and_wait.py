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
import pandas as pd

from nagledetect.detectors.model import DetectorInput, Finding
from nagledetect.detectors.nagle_stall import KIND as STALL_KIND
from nagledetect.flows.connections import by_connection

KIND = "stop-and-wait"
MIN_EXCHANGES = 10
ALTERNATION = 0.9
WAITING_SHARE = 0.5


def exchange_table(messages: pd.DataFrame) -> pd.DataFrame:
    """Per connection: exchanges, how often messages alternate, and the time spent between them."""
    ordered = messages.sort_values(["connection", "first_frame"], kind="stable")
    connection = ordered["connection"].to_numpy()
    same = np.r_[False, connection[1:] == connection[:-1]]
    turn = np.r_[False, ordered["direction"].to_numpy()[1:] != ordered["direction"].to_numpy()[:-1]]
    wait_s = np.r_[0.0, (ordered["start_us"].to_numpy()[1:] - ordered["end_us"].to_numpy()[:-1]) / 1e6]
    wait_s = np.where(same, np.maximum(wait_s, 0.0), np.nan)
    return ordered.assign(turn=np.where(same, turn, np.nan), wait_s=wait_s,
                          request=ordered["direction"] == 0).groupby("connection").agg(
        messages=("message", "size"), exchanges=("request", "sum"), alternation=("turn", "mean"),
        waiting_s=("wait_s", "sum"), median_wait_s=("wait_s", "median"))


def detect(columns: DetectorInput) -> list[Finding]:
    messages = columns.messages
    if messages.empty:
        return []
    stalled = {f.connection for f in columns.earlier_findings if f.kind == STALL_KIND}
    names = columns.direction_names()
    findings = []
    table = exchange_table(messages)
    table = table[(table["exchanges"] >= MIN_EXCHANGES) & (table["messages"] >= 2 * MIN_EXCHANGES - 1)
                  & (table["alternation"] >= ALTERNATION)]
    table = table.reset_index()
    connections = table["connection"].to_numpy()
    durations_s = by_connection(columns.connections, "duration_s", connections).tolist()
    clients, servers = names.of(connections, np.zeros(len(connections), dtype=np.int8))
    for row, duration_s, client, server in zip(table.itertuples(index=False), durations_s,
                                               clients, servers):
        connection = int(row.connection)
        waiting_share = float(row.waiting_s / duration_s) if duration_s > 0 else 0.0
        if connection not in stalled and waiting_share < WAITING_SHARE:
            continue
        exchanges = int(row.exchanges)
        findings.append(Finding(
            kind=KIND, connection=connection, sender=client, receiver=server,
            count=exchanges, time_lost_s=0.0, share=waiting_share,
            confidence="high" if row.alternation >= 0.99 else "medium",
            confidence_reasons=[f"{row.alternation * 100:.0f}% of messages alternate direction",
                                f"{waiting_share * 100:.0f}% of the connection spent waiting "
                                "for the other side"],
            advice=["double-buffer"],
            details={"exchanges": exchanges, "alternation": round(float(row.alternation), 3),
                     "waiting_share": round(waiting_share, 3),
                     "median_wait_ms": round(float(row.median_wait_s) * 1000, 3)},
            summary=(f"{exchanges} request/response exchanges, one at a time: the pipe is empty "
                     f"{waiting_share * 100:.0f}% of the time")))
    return findings
