"""Throughput and memory of nagledetect's stages and whole analysis, beside tcpdump and tcptrace.

Builds (or reuses) a large capture by replicating a real trace with new addresses, then runs,
each in its own process so peak memory is its own, `--repeats` times:
  - tcpdump -r FILE -w /dev/null        (the libpcap read floor)
  - tcptrace -n -l FILE                 (a C TCP analyser, full connection analysis)
  - nagledetect read + decode           (nagledetect.read.capture.decoded_batches)
  - nagledetect read + decode + flows   (nagledetect.load_capture: connections, roles, RTT)
  - nagledetect analyze --format json   (the whole analysis, every detector, JSON to /dev/null)
  - nagledetect report -o FILE.html     (the whole analysis and the HTML report, in a scratch folder)
  - nagledetect --tables DIR (csv)      (the whole analysis with its packet and message tables
                                         written as CSV to a scratch folder; only with
                                         `--only tables`)
and prints medians in packets/s, ratios against tcpdump, and peak memory (bytes per packet):
the peak of the sum of PSS (proportional set size) over the process and its children, sampled
every 20 ms, since the whole analysis takes the parts of a large capture in worker processes
(pages forked processes share count once).

    python3 benchmarks/bench_read.py --source sample_traces/seed003-nagle.pcap --packets 10000000
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
STAGES = {
    "decode": "from nagledetect.read.capture import decoded_batches\n"
              "accounting, batches = decoded_batches(PATH)\n"
              "for _ in batches: pass\n"
              "packets = accounting.packets_read\n",
    "flows": "from nagledetect import load_capture\n"
             "capture = load_capture(PATH)\n"
             "packets = capture.accounting.packets_read\n",
}


NEUTRAL_FOLDER = "/"
"""Where the commands run: `python3 -m` puts its working folder first on `sys.path`, so run
from a checkout it would import that checkout, whatever `PYTHONPATH` says."""
SAMPLE_INTERVAL_S = 0.1
"""Reading PSS makes the kernel walk the page tables: sampled more often, it slows the run."""


def _tree_memory_kib(pid: int) -> int:
    """Memory of a process and all its descendants, from /proc (0 once it is gone): the sum of
    their proportional set sizes (PSS), so a page that forked processes share counts once, as
    it takes memory once (their RSS would count it in every process that maps it)."""
    total = 0
    pending = [pid]
    while pending:
        current = pending.pop()
        try:
            rollup = Path(f"/proc/{current}/smaps_rollup").read_text()
            children = Path(f"/proc/{current}/task/{current}/children").read_text().split()
        except OSError:
            continue
        total += next((int(line.split()[1]) for line in rollup.splitlines()
                       if line.startswith("Pss:")), 0)
        pending.extend(int(child) for child in children)
    return total


def _timed(command: list[str]) -> tuple[float, int]:
    """Wall seconds and peak memory (KiB, summed over the process tree) of a command."""
    start = time.perf_counter()
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                               cwd=NEUTRAL_FOLDER)
    peak_tree = 0
    while process.poll() is None:
        peak_tree = max(peak_tree, _tree_memory_kib(process.pid))
        time.sleep(SAMPLE_INTERVAL_S)
    elapsed = time.perf_counter() - start
    if process.returncode != 0:
        raise SystemExit(f"failed: {' '.join(command)}")
    return elapsed, peak_tree


def _python_stage(stage: str, path: Path) -> list[str]:
    code = f"PATH = {str(path)!r}\n" + STAGES[stage]
    return [sys.executable, "-c", code]


def _count_packets(path: Path) -> int:
    code = f"PATH = {str(path)!r}\n" + STAGES["decode"] + "print(packets)\n"
    return int(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                              check=True).stdout)


ASKED_FOR_ONLY = {"nagledetect --tables DIR (csv)"}
"""Commands run only when `--only` names them (writing a table of every packet is long)."""


def run(path: Path, repeats: int, only: list[str] | None = None,
        memory: str | None = None) -> dict:
    with tempfile.TemporaryDirectory(prefix="bench-report-") as scratch:
        return _run(path, repeats, only, Path(scratch) / "report.html", memory)


def _run(path: Path, repeats: int, only: list[str] | None, html_path: Path,
         memory: str | None) -> dict:
    path = path.resolve()
    packets = _count_packets(path)
    memory_option = ["--memory", memory] if memory else []
    commands = {
        "tcpdump -r FILE -w /dev/null": ["tcpdump", "-r", str(path), "-w", "/dev/null"],
        "tcptrace -n -l FILE": ["tcptrace", "-n", "-l", str(path)],
        "nagledetect read+decode": _python_stage("decode", path),
        "nagledetect read+decode+connections": _python_stage("flows", path),
        "nagledetect analyze --format json": [sys.executable, "-m", "nagledetect", "analyze",
                                              "--format", "json", *memory_option, str(path)],
        "nagledetect report -o FILE.html": [sys.executable, "-m", "nagledetect", "report",
                                            *memory_option, str(path), "-o", str(html_path)],
        "nagledetect --tables DIR (csv)": [sys.executable, "-m", "nagledetect", "analyze",
                                           "--format", "json", *memory_option, "--tables",
                                           str(html_path.parent / "tables"), str(path)],
    }
    results = {}
    for name, command in commands.items():
        chosen = any(word in name for word in only) if only else name not in ASKED_FOR_ONLY
        if shutil.which(command[0]) is None or not chosen:
            continue
        runs = [_timed(command) for _ in range(repeats)]
        seconds = statistics.median(r[0] for r in runs)
        rss_kib = max(r[1] for r in runs)
        results[name] = {"seconds": seconds, "packets_per_s": packets / seconds,
                         "peak_rss_mb": rss_kib / 1024, "bytes_per_packet": rss_kib * 1024 / packets}
    floor = results.get("tcpdump -r FILE -w /dev/null", {}).get("seconds")
    for entry in results.values():
        entry["x_tcpdump_time"] = entry["seconds"] / floor if floor else None
    return {"file": str(path), "bytes": path.stat().st_size, "packets": packets,
            "repeats": repeats, "results": results}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--source", type=Path, default=Path("sample_traces/seed003-nagle.pcap"))
    parser.add_argument("--packets", type=int, default=10_000_000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--capture", type=Path, help="use this large capture instead of building one")
    parser.add_argument("--json", action="store_true", help="print the results as JSON")
    parser.add_argument("--only", action="append", metavar="WORD",
                        help="run only the commands whose name contains WORD (repeatable), e.g. "
                             "--only tcpdump --only tcptrace --only analyze on 100 M packets, "
                             "where the in-memory stages would need tens of GB")
    parser.add_argument("--memory", metavar="SIZE",
                        help="pass --memory SIZE to nagledetect analyze and report")
    arguments = parser.parse_args()
    sys.path.insert(0, str(HERE))
    from make_large_capture import build

    with tempfile.TemporaryDirectory() as folder:
        path = arguments.capture
        if path is None:
            path = Path(folder) / "large.pcap"
            build(arguments.source, path, arguments.packets, 128)
        report = run(path, arguments.repeats, arguments.only, arguments.memory)
    if arguments.json:
        print(json.dumps(report, indent=2))
        return
    print(f"{report['packets']:,} packets, {report['bytes'] / 1e6:.0f} MB, median of {report['repeats']}")
    print(f"{'command':40} {'seconds':>8} {'M pkt/s':>8} {'x tcpdump':>9} {'peak MB':>8} {'B/pkt':>6}")
    for name, entry in report["results"].items():
        ratio = f"{entry['x_tcpdump_time']:.2f}" if entry["x_tcpdump_time"] else "-"
        print(f"{name:40} {entry['seconds']:8.2f} {entry['packets_per_s'] / 1e6:8.2f} {ratio:>9} "
              f"{entry['peak_rss_mb']:8.0f} {entry['bytes_per_packet']:6.0f}")


if __name__ == "__main__":
    main()
