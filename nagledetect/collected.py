"""The results of a capture analysed a batch of connections at a time (`streamed`) or in parts
(`parts`), gathered as they arrive: connection tables, findings and delayed-ACK samples
written to one spill file (`stored`), so that the main process holds only the columns that
rank findings (senders and receivers as fixed-width text). Then the host step runs host bucket by
bucket (in worker processes too: a host's samples all fall in its bucket), and findings are
read back in rank order by the reporters, mended on the way: capture-wide connection ids
(numbered by first packet, as a whole run numbers them) and stall confidence scored again
against the capture-wide host timers. The result equals a whole run's. Neither pandas nor the
Python reader is imported here but for `--tables`.
"""

from __future__ import annotations

import dataclasses
import multiprocessing
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any

import numpy as np

from nagledetect.chart_data import (
    ChartData,
    TimeSequence,
    busiest_hosts,
    connection_charts,
    worst_first,
)
from nagledetect.detectors import nagle_stall, phase_lock
from nagledetect.detectors.delack_timer import fingerprint_hosts, host_fingerprints
from nagledetect.detectors.model import Finding, HostProfile
from nagledetect.flows.connections import by_connection
from nagledetect.flows.grouped import found_in_sorted
from nagledetect.memory import give_back_free_memory
from nagledetect.ordering import (
    as_text,
    codes_by_first_use,
    factorize_in_name_order,
    looked_up_as,
    name_order,
)
from nagledetect.part_sizes import (
    StageCallback,
)
from nagledetect.pipeline import (
    PARITY_KEYS,
    Analysis,
    ConnectionLevel,
    Wanted,
    no_samples,
    with_clock_caveat,
    without_packets,
)
from nagledetect.read.accounting import Accounting
from nagledetect.stored import (
    FamilySummaries,
    HostColumns,
    HostRows,
    PickledFindings,
    RankingColumns,
    RecordTable,
    SpillFile,
    StoredFindings,
    StoredHosts,
    StoredRows,
    host_rows,
    joined_ranking,
    pickle_findings,
)
from nagledetect.table import Table, as_frame, as_table, concatenated
from nagledetect.workers import worker_pool

if TYPE_CHECKING:
    import pandas as pd

    from nagledetect.part_tables import PartTables, SpilledTables, WrittenChunks

PARTS_PER_HOST_BUCKET = 1
"""A host bucket holds about as many samples as this many parts yield, over the number of
workers: buckets run that many at a time, so the memory in flight stays the same. Each worker
keeps what its largest bucket took: buckets of four parts' samples took the 100 M replica's
host step 700 MB with its two workers, of one part's 540 MB, in the same time."""
HOST_STAGE = "host buckets fingerprinted"
SAMPLE_ROW = np.dtype([("part", "<i4"), ("connection", "<i8"), ("direction", "i1"),
                       ("ack_time_s", "<f8"), ("hold_ms", "<f8"), ("delayed", "?"),
                       ("data_frame", "<i8")])
"""A delayed-ACK sample as spilled: its receiving host is the connection's server for
direction 0, its client for direction 1."""


@dataclass
class PartResult:
    """What one part sends back to the main process."""

    connections: pd.DataFrame
    parity: pd.DataFrame
    samples: np.ndarray
    """SAMPLE_ROW rows, `part` still 0."""
    sample_bucket: np.ndarray
    findings: PickledFindings
    charts: ChartData | None
    tables: tuple[pd.DataFrame | WrittenChunks, pd.DataFrame] | None
    """The packet and message tables, part-local ids (the packet table in a file of its own
    for a part read a slice at a time)."""


