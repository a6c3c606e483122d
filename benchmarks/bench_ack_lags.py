"""Time the data -> ACK lags of a whole run (`flows.vantage.ack_lags_us`) alone.

The capture is built into connections once, the view `build_flows` hands the lags kept, and
the lags are then made again and again from it, warm. Prints the median of `--repeats` rounds
of ten calls; compare commits by setting `PYTHONPATH` to a checkout of each:

    python3 benchmarks/bench_ack_lags.py --capture /tmp/mix1.pcap
    PYTHONPATH=CHECKOUT python3 benchmarks/bench_ack_lags.py --capture /tmp/mix1.pcap
"""

from __future__ import annotations

import argparse
import statistics
import time

from nagledetect.flows import build, vantage
from nagledetect.read.capture import decoded_batches

CALLS = 10


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--capture", required=True)
    parser.add_argument("--repeats", type=int, default=5)
    arguments = parser.parse_args()
    views = []
    made = vantage.ack_lags_us

    def kept(view, group, group_count):
        views.append((dict(view), group.copy(), group_count))
        return made(view, group, group_count)

    build.ack_lags_us = kept
    build.build_flows(decoded_batches(arguments.capture)[1])
    rounds = []
    for _ in range(arguments.repeats + 1):
        start = time.perf_counter()
        for _ in range(CALLS):
            for view, group, group_count in views:
                made(view, group, group_count)
        rounds.append((time.perf_counter() - start) / CALLS)
    print(f"{len(views)} chunk(s): {statistics.median(rounds[1:]) * 1000:.1f} ms a pass "
          f"(median of {arguments.repeats}, after one to warm)")


if __name__ == "__main__":
    main()
