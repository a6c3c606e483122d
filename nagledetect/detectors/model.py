"""What detectors read and what they return.

Every connection detector has the same shape: `detect(columns: DetectorInput) -> list[Finding]`.
`DetectorInput` holds the columns of a set of connections (all of a capture at once, so the work
stays vectorised), the host profiles that the delayed-ACK fingerprint produced first, and the
findings of detectors that ran earlier in the registry (the stall-cause detector needs them).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, fields
from functools import lru_cache
from operator import attrgetter
from typing import Any

import numpy as np

from nagledetect.events.endpoints import DirectionNames
from nagledetect.events.gaps import GAP_PACKET_COLUMNS
from nagledetect.events.payloads import PAYLOAD_SIZES, PayloadsBySlice, SegmentPayloads
from nagledetect.flows.grouped import KeyGroups
from nagledetect.table import Table

EVIDENCE_KEYS = ("last_data_frame", "delayed_ack_frame", "released_frame", "stall_s", "start_s",
                 "ack_delay_ms", "reaction_ms")
EVIDENCE_DECIMALS = (None, None, None, 6, 6, 3, 3)


STALL_EVENT_COLUMNS = ("last_data_frame", "ack_frame", "released_frame", "stall_s", "start_s",
                       "ack_delay_ms", "reaction_ms")


def _column(name: str) -> property:
    """A `StallEvents` column: a view of its field in the rows."""
    return property(lambda events: events.rows[name], doc=f"The {name} column (a view).")


@dataclass(frozen=True, eq=False)
class StallEvents:
    """The stalls behind one finding: each stall is proven by three frames (the last data before
    the hold, the delayed ACK or whatever ended the wait, the released segment).

    One block of fixed-size rows (a structured array with a field per column, read as columns
    through the properties) rather than an object per stall, because a large capture has
    millions of stalls; a detector makes one block for all its findings and each finding holds
    its slice, so pickling one is a single copy of bytes. `ack_delay_ms` and `reaction_ms` are
    NaN where a detector does not measure them. Read as a sequence it gives the document's
    evidence rows (dicts), made only for the rows asked for.
    """

    rows: np.ndarray

    @classmethod
    def of(cls, *columns: np.ndarray) -> StallEvents:
        """From the seven columns, in `STALL_EVENT_COLUMNS` order."""
        layout = _row_layout(tuple(np.asarray(column).dtype.str for column in columns))
        rows = np.empty(len(columns[0]), dtype=layout)
        for name, column in zip(STALL_EVENT_COLUMNS, columns):
            rows[name] = column
        return cls(rows)

    last_data_frame = _column("last_data_frame")
    ack_frame = _column("ack_frame")
    released_frame = _column("released_frame")
    stall_s = _column("stall_s")
    start_s = _column("start_s")
    ack_delay_ms = _column("ack_delay_ms")
    reaction_ms = _column("reaction_ms")

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, rows: slice) -> list[dict[str, Any]]:
        if not isinstance(rows, slice):
            raise TypeError("StallEvents takes slices; use records() for every row")
        return self.records(rows)

    def __iter__(self) -> Iterator[dict[str, Any]]:
        return iter(self.records())

    def __eq__(self, other: object) -> bool:
        if isinstance(other, StallEvents):
            other = other.records()
        return self.records() == other

    def columns(self) -> tuple[np.ndarray, ...]:
        return tuple(self.rows[name] for name in STALL_EVENT_COLUMNS)

    def __reduce__(self) -> tuple[Any, tuple[bytes, tuple[str, ...]]]:
        """Pickled as its block's bytes: a large capture's parts send back, and its document
        reads back, hundreds of thousands of findings."""
        return _stall_events_from_rows, (self.rows.tobytes(), _column_dtypes(self.rows.dtype))

    def records(self, rows: slice = slice(None)) -> list[dict[str, Any]]:
        """JSON-ready rows (rounded; NaN as null)."""
        return evidence_rows([StallEvents(self.rows[rows])])[0]


@lru_cache(maxsize=64)
def _row_layout(dtypes: tuple[str, ...]) -> np.dtype:
    """A `StallEvents` row: its columns' dtypes, in order, packed."""
    return np.dtype(list(zip(STALL_EVENT_COLUMNS, dtypes)))


@lru_cache(maxsize=64)
def _column_dtypes(layout: np.dtype) -> tuple[str, ...]:
    return tuple(layout[name].str for name in STALL_EVENT_COLUMNS)


def _stall_events_from_rows(rows_bytes: bytes, dtypes: tuple[str, ...]) -> StallEvents:
    return StallEvents(np.frombuffer(rows_bytes, dtype=_row_layout(dtypes)))


