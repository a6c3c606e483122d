//! One packet's link layer -> IPv4/IPv6 -> TCP: the skip code of the first step that fails
//! (`skips`), else the TCP packet's fields and options. TCP carried in a tunnel is the inner
//! packet's, as Wireshark dissects it: MPLS label stacks, IP in IP (IPv4 or IPv6 in either),
//! GRE carrying IP, MPLS, Ethernet (transparent bridging), an ERSPAN mirror session or a
//! WCCP redirection or Aruba's 802.11 frames, and VXLAN, Geneve, GTP-U and GRE on their UDP
//! ports; Ethernet's 802.1ah (PBB) and VN-Tag headers and LLC/SNAP frames; 802.11 data
//! frames (alone, under radiotap or PPI). A fragmented IP datagram is put back together first
//! (`fragments`): its TCP is the frame's that completes it, as in Wireshark.
//!
//! Every read goes through `slice::get`, so a field past the packet's captured end is a skip,
//! never an out-of-bounds read.

use crate::fragments::{DatagramKey, Fragment, Fragments};
use crate::skips;

const ETHERTYPE_IPV4: u16 = 0x0800;
const ETHERTYPE_IPV6: u16 = 0x86DD;
const VLAN_ETHERTYPES: [u16; 4] = [0x8100, 0x88A8, 0x9100, 0x9200];
/// Cisco's VN-Tag and 802.1ah provider backbone bridging's I-TAG: like a VLAN tag, a header
/// between the frame's ethertype and the one naming what it carries.
const ETHERTYPE_VN_TAG: u16 = 0x8926;
const ETHERTYPE_PBB: u16 = 0x88E7;
/// Bytes between a tag's ethertype and the next one: a VLAN tag's TCI; a VN-Tag; an I-TAG
/// and the customer frame's two addresses.
const VLAN_TAG_BYTES: usize = 2;
const VN_TAG_BYTES: usize = 4;
const PBB_TAG_BYTES: usize = 16;
const ETHERTYPE_PPPOE_SESSION: u16 = 0x8864;
const NOT_IP: u16 = 0xFFFF;
/// An Ethernet type field this small is an 802.3 frame's length: an 802.2 LLC header follows.
const MAX_8023_LENGTH: u16 = 1500;
/// An LLC header whose SAPs are SNAP's (AA AA, unnumbered information), then the SNAP
/// header's organisation code and protocol.
const LLC_SNAP: [u8; 3] = [0xAA, 0xAA, 0x03];
const LLC_SNAP_HEADER_BYTES: usize = 8;
/// Organisation codes whose SNAP protocol is an ethertype (RFC 1042; Cisco's).
const SNAP_ETHERTYPE_OUIS: [[u8; 3]; 2] = [[0, 0, 0], [0, 0, 0xF8]];
const FDDI_HEADER_BYTES: usize = 13;
const MAX_TAGS: usize = 8;
const PPPOE_HEADER_BYTES: usize = 6;
const PPPOE_VERSION_TYPE: u8 = 0x11;
/// PPP in HDLC-like framing (RFC 1662) starts with these address and control bytes.
const PPP_HDLC_ADDRESS_CONTROL: [u8; 2] = [0xFF, 0x03];
const PPP_IPV4: u16 = 0x0021;
const PPP_IPV6: u16 = 0x0057;
const PPP_MPLS: [u16; 2] = [0x0281, 0x0283];
/// Cisco HDLC's address byte (unicast, multicast); an ethertype follows the control byte.
const CISCO_HDLC_ADDRESSES: [u8; 2] = [0x0F, 0x8F];
const CISCO_HDLC_HEADER_BYTES: usize = 4;
/// Linux NFLOG (libpcap's pcap/nflog.h): a 4-byte header (address family first), then
/// type-length-value records (lengths with their own 4 bytes, padded to 4) in the byte order
/// of the host that wrote them; the packet is the payload record's.
const NFLOG_HEADER_BYTES: usize = 4;
const NFLOG_RECORD_HEADER_BYTES: usize = 4;
const NFLOG_PAYLOAD: u16 = 9;
/// Record types are small numbers: read in the wrong byte order, one is 256 or more.
const NFLOG_MAX_RECORD_TYPE: u16 = 0xFF;
const LINUX_AF_INET: u8 = 2;
const LINUX_AF_INET6: u8 = 10;
const BSD_FAMILY_IPV4: u32 = 2;
const BSD_FAMILIES_IPV6: [u32; 3] = [24, 28, 30];
const IPPROTO_TCP: u8 = 6;
const IPV6_FRAGMENT_HEADER: u8 = 44;
const IPV6_AUTH_HEADER: u8 = 51;
const IPV6_EXTENSIONS: [u8; 5] = [0, 43, 60, IPV6_FRAGMENT_HEADER, IPV6_AUTH_HEADER];
const MAX_IPV6_EXTENSIONS: usize = 8;
const IPV6_JUMBO_OPTION: u8 = 0xC2;
const IPV4_FRAGMENT_OFFSET: u16 = 0x1FFF;
const IPV4_MORE_FRAGMENTS: u16 = 0x2000;
const IPV4_MAPPED_WORD: u32 = 0xFFFF;
const ETHERTYPE_MPLS: [u16; 2] = [0x8847, 0x8848];
const MPLS_LABEL_BYTES: usize = 4;
const MPLS_BOTTOM_OF_STACK: u8 = 0x01;
const MAX_MPLS_LABELS: usize = 16;
const IPPROTO_IPV4: u8 = 4;
const IPPROTO_IPV6: u8 = 41;
const IPPROTO_GRE: u8 = 47;
const IPPROTO_UDP: u8 = 17;
const UDP_HEADER_BYTES: usize = 8;
/// The UDP ports Wireshark dissects as VXLAN (RFC 7348) and Geneve (RFC 8926) by default
/// (not Linux's older VXLAN port 8472, which Wireshark leaves as UDP).
const VXLAN_PORT: u16 = 4789;
const GENEVE_PORT: u16 = 6081;
/// GTP-U (3GPP TS 29.281) and GRE in UDP (RFC 8086), also as Wireshark dissects them.
const GTP_U_PORT: u16 = 2152;
const GRE_IN_UDP_PORT: u16 = 4754;
const TUNNEL_PORTS: [u16; 4] = [VXLAN_PORT, GENEVE_PORT, GTP_U_PORT, GRE_IN_UDP_PORT];
const GTP_HEADER_BYTES: usize = 8;
/// A GTP header's version 1 and protocol type GTP (not GTP'), its three optional fields'
/// flags (extension header, sequence number, N-PDU number: any one set adds all three and
/// the first extension's type, 4 bytes), and the message that carries a user's packet.
const GTP_VERSION_1: u8 = 1;
const GTP_PROTOCOL_TYPE: u8 = 0x10;
const GTP_OPTIONAL_FIELDS: u8 = 0x07;
const GTP_OPTIONAL_BYTES: usize = 4;
const GTP_G_PDU: u8 = 0xFF;
const MAX_GTP_EXTENSIONS: usize = 16;
const VXLAN_HEADER_BYTES: usize = 8;
const FIRST_UNPRIVILEGED_PORT: u16 = 1024;
const GENEVE_HEADER_BYTES: usize = 8;
const GRE_CHECKSUM: u8 = 0x80;
const GRE_ROUTING: u8 = 0x40;
const GRE_KEY: u8 = 0x20;
const GRE_SEQUENCE: u8 = 0x10;
const GRE_VERSION: u8 = 0x07;
const GRE_TRANSPARENT_ETHERNET: u16 = 0x6558;
const GRE_ERSPAN_II: u16 = 0x88BE;
const GRE_ERSPAN_III: u16 = 0x22EB;
/// WCCP's redirection to a cache: IPv4, after a 4-byte redirect header in version 2 (which
/// Wireshark tells from version 1 by the first byte not being an IPv4 header's).
const GRE_WCCP: u16 = 0x883E;
const WCCP_REDIRECT_HEADER_BYTES: usize = 4;
/// Aruba's access points tunnel 802.11 frames to their controller in GRE under the protocol
/// types 0x8200 to 0x8370 by steps of 0x10 (those Wireshark dissects so, asked one by one).
const GRE_ARUBA_FIRST: u16 = 0x8200;
const GRE_ARUBA_LAST: u16 = 0x8370;
const GRE_ARUBA_STEP: u16 = 0x10;
/// An 802.11 MAC header: frame control (type in bits 2-3, subtype in 4-7; flags), duration,
/// three addresses, sequence control (fragment number in its low 4 bits); a fourth address
/// between access points (to and from the distribution system), then QoS control in a QoS
/// data frame (bit 7 of its first byte: an A-MSDU) and HT control where such a frame has its
/// order flag.
const WLAN_HEADER_BYTES: usize = 24;
const WLAN_ADDRESS_BYTES: usize = 6;
const WLAN_QOS_BYTES: usize = 2;
const WLAN_HT_CONTROL_BYTES: usize = 4;
const WLAN_DATA_TYPE: u8 = 2;
const WLAN_SUBTYPE_NO_DATA: u8 = 0x04;
const WLAN_SUBTYPE_QOS: u8 = 0x08;
const WLAN_TO_AND_FROM_DS: u8 = 0x03;
const WLAN_MORE_FRAGMENTS: u8 = 0x04;
const WLAN_PROTECTED: u8 = 0x40;
const WLAN_ORDER: u8 = 0x80;
const WLAN_FRAGMENT_NUMBER: u8 = 0x0F;
const WLAN_QOS_AMSDU: u8 = 0x80;
/// Radiotap (little-endian): version 0, a pad byte, the header's length, then bitmaps of the
/// fields present (bit 31: another bitmap follows); the first fields are TSFT (8 bytes,
/// aligned to 8) and flags (data padded to 4 bytes after the MAC header: 0x20).
const RADIOTAP_PRESENT_AT: usize = 4;
const RADIOTAP_MORE_PRESENT: u32 = 1 << 31;
const RADIOTAP_TSFT: u32 = 1 << 0;
const RADIOTAP_FLAGS: u32 = 1 << 1;
const RADIOTAP_TSFT_BYTES: usize = 8;
const RADIOTAP_DATA_PAD: u8 = 0x20;
/// PPI (little-endian): version, flags, the header's length, then the link type it carries.
const PPI_HEADER_BYTES: usize = 8;
const ERSPAN_II_HEADER_BYTES: usize = 8;
const ERSPAN_III_HEADER_BYTES: usize = 12;
const ERSPAN_III_SUBHEADER_BYTES: usize = 8;
/// The version field of a type III header (a type II header's is 1).
const ERSPAN_III_VERSION: u8 = 2;
/// ERSPAN III frame type: an Ethernet frame (the others carry IP without it, or are not
/// frames).
const ERSPAN_III_ETHERNET: u8 = 0;
/// Tunnels inside tunnels followed at most this deep; deeper, the packet is skipped as the
/// tunnel that was not opened.
const MAX_ENCAPSULATIONS: usize = 8;
/// Where the link layer sets no bound on the IP packet (all but PPPoE).
const NO_LINK_END: i64 = i64::MAX;

