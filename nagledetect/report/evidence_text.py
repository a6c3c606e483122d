"""The evidence rows of many findings as the JSON text of the document, made column by column
by the compiled core (`core/src/evidence_text.rs`), which writes each number as orjson writes
the value the document rounds it to; here is the fixed text around the numbers.

Why: the document of a large capture holds millions of evidence rows; made as a dict per row
and dumped, they took most of the time of writing it.
The text is what orjson writes, indented two spaces a level, for a finding's "events" list.
"""

from __future__ import annotations

import numpy as np
import orjson

from nagledetect import _core
from nagledetect.detectors.model import (
    EVIDENCE_DECIMALS,
    EVIDENCE_KEYS,
    StallEvents,
    joined_columns,
)

ROW_INDENT = b"\n        "
EVENTS_CLOSE = b"\n      ]"
"""What follows the last row of a finding's list."""
ROW_OPEN = b"," + ROW_INDENT + b"{" + ROW_INDENT + b"  " + orjson.dumps(EVIDENCE_KEYS[0]) + b": "
ROW_CLOSE = ROW_INDENT + b"}"
ROW_TEXT = {
    "row_open": ROW_OPEN,
    "first_row_open": b"[" + ROW_OPEN[1:],
    "between": [b"," + ROW_INDENT + b"  " + orjson.dumps(key) + b": " for key in EVIDENCE_KEYS[1:]],
    "row_close": ROW_CLOSE,
    "last_row_close": ROW_CLOSE + EVENTS_CLOSE,
}
"""A row's fixed text, around its numbers (`RowText` of the core)."""


def evidence_texts(events: list[StallEvents]) -> list[bytes]:
    """Each finding's evidence rows as the text of its JSON list: "[]" when it has none."""
    counts = [len(rows) for rows in events]
    if not sum(counts):
        return [b"[]"] * len(events)
    columns = [column.astype(np.int64 if decimals is None else np.float64, copy=False)
               for column, decimals in zip(joined_columns(events), EVIDENCE_DECIMALS)]
    return _core.evidence_texts(columns, list(EVIDENCE_DECIMALS), counts, ROW_TEXT)
