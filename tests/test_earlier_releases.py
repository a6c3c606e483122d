"""The tails a burst's earlier ACK released (`detectors/earlier_releases.py`) are the same
whether a part's segments come whole or a slice at a time, cut anywhere: each direction's open
burst is carried from slice to slice.

The capture is zeek/pop3__pop3.pcap, whose stream 6 holds three such tails (frames 100, 111
and 119, read in tshark: `tests/test_causality.py`)."""

from __future__ import annotations

import numpy as np

from nagledetect.api import load_capture
from nagledetect.detectors.earlier_releases import EarlierReleases
from nagledetect.events.messages import number_messages
from nagledetect.events.segments import data_segments
from nagledetect.table import Table
from tests.conftest import corpus_file


def _segments() -> Table:
    capture = load_capture(str(corpus_file("zeek/pop3__pop3.pcap")))
    segments = data_segments(capture.packets, capture.connections)
    segments["message"] = number_messages(segments)
    return segments


def _sliced(segments: Table, cuts: list[int]) -> dict[str, np.ndarray]:
    earlier = EarlierReleases()
    bounds = [0, *cuts, len(segments["frame"])]
    parts = [earlier.rows(segments.take(np.arange(start, stop)))
             for start, stop in zip(bounds, bounds[1:])]
    return {name: np.concatenate([part[name] for part in parts]) for name in parts[0]}


def test_whole_segments_give_the_three_tails() -> None:
    rows = EarlierReleases().rows(_segments())
    released = list(zip(rows["prev_frame"].tolist(), rows["peer_frame"].tolist(),
                        rows["frame"].tolist()))
    assert released == [(95, 96, 100), (103, 104, 111), (114, 115, 119)]


def test_slices_cut_anywhere_give_the_whole_rows() -> None:
    segments = _segments()
    whole = EarlierReleases().rows(segments)
    frames = np.asarray(segments["frame"])
    near = np.flatnonzero((frames >= 90) & (frames <= 121)).tolist()
    every = list(range(1, len(frames)))  # a slice a segment: most lack the burst's direction
    for cuts in [[cut] for cut in near] + [near[::3], near[1::2], every]:
        sliced = _sliced(segments, cuts)
        for name, values in whole.items():
            np.testing.assert_array_equal(sliced[name], values, err_msg=f"{name} cut {cuts}")
