"""From a capture to findings: events, host fingerprints, detectors, phase locking, advice.

This is the one place that orders the pipeline; every step below it is a pure function of the
tables handed to it.

A capture larger than `part_bytes` is analysed in parts that each hold whole connections (see
`flows.partition`): connection-level work runs part by part and lets each part go; the host
level (delayed-ACK timers, phase locking) runs once over every part's delayed-ACK samples. The
result equals a one-part run, except that the packet, segment and message tables are not kept.
"""

from __future__ import annotations

import gc
import math
import os
from collections.abc import Iterable
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from dataclasses import dataclass

import numpy as np
import pandas as pd

from nagledetect.api import Capture, load_capture
from nagledetect.collector import collector_paused
from nagledetect.detectors import CONNECTION_DETECTORS, nagle_stall, phase_lock, segment_parity
from nagledetect.detectors.delack_timer import delack_samples, fingerprint_hosts
from nagledetect.detectors.model import DetectorInput, Finding, HostProfile
from nagledetect.events.messages import messages, number_messages
from nagledetect.events.segments import data_segments
from nagledetect.flows.build import build_flows
from nagledetect.flows.partition import PartitionedPackets, load_part
from nagledetect.read.capture import Accounting, ProgressCallback, decoded_batches

PARITY_KEYS = ["connection", "direction", "segments", "last_segment"]
HOST_STEP_COLUMNS = ("host", "connection", "ack_time_s", "hold_ms", "delayed")
"""The delayed-ACK sample columns the capture-wide host step reads."""
PART_BYTES = 32 * 1024 * 1024
"""Capture bytes per part: about 300,000 packets at a snaplen of 128, about 250 MB of work."""
PART_FILE_BYTES_IN_FLIGHT = 4 * PART_BYTES
"""Part files analysed at once (a part's work takes about 7 times its file's size in memory)."""
MAX_PARTS = 400
"""Two open files per part: stay well inside the usual limit of 1,024 (parts grow instead)."""


@dataclass
class Analysis:
    """A capture with everything found in it.

    `tables_kept` is False when the capture was analysed in parts: then `capture.packets`,
    `segments` and `messages` are empty (the connections, findings and hosts are complete).
    """

    capture: Capture
    segments: pd.DataFrame
    messages: pd.DataFrame
    delack_samples: pd.DataFrame
    hosts: dict[str, HostProfile]
    findings: list[Finding]
    parity: pd.DataFrame
    tables_kept: bool = True


@dataclass
class _ConnectionLevel:
    """What one part (or a whole capture) yields before the capture-wide host step."""

    connections: pd.DataFrame
    segments: pd.DataFrame
    messages: pd.DataFrame
    samples: pd.DataFrame
    findings: list[Finding]
    parity: pd.DataFrame


def analyze_capture(path: str, bpf_filter: str | None = None,
                    progress: ProgressCallback | None = None, keep_tables: bool = False,
                    part_bytes: int = PART_BYTES, workers: int = 1) -> Analysis:
    """Read and analyse one capture, in parts when it is larger than `part_bytes` and the packet
    tables are not wanted (`keep_tables`, for the HTML report and --tables); `workers`
    processes take the parts in parallel."""
    parts = 1 if keep_tables else min(MAX_PARTS, max(1, math.ceil(_size(path) / part_bytes)))
    if parts == 1:
        return run_detectors(load_capture(path, bpf_filter, progress))
    accounting, batches = decoded_batches(path, bpf_filter, progress)
    partitioned = PartitionedPackets(parts)
    try:
        partitioned.add(batches)
        files = partitioned.part_files()
        if workers > 1 and len(files) > 1:
            results = _parts_in_parallel(path, files, workers)
        else:
            results = [_part_level(path, part) for part in files]
    finally:
        partitioned.close()
    if not results:
        return run_detectors(_without_packets(path, accounting, None))
    with collector_paused():
        return _merge(path, accounting, results)


def _parts_in_parallel(path: str, files: list[tuple[str, str, np.dtype]],
                       workers: int) -> list[_ConnectionLevel]:
    """Each part in a worker process, largest first, with at most `workers` parts and
    PART_FILE_BYTES_IN_FLIGHT of part files in flight, so that the parts of a capture of a few
    huge connections do not all run at once (a part larger than that runs alone). Results come
    back in the order of `files`. The cyclic collector is paused here while results are
    unpickled; the workers, forked meanwhile, start with it on and pause it for each part."""
    sizes = [os.path.getsize(packets_file) for packets_file, _, _ in files]
    waiting = sorted(range(len(files)), key=lambda index: -sizes[index])
    results: list[_ConnectionLevel | None] = [None] * len(files)
    running: dict[Future, int] = {}
    with collector_paused(), ProcessPoolExecutor(max_workers=min(workers, len(files)),
                                                 initializer=gc.enable) as pool:
        while waiting or running:
            for index in _fitting(waiting, sizes, running.values(), workers):
                waiting.remove(index)
                running[pool.submit(_part_level, path, files[index])] = index
            done, _ = wait(running, return_when=FIRST_COMPLETED)
            for future in done:
                results[running.pop(future)] = future.result()
    return results


def _fitting(waiting: list[int], sizes: list[int], running: Iterable[int],
             workers: int) -> list[int]:
    """The waiting parts (largest first) that can start now within the limits."""
    started = list(running)
    in_flight = sum(sizes[index] for index in started)
    chosen = []
    for index in waiting:
        if len(started) + len(chosen) >= workers:
            break
        alone = not started and not chosen
        if alone or in_flight + sizes[index] <= PART_FILE_BYTES_IN_FLIGHT:
            chosen.append(index)
            in_flight += sizes[index]
    return chosen


