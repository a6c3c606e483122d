"""Detectors against ground truth: every sample trace's manifest says, from the application's own
timing, how many exchanges of each connection stalled and which side held the data.

The expected numbers are the manifests' (application-measured), never this tool's output.
"""

from __future__ import annotations

import json

import pytest

from nagledetect import load_capture
from nagledetect.analysis import run_detectors
from nagledetect.report.document import build_document
from tests.conftest import SAMPLE_TRACES

MANIFESTS = sorted(SAMPLE_TRACES.glob("*.json"))


def _document(manifest_path):
    manifest = json.loads(manifest_path.read_text())
    capture = SAMPLE_TRACES / manifest["capture"]["file"]
    return manifest, build_document([run_detectors(load_capture(str(capture)))])


def _connection_id(document, truth) -> int:
    for connection in document["connections"]:
        if {connection["client"], connection["server"]} == {truth["client"], truth["server"]}:
            return connection["id"]
    raise AssertionError(f"connection {truth['client']} -> {truth['server']} not in the capture")


@pytest.mark.parametrize("manifest_path", MANIFESTS, ids=[p.stem for p in MANIFESTS])
def test_stall_count_and_holder_match_the_application(manifest_path) -> None:
    manifest, document = _document(manifest_path)
    for truth in manifest["connections"]:
        connection = _connection_id(document, truth)
        stalls = [f for f in document["findings"]
                  if f["kind"] == "nagle-delack-stall" and f["connection"] == connection]
        found = sum(f["count"] for f in stalls)
        expected = truth["expected"]["nagle_stalls"]
        if truth["expected"]["clean"]:
            assert found == 0, (truth["flow"], [f["summary"] for f in stalls])
            continue
        assert abs(found - expected) <= 0.1 * expected, (truth["flow"], found, expected)
        holder = truth["client"] if truth["expected"]["holder"] == "client" else truth["server"]
        assert {f["sender"] for f in stalls} == {holder}


@pytest.mark.parametrize("manifest_path", MANIFESTS, ids=[p.stem for p in MANIFESTS])
def test_linux_receivers_fingerprint_at_about_40_ms_and_never_phase_lock(manifest_path) -> None:
    manifest, document = _document(manifest_path)
    if any(c["stack"] != "linux" for c in manifest["connections"]):
        pytest.skip("not a Linux-only capture")
    for host in document["hosts"]:
        if host["delack_samples"] >= 5:
            assert 36 <= host["delack_timer_ms"] <= 50, host
            assert host["stack_family"].startswith("Linux")
        assert not (host["phase_lock"] or {}).get("locked"), host
    assert not [f for f in document["findings"] if f["kind"] == "phase-lock"]


def _kinds(name: str) -> set[str]:
    _, document = _document(SAMPLE_TRACES / f"{name}.json")
    return {finding["kind"] for finding in document["findings"]}


def test_nodelay_with_many_small_writes_is_a_tinygram_flood() -> None:
    """seed003-nodelay: 15 two-byte writes per request leave as 15 packets (tcpdump shows 15
    length-2 segments per exchange); seed 000's line-by-line server with NODELAY likewise."""
    assert "tinygram-flood" in _kinds("seed003-nodelay")
    assert "tinygram-flood" in _kinds("seed000-nntp-lines-nodelay")
    assert "tinygram-flood" not in _kinds("seed003-cork")
    assert "tinygram-flood" not in _kinds("seed000-nntp-whole")


@pytest.mark.parametrize("trap", ["trap-think-40ms", "trap-think-200ms", "trap-paced-writes"])
def test_traps_are_named_for_what_they_are(trap: str) -> None:
    kinds = _kinds(trap)
    assert "nagle-delack-stall" not in kinds
    assert kinds & {"think-time", "idle"}
