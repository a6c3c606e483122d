"""From a loaded capture to findings: events, host fingerprints, detectors, phase locking, advice.

This is the one place that orders the pipeline; every step below it is a pure function of the
tables handed to it.
"""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from nagledetect.api import Capture
from nagledetect.detectors import CONNECTION_DETECTORS
from nagledetect.detectors.delack_timer import delack_samples, fingerprint_hosts
from nagledetect.detectors.model import DetectorInput, Finding, HostProfile
from nagledetect.events.messages import messages, number_messages
from nagledetect.events.segments import data_segments


@dataclass
class Analysis:
    """A capture with everything found in it."""

    capture: Capture
    segments: pd.DataFrame
    messages: pd.DataFrame
    delack_samples: pd.DataFrame
    hosts: dict[str, HostProfile]
    findings: list[Finding]


def run_detectors(capture: Capture) -> Analysis:
    """Run every detector over one capture."""
    segments = data_segments(capture.packets, capture.connections)
    segments["message"] = number_messages(segments)
    message_table = messages(segments)
    samples = delack_samples(segments, capture.connections)
    hosts = fingerprint_hosts(samples)
    columns = DetectorInput(capture.packets, capture.connections, segments, message_table, hosts)
    for detector in CONNECTION_DETECTORS:
        columns.earlier_findings.extend(detector.detect(columns))
    findings = sorted(columns.earlier_findings, key=lambda f: -f.time_lost_s)
    return Analysis(capture, segments, message_table, samples, hosts, findings)
