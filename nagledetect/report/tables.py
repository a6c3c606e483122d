"""Tables for other tools: packets, connections, messages and findings as CSV or Parquet.

Each table is written a chunk of rows at a time, capture after capture: a capture analysed in
parts hands its packet and message tables over from disk in one-part order (`part_tables`), so
writing them takes memory for a chunk, not for the capture.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from nagledetect.analysis import Analysis
from nagledetect.errors import InputError
from nagledetect.report.document import build_document
from nagledetect.sent_tables import Rows, TableRows, rows_table
from nagledetect.stored import StoredRows
from nagledetect.table import as_frame

FINDING_COLUMNS = ("capture", "kind", "subkind", "connection", "sender", "receiver", "count",
                   "time_lost_s", "share", "summary")
FINDING_ROWS_PER_CHUNK = 10_000
ROWS_PER_CHUNK = 65_536
"""Up to this many rows of small captures' tables are joined into one chunk to write."""


def _capture_chunks(analysis: Analysis, table: str) -> Iterator[pd.DataFrame]:
    connections = analysis.capture.connections
    if table == "connections":
        chunks: Iterator[Rows | pd.DataFrame] = (connections.chunks()
                                                 if isinstance(connections, StoredRows)
                                                 else iter([connections]))
    elif analysis.part_tables is not None:
        chunks = getattr(analysis.part_tables, table)()
    else:
        chunks = iter([analysis.capture.packets if table == "packets" else analysis.messages])
    for chunk in chunks:
        yield as_frame(rows_table(chunk) if isinstance(chunk, TableRows) else chunk)


def _chunks(analyses: list[Analysis], table: str) -> Iterator[pd.DataFrame]:
    """Every capture's chunks with their capture's position, consecutive ones of the same
    columns and dtypes joined up to ROWS_PER_CHUNK rows: an archive of small captures is a
    chunk or two a capture, and each chunk written on its own cost a millisecond."""
    held: list[pd.DataFrame] = []
    captures: list[int] = []
    held_rows = 0
    held_columns: list[tuple[str, Any]] = []
    for index, analysis in enumerate(analyses):
        for chunk in _capture_chunks(analysis, table):
            columns = list(chunk.dtypes.items())
            if held and (held_rows + len(chunk) > ROWS_PER_CHUNK or columns != held_columns):
                yield _joined(held, captures)
                held, captures, held_rows = [], [], 0
            held.append(chunk)
            captures.append(index)
            held_rows += len(chunk)
            held_columns = columns
    if held:
        yield _joined(held, captures)


def _joined(chunks: list[pd.DataFrame], captures: list[int]) -> pd.DataFrame:
    """The chunks as one, with a `capture` column last."""
    joined = chunks[0] if len(chunks) == 1 else pd.concat(chunks, ignore_index=True)
    return joined.assign(capture=np.repeat(captures, [len(chunk) for chunk in chunks]))


def _finding_chunks(document: dict[str, Any]) -> Iterator[pd.DataFrame]:
    rows = []
    for finding in document["findings"]:
        rows.append({key: finding.get(key) for key in FINDING_COLUMNS})
        if len(rows) == FINDING_ROWS_PER_CHUNK:
            yield pd.DataFrame(rows, columns=list(FINDING_COLUMNS))
            rows = []
    if rows or not len(document["findings"]):
        yield pd.DataFrame(rows, columns=list(FINDING_COLUMNS))


def write_tables(analyses: list[Analysis], folder: Path, table_format: str) -> list[Path]:
    """Write the four tables; returns their paths. Parquet needs pyarrow."""
    document = build_document(analyses)
    tables = {"packets": _chunks(analyses, "packets"),
              "connections": _chunks(analyses, "connections"),
              "messages": _chunks(analyses, "messages"), "findings": _finding_chunks(document)}
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise InputError(f"{folder}: cannot create the folder ({error.strerror})") from None
    written = []
    for name, chunks in tables.items():
        path = folder / f"{name}.{table_format}"
        if table_format == "parquet":
            _write_parquet(chunks, path)
        else:
            _write_csv(chunks, path)
        written.append(path)
    return written


def _write_csv(chunks: Iterator[pd.DataFrame], path: Path) -> None:
    """The header from the first chunk (written even when every chunk is empty), then the rows
    of every chunk that has some."""
    with open(path, "w", newline="", encoding="utf-8") as handle:
        for position, chunk in enumerate(chunks):
            if position == 0 or len(chunk):
                chunk.to_csv(handle, index=False, header=position == 0)


def _write_parquet(chunks: Iterator[pd.DataFrame], path: Path) -> None:
    """One row group per chunk that has rows (empty chunks' columns may lack their types), the
    schema from the first of them; an empty table if none has."""
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError:
        raise InputError("--tables-format parquet needs pyarrow: pip install pyarrow") from None
    writer = None
    first = None
    try:
        for chunk in chunks:
            first = chunk if first is None else first
            if not len(chunk):
                continue
            if writer is None:
                batch = _strings_for_nulls(pa.Table.from_pandas(chunk, preserve_index=False))
                writer = pq.ParquetWriter(path, batch.schema)
            else:
                batch = pa.Table.from_pandas(chunk, preserve_index=False, schema=writer.schema)
            writer.write_table(batch)
    finally:
        if writer is not None:
            writer.close()
    if writer is None:
        (first if first is not None else pd.DataFrame()).to_parquet(path, index=False)


def _strings_for_nulls(table: Any) -> Any:
    """A column with no value in the first chunk (a finding's subkind, say) holds text in
    later ones: typed as text rather than as null, which could hold nothing else."""
    import pyarrow as pa

    fields = [field.with_type(pa.string()) if pa.types.is_null(field.type) else field
              for field in table.schema]
    return table.cast(pa.schema(fields, metadata=table.schema.metadata))
