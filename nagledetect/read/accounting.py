"""What a read of a capture accounts for, shared by every reader: packets read, used and skipped
by reason, and why a read ended early. Its own module, so that the compiled core's path does not
import the Python reader."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

ProgressCallback = Callable[[int, int], None]
"""Told how a read gets on: the packets and the bytes read so far."""


@dataclass(slots=True)
class Accounting:
    """Packets read = TCP packets used + packets skipped, by reason; nothing is dropped silently."""

    path: str
    linktype: int
    packets_read: int = 0
    tcp_packets: int = 0
    skipped: dict[str, int] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    cut_short: str | None = None
    """Why the read ended before the file's end (a damaged or cut record, a compressed stream
    cut short), the packets before it analysed; None when the file was read to its end."""
    clock_step_us: int | None = None
    """The step of the clock that stamped the packets, where it is 1 ms or more (a Windows
    clock's 15.625 ms): no wait is measured closer than that. None for a finer clock."""
    clock_spacing_us: int | None = None
    """The interval every packet came after the one before, where the times were set so (by a
    script that wrote the capture), not measured. None for measured times."""

    def add_skipped(self, reasons: dict[str, int]) -> None:
        for reason, count in reasons.items():
            self.skipped[reason] = self.skipped.get(reason, 0) + count

    @property
    def balanced(self) -> bool:
        return self.packets_read == self.tcp_packets + sum(self.skipped.values())
