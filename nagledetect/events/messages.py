"""Application messages: the data one side sends between the other side's data (direction turns),
or between idle gaps in a one-way stream. PSH is not used: it marks write boundaries on some
stacks only, so it is a hint, not proof (SPEC section 3).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

IDLE_GAP_US = 1_000_000
MESSAGE_COLUMNS = (
    "message", "connection", "direction", "first_frame", "last_frame", "start_us", "end_us",
    "bytes", "packets", "wire_segments", "mss", "median_payload_bytes", "segments_needed",
    "last_segment_full", "odd_segments",
)


def number_messages(segments: pd.DataFrame) -> pd.Series:
    """Message number of every data segment (aligned to the segments' index)."""
    if segments.empty:
        return pd.Series(np.zeros(0, dtype=np.int64), index=segments.index)
    ordered = segments.sort_values(["connection", "frame"], kind="stable")
    connection = ordered["connection"].to_numpy()
    direction = ordered["direction"].to_numpy()
    time_us = ordered["time_us"].to_numpy()
    new_connection = np.r_[True, connection[1:] != connection[:-1]]
    turn = np.r_[True, direction[1:] != direction[:-1]]
    idle = np.r_[True, (time_us[1:] - time_us[:-1]) > IDLE_GAP_US]
    return pd.Series(np.cumsum(new_connection | turn | idle) - 1, index=ordered.index).reindex(
        segments.index)


def messages(segments: pd.DataFrame) -> pd.DataFrame:
    """One row per message (segments must carry `message`): size, packets, segments needed."""
    if segments.empty:
        return pd.DataFrame(columns=MESSAGE_COLUMNS)
    grouped = segments.groupby("message", sort=True)
    table = grouped.agg(
        connection=("connection", "first"), direction=("direction", "first"),
        first_frame=("frame", "first"), last_frame=("frame", "last"),
        start_us=("time_us", "first"), end_us=("time_us", "last"),
        bytes=("payload_bytes", "sum"), packets=("payload_bytes", "size"),
        wire_segments=("wire_segments", "sum"), mss=("mss", "first"),
        median_payload_bytes=("payload_bytes", "median"),
    ).reset_index()
    mss = np.maximum(table["mss"].to_numpy(), 1)
    table["segments_needed"] = -(-table["bytes"].to_numpy() // mss)
    table["last_segment_full"] = table["bytes"].to_numpy() % mss == 0
    table["odd_segments"] = table["segments_needed"] % 2 == 1
    return table
