"""An archive of many small real captures: nagledetect over all of them, beside tcptrace on each.

    python3 benchmarks/bench_archive.py ../shared/corpora/zeek --min-bytes 2048 --jobs 2 --repeats 3

Every capture (.pcap, .pcapng, .cap) of at least `--min-bytes` under the folders given, in name
order, is analysed `--repeats` times by each command, in turn:
  - nagledetect analyze -j JOBS --format json CAPTURES...   (one run, JOBS worker processes)
  - nagledetect analyze -j 1 --format json CAPTURES...      (one run, one process)
  - tcptrace -n -l CAPTURE, once per capture, JOBS at a time (xargs -P JOBS)
  - the same, one at a time
With `--reports`, also (one run each, JOBS worker processes):
  - nagledetect report -j JOBS -o FILE CAPTURES...           (the HTML report, with its charts)
  - nagledetect analyze -j JOBS --tables FOLDER CAPTURES...  (CSV tables besides the text)
Outputs go to /dev/null (files to a scratch folder). Printed: medians of wall seconds,
captures a second, and the peak PSS summed over the process tree (sampled every 100 ms, as
`bench_read.py` reads it). Each capture is a process of its own to tcptrace, as it is when
tcptrace is run over an archive; nagledetect starts once (about 0.45 s of imports) and hands
the captures to its workers.

    python3 benchmarks/bench_archive.py ../shared/corpora/zeek --min-bytes 2048 --per-capture

instead analyses every capture in this process as `analyze --format json` does (without the
charts, the JSON document to /dev/null), once to warm up and then `--repeats` times, and
prints the CPU time a capture takes, without start-up or workers: each alone
(`analyze_capture`, a document each), and in the groups a run over all of them makes
(`analyze_together`, one document).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from bench_many import timed_run  # noqa: E402

CAPTURE_SUFFIXES = (".pcap", ".pcapng", ".cap")


def archive_captures(folders: list[Path], min_bytes: int) -> list[str]:
    """The captures under `folders` of at least `min_bytes`, in name order."""
    return sorted(str(path.resolve()) for folder in folders for path in folder.rglob("*")
                  if path.is_file() and path.suffix in CAPTURE_SUFFIXES
                  and path.stat().st_size >= min_bytes)


def commands(captures: list[str], jobs: int, scratch: str, reports: bool
             ) -> dict[str, list[str]]:
    """The commands to time (the capture list for tcptrace written to `scratch`); with
    `reports`, the report and tables runs too, writing there."""
    analyze = [sys.executable, "-m", "nagledetect", "analyze", "--format", "json"]
    listed = Path(scratch) / "captures.txt"
    listed.write_text("\n".join(captures) + "\n")

    def tcptrace_each(at_once: int) -> list[str]:
        """tcptrace on each capture, `at_once` at a time: xargs hands 50 paths to each shell,
        which runs tcptrace on them one by one (xargs would stop at the first tcptrace that
        exits with status 255, as it does on a capture it cannot read)."""
        loop = "for capture; do tcptrace -n -l \"$capture\"; done; true"
        return ["bash", "-c", f"xargs -d '\\n' -a {listed} -P {at_once} -n 50 bash -c '{loop}' _ "
                              "> /dev/null 2>&1; true"]

    timed = {f"nagledetect analyze -j {jobs}": [*analyze, "-j", str(jobs), *captures],
             "nagledetect analyze -j 1": [*analyze, "-j", "1", *captures]}
    if reports:
        nagledetect = [sys.executable, "-m", "nagledetect"]
        timed[f"nagledetect report -j {jobs}"] = [
            *nagledetect, "report", "-j", str(jobs), "-o", f"{scratch}/report.html", *captures]
        timed[f"nagledetect analyze --tables -j {jobs}"] = [
            *nagledetect, "analyze", "-j", str(jobs), "--tables", f"{scratch}/tables", *captures]
    return {**timed, f"tcptrace -n -l, {jobs} at a time": tcptrace_each(jobs),
            "tcptrace -n -l, one at a time": tcptrace_each(1)}


def cpu_ms_per_capture(captures: list[str], repeats: int, together: bool) -> list[float]:
    """CPU milliseconds a capture takes analysed and written in this process, per pass: each
    alone, or (`together`) in the groups a run over all of them makes, in one document."""
    from nagledetect.analysis import analyze_capture, analyze_together, capture_groups
    from nagledetect.report.document import build_document, write_json

    def analyses() -> list:
        if not together:
            return [analyze_capture(path, workers=1, charts=False) for path in captures]
        return [analysis for group in capture_groups(captures, 1)
                for analysis in analyze_together([captures[index] for index in group])]

    def one_pass() -> float:
        start = time.process_time()
        made = analyses()
        with open(os.devnull, "wb") as out:
            if together:
                write_json(build_document(made), out, workers=1)
            else:
                for analysis in made:
                    write_json(build_document([analysis]), out, workers=1)
        return (time.process_time() - start) * 1000 / len(captures)

    one_pass()
    return [one_pass() for _ in range(repeats)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folders", type=Path, nargs="+")
    parser.add_argument("--min-bytes", type=int, default=0)
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--per-capture", action="store_true",
                        help="CPU a capture takes in this process, not whole runs")
    parser.add_argument("--reports", action="store_true",
                        help="also time the HTML report and --tables over the archive")
    arguments = parser.parse_args()
    captures = archive_captures(arguments.folders, arguments.min_bytes)
    if not captures:
        raise SystemExit("no captures found")
    if arguments.per_capture:
        for together in (False, True):
            passes = cpu_ms_per_capture(captures, arguments.repeats, together)
            print(f"{len(captures)} captures {'together' if together else 'alone'}: "
                  f"{statistics.median(passes):.2f} ms of CPU a capture (median of "
                  f"{arguments.repeats}: {', '.join(f'{ms:.2f}' for ms in passes)})")
        return
    runs: dict[str, list[tuple[float, int, int]]] = {}
    with tempfile.TemporaryDirectory(prefix="bench-archive-") as scratch:
        timed = commands(captures, arguments.jobs, scratch, arguments.reports)
        for _ in range(arguments.repeats):
            for name, command in timed.items():
                runs.setdefault(name, []).append(timed_run(command))
    total_mb = sum(Path(path).stat().st_size for path in captures) / 1e6
    print(f"{len(captures)} captures, {total_mb:.1f} MB, median of {arguments.repeats}")
    print(f"{'command':40} {'seconds':>8} {'captures/s':>11} {'peak MB':>8}")
    for name, timed in runs.items():
        seconds = statistics.median(run[0] for run in timed)
        peak_mb = statistics.median(run[2] for run in timed) / 1024
        print(f"{name:40} {seconds:8.2f} {len(captures) / seconds:11.0f} {peak_mb:8.0f}")


if __name__ == "__main__":
    main()