def result_of_level(level: ConnectionLevel, buckets: int, wanted: Wanted,
                    written: WrittenChunks | None = None) -> PartResult:
    """What a part (or a batch of whole connections) sends on, from its connection level,
    which is let go on the way; its packet table as `written` where it was written a chunk
    at a time."""
    charts = level.charts
    if charts is None and wanted.charts:
        charts = connection_charts(level.packets, level.connections, level.messages,
                                   level.findings)
    tables = ((as_frame(level.packets) if written is None else written,
               as_frame(level.messages)) if wanted.tables else None)
    connections, parity, findings = level.connections, level.parity, level.findings
    samples = level.samples
    del level
    rows = np.zeros(len(samples), dtype=SAMPLE_ROW)
    for name in SAMPLE_ROW.names[1:]:
        rows[name] = np.asarray(samples[name])
    sample_bucket = receiver_buckets(connections, rows["connection"], rows["direction"],
                                     buckets)
    del samples
    return PartResult(connections, parity, rows, sample_bucket, pickle_findings(findings),
                      charts, tables)


def receiver_buckets(connections: Table | pd.DataFrame, connection: np.ndarray,
                     direction: np.ndarray, buckets: int) -> np.ndarray:
    """The bucket of the receiving host of each sample (`SAMPLE_ROW`): the server's for
    direction 0, the client's for 1. Each connection's two addresses are hashed once: a
    batch has some hundred samples a connection."""
    ids = np.asarray(connections["id"])
    by_side = Table({"id": ids,
                     "server": host_buckets(np.asarray(connections["server_address"]), buckets),
                     "client": host_buckets(np.asarray(connections["client_address"]), buckets)})
    return np.where(direction == 0, by_connection(by_side, "server", connection),
                    by_connection(by_side, "client", connection))


def host_buckets(hosts: np.ndarray, buckets: int) -> np.ndarray:
    """The bucket of each host address: its CRC-32 modulo `buckets` (the same in every part).
    Addresses are numbered in a dict, each hashed once: sorting them (`np.unique`) took three
    times as long."""
    codes, addresses = codes_by_first_use(hosts)
    bucket_of = [zlib.crc32(str(address).encode()) % buckets for address in addresses]
    return np.array(bucket_of, dtype=np.int64)[codes] if len(codes) else np.zeros(0, np.int64)


@dataclass
class _FindingColumns:
    """Where each spilled finding lies and what ranks it, in part order."""

    offsets: list[np.ndarray] = dataclasses.field(default_factory=list)
    lengths: list[np.ndarray] = dataclasses.field(default_factory=list)
    connection: list[np.ndarray] = dataclasses.field(default_factory=list)
    sender: list[np.ndarray] = dataclasses.field(default_factory=list)
    receiver_host: list[np.ndarray] = dataclasses.field(default_factory=list)
    rankings: list[RankingColumns] = dataclasses.field(default_factory=list)
    families: list[FamilySummaries] = dataclasses.field(default_factory=list)

    def extend(self, offsets: np.ndarray, found: PickledFindings, connection: np.ndarray) -> None:
        self.families.append(found.family)
        self.offsets.append(offsets)
        self.lengths.append(found.lengths)
        self.connection.append(connection)
        self.sender.append(found.sender)
        self.receiver_host.append(found.receiver_host)
        self.rankings.append(found.ranking)

    def column(self, name: str) -> np.ndarray:
        pieces = getattr(self, name)
        return np.concatenate(pieces) if pieces else np.zeros(0, dtype=np.int64)

    def ranking(self) -> RankingColumns:
        """The ranking columns of every finding, joined once (and kept so)."""
        self.rankings[:] = [joined_ranking(self.rankings)]
        return self.rankings[0]


def _spilled_tables(spill: SpillFile) -> SpilledTables:
    from nagledetect.part_tables import SpilledTables  # pandas: only for --tables

    return SpilledTables(spill)


def _part_tables(tables: SpilledTables, mend: _CaptureWideIds) -> PartTables:
    from nagledetect.part_tables import PartTables

    return PartTables(tables, mend)


