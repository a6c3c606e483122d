"""A part's connection level a slice at a time: what `pipeline.connection_level` gives, for a
part too large to hold whole (a few huge connections; docs/performance.md, the twentieth to
twenty-second rounds).

Pass 1 (`flows.facts`) reads every slice for the connection table and each packet's
connection number, which waits on disk beside the part. Pass 2 reads the slices again: each
slice's packet columns (`flows.numbering`) become its data segments, messages and delayed-ACK
samples (`events.by_slice`, `delack_timer.SamplesBySlice`), and the event rows the detectors
read are kept of them (the stall candidates' packet tests, the gaps, each direction's payload
sizes, the write bursts); the slice's packets and segments are then let go. Pass 2 is a
pipeline of three stages, each on a thread of its own (`read.threads.ahead`): numbering, data
segments, the rest.
Each stage carries state from slice to slice, so it takes the slices in order, but three
slices are worked on at once: a part this large is most often the only one left, and its
process would otherwise use one core of the machine's. The detectors run once, over those
rows, the message table and the connection table, handed the rows as the shared tables they
would otherwise make from the segment table (`DetectorInput.made`).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Iterator
from typing import BinaryIO

import numpy as np
import pandas as pd

from nagledetect.chart_data import ChartData, ChartsBySlice
from nagledetect.detectors import CONNECTION_DETECTORS, segment_parity
from nagledetect.detectors.delack_timer import LONE_SEGMENTS, SamplesBySlice
from nagledetect.detectors.earlier_releases import EarlierReleases
from nagledetect.detectors.full_segment_gaps import FullSegmentGaps
from nagledetect.detectors.model import DETECTOR_PACKET_COLUMNS, DetectorInput
from nagledetect.detectors.nagle_stall import UNTIMED_STALLS, untimed_stalls
from nagledetect.detectors.other_stalls import GAP_ROWS
from nagledetect.detectors.tinygram_flood import WRITE_BURSTS
from nagledetect.events.by_slice import LOOK_AHEAD_COLUMNS, MessagesBySlice, SegmentsBySlice
from nagledetect.events.gaps import GapsBySlice
from nagledetect.events.messages import BURST_GAP_US
from nagledetect.events.payloads import PAYLOAD_SIZES, PayloadsBySlice
from nagledetect.flows.facts import ConnectionFacts, ConnectionsBySlice
from nagledetect.flows.grouped import group_starts, joined_columns
from nagledetect.flows.numbering import PacketsBySlice
from nagledetect.flows.partition import SACK_DTYPE
from nagledetect.flows.roles import ROLES
from nagledetect.pipeline import ConnectionLevel, no_samples
from nagledetect.read.threads import ahead
from nagledetect.table import Table, as_table

Slices = Callable[[], Iterable[dict[str, np.ndarray]]]
"""Each call reads the part's packets again, a slice at a time, in file order."""


def connection_level_by_slices(slices: Slices, numbers_path: str, charts: bool = False,
                               slice_read: Callable[[int], None] | None = None,
                               packet_rows: Callable[[pd.DataFrame], None] | None = None,
                               sack_path: str | None = None) -> ConnectionLevel:
    """The connection level of a part (`pipeline.connection_level` without its fingerprints
    and packet table), its packets read twice through `slices`; each packet's connection
    number waits between the passes in a file at `numbers_path`, removed after. With
    `charts`, also what the charts draw of it (`chart_data.ChartsBySlice`): a third pass reads
    the packets of the connections whose graphs are drawn. `slice_read` hears each slice's
    packets as each pass reads them. With `packet_rows`, each slice's rows of the packet
    table go to it as they are made, and the message table is kept (`--tables`).
    `sack_path`: the part's SACK blocks (`flows.partition`), read along with the slices for
    the gaps' D-SACKs."""
    slice_read = slice_read or _not_told
    try:
        facts, lengths = _first_pass(slices, numbers_path, slice_read)
        if not len(facts.table):
            return _without_packets(facts.table)
        drawn = ChartsBySlice(len(facts.table)) if charts else None
        events = _SliceEvents(facts.table, drawn, packet_rows, SackBlocksBySlice(sack_path))
        numbering = PacketsBySlice(facts)
        numbered = ahead(_numbered(numbering, slices(), _read_numbers(numbers_path, lengths)),
                         "numbering")
        segmented = ahead(((packets, events.segments.add(packets)) for packets in numbered),
                          "segments")
        for position, (packets, segments) in enumerate(segmented):
            events.add(packets, segments, int(facts.later_from_us[position]))
            slice_read(len(packets))
        level = events.level(numbering.connections())
        if drawn is not None:
            level.charts = _charts(drawn, level, facts, slices, numbers_path, lengths,
                                   slice_read)
    finally:
        if os.path.exists(numbers_path):
            os.unlink(numbers_path)
    if packet_rows is None:
        level.messages = level.messages.take(slice(0, 0))
    return level


