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


def _ethernet_captures() -> list:
    paths = sorted(SAMPLE_TRACES.glob("*.pcap"))
    if CORPORA.exists():
        paths += sorted(p for p in CORPORA.rglob("*") if p.is_file() and p.suffix != ".md")
    return paths


@pytest.mark.parametrize("path", _ethernet_captures(), ids=lambda p: p.name)
def test_plain_path_agrees_on_real_captures(path) -> None:
    try:
        reader = CaptureReader(str(path))
    except InputError:
        pytest.skip("not a readable capture")
    if reader.linktype != 1:
        pytest.skip("not Ethernet")
    for batch in reader.batches():
        assert_plain_path_agrees(batch.buf, batch.offsets, batch.caplens)