class CollectedParts:
    """The parts' results as they arrive: connection tables, findings and samples spilled, the
    findings' ranking columns in memory."""

    def __init__(self, buckets: int, workers: int, wanted: Wanted, spill: SpillFile) -> None:
        self.buckets = buckets
        self.workers = workers
        self.spill = spill
        self.connections: dict[int, StoredRows] = {}
        """Each part's connection table, kept in the spill a column at a time (held in memory
        to the end, the tables of the 100 M replica's 400,000 connections took 75 MB
        throughout the pass)."""
        self.parity: dict[int, pd.DataFrame] = {}
        self.findings: dict[int, tuple[np.ndarray, PickledFindings]] = {}
        self.sample_blocks: list[list[tuple[int, int]]] = [[] for _ in range(buckets)]
        self.charts = ChartData() if wanted.charts else None
        self.tables = _spilled_tables(self.spill) if wanted.tables else None
        self.message_counts: dict[int, np.ndarray] = {}
        """Messages of each part-local connection, by part (to number messages capture-wide)."""
        self.worst: list[tuple[int, TimeSequence]] = []
        """The capture's worst connections so far, each with its part."""

    def add(self, index: int, result: PartResult) -> None:
        table = as_table(result.connections)
        self.connections[index] = StoredRows.of_columns(
            self.spill, len(table), ((name, table[name]) for name in table), table.coded)
        if not result.parity.empty:
            self.parity[index] = result.parity
        self._spill_samples(index, result.samples, result.sample_bucket)
        if self.charts is not None and result.charts is not None:
            self._add_charts(self.charts, index, result.charts)
        if self.tables is not None and result.tables is not None:
            self._spill_tables(self.tables, index, *result.tables, len(result.connections))
        found = result.findings
        self.findings[index] = (self.spill.append_joined(found.records, found.lengths), found)
        found.records = b""

    def _add_charts(self, collected: ChartData, index: int, charts: ChartData) -> None:
        """The part's counts added; its worst connections kept if they are among the
        capture's worst so far."""
        collected.add_counts(charts)
        candidates = self.worst + [(index, sequence) for sequence in charts.worst]
        kept = worst_first([sequence for _, sequence in candidates])
        self.worst = [(part, sequence) for part, sequence in candidates
                      if any(sequence is worst for worst in kept)]

    def _spill_tables(self, tables: SpilledTables, index: int,
                      packets: pd.DataFrame | WrittenChunks, messages: pd.DataFrame,
                      connections: int) -> None:
        from nagledetect.part_tables import WrittenChunks  # pandas: only for --tables

        if isinstance(packets, WrittenChunks):
            tables.add_written(index, "packets", packets)
        else:
            tables.add(index, "packets", packets)
        tables.add(index, "messages", messages)
        self.message_counts[index] = np.bincount(
            np.asarray(messages["connection"], dtype=np.int64), minlength=connections)

    def _spill_samples(self, index: int, rows: np.ndarray, bucket: np.ndarray) -> None:
        """One block of rows per bucket, in the part's order."""
        rows["part"] = index
        order = np.argsort(bucket, kind="stable")
        bounds = np.searchsorted(bucket[order], np.arange(self.buckets + 1))
        ordered = rows[order]
        for bucket_index in np.flatnonzero(np.diff(bounds)).tolist():
            block = ordered[bounds[bucket_index]:bounds[bucket_index + 1]]
            self.sample_blocks[bucket_index].append((self.spill.append([block.tobytes()]),
                                                     len(block)))

    def analysis(self, path: str, accounting: Accounting, stages: StageCallback) -> Analysis:
        numbering = self._connection_numbering()
        global_id, part_offset = numbering.global_id, numbering.part_offset
        columns = _FindingColumns()
        for index in sorted(self.findings):
            offsets, found = self.findings.pop(index)
            columns.extend(offsets, found, global_id[part_offset[index] + found.connection])
        columns.ranking()  # joined before the host step's workers fork, not in each
        parity = [self._parity_numbered(index, global_id, part_offset)
                  for index in sorted(self.parity)]
        give_back_free_memory()
        host_step = _HostStep(self, numbering)
        hosts, timers = host_step.run(self.workers, stages,
                                      _stall_seconds_reader(self.spill, columns))
        give_back_free_memory()
        self._add_phase_findings(columns, host_step.phase_findings)
        parity_table = _sorted_parity(concatenated(parity)) if parity else Table()
        charts = self.charts
        if charts is not None:
            charts.worst = worst_first([
                dataclasses.replace(sequence, connection=int(
                    global_id[part_offset[part] + sequence.connection]))
                for part, sequence in self.worst])
            charts.hosts = busiest_hosts(hosts, host_step.with_samples)
        tables = (None if self.tables is None else
                  _part_tables(self.tables, _CaptureWideIds(global_id, part_offset,
                                                            self.message_counts)))
        ranked = _ranked(self.spill, columns, timers)
        del columns, host_step
        give_back_free_memory()
        connections = self._numbered_connections(numbering)
        return with_clock_caveat(Analysis(
            without_packets(path, accounting, connections), Table(), Table(), no_samples(),
            hosts, ranked, parity_table, tables_kept=False, charts=charts, part_tables=tables))

    def _connection_numbering(self) -> _ConnectionNumbering:
        """Capture-wide connection ids, numbered by first packet as a one-part run numbers them,
        and each connection's two addresses as text: all the host step needs of the
        connection tables, which are joined only after it (held through it, the 100 M
        replica's took 130 MB beside the host step's workers)."""
        batches = [self.connections[index] for index in sorted(self.connections)]
        rows = [len(batch) for batch in batches]
        part_offset = np.zeros(max(self.connections) + 1, dtype=np.int64)
        part_offset[sorted(self.connections)] = np.cumsum([0] + rows)[:-1]
        by_first_packet = np.argsort(np.concatenate([batch["first_frame"] for batch in batches]),
                                     kind="stable")
        global_id = np.empty(len(by_first_packet), dtype=np.int64)
        global_id[by_first_packet] = np.arange(len(by_first_packet))
        # A part's ids are its rows, so joined row j is capture-wide connection global_id[j].
        return _ConnectionNumbering(global_id, part_offset, by_first_packet,
                                    self._address_text("server_address", by_first_packet),
                                    self._address_text("client_address", by_first_packet))

    def _address_text(self, name: str, by_first_packet: np.ndarray) -> np.ndarray:
        """An address column of every batch, in capture-wide id order, as text: made text a
        batch at a time (every batch's strings at once took 125 MB of the 100 M mix)."""
        pieces = [as_text(self.connections[index][name]) for index in sorted(self.connections)]
        if any(piece.dtype.kind == "U" for piece in pieces):
            pieces = [piece.astype(str) for piece in pieces]
        return np.concatenate(pieces)[by_first_packet]

    def _numbered_connections(self, numbering: _ConnectionNumbering) -> StoredRows:
        """Every batch's connections in one table, in capture-wide id order, kept in the spill
        file (`StoredRows`: the 1.1 M connections of the 100 M mix took 200 MB in memory);
        the addresses as the numbering's text (read as values, they are strings). Each column
        is joined, put in that order and stored alone."""
        batches = [self.connections.pop(index) for index in sorted(self.connections)]
        text = {"server_address": numbering.server_text, "client_address": numbering.client_text}
        by_first_packet = numbering.by_first_packet

        def columns() -> Iterator[tuple[str, np.ndarray]]:
            for name in batches[0].columns:
                if name in text:
                    yield name, text[name]
                elif name == "id":
                    yield name, np.arange(len(by_first_packet), dtype=batches[0]["id"].dtype)
                else:
                    yield name, np.concatenate([batch[name] for batch in batches])[by_first_packet]

        return StoredRows.of_columns(self.spill, len(by_first_packet), columns(), batches[0].coded)

    def _parity_numbered(self, index: int, global_id: np.ndarray, part_offset: np.ndarray
                         ) -> Table:
        """A part's parity rows, let go of here, with capture-wide connection ids."""
        table = as_table(self.parity.pop(index))
        return table.assign(connection=global_id[part_offset[index]
                                                 + np.asarray(table["connection"])])

    def _add_phase_findings(self, columns: _FindingColumns, findings: list[Finding]) -> None:
        """Host-level findings join the spilled ones, in address order as a one-part run makes
        them."""
        findings = sorted(findings, key=lambda finding: str(finding.receiver))
        found = pickle_findings(findings)
        columns.extend(self.spill.append_joined(found.records, found.lengths), found,
                       found.connection)

    def bucket_samples(self, bucket: int) -> np.ndarray:
        blocks = [self.spill.read_rows(offset, rows, SAMPLE_ROW)
                  for offset, rows in self.sample_blocks[bucket]]
        return np.concatenate(blocks) if blocks else np.zeros(0, dtype=SAMPLE_ROW)


