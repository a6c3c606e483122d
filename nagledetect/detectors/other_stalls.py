"""Every other gap, named so it is not blamed on Nagle (SPEC section 4.8).

Each gap of 10 ms or more between consecutive timeline packets of a connection (new data,
retransmissions, SYNs, probes: `events.gaps`) gets exactly one cause, the first that holds:
a Nagle-family stall already found (its released segment ends the gap: left to that finding);
handshake retry (the gap ends in a retransmitted SYN or SYN/ACK, or in the answer to one);
zero window (the peer advertised a zero window in the gap, or its latest window before a probe
or keep-alive was zero, or the gap ends in a zero-window probe: data sent past a closed window
is dropped, so a retransmission that ends such a gap follows from the window); loss recovery
(the gap ends in a retransmission: `spurious` where the peer had acknowledged the original
before the retransmission, or acknowledged it sooner after than the round trip beyond the tap
allows; `fast-retransmit` where the peer sent dup ACKs in the gap; else `rto`); window limited (a non-zero
window of the peer in the gap could not take the segment that ends it); think time (the
server answered the client, or a side sent its first data after the handshake); idle (the
rest: nobody was waiting for anything). Think time and idle are named only beyond four round
trips: a shorter gap is the path's own time; where the handshake measured the round trip,
think time beyond the least the path takes and a margin, its time lost the gap less that
path (`_least_path_us`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from nagledetect.detectors.kinds import (
    HANDSHAKE_RETRY,
    IDLE,
    LOSS_RECOVERY,
    NAGLE_DELACK_STALL,
    NAGLE_FAMILY,
    OTHER_GAP_CAUSES,
    THINK_TIME,
    WINDOW_LIMITED,
    ZERO_WINDOW,
)
from nagledetect.detectors.model import (
    DetectorInput,
    Finding,
    counted_ms,
    released_frames,
    split_events,
)
from nagledetect.events.gaps import (
    EVENT,
    GAP_MIN_US,
    GAP_PACKET_COLUMNS,
    NO_SENT_END,
    GapsBySlice,
)
from nagledetect.flows.connections import by_connection, rtt_measured, seen_one_way
from nagledetect.flows.grouped import KeyGroups
from nagledetect.table import Table

GAP_MIN_MS = GAP_MIN_US / 1000
RTT_MULTIPLE = 4
Namer = Callable[..., None]
"""`gap_causes`' naming step: (gaps selected, their cause, the frames that show it or None)."""
CAUSES = OTHER_GAP_CAUSES
GAP_CAUSES = tuple(sorted((
    (HANDSHAKE_RETRY, "retried"), (HANDSHAKE_RETRY, "unanswered"), (IDLE, ""),
    (LOSS_RECOVERY, "fast-retransmit"), (LOSS_RECOVERY, "rto"), (LOSS_RECOVERY, "spurious"),
    (NAGLE_DELACK_STALL, ""), (THINK_TIME, "after-handshake"), (THINK_TIME, "response"),
    (WINDOW_LIMITED, "below-mss"), (WINDOW_LIMITED, "below-data"),
    (ZERO_WINDOW, "never-reopened"), (ZERO_WINDOW, "reopened"))))
"""What can end a gap, as (kind, subkind), in name order (as findings group); a Nagle-family
stall's gap is left to its finding."""
_CODE = {cause: code for code, cause in enumerate(GAP_CAUSES)}
_THINK_CODES = [_CODE[(THINK_TIME, "response")], _CODE[(THINK_TIME, "after-handshake")]]
"""Think time's codes: an answer, and a side's first data after the handshake."""
DESCRIPTIONS = {
    (HANDSHAKE_RETRY, "retried"): "retransmitted its SYN or SYN/ACK before the handshake "
                                  "completed",
    (HANDSHAKE_RETRY, "unanswered"): "retransmitted its SYN, never answered",
    (IDLE, ""): "had nothing to send (paced writes or pauses between messages)",
    (LOSS_RECOVERY, "fast-retransmit"): "waited for lost data, retransmitted after dup ACKs",
    (LOSS_RECOVERY, "rto"): "waited for a retransmission timeout to resend unacknowledged data",
    (LOSS_RECOVERY, "spurious"): "waited for a retransmission the peer did not need (it had "
                                 "the original)",
    (THINK_TIME, "after-handshake"): "waited after the handshake for the first data",
    (THINK_TIME, "response"): "waited for the server's application to answer",
    (WINDOW_LIMITED, "below-mss"): "waited while the receiver's window was below one segment",
    (WINDOW_LIMITED, "below-data"): "waited while the receiver's window was too small for the "
                                    "next segment",
    (ZERO_WINDOW, "never-reopened"): "waited while the receiver's window was zero; it never "
                                     "reopened in the capture",
    (ZERO_WINDOW, "reopened"): "waited while the receiver's window was zero, until it reopened",
}
ADVICE = {HANDSHAKE_RETRY: ["look-handshake"], LOSS_RECOVERY: ["look-loss"],
          ZERO_WINDOW: ["look-receiver"], WINDOW_LIMITED: ["look-receiver"],
          THINK_TIME: ["look-application"], IDLE: []}
