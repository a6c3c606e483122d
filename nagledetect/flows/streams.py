"""Connection ids that are Wireshark's `tcp.stream` of the unfiltered file, also under a filter.

Wireshark numbers TCP conversations 0, 1, 2... in the order of their first packet in the file,
a 4-tuple starting a new conversation where a SYN says its earlier one is over (the lifetime
rule of `connections`). A capture read whole and unfiltered is numbered that way by
`build_flows` itself. Under a BPF filter, the conversations the filter leaves out still take
their numbers in Wireshark, so the reader decodes every TCP packet, marks those the filter
accepts (an `accepted` column), and `accepted_with_streams` numbers the conversations over
all of them before it lets the others go: each accepted packet keeps its conversation's
number in a `stream` column, which then splits connections (`connections.stream_changes`)
and gives the connection table's `stream` column, the id every output shows.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

import numpy as np

from nagledetect.flows.facts import ConnectionsBySlice
from nagledetect.read.capture import DecodedColumns


def accepted_with_streams(batches: Iterable[DecodedColumns]) -> Iterator[DecodedColumns]:
    """The batches (file order) as the filter leaves them, each accepted packet with its
    `stream`; batches without an `accepted` column (no filter) as they are. A batch of several
    captures (a `capture` column) numbers each capture's conversations from 0."""
    numbering: ConnectionsBySlice | None = None
    first_stream: dict[int, int] = {}
    for columns, sack in batches:
        if "accepted" not in columns:
            yield columns, sack
            continue
        numbering = numbering or ConnectionsBySlice()
        stream = numbering.add(columns, *numbering.paired(columns)).astype(np.int64)
        if "capture" in columns:
            stream -= _first_streams(columns["capture"], stream, first_stream)
        accepted = columns.pop("accepted")
        if accepted.all():
            columns["stream"] = stream
            yield columns, sack
            continue
        kept = np.flatnonzero(accepted)
        if not len(kept):
            continue
        filtered = {name: values[kept] for name, values in columns.items()}
        filtered["stream"] = stream[kept]
        yield filtered, _kept_sack_blocks(sack, accepted)


def _first_streams(capture: np.ndarray, stream: np.ndarray, first_stream: dict[int, int]
                   ) -> np.ndarray:
    """Each packet's capture's first conversation number among those of the batches (the
    captures come one after another, so a capture's first packet starts its first one)."""
    numbers, first = np.unique(capture, return_index=True)
    for number, position in zip(numbers.tolist(), first.tolist()):
        first_stream.setdefault(number, int(stream[position]))
    firsts = np.array([first_stream[number] for number in numbers.tolist()], dtype=np.int64)
    return firsts[np.searchsorted(numbers, capture)]


def _kept_sack_blocks(sack: dict[str, np.ndarray], accepted: np.ndarray) -> dict[str, np.ndarray]:
    """The SACK blocks of accepted packets, their rows counted among the accepted ones."""
    mine = accepted[sack["row"]]
    new_row = np.cumsum(accepted) - 1
    kept = {name: values[mine] for name, values in sack.items()}
    kept["row"] = new_row[kept["row"]]
    return kept
