"""A user-space TCP server (scapy) that behaves as the classic stacks of the source documents,
which Linux is not.

    python -m nagledetect.lab.classic_peer SPEC.json INTERFACE HOLDS.json

It writes every Nagle hold it made as a sender (when, how long, how many bytes) to HOLDS.json:
the stack's own ground truth for the sample traces it serves.

As a receiver it ACKs every second full-size segment at once and otherwise only on a global
200 ms clock tick shared by all its connections (BSD's delayed ACK: Minshall, Saito, Mogul and
Verghese, "Application performance pitfalls and TCP's Nagle algorithm", section 9), unless
an answer carries the ACK first. As a sender it applies classic Nagle: a segment smaller than
the MSS leaves only when nothing is unacknowledged (Cheshire's "TCP Performance problems caused
by interaction between Nagle's Algorithm and Delayed ACK"). It runs in the server namespace,
where the kernel's own RSTs for its ports are dropped, and speaks IPv4 with timestamps, so the
effective MSS is 1448.

Each flow's application reads each whole request and answers with `server_writes_bytes` at
once (sent segment by segment under classic Nagle), or, for one-way flows, never answers. The
client is the ordinary Linux client of `nagledetect.lab.peer`.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from scapy.all import IP, TCP, AsyncSniffer, conf

BASE_PORT = 9000
TICK_S = 0.2
ANNOUNCED_MSS = 1460
TIMESTAMP_BYTES = 12
WINDOW_BYTES = 65535
FULL_SEGMENT_ACK_EVERY = 2


def _clock_ms() -> int:
    return int(time.monotonic() * 1000) & 0xFFFFFFFF


@dataclass
class Connection:
    """One connection's sequence state, receive accounting and send queue."""

    client: tuple[str, int]
    port: int
    flow: dict[str, Any]
    snd_nxt: int
    snd_una: int
    rcv_nxt: int
    peer_window: int = WINDOW_BYTES
    ts_recent: int = 0
    full_unacked: int = 0
    ack_pending: bool = False
    request_bytes: int = 0
    exchanges_done: int = 0
    send_queue: bytearray = field(default_factory=bytearray)
    fin_sent: bool = False
    held_since_s: float | None = None