def joined_columns(evidence: Sequence[StallEvents],
                   names: Sequence[str] = STALL_EVENT_COLUMNS) -> list[np.ndarray]:
    """The named columns of several findings' stalls, each one array for all of them, the
    findings' rows one after another: made and converted for all of them at once (per finding,
    the numpy calls would cost more than the rows)."""
    if not evidence:
        return [np.zeros(0, dtype=np.int64) for _ in names]
    return [np.concatenate([events.rows[name] for events in evidence]) for name in names]


def evidence_rows(evidence: list[StallEvents]) -> list[list[dict[str, Any]]]:
    """The JSON rows of several findings' stalls, rounded and converted column by column for
    all of them at once."""
    lists = [_json_column(column, decimals)
             for column, decimals in zip(joined_columns(evidence), EVIDENCE_DECIMALS)]
    frames, ack, released, stall, start, delay, reaction = EVIDENCE_KEYS
    rows = [{frames: a, ack: b, released: c, stall: d, start: e, delay: f, reaction: g}
            for a, b, c, d, e, f, g in zip(*lists)]
    bounds = np.cumsum([0] + [len(events) for events in evidence]).tolist()
    return [rows[start:end] for start, end in zip(bounds[:-1], bounds[1:])]


def _json_column(values: np.ndarray, decimals: int | None) -> list[Any]:
    if decimals is None:
        return values.astype(np.int64).tolist()
    rounded = np.round(values.astype(np.float64), decimals)
    if np.isnan(rounded).any():
        return [None if v != v else v for v in rounded.tolist()]
    return rounded.tolist()


def split_events(table: Table | dict[str, np.ndarray], keys: list[str],
                 columns: tuple[str, str, str, str, str, str | None, str | None],
                 start_scale: float = 1e-6) -> dict[tuple, StallEvents]:
    """One `StallEvents` per key group of `table` (a frame, or a dict of columns), in the
    table's row order within a group.

    `columns` names the table's columns in `StallEvents` order (None: not measured); the start
    column is scaled to seconds by `start_scale`.
    """
    count = len(table[keys[0]])
    if not count:
        return {}
    groups = KeyGroups(*(_sortable(np.asarray(table[key])) for key in keys))
    nan = np.full(count, np.nan)
    arrays = [groups.rows_of(np.asarray(table[name])) if name else nan for name in columns]
    arrays[4] = arrays[4] * start_scale
    block = StallEvents.of(*arrays).rows
    return groups.by_key([StallEvents(block[rows]) for rows in groups.slices()])


def _sortable(values: np.ndarray) -> np.ndarray:
    return values.astype(str) if values.dtype == object else values


def no_events() -> StallEvents:
    """The evidence of a finding without stalls: one shared, read-only empty block (most
    findings of some kinds have none, and a large capture has hundreds of thousands)."""
    return _NO_EVENTS


def _empty_events() -> StallEvents:
    events = StallEvents.of(*(np.zeros(0),) * 7)
    events.rows.setflags(write=False)
    return events


_NO_EVENTS = _empty_events()


@dataclass
class Finding:
    """A diagnosis for one connection (or one host, for phase locking), with its evidence."""

    kind: str
    connection: int
    sender: str | None
    receiver: str | None
    count: int
    time_lost_s: float
    share: float
    confidence: str
    confidence_reasons: list[str]
    events: StallEvents = field(default_factory=no_events)
    advice: list[str] = field(default_factory=list)
    subkind: str | None = None
    details: dict[str, Any] = field(default_factory=dict)
    summary: str = ""
    confidence_basis: tuple = ()
    """What the confidence was computed from, for detectors that score again capture-wide."""

    def __reduce__(self) -> tuple[type[Finding], tuple[Any, ...]]:
        """Pickled as its field values in order, without their names: a large capture's parts
        pickle, and its document reads back, hundreds of thousands of findings."""
        return Finding, _finding_fields(self)

    @property
    def receiver_host(self) -> str | None:
        """The receiver's address without its port ("[v6]:port" too); None without a receiver."""
        return None if self.receiver is None else self.receiver.rsplit(":", 1)[0].strip("[]")


_finding_fields = attrgetter(*(field.name for field in fields(Finding)))
"""A finding's field values in order, as a tuple."""


def counted_ms(count: int, noun: str, median_s: float) -> str:
    """'39 stalls of 41.5 ms (median)', or '1 stall of 50.9 ms': the words of every summary
    that counts timed events."""
    if count == 1:
        return f"1 {noun} of {median_s * 1000:.1f} ms"
    return f"{count} {noun}s of {median_s * 1000:.1f} ms (median)"


