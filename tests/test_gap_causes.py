"""Every gap of 10 ms or more named by its real cause (SPEC section 4.8), on real captures.

Each expected frame and gap below was read off the packets with tshark (`tshark -r FILE -n -T
fields -e frame.number -e frame.time_relative -e ip.src -e tcp.len -e tcp.seq -e tcp.ack -e
tcp.window_size -e _ws.col.Info`), not from the detector's output; the comment of each test
gives the frames and the subtraction.
"""

from __future__ import annotations

import io
import subprocess

import numpy as np
import orjson
import pytest

from nagledetect.analysis import analyze_capture
from nagledetect.api import load_capture
from nagledetect.detectors.kinds import (
    HANDSHAKE_RETRY,
    LOSS_RECOVERY,
    NAGLE_FAMILY,
    THINK_TIME,
    WINDOW_LIMITED,
    ZERO_WINDOW,
)
from nagledetect.detectors.model import Finding
from nagledetect.pipeline import run_detectors
from nagledetect.report.document import build_document, write_json
from nagledetect.report.text import render_text
from tests.conftest import SAMPLE_TRACES, corpus_file, require_tool


def _findings(relative: str) -> list[Finding]:
    return run_detectors(load_capture(str(corpus_file(relative))), charts=False).findings


def _one(findings: list[Finding], kind: str, subkind: str | None, connection: int) -> Finding:
    found = [f for f in findings if (f.kind, f.subkind, f.connection) == (kind, subkind, connection)]
    assert len(found) == 1, [(f.kind, f.subkind, f.connection) for f in findings]
    return found[0]


def _frames(finding: Finding) -> list[tuple[int, int, int]]:
    return [(row["last_data_frame"], row["delayed_ack_frame"], row["released_frame"])
            for row in finding.events]


def test_timeouts_with_backoff_and_no_ack_at_all_are_loss_recovery() -> None:
    """Frame 30 (31 B alert at 0.805190 s) is never acknowledged: the peer sends nothing after
    frame 29, and frames 33-37 resend it at 1.256004, 1.824056, 2.964062, 5.240061 and
    9.792026 s (the timer doubling). Frames 31-32 are the FIN and its retransmission (no
    data): they lie inside the first gap."""
    finding = _one(_findings("zeek/tls__xmpp-dialback-starttls.pcap"), LOSS_RECOVERY, "rto", 0)
    assert _frames(finding) == [(30, 33, 33), (33, 34, 34), (34, 35, 35), (35, 36, 36),
                                (36, 37, 37)]
    gaps_s = [row["stall_s"] for row in finding.events]
    assert gaps_s == pytest.approx([0.450814, 0.568052, 1.140006, 2.275999, 4.551965], abs=2e-6)
    assert finding.time_lost_s == pytest.approx(9.792026 - 0.805190, abs=1e-5)


def test_retransmission_of_acknowledged_data_is_spurious() -> None:
    """Frame 1 (18 B), frame 2 the peer's ACK 19 (all of it) 10 us later, frame 3 the same 18
    bytes again 300.00001 s after frame 1: the peer had them."""
    finding = _one(_findings("zeek/tcp__retransmit-timeout.pcapng"), LOSS_RECOVERY, "spurious", 0)
    assert _frames(finding) == [(1, 2, 3)]
    assert finding.time_lost_s == pytest.approx(300.00001, abs=1e-6)


def test_retransmission_after_the_peer_acked_past_it_is_spurious_not_plain_loss() -> None:
    """tcp.stream 3: frames 107-108 ACK 6901, then frame 109 (20.732287 s) resends seq 2761
    (1380 B, ending at 4141): tshark calls it a spurious retransmission, and the peer's frame
    111 D-SACKs it (SLE=2761 below ACK 6901). The gap runs from frame 106 (20.508482 s)."""
    findings = _findings("zeek/http__vnd.ms-cab-compressed-multi-conn.pcap")
    finding = _one(findings, LOSS_RECOVERY, "spurious", 3)
    assert _frames(finding) == [(106, 108, 109)]
    assert finding.time_lost_s == pytest.approx(20.732287 - 20.508482, abs=1e-6)
    assert not [f for f in findings if f.kind == LOSS_RECOVERY and f.connection == 3
                and f.subkind != "spurious"]


