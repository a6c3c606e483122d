"""`nagledetect live` and `check --live` on a real interface: the lab's veth pair between two
network namespaces, with a lab scenario's real Linux client and server talking over it.

Root and network namespaces are needed; without them every test here is skipped with the
reason. The expected stalls come from the scenario's manifest (what the client measured),
not from the analysis.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

from nagledetect import _core
from nagledetect.analysis import analyze_capture
from nagledetect.detectors.kinds import NAGLE_DELACK_STALL
from nagledetect.flows.compiled import flow_tables_of
from nagledetect.lab.netns import lab_network
from nagledetect.lab.runner import (
    _finish,
    _run_client,
    _server_command,
    _wait_for_line,
    build_manifest,
    peer_spec,
    shortened,
)
from nagledetect.lab.scenarios import SCENARIOS, Scenario
from nagledetect.live import Captured, DropWindow, StallTally, add_capture_warnings, view_lines
from nagledetect.stored import RecordTable
from nagledetect.streamed import analyze_in_batches
from tests.conftest import SAMPLE_TRACES, lab_available

PROJECT = Path(__file__).resolve().parent.parent
EXCHANGES = 8
CAPTURE_S = "3"
"""Long enough for the capture to start (Python's imports), the scenario's 8 exchanges of
about 40 ms each, and the last ACKs."""
START_TIMEOUT_S = 15.0
RUN_TIMEOUT_S = 60.0




needs_lab = pytest.mark.skipif(not lab_available(),
                               reason="needs root, tcpdump, ethtool and network namespaces")
needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="live capture needs root here")


def _environment() -> dict[str, str]:
    """This checkout's nagledetect, whatever is installed (run from it too: `python -m` puts
    the working folder first on the path)."""
    return {**os.environ, "PYTHONPATH": str(PROJECT)}


def _nagledetect(*argv: str) -> list[str]:
    return [sys.executable, "-m", "nagledetect", *argv]


@dataclass
class LiveRun:
    returncode: int
    stdout: str
    stderr: str
    manifest: dict


@contextmanager
def _folder() -> Iterator[Path]:
    with tempfile.TemporaryDirectory() as folder:
        yield Path(folder)


def _live_during(scenario: Scenario, folder: Path, *argv: str, terminal: bool = False
                 ) -> LiveRun:
    """Run `nagledetect ARGV -i <client veth>` in the client's namespace while the scenario's
    client and server exchange their messages; the capture is started (its file created)
    before the client's first connection. With `terminal`, it runs on a pseudo-terminal
    (script(1)), whose output is the run's stdout."""
    written = folder / "live.pcap"
    spec_path, result_path = folder / "spec.json", folder / "result.json"
    spec_path.write_text(json.dumps(peer_spec(scenario)))
    with lab_network(scenario.mtu, scenario.offload) as lab, subprocess.Popen(
            _server_command(lab, scenario, spec_path, folder / "holds.json"),
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) as server:
        try:
            _wait_for_line(server, "stdout", "ready")
            command = lab.command("client", *_nagledetect(*argv, "-i", lab.client_if,
                                                          "--write", str(written)))
            if terminal:
                command = ["script", "-qec", shlex.join(command), "/dev/null"]
            with subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                  text=True, env=_environment(), cwd=PROJECT) as live:
                _wait_for_file(written, live)
                _run_client(lab, spec_path, result_path)
                stdout, stderr = live.communicate(timeout=RUN_TIMEOUT_S)
        finally:
            _finish(server)
    manifest = build_manifest(scenario, written, json.loads(result_path.read_text()))
    return LiveRun(live.returncode, stdout, stderr, manifest)


def _wait_for_file(path: Path, process: subprocess.Popen) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while not path.exists():
        if process.poll() is not None or time.monotonic() > deadline:
            pytest.fail(f"the live capture did not start: {process.communicate()[1]}")
        time.sleep(0.05)


def _nagle_scenario() -> Scenario:
    return shortened(SCENARIOS["seed003-nagle"], EXCHANGES)


