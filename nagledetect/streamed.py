"""A capture too large to analyse whole, analysed a batch of finished connections at a time as
the compiled core's one pass hands them over (`flows.compiled.CompiledBatches`): each batch
runs the connection detectors, its results are collected as a part's are
(`parts.CollectedParts`: findings and samples spilled, connections numbered capture-wide,
stalls scored again against the capture-wide host timers), and the host step runs once at the
end. One pass in one process: memory follows the live connections and one batch, not the
capture. Where the live connections come to hold more packets than the memory allows (a few
huge connections), the pass stops and the caller analyses the capture in parts instead.
"""

from __future__ import annotations

from nagledetect.collector import collector_paused
from nagledetect.flows.compiled import CompiledBatches
from nagledetect.part_sizes import PART_BYTES, StageCallback
from nagledetect.parts import PARTS_PER_HOST_BUCKET, CollectedParts, result_of_level
from nagledetect.pipeline import Analysis, Wanted, connection_level, without_tcp
from nagledetect.read.capture import ProgressCallback
from nagledetect.stored import SpillFile

BYTES_PER_EVENT_ROW = 1_000
"""What a batch's analysis takes a row of the core's event tables (gaps, messages, bursts,
stall candidates, answered segments, payload counts): its columns as numpy arrays, about 150
bytes, and the detectors' work on them."""
BYTES_PER_LIVE_PACKET = 200
"""What the core holds a packet of a live connection: its 40-byte row, its share of the
segments' context (40 bytes a data segment) and of the gaps, and the allocator's slack
(`s1m_1k`, 1,000 connections live to the end: 270 MB for 1 M packets in the pass)."""


def analyze_in_batches(path: str, bpf_filter: str | None, memory_bytes: int,
                       progress: ProgressCallback | None = None,
                       stages: StageCallback | None = None,
                       spill: SpillFile | None = None, capture_bytes: int = 0
                       ) -> Analysis | None:
    """The analysis of the capture at `path`, a batch of finished connections at a time, the
    live connections and each batch's events taking about half of `memory_bytes` each
    (`--memory`); None where the live connections need more. `capture_bytes`, its size, sets
    how many host buckets the host step takes. Findings and samples go to `spill` (by default
    a new unnamed file)."""
    batches = CompiledBatches(path, bpf_filter, max(1, memory_bytes // 2 // BYTES_PER_EVENT_ROW),
                              max(1, memory_bytes // 2 // BYTES_PER_LIVE_PACKET), progress)
    buckets = max(1, capture_bytes // PART_BYTES // PARTS_PER_HOST_BUCKET)
    collected = CollectedParts(buckets, 1, Wanted(), spill or SpillFile())
    for index, flows in enumerate(batches):
        level = connection_level(flows, fingerprint=False, keep_packets=False,
                                 keep_segments=False)
        collected.add(index, result_of_level(level, buckets, Wanted()))
    if batches.over_budget:
        return None
    accounting = batches.accounting
    if not collected.connections:
        return without_tcp(path, accounting)
    with collector_paused():
        return collected.analysis(path, accounting, stages or _no_stages)


def _no_stages(name: str, done: int, total: int) -> None:
    """Where nobody is told how the stages get on."""
