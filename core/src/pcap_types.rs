//! libpcap's C types, constants and the calls both of its users here make: the BPF filter
//! (`bpf`) and the live capture (`live`). Laid out as libpcap's headers lay them out on
//! Linux; each is only read or written through libpcap's own calls.

use std::ffi::{c_char, c_int, c_long, c_uint, c_void};

/// libpcap's PCAP_ERRBUF_SIZE.
pub const ERRBUF_BYTES: usize = 256;
/// tcpdump optimizes unless told `-O`.
pub const OPTIMIZE: c_int = 1;

/// libpcap's `pcap_t`, only ever handled by pointer.
#[repr(C)]
pub struct PcapHandle {
    _opaque: [u8; 0],
}

/// libpcap's `struct bpf_program`.
#[repr(C)]
pub struct RawProgram {
    pub bf_len: c_uint,
    pub bf_insns: *mut c_void,
}

/// `struct timeval` as glibc lays it out.
#[repr(C)]
pub struct Timeval {
    pub tv_sec: c_long,
    pub tv_usec: c_long,
}

/// libpcap's `struct pcap_pkthdr`.
#[repr(C)]
pub struct PacketHeader {
    pub ts: Timeval,
    pub caplen: u32,
    pub len: u32,
}

#[link(name = "pcap")]
unsafe extern "C" {
    pub fn pcap_compile(
        handle: *mut PcapHandle,
        program: *mut RawProgram,
        expression: *const c_char,
        optimize: c_int,
        netmask: u32,
    ) -> c_int;
    pub fn pcap_geterr(handle: *mut PcapHandle) -> *mut c_char;
    pub fn pcap_close(handle: *mut PcapHandle);
    pub fn pcap_freecode(program: *mut RawProgram);
}