@needs_lab
def test_live_finds_the_scenarios_stalls_and_reports_as_analyze_does() -> None:
    with _folder() as folder:
        run = _live_during(_nagle_scenario(), folder, "live", "--duration", CAPTURE_S,
                           "--format", "json")
        assert run.returncode == 0, run.stderr
        document = json.loads(run.stdout)
        # The client measured each exchange: all but the first wait for the server's delayed
        # ACK (the manifest's count, from latencies, not from the packets). The manifest
        # counts an exchange 10 ms slower than explained; on a loaded machine one may be slow
        # for another reason (the scheduler), so one fewer stall found is allowed.
        expected = run.manifest["summary"]["nagle_stalls"]
        assert EXCHANGES - 2 <= expected <= EXCHANGES - 1
        stalls = [f for f in document["findings"] if f["kind"] == NAGLE_DELACK_STALL]
        assert len(stalls) == 1 and expected - 1 <= stalls[0]["count"] <= expected
        assert document["headline"]["nagle_family"]["stalls"] == stalls[0]["count"]
        # The report is analyze's on the written file, byte for byte.
        analyzed = subprocess.run(_nagledetect("analyze", "--format", "json",
                                               str(folder / "live.pcap")),
                                  capture_output=True, text=True, env=_environment(), cwd=PROJECT)
        assert analyzed.returncode == 0, analyzed.stderr
        assert analyzed.stdout == run.stdout
        # libpcap's statistics, one line on stderr; the veth dropped nothing.
        stats = [line for line in run.stderr.splitlines() if line.startswith("nagledetect: live:")]
        assert len(stats) == 1 and "0 dropped by the kernel" in stats[0], run.stderr
        captured = int(stats[0].split()[2].replace(",", ""))
        assert captured == document["captures"][0]["packets"]


@needs_lab
def test_check_live_fails_on_the_stalls_and_passes_with_nodelay() -> None:
    with _folder() as folder:
        stalling = _live_during(_nagle_scenario(), folder, "check", "--live",
                                "--duration", CAPTURE_S, "--memory", "256M")
    assert stalling.returncode == 1, stalling.stdout + stalling.stderr
    assert stalling.manifest["summary"]["nagle_stalls"] > 0
    with _folder() as folder:
        fixed = _live_during(_nagle_scenario().with_option("nodelay"), folder, "check",
                             "--live", "--duration", CAPTURE_S)
    assert fixed.manifest["summary"]["nagle_stalls"] == 0
    assert fixed.returncode == 0, fixed.stdout + fixed.stderr


def _one_error_line(argv: list[str], *, drop_capabilities: bool = False) -> str:
    command = _nagledetect(*argv)
    if drop_capabilities:
        command = ["capsh", "--drop=cap_net_raw,cap_net_admin", "--", "-c",
                   " ".join(f"'{word}'" for word in command)]
    result = subprocess.run(command, capture_output=True, text=True, env=_environment(), cwd=PROJECT,
                            stdin=subprocess.DEVNULL, timeout=RUN_TIMEOUT_S)
    assert result.returncode == 2, result.stderr
    assert result.stdout == ""
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    return lines[0]


@needs_root
def test_a_missing_interface_is_named_in_one_line() -> None:
    line = _one_error_line(["live", "-i", "nosuch0", "--duration", "1"])
    assert line == ("nagledetect: error: no such interface 'nosuch0' (ip link lists the "
                    "interfaces here)")
    line = _one_error_line(["check", "--live", "-i", "nosuch0", "--duration", "1"])
    assert "no such interface 'nosuch0'" in line


@needs_root
def test_a_bad_filter_is_libpcaps_message_in_one_line() -> None:
    line = _one_error_line(["live", "-i", "lo", "--filter", "tcp port banana",
                            "--duration", "1"])
    assert line == "nagledetect: error: invalid filter 'tcp port banana': unknown port 'banana'"


@needs_root
def test_without_the_capabilities_it_says_what_is_needed() -> None:
    if not shutil.which("capsh"):
        pytest.skip("capsh not installed")
    line = _one_error_line(["live", "-i", "lo", "--duration", "1"], drop_capabilities=True)
    assert "no permission to capture on 'lo'" in line
    assert "CAP_NET_RAW and CAP_NET_ADMIN" in line and "setcap" in line


def test_off_a_terminal_it_needs_a_limit() -> None:
    line = _one_error_line(["live", "-i", "lo"])
    assert "needs --duration or --packets" in line



def test_the_view_names_the_stalls_their_time_and_the_worst_connection() -> None:
    analysis = analyze_capture(str(SAMPLE_TRACES / "seed003-nagle.pcap"), charts=False)
    manifest = json.loads((SAMPLE_TRACES / "seed003-nagle.json").read_text())
    truth = manifest["connections"][0]
    lines = view_lines(analysis)
    # 39 stalls: the manifest's count from the client's latencies. The last stall starts at
    # frame 238, the last of the held writes: tshark -Y frame.number==238 gives its time
    # 1795370346.693946 (frames 239 and 240 are the delayed ACK and the release).
    last_s = 1795370346.693946
    last_text = f"{time.strftime('%H:%M:%S', time.localtime(last_s))}.693"
    assert lines[0].startswith(f"1 connection; {manifest['summary']['nagle_stalls']} "
                               "Nagle-family stalls, ")
    assert lines[0].endswith(f"; last at {last_text}")
    assert lines[1].startswith(f"  {truth['client']} -> {truth['server']}: 39 stalls "
                               f"({NAGLE_DELACK_STALL}), ")
    assert len(lines) == 2


