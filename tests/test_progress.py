"""The progress line: shown on a terminal for long runs (the read, then the parts, the host
step and the captures of a parallel run), never on a pipe, and drawn by one process only."""

from __future__ import annotations

import io
import os
import re
import subprocess
import sys

import pytest

from nagledetect.analysis import Analysis, Wanted, analyze_capture
from nagledetect.api import load_capture, load_capture_numpy
from nagledetect.cli import _analyze_in_processes
from nagledetect.progress import ProgressLine
from nagledetect.streamed import READ_AGAIN_STAGE
from tests.conftest import PROJECT, SAMPLE_TRACES, require_tool


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.fixture
def draw_at_once(monkeypatch) -> None:
    """Draw from the first call and at every call (a short run is otherwise silent)."""
    monkeypatch.setattr("nagledetect.progress.QUIET_BELOW_S", 0.0)
    monkeypatch.setattr("nagledetect.progress.MIN_INTERVAL_S", 0.0)


def _lines(text: str) -> list[str]:
    return [line.strip() for line in text.split("\r") if line.strip()]


def test_progress_reports_packets_and_clears_itself(draw_at_once) -> None:
    path = str(SAMPLE_TRACES / "mixed.pcap")
    terminal = _Terminal()
    progress = ProgressLine(path, terminal)
    capture = load_capture(path, progress=progress)
    progress.done()
    text = terminal.getvalue()
    assert f"{capture.accounting.packets_read:,} packets" in text and "ETA" in text
    assert text.endswith("\r")


def test_progress_is_silent_off_a_terminal_and_when_quiet(draw_at_once) -> None:
    pipe, terminal = io.StringIO(), _Terminal()
    for progress in (ProgressLine(str(SAMPLE_TRACES / "mixed.pcap"), pipe),
                     ProgressLine(str(SAMPLE_TRACES / "mixed.pcap"), terminal, quiet=True)):
        progress(10, 1000)
        progress.stage("parts analysed", 1, 2)
        progress.done()
    assert pipe.getvalue() == "" and terminal.getvalue() == ""


def test_a_capture_in_parts_shows_its_parts_and_host_step(draw_at_once) -> None:
    """After the read, the line counts the packets of the parts analysed up to all of them
    (each part's as it is done), then the host step's buckets (mixed.pcap forced into 8 parts:
    its 8 connections spread over them; its 1,254 TCP packets, counted by `tcpdump -n -r FILE
    tcp | wc -l` and by `tshark -Y tcp`)."""
    path = str(SAMPLE_TRACES / "mixed.pcap")
    terminal = _Terminal()
    progress = ProgressLine(path, terminal)
    analyze_capture(path, progress=progress, part_bytes=os.path.getsize(path) // 8 + 1,
                    stages=progress.stage)
    progress.done()
    lines = _lines(terminal.getvalue())
    parts = [tuple(int(number.replace(",", "")) for number in found.groups())
             for line in lines
             if (found := re.search(r"packets analysed ([\d,]+) of ([\d,]+)", line))]
    assert parts[0] == (0, 1_254) and parts[-1] == (1_254, 1_254)
    done = [count for count, _ in parts]
    assert done == sorted(done) and len(set(done)) >= 3
    assert any("host buckets fingerprinted" in line for line in lines)
    assert lines.index(next(line for line in lines if "packets," in line)) < lines.index(
        next(line for line in lines if "packets analysed" in line))


def test_a_parallel_run_counts_captures_in_one_line(draw_at_once, monkeypatch) -> None:
    """With several captures in worker processes, this process draws the only line: how many
    captures are done (the workers are quiet, which the test above checks)."""
    terminal = _Terminal()
    monkeypatch.setattr(sys, "stderr", terminal)
    paths = tuple(str(SAMPLE_TRACES / name) for name in
                  ("mixed.pcap", "trap-rpc.pcap", "seed003-nagle.pcap"))
    analyses = _analyze_in_processes(paths, None, Wanted(), 2)
    assert [analysis.capture.path for analysis in analyses] == list(paths)
    lines = _lines(terminal.getvalue())
    done = [int(re.fullmatch(r"3 captures: analysed (\d) of 3(, ETA \d+ s)?", line).group(1))
            for line in lines]
    assert done[0] == 0 and done[-1] == 3 and done == sorted(done)
    assert all(("ETA" in line) == (count > 0) for line, count in zip(lines, done))


def test_a_compressed_capture_is_read_to_its_decompressed_size(draw_at_once, tmp_path,
                                                                monkeypatch) -> None:
    """trap-bulk.pcap (640 KB) compressed with gzip and read a batch of 500 packets at a time
    (as the parts read it; the core decompresses as it reads): the line follows the bytes
    decompressed against the capture's decompressed size (gzip's trailer), to 100 %."""
    import gzip

    from nagledetect.read import capture

    monkeypatch.setattr(capture, "BATCH_PACKETS", 500)
    plain = SAMPLE_TRACES / "trap-bulk.pcap"
    path = tmp_path / "bulk.pcap.gz"
    path.write_bytes(gzip.compress(plain.read_bytes(), compresslevel=1))
    terminal = _Terminal()
    progress = ProgressLine(str(path), terminal)
    loaded = load_capture_numpy(str(path), progress=progress)
    progress.done()
    lines = _lines(terminal.getvalue())
    shares = [int(line.split("%")[0].rsplit(", ", 1)[1]) for line in lines if "%" in line]
    assert len(shares) > 2 and shares == sorted(shares) and shares[-1] == 100
    assert progress.total_bytes == plain.stat().st_size
    assert f"{loaded.accounting.packets_read:,} packets" in lines[-1]


