"""Application messages: the data one side sends between the other side's data (direction turns),
or between idle gaps in a one-way stream. PSH is not used: it marks write boundaries on some
stacks only, so it is a hint, not proof (SPEC section 3).

Write bursts are messages cut at a much shorter gap: packets that left close together with no
peer data between, the writes a sender had at hand at once (what a buffered writer would have
sent as one). A message that trickles out over a few hundred milliseconds (typed keys, paced
lines) is many bursts, not one badly buffered message.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from nagledetect.table import Table

if TYPE_CHECKING:
    import pandas as pd

IDLE_GAP_US = 1_000_000
BURST_GAP_US = 1_000
"""Packets of one burst leave back to back (within 170 us of each other in every lab capture
of unbuffered writes, sample_traces/seed003-nodelay, seed000-nntp-lines-nodelay, mixed); a
pause of a millisecond is the application's, not the stack's."""
MESSAGE_COLUMNS = (
    "message", "connection", "direction", "first_frame", "last_frame", "start_us", "end_us",
    "bytes", "packets", "wire_segments", "mss", "median_payload_bytes", "segments_needed",
    "last_segment_full", "odd_segments",
)


def number_messages(segments: Table | pd.DataFrame, gap_us: int = IDLE_GAP_US) -> np.ndarray:
    """Message number of every data segment (in the segments' row order); a gap longer than
    `gap_us` in a direction begins a new one (`BURST_GAP_US`: write bursts)."""
    if segments.empty:
        return np.zeros(0, dtype=np.int64)
    order = np.lexsort((np.asarray(segments["frame"]), np.asarray(segments["connection"])))
    connection, direction, time_us = (np.asarray(segments[name])[order]
                                      for name in ("connection", "direction", "time_us"))
    new_connection = np.r_[True, connection[1:] != connection[:-1]]
    turn = np.r_[True, direction[1:] != direction[:-1]]
    idle = np.r_[True, (time_us[1:] - time_us[:-1]) > gap_us]
    numbers = np.empty(len(order), dtype=np.int64)
    numbers[order] = np.cumsum(new_connection | turn | idle) - 1
    return numbers


def no_messages() -> Table:
    """The message table of a connection set without data segments (its columns untyped)."""
    return Table({name: np.zeros(0, dtype=object) for name in MESSAGE_COLUMNS})


def messages(segments: Table | pd.DataFrame) -> Table:
    """One row per message (segments must carry `message`, in frame order within each): size,
    packets, segments needed. Reduced with numpy over the segments ordered by message (a pandas
    groupby with a median took a tenth of a large capture's connection-level time)."""
    if segments.empty:
        return no_messages()
    message = np.asarray(segments["message"])
    by_message = np.argsort(message, kind="stable")
    ordered = message[by_message]
    starts = np.flatnonzero(np.r_[True, ordered[1:] != ordered[:-1]])
    ends = np.r_[starts[1:], len(ordered)]
    first, last = by_message[starts], by_message[ends - 1]

    def column(name: str) -> np.ndarray:
        return np.asarray(segments[name])

    payload = column("payload_bytes")
    table = {
        "message": ordered[starts], "connection": column("connection")[first],
        "direction": column("direction")[first], "first_frame": column("frame")[first],
        "last_frame": column("frame")[last], "start_us": column("time_us")[first],
        "end_us": column("time_us")[last], "bytes": np.add.reduceat(payload[by_message], starts),
        "packets": (ends - starts).astype(np.int64),
        "wire_segments": np.add.reduceat(column("wire_segments")[by_message], starts),
        "mss": column("mss")[first],
        "median_payload_bytes": median_per_message(payload, message, starts, ends),
    }
    return message_table(table)


def message_table(table: dict[str, np.ndarray]) -> Table:
    """The message table from its columns up to the median payload: the segments each message
    needs at the connection's MSS follow from its bytes."""
    mss = np.maximum(table["mss"], 1)
    table["segments_needed"] = -(-table["bytes"] // mss)
    table["last_segment_full"] = table["bytes"] % mss == 0
    table["odd_segments"] = table["segments_needed"] % 2 == 1
    return Table(table)


def median_from_counts(key: np.ndarray, size: np.ndarray, count: np.ndarray) -> np.ndarray:
    """Each key's median size, from how often each size occurs (rows sorted by key, then size):
    the middle value, or the mean of the two middle ones, as `messages` takes it."""
    if not len(key):
        return np.zeros(0, dtype=np.float64)
    running = np.cumsum(count)
    first = np.flatnonzero(np.r_[True, key[1:] != key[:-1]])
    before = np.where(first > 0, running[np.maximum(first - 1, 0)], 0)
    total = np.add.reduceat(count, first)
    lower = size[np.searchsorted(running, before + (total - 1) // 2, side="right")]
    upper = size[np.searchsorted(running, before + total // 2, side="right")]
    return (lower.astype(np.float64) + upper) / 2


def median_per_message(payload: np.ndarray, message: np.ndarray, starts: np.ndarray,
                        ends: np.ndarray) -> np.ndarray:
    """Each message's median payload: the middle value, or the mean of the two middle ones.
    Payloads are ranked within messages by one sort of message << 32 | payload (payloads are
    32-bit; stable, so numpy merges the runs that come already in message order)."""
    ranked = (np.sort((message.astype(np.int64) << 32) | payload, kind="stable")
              & 0xFFFFFFFF).astype(np.float64)
    lower = starts + (ends - starts - 1) // 2
    upper = starts + (ends - starts) // 2
    return (ranked[lower] + ranked[upper]) / 2
