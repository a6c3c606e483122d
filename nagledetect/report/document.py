"""The analysis result as one versioned, JSON-ready document; every reporter renders this.

Keeping one document means the text, JSON (and later HTML and CI) outputs show the same numbers
and no reporter recomputes analysis. Keys are stable: later versions only add.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any, BinaryIO

import numpy as np
import orjson

from nagledetect.advice import ADVICE
from nagledetect.analysis import Analysis
from nagledetect.api import Capture
from nagledetect.chunked import RECORDS_PER_CHUNK, ChunkedSequence, take
from nagledetect.collector import collector_paused
from nagledetect.detectors import kinds
from nagledetect.detectors.model import Finding, HostValues, StallEvents
from nagledetect.events.endpoints import endpoint
from nagledetect.flows.connections import seen_one_way
from nagledetect.flows.grouped import rows_holding
from nagledetect.memory import give_back_free_memory
from nagledetect.read.columns import LINKTYPE_NAMES
from nagledetect.read.inputs import NotAnalysed
from nagledetect.report.display_filter import display_filters
from nagledetect.report.evidence_text import EVENTS_CLOSE, evidence_texts
from nagledetect.report.headline import LARGEST_DELAYS_SHOWN, headline_entry, plural
from nagledetect.report.turns import write_in_turns
from nagledetect.sent_tables import (
    ColumnReader,
    Rows,
    held_in,
    joined_rows,
    rows_part,
    rows_table,
)
from nagledetect.stored import (
    StoredHosts,
    host_values,
    joined_ranking,
    ranking_columns,
)
from nagledetect.summaries import StallSummaries, finding_head, summary_entry
from nagledetect.table import Table, object_column

SCHEMA = "nagledetect/1"
ENTRIES_PER_CHUNK = 2048
EVIDENCE_ROWS_PER_CHUNK = 8_192
"""A piece of the findings list holds at most this many evidence rows, about 2 MB of text.
Each forked writer keeps what rendering a piece took (`turns`): on the 10 M replica, pieces of
65,536 rows took each writer 110 MB, of 16,384 36 MB, these 24 MB, in the same time."""


def _number(value: Any) -> Any:
    """Plain Python numbers for JSON; NaN becomes null."""
    if value is None:
        return None
    if isinstance(value, float) or hasattr(value, "dtype") and value.dtype.kind == "f":
        value = float(value)
        return None if math.isnan(value) else round(value, 6)
    if hasattr(value, "item"):
        return value.item()
    return value


def _connection_warnings(connections: Rows, read: ColumnReader) -> list[str]:
    """Connection-level caveats that weaken findings, counted so every output can show them."""
    if len(connections) == 0:
        return []
    def column(name: str) -> np.ndarray:
        return read(connections, name)

    checks = (
        (~column("handshake"), "without a handshake in the capture: MSS estimated, round "
                               "trip taken from ACK lags (too long where every ACK is "
                               "delayed or answered late, which hides stalls) or, seen one "
                               "way, from the SYN to its sender's ACK, client and server "
                               "roles may be guessed"),
        (_one_way(column) & ~_unanswered(column),
         "with one direction only (the capture missed the other)"),
        (_unanswered(column), "never answered (a SYN, no SYN/ACK, no packet of the server, "
                              "no data)"),
        (column("handshake") & (column("rtt_ms") == 0),
         "whose handshake took 0 us: the capture's times are coarser than the path (packets "
         "stamped in batches or by a coarse clock), so their waits are not measured"),
    )
    return [f"{int(mask.sum())} of {len(connections)} connections {text}"
            for mask, text in checks if mask.any()]


def _one_way(column: Callable[[str], np.ndarray]) -> np.ndarray:
    return seen_one_way(column("packets_client_to_server"), column("packets_server_to_client"))


def _unanswered(column: Callable[[str], np.ndarray]) -> np.ndarray:
    """Connections opened by a SYN whose server sent nothing and whose client sent no data: not
    answered, rather than a direction the capture missed (an answered client sends its
    request; the handshake-retry finding counts the SYNs)."""
    return ((column("packets_server_to_client") == 0) & (column("syn_frame") > 0)
            & (column("syn_ack_frame") == 0) & (column("bytes_client_to_server") == 0))


def _capture_entry(capture: Capture, read: ColumnReader) -> dict[str, Any]:
    accounting = capture.accounting
    return {
        "path": capture.path,
        "link_type": accounting.linktype,
        "link_type_name": LINKTYPE_NAMES.get(accounting.linktype, "unsupported"),
        "packets": accounting.packets_read,
        "tcp_packets": accounting.tcp_packets,
        "skipped": dict(sorted(accounting.skipped.items(), key=lambda item: -item[1])),
        "balanced": accounting.balanced,
        "cut_short": accounting.cut_short,
        "clock_step_us": accounting.clock_step_us,
        "clock_spacing_us": accounting.clock_spacing_us,
        "warnings": list(accounting.warnings) + _connection_warnings(capture.connections, read),
        "connections": len(capture.connections),
    }


def _connection_entries(table: Table, capture: list[int]) -> list[dict[str, Any]]:
    """The entries of a table of connections (each row's capture given), converted column by
    column (row by row, a million connections took 25 s). The id is Wireshark's tcp.stream in
    its capture (`shown_ids`)."""

    def column(name: str) -> np.ndarray:
        return table[name]

    values = [_json_values(shown_ids(table) if name == "id" else column(name))
              for name in _CONNECTION_COLUMNS]
    start_s = _json_values(column("start_us") / 1e6)
    sack_permitted = (column("sack_permitted_client") & column("sack_permitted_server")).tolist()
    entries = []
    for (id_, client_address, client_port, server_address, server_port, client_guessed,
         first_frame, duration_s, packets_client, packets_server, bytes_client, bytes_server,
         mss, mss_estimated, mss_client, mss_server, handshake, timestamps, scale_client,
         scale_server, vantage, rtt_ms, rtt_client_ms, rtt_server_ms, rtt_source,
         start, sack, capture_index) in zip(*values, start_s, sack_permitted, capture):
        entries.append({
            "id": id_,
            "capture": capture_index,
            "client": endpoint(client_address, client_port),
            "server": endpoint(server_address, server_port),
            "client_guessed": client_guessed,
            "first_frame": first_frame,
            "start_s": start,
            "duration_s": duration_s,
            "packets": {"client_to_server": packets_client, "server_to_client": packets_server},
            "bytes": {"client_to_server": bytes_client, "server_to_client": bytes_server},
            "mss": mss,
            "mss_source": "estimated" if mss_estimated else "handshake",
            "mss_announced": {"client": mss_client or None, "server": mss_server or None},
            "handshake": handshake,
            "timestamps": timestamps,
            "sack_permitted": sack,
            "window_scale": {"client": scale_client, "server": scale_server},
            "vantage": vantage,
            "rtt_ms": rtt_ms,
            "rtt_client_side_ms": rtt_client_ms,
            "rtt_server_side_ms": rtt_server_ms,
            "rtt_source": rtt_source,
        })
    return entries


def shown_ids(table: Table) -> np.ndarray:
    """Each connection's id as outputs show it: Wireshark's tcp.stream of the unfiltered capture,
    which a `stream` column holds under a filter (`flows.streams`); else the id itself, which
    numbers the conversations as Wireshark does."""
    return table["stream" if "stream" in table else "id"]


_CONNECTION_COLUMNS = (
    "id", "client_address", "client_port", "server_address", "server_port", "client_guessed",
    "first_frame", "duration_s", "packets_client_to_server", "packets_server_to_client",
    "bytes_client_to_server", "bytes_server_to_client", "effective_mss", "mss_estimated",
    "mss_client", "mss_server", "handshake", "timestamps", "window_scale_client",
    "window_scale_server", "vantage", "rtt_ms", "rtt_client_side_ms", "rtt_server_side_ms",
    "rtt_source")


def _json_values(values: np.ndarray) -> list[Any]:
    """A column as JSON-ready Python values: floats rounded to 6 places, NaN as None (as
    `_number` converts one value)."""
    if values.dtype.kind != "f":
        return values.tolist()
    rounded = _rounded(values)
    converted = rounded.tolist()
    for position in np.flatnonzero(np.isnan(rounded)).tolist():
        converted[position] = None
    return converted


def _rounded(values: np.ndarray) -> np.ndarray:
    """Each value as Python's `round(value, 6)` gives it (numpy's rounding can differ in the
    last digit).

    Most values (times in microseconds) already have at most 6 decimals, and Python's `round`
    gives them back unchanged: a value v below 2**32 that numpy's rounding leaves as it is, is
    the double nearest m / 10**6 for a whole m, within half a millionth of it, so the decimal
    `round` rounds it to is m / 10**6 and the double it returns is v again. Only the other
    values go through `round`, one by one."""
    rounded = values.astype(np.float64)
    with np.errstate(over="ignore", invalid="ignore"):
        unchanged = (np.round(rounded, 6) == rounded) & (np.abs(rounded) < 2.0 ** 32)
    changed = np.flatnonzero(~unchanged)
    rounded[changed] = [round(value, 6) for value in rounded[changed].tolist()]
    return rounded


class CaptureEntries(ChunkedSequence):
    """The document's captures, each entry made when it is read (a run over an archive of a
    million captures would otherwise hold a million of them, about 0.8 KB each, before anything
    is written). The entry last read alone is kept: reporters read a capture's entry for each
    of its connections and findings they show, in order. Only that one is made: the findings a
    report shows lie anywhere among thousands of captures, and making the 2,048 entries around
    each took an archive's HTML report a second."""

    def __init__(self, captures: list[Capture], read: ColumnReader) -> None:
        self._captures = captures
        self._read = read
        self._last: tuple[int, dict[str, Any]] | None = None

    def __len__(self) -> int:
        return len(self._captures)

    def items(self, start: int, stop: int) -> list[dict[str, Any]]:
        if stop - start == 1:
            return [self._entry(start)]
        return [_capture_entry(capture, self._read) for capture in self._captures[start:stop]]

    def _entry(self, position: int) -> dict[str, Any]:
        if self._last is None or self._last[0] != position:
            self._last = (position, _capture_entry(self._captures[position], self._read))
        return self._last[1]


