//! Live capture with libpcap, as tcpdump -w does it: every packet an interface hands over is
//! written to a pcap file as it comes (libpcap writes the file, so its format is tcpdump's),
//! and libpcap's statistics say how many the kernel or the interface dropped.
//!
//! Each packet also goes, as it comes, through the same one pass a file's packets go through
//! (`analysis::Pass`): the view takes the connections finished so far, and a look at the live
//! ones as if they ended now (`finished`, `peek`). The report at the end reads the file
//! written, as `analyze` would. libpcap is called directly, as in `bpf`, and every unsafe
//! block says why it is sound.

use crate::pcap_types::{
    ERRBUF_BYTES, OPTIMIZE, PacketHeader, PcapHandle, RawProgram, pcap_close, pcap_compile,
    pcap_freecode, pcap_geterr,
};
use std::ffi::{CStr, CString, c_char, c_int, c_uint, c_ulong};
use std::ptr::{self, NonNull};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use pyo3::create_exception;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyDict;

use crate::analysis::{LiveSnapshot, Pass};
use crate::bpf::FilterError;
use crate::events::Load;
use crate::reader::filter_error;

create_exception!(
    _core,
    LiveCaptureError,
    PyValueError,
    "An interface libpcap cannot capture on (no such interface, no permission, down), or a \
     capture file it cannot write; the message says which in one line."
);

/// libpcap's read timeout: the kernel hands packets over a block at a time, a block once full
/// or this long after it was opened. Not immediate mode, as tcpdump's default: that cuts the
/// buffer into frames of one snapshot each (up to the interface's largest packet: 64 KB on
/// loopback, 31 of them in the 2 MB default), and a busy machine lost most of a burst (as
/// tcpdump --immediate-mode did beside it: 1,817 of 3,308 packets) where blocks, which hold
/// packets at their own size, lost none. The handle is non-blocking and waited on with
/// poll(2) up to each call's deadline; the caller takes the last block by reading on for
/// about twice this once it is done.
const READ_TIMEOUT_MS: c_int = 100;
/// The kernel's capture buffer (tcpdump's -B): 16 times libpcap's default, for bursts of
/// large packets (segmentation offload hands over up to 64 KB at once).
const BUFFER_BYTES: c_int = 32 << 20;
/// poll(2)'s POLLIN.
const POLLIN: i16 = 0x1;
/// tcpdump's netmask when the interface has no IPv4 address to ask (`ip broadcast` then
/// matches only 255.255.255.255).
const NETMASK_UNKNOWN: u32 = 0;
const PCAP_ERROR: c_int = -1;
const PCAP_ERROR_NO_SUCH_DEVICE: c_int = -5;
const PCAP_ERROR_PERM_DENIED: c_int = -8;
const PCAP_ERROR_IFACE_NOT_UP: c_int = -9;
const PCAP_ERROR_PROMISC_PERM_DENIED: c_int = -11;
/// What a capture needs on Linux when not run as root.
const PERMISSION_HINT: &str = "run as root, or give the Python binary CAP_NET_RAW and \
     CAP_NET_ADMIN, e.g. setcap cap_net_raw,cap_net_admin=eip $(readlink -f $(which python3))";

/// libpcap's `pcap_dumper_t`, only ever handled by pointer.
#[repr(C)]
struct PcapDumper {
    _opaque: [u8; 0],
}

/// libpcap's `struct pcap_stat` (Linux's: no Windows fields).
#[repr(C)]
#[derive(Default)]
struct RawStats {
    ps_recv: c_uint,
    ps_drop: c_uint,
    ps_ifdrop: c_uint,
}

/// poll(2)'s `struct pollfd`.
#[repr(C)]
struct PollFd {
    fd: c_int,
    events: i16,
    revents: i16,
}

unsafe extern "C" {
    fn poll(fds: *mut PollFd, count: c_ulong, timeout_ms: c_int) -> c_int;
}