def test_drops_are_said_in_the_accounting_and_on_the_findings_they_touch() -> None:
    """libpcap's drop counters cannot be made to grow on demand: the counts and the window in
    which they grew are given here, on the real analysis of seed003-nagle."""
    analysis = analyze_capture(str(SAMPLE_TRACES / "seed003-nagle.pcap"), charts=False)
    # The connection runs from its SYN (frame 5) to the last frame (246): tshark gives
    # 1795370344.707649 and 1795370346.736009; a window inside that touches it, one a minute
    # later does not.
    counts = {"packets": 246, "bytes": 0, "received": 251, "dropped": 5, "interface_dropped": 0}
    late = Captured("x.pcap", "veth0", counts, [DropWindow(1795370400.0, 1795370401.0, 5)])
    add_capture_warnings(analysis, late)
    assert analysis.capture.accounting.warnings == [
        "5 packets dropped by the kernel during the capture"]
    assert all("dropped packets" not in " ".join(f.details.get("warnings", []))
               for f in analysis.findings)
    during = Captured("x.pcap", "veth0", counts, [DropWindow(1795370345.0, 1795370345.2, 5)])
    add_capture_warnings(analysis, during)
    stall = next(f for f in analysis.findings if f.kind == NAGLE_DELACK_STALL)
    assert any("dropped packets while this connection was open" in warning
               for warning in stall.details["warnings"])


def test_drops_are_said_on_the_findings_of_a_capture_read_from_disk(tmp_path: Path) -> None:
    """A capture too large to analyse whole has its findings on disk, read as the report
    needs them: those of a connection open during the drops say so as they are read. Three
    copies of seed003's connection one after another (`make_large_capture.py`), analysed a
    batch at a time; tshark gives the copies' tcp.streams 0, 1, 2 the spans 1795370344.707649
    to 1795370346.736009, then the same 3 and 6 s later: a window at 1795370348.0 touches only
    stream 1."""
    copies = tmp_path / "three.pcap"
    subprocess.run([sys.executable, str(PROJECT / "benchmarks" / "make_large_capture.py"),
                    str(SAMPLE_TRACES / "seed003-nagle.pcap"), str(copies), "--packets", "700"],
                   check=True, capture_output=True)
    analysis = analyze_in_batches(str(copies), None, 16_000_000)
    assert analysis is not None and isinstance(analysis.findings, RecordTable)
    counts = {"packets": 738, "bytes": 0, "received": 743, "dropped": 5, "interface_dropped": 0}
    add_capture_warnings(analysis, Captured(str(copies), "veth0", counts,
                                            [DropWindow(1795370348.0, 1795370348.1, 5)]))
    warned = {finding.connection for finding in analysis.findings
              if any("dropped packets" in warning
                     for warning in finding.details.get("warnings", []))}
    assert warned == {1}
    assert {finding.connection for finding in analysis.findings} == {0, 1, 2}


@needs_lab
def test_packets_ends_the_capture_at_that_many_packets() -> None:
    with _folder() as folder:
        run = _live_during(_nagle_scenario(), folder, "live", "--packets", "12",
                           "--duration", "20", "--format", "json")
        assert run.returncode == 0, run.stderr
        # tshark counts the frames of the written file on its own.
        frames = subprocess.run(["tshark", "-r", str(folder / "live.pcap"), "-T", "fields",
                                 "-e", "frame.number"], capture_output=True, text=True)
    assert frames.stdout.split() == [str(number) for number in range(1, 13)]
    assert json.loads(run.stdout)["captures"][0]["packets"] == 12


def _burst_on_loopback(port: int, connections: int) -> None:
    """`connections` connections to a server on this machine's loopback, one after another as
    fast as they open, each writing two bytes and closing: about seven packets each, in tens
    of milliseconds (one connection's small writes would not do: Linux corks them into few
    packets on loopback)."""
    with socket.create_server(("127.0.0.1", port), backlog=connections) as listening:
        def serve() -> None:
            for _ in range(connections):
                accepted, _ = listening.accept()
                with accepted:
                    while accepted.recv(64):
                        pass

        server = threading.Thread(target=serve)
        server.start()
        for _ in range(connections):
            with socket.create_connection(("127.0.0.1", port)) as client:
                client.sendall(b"ab")
        server.join()