class ConnectionEntries(ChunkedSequence):
    """The document's connections, each entry made when it is read: a capture with a million
    connections would otherwise hold a million dictionaries before anything is written. Each
    capture's connections in turn; an id is one within its capture (the entry's "capture")."""

    def __init__(self, tables: list[Rows]) -> None:
        self._tables = tables
        self.first_ids: list[int] = np.cumsum([0] + [len(table) for table in tables]).tolist()
        """The position of each capture's first connection in the list, then the total."""
        self._shown: dict[int, np.ndarray] = {}

    def __len__(self) -> int:
        return self.first_ids[-1]

    def shown(self, capture: int, connection: int) -> int:
        """The id shown for a capture's connection numbered `connection` in the analysis."""
        ids = self._shown_ids(capture)
        return connection if ids is None else int(ids[connection])

    def shown_ids(self, capture: int, connection: np.ndarray) -> np.ndarray:
        """`shown` for several of a capture's connections."""
        ids = self._shown_ids(capture)
        return connection if ids is None else np.asarray(ids)[connection]

    def position(self, capture: int, shown: int) -> int:
        """The position in the list of the capture's connection shown as `shown`."""
        ids = self._shown_ids(capture)
        connection = shown if ids is None else int(np.flatnonzero(ids == shown)[0])
        return self.first_ids[capture] + connection

    def _shown_ids(self, capture: int) -> np.ndarray | None:
        """The capture's shown ids by connection, None where they are the connections' own."""
        if capture not in self._shown:
            table = rows_table(self._tables[capture])
            self._shown[capture] = table["stream"] if "stream" in table else None
        return self._shown[capture]

    def items(self, start: int, stop: int) -> list[dict[str, Any]]:
        """The chunk's connections, its captures' tables joined first when their columns
        agree (reading a column of each small table cost more than its entries)."""
        spans = list(_spans(self.first_ids, start, stop))
        pieces = [rows_part(self._tables[capture], begin, end)
                  for capture, _, begin, end in spans]
        sizes = [end - begin for _, _, begin, end in spans]
        capture = np.repeat([span[0] for span in spans], sizes).tolist()
        joined = joined_rows(pieces)
        if joined is not None:
            return _connection_entries(joined, capture)
        bounds = np.cumsum([0, *sizes]).tolist()
        return [entry for piece, low, high in zip(pieces, bounds[:-1], bounds[1:])
                for entry in _connection_entries(rows_table(piece), capture[low:high])]


    def take(self, positions: Sequence[int]) -> list[dict[str, Any]]:
        """The entries at these positions (ascending), made a table at a time (a capture's, or
        a group's shared by its captures): a table of the busiest connections picks a few
        thousand scattered over a million, and making them a run of neighbours at a time read
        every column once a run (the HTML report's table of 2,000 over the 10 M mix: 1,360
        runs, 2.0 s)."""
        ordered = np.asarray(positions, dtype=np.int64)
        capture = np.searchsorted(self.first_ids, ordered, side="right") - 1
        entries: list[dict[str, Any]] = []
        for table, rows, captures in self._by_table(ordered, capture):
            entries += _connection_entries(table.take(rows), captures)
        return entries

    def _by_table(self, ordered: np.ndarray, capture: np.ndarray
                  ) -> Iterator[tuple[Table, np.ndarray, list[int]]]:
        """The positions picked, as rows of the tables holding them, a table at a time, with
        each row's capture (`capture`: each position's, ascending)."""
        if not len(ordered):
            return
        within = ordered - np.asarray(self.first_ids)[capture]
        bounds = [0, *(np.flatnonzero(np.diff(capture)) + 1).tolist(), len(capture)]
        held: Table | None = None
        rows: list[np.ndarray] = []
        captures: list[int] = []
        for low, high in zip(bounds[:-1], bounds[1:]):
            index = int(capture[low])
            table, start = held_in(self._tables[index])
            if held is not None and table is not held:
                yield held, np.concatenate(rows), captures
                rows, captures = [], []
            held = table
            rows.append(start + within[low:high])
            captures += [index] * (high - low)
        if held is not None:
            yield held, np.concatenate(rows), captures