REASONS = {
    (HANDSHAKE_RETRY, "retried"): "a SYN or SYN/ACK retransmission ends each gap",
    (HANDSHAKE_RETRY, "unanswered"): "SYN retransmissions end each gap; no SYN/ACK and no "
                                     "packet of the server in the capture",
    (IDLE, ""): "no side was waiting: the same side sent again, or a keep-alive",
    (LOSS_RECOVERY, "fast-retransmit"): "the peer's dup ACKs came before the retransmission "
                                        "that ends each gap",
    (LOSS_RECOVERY, "rto"): "a retransmission ends each gap, without dup ACKs before it",
    (LOSS_RECOVERY, "spurious"): "the peer acknowledged the original before the retransmission, "
                                 "or sooner after it than the round trip beyond the tap, or "
                                 "reported the retransmission as a duplicate (D-SACK, RFC 2883)",
    (THINK_TIME, "after-handshake"): "the first data after the handshake ends each gap",
    (THINK_TIME, "response"): "the server's data ends a wait that began with the client's",
    (WINDOW_LIMITED, "below-mss"): "the peer's non-zero window in the gap was below one MSS "
                                   "and could not take the segment that ends it, or the peer's "
                                   "closed window reopened only below one MSS",
    (WINDOW_LIMITED, "below-data"): "the peer's window in the gap could not take the segment "
                                    "that ends it (it may also have been written late)",
    (ZERO_WINDOW, "never-reopened"): "the peer advertised a zero window in each gap, or the "
                                     "gap ends in a zero-window probe; no data followed the "
                                     "last probe",
    (ZERO_WINDOW, "reopened"): "the peer advertised a zero window in each gap, or the gap ends "
                               "in a zero-window probe; data followed once it reopened",
}
CONFIDENCE = {(WINDOW_LIMITED, "below-data"): "medium"}
ONE_WAY_REASON = ("the capture holds one direction of this connection: the gap may hold the "
                  "other side's unseen packets (an answer, its delay) and a round trip it "
                  "cannot measure")
"""Why think time on a connection seen one way only is of low confidence: whose time it was,
the capture cannot tell."""

GAP_ROWS = "gap_rows"
"""The shared table of the gaps (`DetectorInput.shared`): a part read a slice at a time hands
it over made from its slices (`events.gaps.GapsBySlice`)."""


def gaps_of_packets(columns: DetectorInput) -> dict[str, np.ndarray]:
    """The maker of `GAP_ROWS` where the packet table is held (a whole run): its packets as
    one slice."""
    gaps = GapsBySlice(len(columns.connections))
    gaps.add(columns.packets.select(GAP_PACKET_COLUMNS), columns.sack_blocks)
    return gaps.gaps()


def classify_gaps(columns: DetectorInput) -> dict[str, np.ndarray]:
    """The gaps, each with its cause (`cause`, its code in `GAP_CAUSES`), its cause's frame
    (`cause_frame`) and length (`gap_s`), think time and idle the path may explain left out
    (`_path_time`)."""
    gaps = columns.taken(GAP_ROWS, gaps_of_packets)
    released = released_frames(columns.earlier_findings, NAGLE_FAMILY)
    return gap_causes(gaps, columns.connections, released)


