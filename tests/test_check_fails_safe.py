"""`nagledetect check` fails safe: what it cannot check is exit status 2 and one stderr line,
never a pass; with no budget it fails on any Nagle-family stall; the whole family counts in every
budget and output; connections seen one way only are a warning in every output.

The packets behind each expectation were counted with tshark (commands in each test).
"""

from __future__ import annotations

import json
import struct
import subprocess
import sys
from pathlib import Path
from xml.etree import ElementTree

from nagledetect.detectors.kinds import ALL_KINDS
from tests.conftest import PROJECT, SAMPLE_TRACES, corpus_file

NAGLE = str(SAMPLE_TRACES / "seed003-nagle.pcap")
CLEAN = str(SAMPLE_TRACES / "trap-rpc.pcap")
STREAM = str(SAMPLE_TRACES / "classic-stream.pcap")
PCAP_MAGIC = 0xA1B2C3D4
LINKTYPE_ETHERNET = 1
ONE_WAY_TEXT = "with one direction only"


def check(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "nagledetect", "check", *args],
                          capture_output=True, text=True, cwd=cwd or PROJECT, timeout=300)


def stderr_line(result: subprocess.CompletedProcess) -> str:
    """The one line on stderr (asserted to be one)."""
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    return lines[0]


def header_only_pcap(folder: Path) -> Path:
    """A classic pcap file header (24 bytes: magic, version 2.4, zone, sigfigs, snaplen 65535,
    Ethernet) and no packet record: what tcpdump leaves when it saw nothing."""
    path = folder / "header-only.pcap"
    path.write_bytes(struct.pack("<IHHiIII", PCAP_MAGIC, 2, 4, 0, 0, 65535, LINKTYPE_ETHERNET))
    return path


def test_an_unknown_kind_on_the_command_line_is_one_line_listing_the_known_ones() -> None:
    """A misspelled kind matched no finding and passed every capture (exit 0)."""
    result = check("--fail-on", "tinygram-flood,stream-coalesing", NAGLE)
    assert result.returncode == 2 and result.stdout == ""
    line = stderr_line(result)
    assert line.startswith("nagledetect: error: --fail-on: unknown kind 'stream-coalesing' "
                           "(did you mean stream-coalescing?); known kinds: ")
    assert line.endswith(", ".join(ALL_KINDS))


def test_an_unknown_kind_in_either_config_file_is_one_line(tmp_path: Path) -> None:
    """nagledetect.toml (a list) and pyproject.toml's [tool.nagledetect] (a string) alike."""
    (tmp_path / "nagledetect.toml").write_text('fail-on = ["tinygram-flood", "zero-windows"]\n')
    result = check(CLEAN, cwd=tmp_path)
    assert result.returncode == 2 and result.stdout == ""
    assert stderr_line(result).startswith(
        f"nagledetect: error: {tmp_path / 'nagledetect.toml'}: fail-on: unknown kind "
        "'zero-windows' (did you mean zero-window?); known kinds: nagle-delack-stall, ")
    (tmp_path / "nagledetect.toml").unlink()
    (tmp_path / "pyproject.toml").write_text('[tool.nagledetect]\nfail-on = "stream-coalesing"\n')
    result = check(CLEAN, cwd=tmp_path)
    assert result.returncode == 2
    assert stderr_line(result).startswith(
        f"nagledetect: error: {tmp_path / 'pyproject.toml'}: fail-on: unknown kind "
        "'stream-coalesing'")


def test_a_config_value_the_flag_would_refuse_is_one_line(tmp_path: Path) -> None:
    """A budget as a string compared with a count raised a traceback; a share above 1 never
    failed."""
    config = tmp_path / "nagledetect.toml"
    for text, expected in (('max-stalls = "0"', "max-stalls must be a whole number of 0 or "
                                                "more, not '0'"),
                           ("max-stall-share = 1.5", "max-stall-share must be a number from "
                                                     "0 to 1, not 1.5"),
                           ("fail-on = 3", "fail-on: a kind name or a list of them, not 3")):
        config.write_text(text + "\n")
        result = check(NAGLE, cwd=tmp_path)
        assert result.returncode == 2, text
        assert stderr_line(result) == f"nagledetect: error: {config}: {expected}"