pub const LINKTYPE_NULL: u32 = 0;
pub const LINKTYPE_ETHERNET: u32 = 1;
pub const LINKTYPE_LOOP: u32 = 108;
pub const LINKTYPE_LINUX_SLL: u32 = 113;
pub const LINKTYPE_LINUX_SLL2: u32 = 276;
const LINKTYPE_PPP: u32 = 9;
const LINKTYPE_FDDI: u32 = 10;
const LINKTYPE_PPP_HDLC: u32 = 50;
const LINKTYPE_PPP_ETHER: u32 = 51;
const LINKTYPE_C_HDLC: u32 = 104;
const LINKTYPE_NFLOG: u32 = 239;
const LINKTYPE_IEEE802_11: u32 = 105;
const LINKTYPE_IEEE802_11_RADIOTAP: u32 = 127;
const LINKTYPE_PPI: u32 = 192;
const RAW_IP_LINKTYPES: [u32; 5] = [12, 14, 101, 228, 229];

pub const MAX_SACK_BLOCKS: usize = 4;
const OPTION_END: u8 = 0;
const OPTION_NOP: u8 = 1;
const OPTION_MSS: u8 = 2;
const OPTION_WINDOW_SCALE: u8 = 3;
const OPTION_SACK_PERMITTED: u8 = 4;
const OPTION_SACK: u8 = 5;
const OPTION_TIMESTAMP: u8 = 8;
pub const NO_WINDOW_SCALE: i8 = -1;

/// The TCP options the analysis uses; a later option of a kind overwrites an earlier one.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TcpOptions {
    pub mss: u16,
    pub window_scale: Option<u8>,
    pub sack_permitted: bool,
    pub timestamp: Option<(u32, u32)>,
    pub sack_blocks: [(u32, u32); MAX_SACK_BLOCKS],
    pub sack_block_count: u8,
}

/// A TCP segment's header fields; addresses as four 32-bit words, IPv4 ones mapped
/// (::ffff:a.b.c.d), as the decoded columns hold them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TcpPacket {
    pub ip_version: u8,
    pub src: [u32; 4],
    pub dst: [u32; 4],
    pub src_port: u16,
    pub dst_port: u16,
    pub seq: u32,
    pub ack: u32,
    pub flags: u16,
    pub window: u16,
    pub tcp_header_bytes: u8,
    pub payload_bytes: u32,
    /// The IPv4 total length was 0 (TCP segmentation offload): the payload is what was captured.
    pub payload_from_capture: bool,
    pub options: TcpOptions,
}

fn byte(data: &[u8], at: usize) -> Option<u8> {
    data.get(at).copied()
}

fn be16(data: &[u8], at: usize) -> Option<u16> {
    let bytes = data.get(at..at.checked_add(2)?)?;
    Some(u16::from_be_bytes([bytes[0], bytes[1]]))
}

fn be32(data: &[u8], at: usize) -> Option<u32> {
    let bytes = data.get(at..at.checked_add(4)?)?;
    Some(u32::from_be_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]))
}

/// Decodes one capture's packets in file order, holding the fragments of IP datagrams until
/// each is whole.
#[derive(Default)]
pub struct Decoder {
    fragments: Fragments,
}

impl Decoder {
    /// The packet's TCP header fields, or the skip code of the first step that rejects it.
    pub fn decode(&mut self, linktype: u32, data: &[u8]) -> Result<TcpPacket, i64> {
        let link = link_layer(linktype, data)?;
        self.carried(data, link, MAX_ENCAPSULATIONS)
    }

    /// The TCP segment carried from `link` on: in IP itself, or in the packet a tunnel
    /// carries (`depth`: how many more tunnels may be opened).
    fn carried(&mut self, data: &[u8], link: Link, depth: usize) -> Result<TcpPacket, i64> {
        let network = match link.ethertype {
            ETHERTYPE_IPV4 => ipv4(data, link.position, link.end)?,
            ETHERTYPE_IPV6 => ipv6(data, link.position, link.end)?,
            mpls if ETHERTYPE_MPLS.contains(&mpls) && depth > 0 => {
                return self.carried(data, mpls_stack(data, link)?, depth - 1);
            }
            other => return Err(skips::ETHERTYPE_BASE + i64::from(other)),
        };
        let Some((identification, fragment)) = network.fragment else {
            return self.transport(data, network, depth);
        };
        let captured = data.get(network.position..).unwrap_or(&[]);
        if captured.len() < fragment.stated_bytes {
            // Not captured whole: no datagram can be put together from it; a first fragment
            // is decoded as it stands, as Wireshark does.
            return if fragment.is_first() {
                self.transport(data, network, depth)
            } else {
                Err(fragment_skip(network.ip_version))
            };
        }
        let key = DatagramKey {
            ip_version: network.ip_version,
            src: network.src,
            dst: network.dst,
            identification,
            protocol: network.protocol,
        };
        match self.fragments.take(key, fragment, captured) {
            Some(payload) => self.transport(&payload, whole(&payload, network)?, depth),
            None => Err(fragment_skip(network.ip_version)),
        }
    }

    /// The TCP segment an IP packet carries, itself or through the tunnel it carries (what
    /// the tunnel carries ends where the IP packet ends, if not before).
    fn transport(&mut self, data: &[u8], network: Network, depth: usize) -> Result<TcpPacket, i64> {
        if depth > 0 {
            let inner = |ethertype| Link {
                ethertype,
                position: network.position,
                end: NO_LINK_END,
            };
            let tunnel = match network.protocol {
                IPPROTO_IPV4 => Some(Ok(inner(ETHERTYPE_IPV4))),
                IPPROTO_IPV6 => Some(Ok(inner(ETHERTYPE_IPV6))),
                IPPROTO_GRE => gre(data, network.position),
                IPPROTO_UDP => udp_tunnel(data, network.position),
                _ => None,
            };
            if let Some(link) = tunnel {
                let link = link?;
                let end = link.end.min(network.end());
                return self.carried(data, Link { end, ..link }, depth - 1);
            }
        }
        if network.protocol != IPPROTO_TCP {
            return Err(skips::IP_PROTOCOL_BASE + i64::from(network.protocol));
        }
        tcp(data, &network)
    }
}

fn fragment_skip(ip_version: u8) -> i64 {
    if ip_version == 4 {
        skips::IPV4_FRAGMENT
    } else {
        skips::IPV6_FRAGMENT
    }
}

/// The IP packet of a datagram put back together (`payload`: its payload whole), past the
/// extension headers its IPv6 fragments carried after their fragment headers.
fn whole(payload: &[u8], network: Network) -> Result<Network, i64> {
    let bytes = payload.len() as i64;
    let walked = if network.ip_version == 6 {
        extensions(payload, 0, network.protocol, bytes)?
    } else {
        Walked {
            protocol: network.protocol,
            position: 0,
            payload_bytes: bytes,
            fragment: None,
        }
    };
    if walked.fragment.is_some() {
        return Err(skips::IPV6_EXTENSION_CHAIN);
    }
    Ok(Network {
        protocol: walked.protocol,
        position: walked.position,
        payload_bytes: walked.payload_bytes,
        payload_from_capture: false,
        fragment: None,
        ..network
    })
}

