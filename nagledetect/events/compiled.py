"""The events the compiled core found while it read, framed as the numpy path frames them: the
data segments in context (its rows: which packet each segment is, and which packets are its
context) as `segments.data_segments` does, the message table (and the write bursts) as
`messages.messages` does: the same columns, dtypes and values (tests/test_core_flows.py)."""

from __future__ import annotations

from typing import Any

import numpy as np

from nagledetect.events.messages import MESSAGE_COLUMNS, no_messages
from nagledetect.events.segments import NONE, SEGMENT_COLUMNS, segment_table
from nagledetect.flows.roles import ROLES
from nagledetect.table import Table

CONTEXT_OF = {"segment": "row", "sent_max": "sent_max_before", "previous_data": "previous_data",
              "peer_latest": "peer_latest", "peer_next": "peer_next",
              "own_next_data": "own_next_data", "peer_data_between": "peer_data_between",
              "own_retransmissions_between": "own_retransmissions_between"}
"""The core's context columns by the names `SEGMENT_COLUMNS` reads them under."""


def compiled_segments(context: dict[str, np.ndarray], packets: Table,
                      connections: Table) -> Table:
    """One row per new-data segment with its context, from the core's rows (packet rows of
    `packets`, NONE where there is no such packet)."""
    rows = {name: context[column] for name, column in CONTEXT_OF.items()}
    at = rows["segment"]
    padded = _Padded(packets)
    table: dict[str, Any] = {
        "frame": padded.read("frame", at),
        "time_us": padded.read("time_us", at),
        "connection": packets["connection"][at],
        "direction": packets["direction"][at],
    }
    for name, source, where in SEGMENT_COLUMNS[2:]:
        if source is None:
            table[name] = rows[where]
        elif source == "end":
            table[name] = table["rel_seq"] + table["payload_bytes"]
        else:
            table[name] = padded.read(source, rows[where])
    return segment_table(table, connections)


class _Padded:
    """Packet columns as 64-bit integers with one more slot holding NONE (the role's codes
    with "none" there), each made once however many context packets read it: indexed by a
    context row, NONE reads that slot."""

    def __init__(self, packets: Table) -> None:
        self._packets = packets
        self._made: dict[str, np.ndarray] = {}

    def read(self, name: str, rows: np.ndarray) -> np.ndarray:
        if name not in self._made:
            column = self._packets[name]
            self._made[name] = (np.append(column, np.int8(len(ROLES))) if name == "role" else
                                np.append(column.astype(np.int64), np.int64(NONE)))
        return self._made[name][rows]


def compiled_messages(rows: dict[str, np.ndarray]) -> Table:
    """The message table as `messages.messages` frames it, from the core's columns (the
    untyped empty table where there are no messages, as there are none without segments)."""
    if not len(rows["message"]):
        return no_messages()
    return Table({name: rows[name] for name in MESSAGE_COLUMNS})