class ClassicPeer:
    def __init__(self, spec: dict[str, Any]) -> None:
        self.address = spec["server_address"]
        self.flows = {BASE_PORT + i: flow for i, flow in enumerate(spec["flows"])}
        self.connections: dict[tuple[str, int, int], Connection] = {}
        self.lock = threading.Lock()
        self.socket = conf.L3socket()
        self.mss = ANNOUNCED_MSS - TIMESTAMP_BYTES
        self.expected = sum(flow["connections"] for flow in spec["flows"])
        self.finished = 0
        self.done = threading.Event()
        self.holds: list[dict[str, Any]] = []

    def _send(self, conn: Connection, flags: str, payload: bytes = b"", seq: int | None = None) -> None:
        segment = TCP(sport=conn.port, dport=conn.client[1], flags=flags,
                      seq=(conn.snd_nxt if seq is None else seq) & 0xFFFFFFFF,
                      ack=conn.rcv_nxt & 0xFFFFFFFF, window=WINDOW_BYTES,
                      options=[("NOP", None), ("NOP", None), ("Timestamp", (_clock_ms(), conn.ts_recent))])
        self.socket.send(IP(src=self.address, dst=conn.client[0]) / segment / payload)
        if "A" in flags:
            conn.ack_pending = False
            conn.full_unacked = 0

    def _accept(self, packet, key: tuple[str, int, int]) -> None:
        tcp = packet[TCP]
        port = tcp.dport
        conn = Connection(client=(packet[IP].src, tcp.sport), port=port, flow=self.flows[port],
                          snd_nxt=1_000_000, snd_una=1_000_000, rcv_nxt=tcp.seq + 1)
        conn.ts_recent = dict(tcp.options).get("Timestamp", (0, 0))[0]
        self.connections[key] = conn
        synack = TCP(sport=port, dport=tcp.sport, flags="SA", seq=conn.snd_nxt, ack=conn.rcv_nxt,
                     window=WINDOW_BYTES, options=[("MSS", ANNOUNCED_MSS), ("SAckOK", b""),
                                                    ("Timestamp", (_clock_ms(), conn.ts_recent))])
        self.socket.send(IP(src=self.address, dst=conn.client[0]) / synack)
        conn.snd_nxt += 1

    def handle(self, packet) -> None:
        if TCP not in packet or packet[IP].dst != self.address:
            return
        tcp = packet[TCP]
        key = (packet[IP].src, tcp.sport, tcp.dport)
        with self.lock:
            if tcp.flags.S and not tcp.flags.A:
                if key not in self.connections and tcp.dport in self.flows:
                    self._accept(packet, key)
                return
            conn = self.connections.get(key)
            if conn is None:
                return
            stamp = dict(tcp.options).get("Timestamp")
            if stamp:
                conn.ts_recent = stamp[0]
            if tcp.flags.A:
                self._on_ack(conn, tcp)
            self._on_data(conn, tcp, bytes(tcp.payload))

    def _on_ack(self, conn: Connection, tcp) -> None:
        conn.peer_window = tcp.window
        acked = tcp.ack
        if 0 < (acked - conn.snd_una) & 0xFFFFFFFF < 1 << 31:
            conn.snd_una = conn.snd_una + ((acked - conn.snd_una) & 0xFFFFFFFF)
        self._push(conn)

    def _on_data(self, conn: Connection, tcp, payload: bytes) -> None:
        if payload and tcp.seq != conn.rcv_nxt & 0xFFFFFFFF:
            self._send(conn, "A")
            return
        conn.rcv_nxt += len(payload) + (1 if tcp.flags.F else 0)
        if tcp.flags.F:
            if not conn.fin_sent:
                self._send(conn, "FA")
                conn.snd_nxt += 1
                conn.fin_sent = True
                self.finished += 1
                if self.finished >= self.expected:
                    self.done.set()
            return
        if not payload:
            return
        conn.request_bytes += len(payload)
        if len(payload) >= self.mss:
            conn.full_unacked += 1
        conn.ack_pending = True
        self._application(conn)
        if conn.ack_pending and conn.full_unacked >= FULL_SEGMENT_ACK_EVERY:
            self._send(conn, "A")

    def _application(self, conn: Connection) -> None:
        """Answer a complete request; until then the ACK waits for the tick."""
        flow = conn.flow
        if flow["one_way"] or conn.exchanges_done >= flow["exchanges"]:
            return
        request = sum(flow["client_writes_bytes"])
        if conn.request_bytes < request:
            return
        conn.request_bytes -= request
        answer = sum(flow["server_writes"][conn.exchanges_done])
        conn.exchanges_done += 1
        conn.send_queue.extend(b"x" * answer)
        self._push(conn)

    def _push(self, conn: Connection) -> None:
        """Send what classic Nagle and the peer's window allow."""
        while conn.send_queue:
            in_flight = conn.snd_nxt - conn.snd_una
            size = min(self.mss, len(conn.send_queue))
            if size < self.mss and in_flight > 0:
                if conn.held_since_s is None:
                    conn.held_since_s = time.time()
                return
            if in_flight + size > conn.peer_window:
                return
            if conn.held_since_s is not None:
                self.holds.append({"client": f"{conn.client[0]}:{conn.client[1]}",
                                   "held_s": conn.held_since_s, "released_s": time.time(),
                                   "bytes": size})
                conn.held_since_s = None
            chunk = bytes(conn.send_queue[:size])
            del conn.send_queue[:size]
            self._send(conn, "PA" if not conn.send_queue else "A", chunk)
            conn.snd_nxt += size

    def tick(self) -> None:
        """The global delayed-ACK clock: every 200 ms, ACK whatever is waiting, on all connections."""
        while not self.done.is_set():
            now = time.monotonic()
            time.sleep(TICK_S - now % TICK_S)
            with self.lock:
                for conn in self.connections.values():
                    if conn.ack_pending:
                        self._send(conn, "A")


def serve(spec: dict[str, Any], interface: str, holds_path: str) -> None:
    peer = ClassicPeer(spec)
    ports = " or ".join(f"dst port {port}" for port in peer.flows)
    sniffer = AsyncSniffer(iface=interface, filter=f"tcp and dst host {peer.address} and ({ports})",
                           prn=peer.handle, store=False)
    sniffer.start()
    time.sleep(0.5)
    ticker = threading.Thread(target=peer.tick, daemon=True)
    ticker.start()
    print("ready", flush=True)
    peer.done.wait()
    time.sleep(0.5)
    sniffer.stop()
    with open(holds_path, "w") as handle:
        json.dump(peer.holds, handle)


def main(argv: list[str]) -> int:
    with open(argv[0]) as handle:
        spec = json.load(handle)
    serve(spec, argv[1], argv[2])
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
