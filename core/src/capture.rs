//! The packet records of a pcap or pcapng file, in file order, with libpcap's semantics where
//! the numpy path relies on them: timestamps in microseconds (nanoseconds truncated), every
//! pcapng packet by its own interface's link type and clock, and a damaged or cut record
//! ending the read there with a warning, the records before it kept.
//!
//! pcap-parser parses the file formats (record headers, pcapng blocks and their options).

use pcap_parser::nom;
use pcap_parser::pcap::{parse_pcap_frame, parse_pcap_frame_be, parse_pcap_frame_modified};
use pcap_parser::pcapng::{Block, parse_block_be, parse_block_le, parse_sectionheaderblock};
use pcap_parser::{PcapError, parse_pcap_header};

/// One packet record.
pub struct Record<'a> {
    pub time_us: i64,
    pub linktype: u32,
    pub data: &'a [u8],
}

const PCAPNG_SECTION_HEADER: [u8; 4] = [0x0A, 0x0D, 0x0D, 0x0A];
const PCAP_MAGICS: [u32; 3] = [0xA1B2_C3D4, 0xA1B2_3C4D, 0xA1B2_CD34];
const COMPRESSED_MAGICS: [(&[u8], &str); 5] = [
    (b"\x1f\x8b", "gzip"),
    (b"BZh", "bzip2"),
    (b"\xfd7zX", "xz"),
    (b"\x28\xb5\x2f\xfd", "zstd"),
    (b"PK\x03\x04", "zip"),
];
/// libpcap's largest snapshot length for the link types decoded here: a record claiming more
/// is damaged (tcpdump and tshark stop there too).
const MAX_SNAPLEN: u32 = 262_144;
/// The bits of a pcap header's link-type field that name the link type (libpcap's
/// LT_LINKTYPE); the others say whether frames end with a check sequence.
const LINKTYPE_BITS: u32 = 0x03FF_FFFF;
const OBSOLETE_PACKET_BLOCK: u32 = 2;
const DEFAULT_TIME_RESOLUTION: u8 = 6;
const BINARY_RESOLUTION: u8 = 0x80;
const WIDEST_BINARY_FRACTION: u32 = 44;

/// Why a file cannot be read at all (the caller names the file).
#[derive(Debug)]
pub struct NotACapture(pub String);

