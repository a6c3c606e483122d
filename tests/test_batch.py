"""Small captures analysed together give each capture exactly the document of a run over it
alone: checked byte for byte against `analyze_capture` on the real captures themselves (the
sample traces from the lab's Linux stacks, and corpus files of other link types, without a
handshake, without TCP), so the expected bytes are not the batch's own output."""

from __future__ import annotations

import io
import pickle
import subprocess

import pytest

from nagledetect import batch, cli
from nagledetect.analysis import Wanted, analyze_capture, analyze_together, for_another_process
from nagledetect.batch import groups_by_size
from nagledetect.errors import InputError
from nagledetect.report.document import build_document, write_json
from nagledetect.sent_tables import ColumnReader, TableRows, rows_table
from tests.conftest import SAMPLE_TRACES, assert_same_table, corpus_file, require_tool

SAMPLES = [str(path) for path in sorted(SAMPLE_TRACES.glob("*.pcap"))]


def _document(analysis) -> bytes:
    out = io.BytesIO()
    write_json(build_document([for_another_process(analysis, False)]), out)
    return out.getvalue()


def _alone(path: str, bpf_filter: str | None = None) -> bytes:
    return _document(analyze_capture(path, bpf_filter, charts=False))


def test_every_sample_trace_analysed_together_is_as_analysed_alone() -> None:
    together = analyze_together(SAMPLES)
    assert len(together) == len(SAMPLES)
    for path, analysis in zip(SAMPLES, together):
        assert _document(analysis) == _alone(path), path


def test_the_same_capture_twice_in_a_batch_stays_two_captures() -> None:
    """Both copies have the same 4-tuples, frames and times: were their pairs not kept apart by
    the capture, each connection would hold both copies' packets (seed003: one connection of
    234 packets, `tcpdump -r FILE tcp | wc -l`)."""
    path = str(SAMPLE_TRACES / "seed003-nagle.pcap")
    first, second = analyze_together([path, path])
    for analysis in (first, second):
        assert _document(analysis) == _alone(path)
        connections = rows_table(analysis.capture.connections)
        assert len(connections) == 1
        assert int(connections["packets_client_to_server"].sum()
                   + connections["packets_server_to_client"].sum()) == 234


def test_frames_and_connection_ids_are_each_captures_own() -> None:
    """seed003 after mixed.pcap in a batch: its stalls are still at frames 40 -> 41 -> 42
    (checked in tshark: 2 bytes at 0.274946 s, the pure ACK at 0.315996 s, 28 bytes at
    0.316018 s) and its connection is still id 0, first seen at frame 5 (its SYN, after four
    packets that are not TCP, in tshark)."""
    mixed, seed003 = analyze_together([str(SAMPLE_TRACES / "mixed.pcap"),
                                       str(SAMPLE_TRACES / "seed003-nagle.pcap")])
    assert len(mixed.capture.connections) > 1
    stall = next(f for f in seed003.findings if f.kind == "nagle-delack-stall")
    assert stall.connection == 0
    first = stall.events.records()[0]
    assert (first["last_data_frame"], first["delayed_ack_frame"], first["released_frame"]) == (
        40, 41, 42)
    assert ColumnReader()(seed003.capture.connections, "first_frame").tolist() == [5]


def test_errors_and_captures_without_tcp_keep_their_place(tmp_path) -> None:
    empty = tmp_path / "empty.pcap"
    empty.write_bytes(b"")
    no_tcp = str(corpus_file("zeek/arp-who-has-radiotap.pcap"))
    paths = [SAMPLES[0], str(empty), no_tcp, SAMPLES[1]]
    results = analyze_together(paths)
    assert isinstance(results[1], InputError) and "empty file" in str(results[1])
    with pytest.raises(InputError) as alone:
        analyze_capture(str(empty))
    assert str(results[1]) == str(alone.value)
    for index in (0, 2, 3):
        assert _document(results[index]) == _alone(paths[index]), paths[index]


