"""--dask: the per-file analysis on a Dask cluster (a LocalCluster of two worker processes here)
gives the same document as a local run."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import SAMPLE_TRACES

distributed = pytest.importorskip("distributed")


DASHBOARD = ":0"
"""The clusters' dashboards on a port of their own: on Dask's default one (8787), a scheduler
already running on the machine makes the next one retry, leaving a socket open."""


def test_dask_cluster_gives_the_local_result() -> None:
    paths = [str(p) for p in sorted(SAMPLE_TRACES.glob("seed00*.pcap"))][:4]
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                  dashboard_address=DASHBOARD) as cluster:
        on_dask = subprocess.run([sys.executable, "-m", "nagledetect", "analyze", "--format", "json",
                                  "--dask", cluster.scheduler_address, *paths],
                                 capture_output=True, text=True, timeout=300)
    local = subprocess.run([sys.executable, "-m", "nagledetect", "analyze", "--format", "json", "-j",
                            "1", *paths], capture_output=True, text=True, timeout=300)
    assert on_dask.returncode == 0, on_dask.stderr
    assert json.loads(on_dask.stdout) == json.loads(local.stdout)


def test_a_bad_capture_among_small_ones_on_dask_is_the_local_runs_one_line(tmp_path) -> None:
    """Small captures go to the cluster in groups; an unreadable one in a group is still
    reported by name, as a local run reports it, the others are reported, and the run exits
    with status 2."""
    empty = tmp_path / "empty.pcap"
    empty.write_bytes(b"")
    paths = [str(SAMPLE_TRACES / name) for name in ("trap-rpc.pcap", "seed003-nagle.pcap")]
    paths.insert(1, str(empty))
    with distributed.LocalCluster(n_workers=1, threads_per_worker=1, processes=True,
                                  dashboard_address=DASHBOARD) as cluster:
        on_dask = subprocess.run([sys.executable, "-m", "nagledetect", "analyze", "--dask",
                                  cluster.scheduler_address, *paths],
                                 capture_output=True, text=True, timeout=300)
    local = subprocess.run([sys.executable, "-m", "nagledetect", "analyze", "-j", "1", *paths],
                           capture_output=True, text=True, timeout=300)
    assert on_dask.returncode == local.returncode == 2
    assert on_dask.stderr == local.stderr == (f"nagledetect: error: {empty}: empty file, not a "
                                              "capture\n")
    assert on_dask.stdout == local.stdout and "1 could not be analysed" in local.stdout


def test_unreachable_scheduler_is_one_line() -> None:
    result = subprocess.run([sys.executable, "-m", "nagledetect", "analyze", "--dask",
                             "tcp://127.0.0.1:1", str(SAMPLE_TRACES / "trap-rpc.pcap")],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_html_report_on_dask_is_the_local_one(tmp_path) -> None:
    """The charts are gathered on the workers (asked for by `report`) and come back whole."""
    import re

    paths = [str(SAMPLE_TRACES / name) for name in ("mixed.pcap", "seed003-nagle.pcap")]
    pages = {}
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                  dashboard_address=DASHBOARD) as cluster:
        for where, options in (("dask", ["--dask", cluster.scheduler_address]),
                               ("local", ["-j", "1"])):
            out = tmp_path / f"{where}.html"
            result = subprocess.run([sys.executable, "-m", "nagledetect", "report", *options,
                                     *paths, "-o", str(out)],
                                    capture_output=True, text=True, timeout=300)
            assert result.returncode == 0, result.stderr
            pages[where] = re.sub(r"[0-9a-f]{8}(-[0-9a-f]{4}){3}-[0-9a-f]{12}", "ID",
                                  out.read_text())
    assert "Time by cause" in pages["local"] and "class='chart'" in pages["local"]
    assert pages["dask"] == pages["local"]


def _has_open(descriptors: Path, path: Path) -> bool:
    """Whether a process (its /proc/PID/fd folder) has `path` open. A descriptor listed may be
    closed before it is read: the worker opens and closes files as it starts the task."""
    for descriptor in descriptors.iterdir():
        try:
            if os.readlink(descriptor) == str(path):
                return True
        except OSError:
            continue
    return False


def test_a_dask_worker_killed_while_analysing_is_one_line_naming_the_capture(tmp_path,
                                                                            monkeypatch) -> None:
    """A LocalCluster of one worker process whose scheduler gives a task no second try; the
    worker is killed (SIGKILL) once it has the capture open, as the OOM killer would. The
    capture: seed003-nagle.pcap replicated to 600,000 packets by the benchmark's tool, so that
    the worker is still reading it when it is found."""
    import signal
    import time

    import dask

    from tests.conftest import PROJECT

    monkeypatch.setenv("TMPDIR", str(tmp_path))
    capture = tmp_path / "replica.pcap"
    subprocess.run([sys.executable, str(PROJECT / "benchmarks" / "make_large_capture.py"),
                    str(SAMPLE_TRACES / "seed003-nagle.pcap"), str(capture), "--packets",
                    "600000"], check=True, capture_output=True)
    with dask.config.set({"distributed.scheduler.allowed-failures": 0}), \
            distributed.LocalCluster(n_workers=1, threads_per_worker=1, processes=True,
                                     dashboard_address=DASHBOARD) as cluster, \
            distributed.Client(cluster) as client:
        worker_pid = next(iter(client.run(os.getpid).values()))
        run = subprocess.Popen([sys.executable, "-m", "nagledetect", "analyze", "--format",
                                "json", "--dask", cluster.scheduler_address, str(capture)],
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        try:
            descriptors = Path(f"/proc/{worker_pid}/fd")
            while run.poll() is None and not _has_open(descriptors, capture):
                time.sleep(0.002)
            assert run.poll() is None, ("the run ended before its worker could be killed",
                                        run.stderr.read())
            os.kill(worker_pid, signal.SIGKILL)
            stderr = run.communicate(timeout=120)[1]
        finally:
            if run.poll() is None:
                run.kill()
            run.communicate()
    assert run.returncode == 2, stderr
    assert "Traceback" not in stderr
    assert stderr.strip().splitlines() == [
        f"nagledetect: error: {capture}: the Dask workers analysing it died (out of memory, or "
        "by a signal)"]


def test_a_groups_results_come_back_from_dask_as_one_message() -> None:
    """The small captures of a group come back with their connection tables cut from one table
    that travelled once (Dask sends a list item by item: each item carried the whole group's
    table again, and a run over 16,170 captures took 19 s instead of 9). Each table is still
    the capture's own: mixed.pcap's 6 connections and seed003's 1 (tshark `-z conv,tcp`)."""
    import numpy as np

    from nagledetect import cli
    from nagledetect.analysis import Wanted, capture_groups
    from nagledetect.sent_tables import ColumnReader

    paths = tuple(str(SAMPLE_TRACES / name) for name in ("mixed.pcap", "seed003-nagle.pcap") * 2)
    assert capture_groups(paths, 1) == [[0, 1], [2, 3]]  # one worker thread: two groups
    with distributed.LocalCluster(n_workers=1, threads_per_worker=1, processes=True,
                                  dashboard_address=DASHBOARD) as cluster:
        first, second, *_ = cli._analyze_on_dask(paths, None, cluster.scheduler_address,
                                                 Wanted())
    assert [len(a.capture.connections) for a in (first, second)] == [6, 1]

    def root(values: np.ndarray) -> np.ndarray:
        while isinstance(values.base, np.ndarray):
            values = values.base
        return values

    tables = [root(ColumnReader()(a.capture.connections, "first_frame")) for a in (first, second)]
    assert tables[0] is tables[1]
