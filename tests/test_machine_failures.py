"""When the machine, not the capture, fails: a worker process killed (as the kernel's OOM killer
does), a full disk for the temporary files. Each is one line on stderr and exit status 2, never
a traceback, and the temporary files are gone afterwards; so are they when the run itself is
stopped by SIGTERM.

The captures are replicas of the lab's seed003-nagle.pcap made with the benchmark's own tool,
large enough (53 MB) not to be analysed whole under `--memory 256M`. A capture too large to
analyse whole is read a batch of finished connections at a time in one process; it is analysed
in parts, in worker processes to kill, where its connections stay open to its end and hold
more packets than the batches may keep live (`streamed`): the replicas of a few connections
(`--connections N`, each the lab's exchange repeated end to end, with no teardown) are such.
The workers are found and killed for real (SIGKILL), from outside, while the command runs.
"""

from __future__ import annotations

import gzip
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import PROJECT, SAMPLE_TRACES

REPLICA_PACKETS = 600_000
IN_PARTS = ["--memory", "200M"]
"""Memory the replicas' whole analysis (up to 6 bytes a capture byte: 320 MB) does not fit in
(`part_sizes.WHOLE_MEMORY_PER_CAPTURE_BYTE`). With `--tables` (`_in_parts`), the batches keep
at most 395,689 live packets with their rows of the packet table (`part_sizes`:
BYTES_PER_LIVE_PACKET and BYTES_PER_LIVE_TABLE_ROW), rows kept to each connection's end: a
replica of 600,000 packets in connections open to its end is analysed in parts."""


def _in_parts(tmp_path: Path) -> list[str]:
    """`IN_PARTS` with the packet table written to a folder of the test's own: a capture
    whose connections stay open goes to parts (the events they keep would not stop the
    batches)."""
    return [*IN_PARTS, "--tables", str(tmp_path / "tables")]
POLL_S = 0.002
HOST_STEP_KILL_AFTER_S = 0.02


@pytest.fixture(scope="module")
def replicas(tmp_path_factory) -> list[Path]:
    folder = tmp_path_factory.mktemp("replicas")
    paths = [folder / "first.pcap", folder / "second.pcap"]
    for path in paths:
        _replica(path)
    return paths


@pytest.fixture(scope="module")
def open_to_the_end(tmp_path_factory) -> list[Path]:
    """Two replicas of 4 connections, each open to the capture's end: 600,000 packets, all
    TCP (`tcpdump -n -r FILE tcp | wc -l`), 53 MB, two parts each."""
    folder = tmp_path_factory.mktemp("replicas")
    paths = [folder / "first.pcap", folder / "second.pcap"]
    for path in paths:
        _replica(path, "--connections", "4")
    return paths


@pytest.fixture(scope="module")
def many_connections(tmp_path_factory) -> Path:
    """20,000 connections: their JSON entries come to 10 pieces of 2,048, enough for the
    document to be written by forked workers."""
    path = tmp_path_factory.mktemp("replicas") / "many.pcap"
    _replica(path, "--connections", "20000")
    return path


def _replica(path: Path, *options: str, packets: int = REPLICA_PACKETS) -> None:
    subprocess.run([sys.executable, str(PROJECT / "benchmarks" / "make_large_capture.py"),
                    str(SAMPLE_TRACES / "seed003-nagle.pcap"), str(path),
                    "--packets", str(packets), *options], check=True, capture_output=True)


def _start(args: list[str], temporary: Path, stdout: Path) -> subprocess.Popen:
    temporary.mkdir(exist_ok=True)
    with open(stdout, "wb") as out:
        return subprocess.Popen([sys.executable, "-m", "nagledetect", *args], stdout=out,
                                stderr=subprocess.PIPE, text=True, start_new_session=True,
                                env={**os.environ, "TMPDIR": str(temporary)})


def _children(pid: int) -> list[int]:
    """The live child processes of `pid` (not those that ended and wait to be reaped)."""
    tasks = Path(f"/proc/{pid}/task")
    found: list[int] = []
    for task in tasks.iterdir() if tasks.exists() else []:
        try:
            found += [int(child) for child in (task / "children").read_text().split()]
        except OSError:
            continue
    return [child for child in found if _state(child) not in ("Z", "X", "")]


def _state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return ""


def _first_child(process: subprocess.Popen, ready=lambda: True) -> int:
    """The first child process of `process` once `ready()` holds, polled until it ends."""
    while process.poll() is None:
        children = _children(process.pid)
        if children and ready():
            return min(children)
        time.sleep(POLL_S)
    pytest.fail(f"the command ended before it had a worker to kill: {process.stderr.read()}")


