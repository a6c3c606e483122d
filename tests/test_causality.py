"""Nagle holds only where physics allows them: the release must follow its ACK by no less than the
round trip between the tap and the sender, and within the sender's reaction near it; a sender
writing on its own clock is not proven to hold anything; a hold of one round trip for an ordinary
ACK is its own kind. Every frame and time below was read off the packets with
`tshark -T fields -e frame.number -e frame.time_relative -e tcp.len` and the lab manifests."""

from __future__ import annotations

import json

import pytest

from nagledetect.analysis import analyze_capture
from nagledetect.detectors.kinds import NAGLE_DELACK_STALL, NAGLE_FAMILY, NAGLE_RTT_HOLD
from tests.conftest import SAMPLE_TRACES, corpus_file


def _findings(path, kind=None):
    found = analyze_capture(str(path)).findings
    return [f for f in found if (f.kind == kind if kind else f.kind in NAGLE_FAMILY)]


def _triples_of(finding) -> list[tuple[int, int, int]]:
    return [(e["last_data_frame"], e["delayed_ack_frame"], e["released_frame"])
            for e in finding.events.records()]


def test_a_release_sooner_than_the_round_trip_is_not_a_hold() -> None:
    """zeek/ftp__cwd-navigation.pcap, captured at the client; the server is 87-88 ms away (SYN
    at 0.000000, SYN/ACK at 0.088105; its quickest answer to a command 87.155 ms). Frame 140
    (server, 80 B) at 7.188042, frame 141 (the client's pure ACK) at 7.388890, frame 142
    (server, 23 B) at 7.460827: 71.9 ms after the ACK, so it left the server before the ACK
    could reach it. Of the server's small data after such
    ACKs, most arrives too soon or later than a release would: it writes on its own clock, and
    no more of it falls one round trip after an ACK than chance puts there. No Nagle finding."""
    assert _findings(corpus_file("zeek/ftp__cwd-navigation.pcap")) == []


def test_a_hold_seen_one_round_trip_away() -> None:
    """sample_traces/remote-header-body.pcap: the seed 004 exchange over an 80 ms path (delay
    line), captured at the client. Frame 15 (server, 6 B) at 0.413269, frame 16 (the client's
    delayed ACK) at 0.459135 (+45.9 ms), frame 17 (server, 276 B) at 0.539590: 80.5 ms after the
    ACK, one round trip (SYN 0.080533 -> SYN/ACK 0.160948: 80.4 ms). The manifest: 30 exchanges,
    each about 125 ms over its think time and round trip. The first exchange's 6 bytes were ACKed
    at once (frame 9, quick-ACK mode at the start): its body waited one round trip, not a timer."""
    stalls = _findings(SAMPLE_TRACES / "remote-header-body.pcap", NAGLE_DELACK_STALL)
    assert [(f.sender, f.count, f.confidence) for f in stalls] == [("10.77.0.2:9000", 29, "high")]
    first = stalls[0].events.records(slice(0, 1))[0]
    assert (first["last_data_frame"], first["delayed_ack_frame"], first["released_frame"]) == (
        15, 16, 17)
    assert stalls[0].events.reaction_ms.min() >= 80.0
    holds = _findings(SAMPLE_TRACES / "remote-header-body.pcap", NAGLE_RTT_HOLD)
    assert [(f.count, int(f.events.released_frame[0])) for f in holds] == [(1, 11)]
    manifest = json.loads((SAMPLE_TRACES / "remote-header-body.json").read_text())
    assert manifest["summary"]["nagle_stalls"] == stalls[0].count + holds[0].count


