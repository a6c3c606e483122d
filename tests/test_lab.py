"""The lab: scenarios and manifests without root; one short real run where root and namespaces exist."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from nagledetect.lab.runner import build_manifest, peer_spec, run_scenario, shortened
from nagledetect.lab.scenarios import LINE_BYTES, SCENARIOS, article_sizes
from tests.conftest import SAMPLE_TRACES


def test_every_scenario_has_a_seed_and_flows() -> None:
    assert len(SCENARIOS) >= 12
    for scenario in SCENARIOS.values():
        assert scenario.flows and scenario.seed and scenario.description


def test_line_by_line_articles_split_into_72_byte_writes() -> None:
    flow = SCENARIOS["seed000-nntp-lines"].flows[0]
    size = flow.response_sizes_bytes[0]
    writes = flow.server_writes_for(0)
    assert sum(writes) == size and max(writes) == LINE_BYTES
    assert SCENARIOS["seed000-nntp-whole"].flows[0].server_writes_for(0) == [size]


def test_article_sizes_are_reproducible_and_bounded() -> None:
    sizes = article_sizes(200)
    assert sizes == article_sizes(200)
    assert min(sizes) >= 300 and max(sizes) <= 60_000


def test_variant_adds_the_option_to_every_flow() -> None:
    variant = SCENARIOS["mixed"].with_option("cork")
    assert all("cork" in flow.client_options for flow in variant.flows)


def test_manifest_counts_stalls_beyond_think_time_and_pacing(tmp_path) -> None:
    scenario = shortened(SCENARIOS["trap-think-40ms"], 3)
    exchanges = [{"index": i, "start_s": 1.0 + i, "latency_s": latency, "client_writes_bytes": [30],
                  "server_writes_bytes": [30], "think_time_s": 0.04, "pause_before_s": 0.0}
                 for i, latency in enumerate((0.0405, 0.0411, 0.0820))]
    results = [{"flow": "think", "client": "10.77.0.1:5000", "server": "10.77.0.2:9000",
                "exchanges": exchanges}]
    manifest = build_manifest(scenario, tmp_path / "x.pcap", results)
    expected = manifest["connections"][0]["expected"]
    assert expected["nagle_stalls"] == 1  # only the 82 ms exchange exceeds 40 ms + 20 ms
    assert manifest["schema"] == "nagledetect-lab/1"


def test_peer_spec_has_one_pause_list_per_connection() -> None:
    spec = peer_spec(SCENARIOS["mixed"])
    for flow in spec["flows"]:
        assert len(flow["pauses_s"]) == flow["connections"]
        assert flow["pauses_s"][0][0] == 0.0


def _lab_available() -> bool:
    if os.geteuid() != 0 or not shutil.which("tcpdump") or not shutil.which("ethtool"):
        return False
    probe = subprocess.run(["ip", "netns", "add", "ndlab-probe"], capture_output=True)
    subprocess.run(["ip", "netns", "del", "ndlab-probe"], capture_output=True)
    return probe.returncode == 0


@pytest.mark.skipif(not _lab_available(), reason="needs root, tcpdump, ethtool and network namespaces")
def test_short_real_run_shows_40_ms_stalls_with_nagle_and_none_with_nodelay(tmp_path) -> None:
    nagle = run_scenario(shortened(SCENARIOS["seed003-nagle"], 6), tmp_path, "nagle")
    nodelay = run_scenario(shortened(SCENARIOS["seed003-nodelay"], 6), tmp_path, "nodelay")
    latencies = [e["latency_s"] for e in nagle["connections"][0]["exchanges"]]
    assert all(0.030 < latency < 0.1 for latency in latencies[1:])  # Linux delayed ACK: ~40 ms
    assert nagle["connections"][0]["expected"]["nagle_stalls"] >= 4
    assert nodelay["connections"][0]["expected"]["nagle_stalls"] == 0
    assert (tmp_path / "nagle.pcap").stat().st_size > 0
    listing = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    assert "ndlab-" not in listing  # torn down


def test_lab_refuses_without_root_in_one_line() -> None:
    if os.geteuid() == 0:
        pytest.skip("running as root")
    result = subprocess.run(["python3", "-m", "nagledetect", "lab", "run", "seed003-nagle", "-o",
                             "/tmp/x"], capture_output=True, text=True)
    assert result.returncode == 2 and len(result.stderr.strip().splitlines()) == 1


def test_committed_manifests_match_their_captures() -> None:
    """Every sample trace has a manifest, and each manifest connection is in the capture
    (checked with tcpdump, an independent reader)."""
    tcpdump = shutil.which("tcpdump")
    manifests = sorted(SAMPLE_TRACES.glob("*.json"))
    assert len(manifests) >= 12
    for path in manifests:
        manifest = json.loads(path.read_text())
        capture = SAMPLE_TRACES / manifest["capture"]["file"]
        assert capture.exists(), capture
        if not tcpdump:
            continue
        text = subprocess.run([tcpdump, "-n", "-r", str(capture)], capture_output=True,
                              text=True).stdout
        for connection in manifest["connections"]:
            client = connection["client"].replace("[", "").replace("]", "")
            address, port = client.rsplit(":", 1)
            assert f"{address}.{port} >" in text, (path.name, client)


def test_sample_traces_stay_small() -> None:
    total = sum(p.stat().st_size for p in Path(SAMPLE_TRACES).glob("*.pcap"))
    assert total < 8 * 1024 * 1024


def test_readme_table_is_rebuilt_from_the_manifests(tmp_path) -> None:
    from nagledetect.lab.samples import write_readme

    for manifest in SAMPLE_TRACES.glob("seed003-*.json"):
        (tmp_path / manifest.name).write_text(manifest.read_text())
    write_readme(tmp_path)
    table = (tmp_path / "README.md").read_text()
    assert "| `seed003-nagle.pcap` | 003 | client |" in table
    assert "39 of 40 exchanges stalled" in table  # the manifest's client-measured count
    assert "trap-rpc" not in table
