"""Findings, host profiles and connections of a capture analysed in parts, kept on disk until
they are written.

Why: a 100 M-packet capture has over a million findings and most of a million host profiles;
held as Python objects they take gigabytes. Each record is pickled once into an unlinked
temporary file, and the result keeps only the columns that order the records (rank, address)
and where each one lies. Records are read back a chunk at a time, in order, when a reporter
walks them. Sent to another process, a stored table is sent as its records, or, when its spill
file was made to be handed over (a worker of a many-capture run on this machine), as where
they lie in that file.
"""

from __future__ import annotations

import dataclasses
import os
import pickle
import tempfile
import weakref
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from nagledetect.chunked import ChunkedSequence
from nagledetect.collector import collector_paused
from nagledetect.detectors.kinds import is_nagle_family
from nagledetect.detectors.model import Finding, HostProfile, HostValues
from nagledetect.ordering import (
    as_strings,
    as_text,
    codes_by_first_use,
    looked_up_as,
    name_order,
)
from nagledetect.summaries import StallSummaries
from nagledetect.table import Table, object_column

if TYPE_CHECKING:
    import pandas as pd

COPY_BYTES = 8 * 1024 * 1024
"""Bytes copied at a time when a spill file adopts another's."""
SPILL_PREFIX = "nagledetect-results-"
IOV_MAX = os.sysconf("SC_IOV_MAX") if "SC_IOV_MAX" in os.sysconf_names else 1024
RecordFix = Callable[[np.ndarray, list[Any]], None]
"""Called with the positions and the records of each chunk read, before they are handed out."""


