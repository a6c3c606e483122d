"""The lab: scenarios and manifests without root; one short real run where root and namespaces exist."""

from __future__ import annotations

import json
import os
import re
import shutil
import struct
import subprocess
from dataclasses import replace
from pathlib import Path

import pytest

from nagledetect.api import load_capture
from nagledetect.lab.delay_line import Rules, parse_tcp
from nagledetect.lab.netns import CLIENT_V4 as CLIENT
from nagledetect.lab.netns import SERVER_V4 as SERVER
from nagledetect.lab.netns import remove_stale
from nagledetect.lab.runner import _holder, build_manifest, peer_spec, run_scenario, shortened
from nagledetect.lab.scenarios import LINE_BYTES, SCENARIOS, article_sizes
from tests.conftest import SAMPLE_TRACES, lab_available, require_tool

SEED_NUMBER = re.compile(r"\bseeds?\s+\d", re.IGNORECASE)
"""The project's internal names for its source documents, which user-facing text must not use
(scenario names such as `seed003-nagle` are file names and may stay)."""


def test_every_scenario_says_what_it_shows_and_cites_documents_by_title() -> None:
    assert len(SCENARIOS) >= 12
    for scenario in SCENARIOS.values():
        assert scenario.flows and scenario.shows and scenario.description
        for text in (scenario.shows, scenario.description, scenario.expectation, scenario.source):
            assert not SEED_NUMBER.search(text), (scenario.name, text)
        if scenario.source:
            assert '"' in scenario.source, scenario.source  # a title, quoted


def test_the_declared_holder_is_the_side_that_writes_its_message_in_pieces() -> None:
    """Nagle can hold only a sender's later small segment: the declared holder is the side
    whose message the flows write in several pieces (or, for one write each way, the larger);
    the header-then-body server of the field report holds, the 15-write client does."""
    assert SCENARIOS["seed004-header-body"].holder == "server"
    assert SCENARIOS["seed003-nagle"].holder == "client"
    for scenario in SCENARIOS.values():
        if scenario.holder is not None:
            assert {_holder(flow) for flow in scenario.flows} == {scenario.holder}, scenario.name


def test_a_variant_goes_to_the_side_that_holds_unless_a_side_is_named() -> None:
    header_body = SCENARIOS["seed004-header-body"]
    nodelay = header_body.with_option("nodelay")
    assert nodelay.variant == ("nodelay", "server")
    assert all(flow.server_options == ("nodelay",) and not flow.client_options
               for flow in nodelay.flows)
    # TCP_QUICKACK acts on the side whose delayed ACK releases the hold: the holder's peer.
    assert header_body.with_option("quickack").variant == ("quickack", "client")
    assert SCENARIOS["seed003-nagle"].with_option("cork").variant == ("cork", "client")
    assert SCENARIOS["seed003-nagle"].with_option("quickack").variant == ("quickack", "server")
    named = header_body.with_option("nodelay", "client")
    assert named.variant == ("nodelay", "client") and named.name.endswith("+client-nodelay")


def test_lab_list_labels_scenarios_by_what_they_show() -> None:
    result = subprocess.run(["python3", "-m", "nagledetect", "lab", "list"], capture_output=True,
                            text=True, check=True)
    lines = result.stdout.splitlines()
    assert len(lines) == len(SCENARIOS)
    header_body = next(line for line in lines if line.startswith("seed004-header-body "))
    assert "header then body: the body held" in header_body and "server holds" in header_body
    for command in (["lab", "list"], ["lab", "--help"], ["lab", "run", "--help"]):
        text = subprocess.run(["python3", "-m", "nagledetect", *command], capture_output=True,
                              text=True, check=True).stdout
        assert not SEED_NUMBER.search(text), (command, SEED_NUMBER.search(text))


def test_line_by_line_articles_split_into_72_byte_writes() -> None:
    flow = SCENARIOS["seed000-nntp-lines"].flows[0]
    size = flow.response_sizes_bytes[0]
    writes = flow.server_writes_for(0)
    assert sum(writes) == size and max(writes) == LINE_BYTES
    assert SCENARIOS["seed000-nntp-whole"].flows[0].server_writes_for(0) == [size]


def test_article_sizes_are_reproducible_and_bounded() -> None:
    sizes = article_sizes(200)
    assert sizes == article_sizes(200)
    assert min(sizes) >= 300 and max(sizes) <= 60_000


def test_variant_adds_the_option_to_every_flow() -> None:
    """`mixed` has holders on both sides, so it declares none and a variant goes to the client."""
    variant = SCENARIOS["mixed"].with_option("cork")
    assert all("cork" in flow.client_options for flow in variant.flows)


