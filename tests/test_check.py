"""`nagledetect check`: budgets, exit statuses, JUnit XML, GitHub annotations, baselines, config.

Expected counts come from the sample traces' manifests: seed003-nagle stalled 39 exchanges
(client-measured), trap-rpc none.
"""

from __future__ import annotations

import json
import subprocess
import sys
from xml.etree import ElementTree

from tests.conftest import PROJECT, SAMPLE_TRACES

NAGLE = str(SAMPLE_TRACES / "seed003-nagle.pcap")
CLEAN = str(SAMPLE_TRACES / "trap-rpc.pcap")


def check(*args: str, cwd=None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "nagledetect", "check", *args], capture_output=True,
                          text=True, cwd=cwd or PROJECT, timeout=120)


def analyzed(capture: str) -> dict:
    """The `analyze --format json` document of `capture`, as a baseline is written."""
    return json.loads(subprocess.run(
        [sys.executable, "-m", "nagledetect", "analyze", "--format", "json", capture],
        capture_output=True, text=True, check=True, timeout=120).stdout)


def test_within_budget_exits_0_and_over_budget_exits_1() -> None:
    assert check("--max-stalls", "0", CLEAN).returncode == 0
    result = check("--max-stalls", "0", NAGLE, CLEAN)
    assert result.returncode == 1
    lines = result.stdout.splitlines()
    assert lines[0].startswith("FAIL") and "39 stalls, budget 0" in lines[0]
    assert lines[1].startswith("PASS")
    assert check("--max-stalls", "39", NAGLE).returncode == 0


def test_a_capture_named_twice_gets_a_line_for_each_time() -> None:
    """As a linter reports a file given twice: each line is its own run's verdict (the lines
    once carried both runs' messages, joined, and twice). Each capture's connection ids are its
    own tcp.stream (tshark gives seed003-nagle's connection stream 0), so both say connection
    0."""
    lines = check("--max-stalls", "0", NAGLE, CLEAN, NAGLE).stdout.splitlines()
    assert len(lines) == 3 and lines[1] == f"PASS {CLEAN}: 0 stalls, budget 0"
    for line, connection in ((lines[0], 0), (lines[2], 0)):
        assert line.startswith(f"FAIL {NAGLE}: max-stalls: 39 stalls, budget 0; "
                               f"connection {connection} (10.77.0.1:48162 -> 10.77.0.2:9000)")
        assert line.count("39 stalls") == 1


def test_stall_time_share_and_kinds() -> None:
    assert check("--max-stall-time", "1.0", NAGLE).returncode == 1  # 39 x ~41.5 ms = ~1.6 s
    assert check("--max-stall-time", "2.0", NAGLE).returncode == 0
    assert check("--max-stall-share", "0.5", NAGLE).returncode == 1  # about 80% of the connection
    assert check("--fail-on", "tinygram-flood", str(SAMPLE_TRACES / "seed003-nodelay.pcap")).returncode == 1
    assert check("--fail-on", "tinygram-flood", NAGLE).returncode == 0


def test_junit_and_github_outputs(tmp_path) -> None:
    junit = tmp_path / "nagle.xml"
    result = check("--max-stalls", "0", "--junit", str(junit), "--github", NAGLE, CLEAN)
    suite = ElementTree.parse(junit).getroot().find("testsuite")
    cases = suite.findall("testcase")
    assert [c.get("name") for c in cases] == ["max-stalls", "max-stalls"]
    failure = cases[0].find("failure")
    assert failure is not None and "connection 0" in failure.get("message")
    assert "TCP_NODELAY" in failure.get("message") and "s lost" in failure.get("message")
    assert cases[1].find("failure") is None
    assert any(line.startswith("::error file=") for line in result.stdout.splitlines())


def test_baseline_fails_only_on_regressions(tmp_path) -> None:
    document = analyzed(NAGLE)
    baseline = tmp_path / "base.json"
    baseline.write_text(json.dumps(document))
    assert check("--baseline", str(baseline), NAGLE).returncode == 0
    for finding in document["findings"]:
        finding["count"] //= 2
        finding["time_lost_s"] /= 2
    baseline.write_text(json.dumps(document))
    assert check("--baseline", str(baseline), NAGLE).returncode == 1


