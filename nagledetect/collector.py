"""Pause Python's cyclic garbage collector around work that makes millions of acyclic objects.

Why: every collection walks the tracked objects, and with millions of findings, evidence rows
or host profiles alive those walks cost a fifth of the work. What is made there (dicts, lists,
dataclasses of numbers and strings) holds no reference cycles, so reference counting frees it;
any cycle made meanwhile is collected after the pause.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def collector_paused() -> Iterator[None]:
    """Disable the cyclic collector for the block (left as it was found afterwards)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()
