//! BPF `--filter` as tcpdump applies it: libpcap's own compiler (`pcap_compile`) and its own
//! filter machine (`pcap_offline_filter`), one program per link type, so a pcapng file whose
//! interfaces differ is filtered packet by packet as each interface's link type says.
//!
//! The compiler is given what tcpdump's is: a handle on a savefile (a pcap file header of the
//! capture's byte order and the packet's link type, read by libpcap from memory), not a dead
//! capture, for which libpcap compiles otherwise: on BSD loopback `ip6` then tests Linux's
//! AF_INET6 (10) only, not the BSDs' 24, 28 and 30, and the address family is never swapped
//! as it is for a file written on a host of the other byte order.
//!
//! libpcap is called directly rather than through the `pcap` crate: that crate's
//! `BpfProgram::filter` hands libpcap the captured length as the packet's length on the wire,
//! so `len`, `greater` and `less` could never judge a packet cut by the snapshot length as
//! tcpdump does (here `Filter::accepts` takes the record's length on the wire), and it opens
//! a savefile handle only on a file or descriptor. The calls below are all
//! this module needs of libpcap and the C library; every unsafe block says why it is sound.

use crate::pcap_types::{
    ERRBUF_BYTES, OPTIMIZE, PacketHeader, PcapHandle, RawProgram, Timeval, pcap_close,
    pcap_compile, pcap_freecode, pcap_geterr,
};
use std::collections::HashMap;
use std::ffi::{CStr, CString, c_char, c_int, c_void};
use std::ptr;

use crate::capture::Record;
use crate::columns::Columns;
use crate::decode::Decoder;

/// The snapshot length the savefile header states (the accepting return value, never zero,
/// is all it changes): libpcap's largest, as tcpdump compiles with for a file.
const SNAPLEN: u32 = 262_144;
/// tcpdump reading a file compiles with a netmask of 0 (it has no interface to ask): so
/// `ip broadcast` compiles, matching 0.0.0.0 and 255.255.255.255.
const NETMASK: u32 = 0;
/// The link type an expression is checked for when a file holds no packet (Ethernet, the
/// commonest).
const LINKTYPE_ETHERNET: u32 = 1;
/// pcap's microsecond magic number.
const PCAP_MAGIC: u32 = 0xA1B2_C3D4;

/// C's `FILE`, only ever handled by pointer.
#[repr(C)]
struct CFile {
    _opaque: [u8; 0],
}

unsafe extern "C" {
    fn fmemopen(buffer: *mut c_void, size: usize, mode: *const c_char) -> *mut CFile;
    fn fclose(file: *mut CFile) -> c_int;
}

#[link(name = "pcap")]
unsafe extern "C" {
    fn pcap_fopen_offline(file: *mut CFile, errbuf: *mut c_char) -> *mut PcapHandle;
    fn pcap_offline_filter(
        program: *const RawProgram,
        header: *const PacketHeader,
        data: *const u8,
    ) -> c_int;
}

/// A pcap file header with no packets: what libpcap is handed to compile as for a file.
fn savefile_header(linktype: u32, big_endian: bool) -> Vec<u8> {
    let mut header = Vec::with_capacity(24);
    let mut field = |little_endian: &[u8]| {
        let start = header.len();
        header.extend_from_slice(little_endian);
        if big_endian {
            header[start..].reverse();
        }
    };
    field(&PCAP_MAGIC.to_le_bytes());
    field(&2u16.to_le_bytes()); // version 2.4
    field(&4u16.to_le_bytes());
    field(&0u32.to_le_bytes()); // time zone
    field(&0u32.to_le_bytes()); // timestamp accuracy
    field(&SNAPLEN.to_le_bytes());
    field(&linktype.to_le_bytes());
    header
}

/// A filter program compiled by libpcap; freed when dropped.
struct Program(RawProgram);

// SAFETY: the program's instructions are memory pcap_compile allocated and only this value
// frees; they refer to no handle or thread, and the filter machine only reads them, so the
// program may move to another thread (the Reader keeps its filter across batches, read with
// the Python lock let go).
unsafe impl Send for Program {}

