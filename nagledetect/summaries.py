"""The Nagle family's findings cut to what the headline and the reports' connection tables read
(`StallSummaries`), kept as columns from when the findings are made: a large capture's
findings lie pickled in a spill file (`stored`), and reading every stall back to sum the
headline took a tenth of the end of a capture whose every connection stalls.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from nagledetect.chunked import ChunkedSequence
from nagledetect.detectors import kinds
from nagledetect.detectors.model import Finding
from nagledetect.ordering import as_strings, as_text
from nagledetect.table import object_column

STALL_SUMMARY_NUMBERS = {"capture": np.int32, "connection": np.int64, "count": np.int64,
                         "time_lost_s": np.float64}
STALL_SUMMARY_ENDPOINTS = ("sender", "receiver")
STALL_SUMMARY_VALUES = ("kind", "subkind", "advice", "upper_bound", "not_nagles")
"""What the headline and the reports' connection tables read of a Nagle-family finding: its
numbers, its endpoints, and values that repeat (its kinds and advice)."""


def finding_head(finding: Finding, capture_index: int, connection: int) -> dict[str, Any]:
    """The first keys of a finding's entry: what it is, where, and what it cost."""
    return {"kind": finding.kind, "subkind": finding.subkind, "capture": capture_index,
            "connection": connection, "sender": finding.sender, "receiver": finding.receiver,
            "count": finding.count, "time_lost_s": round(finding.time_lost_s, 6)}


def summary_entry(finding: Finding, capture_index: int, connection: int) -> dict[str, Any]:
    """What `StallSummaries` keeps of a finding's entry, without making the rest: its display
    filter alone took more time than the rest of the document's headline."""
    return {**finding_head(finding, capture_index, connection), "advice": finding.advice,
            "details": finding.details}