def _charts(drawn: ChartsBySlice, level: ConnectionLevel, facts: ConnectionFacts,
            slices: Slices, numbers_path: str, lengths: list[int],
            slice_read: Callable[[int], None]) -> ChartData:
    """The third pass, for the connections whose graphs are drawn; `slice_read` hears of its
    slices as passes 1 and 2 do (when nothing is drawn there is no pass, and it hears of all
    the packets at once). Numbering is nearly all its work, so it is not a pipeline."""
    if not drawn.worst(level.connections, level.findings):
        slice_read(sum(lengths))
        return drawn.charts(level.messages)
    for packets in _numbered(PacketsBySlice(facts), slices(),
                             _read_numbers(numbers_path, lengths)):
        drawn.add_again(packets)
        slice_read(len(packets))
    return drawn.charts(level.messages)


def _numbered(numbering: PacketsBySlice, slices: Iterable[dict[str, np.ndarray]],
              numbers: Iterable[tuple[np.ndarray, np.ndarray]]) -> Iterator[pd.DataFrame]:
    """The first stage of passes 2 and 3: each slice's packet table, numbered."""
    for columns, numbered in zip(slices, numbers):
        packets = pd.DataFrame(numbering.add(columns, *numbered), copy=False)
        del columns
        packets["role"] = pd.Categorical.from_codes(packets["role"], categories=ROLES)
        yield packets


def _not_told(packets: int) -> None:
    """Where nobody is told how the passes get on."""


def _first_pass(slices: Slices, numbers_path: str, slice_read: Callable[[int], None]
                ) -> tuple[ConnectionFacts, list[int]]:
    """Pass 1 over every slice: the connection facts, and each slice's packet count, its
    packets' numbers written to `numbers_path` (read back, in order, as pass 2 wants them).
    Reading a slice and numbering its endpoint pairs run a slice ahead, on a thread."""
    facts = ConnectionsBySlice()
    lengths: list[int] = []
    paired = ahead(((columns, facts.paired(columns)) for columns in slices()), "pairs")
    with open(numbers_path, "wb") as out:
        for columns, (pair, source_is_low) in paired:
            connection = facts.add(columns, pair, source_is_low)
            _write_numbers(out, connection, source_is_low)
            lengths.append(len(connection))
            slice_read(len(connection))
    return facts.finish(), lengths


NUMBER_DTYPE = np.dtype(np.int64)


def _write_numbers(out: BinaryIO, connection: np.ndarray, source_is_low: np.ndarray) -> None:
    connection.astype(NUMBER_DTYPE, copy=False).tofile(out)
    source_is_low.astype(bool, copy=False).tofile(out)


def _read_numbers(path: str, lengths: list[int]) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """Each slice's packet numbers as `_first_pass` wrote them."""
    with open(path, "rb") as handle:
        for length in lengths:
            yield (np.fromfile(handle, dtype=NUMBER_DTYPE, count=length),
                   np.fromfile(handle, dtype=bool, count=length))


