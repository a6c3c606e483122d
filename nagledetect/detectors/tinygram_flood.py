"""Tinygram flood / poor buffering (seed 000 sections 6-7, seed 003).

With Nagle off, every write becomes a packet: a message written piece by piece leaves as many
sub-MSS packets back to back, where a buffered writer would have sent ceil(bytes / MSS). A
direction is flooded when most of its multi-packet messages carry at least three times the
packets they need and their median payload is a small fraction of the MSS. The cost is packets
(and per-packet work on both hosts), not stall time, so it adds no time to the ranking.
"""

from __future__ import annotations

from nagledetect.detectors.model import DetectorInput, Finding
from nagledetect.events.endpoints import direction_endpoints

KIND = "tinygram-flood"
MIN_PACKETS_PER_MESSAGE = 4
EXCESS_FACTOR = 3
SMALL_PAYLOAD_SHARE = 0.25
FLOODED_SHARE = 0.5
MIN_FLOODED_MESSAGES = 3


def detect(columns: DetectorInput) -> list[Finding]:
    messages = columns.messages
    if messages.empty:
        return []
    names = direction_endpoints(columns.connections)
    flooded = ((messages["packets"] >= MIN_PACKETS_PER_MESSAGE)
               & (messages["packets"] >= EXCESS_FACTOR * messages["segments_needed"])
               & (messages["median_payload_bytes"] <= SMALL_PAYLOAD_SHARE * messages["mss"]))
    findings = []
    for (connection, direction), rows in messages.assign(flooded=flooded).groupby(
            ["connection", "direction"]):
        multi = rows[rows["packets"] > 1]
        bad = rows[rows["flooded"]]
        if len(bad) < MIN_FLOODED_MESSAGES or len(bad) < FLOODED_SHARE * len(multi):
            continue
        packets = int(rows["packets"].sum())
        needed = int(rows["segments_needed"].sum())
        sender, receiver = names[(int(connection), int(direction))]
        segments = columns.segments
        payloads = segments.loc[(segments["connection"] == connection)
                                & (segments["direction"] == direction), "payload_bytes"]
        median_payload = float(payloads.median())
        findings.append(Finding(
            kind=KIND, connection=int(connection), sender=sender, receiver=receiver,
            count=packets - needed, time_lost_s=0.0, share=0.0,
            confidence="high" if len(bad) >= 10 else "medium",
            confidence_reasons=[f"{len(bad)} of {len(multi)} multi-packet messages sent as "
                                f"{float(bad['packets'].median()):.0f} packets (median) where "
                                f"{float(bad['segments_needed'].median()):.0f} would do"],
            advice=["buffer-writes", "writev", "cork"],
            details={"messages": int(len(rows)), "packets": packets, "packets_needed": needed,
                     "excess_packets": packets - needed, "median_payload_bytes": median_payload,
                     "median_message_bytes": float(rows["bytes"].median())},
            summary=(f"{sender} sent {packets:,} packets where a buffered writer needs {needed:,}: "
                     f"median payload {median_payload:.0f} bytes, "
                     f"{float(bad['packets'].median()):.0f} packets per message")))
    return findings
