"""A result sent from a worker process to the parent (`for_another_process`, then pickle): what
arrives writes the same document, its connection table is intact, and its empty tables are one
shared frame per kind, with the columns of the real tables (compared against the tables a
capture analysed whole keeps, not against the templates themselves)."""

from __future__ import annotations

import io
import pickle

import numpy as np
import pandas as pd
import pytest

from nagledetect.analysis import analyze_capture, analyze_together, for_another_process
from nagledetect.report.document import build_document, write_json
from nagledetect.sent_tables import ColumnReader, joined_rows, rows_table
from nagledetect.table import Table
from tests.conftest import SAMPLE_TRACES, assert_same_table, corpus_file

SEED003 = str(SAMPLE_TRACES / "seed003-nagle.pcap")


def _no_tcp() -> str:
    """A capture without TCP (skips the test where the corpora are absent)."""
    return str(corpus_file("zeek/arp-who-has-radiotap.pcap"))


def _document(analysis) -> bytes:
    out = io.BytesIO()
    write_json(build_document([analysis]), out)
    return out.getvalue()


def _sent_and_received(analysis):
    return pickle.loads(pickle.dumps(for_another_process(analysis, False)))


@pytest.mark.parametrize("capture", ["seed003", "without TCP"])
def test_a_received_result_writes_the_document_of_the_result_sent(capture) -> None:
    path = SEED003 if capture == "seed003" else _no_tcp()
    analysis = analyze_capture(path, charts=False)
    received = _sent_and_received(analysis)
    assert _document(received) == _document(for_another_process(analysis, False))
    assert_same_table(received.capture.connections, analysis.capture.connections)
    assert received.capture.accounting == analysis.capture.accounting


def test_empty_tables_arrive_as_one_shared_frame_of_the_real_tables_columns() -> None:
    """seed003 analysed whole keeps its packet table (234 TCP packets, `tcpdump -r FILE tcp |
    wc -l`): the empty tables received in its place have the same columns, and two received
    results (the other from a batch) share each of them."""
    whole = analyze_capture(SEED003, keep_tables=True)
    assert len(whole.capture.packets) == 234 and len(whole.delack_samples) > 0
    first = _sent_and_received(whole)
    second = _sent_and_received(analyze_together([str(SAMPLE_TRACES / "mixed.pcap"), SEED003])[0])
    for received in (first, second):
        assert received.capture.packets.empty and received.delack_samples.empty
        assert list(received.capture.packets.columns) == list(whole.capture.packets.columns)
        assert list(received.capture.sack_blocks.columns) == list(
            whole.capture.sack_blocks.columns)
    assert first.capture.packets is second.capture.packets
    assert first.capture.sack_blocks is second.capture.sack_blocks
    assert first.delack_samples is second.delack_samples
    assert first.segments is second.segments and first.messages is second.messages
    assert not first.tables_kept and not second.tables_kept


def test_captures_without_tcp_in_a_batch_hold_their_own_path_accounting_and_lists() -> None:
    """Two captures without TCP share the analysis made once for such captures, but not its
    path, its accounting (arp-who-has-radiotap: 2 packets, link type 127, 802.11 radiotap,
    in `capinfos`) nor the lists a later step could add to."""
    first, second = analyze_together([_no_tcp(), str(corpus_file("zeek/arp-who-has.pcap"))])
    assert first.capture.path == _no_tcp() and second.capture.path.endswith("arp-who-has.pcap")
    assert (first.capture.accounting.packets_read, first.capture.accounting.linktype) == (2, 127)
    assert first.capture.accounting.tcp_packets == 0
    assert first.capture.accounting is not second.capture.accounting
    assert first.findings == [] and first.findings is not second.findings
    assert first.hosts == {} and first.hosts is not second.hosts


def test_a_groups_connection_tables_travel_as_one_table_cut_again() -> None:
    """Captures analysed together, sent in one message (as a worker sends its group): each
    connection table arrives equal to the one sent (mixed.pcap 6 connections, seed003 1, in
    tshark's `-z conv,tcp`), cut from one table that travelled once; one sent alone arrives
    equal too."""
    paths = [str(SAMPLE_TRACES / name) for name in ("mixed.pcap", "seed003-nagle.pcap")]
    sent = [for_another_process(analysis, False) for analysis in analyze_together(paths)]
    received = pickle.loads(pickle.dumps(sent))
    assert [len(r.capture.connections) for r in received] == [6, 1]
    for before, after in zip(sent, received):
        assert_same_table(rows_table(after.capture.connections),
                                      rows_table(before.capture.connections))
        assert _document(after) == _document(before)
    tables = [r.capture.connections.table for r in received]
    assert tables[0] is tables[1] and len(tables[0]) == 7
    frames = [_root(ColumnReader()(r.capture.connections, "first_frame")) for r in received]
    assert frames[0] is frames[1] and frames[0].shape[-1] == 7
    alone = pickle.loads(pickle.dumps(sent[1]))
    assert_same_table(rows_table(alone.capture.connections),
                                  rows_table(sent[1].capture.connections))


def _root(values: np.ndarray) -> np.ndarray:
    """The array whose memory `values` views (itself when it owns its memory)."""
    while isinstance(values.base, np.ndarray):
        values = values.base
    return values


def test_received_rows_of_groups_join_as_their_frames_would() -> None:
    """The connection rows of two groups of captures (mixed.pcap 6 connections, seed003 1,
    classic-phase-lock 4, in tshark's `-z conv,tcp`), as they arrive from the workers that
    analysed each group, join into the frame that joining each capture's own frame gives:
    consecutive rows of one group's table in one cut of it (no copy), the groups and a frame
    made in this process after them joined; an untyped empty frame among them is not joined
    (its columns would change the others' dtypes)."""
    names = ("mixed.pcap", "seed003-nagle.pcap", "classic-phase-lock.pcap")
    groups = [[str(SAMPLE_TRACES / name) for name in names[:2]],
              [str(SAMPLE_TRACES / name) for name in names[1:]]]
    received = [pickle.loads(pickle.dumps([for_another_process(analysis, False)
                                           for analysis in analyze_together(group)]))
                for group in groups]
    rows = [analysis.capture.connections for group in received for analysis in group]
    assert [len(piece) for piece in rows] == [6, 1, 1, 4]
    local = analyze_capture(SEED003).capture.connections
    expected = pd.concat([*(rows_table(piece).to_pandas() for piece in rows), local.to_pandas()],
                         ignore_index=True)
    assert_same_table(joined_rows([*rows, local]), expected)
    first_group = joined_rows(rows[:2])
    assert len(first_group) == 7
    assert np.shares_memory(first_group["first_frame"], rows[0].table["first_frame"])
    assert joined_rows([rows[0], Table({"id": []})]) is None


def test_a_result_sent_on_holds_none_of_the_cores_events() -> None:
    """The core's events (gaps, messages, bursts, stall candidates...) are read by the
    detectors and let go: a whole capture's result, pickled for the parent process, is its
    connections, findings and hosts. On classic-2n-blocks-100000.pcap (264 KB of capture) it
    pickles to about 10 KB; its events alone pickle to 27 KB (`read_capture`'s
    `found_events`, measured), so a result that kept them would not fit the bound."""
    path = str(SAMPLE_TRACES / "classic-2n-blocks-100000.pcap")
    analysis = analyze_capture(path, charts=False)
    assert analysis.capture.found_events is None
    assert len(pickle.dumps(for_another_process(analysis, False))) < 20_000
