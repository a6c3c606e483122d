"""What a coarse clock leaves unproven: every time a capture shows is off by up to its clock's
step (the reader's `clock_step_us`: 1 ms and more, a Windows clock's 15.625 ms).

- A wait of a few steps is not measured: one of one step may have lasted anything from none to
  two. Findings whose waits are that short (the median of their evidence rows) say so, of low
  confidence.
- A Nagle hold is proven by the held data leaving microseconds after the ACK that released it
  (or one round trip later, seen from afar); under a step of a millisecond or more that is not
  seen, so a Nagle-family finding is of medium confidence at most.

Applied to a capture's findings once it is analysed (its clock's step is known only then), as
they are read back where they are kept on disk.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from nagledetect.detectors.kinds import NAGLE_FAMILY
from nagledetect.detectors.model import Finding

MIN_STEPS_MEASURED = 4
"""A median wait shorter than this many clock steps is not measured."""
LEVELS = ("low", "medium", "high")


@dataclass(frozen=True)
class CoarseClock:
    """Lowers the confidence of the findings the step leaves unproven, with the reason (a
    class, so that findings read from disk can be mended as they are read, and handed over)."""

    step_us: int

    def __call__(self, positions: np.ndarray, findings: list[Finding]) -> None:
        for finding in findings:
            self.mend(finding)

    def mend(self, finding: Finding) -> None:
        step_ms = self.step_us / 1000
        clock = f"the capture's clock steps by {step_ms:g} ms"
        if len(finding.events):
            wait_ms = float(np.median(finding.events.stall_s)) * 1000
            if wait_ms < MIN_STEPS_MEASURED * step_ms:
                _at_most(finding, "low", f"{clock}: waits of {wait_ms:.1f} ms (median) are "
                                         f"{wait_ms / step_ms:.1f} of its steps, not measured")
                return
        if finding.kind in NAGLE_FAMILY:
            _at_most(finding, "medium", f"{clock}: the held data leaving right after the ACK, "
                                        "which proves the hold, is not seen closer than that")


def _at_most(finding: Finding, level: str, reason: str) -> None:
    if LEVELS.index(finding.confidence) > LEVELS.index(level):
        finding.confidence = level
    finding.confidence_reasons = [*finding.confidence_reasons, reason]
