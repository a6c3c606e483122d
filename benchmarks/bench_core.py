"""The compiled core's one pass (read, decode, rebuild connections, find the data segments in
context: `_core.flow_tables`) beside its peers on the same file in the same run.

    python3 benchmarks/bench_core.py --capture /tmp/mix10.pcap --repeats 3

Each round runs, in this order, `tcpdump -r FILE -w /dev/null` (libpcap's read floor),
`tcptrace -n FILE` (output to /dev/null) and a fresh Python process that imports the core and
runs `flow_tables([FILE], None, False)` as the analysis runs it where no chart or table is
wanted (no packet table), timing the whole process (start-up included) and its peak RSS.
Printed: each one's median wall seconds and peak memory, and the core's ratios to the peers.
The full analysis is `bench_read.py`'s; this is the per-packet work the core has taken over.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import time

CORE_PASS = ("import sys; from nagledetect import _core; "
             "made = _core.flow_tables([sys.argv[1]], None, False); "
             "print(len(made['connections']['first_frame']), len(made['gaps']['connection']))")


def timed(command: list[str]) -> tuple[float, int]:
    """Wall seconds and peak RSS (KiB) of one run of `command`, its output discarded."""
    start = time.perf_counter()
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _, status, usage = os.wait4(process.pid, 0)
    seconds = time.perf_counter() - start
    process.returncode = os.waitstatus_to_exitcode(status)
    if process.returncode:
        raise SystemExit(f"{command[0]} failed with status {process.returncode}")
    return seconds, usage.ru_maxrss


def commands(capture: str) -> dict[str, list[str]]:
    found = {"core": [sys.executable, "-c", CORE_PASS, capture]}
    if shutil.which("tcpdump"):
        found["tcpdump"] = ["tcpdump", "-r", capture, "-w", os.devnull]
    if shutil.which("tcptrace"):
        found["tcptrace"] = ["tcptrace", "-n", capture]
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--capture", required=True)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    runs: dict[str, list[tuple[float, int]]] = {}
    for _ in range(args.repeats):
        for name, command in commands(args.capture).items():
            runs.setdefault(name, []).append(timed(command))
    medians = {name: statistics.median(s for s, _ in results) for name, results in runs.items()}
    for name, results in runs.items():
        peak_mb = max(kib for _, kib in results) / 1024
        print(f"{name:9s} {medians[name]:8.2f} s  peak {peak_mb:8.0f} MB  "
              f"(runs: {', '.join(f'{s:.2f}' for s, _ in results)})")
    for peer in ("tcpdump", "tcptrace"):
        if peer in medians:
            print(f"core / {peer}: {medians['core'] / medians[peer]:.2f}")


if __name__ == "__main__":
    main()