def connection_position(connections: Sequence[dict[str, Any]], capture: int, shown: int) -> int:
    """The position in a document's connections of the capture's connection shown as `shown`
    (found by its entries in a list read back, where there is no `ConnectionEntries`)."""
    if isinstance(connections, ConnectionEntries):
        return connections.position(capture, shown)
    return next(position for position, entry in enumerate(connections)
                if entry["capture"] == capture and entry["id"] == shown)


class _CapturesEndToEnd(ChunkedSequence):
    """Each capture's rows laid end to end, in capture order, their entries made when read;
    `_entries` says how rows [begin, end) of a capture become entries."""

    def __init__(self, held: list[Any], ids: ConnectionEntries) -> None:
        self._held = held
        self._ids = ids
        self._bounds: list[int] = np.cumsum([0] + [len(rows) for rows in held]).tolist()

    def __len__(self) -> int:
        return self._bounds[-1]

    def items(self, start: int, stop: int) -> list[dict[str, Any]]:
        return [entry for capture, _, begin, end in _spans(self._bounds, start, stop)
                for entry in self._entries(capture, begin, end)]

    def _entries(self, capture: int, begin: int, end: int) -> list[dict[str, Any]]:
        raise NotImplementedError


class HostEntries(_CapturesEndToEnd):
    """The document's hosts: each capture's, in address order, made when read."""

    def __init__(self, analyses: list[Analysis], ids: ConnectionEntries) -> None:
        super().__init__([analysis.hosts if isinstance(analysis.hosts, StoredHosts)
                          else list(analysis.hosts.values()) for analysis in analyses], ids)

    def _entries(self, capture: int, begin: int, end: int) -> list[dict[str, Any]]:
        return _host_entries(host_values(self._held[capture], begin, end), capture,
                             partial(self._ids.shown, capture))


