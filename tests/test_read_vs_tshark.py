"""Decoding checked field by field against tshark on real captures of every supported link type.

tshark is an independent decoder, so agreement on every frame is the hand check: the expected
values are tshark's, never this project's own output.
"""

from __future__ import annotations

import subprocess
from decimal import Decimal

import pandas as pd
import pytest

from nagledetect import load_capture
from nagledetect.events.endpoints import endpoint
from tests.conftest import corpus_file, require_tool

CAPTURES = [
    "zeek/smb__smb2.pcap",                     # Ethernet, a 1.5 MB SMB2 transfer
    "zeek/http-qinq-0.pcap",                   # Ethernet, 802.1ad + 802.1Q (QinQ)
    "zeek/vlan-qinqinq.pcap",                  # Ethernet, three stacked VLAN tags
    "zeek/pppoe-over-qinq.pcap",               # Ethernet, QinQ, then a PPPoE session (IPv4)
    "tcpdump/mptcp-v1.pcap",                   # Linux cooked (SLL), MPTCP options
    "zeek/tls__irc-starttls.pcap",             # Linux cooked (SLL)
    "zeek/tls__openjdk-25.0.2-zeek.org.pcap",  # Linux cooked v2 (SLL2)
    "zeek/tcp-syslog.pcap",                    # raw IPv4 (link type 228)
    "zeek/rotation.pcap",                      # raw IP (link type 101)
    "zeek/redis__pubsub.pcap",                 # BSD null/loopback
    "zeek/ipv6-http-atomic-frag.pcap",         # IPv6 with an atomic fragment extension header
    "tcpdump/bigtcp-ipv6-hbh.pcap",            # IPv6 hop-by-hop jumbo payload (BIG TCP)
    # TCP inside tunnels: the inner packet's fields (each field's last occurrence in tshark)
    "zeek/tunnels__gre-sample.pcap",           # IPv4 in GRE
    "zeek/tunnels__tunnel-direct-bypass.pcap",  # one connection, direct and through GRE
    "tcpdump/gso-ipv6-vxlan-ipv4.pcap",        # IPv4 in VXLAN in IPv6
    "zeek/erspan.pcap",                        # Ethernet in GRE, some in IP fragments
    "zeek/ipv4__fragmented-4.pcap",            # a TCP datagram in fragments
    "zeek/mixed-vlan-mpls.pcap",               # MPLS beside VLAN and plain Ethernet
    "zeek/tunnels__4in6.pcap",                 # IPv4 in IPv6
    "zeek/tunnels__vxlan-encapsulated-http.pcap",   # VXLAN (UDP 4789)
    "zeek/tunnels__geneve-many-options.pcap",  # Geneve (UDP 6081) with options
    "zeek/tunnels__gtp__gtp6_gtp_0x32.pcap",   # GTP-U, some with a sequence number
    "zeek/tunnels__gtp__gtp_ext_header.pcap",  # GTP-U with an extension header
    "zeek/tunnels__gre-over-udp-4754.pcap",    # GRE in UDP (RFC 8086)
    "tcpdump/wccp_redirect_gre.pcap",          # WCCP version 2 redirection in GRE
    "zeek/pbb.pcap",                           # 802.1ah provider backbone bridging
    "zeek/snap-tcp.pcap",                      # 802.3 with LLC/SNAP
    "zeek/llc.pcap",                           # FDDI with LLC/SNAP
    "zeek/nflog-http.pcap",                    # Linux NFLOG
    "tcpdump/bgp_vpn_attrset.pcap",            # PPP in HDLC-like framing
    "tcpdump/lspping-fec-ldp.pcap",            # PPP carrying MPLS
]

FIELDS = [
    "frame.number", "frame.time_epoch", "ip.src", "ip.dst", "ipv6.src", "ipv6.dst",
    "tcp.srcport", "tcp.dstport", "tcp.seq_raw", "tcp.ack_raw", "tcp.flags", "tcp.len",
    "tcp.window_size_value", "tcp.options.mss_val", "tcp.options.timestamp.tsval",
    "tcp.options.timestamp.tsecr",
]


def _tshark_rows(path) -> pd.DataFrame:
    command = ["tshark", "-n", "-r", str(path), "-Y", "tcp", "-T", "fields",
               "-E", "occurrence=l", "-E", "separator=\t"]
    for name in FIELDS:
        command += ["-e", name]
    output = subprocess.run(command, capture_output=True, text=True, check=True).stdout
    rows = [line.split("\t") for line in output.splitlines() if line.strip()]
    return pd.DataFrame(rows, columns=FIELDS)


