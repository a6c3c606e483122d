"""Time and memory of a capture's connection tables made whole or a slice at a time.

`whole`: `build_flows` over every decoded batch, the tables held at once (what a part's worker
does today). `sliced`: pass 1 (`flows.facts`) over the batches, then pass 2
(`flows.numbering`) over them read again, each slice's packet columns let go once made (what a
worker will do with a part too large to hold). With `--events`, both also make the data
segments, the delayed-ACK samples and the messages (`events.segments`, `events.messages`,
`events.by_slice`, `delack_timer.SamplesBySlice`), not kept. With `--level`, the whole
connection level of a part instead, detectors included: `pipeline.connection_level` as a part's
worker runs it on a part held whole, against `sliced_level.connection_level_by_slices`. Each
run is a process of its own; prints the median seconds and the median of the processes' peak
resident memory, and the packets:

    python3 benchmarks/bench_slices.py --capture /tmp/s10m_2.pcap --repeats 3
    python3 benchmarks/bench_slices.py --capture /tmp/s10m_2.pcap --repeats 3 --events
    python3 benchmarks/bench_slices.py --capture /tmp/s10m_2.pcap --repeats 3 --level
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time


def _whole(path: str, _slice_packets: int, events: bool) -> int:
    from nagledetect.detectors.delack_timer import delack_samples
    from nagledetect.events.messages import messages, number_messages
    from nagledetect.events.segments import data_segments
    from nagledetect.flows.build import build_flows
    from nagledetect.read.capture import decoded_batches

    flows = build_flows(decoded_batches(path)[1])
    if events:
        segments = data_segments(flows.packets, flows.connections)
        delack_samples(segments, flows.connections)
        segments["message"] = number_messages(segments)
        messages(segments)
    return len(flows.packets)


def _slices(path: str, slice_packets: int):
    """The decoded batches cut or joined into slices of about `slice_packets` packets."""
    import numpy as np

    from nagledetect.read.capture import decoded_batches

    held: list[dict] = []
    count = 0
    for columns, _ in decoded_batches(path)[1]:
        held.append(columns)
        count += len(columns["frame"])
        if count >= slice_packets:
            yield {name: np.concatenate([batch[name] for batch in held]) for name in held[0]}
            held, count = [], 0
    if held:
        yield {name: np.concatenate([batch[name] for batch in held]) for name in held[0]}


def _sliced(path: str, slice_packets: int, events: bool) -> int:
    import pandas as pd

    from nagledetect.detectors.delack_timer import SamplesBySlice
    from nagledetect.events.by_slice import MessagesBySlice, SegmentsBySlice
    from nagledetect.flows.facts import ConnectionsBySlice
    from nagledetect.flows.numbering import PacketsBySlice
    from nagledetect.flows.roles import ROLES

    first = ConnectionsBySlice()
    numbered = []
    for columns in _slices(path, slice_packets):
        pair, source_is_low = first.paired(columns)
        numbered.append((first.add(columns, pair, source_is_low), source_is_low))
    facts = first.finish()
    second = PacketsBySlice(facts)
    segments = SegmentsBySlice(facts.table)
    samples = SamplesBySlice()
    messages = MessagesBySlice(len(facts.table))
    packets = 0
    for position, (columns, (connection, source_is_low)) in enumerate(
            zip(_slices(path, slice_packets), numbered)):
        table = second.add(columns, connection, source_is_low)
        packets += len(table["frame"])
        if events:
            frame = pd.DataFrame(table)
            frame["role"] = pd.Categorical.from_codes(frame["role"], categories=ROLES)
            slice_segments = segments.add(frame)
            samples.add(slice_segments, frame, int(facts.later_from_us[position]))
            messages.add(slice_segments)
    connections = second.connections()
    if events:
        samples.samples(connections)
        messages.finish()
    return packets


def _whole_level(path: str, _slice_packets: int, _events: bool) -> int:
    from nagledetect.flows.build import build_flows
    from nagledetect.pipeline import connection_level
    from nagledetect.read.capture import decoded_batches

    level = connection_level(build_flows(decoded_batches(path)[1]), fingerprint=False,
                             keep_packets=False)
    return int(level.connections["packets_client_to_server"].sum()
               + level.connections["packets_server_to_client"].sum())


def _sliced_level(path: str, slice_packets: int, _events: bool) -> int:
    import tempfile

    from nagledetect.sliced_level import connection_level_by_slices

    with tempfile.TemporaryDirectory() as folder:
        level = connection_level_by_slices(lambda: _slices(path, slice_packets),
                                           f"{folder}/numbers")
    return int(level.connections["packets_client_to_server"].sum()
               + level.connections["packets_server_to_client"].sum())


RUNS = {(False, "whole"): _whole, (False, "sliced"): _sliced,
        (True, "whole"): _whole_level, (True, "sliced"): _sliced_level}


def _run_one(mode: str, path: str, slice_packets: int, events: bool, level: bool) -> None:
    import resource

    start = time.perf_counter()
    packets = RUNS[level, mode](path, slice_packets, events)
    seconds = time.perf_counter() - start
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(json.dumps({"seconds": seconds, "peak_mb": peak_mb, "packets": packets}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--capture", required=True)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--slice-packets", type=int, default=1 << 20)
    parser.add_argument("--only", action="append", choices=("whole", "sliced"))
    parser.add_argument("--events", action="store_true",
                        help="also make the data segments and delayed-ACK samples")
    parser.add_argument("--level", action="store_true",
                        help="the whole connection level of a part, detectors included")
    parser.add_argument("--one", help=argparse.SUPPRESS)
    arguments = parser.parse_args()
    if arguments.one:
        _run_one(arguments.one, arguments.capture, arguments.slice_packets, arguments.events,
                 arguments.level)
        return
    for mode in arguments.only or ("whole", "sliced"):
        runs = []
        for _ in range(arguments.repeats):
            output = subprocess.run(
                [sys.executable, __file__, "--capture", arguments.capture, "--one", mode,
                 "--slice-packets", str(arguments.slice_packets),
                 *(["--events"] if arguments.events else []),
                 *(["--level"] if arguments.level else [])],
                check=True, capture_output=True, text=True).stdout
            runs.append(json.loads(output))
        seconds = [run["seconds"] for run in runs]
        print(f"{mode:7} {runs[0]['packets']:>11,} packets  {statistics.median(seconds):7.2f} s  "
              f"{statistics.median(run['peak_mb'] for run in runs):7.0f} MB peak  "
              f"(runs: {', '.join(f'{value:.2f}' for value in seconds)} s)")


if __name__ == "__main__":
    main()
