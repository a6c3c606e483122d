"""The flow tables as everything above the flows reads them: packets, connections and SACK
blocks as `Table`s, with the events the compiled core found as it read; and how a
connection's endpoints are written."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from nagledetect.read.columns import ipv4_mapped
from nagledetect.table import Table

if TYPE_CHECKING:
    import pandas as pd

PACKET_COLUMNS = (
    "frame", "time_us", "connection", "direction", "flags", "payload_bytes", "rel_seq",
    "rel_ack", "seq_raw", "ack_raw", "window_raw", "window_bytes", "role", "wire_segments",
    "super_segment", "opt_has_timestamp", "opt_timestamp_value", "opt_timestamp_echo",
    "opt_sack_block_count", "captured_bytes", "payload_from_capture",
)


@dataclass
class FlowTables:
    packets: Table | pd.DataFrame
    connections: Table | pd.DataFrame
    sack_blocks: Table | pd.DataFrame
    """`Table`s from the core; DataFrames from `build.build_flows`."""
    found_events: FoundEvents | None = None
    """What the compiled core found as it read; None where the events are still to be made
    from the packets."""


@dataclass(frozen=True)
class FoundEvents:
    """The events the compiled core found as it read, as its columns: the data segments in
    context (packet rows and counts, and each segment's `message`: `events.compiled` frames
    them), the timeline's gaps (`GapsBySlice.gaps`'s columns), the message table
    (`events.messages.messages`'s columns) and the write bursts (those of them the tinygram
    detector reads, `tinygram_flood.BURST_COLUMNS`), and the rows the detectors read of the
    segments: those that passed the stall's packet tests (`nagle_stall.untimed_stalls`), the
    lone segments a pure ACK answered (`delack_timer.LONE_SEGMENT_COLUMNS`) and each
    direction's payload sizes counted (`payloads.PayloadCounts`' columns); and, where charts
    are drawn without a packet table, what they read of each packet (the packet table's
    columns of those names, by frame; else no rows)."""

    segment_context: dict[str, np.ndarray]
    gap_rows: dict[str, np.ndarray]
    message_rows: dict[str, np.ndarray]
    burst_rows: dict[str, np.ndarray]
    untimed_stalls: dict[str, np.ndarray]
    lone_segments: dict[str, np.ndarray]
    payload_counts: dict[str, np.ndarray]
    chart_packets: dict[str, np.ndarray]


def connection_endpoints(endpoints: np.ndarray, client_is_low: np.ndarray,
                         first_frame: np.ndarray) -> dict[str, Any]:
    """Client and server address and port, IP version and first frame of each connection, from
    its endpoint pair's row (`EndpointPairs.rows`) and whether the client is its lower end."""
    table: dict[str, Any] = {}
    words = {side: np.where(is_low[:, None], endpoints[:, :5], endpoints[:, 5:])
             for side, is_low in (("client", client_is_low), ("server", ~client_is_low))}
    for side, side_words in words.items():
        table[f"{side}_address"] = _formatted_addresses(side_words[:, :4])
        table[f"{side}_port"] = side_words[:, 4].astype(np.int64)
    table["ip_version"] = np.where(ipv4_mapped(*words["client"][:, :3].T), 4, 6)
    table["first_frame"] = first_frame.astype(np.int64)
    return table


def _formatted_addresses(words: np.ndarray) -> list[str]:
    """Addresses from (n, 4) words: IPv4-mapped words as a dotted quad, others as compressed
    IPv6 (`ipaddress`, one by one: rare, and its compression rules are the standard's)."""
    last = words[:, 3].astype(np.int64)
    texts = [f"{a}.{b}.{c}.{d}" for a, b, c, d in zip(
        *(((last >> shift) & 0xFF).tolist() for shift in (24, 16, 8, 0)))]
    for row in np.flatnonzero(~ipv4_mapped(*words[:, :3].T)).tolist():
        texts[row] = _ipv6_text(words[row])
    return texts


def _ipv6_text(words: np.ndarray) -> str:
    import ipaddress

    value = (int(words[0]) << 96) | (int(words[1]) << 64) | (int(words[2]) << 32) | int(words[3])
    return str(ipaddress.IPv6Address(value))
