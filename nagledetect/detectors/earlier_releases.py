"""Small segments Linux's Nagle held until an earlier ACK than the latest (SPEC section 4.1).

Linux holds a small segment only while the last small segment it sent is unacknowledged
(Minshall's variant: `tcp_minshall_check`); full segments leave meanwhile. A burst that begins
small (a header, a line) and ends small leaves its tail at the ACK of the small beginning, and a
tap near the receiver sees that ACK before the full segments then in flight: the latest ACK
before the tail came too soon to release it, and the plain test (`nagle_stall.untimed_stalls`)
pairs the tail with that one.

Per direction, in segment order: after a segment that ends small (the opener), the first later
segment whose peer's latest packet is a pure ACK at or past the opener's end, and later than
it, names the releasing ACK (where no full segment does, the tail's own latest peer packet may:
at a tap near the sender the tail leaves right after an ACK of the opener that leaves full
segments unacknowledged, which the plain test, wanting everything acknowledged, cannot pair);
the next segment that ends small is released by it where that ACK acknowledged nothing the
capture did not see sent, with an open window, nothing else happened meanwhile (no peer data,
no own retransmission), the tail begins where the data sent ends, and it came `MIN_STALL_US` or
more after the data before the ACK. Its row is a stall candidate as the
plain test's are (the data before the ACK, the ACK, the tail), marked `released_earlier`; the
timing tests decide which of the two rows of a tail, if any, stands, and keep an earlier
release only where the full segments after the ACK were in flight when it reached the sender
(a sender that sent them because of the ACK was held by its window, not by Nagle).

A part read a slice at a time carries each direction's open burst from slice to slice, so the
rows are those of the whole run.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from nagledetect.events.segments import role_in

MIN_STALL_US = 10_000
"""`nagle_stall.MIN_STALL_MS`, in the segments' unit."""
FROM_TAIL = ("connection", "direction", "frame", "time_us", "payload_bytes", "tail_bytes", "mss",
             "message")
"""The columns a row takes of the tail."""
FROM_RELEASE = ("prev_frame", "prev_time_us", "prev_payload_bytes", "peer_frame", "peer_time_us",
                "peer_window_bytes")
TAIL_PREV_TIME = "tail_prev_time_us"
"""The time of the data just before the tail: the timing tests keep an earlier release only
where that data left the sender before the ACK could reach it (in flight at the tap), so the
sender, not held by its window, waited for that ACK with the tail alone."""
"""The columns a row takes of the segment that names the releasing ACK (its peer's latest
packet, and the data before it)."""
_OPEN = ("key", "opener_end", "opener_time_us", "has_release", "seen", "disturbed",
         *FROM_RELEASE)
"""What a direction's open burst carries to the next slice."""


class EarlierReleases:
    """Feed the segments slice by slice, in frame order (`rows`); one instance per run."""

    def __init__(self) -> None:
        self._open: dict[str, np.ndarray] = {name: np.zeros(0, dtype=np.int64) for name in _OPEN}

    def rows(self, segments: Any) -> dict[str, np.ndarray]:
        """The candidate rows of these segments (`FROM_TAIL` and `FROM_RELEASE`), in frame
        order."""
        scan = _Scan(segments, self._open)
        self._open = scan.still_open()
        return scan.released()