def test_zero_window_then_retransmission_is_named_zero_window() -> None:
    """Frame 211 (0.378978 s) is the server's last data; frames 212-215 advertise a zero
    window, frame 216 reopens it (0.436086 s), frame 217 (0.507877 s) resends what was sent
    past the closed window. The wait is the window's: 128.899 ms, and it reopened."""
    finding = _one(_findings("zeek/http__206_example_b.pcap"), ZERO_WINDOW, "reopened", 0)
    assert _frames(finding) == [(211, 212, 217)]
    assert finding.time_lost_s == pytest.approx(0.507877 - 0.378978, abs=1e-6)


def test_unanswered_syns_are_handshake_retries_not_a_missed_direction(tmp_path) -> None:
    """Four SYNs (frames 1-4 at 0, 6.447785, 9.285364, 12.101701 s), nothing else: three gaps
    ending in a retransmitted SYN, 12.101701 s in all. The capture did not miss a direction:
    nothing answered."""
    path = corpus_file("zeek/tcp__option-sack.pcap")
    finding = _one(_findings("zeek/tcp__option-sack.pcap"), HANDSHAKE_RETRY, "unanswered", 0)
    assert _frames(finding) == [(1, 2, 2), (2, 3, 3), (3, 4, 4)]
    assert finding.time_lost_s == pytest.approx(12.101701, abs=1e-6)
    out = io.BytesIO()
    write_json(build_document([analyze_capture(str(path), charts=False)]), out)
    warnings = orjson.loads(out.getvalue())["captures"][0]["warnings"]
    assert not [w for w in warnings if "missed the other" in w]
    assert [w for w in warnings if "never answered" in w]


def test_retried_syn_answered_later_is_a_handshake_retry() -> None:
    """socks.pcap: the SYN (frame 1, 0 s) is sent again at frames 2 (1.004978 s) and 3
    (2.107207 s) before an answer, by the client 10.0.0.55:53994 (tshark ip.src, tcp.srcport);
    the server's SYN/ACK retransmissions are its own finding."""
    found = [f for f in _findings("zeek/socks.pcap") if (f.kind, f.subkind, f.sender) == (
        HANDSHAKE_RETRY, "retried", "10.0.0.55:53994")]
    assert len(found) == 1
    finding = found[0]
    assert _frames(finding)[:2] == [(1, 2, 2), (2, 3, 3)]
    assert [row["stall_s"] for row in finding.events][:2] == pytest.approx(
        [1.004978, 1.102229], abs=2e-6)


def test_pause_between_handshake_and_first_request_is_think_time() -> None:
    """The SYN/ACK is frame 2 (0.000314 s), the client's ACK frame 3, and its 123-byte request
    frame 4 leaves at 12.142482 s: 12.142168 s after the handshake. The client's side of the
    path, the least it takes to answer: 36 us (its ACK frame 7 after the server's data frame
    6; 48 us at the handshake), the rest its own."""
    finding = _one(_findings("zeek/http__no-version.pcap"), THINK_TIME, "after-handshake", 0)
    assert _frames(finding) == [(2, 4, 4)]
    assert finding.events.stall_s.tolist() == pytest.approx([12.142168], abs=1e-6)
    assert finding.time_lost_s == pytest.approx(12.142168 - 0.000036, abs=1e-6)


def _connection_of(relative: str, client_port: int) -> int:
    connections = load_capture(str(corpus_file(relative))).connections
    return int(connections["id"][connections["client_port"] == client_port].iloc[0])


def test_a_servers_answer_one_round_trip_away_is_think_time_less_the_path() -> None:
    """http__methods.pcap, client port 46566, tapped at the client (tshark): SYN frame 40 at
    4.172041 s, SYN/ACK frame 42 at 4.191267 (19.226 ms to the server and back), the client's
    ACK 23 us later; the 37-byte request frame 44 at 4.191319, the server's answer frame 46 at
    4.233367: 42.048 ms, of which the server's own 42.048 - 19.226 = 22.822 ms. Within four
    round trips (77 ms), so once left to the path; beyond the round trip to the server and
    10 ms, it is the server's."""
    relative = "zeek/http__methods.pcap"
    finding = _one(_findings(relative), THINK_TIME, "response", _connection_of(relative, 46566))
    assert _frames(finding) == [(44, 46, 46)]
    assert finding.events.stall_s.tolist() == pytest.approx([0.042048], abs=1e-6)
    assert finding.details["median_path_ms"] == pytest.approx(19.226, abs=1e-3)
    assert finding.time_lost_s == pytest.approx(0.022822, abs=1e-6)


