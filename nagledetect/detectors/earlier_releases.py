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
timing tests decide which of the two rows of a tail, if any, stands (the plain one where
both are tied, unless only the earlier release came no sooner than the round trip to the
sender), and keep an earlier release only where the full segments after the ACK were in flight
when it reached the sender (a sender that sent them because of the ACK was held by its window,
not by Nagle).

A part read a slice at a time carries each direction's open burst to the next slice as the few
segments that tell of it (its opener, the segment naming its release, the first that disturbed
it), so the rows are those of the whole run.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from nagledetect.events.segments import role_in
from nagledetect.flows.grouped import first_per_key, group_starts

MIN_STALL_US = 10_000
"""`nagle_stall.MIN_STALL_MS`, in the segments' unit."""
FROM_TAIL = ("connection", "direction", "frame", "time_us", "payload_bytes", "tail_bytes", "mss",
             "message")
"""The columns a row takes of the tail."""
FROM_RELEASE = ("prev_frame", "prev_time_us", "prev_payload_bytes", "peer_frame", "peer_time_us",
                "peer_window_bytes")
"""The columns a row takes of the segment that names the releasing ACK (its peer's latest
packet, and the data before it)."""
TAIL_PREV_TIME = "tail_prev_time_us"
"""The time of the data just before the tail: the timing tests keep an earlier release only
where that data left the sender before the ACK could reach it (in flight at the tap), so the
sender, not held by its window, waited for that ACK with the tail alone."""
READ = (*FROM_TAIL, *FROM_RELEASE, "rel_seq", "end_seq", "sent_max_before", "peer_ack",
        "peer_data_between", "own_retransmissions_between")
"""The segment columns the scan reads (beside whether the peer's latest packet is a pure
ACK)."""


class EarlierReleases:
    """Feed the segments slice by slice, in frame order (`rows`); one instance per run."""

    def __init__(self) -> None:
        self._carried: dict[str, np.ndarray] | None = None

    def rows(self, segments: Any) -> dict[str, np.ndarray]:
        """The candidate rows of these segments (`FROM_TAIL`, `FROM_RELEASE` and
        `TAIL_PREV_TIME`), in frame order."""
        columns = {name: np.asarray(segments[name]) for name in READ}
        columns["pure_ack"] = role_in(segments["peer_role"], ("pure_ack",))
        if self._carried is not None:
            columns = {name: np.concatenate([self._carried[name], values])
                       for name, values in columns.items()}
        scan = _Scan(columns)
        self._carried = scan.still_open()
        return scan.released()


class _Scan:
    """Segments in (direction key, frame) order, each in a burst: each segment ending small
    opens one (its opener); the rows before a direction's first such are in none."""

    def __init__(self, columns: dict[str, np.ndarray]) -> None:
        key = columns["connection"].astype(np.int64) * 2 + columns["direction"]
        order = np.lexsort((columns["frame"], key))
        self.column = {name: values[order] for name, values in columns.items()}
        self.key = key[order]
        count = len(self.key)
        self.small = self.column["tail_bytes"] > 0
        self.disturbing = ((self.column["peer_data_between"] > 0)
                           | (self.column["own_retransmissions_between"] > 0))
        self.first = group_starts(self.key)
        group = np.cumsum(self.first) - 1
        group_start = np.flatnonzero(self.first)
        small_so_far = np.cumsum(self.small)
        self.burst = group * (count + 1) + small_so_far - (small_so_far - self.small)[
            group_start][group]
        last_small = (np.maximum.accumulate(np.where(self.small, np.arange(count), -1))
                      if count else np.zeros(0, dtype=np.int64))
        self.opener = np.where(last_small >= group_start[group], last_small, -1)
        self._releases()

    def _releases(self) -> None:
        """Each row's burst's first row naming its releasing ACK (`release_at`, -1: none): a
        full segment whose peer's latest packet is a pure ACK at or past the opener's end,
        later than the opener; and its first row that disturbed it (peer data, an own
        retransmission)."""
        opened = self.opener >= 0
        opener = np.maximum(self.opener, 0)
        column = self.column
        naming = (~self.small & opened & self.column["pure_ack"]
                  & (column["peer_ack"] >= column["end_seq"][opener])
                  & (column["peer_time_us"] > column["time_us"][opener]))
        self.release_at = _first_in_run(self.burst, naming)
        self.disturbed_at = _first_in_run(self.burst, ~self.small & self.disturbing & opened)

    def released(self) -> dict[str, np.ndarray]:
        """The tails released by their burst's earlier ACK, in frame order."""
        tails = np.flatnonzero(self.small)
        before = np.maximum(tails - 1, 0)
        inside = ~self.first[tails]
        release = np.where(inside, self.release_at[before], -1)
        disturbed = np.where(inside, self.disturbed_at[before], -1) >= 0
        column = self.column
        found = {name: column[name][np.maximum(release, 0)] for name in FROM_RELEASE}
        seen = (release >= 0) & (column["peer_ack"][np.maximum(release, 0)]
                                 <= column["sent_max_before"][np.maximum(release, 0)])
        own = self._released_by_own_ack(tails, inside & (release < 0), before)
        for name in FROM_RELEASE:
            found[name] = np.where(own, column[name][tails], found[name])
        kept = ((seen | own) & ~disturbed & ~self.disturbing[tails]
                & (found["peer_window_bytes"] > 0)
                & (column["rel_seq"][tails] == column["sent_max_before"][tails])
                & (column["time_us"][tails] - found["prev_time_us"] >= MIN_STALL_US))
        rows = {name: column[name][tails[kept]] for name in FROM_TAIL}
        rows.update((name, found[name][kept]) for name in FROM_RELEASE)
        rows[TAIL_PREV_TIME] = column["prev_time_us"][tails[kept]]
        order = np.argsort(rows["frame"], kind="stable")
        return {name: values[order] for name, values in rows.items()}

    def _released_by_own_ack(self, tails: np.ndarray, unnamed: np.ndarray,
                             before: np.ndarray) -> np.ndarray:
        """Of tails whose burst named no release (`unnamed`), those whose own latest peer
        packet releases it: a pure ACK at or past the opener's end, later than the opener and
        than the data before the tail, that left some data unacknowledged (else the plain test
        pairs them)."""
        opener = self.opener[before]
        safe = np.maximum(opener, 0)
        column = self.column
        peer_ack, peer_time_us = column["peer_ack"][tails], column["peer_time_us"][tails]
        return (unnamed & (opener >= 0) & column["pure_ack"][tails]
                & (peer_ack >= column["end_seq"][safe])
                & (peer_ack < column["sent_max_before"][tails])
                & (peer_time_us > column["time_us"][safe])
                & (peer_time_us > column["prev_time_us"][tails]))

    def still_open(self) -> dict[str, np.ndarray]:
        """The segments that tell of each direction's last burst (its opener, the first
        segment naming its release, the first disturbing it), to carry to the next slice (a
        direction absent from a slice carries its rows on: they are among the slice's)."""
        last = np.flatnonzero(np.r_[self.first[1:], True]) if len(self.key) else np.zeros(
            0, dtype=np.int64)
        kept = np.concatenate([self.opener[last], self.release_at[last],
                               self.disturbed_at[last]])
        kept = np.unique(kept[kept >= 0])
        return {name: values[kept] for name, values in self.column.items()}


def _first_in_run(ids: np.ndarray, flags: np.ndarray) -> np.ndarray:
    """Each row's run's first flagged position (-1: none), runs being stretches of equal
    ids."""
    run = np.cumsum(group_starts(ids)) - 1
    return first_per_key(run, np.flatnonzero(flags), len(ids))[run]