class _Scan:
    """One slice's segments in (direction key, frame) order, each in a burst: each segment
    ending small opens one, the rows before a direction's first such continue the burst
    carried from the slice before (burst number 0)."""

    def __init__(self, segments: Any, carried: dict[str, np.ndarray]) -> None:
        connection = np.asarray(segments["connection"]).astype(np.int64)
        key = connection * 2 + np.asarray(segments["direction"])
        order = np.lexsort((np.asarray(segments["frame"]), key))
        self.column = {name: np.asarray(segments[name])[order] for name in (
            *FROM_TAIL, *FROM_RELEASE, "rel_seq", "end_seq", "sent_max_before", "peer_ack",
            "peer_data_between", "own_retransmissions_between")}
        self.pure_ack = role_in(segments["peer_role"], ("pure_ack",))[order]
        self.key = key[order]
        self.small = self.column["tail_bytes"] > 0
        self.disturbing = ((self.column["peer_data_between"] > 0)
                           | (self.column["own_retransmissions_between"] > 0))
        self.carried = carried
        self.carried_at = _positions_of(carried["key"], self.key)
        self._bursts()
        self._releases()

    def _bursts(self) -> None:
        count = len(self.key)
        positions = np.arange(count)
        self.first = np.r_[True, self.key[1:] != self.key[:-1]] if count else np.zeros(0, bool)
        group = np.cumsum(self.first) - 1
        group_start = np.flatnonzero(self.first)
        small_so_far = np.cumsum(self.small)
        self.burst_number = small_so_far - (small_so_far - self.small)[group_start][group]
        self.burst = group * (count + 1) + self.burst_number
        last_small = (np.maximum.accumulate(np.where(self.small, positions, -1)) if count
                      else np.zeros(0, dtype=np.int64))
        self.opener = np.where(last_small >= group_start[group], last_small, -1)

    def _carried_value(self, name: str, at: np.ndarray) -> np.ndarray:
        """A carried column at carried positions `at` (-1: none, read as 0)."""
        if not len(self.carried["key"]):
            return np.zeros(len(at), dtype=np.int64)
        return np.where(at >= 0, self.carried[name][np.maximum(at, 0)], 0)

    def _releases(self) -> None:
        """Each row's burst's opener (end and time), the first row naming its releasing ACK
        in this slice (`release_at`, -1: none) and whether a row of it other than the opener
        was disturbed (peer data, own retransmission)."""
        continued = (self.opener < 0) & (self.carried_at >= 0)
        safe = np.maximum(self.opener, 0)
        self.opener_end = np.where(continued, self._carried_value("opener_end", self.carried_at),
                                   self.column["end_seq"][safe] if len(safe) else safe)
        self.opener_time_us = np.where(
            continued, self._carried_value("opener_time_us", self.carried_at),
            self.column["time_us"][safe] if len(safe) else safe)
        self.opener_known = (self.opener >= 0) | continued
        naming = (~self.small & self.opener_known & self.pure_ack
                  & (self.column["peer_ack"] >= self.opener_end)
                  & (self.column["peer_time_us"] > self.opener_time_us))
        self.release_at = _first_in_run(self.burst, naming)
        self.disturbed = _any_in_run(self.burst, ~self.small & self.disturbing)

    def _burst_of(self, rows: np.ndarray) -> dict[str, np.ndarray]:
        """The burst each of `rows` lies in: whether it has a release, that release's ACK
        acknowledged only data seen sent, the release's columns, and whether it was disturbed;
        a continued burst's carried release comes first (named earlier)."""
        carried_at = np.where(self.burst_number[rows] == 0, self.carried_at[rows], -1)
        from_carry = self._carried_value("has_release", carried_at) > 0
        here = self.release_at[rows]
        safe = np.maximum(here, 0)
        burst = {name: np.where(from_carry, self._carried_value(name, carried_at),
                                self.column[name][safe]) for name in FROM_RELEASE}
        burst["has_release"] = from_carry | (here >= 0)
        seen_here = self.column["peer_ack"][safe] <= self.column["sent_max_before"][safe]
        burst["seen"] = np.where(from_carry, self._carried_value("seen", carried_at) > 0,
                                 seen_here)
        burst["disturbed"] = self.disturbed[rows] | (
            self._carried_value("disturbed", carried_at) > 0)
        return burst

    def _carried_burst(self, at: np.ndarray) -> dict[str, np.ndarray]:
        """The bursts carried at positions `at` (-1: none), with no row in this slice."""
        burst = {name: self._carried_value(name, at) for name in FROM_RELEASE}
        burst["has_release"] = self._carried_value("has_release", at) > 0
        burst["seen"] = self._carried_value("seen", at) > 0
        burst["disturbed"] = self._carried_value("disturbed", at) > 0
        return burst

    def released(self) -> dict[str, np.ndarray]:
        """The tails released by their burst's earlier ACK, in frame order."""
        tails = np.flatnonzero(self.small)
        inside = ~self.first[tails]
        burst = self._burst_of(np.maximum(tails - 1, 0))
        carried = self._carried_burst(np.where(inside, -1, self.carried_at[tails]))
        for name, values in carried.items():
            burst[name] = np.where(inside, burst[name], values)
        self._released_by_own_ack(tails, inside, burst)
        column = self.column
        kept = (burst["has_release"] & burst["seen"] & ~burst["disturbed"]
                & ~self.disturbing[tails] & (burst["peer_window_bytes"] > 0)
                & (column["rel_seq"][tails] == column["sent_max_before"][tails])
                & (column["time_us"][tails] - burst["prev_time_us"] >= MIN_STALL_US))
        rows = {name: column[name][tails[kept]] for name in FROM_TAIL}
        rows.update((name, burst[name][kept].astype(column[name].dtype))
                    for name in FROM_RELEASE)
        rows[TAIL_PREV_TIME] = column["prev_time_us"][tails[kept]]
        order = np.argsort(rows["frame"], kind="stable")
        return {name: values[order] for name, values in rows.items()}

    def _released_by_own_ack(self, tails: np.ndarray, inside: np.ndarray,
                             burst: dict[str, np.ndarray]) -> None:
        """Where no full segment named the release, the tail's own latest peer packet: a pure
        ACK at or past the opener's end, later than the opener and than the data before the
        tail, that left some data unacknowledged (else the plain test pairs them)."""
        before = np.maximum(tails - 1, 0)
        carried_at = np.where(inside, -1, self.carried_at[tails])
        known = np.where(inside, self.opener_known[before], carried_at >= 0)
        end = np.where(inside, self.opener_end[before],
                       self._carried_value("opener_end", carried_at))
        time_us = np.where(inside, self.opener_time_us[before],
                           self._carried_value("opener_time_us", carried_at))
        column = self.column
        peer_ack, peer_time_us = column["peer_ack"][tails], column["peer_time_us"][tails]
        own = (~burst["has_release"] & known & self.pure_ack[tails] & (peer_ack >= end)
               & (peer_ack < column["sent_max_before"][tails]) & (peer_time_us > time_us)
               & (peer_time_us > column["prev_time_us"][tails]))
        for name in FROM_RELEASE:
            burst[name] = np.where(own, column[name][tails], burst[name])
        burst["has_release"] = burst["has_release"] | own
        burst["seen"] = burst["seen"] | own

    def still_open(self) -> dict[str, np.ndarray]:
        """Each direction's last burst, to carry to the next slice (directions absent from
        this slice keep what they carried)."""
        last = np.flatnonzero(np.r_[self.first[1:], True]) if len(self.key) else np.zeros(
            0, dtype=np.int64)
        last = last[(self.opener[last] >= 0) | (self.carried_at[last] >= 0)]
        burst = self._burst_of(last)
        state = {"key": self.key[last], "opener_end": self.opener_end[last],
                 "opener_time_us": self.opener_time_us[last]}
        state.update((name, burst[name].astype(np.int64))
                     for name in ("has_release", "seen", "disturbed", *FROM_RELEASE))
        kept = ~np.isin(self.carried["key"], self.key)
        keys = np.concatenate([self.carried["key"][kept], state["key"]])
        order = np.argsort(keys, kind="stable")
        return {name: np.concatenate([self.carried[name][kept],
                                      state[name].astype(np.int64)])[order] for name in _OPEN}


