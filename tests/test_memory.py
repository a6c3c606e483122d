"""Freed memory handed back to the system (`nagledetect.memory`), as a part worker does after a
large part: glibc keeps freed heap blocks that lie below a live one, and `malloc_trim` returns
their pages. Run in a fresh interpreter, so the heap holds only what the test made."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

from nagledetect.memory import _libc
from tests.conftest import SAMPLE_TRACES

SAMPLE = SAMPLE_TRACES / "classic-2n-blocks-100000.pcap"
"""264 KB: 17 parts of 16 KB."""

pytestmark = pytest.mark.skipif(_libc() is None or not sys.platform.startswith("linux"),
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
    from nagledetect.analysis import analyze_capture
    from nagledetect.memory import freed_memory_kept, keep_freed_memory
    from nagledetect.parts import PARTS_STAGE

    def rss_mb():
        for line in open("/proc/self/status"):
            if line.startswith("VmRSS"):
                return int(line.split()[1]) // 1024

    def column_freed():
        \"\"\"RSS before a 64 MB column (above the 32 MB that glibc's own threshold rises
        to), with it, and after it is freed.\"\"\"
        before = rss_mb()
        column = np.ones(8_000_000)
        held = rss_mb()
        del column
        return [before, held, rss_mb()]

    how = sys.argv[1]
    measured = []
    if how == "keep":
        keep_freed_memory()
    if how == "kept, then settled":
        with freed_memory_kept():
            measured += column_freed()
        measured.append(rss_mb())
    if how in ("during the parts at -j 1", "after the parts at -j 1"):
        def stage(name, done, total):
            if name == PARTS_STAGE and done > 0 and not measured and how.startswith("during"):
                measured.extend(column_freed())
        analyze_capture(sys.argv[2], part_bytes=16_384, workers=1, charts=False, stages=stage)
        assert how.startswith("after") or measured, "no part was analysed"
    if how == "in a worker writing its pieces in turn":
        import tempfile
        from nagledetect.report.turns import write_in_turns
        with tempfile.TemporaryFile() as out:
            write_in_turns(1, lambda index: " ".join(map(str, column_freed())).encode(),
                           lambda index, text, stream: stream.write(text), out.fileno(), 1)
            out.seek(0)
            measured = out.read().decode().split()
    if not measured:
        measured = column_freed()
    print(*measured)
""")


@pytest.mark.parametrize("how", ["keep", "default", "kept, then settled",
                                 "during the parts at -j 1", "after the parts at -j 1",
                                 "in a worker writing its pieces in turn"])
def test_a_part_workers_freed_arrays_stay_for_the_next_part(how: str) -> None:
    """With `keep_freed_memory` (a part worker), a freed 64 MB column stays in the process, so
    the next part reuses its pages instead of faulting in fresh ones; without it (glibc's
    defaults), the column's pages go back to the system when it is freed. A process that
    analyses a capture's parts itself (-j 1) keeps them while it does (`freed_memory_kept`),
    and is left as glibc's defaults would leave it, giving them back, once it is done. A
    worker writing the document's pieces in turn keeps them too (the evidence of a finding with
    millions of stalls is rendered a slice at a time, each slice's arrays as large)."""
    measured = list(map(int, subprocess.run(
        [sys.executable, "-c", FREED_ARRAY, how, str(SAMPLE)],
        capture_output=True, text=True, check=True).stdout.split()))
    before, held, after = measured[:3]
    assert held - before >= 60
    if how in ("default", "after the parts at -j 1"):
        assert after <= before + 4
    else:
        assert after >= held - 4
    if how == "kept, then settled":
        assert measured[3] <= before + 4  # given back when the block ends


PAGES_AFTER_A_RUN = textwrap.dedent("""
    import sys
    import numpy
    from nagledetect.cli import main
    main(["analyze", "--format", "json", sys.argv[1]], standalone_mode=False)
    multiarray = getattr(numpy, "_core", None) or numpy.core
    print(multiarray.multiarray._get_madvise_hugepage(), file=sys.stderr)
""")


@pytest.mark.parametrize(("variable", "huge_pages"), [(None, "False"), ("1", "True")])
def test_the_command_line_takes_arrays_in_ordinary_pages_unless_told(variable: str | None,
                                                                     huge_pages: str) -> None:
    """numpy asks for transparent huge pages for arrays of 4 MB or more; a run of the command
    line turns that off for its process tree (workers are forked from it), as
    NUMPY_MADVISE_HUGEPAGE=0 would, unless the user set that variable."""
    environment = {key: value for key, value in os.environ.items()
                   if key != "NUMPY_MADVISE_HUGEPAGE"}
    if variable is not None:
        environment["NUMPY_MADVISE_HUGEPAGE"] = variable
    done = subprocess.run([sys.executable, "-c", PAGES_AFTER_A_RUN, str(SAMPLE)], env=environment,
                          capture_output=True, text=True, check=True)
    assert done.stderr.strip().splitlines()[-1] == huge_pages
