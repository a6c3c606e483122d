"""Time and memory of one run over many captures (`-j`), the main process apart from its workers.

    python3 benchmarks/bench_many.py --capture /tmp/mix10.pcap --copies 4 --jobs 2 --repeats 3

The capture is linked `--copies` times under a scratch folder (each link a capture of its own
to nagledetect), then `nagledetect analyze -j JOBS --format json LINKS...` runs `--repeats`
times, its document to /dev/null. Printed, as medians: wall seconds, the peak PSS of the main
process alone (what a run over many captures holds while they are analysed: the results taken
back from its workers) and the peak of the PSS summed over the process tree (as
`bench_read.py` reads it), sampled every 100 ms. To compare two commits, run this with
`PYTHONPATH` set to a checkout of each, alternating (the command runs in a neutral folder, so
that the checkout it is started from does not come first on `sys.path`).
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from bench_read import NEUTRAL_FOLDER, SAMPLE_INTERVAL_S, _tree_memory_kib  # noqa: E402


def _own_pss_kib(pid: int) -> int:
    try:
        rollup = Path(f"/proc/{pid}/smaps_rollup").read_text()
    except OSError:
        return 0
    return next((int(line.split()[1]) for line in rollup.splitlines()
                 if line.startswith("Pss:")), 0)


def timed_run(command: list[str]) -> tuple[float, int, int]:
    """Wall seconds, peak PSS of the main process and peak PSS of its tree (KiB)."""
    start = time.perf_counter()
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                               cwd=NEUTRAL_FOLDER)
    own = tree = 0
    while process.poll() is None:
        own = max(own, _own_pss_kib(process.pid))
        tree = max(tree, _tree_memory_kib(process.pid))
        time.sleep(SAMPLE_INTERVAL_S)
    elapsed = time.perf_counter() - start
    if process.returncode != 0:
        raise SystemExit(f"failed ({process.returncode}): {process.stderr.read().decode()}")
    return elapsed, own, tree


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--capture", type=Path, required=True)
    parser.add_argument("--copies", type=int, default=4)
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=3)
    arguments = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-many-") as folder:
        links = []
        for copy in range(arguments.copies):
            link = Path(folder) / f"copy{copy}{arguments.capture.suffix}"
            link.symlink_to(arguments.capture.resolve())
            links.append(str(link))
        command = [sys.executable, "-m", "nagledetect", "analyze", "-j", str(arguments.jobs),
                   "--format", "json", *links]
        runs = [timed_run(command) for _ in range(arguments.repeats)]
    print(f"{arguments.copies} copies of {arguments.capture}, -j {arguments.jobs}, "
          f"median of {arguments.repeats}")
    print(f"wall {statistics.median(r[0] for r in runs):.2f} s "
          f"({', '.join(f'{r[0]:.2f}' for r in runs)}); "
          f"main process peak PSS {statistics.median(r[1] for r in runs) / 1024:.0f} MB; "
          f"process tree peak PSS {statistics.median(r[2] for r in runs) / 1024:.0f} MB")


if __name__ == "__main__":
    main()
