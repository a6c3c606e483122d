"""Lab scenarios: what each side of each connection writes, when, and with which socket options.

A scenario is a list of flows; each flow is one or more identical connections to its own server
port. Per exchange the client makes `client_writes_bytes` writes (paced `pacing_s` apart), the
server reads the request whole, thinks `think_time_s`, and answers with `server_writes_bytes`;
the client pauses `pause_s` (or a random pause from `pause_range_s`) before the next exchange.
`one_way` flows never answer; `keepalive_only` flows carry no data at all.

Each scenario says what it shows, which side's data Nagle holds in it (`holder`: the side a
sender-side fix such as TCP_NODELAY must change), and the document whose case it reproduces.
"""

from __future__ import annotations

import random
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from nagledetect.advice import CHESHIRE, MINSHALL_ET_AL, SUN_SMALL_PACKETS
from nagledetect.detectors.kinds import (
    HANDSHAKE_RETRY,
    LOSS_RECOVERY,
    NAGLE_DELACK_STALL,
    NAGLE_FAMILY,
    NAGLE_RTT_HOLD,
    THINK_TIME,
    WINDOW_LIMITED,
    ZERO_WINDOW,
)

OPTIONS = ("nodelay", "cork", "quickack")
SIDES = ("client", "server")
RECEIVER_OPTIONS = ("quickack",)
"""Options that act on the side whose delayed ACK releases a hold, not on the side that holds."""
LINE_BYTES = 72
LINUX_NODELAY_DOC = 'the Linux documentation "TCP_NODELAY and Small Buffer Writes"'
FIELD_REPORT = ('a field report, "TCP delayed ACK combined with Nagle algorithm can badly impact '
                'communication performance" (Murat; a Windows client, a UNIX server)')


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
    pacing_range_s: tuple[float, float] | None = None
    client_options: tuple[str, ...] = ()
    server_options: tuple[str, ...] = ()
    connections: int = 1
    one_way: bool = False
    keepalive_only: bool = False
    response_sizes_bytes: tuple[int, ...] = ()
    response_line_by_line: bool = False
    stack: str = "linux"
    server_rcvbuf_bytes: int = 0
    server_read_delay_s: float = 0.0
    server_read_chunk_bytes: int = 0
    server_read_interval_s: float = 0.0
    client_give_up_s: float = 0.0
    unanswered: bool = False

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
    shows: str
    description: str
    flows: tuple[Flow, ...]
    holder: str | None = None
    """The side whose data Nagle holds (or would hold without the scenario's own options);
    None where no single side does."""
    source: str = ""
    """The document whose case the scenario reproduces, by title and author ("" for the lab's own)."""
    capture_side: str = "client"
    offload: bool = False
    mtu: int = 1500
    ipv6: bool = False
    expectation: str = ""
    variants: tuple[str, ...] = field(default=("nodelay", "cork"))
    rtt_ms: float = 0.0
    jitter_ms: float = 0.0
    """Each frame's random extra wait on the delay line, at most this (a queue on the way)."""
    delay_rules: tuple[dict, ...] = ()
    server_firewall: tuple[str, ...] = ()
    expected: dict | None = None
    stall_kind: str | None = NAGLE_DELACK_STALL
    """The Nagle-family kind of this scenario's slow exchanges; None where whatever slows an
    exchange is not Nagle (the cause-* scenarios)."""

    @property
    def delay_line(self) -> bool:
        """Whether frames cross the user-space delay line (a round trip, jitter, or frames to
        act on)."""
        return bool(self.rtt_ms or self.jitter_ms or self.delay_rules)

    variant: tuple[str, str] | None = None
    """(option, side) when this run is a variant of a scenario: the option added on that side."""

    def variant_side(self, option: str) -> str:
        """The side an option must change to act on this scenario's holds: the holder for a
        sender's option, its peer for an option of the receiver (quick ACKs)."""
        holder = self.holder or "client"
        if option in RECEIVER_OPTIONS:
            return peer_of(holder)
        return holder

    def with_option(self, option: str, who: str | None = None) -> Scenario:
        """The same scenario with a socket option added on one side of every flow (by default
        the side it must change to act on the holds)."""
        who = who or self.variant_side(option)
        flows = tuple(replace(flow, **{f"{who}_options": tuple(sorted({*getattr(flow, f"{who}_options"),
                                                                        option}))})
                      for flow in self.flows)
        return replace(self, name=f"{self.name}+{who}-{option}", flows=flows, variant=(option, who))

    def as_dict(self) -> dict:
        return asdict(self)


