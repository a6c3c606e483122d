"""The one-gather path for plain Ethernet/IPv4/TCP packets against the layer-by-layer walk, on
every Ethernet capture of the sample traces and the corpora: same skip reasons, same values.

Nothing here is copied from the code's output: the walk is the reference (itself checked field
by field against tshark in test_read_vs_tshark.py) and both run on the same real packets.
"""

from __future__ import annotations

import pytest

from nagledetect.errors import InputError
from nagledetect.read.libpcap import CaptureReader
from tests.conftest import CORPORA, SAMPLE_TRACES
from tests.test_fuzz_decoder import assert_plain_path_agrees

ETHERNET = 1
CORPUS_FOLDERS = ("tcpdump", "zeek")


def _agrees_on(path) -> bool:
    """Check the plain path on every batch of `path`; False where it is not an Ethernet
    capture libpcap reads (the plain path is Ethernet's only)."""
    try:
        reader = CaptureReader(str(path))
    except InputError:
        return False
    if reader.linktype != ETHERNET:
        return False
    for batch in reader.batches():
        assert_plain_path_agrees(batch.buf, batch.offsets, batch.caplens)
    return True


@pytest.mark.parametrize("path", sorted(SAMPLE_TRACES.glob("*.pcap")), ids=lambda p: p.name)
def test_plain_path_agrees_on_the_sample_traces(path) -> None:
    _agrees_on(path)


@pytest.mark.parametrize("folder", CORPUS_FOLDERS)
def test_plain_path_agrees_on_every_ethernet_capture_of_a_corpus(folder: str) -> None:
    """Each corpus folder's captures in one test (a test of their own would only skip for the
    many that are not Ethernet): 479 of tcpdump's 830 files are Ethernet captures libpcap
    reads, 714 of zeek's 788, so a sweep that checks fewer than half has gone wrong."""
    root = CORPORA / folder
    if not root.exists():
        pytest.skip(f"corpus folder {folder} not present")
    files = sorted(p for p in root.rglob("*") if p.is_file() and p.suffix != ".md")
    checked = sum(_agrees_on(path) for path in files)
    assert checked >= len(files) // 2
