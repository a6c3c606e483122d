"""The flow tables made by the compiled core in one pass over the file (`_core.flow_tables`),
as `Table`s of the columns `build_flows` frames: the same columns, dtypes and values, so
everything above the flows reads either. The core reads, filters, decodes and numbers; this
module only names the skips, formats the addresses and builds the tables."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from nagledetect import _core
from nagledetect.errors import InputError
from nagledetect.flows.connections import rtt_sources
from nagledetect.flows.roles import ROLES
from nagledetect.flows.tables import (
    PACKET_COLUMNS,
    FlowTables,
    FoundEvents,
    connection_endpoints,
)
from nagledetect.ordering import codes_by_first_use
from nagledetect.read import skips
from nagledetect.read.accounting import Accounting, ProgressCallback
from nagledetect.table import Table, object_column

HANDSHAKE_COLUMNS = (
    "syn_frame", "syn_ack_frame", "mss_client", "window_scale_client", "sack_permitted_client",
    "timestamps_client", "mss_server", "window_scale_server", "sack_permitted_server",
    "timestamps_server", "handshake", "timestamps", "window_scaling", "mss_estimated",
    "effective_mss", "frame_payload_limit_bytes")
"""The connection table's handshake columns, in `handshake.handshake_columns` order."""
TOTAL_COLUMNS = ("packets_client_to_server", "bytes_client_to_server",
                 "packets_server_to_client", "bytes_server_to_client")


def compiled_flows(path: str, bpf_filter: str | None = None, packets: bool = True
                   ) -> tuple[FlowTables, Accounting]:
    """Read `path` with the compiled core and return its flow tables and accounting; a file
    that is not a capture, or a filter that does not compile, raises `InputError`. Without
    `packets`, the packet and SACK tables have no rows (see `compiled_flows_together`)."""
    flows, (read,) = compiled_flows_together([path], bpf_filter, packets)
    if isinstance(read, InputError):
        raise read
    return flows, read.accounting


@dataclass(frozen=True)
class CaptureRead:
    """One capture of a run read together: its accounting, and the offset of its frames in
    the joined tables (its frame N is frame `frame_offset` + N there)."""

    accounting: Accounting
    frame_offset: int


def compiled_flows_together(paths: list[str], bpf_filter: str | None = None,
                            packets: bool = True
                            ) -> tuple[FlowTables, list[CaptureRead | InputError]]:
    """Read the captures at `paths` one after another with the compiled core: the flow tables
    of all of them as one (each capture's connections numbered on from the captures' before
    it, as a pass over them one after another numbers them; its `stream` ids its own), and
    per path how it was read, or the error that stopped it (it then adds nothing). Without
    `packets` the core leaves out the packet table, the SACK blocks and the segments' rows
    (no rows): the connections and the events are what the analysis reads, and a caller that
    draws no charts and writes no tables then holds no row per packet."""
    made = _core.flow_tables(paths, bpf_filter, packets)
    reads = [_capture_read(path, read) for path, read in zip(paths, made["captures"])]
    return flow_tables_of(made, filtered=bpf_filter is not None), reads


class CompiledBatches:
    """One capture read by the compiled core in one pass and handed over a batch of finished
    connections at a time (`_core.FlowBatches`): iterating gives each batch's flow tables, its
    connections numbered from 0 by first packet and its events naming them so, its messages
    numbered within it, and no packet table (with `packet_table`, its connections' rows of
    it, by frame; with `chart_packets`, what the charts read of each of its packets,
    `FoundEvents.chart_packets`). `accounting` is the capture's once the
    iteration has ended; `progress` hears the packets and bytes read after each batch. Where the
    live connections come to hold more than `live_packets_limit` packets, the iteration ends
    early and `over_budget` is True. A file that is not a capture, or a filter that does not
    compile, raises `InputError` (from the constructor or the iteration). `settle_first`: see
    `unsettled`."""

    def __init__(self, path: str, bpf_filter: str | None, batch_rows: int,
                 live_packets_limit: int, progress: ProgressCallback | None = None,
                 chart_packets: bool = False, packet_table: bool = False,
                 settle_first: bool = False) -> None:
        self.path = path
        self._filtered = bpf_filter is not None
        self._progress = progress
        try:
            self._batches = _core.FlowBatches(path, bpf_filter, batch_rows, live_packets_limit,
                                              chart_packets, packet_table,
                                              settle_first=settle_first)
        except _core.CaptureError as error:
            raise InputError(str(error)) from None

    def __iter__(self) -> Iterator[FlowTables]:
        try:
            for made in self._batches:
                if self._progress is not None:
                    self._progress(self._batches.packets_read, self._batches.bytes_read)
                yield flow_tables_of(made, self._filtered)
        except (_core.CaptureError, _core.FilterError) as error:
            raise InputError(str(error)) from None

    @property
    def over_budget(self) -> bool:
        return bool(self._batches.over_budget)

    @property
    def unsettled(self) -> bool:
        """Whether, where the pass stopped, connections seen without their handshake held most
        of its live packets: with `settle_first` (the capture read twice, first to learn what
        they are finished with) they let their packets go as they go."""
        return bool(self._batches.unsettled)

    @property
    def accounting(self) -> Accounting:
        return _accounting(self.path, self._batches.capture)


