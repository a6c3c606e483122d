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
import pandas as pd

from nagledetect.detectors.model import DetectorInput, Finding, released_frames
from nagledetect.detectors.nagle_stall import KIND as STALL_KIND

KIND = "segment-parity"
MIN_MESSAGES = 3
CONCENTRATION = 0.8
FIXED_SIZE_SHARE = 0.8


def stalled_messages(columns: DetectorInput) -> set[int]:
    """Messages that contain the released segment of a stall found earlier (looked up by
    frame: segments are in frame order, one row per frame)."""
    released = released_frames(columns.earlier_findings, (STALL_KIND,))
    frame = columns.segments["frame"].to_numpy()
    if not len(frame):
        return set()
    position = np.minimum(np.searchsorted(frame, released), len(frame) - 1)
    found = position[frame[position] == released]
    return set(columns.segments["message"].to_numpy()[found].tolist())


def parity_table(columns: DetectorInput) -> pd.DataFrame:
    """Per connection, direction and class (odd/even segments, last full/partial): messages and
    the share of them that stalled. Only messages of two or more segments are classed. Made
    once for the detector and the document (it reads only the stall findings)."""
    return columns.shared("parity_table", _parity_table)


def _parity_table(columns: DetectorInput) -> pd.DataFrame:
    messages = columns.messages
    if messages.empty:
        return pd.DataFrame(columns=["connection", "direction", "segments", "last_segment",
                                     "messages", "stalled", "stall_rate"])
    stalled = stalled_messages(columns)
    classed = messages[messages["segments_needed"] >= 2].assign(
        segments=lambda t: t["odd_segments"].map({True: "odd", False: "even"}),
        last_segment=lambda t: t["last_segment_full"].map({True: "full", False: "partial"}),
        stalled=lambda t: t["message"].isin(stalled))
    table = classed.groupby(["connection", "direction", "segments", "last_segment"]).agg(
        messages=("message", "size"), stalled=("stalled", "sum")).reset_index()
    table["stall_rate"] = table["stalled"] / table["messages"]
    return table


def fixed_size_arithmetic(sizes: pd.Series, mss: int) -> dict | None:
    """Seed 001's arithmetic for a direction whose messages mostly have one size."""
    if sizes.empty:
        return None
    common = sizes.value_counts()
    size = int(common.index[0])
    if common.iloc[0] < FIXED_SIZE_SHARE * len(sizes) or size < mss:
        return None
    full, remainder = divmod(size, mss)
    return {"message_bytes": size, "mss": mss, "full_segments": full, "remainder_bytes": remainder,
            "segments": full + (remainder > 0),
            "stalls_with_ack_every_second_segment": remainder > 0 and full % 2 == 1,
            "nearest_smaller_ok_bytes": full * mss, "nearest_larger_ok_bytes": (full + 1) * mss}


def _stalled_directions(table: pd.DataFrame) -> pd.DataFrame:
    """The table's rows of directions with enough classed messages and at least one stall, the
    only ones that can make a finding (found for all at once: most directions have none)."""
    totals = table.groupby(["connection", "direction"])[["messages", "stalled"]].transform("sum")
    return table[(totals["messages"] >= MIN_MESSAGES) & (totals["stalled"] != 0)]


def detect(columns: DetectorInput) -> list[Finding]:
    table = parity_table(columns)
    names = columns.direction_names()
    findings = []
    for (connection, direction), rows in _stalled_directions(table).groupby(
            ["connection", "direction"]):
        worst = rows.sort_values("stall_rate", ascending=False).iloc[0]
        others = rows.drop(worst.name)
        other_rate = (others["stalled"].sum() / others["messages"].sum()) if len(others) else 0.0
        if worst["stall_rate"] < CONCENTRATION or other_rate > 1 - CONCENTRATION:
            continue
        messages = columns.messages[(columns.messages["connection"] == connection)
                                    & (columns.messages["direction"] == direction)]
        mss = int(messages["mss"].iloc[0])
        arithmetic = fixed_size_arithmetic(messages["bytes"], mss)
        sender, receiver = names[(int(connection), int(direction))]
        summary = (f"{int(worst['stalled'])} of {int(worst['messages'])} messages with "
                   f"{worst['segments']} segment counts and a {worst['last_segment']} last segment "
                   f"stalled, against {other_rate * 100:.0f}% of the others")
        if arithmetic:
            summary += (f"; {arithmetic['message_bytes']:,} bytes = {arithmetic['full_segments']} x "
                        f"{mss} + {arithmetic['remainder_bytes']}: "
                        f"{arithmetic['nearest_smaller_ok_bytes']:,} or "
                        f"{arithmetic['nearest_larger_ok_bytes']:,} bytes would not stall")
        findings.append(Finding(
            kind=KIND, connection=int(connection), sender=sender, receiver=receiver,
            count=int(worst["stalled"]), time_lost_s=0.0, share=0.0,
            confidence="high" if worst["messages"] >= 10 else "medium",
            confidence_reasons=[f"stall rate {worst['stall_rate'] * 100:.0f}% in one class, "
                                f"{other_rate * 100:.0f}% in the others"],
            advice=["double-buffer", "resize-message", "single-write-nodelay"],
            details={"classes": rows.drop(columns=["connection", "direction"]).to_dict("records"),
                     "arithmetic": arithmetic},
            summary=summary))
    return findings
