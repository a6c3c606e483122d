"""What a capture's clock leaves unproven (the reader's `clock_step_us` and `clock_spacing_us`).

- A coarse clock (a step of 1 ms or more, a Windows clock's 15.625 ms) puts every time off by
  up to its step. A wait of a few steps is not measured: one of one step may have lasted from
  none to two. Findings whose waits are that short (the median of their evidence rows) say so,
  of low confidence. A Nagle hold is proven by the held data leaving microseconds after the
  ACK that released it (or one round trip later, seen from afar); under such a step that is
  not seen, so a Nagle-family finding is of medium confidence at most.
- Times that were set, not measured (every packet the same interval after the one before, as
  a script writing a capture spaces them) are no evidence of any wait: every finding that rests
  on timing (with evidence rows, or a phase lock) is of low confidence. Evenly spaced times
  are called set only where they hold a TCP conversation seen both ways: no real stack answers
  on the beat it was spoken to, while a periodic sender seen alone (a switch's BPDUs every
  2 s, to within 0.05 %) keeps real time.

Applied to a capture's findings once it is analysed (its clock is known only then), as they
are read back where they are kept on disk.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from nagledetect.detectors.kinds import CONFIDENCE_LEVELS, NAGLE_FAMILY, PHASE_LOCK
from nagledetect.detectors.model import Finding
from nagledetect.read.accounting import Accounting

MIN_STEPS_MEASURED = 4
"""A median wait shorter than this many clock steps is not measured."""


@dataclass(frozen=True)
class ClockCaveat:
    """Lowers the confidence of the findings a capture's clock leaves unproven, with the reason
    (a class, so that findings read from disk can be mended as they are read, and handed
    over)."""

    step_us: int | None
    spacing_us: int | None

    @classmethod
    def of(cls, accounting: Accounting, answered: bool) -> ClockCaveat | None:
        """The caveat of a capture's clock, None where its clock is fine. `answered`: whether
        a connection of it was seen both ways (evenly spaced times are set only then)."""
        spacing_us = accounting.clock_spacing_us if answered else None
        if accounting.clock_step_us is None and spacing_us is None:
            return None
        return cls(accounting.clock_step_us, spacing_us)

    def warning(self) -> str | None:
        """The capture's warning about times set (the reader words a coarse step)."""
        if self.spacing_us is None:
            return None
        return (f"every packet comes {self.spacing_us / 1000:g} ms after the one before, a "
                "conversation's answers too: the times were set by whatever wrote the capture, "
                "not measured, and no wait in it is evidence")

    def __call__(self, positions: np.ndarray, findings: list[Finding]) -> None:
        for finding in findings:
            if self.spacing_us is not None:  # set times: their step says nothing more
                self._set_times(finding, self.spacing_us / 1000)
            elif self.step_us is not None:
                self._coarse(finding, self.step_us / 1000)

    @staticmethod
    def _set_times(finding: Finding, spacing_ms: float) -> None:
        if len(finding.events) or finding.kind == PHASE_LOCK:
            _at_most(finding, "low", f"every packet of the capture comes {spacing_ms:g} ms "
                                     "after the one before: its times were set, not measured")

    @staticmethod
    def _coarse(finding: Finding, step_ms: float) -> None:
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
    if CONFIDENCE_LEVELS.index(finding.confidence) > CONFIDENCE_LEVELS.index(level):
        finding.confidence = level
    finding.confidence_reasons = [*finding.confidence_reasons, reason]