def _part_level(path: str, files: tuple[str, str, np.dtype]) -> _ConnectionLevel:
    """Connection-level results of one part; its packet, segment and message tables are let go
    here, so only connections, findings, samples and parity rows travel back. The cyclic
    collector is paused for the part and runs between parts."""
    with collector_paused():
        flows = build_flows([load_part(files)])
        level = _connection_level(flows.packets, flows.connections, fingerprint=False)
        level.segments = level.messages = pd.DataFrame()
        level.samples = level.samples[list(HOST_STEP_COLUMNS)]
        return level


def _without_packets(path: str, accounting: Accounting,
                     connections: pd.DataFrame | None) -> Capture:
    """A capture's record with empty packet tables (the shape a capture without TCP has)."""
    empty = build_flows([])
    return Capture(path, empty.packets, empty.connections if connections is None else connections,
                   empty.sack_blocks, accounting)


def _size(path: str) -> int:
    try:
        return os.path.getsize(path)
    except OSError:
        return 0


def run_detectors(capture: Capture) -> Analysis:
    """Run every detector over one capture held whole in memory."""
    level = _connection_level(capture.packets, capture.connections)
    hosts, phase_findings = _host_level(level.samples, level.findings)
    return Analysis(capture, level.segments, level.messages, level.samples, hosts,
                    _ranked(level.findings + phase_findings), level.parity)


def _ranked(findings: list[Finding]) -> list[Finding]:
    """Most time lost first; ties by connection, then kind and sender, so the order never
    depends on how the work was split."""
    return sorted(findings, key=lambda f: (-f.time_lost_s, f.connection, f.kind, str(f.sender)))


def _connection_level(packets: pd.DataFrame, connections: pd.DataFrame,
                      fingerprint: bool = True) -> _ConnectionLevel:
    """Events and connection detectors. Without `fingerprint` (a part of a capture) stalls are
    scored without host timers: the capture-wide step scores them again with all samples."""
    if packets.empty:
        return _ConnectionLevel(connections, pd.DataFrame(), pd.DataFrame(), _no_samples(), [],
                                pd.DataFrame())
    segments = data_segments(packets, connections)
    segments["message"] = number_messages(segments)
    message_table = messages(segments)
    samples = delack_samples(segments, connections)
    columns = DetectorInput(packets, connections, segments, message_table,
                            fingerprint_hosts(samples) if fingerprint else {})
    for detector in CONNECTION_DETECTORS:
        columns.earlier_findings.extend(detector.detect(columns))
    parity = segment_parity.parity_table(columns)
    return _ConnectionLevel(connections, segments, message_table, samples,
                            columns.earlier_findings, parity)


def _host_level(samples: pd.DataFrame, findings: list[Finding], rescore: bool = False
                ) -> tuple[dict[str, HostProfile], list[Finding]]:
    """Host fingerprints and phase locking, from every connection's delayed-ACK samples.

    Findings made part by part are scored again (`rescore`) against the capture-wide
    fingerprints, before phase locking refines the timers, as in a one-part run.
    """
    hosts = fingerprint_hosts(samples)
    if rescore:
        nagle_stall.rescore(findings, hosts)
    stalls = [f for f in findings if f.kind == nagle_stall.KIND]
    return hosts, phase_lock.detect_hosts(hosts, samples, stalls)


def _no_samples() -> pd.DataFrame:
    return pd.DataFrame({"host": np.zeros(0, dtype=object), "connection": np.zeros(0, np.int64),
                         "ack_time_s": np.zeros(0), "hold_ms": np.zeros(0),
                         "delayed": np.zeros(0, dtype=bool)})


def _merge(path: str, accounting: Accounting, parts: list[_ConnectionLevel | None]) -> Analysis:
    """One analysis from the parts, with connection ids numbered by first packet as a one-part
    run numbers them."""
    tables = [part.connections for part in parts]
    first_frames = np.concatenate([table["first_frame"].to_numpy() for table in tables])
    global_id = np.empty(len(first_frames), dtype=np.int64)
    global_id[np.argsort(first_frames, kind="stable")] = np.arange(len(first_frames))
    offsets = np.cumsum([0] + [len(table) for table in tables])
    findings: list[Finding] = []
    samples, parity, connections = [], [], []
    for index in range(len(parts)):
        part, parts[index] = parts[index], None  # let each part go once copied
        mapping = global_id[offsets[index]:offsets[index + 1]]
        connections.append(part.connections.assign(id=mapping[part.connections["id"]]))
        samples.append(part.samples.assign(connection=mapping[part.samples["connection"].to_numpy()]))
        if not part.parity.empty:
            parity.append(part.parity.assign(connection=mapping[part.parity["connection"].to_numpy()]))
        for finding in part.findings:
            finding.connection = int(mapping[finding.connection])
            findings.append(finding)
    connection_table = pd.concat(connections).sort_values("id", kind="stable").reset_index(drop=True)
    del connections
    sample_table = pd.concat(samples).sort_values("connection", kind="stable", ignore_index=True)
    del samples
    hosts, phase_findings = _host_level(sample_table, findings, rescore=True)
    parity_table = (pd.concat(parity).sort_values(PARITY_KEYS, ignore_index=True)
                    if parity else pd.DataFrame())
    return Analysis(_without_packets(path, accounting, connection_table), pd.DataFrame(),
                    pd.DataFrame(), sample_table, hosts, _ranked(findings + phase_findings),
                    parity_table, tables_kept=False)
