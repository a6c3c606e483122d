"""Shared paths and skips: corpora live beside the project and may be absent."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

PROJECT = Path(__file__).resolve().parent.parent
SAMPLE_TRACES = PROJECT / "sample_traces"
CORPORA = PROJECT.parent / "shared" / "corpora"


def corpus_file(relative: str) -> Path:
    """A file of ../shared/corpora, or a skip when the corpora are not on this machine."""
    path = CORPORA / relative
    if not path.exists():
        pytest.skip(f"corpus file {relative} not present")
    return path


def require_tool(name: str) -> str:
    found = shutil.which(name)
    if not found:
        pytest.skip(f"{name} not installed")
    return found
