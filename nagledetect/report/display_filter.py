"""The Wireshark display filter that shows a finding's evidence.

A connection's id is Wireshark's tcp.stream of its capture and evidence frames are the file's
frame numbers, so `tcp.stream eq 3 && frame.number in {40..42, 45..47}` selects exactly the
frames a finding names. Runs of consecutive frames are written as ranges; set elements are
separated by commas, the syntax Wireshark 3.6 and later accept (4.0 rejects blanks alone).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from nagledetect import _core
from nagledetect.detectors.model import StallEvents, joined_columns

MAX_FRAME_RUNS = 64
"""Runs of consecutive frames listed one by one (about 700 characters at most, which pastes
into Wireshark's filter bar); past that, the stream and the span from first to last frame."""
MAX_EVENTS_LISTED = 1024
"""Findings with more events are given the span without sorting their frames: three frames
an event hardly ever collapse into MAX_FRAME_RUNS runs, and a finding may have millions."""


def display_filter(connection: int, events: StallEvents) -> str:
    """The filter for a finding on connection (tcp.stream) `connection` with these events:
    its evidence frames exactly, or all of the stream's frames between the first and the last
    of them; the stream alone without evidence frames (frame 0: no such packet)."""
    return display_filters([connection], [events])[0]


def display_filters(connections: Sequence[int], events: Sequence[StallEvents]) -> list[str]:
    """`display_filter` of many findings at once, made by the compiled core
    (`core/src/display_filter.rs`): a finding's filter took a third of the time of writing
    the JSON document of a capture with a hundred thousand findings."""
    frames = [column.astype(np.int64, copy=False) for column in
              joined_columns(events, ("last_data_frame", "ack_frame", "released_frame"))]
    return _core.display_filters(list(connections), [len(rows) for rows in events], *frames,
                                 MAX_EVENTS_LISTED, MAX_FRAME_RUNS)
