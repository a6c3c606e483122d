"""The words of one stall's evidence, as every report says them (text, HTML, the packet
comments of an annotated capture): the ACK's hold or gap, the sender's reaction, the line of
three frames."""

from __future__ import annotations

from typing import Any

from nagledetect.detectors import kinds
from nagledetect.report.headline import duration_text

ROUND_TRIP_SHOWN_MS = 1.0
"""A frames' gap this much over the hold shows the round trip beside it."""


def reaction_text(milliseconds: float) -> str:
    """How soon the held data left after the ACK: microseconds when the sender sits by the tap
    (tens of them), milliseconds when the tap is a round trip away from it."""
    return f"{milliseconds * 1000:.0f} us" if milliseconds < 1 else f"{milliseconds:.1f} ms"


def ack_note(kind: str, event: dict[str, Any]) -> str:
    """What the ACK of a stall shows: for a hold of one round trip, the ordinary ACK's gap
    after the last data (the ACK is not delayed: there is no hold of the receiver's); else the
    delayed ACK's hold, and, where the capture was taken away from the receiver, its gap after
    the last data as the frames show it, the hold plus the round trip (the frames' gap, not
    the hold, is what Wireshark's times give)."""
    if kind == kinds.NAGLE_RTT_HOLD:
        if event.get("reaction_ms") is None:
            return ""
        return f" (+{event['stall_s'] * 1000 - event['reaction_ms']:.1f} ms, not delayed)"
    hold_ms = event.get("ack_delay_ms")
    if hold_ms is None:
        return ""
    if event.get("reaction_ms") is not None:
        gap_ms = round(event["stall_s"] * 1000 - event["reaction_ms"], 1)
        if gap_ms - round(hold_ms, 1) >= ROUND_TRIP_SHOWN_MS:
            return (f" (+{gap_ms:.1f} ms: {hold_ms:.1f} ms hold + "
                    f"{gap_ms - round(hold_ms, 1):.1f} ms round trip)")
    return f" (+{hold_ms:.1f} ms hold)"


def evidence_line(kind: str, event: dict[str, Any], arrow: str = "->") -> str:
    """One event as a line: a stall's three frames (last data, ACK, released), a gap's two
    (nothing released it: there is no ACK frame to show)."""
    stall = duration_text(event["stall_s"])
    if event["delayed_ack_frame"] == event["released_frame"]:
        return (f"frame {event['last_data_frame']} last data {arrow} frame "
                f"{event['released_frame']} next data: gap {stall}")
    reaction = (f" (+{reaction_text(event['reaction_ms'])})"
                if event.get("reaction_ms") is not None else "")
    return (f"frame {event['last_data_frame']} last data {arrow} frame "
            f"{event['delayed_ack_frame']} ACK{ack_note(kind, event)} {arrow} frame "
            f"{event['released_frame']} released{reaction}: stall {stall}")