class _HostStep:
    """Fingerprints and phase locking, bucket by bucket (a few at once in worker processes),
    with each bucket's samples in the order of a one-part run: by the frame of their data
    segment (a host's sums then add the same values in the same order, to the last bit)."""

    def __init__(self, collected: CollectedParts, numbering: _ConnectionNumbering) -> None:
        self._collected = collected
        self._global_id = numbering.global_id
        self._part_offset = numbering.part_offset
        self._server = numbering.server_text
        self._client = numbering.client_text
        self.phase_findings: list[Finding] = []

    def run(self, workers: int, stages: StageCallback,
            stall_seconds: Callable[[str], np.ndarray]) -> tuple[StoredHosts, _HostTimers]:
        """Every bucket, in `workers` forked processes when there are several (results taken in
        bucket order, so the outcome does not depend on them); `stall_seconds` gives the
        stalls a host caused, for its phase-lock test."""
        columns = HostColumns(self._collected.spill)
        timers: list[np.ndarray] = [np.zeros(0)]
        buckets = self._collected.buckets
        work = partial(self.bucket_hosts, stall_seconds=stall_seconds)
        for done, found in enumerate(_forked_map(work, range(buckets), workers), start=1):
            stages(HOST_STAGE, done, buckets)
            timers.append(found.timers_ms)
            self.phase_findings += found.phase_findings
            columns.add(found.rows)
        hosts, order = columns.by_address()
        # The timers share the profiles' addresses and sample counts, in the same order.
        return hosts, _HostTimers(hosts.address_text, np.concatenate(timers)[order],
                                  hosts.delack_samples)

    def with_samples(self, profiles: list[HostProfile]) -> list[HostProfile]:
        """Stored profiles with their per-sample arrays, fingerprinted again from their own
        samples (each host's bucket read once)."""
        buckets = host_buckets(np.array([p.address for p in profiles], dtype=object),
                               self._collected.buckets)
        filled: dict[str, HostProfile] = {}
        for bucket in np.unique(buckets).tolist():
            samples = self._bucket_samples(bucket)
            wanted = [p.address for p, b in zip(profiles, buckets.tolist()) if b == bucket]
            names = np.asarray(samples.coded["host"], dtype=object)
            filled.update(fingerprint_hosts(samples.take(np.isin(names[samples["host"]],
                                                                 wanted))))
        return [dataclasses.replace(profile, delays_ms=filled[profile.address].delays_ms,
                                    ack_times_s=filled[profile.address].ack_times_s,
                                    ack_connections=filled[profile.address].ack_connections)
                for profile in profiles]

    def bucket_hosts(self, bucket: int, stall_seconds: Callable[[str], np.ndarray]
                     ) -> _BucketHosts:
        """One bucket's host profiles, their timers before phase locking refines them, and its
        phase-lock findings."""
        samples = self._bucket_samples(bucket)
        fingerprints = host_fingerprints(samples)
        timers_ms = np.array([np.nan if timer is None else timer
                              for timer in fingerprints.timers_ms()], dtype=np.float64)
        phase_findings = phase_lock.detect_hosts(fingerprints, samples, stall_seconds)
        return _BucketHosts(host_rows(fingerprints.host_values()), timers_ms, phase_findings)

    def _bucket_samples(self, bucket: int) -> Table:
        rows = self._collected.bucket_samples(bucket)
        rows = rows[np.argsort(rows["data_frame"], kind="stable")]
        connection = self._global_id[self._part_offset[rows["part"]] + rows["connection"]]
        direction = rows["direction"]
        host_code, names = self._receiving_hosts(connection, direction)
        return Table({
            "host": host_code, "connection": connection, "direction": direction,
            "ack_time_s": rows["ack_time_s"], "hold_ms": rows["hold_ms"],
            "delayed": rows["delayed"]}, coded={"host": names.tolist()})

    def _receiving_hosts(self, connection: np.ndarray, direction: np.ndarray
                         ) -> tuple[np.ndarray, np.ndarray]:
        """The receiving host of each sample, as codes of the addresses in name order:
        addresses are looked up once per connection, as fixed-width text (`ordering.as_text`),
        and the host step groups by code rather than hashing an address per sample."""
        present, sample_connection = np.unique(connection, return_inverse=True)
        receivers = np.empty(2 * len(present),
                             dtype=np.result_type(self._server.dtype, self._client.dtype))
        receivers[0::2] = self._server[present]
        receivers[1::2] = self._client[present]
        codes, names = factorize_in_name_order(receivers)
        return codes[sample_connection * 2 + direction], names


