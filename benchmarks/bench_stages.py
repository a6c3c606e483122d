"""Where the time of `analyze --format json` goes on a large capture: each stage's wall and CPU
time, and each step's share of a part's CPU.

    python3 benchmarks/bench_stages.py --capture /tmp/mix10.pcap
    python3 benchmarks/bench_stages.py --capture /tmp/mix10.pcap --part-steps 6
    python3 benchmarks/bench_stages.py --capture /tmp/s10m_2.pcap --part-memory

The first runs the analysis the way the CLI does (parts on `--workers` processes, then the JSON
document to /dev/null) and prints, per stage, its wall time and the CPU time (of which system
time) and minor page faults of the main process and of its workers. The stages are: routing
(reading, decoding and writing the part files), the parts, the host step with ranking, and the
document.

The second routes the capture, then runs its first N parts one after another in this process
(after one part to warm up, not counted) and prints the CPU of each step of a part: reading
the part file, building connections, data segments, messages, delayed-ACK samples, each
detector, the parity table, pickling findings and bucketing hosts.

The third routes the capture, then runs its largest part in this process with `tracemalloc`
on (numpy reports its arrays to it) and prints, for each step, the bytes per packet of the part
held when it starts, at its peak and when it ends: what a worker's memory is made of (with the
steps inside building connections and data segments).

Both wrap the functions that run the stages and steps, looked up by name where they are
called (`nagledetect.parts`, `nagledetect.pipeline`, the detector modules), so they time the
code as it is, not a copy of it.
"""

from __future__ import annotations

import argparse
import math
import os
import resource
import time
import tracemalloc
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nagledetect import parts, pipeline
from nagledetect.analysis import Wanted, analyze_capture
from nagledetect.detectors import CONNECTION_DETECTORS, segment_parity
from nagledetect.events import segments
from nagledetect.flows import build, partition
from nagledetect.memory import ordinary_pages_for_arrays
from nagledetect.read.capture import decoded_batches
from nagledetect.report.document import build_document, write_json


@dataclass(frozen=True)
class Usage:
    """CPU seconds (user + system), system seconds and minor page faults of a process or of
    its waited-for children."""

    cpu_s: float
    system_s: float
    minor_faults: int

    @classmethod
    def of(cls, who: int) -> Usage:
        usage = resource.getrusage(who)
        return cls(usage.ru_utime + usage.ru_stime, usage.ru_stime, usage.ru_minflt)

    def __sub__(self, other: Usage) -> Usage:
        return Usage(self.cpu_s - other.cpu_s, self.system_s - other.system_s,
                     self.minor_faults - other.minor_faults)


@dataclass(frozen=True)
class StageRow:
    name: str
    wall_s: float
    main: Usage
    workers: Usage


class StageClock:
    """Wall time and the main process's and its workers' usage of each stage, in the order they
    ran (page faults show how much memory a stage newly touched: on this machine a fault costs
    about as much as the work that fills the page)."""

    def __init__(self) -> None:
        self.rows: list[StageRow] = []

    def measure(self, name: str, run: Callable[[], Any]) -> Any:
        start = self._now()
        result = run()
        self._add(name, start)
        return result

    def measure_generator(self, name: str, items: Iterator[Any]) -> Iterator[Any]:
        start = self._now()
        yield from items
        self._add(name, start)

    @staticmethod
    def _now() -> tuple[float, Usage, Usage]:
        return (time.perf_counter(), Usage.of(resource.RUSAGE_SELF),
                Usage.of(resource.RUSAGE_CHILDREN))

    def _add(self, name: str, start: tuple[float, Usage, Usage]) -> None:
        wall, main, workers = self._now()
        self.rows.append(StageRow(name, wall - start[0], main - start[1], workers - start[2]))


