"""A delay line: every frame that arrives on one interface leaves the other a fixed delay later.

    python -m nagledetect.lab.delay_line CLIENT_IF SERVER_IF ONE_WAY_MS RULES.json LOG.json [JITTER_MS]

It runs in the lab's middle namespace, between the client's and the server's veth pairs, on two
AF_PACKET raw sockets, so the two hosts see a real round trip of twice ONE_WAY_MS (tc netem
is not needed). With JITTER_MS, each frame waits a random 0 to JITTER_MS more, as in a queue
on the way: never passing the frame before it in its direction. Rules drop chosen TCP frames
or hold them back longer; every frame a rule acted on is written to LOG.json on SIGTERM or
SIGINT: the delay line's own ground truth.

A rule is {"direction": "to_server" | "to_client", "match": "syn" | "data" | "pure_ack",
"frames": [n, ...], "action": "drop" | "hold", "extra_ms": ms}: it acts on the n-th (from 0)
frame of that kind in that direction. With "port", only frames to or from that server port.
"""

from __future__ import annotations

import gc
import heapq
import json
import random
import select
import signal
import socket
import struct
import sys
import time
from dataclasses import dataclass, field
from typing import Any

ETH_P_ALL = 0x0003
ETH_HEADER_BYTES = 14
IPV4, IPV6 = 0x0800, 0x86DD
IPV6_HEADER_BYTES = 40
TCP_PROTOCOL = 6
SYN, ACK = 0x02, 0x10
DIRECTIONS = ("to_server", "to_client")
IDLE_WAIT_S = 0.5
JITTER_SEED = 0
"""The jitter's random sequence is the same every run."""


@dataclass(frozen=True)
class TcpFrame:
    """What the rules look at in one frame."""

    flags: int
    seq: int
    ack: int
    payload_bytes: int
    src_port: int
    dst_port: int

    @property
    def kind(self) -> str:
        if self.flags & SYN:
            return "syn"
        if self.payload_bytes:
            return "data"
        return "pure_ack" if self.flags & ACK else "other"


def parse_tcp(frame: bytes) -> TcpFrame | None:
    """The TCP header of an Ethernet frame carrying IPv4 or IPv6 (no extension headers)."""
    if len(frame) < ETH_HEADER_BYTES + IPV6_HEADER_BYTES:
        return None
    ethertype = struct.unpack_from("!H", frame, 12)[0]
    ip = ETH_HEADER_BYTES
    if ethertype == IPV4 and frame[ip + 9] == TCP_PROTOCOL:
        header_bytes = (frame[ip] & 0x0F) * 4
        ip_bytes = struct.unpack_from("!H", frame, ip + 2)[0] - header_bytes
    elif ethertype == IPV6 and frame[ip + 6] == TCP_PROTOCOL:
        header_bytes = IPV6_HEADER_BYTES
        ip_bytes = struct.unpack_from("!H", frame, ip + 4)[0]
    else:
        return None
    tcp = ip + header_bytes
    if len(frame) < tcp + 20:
        return None
    src_port, dst_port, seq, ack, offset, flags = struct.unpack_from("!HHIIBB", frame, tcp)
    return TcpFrame(flags, seq, ack, ip_bytes - (offset >> 4) * 4, src_port, dst_port)


@dataclass
class Rules:
    """The rules and how many frames of each kind each direction has carried."""

    rules: list[dict[str, Any]]
    seen: dict[tuple[str, str, int | None], int] = field(default_factory=dict)
    log: list[dict[str, Any]] = field(default_factory=list)

    def extra_delay_s(self, direction: str, tcp: TcpFrame | None, now_s: float) -> float | None:
        """Extra delay for this frame (0 for none), or None to drop it."""
        if tcp is None:
            return 0.0
        extra_s: float | None = 0.0
        server_port = tcp.dst_port if direction == "to_server" else tcp.src_port
        for rule in self.rules:
            if rule["direction"] != direction or rule["match"] != tcp.kind:
                continue
            if rule.get("port") not in (None, server_port):
                continue
            key = (direction, tcp.kind, rule.get("port"))
            if self.seen.get(key, 0) not in rule["frames"]:
                continue
            extra_s = None if rule["action"] == "drop" else rule["extra_ms"] / 1000
            self._record(rule, direction, tcp, now_s)
        for key in {(direction, tcp.kind, None), (direction, tcp.kind, server_port)}:
            self.seen[key] = self.seen.get(key, 0) + 1
        return extra_s

    def _record(self, rule: dict[str, Any], direction: str, tcp: TcpFrame, now_s: float) -> None:
        self.log.append({"time_s": now_s, "direction": direction, "kind": tcp.kind,
                         "action": rule["action"], "extra_ms": rule.get("extra_ms", 0),
                         "seq": tcp.seq, "ack": tcp.ack, "payload_bytes": tcp.payload_bytes,
                         "src_port": tcp.src_port, "dst_port": tcp.dst_port})