class SpillFile:
    """Bytes appended to one temporary file and read back by position.

    Unnamed by default: the space goes back to the system when the last table that reads it is
    let go. Made in a `folder`, the file keeps its name until another process takes it over:
    the tables that read it are then sent to that process as where their records lie, not as
    the records (a worker of a many-capture run hands its results over without pickling them
    again), and that process `adopt`s the bytes into its own spill file."""

    def __init__(self, folder: str | None = None) -> None:
        handle, path = tempfile.mkstemp(prefix=SPILL_PREFIX, dir=folder)
        self.path: str | None = path
        if folder is None:
            os.unlink(path)
            self.path = None
        self._open(handle)
        self.size = 0
        self._base = 0
        """Where this spill's bytes begin in the file (not 0 once another spill adopted them)."""
        self._moved = False
        self.no_findings: StoredFindings | None = None
        """Shared by the captures without findings that spill here (`stored_findings`)."""

    def _open(self, handle: int) -> None:
        """Read and write through `handle`, closed when this spill is let go (or adopted), not
        by the collector finding a file object left open."""
        self._handle = handle
        self._adopter: SpillFile | None = None
        """The spill whose file this one reads once adopted, kept alive as long as this one."""
        self._close = weakref.finalize(self, os.close, handle)

    @property
    def sent_by_reference(self) -> bool:
        """Whether the tables reading this file go to another process by reference."""
        return self.path is not None

    def __reduce__(self) -> tuple:
        if self.path is None:
            raise TypeError("an unnamed spill file stays in its process: send its records")
        return _taken_over, (self.path, self.size)

    def discard(self) -> None:
        """Remove a named file that nothing was spilled to (nobody will take it over)."""
        if self.path is not None:
            os.unlink(self.path)
            self.path = None
        self._close()

    def adopt(self, other: SpillFile) -> None:
        """Copy `other`'s bytes to the end of this file and let `other` read them from here,
        closing its own file: a run over many captures keeps one open file, not one per
        capture. `other` takes no more appends, and this spill can no longer be adopted itself
        (`other` reads this spill's descriptor)."""
        if other._handle == self._handle:
            return
        if self._moved:
            raise ValueError("this spill's bytes were adopted by another spill file")
        base = self.size
        for start in range(0, other.size, COPY_BYTES):
            self.append([other.read(start, min(COPY_BYTES, other.size - start))])
        other._close()
        other._handle, other._adopter = self._handle, self
        other._base, other.path, other._moved = base, None, True

    def cut_back(self, size: int) -> None:
        """Let go of what was appended since the file held `size` bytes (a pass that gave up
        wrote it, and nothing reads it): a run's shared spill would otherwise keep it, and a
        worker's would hand it over to be copied again."""
        if self._moved:
            raise ValueError("this spill's bytes were adopted by another spill file")
        os.ftruncate(self._handle, self._base + size)
        self.size = size

    def append(self, pieces: list[bytes]) -> int:
        """Write the pieces one after another at the end (a system call per IOV_MAX pieces, no
        joined copy); the offset of the first."""
        if self._moved:
            raise ValueError("this spill's bytes were adopted by another spill file")
        offset = self.size
        views = [memoryview(piece).cast("B") for piece in pieces if len(piece)]
        for start in range(0, len(views), IOV_MAX):
            self.size += self._write_all(views[start:start + IOV_MAX], self._base + self.size)
        return offset

    def append_each(self, pieces: list[bytes]) -> np.ndarray:
        """Write the pieces one after another at the end; the offset of each."""
        lengths = np.array([len(piece) for piece in pieces], dtype=np.int64)
        return self.append(pieces) + np.cumsum(lengths) - lengths

    def append_joined(self, joined: bytes, lengths: np.ndarray) -> np.ndarray:
        """Pieces already joined into one (of `lengths` bytes each), written in one call; the
        offset of each."""
        return self.append([joined]) + np.cumsum(lengths) - lengths

    def _write_all(self, views: list[memoryview], position: int) -> int:
        total = sum(len(view) for view in views)
        while views:
            done = os.pwritev(self._handle, views, position)
            position += done
            while views and done >= len(views[0]):
                done -= len(views[0])
                views = views[1:]
            if views:
                views[0] = views[0][done:]
        return total

    def read(self, offset: int, length: int) -> bytes:
        """The bytes at [offset, offset + length), read with a system call: a map of the file
        was faster, but each small read through it brought hundreds of kilobytes of the file
        into the process's memory (a gigabyte more at 100 M packets)."""
        pieces = []
        offset += self._base
        while length > 0:
            piece = os.pread(self._handle, length, offset)
            if not piece:
                raise OSError(f"spill file ends before offset {offset}")
            pieces.append(piece)
            offset += len(piece)
            length -= len(piece)
        return b"".join(pieces)

    def read_rows(self, offset: int, rows: int, dtype: np.dtype) -> np.ndarray:
        return np.frombuffer(self.read(offset, rows * dtype.itemsize), dtype=dtype)


def _taken_over(path: str, size: int) -> SpillFile:
    """A named spill file opened by the process it was sent to, and unlinked at once: it goes
    when this process lets it go, or adopts its bytes into another."""
    spill = SpillFile.__new__(SpillFile)
    spill.path, spill.size, spill._base, spill._moved = None, size, 0, False
    spill._open(os.open(path, os.O_RDWR))
    os.unlink(path)
    return spill


def by_reference(table: object) -> tuple:
    """How a table that reads a handed-over spill file is pickled: as it is (its spill file by
    name, where its records lie), not as its records."""
    return _rebuilt, (type(table), vars(table))


def _rebuilt(kind: type, attributes: dict[str, Any]) -> object:
    table = kind.__new__(kind)
    vars(table).update(attributes)
    return table


def pickled(records: Sequence[Any]) -> tuple[list[bytes], np.ndarray]:
    """Records pickled one by one, with each one's length."""
    pieces = [pickle.dumps(record, protocol=pickle.HIGHEST_PROTOCOL) for record in records]
    return pieces, np.array([len(piece) for piece in pieces], dtype=np.int64)


