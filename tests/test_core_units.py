"""The core's own unit tests (`cargo test` over core/src): the decoder, the capture reader and
the BPF compiler on hand-built bytes, and the flow tracker's table of 4-tuples. Run from here so
that the one test command of the README runs them too; the build shares the release profile of
`pip install -e .`, so only the test harness is compiled (about 30 s from nothing)."""

from __future__ import annotations

import re
import subprocess

from tests.conftest import PROJECT, require_tool


def test_the_cores_unit_tests_pass() -> None:
    cargo = require_tool("cargo")
    done = subprocess.run([cargo, "test", "--release", "--quiet", "--manifest-path",
                           str(PROJECT / "core" / "Cargo.toml")],
                          capture_output=True, text=True, timeout=1800)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    passed = [int(count) for count in re.findall(r"test result: ok\. (\d+) passed", done.stdout)]
    assert sum(passed) >= 14, done.stdout[-3000:]  # the 14 of core/src when this was written