def _sorted_parity(table: Table) -> Table:
    """The parity rows in `PARITY_KEYS` order, as a one-part run makes them."""
    keys = [as_text(table[name]) if table[name].dtype == object else table[name]
            for name in reversed(PARITY_KEYS)]
    return table.take(np.lexsort(keys))


class _CaptureWideIds:
    """Mends a chunk of a part's table to capture-wide ids. Messages are numbered in
    connection order (`events.messages.number_messages`), so a message's capture-wide number is
    the messages of all connections before its own plus its place within its connection. A
    class, not a closure: it goes with the tables to the process that writes them."""

    def __init__(self, global_id: np.ndarray, part_offset: np.ndarray,
                 message_counts: dict[int, np.ndarray]) -> None:
        counts = np.zeros(len(global_id), dtype=np.int64)
        self._first_in_part: dict[int, np.ndarray] = {}
        for part, part_counts in message_counts.items():
            counts[global_id[part_offset[part] + np.arange(len(part_counts))]] = part_counts
            self._first_in_part[part] = np.cumsum(part_counts) - part_counts
        self._first_capture_wide = np.cumsum(counts) - counts
        self._global_id = global_id
        self._part_offset = part_offset

    def __call__(self, part: int, name: str, rows: pd.DataFrame) -> pd.DataFrame:
        local = rows["connection"].to_numpy(dtype=np.int64)
        connection = self._global_id[self._part_offset[part] + local]
        mended = rows.assign(connection=connection.astype(rows["connection"].dtype))
        if name == "messages":
            within = rows["message"].to_numpy(dtype=np.int64) - self._first_in_part[part][local]
            mended["message"] = (self._first_capture_wide[connection] + within).astype(
                rows["message"].dtype)
        return mended


