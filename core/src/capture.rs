//! The packet records of a pcap or pcapng file, in file order, with libpcap's semantics:
//! timestamps in microseconds (nanoseconds truncated), every
//! pcapng packet by its own interface's link type and clock, and a damaged or cut record
//! ending the read there with a warning, the records before it kept.
//!
//! pcap-parser parses the file formats (record headers, pcapng blocks and their options); the
//! bytes come through a bounded buffer (`source.rs`), refilled when a record continues past
//! it, so that memory follows the records, never the file. pcap-parser's own streaming
//! readers are not used: they hide the record header whose stated length must be checked
//! before its data is waited for (a damaged record claiming 258 MB), and the block kinds
//! (obsolete packet blocks) and byte orders read here.

use pcap_parser::nom;
use pcap_parser::pcap::{parse_pcap_frame, parse_pcap_frame_be, parse_pcap_frame_modified};
use pcap_parser::pcapng::{Block, parse_block_be, parse_block_le, parse_sectionheaderblock};
use pcap_parser::{LegacyPcapBlock, PcapError, parse_pcap_header};

use crate::clock::Clock;
use crate::source::Source;

/// One packet record.
pub struct Record<'a> {
    pub time_us: i64,
    pub linktype: u32,
    pub data: &'a [u8],
    /// The packet's length on the wire as the record states it (pcap's orig_len, pcapng's
    /// original packet length), which libpcap's filter judges `len` by.
    pub wire_bytes: u32,
}

const PCAPNG_SECTION_HEADER: [u8; 4] = [0x0A, 0x0D, 0x0D, 0x0A];
const PCAPNG_BIG_ENDIAN_ORDER: [u8; 4] = [0x1A, 0x2B, 0x3C, 0x4D];
const PCAP_MAGICS: [u32; 3] = [0xA1B2_C3D4, 0xA1B2_3C4D, 0xA1B2_CD34];
const PCAP_HEADER_BYTES: usize = 24;
/// libpcap's largest snapshot length for the link types decoded here: a record claiming more
/// is damaged (tcpdump and tshark stop there too).
const MAX_SNAPLEN: u32 = 262_144;
/// libpcap's largest pcapng block (its reader refuses a longer one): a block claiming more is
/// damaged, and the read buffer never grows past about this.
const MAX_BLOCK_BYTES: u32 = 16 * 1024 * 1024;
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

/// A capture read in file order through a bounded buffer (`Source`), a batch of records at
/// a time.
pub struct CaptureReader {
    source: Source,
    format: Format,
    packets: u64,
    warnings: Vec<String>,
    finished: bool,
    big_endian: bool,
    cut_short: Option<String>,
    clock: Clock,
}

enum Format {
    Pcap(Pcap),
    PcapNg(PcapNg),
}

/// What one look at the buffered bytes gave.
enum Step {
    /// A block or record of `bytes` was read (`packet`: it held a packet, handed on).
    Read { bytes: usize, packet: bool },
    /// The next record continues past the bytes buffered.
    NeedMore,
    /// The read ends, with why it ended early (a damaged or cut record), if it did.
    End(Option<String>),
}

impl CaptureReader {
    /// Open the capture at `path` (compressed or not) and read its file header.
    pub fn open(path: &str) -> Result<CaptureReader, NotACapture> {
        CaptureReader::from_source(Source::open(path)?)
    }