def _spans(bounds: list[int], start: int, stop: int) -> Iterator[tuple[int, int, int, int]]:
    """For positions [start, stop) of captures laid end to end (capture i holds positions
    bounds[i] to bounds[i + 1]): each capture touched, its first position, and the range
    within it (found by bisection: an archive has thousands of captures, a chunk few)."""
    for capture in range(max(bisect.bisect_right(bounds, start) - 1, 0), len(bounds) - 1):
        low, high = bounds[capture], bounds[capture + 1]
        if low >= stop:
            break
        if max(start, low) < min(stop, high):
            yield capture, low, max(start, low) - low, min(stop, high) - low


class FindingEntries(ChunkedSequence):
    """The document's findings in the diagnosis's order (`diagnosis_order`); stored findings are
    read from disk only when their chunk is."""

    def __init__(self, analyses: list[Analysis], ids: ConnectionEntries) -> None:
        self._findings = [analysis.findings for analysis in analyses]
        self._ids = ids
        # What is asked of the findings in document order is taken from their ranking columns
        # when asked (once or twice a run): held in that order, a million findings' took
        # 30 MB more beside the stored ones (one capture's are the stored ones, not a copy).
        self._ranking = joined_ranking([ranking_columns(findings) for findings in self._findings])
        self._bounds = np.cumsum([0] + [len(findings) for findings in self._findings])
        self._kind_names = object_column(self._ranking.kinds)
        captures = np.repeat(np.arange(len(self._findings), dtype=np.int32), np.diff(self._bounds))
        self._order = diagnosis_order(self._ranking.kinds, self._ranking.kind_codes,
                                      _rounded(self._ranking.time_lost_s), captures)
        self._kind_codes = self._ranking.kind_codes[self._order]
        self._nagle_family: StallSummaries | None = None

    def __len__(self) -> int:
        return len(self._order)

    def kinds(self) -> list[str]:
        """Each finding's kind, in document order."""
        return self._kind_names[self._kind_codes].tolist() if len(self._kind_codes) else []

    def times_lost_s(self) -> list[float]:
        """Each finding's time lost as its entry gives it, in document order: with the kinds,
        what a report needs to pick the findings it shows without reading them all."""
        return _rounded(self._ranking.time_lost_s[self._order]).tolist()

    def captures(self) -> list[int]:
        """Each finding's capture (its index in the run), in document order."""
        return self._capture_of(self._order).tolist()

    def nagle_family(self) -> StallSummaries:
        """The Nagle family's findings, in document order, each cut to what the headline and
        the reports' connection tables read (`StallSummaries`): from the summaries a capture's
        stored findings kept, else read once (a chunk at a time); kept."""
        if self._nagle_family is None:
            family = [code for code, kind in enumerate(self._kind_names.tolist())
                      if kinds.is_nagle_family(kind)]
            positions = self._order[np.isin(self._kind_codes, family)]
            capture = self._capture_of(positions)
            pieces, slots = [], []
            for index in np.unique(capture).tolist():
                wanted = np.flatnonzero(capture == index)
                pieces.append(self._family_of(index, positions[wanted]))
                slots.append(wanted)
            joined = StallSummaries.joined(pieces) if pieces else StallSummaries().done()
            order = np.argsort(np.concatenate(slots)) if slots else np.zeros(0, np.int64)
            self._nagle_family = joined.taken(order)
        return self._nagle_family

    def _family_of(self, capture: int, positions: np.ndarray) -> StallSummaries:
        """The summaries of one capture's Nagle-family findings at these positions of the
        captures' findings laid end to end, in that order."""
        kept = getattr(self._findings[capture], "family", None)
        rows = (rows_holding(kept.rows, positions - self._bounds[capture]) if kept is not None
                else np.full(len(positions), -1))
        if kept is None or (rows < 0).any():  # findings in memory, or kept without summaries
            summaries = StallSummaries()
            for start in range(0, len(positions), RECORDS_PER_CHUNK):
                summaries.add(self._entries(positions[start:start + RECORDS_PER_CHUNK],
                                            summary_entry))
            return summaries.done()
        connection = kept.summaries.connection[rows]
        return kept.summaries.taken(rows, capture, self._ids.shown_ids(capture, connection))

    def evidence_counts(self) -> list[int]:
        """Each finding's number of evidence rows, in document order."""
        return self._ranking.evidence_rows[self._order].tolist()

    def advice_keys(self) -> list[str]:
        """Every advice key the findings name, in order of first mention."""
        codes = self._ranking.advice_codes[self._order]
        first = np.unique(codes, return_index=True)[1]  # a Python int a finding took 40 MB
        keys: dict[str, None] = {}
        for code in codes[np.sort(first)].tolist():
            keys.update(dict.fromkeys(self._ranking.advice[code]))
        return list(keys)

    def items(self, start: int, stop: int) -> list[dict[str, Any]]:
        return self._entries(self._order[start:stop])

    def take(self, positions: Sequence[int]) -> list[dict[str, Any]]:
        """The entries at these positions of the document, in that order."""
        return self._entries(self._order[np.asarray(positions, dtype=np.int64)])

    def _capture_of(self, positions: np.ndarray) -> np.ndarray:
        """The capture of each finding at these positions of the captures' findings laid end to
        end."""
        return np.searchsorted(self._bounds, positions, side="right") - 1

    def _entries(self, positions: np.ndarray,
                 entry: Callable[[Finding, int, int], dict[str, Any]] | None = None
                 ) -> list[dict[str, Any]]:
        """The entries of the findings at these positions of the captures' findings laid end to
        end, in that order, as `entry` makes them (by default, whole: their display filters
        made together)."""
        capture = self._capture_of(positions)
        found: list[tuple[int, Finding, int, int]] = []
        for index in np.unique(capture).tolist():
            wanted = np.flatnonzero(capture == index)
            within = positions[wanted] - self._bounds[index]
            found += [(slot, finding, index, self._ids.shown(index, finding.connection))
                      for slot, finding in zip(wanted.tolist(), take(self._findings[index], within))]
        found.sort(key=lambda made: made[0])
        if entry is not None:
            return [entry(finding, index, shown) for _, finding, index, shown in found]
        filters = display_filters([shown for *_, shown in found],
                                  [finding.events for _, finding, _, _ in found])
        return [_finding_entry(finding, index, shown, shown_filter)
                for (_, finding, index, shown), shown_filter in zip(found, filters)]


