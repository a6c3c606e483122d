"""The Python entry point: a capture's tables as pandas DataFrames, and its accounting; and
the same read as the analysis takes it (`read_capture`: `Table`s, no pandas).

    >>> from nagledetect import load_capture
    >>> capture = load_capture("sample_traces/seed003-nagle.pcap")
    >>> capture.connections[["client_address", "server_address", "effective_mss"]]
"""

from __future__ import annotations

import dataclasses
from contextlib import closing
from dataclasses import dataclass
from typing import TYPE_CHECKING

from nagledetect.flows.compiled import compiled_flows
from nagledetect.flows.tables import FoundEvents
from nagledetect.read.accounting import Accounting, ProgressCallback
from nagledetect.read.compressed import capture_bytes
from nagledetect.sent_tables import TableRows, sent_fields
from nagledetect.stored import StoredRows
from nagledetect.table import Table

if TYPE_CHECKING:
    import pandas as pd


@dataclass(slots=True)
class Capture:
    """Everything known about one capture file after reading and connection building."""

    path: str
    packets: Table | pd.DataFrame
    """A `Table` as the analysis reads it (`read_capture`); a DataFrame from `load_capture`.
    The same holds for the other tables."""
    connections: Table | pd.DataFrame | TableRows | StoredRows
    """Its rows of a table shared with other captures (`TableRows`) where the capture was
    analysed with others; kept on disk (`StoredRows`) where it was analysed a batch at a
    time."""
    sack_blocks: Table | pd.DataFrame
    accounting: Accounting
    found_events: FoundEvents | None = None
    """The events the compiled core found as it read (see `FlowTables.found_events`)."""

    def __reduce__(self) -> tuple:
        return Capture, sent_fields(self)


def load_capture(path: str, bpf_filter: str | None = None,
                 progress: ProgressCallback | None = None) -> Capture:
    """Read `path` (pcap or pcapng, compressed or not), decode its TCP packets and rebuild its
    connections, in one pass of the compiled core (`flows.compiled`): its tables as pandas
    DataFrames (the packet role as a categorical).

    `progress(packets_read, bytes_read)` is called once the capture has been read.
    """
    capture = read_capture(path, bpf_filter, progress)
    return dataclasses.replace(capture, packets=capture.packets.to_pandas(),
                               connections=capture.connections.to_pandas(),
                               sack_blocks=capture.sack_blocks.to_pandas())


def read_capture(path: str, bpf_filter: str | None = None,
                 progress: ProgressCallback | None = None, packets: bool = True) -> Capture:
    """`load_capture` with the tables as the analysis reads them (`Table`s); without
    `packets`, the packet and SACK tables have no rows."""
    flows, accounting = compiled_flows(path, bpf_filter, packets)
    if progress:
        progress(accounting.packets_read, capture_bytes(path))
    return Capture(path, flows.packets, flows.connections, flows.sack_blocks, accounting,
                   flows.found_events)


def load_capture_numpy(path: str, bpf_filter: str | None = None,
                       progress: ProgressCallback | None = None) -> Capture:
    """`load_capture` with its connections rebuilt by `build_flows` (numpy) from the core's
    decoded batches, as the parts of a large capture are: what the core's one pass is proven
    against (tests/test_core_flows.py).

    `progress(packets_read, bytes_read)` is called after every batch of packets.
    """
    from nagledetect.flows.build import build_flows
    from nagledetect.flows.streams import accepted_with_streams
    from nagledetect.read.capture import decoded_batches, expected_tcp_packets

    accounting, batches = decoded_batches(path, bpf_filter, progress)
    with closing(batches):
        flows = build_flows(accepted_with_streams(batches), expected_tcp_packets(path))
    return Capture(path, flows.packets, flows.connections, flows.sack_blocks, accounting)