    fn from_source(mut source: Source) -> Result<CaptureReader, NotACapture> {
        source.fill_to(PCAP_HEADER_BYTES);
        let head = source.available();
        if head.is_empty() {
            return Err(NotACapture(
                source
                    .cut_short()
                    .unwrap_or("empty file, not a capture")
                    .to_string(),
            ));
        }
        let (format, big_endian) = if head.starts_with(&PCAPNG_SECTION_HEADER) {
            // The first section's byte-order magic (a later section may differ).
            let big_endian = head.get(8..12) == Some(&PCAPNG_BIG_ENDIAN_ORDER[..]);
            (Format::PcapNg(PcapNg::default()), big_endian)
        } else {
            let magic = head
                .get(..4)
                .map(|m| u32::from_le_bytes([m[0], m[1], m[2], m[3]]));
            match magic {
                Some(m) if PCAP_MAGICS.contains(&m) || PCAP_MAGICS.contains(&m.swap_bytes()) => {
                    let pcap = Pcap::new(head)?;
                    source.consume(PCAP_HEADER_BYTES);
                    let big_endian = pcap.big_endian;
                    (Format::Pcap(pcap), big_endian)
                }
                _ => {
                    let how = source
                        .compression()
                        .map(|name| format!(" (once decompressed from {name})"))
                        .unwrap_or_default();
                    return Err(NotACapture(format!("not a pcap or pcapng capture{how}")));
                }
            }
        };
        let mut reader = CaptureReader {
            source,
            format,
            packets: 0,
            warnings: Vec::new(),
            cut_short: None,
            finished: false,
            big_endian,
            clock: Clock::default(),
        };
        reader.read_to_first_interface()?;
        Ok(reader)
    }

    /// libpcap opens a pcapng file once it has read its first interface description, and
    /// refuses one whose blocks before it are damaged, hold a packet, or end the file: read
    /// to there now (no packet comes before it), so that such a file is refused alike.
    fn read_to_first_interface(&mut self) -> Result<(), NotACapture> {
        let CaptureReader { source, format, .. } = self;
        let Format::PcapNg(pcapng) = format else {
            return Ok(());
        };
        while pcapng.interfaces.is_empty() {
            let (at_end, position) = (source.ended(), source.position());
            match pcapng.step(source.available(), at_end, position, &mut |_| {}) {
                Step::Read { bytes, .. } => source.consume(bytes),
                Step::NeedMore => source.refill(),
                Step::End(why) => {
                    return Err(NotACapture(
                        source
                            .cut_short()
                            .map(str::to_string)
                            .or(why)
                            .unwrap_or_else(|| {
                                "the capture file has no Interface Description Blocks".into()
                            }),
                    ));
                }
            }
        }
        Ok(())
    }

    /// The capture's bytes consumed so far (decompressed).
    pub fn bytes_read(&self) -> u64 {
        self.source.position()
    }

    /// Hand up to `limit` records to `sink`, in file order; returns how many (0: the capture
    /// has been read to its end, or to the damage that ended it).
    pub fn read(&mut self, limit: usize, sink: &mut dyn FnMut(Record<'_>)) -> usize {
        let (mut given, mut ended_here) = (0, false);
        let clock = &mut self.clock;
        let mut timed = |record: Record<'_>| {
            clock.see(record.time_us);
            sink(record);
        };
        while given < limit && !self.finished {
            let at_end = self.source.ended();
            let rest = self.source.available();
            let step = match &mut self.format {
                Format::Pcap(pcap) => pcap.step(rest, at_end, self.packets, &mut timed),
                Format::PcapNg(pcapng) => {
                    pcapng.step(rest, at_end, self.source.position(), &mut timed)
                }
            };
            match step {
                Step::Read { bytes, packet } => {
                    self.source.consume(bytes);
                    if packet {
                        self.packets += 1;
                        given += 1;
                    }
                }
                Step::NeedMore => self.source.refill(),
                Step::End(why) => {
                    self.finished = true;
                    self.cut_short = self
                        .source
                        .cut_short()
                        .map(str::to_string)
                        .or_else(|| why.clone());
                    self.warnings.extend(self.source.warning());
                    self.warnings.extend(why.map(|why| {
                        format!(
                            "capture cut short ({why}); analysed the {} packets before it",
                            self.packets
                        )
                    }));
                    ended_here = true;
                }
            }
        }
        if ended_here {
            self.warnings.extend(self.clock.warning());
        }
        given
    }

    /// Why the read ended early (complete once `read` has returned 0).
    pub fn warnings(&self) -> &[String] {
        &self.warnings
    }

    /// What the packets' times say of the clock that stamped them (known once `read` has
    /// returned 0).
    pub fn clock(&self) -> Option<&Clock> {
        self.finished.then_some(&self.clock)
    }

