"""The README and the guides say what the project does now, in words a user can follow."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from nagledetect.advice import ADVICE, LOOK_ELSEWHERE

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
USER_DOCS = [README, *(ROOT / "docs" / name for name in
                       ("user-guide.md", "lab.md", "validation.md", "dask.md", "design.md"))]
SEED_NUMBER = re.compile(r"\bseeds?\s+\d", re.IGNORECASE)
"""The project's internal names for its source documents ("seed 001"); sample trace file names
such as `seed003-nagle.pcap` are names of files and may stay."""


def _code_blocks(text: str) -> list[list[str]]:
    return [block.splitlines() for block in re.findall(r"```[a-z]*\n(.*?)```", text, re.DOTALL)]


def test_readme_starts_with_the_two_set_up_commands_ci_runs() -> None:
    """`.ci/run` runs the second line literally; both must stay byte for byte."""
    first = _code_blocks(README.read_text())[0]
    assert first[:2] == ["pip install -e . && nagledetect sample_traces/seed003-nagle.pcap",
                         "pip install -e '.[test]' && python3 -m pytest -q"]
    assert (ROOT / ".ci" / "run").read_text().rstrip().endswith(first[1])


def test_readme_quick_start_captures_with_a_snap_length_that_keeps_the_headers() -> None:
    text = README.read_text()
    assert "tcpdump -i IFACE -s 128 -w stalls.pcap 'tcp port N'" in text
    for topic in ("Where:", "Both directions:", "Keep the handshake:", "Snap length:"):
        assert topic in text, topic


def test_readme_example_is_what_the_tool_prints_for_the_sample_trace() -> None:
    """Every line of the README's example (but the elisions) is in the real answer."""
    text = README.read_text()
    example = next(block for block in _code_blocks(text)
                   if block and "Nagle/delayed-ACK stalls cost" in block[0])
    answer = subprocess.run([sys.executable, "-m", "nagledetect",
                             "sample_traces/seed003-nagle.pcap"], cwd=ROOT, capture_output=True,
                            text=True, check=True,
                            env={**os.environ, "NO_COLOR": "1", "PYTHONPATH": str(ROOT)}).stdout
    answer_lines = set(answer.splitlines())
    for line in example:
        if line.strip() and line.strip() != "...":
            assert line in answer_lines, line


def test_readme_links_point_at_files_that_exist() -> None:
    for target in re.findall(r"\]\(([^)#]+)\)", README.read_text()):
        assert (ROOT / target).exists(), target


@pytest.mark.parametrize("path", USER_DOCS, ids=lambda p: p.name)
def test_user_docs_name_documents_by_title_not_seed_number(path: Path) -> None:
    for number, line in enumerate(path.read_text().splitlines(), 1):
        assert not SEED_NUMBER.search(line), f"{path.name}:{number}: {line}"


def test_advice_names_documents_by_title_not_seed_number() -> None:
    for entry in (*ADVICE.values(), *LOOK_ELSEWHERE):
        for text in (entry.title, entry.why, entry.tradeoffs):
            assert not SEED_NUMBER.search(text), (entry.key, text)


def test_no_recipe_installs_from_a_package_index_that_does_not_have_it() -> None:
    """nagledetect is on no package index: a recipe installs it from a checkout or a wheel."""
    for path in USER_DOCS:
        for block in _code_blocks(path.read_text()):
            for line in block:
                assert not re.search(r"pip install\s+['\"]?nagledetect\b", line), (path.name, line)


def test_internals_live_in_the_design_notes_not_the_readme() -> None:
    readme = README.read_text()
    for internal in ("spill", "--memory", "-j N", "bytes a packet"):
        assert internal not in readme, internal
    design = (ROOT / "docs" / "design.md").read_text()
    for topic in ("read -> flows -> events -> detectors -> findings -> reports", "core/",
                  "detectors/nagle_stall.py", "spill file", "--memory"):
        assert topic in design, topic
