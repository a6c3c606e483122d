"""Why a packet was not used: integer codes on the hot path, words in the report.

Codes are small integers so a whole batch can be counted at once; the few codes
that carry a number (an IP protocol, a PPP protocol, an ethertype, a link type) add it to a base.
"""

from __future__ import annotations

from collections.abc import Mapping

KEPT = 0
TRUNCATED_LINK_HEADER = 1
TRUNCATED_IP_HEADER = 2
BAD_IP_HEADER = 3
IPV4_FRAGMENT = 4
IPV6_FRAGMENT = 5
IPV6_EXTENSION_CHAIN = 6
TRUNCATED_TCP_HEADER = 7
BAD_TCP_HEADER_LENGTH = 8
EXCLUDED_BY_FILTER = 9
BAD_PPPOE_HEADER = 10
WLAN_NO_DATA = 11
WLAN_PROTECTED = 12
WLAN_FRAGMENT = 13
WLAN_AGGREGATE = 14
BAD_RADIOTAP_HEADER = 15
IP_PROTOCOL_BASE = 1_000
PPP_PROTOCOL_BASE = 10_000
ETHERTYPE_BASE = 100_000
LINK_TYPE_BASE = 1_000_000
MAX_8023_LENGTH = 1500

_FIXED_REASONS = {
    TRUNCATED_LINK_HEADER: "truncated link-layer header",
    TRUNCATED_IP_HEADER: "truncated IP header",
    BAD_IP_HEADER: "bad IP header",
    IPV4_FRAGMENT: "IPv4 fragment (its datagram is decoded at the fragment that completes it)",
    IPV6_FRAGMENT: "IPv6 fragment (its datagram is decoded at the fragment that completes it)",
    IPV6_EXTENSION_CHAIN: "IPv6 extension headers malformed or too long",
    TRUNCATED_TCP_HEADER: "truncated TCP header",
    BAD_TCP_HEADER_LENGTH: "bad TCP header length",
    EXCLUDED_BY_FILTER: "excluded by filter",
    BAD_PPPOE_HEADER: "bad PPPoE session header (not version 1, type 1, code 0)",
    WLAN_NO_DATA: "802.11 frame without data (management, control, null data)",
    WLAN_PROTECTED: "802.11 data frame encrypted",
    WLAN_FRAGMENT: "802.11 fragment (not put back together)",
    WLAN_AGGREGATE: "802.11 A-MSDU (several packets in one frame, not decoded)",
    BAD_RADIOTAP_HEADER: "bad radiotap header (not version 0, or its length past the frame)",
}

_ETHERTYPE_NAMES = {0x8863: "PPPoE discovery"}
"""Ethertypes named beside their number where the number alone would puzzle."""

_PPP_PROTOCOL_NAMES = {
    0xC021: "LCP", 0xC023: "PAP", 0xC223: "CHAP", 0x8021: "IPCP", 0x8057: "IPv6CP",
    0x80FD: "CCP", 0x00FD: "compressed datagram", 0x003D: "multilink", 0x0281: "MPLS",
}

_IP_PROTOCOL_NAMES = {
    1: "ICMP", 2: "IGMP", 4: "IPv4-in-IP", 17: "UDP", 41: "IPv6-in-IP", 47: "GRE",
    50: "ESP", 51: "AH", 58: "ICMPv6", 59: "IPv6 no next header", 89: "OSPF", 103: "PIM",
    112: "VRRP", 132: "SCTP", 33: "DCCP",
}


def reason_text(code: int) -> str:
    """The words the report shows for a skip code."""
    if code >= LINK_TYPE_BASE:
        return f"unsupported link type {code - LINK_TYPE_BASE}"
    if code >= ETHERTYPE_BASE:
        ethertype = code - ETHERTYPE_BASE
        if ethertype <= MAX_8023_LENGTH:
            return "not IP (802.2 LLC frame)"
        name = _ETHERTYPE_NAMES.get(ethertype)
        return f"not IP (ethertype 0x{ethertype:04x}{f': {name}' if name else ''})"
    if code >= PPP_PROTOCOL_BASE:
        protocol = code - PPP_PROTOCOL_BASE
        name = _PPP_PROTOCOL_NAMES.get(protocol)
        return f"not IP (PPP protocol 0x{protocol:04x}{f': {name}' if name else ''})"
    if code >= IP_PROTOCOL_BASE:
        protocol = code - IP_PROTOCOL_BASE
        return f"not TCP ({_IP_PROTOCOL_NAMES.get(protocol, f'IP protocol {protocol}')})"
    return _FIXED_REASONS[code]


def reasons(counts: Mapping[int, int]) -> dict[str, int]:
    """Packets skipped, counted by code, under their report words in code order (the order
    the report keeps among equal counts)."""
    worded: dict[str, int] = {}
    for code in sorted(counts):
        text = reason_text(code)  # several codes can share words (all 802.3 lengths)
        worded[text] = worded.get(text, 0) + counts[code]
    return worded