def released_frames(findings: list[Finding], kinds: tuple[str, ...]) -> np.ndarray:
    """The released frames of every stall in findings of these kinds."""
    frames = [f.events.released_frame for f in findings if f.kind in kinds]
    return np.concatenate(frames).astype(np.int64) if frames else np.zeros(0, dtype=np.int64)


@dataclass
class HostProfile:
    """What one host's ACKs tell: its delayed-ACK timer, and whether it ticks on a global clock."""

    address: str
    delack_timer_ms: float | None
    delack_spread_ms: float | None
    delack_samples: int
    stack_family: str
    delays_ms: np.ndarray = field(default_factory=lambda: np.zeros(0))
    ack_times_s: np.ndarray = field(default_factory=lambda: np.zeros(0))
    ack_connections: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    phase_lock: dict[str, Any] | None = None


@dataclass
class HostValues:
    """Hosts' profile values column by column, without their per-sample arrays: what is spilled
    and written of each host, handled without a `HostProfile` per host (a capture of a million
    connections has up to two million hosts)."""

    address: list[str]
    delack_timer_ms: list[float | None]
    delack_spread_ms: list[float | None]
    delack_samples: list[int]
    stack_family: list[str]
    phase_lock: list[dict[str, Any] | None]

    @classmethod
    def of(cls, profiles: Sequence[HostProfile]) -> HostValues:
        return cls(*([getattr(profile, name) for profile in profiles] for name in _HOST_VALUES))

    def columns(self) -> tuple[list[Any], ...]:
        """The columns in field order."""
        return tuple(getattr(self, name) for name in _HOST_VALUES)

    def set_row(self, index: int, profile: HostProfile) -> None:
        """Row `index` as `profile` holds it."""
        for name in _HOST_VALUES:
            getattr(self, name)[index] = getattr(profile, name)


_HOST_VALUES = tuple(field.name for field in fields(HostValues))


DETECTOR_PACKET_COLUMNS = GAP_PACKET_COLUMNS
"""The packet columns detectors read (the gaps' timeline); the rest of the packet table is
let go before they run in a part, so a detector that needs another column adds it here."""


@dataclass
class DetectorInput:
    """The columns every detector reads, for all connections of one capture."""

    packets: Table
    """The packet table's `DETECTOR_PACKET_COLUMNS`."""
    connections: Table
    segments: Table
    messages: Table
    hosts: Mapping[str, HostProfile]
    """Each receiving host's fingerprint (profiles made as they are asked for)."""
    earlier_findings: list[Finding] = field(default_factory=list)
    made: dict[str, Any] = field(default_factory=dict, repr=False)
    """The shared tables made so far, by name (`shared`). A part read a slice at a time makes
    those that read the segment or packet table from its slices and hands them over here: it
    holds neither table whole, and gives `segments` and `packets` empty."""
    sack_blocks: Table | None = None
    """The capture's SACK blocks (`api.Capture.sack_blocks`) where the packet table is held;
    the gaps read its D-SACKs."""
    _names: DirectionNames | None = field(default=None, repr=False)

    def shared(self, name: str, make: Callable[[DetectorInput], Any]) -> Any:
        """A table that several detectors (or the pipeline) read, made by `make` on first use.
        Its maker must read only what is complete by then (the findings of detectors before
        the first reader)."""
        if name not in self.made:
            self.made[name] = make(self)
        return self.made[name]

    def taken(self, name: str, make: Callable[[DetectorInput], Any]) -> Any:
        """A shared table for its last reader in the registry: forgotten here, so its memory
        goes when that reader is done (a table of a part of one huge connection's stall
        candidates holds about 40 bytes a packet); a reader after it would make it again."""
        table = self.made.pop(name, None)
        return make(self) if table is None else table

    def direction_names(self) -> DirectionNames:
        """(connection, direction) -> (sender, receiver) endpoint names, for all detectors (see
        `events.endpoints.DirectionNames`)."""
        if self._names is None:
            self._names = DirectionNames(self.connections)
        return self._names


def payload_sizes(columns: DetectorInput) -> SegmentPayloads | PayloadsBySlice:
    """Each direction's payload sizes counted (`events.payloads`), for the detectors that read
    a direction's segment count, write size or median payload: from the segment table where
    it is held, else as a part read a slice at a time handed them over."""
    return columns.shared(PAYLOAD_SIZES, lambda made: SegmentPayloads(made.segments))