def test_other_link_types_and_captures_without_a_handshake() -> None:
    paths = [str(corpus_file(name)) for name in (
        "tcpdump/beep-oobr.pcap", "tcpdump/bgp-4byte-asn.pcap", "zeek/ssh__ssh.pcap",
        "zeek/redis__pipeline-with-commands.pcap", "zeek/nflog-http.pcap")]
    for path, analysis in zip(paths, analyze_together(paths)):
        assert _document(analysis) == _alone(path), path


def test_a_filter_applies_to_each_capture_of_a_batch() -> None:
    paths = SAMPLES[:6]
    for path, analysis in zip(paths, analyze_together(paths, "tcp port 9000")):
        assert _document(analysis) == _alone(path, "tcp port 9000"), path


def _drawn(charts) -> bytes:
    """What the HTML report draws, pickled field by field (`ChartData` has no equality)."""
    return pickle.dumps((vars(charts.exchange_ms), vars(charts.stall_ms),
                         vars(charts.payload_bytes), charts.worst, vars(charts.hosts)))


def test_charts_of_captures_analysed_together_are_as_drawn_alone() -> None:
    """Each capture's charts, from its own packets, messages, stalls and hosts cut out of the
    batch's. seed003, after three other captures, still draws its one connection with the 39
    segments its delayed ACKs released (its 39 stalls, frames 40 -> 41 -> 42 the first, checked
    in tshark) and its receiver's delays."""
    paths = [*SAMPLES, str(corpus_file("zeek/arp-who-has-radiotap.pcap")),
             str(corpus_file("tcpdump/bgp-4byte-asn.pcap")), str(corpus_file("zeek/ssh__ssh.pcap"))]
    together = analyze_together(paths, None, Wanted(charts=True))
    for path, analysis in zip(paths, together):
        assert _drawn(analysis.charts) == _drawn(analyze_capture(path, charts=True).charts), path
    seed003 = together[paths.index(str(SAMPLE_TRACES / "seed003-nagle.pcap"))].charts
    assert paths.index(str(SAMPLE_TRACES / "seed003-nagle.pcap")) >= 3
    [worst] = seed003.worst
    assert worst.connection == 0 and worst.released.total == 39
    assert worst.released.frame[0] == 42
    assert len(seed003.hosts.delays) == 1


def _tables(analysis) -> tuple[list, list]:
    sent = for_another_process(analysis, True).part_tables
    return list(sent.packets()), list(sent.messages())


def test_tables_of_captures_analysed_together_are_as_kept_alone() -> None:
    """Each capture's packet and message tables (`--tables`), cut out of the batch's with their
    connection ids, frames and message numbers given back, equal a run over it alone, dtypes
    and all. trap-keepalive sends no data (its 14 TCP packets all carry 0 bytes, in tcpdump),
    so it has no messages although the others of its batch have: its empty table must be the
    one a run alone makes. seed003's packet table holds its 234 TCP packets."""
    paths = [str(SAMPLE_TRACES / name) for name in (
        "mixed.pcap", "trap-keepalive.pcap", "seed003-nagle.pcap")]
    paths.append(str(corpus_file("zeek/arp-who-has-radiotap.pcap")))
    together = analyze_together(paths, None, Wanted(tables=True))
    for path, analysis in zip(paths, together):
        packets, messages = _tables(analysis)
        alone_packets, alone_messages = _tables(analyze_capture(path, keep_tables=True))
        for got, expected in zip(packets + messages, alone_packets + alone_messages, strict=True):
            assert_same_table(got, expected, check_exact=True)
    keepalive_packets, keepalive_messages = _tables(together[1])
    assert len(keepalive_packets[0]) == 14 and keepalive_messages[0].empty
    assert len(_tables(together[2])[0][0]) == 234
    assert _tables(together[2])[1][0]["message"][0] == 0