DIAGNOSIS_GROUPS = {
    **dict.fromkeys(kinds.NAGLE_FAMILY, 0),
    **dict.fromkeys((kind for kind in kinds.OTHER_GAP_CAUSES if kind not in kinds.NOT_LOST), 1),
    **dict.fromkeys(kinds.NOT_LOST, 3),
}
"""Where each kind goes in the diagnosis: the Nagle family, then the other named causes of
delays, then (group 2) the patterns, which count no time of their own, then idle time and
stop-and-wait, which nobody waited for or count none (folded, a line per capture)."""
OTHER_CAUSES_GROUP = 1
PATTERN_GROUP = 2
FOLDED_GROUP = DIAGNOSIS_GROUPS[kinds.IDLE]


def diagnosis_order(kind_names: list[str], kind_codes: np.ndarray, times_lost_s: np.ndarray,
                    captures: np.ndarray) -> np.ndarray:
    """The positions of findings (laid end to end, each capture's in its rank order; their
    kinds as codes into `kind_names`) in the order the diagnosis lists them: by group
    (`DIAGNOSIS_GROUPS`), most time lost first within the group, each capture's rank order kept
    among equal times; the folded group capture by capture, so each capture's folded findings
    are neighbours."""
    group_of_name = np.array([DIAGNOSIS_GROUPS.get(name, PATTERN_GROUP) for name in kind_names],
                             dtype=np.int8)
    group = group_of_name[kind_codes] if len(kind_codes) else np.zeros(0, dtype=np.int8)
    folded_capture = np.where(group == FOLDED_GROUP, captures, 0)
    return np.lexsort((np.arange(len(group)), -times_lost_s, folded_capture, group))


