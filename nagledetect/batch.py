"""Small captures analysed together: one connection level for many, cut back per capture.

Why: a small capture costs about 6 ms of fixed work (some 200 numpy and pandas calls) whatever
its size, so an archive of thousands spends most of its time there; analysed as one set of
connections, the captures share it. Each capture's result equals a run over it alone:
  - its endpoint pairs are kept apart by its number in the pair key (`EndpointPairs`), so no
    connection spans two captures;
  - its frames are offset while analysed (frames must be unique: findings and segments are
    matched by frame) and given back;
  - its connections are numbered by first packet, as alone, in one range of the batch's ids
    (the captures come one after another), which is cut out and renumbered from 0;
  - its hosts are fingerprinted from its own delayed-ACK samples only, and its stalls scored
    again with them, as a capture in parts is (`connection_level(fingerprint=False)`).
Only what the document reads is made: no packet or message tables, no charts.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterator
from contextlib import closing

import numpy as np
import pandas as pd

from nagledetect.detectors import nagle_stall, phase_lock
from nagledetect.detectors.delack_timer import host_fingerprints
from nagledetect.detectors.model import Finding, StallEvents
from nagledetect.errors import InputError
from nagledetect.flows.build import build_flows
from nagledetect.pipeline import (
    Analysis,
    ConnectionLevel,
    connection_level,
    no_samples,
    rank_key,
    run_detectors,
    without_packets,
)
from nagledetect.read.capture import Accounting, DecodedColumns, decoded_batches

BATCHED_CAPTURE_BYTES = 4 * 1024 * 1024
"""Captures up to this size are analysed together with others."""
BATCH_BYTES = 16 * 1024 * 1024
"""A batch holds captures of up to this many bytes in all."""
EVENT_FRAMES = ("last_data_frame", "ack_frame", "released_frame")
CONNECTION_FRAMES = ("first_frame", "syn_frame", "syn_ack_frame")
"""The connection table's frame columns (0 in the handshake's: no such packet)."""
SAMPLE_FRAMES = ("data_frame", "ack_frame")


@dataclasses.dataclass
class _Read:
    """One capture of the batch as read: its batches, its frames' offset in the batch."""

    path: str
    accounting: Accounting
    batches: list[DecodedColumns]
    frame_offset: int


def analyze_together(paths: list[str], bpf_filter: str | None = None
                     ) -> list[Analysis | InputError]:
    """Each capture's analysis (what the reporters read, as `for_another_process` leaves it),
    or the error that stopped its read, in the order given."""
    results: dict[int, Analysis | InputError] = {}
    read: dict[int, _Read] = {}
    frame_offset = 0
    for index, path in enumerate(paths):
        try:
            capture = _read(path, bpf_filter, len(read), frame_offset)
        except InputError as error:
            results[index] = error
            continue
        if capture.batches:
            read[index] = capture
            frame_offset += capture.accounting.packets_read
        else:
            results[index] = run_detectors(without_packets(path, capture.accounting, None), False)
    if read:
        flows = build_flows(batch for capture in read.values() for batch in capture.batches)
        for capture in read.values():
            capture.batches = []
        level = connection_level(flows, fingerprint=False, keep_packets=False)
        results.update(zip(read, _per_capture(level, list(read.values()))))
    return [results[index] for index in range(len(paths))]


def _read(path: str, bpf_filter: str | None, number: int, frame_offset: int) -> _Read:
    """A capture's decoded batches, tagged with its number in the batch and its frames offset."""
    accounting, batches = decoded_batches(path, bpf_filter)
    with closing(batches):
        tagged = [_tagged(batch, number, frame_offset) for batch in batches]
    return _Read(path, accounting, tagged, frame_offset)


def _tagged(batch: DecodedColumns, number: int, frame_offset: int) -> DecodedColumns:
    columns, sack = batch
    columns["frame"] = columns["frame"] + np.uint32(frame_offset)
    columns["capture"] = np.full(len(columns["frame"]), number, dtype=np.uint64)
    return columns, sack


