"""How a part worker's allocator keeps and gives back the memory its parts free.

Why: glibc's allocator serves arrays under its mmap threshold (which rises to 32 MB as large
arrays are freed) from its heap, and gives the top of the heap back to the system once more
than its trim threshold lies free there. A worker's parts allocate and free the same
temporaries part after part; every page given back is faulted in fresh (and zeroed by the
kernel) by the next part. On the 10 M mix the part workers took 536,000 page faults and 0.9 s
of system time that way. `keep_freed_memory` sets fixed thresholds, so arrays up to
KEPT_ARRAY_BYTES come from the heap and freed memory stays for the next part: 58,000 faults and
0.35 s. A worker that has analysed a part of a huge connection would then go on holding
hundreds of MB it freed while another worker analyses the next part: `give_back_free_memory`
(`malloc_trim`) returns the free pages wherever they lie. A process that analyses parts itself
and then goes on (`freed_memory_kept`) is left with glibc's usual thresholds afterwards. The
main process keeps what it frees while it routes a capture into parts too: each batch's decoded
columns are freed as the next is made (on the 10 M mix 70,000 fewer page faults, 0.15 s less
system time).
"""

from __future__ import annotations

import ctypes
import importlib
import os
from collections.abc import Iterator
from contextlib import contextmanager
from functools import cache

KEPT_ARRAY_BYTES = 256 << 20
"""Arrays up to this size come from the heap, not from pages mapped apart and unmapped when
freed (a part of a large capture holds a few hundred thousand packets: its columns are a few
MB each)."""
KEPT_FREE_BYTES = 1 << 30
"""Free memory at the top of the heap is given back beyond this (so in practice only by
`give_back_free_memory`)."""
SETTLED_ARRAY_BYTES = 32 << 20
SETTLED_FREE_BYTES = 2 * SETTLED_ARRAY_BYTES
"""The thresholds a process is left with after `freed_memory_kept`: the highest that glibc's own
rising thresholds reach (its mmap threshold rises to 32 MB, its trim threshold with it to twice
that), as a process that freed arrays of a few MB would have them anyway."""
_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
"""mallopt's parameter numbers (malloc.h)."""


@cache
def _libc() -> ctypes.CDLL | None:
    """The C library already loaded in this process (looked up without `find_library`, which
    starts a process of its own to ask `ldconfig`), or None where it has no `malloc_trim`
    (musl, macOS)."""
    try:
        library = ctypes.CDLL(None)
    except (OSError, TypeError):  # a platform that cannot name the loaded C library
        return None
    if not hasattr(library, "malloc_trim") or not hasattr(library, "mallopt"):
        return None
    return library


def keep_freed_memory() -> None:
    """Fixed allocator thresholds for this process: freed arrays are kept for reuse (nothing
    where the C library is not glibc)."""
    _set_thresholds(KEPT_ARRAY_BYTES, KEPT_FREE_BYTES)


@contextmanager
def freed_memory_kept() -> Iterator[None]:
    """`keep_freed_memory` for the block, in a process that goes on afterwards (the main
    process routing a capture into parts, or analysing them at -j 1, a worker of a run over
    many captures, a Dask worker that runs other tasks): the thresholds are then set as
    glibc's own would stand at most and the free pages given back, so the process does not go
    on holding what the parts freed."""
    keep_freed_memory()
    try:
        yield
    finally:
        _set_thresholds(SETTLED_ARRAY_BYTES, SETTLED_FREE_BYTES)
        give_back_free_memory()


def _set_thresholds(array_bytes: int, free_bytes: int) -> None:
    library = _libc()
    if library is not None:
        library.mallopt(_M_MMAP_THRESHOLD, array_bytes)
        library.mallopt(_M_TRIM_THRESHOLD, free_bytes)


def give_back_free_memory() -> None:
    """Return the allocator's free pages to the system (nothing where it cannot)."""
    library = _libc()
    if library is not None:
        library.malloc_trim(0)


HUGE_PAGES_VARIABLE = "NUMPY_MADVISE_HUGEPAGE"
"""numpy's own switch for asking the kernel for huge pages (read when numpy is imported)."""


def ordinary_pages_for_arrays() -> None:
    """Arrays in ordinary pages, unless the user set HUGE_PAGES_VARIABLE.

    Why: numpy asks the kernel for transparent huge pages for each array of 4 MB or more. Where
    the kernel then compacts memory to find them (transparent_hugepage/defrag "madvise", the
    usual setting), a part of a huge connection spent seconds of system time in it, more than
    ordinary pages' extra faults cost: 10 M packets in 2 connections took 17.6-18.1 s (5.2-5.9 s
    of system time) against 18.3-21.1 s (6.6-9.2 s), the 10 M mix the same either way
    (docs/performance.md, the eighteenth round). Set for the command line's process, whose
    workers are forked from it; a program that imports nagledetect keeps numpy as it chose."""
    if HUGE_PAGES_VARIABLE in os.environ:
        return
    for name in ("numpy._core.multiarray", "numpy.core.multiarray"):
        try:
            setter = getattr(importlib.import_module(name), "_set_madvise_hugepage", None)
        except ImportError:
            continue
        if setter is not None:
            setter(False)
            return