def test_budgets_from_pyproject_and_flags_win(tmp_path) -> None:
    (tmp_path / "pyproject.toml").write_text("[tool.nagledetect]\nmax-stalls = 0\n")
    assert check(NAGLE, cwd=tmp_path).returncode == 1
    assert check("--max-stalls", "100", NAGLE, cwd=tmp_path).returncode == 0
    (tmp_path / "pyproject.toml").write_text("[tool.nagledetect]\nmax-stallz = 0\n")
    result = check(NAGLE, cwd=tmp_path)
    assert result.returncode == 2 and "unknown budget key" in result.stderr


PACED = str(SAMPLE_TRACES / "paced-40ms.pcap")


def test_a_confidence_floor_leaves_unproven_stalls_out_of_every_budget(tmp_path) -> None:
    """paced-40ms: two writes 38-45 ms apart, which the trace cannot tell from holds (its
    manifest: no exchange held; the writes' own times show the pacing), reported as one
    low-confidence nagle-delack-stall finding of 22 stalls. seed003-nagle's 39 holds, each
    released microseconds after the server's delayed ACK, are of high confidence."""
    assert check(PACED).returncode == 1
    floored = check("--min-confidence", "medium", PACED)
    assert floored.returncode == 0
    assert floored.stdout.startswith(f"PASS {PACED}: 0 stalls")
    assert "(1 finding(s) of low confidence not counted)" in floored.stdout
    assert check("--min-confidence", "high", NAGLE).returncode == 1
    assert check("--min-confidence", "medium", "--max-stall-time", "0", PACED).returncode == 0
    (tmp_path / "nagledetect.toml").write_text('min-confidence = "medium"\n')
    assert check(PACED, cwd=tmp_path).returncode == 0
    assert check("--min-confidence", "low", PACED, cwd=tmp_path).returncode == 1
    (tmp_path / "nagledetect.toml").write_text('min-confidence = "certain"\n')
    wrong = check(PACED, cwd=tmp_path)
    assert wrong.returncode == 2 and "min-confidence must be one of" in wrong.stderr


def test_a_confidence_floor_applies_to_the_baseline_too(tmp_path) -> None:
    """A baseline's low-confidence stalls are left out as the run's are: seed003-nagle against
    a baseline whose findings were all low would otherwise be a regression from nothing."""
    document = analyzed(NAGLE)
    for finding in document["findings"]:
        finding["confidence"]["level"] = "low"
    baseline = tmp_path / "base.json"
    baseline.write_text(json.dumps(document))
    assert check("--baseline", str(baseline), NAGLE).returncode == 0
    assert check("--baseline", str(baseline), "--min-confidence", "medium", NAGLE).returncode == 1


def test_bad_baseline_is_an_input_error(tmp_path) -> None:
    bogus = tmp_path / "b.json"
    bogus.write_text("{}")
    result = check("--baseline", str(bogus), NAGLE)
    assert result.returncode == 2 and len(result.stderr.strip().splitlines()) == 1


def test_the_gate_reads_each_finding_once_however_many_captures(monkeypatch) -> None:
    """The gate over every sample trace (each its own capture) goes through the document's
    findings once, and reads only those its rules look at (here the stalls, picked by the
    document's kinds): they are read from disk a chunk at a time, and reading them once per
    capture made a gate over 1,600 captures take 13 s, over 16,000 hours. The rules still see
    each capture's own findings: seed003's 39 stalls fail it, trap-rpc passes. The stalls are
    the Nagle family's findings (classic-stream's stream coalescing among them)."""
    from nagledetect import cli
    from nagledetect.analysis import Wanted
    from nagledetect.detectors.kinds import NAGLE_FAMILY
    from nagledetect.gate import Budgets, evaluate
    from nagledetect.report import document

    paths = tuple(str(path) for path in sorted(SAMPLE_TRACES.glob("*.pcap")))
    built = document.build_document(cli._analyze_one_by_one(paths, None, Wanted()))
    stalls = [entry for entry in built["findings"] if entry["kind"] in NAGLE_FAMILY]
    read = []
    original = document.FindingEntries._entries

    def counted(self, positions) -> list:
        read.extend(positions.tolist())
        return original(self, positions)

    monkeypatch.setattr(document.FindingEntries, "_entries", counted)
    results = evaluate(built, Budgets(max_stalls=0))
    assert len(built["findings"]) > 20 and 0 < len(stalls) < len(built["findings"])
    assert len(read) == len(set(read)) == len(stalls)
    passed = {result.capture: result.passed for result in results}
    assert len(passed) == len(paths)
    assert passed[NAGLE] is False and passed[CLEAN] is True
    assert passed[str(SAMPLE_TRACES / "classic-stream.pcap")] is False
    assert any("39 stalls, budget 0" in r.message for r in results if r.capture == NAGLE)