impl Program {
    /// libpcap's compiler on `expression` as tcpdump runs it on a capture of `linktype` (the
    /// file's value; libpcap maps it to its own) whose bytes are `big_endian` or not; its
    /// message if it refuses the expression.
    fn compile(expression: &CStr, linktype: u32, big_endian: bool) -> Result<Program, String> {
        let mut header = savefile_header(linktype, big_endian);
        // SAFETY: `header` outlives the stream, which pcap_close (or fclose) closes below;
        // the mode is a NUL-terminated string.
        let file = unsafe { fmemopen(header.as_mut_ptr().cast(), header.len(), c"rb".as_ptr()) };
        if file.is_null() {
            return Err("could not hand libpcap the capture's header".into());
        }
        let mut errbuf = [0 as c_char; ERRBUF_BYTES];
        // SAFETY: `file` is an open stream, `errbuf` has libpcap's PCAP_ERRBUF_SIZE; on
        // success the handle owns the stream.
        let handle = unsafe { pcap_fopen_offline(file, errbuf.as_mut_ptr()) };
        if handle.is_null() {
            // SAFETY: libpcap failed, so the stream is still ours to close; it wrote a
            // NUL-terminated message into `errbuf`.
            unsafe { fclose(file) };
            return Err(unsafe { CStr::from_ptr(errbuf.as_ptr()) }
                .to_string_lossy()
                .into_owned());
        }
        let mut raw = RawProgram {
            bf_len: 0,
            bf_insns: ptr::null_mut(),
        };
        // SAFETY: the handle is live until pcap_close below, `raw` is a bpf_program for libpcap
        // to fill and `expression` a NUL-terminated string that outlives the call.
        let status =
            unsafe { pcap_compile(handle, &mut raw, expression.as_ptr(), OPTIMIZE, NETMASK) };
        let outcome = if status == 0 {
            Ok(Program(raw))
        } else {
            // SAFETY: after a failure pcap_geterr gives the handle's NUL-terminated message,
            // valid until the handle is closed; it is copied out before that.
            Err(unsafe { CStr::from_ptr(pcap_geterr(handle)) }
                .to_string_lossy()
                .into_owned())
        };
        // SAFETY: the handle came from pcap_fopen_offline and is closed once (its stream with
        // it); the program does not refer to it (pcap_compile allocates its instructions).
        unsafe { pcap_close(handle) };
        outcome
    }

    /// Whether the program accepts a packet of `data` (as captured) that was `wire_bytes` long.
    fn accepts(&self, data: &[u8], wire_bytes: u32) -> bool {
        let Ok(caplen) = u32::try_from(data.len()) else {
            return false;
        };
        let header = PacketHeader {
            ts: Timeval {
                tv_sec: 0,
                tv_usec: 0,
            },
            caplen,
            len: wire_bytes.max(caplen),
        };
        // SAFETY: the program is a compiled one not yet freed; libpcap's filter machine reads
        // no more than `caplen` bytes of `data` (a load past it rejects the packet).
        unsafe { pcap_offline_filter(&self.0, &header, data.as_ptr()) != 0 }
    }
}

impl Drop for Program {
    fn drop(&mut self) {
        // SAFETY: the program was filled by a successful pcap_compile and is freed once.
        unsafe { pcap_freecode(&mut self.0) };
    }
}

/// Why a filter cannot be applied: libpcap's message.
#[derive(Debug, PartialEq, Eq)]
pub struct FilterError(pub String);

/// A BPF expression and its programs, one per link type met so far, for a capture of one
/// byte order.
pub struct Filter {
    expression: CString,
    big_endian: bool,
    /// None for a link type libpcap cannot filter by this expression (a later pcapng
    /// interface's): its packets are not accepted, as the filter cannot say they match.
    programs: HashMap<u32, Option<Program>>,
}

impl Filter {
    /// The filter for a capture whose bytes are `big_endian` or not (as its file header says:
    /// `CaptureReader::big_endian`).
    pub fn new(expression: &str, big_endian: bool) -> Result<Filter, FilterError> {
        let expression = CString::new(expression)
            .map_err(|_| FilterError("the expression holds a NUL character".into()))?;
        Ok(Filter {
            expression,
            big_endian,
            programs: HashMap::new(),
        })
    }

    /// Whether the filter accepts a packet of `linktype` (captured as `data`, `wire_bytes`
    /// long on the wire). The expression must compile for the first link type met, the
    /// file's own, as tcpdump requires; a later one it does not compile for accepts nothing.
    pub fn accepts(
        &mut self,
        linktype: u32,
        data: &[u8],
        wire_bytes: u32,
    ) -> Result<bool, FilterError> {
        if !self.programs.contains_key(&linktype) {
            let first = self.programs.is_empty();
            let program = match Program::compile(&self.expression, linktype, self.big_endian) {
                Ok(program) => Some(program),
                Err(message) if first => return Err(FilterError(message)),
                Err(_) => None,
            };
            self.programs.insert(linktype, program);
        }
        Ok(self.programs[&linktype]
            .as_ref()
            .is_some_and(|program| program.accepts(data, wire_bytes)))
    }

    /// When no packet was met: the expression checked as libpcap's compiler reads it for
    /// Ethernet, so that a malformed one is refused even on a capture without packets.
    pub fn check_unused(&self) -> Result<(), FilterError> {
        if self.programs.is_empty() {
            Program::compile(&self.expression, LINKTYPE_ETHERNET, self.big_endian)
                .map_err(FilterError)?;
        }
        Ok(())
    }
}

