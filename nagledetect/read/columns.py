"""What the compiled core's decoded packet columns hold: the link types a packet can come from
(`linktype`), and how an address is held (four 32-bit words, `src_0`..`src_3`)."""

from __future__ import annotations

import numpy as np

IPV4_MAPPED_WORDS = (0, 0, 0xFFFF)
"""Words 0-2 of an IPv4 address: every address is held as four 32-bit words, IPv4 ones mapped
as ::ffff:a.b.c.d (the fourth word is the IPv4 address)."""

LINKTYPE_NULL = 0
LINKTYPE_ETHERNET = 1
LINKTYPE_LOOP = 108
LINKTYPE_LINUX_SLL = 113
LINKTYPE_LINUX_SLL2 = 276
LINKTYPE_NAMES = {
    LINKTYPE_NULL: "BSD loopback (null)", LINKTYPE_ETHERNET: "Ethernet", LINKTYPE_LOOP: "OpenBSD loopback",
    LINKTYPE_LINUX_SLL: "Linux cooked (SLL)", LINKTYPE_LINUX_SLL2: "Linux cooked v2 (SLL2)",
    12: "raw IP", 14: "raw IP", 101: "raw IP", 228: "raw IPv4", 229: "raw IPv6",
    9: "PPP", 10: "FDDI", 50: "PPP in HDLC framing", 51: "PPPoE", 104: "Cisco HDLC",
    239: "Linux NFLOG", 105: "802.11", 127: "802.11 with radiotap", 192: "PPI",
}
"""The link types decoded (the core's `decode.rs`), by the names the report gives them."""


def ipv4_mapped(word_0: np.ndarray, word_1: np.ndarray, word_2: np.ndarray) -> np.ndarray:
    """Which addresses hold IPv4 (mapped) addresses, from their words 0-2."""
    return ((word_0 == IPV4_MAPPED_WORDS[0]) & (word_1 == IPV4_MAPPED_WORDS[1])
            & (word_2 == IPV4_MAPPED_WORDS[2]))
