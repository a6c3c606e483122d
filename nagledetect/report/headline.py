"""The answer, first: what Nagle cost, else the largest delays and their causes.

One sentence, made once in the document (`headline` there), so the text report's first line, the
HTML banner and the JSON agree word for word; the Nagle family is counted as `check` counts it
(the findings' `count` and `time_lost_s` summed over `kinds.NAGLE_FAMILY`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from nagledetect.detectors import kinds
from nagledetect.detectors.model import StallEvents

LARGEST_DELAYS_SHOWN = 3
FAMILY_NOUNS = {
    kinds.NAGLE_DELACK_STALL: ("Nagle/delayed-ACK stall", "Nagle/delayed-ACK stalls"),
    kinds.NAGLE_RTT_HOLD: ("Nagle hold of one round trip", "Nagle holds of one round trip"),
    kinds.STREAM_COALESCING: ("Nagle stream-coalescing stall", "Nagle stream-coalescing stalls"),
}
CAUSE_WORDS = {
    (kinds.LOSS_RECOVERY, "rto"): "retransmission timeouts",
    (kinds.LOSS_RECOVERY, "fast-retransmit"): "fast retransmits",
    (kinds.LOSS_RECOVERY, "spurious"): "spurious retransmissions",
    (kinds.LOSS_RECOVERY, None): "loss recovery",
    (kinds.ZERO_WINDOW, None): "zero window",
    (kinds.WINDOW_LIMITED, None): "a receive window below what the sender had to send",
    (kinds.HANDSHAKE_RETRY, None): "handshake retries",
    (kinds.THINK_TIME, None): "application think time",
}
"""What each named cause of a delay is called in the headline (by kind and subkind; a subkind
not listed reads as its kind)."""


def duration_text(seconds: float) -> str:
    return f"{seconds * 1000:.1f} ms" if seconds < 1 else f"{seconds:.3f} s"


def plural(count: int, noun: str) -> str:
    return f"{count} {noun}{'' if count == 1 else 's'}"


def cause_words(finding: dict[str, Any]) -> str:
    kind, subkind = finding["kind"], finding.get("subkind")
    return CAUSE_WORDS.get((kind, subkind), CAUSE_WORDS.get((kind, None), kind))


def is_not_nagles(finding: dict[str, Any]) -> bool:
    """Whether a finding says its hold may be no one's Nagle cost (a sender without Nagle, a
    one-way stream no exchange waited on), as the detector says in its details."""
    return bool(finding.get("details", {}).get("not_nagles"))


def is_upper_bound(finding: dict[str, Any]) -> bool:
    """Whether a finding's time lost is an upper bound (holds that cannot be told from paced
    writes, as the detector says in its details)."""
    return bool(finding.get("details", {}).get("time_lost_upper_bound"))


def frames_of(finding: dict[str, Any]) -> tuple[int, int] | None:
    """The first and last frame of a finding's evidence (the first wait's last data, the last
    wait's end), where a user starts looking in Wireshark; None without evidence."""
    events = finding["events"]
    if not len(events):
        return None
    if isinstance(events, StallEvents):
        return int(np.min(events.last_data_frame)), int(np.max(events.released_frame))
    return (min(event["last_data_frame"] for event in events),
            max(event["released_frame"] for event in events))


def headline_entry(family: Sequence[dict[str, Any]], largest: Sequence[dict[str, Any]],
                   scope: str, paths: Sequence[str]) -> dict[str, Any]:
    """The document's headline: the Nagle family's totals (`family`: its findings), the largest
    delays of other named causes (`largest`: the costliest findings of those causes, idle
    excluded, costliest first), and the sentence every report shows. `scope`: the captures and
    connections counted; `paths`: the captures' paths when there are several (findings then
    name their file, since frame numbers are each file's own)."""
    by_kind = {kind: {"stalls": 0, "time_lost_s": 0.0} for kind in kinds.NAGLE_FAMILY}
    directions = set()
    upper_bound_s = not_nagles_s = 0.0
    for finding in family:
        totals = by_kind[finding["kind"]]
        totals["stalls"] += finding["count"]
        totals["time_lost_s"] += finding["time_lost_s"]
        upper_bound_s += finding["time_lost_s"] if is_upper_bound(finding) else 0.0
        not_nagles_s += finding["time_lost_s"] if is_not_nagles(finding) else 0.0
        directions.add((finding["capture"], finding["connection"], finding["sender"]))
    for totals in by_kind.values():
        totals["time_lost_s"] = round(totals["time_lost_s"], 6)
    delays = [_delay_entry(finding) for finding in largest[:LARGEST_DELAYS_SHOWN]]
    nagle = {"stalls": sum(totals["stalls"] for totals in by_kind.values()),
             "time_lost_s": round(sum(totals["time_lost_s"] for totals in by_kind.values()), 6),
             "time_lost_upper_bound_s": round(upper_bound_s, 6),
             "time_lost_not_nagles_s": round(not_nagles_s, 6),
             "connection_directions": len(directions), "by_kind": by_kind}
    return {"text": _sentence(nagle, delays, scope, paths), "nagle_family": nagle,
            "largest_other_delays": delays}


