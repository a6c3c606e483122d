"""Tables for other tools: packets, connections, messages and findings as CSV or Parquet."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from nagledetect.analysis import Analysis
from nagledetect.errors import InputError
from nagledetect.report.document import build_document

FINDING_COLUMNS = ("capture", "kind", "subkind", "connection", "sender", "receiver", "count",
                   "time_lost_s", "share", "summary")


def _stack(analyses: list[Analysis], table: str) -> pd.DataFrame:
    frames = [getattr(analysis.capture, table, None) if table in ("packets", "connections")
              else analysis.messages for analysis in analyses]
    return pd.concat([frame.assign(capture=index) for index, frame in enumerate(frames)
                      if frame is not None], ignore_index=True)


def write_tables(analyses: list[Analysis], folder: Path, table_format: str) -> list[Path]:
    """Write the four tables; returns their paths. Parquet needs pyarrow."""
    document = build_document(analyses)
    findings = pd.DataFrame([{key: finding.get(key) for key in FINDING_COLUMNS}
                             for finding in document["findings"]], columns=list(FINDING_COLUMNS))
    tables = {"packets": _stack(analyses, "packets"), "connections": _stack(analyses, "connections"),
              "messages": _stack(analyses, "messages"), "findings": findings}
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise InputError(f"{folder}: cannot create the folder ({error.strerror})") from None
    written = []
    for name, table in tables.items():
        path = folder / f"{name}.{table_format}"
        if table_format == "parquet":
            try:
                table.to_parquet(path, index=False)
            except ImportError:
                raise InputError("--tables-format parquet needs pyarrow: pip install pyarrow") from None
        else:
            table.to_csv(path, index=False)
        written.append(path)
    return written