def stage_times(path: str, workers: int) -> StageClock:
    """Run the whole analysis and its document, timing each stage."""
    clock = StageClock()
    route, in_parallel = parts.PartitionedPackets.add, parts._parts_in_parallel
    host_step = parts._Collected.analysis
    parts.PartitionedPackets.add = (  # type: ignore[method-assign]
        lambda self, batches: clock.measure("routing", lambda: route(self, batches)))
    parts._parts_in_parallel = (
        lambda *args: clock.measure_generator("parts", in_parallel(*args)))
    parts._Collected.analysis = (  # type: ignore[method-assign]
        lambda self, *args: clock.measure("host step and ranking", lambda: host_step(self, *args)))
    try:
        analysis = analyze_capture(path, workers=workers, charts=False)
    finally:
        parts.PartitionedPackets.add = route  # type: ignore[method-assign]
        parts._parts_in_parallel = in_parallel
        parts._Collected.analysis = host_step  # type: ignore[method-assign]
    with open(os.devnull, "wb") as sink:
        clock.measure("document", lambda: write_json(build_document([analysis]), sink, workers))
    return clock


STEPS: list[tuple[Any, str, str]] = [
    (partition, "load_part", "read the part file"),
    (parts, "build_flows", "build connections"),
    (parts, "pickle_findings", "pickle findings"),
    (parts, "host_buckets", "bucket hosts"),
    (pipeline, "data_segments", "data segments"),
    (pipeline, "number_messages", "messages"),
    (pipeline, "messages", "messages"),
    (pipeline, "delack_samples", "delayed-ACK samples"),
    (segment_parity, "parity_table", "parity table"),
    *((detector, "detect", f"detector {detector.__name__.rsplit('.', 1)[-1]}")
      for detector in CONNECTION_DETECTORS),
]
INNER_STEPS: list[tuple[Any, str, str]] = [
    (build, "_collect", "endpoint pairs"),
    (build, "_number_and_classify", "numbering and roles"),
    (build, "relative_ack", "relative ACKs"),
    (build, "assign_roles", "roles"),
    (build, "ack_lags_us", "data -> ACK lags"),
    (segments, "_context", "context"),
    (segments, "_segment_rows", "segment rows"),
]
"""Steps inside building connections and data segments, traced by --part-memory only (timed
apart, they would split the part's CPU shares)."""


def part_step_times(path: str, count: int) -> tuple[Counter, int]:
    """CPU seconds of each step over the first `count` parts (after one to warm up)."""
    spent: Counter = Counter()
    inner: list[float] = []
    with (_wrapped_steps(lambda function, label: _timed(function, label, spent, inner)),
          _routed(path) as files):
        parts.part_result(files[0], 1, Wanted())
        spent.clear()
        for files_of_part in files[1:count + 1]:
            parts.part_result(files_of_part, 1, Wanted())
    return spent, min(count, len(files) - 1)


def part_memory(path: str) -> tuple[list[tuple[str, int, float, float, float]], int]:
    """Traced bytes per packet of the largest part held at the start, peak and end of each
    step (with its nesting depth), in the order the steps ended; and the part's packets."""
    rows: list[tuple[str, int, float, float, float]] = []
    peaks: list[int] = []
    with (_wrapped_steps(lambda function, label: _traced(function, label, rows, peaks),
                         STEPS + INNER_STEPS),
          _routed(path) as files):
        largest = max(files, key=lambda part: os.path.getsize(part[0]))
        tracemalloc.start()
        parts.part_result(largest, 1, Wanted())
        tracemalloc.stop()
        packets = partition.part_packets(largest)
    return [(label, level, start / packets, peak / packets, end / packets)
            for label, level, start, peak, end in rows], packets


@contextmanager
def _wrapped_steps(wrap: Callable[[Callable[..., Any], str], Callable[..., Any]],
                   steps: list[tuple[Any, str, str]] = STEPS) -> Iterator[None]:
    """Each of `steps` replaced by `wrap(function, label)` for the block, where it is called."""
    originals = [(module, name, getattr(module, name)) for module, name, _ in steps]
    for (module, name, original), (_, _, label) in zip(originals, steps):
        setattr(module, name, wrap(original, label))
    try:
        yield
    finally:
        for module, name, original in originals:
            setattr(module, name, original)


@contextmanager
def _routed(path: str) -> Iterator[list[tuple[str, str, Any]]]:
    """The capture routed into part files as the analysis routes it; removed after the block."""
    routed = parts.PartitionedPackets(_part_count(path))
    try:
        _, batches = decoded_batches(path)
        routed.add(batches)
        yield routed.part_files()
    finally:
        routed.close()


