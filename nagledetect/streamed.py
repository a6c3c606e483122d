"""A capture too large to analyse whole, analysed a batch of finished connections at a time as
the compiled core's one pass hands them over (`flows.compiled.CompiledBatches`): each batch
runs the connection detectors, its results are collected as a part's are
(`collected.CollectedParts`: findings and samples spilled, connections numbered capture-wide,
stalls scored again against the capture-wide host timers), and the host step runs once at the
end. One pass in one process, the core reading the next batch while the detectors run on
this one: memory follows the live connections and two batches, not the capture; a long
connection lets its packets go as it goes (docs/design.md). Where the live connections come
to hold more than the memory allows all the same, the pass stops: it runs again after a
first pass over the capture where connections seen without their handshake held most of it,
else the caller analyses the capture in parts.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor

from nagledetect.chart_data import connection_charts
from nagledetect.collected import PARTS_PER_HOST_BUCKET, CollectedParts, result_of_level
from nagledetect.collector import collector_paused
from nagledetect.flows.compiled import CompiledBatches
from nagledetect.flows.tables import FlowTables
from nagledetect.memory import freed_memory_kept
from nagledetect.part_sizes import (
    BYTES_PER_EVENT_ROW,
    BYTES_PER_LIVE_PACKET,
    BYTES_PER_LIVE_TABLE_ROW,
    PART_BYTES,
    StageCallback,
    no_stages,
)
from nagledetect.pipeline import Analysis, Wanted, connection_level, without_tcp
from nagledetect.read.accounting import ProgressCallback
from nagledetect.stored import SpillFile
from nagledetect.table import Table

READ_AGAIN_STAGE = "read twice: a first pass learns how connections begun before the capture end"
"""The stage shown while the capture is read a first time through the flow tracker alone."""


def analyze_in_batches(path: str, bpf_filter: str | None, memory_bytes: int,
                       progress: ProgressCallback | None = None,
                       stages: StageCallback | None = None,
                       spill: SpillFile | None = None, capture_bytes: int = 0,
                       workers: int = 1, wanted: Wanted | None = None) -> Analysis | None:
    """The analysis of the capture at `path`, a batch of finished connections at a time, the
    live connections and each batch's events taking about half of `memory_bytes` each
    (`--memory`); None where the live connections need more. `capture_bytes`, its size, sets
    how many host buckets the host step takes, `workers` how many forked processes take them.
    Findings and samples go to `spill` (by default a new unnamed file). Where charts are
    `wanted`, what the HTML report draws is gathered too: each batch's counts and worst
    connections, as a part's are, from what the core gives of its packets
    (`FoundEvents.chart_packets`); where tables are, each batch's packet and message tables
    are spilled as a part's are, to be read back in the order of a whole run
    (`part_tables`). Where the pass gives up, what it spilled is let go; where connections
    seen without their handshake held most of its live packets, it is run again after a first
    pass that learns what they are finished with (`CompiledBatches.unsettled`)."""
    wanted = wanted or Wanted()
    spill = spill or SpillFile()
    spilled_before = spill.size
    buckets = max(1, capture_bytes // PART_BYTES // PARTS_PER_HOST_BUCKET)
    batches = _batches(path, bpf_filter, memory_bytes, progress, wanted, settle_first=False)
    collected = _collected(batches, CollectedParts(buckets, workers, wanted, spill), wanted)
    if batches.over_budget and batches.unsettled:
        spill.cut_back(spilled_before)
        (stages or no_stages)(READ_AGAIN_STAGE, 0, 1)
        batches = _batches(path, bpf_filter, memory_bytes, progress, wanted, settle_first=True)
        collected = _collected(batches, CollectedParts(buckets, workers, wanted, spill), wanted)
    if batches.over_budget:
        spill.cut_back(spilled_before)
        return None
    accounting = batches.accounting
    if not collected.connections:
        return without_tcp(path, accounting, wanted.charts)
    with collector_paused():
        return collected.analysis(path, accounting, stages or no_stages)


def _batches(path: str, bpf_filter: str | None, memory_bytes: int,
             progress: ProgressCallback | None, wanted: Wanted, *,
             settle_first: bool) -> CompiledBatches:
    """The core's batches of the capture, half of `memory_bytes` for each batch's events,
    half for the live connections."""
    live_packet_bytes = BYTES_PER_LIVE_PACKET + (BYTES_PER_LIVE_TABLE_ROW if wanted.tables else 0)
    return CompiledBatches(path, bpf_filter, max(1, memory_bytes // 2 // BYTES_PER_EVENT_ROW),
                           max(1, memory_bytes // 2 // live_packet_bytes), progress,
                           chart_packets=_chart_packets(wanted), packet_table=wanted.tables,
                           settle_first=settle_first)


def _collected(batches: CompiledBatches, collected: CollectedParts,
               wanted: Wanted) -> CollectedParts:
    """Each batch's connection level, collected as a part's result."""
    chart_packets = _chart_packets(wanted)
    buckets = collected.buckets
    with freed_memory_kept():  # each batch reuses what the last one freed (`memory`)
        for index, flows in enumerate(_read_ahead(batches)):
            charted = Table(flows.found_events.chart_packets) if chart_packets else None
            level = connection_level(flows, fingerprint=False,
                                     keep_packets=wanted.charts or wanted.tables,
                                     keep_segments=False)
            if charted is not None:
                level.charts = connection_charts(charted, level.connections, level.messages,
                                                 level.findings)
            collected.add(index, result_of_level(level, buckets, wanted))
    return collected


def _chart_packets(wanted: Wanted) -> bool:
    """Whether the core gives each batch's packets as the charts read them: the packet table,
    where `--tables` keeps it, serves the charts too."""
    return wanted.charts and not wanted.tables


def _read_ahead(batches: Iterable[FlowTables]) -> Iterator[FlowTables]:
    """The batches, each next one read by the core in a thread of its own while this one's
    detectors run: the core lets go of Python's lock while it reads, so the read and the
    detectors share the two cores rather than taking turns. One batch waits at most."""
    batch_iterator = iter(batches)
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="batch-read") as reader:
        coming = reader.submit(next, batch_iterator, None)
        while (flows := coming.result()) is not None:
            coming = reader.submit(next, batch_iterator, None)
            yield flows
