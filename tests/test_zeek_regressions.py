"""The corpus audit's corrections (docs/validation.md): real traffic where a Nagle-family finding
once went wrong, or where a rule change found something right, each checked by hand with
`tshark -n -r FILE -Y 'frame.number>=A && frame.number<=B' -T fields -e frame.number
-e frame.time_relative -e tcp.stream -e tcp.srcport -e tcp.len -e tcp.seq -e tcp.ack`.
Every test skips where the corpora are absent.
"""

from __future__ import annotations

import pytest

from nagledetect import load_capture
from nagledetect.analysis import run_detectors
from nagledetect.detectors.kinds import NAGLE_DELACK_STALL, NAGLE_FAMILY, NAGLE_RTT_HOLD
from nagledetect.detectors.model import Finding
from tests.conftest import corpus_file


def _family(relative: str) -> list[Finding]:
    analysis = run_detectors(load_capture(str(corpus_file(relative))))
    return [f for f in analysis.findings if f.kind in NAGLE_FAMILY]


def _triples(finding: Finding) -> list[tuple[int, int, int]]:
    events = finding.events
    return list(zip(events.last_data_frame.tolist(), events.ack_frame.tolist(),
                    events.released_frame.tolist()))


@pytest.mark.parametrize("relative", ["zeek/tcp__reassembly.pcap", "zeek/ftp__bigtransfer.pcap"])
def test_acks_covering_unseen_data_are_not_delayed_ack_stalls(relative: str) -> None:
    """Frame 105 of tcp__reassembly.pcap acknowledges 31406 while the last segment seen ends at
    29958; frame 55 of ftp__bigtransfer.pcap acknowledges 393 kB past the last segment captured.
    Timing built on such ACKs proves nothing."""
    assert not [f for f in _family(relative) if f.kind == NAGLE_DELACK_STALL
                and f.sender and f.sender.endswith((":2564", ":37150"))]


def test_bdat_header_then_chunk_is_a_stall_with_its_frames() -> None:
    """A real write-write-read on loopback: `BDAT 129` (10 B, frame 16), the receiver's pure ACK
    40.4 ms later (frame 17), the 129-byte chunk 37 us after it (frame 18); 27 times."""
    (stall,) = [f for f in _family("zeek/smtp__rfc3030-bdat-multipart-chunked.pcap")
                if f.kind == NAGLE_DELACK_STALL]
    assert (stall.sender, stall.count, stall.confidence) == ("127.0.0.1:38718", 27, "high")
    assert _triples(stall)[0] == (16, 17, 18)


def test_ftp_replies_written_on_the_data_connections_clock_are_not_holds() -> None:
    """zeek/ftp__cwd-navigation.pcap, captured at the client; the server is 88.1 ms away (SYN
    0.000000, SYN/ACK 0.088105); its first packet after each of the client's 3,444 commands
    comes 87.2 ms or more after it (median 88.1 ms). Only the control connection is in the
    capture. Of its 688 RETRs, the server's `226 Transfer complete` comes before the client's
    ACK of the `150` in 196; in the 492 others the Windows-like client's delayed ACK (191-210
    ms) comes first, and the 226 follows it by 1.3 to 876 ms: 102 sooner
    than one round trip (frame 140 `150`, 80 B, 7.188042; frame 141 pure ACK 7.388890; frame 142
    `226`, 23 B, 7.460827: 71.9 ms, it left before the ACK reached the server), 10 within one
    (85.5-115.5 ms, frames 41-43: 88.8 ms) and 380 later. The 226 is written when the data
    transfer ends, whatever the ACK: the old detector's 107 stalls (29.7 s) were wrong."""
    assert _family("zeek/ftp__cwd-navigation.pcap") == []


def test_ack_delay_is_measured_against_the_round_trip_to_the_receiver() -> None:
    """zeek/ftp__ipv4.pcap, captured at the client, the NetBSD server 55.5 ms away (SYN 0.000000,
    SYN/ACK 0.055533). Frame 66 (`150 Opening ASCII mode`, 55 B) at 32.239032; the active-mode
    data connection's last data and FIN (frames 63 and 65) at 32.238991-32.239010, so the server
    wrote `226` then; the client's ACK (frame 68) came 36.6 ms after frame 66, a delayed ACK
    (the client is at the tap: no round trip in that lag), and the 24-byte `226` (frame 70)
    55.8 ms after it, one round trip. Frames 80-88 again (data FIN frame 84 at 35.870766, ACK
    frame 86 +37.0 ms, `226` frame 88 +55.8 ms). Measured against the whole round trip, those
    ACK lags looked shorter than the path and nothing was found."""
    stalls = [f for f in _family("zeek/ftp__ipv4.pcap") if f.kind == NAGLE_DELACK_STALL]
    assert [(f.sender, _triples(f)) for f in stalls] == [
        ("199.233.217.249:21", [(66, 68, 70), (80, 86, 88)])]


def test_a_reply_held_one_round_trip_behind_the_ordinary_ack() -> None:
    """zeek/ftp__ipv6.pcap, captured at the client, the server 106.9 ms away (SYN 0.000000,
    SYN/ACK 0.106877). Frame 34 (`150`, 55 B) at 5.711940; the data connection's FIN (frame 38)
    at 5.714529, when the server wrote `226`; the client ACKs frame 34 at once (frame 35,
    5.712095), and `226` (frame 41, 24 B) arrives at 5.820101, 108.0 ms after that ACK: Nagle
    held it for the ordinary ACK of the `150`. The same in frames 51-58 (data FIN frame 55) and
    74-81 (FIN frame 78); frames 20-22: `211-Features supported` then 86 bytes of feature lines
    coalesced into one segment one round trip after the ACK."""
    holds = [f for f in _family("zeek/ftp__ipv6.pcap") if f.kind == NAGLE_RTT_HOLD]
    assert [(f.sender, f.count) for f in holds] == [("[2001:470:4867:99::21]:21", 6)]
    assert {(20, 21, 22), (34, 35, 41), (51, 52, 58), (74, 75, 81)} <= set(_triples(holds[0]))