#[link(name = "pcap")]
unsafe extern "C" {
    fn pcap_create(source: *const c_char, errbuf: *mut c_char) -> *mut PcapHandle;
    fn pcap_set_snaplen(handle: *mut PcapHandle, snaplen: c_int) -> c_int;
    fn pcap_set_promisc(handle: *mut PcapHandle, promisc: c_int) -> c_int;
    fn pcap_set_timeout(handle: *mut PcapHandle, timeout_ms: c_int) -> c_int;
    fn pcap_set_buffer_size(handle: *mut PcapHandle, bytes: c_int) -> c_int;
    fn pcap_activate(handle: *mut PcapHandle) -> c_int;
    fn pcap_setnonblock(handle: *mut PcapHandle, nonblock: c_int, errbuf: *mut c_char) -> c_int;
    fn pcap_get_selectable_fd(handle: *mut PcapHandle) -> c_int;
    fn pcap_statustostr(status: c_int) -> *const c_char;
    fn pcap_lookupnet(
        device: *const c_char,
        net: *mut u32,
        mask: *mut u32,
        errbuf: *mut c_char,
    ) -> c_int;
    fn pcap_setfilter(handle: *mut PcapHandle, program: *mut RawProgram) -> c_int;
    fn pcap_datalink(handle: *mut PcapHandle) -> c_int;
    fn pcap_snapshot(handle: *mut PcapHandle) -> c_int;
    fn pcap_dump_open(handle: *mut PcapHandle, path: *const c_char) -> *mut PcapDumper;
    fn pcap_dump(user: *mut u8, header: *const PacketHeader, data: *const u8);
    fn pcap_dump_flush(dumper: *mut PcapDumper) -> c_int;
    fn pcap_dump_close(dumper: *mut PcapDumper);
    fn pcap_next_ex(
        handle: *mut PcapHandle,
        header: *mut *mut PacketHeader,
        data: *mut *const u8,
    ) -> c_int;
    fn pcap_stats(handle: *mut PcapHandle, stats: *mut RawStats) -> c_int;
}

/// Why the capture cannot start or go on: a sentence for the user, or a filter libpcap refuses.
enum LiveFailure {
    Capture(String),
    Filter(FilterError),
}

/// A C string libpcap handed over, copied.
///
/// # Safety
/// `text` must be null or point to a NUL-terminated string valid for this call.
unsafe fn copied(text: *const c_char) -> String {
    if text.is_null() {
        return String::new();
    }
    // SAFETY: the caller promises a NUL-terminated string that outlives the call.
    unsafe { CStr::from_ptr(text) }
        .to_string_lossy()
        .into_owned()
}

/// An activated capture on one interface and the file its packets go to; both closed when
/// dropped (the file flushed first).
struct Session {
    handle: NonNull<PcapHandle>,
    dumper: NonNull<PcapDumper>,
    /// The handle's descriptor, to wait on with poll(2).
    fd: c_int,
    packets: u64,
    bytes: u64,
    /// The handle's link type, as the file's records are decoded with it.
    linktype: u32,
    /// The one pass the packets go through as they come, while its live connections hold no
    /// more than `live_packets_limit` packets (None: no pass, or stopped at that limit).
    pass: Option<Pass>,
    live_packets_limit: usize,
}

// SAFETY: a libpcap handle and its dumper belong to no thread: libpcap only asks that one
// thread at a time use them. A Session is only reached through the LiveCapture's Mutex (and
// moved to the thread that runs with the Python lock let go while that Mutex is held), so
// no two threads ever use it at once.
unsafe impl Send for Session {}

impl Session {
    /// The handle's last error message, copied before the handle is used again.
    fn error(&self) -> String {
        // SAFETY: the handle is live until the Session is dropped; pcap_geterr gives its
        // NUL-terminated message buffer, copied out at once.
        unsafe { copied(pcap_geterr(self.handle.as_ptr())) }
    }

