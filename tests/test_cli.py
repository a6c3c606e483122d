"""The command line as a user runs it: outputs, exit statuses, one-line errors, filters."""

from __future__ import annotations

import gzip
import io
import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import PROJECT, SAMPLE_TRACES, corpus_file, require_tool

SMB = "zeek/smb__smb2.pcap"


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "nagledetect", *args], capture_output=True,
                          text=True, timeout=120)


def _assert_one_line_error(result: subprocess.CompletedProcess, fragment: str) -> None:
    assert result.returncode == 2
    assert result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and fragment in lines[0], result.stderr
    assert "Traceback" not in result.stderr


def test_missing_file(tmp_path) -> None:
    _assert_one_line_error(run(str(tmp_path / "nope.pcap")), "no such file")


def test_a_folder_without_captures(tmp_path) -> None:
    """A folder stands for the captures under it: one with none is an input error."""
    (tmp_path / "notes.txt").write_text("not a capture")
    _assert_one_line_error(run(str(tmp_path)), "no pcap or pcapng capture in this folder")


def test_not_a_capture(tmp_path) -> None:
    text = tmp_path / "notes.pcap"
    text.write_text("hello, this is not a capture\n" * 10)
    _assert_one_line_error(run(str(text)), "not a pcap or pcapng capture")


def test_empty_file(tmp_path) -> None:
    empty = tmp_path / "empty.pcap"
    empty.write_bytes(b"")
    _assert_one_line_error(run(str(empty)), "empty file")


def test_bad_filter() -> None:
    _assert_one_line_error(run("--filter", "tcp port banana", str(corpus_file(SMB))), "invalid filter")


def test_truncated_last_record_is_analysed_and_reported(tmp_path) -> None:
    """The first 50,000 bytes of the SMB2 capture: `tcpdump -r` reads 66 packets, then stops on
    'truncated dump file'; we must analyse those 66 and say so on stderr."""
    cut = tmp_path / "cut.pcap"
    cut.write_bytes(corpus_file(SMB).read_bytes()[:50_000])
    result = run("analyze", "--format", "json", str(cut))
    assert result.returncode == 0
    document = json.loads(result.stdout)
    assert document["captures"][0]["packets"] == 66
    assert "truncated" in result.stderr and "Traceback" not in result.stderr
    assert any("cut short" in w for w in document["captures"][0]["warnings"])


def test_json_document_has_the_stable_keys() -> None:
    result = run("analyze", "--format", "json", str(corpus_file(SMB)))
    assert result.returncode == 0
    document = json.loads(result.stdout)
    assert document["schema"] == "nagledetect/1"
    capture = document["captures"][0]
    assert {"path", "packets", "tcp_packets", "skipped"} <= set(capture)
    assert capture["packets"] == 1178 and capture["tcp_packets"] == 1178  # capinfos: 1178 packets
    connection = document["connections"][0]
    assert {"id", "client", "server", "packets", "bytes", "mss", "vantage", "rtt_ms"} <= set(connection)
    assert connection["client"] == "10.0.0.11:49208" and connection["server"] == "10.0.0.12:445"
    assert not [f for f in document["findings"] if f["kind"] == "nagle-delack-stall"]
    assert isinstance(document["hosts"], list)


def test_bare_capture_argument_is_analyze() -> None:
    path = str(corpus_file(SMB))
    assert run(path).stdout == run("analyze", path).stdout


def test_ipv6_endpoints_are_bracketed() -> None:
    result = run("analyze", "--format", "json", str(corpus_file("zeek/ipv6-http-atomic-frag.pcap")))
    clients = [c["client"] for c in json.loads(result.stdout)["connections"]]
    assert clients and all(c.startswith("[") and "]:" in c for c in clients)


def test_filter_keeps_wireshark_frame_numbers_and_counts_the_excluded() -> None:
    require_tool("tshark")
    path = corpus_file("zeek/redis__pubsub.pcap")
    expected = subprocess.run(["tshark", "-n", "-r", str(path), "-Y", "tcp.port == 60831",
                               "-T", "fields", "-e", "frame.number"],
                              capture_output=True, text=True, check=True).stdout.split()
    from nagledetect import load_capture

    capture = load_capture(str(path), "tcp port 60831")
    assert capture.packets["frame"].tolist() == [int(f) for f in expected]
    accounting = capture.accounting
    assert accounting.skipped["excluded by filter"] == accounting.packets_read - len(expected)
    assert accounting.balanced


