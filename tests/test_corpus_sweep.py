"""Every capture of ../shared/corpora/ (830 tcpdump test files, 788 Zeek traces): analysed, or
refused with one line where libpcap itself cannot read it; the accounting always balances.

In-process for speed (the command line is the same code behind one try/except, exercised on a
sample through a subprocess); skipped where the corpora are absent.
"""

from __future__ import annotations

import resource
import subprocess
import sys
import time

import pytest

from nagledetect import load_capture
from nagledetect.analysis import run_detectors
from nagledetect.errors import InputError
from nagledetect.report.document import build_document
from tests.conftest import CORPORA, require_tool

PER_FILE_LIMIT_S = 30
PEAK_RSS_LIMIT_KIB = 2 * 1024 * 1024
FILES = sorted(p for folder in ("tcpdump", "zeek") for p in (CORPORA / folder).glob("*")
               if p.is_file()) if CORPORA.exists() else []


def _libpcap_can_open(path) -> bool:
    """Whether tcpdump's libpcap opens the file (it says "reading from file" once it has)."""
    tcpdump = subprocess.run([require_tool("tcpdump"), "-r", str(path), "-c", "1", "-w",
                              "/dev/null"], capture_output=True, text=True, check=False)
    return "reading from file" in tcpdump.stderr


@pytest.mark.skipif(not FILES, reason="../shared/corpora not present")
def test_every_corpus_file_is_analysed_or_refused_cleanly() -> None:
    refused = []
    for path in FILES:
        started_s = time.monotonic()
        try:
            document = build_document([run_detectors(load_capture(str(path)))])
            assert time.monotonic() - started_s < PER_FILE_LIMIT_S, path
        except InputError:
            refused.append(path.name)
            assert path.stat().st_size == 0 or not _libpcap_can_open(path), path
            continue
        capture = document["captures"][0]
        assert capture["balanced"], path
        assert capture["packets"] == capture["tcp_packets"] + sum(capture["skipped"].values()), path
    assert len(refused) < len(FILES) // 10
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss < PEAK_RSS_LIMIT_KIB


@pytest.mark.skipif(not FILES, reason="../shared/corpora not present")
def test_command_line_on_a_sample_of_corpus_files_never_prints_a_traceback() -> None:
    for path in FILES[::80]:
        result = subprocess.run([sys.executable, "-m", "nagledetect", "analyze", "--format", "json",
                                 str(path)], capture_output=True, text=True, timeout=60)
        assert result.returncode in (0, 2), path
        assert "Traceback" not in result.stderr, path
        if result.returncode == 2:
            assert len(result.stderr.strip().splitlines()) == 1, path