    /// Take packets for up to `limit` or until `max_packets` more were written, each written
    /// to the file as it comes; the file is flushed before this returns.
    fn capture(&mut self, limit: Duration, max_packets: u64) -> Result<(), String> {
        let deadline = Instant::now() + limit;
        let mut taken = 0u64;
        while taken < max_packets {
            let mut header: *mut PacketHeader = ptr::null_mut();
            let mut data: *const u8 = ptr::null();
            // SAFETY: the handle is live, activated and non-blocking; libpcap fills the two
            // pointers with its own buffers, valid until the next call on this handle.
            let status = unsafe { pcap_next_ex(self.handle.as_ptr(), &mut header, &mut data) };
            match status {
                1 => {
                    // SAFETY: on 1 libpcap set `header` to a valid packet header and `data`
                    // to its `caplen` captured bytes; pcap_dump reads them and writes to the
                    // dumper, which is the `user` argument libpcap's pcap_dump expects. The
                    // slice of those bytes is read by the pass below, before the next call on
                    // this handle reuses libpcap's buffer.
                    let (wire_bytes, time_us, record) = unsafe {
                        pcap_dump(self.dumper.as_ptr().cast(), header, data);
                        let header = &*header;
                        #[allow(clippy::useless_conversion)] // c_long is 32-bit elsewhere
                        let time_us =
                            i64::from(header.ts.tv_sec) * 1_000_000 + i64::from(header.ts.tv_usec);
                        let record = std::slice::from_raw_parts(data, header.caplen as usize);
                        (header.len, time_us, record)
                    };
                    taken += 1;
                    self.packets += 1;
                    self.bytes += u64::from(wire_bytes);
                    self.take_into_pass((self.linktype, time_us, record));
                }
                0 => {
                    let left = deadline.saturating_duration_since(Instant::now());
                    if left.is_zero() {
                        break;
                    }
                    self.wait(left);
                }
                _ => return Err(self.error()),
            }
            if status == 1 && Instant::now() >= deadline {
                break;
            }
        }
        // SAFETY: the dumper is open until the Session is dropped.
        if unsafe { pcap_dump_flush(self.dumper.as_ptr()) } != 0 {
            return Err("cannot write the capture file (disk full?)".into());
        }
        Ok(())
    }

    /// Take a captured record into the pass, which stops once its live connections hold more
    /// packets than allowed, even after letting go what they could.
    fn take_into_pass(&mut self, record: (u32, i64, &[u8])) {
        let Some(pass) = self.pass.as_mut() else {
            return;
        };
        pass.take_record(record, 0, true);
        if !pass.fits(self.live_packets_limit, Load::WithEvents) {
            self.pass = None;
        }
    }

    /// Wait up to `left` for packets to read (less when a signal comes: the caller goes on
    /// to its deadline, and Python sees the signal when the call returns).
    fn wait(&self, left: Duration) {
        let timeout_ms = c_int::try_from(left.as_millis().max(1)).unwrap_or(c_int::MAX);
        let mut ready = PollFd {
            fd: self.fd,
            events: POLLIN,
            revents: 0,
        };
        // SAFETY: `ready` is one pollfd for poll to fill; the descriptor is the handle's own,
        // open while the Session lives.
        unsafe { poll(&mut ready, 1, timeout_ms) };
    }

    /// libpcap's statistics so far: packets received, dropped by the kernel, dropped by the
    /// interface (zero where the platform does not count them).
    fn stats(&self) -> RawStats {
        let mut stats = RawStats::default();
        // SAFETY: the handle is live and activated; `stats` is a pcap_stat for it to fill.
        if unsafe { pcap_stats(self.handle.as_ptr(), &mut stats) } != 0 {
            return RawStats::default();
        }
        stats
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        // SAFETY: both were opened by `open_session` and are closed once, the dumper (which
        // flushes and closes the file) before the handle it was opened on.
        unsafe {
            pcap_dump_close(self.dumper.as_ptr());
            pcap_close(self.handle.as_ptr());
        }
    }
}