@pytest.mark.parametrize(("sizes", "workers", "groups"), [
    ([1000] * 4, 1, [[0, 1], [2, 3]]),
    ([1000] * 8, 2, [[0, 1], [2, 3], [4, 5], [6, 7]]),
    ([1000, 5_000_000, 1000, 1000], 1, [[0], [1], [2], [3]]),
    ([1000, 1000, 5_000_000, 1000, 1000, 1000, 1000], 1, [[0, 1], [2], [3, 4, 5], [6]]),
    ([3_000_000] * 12, 1, [[0, 1, 2, 3, 4], [5, 6, 7, 8, 9], [10, 11]]),
    ([10] * 6 + [1_000_000], 1, [[0, 1, 2, 3], [4, 5], [6]]),
])
def test_small_captures_are_grouped_up_to_a_share_of_the_work(sizes, workers, groups) -> None:
    """Up to BATCH_BYTES (16 MB) a group, or half of the small captures' bytes and of their
    number over the workers (two groups each); a capture over BATCHED_CAPTURE_BYTES (4 MB)
    alone."""
    assert groups_by_size(sizes, workers) == groups


def _run_document(analyses) -> bytes:
    out = io.BytesIO()
    write_json(build_document(analyses), out)
    return out.getvalue()


def test_a_run_over_many_captures_is_the_same_with_and_without_batches(monkeypatch) -> None:
    captures = tuple(SAMPLES)
    batched = _run_document(cli._analyze_one_by_one(captures, None, cli.Wanted()))
    monkeypatch.setattr(batch, "BATCHED_CAPTURE_BYTES", -1)
    assert groups_by_size([1000, 1000], 1) == [[0], [1]]
    alone = _run_document(cli._analyze_one_by_one(captures, None, cli.Wanted()))
    assert batched == alone


def test_a_batch_that_fails_is_analysed_capture_by_capture(monkeypatch) -> None:
    """Whatever goes wrong analysing captures together (here a failure made on purpose), each
    is then analysed alone: the run's results do not change."""
    def failing(paths, bpf_filter, wanted):
        raise RuntimeError("made to fail")

    expected = cli._analyze_one_by_one(tuple(SAMPLES[:4]), None, cli.Wanted())
    monkeypatch.setattr(cli, "analyze_together", failing)
    again = cli._analyze_one_by_one(tuple(SAMPLES[:4]), None, cli.Wanted())
    assert [_document(a) for a in again] == [_document(a) for a in expected]


def _tshark_streams(path: str) -> set[str]:
    """The tcp.stream ids tshark gives a capture's packets (its connections, counted by hand)."""
    shown = subprocess.run([require_tool("tshark"), "-r", path, "-T", "fields", "-e", "tcp.stream"],
                           capture_output=True, text=True, check=True).stdout
    return {line for line in shown.split() if line}


def test_connections_taken_by_id_are_the_entries_read_in_order() -> None:
    """The reports make only the connections their tables show (`ConnectionEntries.take`), a
    table at a time: here the sample traces analysed together (their rows share one table),
    one of them alone (a frame of its own) and a capture in parts, picked scattered, in runs
    and at the ends. The reference is the document's entries read in order, which the JSON
    output is checked against elsewhere."""
    together = [for_another_process(analysis, False) for analysis in analyze_together(SAMPLES)]
    alone = analyze_capture(SAMPLES[0], charts=False)
    seed003 = str(SAMPLE_TRACES / "seed003-nagle.pcap")
    in_parts = analyze_capture(seed003, part_bytes=(SAMPLE_TRACES / "seed003-nagle.pcap"
                                                     ).stat().st_size // 5 + 1, charts=False)
    connections = build_document([*together, alone, in_parts])["connections"]
    every = list(connections)
    assert all(isinstance(analysis.capture.connections, TableRows) for analysis in together)
    streams = sum(len(_tshark_streams(path)) for path in SAMPLES)
    assert len(every) == streams + 1 + 1  # every sample trace's tcp.stream ids, then 1 and 1
    picks = sorted({0, 1, 2, 7, 8, 9, 17, 29, 33, 34, *range(3, len(every), 5)})
    assert connections.take(picks) == [every[position] for position in picks]
    # ids are each capture's own (Wireshark's tcp.stream): (capture, id) finds the position
    assert [connections.position(entry["capture"], entry["id"])
            for entry in connections.take(picks)] == picks