/// Read every record, handing each to `sink`; returns the warning that ended the read early
/// (None: the file was read to its end).
pub fn read_records(
    file: &[u8],
    sink: &mut dyn FnMut(Record<'_>),
) -> Result<Option<String>, NotACapture> {
    if file.is_empty() {
        return Err(NotACapture("empty file, not a capture".into()));
    }
    if let Some((_, name)) = COMPRESSED_MAGICS
        .iter()
        .find(|(magic, _)| file.starts_with(magic))
    {
        return Err(NotACapture(format!(
            "compressed with {name}: the compiled core reads only uncompressed captures"
        )));
    }
    if file.starts_with(&PCAPNG_SECTION_HEADER) {
        return Ok(read_pcapng(file, sink));
    }
    let magic = file
        .get(..4)
        .map(|m| u32::from_le_bytes([m[0], m[1], m[2], m[3]]));
    match magic {
        Some(m) if PCAP_MAGICS.contains(&m) || PCAP_MAGICS.contains(&m.swap_bytes()) => {
            read_pcap(file, sink)
        }
        _ => Err(NotACapture("not a pcap or pcapng capture".into())),
    }
}

fn read_pcap(file: &[u8], sink: &mut dyn FnMut(Record<'_>)) -> Result<Option<String>, NotACapture> {
    let (mut rest, header) =
        parse_pcap_header(file).map_err(|_| NotACapture("truncated pcap file header".into()))?;
    let linktype = libpcap_linktype(header.network.0 as u32 & LINKTYPE_BITS);
    let nanoseconds = header.is_nanosecond_precision();
    // libpcap keeps no more of a record than the file's snapshot length (or its maximum).
    let snaplen = match header.snaplen {
        0 => MAX_SNAPLEN,
        s => s.min(MAX_SNAPLEN),
    };
    let parse = if header.is_modified_format() {
        parse_pcap_frame_modified
    } else if header.is_bigendian() {
        parse_pcap_frame_be
    } else {
        parse_pcap_frame
    };
    let record_bytes = if header.is_modified_format() { 24 } else { 16 };
    let mut frame = 0u64;
    while !rest.is_empty() {
        if let Some(stated) = stated_caplen(rest, header.is_bigendian())
            && stated > MAX_SNAPLEN
        {
            return Ok(Some(format!(
                "capture cut short (record {} claims {stated} captured bytes, more than \
                 libpcap's maximum of {MAX_SNAPLEN}); analysed the {frame} packets before it",
                frame + 1
            )));
        }
        match parse(rest) {
            Ok((after, record)) => {
                // libpcap holds the fraction in a signed field and scales nanoseconds down
                // there; the numpy path reads it back unsigned. Done alike, a damaged
                // fraction (2^31 ns and more) gives the same time on both paths.
                let sub_us = if nanoseconds {
                    (record.ts_usec as i32 / 1000) as u32
                } else {
                    record.ts_usec
                };
                let time_us = i64::from(record.ts_sec)
                    .wrapping_mul(1_000_000)
                    .wrapping_add(i64::from(sub_us));
                let kept = record.data.len().min(snaplen as usize);
                sink(Record {
                    time_us,
                    linktype,
                    data: &record.data[..kept],
                });
                frame += 1;
                rest = after;
            }
            Err(_) => {
                let cut = if rest.len() < record_bytes {
                    "header"
                } else {
                    "data"
                };
                return Ok(Some(format!(
                    "capture cut short (the file ends inside record {}'s {cut}); analysed \
                     the {frame} packets before it",
                    frame + 1
                )));
            }
        }
    }
    Ok(None)
}

/// The link type as libpcap names it (its DLT value), where that differs from the file's
/// LINKTYPE value on Linux.
fn libpcap_linktype(linktype: u32) -> u32 {
    match linktype {
        100 => 11,
        101 => 12,
        102 => 15,
        103 => 16,
        other => other,
    }
}

/// The captured length a pcap record header states, if the header is whole.
fn stated_caplen(rest: &[u8], big_endian: bool) -> Option<u32> {
    let bytes: [u8; 4] = rest.get(8..12)?.try_into().ok()?;
    Some(if big_endian {
        u32::from_be_bytes(bytes)
    } else {
        u32::from_le_bytes(bytes)
    })
}

/// A pcapng interface: its link type and clock.
#[derive(Clone, Copy)]
struct Interface {
    linktype: u32,
    snaplen: u32,
    resolution: u8,
    offset_s: i64,
}

impl Interface {
    /// Ticks since the epoch as microseconds, truncated, as libpcap gives them.
    fn time_us(&self, ticks: u64) -> i64 {
        let micro = if self.resolution & BINARY_RESOLUTION != 0 {
            let mut bits = u32::from(self.resolution & !BINARY_RESOLUTION).min(63);
            let whole_s = ticks >> bits;
            let mut fraction = ticks & ((1u64 << bits) - 1);
            if bits > WIDEST_BINARY_FRACTION {
                fraction >>= bits - WIDEST_BINARY_FRACTION;
                bits = WIDEST_BINARY_FRACTION;
            }
            (whole_s as i64)
                .wrapping_mul(1_000_000)
                .wrapping_add((fraction.wrapping_mul(1_000_000) >> bits) as i64)
        } else if self.resolution >= DEFAULT_TIME_RESOLUTION {
            let divisor = 10u64.checked_pow(u32::from(self.resolution - 6));
            divisor.map_or(0, |d| (ticks / d) as i64)
        } else {
            (ticks as i64).wrapping_mul(10i64.pow(u32::from(6 - self.resolution)))
        };
        micro.wrapping_add(self.offset_s.wrapping_mul(1_000_000))
    }
}

type BlockParser = fn(&[u8]) -> nom::IResult<&[u8], Block<'_>, PcapError<&[u8]>>;

/// Walk a pcapng file block by block; sections may change byte order, and each packet is read
/// by its own interface.
fn read_pcapng(file: &[u8], sink: &mut dyn FnMut(Record<'_>)) -> Option<String> {
    let mut rest = file;
    let mut parse: BlockParser = parse_block_le;
    let mut big_endian = false;
    let mut interfaces: Vec<Interface> = Vec::new();
    let mut frame = 0u64;
    while !rest.is_empty() {
        let position = file.len() - rest.len();
        let stop = |why: String| {
            Some(format!(
                "capture cut short ({why}); analysed the {frame} packets before it"
            ))
        };
        if rest.starts_with(&PCAPNG_SECTION_HEADER) {
            match parse_sectionheaderblock(rest) {
                Ok((_, section)) => {
                    big_endian = section.big_endian();
                    parse = if big_endian {
                        parse_block_be
                    } else {
                        parse_block_le
                    };
                    interfaces.clear();
                }
                Err(_) => return stop(format!("damaged section header at byte {position}")),
            }
        }
        let (after, block) = match parse(rest) {
            Ok(parsed) => parsed,
            Err(nom::Err::Incomplete(_)) => {
                return stop(format!("the file ends inside the block at byte {position}"));
            }
            Err(_) => return stop(format!("damaged block at byte {position}")),
        };
        let packet = match block {
            Block::InterfaceDescription(described) => {
                interfaces.push(Interface {
                    linktype: libpcap_linktype(u32::from(described.linktype.0 as u16)),
                    snaplen: described.snaplen,
                    resolution: described.if_tsresol,
                    // pcap-parser reads the offset little-endian whatever the section's order.
                    offset_s: if big_endian {
                        described.if_tsoffset.swap_bytes()
                    } else {
                        described.if_tsoffset
                    },
                });
                None
            }
            Block::EnhancedPacket(p) => {
                Some((p.if_id, ticks(p.ts_high, p.ts_low), p.caplen, p.data))
            }
            Block::SimplePacket(p) => {
                let snaplen = interfaces.first().map_or(0, |i| i.snaplen);
                let caplen = match snaplen {
                    0 => p.origlen,
                    s => p.origlen.min(s),
                };
                Some((0, None, caplen, p.data))
            }
            // pcap-parser keeps an unknown block's type as read little-endian.
            Block::Unknown(u) if native(u.block_type, big_endian) == OBSOLETE_PACKET_BLOCK => {
                obsolete_packet(u.data, big_endian)
            }
            _ => None,
        };
        if let Some((interface, ticks, caplen, data)) = packet {
            let Some(described) = interfaces.get(interface as usize) else {
                return stop(format!(
                    "packet block at byte {position} names no interface"
                ));
            };
            let Some(data) = data.get(..caplen as usize) else {
                return stop(format!(
                    "packet block at byte {position} holds a packet longer than the block"
                ));
            };
            let time_us = ticks.map_or(0, |t| described.time_us(t));
            sink(Record {
                time_us,
                linktype: described.linktype,
                data,
            });
            frame += 1;
        }
        rest = after;
    }
    None
}

fn native(little_endian_value: u32, big_endian: bool) -> u32 {
    if big_endian {
        little_endian_value.swap_bytes()
    } else {
        little_endian_value
    }
}

fn ticks(high: u32, low: u32) -> Option<u64> {
    Some((u64::from(high) << 32) | u64::from(low))
}

/// An obsolete packet block (type 2, pcapng's first drafts): interface, drops, timestamp,
/// captured and original lengths, then the packet.
fn obsolete_packet(body: &[u8], big_endian: bool) -> Option<(u32, Option<u64>, u32, &[u8])> {
    let word = |at: usize| -> Option<u32> {
        let bytes = body.get(at..at + 4)?.try_into().ok()?;
        Some(if big_endian {
            u32::from_be_bytes(bytes)
        } else {
            u32::from_le_bytes(bytes)
        })
    };
    let first = word(0)?;
    let interface = if big_endian {
        first >> 16
    } else {
        first & 0xFFFF
    };
    Some((
        interface,
        ticks(word(4)?, word(8)?),
        word(12)?,
        body.get(20..)?,
    ))
}
