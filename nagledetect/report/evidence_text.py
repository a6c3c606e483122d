"""The evidence rows of many findings as the JSON text of the document, made column by column.

Why: the document of a large capture holds millions of evidence rows; made as a dict per row
and dumped, they took most of the time of writing it. Here orjson dumps each column once as a
numpy array (so each number is exactly the text it writes for a Python value: shortest form,
rounded as the document rounds, NaN as null), the text is cut at its commas, and the numbers
are slotted between the fixed text of the rows, which is the same for every row, and joined.
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


def evidence_texts(events: list[StallEvents]) -> list[bytes]:
    """Each finding's evidence rows as the text of its JSON list: "[]" when it has none."""
    counts = [len(rows) for rows in events]
    total = sum(counts)
    if not total:
        return [b"[]"] * len(events)
    pieces = ROW_TEMPLATE * total
    for index, (arrays, decimals) in enumerate(zip(zip(*(rows.columns() for rows in events)),
                                                   EVIDENCE_DECIMALS)):
        pieces[2 * index + 1::ROW_PIECES] = _column_text(np.concatenate(arrays),
                                                         decimals).split(b",")
    texts: list[bytes] = []
    start = 0
    for count in counts:
        if not count:
            texts.append(b"[]")
            continue
        end = start + count * ROW_PIECES
        pieces[start] = FIRST_ROW_OPEN
        pieces[end - 1] = LAST_ROW_CLOSE
        texts.append(b"".join(pieces[start:end]))  # type: ignore[arg-type]
        start = end
    return texts


def _column_text(values: np.ndarray, decimals: int | None) -> bytes:
    """A column's numbers as orjson writes them, between commas."""
    if decimals is None:
        converted = values.astype(np.int64)
    else:
        converted = np.round(values.astype(np.float64), decimals)
    return orjson.dumps(converted, option=orjson.OPT_SERIALIZE_NUMPY)[1:-1]