def test_manifest_counts_stalls_beyond_think_time_and_pacing(tmp_path) -> None:
    scenario = shortened(SCENARIOS["trap-think-40ms"], 3)
    exchanges = [{"index": i, "start_s": 1.0 + i, "latency_s": latency, "client_writes_bytes": [30],
                  "server_writes_bytes": [30], "think_time_s": 0.04, "pause_before_s": 0.0}
                 for i, latency in enumerate((0.0405, 0.0411, 0.0820))]
    results = [{"flow": "think", "client": "10.77.0.1:5000", "server": "10.77.0.2:9000",
                "exchanges": exchanges}]
    manifest = build_manifest(scenario, tmp_path / "x.pcap", results)
    expected = manifest["connections"][0]["expected"]
    assert expected["slow_exchanges"] == 1  # only the 82 ms exchange exceeds 40 ms + 10 ms
    assert expected["excess_ms_total"] == pytest.approx(42.0 + 0.5 + 1.1)  # less the think time
    # One write each way on Linux: Nagle holds nothing, so the slow exchange is no stall.
    assert (expected["nagle_stalls"], expected["stall_ms_total"]) == (0, 0)
    assert manifest["schema"] == "nagledetect-lab/1"
    assert "variant" not in manifest
    assert "variant" in build_manifest(scenario.with_option("nodelay"), tmp_path / "v.pcap", results)


def test_a_message_written_whole_is_never_held_by_linuxs_nagle(tmp_path) -> None:
    """A well-buffered RPC (one write each way) over a 50 ms path, as recorded: its exchanges
    take 50.5-52.5 ms, one 120.2 ms (a loaded machine, or the window). Slow, but no Nagle
    stall: Linux holds a small segment only while an earlier small one is unacknowledged. The
    same slow exchange where the client writes in two pieces is a stall."""
    latencies = (0.0505, 0.0525, 0.1202)
    results = [{"flow": "rpc", "client": "10.77.0.1:5000", "server": "10.77.0.2:9000",
                "exchanges": [{"index": i, "start_s": 1.0 + i, "latency_s": latency,
                               "client_writes_bytes": [200], "server_writes_bytes": [1000],
                               "think_time_s": 0.0, "pause_before_s": 0.0}
                              for i, latency in enumerate(latencies)]}]
    scenario = replace(shortened(SCENARIOS["trap-rpc"], 3), rtt_ms=50.0)
    whole = build_manifest(scenario, tmp_path / "a.pcap", results)["connections"][0]["expected"]
    assert (whole["slow_exchanges"], whole["nagle_stalls"], whole["clean"]) == (1, 0, True)
    pieces = replace(scenario, flows=(replace(
        scenario.flows[0], client_writes_bytes=(100, 100)),))
    held = build_manifest(pieces, tmp_path / "b.pcap", results)["connections"][0]["expected"]
    assert (held["slow_exchanges"], held["nagle_stalls"]) == (1, 1)


def test_a_slow_exchange_with_nagle_off_is_no_nagle_stall(tmp_path) -> None:
    """With TCP_NODELAY or TCP_CORK on the side that writes in pieces, Nagle holds nothing: an
    exchange slower than its think time and path (a loaded machine) is counted slow, not a
    stall (a mixed recording over 25 ms once showed one such exchange of its NODELAY flow)."""
    exchanges = [{"index": i, "start_s": 1.0 + i, "latency_s": latency,
                  "client_writes_bytes": [2] * 15, "server_writes_bytes": [2],
                  "client_waits_s": [0.0] * 14, "think_time_s": 0.0, "pause_before_s": 0.0}
                 for i, latency in enumerate((0.0004, 0.0003, 0.0450))]
    results = [{"flow": "tiny-writes", "client": "10.77.0.1:5000", "server": "10.77.0.2:9000",
                "exchanges": exchanges}]
    scenario = shortened(SCENARIOS["seed003-nagle"], 3)
    held = build_manifest(scenario, tmp_path / "a.pcap", results)["connections"][0]["expected"]
    assert (held["slow_exchanges"], held["nagle_stalls"]) == (1, 1)
    for option in ("nodelay", "cork"):
        off = build_manifest(scenario.with_option(option), tmp_path / f"{option}.pcap", results)
        expected = off["connections"][0]["expected"]
        assert (expected["slow_exchanges"], expected["nagle_stalls"], expected["clean"]) == (
            1, 0, True)


def test_peer_spec_has_one_pause_list_per_connection() -> None:
    spec = peer_spec(SCENARIOS["mixed"])
    for flow in spec["flows"]:
        assert len(flow["pauses_s"]) == flow["connections"]
        assert flow["pauses_s"][0][0] == 0.0




