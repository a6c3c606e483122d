"""Small captures, where start-up is most of the run: one small capture's text answer, and one
run over many small captures, for one or more checkouts of the project in the same run.

    python3 benchmarks/bench_small.py --checkout . --checkout /path/to/older --repeats 5

Each round runs, for every checkout in turn (`PYTHONPATH` set to it):
  - `python3 -m nagledetect sample_traces/seed003-nagle.pcap`;
  - `python3 -m nagledetect analyze -j 1 --format json CORPORA` (every capture of the shared
    corpora, 1,618 files).
Each checkout's modules are compiled once first and read from their cache, as an installed
package's are (a checkout where PYTHONDONTWRITEBYTECODE is set compiles them every run, about
0.1 s more). tcptrace on the small capture is timed beside them, the floor a compiled tool
sets. Printed: medians of wall seconds and peak RSS.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent.parent
SMALL = HERE / "sample_traces" / "seed003-nagle.pcap"
CORPORA = HERE.parent / "shared" / "corpora"


def timed(command: list[str], environment: dict[str, str]) -> tuple[float, int]:
    """Wall seconds and peak RSS (KiB) of one run of `command`, its output discarded. It runs
    in the checkout on `PYTHONPATH` (`python -m` puts the working folder first on the path)."""
    start = time.perf_counter()
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                               env=environment, cwd=environment.get("PYTHONPATH", HERE))
    _, status, usage = os.wait4(process.pid, 0)
    seconds = time.perf_counter() - start
    if os.waitstatus_to_exitcode(status) not in (0, 1):
        raise SystemExit(f"{' '.join(command)} failed with status {status}")
    return seconds, usage.ru_maxrss


def runs(checkouts: list[str]) -> dict[str, tuple[list[str], dict[str, str]]]:
    """The commands of a round by name, each with its environment."""
    made: dict[str, tuple[list[str], dict[str, str]]] = {}
    tcptrace = shutil.which("tcptrace")
    if tcptrace:
        made["tcptrace -n seed003"] = ([tcptrace, "-n", str(SMALL)], dict(os.environ))
    for checkout in checkouts:
        environment = dict(os.environ, PYTHONPATH=str(Path(checkout).resolve()))
        environment.pop("PYTHONDONTWRITEBYTECODE", None)
        made[f"{checkout}: seed003 text"] = (
            [sys.executable, "-m", "nagledetect", str(SMALL)], environment)
        made[f"{checkout}: corpora -j 1 json"] = (
            [sys.executable, "-m", "nagledetect", "analyze", "-j", "1", "--format", "json",
             str(CORPORA)], environment)
    return made


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--checkout", action="append", default=[],
                        help="a checkout of the project (repeat to compare; default: this one)")
    parser.add_argument("--repeats", type=int, default=5)
    options = parser.parse_args()
    commands = runs(options.checkout or [str(HERE)])
    for command, environment in commands.values():
        timed(command, environment)  # compiles each checkout's modules once
    results: dict[str, list[tuple[float, int]]] = {name: [] for name in commands}
    for _ in range(options.repeats):
        for name, (command, environment) in commands.items():
            results[name].append(timed(command, environment))
    for name, measured in results.items():
        seconds = statistics.median(run[0] for run in measured)
        memory_mb = statistics.median(run[1] for run in measured) / 1024
        print(f"{name:60s} {seconds:7.3f} s {memory_mb:8.1f} MB")


if __name__ == "__main__":
    main()
