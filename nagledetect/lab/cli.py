"""`nagledetect lab`: reproduce the Nagle/delayed-ACK pathology on this Linux machine.

Needs root: it creates two network namespaces joined by a veth pair, runs a real client and
server with the scenario's writes and socket options, and captures the traffic with tcpdump.
"""

from __future__ import annotations

import statistics
import sys
from pathlib import Path
from typing import Any

import click

from nagledetect.lab.netns import LabError
from nagledetect.lab.runner import run_scenario, shortened
from nagledetect.lab.samples import regenerate_samples
from nagledetect.lab.scenarios import OPTIONS, SCENARIOS


def _fail(message: str) -> None:
    click.echo(f"nagledetect lab: error: {message}", err=True)
    sys.exit(2)


@click.group()
def lab() -> None:
    """Reproduce the pathology on this machine (root), with ground truth.

    \b
    Examples:
      sudo nagledetect lab list
      sudo nagledetect lab run seed003-nagle -o /tmp/lab
      sudo nagledetect lab run seed003-nagle -o /tmp/lab --variant nodelay --variant cork
      sudo nagledetect lab run seed004-header-body -o /tmp/lab --rtt-ms 80
      sudo nagledetect lab regenerate sample_traces
    """


@lab.command("list")
def list_scenarios() -> None:
    """List the scenarios, with the seed document each reproduces."""
    for name, scenario in SCENARIOS.items():
        click.echo(f"{name:30} seed {scenario.seed:5} {scenario.description}")


def _summary(manifest: dict[str, Any]) -> str:
    latencies = [e["latency_s"] for c in manifest["connections"] for e in c["exchanges"]
                 if e["server_writes_bytes"]]
    median = f"{statistics.median(latencies) * 1000:8.2f} ms" if latencies else "     n/a   "
    summary = manifest["summary"]
    return (f"{manifest['scenario']:42} median exchange {median}   "
            f"stalled {summary['nagle_stalls']}/{summary['exchanges']}")


@lab.command("run")
@click.argument("scenario", type=click.Choice(sorted(SCENARIOS)))
@click.option("-o", "--output", "output_dir", type=click.Path(file_okay=False, path_type=Path),
              required=True, help="Folder for NAME.pcap and NAME.json.")
@click.option("--side", type=click.Choice(["client", "server", "middle"]),
              help="Where tcpdump listens (middle: on a bridge between the two).")
@click.option("--mtu", type=click.IntRange(576, 65535), help="veth MTU (default 1500).")
@click.option("--offload/--no-offload", default=None, help="TSO/GSO/GRO on the veth pair.")
@click.option("--exchanges", type=click.IntRange(1), help="At most this many exchanges.")
@click.option("--rtt-ms", type=click.FloatRange(0, 2000),
              help="Round trip through the user-space delay line (half of it each way).")
@click.option("--variant", "variants", multiple=True, type=click.Choice(OPTIONS),
              help="Also run with this client socket option, and compare (repeatable).")
def run(scenario: str, output_dir: Path, side: str | None, mtu: int | None,
        offload: bool | None, exchanges: int | None, rtt_ms: float | None,
        variants: tuple[str, ...]) -> None:
    """Run SCENARIO, capture it, and write its manifest; print what the application measured."""
    chosen = SCENARIOS[scenario]
    changes = {key: value for key, value in (("side", side), ("mtu", mtu), ("offload", offload),
                                             ("rtt_ms", rtt_ms)) if value is not None}
    chosen = chosen.__class__(**{**chosen.__dict__, **changes})
    if exchanges:
        chosen = shortened(chosen, exchanges)
    runs = [(chosen, chosen.name)] + [(chosen.with_option(v), f"{chosen.name}+{v}") for v in variants]
    try:
        for variant, name in runs:
            click.echo(f"running {name} ...", err=True)
            manifest = run_scenario(variant, output_dir, name)
            click.echo(_summary(manifest))
    except LabError as error:
        _fail(str(error))
    click.echo(f"captures in {output_dir}; analyse with: nagledetect {output_dir}/*.pcap", err=True)


@lab.command()
@click.argument("directory", type=click.Path(file_okay=False, path_type=Path))
def regenerate(directory: Path) -> None:
    """Re-record every sample trace into DIRECTORY, with manifests and the README table."""
    try:
        for line in regenerate_samples(directory, progress=lambda text: click.echo(text, err=True)):
            click.echo(line)
    except LabError as error:
        _fail(str(error))