def test_a_capture_with_a_header_and_no_packets_is_an_error(tmp_path: Path) -> None:
    """The header-only file passed "no budget configured" (exit 0). Beside a good capture, the
    good one is still checked (trap-rpc: no stall), the empty one is an ERROR in every output."""
    empty = header_only_pcap(tmp_path)
    result = check(str(empty))
    assert result.returncode == 2
    reason = "no packets (a capture file header only): nothing to check"
    assert stderr_line(result) == f"nagledetect: error: {empty}: {reason}"
    assert result.stdout.splitlines() == [f"ERROR {empty}: {reason}"]
    junit = tmp_path / "nagle.xml"
    result = check("--max-stalls", "0", "--junit", str(junit), "--github", CLEAN, str(empty))
    assert result.returncode == 2
    assert stderr_line(result) == f"nagledetect: error: {empty}: {reason}"
    assert result.stdout.splitlines() == [
        f"PASS {CLEAN}: 0 stalls, budget 0", f"ERROR {empty}: {reason}",
        f"::error file={empty},title=nagledetect checkable::{reason}"]
    suite = ElementTree.parse(junit).getroot().find("testsuite")
    assert (suite.get("tests"), suite.get("failures"), suite.get("errors")) == ("2", "0", "1")
    error = suite.find(f"testcase[@classname='{empty}'][@name='checkable']/error")
    assert error is not None and error.get("message") == reason


def test_the_corpus_header_only_capture_is_an_error() -> None:
    """zeek/empty.pcap: 24 bytes, `tshark -r` lists no frame."""
    empty = corpus_file("zeek/empty.pcap")
    result = check(str(empty))
    assert result.returncode == 2
    assert stderr_line(result) == (f"nagledetect: error: {empty}: no packets (a capture file "
                                   "header only): nothing to check")


def test_a_filter_that_leaves_no_tcp_is_an_error() -> None:
    """seed003-nagle: 246 frames, 234 TCP, none on port 9999 and none UDP (`tshark -Y
    'tcp.port==9999'` and `-Y udp` list nothing). Both filters passed (exit 0)."""
    for expression in ("udp", "tcp port 9999"):
        result = check("--filter", expression, NAGLE)
        assert result.returncode == 2, expression
        reason = f"the filter {expression!r} leaves no TCP packet: nothing to check"
        assert stderr_line(result) == f"nagledetect: error: {NAGLE}: {reason}"
        assert result.stdout.splitlines() == [f"ERROR {NAGLE}: {reason}"]


def test_a_capture_without_tcp_is_an_error() -> None:
    """zeek/arp-who-has.pcap: 2 frames, both ARP (`tshark -Y tcp` lists none)."""
    capture = corpus_file("zeek/arp-who-has.pcap")
    result = check("--max-stalls", "0", str(capture))
    assert result.returncode == 2
    assert stderr_line(result) == f"nagledetect: error: {capture}: no TCP packet: nothing to check"


def test_no_budget_configured_fails_on_any_nagle_family_stall(tmp_path: Path) -> None:
    """It passed everything (exit 0). seed003-nagle: 39 delayed-ACK stalls (its manifest's
    client measured 39 stalled exchanges); classic-stream: 22 stream-coalescing holds (below);
    trap-rpc: none. A tolerance alone is no budget; a fail-on kind is."""
    result = check(NAGLE, cwd=tmp_path)
    assert result.returncode == 1 and result.stderr == ""
    assert result.stdout.startswith(f"FAIL {NAGLE}: max-stalls: 39 stalls, budget 0 (the "
                                    "default: no budget configured); connection 0 ")
    assert check(STREAM, "--tolerance", "0.5", cwd=tmp_path).returncode == 1
    result = check(CLEAN, cwd=tmp_path)
    assert result.returncode == 0
    assert result.stdout == f"PASS {CLEAN}: 0 stalls, budget 0 (the default: no budget configured)\n"
    assert check("--fail-on", "tinygram-flood", NAGLE, cwd=tmp_path).returncode == 0


def test_stream_coalescing_is_a_stall_to_every_budget_and_output(tmp_path: Path) -> None:
    """classic-stream passed `--max-stalls 0`. Its client writes 100 bytes every 30 ms; the
    receiver ACKs on a 200 ms tick. tshark (`-Y tcp -e frame.number -e tcp.len -e tcp.ack`):
    22 client packets of 400-700 bytes (frames 10, 15, 17, ..., 56, 58) each leave 29-49 us
    after a pure ACK of everything sent; their holds chain from frame 8 (0.033003 s) to frame
    58 (4.377631 s): 4.345 s of the connection's 4.539 s (frame 3 to 61), a share of 0.957."""
    junit = tmp_path / "nagle.xml"
    result = check("--max-stalls", "0", "--junit", str(junit), "--github", STREAM)
    assert result.returncode == 1
    lines = result.stdout.splitlines()
    assert lines[0].startswith(f"FAIL {STREAM}: max-stalls: 22 stalls, budget 0; connection 0 "
                               "(10.77.0.1:34140 -> 10.77.0.2:9000): 22 x stream-coalescing, "
                               "4.345 s lost; fix: ")
    assert lines[1].startswith(f"::error file={STREAM},title=nagledetect max-stalls::22 stalls")
    failure = ElementTree.parse(junit).getroot().find("testsuite/testcase[@name='max-stalls']"
                                                      "/failure")
    assert failure is not None and "22 x stream-coalescing" in failure.get("message")
    assert check("--max-stall-time", "4.3", STREAM).returncode == 1
    assert check("--max-stall-time", "4.4", STREAM).returncode == 0
    assert check("--max-stall-share", "0.95", STREAM).returncode == 1
    assert check("--max-stall-share", "0.96", STREAM).returncode == 0


