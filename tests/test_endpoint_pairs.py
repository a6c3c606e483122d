"""Endpoint pairs are numbered by their exact keys, whatever their mixed 64-bit values do.

A mixed value that two pairs share must not merge them (nor stop the analysis): the batch is
then grouped by the exact keys. Forcing every pair to collide must give the same tables as the
normal run on the same real capture; the normal run's tables are the reference that the tshark
tests check (conversation counts as in `tshark -z conv,tcp`).
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from nagledetect.flows import endpoints
from nagledetect.flows.build import build_flows
from nagledetect.read.capture import decoded_batches
from tests.conftest import SAMPLE_TRACES, corpus_file


def _tables(path) -> tuple[pd.DataFrame, pd.DataFrame]:
    flows = build_flows(decoded_batches(str(path))[1])
    return flows.packets, flows.connections


def _assert_same_when_every_pair_collides(path, monkeypatch) -> None:
    packets, connections = _tables(path)
    monkeypatch.setattr(endpoints, "_pair_value",
                        lambda low, high: np.zeros(len(low), dtype=np.uint64))
    colliding_packets, colliding_connections = _tables(path)
    assert len(connections) > 1
    pd.testing.assert_frame_equal(packets, colliding_packets)
    pd.testing.assert_frame_equal(connections, colliding_connections)


def test_colliding_pair_values_are_grouped_exactly(monkeypatch):
    _assert_same_when_every_pair_collides(SAMPLE_TRACES / "mixed.pcap", monkeypatch)


@pytest.mark.parametrize("relative", [
    "zeek/ssh__ssh.pcap",  # 23 connections
    "zeek/ftp__ipv6.pcap",  # six IPv6 connections: hashed keys
])
def test_colliding_pair_values_on_corpus_captures(relative, monkeypatch):
    path = corpus_file(relative)
    packets, _ = _tables(path)
    if packets.empty:
        pytest.skip("no TCP packets")
    _assert_same_when_every_pair_collides(path, monkeypatch)


def test_ipv6_and_ipv4_keys_never_meet():
    """An IPv6 endpoint's key has the top bit set; an IPv4 key is below 2**48."""
    columns = {f"src_{i}": np.array([0, 0x20010DB8], dtype=np.uint32) for i in range(4)}
    columns["src_2"] = np.array([0xFFFF, 0], dtype=np.uint32)
    columns["src_3"] = np.array([0xC0A80001, 1], dtype=np.uint32)
    columns["src_port"] = np.array([443, 443], dtype=np.uint16)
    keys = endpoints.endpoint_key(columns, "src")
    assert keys[0] == (0xC0A80001 << 16) | 443
    assert keys[1] >= 1 << 63
