"""Hand the memory a worker freed back to the system before it waits for more work.

Why: glibc's allocator serves arrays under its mmap threshold (which rises to 32 MB as large
arrays are freed) from its heap, and a freed heap block stays in the process unless it lies at
the top. A worker that has analysed a part of a huge connection would go on holding hundreds of
MB it freed while another worker analyses the next part. `malloc_trim` returns the free pages
wherever they lie. (A fixed threshold that maps every large array apart returns them too, but
then each part faults in fresh pages for its temporaries: the 10 M mix took 14-23 % longer.)
"""

from __future__ import annotations

import ctypes
import ctypes.util
from collections.abc import Callable
from functools import cache


@cache
def _malloc_trim() -> Callable[[int], int] | None:
    """glibc's `malloc_trim`, or None where the C library has none (musl, macOS)."""
    name = ctypes.util.find_library("c")
    try:
        return ctypes.CDLL(name).malloc_trim if name else None
    except (OSError, AttributeError):
        return None


def give_back_free_memory() -> None:
    """Return the allocator's free pages to the system (nothing where it cannot)."""
    trim = _malloc_trim()
    if trim is not None:
        trim(0)
