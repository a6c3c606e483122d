"""nagledetect: find TCP stalls caused by Nagle's algorithm meeting delayed ACKs.

`load_capture` and `Capture` are imported on first use, so a program that only reads packets
(`nagledetect.read`) does not pay for pandas.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

__version__ = "0.1.0"

__all__ = ["Capture", "__version__", "load_capture"]

if TYPE_CHECKING:
    from nagledetect.api import Capture, load_capture


def __getattr__(name: str) -> object:
    if name in ("Capture", "load_capture"):
        from nagledetect import api

        return getattr(api, name)
    raise AttributeError(f"module 'nagledetect' has no attribute {name!r}")
