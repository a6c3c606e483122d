"""Small-message stream coalescing (seed 002): a one-way stream of small writes under Nagle and
delayed ACK goes out as one small packet, then one large accumulated packet per ACK cycle.

A direction qualifies when nearly all the connection's data goes its way (its peer sends at
most 1% of the bytes it sends: a one-byte answer at the end does not make a stream two-way, and
at most one message for every ten accumulated packets: small requests each answered by an
accumulated packet are exchanges, which the stall detector names), it carries many packets,
and a third or more
of them are accumulated packets (several times the smallest common write, under one MSS) that
left right after a pure ACK acknowledged everything. The hold of each accumulated packet (from
the previous data to its release) is the delay the stream's messages suffered.
Seed 002's cost model: throughput = packet rate x (floor(MSS / size) + 1) x size / 2.
"""

from __future__ import annotations

import numpy as np

from nagledetect.detectors import kinds
from nagledetect.detectors.model import DetectorInput, Finding, StallEvents, payload_sizes
from nagledetect.detectors.nagle_stall import delayed_ack_releases, stall_candidates
from nagledetect.events.payloads import PayloadCounts
from nagledetect.flows.connections import by_connection, direction_key
from nagledetect.flows.grouped import KeyGroups
from nagledetect.table import Table

KIND = kinds.STREAM_COALESCING
MIN_PACKETS = 20
ACCUMULATED_SHARE = 0.3
ACCUMULATION_FACTOR = 3
MIN_WRITE_BYTES = 8
PEER_BYTES_SHARE = 0.01
PEER_MESSAGES_SHARE = 0.1
"""A stream's peer sends at most one message (a request, say) for every ten accumulated
packets: more, and the small packets answer requests (an exchange waits on each), whatever
their bytes against the answers'."""


def _write_sizes(sent: PayloadCounts) -> np.ndarray:
    """Each direction's application write size: the common divisor of its payloads when writes
    have a fixed size (accumulated packets are multiples of it), else the smallest payload.
    Payloads under `MIN_WRITE_BYTES` are left out of the divisor: a one-byte marker or status
    at the end is not the stream's write size."""
    keys = sent.keys()
    counted = sent.size >= MIN_WRITE_BYTES
    divisor = np.zeros(len(keys), dtype=np.int64)
    np.gcd.at(divisor, np.searchsorted(keys, sent.key[counted]),
              sent.size[counted].astype(np.int64))
    return np.where(divisor >= MIN_WRITE_BYTES, divisor, sent.smallest())