def test_a_bursts_tail_waits_for_the_ack_of_its_small_beginning() -> None:
    """zeek/pop3__pop3.pcap, tcp.stream 6, captured at the client, the server 46-49 ms away
    (SYN 150.179386, SYN/ACK 150.228101). The server answers RETR with 5 bytes and then full
    segments: frame 94 (5 B) at 151.036214, 95 (1460 B), the client's ACK 96 of both at
    151.038224, 97 and 98 (1460 B each) 3.1-3.2 ms after it (in flight: sent before the ACK
    could reach the server), ACK 99 at 151.041459, the 1189-byte tail frame 100 at 151.086118:
    47.9 ms after ACK 96, one round trip (Linux's Nagle holds a small segment while an earlier
    small one is unacknowledged), but 44.7 ms after ACK 99, sooner than that ACK could reach
    the server. Frames 102-111 are alike (the tail 46.8 ms after ACK 104, 43.4 ms after ACK
    110). Frames 113-119: 5 B (113) at 151.251046, 1460 B (114), the client's ACK 115 of 15,867
    (past the 5 bytes) at 151.253581, frames 116-117 (1460 B) 0.1-2.0 ms after it, ACK 118 of
    everything at 151.255642, the 837-byte tail 119 at 151.300962: 47.4 ms after ACK 115, and
    45.3 ms after ACK 118, 1.0 ms sooner than the server's quickest round trip (46.3 ms), which
    only the timing's jitter allowance admits; ACK 115 needs none, so it is the release named.
    Three holds of one round trip, each paired with the ACK that released it; the early tails
    are no sign of writes on the server's own clock."""
    holds = [f for f in _findings(corpus_file("zeek/pop3__pop3.pcap"), NAGLE_RTT_HOLD)
             if f.connection == 6]
    assert [(f.count, f.confidence) for f in holds] == [(3, "medium")]
    events = holds[0].events
    assert list(zip(events.last_data_frame.tolist(), events.ack_frame.tolist(),
                    events.released_frame.tolist())) == [(95, 96, 100), (103, 104, 111),
                                                        (114, 115, 119)]
    assert events.reaction_ms.tolist() == pytest.approx([47.894, 46.816, 47.381], abs=0.05)
    assert not any("own clock" in reason for reason in holds[0].confidence_reasons)
    assert holds[0].details["released_by_burst_start"] == 3


def test_a_tail_sent_with_segments_the_ack_let_go_was_not_held_by_nagle() -> None:
    """zeek/http__no_crlf.pcap, the server 203 ms from the client's tap: frame 1211 (1262 B, a
    small end) at 16.381167, the client's ACK 1212 of everything at 16.382225; the server's
    next data, frame 1213 (1382 B, full) at 16.585980, one round trip later, then 16 more
    segments to the 1182-byte frame 1229 at 16.598261. The full segments waited for the ACK as
    much as the tail did (the window, not Nagle, held them): the tail is no hold. The one stall
    found is frames 301-303 (the 1,224-byte segment 204.9 ms after the ACK of the data
    before it)."""
    holds = _findings(corpus_file("zeek/http__no_crlf.pcap"), NAGLE_RTT_HOLD)
    assert [f.count for f in holds] == [1]
    assert holds[0].events.released_frame.tolist() == [303]


def test_a_tail_after_segments_on_the_ack_clock_waited_for_nagle() -> None:
    """sample_traces/classic-2n-blocks-100000-30ms-path.pcap: the classic-Nagle sender (scapy)
    30.4 ms from the client's tap (SYN 0.000000, SYN/ACK 0.030364). One block: the 1-byte
    request (frame 673) at 1.043948, 69 full segments streaming to frame 777 at 1.121866, their
    longest pause 8.5 ms (frame 743), far under half a round trip: no flights. The client ACKs
    every second segment; ACK 724 (647,785) at 1.092549 is the first to reach the sender after
    frame 777 left it (1.121866 less 31.3 ms: 1.0906), and any of the dozen ACKs from it on
    would have let a tail held by a congestion window go. The 88-byte tail (frame 779) came at
    1.153140, 31.2 ms after ACK 778 of everything (1.121899): it waited for that ACK, as classic
    Nagle does. The same holds for frames 132-134; the other 18 blocks end in an odd segment
    the client's delayed ACK released (the classic peer logs 20 holds)."""
    holds = _findings(SAMPLE_TRACES / "classic-2n-blocks-100000-30ms-path.pcap", NAGLE_RTT_HOLD)
    assert [(f.sender, f.count, f.confidence) for f in holds] == [("10.77.0.2:9000", 2, "medium")]
    assert _triples_of(holds[0]) == [(132, 133, 134), (777, 778, 779)]
    stalls = _findings(SAMPLE_TRACES / "classic-2n-blocks-100000-30ms-path.pcap",
                       NAGLE_DELACK_STALL)
    assert [f.count for f in stalls] == [18]


