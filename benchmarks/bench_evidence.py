"""Time the JSON text of evidence rows alone (`evidence_texts`, written by the core).

A million stall rows shaped like the 10 M mix's (frames, a gap of up to 30 s, a start in
epoch seconds, the two columns a gap does not measure left empty), cut into findings of about
24 rows as the mix's idle gaps are, and grouped into the document's pieces of at most 65,536
rows. Prints the seconds, system seconds and minor page faults of one pass; compare commits by
setting `PYTHONPATH` to a checkout of each:

    python3 benchmarks/bench_evidence.py
    PYTHONPATH=CHECKOUT python3 benchmarks/bench_evidence.py
"""

from __future__ import annotations

import argparse
import resource
import time

import numpy as np

from nagledetect.detectors.model import StallEvents
from nagledetect.report.evidence_text import evidence_texts

PIECE_ROWS = 65_536
"""The document's EVIDENCE_ROWS_PER_CHUNK."""


def findings_in_pieces(rows: int, seed: int) -> list[list[StallEvents]]:
    """`rows` evidence rows cut into findings, grouped as the document's pieces group them."""
    generator = np.random.default_rng(seed)
    frames = [generator.integers(1, 10**7, rows).astype(np.uint32) for _ in range(3)]
    block = StallEvents.of(*frames, np.round(generator.random(rows) * 30, 6),
                           np.round(1.4e9 + generator.random(rows) * 1e5, 6),
                           np.full(rows, np.nan), np.full(rows, np.nan)).rows
    sizes = np.minimum(generator.geometric(1 / 24, rows), 2_000)
    bounds = np.concatenate(([0], np.cumsum(sizes)))
    bounds = np.append(bounds[bounds < rows], rows)
    pieces: list[list[StallEvents]] = [[]]
    held = 0
    for start, stop in zip(bounds[:-1].tolist(), bounds[1:].tolist()):
        if pieces[-1] and held + stop - start > PIECE_ROWS:
            pieces.append([])
            held = 0
        pieces[-1].append(StallEvents(block[start:stop]))
        held += stop - start
    return pieces


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--seed", type=int, default=1)
    arguments = parser.parse_args()
    pieces = findings_in_pieces(arguments.rows, arguments.seed)
    before = resource.getrusage(resource.RUSAGE_SELF)
    start = time.perf_counter()
    written = sum(len(text) for piece in pieces for text in evidence_texts(piece))
    seconds = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_SELF)
    print(f"{arguments.rows:,} rows in {sum(map(len, pieces)):,} findings, {len(pieces)} pieces: "
          f"{seconds:.3f} s, system {after.ru_stime - before.ru_stime:.3f} s, "
          f"{after.ru_minflt - before.ru_minflt:,} page faults, {written / 1e6:.0f} MB of text")


if __name__ == "__main__":
    main()