def flow_tables_of(made: dict, filtered: bool) -> FlowTables:
    """The core's tables as `Table`s (`filtered`: read under a filter)."""
    columns = {name: made["packets"][name] for name in PACKET_COLUMNS}
    columns["role"] = columns["role"].astype(np.int8)  # codes as a pandas categorical holds them
    packets = Table(columns, {"role": ROLES})
    connections = _connection_table(made["connections"], filtered)
    found = FoundEvents(made["segments"], made["gaps"], made["messages"], made["bursts"],
                        made["untimed_stalls"], made["lone_segments"], made["payload_counts"],
                        made["chart_packets"])
    return FlowTables(packets, connections, Table(made["sack_blocks"]), found)


def _capture_read(path: str, read: dict | Exception) -> CaptureRead | InputError:
    if isinstance(read, (_core.CaptureError, _core.FilterError)):
        return InputError(str(read))
    if isinstance(read, Exception):
        raise read
    return CaptureRead(_accounting(path, read), read["frame_offset"])


def _accounting(path: str, read: dict) -> Accounting:
    accounting = Accounting(path=path, linktype=read["linktype"] or 0,
                            packets_read=read["packets_read"], warnings=list(read["warnings"]),
                            cut_short=read["cut_short"], clock_step_us=read["clock_step_us"],
                            clock_spacing_us=read["clock_spacing_us"])
    accounting.add_skipped(skips.reasons(read["skipped"]))
    accounting.tcp_packets = accounting.packets_read - sum(read["skipped"].values())
    return accounting


def _connection_table(columns: dict[str, np.ndarray], filtered: bool) -> Table:
    """The connection table in `build.connection_table`'s column order."""
    count = len(columns["first_frame"])
    words = np.stack([columns[f"{side}_word_{index}"] for side in ("client", "server")
                      for index in range(4)]
                     + [columns["client_port"], columns["server_port"]], axis=1)
    pairs = np.concatenate((words[:, 0:4], words[:, 8:9], words[:, 4:8], words[:, 9:10]),
                           axis=1).astype(np.uint32)
    table = {"id": np.arange(count),
             **connection_endpoints(pairs, np.ones(count, dtype=bool), columns["first_frame"])}
    if filtered and count:  # as the numpy path: a table without rows has no `stream`
        table["stream"] = columns["stream"]
    table["start_us"] = columns["start_us"]
    table["end_us"] = columns["end_us"]
    table["duration_s"] = (table["end_us"] - table["start_us"]) / 1e6
    table.update((name, columns[name]) for name in TOTAL_COLUMNS)
    table["client_guessed"] = columns["client_guessed"]
    table.update((name, columns[name]) for name in HANDSHAKE_COLUMNS)
    table.update(_round_trips(columns))
    return Table(table)


def _round_trips(columns: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The vantage columns (`vantage.vantage_table`) from the core's round trips in µs."""
    client_side = columns["rtt_client_side_us"]
    server_side = columns["rtt_server_side_us"]
    known = (client_side >= 0) & (server_side >= 0)
    one_way = ~known & (columns["rtt_unsplit_us"] >= 0)
    total = np.where(known, client_side + server_side, columns["rtt_unsplit_us"])
    return {
        "rtt_client_side_ms": np.where(client_side >= 0, client_side / 1000, np.nan),
        "rtt_server_side_ms": np.where(server_side >= 0, server_side / 1000, np.nan),
        "rtt_ms": np.where(known | one_way, total / 1000, np.nan),
        "rtt_source": shared_words(rtt_sources(columns["rtt_from_handshake"], known, one_way)),
        "vantage": shared_words(columns["vantage"]),
    }


def shared_words(words: np.ndarray | list[str]) -> np.ndarray:
    """Words of a small vocabulary as a column of objects, one string object per distinct
    word: a string made per row took 60 bytes a connection a column, kept to the end for the
    hundreds of thousands of connections of a large capture."""
    codes, distinct = codes_by_first_use(words)
    return object_column(distinct)[codes]


def empty_flow_tables() -> FlowTables:
    """The flow tables of no packets, every column typed as a capture's."""
    return compiled_flows_together([])[0]