def _one_connection_read_by_slices(monkeypatch, tmp_path, charts: bool
                                   ) -> tuple[Analysis, list[int]]:
    """300,000 packets of seed003's exchange in one connection (`make_large_capture.py
    --connections 1`, all TCP), one part read in blocks of the 65,536 packets a batch holds,
    so 5 slices a pass: the analysis, and the packets analysed as the line showed them."""
    from nagledetect import parts

    path = tmp_path / "one.pcap"
    subprocess.run([sys.executable, str(PROJECT / "benchmarks" / "make_large_capture.py"),
                    str(SAMPLE_TRACES / "seed003-nagle.pcap"), str(path), "--packets",
                    "300000", "--connections", "1"], check=True, capture_output=True)
    monkeypatch.setattr(parts, "SLICED_PART_PACKETS", 0)
    monkeypatch.setattr(parts, "SLICE_PACKETS", 1)
    terminal = _Terminal()
    progress = ProgressLine(str(path), terminal)
    analysis = analyze_capture(str(path), progress=progress,
                               part_bytes=os.path.getsize(path) // 2, stages=progress.stage,
                               charts=charts)
    progress.done()
    done = [int(found.group(1).replace(",", "")) for line in _lines(terminal.getvalue())
            if (found := re.search(r"packets analysed ([\d,]+) of 300,000", line))]
    assert done[0] == 0 and done[-1] == 300_000 and done == sorted(done)
    return analysis, done


def test_a_huge_part_moves_the_line_on_slice_by_slice(draw_at_once, monkeypatch,
                                                     tmp_path) -> None:
    """A part read a slice at a time counts its packets as each of its two passes reads a
    slice, so the line moves on within it."""
    _, done = _one_connection_read_by_slices(monkeypatch, tmp_path, charts=False)
    assert len(set(done)) == 11


def test_a_huge_parts_third_pass_for_the_charts_moves_the_line_too(draw_at_once, monkeypatch,
                                                                   tmp_path) -> None:
    """With the charts (`report`), such a part reads the packets of the connections it draws
    a third time, and counts them as it goes: the line does not stand at its end meanwhile
    (its one connection is drawn: seed003's stalls)."""
    analysis, done = _one_connection_read_by_slices(monkeypatch, tmp_path, charts=True)
    assert analysis.charts.worst, "the connection's time-sequence graph is drawn"
    assert len(set(done)) == 16


def test_a_capture_read_twice_says_so(draw_at_once, tmp_path) -> None:
    """A bulk connection of 300,000 packets (41 MB: more than a part, so read a batch at a
    time) begun before the capture (trap-bulk.pcap replicated, editcap cutting its SYN,
    SYN/ACK and ACK off) outgrows the 40,000 live packets that 16 MB allows before its end is
    known: the line says the capture is read twice, then its read counts packets again, up
    to all 299,997 (the first read handed over no batch: it drew no line)."""
    whole = tmp_path / "bulk.pcap"
    subprocess.run([sys.executable, str(PROJECT / "benchmarks" / "make_large_capture.py"),
                    str(SAMPLE_TRACES / "trap-bulk.pcap"), str(whole), "--packets", "300000",
                    "--connections", "1"], check=True, capture_output=True)
    cut = tmp_path / "begun-before.pcap"
    subprocess.run([require_tool("editcap"), str(whole), str(cut), "1-3"], check=True)
    terminal = _Terminal()
    progress = ProgressLine(str(cut), terminal)
    analyze_capture(str(cut), progress=progress, stages=progress.stage, charts=False,
                    parts_memory_bytes=16_000_000)
    lines = _lines(terminal.getvalue())
    again = lines.index(f"{cut.name}: {READ_AGAIN_STAGE}")
    counted = [int(found.group(1).replace(",", "")) for line in lines[again:]
               if (found := re.search(r": ([\d,]+) packets", line))]
    assert counted[-1] == 299_997


def test_a_read_that_starts_again_counts_its_pace_from_then(draw_at_once, monkeypatch) -> None:
    """10 M packets in 10 s is 1.00 M packets/s; read again, 1 M packets 4 s after the read
    started again (fewer packets than last told) is 0.25 M packets/s, not 1 M in 14 s."""
    clock = [100.0]
    monkeypatch.setattr("nagledetect.progress.time.monotonic", lambda: clock[0])
    terminal = _Terminal()
    progress = ProgressLine(str(SAMPLE_TRACES / "mixed.pcap"), terminal)
    clock[0] += 10
    progress(10_000_000, 1)
    progress(0, 0)
    clock[0] += 4
    progress(1_000_000, 1)
    rates = re.findall(r"([\d.]+) M pkt/s", terminal.getvalue())
    assert rates == ["1.00", "0.00", "0.25"]
