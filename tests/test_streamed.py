"""A capture too large to analyse whole is analysed in one pass a batch of finished connections
at a time (`streamed`), and its document is the whole analysis's, byte for byte; where its
live connections would hold more packets than the memory allows (the events they keep are not
counted), the pass stops and the capture is analysed in parts, with the same document again.

The captures are real traffic replicated (`benchmarks/make_large_capture.py`): the sample
traces one copy after another with new addresses (89,637 packets over 514 s, capinfos), and
seed003's exchange repeated end to end in one connection of 400,000 packets (35 MB, more
than a part: a capture of one part is analysed whole).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from nagledetect.analysis import analyze_capture
from nagledetect.flows.compiled import CompiledBatches
from nagledetect.part_sizes import BYTES_PER_EVENT_ROW, BYTES_PER_LIVE_PACKET
from nagledetect.pipeline import Wanted
from nagledetect.report.document import build_document
from nagledetect.stored import SpillFile
from nagledetect.streamed import analyze_in_batches
from tests.conftest import PROJECT, SAMPLE_TRACES, modules_a_run_imports, require_tool

MEMORY_BYTES = 16_000_000
"""Batches of 8,000 event rows, and up to 40,000 live packets."""


def _replica(target: Path, *arguments: str) -> Path:
    subprocess.run([sys.executable, str(PROJECT / "benchmarks" / "make_large_capture.py"),
                    *arguments, str(target)], check=True, capture_output=True)
    return target


@pytest.fixture(scope="module")
def copies(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("streamed")
    return _replica(folder / "copies.pcap", str(SAMPLE_TRACES), "--packets", "60000")


def _text(document: dict) -> str:
    return json.dumps(document, sort_keys=True, default=list)


def test_a_capture_in_batches_of_connections_has_the_whole_document(copies: Path) -> None:
    batches = CompiledBatches(str(copies), None, MEMORY_BYTES // 2 // BYTES_PER_EVENT_ROW,
                              MEMORY_BYTES // 2 // BYTES_PER_LIVE_PACKET)
    connections = [len(flows.connections) for flows in batches]
    assert not batches.over_budget
    assert len(connections) == 4 and sum(connections) == 136  # tshark: 136 tcp.stream ids
    whole = analyze_capture(str(copies), charts=False)
    batched = analyze_in_batches(str(copies), None, MEMORY_BYTES)
    assert batched is not None and batched.findings
    assert _text(build_document([batched])) == _text(build_document([whole]))


def test_the_reports_charts_in_batches_are_the_whole_analysiss(copies: Path) -> None:
    """The HTML report's charts gathered a batch at a time, from the packets the core gives of
    each batch's connections, are those of the capture analysed whole: the page is the same,
    byte for byte, and it draws the time-sequence graphs of the worst connections and the
    payload sizes of every packet with a payload (tshark -Y 'tcp.len > 0' counts 45,082)."""
    from nagledetect.report.html import render_html

    whole = analyze_capture(str(copies))
    batched = analyze_in_batches(str(copies), None, MEMORY_BYTES, wanted=Wanted(charts=True))
    assert batched is not None and batched.charts is not None and whole.charts is not None
    assert batched.charts.worst and batched.charts.payload_bytes.total == 45_082
    assert render_html(build_document([batched]), [batched]) == render_html(
        build_document([whole]), [whole])


def test_tables_in_batches_are_the_whole_analysiss(copies: Path, tmp_path: Path) -> None:
    """`--tables` of a capture analysed a batch at a time: each batch's rows of the packet and
    message tables, spilled and read back merged, are the tables of the capture analysed
    whole, file for file (61,392 packet rows: tshark -Y tcp counts 61,392 of the 61,394
    packets, the other 2 being IGMP reports)."""
    import csv

    from nagledetect.report.tables import write_tables

    whole = analyze_capture(str(copies), keep_tables=True)
    batched = analyze_in_batches(str(copies), None, MEMORY_BYTES,
                                 wanted=Wanted(tables=True, charts=False))
    assert batched is not None and batched.part_tables is not None
    written = {}
    for name, analysis in (("whole", whole), ("batched", batched)):
        (tmp_path / name).mkdir()
        written[name] = write_tables([analysis], tmp_path / name, "csv")
    assert [path.name for path in written["batched"]] == [
        "packets.csv", "connections.csv", "messages.csv", "findings.csv"]
    for ours, theirs in zip(written["batched"], written["whole"]):
        assert ours.read_bytes() == theirs.read_bytes(), ours.name
    with open(written["batched"][0]) as packets:
        assert sum(1 for _ in csv.reader(packets)) == 61_392 + 1


def test_a_filtered_capture_in_batches_keeps_wiresharks_stream_ids(copies: Path) -> None:
    """Under a filter the connections keep the unfiltered capture's tcp.stream ids, and the
    batches give them as the whole pass does."""
    bpf_filter = "tcp[tcpflags] & tcp-syn == 0"
    whole = analyze_capture(str(copies), bpf_filter, charts=False)
    batched = analyze_in_batches(str(copies), bpf_filter, MEMORY_BYTES)
    assert batched is not None
    assert _text(build_document([batched])) == _text(build_document([whole]))


def test_a_connections_events_do_not_stop_the_pass_but_packets_the_charts_read_do(
        tmp_path: Path) -> None:
    """One connection of 400,000 packets whose every exchange stalls keeps its events to its
    end: 136,834 gaps of 10 ms or more alone (tshark -Y 'frame.time_delta >= 0.01', every
    packet the connection's), more than the 40,000 live packets allowed. They are its findings'
    evidence, kept whichever way the capture is read, so the pass goes on, its packets let go
    as it goes, and the document is the whole analysis's. The report's charts read every
    packet of a connection as it ends, so with them the pass gives up and `analyze_capture`
    analyses the capture in parts, with the same document."""
    huge = _replica(tmp_path / "huge.pcap", str(SAMPLE_TRACES / "seed003-nagle.pcap"),
                    "--packets", "400000", "--connections", "1")
    batches = CompiledBatches(str(huge), None, MEMORY_BYTES // 2 // BYTES_PER_EVENT_ROW,
                              MEMORY_BYTES // 2 // BYTES_PER_LIVE_PACKET)
    assert [len(flows.found_events.gap_rows["connection"]) for flows in batches] == [136_834]
    assert not batches.over_budget
    whole = analyze_capture(str(huge), charts=False)
    batched = analyze_in_batches(str(huge), None, MEMORY_BYTES)
    assert batched is not None and not batched.tables_kept and whole.tables_kept
    assert _text(build_document([batched])) == _text(build_document([whole]))
    assert analyze_in_batches(str(huge), None, MEMORY_BYTES, wanted=Wanted(charts=True)) is None
    fallen_back = analyze_capture(str(huge), parts_memory_bytes=MEMORY_BYTES)
    assert _text(build_document([fallen_back])) == _text(build_document([whole]))


def test_a_pass_that_gives_up_lets_go_of_what_it_spilled(copies: Path, tmp_path: Path) -> None:
    """The copies, then one connection of 400,000 packets (`mergecap -a`): the pass hands over
    batches of the copies' connections, spilled (with their tables), before the huge one,
    whose packets the charts read (so none is let go), outgrows the live packets allowed;
    giving up, it cuts the spill back to what it held before (a run's spill is shared by its
    captures)."""
    huge = _replica(tmp_path / "huge.pcap", str(SAMPLE_TRACES / "seed003-nagle.pcap"),
                    "--packets", "400000", "--connections", "1")
    joined = tmp_path / "joined.pcap"
    subprocess.run(["mergecap", "-a", "-F", "pcap", "-w", str(joined), str(copies), str(huge)],
                   check=True)
    batches = CompiledBatches(str(joined), None, MEMORY_BYTES // 2 // BYTES_PER_EVENT_ROW,
                              MEMORY_BYTES // 2 // BYTES_PER_LIVE_PACKET, chart_packets=True)
    assert sum(1 for _ in batches) >= 2 and batches.over_budget
    spill = SpillFile()
    earlier = b"a finding of an earlier capture"
    spill.append([earlier])
    assert analyze_in_batches(str(joined), None, MEMORY_BYTES, spill=spill,
                              wanted=Wanted(tables=True, charts=True)) is None
    assert spill.size == len(earlier) and spill.read(0, len(earlier)) == earlier


def test_a_capture_whose_filter_keeps_no_tcp_has_its_report_in_batches(copies: Path) -> None:
    """Under a filter no packet passes (tshark -Y 'tcp.port == 1' finds none in the copies),
    the batches hand over no connection; the report still has its (empty) charts and a page,
    as the whole analysis has."""
    from nagledetect.report.html import render_html

    batched = analyze_in_batches(str(copies), "tcp port 1", MEMORY_BYTES,
                                 wanted=Wanted(charts=True))
    whole = analyze_capture(str(copies), "tcp port 1")
    assert batched is not None and batched.charts is not None
    assert not batched.findings and not len(batched.capture.connections)
    assert render_html(build_document([batched]), [batched]) == render_html(
        build_document([whole]), [whole])


def test_batches_give_each_packet_its_sack_blocks(copies: Path) -> None:
    """With the packet table kept, each batch takes its connections' rows out of the pass's
    table with their SACK blocks: over all batches, the packets and the blocks are the whole
    pass's (the copies carry 12 SACK blocks: tshark -Y tcp.options.sack_le lists 12 packets,
    one block each)."""
    import numpy as np

    from nagledetect.flows.compiled import compiled_flows

    whole, _ = compiled_flows(str(copies))
    batches = CompiledBatches(str(copies), None, MEMORY_BYTES // 2 // BYTES_PER_EVENT_ROW,
                              MEMORY_BYTES // 2 // BYTES_PER_LIVE_PACKET, packet_table=True)
    taken = list(batches)
    assert len(taken) > 1  # 5: the packet rows count towards a batch's rows, an eighth each
    frames = np.concatenate([flows.packets["frame"] for flows in taken])
    blocks = {name: np.concatenate([flows.sack_blocks[name] for flows in taken])
              for name in ("frame", "left_raw", "right_raw")}
    assert sorted(frames.tolist()) == whole.packets["frame"].tolist()
    assert len(blocks["frame"]) == 12
    order = np.argsort(blocks["frame"], kind="stable")
    for name, values in blocks.items():
        assert values[order].tolist() == whole.sack_blocks[name].tolist()
    for flows in taken:  # a batch's blocks are its own packets'
        assert np.isin(flows.sack_blocks["frame"], flows.packets["frame"]).all()


@pytest.fixture(scope="module")
def long_bulk(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """trap-bulk.pcap's transfer repeated in one connection of 200,000 packets (27 MB), its
    handshake once at the start."""
    folder = tmp_path_factory.mktemp("long")
    return _replica(folder / "bulk200k.pcap", str(SAMPLE_TRACES / "trap-bulk.pcap"),
                    "--packets", "200000", "--connections", "1")


def test_one_long_connection_is_analysed_in_batches_as_it_goes(long_bulk: Path) -> None:
    """The one connection of 200,000 packets, five times the 40,000 live packets allowed, lets
    its packets go as it goes: the pass does not give up for parts, and the document is the
    whole analysis's."""
    batched = analyze_in_batches(str(long_bulk), None, MEMORY_BYTES)
    assert batched is not None
    document = build_document([batched])
    assert len(document["connections"]) == 1
    assert _text(document) == _text(build_document([analyze_capture(str(long_bulk),
                                                                    charts=False)]))


