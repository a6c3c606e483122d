"""The default terminal answer fits a screen: headline, findings with their first evidence
lines and one fix each, and a closing line; the fixes' code only when asked for."""

from __future__ import annotations

import subprocess
import sys

import pytest

from nagledetect.report.text import LANGUAGES
from tests.conftest import SAMPLE_TRACES, corpus_file

SEED003 = str(SAMPLE_TRACES / "seed003-nagle.pcap")
SCREEN_LINES = 40
SEED003_FIX = ("Fix (the sender 10.77.0.1:48162 must change): Write each message whole, then "
               "set TCP_NODELAY")
"""seed003-nagle.pcap: the client 10.77.0.1:48162 makes 15 two-byte writes and then reads
(its manifest); tshark shows the server's pure ACKs of 39 of its exchanges 41-42 ms late
(`ip.src==10.77.0.2 && tcp.len==0 && tcp.analysis.ack_rtt > 0.03`: frames 41, 46, 51, ...),
so the sender is the side to change."""
CODE_BY_LANGUAGE = {"C": "setsockopt(fd, IPPROTO_TCP, TCP_NODELAY", "Python": "sock.setsockopt(",
                    "Go": "SetNoDelay(true)", "Java": "setTcpNoDelay(true)",
                    "Node.js": "socket.setNoDelay(true)", ".NET": "socket.NoDelay = true",
                    "Rust": "set_nodelay(true)"}
"""A piece of each language's TCP_NODELAY call, as HOW TO FIX prints it."""


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "nagledetect", *args], capture_output=True,
                          text=True, timeout=120)


def test_the_seed003_answer_fits_a_screen_and_names_the_fix() -> None:
    result = run(SEED003)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert len(lines) <= SCREEN_LINES, result.stdout
    assert lines[0].startswith("39 Nagle/delayed-ACK stalls cost 1.619 s")
    assert "frame 40 last data -> frame 41 ACK (+41.0 ms hold) -> frame 42 released" in result.stdout
    assert SEED003_FIX in result.stdout
    assert "HOW TO FIX" not in result.stdout
    assert not any(code in result.stdout for code in CODE_BY_LANGUAGE.values())
    assert lines[-1].startswith("In short: 39 Nagle-family stalls, 1.619 s lost in 1 capture, "
                                "1 connection; fix first: Write each message whole, then set "
                                "TCP_NODELAY (sender side).")
    assert "--fixes or --lang LANG" in lines[-1]


def test_fixes_shows_the_code_in_every_language() -> None:
    result = run("analyze", "--fixes", SEED003)
    assert result.returncode == 0, result.stderr
    how_to_fix = result.stdout.split("\nHOW TO FIX\n")[1]
    for language, code in CODE_BY_LANGUAGE.items():
        assert any(line.strip().startswith(language) and code in line
                   for line in how_to_fix.splitlines()), language
    assert "--fixes or --lang LANG" not in result.stdout


@pytest.mark.parametrize("asked", ["python", "NODE.JS", ".net", "Rust"])
def test_lang_shows_the_code_in_that_language_only(asked: str) -> None:
    language = next(name for name in LANGUAGES if name.lower() == asked.lower())
    result = run(SEED003, "--lang", asked)
    assert result.returncode == 0, result.stderr
    how_to_fix = result.stdout.split("\nHOW TO FIX\n")[1]
    assert CODE_BY_LANGUAGE[language] in how_to_fix
    others = [code for name, code in CODE_BY_LANGUAGE.items()
              if name != language and code not in CODE_BY_LANGUAGE[language]]
    assert not any(code in how_to_fix for code in others)


def test_an_unknown_language_is_a_usage_error() -> None:
    result = run("analyze", "--lang", "cobol", SEED003)
    assert result.returncode == 2
    assert result.stdout == ""
    assert "Invalid value for '--lang'" in result.stderr and "Traceback" not in result.stderr


def test_the_legend_of_marks_only_when_a_row_carries_one() -> None:
    """seed003 has its handshake (tshark: SYN frame 5, SYN/ACK frame 6), so no estimated MSS
    and no guessed client; in ssh__ssh.pcap the connection on port 51476 starts mid-stream
    (tshark `tcp.port==51476`: frames 904-914, no SYN), so its MSS is estimated and its
    client guessed."""
    seed003 = run(SEED003).stdout
    assert "MSS~" not in seed003 and "client?" not in seed003
    assert "RTT sides: tap to client / tap to server" in seed003
    ssh = run(str(corpus_file("zeek/ssh__ssh.pcap"))).stdout
    assert "192.168.1.31:51476?" in ssh
    assert "MSS~ estimated (no handshake); client? guessed by the port rule" in ssh


def test_verbose_lists_every_event_and_the_empty_sections() -> None:
    result = run("--verbose", SEED003)
    assert result.returncode == 0, result.stderr
    assert result.stdout.count(" ACK (+") == 39
    assert "... and 36 more" not in result.stdout
    assert "PHASE LOCKING" in result.stdout and "SEGMENT PARITY" in result.stdout
    assert "--verbose for every event" not in result.stdout


def test_the_closing_line_without_a_stall_names_the_costliest_other_cause() -> None:
    """trap-bulk.pcap: a 2 MB upload answered by one byte (its manifest expects no stall);
    cause-zero-window-stuck.pcap: a receiver that never reads (tshark
    `tcp.analysis.zero_window`: frames 12, 16, 25, ... until the RST at 8.1 s)."""
    bulk = run(str(SAMPLE_TRACES / "trap-bulk.pcap")).stdout.splitlines()[-1]
    assert bulk == ("In short: no Nagle-family stall in 1 capture, 1 connection. --verbose for "
                    "every event.")
    stuck = run(str(SAMPLE_TRACES / "cause-zero-window-stuck.pcap")).stdout.splitlines()[-1]
    assert stuck.startswith("In short: no Nagle-family stall in 1 capture, 1 connection; the "
                            "most time lost: Zero window (not Nagle), ")
