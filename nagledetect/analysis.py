"""From a capture to findings: the one place that chooses how a capture is analysed.

A capture whose whole analysis fits in the memory given is read whole by the compiled core and
every step of `pipeline` runs on it. A larger one is read in one pass a batch of finished
connections at a time (`streamed`), or, where its live connections would not fit, analysed in
parts that each hold whole connections (`parts`); the result equals a whole run, except that
the segment and sample tables are not kept, and the packet and message tables only on disk
when they are wanted (`part_tables`). Small captures
of a run over many are analysed together in groups (`capture_groups`, see `batch`). Results
that travel between processes carry what the reporters read (`for_another_process`), and a
run over many captures keeps each one's findings on disk once it holds about 32 MB of them in
memory (`RunKeeping`).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

from nagledetect.api import read_capture
from nagledetect.batch import analyze_together, groups_by_size
from nagledetect.errors import InputError
from nagledetect.part_sizes import (
    MAX_PARTS,
    PART_BYTES,
    PARTS_MEMORY_BYTES,
    WHOLE_MEMORY_PER_CAPTURE_BYTE,
    StageCallback,
)
from nagledetect.pipeline import Analysis, Wanted, run_detectors, shared_empty_tables
from nagledetect.read.accounting import ProgressCallback
from nagledetect.read.compressed import capture_bytes
from nagledetect.stored import SpillFile, StoredFindings, StoredHosts, stored_findings, without_samples

if TYPE_CHECKING:
    from nagledetect.part_tables import PartTables, TablesInMemory

__all__ = ["Analysis", "RunKeeping", "Wanted", "analyze_capture", "analyze_together", "capture_groups",
           "capture_sizes", "for_another_process", "kept_on_disk", "run_detectors",
           "spills_read_by", "handed_over"]


def analyze_capture(path: str, bpf_filter: str | None = None,
                    progress: ProgressCallback | None = None, keep_tables: bool = False,
                    part_bytes: int | None = None, workers: int = 1,
                    stages: StageCallback | None = None, charts: bool = True,
                    spill: SpillFile | None = None,
                    parts_memory_bytes: int = PARTS_MEMORY_BYTES) -> Analysis:
    """Read and analyse one capture: whole when its whole analysis fits in
    `parts_memory_bytes` (`WHOLE_MEMORY_PER_CAPTURE_BYTE`) or it is no larger than a part;
    else in one pass a batch of finished connections at a time (`streamed`), unless its live
    connections hold more than fits; else in parts of `PART_BYTES`. Given `part_bytes`, in
    parts of that size whenever it is larger than one. `workers` processes take the parts (or
    the host step's buckets) in parallel. `keep_tables` keeps the packet and message tables
    (for --tables): held whole for a capture analysed whole, else spilled batch by batch (or
    part by part).
    `progress` hears how the read gets on, `stages` how the parts and the host step of a capture
    in parts do. `charts`: also gather what the HTML report draws (a few per cent of the time
    of a large capture). `spill`: where a capture in parts spills (by default a file of its
    own; a run over many captures shares one, or hands one over to another process).
    `parts_memory_bytes`: about what the parts analysed at once may take (`--memory`)."""
    size = capture_bytes(path)
    in_batches = part_bytes is None
    if part_bytes is None:
        part_bytes = (max(size, 1) if size * WHOLE_MEMORY_PER_CAPTURE_BYTE <= parts_memory_bytes
                      else PART_BYTES)
    parts = min(MAX_PARTS, max(1, math.ceil(size / part_bytes)))
    if parts == 1:
        capture = read_capture(path, bpf_filter, progress, packets=keep_tables or charts)
        return run_detectors(capture, charts, keep_segments=False)
    wanted = Wanted(tables=keep_tables, charts=charts)
    if in_batches:
        from nagledetect.streamed import analyze_in_batches

        analysis = analyze_in_batches(path, bpf_filter, parts_memory_bytes, progress, stages,
                                      spill, size, workers, wanted)
        if analysis is not None:
            return analysis
    from nagledetect.parts import analyze_in_parts

    return analyze_in_parts(path, bpf_filter, progress, parts, workers, wanted, stages, spill,
                            parts_memory_bytes)


def capture_groups(paths: Sequence[str], workers: int, sizes: Sequence[int] | None = None
                   ) -> list[list[int]]:
    """The captures' positions in the groups a run over them analyses, each group with
    `analyze_together` when it holds several: small captures together, each other alone.
    `sizes`: `capture_sizes(paths)`, where the caller has them already."""
    if sizes is None:
        sizes = capture_sizes(paths)
    return groups_by_size(list(sizes), workers)


def capture_sizes(paths: Sequence[str]) -> list[int]:
    """Each capture's size once decompressed (`capture_bytes`), which steers the grouping."""
    return [capture_bytes(path) for path in paths]


def for_another_process(analysis: Analysis, tables: bool) -> Analysis:
    """What the reporters read of an analysis, to send it to the process that writes them: the
    packet and message tables only when `tables` are wanted (as chunks, the way a capture in
    parts hands them over), and host profiles without their samples (the charts carry their
    own). The rest would only be pickled and copied; an analysis that kept no tables (in parts,
    in a batch, or sent already) holds no more than that."""
    hosts = (analysis.hosts if isinstance(analysis.hosts, StoredHosts) else
             {address: without_samples(profile) for address, profile in analysis.hosts.items()})
    capture = analysis.capture
    if not analysis.tables_kept:
        part_tables = analysis.part_tables if tables else None
    elif tables:
        from nagledetect.part_tables import TablesInMemory

        part_tables = TablesInMemory([capture.packets], [analysis.messages])
    else:
        part_tables = None
    empty = shared_empty_tables()
    return dataclasses.replace(
        analysis, capture=dataclasses.replace(capture, packets=empty.packets,
                                              sack_blocks=empty.sack_blocks),
        segments=empty.segments, messages=empty.messages, delack_samples=empty.samples,
        hosts=hosts, tables_kept=False, part_tables=part_tables)


def handed_over(results: list[Analysis | InputError], spill: SpillFile
                ) -> list[Analysis | InputError]:
    """Results whose findings or tables are held in memory, those written to `spill`, a named
    file that the parent process takes over: it then copies their bytes into its own spill file
    rather than unpickling every finding and table and pickling it again (a worker pickles them
    while the others work; the parent of a run over 16,170 small captures spent a tenth of its
    time pickling findings again). The file is removed when nothing went to it."""
    handed = [_handed_over(result, spill) if isinstance(result, Analysis) else result
              for result in results]
    if not spill.size:
        spill.discard()
    return handed


def _handed_over(analysis: Analysis, spill: SpillFile) -> Analysis:
    tables = analysis.part_tables
    in_memory = tables is not None and not hasattr(tables, "spill")
    return dataclasses.replace(
        analysis, findings=stored_findings(analysis.findings, spill),
        part_tables=_on_disk(tables, spill) if in_memory else tables)


FINDINGS_KEPT_IN_MEMORY_BYTES = 32 << 20
"""About what a run over many captures keeps of findings in memory before it keeps each further
capture's on disk: an archive of small captures, a few findings each, then never writes and
reads them back (a fifth of the time of a run over the corpora went to that). A finding is
counted as FINDING_BYTES and its evidence rows as they lie (a capture of a few huge stalled
connections has hundreds of thousands)."""
FINDING_BYTES = 2_048


@dataclasses.dataclass
class RunKeeping:
    """What a run over many captures keeps of each capture's result while the others are
    analysed: its findings in memory while the run holds no more than `room_bytes` of them
    (`FINDING_BYTES` each and their evidence rows), else (and whenever it has tables, or reads a
    spill file already) on disk in `spill`."""

    spill: SpillFile
    room_bytes: int = FINDINGS_KEPT_IN_MEMORY_BYTES
    held_bytes: int = 0

    def kept(self, analysis: Analysis) -> Analysis:
        if analysis.part_tables is None and not spills_read_by(analysis):
            held = self.held_bytes + sum(FINDING_BYTES + finding.events.rows.nbytes
                                         for finding in analysis.findings)
            if held <= self.room_bytes:
                self.held_bytes = held
                return analysis
        return kept_on_disk(analysis, self.spill)


def kept_on_disk(analysis: Analysis, spill: SpillFile) -> Analysis:
    """The analysis with its findings (most of its size) and any tables in `spill` (one file
    for all captures, not one open file each): what a run over many captures keeps of each
    capture's result while the others are analysed. Records in memory are appended; a spill
    file the result reads already (its own, or one handed over by a worker) is adopted."""
    for own_spill in spills_read_by(analysis):
        spill.adopt(own_spill)
    tables = analysis.part_tables
    return dataclasses.replace(
        analysis, findings=stored_findings(analysis.findings, spill),
        part_tables=None if tables is None else _on_disk(tables, spill))


def _on_disk(tables: PartTables | TablesInMemory, spill: SpillFile) -> PartTables:
    """`part_tables.tables_on_disk`, imported only when there are tables (`--tables`): its
    module's pandas would cost a run without them more than its captures."""
    from nagledetect.part_tables import tables_on_disk

    return tables_on_disk(tables, spill)


def spills_read_by(analysis: Analysis) -> list[SpillFile]:
    """The spill files the analysis's stored findings, hosts and tables read."""
    spills = []
    if isinstance(analysis.findings, StoredFindings):
        spills.append(analysis.findings.spill)
    if isinstance(analysis.hosts, StoredHosts):
        spills.append(analysis.hosts.spill)
    tables = analysis.part_tables
    if tables is not None and hasattr(tables, "spill"):
        spills.append(tables.spill)
    return list({id(spill): spill for spill in spills}.values())