/// Past an MPLS label stack (RFC 3032) to its bottom label, to what it carries: IPv4 or IPv6
/// by its version nibble, as Wireshark guesses it; anything else is not IP.
fn mpls_stack(data: &[u8], link: Link) -> Result<Link, i64> {
    let not_ip = skips::ETHERTYPE_BASE + i64::from(link.ethertype);
    let mut position = link.position;
    for _ in 0..MAX_MPLS_LABELS {
        let label = data
            .get(position..position + MPLS_LABEL_BYTES)
            .ok_or(skips::TRUNCATED_LINK_HEADER)?;
        position += MPLS_LABEL_BYTES;
        if label[2] & MPLS_BOTTOM_OF_STACK == 0 {
            continue;
        }
        let ethertype = match byte(data, position).ok_or(skips::TRUNCATED_IP_HEADER)? >> 4 {
            4 => ETHERTYPE_IPV4,
            6 => ETHERTYPE_IPV6,
            _ => return Err(not_ip),
        };
        return Ok(Link {
            ethertype,
            position,
            end: link.end,
        });
    }
    Err(not_ip)
}

/// What a GRE header (RFC 2784, RFC 2890; version 0) at `start` says follows it: None where
/// it carries nothing decoded here (another version, source routing, another protocol), so
/// the packet is skipped as GRE.
fn gre(data: &[u8], start: usize) -> Option<Result<Link, i64>> {
    let Some(header) = data.get(start..start + 4) else {
        return Some(Err(skips::TRUNCATED_IP_HEADER));
    };
    let flags = header[0];
    if flags & GRE_ROUTING != 0 || header[1] & GRE_VERSION != 0 {
        return None;
    }
    let optional_words = [GRE_CHECKSUM, GRE_KEY, GRE_SEQUENCE]
        .iter()
        .filter(|&&flag| flags & flag != 0)
        .count();
    let position = start + 4 + 4 * optional_words;
    let at = |ethertype, position| Link {
        ethertype,
        position,
        end: NO_LINK_END,
    };
    let link = match u16::from_be_bytes([header[2], header[3]]) {
        ethertype @ (ETHERTYPE_IPV4 | ETHERTYPE_IPV6) => Ok(at(ethertype, position)),
        mpls if ETHERTYPE_MPLS.contains(&mpls) => Ok(at(mpls, position)),
        GRE_TRANSPARENT_ETHERNET => ethernet(data, position),
        // ERSPAN type I has no header of its own (and no GRE sequence number); types II and
        // III have one, its version first.
        GRE_ERSPAN_II if flags & GRE_SEQUENCE == 0 => ethernet(data, position),
        GRE_ERSPAN_II if byte(data, position)? >> 4 == ERSPAN_III_VERSION => {
            erspan_iii(data, position)
        }
        GRE_ERSPAN_II => ethernet(data, position + ERSPAN_II_HEADER_BYTES),
        GRE_ERSPAN_III => erspan_iii(data, position),
        GRE_WCCP if byte(data, position)? >> 4 == 4 => Ok(at(ETHERTYPE_IPV4, position)),
        GRE_WCCP => Ok(at(ETHERTYPE_IPV4, position + WCCP_REDIRECT_HEADER_BYTES)),
        aruba
            if (GRE_ARUBA_FIRST..=GRE_ARUBA_LAST).contains(&aruba)
                && aruba % GRE_ARUBA_STEP == 0 =>
        {
            wlan(data, position, false)
        }
        _ => return None,
    };
    Some(link)
}

/// What a UDP datagram at `start` carries when it is a tunnel's (`TUNNEL_PORTS`): None for
/// any other datagram, which is skipped as UDP, and for one whose length is shorter than its
/// header (as a big TCP packet's outer datagram states 0: Wireshark stops there). Wireshark
/// tries the lower of the two ports first, and the higher where the lower names no protocol:
/// a well-known port (under 1024) names one (DNS from port 4789 is DNS), a higher one rarely.
fn udp_tunnel(data: &[u8], start: usize) -> Option<Result<Link, i64>> {
    let ports = [be16(data, start)?, be16(data, start + 2)?];
    let (low, high) = (ports[0].min(ports[1]), ports[0].max(ports[1]));
    let port = if TUNNEL_PORTS.contains(&low) || low < FIRST_UNPRIVILEGED_PORT {
        low
    } else {
        high
    };
    if usize::from(be16(data, start + 4)?) < UDP_HEADER_BYTES {
        return None;
    }
    let position = start + UDP_HEADER_BYTES;
    match port {
        VXLAN_PORT => Some(ethernet(data, position + VXLAN_HEADER_BYTES)),
        GENEVE_PORT => geneve(data, position),
        GTP_U_PORT => gtp_u(data, position),
        GRE_IN_UDP_PORT => gre(data, position),
        _ => None,
    }
}

/// A GTP-U header (version 1) of a G-PDU, its optional fields and extension headers, then
/// the user's IP packet (IPv4 or IPv6 by its version nibble, as Wireshark guesses it), which
/// ends where the GTP length says. None for any other message or content (signalling, echo,
/// a payload that is not IP), which is skipped as UDP.
fn gtp_u(data: &[u8], start: usize) -> Option<Result<Link, i64>> {
    let Some(header) = data.get(start..start + GTP_HEADER_BYTES) else {
        return Some(Err(skips::TRUNCATED_LINK_HEADER));
    };
    let flags = header[0];
    if flags >> 5 != GTP_VERSION_1 || flags & GTP_PROTOCOL_TYPE == 0 || header[1] != GTP_G_PDU {
        return None;
    }
    let end =
        (start + GTP_HEADER_BYTES) as i64 + i64::from(u16::from_be_bytes([header[2], header[3]]));
    let position = if flags & GTP_OPTIONAL_FIELDS == 0 {
        start + GTP_HEADER_BYTES
    } else {
        match gtp_extensions(data, start + GTP_HEADER_BYTES) {
            Ok(position) => position,
            Err(skip) => return Some(Err(skip)),
        }
    };
    let ethertype = match byte(data, position)? >> 4 {
        4 => ETHERTYPE_IPV4,
        6 => ETHERTYPE_IPV6,
        _ => return None,
    };
    Some(Ok(Link {
        ethertype,
        position,
        end,
    }))
}

/// Past GTP's optional fields (at `start`) and the chain of extension headers whose first
/// type they end with: each gives its length in 4-byte units (0 is malformed) and ends with
/// the next one's type, 0 for none.
fn gtp_extensions(data: &[u8], start: usize) -> Result<usize, i64> {
    let truncated = skips::TRUNCATED_LINK_HEADER;
    let mut position = start + GTP_OPTIONAL_BYTES;
    let mut next_type = byte(data, position - 1).ok_or(truncated)?;
    for _ in 0..MAX_GTP_EXTENSIONS {
        if next_type == 0 {
            return Ok(position);
        }
        let units = usize::from(byte(data, position).ok_or(truncated)?);
        if units == 0 {
            return Err(truncated);
        }
        position += 4 * units;
        next_type = byte(data, position - 1).ok_or(truncated)?;
    }
    Err(truncated)
}

/// A Geneve header (version 0) and its options, then Ethernet or IP by its protocol type;
/// None for another version or protocol.
fn geneve(data: &[u8], start: usize) -> Option<Result<Link, i64>> {
    let Some(header) = data.get(start..start + GENEVE_HEADER_BYTES) else {
        return Some(Err(skips::TRUNCATED_LINK_HEADER));
    };
    if header[0] >> 6 != 0 {
        return None;
    }
    let position = start + GENEVE_HEADER_BYTES + 4 * usize::from(header[0] & 0x3F);
    match u16::from_be_bytes([header[2], header[3]]) {
        GRE_TRANSPARENT_ETHERNET => Some(ethernet(data, position)),
        ethertype @ (ETHERTYPE_IPV4 | ETHERTYPE_IPV6) => Some(Ok(Link {
            ethertype,
            position,
            end: NO_LINK_END,
        })),
        _ => None,
    }
}

/// An ERSPAN type III header, its optional platform subheader, then the mirrored Ethernet
/// frame (a session that mirrors anything else is skipped as GRE).
fn erspan_iii(data: &[u8], start: usize) -> Result<Link, i64> {
    let header = data
        .get(start..start + ERSPAN_III_HEADER_BYTES)
        .ok_or(skips::TRUNCATED_LINK_HEADER)?;
    let frame_type = (header[10] >> 2) & 0x1F;
    if frame_type != ERSPAN_III_ETHERNET {
        return Err(skips::IP_PROTOCOL_BASE + i64::from(IPPROTO_GRE));
    }
    let subheader = if header[11] & 0x01 != 0 {
        ERSPAN_III_SUBHEADER_BYTES
    } else {
        0
    };
    ethernet(data, start + ERSPAN_III_HEADER_BYTES + subheader)
}

/// Where the IP packet starts, what the link layer says it is, and where the link layer says
/// it ends (PPPoE's payload length; NO_LINK_END elsewhere).
struct Link {
    ethertype: u16,
    position: usize,
    end: i64,
}

