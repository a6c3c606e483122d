"""The events the compiled core found while it read, framed as the numpy path frames them: the
data segments in context (its rows: which packet each segment is, and which packets are its
context) as `segments.data_segments` does, the message table as `messages.messages` does: the
same columns, dtypes and values (tests/test_core_flows.py)."""

from __future__ import annotations

import numpy as np
import pandas as pd

from nagledetect.events.messages import MESSAGE_COLUMNS, no_messages
from nagledetect.events.segments import NONE, SEGMENT_COLUMNS
from nagledetect.flows.connections import by_connection
from nagledetect.flows.roles import ROLES

CONTEXT_OF = {"segment": "row", "sent_max": "sent_max_before", "previous_data": "previous_data",
              "peer_latest": "peer_latest", "peer_next": "peer_next",
              "own_next_data": "own_next_data", "peer_data_between": "peer_data_between",
              "own_retransmissions_between": "own_retransmissions_between"}
"""The core's context columns by the names `SEGMENT_COLUMNS` reads them under."""
_ROLES_AND_NONE = [*ROLES, "none"]


def compiled_segments(context: dict[str, np.ndarray], packets: pd.DataFrame,
                      connections: pd.DataFrame) -> pd.DataFrame:
    """One row per new-data segment with its context, from the core's rows (packet rows of
    `packets`, NONE where there is no such packet)."""
    rows = {name: context[column] for name, column in CONTEXT_OF.items()}
    at = rows["segment"]
    table: dict[str, object] = {
        "frame": _read(packets, "frame", at),
        "time_us": _read(packets, "time_us", at),
        "connection": packets["connection"].to_numpy()[at],
        "direction": packets["direction"].to_numpy()[at],
    }
    for name, source, where in SEGMENT_COLUMNS[2:]:
        if source is None:
            table[name] = rows[where]
        elif source == "end":
            table[name] = table["rel_seq"] + table["payload_bytes"]
        else:
            table[name] = _read(packets, source, rows[where])
    mss = by_connection(connections, "effective_mss", table["connection"])
    table["mss"] = mss
    table["tail_bytes"] = table["payload_bytes"] % np.maximum(mss, 1)
    table["is_small"] = table["tail_bytes"] > 0
    return pd.DataFrame(table, copy=False)


def _read(packets: pd.DataFrame, name: str, rows: np.ndarray) -> object:
    """A packet column at `rows` as 64-bit integers, NONE where a row is NONE (the role as a
    categorical with "none" there)."""
    column = packets[name]
    if name == "role":
        codes = np.append(column.cat.codes.to_numpy(), np.int8(len(ROLES)))[rows]
        return pd.Categorical.from_codes(codes, categories=_ROLES_AND_NONE)
    return np.append(column.to_numpy().astype(np.int64), np.int64(NONE))[rows]


def compiled_messages(rows: dict[str, np.ndarray], segments: pd.DataFrame) -> pd.DataFrame:
    """The message table as `messages.messages` frames it, from the core's columns (the
    untyped empty table where there are no segments, as there)."""
    if segments.empty:
        return no_messages()
    return pd.DataFrame({name: rows[name] for name in MESSAGE_COLUMNS}, copy=False)