def peer_of(side: str) -> str:
    return "server" if side == "client" else "client"


def article_sizes(count: int, seed: int = 2000) -> tuple[int, ...]:
    """NNTP-like article sizes: a log-normal body (median about 2.5 KB) with a long tail."""
    rng = random.Random(seed)
    return tuple(int(min(60_000, max(300, rng.lognormvariate(7.8, 0.9)))) for _ in range(count))


def finding(kind: str, count: tuple[int, int], each_ms: tuple[float, float], note: str,
            **more: object) -> dict:
    """One line of a scenario's `expected` block: a kind a correct analysis reports, about how
    many times (inclusive range) and about how long each (ms, inclusive range)."""
    return {"kind": kind, "count": list(count), "each_ms": list(each_ms), "note": note, **more}


SEED003_REQUEST = (2,) * 15
REMOTE_RTT_MS = 80.0
RTT_HOLD_RTT_MS = 60.0
TIMER_LONG_PATH_RTT_MS = 40.0
"""A path as long as Linux's delayed-ACK timer: the hold is no longer than the round trip."""
LINE_SERVER_PATH_RTT_MS = 30.0
"""A path long enough for a burst's full segments to be in flight when the ACK of its first
line reaches the server."""
JUMBO_MTU = 9000
"""Jumbo frames: an article of a few kilobytes fits one segment."""
TIMESTAMPED_MSS_BYTES = 1448
UNBUFFERED_NODELAY = Flow("tiny-writes", 40, SEED003_REQUEST, (2,), client_options=("nodelay",))
"""`seed003-nodelay`'s 15 two-byte writes with TCP_NODELAY, on a LAN and over a path."""
PACED_WRITES = Flow("paced", 15, (2, 2, 2), (2,), pacing_s=0.045)
"""`trap-paced-writes`' three writes 45 ms apart, on a LAN and over a path."""
PACED_PATH_RTT_MS = 10.0
"""A path that, with a 40 ms delayed ACK, outlasts a 45 ms pause between writes."""
SMALL_WRITE_STREAM = Flow("stream", 400, (100,), (), pause_s=0.003, one_way=True)
"""`seed002-stream`'s one-way 100-byte writes every 3 ms, on a LAN and over a path."""
CLASSIC_BLOCKS = Flow("block-100000", 20, (1,), (100_000,), stack="scapy-classic")
"""The classic-Nagle sender's 100,000-byte blocks (69 x 1448 + 88), on a LAN and over paths."""
LINE_BY_LINE_ARTICLES = Flow("nntp", 40, (14,), response_sizes_bytes=article_sizes(40),
                             response_line_by_line=True)
"""The NNTP-like server writing each of 40 articles a line at a time."""


MIXED_FLOWS = (Flow("tiny-writes", 30, SEED003_REQUEST, (2,), connections=2),
               Flow("tiny-writes-nodelay", 30, SEED003_REQUEST, (2,), client_options=("nodelay",)),
               Flow("think", 20, (30,), (30,), think_time_s=0.04),
               Flow("rpc", 30, (200,), (1000,)),
               Flow("header-body", 30, (40,), (6, 276)))
"""Concurrent connections of several kinds, in one capture."""


def line_by_line_server(name: str, shows: str, description: str, expectation: str,
                        **path: Any) -> Scenario:
    """The NNTP-like server writing its articles a line at a time (Minshall et al.), Nagle
    holding its lines, on a LAN or on the `path` given (round trip, capture side, MTU)."""
    return Scenario(name, shows, description, (LINE_BY_LINE_ARTICLES,), expectation=expectation,
                    holder="server", source=MINSHALL_ET_AL, **path)


