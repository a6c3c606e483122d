"""Vectorised decoding of a batch of raw packets: link layer -> IPv4/IPv6 -> TCP.

Every step works on whole arrays (one element per packet in the batch). A packet that cannot be
used gets a skip code at the first step that rejects it; later steps leave it alone. Header
gathers clip their positions to the batch buffer, so reading a header field past a packet's end
never leaves the buffer; such reads are masked out by the caplen checks.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from nagledetect.read import skips
from nagledetect.read.layout import (
    BSD_NULL,
    ETHERNET,
    ETHERNET_IPV4_TCP,
    IP_VERSION,
    IPV4,
    IPV6,
    IPV6_EXTENSION,
    IPV6_JUMBO_OPTION,
    LINUX_SLL,
    LINUX_SLL2,
    PPPOE_SESSION,
    TCP,
    VLAN_TAG,
    Header,
    HeaderValues,
)
from nagledetect.read.tcp_options import decode_tcp_options

IPV4_MAPPED_WORDS = (0, 0, 0xFFFF)
"""Words 0-2 of an IPv4 address: every address is held as four 32-bit words, IPv4 ones mapped
as ::ffff:a.b.c.d (the fourth word is the IPv4 address)."""
PAD_BYTES = 512
NO_LINK_END = np.iinfo(np.int64).max
MAX_VLAN_TAGS = 8
MAX_IPV6_EXTENSIONS = 8
ETHERNET_IPV4_TCP_BYTES = 14 + 20 + 20

ETHERTYPE_IPV4 = 0x0800
ETHERTYPE_IPV6 = 0x86DD
VLAN_ETHERTYPES = (0x8100, 0x88A8, 0x9100, 0x9200)
ETHERTYPE_PPPOE_SESSION = 0x8864
PPPOE_VERSION_TYPE = 0x11
PPPOE_SESSION_DATA = 0
PPPOE_HEADER_BYTES = 6
PPP_IP_PROTOCOLS = {0x0021: ETHERTYPE_IPV4, 0x0057: ETHERTYPE_IPV6}
"""The PPP protocol numbers of IPv4 and IPv6 (RFC 1332, RFC 5072), as the ethertypes they stand for."""
BSD_FAMILIES_IPV6 = (24, 28, 30)
IPPROTO_TCP = 6
IPV6_EXTENSION_HEADERS = (0, 43, 60)
IPV6_FRAGMENT_HEADER = 44
IPV6_AUTH_HEADER = 51

LINKTYPE_NULL = 0
LINKTYPE_ETHERNET = 1
LINKTYPE_LOOP = 108
LINKTYPE_LINUX_SLL = 113
LINKTYPE_LINUX_SLL2 = 276
RAW_IP_LINKTYPES = (12, 14, 101, 228, 229)
LINKTYPE_NAMES = {
    LINKTYPE_NULL: "BSD loopback (null)", LINKTYPE_ETHERNET: "Ethernet", LINKTYPE_LOOP: "OpenBSD loopback",
    LINKTYPE_LINUX_SLL: "Linux cooked (SLL)", LINKTYPE_LINUX_SLL2: "Linux cooked v2 (SLL2)",
    12: "raw IP", 14: "raw IP", 101: "raw IP", 228: "raw IPv4", 229: "raw IPv6",
}
SUPPORTED_LINKTYPES = tuple(LINKTYPE_NAMES)


@dataclass
class DecodedBatch:
    """The TCP packets of one batch as columns, and the count of the others by reason."""

    columns: dict[str, np.ndarray]
    skipped: dict[str, int]
    sack_blocks: dict[str, np.ndarray] = field(default_factory=dict)
    skip_codes: np.ndarray | None = None
    """Each packet's skip code (`skips.KEPT` for a TCP packet); None for a link type that is
    not decoded (every packet skipped for it)."""


@dataclass
class _Cursor:
    """Where each packet's next header starts, where its capture ends, where its link layer
    says the IP packet ends (PPPoE's payload length; NO_LINK_END where it says nothing), and
    why it was dropped."""

    position: np.ndarray
    captured_end: np.ndarray
    skip: np.ndarray
    link_end: np.ndarray

    def require(self, length: int, reason: int, mask: np.ndarray | None = None) -> None:
        """Drop packets (of `mask`) whose capture does not hold `length` bytes from the cursor."""
        short = (self.skip == skips.KEPT) & (self.position + length > self.captured_end)
        if mask is not None:
            short &= mask
        self.skip[short] = reason

    def reject(self, mask: np.ndarray, reason: int | np.ndarray) -> None:
        """Drop the still-kept packets selected by `mask` for `reason`."""
        hit = mask & (self.skip == skips.KEPT)
        self.skip[hit] = reason[hit] if isinstance(reason, np.ndarray) else reason

    def safe_position(self) -> np.ndarray:
        """Positions with dropped packets moved to 0, so gathers stay inside the buffer."""
        return np.where(self.skip == skips.KEPT, self.position, 0)

    def subset(self, rows: np.ndarray) -> _Cursor:
        """A cursor over some packets only (copies), to be merged back with `merge`."""
        return _Cursor(self.position[rows], self.captured_end[rows], self.skip[rows],
                       self.link_end[rows])

    def merge(self, rows: np.ndarray, sub: _Cursor) -> None:
        self.position[rows] = sub.position
        self.skip[rows] = sub.skip


def pad_batch(packet_bytes: bytes) -> np.ndarray:
    """The batch as uint8 without a copy; a batch shorter than PAD_BYTES is copied and padded
    with zeros, so that every header layout fits in the buffer at least once."""
    if len(packet_bytes) >= PAD_BYTES:
        return np.frombuffer(packet_bytes, dtype=np.uint8)
    buf = np.zeros(PAD_BYTES, dtype=np.uint8)
    buf[: len(packet_bytes)] = np.frombuffer(packet_bytes, dtype=np.uint8)
    return buf


def decode_batch(
    buf: np.ndarray, offsets: np.ndarray, caplens: np.ndarray, linktype: int
) -> DecodedBatch:
    """Decode every packet of a batch; returns the TCP ones as columns (batch order)."""
    count = len(offsets)
    if linktype not in SUPPORTED_LINKTYPES:
        reason = skips.reason_text(skips.LINK_TYPE_BASE + linktype)
        return DecodedBatch({}, {reason: count} if count else {})
    if linktype == LINKTYPE_ETHERNET:
        columns, skip = _plain_first(buf, offsets, caplens, linktype)
        keep = skip == skips.KEPT
    else:
        columns, skip = _fixed_headers(buf, offsets, caplens, linktype)
        keep = skip == skips.KEPT
        if not keep.all():
            columns = {name: values[keep] for name, values in columns.items()}
    options, sack = decode_tcp_options(buf, columns.pop("options_start"),
                                       columns.pop("options_end"))
    columns["batch_index"] = np.flatnonzero(keep)
    columns.update(options)
    return DecodedBatch(columns, skips.count_reasons(skip), sack, skip)


def _fixed_headers(buf: np.ndarray, offsets: np.ndarray, caplens: np.ndarray,
                   linktype: int) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """Link, IP and TCP fixed headers of every packet, layer by layer: columns (one element per
    packet, meaningful where the skip code is KEPT) and each packet's skip code."""
    cursor = _Cursor(
        position=offsets.astype(np.int64),
        captured_end=offsets.astype(np.int64) + caplens.astype(np.int64),
        skip=np.zeros(len(offsets), dtype=np.int64),
        link_end=np.full(len(offsets), NO_LINK_END, dtype=np.int64),
    )
    ethertype = _link_layer(buf, cursor, linktype)
    is_ipv6 = ethertype == ETHERTYPE_IPV6
    cursor.reject(~np.isin(ethertype, (ETHERTYPE_IPV4, ETHERTYPE_IPV6)),
                  skips.ETHERTYPE_BASE + ethertype.astype(np.int64))
    network = _network_layer(buf, cursor, is_ipv6)
    kept = cursor.skip == skips.KEPT
    return _transport_layer(buf, cursor, network, kept), cursor.skip


def _plain_first(buf: np.ndarray, offsets: np.ndarray, caplens: np.ndarray,
                 linktype: int) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """The kept packets' fixed-header columns (batch order) and every packet's skip code, for
    an Ethernet batch: the plain packets (no VLAN tag, IPv4 without options, not a fragment,
    TCP, lengths consistent and captured) are read in one gather of the stacked layout; the
    rest go through the layer-by-layer walk, which decides their fate as for any packet."""
    header = ETHERNET_IPV4_TCP.gather(buf, offsets)
    tcp_header_bytes = header["tcp_header_words"].astype(np.int64) * 4
    plain = ((caplens >= ETHERNET_IPV4_TCP_BYTES) & (header["ethernet_ethertype"] == ETHERTYPE_IPV4)
             & (header["ipv4_version"] == 4) & (header["ipv4_header_words"] == 5)
             & (header["ipv4_fragment_offset"] == 0) & (header["ipv4_protocol"] == IPPROTO_TCP)
             & (tcp_header_bytes >= 20)
             & (header["ipv4_total_length"].astype(np.int64) >= 20 + tcp_header_bytes))
    skip = np.zeros(len(offsets), dtype=np.int64)
    rest = np.flatnonzero(~plain)
    if len(rest) == 0:
        return _plain_columns(header, offsets, caplens), skip
    plain_rows = np.flatnonzero(plain)
    columns = _plain_columns(header.rows(plain_rows), offsets[plain_rows], caplens[plain_rows])
    walked, skip[rest] = _fixed_headers(buf, offsets[rest], caplens[rest], linktype)
    walked_kept = skip[rest] == skips.KEPT
    if not walked_kept.any():
        return columns, skip
    # Both sources keep batch order, so each fills its places in the kept packets by a
    # boolean mask (half the cost of scattering by position).
    from_plain = plain[skip == skips.KEPT]
    from_walk = ~from_plain
    merged = {}
    for name, values in columns.items():
        merged[name] = np.empty(len(from_plain), dtype=values.dtype)
        merged[name][from_plain] = values
        merged[name][from_walk] = walked[name][walked_kept]
    return merged, skip


def ipv4_mapped(word_0: np.ndarray, word_1: np.ndarray, word_2: np.ndarray) -> np.ndarray:
    """Which addresses hold IPv4 (mapped) addresses, from their words 0-2."""
    return ((word_0 == IPV4_MAPPED_WORDS[0]) & (word_1 == IPV4_MAPPED_WORDS[1])
            & (word_2 == IPV4_MAPPED_WORDS[2]))


def _plain_columns(header: HeaderValues, offsets: np.ndarray,
                   caplens: np.ndarray) -> dict[str, np.ndarray]:
    """The fixed-header columns of plain Ethernet/IPv4/TCP packets, from their stacked header."""
    count = len(offsets)
    tcp_header_bytes = header["tcp_header_words"].astype(np.int64) * 4
    start = offsets.astype(np.int64) + 14 + 20
    zeros = np.zeros(count, dtype=np.uint32)
    mapped = np.full(count, IPV4_MAPPED_WORDS[2], dtype=np.uint32)
    return {
        "ip_version": np.full(count, 4, dtype=np.uint8),
        "src_0": zeros, "src_1": zeros.copy(), "src_2": mapped, "src_3": header["ipv4_src"],
        "dst_0": zeros.copy(), "dst_1": zeros.copy(), "dst_2": mapped.copy(),
        "dst_3": header["ipv4_dst"],
        "src_port": header["tcp_src_port"],
        "dst_port": header["tcp_dst_port"],
        "seq_raw": header["tcp_seq"],
        "ack_raw": header["tcp_ack"],
        "flags": header["tcp_flags"],
        "window_raw": header["tcp_window"],
        "tcp_header_bytes": tcp_header_bytes.astype(np.uint8),
        "payload_bytes": (header["ipv4_total_length"].astype(np.int64) - 20
                          - tcp_header_bytes).astype(np.uint32),
        "payload_from_capture": np.zeros(count, dtype=bool),
        "options_start": start + 20,
        "options_end": np.minimum(start + tcp_header_bytes, offsets + caplens.astype(np.int64)),
    }


def _link_layer(buf: np.ndarray, cursor: _Cursor, linktype: int) -> np.ndarray:
    """Advance the cursor past the link header; return each packet's network protocol."""
    if linktype == LINKTYPE_ETHERNET:
        return _ethernet(buf, cursor)
    if linktype == LINKTYPE_LINUX_SLL:
        return _fixed_link_header(buf, cursor, LINUX_SLL, 16)
    if linktype == LINKTYPE_LINUX_SLL2:
        return _fixed_link_header(buf, cursor, LINUX_SLL2, 20)
    if linktype in (LINKTYPE_NULL, LINKTYPE_LOOP):
        return _bsd_loopback(buf, cursor, byteswap_allowed=linktype == LINKTYPE_NULL)
    cursor.require(1, skips.TRUNCATED_IP_HEADER)
    version = IP_VERSION.gather(buf, cursor.safe_position())["version"]
    return np.where(version == 6, ETHERTYPE_IPV6, ETHERTYPE_IPV4).astype(np.uint16)


def _ethernet(buf: np.ndarray, cursor: _Cursor) -> np.ndarray:
    """Ethernet II with any number (up to MAX_VLAN_TAGS) of 802.1Q / 802.1ad tags, then
    possibly a PPPoE session."""
    cursor.require(14, skips.TRUNCATED_LINK_HEADER)
    ethertype = ETHERNET.gather(buf, cursor.safe_position())["ethertype"]
    cursor.position += 14
    for _ in range(MAX_VLAN_TAGS):
        tagged = np.isin(ethertype, VLAN_ETHERTYPES) & (cursor.skip == skips.KEPT)
        if not tagged.any():
            break
        cursor.require(4, skips.TRUNCATED_LINK_HEADER, tagged)
        inner = VLAN_TAG.gather(buf, cursor.safe_position())["ethertype"]
        ethertype = np.where(tagged, inner, ethertype)
        cursor.position[tagged] += 4
    return _pppoe_session(buf, cursor, ethertype)


def _pppoe_session(buf: np.ndarray, cursor: _Cursor, ethertype: np.ndarray) -> np.ndarray:
    """Step over a PPPoE session header and its PPP protocol field where the ethertype says
    PPPoE session; such a frame carries IP when its PPP protocol is IPv4 or IPv6 (its other
    protocols, LCP and the like, are link control, skipped by name)."""
    session = (ethertype == ETHERTYPE_PPPOE_SESSION) & (cursor.skip == skips.KEPT)
    if not session.any():
        return ethertype
    cursor.require(PPPOE_HEADER_BYTES + 1, skips.TRUNCATED_LINK_HEADER, session)
    start = cursor.safe_position()
    header = PPPOE_SESSION.gather(buf, start)
    cursor.reject(session & ((header["version_type"] != PPPOE_VERSION_TYPE)
                             | (header["code"] != PPPOE_SESSION_DATA)), skips.BAD_PPPOE_HEADER)
    protocol = header["ppp_protocol"].astype(np.int64)
    compressed = (protocol >> 8) & 1 == 1  # a full field's first byte is even (RFC 1661)
    protocol = np.where(compressed, protocol >> 8, protocol)
    header_bytes = np.where(compressed, PPPOE_HEADER_BYTES + 1, PPPOE_HEADER_BYTES + 2)
    cursor.require(PPPOE_HEADER_BYTES + 2, skips.TRUNCATED_LINK_HEADER, session & ~compressed)
    carried = np.zeros(len(protocol), dtype=ethertype.dtype)
    for ppp_protocol, ip_ethertype in PPP_IP_PROTOCOLS.items():
        carried[protocol == ppp_protocol] = ip_ethertype
    cursor.reject(session & (carried == 0), skips.PPP_PROTOCOL_BASE + protocol)
    session &= cursor.skip == skips.KEPT
    cursor.position[session] += header_bytes[session]
    # The PPPoE length bounds the IP packet as the frame's end bounds it elsewhere: an IP
    # length that claims more counts bytes the session did not carry (tshark does the same).
    payload_end = start + PPPOE_HEADER_BYTES + header["payload_length"].astype(np.int64)
    cursor.link_end[session] = payload_end[session]
    return np.where(session, carried, ethertype)


def _fixed_link_header(
    buf: np.ndarray, cursor: _Cursor, header: Header, header_bytes: int
) -> np.ndarray:
    cursor.require(header_bytes, skips.TRUNCATED_LINK_HEADER)
    protocol = header.gather(buf, cursor.safe_position())["protocol"]
    cursor.position += header_bytes
    return protocol


def _bsd_loopback(buf: np.ndarray, cursor: _Cursor, byteswap_allowed: bool) -> np.ndarray:
    """BSD null/loopback: a 4-byte address family, in the capturing host's byte order for NULL."""
    cursor.require(4, skips.TRUNCATED_LINK_HEADER)
    family = BSD_NULL.gather(buf, cursor.safe_position())["family"]
    if byteswap_allowed:
        family = np.where(family > 0xFFFF, family.byteswap(), family)
    cursor.position += 4
    ethertype = np.full(len(family), 0xFFFF, dtype=np.uint16)
    ethertype[family == 2] = ETHERTYPE_IPV4
    ethertype[np.isin(family, BSD_FAMILIES_IPV6)] = ETHERTYPE_IPV6
    return ethertype


def _network_layer(buf: np.ndarray, cursor: _Cursor, is_ipv6: np.ndarray) -> dict[str, np.ndarray]:
    """Decode IPv4 and IPv6 headers; leave the cursor at the transport header.

    Each family is decoded on its own packets only (a sub-cursor), so a batch of IPv4 traffic
    with a few IPv6 packets pays for the IPv6 walk on those few, not on the whole batch; a batch
    of one family is decoded in place.
    """
    count = len(cursor.position)
    network = {
        "ip_version": np.where(is_ipv6, 6, 4).astype(np.uint8),
        "protocol": np.zeros(count, dtype=np.uint8),
        "ip_payload_bytes": np.zeros(count, dtype=np.int64),
        "ip_length_from_capture": np.zeros(count, dtype=bool),
        **{name: np.zeros(count, dtype=np.uint32) for name in _ADDRESS_WORDS},
    }
    cursor.require(20, skips.TRUNCATED_IP_HEADER, ~is_ipv6)
    cursor.require(40, skips.TRUNCATED_IP_HEADER, is_ipv6)
    kept = cursor.skip == skips.KEPT
    for family, decode in ((~is_ipv6, _ipv4), (is_ipv6, _ipv6)):
        rows = np.flatnonzero(family & kept)
        if len(rows) == 0:
            continue
        if len(rows) == kept.sum():
            network.update(decode(buf, cursor))  # one family: dropped rows stay dropped
            continue
        sub = cursor.subset(rows)
        for name, values in decode(buf, sub).items():
            network[name][rows] = values
        cursor.merge(rows, sub)
    cursor.reject(network["protocol"] != IPPROTO_TCP,
                  skips.IP_PROTOCOL_BASE + network["protocol"].astype(np.int64))
    return network


_ADDRESS_WORDS = ("src_0", "src_1", "src_2", "src_3", "dst_0", "dst_1", "dst_2", "dst_3")


def _ipv4(buf: np.ndarray, cursor: _Cursor) -> dict[str, np.ndarray]:
    """IPv4: addresses stored IPv4-mapped (::ffff:a.b.c.d) so all keys have one shape."""
    start = cursor.position.copy()
    header = IPV4.gather(buf, start)
    header_bytes = header["header_words"].astype(np.int64) * 4
    cursor.reject((header["version"] != 4) | (header_bytes < 20), skips.BAD_IP_HEADER)
    cursor.reject(header["fragment_offset"] > 0, skips.IPV4_LATER_FRAGMENT)
    total = header["total_length"].astype(np.int64)
    from_capture = total == 0
    carried = np.minimum(np.where(from_capture, cursor.captured_end, start + total), cursor.link_end)
    payload = carried - start - header_bytes
    cursor.reject(~from_capture & (payload < 0), skips.BAD_IP_HEADER)
    cursor.position += header_bytes
    mapped = np.full(len(start), IPV4_MAPPED_WORDS[2], dtype=np.uint32)
    return {"protocol": header["protocol"], "ip_payload_bytes": payload,
            "ip_length_from_capture": from_capture, "src_2": mapped, "src_3": header["src"],
            "dst_2": mapped, "dst_3": header["dst"]}


def _ipv6(buf: np.ndarray, cursor: _Cursor) -> dict[str, np.ndarray]:
    """IPv6 and its extension-header chain (hop-by-hop, routing, destination, fragment, AH)."""
    header = IPV6.gather(buf, cursor.position)
    stated = header["payload_length"].astype(np.int64)
    next_header = header["next_header"].astype(np.int64)
    jumbo = (stated == 0) & (next_header == 0)
    payload = np.minimum(stated, cursor.link_end - cursor.position - 40)
    cursor.reject(payload < 0, skips.BAD_IP_HEADER)
    cursor.position += 40
    next_header, payload = _walk_ipv6_extensions(buf, cursor, next_header, payload, jumbo)
    values = {name: header[name] for name in _ADDRESS_WORDS}
    values.update(protocol=np.clip(next_header, 0, 255).astype(np.uint8), ip_payload_bytes=payload)
    return values


def _walk_ipv6_extensions(buf, cursor: _Cursor, next_header, payload, jumbo):
    """Step over extension headers; returns each packet's upper-layer protocol and length."""
    if jumbo.any():
        option = IPV6_JUMBO_OPTION.gather(buf, cursor.safe_position())
        has_jumbo = jumbo & (option["option_type"] == 0xC2)
        payload = np.where(has_jumbo, option["jumbo_length"].astype(np.int64), payload)
    extension_types = (*IPV6_EXTENSION_HEADERS, IPV6_FRAGMENT_HEADER, IPV6_AUTH_HEADER)
    for _ in range(MAX_IPV6_EXTENSIONS):
        walking = (cursor.skip == skips.KEPT) & np.isin(next_header, extension_types)
        if not walking.any():
            return next_header, payload
        cursor.require(8, skips.IPV6_EXTENSION_CHAIN, walking)
        ext = IPV6_EXTENSION.gather(buf, cursor.safe_position())
        units = ext["length_units"].astype(np.int64)
        length = np.where(next_header == IPV6_AUTH_HEADER, (units + 2) * 4, (units + 1) * 8)
        length = np.where(next_header == IPV6_FRAGMENT_HEADER, 8, length)
        later_fragment = (next_header == IPV6_FRAGMENT_HEADER) & (ext["fragment_offset"] > 0)
        cursor.reject(walking & later_fragment, skips.IPV6_LATER_FRAGMENT)
        walking &= cursor.skip == skips.KEPT
        next_header = np.where(walking, ext["next_header"], next_header)
        payload = np.where(walking, payload - length, payload)
        cursor.position[walking] += length[walking]
    cursor.reject(np.isin(next_header, extension_types), skips.IPV6_EXTENSION_CHAIN)
    return next_header, payload


def _transport_layer(buf, cursor: _Cursor, network: dict, kept: np.ndarray) -> dict[str, np.ndarray]:
    """The TCP header fixed part, and the payload length from the IP length (not the capture)."""
    cursor.require(20, skips.TRUNCATED_TCP_HEADER)
    start = cursor.safe_position()
    header = TCP.gather(buf, start)
    header_bytes = header["header_words"].astype(np.int64) * 4
    payload = network["ip_payload_bytes"] - header_bytes
    cursor.reject(kept & ((header_bytes < 20) | (payload < 0)), skips.BAD_TCP_HEADER_LENGTH)
    columns = {
        "ip_version": network["ip_version"],
        **{name: network[name] for name in _ADDRESS_WORDS},
        "src_port": header["src_port"],
        "dst_port": header["dst_port"],
        "seq_raw": header["seq"],
        "ack_raw": header["ack"],
        "flags": header["flags"],
        "window_raw": header["window"],
        "tcp_header_bytes": header_bytes.astype(np.uint8),
        "payload_bytes": np.maximum(payload, 0).astype(np.uint32),
        "payload_from_capture": network["ip_length_from_capture"],
        "options_start": start + 20,
        "options_end": np.minimum(start + header_bytes, cursor.captured_end),
    }
    return columns
