"""Work handed to a thread only where there is enough of it to overlap.

Why: reading and classifying run on threads of their own so that the core's and numpy's long
calls, which let go of the GIL, overlap; for a capture of a few packets there is nothing to
overlap, and starting the threads cost a tenth of its analysis. The same code then runs each
call at once in the caller's thread, through an executor with the same `submit`/`map` as a
thread pool.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Executor, Future, ThreadPoolExecutor
from typing import Any, TypeVar

Item = TypeVar("Item")

THREADED_MIN_BYTES = 4 * 1024 * 1024
"""Captures smaller than this are read in the caller's thread (the core reads a batch of 65,536
packets at a time: a smaller file is one batch or two)."""


class InlineExecutor(Executor):
    """Runs each submitted call at once, in the caller's thread; its future is done on return,
    holding the result or the exception, as a thread's would."""

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future:
        future: Future = Future()
        try:
            future.set_result(fn(*args, **kwargs))
        except BaseException as error:  # noqa: BLE001 - raised again by future.result()
            future.set_exception(error)
        return future

    def map(self, fn: Callable[..., Any], *iterables: Iterable[Any], timeout: float | None = None,
            chunksize: int = 1) -> Iterator[Any]:
        return map(fn, *iterables)


def executor(threads: int, name: str) -> Executor:
    """A pool of `threads` threads named after `name`, or the caller's thread when `threads`
    is 0 (use it as a context manager either way)."""
    if threads <= 0:
        return InlineExecutor()
    return ThreadPoolExecutor(max_workers=threads, thread_name_prefix=name)


def ahead(items: Iterator[Item], name: str) -> Iterator[Item]:
    """`items` in order, each made on a thread of its own while the caller works on the one
    before: a pipeline stage, for steps that carry state from item to item and so cannot run
    side by side. A stage's error is raised where the caller takes its item."""
    done = object()

    def following() -> Any:
        return next(items, done)

    with executor(1, name) as thread:
        coming = thread.submit(following)
        while (item := coming.result()) is not done:
            coming = thread.submit(following)
            yield item