/// A created but not yet (or not successfully) activated handle; closed when dropped unless
/// taken over by a Session.
struct Created(NonNull<PcapHandle>);

impl Created {
    fn error(&self) -> String {
        // SAFETY: the handle is live; its message buffer is copied out at once.
        unsafe { copied(pcap_geterr(self.0.as_ptr())) }
    }
}

impl Drop for Created {
    fn drop(&mut self) {
        // SAFETY: the handle came from pcap_create and is closed once, here.
        unsafe { pcap_close(self.0.as_ptr()) };
    }
}

/// What `pcap_activate`'s status means for the user, in one sentence.
fn activation_failure(interface: &str, status: c_int, message: String) -> String {
    match status {
        PCAP_ERROR_NO_SUCH_DEVICE => {
            format!("no such interface '{interface}' (ip link lists the interfaces here)")
        }
        PCAP_ERROR_PERM_DENIED | PCAP_ERROR_PROMISC_PERM_DENIED => {
            format!("no permission to capture on '{interface}': {PERMISSION_HINT}")
        }
        PCAP_ERROR_IFACE_NOT_UP => format!("interface '{interface}' is not up"),
        _ => {
            let message = if message.is_empty() {
                // SAFETY: pcap_statustostr returns a static NUL-terminated string.
                unsafe { copied(pcap_statustostr(status)) }
            } else {
                message
            };
            format!("cannot capture on '{interface}': {message}")
        }
    }
}

/// Create and activate a capture on `interface` (not promiscuous, packets handed over at
/// once), with `filter` compiled as tcpdump compiles it for the interface, and open
/// `write_path` for its packets.
fn open_session(
    interface: &CStr,
    snaplen: c_int,
    filter: Option<&CStr>,
    write_path: &CStr,
) -> Result<(Session, Vec<String>), LiveFailure> {
    let name = interface.to_string_lossy();
    let mut errbuf = [0 as c_char; ERRBUF_BYTES];
    // SAFETY: `interface` is NUL-terminated and `errbuf` has PCAP_ERRBUF_SIZE bytes.
    let raw = unsafe { pcap_create(interface.as_ptr(), errbuf.as_mut_ptr()) };
    let Some(created) = NonNull::new(raw).map(Created) else {
        // SAFETY: libpcap wrote a NUL-terminated message into `errbuf`.
        let message = unsafe { copied(errbuf.as_ptr()) };
        return Err(LiveFailure::Capture(format!(
            "cannot capture on '{name}': {message}"
        )));
    };
    let handle = created.0.as_ptr();
    // SAFETY: the handle is created and not yet activated, as these setters require; they
    // only fail on an activated handle.
    unsafe {
        pcap_set_snaplen(handle, snaplen);
        pcap_set_promisc(handle, 0);
        pcap_set_timeout(handle, READ_TIMEOUT_MS);
        pcap_set_buffer_size(handle, BUFFER_BYTES);
    }
    // SAFETY: the handle is created and configured.
    let status = unsafe { pcap_activate(handle) };
    let mut warnings = Vec::new();
    if status < 0 {
        let message = if status == PCAP_ERROR {
            created.error()
        } else {
            String::new()
        };
        return Err(LiveFailure::Capture(activation_failure(
            &name, status, message,
        )));
    }
    if status > 0 {
        let mut message = created.error();
        if message.is_empty() {
            // SAFETY: pcap_statustostr returns a static NUL-terminated string.
            message = unsafe { copied(pcap_statustostr(status)) };
        }
        warnings.push(format!("libpcap on {name}: {message}"));
    }
    if let Some(expression) = filter {
        set_filter(&created, interface, expression)?;
    }
    // SAFETY: the handle is activated; `errbuf` has PCAP_ERRBUF_SIZE bytes. On Linux a live
    // handle always has a selectable descriptor.
    let fd = unsafe {
        if pcap_setnonblock(handle, 1, errbuf.as_mut_ptr()) != 0 {
            return Err(LiveFailure::Capture(format!(
                "cannot capture on '{name}': {}",
                copied(errbuf.as_ptr())
            )));
        }
        pcap_get_selectable_fd(handle)
    };
    if fd < 0 {
        return Err(LiveFailure::Capture(format!(
            "cannot capture on '{name}': libpcap gives no descriptor to wait on"
        )));
    }
    // SAFETY: the handle is activated; `write_path` is NUL-terminated.
    let dumper = unsafe { pcap_dump_open(handle, write_path.as_ptr()) };
    let Some(dumper) = NonNull::new(dumper) else {
        return Err(LiveFailure::Capture(format!(
            "cannot write the capture file: {}",
            created.error()
        )));
    };
    // The Session closes the handle from now on: `created` must not close it too.
    let handle = created.0;
    std::mem::forget(created);
    Ok((
        Session {
            handle,
            dumper,
            fd,
            packets: 0,
            bytes: 0,
            // SAFETY: the handle is activated.
            linktype: unsafe { pcap_datalink(handle.as_ptr()) } as u32,
            pass: None,
            live_packets_limit: 0,
        },
        warnings,
    ))
}