def _positions_of(keys: np.ndarray, wanted: np.ndarray) -> np.ndarray:
    """Each wanted key's position among the sorted `keys` (-1: absent)."""
    if not len(keys):
        return np.full(len(wanted), -1, dtype=np.int64)
    at = np.minimum(np.searchsorted(keys, wanted), len(keys) - 1)
    return np.where(keys[at] == wanted, at, -1)


def _runs(ids: np.ndarray) -> np.ndarray:
    """Each row's run number, runs being stretches of equal ids."""
    return np.cumsum(np.r_[True, ids[1:] != ids[:-1]]) - 1


def _first_in_run(ids: np.ndarray, flags: np.ndarray) -> np.ndarray:
    """Each row's run's first flagged position (-1: none)."""
    if not len(ids):
        return np.zeros(0, dtype=np.int64)
    run = _runs(ids)
    first = np.full(run[-1] + 1, -1, dtype=np.int64)
    flagged = np.flatnonzero(flags)[::-1]
    first[run[flagged]] = flagged
    return first[run]


def _any_in_run(ids: np.ndarray, flags: np.ndarray) -> np.ndarray:
    """Whether any row of each row's run is flagged."""
    if not len(ids):
        return np.zeros(0, dtype=bool)
    run = _runs(ids)
    return np.bincount(run, weights=flags, minlength=run[-1] + 1)[run] > 0
