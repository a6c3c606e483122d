"""A capture larger than memory whose live connections outgrow the batches of `streamed` (huge
connections seen without their handshake, or whose events alone outgrow them), analysed in
parts that each hold whole connections.

Packets are routed to part files (`flows.partition`). Each part runs the connection level in a
worker process and sends back its connections, its findings pickled, and its delayed-ACK
samples as rows tagged with the bucket of their receiving host; the main process gathers them
as they arrive (`collected.CollectedParts`: memory follows the parts in flight, not the
capture), then runs the host step. The result equals a one-part run's.
"""

from __future__ import annotations

import gc
import multiprocessing
import os
import pickle
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import FIRST_COMPLETED, BrokenExecutor, Future, wait
from contextlib import closing
from typing import Any

import numpy as np

from nagledetect.collected import (
    PARTS_PER_HOST_BUCKET,
    CollectedParts,
    PartResult,
    result_of_level,
)
from nagledetect.collector import collector_paused
from nagledetect.errors import InputError
from nagledetect.flows.build import build_flows
from nagledetect.flows.partition import (
    PartitionedPackets,
    part_batches,
    part_packets,
    part_slices,
)
from nagledetect.flows.streams import accepted_with_streams
from nagledetect.memory import freed_memory_kept, give_back_free_memory, keep_freed_memory
from nagledetect.part_sizes import (
    PART_BYTES,
    PARTS_MEMORY_BYTES,
    WORK_PER_PART_FILE_BYTE,
    StageCallback,
    no_stages,
)
from nagledetect.part_tables import WrittenChunks
from nagledetect.pipeline import (
    Analysis,
    ConnectionLevel,
    Wanted,
    connection_level,
    without_tcp,
)
from nagledetect.read.accounting import ProgressCallback
from nagledetect.read.capture import decoded_batches
from nagledetect.sliced_level import connection_level_by_slices
from nagledetect.stored import (
    SpillFile,
)
from nagledetect.workers import worker_pool

BYTES_PER_PART_PACKET = 240
"""About what a worker holds for each packet of the part it analyses: a part is its
connections whole (docs/performance.md, the eleventh round)."""
COMPANION_PART_FILE_BYTES = 2 * PART_BYTES
"""Part files that may run beside a part too large for the part files in flight (a huge
connection): the other workers go on with ordinary parts instead of waiting for it, for about
250 MB more (the 10 M mix with a 3 M-packet connection appended: 16.9 -> 14.1 s, 909 ->
1,014 MB)."""
LARGE_PART_FILE_BYTES = 2 * PART_BYTES
"""A part file larger than this holds a connection larger than a part is meant to be: the worker
hands back what it freed once the part is done."""
PIECES_PER_PART = 4
"""Pieces suggested for a capture whose huge connection's part was too large: each then needs
about a quarter of its memory (docs/user-guide.md, "A capture of a few huge connections")."""
RESULT_SUFFIX = ".result"
"""A part's result file is its packets file's name and this."""
TABLES_SUFFIX = ".tables"
"""A part read a slice at a time writes its packet table (`--tables`) to a file named as its
packets file and this, a chunk at a time."""
NUMBERS_SUFFIX = ".numbers"
"""A part read a slice at a time keeps its packets' connection numbers between its two
passes in a file named as its packets file and this."""
SLICED_PART_PACKETS = 2_000_000
"""A part of more packets than this is read a slice at a time (`sliced_level`): held whole it
would take about 480 MB (BYTES_PER_PART_PACKET), a part of one huge connection far more."""
SLICE_PACKETS = 262_144
"""Packets a slice of such a part holds, about: 4 batches."""
SLICED_BYTES_PER_PART_PACKET = 190
"""At most about what a worker holds for each packet of a part read a slice at a time: its
connections' events, where every exchange is one (seed003's stalls, 10 M packets in 2
connections); a bulk transfer's take almost nothing (docs/performance.md, the twenty-second
round)."""
PARTS_STAGE = "packets analysed"
"""The stage of the parts, counted in packets: a huge part's slices move it on as they go."""
PASSES = 2
"""Each packet of a part is counted twice: a part read whole when it is done, a part read a
slice at a time as each of its two passes reads a slice; three times when the charts are
drawn (`passes_of`)."""
PROGRESS_POLL_S = 0.5
"""How often the main process looks at the packets its part workers have read."""
PassesCallback = Callable[[int], None]
"""Told a count of packets read by a part's passes (`passes_of` a packet in all)."""


