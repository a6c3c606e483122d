"""A batch of raw packets as a reader hands it to the decoder."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass
class RawBatch:
    """One batch: the packet bytes (padded) and, per packet, where it is and when it came; all
    of one link type (a pcapng file's interfaces may differ, and its batches then follow
    them)."""

    buf: np.ndarray
    offsets: np.ndarray
    caplens: np.ndarray
    time_us: np.ndarray
    first_frame: int
    linktype: int

    def __len__(self) -> int:
        return len(self.offsets)
