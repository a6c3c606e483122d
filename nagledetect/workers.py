"""Worker processes: a process pool that ends when one of its workers is killed, and this
process's children as the kernel lists them.

Why: once a worker dies (the out-of-memory killer, a signal), the pool is broken, and leaving
it waits for each of its other workers to end; one blocked writing its result to a pipe the
broken pool no longer reads never does (`-j 2` with a worker killed hung so in 2 runs of 15 on a
loaded machine: the pool's thread in `waitpid`, the other worker in a pipe write).
"""

from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import Iterator
from concurrent.futures import BrokenExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from concurrent.futures import ProcessPoolExecutor


@contextlib.contextmanager
def worker_pool(**options: Any) -> Iterator[ProcessPoolExecutor]:
    """A `ProcessPoolExecutor(**options)` whose workers are all killed when it breaks, before
    it shuts down; the BrokenExecutor goes on to the caller. Its module is imported here: a run
    without workers does without it."""
    from concurrent.futures import ProcessPoolExecutor

    with ProcessPoolExecutor(**options) as pool:
        try:
            yield pool
        except BrokenExecutor:
            kill_children()
            raise


def kill_children() -> None:
    """Kill this process's children outright (they have nothing of their own to clean up)."""
    for child in child_processes():
        with contextlib.suppress(ProcessLookupError):
            os.kill(child, signal.SIGKILL)


def child_processes() -> list[int]:
    """This process's children, found in /proc rather than in multiprocessing's books (a
    worker forked just now is not in them yet)."""
    children = []
    for task in Path("/proc/self/task").iterdir():
        with contextlib.suppress(OSError):
            children += [int(pid) for pid in (task / "children").read_text().split()]
    return children
