"""The bundled sample traces: every lab scenario recorded once, with a README table.

`nagledetect lab regenerate sample_traces` rebuilds them all (a few minutes, root needed).
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from nagledetect.lab.runner import run_scenario
from nagledetect.lab.scenarios import SCENARIOS

README_HEAD = """# Sample traces

Real captures recorded by `nagledetect lab` on a Linux TCP stack: two network namespaces joined
by a veth pair (MTU 1500), tcpdump with snaplen 128 on the side named below. Each `NAME.pcap`
has a `NAME.json` manifest with the ground truth the application measured: every exchange's
start and latency, the writes on each side, the socket options (schema in `docs/lab.md`).

Regenerate them all (root needed, a few minutes):

    sudo nagledetect lab regenerate sample_traces

| capture | seed | side | scenario | what happened (application-measured) |
|---|---|---|---|---|
"""


def _happened(manifest: dict[str, Any]) -> str:
    latencies = [e["latency_s"] for c in manifest["connections"] for e in c["exchanges"]
                 if e["server_writes_bytes"]]
    summary = manifest["summary"]
    if not latencies:
        return f"{summary['connections']} connection(s), no request/response exchanges"
    return (f"median exchange {statistics.median(latencies) * 1000:.1f} ms; "
            f"{summary['nagle_stalls']} of {len(latencies)} exchanges stalled "
            f"on {summary['connections']} connection(s)")


def regenerate_samples(directory: Path, progress: Callable[[str], None]) -> Iterator[str]:
    """Record every scenario into `directory`; yields one summary line per capture."""
    rows = []
    for name, scenario in SCENARIOS.items():
        progress(f"recording {name} ...")
        manifest = run_scenario(scenario, directory)
        rows.append(f"| `{name}.pcap` | {scenario.seed} | {scenario.side} | "
                    f"{scenario.description} | {_happened(manifest)} |")
        yield f"{name}: {_happened(manifest)}"
    (directory / "README.md").write_text(README_HEAD + "\n".join(rows) + "\n")