def gap_causes(gaps: dict[str, np.ndarray], connections: Table,
               released: np.ndarray) -> dict[str, np.ndarray]:
    """Each gap's cause: the last rule below that holds wins (they are in reverse order of
    precedence), with the frame that shows it."""
    connection = gaps["connection"]
    after, before = gaps["after_kind"], gaps["before_kind"]
    count = len(connection)
    cause = np.full(count, _CODE[(IDLE, "")])
    cause_frame = gaps["after_frame"].copy()
    new_data = after == EVENT["new_data"]
    handshake = np.isin(before, [EVENT["syn"], EVENT["syn_retry"]])

    def named(mask: np.ndarray, code: tuple[str, str], frame: np.ndarray | None = None) -> None:
        cause[mask] = _CODE[code]
        cause_frame[mask] = (gaps["after_frame"] if frame is None else frame)[mask]

    answers = (gaps["before_direction"] == 0) & (gaps["after_direction"] == 1) & new_data
    named(answers, (THINK_TIME, "response"))
    named(handshake & new_data, (THINK_TIME, "after-handshake"))
    _window_limited(gaps, connections, named)
    _loss_recovery(gaps, connections, named)
    _zero_window(gaps, named)
    _reopened_below_mss(gaps, connections, named)
    # Answered: the SYN/ACK or any server packet was captured, or the client acknowledged
    # a SYN/ACK the capture missed (it holds one direction).
    answered = ((by_connection(connections, "syn_ack_frame", connection) > 0)
                | (by_connection(connections, "packets_server_to_client", connection) > 0)
                | (by_connection(connections, "rtt_source", connection) == "one-way-handshake"))
    retry = (after == EVENT["syn_retry"]) | ((after == EVENT["syn"]) & (before == EVENT["syn_retry"]))
    named(retry & answered, (HANDSHAKE_RETRY, "retried"))
    named(retry & ~answered, (HANDSHAKE_RETRY, "unanswered"))
    named(np.isin(gaps["after_frame"], released), (NAGLE_DELACK_STALL, ""))
    _probed_until_reopened(gaps, cause, named)
    _never_reopened(gaps, cause)
    gap_us = gaps["after_time_us"] - gaps["before_time_us"]
    path_us = _least_path_us(gaps, connections, cause)
    kept = ~_path_time(gaps, connections, cause, gap_us, path_us)
    return {"connection": connection[kept], "before_frame": gaps["before_frame"][kept],
            "cause_frame": cause_frame[kept], "after_frame": gaps["after_frame"][kept],
            "before_time_us": gaps["before_time_us"][kept], "cause": cause[kept],
            "gap_s": gap_us[kept] / 1e6, "path_s": np.nan_to_num(path_us[kept]) / 1e6,
            "after_direction": gaps["after_direction"][kept], "after_kind": after[kept],
            "past_acked": _answer_past_acked(gaps)[kept]}


def _answer_past_acked(gaps: dict[str, np.ndarray]) -> np.ndarray:
    """Whether the data ending each gap began past what its peer had acknowledged by then, or
    past the furthest its own side had been seen to send: an answer to a request normally
    begins where the requester's ACK stands and where the answerer's data so far ended, so
    beyond either the capture may have missed the answerer's earlier data (or the answerer
    was still sending), and the gap may hold more than one exchange."""
    past_ack = (gaps["peer_ack_frame"] > 0) & (gaps["after_seq"] > gaps["peer_ack"])
    past_sent = (gaps["after_sent_end"] != NO_SENT_END) & (
        gaps["after_seq"] > gaps["after_sent_end"])
    return (past_ack | past_sent) & (gaps["before_direction"] != gaps["after_direction"])


def _least_path_us(gaps: dict[str, np.ndarray], connections: Table,
                   cause: np.ndarray) -> np.ndarray:
    """Of each think-time gap, the least the path alone takes, where the handshake measured
    the round trip (NaN elsewhere): an answer of the other side (the server's to a request,
    the client's first data after the SYN/ACK) comes no sooner than the round trip from the
    tap to that side and back after the packet it answers passed the tap; a side that speaks
    again after its own SYN/ACK waited for the peer's ACK, the whole round trip."""
    path_us = np.full(len(cause), np.nan)
    rows = np.flatnonzero(np.isin(cause, _THINK_CODES))
    rows = rows[rtt_measured(connections, gaps["connection"][rows])]
    connection = gaps["connection"][rows]
    before, after = gaps["before_direction"][rows], gaps["after_direction"][rows]
    to_answerer_us = _rtt_beyond_tap_us(connections, connection, before)
    whole_us = by_connection(connections, "rtt_ms", connection) * 1000
    path_us[rows] = np.where(after != before, to_answerer_us, whole_us)
    return path_us