/// Decode `record` into `columns` with the filter's verdict on it; a filter that does not
/// compile for the file's link type pushes nothing.
pub fn judge(
    filter: &mut Filter,
    record: &Record<'_>,
    columns: &mut Columns,
    decoder: &mut Decoder,
) -> Result<(), FilterError> {
    let accepted = filter.accepts(record.linktype, record.data, record.wire_bytes)?;
    columns.push_judged(record, accepted, decoder);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An Ethernet frame: IPv4 10.77.0.1 -> 10.77.0.2, TCP 40000 -> 9000 with SYN set.
    fn syn_frame() -> Vec<u8> {
        let mut frame = vec![0u8; 12];
        frame.extend([0x08, 0x00]);
        frame.extend([0x45, 0, 0, 40, 0, 0, 0, 0, 64, 6, 0, 0]);
        frame.extend([10, 77, 0, 1, 10, 77, 0, 2]);
        frame.extend(40000u16.to_be_bytes());
        frame.extend(9000u16.to_be_bytes());
        frame.extend([0u8; 8]);
        frame.extend([0x50, 0x02, 0xff, 0xff, 0, 0, 0, 0]);
        frame
    }

    #[test]
    fn accepts_by_libpcaps_program() {
        let frame = syn_frame();
        for (expression, expected) in [
            ("tcp port 9000", true),
            ("tcp port 9001", false),
            ("src host 10.77.0.1", true),
            ("src host 10.77.0.2", false),
            ("tcp[tcpflags] & tcp-syn != 0", true),
            ("udp", false),
            ("vlan and tcp", false),
        ] {
            let mut filter = Filter::new(expression, false).unwrap();
            assert_eq!(
                filter.accepts(1, &frame, frame.len() as u32),
                Ok(expected),
                "{expression}"
            );
        }
    }

    #[test]
    fn length_is_the_length_on_the_wire() {
        let frame = syn_frame();
        let mut filter = Filter::new("greater 1000", false).unwrap();
        assert_eq!(filter.accepts(1, &frame, frame.len() as u32), Ok(false));
        assert_eq!(filter.accepts(1, &frame, 1500), Ok(true));
    }

    #[test]
    fn a_bad_expression_gives_libpcaps_message() {
        let mut filter = Filter::new("tcp port banana", false).unwrap();
        let refused = Err(FilterError("unknown port 'banana'".into()));
        assert_eq!(filter.accepts(1, &syn_frame(), 54), refused);
        assert_eq!(filter.check_unused(), refused.map(|_: bool| ()));
    }

    #[test]
    fn a_later_link_type_it_cannot_filter_accepts_nothing() {
        let mut filter = Filter::new("ether host 00:00:00:00:00:00", false).unwrap();
        assert_eq!(filter.accepts(1, &syn_frame(), 54), Ok(true));
        // Raw IP has no link-layer addresses: libpcap refuses `ether host` for it.
        assert_eq!(filter.accepts(12, &syn_frame()[14..], 40), Ok(false));
    }

    /// A BSD loopback frame: the address family as the capturing host wrote it, then the
    /// Ethernet frame's IPv4 packet.
    fn loopback_frame(family: [u8; 4]) -> Vec<u8> {
        let mut frame = family.to_vec();
        frame.extend(&syn_frame()[14..]);
        frame
    }

    #[test]
    fn loopback_families_as_libpcap_reads_them_in_a_file() {
        // macOS's AF_INET6 (30), written little-endian: a file's `ip6` tests the BSDs' three
        // values (a dead capture's only Linux's 10). Only the family is IPv6 here, so `ip6`
        // takes the frame and `ip` does not.
        let darwin_ip6 = loopback_frame([30, 0, 0, 0]);
        let mut ip6 = Filter::new("ip6", false).unwrap();
        assert_eq!(ip6.accepts(0, &darwin_ip6, 44), Ok(true));
        // AF_INET written by a big-endian host is read as such in a big-endian file only.
        let big_endian_ip = loopback_frame([0, 0, 0, 2]);
        let mut ip_big = Filter::new("ip", true).unwrap();
        let mut ip_little = Filter::new("ip", false).unwrap();
        assert_eq!(ip_big.accepts(0, &big_endian_ip, 44), Ok(true));
        assert_eq!(ip_little.accepts(0, &big_endian_ip, 44), Ok(false));
    }

    #[test]
    fn ip_broadcast_compiles_as_tcpdump_reading_a_file() {
        let mut filter = Filter::new("ip broadcast", false).unwrap();
        assert_eq!(filter.accepts(1, &syn_frame(), 54), Ok(false));
    }
}
