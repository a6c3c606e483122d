"""A progress line on stderr for long runs: the read (packets, bytes, rate, ETA), then the
stages after it (packets of the parts analysed, host timers, captures done), each with its ETA. Silent off a
terminal, and for the first second (a short run shows nothing)."""

from __future__ import annotations

import os
import sys
import time
from typing import TextIO

from nagledetect.read.compressed import capture_bytes

MIN_INTERVAL_S = 0.2
QUIET_BELOW_S = 1.0
WIDTH = 120


class ProgressLine:
    """One line rewritten in place. Call it with (packets, bytes) as batches are read (fewer
    packets than last time: the capture is read again, from its start); call
    `stage(name, done, total)` as a later stage gets on; `done()` clears the line."""

    def __init__(self, path: str, stream: TextIO | None = None, quiet: bool = False) -> None:
        self.stream = stream or sys.stderr
        self.enabled = not quiet and self.stream.isatty()
        self.total_bytes = capture_bytes(path) if self.enabled else 0
        self.name = os.path.basename(path)
        self.start_s = time.monotonic()
        self.read_start_s = self.start_s
        """When the read began (again, when a capture is read twice)."""
        self.last_s = 0.0
        self.stage_name = ""
        self.stage_start_s = 0.0
        self.shown = False
        self.packets_read = 0

    def __call__(self, packets: int, bytes_read: int) -> None:
        if packets < self.packets_read:  # the capture is read again: its pace counts anew
            self.read_start_s = time.monotonic()
        self.packets_read = packets
        if not self._due():
            return
        elapsed = time.monotonic() - self.read_start_s
        rate = packets / elapsed if elapsed > 0 else 0.0
        line = f"{self.name}: {packets:,} packets, {bytes_read / 1e6:,.0f} MB, {rate / 1e6:.2f} M pkt/s"
        if self.total_bytes:
            share = min(bytes_read / self.total_bytes, 1.0)
            line += f", {share * 100:.0f}%, ETA {_eta_s(elapsed, share):.0f} s"
        self._show(line)

    def stage(self, name: str, done: int, total: int) -> None:
        """A stage after the read has done `done` of its `total` units (0 when it starts)."""
        now = time.monotonic()
        if name != self.stage_name:
            self.stage_name, self.stage_start_s = name, now
        if total <= 0 or not self._due():
            return
        line = f"{self.name}: {name}"
        if total > 1:  # a stage of one step is its name alone
            line += f" {done:,} of {total:,}"
        if done and total > 1:
            line += f", ETA {_eta_s(now - self.stage_start_s, done / total):.0f} s"
        self._show(line)

    def done(self) -> None:
        if self.shown:
            self.stream.write("\r" + " " * WIDTH + "\r")
            self.stream.flush()
            self.shown = False

    def _due(self) -> bool:
        """Whether to draw now: on a terminal, after the quiet first second, not too often."""
        now = time.monotonic()
        if not self.enabled or now - self.start_s < QUIET_BELOW_S or now - self.last_s < MIN_INTERVAL_S:
            return False
        self.last_s = now
        return True

    def _show(self, line: str) -> None:
        self.stream.write("\r" + line[:WIDTH].ljust(WIDTH))
        self.stream.flush()
        self.shown = True


def _eta_s(elapsed_s: float, share_done: float) -> float:
    """Seconds left when `share_done` of the work took `elapsed_s`, at the same pace."""
    return elapsed_s * (1 - share_done) / share_done if share_done > 0 else 0.0