@dataclass
class _ConnectionNumbering:
    """Capture-wide connection ids: batch-local connection i of batch p is capture-wide
    `global_id[part_offset[p] + i]`; the batches' rows laid end to end, taken in
    `by_first_packet` order, are in capture-wide id order; each connection's addresses as
    text, by capture-wide id."""

    global_id: np.ndarray
    part_offset: np.ndarray
    by_first_packet: np.ndarray
    server_text: np.ndarray
    client_text: np.ndarray


@dataclass
class _BucketHosts:
    rows: HostRows
    timers_ms: np.ndarray
    """NaN: no timer."""
    phase_findings: list[Finding]


_FORKED_WORK: Callable[[int], Any] | None = None
"""What `_forked_map`'s workers call: inherited when they fork, never pickled."""


def _forked_call(item: int) -> Any:
    return _FORKED_WORK(item)  # type: ignore[misc]


def _forked_map(work: Callable[[int], Any], items: range, workers: int) -> Iterator[Any]:
    """`work` of each item, in order: in `workers` forked processes when there are several
    items (they read the parent's state as it was at the fork), else here. A process pool,
    not a `multiprocessing.Pool`: that one waits for ever for the item of a worker that was
    killed, where this one raises BrokenExecutor."""
    if workers <= 1 or len(items) <= 1:
        yield from map(work, items)
        return
    global _FORKED_WORK
    _FORKED_WORK = work
    try:
        with worker_pool(max_workers=min(workers, len(items)),
                         mp_context=multiprocessing.get_context("fork")) as pool:
            yield from pool.map(_forked_call, items)
    finally:
        _FORKED_WORK = None


