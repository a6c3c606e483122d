"""The Rayleigh test behind phase locking, on the delayed ACKs of the lab's 200 ms-tick
receiver, against the statistic worked out sample by sample here."""

from __future__ import annotations

import math

import numpy as np
import pytest

from nagledetect.analysis import analyze_capture
from nagledetect.detectors.phase_lock import rayleigh
from tests.conftest import SAMPLE_TRACES


def _by_hand(times_s: list[float], period_s: float) -> tuple[float, float, float]:
    """Mean resultant length, Zar's p-value and mean phase (s) of the times modulo the period."""
    angles = [2 * math.pi * math.fmod(t, period_s) / period_s for t in times_s]
    n = len(angles)
    cos_mean = sum(math.cos(a) for a in angles) / n
    sin_mean = sum(math.sin(a) for a in angles) / n
    length = math.hypot(cos_mean, sin_mean)
    p_value = math.exp(math.sqrt(1 + 4 * n + 4 * (n * n - (n * length) ** 2)) - (1 + 2 * n))
    phase_s = math.fmod(math.atan2(sin_mean, cos_mean) + 2 * math.pi, 2 * math.pi) \
        / (2 * math.pi) * period_s
    return length, min(p_value, 1.0), phase_s


def test_a_group_without_a_period_is_nan_and_leaves_the_others_alone() -> None:
    """classic-phase-lock: 79 delayed ACKs of 10.77.0.2 on four connections. Connections 0 and
    1 tested against the 200 ms tick, 2 and 3 against no period (NaN, a host without a timer
    of its own to try): the first group's R, p and phase are the hand-made ones, the second's
    NaN, and each group's count is its samples'."""
    host = analyze_capture(str(SAMPLE_TRACES / "classic-phase-lock.pcap")).hosts["10.77.0.2"]
    times_s = np.asarray(host.ack_times_s)
    group = (np.asarray(host.ack_connections) >= 2).astype(np.int64)
    count, length, p_value, phase_s = rayleigh(times_s, group, np.array([0.2, np.nan]))
    assert count.tolist() == [float((group == 0).sum()), float((group == 1).sum())]
    assert count[0] > 10 and count[1] > 10
    expected = _by_hand(times_s[group == 0].tolist(), 0.2)
    assert [length[0], p_value[0], phase_s[0]] == pytest.approx(expected, rel=1e-9, abs=1e-12)
    assert np.isnan([length[1], p_value[1], phase_s[1]]).all()