def _traced(function: Callable[..., Any], label: str,
            rows: list[tuple[str, int, float, float, float]], peaks: list[int]
            ) -> Callable[..., Any]:
    """`function`, noting the traced memory held when it starts, at its peak and when it ends.
    `peaks` holds the peak so far of each step under way (tracemalloc keeps one peak, reset at
    each step's start), so a step's peak counts the steps inside it."""
    def traced(*args: Any, **kwargs: Any) -> Any:
        start, peak_so_far = tracemalloc.get_traced_memory()
        if peaks:
            peaks[-1] = max(peaks[-1], peak_so_far)
        peaks.append(start)
        tracemalloc.reset_peak()
        try:
            return function(*args, **kwargs)
        finally:
            end, peak = tracemalloc.get_traced_memory()
            peak = max(peaks.pop(), peak)
            if peaks:
                peaks[-1] = max(peaks[-1], peak)
            rows.append((label, len(peaks), start, peak, end))
    return traced


def _part_count(path: str) -> int:
    return min(parts.MAX_PARTS, max(1, math.ceil(os.path.getsize(path) / parts.PART_BYTES)))


def _timed(function: Callable[..., Any], label: str, spent: Counter,
           inner: list[float]) -> Callable[..., Any]:
    """`function`, adding its own CPU time to `spent[label]`: the time of timed steps it calls
    (the parity table inside the parity detector) counts for them, not twice (`inner` holds the
    time of the timed calls inside each call under way)."""
    def timed(*args: Any, **kwargs: Any) -> Any:
        start = time.process_time()
        inner.append(0.0)
        try:
            return function(*args, **kwargs)
        finally:
            elapsed = time.process_time() - start
            spent[label] += elapsed - inner.pop()
            if inner:
                inner[-1] += elapsed
    return timed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--capture", type=Path, required=True)
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--part-steps", type=int, metavar="N",
                        help="time the steps of N parts in this process instead of the stages")
    parser.add_argument("--part-memory", action="store_true",
                        help="trace the memory of the largest part's steps in this process")
    arguments = parser.parse_args()
    ordinary_pages_for_arrays()  # as the command line does
    if arguments.part_memory:
        rows, packets = part_memory(str(arguments.capture))
        print(f"the largest part, {packets:,} packets: traced bytes per packet")
        print(f"{'step':42} {'start':>6} {'peak':>6} {'end':>6}")
        for label, level, start, peak, end in rows:
            print(f"{'  ' * level + label:42} {start:6.0f} {peak:6.0f} {end:6.0f}")
        return
    if arguments.part_steps:
        spent, timed_parts = part_step_times(str(arguments.capture), arguments.part_steps)
        total = sum(spent.values())
        print(f"{timed_parts} parts, {total:.3f} s of CPU ({total / max(timed_parts, 1):.3f} s a part)")
        for label, seconds in spent.most_common():
            print(f"  {label:40} {seconds:7.3f} s {100 * seconds / total:5.1f} %")
        return
    clock = stage_times(str(arguments.capture), arguments.workers)
    print(f"{'stage':22} {'wall s':>6} {'main CPU s':>10} {'(system)':>8} {'faults':>8} "
          f"{'workers CPU s':>13} {'(system)':>8} {'faults':>8}")
    for row in [*clock.rows, StageRow("all", sum(row.wall_s for row in clock.rows),
                                      _total([row.main for row in clock.rows]),
                                      _total([row.workers for row in clock.rows]))]:
        print(f"{row.name:22} {row.wall_s:6.2f} {row.main.cpu_s:10.2f} {row.main.system_s:8.2f} "
              f"{row.main.minor_faults:8} {row.workers.cpu_s:13.2f} {row.workers.system_s:8.2f} "
              f"{row.workers.minor_faults:8}")


def _total(usages: list[Usage]) -> Usage:
    return Usage(sum(usage.cpu_s for usage in usages), sum(usage.system_s for usage in usages),
                 sum(usage.minor_faults for usage in usages))

if __name__ == "__main__":
    main()