def _path_time(gaps: dict[str, np.ndarray], connections: Table, cause: np.ndarray,
               gap_us: np.ndarray, path_us: np.ndarray) -> np.ndarray:
    """Think time and idle gaps that the path's own time may explain, left unnamed: within
    four round trips; a think-time gap whose least path is known (`_least_path_us`), within
    that path and the larger of 10 ms and half of it (jitter, a queue), so a server that
    thinks 40 ms on a 40 ms path is seen."""
    rtt_us = np.nan_to_num(by_connection(connections, "rtt_ms", gaps["connection"]),
                           nan=0.0) * 1000
    within_rtts = gap_us <= RTT_MULTIPLE * rtt_us
    path_known = ~np.isnan(path_us)
    known_us = np.nan_to_num(path_us)
    within_path = gap_us <= known_us + np.maximum(GAP_MIN_US, known_us / 2)
    unnamed = np.isin(cause, [*_THINK_CODES, _CODE[(IDLE, "")]])
    return unnamed & np.where(path_known, within_path, within_rtts)


def _scale_known(connections: Table, connection: np.ndarray) -> np.ndarray:
    """Whether each gap's connection showed its handshake: without it the window scale is
    unknown, and a scaled window read raw looks tiny."""
    return by_connection(connections, "handshake", connection).astype(bool)


def _window_limited(gaps: dict[str, np.ndarray], connections: Table,
                    named: Namer) -> None:
    """A non-zero window of the peer in the gap that could not take the new segment ending it
    (its first MSS) though it began within it (a segment that begins past the window tells of
    packets the capture missed): below one MSS, or below the data. Only where the handshake was seen:
    without it the window scale is unknown, and a scaled window read raw looks tiny."""
    mss = by_connection(connections, "effective_mss", gaps["connection"])
    scale_known = _scale_known(connections, gaps["connection"])
    needed = gaps["after_seq"] + np.minimum(gaps["after_payload_bytes"], np.maximum(mss, 1))
    limited = (gaps["after_kind"] == EVENT["new_data"]) & (gaps["peer_edge_frame"] > 0) & (
        gaps["peer_edge"] < needed) & (gaps["after_seq"] <= gaps["peer_edge"]) & scale_known
    below_mss = gaps["peer_edge_window"] < mss
    named(limited & ~below_mss, (WINDOW_LIMITED, "below-data"), gaps["peer_edge_frame"])
    named(limited & below_mss, (WINDOW_LIMITED, "below-mss"), gaps["peer_edge_frame"])
    _filled_at_start(gaps, mss, scale_known, named)


def _filled_at_start(gaps: dict[str, np.ndarray], mss: np.ndarray, scale_known: np.ndarray,
                     named: Namer) -> None:
    """The data that began the gap left too little of the peer's window then (what the peer's
    latest packet offered) for the segment that ends it, which the same side sent: the sender
    waited for the window to move, whatever the peer's ACK timing (a receiver that offers 576
    bytes at a time holds every segment back so). Data sent past that edge tells of packets
    the capture missed, and proves nothing."""
    same_side = gaps["before_direction"] == gaps["after_direction"]
    room = gaps["peer_edge_at_start"] - gaps["before_end"]
    next_bytes = np.minimum(gaps["after_payload_bytes"], np.maximum(mss, 1))
    filled = ((gaps["after_kind"] == EVENT["new_data"]) & (gaps["before_kind"] == EVENT["new_data"])
              & same_side & (gaps["peer_edge_at_start"] > 0) & (room >= 0) & (room < next_bytes)
              & scale_known)
    below_mss = gaps["peer_window_before"] < mss
    named(filled & ~below_mss, (WINDOW_LIMITED, "below-data"))
    named(filled & below_mss, (WINDOW_LIMITED, "below-mss"))


