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


RTO_WAIT = {(13, 24): (0.997222, "997.2 ms"), (13, 25): (1.017825, "1.018 s")}
"""cause-rto.pcap (lab: the delay line drops the third request and its next two
transmissions), in tshark: the request, frame 13, leaves at 0.289066 s, is sent again at
0.534260 s (frame 14), 0.778284 s (frame 17) and 1.286288 s (frame 24, which gets through),
and the server's answer, frame 25, comes at 1.306891 s. The wait for the lost request ends at
the retransmission that got through or at the answer, as the gap detector counts it; each
with its time."""
DHE_WAIT = {(14, 15): (0.59961, "599.6 ms"), (14, 16): (0.703753, "703.8 ms")}
"""zeek tls__dhe.pcap, in tshark: the client's 69 bytes, frame 14 at 3.056950 s, are sent
again with 53 more 600 ms later (frame 15, at 3.656560 s) and the server answers at 3.760703 s
(frame 16)."""


def _wait(delay: dict, waits: dict) -> tuple[str, str]:
    """A delay of the headline, checked against the waits the packets show: its time as the
    headline writes it, and its frames."""
    frames = tuple(delay["frames"])
    assert frames in waits and delay["time_lost_s"] == waits[frames][0]
    return waits[frames][1], f"{frames[0]}-{frames[1]}"


def test_without_nagle_stalls_the_headline_names_the_largest_delays(tmp_path) -> None:
    """cause-rto.pcap (`RTO_WAIT`) has no Nagle stall; the headline names its wait for lost
    data, with the frames, where it used to say only that no stall was found."""
    document, text, page = _reports(tmp_path, str(SAMPLE_TRACES / "cause-rto.pcap"))
    headline = document["headline"]
    assert headline["nagle_family"]["stalls"] == 0
    largest = headline["largest_other_delays"]
    assert [(delay["kind"], delay["connection"]) for delay in largest] == [
        (kinds.LOSS_RECOVERY, 0)]
    seconds, frames = _wait(largest[0], RTO_WAIT)
    assert headline["text"] == (
        f"No Nagle stalls (1 capture, 1 connection). Largest delays: {cause_words(largest[0])} "
        f"{seconds} on connection 0, frames {frames}.")
    assert text.startswith(headline["text"] + "\n")
    assert f"<div class='verdict'>{html.escape(headline['text'], quote=True)}</div>" in page


def test_the_largest_delays_of_several_captures_name_their_files() -> None:
    """cause-rto.pcap and tls__dhe.pcap (`RTO_WAIT`, `DHE_WAIT`): the larger wait comes first,
    each named by its file (frame numbers are each file's own)."""
    rto = str(SAMPLE_TRACES / "cause-rto.pcap")
    dhe = str(corpus_file("zeek/tls__dhe.pcap"))
    document = json.loads(_run("analyze", "-j", "1", "--format", "json", rto, dhe))
    largest = document["headline"]["largest_other_delays"]
    assert [delay["capture"] for delay in largest] == [0, 1]
    named = []
    for delay, path, waits in zip(largest, (rto, dhe), (RTO_WAIT, DHE_WAIT)):
        seconds, frames = _wait(delay, waits)
        named.append(f"{cause_words(delay)} {seconds} on connection {delay['connection']} in "
                     f"{path}, frames {frames}")
    assert document["headline"]["text"] == (
        f"No Nagle stalls (2 captures, 2 connections). Largest delays: {'; '.join(named)}.")


def test_holds_that_may_be_paced_writes_count_as_an_upper_bound(tmp_path) -> None:
    """paced-40ms.pcap: two 2-byte writes 38-45 ms apart, the second leaving right after the
    server's delayed ACK. In tshark, the 22 stalls the finding lists (frame 22 -> 24, 27 -> 30,
    ..., 160 -> 162) come 40.8-45.5 ms after the data before them, 933.264 ms in all; a trace
    cannot tell those holds from the writes' own pacing, so the headline, the finding and the
    HTML say "up to"."""
    document, text, page = _reports(tmp_path, str(SAMPLE_TRACES / "paced-40ms.pcap"))
    nagle = document["headline"]["nagle_family"]
    assert (nagle["stalls"], nagle["time_lost_s"], nagle["time_lost_upper_bound_s"]) == (
        22, 0.933264, 0.933264)
    assert document["headline"]["text"] == (
        "22 Nagle/delayed-ACK stalls cost up to 933.3 ms (where a hold cannot be told from a "
        "paced write) on 1 connection direction (1 capture, 1 connection).")
    assert text.startswith(document["headline"]["text"] + "\n")
    assert " 1. Nagle / delayed-ACK stall (write-write-read) on connection 0: up to 933.3 ms lost" in text
    assert "on connection 0: up to 933.3 ms lost (58% of the connection), confidence low" in page