SCENARIOS: dict[str, Scenario] = {s.name: s for s in (
    Scenario("seed003-nagle", "many small writes held: ~40 ms stalls",
             "15 two-byte writes then a read; Nagle on (Linux default)",
             (Flow("tiny-writes", 40, SEED003_REQUEST, (2,)),),
             expectation="about 40 ms per exchange: the first write leaves, the other 14 wait for "
                         "the server's delayed ACK",
             holder="client", source=LINUX_NODELAY_DOC),
    Scenario("seed003-nagle-40ms-path", "the same over a 40 ms path",
             "15 two-byte writes then a read, Nagle on, over a 40 ms round trip (delay line), "
             "captured at the client: the server's 40 ms delayed ACK is no longer than the path",
             (Flow("tiny-writes", 40, SEED003_REQUEST, (2,)),), rtt_ms=TIMER_LONG_PATH_RTT_MS,
             expectation="about 125 ms per exchange: the first write's round trip, the "
                         "server's delayed ACK (about 40 ms) holding the other 14 writes, and "
                         "their round trip",
             holder="client", source=LINUX_NODELAY_DOC),
    Scenario("seed003-nodelay", "the TCP_NODELAY fix: no stall, tinygrams",
             "15 two-byte writes then a read with TCP_NODELAY",
             (UNBUFFERED_NODELAY,),
             expectation="no stall, but 15 packets per request (tinygram flood)",
             holder="client", source=LINUX_NODELAY_DOC),
    Scenario("seed003-nodelay-80ms-at-server", "the same over 80 ms, seen at the server",
             "15 two-byte writes then a read with TCP_NODELAY, over an 80 ms round trip (delay "
             "line), captured at the server",
             (UNBUFFERED_NODELAY,),
             rtt_ms=REMOTE_RTT_MS, capture_side="server",
             expectation="no stall: the first request's writes beyond the initial window of 10 "
                         "segments wait a round trip for its ACKs, as the window (not Nagle) "
                         "holds them",
             holder="client", source=LINUX_NODELAY_DOC),
    Scenario("seed003-cork", "the TCP_CORK fix: no stall",
             "15 two-byte writes then a read, corked (TCP_CORK)",
             (Flow("tiny-writes", 40, SEED003_REQUEST, (2,), client_options=("cork",)),),
             expectation="no stall, one packet per request",
             holder="client", source=LINUX_NODELAY_DOC),
    Scenario("seed004-header-body", "header then body: the body held",
             "the server answers with a 6-byte header write then a 276-byte body write; "
             "captured at the client",
             (Flow("header-body", 40, (40,), (6, 276)),),
             expectation="about 40 ms per exchange: the body waits for the client's delayed ACK",
             holder="server", source=FIELD_REPORT),
    Scenario("seed004-header-body-server", "header then body, seen at the server",
             "the same header-then-body exchange over IPv6, captured at the server",
             (Flow("header-body", 40, (40,), (6, 276)),), capture_side="server", ipv6=True,
             expectation="about 40 ms per exchange, seen from the holding side",
             holder="server", source=FIELD_REPORT),
    Scenario("seed004-header-body-middle", "header then body, seen mid-path",
             "the same header-then-body exchange captured in the middle, on a bridge between "
             "client and server",
             (Flow("header-body", 40, (40,), (6, 276)),), capture_side="middle",
             expectation="about 40 ms per exchange, seen between the two hosts",
             holder="server", source=FIELD_REPORT),
    Scenario("seed001-blocks-100000", "Linux's Nagle sends a large write's tail",
             "100,000-byte blocks, each answered by a 1-byte application ACK; offload off",
             (Flow("blocks", 30, (100_000,), (1,)),),
             expectation="Linux (Minshall's Nagle) sends the 88-byte tail at once: little or no stall",
             holder="client", source=CHESHIRE),
    Scenario("seed001-blocks-100000-offload", "the same with segmentation offload",
             "100,000-byte blocks, each answered by a 1-byte application ACK; offload on",
             (Flow("blocks", 30, (100_000,), (1,)),), offload=True,
             expectation="Minshall's Nagle sends the tail at once; super-segments at the sender",
             holder="client", source=CHESHIRE),
    Scenario("seed001-blocks-99912", "whole segments: no tail to hold",
             "99,912-byte blocks (69 x 1448), each answered by a 1-byte ACK; offload off",
             (Flow("blocks", 30, (99_912,), (1,)),),
             expectation="no stall",
             holder="client", source=CHESHIRE),
    Scenario("seed001-blocks-99912-offload", "whole segments, with offload",
             "99,912-byte blocks (69 x 1448), each answered by a 1-byte ACK; offload on",
             (Flow("blocks", 30, (99_912,), (1,)),), offload=True,
             expectation="no stall; super-segments larger than the MSS at the sender",
             holder="client", source=CHESHIRE),
    Scenario("seed002-stream", "a small-write stream to Linux",
             "a one-way stream of 100-byte writes every 3 ms",
             (SMALL_WRITE_STREAM,),
             expectation="one small packet, then one accumulated packet per delayed-ACK cycle",
             holder="client", source=SUN_SMALL_PACKETS),
    Scenario("seed002-stream-40ms-path", "the same over a 40 ms path",
             "a one-way stream of 100-byte writes every 3 ms over a 40 ms round trip (delay "
             "line), captured at the client",
             (SMALL_WRITE_STREAM,),
             rtt_ms=TIMER_LONG_PATH_RTT_MS,
             expectation="one small packet, then one accumulated packet per ACK a round trip "
                         "later; no exchange waits on the stream, so no stall",
             holder="client", source=SUN_SMALL_PACKETS),
    line_by_line_server(
        "seed000-nntp-lines", "a server writing line by line",
        "NNTP-like article requests; the server writes each article line by line (Nagle on)",
        "stalls on articles whose last lines wait for the delayed ACK"),
    line_by_line_server(
        "seed000-nntp-lines-30ms-path", "the same over a 30 ms path",
        "the line-by-line NNTP-like server over a 30 ms round trip (delay line), captured at the "
        "client: each article's first line, full segments, and the tail held until the ACK of "
        "the first line, the full segments after that ACK in flight",
        "a hold of one round trip or more per article: the tail waits for the ACK of the first "
        "line",
        rtt_ms=LINE_SERVER_PATH_RTT_MS),
    line_by_line_server(
        "seed000-nntp-lines-at-server", "the same over 40 ms, seen at the server",
        "the line-by-line NNTP-like server over a 40 ms round trip (delay line), captured at the "
        "server: each article's tail leaves right after the ACK of its first line, which leaves "
        "full segments unacknowledged",
        "a hold of one round trip or more per article, seen from the holding side",
        rtt_ms=TIMER_LONG_PATH_RTT_MS, capture_side="server"),
    line_by_line_server(
        "seed000-nntp-lines-jumbo", "the same with 9000-byte frames",
        "the line-by-line NNTP-like server on a veth of MTU 9000: each article fits one segment, "
        "so its first line goes alone and the rest leaves as one packet at the client's delayed "
        "ACK, like a stream's accumulated packet, each one answering a request",
        "about 40 ms per article: a Nagle stall of each request's answer, not a one-way stream",
        mtu=JUMBO_MTU),
    Scenario("seed000-nntp-lines-nodelay", "line by line with TCP_NODELAY: flood",
             "NNTP-like articles written line by line with TCP_NODELAY on the server",
             (Flow("nntp", 40, (14,), response_sizes_bytes=article_sizes(40),
                   response_line_by_line=True, server_options=("nodelay",)),),
             expectation="no stall, but one packet per line (tinygram flood)",
             holder="server", source=MINSHALL_ET_AL),
    Scenario("seed000-nntp-whole", "a fully buffered server: no stall",
             "NNTP-like articles written whole (fully buffered)",
             (Flow("nntp", 40, (14,), response_sizes_bytes=article_sizes(40)),),
             expectation="no stall, full-size segments",
             holder="server", source=MINSHALL_ET_AL),
    Scenario("classic-phase-lock", "phase locking to a 200 ms ACK tick",
             "four connections to a BSD-like receiver (scapy) whose delayed ACKs fire on a global "
             "200 ms tick; 2-byte then 28-byte writes, random pauses between exchanges",
             (Flow("tick", 20, (2, 28), (2,), pause_range_s=(0.0, 0.3), connections=4,
                   stack="scapy-classic"),),
             expectation="stalls released on the 200 ms tick, one phase for all connections",
             holder="client", source=MINSHALL_ET_AL),
    Scenario("classic-phase-lock-80ms-path", "the same over an 80 ms path",
             "the four connections to the 200 ms-tick receiver over an 80 ms round trip (delay "
             "line), captured at the client: each delayed ACK held 0-200 ms beyond the path",
             (Flow("tick", 20, (2, 28), (2,), pause_range_s=(0.0, 0.3), connections=4,
                   stack="scapy-classic"),), rtt_ms=REMOTE_RTT_MS,
             expectation="stalls released on the 200 ms tick, one phase for all connections, "
                         "seen one round trip away",
             holder="client", source=MINSHALL_ET_AL),
    Scenario("classic-2n-blocks-100000", "classic Nagle: a 2N-segment tail held",
             "a classic-Nagle sender (scapy) answers each 1-byte request with a 100,000-byte "
             "block: 69 x 1448 + 88",
             (CLASSIC_BLOCKS,),
             expectation="the 88-byte tail waits for Linux's delayed ACK of the 69th segment",
             holder="server", source=CHESHIRE),
    Scenario("classic-2n-blocks-100000-30ms-path", "the same over a 30 ms path",
             "the classic-Nagle sender's 100,000-byte blocks over a 30 ms round trip (delay "
             "line), captured at the client: the full segments stream out as the sender's ACK "
             "clock runs, and the 88-byte tail waits for the ACK of everything",
             (CLASSIC_BLOCKS,),
             rtt_ms=LINE_SERVER_PATH_RTT_MS,
             expectation="each tail waits for the client's delayed ACK of an odd last segment, "
                         "or one round trip for the ordinary ACK of an even pair",
             holder="server", source=CHESHIRE),
    Scenario("classic-2n-blocks-100000-80ms-path", "the same over an 80 ms path",
             "the classic-Nagle sender's 100,000-byte blocks over an 80 ms round trip (delay "
             "line), captured at the client: the client's 64 KB window stops each block for a "
             "round trip, the rest streams out as the ACKs come, and the 88-byte tail waits "
             "for the ACK of everything",
             (CLASSIC_BLOCKS,),
             rtt_ms=REMOTE_RTT_MS,
             expectation="each tail waits one round trip for the ordinary ACK of an even pair, "
                         "or for the client's delayed ACK of an odd last segment",
             holder="server", source=CHESHIRE),
    Scenario("classic-2n-blocks-99912", "classic Nagle: whole segments, no stall",
             "the same classic-Nagle sender with 99,912-byte blocks: exactly 69 x 1448",
             (Flow("block-99912", 20, (1,), (99_912,), stack="scapy-classic"),),
             expectation="no tail, no stall",
             holder="server", source=CHESHIRE),
    Scenario("classic-stream", "stream coalescing, one-way",
             "a one-way stream of 100-byte writes every 30 ms to a receiver that defers ACKs to a "
             "200 ms tick (scapy)",
             (Flow("stream", 150, (100,), (), pause_s=0.03, one_way=True, stack="scapy-classic"),),
             expectation="one small packet, then one accumulated packet per ACK cycle",
             holder="client", source=SUN_SMALL_PACKETS),
    Scenario("classic-stream-answered", "stream coalescing, answered at its end",
             "the classic stream as one message of 150 100-byte writes every 30 ms, answered by "
             "one byte at its end",
             (Flow("stream", 1, (100,) * 150, (1,), pacing_s=0.03, stack="scapy-classic"),),
             expectation="coalescing as in classic-stream; the one byte back keeps it one-way",
             holder="client", source=SUN_SMALL_PACKETS),
    Scenario("trap-think-40ms", "40 ms think time, not Nagle",
             "one-write request, the server thinks 40 ms, one-write answer",
             (Flow("think", 30, (30,), (30,), think_time_s=0.04),),
             expectation="40 ms per exchange that is think time, not Nagle"),
    Scenario("trap-think-40ms-path", "the same over a 40 ms path",
             "one-write request, the server thinks 40 ms, one-write answer, over a 40 ms round "
             "trip (delay line), captured at the client",
             (Flow("think", 30, (30,), (30,), think_time_s=0.04),), rtt_ms=TIMER_LONG_PATH_RTT_MS,
             expectation="about 80 ms per exchange at the client: 40 ms of think time and the "
                         "40 ms path"),
    Scenario("trap-think-200ms", "200 ms think time, not Nagle",
             "one-write request, the server thinks 200 ms",
             (Flow("think", 15, (30,), (30,), think_time_s=0.2),),
             expectation="200 ms per exchange that is think time, not Nagle"),
    Scenario("trap-paced-writes", "paced writes, not Nagle",
             "three 2-byte writes paced 45 ms apart, then a read",
             (PACED_WRITES,),
             expectation="90 ms per exchange of pacing, not Nagle",
             holder="client"),
    Scenario("trap-paced-writes-10ms-path", "the same over a 10 ms path",
             "three 2-byte writes paced 45 ms apart, then a read, over a 10 ms round trip "
             "(delay line), captured at the client: the server's delayed ACK and the path outlast "
             "the pause, so each second write waits a few ms for the ACK; the answer waits for "
             "the third",
             (PACED_WRITES,), rtt_ms=PACED_PATH_RTT_MS,
             expectation="about 100 ms per exchange of pacing and the path; the second write's "
                         "short hold delays no answer",
             holder="client"),
    Scenario("trap-paced-nodelay", "paced writes with TCP_NODELAY: no flood",
             "15 two-byte writes paced 5 ms apart with TCP_NODELAY, then a read",
             (Flow("paced-nodelay", 20, (2,) * 15, (2,), pacing_s=0.005,
                   client_options=("nodelay",)),),
             expectation="70 ms per exchange of pacing; each write leaves alone, as it was made: "
                         "no burst to buffer, no tinygram flood",
             holder="client"),
    Scenario("trap-bulk", "a bulk upload: no stall", "a 2 MB bulk upload answered by one byte",
             (Flow("bulk", 3, (2_000_000,), (1,)),),
             expectation="no stall",
             holder="client"),
    Scenario("trap-rpc", "a well-buffered RPC: no stall", "a well-buffered RPC: one write each way",
             (Flow("rpc", 40, (200,), (1000,)),),
             expectation="no stall"),
    Scenario("trap-keepalive", "keep-alives only: no stall",
             "an idle connection with 1-second keep-alives",
             (Flow("keepalive", 0, keepalive_only=True),),
             expectation="keep-alives only, no stall"),
    Scenario("remote-header-body", "header then body over an 80 ms path",
             "the field report's header-then-body exchange over an 80 ms round trip (delay line), "
             "captured at the client: the server's holds seen one round trip away",
             (Flow("header-body", 30, (40,), (6, 276)),), rtt_ms=REMOTE_RTT_MS,
             expectation="about 200 ms per exchange, 120 of them lost: the body waits for the "
                         "client's delayed ACK (about 40 ms) to cross the path; at the client it "
                         "arrives one round trip after that ACK",
             expected={"findings": [
                 finding(NAGLE_DELACK_STALL, (27, 29), (100, 140),
                         "every exchange but the first; held by the server, released by the "
                         "client's delayed ACK, seen at the client one round trip later",
                         holder="server"),
                 finding(NAGLE_RTT_HOLD, (0, 1), (75, 90),
                         "the first exchange: the client is in quick-ACK mode, so the body waits "
                         "one round trip for its ordinary ACK", holder="server")],
                 "absent": []},
             holder="server", source=FIELD_REPORT),
    Scenario("paced-40ms", "a hold the trace cannot tell from pacing",
             "two 2-byte writes 38-45 ms apart (random), then a read; Nagle on",
             (Flow("paced", 30, (2, 2), (2,), pacing_range_s=(0.038, 0.045)),),
             expectation="the second write comes about when the server's delayed ACK fires: "
                         "Nagle holds it a few ms at most, or not at all; the manifest records "
                         "each write's time and the application's real sleeps",
             expected={"findings": [
                 finding(NAGLE_DELACK_STALL, (0, 30), (0, 45),
                         "a hold cannot be told from a paced write here: any stall found must be "
                         "low confidence and its time an upper bound ('up to'); the real cost "
                         "is each exchange's latency minus the client's waits (manifest)",
                         confidence="low")],
                 "absent": []},
             holder="client"),
    Scenario("paced-40ms-nodelay", "the same pacing with TCP_NODELAY",
             "two 2-byte writes 38-45 ms apart (random), then a read; TCP_NODELAY",
             (Flow("paced", 30, (2, 2), (2,), pacing_range_s=(0.038, 0.045),
                   client_options=("nodelay",)),),
             expectation="nothing can be held: every write leaves at once",
             expected={"findings": [
                 finding(NAGLE_DELACK_STALL, (0, 30), (0, 45),
                         "TCP_NODELAY: nothing was held; a stall found here can only be low "
                         "confidence with its time an upper bound", confidence="low")],
                 "absent": []},
             holder="client"),
    Scenario("rtt-hold", "a one-round-trip hold on a long path",
             f"a {TIMESTAMPED_MSS_BYTES + 100}-byte write (one MSS and 100 bytes) then a 50-byte "
             "write, over a 60 ms round trip (delay line); captured at the client",
             (Flow("rtt-hold", 20, (TIMESTAMPED_MSS_BYTES + 100, 50), (2,)),),
             rtt_ms=RTT_HOLD_RTT_MS, stall_kind=NAGLE_RTT_HOLD,
             expectation="Minshall's Nagle: the 100-byte tail leaves at once, the 50 bytes wait "
                         "while it is unacknowledged; the server ACKs the two segments at once "
                         "(no delayed ACK), so the 50 bytes leave one round trip later",
             expected={"findings": [
                 finding(NAGLE_RTT_HOLD, (18, 20), (55, 70),
                         "every exchange: the 50-byte tail leaves right after the ordinary ACK "
                         "of the request's first two segments, one round trip after them",
                         holder="client")],
                 "absent": [NAGLE_DELACK_STALL]},
             holder="client", source=CHESHIRE),
    Scenario("cause-rto", "loss: a retransmission timeout",
             "request/response over a 20 ms round trip; the delay line drops the third request "
             "and its next two transmissions: a retransmission timeout with backoff",
             (Flow("rpc", 6, (100,), (100,), pause_s=0.1),), rtt_ms=20.0,
             delay_rules=({"direction": "to_server", "match": "data", "frames": [2, 3, 4],
                           "action": "drop"},),
             stall_kind=None,
             expected={"findings": [
                 finding(LOSS_RECOVERY, (1, 1), (950, 1100),
                         "the third request reaches the server on its fourth transmission: a "
                         "tail-loss probe about 240 ms after it, an RTO about 240 ms later, the "
                         "backed-off RTO about 500 ms after that (path.acted lists the three "
                         "drops)", subkind="rto")],
                 "absent": list(NAGLE_FAMILY)}),
    Scenario("cause-spurious", "spurious retransmissions",
             "requests the server answers after 600 ms, over a 20 ms round trip; the delay line "
             "drops the ACK of one request (port 9000) and holds back another's for 500 ms "
             "(port 9001): retransmissions of data that had arrived",
             (Flow("ack-dropped", 3, (100,), (100,), think_time_s=0.6),
              Flow("ack-held", 3, (100,), (100,), think_time_s=0.6)), rtt_ms=20.0,
             delay_rules=({"direction": "to_client", "match": "pure_ack", "port": 9000,
                           "frames": [1], "action": "drop"},
                          {"direction": "to_client", "match": "pure_ack", "port": 9001,
                           "frames": [1, 2], "action": "hold", "extra_ms": 500}),
             stall_kind=None,
             expected={"findings": [
                 finding(LOSS_RECOVERY, (2, 3), (0, 0),
                         "retransmissions of data that had arrived, each proven by the server's "
                         "D-SACK: on port 9000 a tail-loss probe (its ACK was dropped), on port "
                         "9001 a tail-loss probe and an RTO (its ACKs were held 500 ms, and "
                         "arrive late as duplicates); they delay nothing", subkind="spurious"),
                 finding(THINK_TIME, (6, 6), (590, 640),
                         "every exchange: the server answers 600 ms after the request; the "
                         "spurious retransmissions fall inside these gaps and do not explain "
                         "them")],
                 "absent": list(NAGLE_FAMILY)}),
    Scenario("cause-zero-window-reopens", "a zero window that reopens",
             "64 KB one way to a receiver with a 4 KB receive buffer that reads nothing for "
             "1.5 s, then everything",
             (Flow("stops-reading", 1, (65536,), (), one_way=True, server_rcvbuf_bytes=4096,
                   server_read_delay_s=1.5),),
             stall_kind=None,
             expected={"findings": [
                 finding(ZERO_WINDOW, (1, 1), (1300, 1600),
                         "the window closes after about 4 KB and stays shut, the sender probing "
                         "at backoff (about 0.2, 0.4, 0.9 s), until the reader starts 1.5 s "
                         "after the connection; then it reopens and the rest flows")],
                 "absent": list(NAGLE_FAMILY)}),
    Scenario("cause-zero-window-stuck", "a zero window that never reopens",
             "64 KB one way to a receiver with a 4 KB receive buffer that never reads; the "
             "sender waits 8 s for it to finish, then aborts (RST)",
             (Flow("never-reads", 1, (65536,), (), one_way=True, server_rcvbuf_bytes=4096,
                   server_read_delay_s=-1, client_give_up_s=8.0),),
             stall_kind=None,
             expected={"findings": [
                 finding(ZERO_WINDOW, (1, 1), (7800, 8200),
                         "the window closes after about 4 KB and never reopens: zero-window "
                         "probes at backoff (about 0.2, 0.4, 0.9, 1.7, 3.5 s apart), each "
                         "answered by a zero window, until the sender's RST")],
                 "absent": list(NAGLE_FAMILY)}),
    Scenario("cause-window-limited", "a slow reader's window",
             "32 KB one way to a receiver with a 4 KB receive buffer that reads 512 bytes every "
             "20 ms",
             (Flow("slow-reader", 1, (32768,), (), one_way=True, server_rcvbuf_bytes=4096,
                   server_read_chunk_bytes=512, server_read_interval_s=0.02),),
             stall_kind=None,
             expected={"findings": [
                 finding(WINDOW_LIMITED, (1, 40), (10, 1400),
                         "the whole transfer (about 1.2 s for 32 KB) is paced by the reader: "
                         "the window opens one segment at a time between zero windows; a "
                         "correct analysis blames the receiver's window for most of that time, "
                         "as window-limited or as short zero windows", total_ms=[900, 1400]),
                 finding(ZERO_WINDOW, (0, 40), (10, 300),
                         "the short zero windows between the reader's reads, each ended by a "
                         "window update (or a probe's answer)")],
                 "absent": list(NAGLE_FAMILY)}),
    Scenario("cause-small-window", "a window below one MSS",
             "16 KB one way to a receiver whose receive buffer is the smallest the kernel "
             "allows (SO_RCVBUF 1) and that reads 200 bytes every 20 ms",
             (Flow("tiny-buffer", 1, (16384,), (), one_way=True, server_rcvbuf_bytes=1,
                   server_read_chunk_bytes=200, server_read_interval_s=0.02),),
             stall_kind=None,
             expected={"findings": [
                 finding(WINDOW_LIMITED, (20, 30), (15, 150),
                         "the receiver's window is never more than a few hundred bytes, below "
                         "one MSS (1448): the sender fills it, waits for the reader to free "
                         "it (a zero window between, then a window update below one MSS), and "
                         "sends again; nearly the whole transfer (about 1.7 s)",
                         subkind="below-mss", total_ms=[1400, 1900])],
                 "absent": list(NAGLE_FAMILY)}),
    Scenario("cause-syn-unanswered", "unanswered SYNs",
             "two connections to a port whose SYNs the server's firewall drops (nftables), the "
             "client giving up after 8 s; beside them, an answered request/response connection",
             (Flow("unanswered", 0, connections=2, unanswered=True, client_give_up_s=8.0),
              Flow("rpc", 3, (100,), (100,))),
             server_firewall=("add table inet ndlab",
                              "add chain inet ndlab input { type filter hook input priority 0 ; }",
                              "add rule inet ndlab input tcp dport 9000 drop"),
             stall_kind=None,
             expected={"findings": [
                 finding(HANDSHAKE_RETRY, (2, 2), (7000, 8200),
                         "two connections never answered, each a SYN and 6 retransmissions "
                         "(this kernel: 1 s apart four times, then 2 s) until the client gives "
                         "up at 8 s; the answered connection on port 9001 shows the capture "
                         "has both directions, so no warning may say the other direction is "
                         "missing")],
                 "absent": list(NAGLE_FAMILY)}),
    Scenario("mixed", "several kinds in one capture",
             "concurrent connections of several kinds in one capture",
             MIXED_FLOWS,
             expectation="stalls on the tiny-writes and header-body connections only"),
    Scenario("mixed-20ms-at-server", "the same over 20 ms, seen at the server",
             "the concurrent connections over a 20 ms round trip (delay line), captured at the "
             "server: each client's holds seen a round trip away from it, where the path's "
             "jitter makes a release come late now and then",
             MIXED_FLOWS,
             rtt_ms=20.0, capture_side="server",
             expectation="stalls on the tiny-writes and header-body connections only"),
)}
