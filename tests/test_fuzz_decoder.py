"""Mutation fuzzing of the vectorised decoder on real packets (hypothesis, fixed seed).

Headers of a real Linux capture are corrupted at random (IP total length, header lengths, TCP
data offset, option lengths, extension-header chains...), and captured lengths are cut: the
decoder must never raise, never read outside the batch, and account for every packet. The
one-gather path for plain Ethernet/IPv4/TCP packets must decide and decode every corrupted packet
exactly as the layer-by-layer walk does.
"""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from nagledetect.read.decode import _fixed_headers, _plain_first, decode_batch, pad_batch
from nagledetect.read.libpcap import CaptureReader
from tests.conftest import SAMPLE_TRACES

SOURCES = {name: next(CaptureReader(str(SAMPLE_TRACES / f"{name}.pcap")).batches())
           for name in ("seed003-nagle", "seed004-header-body-server")}  # IPv4 and IPv6
HEADER_BYTES = 80


def _mutated(name: str, edits: list[tuple[int, int, int]], cuts: list[tuple[int, int]]):
    batch = SOURCES[name]
    raw = batch.buf[: int(batch.offsets[-1] + batch.caplens[-1])].copy()
    caplens = batch.caplens.copy()
    for packet, offset, value in edits:
        index = packet % len(batch.offsets)
        position = int(batch.offsets[index]) + offset % max(1, min(HEADER_BYTES, int(caplens[index])))
        raw[position] = value
    for packet, length in cuts:
        index = packet % len(batch.offsets)
        caplens[index] = min(int(caplens[index]), length)
    return pad_batch(raw.tobytes()), batch.offsets, caplens


def _edits(last_offset: int) -> st.SearchStrategy:
    """Up to 40 (packet, byte offset, new value) edits of the header bytes."""
    return st.lists(st.tuples(st.integers(0, 10_000), st.integers(0, last_offset),
                              st.integers(0, 255)), max_size=40)


def _cuts(longest: int) -> st.SearchStrategy:
    """Up to 10 (packet, captured length) cuts."""
    return st.lists(st.tuples(st.integers(0, 10_000), st.integers(0, longest)), max_size=10)


@settings(max_examples=2000, derandomize=True, deadline=None)
@given(name=st.sampled_from(sorted(SOURCES)), edits=_edits(255), cuts=_cuts(120))
def test_corrupted_headers_are_decoded_or_skipped_never_fatal(name, edits, cuts) -> None:
    buf, offsets, caplens = _mutated(name, edits, cuts)
    decoded = decode_batch(buf, offsets, caplens, linktype=1)
    kept = len(decoded.columns.get("frame", decoded.columns.get("batch_index", [])))
    assert kept + sum(decoded.skipped.values()) == len(offsets)
    if kept:
        payload = decoded.columns["payload_bytes"].astype(np.int64)
        assert (payload >= 0).all() and (payload < 1 << 32).all()


def assert_plain_path_agrees(buf, offsets, caplens) -> None:
    """Skip codes equal everywhere, and every column of the kept packets equal."""
    plain_columns, plain_skip = _plain_first(buf, offsets, caplens, 1)
    walked_columns, walked_skip = _fixed_headers(buf, offsets, caplens, 1)
    np.testing.assert_array_equal(plain_skip, walked_skip)
    kept = walked_skip == 0
    assert plain_columns.keys() == walked_columns.keys()
    for name, values in walked_columns.items():
        assert plain_columns[name].dtype == values.dtype, name
        np.testing.assert_array_equal(plain_columns[name], values[kept], err_msg=name)


@settings(max_examples=1000, derandomize=True, deadline=None)
@given(name=st.sampled_from(sorted(SOURCES)), edits=_edits(60), cuts=_cuts(80))
def test_plain_packet_path_agrees_with_the_layer_walk(name, edits, cuts) -> None:
    assert_plain_path_agrees(*_mutated(name, edits, cuts))


@settings(max_examples=1000, derandomize=True, deadline=None)
@given(data=st.binary(min_size=0, max_size=400), linktype=st.sampled_from([0, 1, 12, 101, 108,
                                                                          113, 228, 229, 276]))
def test_random_bytes_under_every_link_type(data: bytes, linktype: int) -> None:
    buf = pad_batch(data)
    offsets = np.array([0], dtype=np.int64)
    caplens = np.array([len(data)], dtype=np.int64)
    decoded = decode_batch(buf, offsets, caplens, linktype)
    kept = len(decoded.columns.get("batch_index", []))
    assert kept + sum(decoded.skipped.values()) == 1