    /// Why the read ended before the file's end (the input's own reason first: a compressed
    /// stream cut or damaged), None where it was read whole.
    pub fn cut_short(&self) -> Option<&str> {
        self.cut_short.as_deref()
    }

    /// The capture's link type as libpcap reports it for the file: its pcap header's, or its
    /// first interface's (None for a pcapng file before one is read).
    pub fn linktype(&self) -> Option<u32> {
        match &self.format {
            Format::Pcap(pcap) => Some(pcap.linktype),
            Format::PcapNg(pcapng) => pcapng.interfaces.first().map(|first| first.linktype),
        }
    }

    /// Packets handed on so far.
    pub fn packets(&self) -> u64 {
        self.packets
    }

    /// Whether the capture is big-endian, as its file header (pcap) or first section header
    /// (pcapng) says, read after any decompression.
    pub fn big_endian(&self) -> bool {
        self.big_endian
    }
}

type PcapParser = fn(&[u8]) -> nom::IResult<&[u8], LegacyPcapBlock<'_>, PcapError<&[u8]>>;

/// Whether a pcap file's records state their captured length first (as today's do), or their
/// length on the wire first (libpcap before 0.4, in files of versions 2.0 to 2.2, and in some of
/// 2.3, where libpcap takes the smaller for the captured length).
#[derive(Clone, Copy, PartialEq)]
enum Lengths {
    CapturedFirst,
    WireFirst,
    SmallerCaptured,
}

/// A classic pcap file's header, as its records are read by.
struct Pcap {
    linktype: u32,
    nanoseconds: bool,
    snaplen: u32,
    big_endian: bool,
    record_bytes: usize,
    lengths: Lengths,
    parse: PcapParser,
}

impl Pcap {
    fn new(head: &[u8]) -> Result<Pcap, NotACapture> {
        let (_, header) = parse_pcap_header(head)
            .map_err(|_| NotACapture("truncated pcap file header".into()))?;
        let modified = header.is_modified_format();
        let lengths = match record_lengths(header.version_major, header.version_minor)? {
            // Written by a patched libpcap of version 2.4 only: its records are read as stated.
            _ if modified => Lengths::CapturedFirst,
            lengths => lengths,
        };
        Ok(Pcap {
            linktype: libpcap_linktype(header.network.0 as u32 & LINKTYPE_BITS),
            nanoseconds: header.is_nanosecond_precision(),
            // libpcap keeps no more of a record than the file's snapshot length (or its maximum).
            snaplen: match header.snaplen {
                0 => MAX_SNAPLEN,
                s => s.min(MAX_SNAPLEN),
            },
            big_endian: header.is_bigendian(),
            record_bytes: if modified { 24 } else { 16 },
            lengths,
            parse: match (modified, lengths, header.is_bigendian()) {
                (true, _, _) => parse_pcap_frame_modified,
                (false, Lengths::CapturedFirst, false) => parse_pcap_frame,
                (false, Lengths::CapturedFirst, true) => parse_pcap_frame_be,
                (false, Lengths::WireFirst, false) => |i| parse_wire_first(i, false, false),
                (false, Lengths::WireFirst, true) => |i| parse_wire_first(i, true, false),
                (false, Lengths::SmallerCaptured, false) => |i| parse_wire_first(i, false, true),
                (false, Lengths::SmallerCaptured, true) => |i| parse_wire_first(i, true, true),
            },
        })
    }

