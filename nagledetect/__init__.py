"""nagledetect: find TCP stalls caused by Nagle's algorithm meeting delayed ACKs."""

from nagledetect.api import Capture, load_capture

__version__ = "0.1.0"

__all__ = ["Capture", "__version__", "load_capture"]