def _delay_entry(finding: dict[str, Any]) -> dict[str, Any]:
    frames = frames_of(finding)
    return {"kind": finding["kind"], "subkind": finding.get("subkind"),
            "capture": finding["capture"], "connection": finding["connection"],
            "time_lost_s": finding["time_lost_s"], "frames": list(frames) if frames else None}


def _sentence(nagle: dict[str, Any], delays: list[dict[str, Any]], scope: str,
              paths: Sequence[str]) -> str:
    if nagle["stalls"]:
        return (f"{_family_count(nagle)} cost {_family_cost(nagle)} on "
                f"{plural(nagle['connection_directions'], 'connection direction')}"
                f"{_family_parts(nagle)} ({scope}).")
    if not delays:
        return f"No Nagle stalls and no other delays found ({scope})."
    named = "; ".join(_delay_words(delay, paths) for delay in delays)
    return f"No Nagle stalls ({scope}). Largest delays: {named}."


def _family_cost(nagle: dict[str, Any]) -> str:
    """The family's time lost; the part of it that is an upper bound, and the part that may be
    no one's Nagle cost, said so in one bracket."""
    cost, notes = _bounded_cost(nagle)
    unsure_s = nagle["time_lost_not_nagles_s"]
    where = "where the sender runs no Nagle or no exchange waited: low"
    if unsure_s:
        notes.append(where if unsure_s >= nagle["time_lost_s"]
                     else f"{duration_text(unsure_s)} of it {where}")
    return f"{cost} ({'; '.join(notes)})" if notes else cost


def _bounded_cost(nagle: dict[str, Any]) -> tuple[str, list[str]]:
    """The family's time lost, "up to" where some of it is an upper bound, and the words for
    that."""
    total_s, bound_s = nagle["time_lost_s"], nagle["time_lost_upper_bound_s"]
    if not bound_s:
        return duration_text(total_s), []
    where = ["where a hold cannot be told from a paced write"]
    if bound_s >= total_s:
        return f"up to {duration_text(total_s)}", where
    return f"{duration_text(total_s - bound_s)} and up to {duration_text(bound_s)} more", where


def _family_count(nagle: dict[str, Any]) -> str:
    present = [kind for kind, totals in nagle["by_kind"].items() if totals["stalls"]]
    if len(present) == 1:
        singular, several = FAMILY_NOUNS[present[0]]
        return f"{nagle['stalls']} {singular if nagle['stalls'] == 1 else several}"
    return plural(nagle["stalls"], "Nagle stall")


def _family_parts(nagle: dict[str, Any]) -> str:
    """Each kind's share, where more than one kind is present."""
    present = [(kind, totals) for kind, totals in nagle["by_kind"].items() if totals["stalls"]]
    if len(present) < 2:
        return ""
    parts = [f"{totals['stalls']} {FAMILY_NOUNS[kind][totals['stalls'] != 1]} "
             f"({duration_text(totals['time_lost_s'])})" for kind, totals in present]
    return ": " + ", ".join(parts)


def _delay_words(delay: dict[str, Any], paths: Sequence[str]) -> str:
    where = f" in {paths[delay['capture']]}" if len(paths) > 1 else ""
    frames = delay["frames"]
    shown = ("" if frames is None else
             f", frame {frames[0]}" if frames[0] == frames[1] else
             f", frames {frames[0]}-{frames[1]}")
    return (f"{cause_words(delay)} {duration_text(delay['time_lost_s'])} on connection "
            f"{delay['connection']}{where}{shown}")
