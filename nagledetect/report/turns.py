"""Pieces of one output rendered by forked processes that write them themselves, in order.

Why: the JSON document of a large capture is a gigabyte of text. Sent back to the parent to be
written, each byte was pickled, piped and copied again, and the parent spent half as much
processor time receiving as the workers spent rendering. Here worker w renders pieces w,
w + workers, ... and writes each one straight to the output's file descriptor when the piece
before it is written (a shared turn counter), so each holds at most one rendered piece and the
parent only waits. A worker keeps the memory it frees (`keep_freed_memory`), as a part worker
does: the pieces of a finding with millions of stalls are slices of one large finding, each
rendered through arrays of the same size, which would otherwise be faulted in afresh each time
(10 M packets in 2 connections: 1.75 M page faults in the document's workers, 0.40 M kept).
"""

from __future__ import annotations

import io
import multiprocessing
import traceback
from collections.abc import Callable
from concurrent.futures import BrokenExecutor
from multiprocessing.connection import wait
from typing import Any, BinaryIO

from nagledetect.memory import keep_freed_memory

FAILED = -1
"""The turn once a worker has failed: the others stop. Set while another worker writes its
piece, it must survive that worker passing its turn on, or the rest wait for a turn that never
comes."""
WRITE_BUFFER_BYTES = 1 << 20


def write_in_turns(count: int, render: Callable[[int], Any],
                   write: Callable[[int, Any, BinaryIO], None], fd: int, workers: int) -> None:
    """Pieces 0 to `count` - 1: `render(index)` in a worker, then, in index order,
    `write(index, rendered, out)` to a stream on `fd` (the caller flushes its own stream first).
    A worker's exception is raised here, after every worker has stopped; a worker that died
    without one (killed, out of memory) as BrokenExecutor, as a process pool's would be."""
    context = multiprocessing.get_context("fork")
    turn = context.Value("q", 0, lock=False)
    changed = context.Condition()
    errors = context.SimpleQueue()
    processes = [context.Process(target=_take_turns,
                                 args=(first, workers, count, render, write, fd, turn,
                                       changed, errors), daemon=True)
                 for first in range(min(workers, count))]
    for process in processes:
        process.start()
    _await(processes, turn, changed)
    if turn.value == FAILED:
        raise errors.get() if not errors.empty() else BrokenExecutor("a writing worker died")


def _take_turns(first: int, step: int, count: int, render: Callable[[int], Any],
                write: Callable[[int, Any, BinaryIO], None], fd: int, turn: Any,
                changed: Any, errors: Any) -> None:
    keep_freed_memory()
    out = io.BufferedWriter(io.FileIO(fd, "wb", closefd=False), WRITE_BUFFER_BYTES)
    try:
        for index in range(first, count, step):
            rendered = render(index)
            with changed:
                changed.wait_for(lambda index=index: turn.value in (index, FAILED))
                if turn.value == FAILED:
                    return
            write(index, rendered, out)
            out.flush()
            with changed:
                if turn.value == FAILED:
                    return
                turn.value = index + 1
                changed.notify_all()
    except BaseException as error:  # noqa: BLE001 - handed to the parent, which raises it
        errors.put(_picklable(error))
        with changed:
            turn.value = FAILED
            changed.notify_all()


def _picklable(error: BaseException) -> BaseException:
    """The error itself when it can be sent to the parent, else its text."""
    try:
        multiprocessing.reduction.ForkingPickler.dumps(error)
    except Exception:  # noqa: BLE001 - any pickling failure
        return RuntimeError("".join(traceback.format_exception_only(error)).strip())
    return error


def _await(processes: list[Any], turn: Any, changed: Any) -> None:
    """Wait for every worker; one that ends abnormally (killed, out of memory) without passing
    its turn stops the others."""
    running = {process.sentinel: process for process in processes}
    while running:
        for sentinel in wait(list(running)):
            process = running.pop(sentinel)
            process.join()
            if process.exitcode != 0:
                with changed:
                    turn.value = FAILED
                    changed.notify_all()