def is_folded(kind: str) -> bool:
    """Whether the diagnosis folds this kind into its capture's one line."""
    return DIAGNOSIS_GROUPS.get(kind, PATTERN_GROUP) == FOLDED_GROUP


def finding_captures(findings: Sequence[dict[str, Any]]) -> list[int]:
    """Each finding's capture, in order, as `kinds_and_times` gives their kinds."""
    if isinstance(findings, FindingEntries):
        return findings.captures()
    return [finding["capture"] for finding in findings]


def nagle_family(findings: Sequence[dict[str, Any]]) -> Sequence[dict[str, Any]]:
    """The Nagle family's findings, in order (a document's without their evidence rows)."""
    if isinstance(findings, FindingEntries):
        return findings.nagle_family()
    return [finding for finding in findings if kinds.is_nagle_family(finding["kind"])]


def kinds_and_times(findings: Sequence[dict[str, Any]]) -> tuple[list[str], list[float]]:
    """Each finding's kind and time lost (as its entry gives it), in order: a document's from
    the columns it ranks them by, without making their entries; a list's from its entries."""
    if isinstance(findings, FindingEntries):
        return findings.kinds(), findings.times_lost_s()
    return ([finding["kind"] for finding in findings],
            [finding["time_lost_s"] for finding in findings])


def _finding_entry(finding: Finding, capture_index: int, connection: int,
                   shown_filter: str) -> dict[str, Any]:
    """A finding's entry, its display filter made (`display_filters`)."""
    return {
        **finding_head(finding, capture_index, connection),
        "share": round(finding.share, 6),
        "confidence": {"level": finding.confidence, "reasons": finding.confidence_reasons},
        "summary": finding.summary,
        "display_filter": shown_filter,
        "events": finding.events,
        "advice": finding.advice,
        "details": finding.details,
    }


def _host_entries(values: HostValues, capture_index: int, shown: Callable[[int], int]
                  ) -> list[dict[str, Any]]:
    """The entries of a chunk of hosts, from their columns."""
    return [{"address": address, "capture": capture_index, "delack_timer_ms": _number(timer),
             "delack_spread_ms": _number(spread), "delack_samples": samples,
             "stack_family": family, "phase_lock": _phase_lock_entry(lock, shown)}
            for address, timer, spread, samples, family, lock in zip(*values.columns())]


def _phase_lock_entry(lock: dict[str, Any] | None, shown: Callable[[int], int]
                      ) -> dict[str, Any] | None:
    if not lock:
        return None
    entry = dict(lock)
    entry["connections"] = [shown(c) for c in entry.get("connections", [])]
    return entry


def _advice_entries(findings: FindingEntries) -> dict[str, Any]:
    used = findings.advice_keys()
    return {key: {"side": ADVICE[key].side, "title": ADVICE[key].title, "why": ADVICE[key].why,
                  "tradeoffs": ADVICE[key].tradeoffs, "calls": ADVICE[key].calls}
            for key in used}


class ParityEntries(_CapturesEndToEnd):
    """The document's segment-parity rows, each capture's in order, made when read (a capture of
    a million connections has up to two million, and made at once they took some 500 bytes
    each)."""

    def __init__(self, analyses: list[Analysis], ids: ConnectionEntries, read: ColumnReader
                 ) -> None:
        super().__init__([analysis.parity for analysis in analyses], ids)
        self._read = read

    def _entries(self, capture: int, begin: int, end: int) -> list[dict[str, Any]]:
        return _parity_entries(rows_part(self._held[capture], begin, end), capture,
                               partial(self._ids.shown, capture), self._read)


def _parity_entries(parity: Rows, capture_index: int, shown: Callable[[int], int],
                    read: ColumnReader) -> list[dict[str, Any]]:
    return [{"capture": capture_index, "connection": shown(int(connection)),
             "direction": "client_to_server" if direction == 0 else "server_to_client",
             "segments": segments, "last_segment": last_segment,
             "messages": int(messages), "stalled": int(stalled),
             "stall_rate": round(float(stall_rate), 4)}
            for connection, direction, segments, last_segment, messages, stalled, stall_rate
            in zip(*(read(parity, name).tolist() for name in (
                "connection", "direction", "segments", "last_segment", "messages", "stalled",
                "stall_rate")))]