/// Compile `expression` for the activated handle with the interface's netmask (as tcpdump
/// does; none when it has no IPv4 address) and make it the handle's filter.
fn set_filter(created: &Created, interface: &CStr, expression: &CStr) -> Result<(), LiveFailure> {
    let handle = created.0.as_ptr();
    let (mut net, mut mask) = (0u32, 0u32);
    let mut errbuf = [0 as c_char; ERRBUF_BYTES];
    // SAFETY: `interface` is NUL-terminated, the two outputs are u32s and `errbuf` has
    // PCAP_ERRBUF_SIZE bytes.
    let looked_up =
        unsafe { pcap_lookupnet(interface.as_ptr(), &mut net, &mut mask, errbuf.as_mut_ptr()) };
    let netmask = if looked_up == 0 {
        mask
    } else {
        NETMASK_UNKNOWN
    };
    let mut program = RawProgram {
        bf_len: 0,
        bf_insns: ptr::null_mut(),
    };
    // SAFETY: the handle is activated (so libpcap knows its link type), `program` is a
    // bpf_program for it to fill and `expression` outlives the call.
    let compiled =
        unsafe { pcap_compile(handle, &mut program, expression.as_ptr(), OPTIMIZE, netmask) };
    if compiled != 0 {
        return Err(LiveFailure::Filter(FilterError(created.error())));
    }
    // SAFETY: `program` was filled by pcap_compile; pcap_setfilter copies it into the handle
    // (or the kernel), so it is freed once, right after, whatever the outcome.
    let set = unsafe {
        let set = pcap_setfilter(handle, &mut program);
        pcap_freecode(&mut program);
        set
    };
    if set != 0 {
        return Err(LiveFailure::Filter(FilterError(created.error())));
    }
    Ok(())
}

/// A C string of `text`, or a `LiveCaptureError` naming `what` when it holds a NUL.
fn c_string(text: &str, what: &str) -> PyResult<CString> {
    CString::new(text)
        .map_err(|_| LiveCaptureError::new_err(format!("the {what} holds a NUL character")))
}

/// A live capture on one interface, its packets written to a pcap file as they come.
///
/// `LiveCapture(interface, snaplen, bpf_filter, write_path, live_packets_limit=None)` starts
/// it (not promiscuous) or raises `LiveCaptureError` (no such interface, no permission, the
/// interface down, the file not writable) or `FilterError` ("invalid filter 'EXPRESSION': "
/// and libpcap's message). With `live_packets_limit`, the packets also go through the one
/// pass as they come, until its live connections hold more than that (`looking`, `finished`,
/// `peek`). `capture(max_ms, max_packets)` takes packets for a while with the Python lock let
/// go and returns the counts so far (see `counts`); `close()` ends the capture, the file
/// complete, and returns the final counts.
#[pyclass(module = "nagledetect._core")]
pub struct LiveCapture {
    interface: String,
    linktype: i32,
    snaplen: i32,
    warnings: Vec<String>,
    /// None once closed.
    session: Mutex<Option<Session>>,
    /// The counts when it was closed.
    final_counts: Mutex<Option<Counts>>,
}