def _per_capture(level: ConnectionLevel, captures: list[_Read]) -> Iterator[Analysis]:
    """The batch's connection level cut at each capture's range of connection ids."""
    offsets = np.array([capture.frame_offset for capture in captures], dtype=np.int64)
    connections = level.connections
    # capture k's frames are (offset k, offset k + its packets]
    owner = np.searchsorted(offsets, connections["first_frame"].to_numpy(), side="left") - 1
    if len(owner) and (np.diff(owner) < 0).any():
        raise RuntimeError("a batch's connections are not numbered capture by capture")
    bounds = np.searchsorted(owner, np.arange(len(captures) + 1))
    finding_connection = np.array([finding.connection for finding in level.findings],
                                  dtype=np.int64)
    for number, capture in enumerate(captures):
        first, stop = int(bounds[number]), int(bounds[number + 1])
        mine = (finding_connection >= first) & (finding_connection < stop)
        findings = [_given_back(finding, first, capture.frame_offset)
                    for finding, kept in zip(level.findings, mine.tolist()) if kept]
        yield _analysis(capture, _connections(connections, first, stop, capture.frame_offset),
                        findings, _rows_of(level.samples, first, stop, capture.frame_offset),
                        _rows_of(level.parity, first, stop, 0))


def _connections(table: pd.DataFrame, first: int, stop: int, frame_offset: int) -> pd.DataFrame:
    mine = table.iloc[first:stop].reset_index(drop=True)
    mine["id"] = mine["id"].to_numpy() - first
    for name in CONNECTION_FRAMES:
        frames = mine[name].to_numpy()
        mine[name] = np.where(frames > 0, frames - frame_offset, frames).astype(frames.dtype)
    return mine


def _rows_of(table: pd.DataFrame, first: int, stop: int, frame_offset: int) -> pd.DataFrame:
    """A table's rows of connections [first, stop), renumbered from 0, frames given back."""
    if table.empty:
        return table
    connection = table["connection"].to_numpy()
    mine = table[(connection >= first) & (connection < stop)].reset_index(drop=True)
    mine["connection"] = mine["connection"].to_numpy() - first
    for name in SAMPLE_FRAMES:
        if name in mine:
            mine[name] = mine[name].to_numpy() - frame_offset
    return mine


def _given_back(finding: Finding, first: int, frame_offset: int) -> Finding:
    """A finding with its capture's connection id and frame numbers."""
    rows = finding.events.rows
    if len(rows):
        rows = rows.copy()
        for name in EVENT_FRAMES:
            rows[name] = np.where(rows[name] > 0, rows[name] - frame_offset, rows[name])
    return dataclasses.replace(finding, connection=finding.connection - first,
                               events=StallEvents(rows) if len(rows) else finding.events)


def _analysis(capture: _Read, connections: pd.DataFrame, findings: list[Finding],
              samples: pd.DataFrame, parity: pd.DataFrame) -> Analysis:
    """One capture's host step, as a capture held whole makes it, and its analysis."""
    hosts = host_fingerprints(samples)
    for finding in findings:
        if finding.kind == nagle_stall.KIND:
            host = hosts.get(str(finding.receiver_host))
            nagle_stall.rescore(finding, host.delack_timer_ms if host else None)
    stalls = [finding for finding in findings if finding.kind == nagle_stall.KIND]
    phase_findings = phase_lock.detect_hosts(hosts, samples,
                                             phase_lock.stall_seconds_by_receiver(stalls))
    return Analysis(without_packets(capture.path, capture.accounting, connections),
                    pd.DataFrame(), pd.DataFrame(), no_samples(), hosts,
                    sorted(findings + phase_findings, key=rank_key), parity, tables_kept=False)


def capture_groups(sizes: list[int], workers: int) -> list[list[int]]:
    """The captures' positions (by their sizes in bytes) in groups to analyse together:
    consecutive captures of up to BATCHED_CAPTURE_BYTES each, a group holding up to BATCH_BYTES,
    or less so that `workers` processes get two groups each; a larger capture alone."""
    small_bytes = sum(size for size in sizes if size <= BATCHED_CAPTURE_BYTES)
    budget = min(BATCH_BYTES, max(1, math.ceil(small_bytes / (2 * workers))))
    groups: list[list[int]] = []
    held = 0
    joinable = False
    for position, size in enumerate(sizes):
        small = size <= BATCHED_CAPTURE_BYTES
        if small and joinable and held + size <= budget:
            groups[-1].append(position)
            held += size
        else:
            groups.append([position])
            held = size
        joinable = small
    return groups
