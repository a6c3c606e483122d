"""Real captures with corrupted packet bytes (what `editcap -E` does, with a fixed seed here):
every copy is analysed end to end, with no exception and a balanced accounting."""

from __future__ import annotations

import shutil
import struct
import subprocess

import numpy as np
import pytest

from nagledetect import load_capture
from nagledetect.analysis import run_detectors
from nagledetect.report.document import build_document
from tests.conftest import SAMPLE_TRACES

SOURCES = ("seed003-nagle", "seed004-header-body-server", "classic-2n-blocks-100000", "mixed")
COPIES = 25
ERROR_PROBABILITY = 0.02


def _record_data_ranges(data: bytes) -> list[tuple[int, int]]:
    """(start, end) of every record's packet bytes in a little-endian classic pcap."""
    ranges, position = [], 24
    while position + 16 <= len(data):
        caplen = struct.unpack_from("<I", data, position + 8)[0]
        ranges.append((position + 16, position + 16 + caplen))
        position += 16 + caplen
    return ranges


@pytest.mark.parametrize("name", SOURCES)
def test_corrupted_copies_are_analysed(name: str, tmp_path) -> None:
    original = (SAMPLE_TRACES / f"{name}.pcap").read_bytes()
    mask = np.zeros(len(original), dtype=bool)
    for start, end in _record_data_ranges(original):
        mask[start:end] = True
    rng = np.random.default_rng(seed=sum(name.encode()))
    for copy in range(COPIES):
        data = np.frombuffer(original, dtype=np.uint8).copy()
        hits = mask & (rng.random(len(data)) < ERROR_PROBABILITY)
        data[hits] = rng.integers(0, 256, int(hits.sum()), dtype=np.uint8)
        path = tmp_path / f"{name}-{copy}.pcap"
        path.write_bytes(data.tobytes())
        document = build_document([run_detectors(load_capture(str(path)))])
        assert document["captures"][0]["balanced"], (name, copy)


@pytest.mark.parametrize("seed", range(12))
def test_editcap_corrupted_copies_are_analysed(seed: int, tmp_path) -> None:
    """The same with Wireshark's own `editcap -E 0.02 --seed N` (skipped without editcap)."""
    editcap = shutil.which("editcap")
    if not editcap:
        pytest.skip("editcap not installed")
    source = SAMPLE_TRACES / SOURCES[seed % len(SOURCES)]
    target = tmp_path / "corrupted.pcap"
    subprocess.run([editcap, "-E", str(ERROR_PROBABILITY), "--seed", str(seed), "-F", "pcap",
                    f"{source}.pcap", str(target)], check=True, capture_output=True)
    document = build_document([run_detectors(load_capture(str(target)))])
    assert document["captures"][0]["balanced"]