def _first_of_second_set(process: subprocess.Popen) -> int:
    """The first child of `process` started after all of its first children had ended."""
    first_set: set[int] = set()
    while process.poll() is None:
        children = set(_children(process.pid))
        if first_set and children and not first_set & children:
            return min(children)
        first_set |= children
        time.sleep(POLL_S)
    pytest.fail(f"the command ended before a second set of workers: {process.stderr.read()}")


def _stderr_within_a_minute(process: subprocess.Popen) -> str:
    try:
        return process.communicate(timeout=60)[1]
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.communicate()
        pytest.fail("the command (or a worker holding its stderr) did not end within a minute")


def _assert_one_line_and_clean(process: subprocess.Popen, fragment: str, temporary: Path) -> None:
    stderr = _stderr_within_a_minute(process)
    assert process.returncode == 2, stderr
    lines = stderr.strip().splitlines()
    assert len(lines) == 1 and fragment in lines[0], stderr
    assert "Traceback" not in stderr
    assert list(temporary.iterdir()) == []


def test_a_killed_worker_of_a_parallel_run_is_one_line_and_leaves_no_files(replicas,
                                                                             tmp_path) -> None:
    """`-j 2` over two captures: one process each. Killing one breaks the pool; the part files
    and spill file of the killed worker (which could not remove them) are in the run's own
    temporary folder, removed by the parent."""
    temporary = tmp_path / "tmp"
    process = _start(["analyze", "-j", "2", *_in_parts(tmp_path), "--format", "json",
                      *map(str, replicas)], temporary, tmp_path / "out.json")
    os.kill(_first_child(process, lambda: any(temporary.iterdir())), signal.SIGKILL)
    _assert_one_line_and_clean(process, "a worker process was killed (out of memory, or by a "
                               "signal); fewer jobs (-j) need less memory", temporary)


def test_a_killed_part_worker_is_one_line_naming_the_capture_and_its_parts(open_to_the_end,
                                                                           tmp_path) -> None:
    """One capture in parts: its two parts (53 MB of capture over 32 MB a part) run at once in
    two worker processes, submitted together once the capture is routed; the first worker is
    killed. The line counts the parts that were running and the larger one's packets: the
    replica's 600,000 TCP packets are split between the two, so the larger holds at least
    half."""
    capture = open_to_the_end[0]
    temporary = tmp_path / "tmp"
    process = _start(["analyze", *_in_parts(tmp_path), "--format", "json", str(capture)],
                     temporary, tmp_path / "out.json")
    os.kill(_first_child(process), signal.SIGKILL)
    stderr = _stderr_within_a_minute(process)
    assert process.returncode == 2, stderr
    found = re.fullmatch(rf"nagledetect: error: {re.escape(str(capture))}: a worker process "
                         r"was killed \(out of memory, or by a signal\) while analysing 2 parts "
                         r"of up to ([\d,]+) packets; fewer jobs \(-j\) or a smaller --memory "
                         r"need less memory\n",
                         stderr)
    assert found, stderr
    assert 600_000 // 2 <= int(found.group(1).replace(",", "")) <= 600_000
    assert list(temporary.iterdir()) == []


WHOLE_PART = "a connection is analysed whole, in about {} GB for this part"
SLICED_PART = ("this part, though read a slice at a time, holds the events of its connections "
               "(messages, delayed-ACK samples, stall candidates, gaps) to its end, up to about "
               "{} GB")


@pytest.mark.parametrize(("connections", "packets", "part_packets", "held", "piece"), [
    (2, 4_600_000, 2_300_000, SLICED_PART.format("0.4"), 500_000),
    (1, 1_600_000, 1_600_000, WHOLE_PART.format("0.4"), 400_000),
])
def test_a_killed_worker_of_a_huge_connection_says_what_it_needed(
        tmp_path, connections: int, packets: int, part_packets: int, held: str,
        piece: int) -> None:
    """Huge connections (`make_large_capture.py --connections N`: the lab's exchange repeated
    end to end), each its own part. Two of 2,300,000 packets (counted with `tcpdump -n -r FILE
    tcp` by 4-tuple: 1,341,665 + 958,335 each) make parts of 140 MB, each more than the parts
    allowed in flight, so each runs alone; one of 1,600,000 (666,669 + 933,331) is the only
    part, and runs in a worker all the same, so that its death can be told. Fewer jobs would
    not help: the line says so, with the part's packets and what it holds: read whole, about
    240 bytes each (1,600,000: 0.4 GB); read a slice at a time (more than 2 M packets), its
    events, up to about 190 bytes each (2,300,000: 0.44 GB). It suggests pieces of a quarter of
    them, rounded down to 100,000s (2,300,000 / 4 = 575,000 -> 500,000; 1,600,000 / 4 =
    400,000). Under `--memory 512M` and with `--tables` the batches may keep 1,012,963 live
    packets with their rows of the packet table: these connections, open to the end, hold
    more, so the capture goes to parts."""
    capture = tmp_path / "huge.pcap"
    _replica(capture, "--connections", str(connections), packets=packets)
    temporary = tmp_path / "tmp"
    process = _start(["analyze", "--memory", "512M", "--tables", str(tmp_path / "tables"),
                      "--format", "json", str(capture)],
                     temporary, tmp_path / "out.json")
    os.kill(_first_child(process), signal.SIGKILL)
    _assert_one_line_and_clean(
        process, f"{capture}: a worker process was killed (out of memory, or by a signal) while "
        f"analysing a part of {part_packets:,} packets alone: {held}; cut the capture into "
        f"pieces (editcap -c {piece}) "
        "and analyse them one at a time (-j 1), leave its largest connections out with "
        "--filter, or use a machine with more memory", temporary)


