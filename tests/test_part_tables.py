"""`--tables` of a capture analysed in parts: the packet and message tables come back from disk
in the order and with the numbering of a one-part run, so the files written are the same byte
for byte. The expected files are not copied from the code: they are the one-part run's, whose
tables the other tests check against tshark.
"""

from __future__ import annotations

import os
import pickle
from pathlib import Path

import pandas as pd
import pytest

from nagledetect import part_tables, parts
from nagledetect.analysis import analyze_capture
from nagledetect.part_tables import merged_by
from nagledetect.report import tables
from nagledetect.report.tables import write_tables
from tests.conftest import SAMPLE_TRACES, assert_same_table, corpus_file

TABLES = ("packets", "connections", "messages", "findings")
CAPTURES = [SAMPLE_TRACES / "mixed.pcap", SAMPLE_TRACES / "classic-phase-lock.pcap",
            "zeek/ssh__ssh.pcap", "zeek/ftp__cwd-navigation.pcap"]


def _whole_and_split(path: Path, workers: int):
    whole = analyze_capture(str(path), keep_tables=True)
    split = analyze_capture(str(path), keep_tables=True, workers=workers,
                            part_bytes=os.path.getsize(path) // 7 + 1)
    assert whole.tables_kept and not split.tables_kept and split.part_tables is not None
    return whole, split


def _assert_same_csv(path, workers: int, tmp_path: Path) -> None:
    path = corpus_file(path) if isinstance(path, str) else path
    whole, split = _whole_and_split(path, workers)
    write_tables([whole], tmp_path / "whole", "csv")
    write_tables([split], tmp_path / "split", "csv")
    for name in TABLES:
        expected = (tmp_path / "whole" / f"{name}.csv").read_bytes()
        assert expected.count(b"\n") > 1, name
        assert (tmp_path / "split" / f"{name}.csv").read_bytes() == expected, name


@pytest.mark.parametrize("workers", [1, 2])
@pytest.mark.parametrize("path", CAPTURES, ids=lambda p: Path(p).name)
def test_csv_tables_of_a_capture_in_parts_equal_the_whole_ones(path, workers, tmp_path,
                                                               monkeypatch) -> None:
    """Chunks of 50 rows, so that every part spills several and the merge interleaves them."""
    monkeypatch.setattr(part_tables, "ROWS_PER_CHUNK", 50)
    _assert_same_csv(path, workers, tmp_path)


def test_parquet_tables_of_a_capture_in_parts_equal_the_whole_ones(tmp_path, monkeypatch) -> None:
    pytest.importorskip("pyarrow")
    monkeypatch.setattr(part_tables, "ROWS_PER_CHUNK", 50)
    whole, split = _whole_and_split(corpus_file("zeek/ssh__ssh.pcap"), workers=1)
    write_tables([whole], tmp_path / "whole", "parquet")
    write_tables([split], tmp_path / "split", "parquet")
    for name in TABLES:
        assert_same_table(pd.read_parquet(tmp_path / "split" / f"{name}.parquet"),
                                      pd.read_parquet(tmp_path / "whole" / f"{name}.parquet"))


def test_tables_sent_to_another_process_are_the_same_rows(monkeypatch) -> None:
    monkeypatch.setattr(part_tables, "ROWS_PER_CHUNK", 50)
    _, split = _whole_and_split(SAMPLE_TRACES / "mixed.pcap", workers=1)
    sent = pickle.loads(pickle.dumps(split.part_tables))
    for name in ("packets", "messages"):
        assert_same_table(pd.concat(list(getattr(sent, name)())),
                                      pd.concat(list(getattr(split.part_tables, name)())))


def test_merge_hands_out_rows_in_key_order_a_chunk_of_each_stream_at_a_time() -> None:
    """Three hand-made streams whose keys interleave: every row once, in key order, and no
    round holds more than one chunk of each stream (so never more than 3 x 2 rows here)."""
    streams = [[[1, 4], [6, 9]], [[2, 3], [5, 10], [11, 12]], [[7, 8]]]
    chunks = [iter([pd.DataFrame({"key": keys, "from": index}) for keys in stream])
              for index, stream in enumerate(streams)]
    rounds = list(merged_by("key", chunks))
    assert pd.concat(rounds)["key"].tolist() == list(range(1, 13))
    assert max(len(chunk) for chunk in rounds) <= 6
    assert pd.concat(rounds).groupby("from").size().tolist() == [4, 6, 2]


def test_tables_of_many_captures_join_their_chunks_without_changing_a_byte(
        tmp_path, monkeypatch) -> None:
    """Several captures' tables, with one whose message table is empty and untyped between
    typed ones (trap-keepalive: 14 TCP packets, all of 0 bytes, in tcpdump): joined into large
    chunks, the files are those written chunk by chunk (ROWS_PER_CHUNK 1 joins nothing), and
    each capture's packet rows are its own (seed003: 234, `tcpdump -r FILE tcp | wc -l`)."""
    names = ("mixed.pcap", "trap-keepalive.pcap", "seed003-nagle.pcap", "mixed.pcap")
    analyses = [analyze_capture(str(SAMPLE_TRACES / name), keep_tables=True) for name in names]
    assert analyses[1].messages.empty and not analyses[2].messages.empty
    write_tables(analyses, tmp_path / "joined", "csv")
    monkeypatch.setattr(tables, "ROWS_PER_CHUNK", 1)
    write_tables(analyses, tmp_path / "apart", "csv")
    for name in TABLES:
        joined = (tmp_path / "joined" / f"{name}.csv").read_bytes()
        assert joined == (tmp_path / "apart" / f"{name}.csv").read_bytes(), name
    packets = pd.read_csv(tmp_path / "joined" / "packets.csv")
    assert packets["capture"].value_counts().loc[[1, 2]].tolist() == [14, 234]
    assert packets["capture"].is_monotonic_increasing
    monkeypatch.undo()
    chunks = list(tables._chunks(analyses, "messages"))
    assert [chunk["capture"].unique().tolist() for chunk in chunks] == [[0], [], [2, 3]]
    assert all(chunk["connection"].dtype == analyses[0].messages["connection"].dtype
               for chunk in chunks if len(chunk))


@pytest.mark.parametrize("workers", [1, 2])
@pytest.mark.parametrize("path", CAPTURES, ids=lambda p: Path(p).name)
def test_tables_of_parts_read_as_slices_equal_the_whole_ones(path, workers, tmp_path,
                                                             monkeypatch) -> None:
    """Every part forced through the sliced path: its packet table written a chunk at a time
    by the worker as its slices come, then copied into the spill; the same files."""
    monkeypatch.setattr(part_tables, "ROWS_PER_CHUNK", 50)
    monkeypatch.setattr(parts, "SLICED_PART_PACKETS", 0)
    _assert_same_csv(path, workers, tmp_path)
