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
from nagledetect.flows.grouped import KeyGroups, key_order

KIND = "stop-and-wait"
MIN_EXCHANGES = 10
ALTERNATION = 0.9
WAITING_SHARE = 0.5


def exchange_table(messages: pd.DataFrame) -> pd.DataFrame:
    """The connections with enough strictly alternating exchanges, in connection order: their
    exchanges, how often messages alternate, and the time spent between them (medians are
    taken for these connections only)."""
    order = key_order(messages["connection"].to_numpy(), messages["first_frame"].to_numpy())
    connection, direction, start_us, end_us = (
        messages[name].to_numpy() if order is None else messages[name].to_numpy()[order]
        for name in ("connection", "direction", "start_us", "end_us"))
    same = np.r_[False, connection[1:] == connection[:-1]]
    turn = np.r_[False, direction[1:] != direction[:-1]]
    wait_s = np.r_[0.0, (start_us[1:] - end_us[:-1]) / 1e6]
    wait_s = np.where(same, np.maximum(wait_s, 0.0), np.nan)
    per_connection = KeyGroups(connection)
    table = pd.DataFrame({
        "connection": per_connection.keys[0], "messages": per_connection.sizes,
        "exchanges": per_connection.sum(direction == 0),
        "alternation": per_connection.mean(np.where(same, turn, np.nan)),
        "waiting_s": per_connection.sum(wait_s)}, copy=False)
    qualifies = ((table["exchanges"].to_numpy() >= MIN_EXCHANGES)
                 & (table["messages"].to_numpy() >= 2 * MIN_EXCHANGES - 1)
                 & (table["alternation"].to_numpy() >= ALTERNATION))
    kept = np.repeat(qualifies, per_connection.sizes)
    return table[qualifies].assign(
        median_wait_s=KeyGroups(connection[kept]).median(wait_s[kept]))


def detect(columns: DetectorInput) -> list[Finding]:
    messages = columns.messages
    if messages.empty:
        return []
    stalled = {f.connection for f in columns.earlier_findings if f.kind == STALL_KIND}
    names = columns.direction_names()
    findings = []
    table = exchange_table(messages)
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
