"""Small hand-built captures for cases a real stack cannot be made to produce on demand
(a sequence-number wrap, port reuse with a chosen ISN, a capture starting mid-connection).

Every packet is written out with scapy, so the expected numbers follow from the packets below.
"""

from __future__ import annotations

from pathlib import Path

from scapy.layers.inet import IP, TCP
from scapy.layers.l2 import Ether
from scapy.utils import wrpcap

CLIENT = "10.9.0.1"
SERVER = "10.9.0.2"


def segment(src: str, dst: str, sport: int, dport: int, flags: str, seq: int, ack: int = 0,
            payload: int = 0, time_s: float = 0.0, options: list | None = None) -> Ether:
    packet = Ether() / IP(src=src, dst=dst) / TCP(sport=sport, dport=dport, flags=flags,
                                                  seq=seq & 0xFFFFFFFF, ack=ack & 0xFFFFFFFF,
                                                  window=1000, options=options or [])
    if payload:
        packet = packet / (b"x" * payload)
    packet.time = time_s
    return packet


def write(path: Path, packets: list[Ether]) -> Path:
    wrpcap(str(path), packets)
    return path
