"""The progress line: shown on a terminal for long reads, never on a pipe."""

from __future__ import annotations

import io

from nagledetect import load_capture
from nagledetect.progress import ReadProgress
from tests.conftest import SAMPLE_TRACES


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_reports_packets_and_clears_itself(monkeypatch) -> None:
    path = str(SAMPLE_TRACES / "mixed.pcap")
    terminal = _Terminal()
    progress = ReadProgress(path, terminal)
    monkeypatch.setattr("nagledetect.progress.QUIET_BELOW_S", 0.0)
    monkeypatch.setattr("nagledetect.progress.MIN_INTERVAL_S", 0.0)
    capture = load_capture(path, progress=progress)
    progress.done()
    text = terminal.getvalue()
    assert f"{capture.accounting.packets_read:,} packets" in text and "ETA" in text
    assert text.endswith("\r")


def test_progress_is_silent_off_a_terminal() -> None:
    pipe = io.StringIO()
    progress = ReadProgress(str(SAMPLE_TRACES / "mixed.pcap"), pipe)
    progress(10, 1000)
    progress.done()
    assert pipe.getvalue() == ""
