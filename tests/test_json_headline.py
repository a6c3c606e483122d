"""The answer comes first, in the same words everywhere: the JSON document's headline is the
text report's first line and the HTML report's banner, and the Nagle family (delayed-ACK
stalls, one-round-trip holds, stream coalescing) is counted in it as in the connection tables.

Every expected value was checked by hand in tshark (`-T fields -e frame.number -e
frame.time_relative -e ip.src -e tcp.len`), as each test says.
"""

from __future__ import annotations

import html
import json
import subprocess
import sys
from pathlib import Path

from nagledetect.detectors import kinds
from nagledetect.report.headline import cause_words
from tests.conftest import SAMPLE_TRACES, corpus_file

STREAM = str(SAMPLE_TRACES / "classic-stream.pcap")


def _run(*arguments: str) -> str:
    return subprocess.run([sys.executable, "-m", "nagledetect", *arguments],
                          capture_output=True, text=True, check=True).stdout


def _reports(tmp_path: Path, *paths: str) -> tuple[dict, str, str]:
    """The JSON document, the text report and the HTML page of one run over `paths`."""
    page = tmp_path / "report.html"
    _run("report", "-j", "1", *paths, "-o", str(page))
    return (json.loads(_run("analyze", "-j", "1", "--format", "json", *paths)),
            _run("analyze", "-j", "1", *paths), page.read_text())


def test_stream_coalescing_is_the_headline_of_a_stream_nagle_held(tmp_path) -> None:
    """classic-stream.pcap: a one-way stream of 100-byte writes every 30 ms whose accumulated
    packets (400-700 bytes) each leave 30-40 us after the receiver's delayed ACK (frame 9 at
    0.177835 s, frame 10 with 400 bytes at 0.177879 s; frame 14, frame 15 with 700 bytes...).
    In tshark, the 22 data packets of 300 bytes or more that follow the peer's ACK come
    4.344628 s in all after the client's data before them. The headline said "No
    Nagle/delayed-ACK stalls found" over them; it names them now, as the banner and the
    connection table do, and the stream-coalescing finding leads the diagnosis."""
    document, text, page = _reports(tmp_path, STREAM)
    headline = document["headline"]
    assert headline["nagle_family"]["stalls"] == 22
    assert headline["nagle_family"]["time_lost_s"] == 4.344628
    assert headline["nagle_family"]["by_kind"][kinds.STREAM_COALESCING] == {
        "stalls": 22, "time_lost_s": 4.344628}
    assert headline["text"] == ("22 Nagle stream-coalescing stalls cost 4.345 s on 1 connection "
                                "direction (1 capture, 1 connection).")
    assert text.startswith(headline["text"] + "\n")
    assert f"<div class='verdict'>{html.escape(headline['text'], quote=True)} The worst: " in page
    assert document["findings"][0]["kind"] == kinds.STREAM_COALESCING
    assert " 1. Small-message stream coalescing (Nagle) on connection 0: 4.345 s lost" in text
    row = next(line for line in text.splitlines() if line.startswith("   0 10.77.0.1:34140"))
    assert row.split()[-2:] == ["22", "4.345"]
    assert "<td>22</td><td>4.345</td></tr>" in page


def test_without_nagle_stalls_the_headline_names_the_largest_delays(tmp_path) -> None:
    """zeek http__connect-with-smtp.pcap: no Nagle stall; the server's 69 bytes (frame 8,
    0.801935 s) are sent again at 3.539949 s (frame 9, a retransmission), the client's lost
    bytes follow (frame 11), and the server's next new data leaves at 3.977375 s (frame 13):
    3.175 s waiting for lost data, frames 8 to 13. The headline says so, with the frames, where
    it used to say only that no stall was found."""
    document, text, page = _reports(tmp_path, str(corpus_file("zeek/http__connect-with-smtp.pcap")))
    headline = document["headline"]
    assert headline["nagle_family"]["stalls"] == 0
    largest = headline["largest_other_delays"]
    assert [(delay["kind"], delay["connection"], delay["time_lost_s"], delay["frames"])
            for delay in largest] == [(kinds.LOSS_RECOVERY, 0, 3.17544, [8, 13])]
    assert headline["text"] == (
        f"No Nagle stalls (1 capture, 1 connection). Largest delays: {cause_words(largest[0])} "
        "3.175 s on connection 0, frames 8-13.")
    assert text.startswith(headline["text"] + "\n")
    assert f"<div class='verdict'>{html.escape(headline['text'], quote=True)}</div>" in page


def test_the_largest_delays_of_several_captures_name_their_files() -> None:
    """http__connect-with-smtp.pcap (above) and tcp__reassembly.pcap, whose sender's new data
    stops at frame 33 (0.970111 s) and resumes at frame 54 (3.249928 s) after eight
    retransmissions, then stops at frame 62 (3.629900 s) until frame 79 (9.239893 s) after
    seven more: 2.280 s + 5.610 s = 7.890 s, frames 33 to 79. The larger comes first, each
    named by its file (frame numbers are each file's own)."""
    smtp = str(corpus_file("zeek/http__connect-with-smtp.pcap"))
    reassembly = str(corpus_file("zeek/tcp__reassembly.pcap"))
    document = json.loads(_run("analyze", "-j", "1", "--format", "json", smtp, reassembly))
    largest = document["headline"]["largest_other_delays"]
    assert [(delay["capture"], delay["time_lost_s"], delay["frames"]) for delay in largest] == [
        (1, 7.88981, [33, 79]), (0, 3.17544, [8, 13])]
    named = [f"{cause_words(delay)} {seconds} on connection {delay['connection']} in {path}, "
             f"frames {frames}" for delay, seconds, path, frames in zip(
                 largest, ("7.890 s", "3.175 s"), (reassembly, smtp), ("33-79", "8-13"))]
    assert document["headline"]["text"] == (
        f"No Nagle stalls (2 captures, 2 connections). Largest delays: {'; '.join(named)}.")
