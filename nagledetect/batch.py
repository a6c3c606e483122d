"""Small captures analysed together: one connection level for many, cut back per capture.

Why: a small capture costs about 6 ms of fixed work (some 200 numpy and pandas calls) whatever
its size, so an archive of thousands spends most of its time there; read by the compiled core
one after another in one pass and analysed as one set of connections, the
captures share it. Each capture's result equals a run over it alone:
  - its connections are its own (the core rebuilds each capture's alone), so no connection
    spans two captures;
  - its frames are offset while analysed (frames must be unique: findings and segments are
    matched by frame) and given back;
  - its connections are numbered by first packet, as alone, in one range of the batch's ids
    (the captures come one after another), which is cut out and renumbered from 0;
  - its hosts are fingerprinted from its own delayed-ACK samples only, and its stalls scored
    again with them, as a capture in parts is (`connection_level(fingerprint=False)`).
The packet and message tables are kept only when wanted (`--tables`, or the HTML report's
charts): cut per capture as the others are, message numbers from 0, and an empty message table
as a capture alone makes it.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from collections.abc import Iterator

import numpy as np

from nagledetect.api import Capture
from nagledetect.detectors import nagle_stall
from nagledetect.detectors.delack_timer import HostFingerprints, host_fingerprints
from nagledetect.detectors.model import Finding, StallEvents
from nagledetect.errors import InputError
from nagledetect.events.messages import no_messages
from nagledetect.flows.compiled import compiled_flows_together
from nagledetect.ordering import factorize_in_name_order
from nagledetect.pipeline import (
    Analysis,
    ConnectionLevel,
    Wanted,
    connection_level,
    phase_lock_findings,
    rank_key,
    shared_empty_tables,
    with_clock_caveat,
    without_tcp,
)
from nagledetect.read.accounting import Accounting
from nagledetect.sent_tables import Rows, TableRows, rows_table
from nagledetect.stored import without_samples
from nagledetect.table import Table

BATCHED_CAPTURE_BYTES = 4 * 1024 * 1024
"""Captures up to this size are analysed together with others."""
BATCH_BYTES = 16 * 1024 * 1024
"""A batch holds captures of up to this many bytes in all."""
EVENT_FRAMES = ("last_data_frame", "ack_frame", "released_frame")
CONNECTION_FRAMES = ("first_frame", "syn_frame", "syn_ack_frame")
"""The connection table's frame columns (0 in the handshake's: no such packet)."""
SAMPLE_FRAMES = ("data_frame", "ack_frame")
MESSAGE_FRAMES = ("first_frame", "last_frame")


@dataclasses.dataclass
class _Read:
    """One capture of the batch as read: its path and accounting, its frames' offset in the
    batch."""

    path: str
    accounting: Accounting
    frame_offset: int


def analyze_together(paths: list[str], bpf_filter: str | None = None,
                     wanted: Wanted | None = None) -> list[Analysis | InputError]:
    """Each capture's analysis (what the reporters read, as `for_another_process` leaves it,
    with the tables and charts `wanted`), or the error that stopped its read, in the order
    given."""
    wanted = wanted or Wanted()
    results: dict[int, Analysis | InputError] = {}
    flows, reads = compiled_flows_together(paths, bpf_filter, wanted.charts or wanted.tables)
    read: dict[int, _Read] = {}
    for index, (path, result) in enumerate(zip(paths, reads)):
        if isinstance(result, InputError):
            results[index] = result
        elif not result.accounting.tcp_packets:
            results[index] = without_tcp(path, result.accounting, wanted.charts)
        else:
            read[index] = _Read(path, result.accounting, result.frame_offset)
    if read:
        level = connection_level(flows, fingerprint=False,
                                 keep_packets=wanted.charts or wanted.tables, keep_segments=False)
        del flows
        results.update(zip(read, _per_capture(level, list(read.values()), wanted)))
    return [results[index] for index in range(len(paths))]


def _per_capture(level: ConnectionLevel, captures: list[_Read], wanted: Wanted
                 ) -> Iterator[Analysis]:
    """The batch's connection level cut at each capture's range of connection ids; its packet
    and message tables too, when tables or charts are `wanted`."""
    offsets = np.array([capture.frame_offset for capture in captures], dtype=np.int64)
    connections = level.connections
    # capture k's frames are (offset k, offset k + its packets]
    owner = np.searchsorted(offsets, connections["first_frame"], side="left") - 1
    if len(owner) and (np.diff(owner) < 0).any():
        raise RuntimeError("a batch's connections are not numbered capture by capture")
    cut = _Cut(owner, np.searchsorted(owner, np.arange(len(captures) + 1)), offsets)
    samples = cut.rows(level.samples, SAMPLE_FRAMES)
    tables = zip(cut.rows(connections, CONNECTION_FRAMES, key="id"),
                 map(rows_table, samples), _fingerprints_by_capture(samples, len(captures)),
                 cut.rows(level.parity, ()), cut.findings(level.findings))
    kept = (zip(map(rows_table, cut.rows(level.packets, ("frame",))),
                map(rows_table, cut.rows(level.messages, MESSAGE_FRAMES, counted="message")))
            if wanted.charts or wanted.tables else itertools.repeat((None, None)))
    for capture, (connections_of, samples_of, hosts, parity, findings), (
            packets, message_table) in zip(captures, tables, kept):
        analysis = _analysis(capture, connections_of, findings, samples_of, hosts, parity)
        if message_table is not None and message_table.empty:
            message_table = no_messages()
        if wanted.charts:
            from nagledetect.chart_data import busiest_hosts, connection_charts

            analysis.charts = connection_charts(packets, rows_table(connections_of),
                                                message_table, findings)
            analysis.charts.hosts = busiest_hosts(analysis.hosts)
        analysis.hosts = {address: without_samples(host) for address, host in analysis.hosts.items()}
        if wanted.tables:
            from nagledetect.part_tables import TablesInMemory

            analysis.part_tables = TablesInMemory([packets], [message_table])
        yield analysis


@dataclasses.dataclass
class _Cut:
    """Where each capture's connections lie in the batch's: connection `first[k]` to
    `first[k + 1]` are capture k's (`owner`, by connection), its frames offset by
    `frame_offset[k]`. Each table is renumbered once for all captures, then sliced."""

    owner: np.ndarray
    first: np.ndarray
    frame_offset: np.ndarray

    def rows(self, table: Table, frames: tuple[str, ...], counted: str | None = None,
             key: str = "connection") -> list[Rows]:
        """A table with a connection id column (`key`: "id" in the connection table itself),
        each capture's rows (in the table's order) of the table renumbered once for all of them,
        its `counted` column (numbered across the table in connection order) from 0 again in
        each capture. An empty table is shared: it is only read."""
        if table.empty:
            return [table] * (len(self.first) - 1)
        connection = table[key]
        owner = self.owner[connection]
        renumbered = {key: (connection - self.first[owner]).astype(connection.dtype)}
        for name in frames:
            renumbered[name] = self._frames(table[name], owner)
        if counted is not None:
            values = table[counted]
            first = np.full(len(self.first), values.max(), dtype=values.dtype)
            np.minimum.at(first, owner, values)
            renumbered[counted] = values - first[owner]
        return self._sliced(table.assign(**renumbered), owner)

    def findings(self, findings: list[Finding]) -> list[list[Finding]]:
        mine: list[list[Finding]] = [[] for _ in range(len(self.first) - 1)]
        for finding in findings:
            capture = int(self.owner[finding.connection])
            mine[capture].append(_given_back(finding, int(self.first[capture]),
                                             int(self.frame_offset[capture])))
        return mine

    def _frames(self, frames: np.ndarray, owner: np.ndarray) -> np.ndarray:
        """Frames given back (0 stays 0: no such packet), in their own dtype."""
        return np.where(frames > 0, frames - self.frame_offset[owner], frames).astype(frames.dtype)

    def _sliced(self, table: Table, owner: np.ndarray) -> list[Rows]:
        """Each capture's rows, in the table's order within a capture."""
        if (np.diff(owner) < 0).any():
            order = np.argsort(owner, kind="stable")
            table, owner = table.take(order), owner[order]
        bounds = np.searchsorted(owner, np.arange(len(self.first))).tolist()
        return [TableRows(table, start, stop) for start, stop in zip(bounds[:-1], bounds[1:])]


def _given_back(finding: Finding, first: int, frame_offset: int) -> Finding:
    """The finding, made for this batch alone, given its capture's connection id and frame
    numbers (0 stays 0: no such packet). Its events are copied first: a detector's findings
    share one block of rows."""
    finding.connection -= first
    rows = finding.events.rows
    if len(rows) and frame_offset:
        rows = rows.copy()
        for name in EVENT_FRAMES:
            frames = rows[name]
            np.subtract(frames, frame_offset, out=frames, where=frames > 0)
        finding.events = StallEvents(rows)
    return finding


def _fingerprints_by_capture(samples: list[Rows], captures: int) -> list[HostFingerprints]:
    """Each capture's host fingerprints, as `host_fingerprints` of its own samples makes them,
    all captures' hosts fingerprinted at once (one set of numpy calls, not one a capture):
    each sample's host is its capture's number with its address, and the hosts of capture k
    come after those of captures before it, in address order."""
    table = next((rows.table for rows in samples if isinstance(rows, TableRows)), None)
    if table is None:
        return [host_fingerprints(rows_table(rows)) for rows in samples]
    owner = np.repeat(np.arange(captures), [len(rows) for rows in samples])
    host_code, addresses = factorize_in_name_order(table["host"])
    pair, keyed = np.unique(owner * max(len(addresses), 1) + host_code, return_inverse=True)
    fingerprints = host_fingerprints(table.with_codes(
        "host", keyed.reshape(-1), addresses[pair % max(len(addresses), 1)].tolist()))
    return fingerprints.split(np.searchsorted(pair // max(len(addresses), 1),
                                              np.arange(captures + 1)))


def _analysis(capture: _Read, connections: Rows, findings: list[Finding],
              samples: Table, hosts: HostFingerprints, parity: Rows) -> Analysis:
    """One capture's host step, as a capture held whole makes it, and its analysis."""
    for finding in findings:
        if finding.kind in (nagle_stall.KIND, nagle_stall.RTT_HOLD_KIND):
            host = hosts.get(str(finding.receiver_host))
            nagle_stall.rescore(finding, host.delack_timer_ms if host else None,
                                host.delack_samples if host else 0)
    phase_findings = phase_lock_findings(hosts, samples, findings)
    empty = shared_empty_tables()
    return with_clock_caveat(Analysis(
        Capture(capture.path, empty.packets, connections, empty.sack_blocks, capture.accounting),
        empty.segments, empty.messages, empty.samples, hosts,
        sorted(findings + phase_findings, key=rank_key), parity, tables_kept=False))


def groups_by_size(sizes: list[int], workers: int) -> list[list[int]]:
    """The captures' positions (by their sizes in bytes) in groups to analyse together:
    consecutive captures of up to BATCHED_CAPTURE_BYTES each, a group holding up to BATCH_BYTES,
    or fewer bytes and captures so that `workers` processes get about two groups each (a small
    capture's cost is mostly fixed: groups are even in captures as well as in bytes); a larger
    capture alone."""
    small = [size for size in sizes if size <= BATCHED_CAPTURE_BYTES]
    byte_budget = min(BATCH_BYTES, max(1, math.ceil(sum(small) / (2 * workers))))
    capture_budget = max(1, math.ceil(len(small) / (2 * workers)))
    groups: list[list[int]] = []
    held = 0
    joinable = False
    for position, size in enumerate(sizes):
        is_small = size <= BATCHED_CAPTURE_BYTES
        if (is_small and joinable and held + size <= byte_budget
                and len(groups[-1]) < capture_budget):
            groups[-1].append(position)
            held += size
        else:
            groups.append([position])
            held = size
        joinable = is_small
    return groups