    fn step(
        &self,
        rest: &[u8],
        at_end: bool,
        frame: u64,
        sink: &mut dyn FnMut(Record<'_>),
    ) -> Step {
        if rest.is_empty() {
            return if at_end {
                Step::End(None)
            } else {
                Step::NeedMore
            };
        }
        if let Some(stated) = stated_caplen(rest, self.big_endian, self.lengths)
            && stated > MAX_SNAPLEN
        {
            return Step::End(Some(format!(
                "record {} claims {stated} captured bytes, more than libpcap's maximum of \
                 {MAX_SNAPLEN}",
                frame + 1
            )));
        }
        match (self.parse)(rest) {
            Ok((after, record)) => {
                // libpcap holds the fraction in a signed field and scales nanoseconds down
                // there: a damaged fraction (2^31 ns and more) gives tcpdump's time.
                let sub_us = if self.nanoseconds {
                    (record.ts_usec as i32 / 1000) as u32
                } else {
                    record.ts_usec
                };
                let time_us = i64::from(record.ts_sec)
                    .wrapping_mul(1_000_000)
                    .wrapping_add(i64::from(sub_us));
                let kept = record.data.len().min(self.snaplen as usize);
                sink(Record {
                    time_us,
                    linktype: self.linktype,
                    data: &record.data[..kept],
                    wire_bytes: record.origlen,
                });
                Step::Read {
                    bytes: rest.len() - after.len(),
                    packet: true,
                }
            }
            Err(nom::Err::Incomplete(_)) if !at_end => Step::NeedMore,
            Err(_) => {
                let cut = if rest.len() < self.record_bytes {
                    "header"
                } else {
                    "data"
                };
                Step::End(Some(format!(
                    "the file ends inside record {}'s {cut}",
                    frame + 1
                )))
            }
        }
    }
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

/// How the records of a pcap file of this version state their lengths; libpcap reads versions
/// 2.0 to 2.4 and DG/UX tcpdump's 543.0, and refuses the others (a damaged file header), in its
/// words.
fn record_lengths(major: u16, minor: u16) -> Result<Lengths, NotACapture> {
    match (major, minor) {
        (0..2, _) => Err(NotACapture("archaic pcap savefile format".into())),
        (2, 0..3) | (543, 0) => Ok(Lengths::WireFirst),
        (2, 3) => Ok(Lengths::SmallerCaptured),
        (2, 4) => Ok(Lengths::CapturedFirst),
        _ => Err(NotACapture(format!(
            "unsupported pcap savefile version {major}.{minor}"
        ))),
    }
}

/// The two length fields of the record header at the start of `rest` (captured, then on the
/// wire, as today's files state them), if the header is whole.
fn stated_lengths(rest: &[u8], big_endian: bool) -> Option<(u32, u32)> {
    Some((word(rest, 8, big_endian)?, word(rest, 12, big_endian)?))
}

/// The 32-bit word at `at` of `bytes`, if they hold it.
fn word(bytes: &[u8], at: usize, big_endian: bool) -> Option<u32> {
    let bytes: [u8; 4] = bytes.get(at..at.checked_add(4)?)?.try_into().ok()?;
    Some(if big_endian {
        u32::from_be_bytes(bytes)
    } else {
        u32::from_le_bytes(bytes)
    })
}

/// The captured length a pcap record header states, as libpcap reads it, if the header is whole.
fn stated_caplen(rest: &[u8], big_endian: bool, lengths: Lengths) -> Option<u32> {
    let (first, second) = stated_lengths(rest, big_endian)?;
    Some(match lengths {
        Lengths::CapturedFirst => first,
        Lengths::WireFirst => second,
        Lengths::SmallerCaptured => first.min(second),
    })
}

/// A record of a file whose records state their length on the wire first (`smaller`: or
/// either first, the captured length being the smaller).
fn parse_wire_first(
    rest: &[u8],
    big_endian: bool,
    smaller: bool,
) -> nom::IResult<&[u8], LegacyPcapBlock<'_>, PcapError<&[u8]>> {
    const HEADER: usize = 16;
    let lengths = if smaller {
        Lengths::SmallerCaptured
    } else {
        Lengths::WireFirst
    };
    let (Some((first, second)), Some(caplen), Some(ts_sec), Some(ts_usec)) = (
        stated_lengths(rest, big_endian),
        stated_caplen(rest, big_endian, lengths),
        word(rest, 0, big_endian),
        word(rest, 4, big_endian),
    ) else {
        return Err(nom::Err::Incomplete(nom::Needed::new(
            HEADER.saturating_sub(rest.len()),
        )));
    };
    let end = HEADER + caplen as usize;
    let Some(data) = rest.get(HEADER..end) else {
        return Err(nom::Err::Incomplete(nom::Needed::new(end - rest.len())));
    };
    Ok((
        &rest[end..],
        LegacyPcapBlock {
            ts_sec,
            ts_usec,
            caplen,
            origlen: if caplen == first { second } else { first },
            data,
        },
    ))
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

/// Where a pcapng file's read is: the section's byte order and interfaces.
struct PcapNg {
    parse: BlockParser,
    big_endian: bool,
    interfaces: Vec<Interface>,
}

impl Default for PcapNg {
    fn default() -> PcapNg {
        PcapNg {
            parse: parse_block_le,
            big_endian: false,
            interfaces: Vec::new(),
        }
    }
}

impl PcapNg {
    /// Read the block at the start of `rest` (at byte `position` of the file); sections may
    /// change byte order, and each packet is read by its own interface.
    fn step(
        &mut self,
        rest: &[u8],
        at_end: bool,
        position: u64,
        sink: &mut dyn FnMut(Record<'_>),
    ) -> Step {
        let stop = |why: String| Step::End(Some(why));
        if rest.is_empty() {
            return if at_end {
                Step::End(None)
            } else {
                Step::NeedMore
            };
        }
        let section_header = rest.starts_with(&PCAPNG_SECTION_HEADER);
        if let Some(stated) = self.stated_length(rest, section_header)
            && stated > MAX_BLOCK_BYTES
        {
            return stop(format!(
                "damaged block at byte {position}: it claims {stated} bytes, more than \
                 libpcap's maximum of {MAX_BLOCK_BYTES}"
            ));
        }
        if section_header {
            match parse_sectionheaderblock(rest) {
                // libpcap reads versions 1.0 and 1.2 (written by some tools), no other.
                Ok((_, section))
                    if section.major_version != 1 || !matches!(section.minor_version, 0 | 2) =>
                {
                    return stop(format!(
                        "unsupported pcapng savefile version {}.{}",
                        section.major_version, section.minor_version
                    ));
                }
                Ok((_, section)) => {
                    self.big_endian = section.big_endian();
                    self.parse = if self.big_endian {
                        parse_block_be
                    } else {
                        parse_block_le
                    };
                    self.interfaces.clear();
                }
                Err(nom::Err::Incomplete(_)) if !at_end => return Step::NeedMore,
                Err(_) => return stop(format!("damaged section header at byte {position}")),
            }
        }
        let (after, block) = match (self.parse)(rest) {
            Ok(parsed) => parsed,
            Err(nom::Err::Incomplete(_)) if !at_end => return Step::NeedMore,
            Err(nom::Err::Incomplete(_)) => {
                return stop(format!("the file ends inside the block at byte {position}"));
            }
            Err(_) => return stop(format!("damaged block at byte {position}")),
        };
        let bytes = rest.len() - after.len();
        let Some(PacketBlock {
            interface,
            ticks,
            caplen,
            wire_bytes,
            data,
        }) = self.packet(block)
        else {
            return Step::Read {
                bytes,
                packet: false,
            };
        };
        let Some(described) = self.interfaces.get(interface as usize) else {
            return stop(format!(
                "packet block at byte {position} names no interface"
            ));
        };
        let Some(data) = data.get(..caplen as usize) else {
            return stop(format!(
                "packet block at byte {position} holds a packet longer than the block"
            ));
        };
        sink(Record {
            time_us: ticks.map_or(0, |t| described.time_us(t)),
            linktype: described.linktype,
            data,
            wire_bytes,
        });
        Step::Read {
            bytes,
            packet: true,
        }
    }

    /// The block's total length as its header states it (in its section's byte order; a
    /// section header's own order is in its byte-order magic), once those bytes are there.
    fn stated_length(&self, rest: &[u8], section_header: bool) -> Option<u32> {
        let big_endian = if section_header {
            rest.get(8..12)? == PCAPNG_BIG_ENDIAN_ORDER
        } else {
            self.big_endian
        };
        let bytes: [u8; 4] = rest.get(4..8)?.try_into().ok()?;
        Some(if big_endian {
            u32::from_be_bytes(bytes)
        } else {
            u32::from_le_bytes(bytes)
        })
    }

    /// A packet block's packet (None for a block of another kind, whose content, an
    /// interface's, is taken in here).
    fn packet<'a>(&mut self, block: Block<'a>) -> Option<PacketBlock<'a>> {
        match block {
            Block::InterfaceDescription(described) => {
                self.interfaces.push(Interface {
                    linktype: libpcap_linktype(u32::from(described.linktype.0 as u16)),
                    snaplen: described.snaplen,
                    resolution: described.if_tsresol,
                    // pcap-parser reads the offset little-endian whatever the section's order.
                    offset_s: if self.big_endian {
                        described.if_tsoffset.swap_bytes()
                    } else {
                        described.if_tsoffset
                    },
                });
                None
            }
            Block::EnhancedPacket(p) => Some(PacketBlock {
                interface: p.if_id,
                ticks: ticks(p.ts_high, p.ts_low),
                caplen: p.caplen,
                wire_bytes: p.origlen,
                data: p.data,
            }),
            Block::SimplePacket(p) => {
                let snaplen = self.interfaces.first().map_or(0, |i| i.snaplen);
                let caplen = match snaplen {
                    0 => p.origlen,
                    s => p.origlen.min(s),
                };
                Some(PacketBlock {
                    interface: 0,
                    ticks: None,
                    caplen,
                    wire_bytes: p.origlen,
                    data: p.data,
                })
            }
            // pcap-parser keeps an unknown block's type as read little-endian.
            Block::Unknown(u) if native(u.block_type, self.big_endian) == OBSOLETE_PACKET_BLOCK => {
                obsolete_packet(u.data, self.big_endian)
            }
            _ => None,
        }
    }
}

/// What a packet block holds of its packet.
struct PacketBlock<'a> {
    interface: u32,
    ticks: Option<u64>,
    caplen: u32,
    wire_bytes: u32,
    data: &'a [u8],
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
fn obsolete_packet(body: &[u8], big_endian: bool) -> Option<PacketBlock<'_>> {
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
    Some(PacketBlock {
        interface,
        ticks: ticks(word(4)?, word(8)?),
        caplen: word(12)?,
        wire_bytes: word(16)?,
        data: body.get(20..)?,
    })
}

