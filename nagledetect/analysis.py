"""From a loaded capture to findings: events, host fingerprints, detectors, phase locking, advice.

This is the one place that orders the pipeline; every step below it is a pure function of the
tables handed to it.
"""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from nagledetect.api import Capture
from nagledetect.detectors import CONNECTION_DETECTORS, nagle_stall, phase_lock, segment_parity
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
    parity: pd.DataFrame


def run_detectors(capture: Capture) -> Analysis:
    """Run every detector over one capture."""
    if capture.packets.empty:
        return Analysis(capture, pd.DataFrame(), pd.DataFrame(), pd.DataFrame(), {}, [],
                        pd.DataFrame())
    segments = data_segments(capture.packets, capture.connections)
    segments["message"] = number_messages(segments)
    message_table = messages(segments)
    samples = delack_samples(segments, capture.connections)
    hosts = fingerprint_hosts(samples)
    columns = DetectorInput(capture.packets, capture.connections, segments, message_table, hosts)
    for detector in CONNECTION_DETECTORS:
        columns.earlier_findings.extend(detector.detect(columns))
    delayed = samples[samples["delayed"]]
    hold_ms_by_host = {str(host): rows["hold_ms"].to_numpy() for host, rows in delayed.groupby("host")}
    stalls = [f for f in columns.earlier_findings if f.kind == nagle_stall.KIND]
    columns.earlier_findings.extend(phase_lock.detect_hosts(hosts, hold_ms_by_host, stalls))
    findings = sorted(columns.earlier_findings, key=lambda f: -f.time_lost_s)
    parity = segment_parity.parity_table(columns)
    return Analysis(capture, segments, message_table, samples, hosts, findings, parity)