class StallSummaries(ChunkedSequence):
    """Nagle-family findings as entries with the keys of a finding's (`details` holding only
    whether its time lost is an upper bound and whether it may be no one's Nagle cost), made
    when read. Held as columns: numbers, endpoints as fixed-width text (`ordering.as_text`),
    each repeated value once. A dict per finding, with the strings it kept, took about 360
    bytes (430 MB for the 1.2 M findings of the 100 M replica); a string object for each
    endpoint of its 400,000 stalled connections, some 100 MB more while they were numbered."""

    def __init__(self) -> None:
        self._pieces: dict[str, list[np.ndarray]] = {name: [] for name in (
            *STALL_SUMMARY_NUMBERS, *STALL_SUMMARY_ENDPOINTS, *STALL_SUMMARY_VALUES)}
        self._codes: dict[str, dict[Any, int]] = {name: {} for name in STALL_SUMMARY_VALUES}
        self._columns: dict[str, np.ndarray] = {}
        self._values: dict[str, list[Any]] = {}

    @classmethod
    def of_findings(cls, findings: Sequence[Finding]) -> StallSummaries:
        """The Nagle-family findings among `findings` (capture 0, their own connection ids)."""
        summaries = cls()
        summaries.add([summary_entry(finding, 0, finding.connection) for finding in findings
                       if kinds.is_nagle_family(finding.kind)])
        return summaries.done()

    def add(self, entries: list[dict[str, Any]]) -> None:
        """Findings' entries, in order."""
        for name, dtype in STALL_SUMMARY_NUMBERS.items():
            self._pieces[name].append(np.array([entry[name] for entry in entries], dtype=dtype))
        for name in STALL_SUMMARY_ENDPOINTS:
            self._pieces[name].append(_endpoint_text([entry[name] for entry in entries]))
        keys = {"kind": [entry["kind"] for entry in entries],
                "subkind": [entry["subkind"] for entry in entries],
                "advice": [tuple(entry["advice"]) for entry in entries],
                "upper_bound": [entry.get("details", {}).get("time_lost_upper_bound")
                                for entry in entries],
                "not_nagles": [entry.get("details", {}).get("not_nagles") for entry in entries]}
        for name, values in keys.items():
            codes = self._codes[name]
            self._pieces[name].append(np.array(
                [codes.setdefault(value, len(codes)) for value in values], dtype=np.int32))

    def done(self) -> StallSummaries:
        """Every finding added: the columns joined."""
        self._columns = {name: _joined_endpoints(pieces) if name in STALL_SUMMARY_ENDPOINTS
                         else np.concatenate(pieces) if pieces else np.zeros(0, np.int32)
                         for name, pieces in self._pieces.items()}
        self._values = {name: list(codes) for name, codes in self._codes.items()}
        self._pieces, self._codes = {}, {}
        return self

    @property
    def connection(self) -> np.ndarray:
        return self._columns["connection"]

    def taken(self, rows: np.ndarray, capture: int | None = None,
              connection: np.ndarray | None = None) -> StallSummaries:
        """The summaries at these rows, in that order; of capture `capture` and with the
        connection ids `connection` (one per row taken) where given."""
        taken = StallSummaries()
        taken._columns = {name: values[rows] for name, values in self._columns.items()}
        taken._values = self._values
        taken._pieces, taken._codes = {}, {}
        if capture is not None:
            taken._columns["capture"] = np.full(len(rows), capture, dtype=np.int32)
        if connection is not None:
            taken._columns["connection"] = np.asarray(connection, dtype=np.int64)
        return taken

    @staticmethod
    def joined(pieces: Sequence[StallSummaries]) -> StallSummaries:
        """The summaries of every piece one after another, their values numbered across them."""
        if len(pieces) == 1:
            return pieces[0]
        joined = StallSummaries()
        codes: dict[str, dict[Any, int]] = {name: {} for name in STALL_SUMMARY_VALUES}
        columns: dict[str, list[np.ndarray]] = {name: [] for name in joined._pieces}
        for piece in pieces:
            for name, values in piece._columns.items():
                if name in STALL_SUMMARY_VALUES:
                    numbered = codes[name]
                    new_code = np.array([numbered.setdefault(value, len(numbered))
                                         for value in piece._values[name]], dtype=np.int32)
                    values = new_code[values] if len(values) else values
                columns[name].append(values)
        joined._pieces, joined._codes = columns, codes
        return joined.done()

    def __len__(self) -> int:
        return len(self._columns["count"]) if self._columns else 0

    def items(self, start: int, stop: int) -> list[dict[str, Any]]:
        columns = {name: as_strings(values[start:stop]).tolist() if name in STALL_SUMMARY_ENDPOINTS
                   else values[start:stop].tolist() for name, values in self._columns.items()}
        named = {name: [self._values[name][code] for code in columns[name]]
                 for name in STALL_SUMMARY_VALUES}
        entries = []
        for row in range(stop - start):
            entry = {"kind": named["kind"][row], "subkind": named["subkind"][row],
                     "capture": columns["capture"][row],
                     "connection": columns["connection"][row],
                     "sender": columns["sender"][row], "receiver": columns["receiver"][row],
                     "count": columns["count"][row],
                     "time_lost_s": columns["time_lost_s"][row],
                     "advice": list(named["advice"][row])}
            if named["upper_bound"][row] is not None:
                entry["details"] = {"time_lost_upper_bound": named["upper_bound"][row],
                                    "not_nagles": named["not_nagles"][row]}
            entries.append(entry)
        return entries


def _endpoint_text(endpoints: list[str | None]) -> np.ndarray:
    """Endpoints as fixed-width text, or as objects where one is missing (None)."""
    if None in endpoints:
        return object_column(endpoints)
    return as_text(endpoints) if endpoints else np.zeros(0, dtype="S1")


def _joined_endpoints(pieces: list[np.ndarray]) -> np.ndarray:
    """Chunks' endpoints in one column: text, or objects throughout where a chunk has a missing
    one (text joined to objects would stay bytes)."""
    if not pieces:
        return np.zeros(0, dtype="S1")
    if all(piece.dtype.kind in "SU" for piece in pieces):
        return np.concatenate(pieces)
    return np.concatenate([as_strings(piece) for piece in pieces])