def build_document(analyses: list[Analysis],
                   not_analysed: Sequence[NotAnalysed] = ()) -> dict[str, Any]:
    """The whole result for one run over one or more captures (`not_analysed`: the files of the
    run that were not, and why; listed errors first, in their order).

    Connections, findings and hosts are sequences whose entries (plain dicts) are made when read.
    Each finding's "events" is a `StallEvents`: it reads as a list of evidence rows, and
    `write_json` turns it into rows a chunk of findings at a time, so millions of stalls never
    sit in memory as dictionaries.
    """
    from nagledetect import __version__

    document = _document(analyses, not_analysed, __version__)
    # What building it allocated and freed (a million findings' ranking columns, their order,
    # the Nagle family read once: some 100 MB on the 100 M replica) goes back to the system
    # before it is written, rather than being shared by the forked writers.
    give_back_free_memory()
    return document


def _document(analyses: list[Analysis], not_analysed: Sequence[NotAnalysed], version: str
              ) -> dict[str, Any]:
    connections = ConnectionEntries([analysis.capture.connections for analysis in analyses])
    read = ColumnReader()
    findings = FindingEntries(analyses, connections)
    not_listed = [{"path": entry.path, "reason": entry.reason, "error": entry.error}
                  for entry in sorted(not_analysed, key=lambda entry: not entry.error)]
    return {
        "schema": SCHEMA,
        "tool": {"name": "nagledetect", "version": version},
        "headline": _headline(findings, [analysis.capture.path for analysis in analyses],
                              len(connections), sum(entry.error for entry in not_analysed)),
        "captures": CaptureEntries([analysis.capture for analysis in analyses], read),
        "not_analysed": not_listed,
        "connections": connections,
        "findings": findings,
        "hosts": HostEntries(analyses, connections),
        "segment_parity": ParityEntries(analyses, connections, read),
        "advice": _advice_entries(findings),
    }


def _headline(findings: FindingEntries, paths: list[str], connections: int,
              unreadable: int) -> dict[str, Any]:
    """The answer first (`headline.headline_entry`): the Nagle family's findings, and the
    costliest of the other named causes (first in their group, which is ordered by time)."""
    scope = f"{plural(len(paths), 'capture')}, {plural(connections, 'connection')}"
    scope += f"; {unreadable} could not be analysed" if unreadable else ""
    named = [position for position, kind in enumerate(findings.kinds())
             if DIAGNOSIS_GROUPS.get(kind) == OTHER_CAUSES_GROUP][:LARGEST_DELAYS_SHOWN]
    return headline_entry(findings.nagle_family(), take(findings, named), scope, paths)


def write_json(document: dict[str, Any], stream: BinaryIO, workers: int = 1) -> None:
    """The document as indented JSON, written key by key and lists a chunk at a time (with the
    findings' evidence rows made per chunk), so the output of a capture with a million
    connections or millions of stalls is never one string in memory. Each piece is dumped
    inside a one-key object, so orjson indents it at its final depth. With `workers` > 1 and a
    stream on a file descriptor, the chunks of a long list are rendered and written by that
    many forked processes taking turns (see `turns`).

    The cyclic garbage collector is paused meanwhile (see `nagledetect.collector`)."""
    with collector_paused():
        _write_json(document, stream, workers)


def _write_json(document: dict[str, Any], stream: BinaryIO, workers: int) -> None:
    stream.write(b"{\n")
    for position, (key, value) in enumerate(document.items()):
        stream.write(b",\n" if position else b"")
        listed = isinstance(value, Sequence) and not isinstance(value, str)
        if not listed or not len(value):
            stream.write(orjson.dumps({key: list(value) if listed else value},
                                      option=orjson.OPT_INDENT_2)[2:-2])
            continue
        stream.write(_list_head(key)[2:])
        _write_list(key, value, stream, workers)
        stream.write(b"\n  ]")
    stream.write(b"\n}\n")


@dataclass(frozen=True)
class _Piece:
    """Entries [start, stop) of a list, dumped together; or, with `rows`, the evidence rows
    [rows[0], rows[1]) of the one finding `start`, too many for one piece: its slices are pieces
    of their own, so that workers render them side by side (the first also holds the finding's
    text before its rows, the last the text after them)."""

    start: int
    stop: int
    rows: tuple[int, int] | None = None

    @property
    def continues_entry(self) -> bool:
        """Whether it goes on with the entry the piece before it began (no comma before it)."""
        return self.rows is not None and self.rows[0] > 0


