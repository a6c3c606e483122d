"""Connection ids are Wireshark's tcp.stream of the unfiltered capture, in every mode.

The expected ids are not the code's own: each is read from `tshark -T fields -e frame.number
-e tcp.stream` on the unfiltered file, for every packet the analysis kept. Users cross-check
a connection in Wireshark by its id (`tcp.stream == N`), so a mismatch on any packet fails.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from nagledetect import parts
from nagledetect.analysis import analyze_capture
from nagledetect.api import load_capture
from nagledetect.batch import analyze_together
from nagledetect.report.document import build_document, shown_ids
from nagledetect.sent_tables import rows_table
from tests.conftest import CORPORA, PROJECT, SAMPLE_TRACES, corpus_file, require_tool

CORPUS_SAMPLE_EVERY = 12
"""One corpus capture in this many (in name order) is compared: about 135 of 1,618, spread
over both corpora and every kind of capture in them."""
SSH = "zeek/ssh__ssh.pcap"
SSH_FILTER = "tcp port 22 and not port 1000"
"""Leaves out the capture's conversations 1, 4 and 19 (first frames 46, 200 and 904: ports
40184 -> 41644, 55179 -> 2200 and 51476 -> 8118, checked with tshark), so ids after them
would shift if they were counted filtered."""


def _tshark_streams(path: Path) -> dict[int, set[int]]:
    """tcp.stream by frame number, from tshark on the whole file (a frame with TCP inside
    ICMP or a tunnel may carry several)."""
    out = subprocess.run([require_tool("tshark"), "-r", str(path), "-T", "fields",
                          "-e", "frame.number", "-e", "tcp.stream"],
                         capture_output=True, text=True, check=True).stdout
    streams: dict[int, set[int]] = {}
    for line in out.splitlines():
        frame, _, values = line.partition("\t")
        if values:
            streams[int(frame)] = {int(value) for value in values.split(",")}
    return streams


def _mismatches(path: Path, bpf_filter: str | None = None) -> list[tuple[int, int, set[int]]]:
    """(frame, id, tshark's streams) of every kept packet whose connection id is not its
    tcp.stream."""
    capture = load_capture(str(path), bpf_filter)
    if not len(capture.packets):
        return []
    ids = shown_ids(rows_table(capture.connections))
    shown = ids[capture.packets["connection"].to_numpy()]
    expected = _tshark_streams(path)
    return [(frame, stream, expected.get(frame, set()))
            for frame, stream in zip(capture.packets["frame"].tolist(), shown.tolist())
            if stream not in expected.get(frame, set())]


def _corpus_sample() -> list[str]:
    files = sorted(str(path.relative_to(CORPORA)) for path in CORPORA.glob("*/*")
                   if path.suffix in (".pcap", ".pcapng"))
    return files[::CORPUS_SAMPLE_EVERY]


@pytest.mark.parametrize("name", sorted(path.name for path in SAMPLE_TRACES.glob("*.pcap*")))
def test_sample_trace_ids_are_tcp_stream(name: str) -> None:
    assert _mismatches(SAMPLE_TRACES / name) == []


@pytest.mark.parametrize("relative", _corpus_sample() or ["zeek/ssh__ssh.pcap"])
def test_corpus_ids_are_tcp_stream(relative: str) -> None:
    assert _mismatches(corpus_file(relative)) == []


def test_filtered_ids_are_those_of_the_unfiltered_file() -> None:
    path = corpus_file(SSH)
    capture = load_capture(str(path), SSH_FILTER)
    # tshark: conversations 1, 4 and 19 are the ones the filter drops (see SSH_FILTER)
    assert sorted(capture.connections["stream"].tolist()) == sorted(set(range(23)) - {1, 4, 19})
    assert _mismatches(path, SSH_FILTER) == []


def test_filter_that_drops_every_syn_keeps_tshark_ids() -> None:
    """Without SYNs the analysis cannot see where a conversation starts; the ids still are
    those of the unfiltered file, each connection's first kept packet being a later one."""
    assert _mismatches(corpus_file(SSH), "tcp[tcpflags] & tcp-syn == 0") == []


@pytest.mark.parametrize("sliced", [False, True], ids=["parts", "parts-by-slices"])
def test_filter_in_parts_keeps_tshark_ids(sliced: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    path = corpus_file(SSH)
    if sliced:
        monkeypatch.setattr(parts, "SLICED_PART_PACKETS", 0)
    split = analyze_capture(str(path), SSH_FILTER, part_bytes=os.path.getsize(path) // 5 + 1)
    document = build_document([split])
    assert document == build_document([analyze_capture(str(path), SSH_FILTER)])
    expected = _tshark_streams(path)
    assert len(document["connections"]) == 20  # 23 less the 3 SSH_FILTER drops
    for entry in document["connections"]:
        assert entry["id"] in expected[entry["first_frame"]]


def test_batched_captures_keep_their_own_tcp_stream(tmp_path: Path) -> None:
    paths = [corpus_file(SSH), SAMPLE_TRACES / "mixed.pcap", SAMPLE_TRACES / "seed003-nagle.pcap"]
    for bpf_filter in (None, SSH_FILTER):
        results = analyze_together([str(path) for path in paths], bpf_filter)
        for path, analysis in zip(paths, results):
            expected = _tshark_streams(path)
            table = rows_table(analysis.capture.connections)
            if bpf_filter and path != paths[0]:
                assert table.empty  # only ssh__ssh.pcap has port 22
                continue
            assert not table.empty
            for stream, first in zip(shown_ids(table).tolist(), table["first_frame"].tolist()):
                assert stream in expected[first]


def test_folder_run_ids_are_per_capture(tmp_path: Path) -> None:
    """The issue's case: in a folder run, ssh__ssh.pcap's tcp.stream 15 (frames 697...,
    tshark -Y tcp.stream==15) was shown as 882; it must be 15, beside its capture index."""
    folder = tmp_path / "captures"
    folder.mkdir()
    for path in (SAMPLE_TRACES / "mixed.pcap", SAMPLE_TRACES / "classic-stream.pcap",
                 corpus_file(SSH)):
        shutil.copy(path, folder / path.name)
    for jobs in ("1", "2"):
        out = subprocess.run(["python3", "-m", "nagledetect", "analyze", "--format", "json",
                              "-j", jobs, str(folder)], capture_output=True, text=True,
                             check=True, cwd=PROJECT, env={**os.environ, "PYTHONPATH": str(PROJECT)})
        document = json.loads(out.stdout)
        ssh = next(index for index, capture in enumerate(document["captures"])
                   if capture["path"].endswith("ssh__ssh.pcap"))
        entry = next(c for c in document["connections"]
                     if c["capture"] == ssh and c["first_frame"] == 697)
        assert entry["id"] == 15
        for index, capture in enumerate(document["captures"]):
            expected = _tshark_streams(Path(capture["path"]))
            ids = [(c["id"], c["first_frame"]) for c in document["connections"]
                   if c["capture"] == index]
            assert ids and all(stream in expected[first] for stream, first in ids)
            assert sorted(stream for stream, _ in ids) == list(np.arange(len(ids)))


@pytest.mark.parametrize("relative", [
    "zeek/mixed-vlan-mpls.pcap", "zeek/mpls-in-vlan.pcap", "zeek/tunnels__gre-sample.pcap",
    "zeek/tunnels__tunnel-direct-bypass.pcap", "zeek/tunnels__4in6.pcap",
    "zeek/tunnels__vxlan-encapsulated-http.pcap", "zeek/tunnels__geneve-47101.pcap",
    "tcpdump/geneve.pcap", "tcpdump/gso-ipv4-geneve-ipv6.pcap",
    "tcpdump/gso-ipv4-geneve-ipv4.pcap",  # Geneve from port 5799, below Geneve's own 6081
    "zeek/tunnels__gtp__gtp1_gn_normal_incl_fragmentation.pcap",  # GTP-U, some fragmented
    "zeek/tunnels__gtp__gtp2_different_udp_port.pcap",  # GTP-U from a port not its own
    "zeek/tunnels__gtp__gtp9_unknown_or_too_short_payload.pcap",  # some not IP inside
    "zeek/tunnels__gre-over-udp-4754.pcap", "zeek/pbb.pcap",
    "zeek/vntag_vlan_sandwich_clean.pcap", "zeek/snap-tcp.pcap", "zeek/dns-inverse-query.pcap",
    "zeek/nflog-http.pcap", "tcpdump/lspping-fec-ldp.pcap",
])
def test_tcp_in_tunnels_takes_wiresharks_streams(relative: str) -> None:
    """TCP inside MPLS, GRE, IP in IP, VXLAN, Geneve, GTP-U, 802.1ah, VN-Tag and LLC/SNAP
    is the inner connection's, as Wireshark numbers it: without it, every id after the first
    tunnelled connection was behind Wireshark's (mixed-vlan-mpls.pcap: stream 0 is TCP inside
    MPLS, frame 1)."""
    assert _mismatches(corpus_file(relative)) == []


@pytest.mark.parametrize("relative", [
    "zeek/ipv4__fragmented-3.pcap", "zeek/ipv4__fragmented-4.pcap",
    "zeek/ipv4__fragmented-syn.pcap", "zeek/erspan.pcap",
])
def test_fragmented_datagrams_take_wiresharks_frames_and_streams(relative: str) -> None:
    """A fragmented datagram's TCP is the frame's that completes it, as Wireshark puts it
    back together (ipv4__fragmented-4.pcap: frame 5, not the first fragment's frame 2; a
    datagram never completed has none), also where the fragments are a tunnel's outer
    packets (erspan.pcap: 16 frames of GRE in fragments)."""
    assert _mismatches(corpus_file(relative)) == []
    tcp = load_capture(str(corpus_file(relative))).packets["frame"].tolist()
    assert tcp == sorted(frame for frame, streams in _tshark_streams(corpus_file(relative)).items()
                         if streams)


def test_ipv4_mapped_ipv6_is_a_conversation_of_its_own(tmp_path: Path) -> None:
    """An IPv6 packet whose addresses are IPv4-mapped (::ffff:10.0.0.1) is held with the same
    address words as an IPv4 packet, but Wireshark counts it a conversation of its own: the
    same ports over both families are two connections, whole and in parts. Hand-built (no
    real stack sends both at once): tshark gives frames 1, 3, 5, 7 (IPv4) stream 0 and frames
    2, 4, 6, 8 (IPv6) stream 1."""
    from scapy.layers.inet import IP, TCP
    from scapy.layers.inet6 import IPv6
    from scapy.layers.l2 import Ether
    from scapy.utils import wrpcap

    def packet(network: object, client_sends: bool, flags: str, seq: int, ack: int,
               payload: int, time_s: float) -> Ether:
        ports = {"sport": 40000, "dport": 80} if client_sends else {"sport": 80, "dport": 40000}
        made = Ether() / network / TCP(flags=flags, seq=seq, ack=ack, window=1000, **ports)
        made = made / (b"x" * payload) if payload else made
        made.time = time_s
        return made

    families = ((IP, "10.0.0.1", "10.0.0.2"), (IPv6, "::ffff:10.0.0.1", "::ffff:10.0.0.2"))
    exchange = [(True, "S", 100, 0, 0), (False, "SA", 900, 101, 0), (True, "A", 101, 901, 0),
                (True, "PA", 101, 901, 10)]
    packets = [packet(layer(src=client, dst=server) if client_sends else
                      layer(src=server, dst=client), client_sends, flags, seq, ack, payload,
                      1.0 + step + 0.5 * index)
               for step, (client_sends, flags, seq, ack, payload) in enumerate(exchange)
               for index, (layer, client, server) in enumerate(families)]
    path = tmp_path / "mapped.pcap"
    wrpcap(str(path), packets)
    assert _mismatches(path) == []
    for split in (analyze_capture(str(path)), analyze_capture(str(path), part_bytes=200)):
        table = rows_table(split.capture.connections)
        assert shown_ids(table).tolist() == [0, 1]
        assert table["first_frame"].tolist() == [1, 2]
        assert table["packets_client_to_server"].tolist() == [3, 3]