/// The link layer of a packet of this link type (one not decoded here is skipped whole, by
/// its number).
fn link_layer(linktype: u32, data: &[u8]) -> Result<Link, i64> {
    let unbounded = |ethertype, position| Link {
        ethertype,
        position,
        end: NO_LINK_END,
    };
    match linktype {
        LINKTYPE_ETHERNET => ethernet(data, 0),
        LINKTYPE_LINUX_SLL => fixed_link_header(data, 14, 16).map(|e| unbounded(e, 16)),
        LINKTYPE_LINUX_SLL2 => fixed_link_header(data, 0, 20).map(|e| unbounded(e, 20)),
        LINKTYPE_NULL | LINKTYPE_LOOP => {
            bsd_loopback(data, linktype == LINKTYPE_NULL).map(|e| unbounded(e, 4))
        }
        LINKTYPE_PPP_HDLC
            if byte(data, 0).is_some_and(|first| CISCO_HDLC_ADDRESSES.contains(&first)) =>
        {
            cisco_hdlc(data)
        }
        LINKTYPE_PPP | LINKTYPE_PPP_HDLC => {
            let framed = data.starts_with(&PPP_HDLC_ADDRESS_CONTROL);
            ppp(data, if framed { 2 } else { 0 }, NO_LINK_END)
        }
        LINKTYPE_PPP_ETHER => pppoe_session(data, 0),
        LINKTYPE_C_HDLC => cisco_hdlc(data),
        LINKTYPE_FDDI => llc(data, FDDI_HEADER_BYTES, 0),
        LINKTYPE_NFLOG => nflog(data),
        LINKTYPE_IEEE802_11 => wlan(data, 0, false),
        LINKTYPE_IEEE802_11_RADIOTAP => radiotap(data),
        LINKTYPE_PPI => ppi(data),
        raw if RAW_IP_LINKTYPES.contains(&raw) => {
            let first = byte(data, 0).ok_or(skips::TRUNCATED_IP_HEADER)?;
            let ethertype = if first >> 4 == 6 {
                ETHERTYPE_IPV6
            } else {
                ETHERTYPE_IPV4
            };
            Ok(unbounded(ethertype, 0))
        }
        other => Err(skips::LINK_TYPE_BASE + i64::from(other)),
    }
}

fn fixed_link_header(data: &[u8], protocol_at: usize, header_bytes: usize) -> Result<u16, i64> {
    if data.len() < header_bytes {
        return Err(skips::TRUNCATED_LINK_HEADER);
    }
    be16(data, protocol_at).ok_or(skips::TRUNCATED_LINK_HEADER)
}

/// BSD null/loopback: a 4-byte address family, in the capturing host's byte order for NULL.
fn bsd_loopback(data: &[u8], byteswap_allowed: bool) -> Result<u16, i64> {
    let mut family = be32(data, 0).ok_or(skips::TRUNCATED_LINK_HEADER)?;
    if byteswap_allowed && family > 0xFFFF {
        family = family.swap_bytes();
    }
    Ok(if family == BSD_FAMILY_IPV4 {
        ETHERTYPE_IPV4
    } else if BSD_FAMILIES_IPV6.contains(&family) {
        ETHERTYPE_IPV6
    } else {
        NOT_IP
    })
}

/// Ethernet II (at `start`) with up to MAX_TAGS headers between its ethertype and the one
/// of what it carries (802.1Q / 802.1ad VLAN tags, VN-Tags, 802.1ah I-TAGs with the customer
/// frame's addresses), then possibly a PPPoE session, or an 802.3 frame's LLC header.
fn ethernet(data: &[u8], start: usize) -> Result<Link, i64> {
    let truncated = skips::TRUNCATED_LINK_HEADER;
    let mut ethertype = be16(data, start + 12).ok_or(truncated)?;
    let mut position = start + 14;
    for _ in 0..MAX_TAGS {
        let tag_bytes = match ethertype {
            vlan if VLAN_ETHERTYPES.contains(&vlan) => VLAN_TAG_BYTES,
            ETHERTYPE_VN_TAG => VN_TAG_BYTES,
            ETHERTYPE_PBB => PBB_TAG_BYTES,
            _ => break,
        };
        ethertype = be16(data, position + tag_bytes).ok_or(truncated)?;
        position += tag_bytes + 2;
    }
    if ethertype == ETHERTYPE_PPPOE_SESSION {
        return pppoe_session(data, position);
    }
    if ethertype <= MAX_8023_LENGTH {
        return llc(data, position, ethertype);
    }
    Ok(Link {
        ethertype,
        position,
        end: NO_LINK_END,
    })
}

/// An 802.2 LLC header at `start` (after an 802.3 length, or FDDI's header): what its SNAP
/// header names by ethertype; any other LLC frame is not IP (skipped by `length`, as 802.3).
fn llc(data: &[u8], start: usize, length: u16) -> Result<Link, i64> {
    let header = data
        .get(start..start + LLC_SNAP_HEADER_BYTES)
        .ok_or(skips::TRUNCATED_LINK_HEADER)?;
    let snap_ethertype =
        header[..3] == LLC_SNAP && SNAP_ETHERTYPE_OUIS.iter().any(|oui| header[3..6] == *oui);
    if !snap_ethertype {
        return Err(skips::ETHERTYPE_BASE + i64::from(length));
    }
    Ok(Link {
        ethertype: u16::from_be_bytes([header[6], header[7]]),
        position: start + LLC_SNAP_HEADER_BYTES,
        end: NO_LINK_END,
    })
}

/// An 802.11 data frame at `start` (`data_pad`: its body starts at the next multiple of 4
/// bytes, as radiotap's flag says), then its LLC/SNAP header; any other frame is skipped as
/// what it is (no data, encrypted, a fragment, an aggregate of several packets).
fn wlan(data: &[u8], start: usize, data_pad: bool) -> Result<Link, i64> {
    let header = data
        .get(start..start + WLAN_HEADER_BYTES)
        .ok_or(skips::TRUNCATED_LINK_HEADER)?;
    let (control, flags) = (header[0], header[1]);
    let subtype = control >> 4;
    if (control >> 2) & 0x03 != WLAN_DATA_TYPE || subtype & WLAN_SUBTYPE_NO_DATA != 0 {
        return Err(skips::WLAN_NO_DATA);
    }
    if flags & WLAN_PROTECTED != 0 {
        return Err(skips::WLAN_PROTECTED);
    }
    if flags & WLAN_MORE_FRAGMENTS != 0 || header[22] & WLAN_FRAGMENT_NUMBER != 0 {
        return Err(skips::WLAN_FRAGMENT);
    }
    let mut length = WLAN_HEADER_BYTES;
    if flags & WLAN_TO_AND_FROM_DS == WLAN_TO_AND_FROM_DS {
        length += WLAN_ADDRESS_BYTES;
    }
    if subtype & WLAN_SUBTYPE_QOS != 0 {
        let qos = byte(data, start + length).ok_or(skips::TRUNCATED_LINK_HEADER)?;
        if qos & WLAN_QOS_AMSDU != 0 {
            return Err(skips::WLAN_AGGREGATE);
        }
        length += WLAN_QOS_BYTES;
        if flags & WLAN_ORDER != 0 {
            length += WLAN_HT_CONTROL_BYTES;
        }
    }
    if data_pad {
        length = length.next_multiple_of(4);
    }
    llc(data, start + length, 0)
}

/// A radiotap header, then the 802.11 frame it describes.
fn radiotap(data: &[u8]) -> Result<Link, i64> {
    let le32 = |at: usize| {
        data.get(at..at + 4)
            .map(|bytes| u32::from_le_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]))
    };
    let header = data
        .get(..RADIOTAP_PRESENT_AT + 4)
        .ok_or(skips::TRUNCATED_LINK_HEADER)?;
    let length = usize::from(u16::from_le_bytes([header[2], header[3]]));
    if header[0] != 0 || length > data.len() {
        return Err(skips::BAD_RADIOTAP_HEADER);
    }
    let present = le32(RADIOTAP_PRESENT_AT).ok_or(skips::TRUNCATED_LINK_HEADER)?;
    let mut field = RADIOTAP_PRESENT_AT;
    let mut bitmap = present;
    while bitmap & RADIOTAP_MORE_PRESENT != 0 {
        field += 4;
        bitmap = le32(field)
            .filter(|_| field < length)
            .ok_or(skips::BAD_RADIOTAP_HEADER)?;
    }
    field += 4;
    if present & RADIOTAP_TSFT != 0 {
        field = field.next_multiple_of(RADIOTAP_TSFT_BYTES) + RADIOTAP_TSFT_BYTES;
    }
    let data_pad = present & RADIOTAP_FLAGS != 0
        && byte(data, field)
            .filter(|_| field < length)
            .ok_or(skips::BAD_RADIOTAP_HEADER)?
            & RADIOTAP_DATA_PAD
            != 0;
    wlan(data, length, data_pad)
}

/// A PPI header, then the 802.11 or Ethernet frame it carries (another link type inside is
/// skipped by its number).
fn ppi(data: &[u8]) -> Result<Link, i64> {
    let header = data
        .get(..PPI_HEADER_BYTES)
        .ok_or(skips::TRUNCATED_LINK_HEADER)?;
    let length = usize::from(u16::from_le_bytes([header[2], header[3]]));
    let linktype = u32::from_le_bytes([header[4], header[5], header[6], header[7]]);
    match linktype {
        LINKTYPE_IEEE802_11 => wlan(data, length, false),
        LINKTYPE_ETHERNET => ethernet(data, length),
        other => Err(skips::LINK_TYPE_BASE + i64::from(other)),
    }
}

/// A PPPoE session header (RFC 2516), then PPP (`ppp`). The PPPoE length bounds the IP
/// packet as the frame's end bounds it elsewhere.
fn pppoe_session(data: &[u8], start: usize) -> Result<Link, i64> {
    if data.len() < start + PPPOE_HEADER_BYTES + 1 {
        return Err(skips::TRUNCATED_LINK_HEADER);
    }
    if data[start] != PPPOE_VERSION_TYPE || data[start + 1] != 0 {
        return Err(skips::BAD_PPPOE_HEADER);
    }
    let payload_length = be16(data, start + 4).ok_or(skips::TRUNCATED_LINK_HEADER)?;
    let end = (start + PPPOE_HEADER_BYTES) as i64 + i64::from(payload_length);
    ppp(data, start + PPPOE_HEADER_BYTES, end)
}

