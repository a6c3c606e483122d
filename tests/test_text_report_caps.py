"""The text report stays readable on big captures: top findings, hosts and connections, with a
line saying how many more there are; --verbose lists them all.

Checked against the JSON document of the same run (zeek/ssh__ssh.pcap: 53 findings over 23
connections), not against numbers copied from the text output.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys

from nagledetect.report.text import CONNECTIONS_SHOWN, FINDINGS_SHOWN
from tests.conftest import corpus_file


def _run(*arguments: str) -> str:
    return subprocess.run([sys.executable, "-m", "nagledetect", "analyze", *arguments],
                          capture_output=True, text=True, check=True).stdout


def test_findings_are_capped_unless_verbose() -> None:
    path = str(corpus_file("zeek/ssh__ssh.pcap"))
    document = json.loads(_run("--format", "json", path))
    total = len(document["findings"])
    assert total > FINDINGS_SHOWN
    ranks = re.compile(r"^ *(\d+)\. ", re.MULTILINE)
    default = _run(path)
    assert [int(r) for r in ranks.findall(default)] == list(range(1, FINDINGS_SHOWN + 1))
    assert f"... and {total - FINDINGS_SHOWN} more findings" in default
    verbose = _run("--verbose", path)
    assert [int(r) for r in ranks.findall(verbose)] == list(range(1, total + 1))
    assert "more findings" not in verbose
    assert len(document["connections"]) <= CONNECTIONS_SHOWN
    assert "more connections" not in default