def test_a_tail_after_a_final_flight_that_streamed_waited_for_nagle() -> None:
    """sample_traces/classic-2n-blocks-100000-80ms-path.pcap: the classic-Nagle sender 80.5 ms
    from the client's tap (SYN 0.000000, SYN/ACK 0.080543), the client's window 65,535 bytes
    (no scaling). The first block: 45 full segments (frames 9-84, 0.341560-0.364827), then a
    58.5 ms pause for the window, as slow start pauses; but the final flight streamed out
    (frames 86-133, 0.423342-0.439956), and the client ACKed every second segment of it: ACK 88
    (66,609) at 0.423923 reached the sender after frame 133 had left (0.439956 less 81.5 ms),
    and a window-held tail would have come one round trip after it, about 0.505. The 88-byte
    tail (frame 135) came at 0.521157, 81.2 ms after ACK 134 of everything (0.439975): it waited
    for that ACK. Nineteen blocks end so, an even final flight; one (frames 1041-1043) in an
    odd segment the client's delayed ACK released. The classic peer logs 20 holds."""
    path = SAMPLE_TRACES / "classic-2n-blocks-100000-80ms-path.pcap"
    (holds,) = _findings(path, NAGLE_RTT_HOLD)
    assert _triples_of(holds)[0] == (133, 134, 135)
    (stall,) = _findings(path, NAGLE_DELACK_STALL)
    assert (holds.count, stall.count) == (19, 1)
    assert _triples_of(stall) == [(1041, 1042, 1043)]


def test_a_hold_of_one_round_trip_for_an_ordinary_ack() -> None:
    """sample_traces/rtt-hold.pcap: 1,548 then 50 bytes per exchange over 60 ms, captured at the
    client. Frames 6-7 (1,448 + 100 B) at 0.121213-0.121215, the server's ACK of all of it
    (frame 9) at 0.181453, 60.2 ms later: as soon as the data crossed the path. Frame 10 (50 B)
    leaves 7 us after it. Twenty exchanges, every one held (the manifest counts 20)."""
    holds = _findings(SAMPLE_TRACES / "rtt-hold.pcap")
    assert [(f.kind, f.sender, f.count, f.confidence) for f in holds] == [
        (NAGLE_RTT_HOLD, "10.77.0.1:51672", 20, "high")]
    first = holds[0].events.records(slice(0, 1))[0]
    assert (first["last_data_frame"], first["delayed_ack_frame"], first["released_frame"]) == (
        7, 9, 10)
    assert first["stall_s"] == pytest.approx(0.060245, abs=1e-6)
    assert holds[0].advice[0] == "single-write-nodelay"
    assert "quickack" not in holds[0].advice


def test_a_one_way_streams_hold_costs_no_exchange() -> None:
    """sample_traces/seed002-stream-40ms-path.pcap: 100-byte writes every 3 ms over 40 ms,
    captured at the client; the server sends no data (tshark finds no payload from port 9000).
    Frame 7 (100 B) at 0.123753, the server's ACK of it (frame 8) at 0.164017, 40.3 ms later,
    the round trip; frame 9 (1,200 B, the writes held meanwhile) 36 us after it. The same
    repeats each round trip (frames 10-11: 1,300 B) while the stream's one message goes on, but
    nothing waits on it: the one hold found is low and says why. Of the client's 32 data
    segments, 30 leave within 1 ms of a pure ACK from the server (frames 9, 11, 13...), 29 of
    them right after such a release of the one before: data written after that release (it
    would have left with it), the stream written on its own clock, so the hold's time is an
    upper bound too."""
    holds = _findings(SAMPLE_TRACES / "seed002-stream-40ms-path.pcap")
    assert [(f.kind, f.count, f.confidence) for f in holds] == [(NAGLE_RTT_HOLD, 1, "low")]
    assert _triples_of(holds[0]) == [(7, 8, 9)]
    assert holds[0].details["one_way_stream"]
    assert holds[0].details["written_after_release"] == 29
    assert holds[0].details["time_lost_upper_bound"]
    assert "nothing waited for an answer" in holds[0].confidence_reasons[-1]