class RecordTable(ChunkedSequence):
    """Pickled records in a spill file, read in the order of `offsets` (`fix` mends each chunk
    read, e.g. to capture-wide connection ids)."""

    def __init__(self, spill: SpillFile, offsets: np.ndarray, lengths: np.ndarray,
                 fix: RecordFix | None = None) -> None:
        self._spill = spill
        self._offsets = offsets
        self._lengths = lengths
        self._fix = fix

    def __len__(self) -> int:
        return len(self._offsets)

    @property
    def spill(self) -> SpillFile:
        return self._spill

    def items(self, start: int, stop: int) -> list[Any]:
        return self._read(np.arange(start, stop))

    def also_fix(self, fix: RecordFix) -> None:
        """Mend each chunk read with `fix` as well, after the fix it has."""
        self._fix = fix if self._fix is None else ChainedFix(self._fix, fix)

    def __reduce__(self) -> tuple:
        if self._spill.sent_by_reference:
            return by_reference(self)
        return list, (list(self),)

    def take(self, positions: Sequence[int] | np.ndarray) -> list[Any]:
        """The records at these positions, in that order."""
        return self._read(np.asarray(positions, dtype=np.int64))

    def _read(self, positions: np.ndarray) -> list[Any]:
        offsets = self._offsets[positions].tolist()
        lengths = self._lengths[positions].tolist()
        with collector_paused():
            records = [pickle.loads(self._spill.read(offset, length))
                       for offset, length in zip(offsets, lengths)]
        if self._fix is not None:
            self._fix(positions, records)
        return records


ROWS_PER_STORED_CHUNK = 2_048
"""A stored table is read a chunk of this many rows at a time: what a document's chunk of
entries reads (`report.document.ENTRIES_PER_CHUNK`); a connection table's 36 columns are each
a piece of up to 16 KB a chunk."""


