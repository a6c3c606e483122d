"""Every kind of finding, named once, and the families the reports and the gate count by.

The Nagle family is what Nagle's algorithm cost: the headline, the HTML banner, `check
--max-stalls`/`--max-stall-time` and JUnit all count exactly these kinds. The gap causes are the
delays named so they are not blamed on Nagle; of them, only `idle` means nobody waited.
"""

from __future__ import annotations

NAGLE_DELACK_STALL = "nagle-delack-stall"
NAGLE_RTT_HOLD = "nagle-rtt-hold"
STREAM_COALESCING = "stream-coalescing"
NAGLE_FAMILY = (NAGLE_DELACK_STALL, NAGLE_RTT_HOLD, STREAM_COALESCING)

LOSS_RECOVERY = "loss-recovery"
ZERO_WINDOW = "zero-window"
WINDOW_LIMITED = "window-limited"
HANDSHAKE_RETRY = "handshake-retry"
THINK_TIME = "think-time"
IDLE = "idle"
OTHER_GAP_CAUSES = (LOSS_RECOVERY, ZERO_WINDOW, WINDOW_LIMITED, HANDSHAKE_RETRY, THINK_TIME, IDLE)
"""Every cause of a gap that is not Nagle's, in the order the diagnosis lists them after the
Nagle family (by time lost within the order's groups; idle last, folded)."""

PHASE_LOCK = "phase-lock"
SEGMENT_PARITY = "segment-parity"
TINYGRAM_FLOOD = "tinygram-flood"
STOP_AND_WAIT = "stop-and-wait"
PATTERNS = (PHASE_LOCK, SEGMENT_PARITY, TINYGRAM_FLOOD, STOP_AND_WAIT)
"""Findings that describe a pattern and count no time of their own (phase locking and parity
explain stalls already counted; a tinygram flood and stop-and-wait cost packets and round
trips, not stalls)."""

ALL_KINDS = (*NAGLE_FAMILY, *OTHER_GAP_CAUSES, *PATTERNS)
"""What `check --fail-on` accepts; anything else is a mistake and exits 2."""

CONFIDENCE_LEVELS = ("low", "medium", "high")
"""A finding's confidence, weakest first."""

NOT_LOST = (IDLE, STOP_AND_WAIT)
"""Kinds whose time nobody waited for (idle) or that count none (stop-and-wait): reported, folded
per capture, never called time lost."""


def is_nagle_family(kind: str) -> bool:
    return kind in NAGLE_FAMILY