def test_a_large_capture_in_batches_imports_neither_pandas_nor_plotly(long_bulk: Path) -> None:
    """The JSON of a capture read a batch at a time (`--memory 16M`) is made without pandas or
    plotly (nor the parts' machinery, which needs pandas)."""
    imported, printed = modules_a_run_imports(
        ["--format", "json", "--memory", "16M", str(long_bulk)],
        ("pandas", "plotly", "nagledetect.parts"))
    assert imported == []
    assert json.loads(printed)["headline"]["text"].startswith("No Nagle stalls")


def test_a_long_connection_seen_without_its_handshake_is_analysed_in_batches(
        long_bulk: Path, tmp_path: Path) -> None:
    """Begun after the handshake (editcap drops the SYN, SYN/ACK and ACK), the connection
    cannot let its packets go until a first pass has learnt what it is finished with: the
    pass gives up, runs again after that first pass, and the document is the whole
    analysis's (no parts)."""
    cut = tmp_path / "mid-connection.pcap"
    subprocess.run([require_tool("editcap"), str(long_bulk), str(cut), "1-3"], check=True)
    batched = analyze_in_batches(str(cut), None, MEMORY_BYTES)
    assert batched is not None
    whole = analyze_capture(str(cut), charts=False)
    assert _text(build_document([batched])) == _text(build_document([whole]))