class StoredRows:
    """A table kept in a spill file, each column in chunks of `ROWS_PER_STORED_CHUNK` rows, read
    as the table it was: a column by name (every chunk of it read), rows by position (the chunks
    that hold them read). A column given as fixed-width text (`ordering.as_text`) is stored so
    and read back as Python strings, as a table holds text. A capture with a million connections
    would hold its connection table (180 bytes a connection, the addresses as strings) through
    the writing of its report."""

    def __init__(self, spill: SpillFile, names: list[str], coded: dict[str, tuple[str, ...]],
                 rows: int, where: np.ndarray) -> None:
        self._spill = spill
        self._names = names
        self._coded = coded
        self._rows = rows
        self._where = where
        """Per chunk and column (in `names` order): the offset and length of its pickled
        piece."""

    @classmethod
    def of_columns(cls, spill: SpillFile, rows: int, columns: Iterator[tuple[str, np.ndarray]],
                   coded: dict[str, tuple[str, ...]]) -> StoredRows:
        """A table of `rows` rows from its columns, each made, stored and let go in turn."""
        chunks = max(1, -(-rows // ROWS_PER_STORED_CHUNK))
        names: list[str] = []
        where: list[np.ndarray] = []
        for name, values in columns:
            pieces, lengths = pickled([values[start:start + ROWS_PER_STORED_CHUNK]
                                       for start in range(0, chunks * ROWS_PER_STORED_CHUNK,
                                                          ROWS_PER_STORED_CHUNK)])
            names.append(name)
            where.append(np.stack([spill.append_each(pieces), lengths], axis=1))
        return cls(spill, names, coded, rows, np.stack(where, axis=1))

    @property
    def spill(self) -> SpillFile:
        return self._spill

    @property
    def columns(self) -> list[str]:
        return list(self._names)

    @property
    def coded(self) -> dict[str, tuple[str, ...]]:
        return dict(self._coded)

    @property
    def empty(self) -> bool:
        return not self._rows

    def __len__(self) -> int:
        return self._rows

    def __contains__(self, name: object) -> bool:
        return name in self._names

    def __iter__(self) -> Iterator[str]:
        return iter(self._names)

    def __getitem__(self, name: str) -> np.ndarray:
        if name not in self._names:
            raise KeyError(name)
        column = self._names.index(name)
        return as_strings(np.concatenate([self._piece(chunk, column)
                                          for chunk in range(len(self._where))]))

    def take(self, rows: np.ndarray | slice | Sequence[int]) -> Table:
        """The rows at these positions (negative ones from the end), where a mask holds, or in
        this slice, in that order, as a table (as `Table.take` takes them)."""
        positions = self._positions(rows)
        chunk = positions // ROWS_PER_STORED_CHUNK
        wanted = np.unique(chunk) if len(chunk) else np.zeros(1, dtype=np.int64)
        held = self._chunk_rows(wanted.tolist())
        first_row = np.searchsorted(wanted, chunk) * ROWS_PER_STORED_CHUNK
        return _text_as_strings(held.take(first_row + positions % ROWS_PER_STORED_CHUNK))

    def chunks(self) -> Iterator[Table]:
        """The table a chunk of rows at a time, in order."""
        for chunk in range(len(self._where)):
            yield _text_as_strings(self._chunk_rows([chunk]))

    def whole(self) -> Table:
        """Every row, as a table in memory."""
        return _text_as_strings(self._chunk_rows(list(range(len(self._where)))))

    def to_pandas(self) -> pd.DataFrame:
        return self.whole().to_pandas()

    def __reduce__(self) -> tuple:
        if self._spill.sent_by_reference:
            return by_reference(self)
        whole = self.whole()
        return Table, ({name: whole[name] for name in whole.columns}, self._coded)

    def _positions(self, rows: np.ndarray | slice | Sequence[int]) -> np.ndarray:
        if isinstance(rows, slice):
            return np.arange(*rows.indices(self._rows))
        chosen = np.asarray(rows)
        if chosen.dtype == bool:
            if chosen.shape != (self._rows,):
                raise IndexError(f"a mask of {len(chosen)} rows for a table of {self._rows}")
            return np.flatnonzero(chosen)
        if chosen.dtype.kind not in "iu" and chosen.size:
            raise IndexError("row positions must be integers")
        positions = chosen.astype(np.int64).reshape(-1)
        positions = np.where(positions < 0, positions + self._rows, positions)
        if len(positions) and not 0 <= positions.min() <= positions.max() < self._rows:
            raise IndexError(f"a row position out of a table of {self._rows}")
        return positions

    def _chunk_rows(self, chunks: list[int]) -> Table:
        """The rows of these chunks (at least one), one after another, text as stored."""
        return Table({name: np.concatenate([self._piece(chunk, column) for chunk in chunks])
                      for column, name in enumerate(self._names)}, self._coded)

    def _piece(self, chunk: int, column: int) -> np.ndarray:
        offset, length = self._where[chunk, column].tolist()
        with collector_paused():
            return pickle.loads(self._spill.read(offset, length))


def _text_as_strings(table: Table) -> Table:
    """The table with its columns of fixed-width text as Python strings."""
    text = {name: as_strings(table[name]) for name in table if table[name].dtype.kind == "S"}
    return table.assign(**text) if text else table


@dataclass(frozen=True)
class ChainedFix:
    """Two fixes, one after the other (a class, so that a table handed over pickles)."""

    first: RecordFix
    then: RecordFix

    def __call__(self, positions: np.ndarray, records: list[Any]) -> None:
        self.first(positions, records)
        self.then(positions, records)


@dataclass
class PickledFindings:
    """One part's findings, pickled one by one and joined (a part sends back, and the main
    process spills, one string of bytes rather than thousands), with the columns that rank them
    capture-wide."""

    records: bytes
    lengths: np.ndarray
    connection: np.ndarray
    sender: np.ndarray
    """Each finding's sender as text (`ordering.as_text`), "None" for none."""
    receiver_host: np.ndarray
    """Each finding's receiving host as text, empty for none."""
    ranking: RankingColumns
    family: FamilySummaries


def pickle_findings(findings: list[Finding]) -> PickledFindings:
    """The findings pickled, with their ranking columns. The main process keeps these columns
    for every finding of a capture until it ranks them (1.2 M findings on the 100 M replica):
    kinds and advice as codes (`RankingColumns`), senders and receivers as fixed-width text (a
    string object for each of a connection's two endpoints and hosts took some 250 bytes a
    connection)."""
    records, lengths = pickled(findings)
    return PickledFindings(
        b"".join(records), lengths,
        np.array([f.connection for f in findings], dtype=np.int64),
        as_text([str(f.sender) for f in findings]),
        as_text([f.receiver_host or "" for f in findings]),
        RankingColumns.of(findings), FamilySummaries.of(findings))


def stored_findings(findings: Sequence[Finding], spill: SpillFile) -> StoredFindings:
    """Findings in rank order, appended to `spill` (stored ones are kept as they are): a run
    over many captures holds each capture's findings on disk as its result comes in, not all of
    them in memory."""
    if isinstance(findings, StoredFindings):
        return findings
    if not findings:
        return _no_findings(spill)
    found = pickle_findings(list(findings))
    return StoredFindings(spill, spill.append_joined(found.records, found.lengths),
                          found.lengths, found.ranking, family=found.family)


def _no_findings(spill: SpillFile) -> StoredFindings:
    """The one empty findings table of `spill`: most captures of an archive have no finding,
    and five empty arrays each took a small capture's parent more memory than its result."""
    if spill.no_findings is None:
        empty = np.zeros(0, dtype=np.int64)
        spill.no_findings = StoredFindings(spill, empty, empty, RankingColumns.of([]))
    return spill.no_findings


class StoredFindings(RecordTable):
    """A capture's findings in rank order, read from disk; `ranking` holds the columns a
    document needs to order and chunk findings across captures, and its reports to pick the
    few they show, without reading them."""

    def __init__(self, spill: SpillFile, offsets: np.ndarray, lengths: np.ndarray,
                 ranking: RankingColumns, fix: RecordFix | None = None,
                 family: FamilySummaries | None = None) -> None:
        super().__init__(spill, offsets, lengths, fix)
        self.ranking = ranking
        self.family = family
        """The Nagle family's summaries, where kept as the findings were stored (their
        connection ids those the fix gives)."""


@dataclass
class FamilySummaries:
    """The summaries of a table's Nagle-family findings (`summaries.StallSummaries`) and each
    one's position in it, ascending."""

    summaries: StallSummaries
    rows: np.ndarray

    @classmethod
    def of(cls, findings: Sequence[Finding]) -> FamilySummaries:
        rows = [row for row, finding in enumerate(findings) if is_nagle_family(finding.kind)]
        return cls(StallSummaries.of_findings([findings[row] for row in rows]),
                   np.array(rows, dtype=np.int64))

    @staticmethod
    def joined(pieces: Sequence[FamilySummaries], sizes: Sequence[int],
               connection: np.ndarray) -> FamilySummaries:
        """The pieces' summaries of tables of `sizes` findings laid end to end, with these
        tables' connection ids (`connection`, one per finding of them all)."""
        starts = np.cumsum([0, *sizes[:-1]]).astype(np.int64)
        rows = _joined([piece.rows + start for piece, start in zip(pieces, starts)])
        summaries = StallSummaries.joined([piece.summaries for piece in pieces])
        return FamilySummaries(summaries.taken(np.arange(len(rows)), connection=connection[rows]),
                               rows)

    def reordered(self, order: np.ndarray) -> FamilySummaries:
        """The summaries of the findings at positions `order`, in that order."""
        position = np.empty(len(order), dtype=np.int64)
        position[order] = np.arange(len(order))
        moved = position[self.rows]
        by_position = np.argsort(moved, kind="stable")
        return FamilySummaries(self.summaries.taken(by_position), moved[by_position])


class HostColumns:
    """Host profiles gathered as columns, a numpy array per column and bucket (a million
    profiles pickled one by one would cost seconds, and held as Python values take hundreds of
    MB); each phase-lock test, a dict, is pickled into the spill file."""

    def __init__(self, spill: SpillFile) -> None:
        self._spill = spill
        self._columns: dict[str, list[np.ndarray]] = {name: [_host_column(name, [])]
                                                      for name in _HOST_COLUMNS}
        self._lock_offsets: list[np.ndarray] = []
        self._lock_lengths: list[np.ndarray] = []

    def add(self, rows: HostRows) -> None:
        for name in _HOST_COLUMNS:
            self._columns[name].append(rows.columns[name])
        offsets = self._spill.append_each(rows.lock_records)
        lock_offsets = np.full(len(rows.has_lock), -1, dtype=np.int64)
        lock_lengths = np.zeros(len(rows.has_lock), dtype=np.int64)
        lock_offsets[rows.has_lock], lock_lengths[rows.has_lock] = offsets, rows.lock_lengths
        self._lock_offsets.append(lock_offsets)
        self._lock_lengths.append(lock_lengths)

    def by_address(self) -> tuple[StoredHosts, np.ndarray]:
        """The profiles, in address order; and that order of the rows as they were added."""
        column = {name: np.concatenate(pieces) for name, pieces in self._columns.items()}
        address = column["address"]
        order = name_order(address)
        lock_offsets = _joined(self._lock_offsets)[order]
        locked = np.flatnonzero(lock_offsets >= 0)
        family_codes, families = codes_by_first_use(column["stack_family"][order])
        return StoredHosts(
            self._spill, address[order], column["delack_timer_ms"][order],
            column["delack_spread_ms"][order], column["delack_samples"][order],
            (family_codes.astype(np.int16), object_column(families)),
            (locked, lock_offsets[locked], _joined(self._lock_lengths)[order][locked])), order


def _host_column(name: str, values: list[Any]) -> np.ndarray:
    """A column of host values as an array: the addresses as fixed-width text (a string
    object a host took some 60 bytes more, for up to two million hosts), the timers as floats
    (NaN: none), the sample counts as integers, the stack families as objects (a few words,
    each one object)."""
    if name == "address":
        return as_text(values) if values else np.zeros(0, dtype="S1")
    if name in ("delack_timer_ms", "delack_spread_ms"):
        return _as_float(values)
    if name == "delack_samples":
        return np.array(values, dtype=np.int64)
    return np.array(values, dtype=object)


_HOST_COLUMNS = tuple(field.name for field in dataclasses.fields(HostValues)
                      if field.name != "phase_lock")
"""The host values kept as columns in memory (the phase-lock tests are spilled)."""


@dataclass
class HostRows:
    """Host profiles as `HostColumns` takes them, made where the profiles are (a worker
    process): their columns, and their phase-lock tests pickled."""

    columns: dict[str, np.ndarray]
    """`_HOST_COLUMNS` as arrays (`_host_column`), so the main process makes no Python value
    a host."""
    has_lock: np.ndarray
    lock_records: list[bytes]
    lock_lengths: np.ndarray


def host_rows(values: HostValues) -> HostRows:
    """Rows of hosts from their values (as `HostFingerprints.host_values` gives them)."""
    locks = values.phase_lock
    records, lengths = pickled([lock for lock in locks if lock])
    return HostRows({name: _host_column(name, getattr(values, name)) for name in _HOST_COLUMNS},
                    np.array([bool(lock) for lock in locks], dtype=bool), records, lengths)


def _as_float(values: list[float | None]) -> np.ndarray:
    return np.array([np.nan if value is None else value for value in values], dtype=np.float64)


def _joined(pieces: list[np.ndarray]) -> np.ndarray:
    return np.concatenate(pieces) if pieces else np.zeros(0, dtype=np.int64)


def host_values(hosts: Sequence[HostProfile] | StoredHosts, start: int, stop: int
                ) -> HostValues:
    """Hosts [start, stop) of stored hosts or of a sequence of profiles, as columns."""
    if isinstance(hosts, StoredHosts):
        return hosts.host_values(start, stop)
    return HostValues.of(hosts[start:stop])


class StoredHosts(Mapping):
    """Host profiles by address, in address order: columns in memory, phase-lock tests read
    from disk; profiles are made when read (without the per-sample arrays, which only the HTML
    charts draw, from whole tables)."""

    def __init__(self, spill: SpillFile, address: np.ndarray, delack_timer_ms: np.ndarray,
                 delack_spread_ms: np.ndarray, delack_samples: np.ndarray,
                 stack_family: tuple[np.ndarray, np.ndarray],
                 locks: tuple[np.ndarray, np.ndarray, np.ndarray]) -> None:
        """`stack_family`: each host's code, and the families; `locks`: the positions of the
        hosts with a phase-lock test (few are tested), and where each test lies in the spill.
        Per host, an object and two offsets more took 24 bytes, 40 MB of two million hosts."""
        self._spill = spill
        self._address = address
        self._numbers = (delack_timer_ms, delack_spread_ms, delack_samples)
        self._stack_family = stack_family
        self._locks = locks

    def __getitem__(self, address: str) -> HostProfile:
        key, held = looked_up_as(address, self._address)
        position = int(np.searchsorted(held, key))
        if position == len(held) or held[position] != key:
            raise KeyError(address)
        return self.profiles(position, position + 1)[0]

    def __iter__(self) -> Iterator[str]:
        return iter(as_strings(self._address).tolist())

    @property
    def spill(self) -> SpillFile:
        return self._spill

    @property
    def address_text(self) -> np.ndarray:
        """The addresses in order, as fixed-width text (`ordering.as_text`)."""
        return self._address

    @property
    def delack_samples(self) -> np.ndarray:
        return self._numbers[2]

    def __len__(self) -> int:
        return len(self._address)

    def values(self) -> _Profiles:  # type: ignore[override]
        """The profiles as a sequence made a chunk at a time."""
        return _Profiles(self)

    def profiles(self, start: int, stop: int) -> list[HostProfile]:
        values = self.host_values(start, stop)
        return [HostProfile(address=address, delack_timer_ms=timer, delack_spread_ms=spread,
                            delack_samples=samples, stack_family=family, delays_ms=_NO_FLOATS,
                            ack_times_s=_NO_FLOATS, ack_connections=_NO_INTS, phase_lock=lock)
                for address, timer, spread, samples, family, lock in zip(*values.columns())]

    def host_values(self, start: int, stop: int) -> HostValues:
        """Hosts [start, stop) as columns, without making their profiles."""
        stop = min(stop, len(self._address))
        timer, spread, samples = (column[start:stop].tolist() for column in self._numbers)
        codes, families = self._stack_family
        return HostValues(as_strings(self._address[start:stop]).tolist(), [_optional(t) for t in timer],
                          [_optional(d) for d in spread], samples,
                          families[codes[start:stop]].tolist(), self._phase_locks(start, stop))

    def _phase_locks(self, start: int, stop: int) -> list[dict[str, Any] | None]:
        """The phase-lock tests of hosts [start, stop), None where a host has none."""
        locked, offsets, lengths = self._locks
        begin, end = np.searchsorted(locked, [start, stop]).tolist()
        locks: list[dict[str, Any] | None] = [None] * (stop - start)
        with collector_paused():
            for position, offset, length in zip(locked[begin:end].tolist(),
                                                offsets[begin:end].tolist(),
                                                lengths[begin:end].tolist()):
                locks[position - start] = pickle.loads(self._spill.read(offset, length))
        return locks

    def __reduce__(self) -> tuple:
        if self._spill.sent_by_reference:
            return by_reference(self)
        return dict, (dict(zip(as_strings(self._address).tolist(), self.values())),)


def _read_only(values: np.ndarray) -> np.ndarray:
    values.setflags(write=False)
    return values


_NO_FLOATS = _read_only(np.zeros(0))
_NO_INTS = _read_only(np.zeros(0, dtype=np.int64))
"""The per-sample arrays of a stored profile: empty, one shared pair for all profiles."""


def without_samples(profile: HostProfile) -> HostProfile:
    """The profile with the one shared pair of empty sample arrays, as stored profiles have."""
    return dataclasses.replace(profile, delays_ms=_NO_FLOATS, ack_times_s=_NO_FLOATS,
                               ack_connections=_NO_INTS)


def _optional(value: float) -> float | None:
    return None if value != value else value


class _Profiles(ChunkedSequence):
    """The profiles of `StoredHosts`, made a chunk at a time."""

    def __init__(self, hosts: StoredHosts) -> None:
        self._hosts = hosts

    def __len__(self) -> int:
        return len(self._hosts)

    def items(self, start: int, stop: int) -> list[HostProfile]:
        return self._hosts.profiles(start, stop)


@dataclass
class RankingColumns:
    """What a document needs to order and chunk findings without reading them: each finding's
    time lost and evidence rows, its kind and advice as codes of the distinct values (a million
    findings name a few of each; a reference a finding to each took 16 MB)."""

    time_lost_s: np.ndarray
    evidence_rows: np.ndarray
    kind_codes: np.ndarray
    kinds: list[str]
    advice_codes: np.ndarray
    advice: list[tuple[str, ...]]

    @classmethod
    def of(cls, findings: Sequence[Finding]) -> RankingColumns:
        kind_codes, kinds = codes_by_first_use([finding.kind for finding in findings])
        advice_codes, advice = codes_by_first_use([tuple(finding.advice)
                                                   for finding in findings])
        return cls(np.array([finding.time_lost_s for finding in findings], dtype=np.float64),
                   np.array([len(finding.events) for finding in findings], dtype=np.int64),
                   kind_codes.astype(np.int16), kinds, advice_codes.astype(np.int32), advice)

    def take(self, order: np.ndarray) -> RankingColumns:
        """The findings at these positions, in that order."""
        return RankingColumns(self.time_lost_s[order], self.evidence_rows[order],
                              self.kind_codes[order], self.kinds, self.advice_codes[order],
                              self.advice)

    def coded_as(self, kinds: dict[str, int], advice: dict[tuple[str, ...], int]
                 ) -> tuple[np.ndarray, np.ndarray]:
        """Each finding's kind and advice as codes of `kinds` and `advice`, which number
        every value they do not hold yet next."""
        return (_recoded(self.kind_codes, self.kinds, kinds),
                _recoded(self.advice_codes, self.advice, advice))


def _recoded(codes: np.ndarray, values: list[Any], numbered: dict[Any, int]) -> np.ndarray:
    new_code = np.array([numbered.setdefault(value, len(numbered)) for value in values],
                        dtype=codes.dtype)
    return new_code[codes]


def joined_ranking(pieces: Sequence[RankingColumns]) -> RankingColumns:
    """The findings of every piece one after another, kinds and advice numbered across them
    (one piece is returned as it is)."""
    if len(pieces) == 1:
        return pieces[0]
    kinds: dict[str, int] = {}
    advice: dict[tuple[str, ...], int] = {}
    recoded = [piece.coded_as(kinds, advice) for piece in pieces]
    return RankingColumns(
        _joined_floats([piece.time_lost_s for piece in pieces]),
        _joined([piece.evidence_rows for piece in pieces]),
        np.concatenate([np.zeros(0, np.int16)] + [codes for codes, _ in recoded]), list(kinds),
        np.concatenate([np.zeros(0, np.int32)] + [codes for _, codes in recoded]), list(advice))


def _joined_floats(pieces: list[np.ndarray]) -> np.ndarray:
    return np.concatenate(pieces) if pieces else np.zeros(0, dtype=np.float64)


def ranking_columns(findings: Sequence[Finding]) -> RankingColumns:
    """From a stored table's columns, or from the findings themselves when they are in memory."""
    if isinstance(findings, StoredFindings):
        return findings.ranking
    return RankingColumns.of(findings)