def _zero_window(gaps: dict[str, np.ndarray], named: Namer) -> None:
    """Named as reopened here; `_never_reopened` tells the episodes that did not."""
    after = gaps["after_kind"]
    probing = np.isin(after, [EVENT["probe"], EVENT["keepalive"]]) & (
        gaps["peer_window_before"] == 0)
    named((after == EVENT["probe"]) | probing, (ZERO_WINDOW, "reopened"))
    named(gaps["zero_frame"] > 0, (ZERO_WINDOW, "reopened"), gaps["zero_frame"])


def _reopened_below_mss(gaps: dict[str, np.ndarray], connections: Table,
                        named: Namer) -> None:
    """A window that closed and reopened below one MSS, the new data leaving into it: the
    receiver never offered a full segment (a tiny receive buffer), so the window held the
    sender, not a reader that stopped. Only where the window scale is known."""
    mss = by_connection(connections, "effective_mss", gaps["connection"])
    window = gaps["peer_window_before"]
    small = (gaps["after_kind"] == EVENT["new_data"]) & (gaps["zero_frame"] > 0) & (
        gaps["peer_edge_frame"] > 0) & (gaps["peer_edge_window"] < mss) & (window > 0) & (
        window < mss) & _scale_known(connections, gaps["connection"])
    named(small, (WINDOW_LIMITED, "below-mss"), gaps["peer_edge_frame"])


def _probed_until_reopened(gaps: dict[str, np.ndarray], cause: np.ndarray,
                           named: Namer) -> None:
    """The wait after the last zero-window probe, up to the data that left once the window
    reopened, is the window's too (the peer may not answer that probe with a zero window),
    where it would otherwise be idle: it begins with a probe or keep-alive that ended a
    zero-window gap."""
    zero = np.flatnonzero(cause == _CODE[(ZERO_WINDOW, "reopened")])
    key = gaps["connection"].astype(np.int64) << 32
    zero_key = np.sort(key[zero] + gaps["after_frame"][zero])
    wanted = key + gaps["before_frame"]
    at = np.minimum(np.searchsorted(zero_key, wanted), max(len(zero_key) - 1, 0))
    after_zero = (zero_key[at] == wanted) if len(zero_key) else np.zeros(len(key), dtype=bool)
    probed = np.isin(gaps["before_kind"], [EVENT["probe"], EVENT["keepalive"]]) & np.isin(
        gaps["after_kind"], [EVENT["new_data"], EVENT["retransmission"]])
    frame = np.where(gaps["peer_edge_frame"] > 0, gaps["peer_edge_frame"], gaps["after_frame"])
    named(after_zero & probed & (cause == _CODE[(IDLE, "")]), (ZERO_WINDOW, "reopened"), frame)


def _never_reopened(gaps: dict[str, np.ndarray], cause: np.ndarray) -> None:
    """Zero-window episodes (gaps chained end to start on one connection) whose last gap ends
    in a probe or keep-alive: no data followed, so the capture never saw the window reopen."""
    rows = np.flatnonzero(cause == _CODE[(ZERO_WINDOW, "reopened")])
    if not len(rows):
        return
    connection = gaps["connection"][rows]
    chained = (connection[1:] == connection[:-1]) & (
        gaps["before_frame"][rows[1:]] == gaps["after_frame"][rows[:-1]])
    episode = np.cumsum(np.r_[True, ~chained]) - 1
    last = np.r_[~chained, True]
    data_after = np.isin(gaps["after_kind"][rows][last], [EVENT["new_data"],
                                                          EVENT["retransmission"]])
    cause[rows[~data_after[episode]]] = _CODE[(ZERO_WINDOW, "never-reopened")]


def _loss_recovery(gaps: dict[str, np.ndarray], connections: Table, named: Namer) -> None:
    """A gap that ends in a retransmission: spurious, fast retransmit or timeout."""
    lost = gaps["after_kind"] == EVENT["retransmission"]
    named(lost, (LOSS_RECOVERY, "rto"))
    named(lost & (gaps["peer_dup_acks"] > 0), (LOSS_RECOVERY, "fast-retransmit"),
          gaps["peer_dup_frame"])
    acked_before = lost & (gaps["peer_ack_frame"] > 0) & (gaps["peer_ack"] >= gaps["after_end"])
    named(acked_before, (LOSS_RECOVERY, "spurious"), gaps["peer_ack_frame"])
    beyond_tap_us = _rtt_beyond_tap_us(connections, gaps["connection"], gaps["after_direction"])
    too_soon = lost & (gaps["cover_frame"] > 0) & (beyond_tap_us >= 1000) & (
        gaps["cover_time_us"] - gaps["after_time_us"] < beyond_tap_us / 2)
    named(too_soon & ~acked_before, (LOSS_RECOVERY, "spurious"), gaps["cover_frame"])
    duplicate = lost & (gaps["dsack_frame"] > 0) & ~acked_before & ~too_soon
    named(duplicate, (LOSS_RECOVERY, "spurious"), gaps["dsack_frame"])