def test_a_killed_writing_worker_is_one_line_saying_the_output_is_incomplete(many_connections,
                                                                            tmp_path) -> None:
    """The JSON document is rendered and written by forked workers taking turns. Once the
    first bytes are out, the command and its workers are stopped (so none finishes meanwhile),
    one worker is killed and the others go on: they stop, and the command says the document is
    incomplete rather than ending as if it were whole."""
    temporary, out = tmp_path / "tmp", tmp_path / "out.json"
    process = _start(["analyze", "-j", "2", "--format", "json", str(many_connections)],
                     temporary, out)
    victim = _first_child(process, lambda: out.stat().st_size > 0)
    stopped = [process.pid, *_children(process.pid)]
    for pid in stopped:
        os.kill(pid, signal.SIGSTOP)
    os.kill(victim, signal.SIGKILL)
    for pid in stopped:
        os.kill(pid, signal.SIGCONT)
    _assert_one_line_and_clean(process, "the JSON document on stdout is incomplete", temporary)


def test_a_killed_host_step_worker_is_one_line_not_a_hang(tmp_path) -> None:
    """100,000 connections between 200,000 hosts in 1,200,000 packets (101 MB: four parts, so
    two host buckets, fingerprinted in two forked workers once the parts' workers are gone;
    in parts, as under `--memory 60M` the batches may keep 157,286 live packets, and these
    connections, released 3 hours of capture time after their last packet, hold more).
    The first worker of that second set is killed 20 ms after it starts, holding its bucket
    (the pair of workers lives about 0.26 s): the host step ran on a `multiprocessing.Pool`,
    which waited for ever for the killed worker's bucket."""
    capture = tmp_path / "hosts.pcap"
    _replica(capture, "--connections", "100000", packets=1_200_000)
    temporary = tmp_path / "tmp"
    process = _start(["analyze", "--memory", "60M", "--format", "json", str(capture)],
                     temporary, tmp_path / "out.json")
    victim = _first_of_second_set(process)
    time.sleep(HOST_STEP_KILL_AFTER_S)
    os.kill(victim, signal.SIGKILL)
    _assert_one_line_and_clean(process, f"{capture}: a worker process was killed (out of "
                               "memory, or by a signal); fewer jobs (-j) need less memory",
                               temporary)


@pytest.mark.parametrize("captures", [1, 2])
def test_sigterm_stops_the_run_its_workers_and_removes_its_files(open_to_the_end, tmp_path,
                                                                 captures: int) -> None:
    """SIGTERM (a CI job's time limit, `timeout`) to the command, not to its workers, while
    they run: one capture's two parts, or two captures at once. It ends with 143, as the shell
    reports a process SIGTERM ended, its workers end too, and its 48 MB of part files per
    capture go: they were left in TMPDIR, and the workers went on."""
    temporary = tmp_path / "tmp"
    process = _start(["analyze", *_in_parts(tmp_path), "--format", "json",
                      *map(str, open_to_the_end[:captures])], temporary, tmp_path / "out.json")
    workers = [_first_child(process, lambda: any(temporary.iterdir()))]
    workers += _children(process.pid)
    process.send_signal(signal.SIGTERM)
    stderr = _stderr_within_a_minute(process)
    assert process.returncode == 128 + signal.SIGTERM, stderr
    assert "Traceback" not in stderr
    assert list(temporary.iterdir()) == []
    deadline = time.monotonic() + 5
    while any(_state(worker) not in ("", "Z") for worker in workers):
        assert time.monotonic() < deadline, f"workers {workers} still running"
        time.sleep(POLL_S)