def test_a_few_releases_late_by_the_paths_jitter_do_not_make_an_own_clock() -> None:
    """sample_traces/mixed-20ms-at-server.pcap: the lab's mixed connections over a 20 ms path,
    captured at the server (recorded with `lab run mixed --capture-at server --rtt-ms 20
    --exchanges 20` on a busy machine). tcp.stream 0 (10.77.0.1:43990, 15 two-byte writes then
    a read): SYN/ACK at 0.020515, the client's ACK at 0.040897, so the client is 20.4 ms away.
    Frame 674 (2 B) at 1.123102, the server's delayed ACK (frame 680) at 1.163969 (+40.9 ms),
    frame 683 (28 B) at 1.184316: 20.3 ms after it, one round trip. Twice the release came
    later than the client's reaction allows: frame 666 at 1.092410, 32.4 ms after the ACK of
    frame 663 (1.059978), and frame 704 at 1.289623, 29.6 ms after frame 700 (1.259998); stream
    1's releases came at the same two instants (frames 665 and 703, 36.4 and 29.5 ms after
    their ACKs), so the path stalled, not each client's application. Two late releases among
    the direction's 19 are jitter; a sender on its own clock leaves many (a fifth or more in
    every paced lab recording). The manifest: 20 exchanges stalled on each connection."""
    holds = [f for f in _findings(SAMPLE_TRACES / "mixed-20ms-at-server.pcap",
                                  NAGLE_DELACK_STALL)
             if f.sender in ("10.77.0.1:43990", "10.77.0.1:43994")]
    assert sorted((f.sender, f.count, f.confidence) for f in holds) == [
        ("10.77.0.1:43990", 17, "high"), ("10.77.0.1:43994", 17, "high")]
    stream_0 = next(f for f in holds if f.sender == "10.77.0.1:43990")
    assert (674, 680, 683) in _triples_of(stream_0)
    assert stream_0.details["untied_releases"] == 2
    assert not stream_0.details["time_lost_upper_bound"]


def test_a_hold_the_sender_wrote_on_after_is_not_proven() -> None:
    """sample_traces/trap-paced-writes-10ms-path.pcap: three 2-byte writes 45 ms apart over a
    10 ms path, captured at the client; the manifest's exchanges hold nothing (each 101 ms:
    the two pauses and the path). Frame 15 (2 B) at 0.132405, the server's delayed ACK (frame
    16) at 0.183229, 50.8 ms later; frame 17 (2 B) 28 us after it; the ACK of it (frame 18, an
    ordinary one) at 0.193464; frame 19 (2 B) at 0.223029, 29.6 ms after that ACK with nothing
    in between, and the server's answer (frame 21) after it. The sender wrote the third on its
    own clock, so the second may have been written 45 ms after the first as well, held only
    the few ms until the ACK, and the answer waited for the third: 14 such exchanges, each
    hold low and an upper bound, none of them medium or high."""
    holds = _findings(SAMPLE_TRACES / "trap-paced-writes-10ms-path.pcap")
    assert [(f.kind, f.count, f.confidence) for f in holds] == [(NAGLE_DELACK_STALL, 14, "low")]
    assert _triples_of(holds[0])[0] == (15, 16, 17)
    assert holds[0].details["written_after_release"] == 14
    assert holds[0].details["time_lost_upper_bound"]
    assert "the sender writes on its own clock" in holds[0].confidence_reasons[-1]


def test_an_ack_held_a_few_ms_beyond_the_path_is_no_delayed_ack() -> None:
    """zeek/dns-inverse-query.pcap, DNS over TCP captured at the server (SYN/ACK 1.9 ms after
    the SYN, the client's ACK 217.2 ms after that): the client's 2-byte length prefix (frame 4,
    0.219125 s), the server's pure ACK 5.7 ms later (frame 5, 0.224778: held 3.8 ms beyond the
    server's round trip, too little for a delayed ACK, too much for the ordinary-ACK bound),
    the 27-byte query (frame 6, 0.450508) 225.7 ms after it, one round trip to the client.
    The query waited for that ACK: a one-round-trip hold, low as it stands alone."""
    holds = _findings(corpus_file("zeek/dns-inverse-query.pcap"))
    assert [(f.kind, f.count, f.confidence) for f in holds] == [(NAGLE_RTT_HOLD, 1, "low")]
    assert _triples_of(holds[0]) == [(4, 5, 6)]
    assert holds[0].time_lost_s == pytest.approx(0.231383, abs=1e-6)