def test_a_clients_late_first_data_one_round_trip_away_is_think_time() -> None:
    """ssh__ssh.pcap, tcp.stream 20, tapped at the client (tshark): SYN frame 945, SYN/ACK
    frame 946 44.943 ms later, the client's ACK frame 947 71 us after it, its banner frame 948
    41.878 ms after the SYN/ACK: the client's own time (its side of the path is 71 us at most),
    though under four round trips (180 ms)."""
    finding = _one(_findings("zeek/ssh__ssh.pcap"), THINK_TIME, "after-handshake", 20)
    assert _frames(finding) == [(946, 948, 948)]
    assert finding.events.stall_s.tolist() == pytest.approx([0.041878], abs=1e-6)
    # The client's side of the path: 71 us at the handshake, less where a later ACK lag was.
    assert 0.041878 - 0.000071 - 1e-6 <= finding.time_lost_s < 0.041878


def test_answers_past_the_requesters_ack_tell_of_missed_packets() -> None:
    """ftp__cwd-navigation.pcap (tshark): frame 830, the client's TYPE at 57.171373 s acking
    16080; frame 831, the server's 227 at 57.348424 begins at 16099: its 19 bytes from 16080
    (the 200 answering TYPE) and the client's PASV are not in the capture ("previous segment
    not captured"), so the 177.1 ms gap holds two exchanges. Frames 3204 and 7151 are alike;
    frame 874 (CWD answered 132.8 ms later, at the client's ACK) is not. Frame 3940, the
    server's data at 75889 (280.462895 s), begins at the client's ACK (frame 3939, 280.461039,
    acking 75889) but past the server's furthest data seen, 75809 (frame 3937's 53 bytes from
    75756): the 80 bytes between were missed though their ACK was captured. The finding keeps
    its five gaps at medium confidence and says why."""
    finding = _one(_findings("zeek/ftp__cwd-navigation.pcap"), THINK_TIME, "response", 0)
    assert finding.count == 5 and (830, 831, 831) in _frames(finding)
    assert (3938, 3940, 3940) in _frames(finding)
    assert finding.confidence == "medium"
    assert finding.confidence_reasons[-1].startswith("4 of the 5 answers began past")


def test_a_handshake_seen_one_way_is_its_round_trip_not_think_time() -> None:
    """An Aruba access point tunnels only its stations' frames: the capture holds no SYN/ACK.
    tcp.stream 2 (tshark): SYN frame 5 at 0.975027 s, the client's ACK frame 6 at 1.044339
    (69.312 ms: the whole round trip, unsplit), the request frame 7 261 us later. The 69.6 ms
    from the SYN to the request is the round trip, not the application's; tcp.stream 7: SYN
    8.514105, ACK 8.521995 (7.890 ms), request 8.551124, 37.0 ms after the SYN: more than
    four round trips, think time."""
    relative = "zeek/tunnels__gre-aruba.pcap"
    connections = load_capture(str(corpus_file(relative))).connections.set_index("id")
    assert connections.loc[2, "rtt_ms"] == pytest.approx(69.312)
    assert connections.loc[7, "rtt_ms"] == pytest.approx(7.890)
    assert connections.loc[2, "rtt_source"] == "one-way-handshake"
    assert np.isnan(connections.loc[2, "rtt_client_side_ms"])
    thinking = [f for f in _findings(relative) if f.kind == THINK_TIME]
    assert [f.connection for f in thinking] == [7]
    assert _frames(thinking[0]) == [(19, 22, 22)]


def test_syns_the_client_acknowledged_were_answered_in_a_capture_of_one_direction() -> None:
    """ssh__ssh.client-side-half-duplex.pcap holds the client's packets only. tcp.stream 16
    (tshark): SYNs frames 419, 420 and 421 (0.507725, 0.620228, 0.721425 s past 96934738),
    then the client's pure ACK frame 422 (0.722462) and its data: the SYN/ACK came, unseen.
    The two gaps are retries answered, not unanswered ones."""
    retries = [f for f in _findings("zeek/ssh__ssh.client-side-half-duplex.pcap")
               if f.kind == HANDSHAKE_RETRY]
    assert [(f.connection, f.subkind) for f in retries] == [(16, "retried")]
    assert _frames(retries[0]) == [(419, 420, 420), (420, 421, 421)]