/// A PPP protocol field (RFC 1661, possibly compressed to one odd byte) at `start`: what it
/// carries when that is IPv4, IPv6 or MPLS; other protocols are skipped by their number.
fn ppp(data: &[u8], start: usize, end: i64) -> Result<Link, i64> {
    let truncated = skips::TRUNCATED_LINK_HEADER;
    let first = byte(data, start).ok_or(truncated)?;
    let (protocol, header_bytes) = if first & 1 == 1 {
        (u16::from(first), 1)
    } else {
        (be16(data, start).ok_or(truncated)?, 2)
    };
    let ethertype = match protocol {
        PPP_IPV4 => ETHERTYPE_IPV4,
        PPP_IPV6 => ETHERTYPE_IPV6,
        mpls if PPP_MPLS.contains(&mpls) => ETHERTYPE_MPLS[0],
        other => return Err(skips::PPP_PROTOCOL_BASE + i64::from(other)),
    };
    Ok(Link {
        ethertype,
        position: start + header_bytes,
        end,
    })
}

/// Cisco HDLC: address and control bytes, then an ethertype.
fn cisco_hdlc(data: &[u8]) -> Result<Link, i64> {
    if data.len() < CISCO_HDLC_HEADER_BYTES {
        return Err(skips::TRUNCATED_LINK_HEADER);
    }
    Ok(Link {
        ethertype: u16::from_be_bytes([data[2], data[3]]),
        position: CISCO_HDLC_HEADER_BYTES,
        end: NO_LINK_END,
    })
}

/// A Linux NFLOG packet: its payload record's IP packet, IPv4 or IPv6 as the header's address
/// family says (another family is not IP; no payload record, the packet was not captured).
fn nflog(data: &[u8]) -> Result<Link, i64> {
    let truncated = skips::TRUNCATED_LINK_HEADER;
    let ethertype = match byte(data, 0).ok_or(truncated)? {
        LINUX_AF_INET => ETHERTYPE_IPV4,
        LINUX_AF_INET6 => ETHERTYPE_IPV6,
        _ => NOT_IP,
    };
    let mut position = NFLOG_HEADER_BYTES;
    while let Some(record) = data.get(position..position + NFLOG_RECORD_HEADER_BYTES) {
        let little = u16::from_le_bytes([record[2], record[3]]) <= NFLOG_MAX_RECORD_TYPE;
        let read = |bytes: [u8; 2]| {
            if little {
                u16::from_le_bytes(bytes)
            } else {
                u16::from_be_bytes(bytes)
            }
        };
        let length = usize::from(read([record[0], record[1]]));
        if length < NFLOG_RECORD_HEADER_BYTES {
            return Err(truncated);
        }
        if read([record[2], record[3]]) == NFLOG_PAYLOAD {
            return Ok(Link {
                ethertype,
                position: position + NFLOG_RECORD_HEADER_BYTES,
                end: (position + length) as i64,
            });
        }
        position += length.next_multiple_of(4);
    }
    Err(truncated)
}

/// What the IP layer says about the segment it carries.
struct Network {
    ip_version: u8,
    protocol: u8,
    src: [u32; 4],
    dst: [u32; 4],
    /// Where the transport header starts.
    position: usize,
    /// The transport bytes the IP lengths state (may exceed what was captured).
    payload_bytes: i64,
    payload_from_capture: bool,
    /// A fragment's datagram identification and its place in it (None: the packet is whole).
    fragment: Option<(u32, Fragment)>,
}

impl Network {
    /// Where the IP packet ends, as a bound on a packet it carries.
    fn end(&self) -> i64 {
        if self.payload_from_capture {
            NO_LINK_END
        } else {
            self.position as i64 + self.payload_bytes
        }
    }
}

fn ipv4(data: &[u8], start: usize, link_end: i64) -> Result<Network, i64> {
    let header = data
        .get(start..start + 20)
        .ok_or(skips::TRUNCATED_IP_HEADER)?;
    let word = |at: usize| be_word(header, at);
    let header_bytes = usize::from(header[0] & 0x0F) * 4;
    if header[0] >> 4 != 4 || header_bytes < 20 {
        return Err(skips::BAD_IP_HEADER);
    }
    let flags_offset = u16::from_be_bytes([header[6], header[7]]);
    let offset_bytes = usize::from(flags_offset & IPV4_FRAGMENT_OFFSET) * 8;
    let more = flags_offset & IPV4_MORE_FRAGMENTS != 0;
    let total = i64::from(u16::from_be_bytes([header[2], header[3]]));
    let from_capture = total == 0;
    if from_capture && offset_bytes > 0 {
        // No length to place it by (segmentation offload states none).
        return Err(skips::IPV4_FRAGMENT);
    }
    let stated_end = if from_capture {
        data.len() as i64
    } else {
        start as i64 + total
    };
    let payload_bytes = stated_end.min(link_end) - start as i64 - header_bytes as i64;
    if !from_capture && payload_bytes < 0 {
        return Err(skips::BAD_IP_HEADER);
    }
    let fragment = (!from_capture && (more || offset_bytes > 0)).then(|| {
        let identification = u32::from(u16::from_be_bytes([header[4], header[5]]));
        let stated_bytes = payload_bytes as usize;
        (
            identification,
            Fragment {
                offset_bytes,
                stated_bytes,
                more,
            },
        )
    });
    Ok(Network {
        ip_version: 4,
        protocol: header[9],
        src: [0, 0, IPV4_MAPPED_WORD, word(12)],
        dst: [0, 0, IPV4_MAPPED_WORD, word(16)],
        position: start + header_bytes,
        payload_bytes,
        payload_from_capture: from_capture,
        fragment,
    })
}

fn ipv6(data: &[u8], start: usize, link_end: i64) -> Result<Network, i64> {
    let header = data
        .get(start..start + 40)
        .ok_or(skips::TRUNCATED_IP_HEADER)?;
    let word = |at: usize| be_word(header, at);
    let stated = i64::from(u16::from_be_bytes([header[4], header[5]]));
    let next_header = header[6];
    let jumbo = stated == 0 && next_header == 0;
    let mut payload_bytes = stated.min(link_end.saturating_sub(start as i64 + 40));
    if payload_bytes < 0 {
        return Err(skips::BAD_IP_HEADER);
    }
    let position = start + 40;
    if jumbo
        && byte(data, position + 2) == Some(IPV6_JUMBO_OPTION)
        && let Some(length) = be32(data, position + 4)
    {
        payload_bytes = i64::from(length);
    }
    let walked = extensions(data, position, next_header, payload_bytes)?;
    Ok(Network {
        ip_version: 6,
        protocol: walked.protocol,
        src: [word(8), word(12), word(16), word(20)],
        dst: [word(24), word(28), word(32), word(36)],
        position: walked.position,
        payload_bytes: walked.payload_bytes,
        payload_from_capture: false,
        fragment: walked.fragment,
    })
}

/// Where IPv6 extension headers starting at `position` (the first of kind `next_header`) end,
/// what follows them and the payload bytes left; at a fragment header of a fragment (not an
/// atomic one), the walk stops: what follows it is walked once the datagram is whole.
struct Walked {
    protocol: u8,
    position: usize,
    payload_bytes: i64,
    /// The datagram's identification and the fragment's place in it.
    fragment: Option<(u32, Fragment)>,
}

fn extensions(
    data: &[u8],
    mut position: usize,
    mut next_header: u8,
    mut payload_bytes: i64,
) -> Result<Walked, i64> {
    for _ in 0..MAX_IPV6_EXTENSIONS {
        if !IPV6_EXTENSIONS.contains(&next_header) {
            break;
        }
        let extension = data
            .get(position..position + 8)
            .ok_or(skips::IPV6_EXTENSION_CHAIN)?;
        let units = usize::from(extension[1]);
        let length = match next_header {
            IPV6_FRAGMENT_HEADER => 8,
            IPV6_AUTH_HEADER => (units + 2) * 4,
            _ => (units + 1) * 8,
        };
        let offset_field = u16::from_be_bytes([extension[2], extension[3]]);
        let (offset_bytes, more) = (usize::from(offset_field >> 3) * 8, offset_field & 1 != 0);
        if next_header == IPV6_FRAGMENT_HEADER && (offset_bytes > 0 || more) {
            let stated_bytes = payload_bytes - 8;
            if stated_bytes < 0 {
                return Err(skips::IPV6_EXTENSION_CHAIN);
            }
            let identification = be_word(extension, 4);
            let fragment = Fragment {
                offset_bytes,
                stated_bytes: stated_bytes as usize,
                more,
            };
            return Ok(Walked {
                protocol: extension[0],
                position: position + 8,
                payload_bytes: stated_bytes,
                fragment: Some((identification, fragment)),
            });
        }
        next_header = extension[0];
        payload_bytes -= length as i64;
        position += length;
    }
    if IPV6_EXTENSIONS.contains(&next_header) {
        return Err(skips::IPV6_EXTENSION_CHAIN);
    }
    Ok(Walked {
        protocol: next_header,
        position,
        payload_bytes,
        fragment: None,
    })
}

