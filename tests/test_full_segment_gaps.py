"""A message's longest pause between consecutive full segments and its final flight
(`detectors/full_segment_gaps.py`) are the same whether a part's segments come whole or a slice
at a time, cut anywhere, and are what the packets show.

The capture is sample_traces/classic-2n-blocks-100000-30ms-path.pcap: 20 blocks of 69 full
segments and an 88-byte tail from the classic-Nagle sender, 30 ms away."""

from __future__ import annotations

import numpy as np

from nagledetect.api import load_capture
from nagledetect.detectors.full_segment_gaps import FullSegmentGaps
from nagledetect.events.messages import number_messages
from nagledetect.events.segments import data_segments
from nagledetect.table import Table
from tests.conftest import SAMPLE_TRACES


def _segments() -> Table:
    capture = load_capture(str(SAMPLE_TRACES / "classic-2n-blocks-100000-30ms-path.pcap"))
    segments = data_segments(capture.packets, capture.connections)
    segments["message"] = number_messages(segments)
    return segments


def test_a_tail_reads_its_blocks_pauses() -> None:
    """tshark -Y 'ip.src==10.77.0.2 && tcp.len>0' over frames 673-778 (the block before the
    tail, frame 779): the longest pause between two of its full segments is 8.454 ms, before
    frame 743, also the latest pause of half that or more; the final flight's second segment
    is frame 744 (1.107772), and the data before the tail, frame 777, came 14.094 ms after it.
    The client's 1-byte segments (tshark -Y 'tcp.len==1': 21, the last, frame 2171,
    unanswered before the close), the other direction's messages, have neither."""
    segments = _segments()
    longest, flight = FullSegmentGaps().of(segments)
    frames = np.asarray(segments["frame"])
    assert (longest[frames == 779].tolist(), flight[frames == 779].tolist()) == ([8454], [14094])
    requests = np.asarray(segments["payload_bytes"]) == 1
    assert requests.sum() == 21 and not longest[requests].any() and not flight[requests].any()


def test_slices_cut_anywhere_give_the_whole_gaps() -> None:
    segments = _segments()
    whole = FullSegmentGaps().of(segments)
    count = len(whole[0])
    for cuts in ([count // 2], list(range(7, count, 37)), list(range(1, count))):
        gaps = FullSegmentGaps()
        bounds = [0, *cuts, count]
        parts = [gaps.of(segments.take(np.arange(start, stop)))
                 for start, stop in zip(bounds, bounds[1:])]
        for column, values in enumerate(whole):
            sliced = np.concatenate([part[column] for part in parts])
            np.testing.assert_array_equal(sliced, values, err_msg=f"{column} cuts {cuts[:5]}")