def test_think_time_on_a_connection_seen_one_way_is_of_low_confidence() -> None:
    """ssh__ssh.server-side-half-duplex.pcap holds the server's packets only. tcp.stream 0
    (tshark): SYN/ACK frame 1 at 0, the server's banner frame 2 at 0.154099 s. The banner
    waits for the client's ACK, which the capture misses, so the 154.1 ms hold a round trip
    it cannot measure: whose time the rest was, it cannot tell. Seen both ways
    (http__no-version.pcap), the same kind of gap keeps its high confidence."""
    findings = _findings("zeek/ssh__ssh.server-side-half-duplex.pcap")
    finding = _one(findings, THINK_TIME, "after-handshake", 0)
    assert _frames(finding) == [(1, 2, 2)]
    assert finding.time_lost_s == pytest.approx(0.154099, abs=1e-6)
    assert finding.confidence == "low"
    assert "one direction" in finding.confidence_reasons[-1]
    assert {f.confidence for f in findings if f.kind == THINK_TIME} == {"low"}
    both_ways = _one(_findings("zeek/http__no-version.pcap"), THINK_TIME, "after-handshake", 0)
    assert both_ways.confidence == "high"


def test_a_lab_capture_cut_to_one_direction_has_no_think_time(tmp_path) -> None:
    """remote-header-body.pcap (the lab's 80 ms delay line, captured at the client), cut to
    the client's packets with tcpdump (as a tap on one direction of an asymmetric route sees
    them): its SYN at 17.709648 and its ACK at 17.790107 are 80.459 ms apart; the request
    follows 0.2 ms after the ACK. The whole capture has no think time either."""
    source = SAMPLE_TRACES / "remote-header-body.pcap"
    one_way = tmp_path / "client-only.pcap"
    subprocess.run([require_tool("tcpdump"), "-r", str(source), "-w", str(one_way),
                    "src host 10.77.0.1"], check=True, capture_output=True)
    capture = load_capture(str(one_way))
    assert capture.connections["rtt_ms"].tolist() == [pytest.approx(80.459)]
    for path in (source, one_way):
        findings = run_detectors(load_capture(str(path)), charts=False).findings
        assert not [f for f in findings if f.kind == THINK_TIME]


def test_a_window_read_without_its_scale_is_not_window_limited() -> None:
    """smb__smb1.pcap has no handshake: the server's windows of 254-260 are scaled by a
    factor the capture does not show (tshark: window size scaling factor -1), so they cannot
    be called below one segment."""
    assert not [f for f in _findings("zeek/smb__smb1.pcap") if f.kind == WINDOW_LIMITED]


def test_a_capture_that_missed_packets_is_not_window_limited() -> None:
    """ftp__bigtransfer.pcap, tcp.stream 2: frame 53 starts at seq 380,370,193 while the
    client had acknowledged 14,481 with a 117,288-byte window (frame 52): the capture missed
    the data between, not a window that held the sender."""
    assert not [f for f in _findings("zeek/ftp__bigtransfer.pcap") if f.kind == WINDOW_LIMITED]


def _sample(name: str) -> list[Finding]:
    return run_detectors(load_capture(str(SAMPLE_TRACES / name)), charts=False).findings


def test_a_tail_loss_probe_the_peer_d_sacks_is_spurious() -> None:
    """cause-zero-window-reopens.pcap (lab, at the client): frame 11 (0.076519 s) sends seq
    2897 (1448 B), frame 12 (0.087948 s) sends it again (a tail-loss probe, 11.429 ms later),
    and the server's frame 13 ACKs 4345 with SACK 2897-4345 (tshark -e tcp.options.sack_le
    -e tcp.options.sack_re): a block below the cumulative ACK, a D-SACK (RFC 2883): the probe
    was a duplicate."""
    finding = _one(_sample("cause-zero-window-reopens.pcap"), LOSS_RECOVERY, "spurious", 0)
    assert _frames(finding) == [(11, 13, 12)]
    assert finding.time_lost_s == pytest.approx(0.087948 - 0.076519, abs=1e-6)


def test_retransmissions_each_d_sacked_are_spurious_not_rto() -> None:
    """cause-spurious.pcap: port 9000 (tcp.stream 0) sends seq 101 at frame 20 (0.792037 s)
    and again at frame 26 (1.039976 s), D-SACKed by frame 27 (ACK 201, SACK 101-201). Port
    9001 (tcp.stream 1) sends seq 101 at frames 19 (0.784106 s), 23 (1.028009 s) and 28
    (1.272005 s); the server D-SACKs 101-201 twice, frames 29 and 39 (its held ACK, TSecr
    echoing frame 23's TSval): two duplicates arrived, so both retransmissions were
    spurious. The first D-SACK after each is its evidence frame."""
    findings = _sample("cause-spurious.pcap")
    assert not [f for f in findings if f.kind == LOSS_RECOVERY and f.subkind != "spurious"]
    port_9000 = _one(findings, LOSS_RECOVERY, "spurious", 0)
    assert _frames(port_9000) == [(20, 27, 26)]
    port_9001 = _one(findings, LOSS_RECOVERY, "spurious", 1)
    assert _frames(port_9001) == [(19, 29, 23), (23, 29, 28)]
    assert port_9001.time_lost_s == pytest.approx(1.272005 - 0.784106, abs=1e-6)