/// The TCP header's fixed part and options; the payload length from the IP length (not the
/// capture).
fn tcp(data: &[u8], network: &Network) -> Result<TcpPacket, i64> {
    let start = network.position;
    let header = data
        .get(start..start.saturating_add(20))
        .ok_or(skips::TRUNCATED_TCP_HEADER)?;
    let half = |at: usize| u16::from_be_bytes([header[at], header[at + 1]]);
    let word = |at: usize| be_word(header, at);
    let header_bytes = usize::from(header[12] >> 4) * 4;
    let payload_bytes = network.payload_bytes - header_bytes as i64;
    if header_bytes < 20 || payload_bytes < 0 {
        return Err(skips::BAD_TCP_HEADER_LENGTH);
    }
    let options_end = (start + header_bytes).min(data.len());
    Ok(TcpPacket {
        ip_version: network.ip_version,
        src: network.src,
        dst: network.dst,
        src_port: half(0),
        dst_port: half(2),
        seq: word(4),
        ack: word(8),
        flags: half(12) & 0x01FF,
        window: half(14),
        tcp_header_bytes: header_bytes as u8,
        payload_bytes: payload_bytes as u32,
        payload_from_capture: network.payload_from_capture,
        options: tcp_options(data.get(start + 20..options_end).unwrap_or(&[])),
    })
}

/// Walk the type-length-value options (already cut at the captured end); the walk stops at
/// the end-of-options kind or at the first option whose length does not fit.
pub fn tcp_options(options: &[u8]) -> TcpOptions {
    let mut found = TcpOptions::default();
    let mut here = 0;
    while here < options.len() {
        let kind = options[here];
        let length = if kind == OPTION_NOP {
            1
        } else {
            usize::from(byte(options, here + 1).unwrap_or(0))
        };
        let well_formed = kind == OPTION_NOP || (length >= 2 && here + length <= options.len());
        if !well_formed || kind == OPTION_END {
            break;
        }
        record_option(&mut found, kind, &options[here..here + length]);
        here += length;
    }
    found
}

fn record_option(found: &mut TcpOptions, kind: u8, option: &[u8]) {
    let word = |at: usize| be_word(option, at);
    match (kind, option.len()) {
        (OPTION_MSS, 4) => found.mss = u16::from_be_bytes([option[2], option[3]]),
        (OPTION_WINDOW_SCALE, 3) => found.window_scale = Some(option[2]),
        (OPTION_SACK_PERMITTED, 2) => found.sack_permitted = true,
        (OPTION_TIMESTAMP, 10) => found.timestamp = Some((word(2), word(6))),
        (OPTION_SACK, length) if length >= 10 && (length - 2) % 8 == 0 => {
            for block in 0..((length - 2) / 8).min(MAX_SACK_BLOCKS) {
                let count = usize::from(found.sack_block_count);
                if count < MAX_SACK_BLOCKS {
                    found.sack_blocks[count] = (word(2 + 8 * block), word(6 + 8 * block));
                    found.sack_block_count += 1;
                }
            }
        }
        _ => {}
    }
}