def test_connections_seen_one_way_are_a_warning_in_every_output(tmp_path: Path) -> None:
    """seed003-nagle filtered to what 10.77.0.1 sent (99 of its 234 TCP frames, `tshark -Y
    'tcp && ip.src==10.77.0.1'`): no ACK of the peer is left, so no stall can be seen, and
    the pass says so. The JSON document carries the same warning in captures[].warnings."""
    junit = tmp_path / "nagle.xml"
    one_way = "src host 10.77.0.1"
    result = check("--filter", one_way, "--max-stalls", "0", "--junit", str(junit), "--github",
                   NAGLE)
    assert result.returncode == 0 and result.stderr == ""
    lines = result.stdout.splitlines()
    assert lines[0] == f"PASS {NAGLE}: 0 stalls, budget 0"
    assert any(line.startswith(f"WARNING {NAGLE}: 1 of 1 connections {ONE_WAY_TEXT}")
               for line in lines[1:])
    assert any(line.startswith(f"::warning file={NAGLE},title=nagledetect warning::1 of 1 "
                               f"connections {ONE_WAY_TEXT}") for line in lines)
    case = ElementTree.parse(junit).getroot().find("testsuite/testcase[@name='max-stalls']")
    assert case.find("failure") is None and ONE_WAY_TEXT in case.find("system-err").text
    document = json.loads(subprocess.run(
        [sys.executable, "-m", "nagledetect", "analyze", "--format", "json", "--filter", one_way,
         NAGLE], capture_output=True, text=True, check=True, cwd=PROJECT).stdout)
    assert any(ONE_WAY_TEXT in text for text in document["captures"][0]["warnings"])


def test_a_corpus_capture_with_a_one_way_connection_warns() -> None:
    """zeek/wikipedia.pcap: 10 TCP conversations; `tshark -z conv,tcp` shows one of them,
    173.192.163.128:80 -> 141.142.220.235:6705, as 1 frame one way and none back."""
    capture = corpus_file("zeek/wikipedia.pcap")
    result = check("--max-stalls", "0", "--github", str(capture))
    assert result.returncode == 0
    assert f"WARNING {capture}: 1 of 10 connections {ONE_WAY_TEXT}" in result.stdout
    assert (f"::warning file={capture},title=nagledetect warning::1 of 10 connections "
            f"{ONE_WAY_TEXT}") in result.stdout


def test_the_help_says_the_default_budget_and_the_kinds() -> None:
    """What `check --help` promises is what the tests above hold it to (compared without
    spaces: click wraps the text to the terminal's width, hyphenated words too)."""
    result = subprocess.run([sys.executable, "-m", "nagledetect", "check", "--help"],
                            capture_output=True, text=True, cwd=PROJECT, timeout=60)
    text = "".join(result.stdout.split())

    def says(words: str) -> bool:
        return "".join(words.split()) in text

    assert says("the budget is --max-stalls 0: any Nagle-family stall fails")
    assert says("Stalls are the Nagle family: nagle-delack-stall, nagle-rtt-hold and "
                "stream-coalescing findings")
    assert says("has no packets, or no TCP packet (none in it, or none left by --filter)")
    assert says(f"Fail on any finding of these kinds: {', '.join(ALL_KINDS)}.")


def test_a_low_finding_that_fails_the_default_says_so() -> None:
    """trap-paced-writes-10ms-path: the client's 14 holds (frames 15 -> 17, 22 -> 24, 30 -> 33
    and on; 0.730039 s summed from tshark's frame.time_epoch) are low, their time an upper
    bound (the client wrote on after each release). The default budget counts every finding;
    the failure says the one it names is low and how to leave such findings out, and the
    gate passes with `--min-confidence medium`, counting the one finding left out."""
    paced = str(SAMPLE_TRACES / "trap-paced-writes-10ms-path.pcap")
    result = check(paced)
    assert result.returncode == 1
    assert ("14 x nagle-delack-stall (low confidence; --min-confidence medium leaves such "
            "findings out), up to 0.730 s lost; fix: ") in result.stdout
    medium = check("--min-confidence", "medium", paced)
    assert medium.returncode == 0
    assert "(1 finding(s) of low confidence not counted)" in medium.stdout