#[cfg(test)]
mod tests {
    use std::io::Write;
    use std::path::PathBuf;

    use super::*;

    fn sample_traces() -> Vec<PathBuf> {
        let folder = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../sample_traces");
        let mut found: Vec<PathBuf> = std::fs::read_dir(folder)
            .expect("sample_traces/ beside core/")
            .map(|entry| entry.expect("a directory entry").path())
            .filter(|path| {
                let name = path.to_string_lossy();
                name.ends_with(".pcap") || name.ends_with(".pcapng")
            })
            .collect();
        found.sort();
        found
    }

    /// Records as (time, link type, bytes), and the warnings.
    type Read = (Vec<(i64, u32, Vec<u8>)>, Vec<String>);

    /// Every record (time, link type, bytes), read `batch` at a time from a buffer starting
    /// at `buffer_bytes`, and the warnings.
    fn records(path: &str, buffer_bytes: usize, batch: usize) -> Read {
        let source = Source::with_buffer(path, buffer_bytes).expect("a readable file");
        let mut reader = CaptureReader::from_source(source).expect("a capture");
        let mut found = Vec::new();
        while reader.read(batch, &mut |r| {
            found.push((r.time_us, r.linktype, r.data.to_vec()))
        }) > 0
        {}
        (found, reader.warnings().to_vec())
    }