@pytest.fixture
def small_disk(tmp_path) -> Path:
    """A 4 MB tmpfs (root only): the replica's part files need about 48 MB."""
    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs needs root")
    folder = tmp_path / "small"
    folder.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(folder)],
                             capture_output=True, text=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.strip()}")
    yield folder
    subprocess.run(["umount", str(folder)], check=True)


@pytest.mark.parametrize("jobs", [["-j", "1"], ["-j", "2"]])
def test_a_full_disk_for_temporary_files_names_the_folder_to_change(replicas, small_disk,
                                                                    tmp_path, jobs) -> None:
    """The run's temporary files (the findings spilled as batches are analysed) fill the small
    TMPDIR: the line names that folder (not a worker's own folder inside it) and what to set."""
    captures = [str(replicas[0])] if jobs == ["-j", "1"] else list(map(str, replicas))
    result = subprocess.run([sys.executable, "-m", "nagledetect", "analyze", *jobs, *IN_PARTS,
                             "--format", "json", *captures], capture_output=True, text=True, timeout=120,
                            env={**os.environ, "TMPDIR": str(small_disk)})
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert f"no room for temporary files in {small_disk} (No space left on device); set TMPDIR" \
        in lines[0]
    assert list(small_disk.iterdir()) == []


def test_a_compressed_capture_too_large_to_decompress_names_the_folder(replicas, small_disk,
                                                                       tmp_path) -> None:
    """The replica, compressed with gzip, decompresses into the 4 MB tmpfs and fills it. One
    line, naming the folder and what it must hold; nothing left in it."""
    compressed = tmp_path / "replica.pcap.gz"
    compressed.write_bytes(gzip.compress(replicas[0].read_bytes(), compresslevel=1))
    result = subprocess.run([sys.executable, "-m", "nagledetect", "analyze", *IN_PARTS,
                             str(compressed)],
                            capture_output=True, text=True, timeout=120,
                            env={**os.environ, "TMPDIR": str(small_disk)})
    assert result.returncode == 2, result.stderr
    assert result.stderr == (f"nagledetect: error: {compressed}: no room for temporary files in "
                             f"{small_disk} (No space left on device); set TMPDIR to a folder "
                             "with about 80 bytes a packet free, and room for a compressed "
                             "capture decompressed\n")
    assert list(small_disk.iterdir()) == []


def test_tables_on_a_full_disk_are_one_line_naming_the_folder(small_disk, tmp_path) -> None:
    """`--tables` into the 4 MB tmpfs: the tables of a 216,790-packet mix of the lab's captures
    (28 MB of packet table, measured on a roomy disk) do not fit."""
    capture = tmp_path / "mix.pcap"
    subprocess.run([sys.executable, str(PROJECT / "benchmarks" / "make_large_capture.py"),
                    str(SAMPLE_TRACES), str(capture), "--packets", "200000"], check=True,
                   capture_output=True)
    folder = small_disk / "tables"
    result = subprocess.run([sys.executable, "-m", "nagledetect", "analyze", "--tables",
                             str(folder), str(capture)], capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 2, result.stderr
    assert result.stderr.strip().splitlines() == [
        f"nagledetect: error: {folder}: cannot write the tables (No space left on device)"]


@pytest.mark.parametrize("jobs", ["1", "2"])
def test_tables_of_many_small_captures_on_a_full_disk_are_one_short_line(small_disk, tmp_path,
                                                                         jobs) -> None:
    """200 small captures (links to mixed.pcap, analysed together in groups) with `--tables`
    and TMPDIR on the 4 MB tmpfs: their packet tables alone take about 16 MB (pickled, measured
    on a roomy disk), so the workers' hand-over files or the run's own spill fill it. One line,
    naming the folder, short (not every capture), and nothing left behind."""
    captures = []
    for index in range(200):
        link = tmp_path / f"capture-{index:03d}.pcap"
        link.symlink_to(SAMPLE_TRACES / "mixed.pcap")
        captures.append(str(link))
    result = subprocess.run([sys.executable, "-m", "nagledetect", "analyze", "-j", jobs,
                             "--tables", str(tmp_path / "tables"), *captures],
                            capture_output=True, text=True, timeout=120,
                            env={**os.environ, "TMPDIR": str(small_disk)})
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and captures[-1] not in lines[0], result.stderr
    assert f"no room for temporary files in {small_disk} (No space left on device)" in lines[0]
    assert lines[0].startswith(f"nagledetect: error: {captures[0]}")
    assert list(small_disk.iterdir()) == []
