"""A message's pauses between consecutive full segments, and its final flight, before each
segment.

A congestion window in slow start sends a message in flights an ACK apart: full segments, a
pause of about a round trip, more full segments, each flight leaving at once. A small tail
after the last flight waits for the window whatever Nagle does, and is released by the first
ACK of that flight, which comes with the rest of the flight's ACKs. Two things tell it apart
from a tail Nagle held (`nagle_stall._sent_in_flights`):

- the longest pause between two consecutive full segments of the message (`full_gap_us`):
  full segments that streamed without a pause of half a round trip had the ACK clock running;
- the final flight, from the latest pause at least half that long (`final_flight_us`: how long
  it had been going out at the data before the tail, from its second segment on, as the
  receiver's first ACK of it covers two). A flight that took a while to go out is acknowledged
  a while too, and any of its ACKs before the last would have let a window-held tail go.

Pauses next to a small segment are left out: the stall itself is one, and a small first write
is no flight. A part read a slice at a time carries each direction's latest segment, with its
message's pauses so far, to the next slice.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from nagledetect.flows.grouped import grouped_cummax, last_per_key, previous_in_group

READ = ("connection", "direction", "message", "frame", "time_us", "tail_bytes")
"""The segment columns the pauses are read from."""
STATE = ("longest_us", "flight_opened", "flight_second_us")
"""What a carried segment brings of its message: the longest pause so far, whether a flight
began at it, and the time of the final flight's second segment (-1: none yet)."""
NONE = -1


class FullSegmentGaps:
    """Feed the segments slice by slice, in frame order (`of`); one instance per run."""

    def __init__(self) -> None:
        self._carried: dict[str, np.ndarray] | None = None

    def of(self, segments: Any) -> tuple[np.ndarray, np.ndarray]:
        """Each segment's `full_gap_us` and `final_flight_us` (0: none), in microseconds, in
        the segments' row order."""
        count = len(np.asarray(segments["frame"]))
        columns = {name: np.asarray(segments[name]) for name in READ}
        columns.update(longest_us=np.zeros(count, dtype=np.int64),
                       flight_opened=np.zeros(count, dtype=bool),
                       flight_second_us=np.full(count, NONE, dtype=np.int64))
        if self._carried is not None:
            columns = {name: np.concatenate([self._carried[name], values.astype(
                self._carried[name].dtype)]) for name, values in columns.items()}
        carried = len(columns["frame"]) - count
        order = np.lexsort((columns["frame"], columns["message"], columns["connection"]))
        ordered = {name: values[order] for name, values in columns.items()}
        ordered["carried"] = order < carried
        after = _state_after(ordered)
        self._carry(ordered, after)
        before = _before(ordered, after)
        found = [np.empty(len(order), dtype=np.int64) for _ in before]
        for values, ordered_values in zip(found, before):
            values[order] = ordered_values
        return found[0][carried:], found[1][carried:]

    def _carry(self, ordered: dict[str, np.ndarray], after: dict[str, np.ndarray]) -> None:
        """Keep each direction's latest segment, with its message's pauses so far."""
        key = ordered["connection"].astype(np.int64) * 2 + ordered["direction"]
        # Rows go by message within a connection, and a direction's messages by frame.
        last = last_per_key(key, np.arange(len(key)), int(key.max(initial=-1)) + 1)
        last = last[last >= 0]
        self._carried = {name: ordered[name][last] for name in READ}
        self._carried.update((name, after[name][last]) for name in STATE)


def _state_after(ordered: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Over rows in (connection, message, frame) order, each message's `STATE` once the row is
    taken (a carried row brings its message's so far)."""
    count = len(ordered["frame"])
    position = np.arange(count)
    same = np.r_[False, (ordered["connection"][1:] == ordered["connection"][:-1])
                 & (ordered["message"][1:] == ordered["message"][:-1])] if count else position > 0
    full = ordered["tail_bytes"] == 0
    time_us = ordered["time_us"]
    pause = np.zeros(count, dtype=np.int64)
    pause[1:] = np.diff(time_us)
    pause = np.where(same & full & np.r_[False, full[:-1]], pause, 0)
    starts = ~same
    longest = grouped_cummax(np.maximum(pause, ordered["longest_us"]), starts)
    carried = ordered["carried"]
    opened = (pause > 0) & (2 * pause >= longest) | (carried & ordered["flight_opened"])
    anchor = grouped_cummax(np.where(opened, position, NONE), starts)
    fixed = carried & (ordered["flight_second_us"] != NONE)
    # The flight's second: the row after the latest opening, else the one a carried row knew.
    second_row = np.minimum(anchor + 1, max(count - 1, 0))
    second_us = np.where(anchor >= 0, np.where(anchor < position, time_us[second_row], NONE),
                         NONE)
    known = grouped_cummax(np.where(fixed, position, NONE), starts)
    from_carried = (anchor < known) & (known >= 0)
    second_us = np.where(from_carried, ordered["flight_second_us"][np.maximum(known, 0)],
                         second_us)
    return {"longest_us": longest, "flight_opened": (anchor == position) & ~from_carried,
            "flight_second_us": second_us, "starts": starts}


def _before(ordered: dict[str, np.ndarray], after: dict[str, np.ndarray]
            ) -> tuple[np.ndarray, np.ndarray]:
    """Each row's message's longest pause and final flight before it: the state after the
    row before it, in the same message."""
    starts = after["starts"]
    if not len(starts):
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    second_us = previous_in_group(after["flight_second_us"], starts, NONE)
    latest_us = previous_in_group(ordered["time_us"], starts, 0)
    flight = np.where(second_us != NONE, np.maximum(latest_us - second_us, 0), 0)
    return previous_in_group(after["longest_us"], starts, 0), flight
