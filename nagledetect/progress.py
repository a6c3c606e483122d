"""A progress line on stderr for long reads: packets, bytes, rate, ETA; silent off a terminal."""

from __future__ import annotations

import os
import sys
import time

MIN_INTERVAL_S = 0.2
QUIET_BELOW_S = 1.0


class ReadProgress:
    """Call with (packets, bytes) as batches arrive; `done()` clears the line."""

    def __init__(self, path: str, stream=None) -> None:
        self.stream = stream or sys.stderr
        self.enabled = self.stream.isatty()
        self.total_bytes = os.path.getsize(path) if self.enabled and os.path.isfile(path) else 0
        self.name = os.path.basename(path)
        self.start_s = time.monotonic()
        self.last_s = 0.0
        self.shown = False

    def __call__(self, packets: int, bytes_read: int) -> None:
        now = time.monotonic()
        elapsed = now - self.start_s
        if not self.enabled or elapsed < QUIET_BELOW_S or now - self.last_s < MIN_INTERVAL_S:
            return
        self.last_s = now
        rate = packets / elapsed
        line = f"{self.name}: {packets:,} packets, {bytes_read / 1e6:,.0f} MB, {rate / 1e6:.2f} M pkt/s"
        if self.total_bytes:
            share = min(bytes_read / self.total_bytes, 1.0)
            eta = elapsed * (1 - share) / share if share > 0 else 0.0
            line += f", {share * 100:.0f}%, ETA {eta:.0f} s"
        self.stream.write("\r" + line[:120].ljust(120))
        self.stream.flush()
        self.shown = True

    def done(self) -> None:
        if self.shown:
            self.stream.write("\r" + " " * 120 + "\r")
            self.stream.flush()
