"""Every finding's Wireshark display filter, applied by tshark itself to the capture, selects
exactly the frames its evidence rows name (or, past the cap, the stream's frames between its
first and last evidence frame). tshark is the judge here, not the code that wrote the filter."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from nagledetect.report import display_filter
from tests.conftest import SAMPLE_TRACES, corpus_file, require_tool

FILTERS_CHECKED = 12
"""Findings of one capture whose filters tshark applies; a capture with more checks a choice."""


def _document(path: Path) -> dict:
    return json.loads(subprocess.run(
        [sys.executable, "-m", "nagledetect", "analyze", "--format", "json", str(path)],
        capture_output=True, text=True, check=True).stdout)


def _tshark_frames(path: Path, shown: str) -> set[int]:
    output = subprocess.run([require_tool("tshark"), "-r", str(path), "-Y", shown, "-T", "fields",
                             "-e", "frame.number"], capture_output=True, text=True, check=True)
    return {int(line) for line in output.stdout.split()}


def _evidence_frames(finding: dict) -> set[int]:
    return {event[key] for event in finding["events"]
            for key in ("last_data_frame", "delayed_ack_frame", "released_frame")}


@pytest.mark.parametrize("path", [SAMPLE_TRACES / "seed003-nagle.pcap",
                                  SAMPLE_TRACES / "mixed.pcap", "zeek/ssh__ssh.pcap"],
                         ids=lambda p: Path(p).name)
def test_each_filter_selects_exactly_the_evidence_frames(path) -> None:
    """seed003: the stall's first event is frames 40 -> 41 -> 42 (2 bytes, the delayed ACK
    41.0 ms later, the held 28 bytes), which tshark shows in stream 0; the filter of every
    finding with evidence must give tshark's frames back as the evidence rows list them."""
    path = corpus_file(path) if isinstance(path, str) else path
    findings = _document(path)["findings"]
    with_evidence = [finding for finding in findings if finding["events"]]
    assert with_evidence
    if len(with_evidence) > FILTERS_CHECKED:
        # A tshark run a filter: the first finding of each kind, and the largest, show every
        # shape a filter takes (ranges, single frames, the span of a long list).
        firsts = {finding["kind"]: finding for finding in reversed(with_evidence)}
        largest = max(with_evidence, key=lambda finding: len(finding["events"]))
        with_evidence = [*firsts.values(), largest]
    for finding in with_evidence:
        assert finding["display_filter"].startswith(f"tcp.stream eq {finding['connection']} && ")
        selected = _tshark_frames(path, finding["display_filter"])
        if len(finding["events"]) <= display_filter.MAX_EVENTS_LISTED:
            assert selected == _evidence_frames(finding), finding["display_filter"]
        else:
            assert selected >= _evidence_frames(finding)
    if path.name == "seed003-nagle.pcap":
        assert {40, 41, 42} <= _tshark_frames(path, findings[0]["display_filter"])


def test_a_finding_without_evidence_rows_shows_its_stream() -> None:
    """seed003's stop-and-wait finding has no evidence rows: its filter is stream 0, the one
    conversation tshark's `tcp.stream` numbers in that capture (all 234 TCP frames)."""
    path = SAMPLE_TRACES / "seed003-nagle.pcap"
    (finding,) = [f for f in _document(path)["findings"] if f["kind"] == "stop-and-wait"]
    assert finding["display_filter"] == "tcp.stream eq 0"
    assert len(_tshark_frames(path, finding["display_filter"])) == 234


def test_past_the_cap_the_filter_is_the_span_of_the_stream(monkeypatch) -> None:
    """With the cap lowered to 4 runs, seed003's stall (39 events) gets the span form: tshark
    then selects every frame of stream 0 from the first evidence frame to the last."""
    from nagledetect.analysis import analyze_capture
    from nagledetect.report.document import build_document

    path = SAMPLE_TRACES / "seed003-nagle.pcap"
    monkeypatch.setattr(display_filter, "MAX_FRAME_RUNS", 4)
    analysis = analyze_capture(str(path))
    finding = build_document([analysis])["findings"][0]
    frames = _evidence_frames(finding)
    assert "," not in finding["display_filter"]
    stream = _tshark_frames(path, "tcp.stream eq 0")
    expected = {frame for frame in stream if min(frames) <= frame <= max(frames)}
    assert frames < expected == _tshark_frames(path, finding["display_filter"])
