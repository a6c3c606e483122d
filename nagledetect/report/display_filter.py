"""The Wireshark display filter that shows a finding's evidence.

A connection's id is Wireshark's tcp.stream of its capture and evidence frames are the file's
frame numbers, so `tcp.stream eq 3 && frame.number in {40..42, 45..47}` selects exactly the
frames a finding names. Runs of consecutive frames are written as ranges; set elements are
separated by commas, the syntax Wireshark 3.6 and later accept (4.0 rejects blanks alone).
"""

from __future__ import annotations

import numpy as np

from nagledetect.detectors.model import StallEvents

MAX_FRAME_RUNS = 64
"""Runs of consecutive frames listed one by one (about 700 characters at most, which pastes
into Wireshark's filter bar); past that, the stream and the span from first to last frame."""
MAX_EVENTS_LISTED = 1024
"""Findings with more events are given the span without sorting their frames: three frames
an event hardly ever collapse into MAX_FRAME_RUNS runs, and a finding may have millions."""


def display_filter(connection: int, events: StallEvents) -> str:
    """The filter for a finding on connection (tcp.stream) `connection` with these events:
    its evidence frames exactly, or all of the stream's frames between the first and the last
    of them; the stream alone without evidence frames."""
    stream = f"tcp.stream eq {connection}"
    if not len(events):
        return stream
    if len(events) > MAX_EVENTS_LISTED:
        first = int(min(events.last_data_frame.min(), events.ack_frame.min()))
        last = int(max(events.released_frame.max(), events.ack_frame.max()))
        return f"{stream} && frame.number in {{{first}..{last}}}"
    frames = sorted(set(np.concatenate((events.last_data_frame, events.ack_frame,
                                        events.released_frame)).tolist()))
    while frames and frames[0] <= 0:  # 0: no such packet (sorted first)
        frames.pop(0)
    if not frames:
        return stream
    starts, ends = _runs(frames)
    if len(starts) > MAX_FRAME_RUNS:
        return f"{stream} && frame.number in {{{starts[0]}..{ends[-1]}}}"
    runs = ", ".join(str(start) if start == end else f"{start}..{end}"
                     for start, end in zip(starts, ends))
    return f"{stream} && frame.number in {{{runs}}}"


def _runs(frames: list[int]) -> tuple[list[int], list[int]]:
    """The first and last frame of each run of consecutive frames (`frames` sorted, distinct;
    at most MAX_EVENTS_LISTED events' worth, so Python lists cost less than numpy calls)."""
    starts, ends = [frames[0]], []
    for previous, frame in zip(frames, frames[1:]):
        if frame != previous + 1:
            ends.append(previous)
            starts.append(frame)
    ends.append(frames[-1])
    return starts, ends