def test_a_zero_window_that_never_reopens_lists_its_probes_backing_off() -> None:
    """cause-zero-window-stuck.pcap: frame 11 (0.059984 s) is the last data; the server
    answers every probe with a zero window; the probes (keep-alive shaped, seq 4344) leave at
    frames 15, 18, 24, 27, 33 (0.308001, 0.728016, 1.592004, 3.288023, 6.679991 s): 248.0,
    420.0, 864.0, 1696.0, 3392.0 ms apart, each about twice the last; then the sender's RST
    (frame 35). No data follows: the window never reopened. The sender waited, the server's
    window held it."""
    finding = _one(_sample("cause-zero-window-stuck.pcap"), ZERO_WINDOW, "never-reopened", 0)
    assert [row["released_frame"] for row in finding.events] == [15, 18, 24, 27, 33]
    assert finding.details["probe_intervals_ms"] == pytest.approx(
        [248.017, 420.015, 863.988, 1696.019, 3391.968], abs=1e-3)
    assert finding.details["probes_backing_off"]
    assert (finding.sender, finding.receiver) == ("10.77.0.1:36018", "10.77.0.2:9000")
    assert finding.details["waited"] == "10.77.0.1:36018"
    assert finding.details["held_by"] == "10.77.0.2:9000"


def test_a_zero_window_that_reopens_counts_the_wait_after_the_last_probe() -> None:
    """cause-zero-window-reopens.pcap: the retransmission at frame 12 (0.087948 s) is the last
    data before the window closes (frame 13); probes at frames 14 and 17 (0.331967, 0.771973
    s); the server reopens at frame 24 (1.576604 s, window 2896) and data leaves at frame 25
    (1.576630 s). The whole wait is the window's: 1.488682 s, reopened."""
    findings = _sample("cause-zero-window-reopens.pcap")
    finding = _one(findings, ZERO_WINDOW, "reopened", 0)
    assert _frames(finding) == [(12, 13, 14), (14, 15, 17), (17, 24, 25)]
    assert finding.time_lost_s == pytest.approx(1.576630 - 0.087948, abs=1e-6)
    assert not [f for f in findings if f.kind == "idle"]


def test_gap_findings_name_their_sides_so_the_advice_does() -> None:
    """cause-zero-window-stuck.pcap: the client 10.77.0.1:36018 sends, the server
    10.77.0.2:9000 advertises the zero window: the text's fix names the receiver."""
    text = render_text(build_document([analyze_capture(
        str(SAMPLE_TRACES / "cause-zero-window-stuck.pcap"), charts=False)]))
    assert "Fix (the receiver 10.77.0.2:9000 must change)" in text
    assert "None must change" not in text


def test_a_receive_window_below_one_segment_is_window_limited() -> None:
    """cause-small-window.pcap (lab: SO_RCVBUF 1 at the server, 200 bytes read every 20 ms):
    the server's windows are 0 (24 ACKs) or 576 (29 ACKs), never more (tshark -Y 'ip.src ==
    10.77.0.2 && tcp.flags.syn == 0' -e tcp.window_size), below the 1448-byte MSS. The
    client's data frames are 10 ms or more apart 27 times, 1.738752 s in all (tshark -e
    frame.time_relative over 'ip.src == 10.77.0.1 && tcp.len > 0'), every one the small
    window's. The first: frame 8 fills the 576-byte window (seq 577, ACK 577 + window 576 =
    1153 = its end), frame 9 closes it, frame 10 reopens it at 576 bytes, frame 11 sends into
    it. Three (31 -> 33, 59 -> 61, 82 -> 84: 0.121246 s) never see a zero window: frame 30's
    ACK 4609 + window 576 = 5185 is frame 31's end, and the client waits for the next ACK to
    move the edge; no Nagle finding takes them."""
    findings = _sample("cause-small-window.pcap")
    finding = _one(findings, WINDOW_LIMITED, "below-mss", 0)
    assert finding.count == 27
    assert _frames(finding)[0] == (8, 10, 11)
    assert finding.time_lost_s == pytest.approx(1.738752, abs=1e-5)
    assert (finding.sender, finding.receiver) == ("10.77.0.1:52446", "10.77.0.2:9000")
    assert not [f for f in findings if f.kind in (ZERO_WINDOW, "idle", *NAGLE_FAMILY)]