def test_version_and_help() -> None:
    assert run("--version").stdout.startswith("nagledetect, version")
    help_text = run("--help").stdout
    assert "Examples" in help_text and "analyze" in help_text


@pytest.mark.parametrize("relative", ["tcpdump/LINKTYPE_IPV6_invalid.pcap",
                                      "tcpdump/ipv4_invalid_hdr_length.pcap",
                                      "tcpdump/bad-ipv4-version-pgm-heapoverflow.pcap"])
def test_malformed_packets_are_counted_not_fatal(relative: str) -> None:
    result = run("analyze", "--format", "json", str(corpus_file(relative)))
    assert result.returncode == 0, result.stderr
    capture = json.loads(result.stdout)["captures"][0]
    assert capture["balanced"]
    assert capture["packets"] == capture["tcp_packets"] + sum(capture["skipped"].values())


def test_tables_are_written_as_csv(tmp_path) -> None:
    from tests.conftest import SAMPLE_TRACES

    result = run("analyze", "--tables", str(tmp_path), str(SAMPLE_TRACES / "seed003-nagle.pcap"))
    assert result.returncode == 0
    import pandas as pd

    findings = pd.read_csv(tmp_path / "findings.csv")
    stalls = findings[findings["kind"] == "nagle-delack-stall"]
    assert int(stalls["count"].sum()) == 39  # the manifest's client-measured stalls
    packets = pd.read_csv(tmp_path / "packets.csv")
    assert {"frame", "connection", "role"} <= set(packets.columns)


def test_missing_handshake_is_a_warning_in_json_and_text() -> None:
    from tests.conftest import SAMPLE_TRACES

    path = str(SAMPLE_TRACES / "seed003-nagle.pcap")
    no_syn = "not (tcp[tcpflags] & tcp-syn != 0)"
    document = json.loads(run("analyze", "--format", "json", "--filter", no_syn, path).stdout)
    assert any("without a handshake" in w for w in document["captures"][0]["warnings"])
    assert "without a handshake" in run("analyze", "--filter", no_syn, path).stdout
    assert not json.loads(run("analyze", "--format", "json", path).stdout)["captures"][0]["warnings"]


def test_parallel_run_gives_the_same_document_as_a_serial_one() -> None:
    from tests.conftest import SAMPLE_TRACES

    paths = [str(p) for p in sorted(SAMPLE_TRACES.glob("seed00*.pcap"))]
    serial = run("analyze", "--format", "json", "-j", "1", *paths)
    parallel = run("analyze", "--format", "json", "-j", "2", *paths)
    assert serial.returncode == parallel.returncode == 0
    assert serial.stdout == parallel.stdout


def test_parallel_run_with_a_bad_file_is_one_line_the_others_report_and_status_2() -> None:
    from tests.conftest import SAMPLE_TRACES

    result = run("analyze", "-j", "2", "/nonexistent.pcap", str(SAMPLE_TRACES / "trap-rpc.pcap"))
    assert result.returncode == 2
    assert result.stderr == "nagledetect: error: /nonexistent.pcap: no such file\n"
    assert result.stdout.startswith("No Nagle stalls and no other delays found (1 capture, 1 "
                                    "connection; 1 could not be analysed).")


def test_parquet_tables_or_a_clear_refusal(tmp_path) -> None:
    from tests.conftest import SAMPLE_TRACES

    result = run("analyze", "--tables", str(tmp_path), "--tables-format", "parquet",
                 str(SAMPLE_TRACES / "trap-rpc.pcap"))
    try:
        import pyarrow  # noqa: F401
    except ImportError:
        assert result.returncode == 2 and "pip install pyarrow" in result.stderr
        return
    import pandas as pd

    assert result.returncode == 0
    assert len(pd.read_parquet(tmp_path / "connections.parquet")) == 1