@needs_root
def test_a_burst_on_loopback_at_tcpdumps_snapshot_length_loses_nothing() -> None:
    """Loopback's packets may be 64 KB: in immediate mode libpcap cuts the kernel's buffer
    into frames that large, and at its 2 MB default a burst of 300 short connections lost
    packets at the default snapshot length (262,144, tcpdump's), where tcpdump lost none."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    with _folder() as folder:
        written = folder / "burst.pcap"
        command = _nagledetect("live", "-i", "lo", "--duration", "4", "--format", "json",
                               "--filter", f"tcp port {port}", "--write", str(written))
        with subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True, env=_environment(), cwd=PROJECT) as live:
            _wait_for_file(written, live)
            _burst_on_loopback(port, 300)
            stdout, stderr = live.communicate(timeout=RUN_TIMEOUT_S)
    assert live.returncode == 0, stderr
    stats = [line for line in stderr.splitlines() if "packets captured" in line]
    assert len(stats) == 1 and " 0 dropped by the kernel" in stats[0], stderr
    assert json.loads(stdout)["captures"][0]["packets"] >= 300 * 6


@needs_root
def test_ctrl_c_ends_the_capture_and_the_report_follows() -> None:
    with _folder() as folder:
        written = folder / "quiet.pcap"
        started_s = time.monotonic()
        with subprocess.Popen(_nagledetect("live", "-i", "lo", "--filter", "tcp port 9",
                                           "--duration", "60", "--write", str(written),
                                           "--format", "json"),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              env=_environment(), cwd=PROJECT) as live:
            _wait_for_file(written, live)
            live.send_signal(signal.SIGINT)
            stdout, stderr = live.communicate(timeout=RUN_TIMEOUT_S)
    assert time.monotonic() - started_s < 30
    assert live.returncode == 0, stderr
    assert "Traceback" not in stderr
    assert json.loads(stdout)["captures"][0]["packets"] == 0
    assert "nagledetect: live: 0 packets captured on lo" in stderr


@needs_lab
def test_on_a_terminal_the_view_shows_the_stalls_found_so_far() -> None:
    if not shutil.which("script"):
        pytest.skip("script (util-linux) not installed")
    with _folder() as folder:
        run = _live_during(_nagle_scenario(), folder, "live", "--duration", CAPTURE_S,
                           terminal=True)
    assert run.returncode == 0, run.stdout
    view, _, report = run.stdout.partition("nagledetect: live:")
    # The view is redrawn in place (cursor up, clear to the end) about once a second, each
    # time with the packets so far; once the exchanges are over it shows their stalls.
    frames = [frame for frame in view.split("\x1b[J") if "live on " in frame]
    assert len(frames) >= 2, view
    assert "Nagle-family stall" in frames[-1] and "10.77.0.1:" in frames[-1], frames[-1]
    assert "nagle-delack-stall" in frames[-1]
    # Then the view is cleared and the text report follows.
    assert report and "Nagle/delayed-ACK stalls cost" in report


def _header_body_exchanges(port: int, exchanges: int) -> None:
    """A client that writes a 100-byte header and a 100-byte body (Nagle on) and waits for a
    10-byte answer, `exchanges` times, against a server that answers once it has both."""
    with socket.create_connection(("127.0.0.1", port)) as client:
        for _ in range(exchanges):
            client.sendall(b"h" * 100)
            client.sendall(b"b" * 100)
            answer = b""
            while len(answer) < 10:
                answer += client.recv(10 - len(answer))


def _answering_server(listener: socket.socket, exchanges: int) -> None:
    connection, _ = listener.accept()
    with connection:
        for _ in range(exchanges):
            request = b""
            while len(request) < 200:
                request += connection.recv(200 - len(request))
            connection.sendall(b"a" * 10)


@contextmanager
def _capturing_exchanges(written: Path, live_packets: int) -> Iterator[_core.LiveCapture]:
    """A capture on lo into `written`, its pass allowed `live_packets`, of 8 header-body
    exchanges and their last ACKs; closed after the block."""
    with _capturing_on_lo(written, live_packets, 262_144,
                          lambda listener: _answering_server(listener, 8),
                          lambda port: _header_body_exchanges(port, 8)) as capture:
        yield capture


@contextmanager
def _capturing_on_lo(written: Path, live_packets: int, snaplen: int,
                     serve: Callable[[socket.socket], None],
                     talk: Callable[[int], None]) -> Iterator[_core.LiveCapture]:
    """A capture on lo into `written` (its pass allowed `live_packets`) of one server, which
    `serve` runs on its listening socket, and one client, which `talk` runs on its port;
    closed after the block."""
    with socket.create_server(("127.0.0.1", 0)) as listener:
        port = listener.getsockname()[1]
        capture = _core.LiveCapture("lo", snaplen, f"tcp port {port}", str(written),
                                    live_packets)
        assert capture.looking
        server = threading.Thread(target=serve, args=(listener,))
        client = threading.Thread(target=talk, args=(port,))
        server.start()
        client.start()
        while client.is_alive():
            capture.capture(100)
        client.join()
        server.join()
        settled = -1
        while capture.counts()["packets"] != settled:  # until 300 ms pass without a packet
            settled = capture.counts()["packets"]
            capture.capture(300)
        try:
            yield capture
        finally:
            capture.close()


@needs_root
def test_the_pass_over_packets_as_captured_gives_the_files_analysis(tmp_path: Path) -> None:
    """Each packet goes through the core's pass as it is captured; the view looks at the live
    connection as if it ended now (`peek`). On lo, 8 header-body-answer exchanges: the body
    waits for the server's delayed ACK, a Nagle stall. Read with tshark on one run: the first
    body went at once (frames 4-6: the header ACKed at once, in quick-ACK mode), each later
    one after about 42 ms (frame 10 at 0.000168 s, the ACK in frame 11 at 0.041745 s, the body
    in frame 12); the report said 7 stalls. The view's lines from the look equal those of the
    written file's analysis, and no connection has ended yet (it is closed but has not been
    silent for 2 minutes)."""
    written = tmp_path / "lo.pcap"
    with _capturing_exchanges(written, 1_000_000) as capture:
        looked = capture.peek()
        assert capture.finished() is None
    tally = StallTally()
    tally.add(flow_tables_of(looked, filtered=False))
    expected = view_lines(analyze_capture(str(written), charts=False))
    assert tally.stalls > 0 and tally.connections == 1
    assert tally.lines() == expected


@needs_root
def test_the_pass_stops_when_its_live_connections_outgrow_the_limit(tmp_path: Path) -> None:
    """The same exchanges, the pass allowed 10 live packets: it stops at the eleventh, and the
    view has nothing more to look at; the file is written whole all the same."""
    written = tmp_path / "lo.pcap"
    with _capturing_exchanges(written, 10) as capture:
        counts = capture.counts()
        assert not capture.looking
        assert capture.peek() is None and capture.finished() is None
    read = analyze_capture(str(written), charts=False).capture.accounting
    assert read.packets_read == counts["packets"] > 10


BULK_BYTES = 1 << 30
LIVE_PACKETS = 5_000


def _bulk_sink(listener: socket.socket) -> None:
    connection, _ = listener.accept()
    with connection:
        while connection.recv(1 << 20):
            pass


def _bulk_send(port: int, total_bytes: int) -> None:
    chunk = b"x" * (1 << 20)
    with socket.create_connection(("127.0.0.1", port)) as client:
        for _ in range(total_bytes // len(chunk)):
            client.sendall(chunk)


@needs_root
def test_a_long_transfer_lets_its_packets_go_and_the_view_keeps_looking(
        tmp_path: Path) -> None:
    """One bulk transfer on lo (1 GB in 1 MB writes: tens of thousands of packets of up to
    64 KB and their ACKs), its handshake captured, the pass allowed 5,000 live packets: the
    connection lets its packets go as it goes, so the pass never outgrows them and the view
    goes on looking; its look at the live connection counts the same data, in the connection
    table and in its messages (those finished early included), as the written file's
    analysis. What it keeps are
    its events, a row each: a few write bursts (cut at pauses of over a millisecond), hardly
    a lone segment (the sender never waits for an ACK with its buffer empty, as it would
    with a small send buffer: then each segment is one)."""
    with _capturing_on_lo(tmp_path / "bulk.pcap", LIVE_PACKETS, 128, _bulk_sink,
                          lambda port: _bulk_send(port, BULK_BYTES)) as capture:
        counts = capture.counts()
        assert counts["packets"] > 2 * LIVE_PACKETS and capture.looking, counts
        looked = capture.peek()
    assert looked is not None
    written = _core.flow_tables([str(tmp_path / "bulk.pcap")], None, False)
    for name in ("bytes_client_to_server", "packets_client_to_server"):
        assert looked["connections"][name].tolist() == written["connections"][name].tolist()
    assert looked["connections"]["bytes_client_to_server"][0] >= BULK_BYTES
    assert looked["messages"]["bytes"].sum() == written["messages"]["bytes"].sum()
