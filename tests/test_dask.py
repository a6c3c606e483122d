"""--dask: the per-file analysis on a Dask cluster (a LocalCluster of two worker processes here)
gives the same document as a local run."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.conftest import SAMPLE_TRACES

distributed = pytest.importorskip("distributed")


def test_dask_cluster_gives_the_local_result() -> None:
    paths = [str(p) for p in sorted(SAMPLE_TRACES.glob("seed00*.pcap"))][:4]
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                  dashboard_address=None) as cluster:
        on_dask = subprocess.run([sys.executable, "-m", "nagledetect", "analyze", "--format", "json",
                                  "--dask", cluster.scheduler_address, *paths],
                                 capture_output=True, text=True, timeout=300)
    local = subprocess.run([sys.executable, "-m", "nagledetect", "analyze", "--format", "json", "-j",
                            "1", *paths], capture_output=True, text=True, timeout=300)
    assert on_dask.returncode == 0, on_dask.stderr
    assert json.loads(on_dask.stdout) == json.loads(local.stdout)


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
                                  dashboard_address=None) as cluster:
        for where, options in (("dask", ["--dask", cluster.scheduler_address]),
                               ("local", ["-j", "1"])):
            out = tmp_path / f"{where}.html"
            result = subprocess.run([sys.executable, "-m", "nagledetect", "report", *options,
                                     *paths, "-o", str(out)],
                                    capture_output=True, text=True, timeout=300)
            assert result.returncode == 0, result.stderr
            pages[where] = re.sub(r"[0-9a-f]{8}(-[0-9a-f]{4}){3}-[0-9a-f]{12}", "ID",
                                  out.read_text())
    assert "Time-sequence graph" in pages["local"]
    assert pages["dask"] == pages["local"]
