"""Freed memory handed back to the system (`nagledetect.memory`), as a part worker does after a
large part: glibc keeps freed heap blocks that lie below a live one, and `malloc_trim` returns
their pages. Run in a fresh interpreter, so the heap holds only what the test made."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from nagledetect.memory import _malloc_trim
from tests.conftest import SAMPLE_TRACES

SAMPLE = SAMPLE_TRACES / "classic-2n-blocks-100000.pcap"
"""264 KB: 17 parts of 16 KB."""

pytestmark = pytest.mark.skipif(_malloc_trim() is None or not sys.platform.startswith("linux"),
                                reason="needs glibc's malloc_trim and /proc")

HEAP_BLOCKS = textwrap.dedent("""
    from nagledetect.memory import give_back_free_memory

    def rss_mb():
        for line in open("/proc/self/status"):
            if line.startswith("VmRSS"):
                return int(line.split()[1]) // 1024

    blocks, pins = [], []
    for _ in range(2000):
        blocks.append(b"x" * 100_000)  # under the mmap threshold: from the heap
        pins.append(b"y" * 600)  # a live block after each, so the heap cannot shrink from its top
    held = rss_mb()
    del blocks
    freed = rss_mb()
    give_back_free_memory()
    print(held, freed, rss_mb())
""")


def test_freed_heap_blocks_go_back_to_the_system() -> None:
    held, freed, given = map(int, subprocess.run(
        [sys.executable, "-c", HEAP_BLOCKS], capture_output=True, text=True,
        check=True).stdout.split())
    assert held >= 190  # 2,000 blocks of 100 kB
    assert freed >= held // 2  # freed, but mostly still held by the process
    assert given <= freed - 90  # handed back


FREED_ARRAY = textwrap.dedent("""
    import sys
    import numpy as np
    from nagledetect.memory import keep_freed_memory

    def rss_mb():
        for line in open("/proc/self/status"):
            if line.startswith("VmRSS"):
                return int(line.split()[1]) // 1024

    if sys.argv[1] == "keep":
        keep_freed_memory()
    elif sys.argv[1] == "parts here":
        from nagledetect.analysis import analyze_capture
        analyze_capture(sys.argv[2], part_bytes=16_384, workers=1, charts=False)
    before = rss_mb()
    column = np.ones(8_000_000)  # 64 MB: above the 32 MB that glibc's own threshold rises to
    held = rss_mb()
    del column
    print(before, held, rss_mb())
""")


@pytest.mark.parametrize("how", ["keep", "default", "parts here"])
def test_a_part_workers_freed_arrays_stay_for_the_next_part(how: str) -> None:
    """With `keep_freed_memory` (a part worker; and a process that analyses a capture's parts
    itself, at -j 1), a freed 64 MB column stays in the process, so the next part reuses its
    pages instead of faulting in fresh ones; without it (glibc's defaults), the column's pages
    go back to the system when it is freed."""
    before, held, after = map(int, subprocess.run(
        [sys.executable, "-c", FREED_ARRAY, how, str(SAMPLE)],
        capture_output=True, text=True, check=True).stdout.split())
    assert held - before >= 60
    if how == "default":
        assert after <= before + 4
    else:
        assert after >= held - 4
