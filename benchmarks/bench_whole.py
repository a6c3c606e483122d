"""One capture analysed whole by the compiled core and in parts, in the same run: wall time and
the peak of the summed PSS of the process and its workers (as `bench_read.py` measures it).
What `part_sizes.WHOLE_MEMORY_PER_CAPTURE_BYTE` and the choice between the two rest on.

    python3 benchmarks/bench_whole.py /tmp/mix1.pcap /tmp/bulk1m_1.pcap --repeats 3
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

from bench_read import _timed

HOW = {
    "whole": "part_bytes=1 << 40",
    "in parts (2 workers)": "part_bytes=32 << 20, workers=2",
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("captures", nargs="+", type=Path)
    parser.add_argument("--repeats", type=int, default=3)
    options = parser.parse_args()
    for capture in options.captures:
        size_mb = capture.stat().st_size / 1e6
        for name, arguments in HOW.items():
            code = ("from nagledetect.analysis import analyze_capture\n"
                    f"analyze_capture({str(capture.resolve())!r}, {arguments}, charts=False)")
            runs = [_timed([sys.executable, "-c", code]) for _ in range(options.repeats)]
            seconds = statistics.median(run[0] for run in runs)
            peak_mb = max(run[1] for run in runs) * 1024 / 1e6
            print(f"{capture.name:20} {size_mb:7.0f} MB  {name:22} {seconds:6.2f} s "
                  f"{peak_mb:6.0f} MB ({peak_mb / size_mb:.1f} a capture byte)")


if __name__ == "__main__":
    main()