def _open(interface: str) -> socket.socket:
    sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL))
    sock.bind((interface, 0))
    sock.setblocking(False)
    return sock


class DelayLine:
    """Two raw sockets and a queue of frames waiting for their departure time."""

    def __init__(self, interfaces: tuple[str, str], one_way_s: float, rules: Rules,
                 jitter_s: float = 0.0) -> None:
        self.sockets = [_open(name) for name in interfaces]
        self.one_way_s = one_way_s
        self.jitter_s = jitter_s
        self.random = random.Random(JITTER_SEED)
        self.last_departure = [0.0, 0.0]
        """By outbound socket, the latest departure a frame without a rule's hold was given."""
        self.rules = rules
        self.queue: list[tuple[float, int, int, bytes]] = []
        self.order = 0
        self.running = True

    def run(self) -> None:
        while self.running:
            wait_s = max(0.0, self.queue[0][0] - time.monotonic()) if self.queue else IDLE_WAIT_S
            try:
                ready, _, _ = select.select(self.sockets, [], [], wait_s)
            except InterruptedError:
                continue
            for sock in ready:
                self._take(self.sockets.index(sock))
            self._send_due()

    def _take(self, inbound: int) -> None:
        """Queue every frame waiting on one socket for the other, at its departure time."""
        while True:
            try:
                frame, address = self.sockets[inbound].recvfrom(65535)
            except BlockingIOError:
                return
            if address[2] == socket.PACKET_OUTGOING:
                continue  # our own forwarded copy
            now_mono, now_s = time.monotonic(), time.time()
            extra_s = self.rules.extra_delay_s(DIRECTIONS[inbound], parse_tcp(frame), now_s)
            if extra_s is None:
                continue
            self.order += 1
            heapq.heappush(self.queue, (self._departure(now_mono, 1 - inbound, extra_s),
                                        self.order, 1 - inbound, frame))

    def _departure(self, now_mono: float, outbound: int, extra_s: float) -> float:
        """When a frame that came at `now_mono` leaves: the one-way delay, a rule's hold, and
        the jitter, which keeps the frames of a direction in order (a rule's hold may not)."""
        departure = now_mono + self.one_way_s + extra_s
        if self.jitter_s and not extra_s:
            departure = max(departure + self.jitter_s * self.random.random(),
                            self.last_departure[outbound])
            self.last_departure[outbound] = departure
        return departure

    def _send_due(self) -> None:
        while self.queue and self.queue[0][0] <= time.monotonic():
            _, _, outbound, frame = heapq.heappop(self.queue)
            try:
                self.sockets[outbound].send(frame)
            except OSError:
                continue  # a full queue on the veth loses the frame, as a real link would

    def stop(self, *_: object) -> None:
        self.running = False


def main(argv: list[str]) -> int:
    client_if, server_if, one_way_ms, rules_path, log_path, *jitter_ms = argv
    with open(rules_path) as handle:
        rules = Rules(json.load(handle))
    line = DelayLine((client_if, server_if), float(one_way_ms) / 1000, rules,
                     float(jitter_ms[0]) / 1000 if jitter_ms else 0.0)
    gc.disable()  # a collection pause would delay every frame queued behind it
    signal.signal(signal.SIGTERM, line.stop)
    signal.signal(signal.SIGINT, line.stop)
    print("ready", flush=True)
    line.run()
    with open(log_path, "w") as handle:
        json.dump(rules.log, handle)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
