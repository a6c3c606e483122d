"""Segment parity (seed 000 section 8, seed 001): does a message's segment count decide its stall?

Each message needs ceil(bytes / MSS) segments. A receiver that ACKs every second full segment
leaves the last of an odd run of full segments waiting for its delayed-ACK timer; a classic-Nagle
sender holds a partial tail behind it. So messages of 2N segments with a partial last segment
stall, while 2N+1 segments or a full last segment do not. The table gives each class's message
count and stall rate; a finding is made when stalls concentrate in one class. For fixed-size
messages it spells out the arithmetic (full segments + remainder) and the nearest sizes that
would not stall: a whole number of full segments, below and above.
"""

from __future__ import annotations

import numpy as np

from nagledetect.detectors.model import DetectorInput, Finding, released_frames
from nagledetect.detectors.nagle_stall import KIND as STALL_KIND
from nagledetect.detectors.nagle_stall import UNTIMED_STALLS, untimed_of_segments
from nagledetect.flows.connections import direction_key
from nagledetect.flows.grouped import KeyGroups, distinct, found_in_sorted
from nagledetect.table import Table

KIND = "segment-parity"
MIN_MESSAGES = 3
CONCENTRATION = 0.8
FIXED_SIZE_SHARE = 0.8
SEGMENT_COUNT_CLASSES = np.array(["even", "odd"], dtype=object)
LAST_SEGMENT_CLASSES = np.array(["full", "partial"], dtype=object)
"""Each row's class names one of these strings (a string made per row took 110 bytes a row,
100 MB of a capture with a million connections)."""


def stalled_messages(columns: DetectorInput) -> np.ndarray:
    """Messages that contain the released segment of a stall found earlier: looked up by
    frame among the segments that passed the stall's packet tests, which every released one
    did (in frame order, one row per frame). The last reader of that table: it goes after."""
    released = released_frames(columns.earlier_findings, (STALL_KIND,))
    untimed = columns.taken(UNTIMED_STALLS, untimed_of_segments)
    if not len(untimed["frame"]):
        return np.zeros(0, dtype=np.int64)
    position, found = found_in_sorted(untimed["frame"], released)
    return distinct(untimed["message"][position[found]])


def parity_table(columns: DetectorInput) -> Table:
    """Per connection, direction and class (odd/even segments, last full/partial): messages and
    the share of them that stalled. Only messages of two or more segments are classed. Made
    once for the detector and the document (it reads only the stall findings)."""
    return columns.shared("parity_table", _parity_table)


def _parity_table(columns: DetectorInput) -> Table:
    messages = columns.messages
    classed = np.flatnonzero(messages["segments_needed"] >= 2)

    def column(name: str) -> np.ndarray:
        return messages[name][classed]

    groups = KeyGroups(column("connection"), column("direction"),
                       column("odd_segments").astype(bool),
                       ~column("last_segment_full").astype(bool))
    count = groups.sizes.astype(np.int64)
    stalled = groups.sum(np.isin(column("message"), stalled_messages(columns)))
    return Table({
        "connection": groups.keys[0], "direction": groups.keys[1],
        "segments": SEGMENT_COUNT_CLASSES[groups.keys[2].astype(np.intp)],
        "last_segment": LAST_SEGMENT_CLASSES[groups.keys[3].astype(np.intp)],
        "messages": count, "stalled": stalled, "stall_rate": stalled / count})


def fixed_size_arithmetic(sizes: np.ndarray, mss: int) -> dict | None:
    """Seed 001's arithmetic for a direction whose messages mostly have one size (at least
    `FIXED_SIZE_SHARE` of them, so no other size ties with it)."""
    if not len(sizes):
        return None
    values, counts = np.unique(sizes, return_counts=True)
    most = int(np.argmax(counts))
    size = int(values[most])
    if counts[most] < FIXED_SIZE_SHARE * len(sizes) or size < mss:
        return None
    full, remainder = divmod(size, mss)
    return {"message_bytes": size, "mss": mss, "full_segments": full, "remainder_bytes": remainder,
            "segments": full + (remainder > 0),
            "stalls_with_ack_every_second_segment": remainder > 0 and full % 2 == 1,
            "nearest_smaller_ok_bytes": full * mss, "nearest_larger_ok_bytes": (full + 1) * mss}


def detect(columns: DetectorInput) -> list[Finding]:
    table = parity_table(columns)
    directions = KeyGroups(table["connection"], table["direction"])
    stalled = directions.sum(table["stalled"])
    kept = np.flatnonzero((directions.sum(table["messages"]) >= MIN_MESSAGES)
                          & (stalled != 0))
    if not len(kept):
        return []
    messages = columns.messages
    messages = messages.select(["connection", "direction", "mss", "bytes"]).take(
        np.isin(direction_key(messages), direction_key(table)[directions.first[kept]]))
    by_direction = KeyGroups(messages["connection"], messages["direction"])
    in_direction_order = by_direction.rows_of(np.arange(len(messages)))
    class_rows = directions.slices()
    findings = []
    for index, rows in zip(kept.tolist(), by_direction.slices()):
        finding = _finding(columns, table.take(class_rows[index]),
                           messages.take(in_direction_order[rows]))
        if finding:
            findings.append(finding)
    return findings


def _finding(columns: DetectorInput, classes: Table, messages: Table) -> Finding | None:
    """The finding of one direction whose stalls concentrate in one class (`classes`: its
    rows of the parity table), or None."""
    rates = classes["stall_rate"]
    worst_row = int(np.argmax(rates))
    others = np.arange(len(classes)) != worst_row
    worst = classes.take(slice(worst_row, worst_row + 1)).records()[0]
    other_rate = (classes["stalled"][others].sum()
                  / classes["messages"][others].sum()) if others.any() else 0.0
    if worst["stall_rate"] < CONCENTRATION or other_rate > 1 - CONCENTRATION:
        return None
    connection, direction = int(worst["connection"]), int(worst["direction"])
    mss = int(messages["mss"][0])
    arithmetic = fixed_size_arithmetic(messages["bytes"], mss)
    sender, receiver = columns.direction_names()[(connection, direction)]
    summary = (f"{int(worst['stalled'])} of {int(worst['messages'])} messages with "
               f"{worst['segments']} segment counts and a {worst['last_segment']} last segment "
               f"stalled, against {other_rate * 100:.0f}% of the others")
    if arithmetic:
        summary += (f"; {arithmetic['message_bytes']:,} bytes = {arithmetic['full_segments']} x "
                    f"{mss} + {arithmetic['remainder_bytes']}: "
                    f"{arithmetic['nearest_smaller_ok_bytes']:,} or "
                    f"{arithmetic['nearest_larger_ok_bytes']:,} bytes would not stall")
    return Finding(
        kind=KIND, connection=connection, sender=sender, receiver=receiver,
        count=int(worst["stalled"]), time_lost_s=0.0, share=0.0,
        confidence="high" if worst["messages"] >= 10 else "medium",
        confidence_reasons=[f"stall rate {worst['stall_rate'] * 100:.0f}% in one class, "
                            f"{other_rate * 100:.0f}% in the others"],
        advice=["double-buffer", "resize-message", "single-write-nodelay"],
        details={"classes": classes.without(["connection", "direction"]).records(),
                 "arithmetic": arithmetic},
        summary=summary)