/// Packets written and libpcap's statistics.
#[derive(Clone, Copy, Default)]
struct Counts {
    packets: u64,
    bytes: u64,
    received: u64,
    dropped: u64,
    interface_dropped: u64,
}

impl Counts {
    fn of(session: &Session) -> Counts {
        let stats = session.stats();
        Counts {
            packets: session.packets,
            bytes: session.bytes,
            received: u64::from(stats.ps_recv),
            dropped: u64::from(stats.ps_drop),
            interface_dropped: u64::from(stats.ps_ifdrop),
        }
    }

    fn into_python(self, py: Python<'_>) -> PyResult<Bound<'_, PyDict>> {
        let counts = PyDict::new(py);
        counts.set_item("packets", self.packets)?;
        counts.set_item("bytes", self.bytes)?;
        counts.set_item("received", self.received)?;
        counts.set_item("dropped", self.dropped)?;
        counts.set_item("interface_dropped", self.interface_dropped)?;
        Ok(counts)
    }
}

#[pymethods]
impl LiveCapture {
    #[new]
    #[pyo3(signature = (interface, snaplen, bpf_filter, write_path, live_packets_limit=None))]
    fn new(
        py: Python<'_>,
        interface: &str,
        snaplen: i32,
        bpf_filter: Option<&str>,
        write_path: &str,
        live_packets_limit: Option<usize>,
    ) -> PyResult<LiveCapture> {
        if snaplen < 1 {
            return Err(LiveCaptureError::new_err(
                "the snapshot length must be at least 1",
            ));
        }
        let c_interface = c_string(interface, "interface name")?;
        let c_filter = bpf_filter
            .map(|expression| c_string(expression, "filter"))
            .transpose()?;
        let c_path = c_string(write_path, "file name")?;
        let opened =
            py.detach(|| open_session(&c_interface, snaplen, c_filter.as_deref(), &c_path));
        let (mut session, warnings) = match opened {
            Ok(opened) => opened,
            Err(LiveFailure::Capture(message)) => return Err(LiveCaptureError::new_err(message)),
            Err(LiveFailure::Filter(error)) => {
                return Err(filter_error(py, bpf_filter.unwrap_or_default(), error));
            }
        };
        if let Some(limit) = live_packets_limit {
            session.pass = Some(Pass::without_packet_table());
            session.live_packets_limit = limit;
        }
        // SAFETY: the session's handle is activated and live.
        let (linktype, snaplen) = unsafe {
            (
                pcap_datalink(session.handle.as_ptr()),
                pcap_snapshot(session.handle.as_ptr()),
            )
        };
        Ok(LiveCapture {
            interface: interface.to_string(),
            linktype,
            snaplen,
            warnings,
            session: Mutex::new(Some(session)),
            final_counts: Mutex::new(None),
        })
    }