/// The big-endian 32-bit word at `at` of a header already checked to hold it.
fn be_word(bytes: &[u8], at: usize) -> u32 {
    u32::from_be_bytes([bytes[at], bytes[at + 1], bytes[at + 2], bytes[at + 3]])
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One packet decoded alone (no fragments held from before).
    fn decode(linktype: u32, data: &[u8]) -> Result<TcpPacket, i64> {
        Decoder::default().decode(linktype, data)
    }

    /// An Ethernet/IPv4/TCP SYN built by hand: 10.0.0.1:40000 -> 10.0.0.2:80, MSS 1460,
    /// SACK-permitted, timestamps 7/0, window scale 7 (Linux's SYN option layout).
    fn syn() -> Vec<u8> {
        let mut frame = vec![0u8; 12];
        frame.extend([0x08, 0x00]);
        frame.extend([
            0x45, 0, 0, 60, 0, 0, 0x40, 0, 64, 6, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2,
        ]);
        frame.extend([
            0x9C, 0x40, 0, 80, 0, 0, 0, 1, 0, 0, 0, 0, 0xA0, 0x02, 0xFA, 0xF0, 0, 0, 0, 0,
        ]);
        frame.extend([
            2, 4, 0x05, 0xB4, 4, 2, 8, 10, 0, 0, 0, 7, 0, 0, 0, 0, 1, 3, 3, 7,
        ]);
        frame
    }

    #[test]
    fn decodes_a_syn_with_its_options() {
        let packet = decode(LINKTYPE_ETHERNET, &syn()).unwrap();
        assert_eq!(packet.src, [0, 0, 0xFFFF, 0x0A00_0001]);
        assert_eq!(
            (packet.src_port, packet.dst_port, packet.seq),
            (40000, 80, 1)
        );
        assert_eq!(
            (packet.flags, packet.tcp_header_bytes, packet.payload_bytes),
            (0x002, 40, 0)
        );
        let options = packet.options;
        assert_eq!(
            (options.mss, options.window_scale, options.sack_permitted),
            (1460, Some(7), true)
        );
        assert_eq!(options.timestamp, Some((7, 0)));
    }

    #[test]
    fn every_cut_of_the_syn_is_a_skip_or_a_packet_never_a_panic() {
        let frame = syn();
        for cut in 0..frame.len() {
            let result = decode(LINKTYPE_ETHERNET, &frame[..cut]);
            let expected = match cut {
                0..14 => Err(skips::TRUNCATED_LINK_HEADER),
                14..34 => Err(skips::TRUNCATED_IP_HEADER),
                34..54 => Err(skips::TRUNCATED_TCP_HEADER),
                _ => result,
            };
            assert_eq!(result, expected, "cut at {cut}");
        }
    }

    /// An Ethernet header for `ethertype`, then `payload`.
    fn in_ethernet(ethertype: u16, payload: &[u8]) -> Vec<u8> {
        let mut frame = vec![0u8; 12];
        frame.extend(ethertype.to_be_bytes());
        frame.extend(payload);
        frame
    }

    /// An IPv4 header (10.9.0.1 -> 10.9.0.2) for `protocol` with its total length, then
    /// `payload`.
    fn in_ipv4(protocol: u8, payload: &[u8]) -> Vec<u8> {
        let total = (20 + payload.len()) as u16;
        let mut packet = vec![0x45, 0];
        packet.extend(total.to_be_bytes());
        packet.extend([0, 0, 0x40, 0, 64, protocol, 0, 0, 10, 9, 0, 1, 10, 9, 0, 2]);
        packet.extend(payload);
        packet
    }

    /// A UDP header from port `from` to `port` with its length, then `payload`.
    fn in_udp(from: u16, port: u16, payload: &[u8]) -> Vec<u8> {
        let mut datagram = from.to_be_bytes().to_vec();
        datagram.extend(port.to_be_bytes());
        datagram.extend(((8 + payload.len()) as u16).to_be_bytes());
        datagram.extend([0, 0]);
        datagram.extend(payload);
        datagram
    }

    /// The SYN's IP packet (its Ethernet header taken off).
    fn inner_ip() -> Vec<u8> {
        syn()[14..].to_vec()
    }

    /// The SYN inside each tunnel decoded here, each built by its RFC's header layout.
    fn tunnelled_syns() -> Vec<(&'static str, Vec<u8>)> {
        let ip = inner_ip();
        let frame = syn();
        let gre = |flags: u8, protocol: u16, extra: &[u8], payload: &[u8]| {
            let mut header = vec![flags, 0];
            header.extend(protocol.to_be_bytes());
            header.extend(extra);
            header.extend(payload);
            in_ethernet(ETHERTYPE_IPV4, &in_ipv4(IPPROTO_GRE, &header))
        };
        let mut labels = vec![0, 0x10, 0x00, 64, 0, 0x20, 0x01, 64];
        labels.extend(&ip);
        let mut vxlan = vec![0x08, 0, 0, 0, 0, 0, 0x2A, 0];
        vxlan.extend(&frame);
        let mut geneve = vec![0x02, 0, 0x65, 0x58, 0, 0, 0x2A, 0];
        geneve.extend([0u8; 8]);
        geneve.extend(&frame);
        let mut erspan_iii = vec![0u8; 12];
        erspan_iii[0] = ERSPAN_III_VERSION << 4;
        erspan_iii[11] = 0x01;
        erspan_iii.extend([0u8; 8]);
        erspan_iii.extend(&frame);
        let from_below = in_udp(5799, GENEVE_PORT, &geneve);
        let in_udp_ipv4 = |port, payload: &[u8]| {
            in_ethernet(
                ETHERTYPE_IPV4,
                &in_ipv4(IPPROTO_UDP, &in_udp(50000, port, payload)),
            )
        };
        // GTP-U G-PDU: version 1, protocol type GTP; its length counts what follows the
        // first 8 bytes.
        let gtp = |flags: u8, extra: &[u8]| {
            let mut header = vec![0x30 | flags, GTP_G_PDU];
            header.extend(((extra.len() + ip.len()) as u16).to_be_bytes());
            header.extend([0, 0, 0, 1]);
            header.extend(extra);
            header.extend(&ip);
            in_udp_ipv4(GTP_U_PORT, &header)
        };
        // Sequence number 7, N-PDU 0, then a PDU session container (type 0x85) of one
        // 4-byte unit, ending the chain.
        let gtp_extended = gtp(0x06, &[0, 7, 0, 0x85, 1, 0x10, 0x05, 0]);
        let mut gre_in_udp = vec![0, 0];
        gre_in_udp.extend(ETHERTYPE_IPV4.to_be_bytes());
        gre_in_udp.extend(&ip);
        let tagged = |tag: u16, bytes: usize| {
            let mut carried = vec![0xAB; bytes];
            carried.extend(ETHERTYPE_IPV4.to_be_bytes());
            carried.extend(&ip);
            in_ethernet(tag, &carried)
        };
        let mut snap = LLC_SNAP.to_vec();
        snap.extend([0, 0, 0]);
        snap.extend(ETHERTYPE_IPV4.to_be_bytes());
        snap.extend(&ip);
        let length = (snap.len() as u16).min(MAX_8023_LENGTH);
        vec![
            ("GTP-U", gtp(0, &[])),
            (
                "GTP-U with a sequence number and an extension header",
                gtp_extended,
            ),
            ("GRE in UDP", in_udp_ipv4(GRE_IN_UDP_PORT, &gre_in_udp)),
            ("802.1ah I-TAG", tagged(ETHERTYPE_PBB, PBB_TAG_BYTES)),
            ("VN-Tag", tagged(ETHERTYPE_VN_TAG, VN_TAG_BYTES)),
            ("802.3 with LLC/SNAP", in_ethernet(length, &snap)),
            ("IPv4 in GRE", gre(0, ETHERTYPE_IPV4, &[], &ip)),
            (
                "Geneve from an unprivileged port below its own",
                in_ethernet(ETHERTYPE_IPV4, &in_ipv4(IPPROTO_UDP, &from_below)),
            ),
            (
                "GRE with checksum, key and sequence",
                gre(0xB0, ETHERTYPE_IPV4, &[0; 12], &ip),
            ),
            (
                "Ethernet in GRE",
                gre(0, GRE_TRANSPARENT_ETHERNET, &[], &frame),
            ),
            ("ERSPAN type I", gre(0, GRE_ERSPAN_II, &[], &frame)),
            ("WCCP version 1", gre(0, GRE_WCCP, &[], &ip)),
            (
                "802.11 in Aruba's GRE",
                gre(0, GRE_ARUBA_LAST, &[], &wlan_syn()),
            ),
            (
                "WCCP version 2",
                gre(0, GRE_WCCP, &[0x05, 0x59, 0, 0x48], &ip),
            ),
            (
                "ERSPAN type II",
                gre(GRE_SEQUENCE, GRE_ERSPAN_II, &[0; 12], &frame),
            ),
            (
                "ERSPAN type III with its subheader",
                gre(GRE_SEQUENCE, GRE_ERSPAN_III, &[0; 4], &erspan_iii),
            ),
            (
                "ERSPAN type III under type II's protocol",
                gre(GRE_SEQUENCE, GRE_ERSPAN_II, &[0; 4], &erspan_iii),
            ),
            ("two MPLS labels", in_ethernet(ETHERTYPE_MPLS[0], &labels)),
            (
                "IPv4 in IPv4",
                in_ethernet(ETHERTYPE_IPV4, &in_ipv4(IPPROTO_IPV4, &ip)),
            ),
            (
                "VXLAN",
                in_ethernet(
                    ETHERTYPE_IPV4,
                    &in_ipv4(IPPROTO_UDP, &in_udp(50000, VXLAN_PORT, &vxlan)),
                ),
            ),
            (
                "Geneve with two words of options",
                in_ethernet(
                    ETHERTYPE_IPV4,
                    &in_ipv4(IPPROTO_UDP, &in_udp(50000, GENEVE_PORT, &geneve)),
                ),
            ),
        ]
    }

    #[test]
    fn tcp_in_a_tunnel_is_the_inner_packet() {
        let expected = decode(LINKTYPE_ETHERNET, &syn());
        for (tunnel, frame) in tunnelled_syns() {
            assert_eq!(decode(LINKTYPE_ETHERNET, &frame), expected, "{tunnel}");
        }
    }

    #[test]
    fn every_cut_of_a_tunnelled_syn_is_a_skip_or_the_packet_never_a_panic() {
        let expected = decode(LINKTYPE_ETHERNET, &syn());
        for (tunnel, frame) in tunnelled_syns() {
            for cut in 0..frame.len() {
                let result = decode(LINKTYPE_ETHERNET, &frame[..cut]);
                // The TCP header whole and its options cut: the packet, its options fewer.
                if let Ok(packet) = result {
                    assert_eq!(packet.seq, expected.unwrap().seq, "{tunnel} cut at {cut}");
                }
            }
        }
    }

    #[test]
    fn tunnels_deeper_than_the_limit_are_skipped_as_the_tunnel() {
        let mut packet = inner_ip();
        for _ in 0..MAX_ENCAPSULATIONS {
            packet = in_ipv4(IPPROTO_IPV4, &packet);
        }
        let deep_enough = in_ethernet(ETHERTYPE_IPV4, &packet);
        assert!(decode(LINKTYPE_ETHERNET, &deep_enough).is_ok());
        let too_deep = in_ethernet(ETHERTYPE_IPV4, &in_ipv4(IPPROTO_IPV4, &packet));
        assert_eq!(
            decode(LINKTYPE_ETHERNET, &too_deep),
            Err(skips::IP_PROTOCOL_BASE + i64::from(IPPROTO_IPV4))
        );
    }

    #[test]
    fn gre_of_another_version_or_payload_and_other_udp_are_skipped_as_such() {
        let ip = inner_ip();
        let gre_skip = Err(skips::IP_PROTOCOL_BASE + i64::from(IPPROTO_GRE));
        let mut pptp = vec![0x30, 0x01, 0x88, 0x0B];
        pptp.extend(&ip);
        let pptp = in_ethernet(ETHERTYPE_IPV4, &in_ipv4(IPPROTO_GRE, &pptp));
        assert_eq!(decode(LINKTYPE_ETHERNET, &pptp), gre_skip);
        let mut routed = vec![0x40, 0, 0x08, 0x00];
        routed.extend(&ip);
        let routed = in_ethernet(ETHERTYPE_IPV4, &in_ipv4(IPPROTO_GRE, &routed));
        assert_eq!(decode(LINKTYPE_ETHERNET, &routed), gre_skip);
        let mut flannel = vec![0x08, 0, 0, 0, 0, 0, 0x2A, 0];
        flannel.extend(&syn());
        let flannel = in_ethernet(
            ETHERTYPE_IPV4,
            &in_ipv4(IPPROTO_UDP, &in_udp(50000, 8472, &flannel)),
        );
        let udp_skip = Err(skips::IP_PROTOCOL_BASE + i64::from(IPPROTO_UDP));
        assert_eq!(decode(LINKTYPE_ETHERNET, &flannel), udp_skip);
        // A reply from port 53 to a VXLAN port is DNS: the lower port names the datagram.
        let mut dns = 53u16.to_be_bytes().to_vec();
        dns.extend(VXLAN_PORT.to_be_bytes());
        dns.extend(16u16.to_be_bytes());
        dns.extend([0u8; 10]);
        let dns = in_ethernet(ETHERTYPE_IPV4, &in_ipv4(IPPROTO_UDP, &dns));
        assert_eq!(decode(LINKTYPE_ETHERNET, &dns), udp_skip);
    }

    #[test]
    fn gtp_messages_and_llc_frames_that_carry_no_ip_are_skipped_as_such() {
        let udp_skip = Err(skips::IP_PROTOCOL_BASE + i64::from(IPPROTO_UDP));
        let gtp = |header: &[u8], payload: &[u8]| {
            let mut datagram = header.to_vec();
            datagram.extend(payload);
            let datagram = in_udp(GTP_U_PORT, GTP_U_PORT, &datagram);
            decode(
                LINKTYPE_ETHERNET,
                &in_ethernet(ETHERTYPE_IPV4, &in_ipv4(IPPROTO_UDP, &datagram)),
            )
        };
        let ip = inner_ip();
        let echo = [0x32, 0x01, 0, 4, 0, 0, 0, 0, 0, 1, 0, 0];
        assert_eq!(gtp(&echo, &[]), udp_skip);
        let not_ip = [0x30, GTP_G_PDU, 0, 4, 0, 0, 0, 1];
        assert_eq!(gtp(&not_ip, &[0x21, 0, 0, 0]), udp_skip);
        let gtp_prime = [0x20, GTP_G_PDU, 0, 60, 0, 0, 0, 1];
        assert_eq!(gtp(&gtp_prime, &ip), udp_skip);
        // An extension header of length 0 would never end: malformed.
        let endless = [
            0x34, GTP_G_PDU, 0, 64, 0, 0, 0, 1, 0, 0, 0, 0x85, 0, 0, 0, 0,
        ];
        assert_eq!(gtp(&endless, &ip), Err(skips::TRUNCATED_LINK_HEADER));
        // An 802.3 frame of spanning tree (LLC SAPs 42 42): not IP, by its length.
        let stp = in_ethernet(38, &[0x42, 0x42, 0x03, 0, 0, 0, 0, 0]);
        assert_eq!(
            decode(LINKTYPE_ETHERNET, &stp),
            Err(skips::ETHERTYPE_BASE + 38)
        );
        // SNAP with an organisation's own protocol number, not an ethertype.
        let mut apple = LLC_SNAP.to_vec();
        apple.extend([0x08, 0x00, 0x07, 0x80, 0x9B]);
        apple.extend(&ip);
        let apple = in_ethernet(apple.len() as u16, &apple);
        assert_eq!(
            decode(LINKTYPE_ETHERNET, &apple),
            Err(skips::ETHERTYPE_BASE + apple.len() as i64 - 14)
        );
    }

    /// The SYN's IP packet in an 802.11 QoS data frame from a station to its access point,
    /// after LLC/SNAP.
    fn wlan_syn() -> Vec<u8> {
        let mut frame = vec![0x88, 0x01, 0, 0];
        frame.extend([0x0A; 18]);
        frame.extend([0x10, 0x00, 0x00, 0x00]);
        frame.extend(LLC_SNAP);
        frame.extend([0, 0, 0, 0x08, 0x00]);
        frame.extend(inner_ip());
        frame
    }

    /// The SYN's IP packet on each link type decoded here besides Ethernet, raw IP and the
    /// loopbacks, each built by its header layout.
    fn syns_on_other_links() -> Vec<(&'static str, u32, Vec<u8>)> {
        let ip = inner_ip();
        let after = |header: &[u8]| {
            let mut frame = header.to_vec();
            frame.extend(&ip);
            frame
        };
        let mut labelled = vec![0xFF, 0x03, 0x02, 0x81, 0, 0x10, 0x01, 64];
        labelled.extend(&ip);
        let mut pppoe = vec![PPPOE_VERSION_TYPE, 0, 0, 1];
        pppoe.extend(((ip.len() + 2) as u16).to_be_bytes());
        pppoe.extend([0x00, 0x21]);
        pppoe.extend(&ip);
        let mut fddi = vec![0x50; FDDI_HEADER_BYTES];
        fddi.extend(LLC_SNAP);
        fddi.extend([0, 0, 0, 0x08, 0x00]);
        fddi.extend(&ip);
        // NFLOG: IPv4, a prefix record (type 10) of 5 bytes padded to 8, then the payload.
        let nflog = |write: fn(u16) -> [u8; 2]| {
            let mut frame = vec![LINUX_AF_INET, 0, 0, 1];
            for (length, kind, value) in
                [(9, 10, vec![b'x'; 5]), (4 + ip.len() as u16, 9, ip.clone())]
            {
                frame.extend(write(length));
                frame.extend(write(kind));
                frame.extend(&value);
                frame.resize(frame.len().next_multiple_of(4), 0);
            }
            frame
        };
        let wlan = wlan_syn();
        let radiotap = |padded: bool| {
            // Version 0, length 24, TSFT and flags present; the timestamp aligned to 8.
            let mut frame = vec![0, 0, 24, 0, 0x03, 0, 0, 0];
            frame.extend(7u64.to_le_bytes());
            frame.push(if padded { RADIOTAP_DATA_PAD } else { 0 });
            frame.resize(24, 0);
            frame.extend(&wlan[..26]);
            if padded {
                frame.extend([0, 0]);
            }
            frame.extend(&wlan[26..]);
            frame
        };
        let mut ppi = vec![0, 0, 8, 0, 105, 0, 0, 0];
        ppi.extend(&wlan);
        vec![
            ("802.11 QoS data", LINKTYPE_IEEE802_11, wlan.clone()),
            ("radiotap", LINKTYPE_IEEE802_11_RADIOTAP, radiotap(false)),
            (
                "radiotap, data padded",
                LINKTYPE_IEEE802_11_RADIOTAP,
                radiotap(true),
            ),
            ("PPI", LINKTYPE_PPI, ppi),
            (
                "PPP in HDLC-like framing",
                LINKTYPE_PPP,
                after(&[0xFF, 0x03, 0x00, 0x21]),
            ),
            (
                "PPP without framing, protocol compressed",
                LINKTYPE_PPP,
                after(&[0x21]),
            ),
            ("PPP carrying MPLS", LINKTYPE_PPP, labelled),
            (
                "PPP, HDLC link type",
                LINKTYPE_PPP_HDLC,
                after(&[0xFF, 0x03, 0x00, 0x21]),
            ),
            (
                "Cisco HDLC in the PPP HDLC link type",
                LINKTYPE_PPP_HDLC,
                after(&[0x0F, 0, 0x08, 0x00]),
            ),
            ("Cisco HDLC", LINKTYPE_C_HDLC, after(&[0x8F, 0, 0x08, 0x00])),
            ("PPPoE without Ethernet", LINKTYPE_PPP_ETHER, pppoe),
            ("FDDI with LLC/SNAP", LINKTYPE_FDDI, fddi),
            (
                "NFLOG written little-endian",
                LINKTYPE_NFLOG,
                nflog(u16::to_le_bytes),
            ),
            (
                "NFLOG written big-endian",
                LINKTYPE_NFLOG,
                nflog(u16::to_be_bytes),
            ),
        ]
    }

    #[test]
    fn tcp_on_other_link_types_is_the_packet_they_carry() {
        let expected = decode(LINKTYPE_ETHERNET, &syn());
        for (link, linktype, frame) in syns_on_other_links() {
            assert_eq!(decode(linktype, &frame), expected, "{link}");
            for cut in 0..frame.len() {
                // Never a panic; cut in the TCP options, the packet with fewer options.
                if let Ok(packet) = decode(linktype, &frame[..cut]) {
                    assert_eq!(packet.seq, expected.unwrap().seq, "{link} cut at {cut}");
                }
            }
        }
    }

    #[test]
    fn other_link_types_skip_what_is_not_ip_by_its_protocol() {
        let lcp = [0xFF, 0x03, 0xC0, 0x21, 1, 1, 0, 4];
        assert_eq!(
            decode(LINKTYPE_PPP, &lcp),
            Err(skips::PPP_PROTOCOL_BASE + 0xC021)
        );
        let slarp = [0x8F, 0, 0x80, 0x35, 0, 0, 0, 0];
        assert_eq!(
            decode(LINKTYPE_C_HDLC, &slarp),
            Err(skips::ETHERTYPE_BASE + 0x8035)
        );
        // NFLOG of another address family (bridge), and one whose payload was not copied.
        let bridge = [7, 0, 0, 1, 8, 0, 9, 0, 0x45, 0, 0, 20];
        assert_eq!(
            decode(LINKTYPE_NFLOG, &bridge),
            Err(skips::ETHERTYPE_BASE + i64::from(NOT_IP))
        );
        let no_payload = [2, 0, 0, 1, 8, 0, 1, 0, 0, 0, 0, 0];
        assert_eq!(
            decode(LINKTYPE_NFLOG, &no_payload),
            Err(skips::TRUNCATED_LINK_HEADER)
        );
    }

    /// An IPv4 packet (its header 20 bytes) cut into two fragments at `split` bytes of its
    /// payload (a multiple of 8), each in Ethernet with the packet's header, set for it.
    fn in_fragments(ip: &[u8], split: usize) -> [Vec<u8>; 2] {
        let payload = &ip[20..];
        let fragment = |bytes: &[u8], offset: usize, more: bool| {
            let mut header = ip[..20].to_vec();
            header[2..4].copy_from_slice(&((20 + bytes.len()) as u16).to_be_bytes());
            header[4..6].copy_from_slice(&0x1234u16.to_be_bytes());
            let flags = u16::from(more) << 13 | (offset / 8) as u16;
            header[6..8].copy_from_slice(&flags.to_be_bytes());
            header.extend(bytes);
            in_ethernet(ETHERTYPE_IPV4, &header)
        };
        [
            fragment(&payload[..split], 0, true),
            fragment(&payload[split..], split, false),
        ]
    }

    #[test]
    fn a_fragmented_segment_is_decoded_at_the_fragment_that_completes_it() {
        let expected = decode(LINKTYPE_ETHERNET, &syn());
        let [first, last] = in_fragments(&inner_ip(), 16);
        let mut decoder = Decoder::default();
        assert_eq!(
            decoder.decode(LINKTYPE_ETHERNET, &first),
            Err(skips::IPV4_FRAGMENT)
        );
        assert_eq!(decoder.decode(LINKTYPE_ETHERNET, &last), expected);
        // In the other order, the first fragment completes the datagram.
        let mut decoder = Decoder::default();
        assert_eq!(
            decoder.decode(LINKTYPE_ETHERNET, &last),
            Err(skips::IPV4_FRAGMENT)
        );
        assert_eq!(decoder.decode(LINKTYPE_ETHERNET, &first), expected);
    }

    #[test]
    fn a_first_fragment_not_captured_whole_is_decoded_as_it_stands() {
        // The SYN with 16 bytes of data, the first fragment holding its header and 8 of them.
        let mut ip = inner_ip();
        ip.extend([7u8; 16]);
        let total = ip.len() as u16;
        ip[2..4].copy_from_slice(&total.to_be_bytes());
        let [first, _] = in_fragments(&ip, 48);
        let cut = &first[..first.len() - 4];
        let packet = Decoder::default().decode(LINKTYPE_ETHERNET, cut).unwrap();
        assert_eq!(
            (packet.src_port, packet.seq, packet.payload_bytes),
            (40000, 1, 8)
        );
    }

    #[test]
    fn a_sack_option_gives_its_blocks() {
        let options = [
            1, 1, 5, 18, 0, 0, 0, 10, 0, 0, 0, 20, 0, 0, 0, 30, 0, 0, 0, 40,
        ];
        let found = tcp_options(&options);
        assert_eq!(found.sack_block_count, 2);
        assert_eq!(&found.sack_blocks[..2], &[(10, 20), (30, 40)]);
    }
}
