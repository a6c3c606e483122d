"""What detectors read and what they return.

Every connection detector has the same shape: `detect(columns: DetectorInput) -> list[Finding]`.
`DetectorInput` holds the columns of a set of connections (all of a capture at once, so the work
stays vectorised), the host profiles that the delayed-ACK fingerprint produced first, and the
findings of detectors that ran earlier in the registry (the stall-cause detector needs them).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pandas as pd


@dataclass
class StallEvent:
    """One stall, proven by three frames: the last data before the hold, the delayed ACK (or
    whatever ended the wait), and the released segment."""

    last_data_frame: int
    ack_frame: int
    released_frame: int
    stall_s: float
    start_s: float
    ack_delay_ms: float | None = None
    reaction_ms: float | None = None

    def as_dict(self) -> dict[str, Any]:
        return {
            "last_data_frame": self.last_data_frame,
            "delayed_ack_frame": self.ack_frame,
            "released_frame": self.released_frame,
            "stall_s": round(self.stall_s, 6),
            "start_s": round(self.start_s, 6),
            "ack_delay_ms": None if self.ack_delay_ms is None else round(self.ack_delay_ms, 3),
            "reaction_ms": None if self.reaction_ms is None else round(self.reaction_ms, 3),
        }


@dataclass
class Finding:
    """A diagnosis for one connection (or one host, for phase locking), with its evidence."""

    kind: str
    connection: int
    sender: str | None
    receiver: str | None
    count: int
    time_lost_s: float
    share: float
    confidence: str
    confidence_reasons: list[str]
    events: list[StallEvent] = field(default_factory=list)
    advice: list[str] = field(default_factory=list)
    subkind: str | None = None
    details: dict[str, Any] = field(default_factory=dict)
    summary: str = ""


@dataclass
class HostProfile:
    """What one host's ACKs tell: its delayed-ACK timer, and whether it ticks on a global clock."""

    address: str
    delack_timer_ms: float | None
    delack_spread_ms: float | None
    delack_samples: int
    stack_family: str
    delays_ms: list[float] = field(default_factory=list)
    ack_times_s: list[float] = field(default_factory=list)
    ack_connections: list[int] = field(default_factory=list)
    phase_lock: dict[str, Any] | None = None


@dataclass
class DetectorInput:
    """The columns every detector reads, for all connections of one capture."""

    packets: pd.DataFrame
    connections: pd.DataFrame
    segments: pd.DataFrame
    messages: pd.DataFrame
    hosts: dict[str, HostProfile]
    earlier_findings: list[Finding] = field(default_factory=list)
    _rows: dict[int, Any] | None = field(default=None, repr=False)

    def connection_row(self, connection: int) -> Any:
        """The connection's row (a namedtuple), looked up in a table built once."""
        if self._rows is None:
            self._rows = {int(row.id): row for row in self.connections.itertuples(index=False)}
        return self._rows[int(connection)]
