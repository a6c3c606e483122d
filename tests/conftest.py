"""Shared paths and skips: corpora live beside the project and may be absent."""

from __future__ import annotations

import ast
import os
import shutil
import subprocess
import sys
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


def modules_a_run_imports(arguments: list[str], names: tuple[str, ...]
                          ) -> tuple[list[str], str]:
    """Which of the modules `names` a run of `nagledetect ARGUMENTS` imports (in a fresh
    interpreter), and what it printed."""
    code = ("import sys\n"
            "from nagledetect.cli import main\n"
            f"try:\n    main({arguments!r})\n"
            "except SystemExit:\n    pass\n"
            f"print(sorted(name for name in {names!r} if name in sys.modules), file=sys.stderr)\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=False)
    *_, imported = done.stderr.strip().splitlines() or [""]
    assert imported.startswith("["), done.stderr
    return ast.literal_eval(imported), done.stdout


def lab_available() -> bool:
    """Whether the lab can run here: root, tcpdump, ethtool and network namespaces."""
    if os.geteuid() != 0 or not shutil.which("tcpdump") or not shutil.which("ethtool"):
        return False
    # A name of this process's own: test workers probe at once.
    probe_name = f"ndprobe-{os.getpid()}"
    probe = subprocess.run(["ip", "netns", "add", probe_name], capture_output=True)
    subprocess.run(["ip", "netns", "del", probe_name], capture_output=True)
    return probe.returncode == 0


def assert_same_table(left: object, right: object, **options: object) -> None:
    """pandas' frame comparison of two tables, each a `Table` or a DataFrame (coded columns
    compared as categoricals)."""
    import pandas as pd

    from nagledetect.table import as_frame

    pd.testing.assert_frame_equal(as_frame(left), as_frame(right), **options)