class _SliceEvents:
    """Pass 2's last stage: each slice's packets and segments made into the event rows that
    are kept. Its `segments` are made a stage before (`SegmentsBySlice.add`)."""

    def __init__(self, connections: pd.DataFrame, drawn: ChartsBySlice | None,
                 packet_rows: Callable[[pd.DataFrame], None] | None,
                 sack_blocks: SackBlocksBySlice) -> None:
        count = len(connections)
        self._sack_blocks = sack_blocks
        self._drawn = drawn
        self._packet_rows = packet_rows
        self.segments = SegmentsBySlice(connections)
        self._samples = SamplesBySlice()
        self._messages = MessagesBySlice(count)
        self._bursts = MessagesBySlice(count, BURST_GAP_US)
        self._gaps = GapsBySlice(count)
        self._payloads = PayloadsBySlice()
        self._untimed: list[dict[str, np.ndarray]] = []
        self._earlier = EarlierReleases()
        self._full_gaps = FullSegmentGaps()

    def add(self, packets: pd.DataFrame, segments: pd.DataFrame, later_from_us: int) -> None:
        if self._drawn is not None:
            self._drawn.add(packets)
        if self._packet_rows is not None:
            self._packet_rows(packets)
        self._samples.add(segments, packets, later_from_us)
        segments = segments.drop(columns=list(LOOK_AHEAD_COLUMNS))
        segments["message"] = self._messages.add(segments)
        self._bursts.add(segments)
        self._untimed.append(untimed_stalls(segments, self._earlier, self._full_gaps))
        last_frame = int(packets["frame"].iat[-1]) if len(packets) else 0
        self._gaps.add(packets[list(DETECTOR_PACKET_COLUMNS)],
                       self._sack_blocks.through(last_frame))
        self._payloads.add(segments)

    def level(self, connections: pd.DataFrame) -> ConnectionLevel:
        """The detectors over what the slices left, once the last has been added
        (`connections`: the table pass 2's numbering completes)."""
        messages, first_number = self._messages.finish()
        untimed = joined_columns(self._untimed)
        untimed["message"] = untimed["message"] + first_number[untimed["connection"]]
        connections = as_table(connections)
        empty = Table()
        columns = DetectorInput(empty, connections, empty, messages, {}, made={
            UNTIMED_STALLS: untimed, GAP_ROWS: self._gaps.gaps(), PAYLOAD_SIZES: self._payloads,
            WRITE_BURSTS: self._bursts.finish()[0], LONE_SEGMENTS: self._samples.lone()})
        for detector in CONNECTION_DETECTORS:
            columns.earlier_findings.extend(detector.detect(columns))
        parity = segment_parity.parity_table(columns)
        return ConnectionLevel(empty, connections, empty, messages,
                               self._samples.samples(connections), columns.earlier_findings,
                               parity, {})


class SackBlocksBySlice:
    """The first SACK block of each packet of a part (all a D-SACK needs), read from the
    part's file once, handed out with the slices of those packets. In the file a packet's
    blocks come in option order, but batch by batch and option by option, not in frame order:
    the first seen of a frame is its first block."""

    def __init__(self, path: str | None) -> None:
        self._first = None if path is None else _first_blocks(path)
        self._handed = 0

    def through(self, last_frame: int) -> pd.DataFrame | None:
        """The blocks of the frames up to `last_frame` not handed out yet (None: no file)."""
        if self._first is None:
            return None
        stop = int(np.searchsorted(self._first["frame"], last_frame, "right"))
        taken = self._first[self._handed:stop]
        self._handed = max(self._handed, stop)
        return pd.DataFrame({name: taken[name] for name in SACK_DTYPE.names})


SACK_READ_BLOCKS = 1 << 20
"""SACK blocks read from a part's file at a time."""


def _first_blocks(path: str) -> np.ndarray:
    """Each frame's first block in the file, in frame order, read a run of blocks at a time."""
    first = np.zeros(0, dtype=SACK_DTYPE)
    offset = 0
    while True:
        more = np.fromfile(path, dtype=SACK_DTYPE, count=SACK_READ_BLOCKS, offset=offset)
        if not len(more):
            return first
        offset += more.nbytes
        joined = np.concatenate((first, more))
        order = np.argsort(joined["frame"], kind="stable")
        first = joined[order][group_starts(joined["frame"][order])]


def _without_packets(connections: pd.DataFrame) -> ConnectionLevel:
    empty = Table()
    return ConnectionLevel(empty, as_table(connections), empty, empty, no_samples(), [], empty,
                           {})
