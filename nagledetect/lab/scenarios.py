"""Lab scenarios: what each side of each connection writes, when, and with which socket options.

A scenario is a list of flows; each flow is one or more identical connections to its own server
port. Per exchange the client makes `client_writes_bytes` writes (paced `pacing_s` apart), the
server reads the request whole, thinks `think_time_s`, and answers with `server_writes_bytes`;
the client pauses `pause_s` (or a random pause from `pause_range_s`) before the next exchange.
`one_way` flows never answer; `keepalive_only` flows carry no data at all.
"""

from __future__ import annotations

import random
from dataclasses import asdict, dataclass, field, replace

OPTIONS = ("nodelay", "cork", "quickack")
LINE_BYTES = 72


@dataclass(frozen=True)
class Flow:
    name: str
    exchanges: int
    client_writes_bytes: tuple[int, ...] = ()
    server_writes_bytes: tuple[int, ...] = ()
    think_time_s: float = 0.0
    pause_s: float = 0.01
    pause_range_s: tuple[float, float] | None = None
    pacing_s: float = 0.0
    client_options: tuple[str, ...] = ()
    server_options: tuple[str, ...] = ()
    connections: int = 1
    one_way: bool = False
    keepalive_only: bool = False
    response_sizes_bytes: tuple[int, ...] = ()
    response_line_by_line: bool = False
    stack: str = "linux"

    def server_writes_for(self, exchange: int) -> list[int]:
        """The server's writes for one exchange (articles: whole, or one write per line)."""
        if not self.response_sizes_bytes:
            return list(self.server_writes_bytes)
        size = self.response_sizes_bytes[exchange % len(self.response_sizes_bytes)]
        if not self.response_line_by_line:
            return [size]
        lines = [LINE_BYTES] * (size // LINE_BYTES)
        return lines + ([size % LINE_BYTES] if size % LINE_BYTES else [])


@dataclass(frozen=True)
class Scenario:
    name: str
    seed: str
    description: str
    flows: tuple[Flow, ...]
    side: str = "client"
    offload: bool = False
    mtu: int = 1500
    ipv6: bool = False
    expectation: str = ""
    variants: tuple[str, ...] = field(default=("nodelay", "cork"))

    def with_option(self, option: str, who: str = "client") -> Scenario:
        """The same scenario with a socket option added on one side of every flow."""
        flows = tuple(replace(flow, **{f"{who}_options": tuple(sorted({*getattr(flow, f"{who}_options"),
                                                                        option}))})
                      for flow in self.flows)
        return replace(self, name=f"{self.name}+{who}-{option}", flows=flows)

    def as_dict(self) -> dict:
        return asdict(self)


def article_sizes(count: int, seed: int = 2000) -> tuple[int, ...]:
    """NNTP-like article sizes: a log-normal body (median about 2.5 KB) with a long tail."""
    rng = random.Random(seed)
    return tuple(int(min(60_000, max(300, rng.lognormvariate(7.8, 0.9)))) for _ in range(count))


SEED003_REQUEST = (2,) * 15
SCENARIOS: dict[str, Scenario] = {s.name: s for s in (
    Scenario("seed003-nagle", "003", "15 two-byte writes then a read; Nagle on (Linux default)",
             (Flow("tiny-writes", 40, SEED003_REQUEST, (2,)),),
             expectation="about 40 ms per exchange: the first write leaves, the other 14 wait for "
                         "the server's delayed ACK"),
    Scenario("seed003-nodelay", "003", "15 two-byte writes then a read with TCP_NODELAY",
             (Flow("tiny-writes", 40, SEED003_REQUEST, (2,), client_options=("nodelay",)),),
             expectation="no stall, but 15 packets per request (tinygram flood)"),
    Scenario("seed003-cork", "003", "15 two-byte writes then a read, corked (TCP_CORK)",
             (Flow("tiny-writes", 40, SEED003_REQUEST, (2,), client_options=("cork",)),),
             expectation="no stall, one packet per request"),
    Scenario("seed004-header-body", "004",
             "the server answers with a 6-byte header write then a 276-byte body write; "
             "captured at the client",
             (Flow("header-body", 40, (40,), (6, 276)),),
             expectation="about 40 ms per exchange: the body waits for the client's delayed ACK"),
    Scenario("seed004-header-body-server", "004",
             "the same header-then-body exchange over IPv6, captured at the server",
             (Flow("header-body", 40, (40,), (6, 276)),), side="server", ipv6=True,
             expectation="about 40 ms per exchange, seen from the holding side"),
    Scenario("seed004-header-body-middle", "004",
             "the same header-then-body exchange captured in the middle, on a bridge between "
             "client and server",
             (Flow("header-body", 40, (40,), (6, 276)),), side="middle",
             expectation="about 40 ms per exchange, seen between the two hosts"),
    Scenario("seed001-blocks-100000", "001",
             "100,000-byte blocks, each answered by a 1-byte application ACK; offload off",
             (Flow("blocks", 30, (100_000,), (1,)),),
             expectation="Linux (Minshall's Nagle) sends the 88-byte tail at once: little or no stall"),
    Scenario("seed001-blocks-100000-offload", "001",
             "100,000-byte blocks, each answered by a 1-byte application ACK; offload on",
             (Flow("blocks", 30, (100_000,), (1,)),), offload=True,
             expectation="Minshall's Nagle sends the tail at once; super-segments at the sender"),
    Scenario("seed001-blocks-99912", "001",
             "99,912-byte blocks (69 x 1448), each answered by a 1-byte ACK; offload off",
             (Flow("blocks", 30, (99_912,), (1,)),),
             expectation="no stall"),
    Scenario("seed001-blocks-99912-offload", "001",
             "99,912-byte blocks (69 x 1448), each answered by a 1-byte ACK; offload on",
             (Flow("blocks", 30, (99_912,), (1,)),), offload=True,
             expectation="no stall; super-segments larger than the MSS at the sender"),
    Scenario("seed002-stream", "002", "a one-way stream of 100-byte writes every 3 ms",
             (Flow("stream", 400, (100,), (), pause_s=0.003, one_way=True),),
             expectation="one small packet, then one accumulated packet per delayed-ACK cycle"),
    Scenario("seed000-nntp-lines", "000",
             "NNTP-like article requests; the server writes each article line by line (Nagle on)",
             (Flow("nntp", 40, (14,), response_sizes_bytes=article_sizes(40),
                   response_line_by_line=True),),
             expectation="stalls on articles whose last lines wait for the delayed ACK"),
    Scenario("seed000-nntp-lines-nodelay", "000",
             "NNTP-like articles written line by line with TCP_NODELAY on the server",
             (Flow("nntp", 40, (14,), response_sizes_bytes=article_sizes(40),
                   response_line_by_line=True, server_options=("nodelay",)),),
             expectation="no stall, but one packet per line (tinygram flood)"),
    Scenario("seed000-nntp-whole", "000", "NNTP-like articles written whole (fully buffered)",
             (Flow("nntp", 40, (14,), response_sizes_bytes=article_sizes(40)),),
             expectation="no stall, full-size segments"),
    Scenario("classic-phase-lock", "000",
             "four connections to a BSD-like receiver (scapy) whose delayed ACKs fire on a global "
             "200 ms tick; 2-byte then 28-byte writes, random pauses between exchanges",
             (Flow("tick", 20, (2, 28), (2,), pause_range_s=(0.0, 0.3), connections=4,
                   stack="scapy-classic"),),
             expectation="stalls released on the 200 ms tick, one phase for all connections"),
    Scenario("classic-2n-blocks-100000", "001",
             "a classic-Nagle sender (scapy) answers each 1-byte request with a 100,000-byte "
             "block: 69 x 1448 + 88",
             (Flow("block-100000", 20, (1,), (100_000,), stack="scapy-classic"),),
             expectation="the 88-byte tail waits for Linux's delayed ACK of the 69th segment"),
    Scenario("classic-2n-blocks-99912", "001",
             "the same classic-Nagle sender with 99,912-byte blocks: exactly 69 x 1448",
             (Flow("block-99912", 20, (1,), (99_912,), stack="scapy-classic"),),
             expectation="no tail, no stall"),
    Scenario("classic-stream", "002",
             "a one-way stream of 100-byte writes every 30 ms to a receiver that defers ACKs to a "
             "200 ms tick (scapy)",
             (Flow("stream", 150, (100,), (), pause_s=0.03, one_way=True, stack="scapy-classic"),),
             expectation="one small packet, then one accumulated packet per ACK cycle"),
    Scenario("classic-stream-answered", "002",
             "the classic stream as one message of 150 100-byte writes every 30 ms, answered by "
             "one byte at its end",
             (Flow("stream", 1, (100,) * 150, (1,), pacing_s=0.03, stack="scapy-classic"),),
             expectation="coalescing as in classic-stream; the one byte back keeps it one-way"),
    Scenario("trap-think-40ms", "trap", "one-write request, the server thinks 40 ms, one-write answer",
             (Flow("think", 30, (30,), (30,), think_time_s=0.04),),
             expectation="40 ms per exchange that is think time, not Nagle"),
    Scenario("trap-think-200ms", "trap", "one-write request, the server thinks 200 ms",
             (Flow("think", 15, (30,), (30,), think_time_s=0.2),),
             expectation="200 ms per exchange that is think time, not Nagle"),
    Scenario("trap-paced-writes", "trap", "three 2-byte writes paced 45 ms apart, then a read",
             (Flow("paced", 15, (2, 2, 2), (2,), pacing_s=0.045),),
             expectation="90 ms per exchange of pacing, not Nagle"),
    Scenario("trap-paced-nodelay", "trap",
             "15 two-byte writes paced 5 ms apart with TCP_NODELAY, then a read",
             (Flow("paced-nodelay", 20, (2,) * 15, (2,), pacing_s=0.005,
                   client_options=("nodelay",)),),
             expectation="70 ms per exchange of pacing; each write leaves alone, as it was made: "
                         "no burst to buffer, no tinygram flood"),
    Scenario("trap-bulk", "trap", "a 2 MB bulk upload answered by one byte",
             (Flow("bulk", 3, (2_000_000,), (1,)),),
             expectation="no stall"),
    Scenario("trap-rpc", "trap", "a well-buffered RPC: one write each way",
             (Flow("rpc", 40, (200,), (1000,)),),
             expectation="no stall"),
    Scenario("trap-keepalive", "trap", "an idle connection with 1-second keep-alives",
             (Flow("keepalive", 0, keepalive_only=True),),
             expectation="keep-alives only, no stall"),
    Scenario("mixed", "mixed", "concurrent connections of several kinds in one capture",
             (Flow("tiny-writes", 30, SEED003_REQUEST, (2,), connections=2),
              Flow("tiny-writes-nodelay", 30, SEED003_REQUEST, (2,), client_options=("nodelay",)),
              Flow("think", 20, (30,), (30,), think_time_s=0.04),
              Flow("rpc", 30, (200,), (1000,)),
              Flow("header-body", 30, (40,), (6, 276))),
             expectation="stalls on the tiny-writes and header-body connections only"),
)}