@dataclass
class _HostTimers:
    """Each host's delayed-ACK timer before phase locking refines it (NaN: none), and the samples
    it rests on, by address (fixed-width text, `ordering.as_text`)."""

    addresses: np.ndarray
    timer_ms: np.ndarray
    samples: np.ndarray

    def of(self, hosts: list[str]) -> list[tuple[float | None, int]]:
        if not len(self.addresses):
            return [(None, 0)] * len(hosts)
        wanted, addresses = looked_up_as(hosts, self.addresses)
        position, found = found_in_sorted(addresses, wanted)
        timer = np.where(found, self.timer_ms[position], np.nan)
        samples = np.where(found, self.samples[position], 0)
        return [(None if value != value else value, count)
                for value, count in zip(timer.tolist(), samples.tolist())]


def _stall_seconds_reader(spill: SpillFile, columns: _FindingColumns
                          ) -> Callable[[str], np.ndarray]:
    """The durations of the stalls a receiving host caused, read from the spilled stall
    findings (indexed by receiver on first use: few hosts are phase-locked)."""
    index: dict[str, np.ndarray] = {}

    def stall_seconds(address: str) -> np.ndarray:
        if not index:
            index.update(_stalls_by_receiver(columns))
        key, hosts = looked_up_as(address, index["hosts"])
        positions = index["positions"][np.searchsorted(hosts, key, "left"):
                                       np.searchsorted(hosts, key, "right")]
        stalls = RecordTable(spill, index["offsets"][positions], index["lengths"][positions])
        return np.concatenate([np.zeros(0)] + [finding.events.stall_s for finding in stalls])

    return stall_seconds


def _stalls_by_receiver(columns: _FindingColumns) -> dict[str, np.ndarray]:
    ranking = columns.ranking()
    stall_code = ranking.kinds.index(nagle_stall.KIND) if nagle_stall.KIND in ranking.kinds else -1
    stalls = np.flatnonzero(ranking.kind_codes == stall_code)
    receivers = columns.column("receiver_host")[stalls] if len(stalls) else np.zeros(0, "S1")
    named = np.char.str_len(receivers) > 0
    positions, hosts = stalls[named], receivers[named]
    order = name_order(hosts)
    return {"hosts": hosts[order], "positions": positions[order],
            "offsets": columns.column("offsets"), "lengths": columns.column("lengths")}


def _ranked(spill: SpillFile, columns: _FindingColumns, timers: _HostTimers) -> StoredFindings:
    """The findings in rank order (`pipeline.rank_key`; ties kept in part order), each read back
    with its capture-wide connection id and, for stalls, its confidence against the
    capture-wide timer of its receiver."""
    ranking = columns.ranking()
    connection = columns.column("connection")
    kind_in_name_order = factorize_in_name_order(ranking.kinds)[0][ranking.kind_codes]
    order = np.lexsort((np.arange(len(connection)), columns.column("sender"),
                        kind_in_name_order, connection, -ranking.time_lost_s))
    family = FamilySummaries.joined(columns.families, [len(piece) for piece in columns.lengths],
                                    connection)
    return StoredFindings(spill, columns.column("offsets")[order],
                          columns.column("lengths")[order], ranking.take(order),
                          fix=_CaptureWideFinding(connection[order], timers),
                          family=family.reordered(order))


@dataclass
class _CaptureWideFinding:
    """Mends findings read back in rank order: each gets its capture-wide connection id and, for
    a stall, its confidence against the capture-wide timer of its receiver. A class, not a
    closure: it goes with the findings to the process that writes them."""

    ranked_connection: np.ndarray
    timers: _HostTimers

    def __call__(self, positions: np.ndarray, findings: list[Finding]) -> None:
        stalls = [f for f in findings if f.kind in (nagle_stall.KIND, nagle_stall.RTT_HOLD_KIND)]
        for finding, (timer, samples) in zip(
                stalls, self.timers.of([str(f.receiver_host) for f in stalls])):
            nagle_stall.rescore(finding, timer, samples)
        for finding, connection_id in zip(findings, self.ranked_connection[positions].tolist()):
            finding.connection = connection_id
