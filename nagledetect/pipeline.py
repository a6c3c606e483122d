"""The steps from a capture's tables to findings: events, connection detectors, host step.

Each step is a pure function of the tables handed to it; `analysis` runs them on a capture held
whole, `parts` runs the connection level part by part and the host step host bucket by bucket.
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from typing import TYPE_CHECKING

import numpy as np

from nagledetect.api import Capture
from nagledetect.detectors import CONNECTION_DETECTORS, nagle_stall, phase_lock, segment_parity
from nagledetect.detectors.capture_clock import ClockCaveat
from nagledetect.detectors.delack_timer import (
    LONE_SEGMENTS,
    SAMPLE_SEGMENT_COLUMNS,
    delack_samples,
    host_fingerprints,
    samples_of,
)
from nagledetect.detectors.model import (
    DETECTOR_PACKET_COLUMNS,
    DetectorInput,
    Finding,
    HostProfile,
)
from nagledetect.detectors.nagle_stall import UNTIMED_STALLS
from nagledetect.detectors.other_stalls import GAP_ROWS
from nagledetect.detectors.tinygram_flood import BURST_COLUMNS, WRITE_BURSTS
from nagledetect.events.compiled import compiled_messages, compiled_segments
from nagledetect.events.messages import messages, number_messages
from nagledetect.events.payloads import PAYLOAD_SIZES, CountedPayloads, PayloadCounts
from nagledetect.events.segments import SEGMENT_PACKET_COLUMNS, data_segments
from nagledetect.flows.compiled import empty_flow_tables
from nagledetect.flows.connections import seen_one_way
from nagledetect.flows.tables import FlowTables, FoundEvents
from nagledetect.read.accounting import Accounting
from nagledetect.sent_tables import ColumnReader, Rows, TableRows, sent_fields, shared_table
from nagledetect.stored import RecordFix, RecordTable
from nagledetect.table import Table, as_table

if TYPE_CHECKING:
    from nagledetect.chart_data import ChartData
    from nagledetect.part_tables import PartTables, TablesInMemory
    from nagledetect.stored import StoredRows

PARITY_KEYS = ["connection", "direction", "segments", "last_segment"]


@dataclass(frozen=True)
class Wanted:
    """What an analysis keeps besides what the document needs: the packet and message tables
    (`--tables`) and what the HTML charts draw."""

    tables: bool = False
    charts: bool = False


@dataclass(slots=True)
class Analysis:
    """A capture with everything found in it.

    `tables_kept` is False when the capture was analysed in parts, or its result came from
    another process: then `capture.packets`, `segments`, `messages` and `delack_samples` are
    empty, and `findings` and `hosts` may be read from disk a chunk at a time (`stored`); the
    connections, findings and hosts are complete, and so is `charts`, what the HTML report draws
    (None when the caller did not ask for it). A capture analysed whole by the command line
    keeps its tables but has no packet rows unless charts or tables were asked for, and no
    segment table (`run_detectors`' `keep_segments`).
    """

    capture: Capture
    """Its tables as `Table`s."""
    segments: Table
    messages: Table
    delack_samples: Table
    hosts: Mapping[str, HostProfile]
    findings: Sequence[Finding]
    parity: Table | TableRows
    """(`TableRows` as for `capture.connections`.)"""
    tables_kept: bool = True
    charts: ChartData | None = None
    part_tables: PartTables | TablesInMemory | None = None
    """The packet and message tables when they were asked for (`--tables`) and `tables_kept`
    is False, read a chunk at a time."""

    def __reduce__(self) -> tuple:
        return Analysis, sent_fields(self)


@dataclass
class ConnectionLevel:
    """What one part (or a whole capture) yields before the capture-wide host step."""

    packets: Table
    """The whole packet table when it was kept, else empty."""
    connections: Table
    segments: Table
    """From the core's events, made only when asked for (`keep_segments`), else empty; on the
    numpy path, every column when the packet table was kept, else only
    `SAMPLE_SEGMENT_COLUMNS`."""
    messages: Table
    """Empty when the packet table was not kept."""
    samples: Table
    findings: list[Finding]
    parity: Table
    hosts: Mapping[str, HostProfile]
    """The host fingerprints the detectors read (none for a part of a capture)."""
    charts: ChartData | None = None
    """What the charts draw of a part read a slice at a time, when asked for (a part held
    whole leaves them to its caller, which has its packet table)."""


def connection_level(flows: FlowTables, fingerprint: bool = True,
                     keep_packets: bool = True, keep_segments: bool = True) -> ConnectionLevel:
    """Events and connection detectors. Without `fingerprint` (a part of a capture) stalls are
    scored without host timers: the capture-wide step scores them again with all samples. The
    flow tables are taken over: without `keep_packets` the packet and message tables are not
    kept. Events the compiled core found are read as it gives them (`_core_level`), the
    segment table made only with `keep_segments`; others are made from the packet table
    (`_numpy_level`)."""
    packets, connections, sack_blocks = (as_table(table) for table in (
        flows.packets, flows.connections, flows.sack_blocks))
    found = flows.found_events
    del flows
    if connections.empty:
        return ConnectionLevel(packets, connections, Table(), Table(), no_samples(),
                               [], Table(), {})
    if found is None:
        return _numpy_level(packets, connections, sack_blocks, fingerprint, keep_packets)
    return _core_level(found, packets, connections, fingerprint, keep_packets, keep_segments)


def _core_level(found: FoundEvents, packets: Table, connections: Table, fingerprint: bool,
                keep_packets: bool, keep_segments: bool) -> ConnectionLevel:
    """The connection level from the core's events: the detectors read its rows of the
    segments (the stall candidates, the lone answered segments, the payload counts), its
    write bursts and gaps, as a part read a slice at a time hands them over."""
    message_table = compiled_messages(found.message_rows)
    samples = samples_of(found.lone_segments, connections)
    hosts = host_fingerprints(samples) if fingerprint else {}
    made = {GAP_ROWS: found.gap_rows, UNTIMED_STALLS: found.untimed_stalls,
            LONE_SEGMENTS: found.lone_segments,
            WRITE_BURSTS: Table({name: found.burst_rows[name] for name in BURST_COLUMNS}),
            PAYLOAD_SIZES: CountedPayloads(PayloadCounts(**found.payload_counts))}
    columns = DetectorInput(packets, connections, Table(), message_table, hosts, made=made)
    for detector in CONNECTION_DETECTORS:
        columns.earlier_findings.extend(detector.detect(columns))
    parity = segment_parity.parity_table(columns)
    findings = columns.earlier_findings
    del columns
    segments = Table()
    if keep_segments:
        segments = compiled_segments(found.segment_context, packets, connections)
        segments["message"] = found.segment_context["message"]
    if not keep_packets:
        packets, message_table = _emptied(packets), _emptied(message_table)
    return ConnectionLevel(packets, connections, segments, message_table, samples, findings,
                           parity, hosts)


def _numpy_level(packets: Table, connections: Table, sack_blocks: Table, fingerprint: bool,
                 keep_packets: bool) -> ConnectionLevel:
    """The connection level made from the packet table (the numpy path's flow tables). Without
    `keep_packets`, only the columns the segments are made from are held from the start, only
    those the detectors read once the segments are made, and once the detectors are done, only
    the segment columns the samples read."""
    if not keep_packets:
        packets = packets.select(dict.fromkeys((*SEGMENT_PACKET_COLUMNS,
                                                *DETECTOR_PACKET_COLUMNS)))
    segments = data_segments(packets, connections)
    detector_packets = packets.select(DETECTOR_PACKET_COLUMNS)
    if not keep_packets:
        packets = detector_packets
    segments["message"] = number_messages(segments)
    message_table = messages(segments)
    samples = delack_samples(segments, connections) if fingerprint else None
    hosts = {} if samples is None else host_fingerprints(samples)
    columns = DetectorInput(detector_packets, connections, segments, message_table, hosts,
                            sack_blocks=sack_blocks)
    for detector in CONNECTION_DETECTORS:
        columns.earlier_findings.extend(detector.detect(columns))
    parity = segment_parity.parity_table(columns)
    findings = columns.earlier_findings
    del columns
    if not keep_packets:
        packets, message_table = _emptied(packets), _emptied(message_table)
        segments = segments.select(SAMPLE_SEGMENT_COLUMNS)
    if samples is None:
        samples = delack_samples(segments, connections)
    return ConnectionLevel(packets, connections, segments, message_table, samples, findings,
                           parity, hosts)


def _emptied(table: Table) -> Table:
    """The table's columns with no rows, holding none of its memory."""
    return Table({name: table[name][:0].copy() for name in table}, table.coded)


def host_level(level: ConnectionLevel) -> tuple[dict[str, HostProfile], list[Finding]]:
    """Every host's profile (the fingerprints the detectors read) and phase locking, from every
    connection's delayed-ACK samples."""
    hosts = dict(level.hosts)
    return hosts, phase_lock_findings(hosts, level.samples, level.findings)


def phase_lock_findings(hosts: Mapping[str, HostProfile], samples: Table,
                        findings: list[Finding]) -> list[Finding]:
    """Every host with enough delayed-ACK samples tested for phase locking (its profile's test
    set), with the stalls of `findings` it caused as receiver."""
    stalls = [f for f in findings if f.kind == nagle_stall.KIND]
    return phase_lock.detect_hosts(hosts, samples, phase_lock.stall_seconds_by_receiver(stalls))


def run_detectors(capture: Capture, charts: bool = True, keep_segments: bool = True
                  ) -> Analysis:
    """Run every detector over one capture held whole in memory; with `charts`, also gather
    what the HTML report draws; without `keep_segments`, the segment table of a capture the
    compiled core read is not made (no report reads it). The analysis's capture keeps its
    tables but not the core's events, which the detectors have read (they take about twice
    the capture's size, and a run over many captures would hold or send them all)."""
    found = capture.found_events
    capture = dataclasses.replace(capture, packets=as_table(capture.packets),
                                  connections=as_table(capture.connections),
                                  sack_blocks=as_table(capture.sack_blocks), found_events=None)
    level = connection_level(FlowTables(capture.packets, capture.connections, capture.sack_blocks,
                                        found), keep_segments=keep_segments)
    hosts, phase_findings = host_level(level)
    chart_data = None
    if charts:
        from nagledetect.chart_data import busiest_hosts, connection_charts

        chart_data = connection_charts(capture.packets, level.connections, level.messages,
                                       level.findings)
        chart_data.hosts = busiest_hosts(hosts)
    return with_clock_caveat(Analysis(
        capture, level.segments, level.messages, level.samples, hosts,
        sorted(level.findings + phase_findings, key=rank_key), level.parity, charts=chart_data))


def mend_findings(analysis: Analysis, mend: RecordFix) -> None:
    """Mend the analysis's findings with `mend`: those held now, those kept on disk as they
    are read back."""
    if isinstance(analysis.findings, RecordTable):
        analysis.findings.also_fix(mend)
    else:
        mend(np.arange(len(analysis.findings)), list(analysis.findings))


def with_clock_caveat(analysis: Analysis) -> Analysis:
    """The analysis of a whole capture, its findings mended for what its clock leaves unproven
    (`detectors.capture_clock`), and its accounting saying whether its times were set."""
    accounting = analysis.capture.accounting
    caveat = ClockCaveat.of(accounting, accounting.clock_spacing_us is not None
                            and _answered(analysis.capture.connections))
    accounting.clock_spacing_us = caveat.spacing_us if caveat else None
    if caveat is not None:
        accounting.warnings += [caveat.warning()] if caveat.spacing_us else []
        mend_findings(analysis, caveat)
    return analysis


def _answered(connections: Rows) -> bool:
    """Whether a connection was seen both ways (its two packet counts read only when asked: a
    large capture's connection table is on disk)."""
    return len(connections) > 0 and not seen_one_way(
        *(ColumnReader()(connections, f"packets_{way}")
          for way in ("client_to_server", "server_to_client"))).all()


def without_tcp(path: str, accounting: Accounting, charts: bool = False) -> Analysis:
    """The analysis of a capture without one TCP packet. It is the same for every such capture,
    so it is made once and handed out with each capture's path and accounting: an archive can
    hold a thousand of them, and running every step on empty tables cost more than reading one.
    Its empty tables are shared: they are only read."""
    template = _without_tcp(charts)
    return with_clock_caveat(dataclasses.replace(
        template, capture=dataclasses.replace(template.capture, path=path, accounting=accounting),
        hosts={}, findings=[], charts=copy.deepcopy(template.charts)))


@cache
def _without_tcp(charts: bool) -> Analysis:
    return run_detectors(without_packets("", Accounting("", 0), None), charts)


def rank_key(finding: Finding) -> tuple:
    """Most time lost first; ties by connection, then kind and sender, so the order never
    depends on how the work was split."""
    return -finding.time_lost_s, finding.connection, finding.kind, str(finding.sender)


def no_samples() -> Table:
    """The empty samples table."""
    return Table({"host": np.zeros(0, dtype=object), "connection": np.zeros(0, np.int64),
                  "direction": np.zeros(0, np.int8), "ack_time_s": np.zeros(0),
                  "hold_ms": np.zeros(0), "delayed": np.zeros(0, dtype=bool)})


@dataclass(frozen=True)
class EmptyTables:
    """The tables of an analysis that kept none (`Analysis.tables_kept` False)."""

    packets: Table
    sack_blocks: Table
    segments: Table
    messages: Table
    samples: Table


@cache
def shared_empty_tables() -> EmptyTables:
    """One set of empty tables for every analysis sent to another process, which only reads
    them (copies cost more than the rest of a small capture's result to make and send)."""
    flows = _empty_flows()
    return EmptyTables(*(shared_table(table) for table in (
        flows.packets, flows.sack_blocks, Table(), Table(), no_samples())))


def without_packets(path: str, accounting: Accounting,
                    connections: Table | StoredRows | None) -> Capture:
    """A capture's record with empty packet tables (the shape a capture without TCP has)."""
    empty = _empty_flows()
    return Capture(path, empty.packets, empty.connections if connections is None else connections,
                   empty.sack_blocks, accounting)


@cache
def _empty_flows() -> FlowTables:
    """The flow tables of a capture without TCP, made once and shared: tables are only
    read."""
    return empty_flow_tables()