def _ours(path) -> pd.DataFrame:
    capture = load_capture(str(path))
    packets = capture.packets.merge(capture.connections, left_on="connection", right_on="id")
    from_client = packets["direction"] == 0
    client = [endpoint(a, p) for a, p in zip(packets.client_address, packets.client_port)]
    server = [endpoint(a, p) for a, p in zip(packets.server_address, packets.server_port)]
    packets["source"] = [c if f else s for c, s, f in zip(client, server, from_client)]
    packets["destination"] = [s if f else c for c, s, f in zip(client, server, from_client)]
    return packets.sort_values("frame").reset_index(drop=True)


def _tshark_endpoint(row, side: str) -> str:
    address = row[f"ip.{side}"] or row[f"ipv6.{side}"]
    port = row[f"tcp.{'srcport' if side == 'src' else 'dstport'}"]
    return endpoint(address, int(port))


@pytest.mark.parametrize("relative", CAPTURES)
def test_every_field_matches_tshark(relative: str) -> None:
    require_tool("tshark")
    path = corpus_file(relative)
    theirs = _tshark_rows(path)
    ours = _ours(path)
    assert len(theirs) > 0
    assert ours["frame"].tolist() == [int(v) for v in theirs["frame.number"]]
    for (_, mine), (_, row) in zip(ours.iterrows(), theirs.iterrows()):
        frame = int(row["frame.number"])
        assert mine["source"] == _tshark_endpoint(row, "src"), frame
        assert mine["destination"] == _tshark_endpoint(row, "dst"), frame
        assert mine["seq_raw"] == int(row["tcp.seq_raw"]), frame
        assert mine["ack_raw"] == int(row["tcp.ack_raw"]), frame
        assert mine["flags"] == int(row["tcp.flags"], 16) & 0x1FF, frame
        assert mine["payload_bytes"] == int(row["tcp.len"]), frame
        assert mine["window_raw"] == int(row["tcp.window_size_value"]), frame
        assert mine["time_us"] == int(Decimal(row["frame.time_epoch"]) * 1_000_000), frame
        if row["tcp.options.timestamp.tsval"]:
            assert mine["opt_has_timestamp"], frame
            assert mine["opt_timestamp_value"] == int(row["tcp.options.timestamp.tsval"]), frame
            assert mine["opt_timestamp_echo"] == int(row["tcp.options.timestamp.tsecr"]), frame
        else:
            assert not mine["opt_has_timestamp"], frame


@pytest.mark.parametrize("relative", CAPTURES)
def test_announced_mss_matches_tshark(relative: str) -> None:
    require_tool("tshark")
    path = corpus_file(relative)
    theirs = _tshark_rows(path)
    announced = {int(r["frame.number"]): int(r["tcp.options.mss_val"])
                 for _, r in theirs.iterrows() if r["tcp.options.mss_val"]}
    capture = load_capture(str(path))
    table = capture.connections
    for row in table.itertuples():
        for frame, mss in ((row.syn_frame, row.mss_client), (row.syn_ack_frame, row.mss_server)):
            if frame:
                assert announced.get(frame, 0) == mss, frame


def _tshark_conversations(path) -> dict[frozenset, tuple[int, int]]:
    output = subprocess.run(["tshark", "-n", "-q", "-r", str(path), "-z", "conv,tcp"],
                            capture_output=True, text=True, check=True).stdout
    conversations: dict[frozenset, tuple[int, int]] = {}
    for line in output.splitlines():
        if "<->" not in line:
            continue
        left, rest = line.split("<->")
        tokens = rest.split()
        right = tokens[0]
        frames_to_left, frames_to_right = int(tokens[1]), int(tokens[4])
        key = frozenset((left.strip(), right))
        conversations[key] = (frames_to_left, frames_to_right)
    return conversations


@pytest.mark.parametrize("relative", CAPTURES)
def test_connection_counts_match_tshark_conversations(relative: str) -> None:
    """Per 4-tuple, frames each way equal tshark's `-z conv,tcp` table (port reuse summed)."""
    require_tool("tshark")
    path = corpus_file(relative)
    theirs = _tshark_conversations(path)
    table = load_capture(str(path)).connections
    ours: dict[frozenset, dict[str, int]] = {}
    for row in table.itertuples():
        client = f"{row.client_address}:{row.client_port}"  # tshark's style: no brackets
        server = f"{row.server_address}:{row.server_port}"
        counts = ours.setdefault(frozenset((client, server)), {})
        counts[client] = counts.get(client, 0) + row.packets_client_to_server
        counts[server] = counts.get(server, 0) + row.packets_server_to_client
    assert set(ours) == set(theirs)
    for key, sent in ours.items():
        assert sorted(sent.values()) == sorted(theirs[key]), key