@pytest.mark.skipif(not lab_available(), reason="needs root, tcpdump, ethtool and network namespaces")
def test_short_real_run_shows_40_ms_stalls_with_nagle_and_none_with_nodelay(tmp_path) -> None:
    nagle = run_scenario(shortened(SCENARIOS["seed003-nagle"], 6), tmp_path, "nagle")
    nodelay = run_scenario(shortened(SCENARIOS["seed003-nodelay"], 6), tmp_path, "nodelay")
    latencies = [e["latency_s"] for e in nagle["connections"][0]["exchanges"]]
    assert all(0.030 < latency < 0.1 for latency in latencies[1:])  # Linux delayed ACK: ~40 ms
    assert nagle["connections"][0]["expected"]["nagle_stalls"] >= 4
    assert nodelay["connections"][0]["expected"]["nagle_stalls"] == 0
    assert (tmp_path / "nagle.pcap").stat().st_size > 0
    listing = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    assert "ndlab-" not in listing  # torn down


def _header_to_body_gaps_ms(capture: Path) -> list[float]:
    """Per exchange, how long after the server's 6-byte header its 276-byte body first left
    (tshark's frame times, an independent reader). A body sent again (a retransmission on a
    loaded machine, once in a full run of the suite) is not another exchange."""
    rows = _tshark_rows(capture, "tcp.srcport == 9000 && tcp.len > 0", "frame.time_relative",
                        "tcp.len")
    gaps, header_s = [], None
    for time_s, length in rows:
        if length == "6":
            header_s = float(time_s)
        elif length == "276" and header_s is not None:
            gaps.append((float(time_s) - header_s) * 1000)
            header_s = None
    return gaps