def test_holds_that_may_be_no_ones_nagle_cost_say_so_in_the_headline(tmp_path) -> None:
    """seed003-nodelay-80ms-at-server.pcap: a TCP_NODELAY sender whose 11th tinygram its
    initial window held one round trip: in tshark frame 25 (the last of ten tinygrams in
    flight together) at 0.161783 s, frame 27 (10 bytes) at 0.242470, 80.687 ms. The finding
    says its sender runs no Nagle, and the headline says the time is low's."""
    document, text, _ = _reports(tmp_path, str(SAMPLE_TRACES /
                                                "seed003-nodelay-80ms-at-server.pcap"))
    nagle = document["headline"]["nagle_family"]
    assert (nagle["stalls"], nagle["time_lost_s"], nagle["time_lost_not_nagles_s"]) == (
        1, 0.080687, 0.080687)
    assert document["headline"]["text"] == (
        "1 Nagle hold of one round trip cost 80.7 ms (where the sender runs no Nagle or no "
        "exchange waited: low) on 1 connection direction (1 capture, 1 connection).")
    finding = next(f for f in document["findings"] if f["kind"] == "nagle-rtt-hold")
    assert finding["details"]["not_nagles"] == "no-nagle"
    assert text.startswith(document["headline"]["text"] + "\n")


def test_a_hold_both_unproven_and_no_ones_cost_says_both_in_one_bracket() -> None:
    """seed002-stream-40ms-path.pcap: the one hold (frame 7 at 0.123753 s to frame 9 at
    0.164053 in tshark, 40.3 ms) is an upper bound (the stream wrote on after each release)
    and no exchange waited on it (the server sends no data): the headline says both, once."""
    document = json.loads(_run("analyze", "--format", "json",
                               str(SAMPLE_TRACES / "seed002-stream-40ms-path.pcap")))
    assert document["headline"]["text"] == (
        "1 Nagle hold of one round trip cost up to 40.3 ms (where a hold cannot be told from a "
        "paced write; where the sender runs no Nagle or no exchange waited: low) on 1 "
        "connection direction (1 capture, 1 connection).")


def test_a_hold_of_one_round_trip_is_counted_with_the_nagle_family() -> None:
    """rtt-hold.pcap: 20 tails of 50 bytes, each leaving 7-32 us after the server's ordinary
    ACK of the 1,548 bytes before it, one 60 ms round trip after them; in tshark (frame 7 ->
    10, 15 -> 18, ..., 115 -> 117) they wait 60.245-60.541 ms, 1.208046 s in all."""
    document = json.loads(_run("analyze", "--format", "json",
                               str(SAMPLE_TRACES / "rtt-hold.pcap")))
    assert document["headline"]["nagle_family"]["by_kind"][kinds.NAGLE_RTT_HOLD] == {
        "stalls": 20, "time_lost_s": 1.208046}
    assert document["headline"]["text"] == (
        "20 Nagle holds of one round trip cost 1.208 s on 1 connection direction (1 capture, 1 "
        "connection).")


def test_stall_summaries_give_back_endpoints_as_strings_across_chunks() -> None:
    """The headline's stall summaries keep senders and receivers as fixed-width text. A chunk
    with a missing endpoint (None) is held as objects; joined with chunks held as text (added
    in turn, or the summaries of batches joined), every endpoint must still read back as the
    string it was (not bytes), and None as None. No real
    capture gives a Nagle-family finding without a sender, so the entries are made here."""
    from nagledetect.summaries import StallSummaries

    def entry(sender: str | None, receiver: str) -> dict:
        return {"kind": kinds.NAGLE_DELACK_STALL, "subkind": None, "capture": 0,
                "connection": 1, "sender": sender, "receiver": receiver, "count": 1,
                "time_lost_s": 0.1, "advice": ["nodelay"], "details": {}}

    for chunks in ([[entry(None, "10.0.0.2:80")], [entry("10.0.0.1:5", "[2001:db8::2]:80")]],
                   [[entry("10.0.0.10:5", "10.0.0.2:80")], [entry(None, "10.0.0.2:80")]]):
        summaries = StallSummaries()
        for chunk in chunks:
            summaries.add(chunk)
        summaries.done()
        expected = [(found["sender"], found["receiver"]) for chunk in chunks for found in chunk]
        assert [(found["sender"], found["receiver"])
                for found in summaries.items(0, len(summaries))] == expected
        pieces = [StallSummaries() for _ in chunks]
        for piece, chunk in zip(pieces, chunks):
            piece.add(chunk)
            piece.done()
        joined = StallSummaries.joined(pieces)
        assert [(found["sender"], found["receiver"]) for found in joined] == expected
