"""Connection building in bounded pieces gives the same tables as in one piece.

Per-direction numbering and roles run a chunk of whole connections at a time, and decoded
batches are joined into growing columns; neither may change a value. The expected tables are
not copied from the code: each chunked run is compared with the one-chunk run of the same real
capture (whose values the tshark tests check), with chunks forced small enough that connections
of every size land on a chunk edge, and two chunks classified at once on two threads.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from nagledetect.flows import build
from nagledetect.flows.build import GrowingColumns, build_flows
from nagledetect.read.capture import decoded_batches
from tests.conftest import SAMPLE_TRACES, corpus_file

CAPTURES = [
    SAMPLE_TRACES / "mixed.pcap",  # six connections of several scenarios
    SAMPLE_TRACES / "seed001-blocks-99912-offload.pcap",  # one connection larger than a chunk
]
CORPUS = [
    "zeek/ssh__ssh.pcap",  # 23 connections
    "zeek/smb__smb3_multichannel.pcap",
]


def _tables(path, chunk_packets: int, monkeypatch) -> build.FlowTables:
    """Chunks of `chunk_packets`, classified on two threads at once (whatever the cores)."""
    monkeypatch.setattr(build, "CHUNK_PACKETS", chunk_packets)
    monkeypatch.setattr(build, "CLASSIFY_THREADS", 2)
    return build_flows(decoded_batches(str(path))[1])


def _assert_same(one: build.FlowTables, other: build.FlowTables) -> None:
    pd.testing.assert_frame_equal(one.packets, other.packets)
    pd.testing.assert_frame_equal(one.connections, other.connections)
    pd.testing.assert_frame_equal(one.sack_blocks, other.sack_blocks)


@pytest.mark.parametrize("path", CAPTURES, ids=lambda p: p.name)
@pytest.mark.parametrize("chunk_packets", [1, 7, 100])
def test_chunks_of_connections_change_nothing(path, chunk_packets, monkeypatch):
    whole = _tables(path, 1 << 30, monkeypatch)
    assert len(whole.packets) > chunk_packets
    _assert_same(whole, _tables(path, chunk_packets, monkeypatch))


@pytest.mark.parametrize("relative", CORPUS)
def test_chunks_change_nothing_on_corpus_captures(relative, monkeypatch):
    path = corpus_file(relative)
    _assert_same(_tables(path, 1 << 30, monkeypatch), _tables(path, 50, monkeypatch))


def test_growing_columns_equal_a_join_of_the_batches():
    batches = [columns for columns, _ in decoded_batches(str(SAMPLE_TRACES / "mixed.pcap"))[1]]
    pieces = [{name: values[start:start + 13] for name, values in batches[0].items()}
              for start in range(0, len(batches[0]["frame"]), 13)]
    grown = GrowingColumns()
    for piece in pieces:
        grown.append(piece)
    joined = grown.columns()
    assert grown.length == len(batches[0]["frame"]) > 100
    for name, values in batches[0].items():
        assert joined[name].dtype == values.dtype
        np.testing.assert_array_equal(joined[name], values)


def test_growing_columns_without_batches_are_empty():
    assert GrowingColumns().columns() == {}
