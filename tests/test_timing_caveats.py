"""What a capture's timing cannot show, said rather than measured wrongly: delayed-ACK samples
that are not a timer's, clocks too coarse for the waits, packets stamped in batches.

Corpus values were read with `tshark -n -r FILE -T fields -e frame.number -e frame.time_epoch
-e ip.src -e tcp.len -e tcp.seq -e tcp.ack -e tcp.flags.str`; every corpus test skips where
the corpora are absent.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest
from click.testing import CliRunner

from nagledetect import load_capture
from nagledetect.analysis import analyze_capture, run_detectors
from nagledetect.cli import main
from nagledetect.detectors.kinds import NAGLE_DELACK_STALL, THINK_TIME
from nagledetect.streamed import analyze_in_batches
from tests.conftest import SAMPLE_TRACES, corpus_file
from tests.handbuilt import CLIENT, SERVER, segment, write


def _document(*paths: Path) -> dict:
    """`analyze --format json` of the captures, run in this process."""
    result = CliRunner().invoke(main, ["analyze", "--format", "json", *map(str, paths)])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def _warnings(path: Path) -> list[str]:
    return _document(path)["captures"][0]["warnings"]


@pytest.mark.parametrize(("relative", "host"), [
    # Frame 4: 157 bytes at 0.000008 s; frame 5, the client's FIN, at 1.012247 s; frame 6 at
    # 1.012312 s acknowledges 159 (the data's end, 158, and the FIN).
    ("zeek/smb__smb2_fscontrol.pcap", "10.0.0.2"),
    # Frame 218: 721 bytes at 0.462385 s; frame 219, the client's FIN, at 1.474301 s; frame
    # 220 acknowledges 251422, one past the data's end.
    ("zeek/redis__oss-fuzz-473580107.pcap", "10.0.0.2"),
])
def test_an_ack_of_the_senders_fin_is_no_delayed_ack(relative: str, host: str) -> None:
    """The ACK after a lone segment came only when its sender's FIN came, a second later, and
    acknowledged the FIN: the receiver answered the FIN, and the second is not its timer (it
    was shown as a timer of 1,012 ms, twice the most RFC 1122 allows)."""
    analysis = run_detectors(load_capture(str(corpus_file(relative))))
    assert host not in analysis.hosts


def test_an_ack_held_longer_than_any_timer_is_no_delayed_ack(tmp_path: Path) -> None:
    """Hand-built (no stack holds an ACK 800 ms to order): a handshake of 1 ms, then three
    lone 10-byte segments each acknowledged exactly, 40 ms, 40 ms and 800 ms later: held 39.5,
    39.5 and 799.5 ms, less the tap-to-server round trip (SYN to SYN/ACK, 0.5 ms). The two
    40 ms ACKs are a timer's; the 800 ms one, past RFC 1122's 500 ms and Windows' 600 ms, is
    not, and must not pull the timer."""
    packets = [segment(CLIENT, SERVER, 40000, 80, "S", 0, time_s=0.0),
               segment(SERVER, CLIENT, 80, 40000, "SA", 5000, 1, time_s=0.0005),
               segment(CLIENT, SERVER, 40000, 80, "A", 1, 5001, time_s=0.001)]
    seq, now = 1, 0.1
    for hold_s in (0.040, 0.040, 0.800):
        packets.append(segment(CLIENT, SERVER, 40000, 80, "PA", seq, 5001, 10, time_s=now))
        seq += 10
        packets.append(segment(SERVER, CLIENT, 80, 40000, "A", 5001, seq, time_s=now + hold_s))
        now += hold_s + 1.0
    analysis = run_detectors(load_capture(str(write(tmp_path / "long-hold.pcap", packets))))
    samples = analysis.delack_samples
    assert sorted(round(hold, 1) for hold in samples["hold_ms"].tolist()) == [39.5, 39.5, 799.5]
    assert samples["delayed"].tolist().count(True) == 2
    profile = analysis.hosts[SERVER]
    assert profile.delack_samples == 2
    assert profile.delack_timer_ms == pytest.approx(39.5)


def test_a_clock_of_windows_ticks_is_named_by_its_step() -> None:
    """krb__smb_gssapi.pcap: seven packets at .822000 s and one at .837625 s, 15.625 ms apart
    (Windows' 64 Hz tick, from an origin that is not a whole millisecond)."""
    (warning,) = [w for w in _warnings(corpus_file("zeek/krb__smb_gssapi.pcap"))
                  if "timestamps" in w]
    assert warning.startswith("timestamps step by 15.625 ms:")


def test_a_handshake_of_no_time_warns_of_batched_stamps() -> None:
    """nflog-http.pcap: SYN, SYN/ACK and ACK (frames 1-3) all at 1470574779.148133 s, eight
    packets in all at that instant; the clock itself counts microseconds (.138255, .138261,
    .138288 later), so no step is named, but the round trip is 0 us."""
    warnings = _warnings(corpus_file("zeek/nflog-http.pcap"))
    assert not [w for w in warnings if w.startswith("timestamps step")]
    assert [w for w in warnings if w.startswith("1 of 1 connections whose handshake took 0 us")]


def test_packets_all_at_one_instant_are_said_so() -> None:
    """tls__ml-dsa-44-cert.pcap: all five packets at 1700000000.000000 s."""
    assert "all 5 packets carry the same timestamp: no delay can be measured" in _warnings(
        corpus_file("zeek/tls__ml-dsa-44-cert.pcap"))


@pytest.mark.parametrize("trace", sorted((Path(__file__).parents[1] / "sample_traces").glob(
    "*.pcap*")), ids=lambda path: path.name)
def test_real_clocks_raise_no_timing_warning(trace: Path) -> None:
    """The sample traces were recorded by tcpdump on Linux's microsecond clock."""
    assert not [w for w in _warnings(trace) if "timestamp" in w or "handshake took" in w]


def test_a_few_packets_whole_seconds_apart_name_no_clock(tmp_path: Path) -> None:
    """Seven packets sent whole seconds apart say nothing of the clock that stamped them (a
    sender can keep such a pace); the eighth, 3 us off, shows a microsecond clock."""
    packets = [segment(CLIENT, SERVER, 40000, 80, "S", 0, time_s=float(second))
               for second in range(7)]
    assert not [w for w in _warnings(write(tmp_path / "seven.pcap", packets)) if "step" in w]
    packets.append(segment(CLIENT, SERVER, 40000, 80, "S", 0, time_s=7.0))
    assert [w for w in _warnings(write(tmp_path / "eight.pcap", packets))
            if w.startswith("timestamps step by 1 s:")]
    packets.append(segment(CLIENT, SERVER, 40000, 80, "S", 0, time_s=8.000003))
    assert not [w for w in _warnings(write(tmp_path / "nine.pcap", packets)) if "step" in w]


def _cut_to_milliseconds(source: Path, target: Path) -> Path:
    """A copy of a little-endian microsecond pcap, each record's time cut to its millisecond."""
    data = bytearray(source.read_bytes())
    assert data[:4] == bytes.fromhex("d4c3b2a1")
    at = 24
    while at < len(data):
        seconds, micros, kept, _ = struct.unpack_from("<IIII", data, at)
        struct.pack_into("<II", data, at, seconds, micros // 1000 * 1000)
        at += 16 + kept
    target.write_bytes(bytes(data))
    return target


def test_a_hold_under_a_millisecond_clock_is_not_proven(tmp_path: Path) -> None:
    """seed003-nagle.pcap with every time cut to its millisecond: the 39 delayed ACKs still
    come 40-44 ms after the data (frame 41, 41.0 ms after frame 40), but the held data, 22 us
    after each ACK in the real capture (frame 42), now shows in the ACK's millisecond or the
    next: the hold is likely, not proven. The same however the capture is analysed: whole, a
    batch of connections at a time, in parts, and beside another capture (which keeps its
    own, fine clock and its high confidence)."""
    cut = _cut_to_milliseconds(SAMPLE_TRACES / "seed003-nagle.pcap", tmp_path / "ms.pcap")
    analyses = {
        "whole": analyze_capture(str(cut)),
        "batches": analyze_in_batches(str(cut), None, 16_000_000),
        "parts": analyze_capture(str(cut), part_bytes=cut.stat().st_size // 3 + 1),
    }
    for how, analysis in analyses.items():
        assert analysis.capture.accounting.clock_step_us == 1000, how
        (stall,) = [f for f in analysis.findings if f.kind == NAGLE_DELACK_STALL]
        assert (stall.count, stall.confidence) == (39, "medium"), how
        assert stall.confidence_reasons[-1].startswith(
            "the capture's clock steps by 1 ms: the held data leaving right after the ACK"), how
    beside = _document(cut, SAMPLE_TRACES / "seed003-nagle.pcap")
    levels = {(f["capture"], f["kind"]): f["confidence"]["level"] for f in beside["findings"]}
    assert levels[(0, NAGLE_DELACK_STALL)] == "medium"
    assert levels[(1, NAGLE_DELACK_STALL)] == "high"


def test_a_wait_of_one_clock_step_is_not_measured() -> None:
    """krb__smb_gssapi.pcap: the server's answer (frame 8, .837625 s) one 15.625 ms step after
    the client's request (frame 7, .822000 s): a think time of anything from none to two
    steps."""
    analysis = analyze_capture(str(corpus_file("zeek/krb__smb_gssapi.pcap")))
    (think,) = [f for f in analysis.findings if f.kind == THINK_TIME]
    assert think.confidence == "low"
    assert think.confidence_reasons[-1] == (
        "the capture's clock steps by 15.625 ms: waits of 15.6 ms (median) are 1.0 of its "
        "steps, not measured")


def test_a_periodic_sender_alone_keeps_real_time() -> None:
    """spb_bpduv4.pcap: 25 BPDUs, each 2.000729-2.001078 s after the one before (a switch's
    hello timer, within 0.05 %), no TCP: evenly spaced, but nobody answered on the beat, so the
    times are not called set."""
    bpdus = corpus_file("tcpdump/spb_bpduv4.pcap")
    alone = _document(bpdus)["captures"]
    # Three small captures are analysed together (`batch.analyze_together`).
    beside = _document(bpdus, SAMPLE_TRACES / "seed003-nagle.pcap",
                       SAMPLE_TRACES / "mixed.pcap")["captures"]
    for capture in (alone[0], beside[0]):
        assert (capture["clock_spacing_us"], capture["clock_step_us"]) == (None, None)
        assert not [w for w in capture["warnings"] if "set by" in w]


def test_a_one_way_periodic_tcp_sender_keeps_real_time(tmp_path: Path) -> None:
    """Hand-built: ten 100-byte segments one way, each exactly 500 ms after the last (a sensor
    pushing readings, captured on one leg only): evenly spaced but never answered, so its times
    are not called set; the same with the receiver's ACK 500 ms after each, a conversation on
    one beat, are."""
    one_way = [segment(CLIENT, SERVER, 40000, 80, "PA", 1 + 100 * k, 1, 100, time_s=0.5 * k)
               for k in range(10)]
    assert _document(write(tmp_path / "one-way.pcap", one_way))["captures"][0][
        "clock_spacing_us"] is None
    both = []
    for k in range(5):
        both.append(segment(CLIENT, SERVER, 40000, 80, "PA", 1 + 100 * k, 1, 100, time_s=k))
        both.append(segment(SERVER, CLIENT, 80, 40000, "A", 1, 101 + 100 * k, time_s=k + 0.5))
    capture = _document(write(tmp_path / "both.pcap", both))["captures"][0]
    assert capture["clock_spacing_us"] == 500_000
    assert [w for w in capture["warnings"]
            if w.startswith("every packet comes 500 ms after the one before")]