def test_a_single_stall_does_not_cite_a_timer_made_of_itself() -> None:
    """zeek/tls__tls1.2.pcap: the client's 36-byte record (frame 13), the server's ACK 135.6 ms
    later (frame 14; the server is 36.7 ms away: 99 ms of delay), the 22-byte record 0.2 ms after
    it (frame 15). That ACK is the server's only delayed-ACK sample, so "matches the receiver's
    timer" was the sample agreeing with itself: one stall with no independent sign is low."""
    (stall,) = _family("zeek/tls__tls1.2.pcap")
    assert _triples(stall) == [(13, 14, 15)] and stall.confidence == "low"
    assert not any("receiver's delayed-ACK timer" in r for r in stall.confidence_reasons)


@pytest.mark.parametrize("relative", ["zeek/web.pcap", "zeek/mixed-vlan-mpls.pcap",
                                      "zeek/tcp__missing-syn.pcap"])
def test_a_slow_start_tail_is_not_a_nagle_hold(relative: str) -> None:
    """One trace in three files. web.pcap, stream 1, at the client, the server 182.5 ms away:
    the 98-byte request (frame 6, 5.283401); two full segments (frames 7-8, 5.467441); their ACKs;
    four full segments (frames 11-14, 5.651779-5.652224); their ACKs (frames 15-18, up to
    5.653483); the 729-byte tail (frame 19) at 5.835748, 182.3 ms after the last. A 9,417-byte
    response sent in flights of 2, 4 and 1 segments one round trip apart is a congestion window
    opening; the tail could not have left sooner whatever Nagle did."""
    assert not [f for f in _family(relative)
                if f.kind == NAGLE_RTT_HOLD and f.sender == "125.190.109.199:80"]


def test_a_generated_captures_tick_is_no_evidence() -> None:
    """zeek/pop3-unknown-commands.pcap: 127.0.0.1 to 127.0.0.1, and every one of its 29 frames
    comes 200.0 ms (199.994-200.014) after the one before, the handshake and every ACK too.
    Frames 16-18 (13 B from the server, the client's ACK, 7 B from the server) are a script's
    steps, not a kernel's: nothing in their timing is evidence. The one-round-trip hold the
    detectors see there (400 ms) is of low confidence, and says why; the capture is warned of.
    (The audit judged the finding wrong; it stays, as the packets' order still fits a hold, but
    no longer claims what their times cannot show.)"""
    analysis = run_detectors(load_capture(str(corpus_file("zeek/pop3-unknown-commands.pcap"))))
    assert analysis.capture.accounting.clock_spacing_us == 199_994
    assert analysis.capture.accounting.warnings[-1].startswith(
        "every packet comes 199.994 ms after the one before, a conversation's answers too")
    family = [f for f in analysis.findings if f.kind in NAGLE_FAMILY]
    assert family and all(f.confidence == "low" for f in family)
    assert all(f.confidence_reasons[-1] == "every packet of the capture comes 199.994 ms after "
               "the one before: its times were set, not measured" for f in family)


def test_a_delayed_ack_shorter_than_the_path_is_still_delayed() -> None:
    """zeek/http__100-continue.pcap, at a macOS curl client (192.168.3.103), the server 47.9 ms
    away (SYN 0.000000, SYN/ACK 0.047911): after `100 Continue`, 1,460 bytes of the 2,001-byte body
    (frame 8, 0.102213), the server's pure ACK 93.1 ms later (frame 9, 0.195327: held 45.2 ms
    beyond the round trip, less than 1.5 round trips but far past an ordinary ACK's 73.9 ms),
    the 541-byte tail 77 us after it (frame 10, 0.195404): classic Nagle holding a write's tail
    behind a full segment until the server's delayed ACK."""
    (stall,) = [f for f in _family("zeek/http__100-continue.pcap")
                if f.kind == NAGLE_DELACK_STALL]
    assert _triples(stall) == [(8, 9, 10)]
    assert (stall.sender, stall.subkind) == ("192.168.3.103:54102", "2n-segment-tail")


def test_an_ack_is_not_ordinary_by_its_own_lag() -> None:
    """tcpdump/of10_7050q.pcapng: four frames, no handshake. Frame 2 (24 B from 86.139.225.177)
    at 0.100027, the peer's pure ACK (frame 3) at 0.139815, 39.8 ms later (a 40 ms delayed-ACK
    timer's lag), frame 4 (28 B) at 0.241710, 101.9 ms after it. The only round trip to the
    receiver is that 39.8 ms lag, and the sender's "round trip" is its 100 ms answer to frame 1:
    neither the ACK's kind nor the release's tie can be judged."""
    assert not [f for f in _family("tcpdump/of10_7050q.pcapng") if f.kind == NAGLE_RTT_HOLD]


def test_a_release_after_a_sequence_hole_is_not_tied() -> None:
    """zeek/tcp__reassembly.pcap, stream 0: the server's ACK in frame 107 (10.759700) acknowledges
    31674; the client's next frame, 108 (625 B, 10.799704), starts at 32306, and the server's
    duplicate ACK of 31674 (frame 109) confirms the gap. 632 bytes sent between the ACK and
    frame 108 are missing from the capture, so frame 108 was not what the ACK released."""
    released = {int(frame) for f in _family("zeek/tcp__reassembly.pcap")
                for frame in f.events.released_frame}
    assert 108 not in released
