"""Tinygram flood / poor buffering (seed 000 sections 6-7, seed 003).

With Nagle off, every write becomes a packet: a message written piece by piece leaves as many
sub-MSS packets back to back, where a buffered writer would have sent ceil(bytes / MSS). The
messages counted are write bursts (`events.messages`: packets back to back, no peer data
between): what the sender had at hand at once, so data that trickled out as the application
made it is not counted as a badly buffered message. A direction is flooded when most of its
multi-packet bursts carry at least three times the packets they need and their median payload
is a small fraction of the MSS. The cost is packets (and per-packet work on both hosts), not
stall time, so it adds no time to the ranking.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from nagledetect.detectors.model import DetectorInput, Finding, payload_sizes
from nagledetect.events.messages import BURST_GAP_US, messages, no_messages, number_messages
from nagledetect.flows.connections import direction_key
from nagledetect.flows.grouped import KeyGroups
from nagledetect.table import Table

KIND = "tinygram-flood"
WRITE_BURSTS = "write_bursts"
"""The name of the write-burst table (a message table cut at `BURST_GAP_US`) among the shared
tables: a whole run makes it from its segment table, a part read a slice at a time hands it
over made from its slices (`events.by_slice.MessagesBySlice`)."""
MIN_PACKETS_PER_MESSAGE = 4
EXCESS_FACTOR = 3
SMALL_PAYLOAD_SHARE = 0.25
FLOODED_SHARE = 0.5
MIN_FLOODED_MESSAGES = 3
FLOOD_MESSAGE_COLUMNS = ("connection", "direction", "packets", "segments_needed", "bytes")
BURST_COLUMNS = (*FLOOD_MESSAGE_COLUMNS, "median_payload_bytes", "mss")
"""The write-burst columns this detector reads: all the compiled core gives of them."""


def write_bursts(columns: DetectorInput) -> Table:
    """The write-burst table of a whole run's segments."""
    segments = columns.segments
    if segments.empty:
        return no_messages()
    return messages(segments.assign(message=number_messages(segments, BURST_GAP_US)))


def detect(columns: DetectorInput) -> list[Finding]:
    bursts = columns.taken(WRITE_BURSTS, write_bursts)
    if bursts.empty:
        return []
    names = columns.direction_names()
    packets = bursts["packets"]
    flooded = ((packets >= MIN_PACKETS_PER_MESSAGE)
               & (packets >= EXCESS_FACTOR * bursts["segments_needed"])
               & (bursts["median_payload_bytes"]
                  <= SMALL_PAYLOAD_SHARE * bursts["mss"]))
    candidate = _in_directions_with(bursts, flooded, MIN_FLOODED_MESSAGES)
    if not candidate.any():
        return []
    stats = _direction_stats(bursts.select(FLOOD_MESSAGE_COLUMNS).take(candidate),
                             flooded[candidate])
    stats = stats.take((stats["flooded"] >= MIN_FLOODED_MESSAGES)
                       & (stats["flooded"] >= FLOODED_SHARE * stats["multi"]))
    if stats.empty:
        return []
    sent = payload_sizes(columns).of(direction_key(stats))
    median_payloads = {(key // 2, key % 2): median for key, median in zip(
        sent.keys().tolist(), sent.median().tolist())}
    senders, receivers = names.of(stats["connection"], stats["direction"])
    return [_finding(row, sender, receiver,
                     median_payloads[(row["connection"], row["direction"])])
            for row, sender, receiver in zip(stats.records(), senders, receivers)]


def _direction_stats(messages: Table, flooded: np.ndarray) -> Table:
    """One row per (connection, direction), in that order: bursts, packets, and the medians of
    its flooded bursts."""
    groups = KeyGroups(messages["connection"], messages["direction"])
    packets = messages["packets"]
    needed = messages["segments_needed"]
    return Table({
        "connection": groups.keys[0], "direction": groups.keys[1], "messages": groups.sizes,
        "packets": groups.sum(packets), "needed": groups.sum(needed),
        "flooded": groups.sum(flooded), "multi": groups.sum(packets > 1),
        "median_bytes": groups.median(messages["bytes"]),
        "flooded_packets": groups.median(np.where(flooded, packets, np.nan)),
        "flooded_needed": groups.median(np.where(flooded, needed, np.nan))})


def _in_directions_with(table: Table, marked: np.ndarray, at_least: int) -> np.ndarray:
    """The rows of `table` whose (connection, direction) has `at_least` marked rows: medians
    are then taken for those directions only (most directions of a capture have none)."""
    key = direction_key(table)
    found, counts = np.unique(key[marked], return_counts=True)
    return np.isin(key, found[counts >= at_least])


def _finding(row: dict[str, Any], sender: str, receiver: str, median_payload: float
             ) -> Finding:
    packets, needed = int(row["packets"]), int(row["needed"])
    return Finding(
        kind=KIND, connection=int(row["connection"]), sender=sender, receiver=receiver,
        count=packets - needed, time_lost_s=0.0, share=0.0,
        confidence="high" if row["flooded"] >= 10 else "medium",
        confidence_reasons=[f"{int(row['flooded'])} of {int(row['multi'])} multi-packet write bursts sent as "
                            f"{row['flooded_packets']:.0f} packets (median) where "
                            f"{row['flooded_needed']:.0f} would do"],
        advice=["buffer-writes", "writev", "cork"],
        details={"messages": int(row["messages"]), "packets": packets, "packets_needed": needed,
                 "excess_packets": packets - needed, "median_payload_bytes": median_payload,
                 "median_message_bytes": float(row["median_bytes"])},
        summary=(f"{sender} sent {packets:,} packets where a buffered writer needs {needed:,}: "
                 f"median payload {median_payload:.0f} bytes, "
                 f"{row['flooded_packets']:.0f} packets per write burst"))