def _rtt_beyond_tap_us(connections: Table, connection: np.ndarray,
                       direction: np.ndarray) -> np.ndarray:
    """The round trip from the tap to the receiver of each direction and back (0: unknown)."""
    to_server = by_connection(connections, "rtt_server_side_ms", connection)
    to_client = by_connection(connections, "rtt_client_side_ms", connection)
    return np.nan_to_num(np.where(direction == 0, to_server, to_client), nan=0.0) * 1000


WAITING_SIDE = {ZERO_WINDOW: "sender", WINDOW_LIMITED: "sender", LOSS_RECOVERY: "sender",
                HANDSHAKE_RETRY: "sender", THINK_TIME: "receiver"}
"""Of a finding's sender (the side whose packet ended each gap) and receiver, which waited;
the other held it (its window, its application, or the path's loss)."""


def detect(columns: DetectorInput) -> list[Finding]:
    gaps = classify_gaps(columns)
    named_here = gaps["cause"] != _CODE[(NAGLE_DELACK_STALL, "")]
    gaps = {name: values[named_here] for name, values in gaps.items()}
    gaps["side"] = _sides(gaps)
    events = split_events(gaps, ["connection", "cause", "side"],
                          ("before_frame", "cause_frame", "after_frame", "gap_s",
                           "before_time_us", None, None))
    stats = _gap_stats(gaps)
    probes = _probe_intervals_ms(gaps)
    senders, receivers = columns.direction_names().of(stats["connection"], stats["side"])
    findings = []
    durations_s = by_connection(columns.connections, "duration_s", stats["connection"]).tolist()
    one_way = seen_one_way(*(by_connection(columns.connections, name, stats["connection"])
                             for name in ("packets_client_to_server",
                                          "packets_server_to_client"))).tolist()
    rows = zip(*(stats[name].tolist() for name in ("connection", "cause", "side", "count",
                                                   "lost_s", "median_gap_s", "median_path_s",
                                                   "past_acked")),
               durations_s, senders, receivers)
    for (connection, code, side, count, lost_s, median_gap_s, median_path_s, past_acked,
         duration_s, sender, receiver), one_way_only in zip(rows, one_way):
        cause = GAP_CAUSES[code]
        kind, subkind = cause
        details = _details(kind, sender, receiver, probes.get((connection, code, side), []))
        details["median_gap_ms"] = round(median_gap_s * 1000, 3)
        if median_path_s > 0:
            details["median_path_ms"] = round(median_path_s * 1000, 3)
        unsure = kind == THINK_TIME and one_way_only
        missed = kind == THINK_TIME and past_acked > 0
        confidence = "low" if unsure else "medium" if missed else CONFIDENCE.get(cause, "high")
        findings.append(Finding(
            kind=kind, connection=connection, sender=sender, receiver=receiver, count=count,
            time_lost_s=lost_s, share=lost_s / duration_s if duration_s > 0 else 0.0,
            confidence=confidence,
            confidence_reasons=[REASONS[cause], *([ONE_WAY_REASON] if unsure else []),
                                *([_missed_reason(past_acked, count)] if missed else [])],
            events=events[(connection, code, side)], advice=ADVICE[kind],
            subkind=subkind or None, details=details,
            summary=f"{counted_ms(count, 'gap', median_gap_s)}: the connection "
                    f"{DESCRIPTIONS[cause]}{_probe_words(details)}{_path_words(details)}"))
    return findings