def _pieces(key: str, entries: Sequence[Any]) -> list[_Piece]:
    """Chunks of ENTRIES_PER_CHUNK entries; findings also of at most EVIDENCE_ROWS_PER_CHUNK
    evidence rows, a finding with more coming in slices of that many rows."""
    if key != "findings":
        return [_Piece(start, min(start + ENTRIES_PER_CHUNK, len(entries)))
                for start in range(0, len(entries), ENTRIES_PER_CHUNK)]
    sizes = (entries.evidence_counts() if isinstance(entries, FindingEntries)
             else [len(finding["events"]) for finding in entries])
    pieces: list[_Piece] = []
    start = rows = 0
    for position, size in enumerate(sizes):
        full = position - start == ENTRIES_PER_CHUNK or rows + size > EVIDENCE_ROWS_PER_CHUNK
        if position > start and (full or size > EVIDENCE_ROWS_PER_CHUNK):
            pieces.append(_Piece(start, position))
            start, rows = position, 0
        if size > EVIDENCE_ROWS_PER_CHUNK:
            pieces += [_Piece(position, position + 1,
                              (first, min(first + EVIDENCE_ROWS_PER_CHUNK, size)))
                       for first in range(0, size, EVIDENCE_ROWS_PER_CHUNK)]
            start = position + 1
            continue
        rows += size
    if start < len(sizes):
        pieces.append(_Piece(start, len(sizes)))
    return pieces


def _render(key: str, entries: Sequence[Any]) -> bytes:
    """A chunk of a list's entries as the JSON text between the list's brackets."""
    if key == "findings":
        return _findings_text(list(entries))
    wrapped = orjson.dumps({key: entries}, option=orjson.OPT_INDENT_2)
    return wrapped[len(_list_head(key)):-len(_LIST_TAIL)]


def _list_head(key: str) -> bytes:
    return b'{\n  ' + orjson.dumps(key) + b": ["


def _write_list(key: str, entries: Sequence[Any], stream: BinaryIO, workers: int) -> None:
    """A list's entries, a piece at a time: here, or rendered and written by `workers` forked
    processes taking turns (`turns`) when the stream has a file descriptor."""
    pieces = _pieces(key, entries)
    large = _LargeFinding(entries)

    def render(index: int) -> bytes:
        piece = pieces[index]
        if piece.rows is not None:
            return large.slice_text(piece.start, *piece.rows)
        return _render(key, entries[piece.start:piece.stop])

    def write(index: int, rendered: bytes, out: BinaryIO) -> None:
        out.write(b"," if index and not pieces[index].continues_entry else b"")
        out.write(rendered)

    fd = _file_descriptor(stream)
    if workers <= 1 or len(pieces) < 4 * workers or fd is None:
        for index in range(len(pieces)):
            write(index, render(index), stream)
        return
    stream.flush()
    write_in_turns(len(pieces), render, write, fd, workers)


def _file_descriptor(stream: BinaryIO) -> int | None:
    try:
        return stream.fileno()
    except (AttributeError, OSError):
        return None


def _findings_text(chunk: list[dict[str, Any]]) -> bytes:
    """Findings dumped by orjson with a marker for their evidence, then each marker replaced
    by the finding's evidence text (`evidence_text`)."""
    around = _around_evidence(chunk)
    texts = evidence_texts([finding["events"] for finding in chunk])
    return b"".join([piece for pair in zip(around, texts) for piece in pair] + around[-1:])


def _around_evidence(findings: list[dict[str, Any]]) -> list[bytes]:
    """The findings' text between the list's brackets, cut where each one's evidence rows go
    (one more piece than findings)."""
    wrapped = orjson.dumps({"findings": [dict(finding, events=_EVENTS_MARKER)
                                         for finding in findings]}, option=orjson.OPT_INDENT_2)
    return wrapped[len(_FINDINGS_HEAD):-len(_LIST_TAIL)].split(_MARKER_TEXT)


class _LargeFinding:
    """The text of one finding whose evidence rows come in slices, a slice at a time, as the
    same bytes as when it is dumped whole (a stall per packet pair of a huge connection would
    otherwise be one JSON string of a gigabyte). The finding last asked for is kept, so a
    process reads it once for all the slices it renders."""

    def __init__(self, entries: Sequence[Any]) -> None:
        self._entries = entries
        self._position = -1
        self._finding: dict[str, Any] = {}

    def slice_text(self, position: int, first: int, stop: int) -> bytes:
        if position != self._position:
            self._finding, self._position = self._entries[position], position
        events = self._finding["events"]
        rows = evidence_texts([StallEvents(events.rows[first:stop])])[0][1:-len(EVENTS_CLOSE)]
        ends = first == 0 or stop == len(events)
        before, after = _around_evidence([self._finding]) if ends else (b"", b"")
        return b"".join((before + b"[" if first == 0 else b",", rows,
                         EVENTS_CLOSE + after if stop == len(events) else b""))


_EVENTS_MARKER = "nagledetect: evidence rows go here"
_MARKER_TEXT = orjson.dumps(_EVENTS_MARKER)
_FINDINGS_HEAD = b'{\n  "findings": ['
_LIST_TAIL = b"\n  ]\n}"
