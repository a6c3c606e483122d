"""Where the whole analysis of a large capture spends its time, stage by stage.

Runs `nagledetect analyze --format json FILE` (JSON to /dev/null), each run in a fresh
interpreter, with the stages of a capture read a batch at a time timed from outside:
the pass (the core's batches and the detectors on them, `streamed._collected`), the host step
and ranking (`CollectedParts.analysis`), the document (`build_document`) and the JSON written
(`write_json`, two forked writers). Prints each stage's median over the runs.

    python3 benchmarks/bench_stages.py --capture /tmp/big10.pcap --repeats 3
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

RUN = r"""
import atexit, json, os, sys, time
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # as `nagledetect.__main__` sets it
import nagledetect.cli as cli
import nagledetect.collected as collected
import nagledetect.streamed as streamed

marks = {}
start = time.perf_counter()


def timed(owner, name, stage):
    inner = getattr(owner, name)

    def wrapper(*args, **kwargs):
        began = time.perf_counter()
        try:
            return inner(*args, **kwargs)
        finally:
            marks[stage] = marks.get(stage, 0.0) + time.perf_counter() - began
    setattr(owner, name, wrapper)


@atexit.register
def report():
    marks["whole"] = time.perf_counter() - start
    print(STAGES_MARK + json.dumps(marks), file=sys.stderr)


timed(streamed, "_collected", "pass")
timed(collected.CollectedParts, "analysis", "host step and ranking")
timed(cli, "build_document", "document")
timed(cli, "write_json", "JSON")
sys.argv = ["nagledetect", "analyze", "--format", "json", sys.argv[1]]
cli.main()
"""
STAGES_MARK = "stages: "


def _run(capture: str) -> dict[str, float]:
    done = subprocess.run([sys.executable, "-c", f"STAGES_MARK = {STAGES_MARK!r}\n" + RUN,
                           str(Path(capture).resolve())],
                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                          check=True, cwd="/")
    line = next(line for line in done.stderr.splitlines() if line.startswith(STAGES_MARK))
    return json.loads(line[len(STAGES_MARK):])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--capture", required=True)
    parser.add_argument("--repeats", type=int, default=3)
    arguments = parser.parse_args()
    runs = [_run(arguments.capture) for _ in range(arguments.repeats)]
    print(f"{arguments.capture}, median of {len(runs)}")
    for stage in ("pass", "host step and ranking", "document", "JSON", "whole"):
        print(f"{stage:24s} {statistics.median(run.get(stage, 0.0) for run in runs):7.2f} s")


if __name__ == "__main__":
    main()
