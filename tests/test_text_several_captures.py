"""A report over several captures names the file of each finding and connection: frame
numbers are each file's own, so "frame 40" means nothing without it.

Checked by hand in tshark (`-T fields -e frame.number -e frame.time_relative -e tcp.len`):
seed003-nagle.pcap frame 40 (2 bytes) at 0.274946 s, frame 41 (the ACK) at 0.315996 s, frame 42
(28 bytes) at 0.316018 s; seed004-header-body.pcap holds one connection too, so it is
connection 1 of the run, after seed003's connection 0.
"""

from __future__ import annotations

import subprocess
import sys

from tests.conftest import SAMPLE_TRACES

FIRST = str(SAMPLE_TRACES / "seed003-nagle.pcap")
SECOND = str(SAMPLE_TRACES / "seed004-header-body.pcap")


def _text(*paths: str) -> str:
    return subprocess.run([sys.executable, "-m", "nagledetect", "analyze", "-j", "1", *paths],
                          capture_output=True, text=True, check=True).stdout


def test_each_finding_and_connection_names_its_capture() -> None:
    text = _text(FIRST, SECOND)
    assert f"Nagle / delayed-ACK stall (write-write-read) on connection 0 in {FIRST}:" in text
    assert f"on connection 1 in {SECOND}:" in text
    assert "frame 40 last data -> frame 41 ACK (+41.0 ms hold) -> frame 42 released" in text
    table = text[text.index("CONNECTIONS (2)"):]
    assert table.index(f" in {FIRST}:") < table.index("   0 ") < table.index(f" in {SECOND}:") \
        < table.index("   1 ")


def test_one_capture_needs_no_file_name() -> None:
    text = _text(FIRST)
    assert "on connection 0: 1.619 s lost" in text
    assert f" in {FIRST}" not in text


def test_the_html_report_names_each_finding_s_capture(tmp_path) -> None:
    page = tmp_path / "report.html"
    subprocess.run([sys.executable, "-m", "nagledetect", "report", "-j", "1", FIRST, SECOND,
                    "-o", str(page)], capture_output=True, text=True, check=True)
    html = page.read_text()
    assert f"on connection 0 in {FIRST} &mdash;" in html
    assert f"on connection 1 in {SECOND} &mdash;" in html