@pytest.mark.parametrize("cut", [10, 24 + 8, 24 + 16 + 20])
def test_captures_cut_in_the_file_header_record_header_or_record(tmp_path, cut: int) -> None:
    """Cut inside the 24-byte file header: refused in one line. Cut inside the first record's
    header or data: analysed (nothing to analyse), with the truncation said on stderr."""
    from tests.conftest import SAMPLE_TRACES

    path = tmp_path / "cut.pcap"
    path.write_bytes((SAMPLE_TRACES / "seed003-nagle.pcap").read_bytes()[:cut])
    result = run("analyze", "--format", "json", str(path))
    assert "Traceback" not in result.stderr
    if cut < 24:
        _assert_one_line_error(result, "truncated")
    else:
        assert result.returncode == 0 and "cut short" in result.stderr
        assert json.loads(result.stdout)["captures"][0]["packets"] == 0


def test_parallel_run_writes_the_serial_runs_tables(tmp_path) -> None:
    """With -j the tables come back from the worker processes (a group of small captures
    analysed together hands its tables over in one file) and are put on disk as they arrive:
    the files are the same byte for byte as a run in one process."""
    from tests.conftest import SAMPLE_TRACES

    paths = [str(path) for path in sorted(SAMPLE_TRACES.glob("*.pcap"))]
    assert len(paths) > 4  # so that -j 2 makes groups of several captures
    for jobs in ("1", "2"):
        result = run("analyze", "-j", jobs, "--tables", str(tmp_path / jobs), *paths)
        assert result.returncode == 0, result.stderr
    for name in ("packets", "connections", "messages", "findings"):
        serial = (tmp_path / "1" / f"{name}.csv").read_bytes()
        assert serial.count(b"\n") > 1, name
        assert (tmp_path / "2" / f"{name}.csv").read_bytes() == serial, name


@pytest.fixture(scope="module")
def replica(tmp_path_factory) -> Path:
    """seed003-nagle.pcap replicated to 600,240 packets (53 MB): analysed whole by default (its
    whole analysis, up to 6 bytes a capture byte, fits in the default 768 MB), in parts under
    `--memory 256M`."""
    capture = tmp_path_factory.mktemp("replica") / "replica.pcap"
    subprocess.run([sys.executable, str(PROJECT / "benchmarks" / "make_large_capture.py"),
                    str(SAMPLE_TRACES / "seed003-nagle.pcap"), str(capture), "--packets",
                    "600000"], check=True, capture_output=True)
    return capture


def test_a_capture_is_analysed_whole_when_its_analysis_fits_in_the_memory_given(replica) -> None:
    """The replica whole (the default memory) and in parts (256 MB: two parts of 32 MB at
    most) gives the same document; only the run in parts hands its tables over a part at a
    time (`tables_kept` False)."""
    from nagledetect.analysis import analyze_capture
    from nagledetect.report.document import build_document, write_json

    whole = analyze_capture(str(replica), charts=False)
    in_parts = analyze_capture(str(replica), charts=False, parts_memory_bytes=256 << 20)
    assert whole.tables_kept and not in_parts.tables_kept
    written = []
    for analysis in (whole, in_parts):
        out = io.BytesIO()
        write_json(build_document([analysis]), out)
        written.append(out.getvalue())
    assert written[0] == written[1]
    # 570,960 TCP packets (`tcpdump -n -r FILE tcp | wc -l`) are 2,440 copies of seed003's 234,
    # each its own connection with seed003's 39 stalls: 95,160.
    headline = json.loads(written[0])["headline"]["text"]
    assert headline.startswith("95160 Nagle/delayed-ACK stalls") and "2440 connections" in headline


def test_a_capture_in_parts_whose_filter_keeps_no_packet(replica) -> None:
    """The replica in parts under a filter no packet passes: nothing to analyse, and every
    packet counted as excluded (checked with tcpdump: `tcpdump -n -r FILE 'tcp port 1' | wc -l`
    gives 0, `tcpdump -n -r FILE | wc -l` 600,240)."""
    capture = replica
    result = run("analyze", "--memory", "256M", "--format", "json", "--filter", "tcp port 1",
                 str(capture))
    assert result.returncode == 0, result.stderr
    document = json.loads(result.stdout)
    assert document["captures"][0]["packets"] == 600_240
    assert document["captures"][0]["skipped"] == {"excluded by filter": 600_240}
    assert document["connections"] == [] and document["findings"] == []


@pytest.mark.parametrize("size", ["abc", "0", "-1", "2X", "0.5"])
def test_memory_that_is_not_a_size_is_a_usage_error(size: str) -> None:
    result = run("analyze", "--memory", size, str(SAMPLE_TRACES / "seed003-nagle.pcap"))
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    assert f"Invalid value for '--memory': '{size}' is not a size (e.g. 800M, 4G)" in result.stderr


