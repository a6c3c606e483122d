"""`nagledetect lab`: reproduce the Nagle/delayed-ACK pathology on this Linux machine.

Needs root: it creates two network namespaces joined by a veth pair, runs a real client and
server with the scenario's writes and socket options, and captures the traffic with tcpdump.
"""

from __future__ import annotations

import statistics
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import click

from nagledetect.lab.netns import LabError
from nagledetect.lab.runner import run_scenario, shortened
from nagledetect.lab.samples import regenerate_samples
from nagledetect.lab.scenarios import OPTIONS, RECEIVER_OPTIONS, SCENARIOS, SIDES, Scenario


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
      sudo nagledetect lab run seed004-header-body -o /tmp/lab --variant nodelay
      sudo nagledetect lab run seed004-header-body -o /tmp/lab --variant nodelay --side client
      sudo nagledetect lab run seed004-header-body -o /tmp/lab --rtt-ms 80
      sudo nagledetect lab regenerate sample_traces
    """


@lab.command("list")
def list_scenarios() -> None:
    """List the scenarios: what each shows, which side holds, and what it runs."""
    for name, scenario in SCENARIOS.items():
        holder = f"{scenario.holder} holds" if scenario.holder else "no side holds"
        click.echo(f"{name:30} {scenario.shows:42} {holder:14} {scenario.description}")


def _summary(manifest: dict[str, Any]) -> str:
    latencies = [e["latency_s"] for c in manifest["connections"] for e in c["exchanges"]
                 if e["server_writes_bytes"]]
    median = f"{statistics.median(latencies) * 1000:8.2f} ms" if latencies else "     n/a   "
    summary = manifest["summary"]
    return (f"{manifest['scenario']:42} median exchange {median}   "
            f"stalled {summary['nagle_stalls']}/{summary['exchanges']}")


def _seconds(milliseconds: float) -> str:
    return f"{milliseconds / 1000:.3g} s"


def _stalls(summary: dict[str, Any]) -> str:
    count = summary["nagle_stalls"]
    return f"{count} stall{'' if count == 1 else 's'}, {_seconds(summary['stall_ms_total'])}"


def _why_this_side(scenario: Scenario, option: str, side: str) -> str:
    """Why the variant changed this side, or what the side to change would have been."""
    if scenario.holder is None:
        return "no single side holds in this scenario"
    right = scenario.variant_side(option)
    role = ("the side whose delayed ACK releases the holds" if option in RECEIVER_OPTIONS
            else "the side that holds")
    if side == right:
        return role
    return f"not {role}: that is the {right}"


def _comparison(scenario: Scenario, option: str, side: str, baseline: dict[str, Any],
                variant: dict[str, Any]) -> str:
    """One line: the option, the side it changed, and the stalls and stall time it saved."""
    return (f"TCP_{option.upper()} on the {side} ({_why_this_side(scenario, option, side)}): "
            f"{_stalls(baseline['summary'])} -> {_stalls(variant['summary'])}")


@lab.command("run")
@click.argument("scenario", type=click.Choice(sorted(SCENARIOS)))
@click.option("-o", "--output", "output_dir", type=click.Path(file_okay=False, path_type=Path),
              required=True, help="Folder for NAME.pcap and NAME.json.")
@click.option("--capture-at", type=click.Choice(["client", "server", "middle"]),
              help="Where tcpdump listens (middle: on a bridge between the two).")
@click.option("--mtu", type=click.IntRange(576, 65535), help="veth MTU (default 1500).")
@click.option("--offload/--no-offload", default=None, help="TSO/GSO/GRO on the veth pair.")
@click.option("--exchanges", type=click.IntRange(1), help="At most this many exchanges.")
@click.option("--rtt-ms", type=click.FloatRange(0, 2000),
              help="Round trip through the user-space delay line (half of it each way).")
@click.option("--jitter-ms", type=click.FloatRange(0, 1000),
              help="On the delay line, each frame waits a random 0 to this many ms more, in "
                   "order (a queue on the way).")
@click.option("--variant", "variants", multiple=True, type=click.Choice(OPTIONS),
              help="Also run with this socket option, and compare (repeatable). It goes on the "
                   "side that holds data (quickack: on its peer, whose delayed ACK releases it).")
@click.option("--side", type=click.Choice(SIDES),
              help="Put the variants' options on this side instead.")
def run(scenario: str, output_dir: Path, capture_at: str | None, mtu: int | None,
        offload: bool | None, exchanges: int | None, rtt_ms: float | None,
        jitter_ms: float | None, variants: tuple[str, ...], side: str | None) -> None:
    """Run SCENARIO, capture it, and write its manifest; print what the application measured.

    With --variant, run it again with the option added, and say which side changed and what
    it saved: the stalls and the time they cost, before and after."""
    chosen = SCENARIOS[scenario]
    changes = {key: value for key, value in (("capture_side", capture_at), ("mtu", mtu),
                                             ("offload", offload), ("rtt_ms", rtt_ms),
                                             ("jitter_ms", jitter_ms))
               if value is not None}
    chosen = replace(chosen, **changes)
    if exchanges:
        chosen = shortened(chosen, exchanges)
    try:
        click.echo(f"running {chosen.name} ...", err=True)
        baseline = run_scenario(chosen, output_dir)
        click.echo(_summary(baseline))
        comparisons = []
        for option in variants:
            variant = chosen.with_option(option, side)
            click.echo(f"running {variant.name} ...", err=True)
            manifest = run_scenario(variant, output_dir)
            click.echo(_summary(manifest))
            comparisons.append(_comparison(chosen, *variant.variant, baseline, manifest))
    except LabError as error:
        _fail(str(error))
    for line in comparisons:
        click.echo(line)
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