    /// The real captures of sample_traces/ read whole into the 1 MiB buffer (each is smaller)
    /// and through buffers of 1, 7 and 100 bytes, where every record waits for refills and
    /// the buffer grows to hold it: the same records, in batches of 1 or of all.
    #[test]
    fn a_buffer_of_any_size_reads_the_same_records() {
        let captures = sample_traces();
        assert!(captures.len() > 30);
        for path in captures {
            let path = path.to_str().expect("a UTF-8 path");
            assert!(std::fs::metadata(path).expect("a file").len() < 1 << 20);
            let whole = records(path, 1 << 20, usize::MAX);
            assert!(!whole.0.is_empty(), "{path}");
            for buffer_bytes in [1, 7, 100] {
                for batch in [1, usize::MAX] {
                    assert!(
                        records(path, buffer_bytes, batch) == whole,
                        "{path} {buffer_bytes}"
                    );
                }
            }
        }
    }

    /// The byte order a file header states, for a pcap file (either microsecond magic or the
    /// nanosecond one, written either way round) and a pcapng file's first section.
    #[test]
    fn the_byte_order_is_the_file_headers() {
        let pcap = |magic: u32, big_endian: bool| {
            let mut header = vec![0u8; PCAP_HEADER_BYTES];
            let (magic, version, snaplen, linktype) = if big_endian {
                (
                    magic.to_be_bytes(),
                    [0, 2, 0, 4],
                    65535u32.to_be_bytes(),
                    1u32.to_be_bytes(),
                )
            } else {
                (
                    magic.to_le_bytes(),
                    [2, 0, 4, 0],
                    65535u32.to_le_bytes(),
                    1u32.to_le_bytes(),
                )
            };
            header[..4].copy_from_slice(&magic);
            header[4..8].copy_from_slice(&version);
            header[16..20].copy_from_slice(&snaplen);
            header[20..24].copy_from_slice(&linktype);
            header
        };
        // A section header and an interface description (libpcap opens a pcapng file once
        // it has read its first interface), every field in the section's byte order.
        let pcapng = |big_endian: bool| {
            let word = |value: u32| {
                if big_endian {
                    value.to_be_bytes()
                } else {
                    value.to_le_bytes()
                }
            };
            let version = if big_endian {
                [0, 1, 0, 0]
            } else {
                [1, 0, 0, 0]
            };
            let linktype = if big_endian {
                [0, 1, 0, 0]
            } else {
                [1, 0, 0, 0]
            };
            [
                &PCAPNG_SECTION_HEADER[..],
                &word(28),
                &word(0x1A2B_3C4D),
                &version,
                &[0xFF; 8],
                &word(28),
                &word(1),
                &word(20),
                &linktype,
                &word(65535),
                &word(20),
            ]
            .concat()
        };
        let cases = [
            (pcap(PCAP_MAGICS[0], false), false),
            (pcap(PCAP_MAGICS[0], true), true),
            (pcap(PCAP_MAGICS[1], true), true),
            (pcapng(false), false),
            (pcapng(true), true),
        ];
        let path = std::env::temp_dir().join(format!(
            "nagledetect-core-order-{}.pcap",
            std::process::id()
        ));
        for (bytes, big_endian) in cases {
            std::fs::write(&path, &bytes).expect("a temporary file");
            let reader = CaptureReader::open(path.to_str().expect("a UTF-8 path"))
                .expect("a capture header");
            assert_eq!(reader.big_endian(), big_endian, "{bytes:02x?}");
        }
        std::fs::remove_file(&path).expect("the temporary file removed");
    }

    /// seed003-nagle.pcap cut inside its last record: the records before it, one warning.
    #[test]
    fn a_cut_file_read_through_a_small_buffer_keeps_the_records_before() {
        let original =
            PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../sample_traces/seed003-nagle.pcap");
        let data = std::fs::read(&original).expect("the sample trace");
        let path =
            std::env::temp_dir().join(format!("nagledetect-core-cut-{}.pcap", std::process::id()));
        std::fs::File::create(&path)
            .and_then(|mut file| file.write_all(&data[..data.len() - 3]))
            .expect("a temporary file");
        let path_text = path.to_str().expect("a UTF-8 path");
        let (all, none) = records(
            original.to_str().expect("a UTF-8 path"),
            1 << 20,
            usize::MAX,
        );
        let (cut, warnings) = records(path_text, 7, 3);
        std::fs::remove_file(&path).expect("the temporary file removed");
        assert!(none.is_empty());
        assert_eq!(cut, all[..all.len() - 1]);
        assert_eq!(warnings.len(), 1);
        assert!(warnings[0].contains(&format!("record {}'s data", all.len())));
    }
}