def _sides(gaps: dict[str, np.ndarray]) -> np.ndarray:
    """Each gap's side (the direction its findings are grouped and named by): the direction of
    the packet that ends it; for idle gaps, which nobody waited on, one per connection (that
    of its longest idle gap), so a connection has one idle finding."""
    side = gaps["after_direction"].astype(np.int64).copy()
    idle = np.flatnonzero(gaps["cause"] == _CODE[(IDLE, "")])
    if len(idle):
        order = idle[np.lexsort((-gaps["gap_s"][idle], gaps["connection"][idle]))]
        connection = gaps["connection"][order]
        first = np.r_[True, connection[1:] != connection[:-1]]
        longest = side[order][first][np.cumsum(first) - 1]
        side[order] = longest
    return side


def _details(kind: str, sender: str, receiver: str, probe_intervals_ms: list[float]
             ) -> dict[str, Any]:
    """Which side waited and which held it; for a zero window, its probes' intervals and
    whether they backed off (each at least 1.5 times the one before: the persist timer
    doubles)."""
    if kind not in WAITING_SIDE:
        return {}
    waited = sender if WAITING_SIDE[kind] == "sender" else receiver
    details: dict[str, Any] = {"waited": waited,
                               "held_by": receiver if waited == sender else sender}
    if probe_intervals_ms:
        details["probe_intervals_ms"] = probe_intervals_ms
        details["probes_backing_off"] = len(probe_intervals_ms) >= 2 and all(
            later >= PROBE_BACKOFF * earlier
            for earlier, later in zip(probe_intervals_ms, probe_intervals_ms[1:]))
    return details


PROBE_BACKOFF = 1.5


def _probe_intervals_ms(gaps: dict[str, np.ndarray]) -> dict[tuple[int, int, int], list[float]]:
    """The zero-window gaps that end in a probe or keep-alive, per finding key, in order."""
    zero = np.isin(gaps["cause"], [_CODE[(ZERO_WINDOW, "reopened")],
                                   _CODE[(ZERO_WINDOW, "never-reopened")]])
    probe = zero & np.isin(gaps["after_kind"], [EVENT["probe"], EVENT["keepalive"]])
    found: dict[tuple[int, int, int], list[float]] = {}
    for connection, code, side, gap_s in zip(*(gaps[name][probe].tolist() for name in (
            "connection", "cause", "side", "gap_s"))):
        found.setdefault((connection, code, side), []).append(round(gap_s * 1000, 3))
    return found


def _probe_words(details: dict[str, Any]) -> str:
    intervals = details.get("probe_intervals_ms")
    if not intervals:
        return ""
    backing = ", backing off" if details["probes_backing_off"] else ""
    listed = ", ".join(f"{interval / 1000:.3g}" for interval in intervals)
    return f" (zero-window probes {listed} s apart{backing})"


PATH_SHOWN_MS = 1.0
"""A path short enough (a tap beside the answering side) to leave out of a finding's words."""


def _missed_reason(past_acked: int, count: int) -> str:
    return (f"{past_acked} of the {count} answers began past what the peer had acknowledged "
            f"or past the answering side's data seen before (the capture missed packets of "
            f"the answering side, as tshark's \"previous segment not captured\"): those gaps "
            f"may hold more than one exchange")


def _path_words(details: dict[str, Any]) -> str:
    path_ms = details.get("median_path_ms", 0.0)
    if path_ms < PATH_SHOWN_MS:
        return ""
    return (f"; the path took {path_ms:.1f} ms of each (the least an answer takes, seen from "
            f"the tap), not counted as time lost")


def _gap_stats(gaps: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Columns of one row per (connection, cause, side), in that order: the gaps' count, the
    time lost (the gaps less the path's least time, `path_s`), the median gap, the path (one
    per connection side, so its mean), how many answers began past the peer's ACK (the gaps'
    cause as its code in `GAP_CAUSES`, in name order)."""
    gap_s = gaps["gap_s"]
    groups = KeyGroups(gaps["connection"], gaps["cause"], gaps["side"])
    return {"connection": groups.keys[0], "cause": groups.keys[1], "side": groups.keys[2],
            "count": groups.sizes, "lost_s": groups.sum(gap_s - gaps["path_s"]),
            "median_gap_s": groups.median(gap_s), "median_path_s": groups.mean(gaps["path_s"]),
            "past_acked": groups.sum(gaps["past_acked"].astype(np.int64))}