def analyze_in_parts(path: str, bpf_filter: str | None, progress: ProgressCallback | None,
                     parts: int, workers: int, wanted: Wanted,
                     stages: StageCallback | None = None,
                     spill: SpillFile | None = None,
                     parts_memory_bytes: int = PARTS_MEMORY_BYTES) -> Analysis:
    """Route the capture into `parts` part files, analyse them (`workers` processes at once,
    taking about `parts_memory_bytes` between them), then run the host step and rank the
    findings, keeping what else is `wanted` (the tables spilled, see `part_tables`). `progress`
    hears how the read gets on, `stages` how the parts and the host step do. Findings, samples
    and tables go to `spill` (by default a new unnamed file)."""
    stages = stages or no_stages
    accounting, batches = decoded_batches(path, bpf_filter, progress)
    partitioned = PartitionedPackets(parts)
    collected = CollectedParts(max(1, parts * max(1, workers) // PARTS_PER_HOST_BUCKET), workers,
                           wanted, spill or SpillFile())
    try:
        with closing(batches), freed_memory_kept():
            partitioned.add(accepted_with_streams(batches))
        files = partitioned.part_files()
        total = sum(part_packets(part) for part in files)

        def passes_done(passes: int) -> None:
            stages(PARTS_STAGE, passes // passes_of(wanted), total)

        stages(PARTS_STAGE, 0, total)
        if workers > 1 and files:
            results = _parts_in_parallel(files, collected.buckets, workers, wanted,
                                         parts_memory_bytes // WORK_PER_PART_FILE_BYTE,
                                         passes_done)
        else:
            results = _parts_here(files, collected.buckets, wanted, passes_done)
        for index, result in results:
            collected.add(index, result)
    except PartWorkersKilled as killed:
        raise InputError(f"{path}: {killed.advice()}") from None
    finally:
        partitioned.close()
    if not collected.connections:
        return without_tcp(path, accounting, wanted.charts)
    with collector_paused():
        return collected.analysis(path, accounting, stages)


def _parts_in_parallel(files: list[tuple[str, str, np.dtype]], buckets: int, workers: int,
                       wanted: Wanted, in_flight_bytes: int, passes_done: PassesCallback
                       ) -> Iterator[tuple[int, PartResult]]:
    """Each part in a worker process (a lone part too: killed for want of memory, a worker
    leaves this process to say so and clean up), largest first, with at most `workers` parts and
    `in_flight_bytes` of part files in flight, so that the parts of a capture of a few
    huge connections do not all run at once (a part larger than that runs with ordinary parts
    only, up to COMPANION_PART_FILE_BYTES of them). Results are yielded as they come, with their
    part's index. The cyclic collector is paused here while results are unpickled; the workers,
    forked meanwhile, start with it on and pause it for each part. `passes_done` hears, every
    PROGRESS_POLL_S, how many packets the workers' passes have read (`passes_of` a packet)."""
    sizes = [os.path.getsize(packets_file) for packets_file, _, _ in files]
    waiting = sorted(range(len(files)), key=lambda index: -sizes[index])
    running: dict[Future, int] = {}
    counter = multiprocessing.get_context("fork").Value("q", 0)
    with collector_paused(), worker_pool(
            max_workers=min(workers, len(files)), mp_context=multiprocessing.get_context("fork"),
            initializer=_worker_started, initargs=(counter,)) as pool:
        while waiting or running:
            starting = _fitting(waiting, sizes, running.values(), workers, in_flight_bytes)
            try:
                for index in starting:
                    waiting.remove(index)
                    running[pool.submit(_part_result_file, files[index], buckets, wanted)] = index
                done, _ = wait(running, timeout=PROGRESS_POLL_S, return_when=FIRST_COMPLETED)
                results = [(running[future], _taken_result(future.result())) for future in done]
                passes_done(counter.value)
            except BrokenExecutor:
                in_flight = sorted({*starting, *running.values()})
                huge = any(sizes[part] > in_flight_bytes for part in in_flight)
                packets = [part_packets(files[part]) for part in in_flight]
                raise PartWorkersKilled(packets, huge, max(packets) > SLICED_PART_PACKETS
                                        ) from None
            for future in done:
                del running[future]
            yield from results


def _worker_started(counter: Any) -> None:
    """A part worker keeps the memory its parts free for the next part (`memory`), runs the
    cyclic collector, paused in the parent it was forked from, between parts, and adds the
    packets its passes read to `counter` (a shared `multiprocessing.Value`)."""
    global _worker_passes
    gc.enable()
    keep_freed_memory()
    _worker_passes = counter


_worker_passes: Any = None
"""In a part worker, the count of packets its passes read, shared with the main process."""


def _count_in_worker(passes: int) -> None:
    with _worker_passes.get_lock():
        _worker_passes.value += passes


class PartWorkersKilled(BrokenExecutor):
    """A worker analysing parts died without a word (the OOM killer, a signal): what was running
    then says what to change."""

    def __init__(self, running_packets: list[int], huge: bool, sliced: bool = False) -> None:
        super().__init__("a worker process analysing parts was killed")
        self.running_packets = running_packets
        self.huge = huge
        """Whether the largest part running holds a connection too large for the parts allowed
        in flight (it would have run without the others at -j 1)."""
        self.sliced = sliced
        """Whether the largest part running was read a slice at a time (`sliced_level`)."""

    def advice(self) -> str:
        largest = max(self.running_packets)
        text = "a worker process was killed (out of memory, or by a signal) while analysing "
        if len(self.running_packets) == 1:
            return text + f"a part of {largest:,} packets alone: " + self._whole("this")
        text += f"{len(self.running_packets)} parts of up to {largest:,} packets"
        if self.huge:
            return text + "; -j 1 analyses the largest without the others, but " + self._whole(
                "that")
        return text + "; fewer jobs (-j) or a smaller --memory need less memory"

    def _whole(self, which: str) -> str:
        largest = max(self.running_packets)
        piece = max(largest // PIECES_PER_PART // 100_000, 1) * 100_000
        if self.sliced:
            gigabytes = largest * SLICED_BYTES_PER_PART_PACKET / 1e9
            held = (f"{which} part, though read a slice at a time, holds the events of its "
                    "connections (messages, delayed-ACK samples, stall candidates, gaps) to its "
                    f"end, up to about {gigabytes:.1f} GB")
        else:
            gigabytes = largest * BYTES_PER_PART_PACKET / 1e9
            held = f"a connection is analysed whole, in about {gigabytes:.1f} GB for {which} part"
        return (f"{held}; cut the capture into pieces (editcap -c {piece}) and analyse them one "
                "at a time (-j 1), leave its largest connections out with --filter, or use a "
                "machine with more memory")


def _fitting(waiting: list[int], sizes: list[int], running: Iterable[int], workers: int,
             in_flight_bytes: int) -> list[int]:
    """The waiting parts (largest first) that can start now within the limits."""
    in_flight = list(running)
    chosen: list[int] = []
    for index in waiting:
        if len(in_flight) >= workers:
            break
        if _fits([sizes[part] for part in in_flight], sizes[index], in_flight_bytes):
            chosen.append(index)
            in_flight.append(index)
    return chosen


def _fits(in_flight: list[int], size: int, in_flight_bytes: int) -> bool:
    """Whether a part file of `size` bytes can start beside those of `in_flight`: when none
    runs, when all fit in `in_flight_bytes`, or as a companion of a larger part (a huge
    connection) that does not."""
    if not in_flight:
        return True
    together = sum(in_flight) + size
    largest = max(*in_flight, size)
    return together <= max(in_flight_bytes, largest + COMPANION_PART_FILE_BYTES)


def part_result(files: tuple[str, str, np.dtype], buckets: int, wanted: Wanted,
                passes_read: PassesCallback | None = None) -> PartResult:
    """Connection-level results of one part, with what else is `wanted` of it. Its packet,
    segment and message tables are let go before its findings are pickled (a part of one huge
    connection holds hundreds of MB in each), unless they are wanted. The cyclic collector is
    paused for the part and runs between parts. `passes_read` hears of the packets its passes
    read as they are read: `passes_of` for each of its packets in all."""
    with collector_paused():
        level, written = _part_level(files, wanted, passes_read)
        return result_of_level(level, buckets, wanted, written)


def _part_level(files: tuple[str, str, np.dtype], wanted: Wanted,
                passes_read: PassesCallback | None) -> tuple[ConnectionLevel, WrittenChunks | None]:
    """A part's connection level: read a slice at a time when it is large (`sliced_level`),
    its packet table then written a chunk at a time where it is wanted (`--tables`, the
    chunks returned), else whole."""
    packets = part_packets(files)
    if packets > SLICED_PART_PACKETS:
        written = WrittenChunks(files[0] + TABLES_SUFFIX) if wanted.tables else None
        return connection_level_by_slices(
            lambda: part_slices(files, SLICE_PACKETS), files[0] + NUMBERS_SUFFIX,
            charts=wanted.charts, slice_read=passes_read,
            packet_rows=None if written is None else written.write, sack_path=files[1]), written
    level = connection_level(build_flows(part_batches(files)), fingerprint=False,
                             keep_packets=wanted.charts or wanted.tables)
    if passes_read is not None:
        passes_read(passes_of(wanted) * packets)
    return level, None


def passes_of(wanted: Wanted) -> int:
    """How many times a part's packets are counted: a part read a slice at a time reads the
    packets of the connections whose graphs are drawn in a third pass (`sliced_level`)."""
    return PASSES + 1 if wanted.charts else PASSES


def _part_result_file(files: tuple[str, str, np.dtype], buckets: int, wanted: Wanted) -> str:
    """`part_result` in a worker process, pickled to a file beside the part's (its name is
    returned): the worker pool would pickle a result of hundreds of MB into buffers the worker
    then goes on holding, while another worker analyses the next part. What the part held is
    then let go (`_after_part`) before the worker waits for its next part."""
    path = files[0] + RESULT_SUFFIX
    with open(path, "wb") as out:
        pickle.dump(part_result(files, buckets, wanted, _count_in_worker), out,
                    protocol=pickle.HIGHEST_PROTOCOL)
    _after_part(files)
    return path


def _parts_here(files: list[tuple[str, str, np.dtype]], buckets: int, wanted: Wanted,
                passes_done: PassesCallback) -> Iterator[tuple[int, PartResult]]:
    """Each part in this process, in turn (-j 1), with its index; this process keeps what the
    parts free meanwhile, as a part worker does. `passes_done` hears of the packets read by
    the parts' passes so far, as they are read."""
    passes = [0]

    def passes_read(count: int) -> None:
        passes[0] += count
        passes_done(passes[0])

    with freed_memory_kept():
        for index, part in enumerate(files):
            result = part_result(part, buckets, wanted, passes_read)
            _after_part(part)
            yield index, result


def _after_part(files: tuple[str, str, np.dtype]) -> None:
    """After a part larger than most (a huge connection), everything it held is freed (tables
    caught in reference cycles too) and handed back to the system (`memory`); after the others,
    the allocator keeps what they freed for the next part."""
    if os.path.getsize(files[0]) > LARGE_PART_FILE_BYTES:
        gc.collect()
        give_back_free_memory()


def _taken_result(path: str) -> PartResult:
    """A part's result from the file a worker wrote, which is removed."""
    with open(path, "rb") as handle:
        result = pickle.load(handle)
    os.unlink(path)
    return result