    /// Take packets for up to `max_ms` milliseconds or `max_packets` more packets (no limit
    /// when None), with the Python lock let go; the file is flushed before it returns, so the
    /// packets so far can be read from it. Returns the counts so far (see `counts`).
    #[pyo3(signature = (max_ms, max_packets=None))]
    fn capture<'py>(
        &self,
        py: Python<'py>,
        max_ms: u64,
        max_packets: Option<u64>,
    ) -> PyResult<Bound<'py, PyDict>> {
        let outcome = py.detach(|| {
            let mut slot = self.session.lock().unwrap_or_else(|p| p.into_inner());
            let Some(session) = slot.as_mut() else {
                return Err("the capture is closed".to_string());
            };
            let limit = Duration::from_millis(max_ms);
            session
                .capture(limit, max_packets.unwrap_or(u64::MAX))
                .map_err(|message| format!("capture on '{}' failed: {message}", self.interface))?;
            Ok(Counts::of(session))
        });
        match outcome {
            Ok(counts) => counts.into_python(py),
            Err(message) => Err(LiveCaptureError::new_err(message)),
        }
    }

    /// The connections finished since this was last asked (a dict as `_core.FlowBatches`
    /// gives a batch), or None where none has (or without a pass); the packets analysed as
    /// they were captured.
    fn finished<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyDict>>> {
        let batch = py.detach(|| {
            let mut slot = self.session.lock().unwrap_or_else(|p| p.into_inner());
            slot.as_mut()
                .and_then(|session| session.pass.as_mut())
                .map(Pass::take_finished)
        });
        match batch {
            Some(batch) if !batch.is_empty() => batch.into_python(py).map(Some),
            _ => Ok(None),
        }
    }

    /// The live connections as if they ended now (a dict as `finished` gives), their state
    /// left as it is; None once the capture is closed, or without a pass. The capture waits
    /// only while the live connections are copied; they are finished after.
    fn peek<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyDict>>> {
        let batch = py.detach(|| {
            let snapshot = {
                let slot = self.session.lock().unwrap_or_else(|p| p.into_inner());
                slot.as_ref()
                    .and_then(|session| session.pass.as_ref())
                    .map(Pass::snapshot)
            };
            snapshot.map(LiveSnapshot::finish)
        });
        batch.map(|batch| batch.into_python(py)).transpose()
    }

    /// What the pass's live connections hold, counted in packets (each connection as 10
    /// too); 0 without a pass.
    #[getter]
    fn live_load(&self) -> usize {
        let slot = self.session.lock().unwrap_or_else(|p| p.into_inner());
        slot.as_ref()
            .and_then(|session| session.pass.as_ref())
            .map_or(0, |pass| pass.live_load(Load::WithEvents))
    }

    /// Whether the packets go through the pass: asked for, and its live connections have
    /// never held more than the limit.
    #[getter]
    fn looking(&self) -> bool {
        let slot = self.session.lock().unwrap_or_else(|p| p.into_inner());
        slot.as_ref().is_some_and(|session| session.pass.is_some())
    }

    /// The counts so far: `packets` written and their `bytes` on the wire, and libpcap's
    /// statistics: `received`, `dropped` (by the kernel: its buffer was full) and
    /// `interface_dropped` (by the interface or its driver, where the platform says).
    fn counts<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let slot = self.session.lock().unwrap_or_else(|p| p.into_inner());
        let counts = match slot.as_ref() {
            Some(session) => Counts::of(session),
            None => self
                .final_counts
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .unwrap_or_default(),
        };
        counts.into_python(py)
    }

    /// End the capture (the file flushed and closed) and return its final counts; closing
    /// again returns them again.
    fn close<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let mut slot = self.session.lock().unwrap_or_else(|p| p.into_inner());
        let mut kept = self.final_counts.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(session) = slot.take() {
            *kept = Some(Counts::of(&session));
        }
        kept.unwrap_or_default().into_python(py)
    }

    /// The link type of the packets (libpcap's DLT value).
    #[getter]
    fn linktype(&self) -> i32 {
        self.linktype
    }

    /// The snapshot length libpcap captures with (it may lower the one asked for).
    #[getter]
    fn snaplen(&self) -> i32 {
        self.snaplen
    }

    /// libpcap's warnings when it started the capture (a list of str).
    #[getter]
    fn warnings(&self) -> Vec<String> {
        self.warnings.clone()
    }
}

/// Add `LiveCapture` and `LiveCaptureError` to the module.
pub fn register(module: &Bound<'_, PyModule>) -> PyResult<()> {
    module.add_class::<LiveCapture>()?;
    module.add(
        "LiveCaptureError",
        module.py().get_type::<LiveCaptureError>(),
    )?;
    Ok(())
}
