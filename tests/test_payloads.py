"""Each direction's payload sizes counted (`events.payloads`), whole or a slice at a time.

The expected figures are taken straight from the segment table with numpy, direction by
direction (count, greatest common divisor, smallest, median), not from the counts."""

from __future__ import annotations

import numpy as np
import pytest

from nagledetect.events.payloads import PayloadsBySlice, SegmentPayloads
from nagledetect.flows.build import build_flows
from nagledetect.pipeline import connection_level
from nagledetect.read.capture import decoded_batches
from tests.conftest import SAMPLE_TRACES


@pytest.fixture(scope="module")
def segments():
    """mixed.pcap's data segments: many connections, both directions, many sizes."""
    level = connection_level(build_flows(decoded_batches(str(SAMPLE_TRACES / "mixed.pcap"))[1]))
    return level.segments.to_pandas()


def _expected(segments, key: int) -> tuple[int, int, int, float]:
    mine = segments[(segments["connection"] * 2 + segments["direction"]) == key]
    payload = mine["payload_bytes"].to_numpy().astype(np.int64)
    return len(payload), int(np.gcd.reduce(payload)), int(payload.min()), float(np.median(payload))


@pytest.mark.parametrize("slice_segments", [1, 13, 10_000])
def test_counts_by_slice_as_taken_from_the_segments(segments, slice_segments: int) -> None:
    keys = np.unique(segments["connection"].to_numpy() * 2 + segments["direction"].to_numpy())
    assert len(keys) >= 12
    by_slice = PayloadsBySlice(join_rows=5)
    for start in range(0, len(segments), slice_segments):
        by_slice.add(segments.iloc[start:start + slice_segments])
    wanted = keys[::2]
    for counts in (by_slice.of(wanted), SegmentPayloads(segments).of(wanted)):
        np.testing.assert_array_equal(counts.keys(), wanted)
        found = zip(counts.segments().tolist(), counts.common_divisor().tolist(),
                    counts.smallest().tolist(), counts.median().tolist())
        assert list(found) == [_expected(segments, key) for key in wanted.tolist()]


def test_no_segments_no_counts() -> None:
    counts = PayloadsBySlice().of(np.array([0, 1]))
    assert len(counts.keys()) == 0 and len(counts.segments()) == 0 and len(counts.median()) == 0