def test_a_sender_without_nagle_is_held_by_its_window_not_nagle() -> None:
    """sample_traces/seed003-nodelay-80ms-at-server.pcap: 15 two-byte writes with TCP_NODELAY
    over 80 ms, captured at the server. The first request: frames 7-25, ten 2-byte segments
    (0.161580-0.161783), each ACKed by the server at once (frames 8-26) and the next passing
    the tap within 160 us of that ACK, 80 ms before the ACK could reach the client: ten small
    segments in flight together, which no Nagle allows. The other 10 bytes (frame 27) leave
    80.7 ms after ACK 26, one round trip: the initial window of 10 segments held them. The
    one-round-trip hold the timing shows is low and says why."""
    holds = _findings(SAMPLE_TRACES / "seed003-nodelay-80ms-at-server.pcap")
    assert [(f.kind, f.count, f.confidence) for f in holds] == [(NAGLE_RTT_HOLD, 1, "low")]
    assert _triples_of(holds[0]) == [(25, 26, 27)]
    assert holds[0].details["small_in_flight"] == 9
    assert "does not run Nagle" in holds[0].confidence_reasons[-1]


def test_tls_records_written_apart_are_held_one_round_trip() -> None:
    """zeek/tls__tls-expired-cert.pcap, at the client, the server 160 ms away: frame 14 (90 B of
    application data) at 4.190941, the server's ACK (frame 15) at 4.386476, 195.5 ms later, and
    the client's next record (frame 16, 74 B) 95 us after that ACK."""
    holds = _findings(corpus_file("zeek/tls__tls-expired-cert.pcap"), NAGLE_RTT_HOLD)
    client = [f for f in holds if f.sender == "192.168.4.149:60539"]
    assert [(int(f.events.last_data_frame[0]), int(f.events.ack_frame[0]),
             int(f.events.released_frame[0])) for f in client] == [(14, 15, 16)]


@pytest.mark.parametrize("name", ["paced-40ms", "paced-40ms-nodelay"])
def test_paced_writes_are_not_proven_holds(name: str) -> None:
    """Two 2-byte writes 38-45 ms apart, near the receiver's ~41 ms delayed-ACK timer; the
    manifests record no exchange over its pacing by 10 ms (Nagle held a few ms at most). Some
    second writes follow the delayed ACK by 0.3 to 5 ms, later than this host releases held data
    (18-61 us in seed003 and rtt-hold): the sender writes on its own clock. Whatever is still
    reported is low confidence, an upper bound, and says why."""
    manifest = json.loads((SAMPLE_TRACES / f"{name}.json").read_text())
    assert manifest["summary"]["nagle_stalls"] == 0
    for finding in _findings(SAMPLE_TRACES / f"{name}.pcap"):
        assert finding.confidence == "low"
        assert finding.details["time_lost_upper_bound"] is True
        assert finding.details["untied_releases"] >= 2
        assert "up to" in finding.summary
        assert any("own clock" in reason for reason in finding.confidence_reasons)


def test_a_timer_fingerprinted_from_the_stalls_themselves_is_not_cited() -> None:
    """seed003: every delayed ACK of its one connection is a stall's ACK (39 stalls, 39 delayed
    samples of 10.77.0.2), so the host's timer is no independent evidence; the reason names the
    ACK delays' own cluster instead, and the finding is still high."""
    (finding,) = _findings(SAMPLE_TRACES / "seed003-nagle.pcap")
    assert finding.confidence == "high"
    assert not any("receiver's delayed-ACK timer" in r for r in finding.confidence_reasons)
    assert any(r.startswith("ACK delays cluster at 41.5 ms") for r in finding.confidence_reasons)