def test_memory_sizes_read_as_sort_and_docker_write_them() -> None:
    """Binary units, any case, an optional B or iB; the default is the parts' default."""
    from nagledetect.cli import ByteSize
    from nagledetect.parts import PARTS_MEMORY_BYTES

    size = ByteSize()
    assert [size.convert(text, None, None) for text in ("4096", "800M", "1.5g", "4GiB", "2kb")] == [
        4096, 800 << 20, 3 << 29, 4 << 30, 2048]
    assert PARTS_MEMORY_BYTES == 768 << 20
    assert "(default 768M)" in " ".join(run("analyze", "--help").stdout.split())


def _piped(capture: Path | None, *args: str, data: bytes | None = None
           ) -> subprocess.CompletedProcess:
    """The command with a capture file (or `data`) on its standard input, as a pipe from
    another process would give it."""
    command = [sys.executable, "-m", "nagledetect", *args]
    if capture is None:
        return subprocess.run(command, input=data, capture_output=True, timeout=120)
    with capture.open("rb") as stdin:
        return subprocess.run(command, stdin=stdin, capture_output=True, timeout=120)


def _document_of(capture: Path, *command: str) -> dict:
    result = _piped(capture, *command)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


@pytest.mark.parametrize("name", ["seed003-nagle.pcap", "merged-interfaces.pcapng"])
def test_a_capture_on_standard_input_gives_the_files_document(name: str) -> None:
    """`-` reads the capture from standard input, as `tcpdump -r -` does: the same document,
    frame numbers and all, but for the path."""
    capture = SAMPLE_TRACES / name
    from_file = json.loads(run("analyze", "--format", "json", str(capture)).stdout)
    for command in (("analyze", "--format", "json", "-"), ("-", "--format", "json")):
        from_stdin = _document_of(capture, *command)
        assert [entry["path"] for entry in from_stdin["captures"]] == ["-"]
        from_stdin["captures"][0]["path"] = str(capture)
        assert from_stdin == from_file


def test_a_compressed_capture_on_standard_input(tmp_path) -> None:
    capture = SAMPLE_TRACES / "seed003-nagle.pcap"
    packed = tmp_path / "seed003.pcap.gz"
    packed.write_bytes(gzip.compress(capture.read_bytes()))
    from_file = json.loads(run("analyze", "--format", "json", str(capture)).stdout)
    from_stdin = _document_of(packed, "--format", "json", "-")
    from_stdin["captures"][0]["path"] = str(capture)
    assert from_stdin == from_file


def test_standard_input_in_the_text_answer_and_beside_a_file() -> None:
    """Named with a file, `-` is one capture of the run, named `-` in the report."""
    capture = SAMPLE_TRACES / "seed003-nagle.pcap"
    result = _piped(capture, "-", str(SAMPLE_TRACES / "seed003-nodelay.pcap"))
    assert result.returncode == 0, result.stderr
    text = result.stdout.decode()
    assert "on connection 0 in -:" in text
    assert "  - (Ethernet, link type 1): 246 packets read" in text


@pytest.mark.parametrize(("data", "args", "fragment"), [
    (b"", ("-",), "-: empty file"),
    (b"hello, not a capture\n" * 10, ("analyze", "-"), "-: not a pcap or pcapng capture"),
    ((SAMPLE_TRACES / "seed003-nagle.pcap").read_bytes(), ("-", "-"), "standard input named twice"),
])
def test_bad_standard_input_is_one_line(data: bytes, args: tuple[str, ...], fragment: str) -> None:
    result = _piped(None, *args, data=data)
    assert result.returncode == 2
    assert result.stdout == b""
    lines = result.stderr.decode().strip().splitlines()
    assert len(lines) == 1 and fragment in lines[0], result.stderr


def test_standard_input_cannot_be_both_a_capture_and_the_list_of_files() -> None:
    result = _piped(None, "analyze", "--files-from", "-", "-",
                    data=str(SAMPLE_TRACES / "seed003-nagle.pcap").encode())
    assert result.returncode == 2
    assert b"'-' and '--files-from -' both read standard input" in result.stderr
    assert b"Traceback" not in result.stderr
