"""Per-group sums, means and medians with numpy (`KeyGroups`) equal pandas' groupby.

The detectors reduce their tables per connection or direction with `KeyGroups`; pandas'
groupby is the independent reference. The values come from real captures' data segments, in
their own order (frame order: not grouped) and in group order, with NaN where a segment has no
previous one, so each path is taken: sorting, skipping NaN, even and odd group sizes.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from nagledetect.events.segments import data_segments
from nagledetect.flows.build import build_flows
from nagledetect.flows.grouped import KeyGroups
from nagledetect.read.capture import decoded_batches
from tests.conftest import SAMPLE_TRACES, corpus_file


def _segments(path) -> pd.DataFrame:
    flows = build_flows(decoded_batches(str(path))[1])
    segments = data_segments(flows.packets, flows.connections).to_pandas()
    gap_s = (segments["time_us"] - segments["prev_time_us"]) / 1e6
    return segments.assign(gap_s=gap_s.where(segments["prev_frame"] >= 0))


def _assert_like_pandas(segments: pd.DataFrame) -> None:
    keys = ["connection", "direction"]
    expected = segments.groupby(keys, sort=True).agg(
        count=("frame", "size"), payload=("payload_bytes", "sum"), gap_sum=("gap_s", "sum"),
        gap_mean=("gap_s", "mean"), gap_median=("gap_s", "median"),
        payload_median=("payload_bytes", "median"), small=("is_small", "mean"))
    groups = KeyGroups(*(segments[key].to_numpy() for key in keys))
    assert np.array_equal(groups.keys[0], expected.index.get_level_values(0))
    assert np.array_equal(groups.keys[1], expected.index.get_level_values(1))
    assert np.array_equal(groups.sizes, expected["count"])
    assert np.array_equal(groups.sum(segments["payload_bytes"].to_numpy()), expected["payload"])
    gap_s = segments["gap_s"].to_numpy()
    np.testing.assert_allclose(groups.sum(gap_s), expected["gap_sum"], rtol=1e-12)
    np.testing.assert_allclose(groups.mean(gap_s), expected["gap_mean"], rtol=1e-12)
    assert np.array_equal(groups.median(gap_s), expected["gap_median"], equal_nan=True)
    assert np.array_equal(groups.median(segments["payload_bytes"].to_numpy()),
                          expected["payload_median"])
    assert np.array_equal(groups.mean(segments["is_small"].to_numpy()), expected["small"])


@pytest.mark.parametrize("name", ["mixed.pcap", "seed002-stream.pcap", "classic-phase-lock.pcap"])
def test_key_groups_equal_pandas_on_sample_traces(name):
    segments = _segments(SAMPLE_TRACES / name)
    assert segments["gap_s"].isna().any()
    _assert_like_pandas(segments)
    _assert_like_pandas(segments.sort_values(["connection", "direction"], kind="stable"))


@pytest.mark.parametrize("relative", ["zeek/ssh__ssh.pcap", "zeek/smb__smb3_multichannel.pcap"])
def test_key_groups_equal_pandas_on_corpus_captures(relative):
    segments = _segments(corpus_file(relative))
    assert segments["connection"].nunique() > 1
    _assert_like_pandas(segments)


def test_key_groups_of_no_rows():
    groups = KeyGroups(np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.uint8))
    assert len(groups) == 0
    assert groups.sum(np.zeros(0)).shape == (0,)
    assert groups.median(np.zeros(0)).shape == (0,)
    assert groups.mean(np.zeros(0, dtype=bool)).shape == (0,)


@pytest.mark.parametrize("groups", [1, 2, 5, 16, 40_000])
def test_medians_of_groups_equal_pandas(groups: int) -> None:
    """Medians selected group by group by the core (`_core.group_medians`), from a few groups
    of many rows (a part of a few huge connections) to many of a few: the same as pandas, with
    NaN skipped, an all-NaN group NaN, even and odd sizes. Values drawn at random: the function
    is arithmetic, pandas the reference."""
    rng = np.random.default_rng(groups)
    rows = max(70_001 * min(groups, 16), 7 * groups)
    key = rng.integers(0, groups, rows)
    values = rng.random(rows) * 500
    values[rng.random(rows) < 0.05] = np.nan
    values[key == 0] = np.nan if groups > 1 else values[key == 0]
    expected = pd.Series(values).groupby(key).median()
    found = KeyGroups(key).median(values)
    assert len(KeyGroups(key)) == groups
    np.testing.assert_array_equal(found, expected.to_numpy())