@pytest.mark.skipif(not lab_available(), reason="needs root, tcpdump, ethtool and network namespaces")
def test_header_body_variant_sets_nodelay_on_the_server_and_the_body_leaves_at_once(tmp_path) -> None:
    """The field report's case: the server holds its body behind its header. The variant's
    TCP_NODELAY goes on the server by default; in the capture the body then follows the header
    as soon as the server writes it (tens of microseconds on a quiet machine), where without it
    the body waits about 40 ms for the client's ACK. The bound is 10 ms, a quarter of that
    timer: a loaded machine can deschedule the server between its two writes for a few
    milliseconds (once over 1 ms in a full run of the suite beside other work)."""
    result = subprocess.run(["python3", "-m", "nagledetect", "lab", "run", "seed004-header-body",
                             "-o", str(tmp_path), "--exchanges", "6", "--variant", "nodelay"],
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert "TCP_NODELAY on the server (the side that holds): 5 stalls" in result.stdout
    assert result.stdout.rstrip().endswith("-> 0 stalls, 0 s")
    variant = json.loads((tmp_path / "seed004-header-body+server-nodelay.json").read_text())
    assert variant["variant"] == {"option": "TCP_NODELAY", "side": "server"}
    assert variant["connections"][0]["server_options"] == ["TCP_NODELAY"]
    held = _header_to_body_gaps_ms(tmp_path / "seed004-header-body.pcap")
    sent = _header_to_body_gaps_ms(tmp_path / "seed004-header-body+server-nodelay.pcap")
    assert len(held) == len(sent) == 6
    assert all(30 < gap_ms < 100 for gap_ms in held[1:])  # the first: quick-ACK mode
    assert all(gap_ms < 10 for gap_ms in sent), sent


@pytest.mark.skipif(not lab_available(), reason="needs root, tcpdump, ethtool and network namespaces")
def test_a_variant_on_the_side_that_does_not_hold_saves_nothing(tmp_path) -> None:
    """TCP_NODELAY on the client of the header-then-body exchange: the client sends its
    request in one write, so there is nothing for it to stop holding; the server still holds."""
    result = subprocess.run(["python3", "-m", "nagledetect", "lab", "run", "seed004-header-body",
                             "-o", str(tmp_path), "--exchanges", "6", "--variant", "nodelay",
                             "--side", "client"], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    line = result.stdout.splitlines()[-1]
    assert line.startswith("TCP_NODELAY on the client (not the side that holds: that is the "
                           "server): 5 stalls")
    assert "-> 5 stalls" in line
    gaps_ms = _header_to_body_gaps_ms(tmp_path / "seed004-header-body+client-nodelay.pcap")
    assert all(30 < gap_ms < 100 for gap_ms in gaps_ms[1:])


def test_lab_refuses_without_root_in_one_line() -> None:
    if os.geteuid() == 0:
        pytest.skip("running as root")
    result = subprocess.run(["python3", "-m", "nagledetect", "lab", "run", "seed003-nagle", "-o",
                             "/tmp/x"], capture_output=True, text=True)
    assert result.returncode == 2 and len(result.stderr.strip().splitlines()) == 1


def test_committed_manifests_match_their_captures() -> None:
    """Every sample trace has a manifest, and each manifest connection is in the capture
    (checked with tcpdump, an independent reader)."""
    tcpdump = shutil.which("tcpdump")
    manifests = sorted(SAMPLE_TRACES.glob("*.json"))
    assert len(manifests) >= 12
    for path in manifests:
        manifest = json.loads(path.read_text())
        capture = SAMPLE_TRACES / manifest["capture"]["file"]
        assert capture.exists(), capture
        if not tcpdump:
            continue
        text = subprocess.run([tcpdump, "-n", "-r", str(capture)], capture_output=True,
                              text=True).stdout
        for connection in manifest["connections"]:
            client = connection["client"].replace("[", "").replace("]", "")
            address, port = client.rsplit(":", 1)
            assert f"{address}.{port} >" in text, (path.name, client)


def test_sample_traces_stay_small() -> None:
    total = sum(p.stat().st_size for p in Path(SAMPLE_TRACES).glob("*.pcap"))
    assert total < 8 * 1024 * 1024


def test_readme_table_is_rebuilt_from_the_manifests(tmp_path) -> None:
    from nagledetect.lab.samples import write_readme

    for manifest in SAMPLE_TRACES.glob("seed003-*.json"):
        (tmp_path / manifest.name).write_text(manifest.read_text())
    write_readme(tmp_path)
    table = (tmp_path / "README.md").read_text()
    assert ("| `seed003-nagle.pcap` | many small writes held: ~40 ms stalls | client | client |"
            in table)
    assert '"TCP_NODELAY and Small Buffer Writes"' in table
    assert not SEED_NUMBER.search(table)
    assert "39 of 40 exchanges stalled" in table  # the manifest's client-measured count
    assert "trap-rpc" not in table


# The delay line and the captures recorded through it. Packet facts below are read with tshark
# (an independent reader); the values they are compared with are the manifests' (what the
# application and the delay line themselves recorded) or the scenario's own settings.

def _tshark_rows(capture: Path, display_filter: str, *fields: str,
                 relative: bool = False) -> list[list[str]]:
    """tshark's fields for the frames the filter keeps; sequence numbers raw unless relative."""
    tshark = require_tool("tshark")
    command = [tshark, "-r", str(capture),
               "-o", f"tcp.relative_sequence_numbers:{'TRUE' if relative else 'FALSE'}",
               "-Y", display_filter, "-T", "fields", *[part for f in fields for part in ("-e", f)]]
    output = subprocess.run(command, capture_output=True, text=True, check=True).stdout
    return [line.split("\t") for line in output.splitlines() if line]


def _pcap_frames(capture: Path) -> list[bytes]:
    """Every frame's captured bytes, from a classic little-endian microsecond pcap."""
    data = capture.read_bytes()
    assert struct.unpack_from("<I", data)[0] == 0xA1B2C3D4
    frames, offset = [], 24
    while offset < len(data):
        captured = struct.unpack_from("<IIII", data, offset)[2]
        frames.append(data[offset + 16:offset + 16 + captured])
        offset += 16 + captured
    return frames


def _handshake_rtt_ms(capture: Path) -> list[float]:
    """Every connection's handshake round trip as tshark measures it at any tap
    (`tcp.analysis.initial_rtt`: the SYN to the client's ACK of the SYN/ACK)."""
    rows = _tshark_rows(capture, "tcp.analysis.initial_rtt", "tcp.stream",
                        "tcp.analysis.initial_rtt")
    return [float(rtt) * 1000 for rtt in dict(rows).values()]


DELAY_LINE_MANIFESTS = [path for path in sorted(SAMPLE_TRACES.glob("*.json"))
                        if "path" in json.loads(path.read_text())]


def test_delay_line_reads_tcp_headers_as_tshark_does() -> None:
    capture = SAMPLE_TRACES / "rtt-hold.pcap"
    parsed = [parse_tcp(frame) for frame in _pcap_frames(capture)]
    rows = _tshark_rows(capture, "frame", "tcp.flags", "tcp.seq", "tcp.ack", "tcp.len",
                        "tcp.srcport", "tcp.dstport")
    assert len(parsed) == len(rows) > 100
    for tcp, row in zip(parsed, rows):
        if not row[0]:
            assert tcp is None  # ARP, IPv6 neighbour discovery
            continue
        assert tcp is not None
        assert (tcp.flags, tcp.seq, tcp.ack, tcp.payload_bytes, tcp.src_port, tcp.dst_port) == (
            int(row[0], 16), int(row[1]), int(row[2]), int(row[3]), int(row[4]), int(row[5]))


def test_delay_line_rules_act_on_the_nth_frame_of_their_kind() -> None:
    """Fed the client's frames of rtt-hold.pcap in order, a rule dropping data segment 1 to
    the server drops the first request's 100-byte tail (tshark: frame 7, seq 1449, 100
    bytes, the second client segment with data) and holds back nothing else."""
    capture = SAMPLE_TRACES / "rtt-hold.pcap"
    rules = Rules([{"direction": "to_server", "match": "data", "frames": [1], "action": "drop"},
                   {"direction": "to_server", "match": "syn", "frames": [0], "action": "hold",
                    "extra_ms": 300}])
    decisions = []
    for frame in _pcap_frames(capture):
        tcp = parse_tcp(frame)
        if tcp is not None and tcp.dst_port == 9000:
            decisions.append((tcp, rules.extra_delay_s("to_server", tcp, 0.0)))
    dropped = [tcp for tcp, extra in decisions if extra is None]
    held = [(tcp, extra) for tcp, extra in decisions if extra]
    assert [(t.seq & 0xFFFF_FFFF, t.payload_bytes) for t in dropped] == [(dropped[0].seq, 100)]
    assert [t.kind for t, _ in held] == ["syn"] and held[0][1] == 0.3
    first_data = next(t for t, _ in decisions if t.payload_bytes)
    assert dropped[0].seq == first_data.seq + 1448
    assert [entry["action"] for entry in rules.log] == ["hold", "drop"]


@pytest.mark.parametrize("manifest_path", DELAY_LINE_MANIFESTS,
                         ids=[p.stem for p in DELAY_LINE_MANIFESTS])
def test_the_handshake_shows_the_round_trip_the_manifest_names(manifest_path: Path) -> None:
    """The SYN to SYN/ACK time at the client's tap is the delay line's round trip, give or take
    6 ms; the classic peer (scapy) answers a SYN on its 200 ms tick, so its handshakes only
    bound the path from above (classic-phase-lock-80ms-path: 186.6-199.7 ms), and its
    connections' round trip is their quickest answer (the CONNECTIONS table: 81.7-82.3 ms)."""
    manifest = json.loads(manifest_path.read_text())
    capture = SAMPLE_TRACES / manifest["capture"]["file"]
    rtts_ms = _handshake_rtt_ms(capture)
    assert rtts_ms
    path_ms = manifest["path"]["rtt_ms"]
    ticking = any(c["stack"] == "scapy-classic" for c in manifest["connections"])
    for rtt_ms in rtts_ms:
        assert path_ms <= rtt_ms <= (path_ms + 200 if ticking else path_ms + 6), rtts_ms
    if ticking:
        connections = load_capture(str(capture)).connections
        assert all(path_ms <= rtt <= path_ms + 6 for rtt in connections["rtt_ms"])


def test_rtt_hold_tails_leave_right_after_the_ordinary_ack_one_round_trip_later() -> None:
    """rtt-hold.pcap, checked with tshark: every 50-byte segment leaves within 1 ms of a server
    ACK that covers everything before it, one round trip (60 ms) after the 100-byte segment;
    that ACK answers the request's two segments at once (no delayed ACK: it comes one round
    trip after them, not 40 ms later)."""
    capture = SAMPLE_TRACES / "rtt-hold.pcap"
    rows = _tshark_rows(capture, "tcp.port == 9000", "frame.time_epoch", "ip.src", "tcp.seq",
                        "tcp.ack", "tcp.len")
    manifest = json.loads((SAMPLE_TRACES / "rtt-hold.json").read_text())
    rtt_ms = manifest["path"]["rtt_ms"]
    tails = [i for i, row in enumerate(rows) if row[1] == CLIENT and row[4] == "50"]
    assert len(tails) == manifest["summary"]["exchanges"] == 20
    for index in tails:
        time_s, seq = float(rows[index][0]), int(rows[index][2])
        ack = rows[index - 1]
        assert ack[1] == SERVER and int(ack[3]) == seq
        assert (time_s - float(ack[0])) * 1000 < 1
        small = max(i for i in range(index) if rows[i][1] == CLIENT and rows[i][4] == "100")
        assert rtt_ms - 2 <= (time_s - float(rows[small][0])) * 1000 <= rtt_ms + 6
    for exchange in manifest["connections"][0]["exchanges"]:
        assert 2 * rtt_ms <= exchange["latency_s"] * 1000 <= 2 * rtt_ms + 15


def test_remote_header_body_bodies_come_one_round_trip_after_the_clients_ack() -> None:
    """remote-header-body.pcap, at the client: each 276-byte body arrives one round trip
    (80 ms) after the client's pure ACK of the 6-byte header that released it; after the
    first exchange (quick-ACK mode) that ACK is delayed about 40 ms (checked with tshark)."""
    capture = SAMPLE_TRACES / "remote-header-body.pcap"
    rows = _tshark_rows(capture, "tcp.port == 9000", "frame.time_epoch", "ip.src", "tcp.len",
                        "tcp.ack")
    bodies = [i for i, row in enumerate(rows) if row[1] == SERVER and row[2] == "276"]
    assert len(bodies) == 30
    delayed_acks_ms = []
    for index in bodies:
        header = max(i for i in range(index) if rows[i][1] == SERVER and rows[i][2] == "6")
        ack = next(i for i in range(header, index) if rows[i][1] == CLIENT and rows[i][2] == "0")
        assert 78 <= (float(rows[index][0]) - float(rows[ack][0])) * 1000 <= 86
        delayed_acks_ms.append((float(rows[ack][0]) - float(rows[header][0])) * 1000)
    assert delayed_acks_ms[0] < 1
    assert all(30 <= delay <= 50 for delay in delayed_acks_ms[1:]), delayed_acks_ms


@pytest.mark.parametrize("name", ["paced-40ms", "paced-40ms-nodelay"])
def test_paced_writes_record_the_real_waits_and_write_times(name: str) -> None:
    """Each exchange's second write came 38-45 ms (plus the sleep's overshoot) after the first,
    as the client measured; in the capture (tshark) each write's segment leaves at most 10 ms
    after the write, and at once (under 1 ms) with TCP_NODELAY: Nagle held nothing longer."""
    manifest = json.loads((SAMPLE_TRACES / f"{name}.json").read_text())
    rows = _tshark_rows(SAMPLE_TRACES / f"{name}.pcap", f"ip.src == {CLIENT} && tcp.len == 2",
                        "frame.time_epoch")
    sent_s = [float(row[0]) for row in rows]
    exchanges = manifest["connections"][0]["exchanges"]
    limit_ms = 1 if name.endswith("nodelay") else 10
    for exchange in exchanges:
        assert 0.038 <= exchange["client_waits_s"][0] <= 0.065
        for write_s in exchange["client_write_times_s"]:
            leaves_s = min(t for t in sent_s if t >= write_s - 0.0005)
            assert (leaves_s - write_s) * 1000 <= limit_ms
    assert len(sent_s) == 2 * len(exchanges) == 60


@pytest.mark.skipif(not lab_available(), reason="needs root, tcpdump, ethtool and network namespaces")
def test_the_delay_line_gives_a_real_round_trip(tmp_path) -> None:
    scenario = replace(shortened(SCENARIOS["remote-header-body"], 3), rtt_ms=40.0)
    manifest = run_scenario(scenario, tmp_path, "remote")
    rtts_ms = _handshake_rtt_ms(tmp_path / "remote.pcap")
    assert len(rtts_ms) == 1 and 40 <= rtts_ms[0] <= 46
    assert manifest["path"]["one_way_delay_ms"] == 20
    assert all(e["latency_s"] >= 0.08 for e in manifest["connections"][0]["exchanges"])
    listing = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    assert "ndlab-" not in listing


@pytest.mark.skipif(not lab_available(), reason="needs root, tcpdump, ethtool and network namespaces")
def test_the_delay_lines_jitter_varies_the_round_trip_without_reordering(tmp_path) -> None:
    """A 20 ms round trip with up to 10 ms more each way. Each exchange of seed003-nagle
    crosses the path four times (the first write out and the server's delayed ACK of it back,
    about 40 ms late; the held writes out and the answer back), so its latency is about 80 ms
    and up to 40 ms more (more on a loaded machine: bounded loosely here); without jitter the
    latencies agree within a few ms. tshark, an
    independent reader, finds no segment out of order or retransmitted: the jitter delays a
    direction's frames in their order, as a queue does."""
    scenario = replace(shortened(SCENARIOS["seed003-nagle"], 12), rtt_ms=20.0, jitter_ms=10.0)
    manifest = run_scenario(scenario, tmp_path, "jitter")
    assert manifest["path"]["jitter_ms"] == 10.0
    latencies_ms = [e["latency_s"] * 1000 for e in manifest["connections"][0]["exchanges"][1:]]
    assert all(75 <= latency <= 200 for latency in latencies_ms), latencies_ms
    assert max(latencies_ms) - min(latencies_ms) >= 5, latencies_ms
    rtts_ms = _handshake_rtt_ms(tmp_path / "jitter.pcap")
    assert len(rtts_ms) == 1 and 20 <= rtts_ms[0] <= 60
    assert _tshark_rows(tmp_path / "jitter.pcap",
                        "tcp.analysis.out_of_order || tcp.analysis.retransmission",
                        "frame.number") == []


def _manifest(name: str) -> dict:
    return json.loads((SAMPLE_TRACES / f"{name}.json").read_text())


def test_rto_the_drops_happened_and_the_timeout_backed_off() -> None:
    """cause-rto.pcap (tshark, at the client): the third request (seq 201) leaves four times,
    the delay line's log names the first three as dropped, the gaps between them grow (a
    tail-loss probe, an RTO, the RTO doubled), and the answer comes one round trip after the
    fourth; the client measured that exchange as the time from its request to the answer."""
    manifest = _manifest("cause-rto")
    rows = _tshark_rows(SAMPLE_TRACES / "cause-rto.pcap", "tcp.len > 0", "frame.time_epoch",
                        "ip.src", "tcp.seq", "tcp.ack")
    dropped = manifest["path"]["acted"]
    assert [entry["action"] for entry in dropped] == ["drop"] * 3
    assert len({entry["seq"] for entry in dropped}) == 1
    sends_s = [float(row[0]) for row in rows if row[1] == CLIENT and int(row[2]) == dropped[0]["seq"]]
    assert len(sends_s) == 4
    gaps_ms = [(b - a) * 1000 for a, b in zip(sends_s, sends_s[1:])]
    assert 200 <= gaps_ms[0] and 200 <= gaps_ms[1] and gaps_ms[2] >= 1.8 * gaps_ms[1], gaps_ms
    answer_s = next(float(row[0]) for row in rows if row[1] == SERVER and float(row[0]) > sends_s[-1])
    assert 20 <= (answer_s - sends_s[-1]) * 1000 <= 26
    exchange = manifest["connections"][0]["exchanges"][2]
    assert abs(exchange["latency_s"] - (answer_s - sends_s[0])) < 0.005
    expected = manifest["connections"][0]["expected"]
    assert (expected["slow_exchanges"], expected["nagle_stalls"]) == (1, 0)  # slow, not Nagle


def test_spurious_retransmissions_are_answered_by_d_sacks() -> None:
    """cause-spurious.pcap (tshark): the only retransmissions are the client's, three in all
    (one on port 9000, two on 9001), each of data the server already had, as its D-SACK for
    the same bytes says; the ACK the delay line dropped is not in the capture, the two it held
    arrive 500 ms late (duplicate ACKs then)."""
    capture = SAMPLE_TRACES / "cause-spurious.pcap"
    retransmitted = _tshark_rows(capture, "tcp.analysis.retransmission", "ip.src", "tcp.dstport",
                                 "tcp.seq", "tcp.len")
    assert sorted(row[1] for row in retransmitted) == ["9000", "9001", "9001"]
    assert {row[0] for row in retransmitted} == {CLIENT}
    dsacks = _tshark_rows(capture, "tcp.options.sack.dsack_le", "tcp.srcport",
                          "tcp.options.sack.dsack_le", "tcp.options.sack.dsack_re")
    assert sorted(row[0] for row in dsacks) == ["9000", "9001", "9001"]
    for row in retransmitted:
        assert [row[1], row[2], str(int(row[2]) + int(row[3]))] in [r[:3] for r in dsacks]
    acted = _manifest("cause-spurious")["path"]["acted"]
    assert sorted((a["action"], a["src_port"]) for a in acted) == [
        ("drop", 9000), ("hold", 9001), ("hold", 9001)]


def _zero_windows(name: str) -> list[list[str]]:
    return _tshark_rows(SAMPLE_TRACES / f"{name}.pcap", f"ip.src == {SERVER} && tcp.flags.syn == 0",
                        "frame.time_epoch", "tcp.window_size")


def test_zero_window_reopens_when_the_reader_starts() -> None:
    """cause-zero-window-reopens.pcap (tshark): the server's window is 0 from its first zero
    window until about 1.5 s after the connection (the reader's pause), the client probing
    meanwhile (at 0.2 s and 0.4 s of backoff: two probes before the reader wakes); then it
    reopens and all 65,536 bytes are acknowledged."""
    manifest = _manifest("cause-zero-window-reopens")
    start_s = manifest["connections"][0]["exchanges"][0]["start_s"]
    rows = _zero_windows("cause-zero-window-reopens")
    first_zero = next(i for i, row in enumerate(rows) if row[1] == "0")
    reopen = next(i for i in range(first_zero, len(rows)) if rows[i][1] != "0")
    assert 1.45 <= float(rows[reopen][0]) - start_s <= 1.65
    probes = _tshark_rows(SAMPLE_TRACES / "cause-zero-window-reopens.pcap",
                          f"ip.src == {CLIENT} && tcp.analysis.keep_alive", "frame.time_epoch")
    assert len(probes) >= 2
    acks = _tshark_rows(SAMPLE_TRACES / "cause-zero-window-reopens.pcap",
                        f"ip.src == {SERVER}", "tcp.ack", relative=True)
    assert max(int(row[0]) for row in acks) >= 65536


def test_zero_window_that_never_reopens_ends_in_the_clients_reset() -> None:
    """cause-zero-window-stuck.pcap (tshark): after the window first closes the server never
    opens it again; the client's probes back off (each gap longer than the one before) and its
    RST comes when the manifest says the client aborted."""
    manifest = _manifest("cause-zero-window-stuck")
    rows = _zero_windows("cause-zero-window-stuck")
    first_zero = next(i for i, row in enumerate(rows) if row[1] == "0")
    assert all(row[1] == "0" for row in rows[first_zero:])
    probes_s = [float(row[0]) for row in _tshark_rows(
        SAMPLE_TRACES / "cause-zero-window-stuck.pcap",
        f"ip.src == {CLIENT} && tcp.analysis.keep_alive", "frame.time_epoch")]
    gaps_s = [b - a for a, b in zip(probes_s, probes_s[1:])]
    assert len(probes_s) >= 4 and all(b > 1.5 * a for a, b in zip(gaps_s, gaps_s[1:])), gaps_s
    resets = _tshark_rows(SAMPLE_TRACES / "cause-zero-window-stuck.pcap",
                          f"ip.src == {CLIENT} && tcp.flags.reset == 1", "frame.time_epoch")
    assert len(resets) == 1
    assert abs(float(resets[0][0]) - manifest["connections"][0]["aborted_s"]) < 0.05


def test_slow_reader_keeps_the_window_small_for_the_whole_transfer() -> None:
    """cause-window-limited.pcap (tshark): the server never offers more than its 4 KB buffer
    allows, and the 32 KB take about as long as the reader's 64 reads of 512 bytes 20 ms
    apart (1.28 s), not the fraction of a millisecond the link would need."""
    rows = _zero_windows("cause-window-limited")
    assert max(int(row[1]) for row in rows) <= 4096
    acks = _tshark_rows(SAMPLE_TRACES / "cause-window-limited.pcap", f"ip.src == {SERVER}",
                        "frame.time_epoch", "tcp.ack", relative=True)
    done_s = next(float(row[0]) for row in acks if int(row[1]) >= 32769)
    start_s = _manifest("cause-window-limited")["connections"][0]["exchanges"][0]["start_s"]
    assert 1.0 <= done_s - start_s <= 1.6


def test_unanswered_syns_are_retransmitted_until_the_client_gives_up() -> None:
    """cause-syn-unanswered.pcap (tshark): each connection the manifest says was never
    answered sends 7 SYNs (the first and 6 retransmissions), none answered, the last before
    the client gave up; the connection on port 9001 has its SYN/ACK (both directions seen)."""
    manifest = _manifest("cause-syn-unanswered")
    syns = _tshark_rows(SAMPLE_TRACES / "cause-syn-unanswered.pcap", "tcp.flags.syn == 1",
                        "frame.time_epoch", "tcp.srcport", "tcp.dstport", "tcp.flags.ack")
    unanswered = [c for c in manifest["connections"] if "connect" in c]
    assert len(unanswered) == 2
    for connection in unanswered:
        port = connection["client"].rsplit(":", 1)[1]
        sent_s = [float(row[0]) for row in syns if row[1] == port]
        assert len(sent_s) == 7
        assert not [row for row in syns if row[2] == port]  # no SYN/ACK back
        assert connection["connect"]["started_s"] - 0.01 <= sent_s[0]
        assert sent_s[-1] <= connection["connect"]["gave_up_s"]
    assert [row for row in syns if row[1] == "9001" and row[3] in ("1", "True")]


@pytest.mark.skipif(not lab_available(), reason="needs root, tcpdump, ethtool and network namespaces")
def test_stale_namespaces_go_and_a_running_labs_stay() -> None:
    """A lab's namespaces are named after its process: the clean-up before a lab removes
    those of a process that is gone (a run killed before it could clean up), never those of
    a lab another process runs at the same time (two test workers, two users)."""
    gone = subprocess.Popen(["true"])
    gone.wait()
    mine, stale = f"ndlab-c{os.getpid()}", f"ndlab-c{gone.pid}"
    for name in (mine, stale):
        subprocess.run(["ip", "netns", "add", name], capture_output=True, check=True)
    try:
        remove_stale()
        listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
        names = {line.split()[0] for line in listed.splitlines() if line.split()}
        assert mine in names and stale not in names
    finally:
        for name in (mine, stale):
            subprocess.run(["ip", "netns", "del", name], capture_output=True)
