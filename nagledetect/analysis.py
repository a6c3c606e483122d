"""From a capture to findings: the one place that chooses how a capture is analysed.

A capture that fits is read whole and every step of `pipeline` runs on it. A larger one, when
the packet tables are not wanted, is analysed in parts that each hold whole connections (see
`parts`); the result equals a whole run, except that the packet, segment, message and sample
tables are not kept.
"""

from __future__ import annotations

import dataclasses
import math
import os

from nagledetect.api import load_capture
from nagledetect.parts import MAX_PARTS, PART_BYTES, StageCallback, analyze_in_parts
from nagledetect.pipeline import Analysis, run_detectors
from nagledetect.read.capture import ProgressCallback
from nagledetect.stored import stored_findings

__all__ = ["Analysis", "analyze_capture", "run_detectors", "with_findings_on_disk"]


def analyze_capture(path: str, bpf_filter: str | None = None,
                    progress: ProgressCallback | None = None, keep_tables: bool = False,
                    part_bytes: int = PART_BYTES, workers: int = 1,
                    stages: StageCallback | None = None, charts: bool = True) -> Analysis:
    """Read and analyse one capture, in parts when it is larger than `part_bytes`; `workers`
    processes take the parts in parallel. `keep_tables` keeps the packet and message tables (for
    --tables): held whole for a capture of one part, spilled part by part for a larger one.
    `progress` hears how the read gets on, `stages` how the parts and the host step of a capture
    in parts do. `charts`: also gather what the HTML report draws (a few per cent of the time
    of a large capture)."""
    parts = min(MAX_PARTS, max(1, math.ceil(_size(path) / part_bytes)))
    if parts == 1:
        return run_detectors(load_capture(path, bpf_filter, progress), charts)
    return analyze_in_parts(path, bpf_filter, progress, parts, workers, stages, charts,
                            keep_tables)


def _size(path: str) -> int:
    try:
        return os.path.getsize(path)
    except OSError:
        return 0


def with_findings_on_disk(analysis: Analysis) -> Analysis:
    """The analysis with its findings spilled to disk: what a run over many captures keeps of
    each capture's result while the others are analysed (the findings are most of its size)."""
    return dataclasses.replace(analysis, findings=stored_findings(analysis.findings))
