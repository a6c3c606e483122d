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

from typing import NamedTuple

import numpy as np

from nagledetect.detectors.model import DetectorInput, Finding
from nagledetect.detectors.nagle_stall import KIND as STALL_KIND
from nagledetect.flows.connections import by_connection
from nagledetect.flows.grouped import KeyGroups, key_order
from nagledetect.table import Table

KIND = "stop-and-wait"
MIN_EXCHANGES = 10
ALTERNATION = 0.9
WAITING_SHARE = 0.5


class Exchanges(NamedTuple):
    """One connection's strictly alternating exchanges."""

    connection: int
    messages: int
    exchanges: int
    alternation: float
    """How often a message's direction differs from the one before it."""
    waiting_s: float
    """Time between one message's end and the next one's start, summed."""
    median_wait_s: float


def exchange_table(messages: Table) -> list[Exchanges]:
    """The connections with enough strictly alternating exchanges, in connection order: their
    exchanges, how often messages alternate, and the time spent between them (medians are
    taken for these connections only)."""
    order = key_order(messages["connection"], messages["first_frame"])
    connection, direction, start_us, end_us = (
        messages[name] if order is None else messages[name][order]
        for name in ("connection", "direction", "start_us", "end_us"))
    same = np.r_[False, connection[1:] == connection[:-1]]
    turn = np.r_[False, direction[1:] != direction[:-1]]
    wait_s = np.r_[0.0, (start_us[1:] - end_us[:-1]) / 1e6]
    wait_s = np.where(same, np.maximum(wait_s, 0.0), np.nan)
    per_connection = KeyGroups(connection)
    exchanges = per_connection.sum(direction == 0)
    alternation = per_connection.mean(np.where(same, turn, np.nan))
    qualifies = ((exchanges >= MIN_EXCHANGES)
                 & (per_connection.sizes >= 2 * MIN_EXCHANGES - 1)
                 & (alternation >= ALTERNATION))
    kept = np.repeat(qualifies, per_connection.sizes)
    columns = (per_connection.keys[0][qualifies], per_connection.sizes[qualifies],
               exchanges[qualifies], alternation[qualifies],
               per_connection.sum(wait_s)[qualifies],
               KeyGroups(connection[kept]).median(wait_s[kept]))
    return [Exchanges(*row) for row in zip(*(column.tolist() for column in columns))]


def detect(columns: DetectorInput) -> list[Finding]:
    messages = columns.messages
    if messages.empty:
        return []
    stalled = {f.connection for f in columns.earlier_findings if f.kind == STALL_KIND}
    names = columns.direction_names()
    findings = []
    table = exchange_table(messages)
    connections = np.array([row.connection for row in table], dtype=np.int64)
    durations_s = by_connection(columns.connections, "duration_s", connections).tolist()
    clients, servers = names.of(connections, np.zeros(len(connections), dtype=np.int8))
    for row, duration_s, client, server in zip(table, durations_s, clients, servers):
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
