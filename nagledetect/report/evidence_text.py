"""The evidence rows of many findings as the JSON text of the document, made column by column.

Why: the document of a large capture holds millions of evidence rows; made as a dict per row
and dumped, they took most of the time of writing it. Here orjson dumps each column as a numpy
array, a few thousand rows at a time (so each number is exactly the text it writes for a Python
value: shortest form, rounded as the document rounds, NaN as null), the text is cut at its
commas, and the numbers are slotted between the fixed text of the rows, which is the same for
every row, and joined.
The text is what orjson writes, indented two spaces a level, for a finding's "events" list.
"""

from __future__ import annotations

import numpy as np
import orjson

from nagledetect.detectors.model import EVIDENCE_DECIMALS, EVIDENCE_KEYS, StallEvents

ROW_INDENT = b"\n        "
EVENTS_CLOSE = b"\n      ]"
"""What follows the last row of a finding's list."""
ROW_OPEN = b"," + ROW_INDENT + b"{" + ROW_INDENT + b"  " + orjson.dumps(EVIDENCE_KEYS[0]) + b": "
FIRST_ROW_OPEN = b"[" + ROW_OPEN[1:]
ROW_CLOSE = ROW_INDENT + b"}"
LAST_ROW_CLOSE = ROW_CLOSE + EVENTS_CLOSE
ROW_TEMPLATE: list[bytes | None] = [
    ROW_OPEN,
    *(piece for key in EVIDENCE_KEYS[1:]
      for piece in (None, b"," + ROW_INDENT + b"  " + orjson.dumps(key) + b": ")),
    None, ROW_CLOSE]
"""A row's pieces: fixed text, with None where each column's number goes."""
ROW_PIECES = len(ROW_TEMPLATE)


ROWS_AT_ONCE = 4096
"""Rows made at a time. Each row's numbers are small bytes objects, which Python's allocator
keeps in arenas of its own and unmaps as soon as they are empty: made 65,536 rows at a time,
they took 22 MB of arenas that each next piece faulted in again. A few thousand rows fit in the
arenas it keeps, and in the processor's caches (a million rows, `benchmarks/bench_evidence.py`:
0.63-0.68 s against 0.82-0.87 s, 7,700-9,900 page faults against 87,000-90,000)."""


def evidence_texts(events: list[StallEvents]) -> list[bytes]:
    """Each finding's evidence rows as the text of its JSON list: "[]" when it has none."""
    counts = [len(rows) for rows in events]
    total = sum(counts)
    if not total:
        return [b"[]"] * len(events)
    columns = [np.concatenate(arrays) for arrays in zip(*(rows.columns() for rows in events))]
    starts: list[int] = np.cumsum([0, *counts]).tolist()
    parts: list[list[bytes]] = [[] for _ in events]
    finding = 0
    for first in range(0, total, ROWS_AT_ONCE):
        stop = min(first + ROWS_AT_ONCE, total)
        pieces = _row_pieces(columns, first, stop)
        while finding < len(events) and starts[finding] < stop:
            low, high = max(starts[finding], first), min(starts[finding + 1], stop)
            if low < high:
                begin, end = (low - first) * ROW_PIECES, (high - first) * ROW_PIECES
                if low == starts[finding]:
                    pieces[begin] = FIRST_ROW_OPEN
                if high == starts[finding + 1]:
                    pieces[end - 1] = LAST_ROW_CLOSE
                parts[finding].append(b"".join(pieces[begin:end]))  # type: ignore[arg-type]
            if starts[finding + 1] > stop:
                break
            finding += 1
    return [b"".join(made) if made else b"[]" for made in parts]


def _row_pieces(columns: list[np.ndarray], first: int, stop: int) -> list[bytes | None]:
    """Rows [first, stop) as their fixed text with each column's numbers slotted in."""
    pieces = ROW_TEMPLATE * (stop - first)
    for index, (values, decimals) in enumerate(zip(columns, EVIDENCE_DECIMALS)):
        pieces[2 * index + 1::ROW_PIECES] = _column_text(values[first:stop], decimals).split(b",")
    return pieces


def _column_text(values: np.ndarray, decimals: int | None) -> bytes:
    """A column's numbers as orjson writes them, between commas."""
    if decimals is None:
        converted = values.astype(np.int64)
    else:
        converted = np.round(values.astype(np.float64), decimals)
    return orjson.dumps(converted, option=orjson.OPT_SERIALIZE_NUMPY)[1:-1]
