"""Evidence lines of the text report: the delay between the ACK and the released data reads in
the unit that fits it.

Values checked by hand in tshark (`-T fields -e frame.number -e frame.time_relative`):
seed003-nagle.pcap frame 51 (ACK) at 0.420045 s, frame 52 (released) at 0.420079 s: 34 us;
zeek/ftp__cwd-navigation.pcap frame 41 (data) at 0.936450 s, frame 42 (ACK) at 1.135047 s,
frame 43 at 1.223844 s: 88.797 ms (the tap is a round trip from that sender), and a stall of
287.394 ms from frame 41 to frame 43.
"""

from __future__ import annotations

import subprocess
import sys

from tests.conftest import SAMPLE_TRACES, corpus_file


def _text(path: str) -> str:
    return subprocess.run([sys.executable, "-m", "nagledetect", "--verbose", path],
                          capture_output=True, text=True, check=True).stdout


def test_reaction_near_the_sender_reads_in_microseconds() -> None:
    text = _text(str(SAMPLE_TRACES / "seed003-nagle.pcap"))
    assert "frame 50 last data -> frame 51 ACK (+41.5 ms hold) -> frame 52 released (+34 us)" in text


def test_reaction_a_round_trip_away_reads_in_milliseconds() -> None:
    """remote-header-body, at the client, the server 80 ms away: frame 15 at 0.413269, its
    delayed ACK (frame 16) at 0.459135, the held body (frame 17) at 0.539590 (tshark)."""
    text = _text(str(SAMPLE_TRACES / "remote-header-body.pcap"))
    assert ("frame 15 last data -> frame 16 ACK (+45.8 ms hold) -> frame 17 released (+80.5 ms): "
            "stall 126.3 ms") in text


def test_a_single_stall_is_counted_in_the_singular_without_a_median() -> None:
    """zeek/ssh__ssh.pcap, checked in tshark: frame 886 (16 bytes from 192.168.1.31:51489) at
    96934738.765023 s, frame 887 (the ACK) at .814980, frame 888 (44 bytes) at .815925: one
    stall of 50.902 ms on that direction."""
    text = _text(str(corpus_file("zeek/ssh__ssh.pcap")))
    assert "delayed ACK released them: 1 stall of 50.9 ms." in text
    assert "1 stalls" not in text and "39 stalls of" not in text
    seed003 = _text(str(SAMPLE_TRACES / "seed003-nagle.pcap"))
    assert "39 stalls of 41.5 ms (median)" in seed003


def test_an_ack_a_round_trip_after_the_data_shows_its_gap_and_the_hold_within_it() -> None:
    """zeek/ssh__ssh.pcap, captured at 192.168.1.32 (the sender), checked in tshark: frame 716
    (16 bytes to 128.2.13.133:22) at 96789283.101913 s, frame 717 (the ACK) at .166281, 64.4
    ms later, which is what Wireshark's times show; of those, the receiver held the ACK 39.9 ms
    (the finding's ACK delay) and the round trip to it took 24.5 ms (the connection's
    server-side round trip, 24.44 ms in the JSON). Near the receiver (frame 886 -> 887, 49.96
    ms apart) the gap is the hold and reads as before."""
    text = _text(str(corpus_file("zeek/ssh__ssh.pcap")))
    assert ("frame 716 last data -> frame 717 ACK (+64.4 ms: 39.9 ms hold + 24.5 ms round trip)"
            " -> frame 718 released (+18 us): stall 64.4 ms") in text
    assert "frame 886 last data -> frame 887 ACK (+49.9 ms hold) -> frame 888 released" in text


def test_a_hold_of_one_round_trip_shows_an_ack_that_was_not_delayed() -> None:
    """rtt-hold.pcap (a 1,548-byte write then a 50-byte one over a 60 ms round trip, at the
    client), in tshark: the 100-byte tail, frame 7, at 0.121215 s; the server's ACK of all
    1,548 bytes (ack 1549), frame 9, at 0.181453 s, 60.2 ms later; the held 50 bytes, frame
    10, at 0.181460 s, 7 us after it: a stall of 60.245 ms. The ACK is the ordinary one a round
    trip away, so no "hold" of the receiver's is shown; the fix is a delayed-ACK stall's."""
    text = _text(str(SAMPLE_TRACES / "rtt-hold.pcap"))
    assert (" 1. Nagle hold for one round trip (write-write-read) on connection 0: 1.208 s lost"
            in text)
    assert ("frame 7 last data -> frame 9 ACK (+60.2 ms, not delayed) -> frame 10 "
            "released (+7 us): stall 60.2 ms") in text
    assert "Write each message whole, then set TCP_NODELAY [single-write-nodelay]" in text
