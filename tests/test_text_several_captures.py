"""A report over several captures names the file of each finding and connection: frame
numbers are each file's own, so "frame 40" means nothing without it.

Checked by hand in tshark (`-T fields -e frame.number -e frame.time_relative -e tcp.len`):
seed003-nagle.pcap frame 40 (2 bytes) at 0.274946 s, frame 41 (the ACK) at 0.315996 s, frame 42
(28 bytes) at 0.316018 s; seed004-header-body.pcap holds one connection too, tcp.stream 0
in Wireshark, so it is connection 0 of its file, as seed003's is of its own.

Over both, in tshark (`-Y tcp.len>0`, gaps of more than 10 ms between data segments): seed003
has 39 gaps where the client's held data follows its own earlier data after the server's
delayed ACK, 1.618897 s in all (the stalls), and 39 gaps of 10.2-10.4 ms between the server's
answer and the client's next request, 402.699 ms in all (the manifest's 10 ms pause before each
request: idle, nobody waiting); seed004-header-body has 39 and 39 such gaps, 1.624494 s and
422.563 ms.
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
    assert f"on connection 0 in {SECOND}:" in text
    assert "frame 40 last data -> frame 41 ACK (+41.0 ms hold) -> frame 42 released" in text
    table = text[text.index("CONNECTIONS (2)"):]
    second = table.index(f" in {SECOND}:")
    assert table.index(f" in {FIRST}:") < table.index("   0 ") < second \
        < table.index("   0 ", second)


def test_the_stalls_of_every_capture_come_first_and_each_capture_folds_its_idle_time() -> None:
    """The run's Nagle stalls lead (the costlier capture's first), then each capture's idle
    time and stop-and-wait in one line of its own, in run order, never called lost."""
    text = _text(FIRST, SECOND)
    assert text.startswith("78 Nagle/delayed-ACK stalls cost 3.243 s on 2 connection "
                           "directions (2 captures, 2 connections).\n")
    lines = [text.index(line) for line in (
        f" 1. Nagle / delayed-ACK stall (write-write-read) on connection 0 in {SECOND}: 1.624 s "
        "lost",
        f" 2. Nagle / delayed-ACK stall (write-write-read) on connection 0 in {FIRST}: 1.619 s "
        "lost",
        f"3-4. Idle and stop-and-wait (not Nagle) in {FIRST}: 1 connection idle 402.7 ms (nobody "
        "was waiting: not time lost); 1 connection exchanging stop-and-wait, one message at a "
        "time.\n",
        f"5-6. Idle and stop-and-wait (not Nagle) in {SECOND}: 1 connection idle 422.6 ms "
        "(nobody was waiting: not time lost); 1 connection exchanging stop-and-wait, one "
        "message at a time.\n")]
    assert lines == sorted(lines)
    verbose = _text("-v", FIRST, SECOND)
    assert f"3. Idle: nobody waiting (not Nagle) on connection 0 in {FIRST}: 402.7 ms idle" in verbose
    assert "ms lost" not in verbose[verbose.index("3-4. Idle"):]


def test_one_capture_needs_no_file_name() -> None:
    text = _text(FIRST)
    assert "on connection 0: 1.619 s lost" in text
    assert f" in {FIRST}" not in text


def test_the_html_report_names_each_finding_s_capture(tmp_path) -> None:
    page = tmp_path / "report.html"
    subprocess.run([sys.executable, "-m", "nagledetect", "report", "-j", "1", FIRST, SECOND,
                    "-o", str(page)], capture_output=True, text=True, check=True)
    html = page.read_text()
    assert f"</b> on connection 0 in {FIRST}: " in html
    assert f"</b> on connection 0 in {SECOND}: " in html