def one_way_directions(columns: DetectorInput) -> list[tuple[int, int]]:
    """(connection, direction) pairs whose peer sent at most `PEER_BYTES_SHARE` of the bytes
    they sent (none at all, most often)."""
    table = columns.connections
    to_server_bytes = table["bytes_client_to_server"]
    to_client_bytes = table["bytes_server_to_client"]
    to_server = ((to_client_bytes <= PEER_BYTES_SHARE * to_server_bytes) & (to_server_bytes > 0)
                 & (table["packets_client_to_server"] >= MIN_PACKETS))
    to_client = ((to_server_bytes <= PEER_BYTES_SHARE * to_client_bytes) & (to_client_bytes > 0)
                 & (table["packets_server_to_client"] >= MIN_PACKETS))
    position = np.flatnonzero(np.column_stack([to_server, to_client]))
    ids = table["id"][position // 2].astype(np.int64)
    return list(zip(ids.tolist(), (position % 2).tolist()))


def _message_counts(messages: Table, pairs: list[tuple[int, int]]) -> dict[tuple[int, int], int]:
    """How many messages each of these (connection, direction) pairs sent (grouping only
    theirs: a batch's message table has a row per message of every connection)."""
    if messages.empty:
        return {}
    mine = _of_pairs(messages, pairs, [])
    return KeyGroups(mine["connection"], mine["direction"]).counts_by_key()


def _of_pairs(table: Table, pairs: list[tuple[int, int]], kept: list[str]) -> Table:
    """The rows of these (connection, direction) pairs, in table order, with the `kept`
    columns: grouping only them spares a table per direction of every other connection."""
    wanted = np.array([2 * connection + direction for connection, direction in pairs],
                      dtype=np.int64)
    return table.select(["connection", "direction", *kept]).take(
        np.isin(direction_key(table), wanted))


def _rows_by_direction(table: Table) -> dict[tuple[int, int], np.ndarray]:
    """The positions of the table's rows of each (connection, direction) present, in table
    order (a table is cut out only for the directions that pass the counts)."""
    groups = KeyGroups(table["connection"], table["direction"])
    rows = groups.rows_of(np.arange(len(table)))
    return groups.by_key([rows[part] for part in groups.slices()])


EVENT_COLUMNS = ("prev_frame", "peer_frame", "frame", "stall_s", "prev_time_us", "hold_ms",
                 "reaction_ms")
"""A held packet's evidence, in `StallEvents` order: the data before the hold, the delayed ACK,
the accumulated packet it released."""


def _events(accumulated: Table) -> StallEvents:
    """The accumulated packets' evidence (so every report and the gap causes see their frames)."""
    values = [accumulated[name] for name in EVENT_COLUMNS]
    values[4] = values[4] * 1e-6
    return StallEvents.of(*values)


def detect(columns: DetectorInput) -> list[Finding]:
    pairs = one_way_directions(columns)
    if not pairs:
        return []
    candidates = _of_pairs(Table(delayed_ack_releases(stall_candidates(columns))),
                           pairs, ["payload_bytes", *EVENT_COLUMNS])
    released = _rows_by_direction(candidates)
    sent = payload_sizes(columns).of(np.array([2 * c + d for c, d in pairs], dtype=np.int64))
    sent_by_direction = dict(zip(sent.keys().tolist(), zip(sent.segments().tolist(),
                                                           _write_sizes(sent).tolist())))
    names = columns.direction_names()
    peer_messages = _message_counts(columns.messages,
                                    [(connection, 1 - direction) for connection, direction in pairs])
    findings = []
    for connection, direction in pairs:
        segment_count, write_bytes = sent_by_direction.get(2 * connection + direction, (0, 0))
        if segment_count < MIN_PACKETS or (connection, direction) not in released:
            continue
        mine = candidates.take(released[(connection, direction)])
        accumulated = mine.take(mine["payload_bytes"] >= ACCUMULATION_FACTOR * write_bytes)
        if (len(accumulated) < ACCUMULATED_SHARE * segment_count
                or peer_messages.get((connection, 1 - direction), 0)
                > PEER_MESSAGES_SHARE * len(accumulated)):
            continue
        sender, receiver = names[(connection, direction)]
        mss = int(by_connection(columns.connections, "effective_mss", np.array([connection]))[0])
        delay_s = float(accumulated["stall_s"].sum())
        median_bytes = float(np.median(accumulated["payload_bytes"]))
        duration_s = float(by_connection(columns.connections, "duration_s",
                                         np.array([connection]))[0])
        findings.append(Finding(
            kind=KIND, connection=connection, sender=sender, receiver=receiver,
            count=len(accumulated), time_lost_s=delay_s,
            share=delay_s / duration_s if duration_s > 0 else 0.0,
            confidence="high" if len(accumulated) >= 10 else "medium",
            confidence_reasons=[f"{len(accumulated)} accumulated packets (median "
                                f"{median_bytes:.0f} bytes of "
                                f"{write_bytes}-byte writes) each released right after a delayed ACK"],
            events=_events(accumulated),
            advice=["nodelay-stream", "quickack"],
            details={"write_bytes": write_bytes, "mss": mss,
                     "median_accumulated_bytes": median_bytes,
                     "median_hold_ms": float(np.median(accumulated["hold_ms"])),
                     "messages_per_ack_cycle_model": mss // write_bytes + 1},
            summary=(f"{sender} streams {write_bytes}-byte writes that leave as one small packet "
                     f"then one accumulated {median_bytes:.0f}-byte "
                     f"packet per delayed ACK ({float(np.median(accumulated['hold_ms'])):.1f} ms)")))
    return findings
