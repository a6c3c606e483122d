//! The decoded packets as columns, handed to Python as numpy arrays (dtypes as the numpy
//! decoder's).

use numpy::IntoPyArray;
use pyo3::prelude::*;
use pyo3::types::PyDict;

use crate::capture::Record;
use crate::decode::{Decoder, NO_WINDOW_SCALE, TcpPacket};

/// One vector per column, one element per packet; TCP columns hold zeros (and no window
/// scale) for a packet that is skipped.
#[derive(Default)]
pub struct Columns {
    /// Packets of the capture before these (a batch's columns start after them).
    packets_before: u64,
    frame: Vec<u32>,
    time_us: Vec<i64>,
    linktype: Vec<u32>,
    skip: Vec<i64>,
    captured_bytes: Vec<u32>,
    /// The length on the wire each record states (pcap orig_len, pcapng original length).
    wire_bytes: Vec<u32>,
    ip_version: Vec<u8>,
    address_words: [Vec<u32>; 8],
    src_port: Vec<u16>,
    dst_port: Vec<u16>,
    seq_raw: Vec<u32>,
    ack_raw: Vec<u32>,
    flags: Vec<u16>,
    window_raw: Vec<u16>,
    tcp_header_bytes: Vec<u8>,
    payload_bytes: Vec<u32>,
    payload_from_capture: Vec<bool>,
    opt_mss: Vec<u16>,
    opt_window_scale: Vec<i8>,
    opt_sack_permitted: Vec<bool>,
    opt_has_timestamp: Vec<bool>,
    opt_timestamp_value: Vec<u32>,
    opt_timestamp_echo: Vec<u32>,
    opt_sack_block_count: Vec<u8>,
    sack_row: Vec<i64>,
    sack_left_raw: Vec<u32>,
    sack_right_raw: Vec<u32>,
    /// Whether the BPF filter accepts each packet; None without a filter.
    accepted: Option<Vec<bool>>,
}

const ADDRESS_WORD_NAMES: [&str; 8] = [
    "src_0", "src_1", "src_2", "src_3", "dst_0", "dst_1", "dst_2", "dst_3",
];

impl Columns {
    /// Columns for the packets after the first `packets_before` of the capture.
    pub fn after(packets_before: u64) -> Columns {
        Columns {
            packets_before,
            ..Columns::default()
        }
    }

    pub fn is_empty(&self) -> bool {
        self.frame.is_empty()
    }

    /// Decode a record with `decoder` (the capture's, which holds its IP fragments) into a row.
    pub fn push(&mut self, record: &Record<'_>, decoder: &mut Decoder) {
        let row = self.frame.len();
        // Frame numbers are Wireshark's: 1-based positions in the file.
        self.frame
            .push((self.packets_before + row as u64 + 1) as u32);
        self.time_us.push(record.time_us);
        self.linktype.push(record.linktype);
        self.captured_bytes.push(record.data.len() as u32);
        self.wire_bytes.push(record.wire_bytes);
        let (skip, packet) = match decoder.decode(record.linktype, record.data) {
            Ok(packet) => (crate::skips::KEPT, packet),
            Err(code) => (code, TcpPacket::default()),
        };
        self.skip.push(skip);
        self.push_tcp(&packet, skip == crate::skips::KEPT, row);
    }

    /// A packet with the filter's verdict on it: decoded whatever the verdict, as connection
    /// ids are Wireshark's tcp.stream of the unfiltered file.
    pub fn push_judged(&mut self, record: &Record<'_>, accepted: bool, decoder: &mut Decoder) {
        self.accepted.get_or_insert_with(Vec::new).push(accepted);
        self.push(record, decoder);
    }

    /// Marks the columns as filtered, so that they have an `accepted` column even when empty.
    pub fn filtered(&mut self) {
        self.accepted.get_or_insert_with(Vec::new);
    }

    /// How many packets the filter does not accept (0 without a filter).
    pub fn excluded_by_filter(&self) -> usize {
        self.accepted
            .as_ref()
            .map_or(0, |accepted| accepted.iter().filter(|a| !**a).count())
    }

    fn push_tcp(&mut self, packet: &TcpPacket, kept: bool, row: usize) {
        self.ip_version.push(packet.ip_version);
        for (word, column) in packet
            .src
            .iter()
            .chain(&packet.dst)
            .zip(&mut self.address_words)
        {
            column.push(*word);
        }
        self.src_port.push(packet.src_port);
        self.dst_port.push(packet.dst_port);
        self.seq_raw.push(packet.seq);
        self.ack_raw.push(packet.ack);
        self.flags.push(packet.flags);
        self.window_raw.push(packet.window);
        self.tcp_header_bytes.push(packet.tcp_header_bytes);
        self.payload_bytes.push(packet.payload_bytes);
        self.payload_from_capture.push(packet.payload_from_capture);
        let options = &packet.options;
        self.opt_mss.push(options.mss);
        // The numpy column is int8: a shift above 127 wraps as it does there.
        self.opt_window_scale
            .push(options.window_scale.map_or(NO_WINDOW_SCALE, |s| s as i8));
        self.opt_sack_permitted.push(options.sack_permitted);
        self.opt_has_timestamp.push(options.timestamp.is_some());
        let (value, echo) = options.timestamp.unwrap_or((0, 0));
        self.opt_timestamp_value.push(value);
        self.opt_timestamp_echo.push(echo);
        self.opt_sack_block_count.push(options.sack_block_count);
        if kept {
            for (left, right) in &options.sack_blocks[..usize::from(options.sack_block_count)] {
                self.sack_row.push(row as i64);
                self.sack_left_raw.push(*left);
                self.sack_right_raw.push(*right);
            }
        }
    }

    /// The packet columns and the SACK blocks (`row`: the packet's row in these columns), as
    /// dicts of numpy arrays.
    pub fn into_python(self, py: Python<'_>) -> PyResult<(Bound<'_, PyDict>, Bound<'_, PyDict>)> {
        let packets = PyDict::new(py);
        packets.set_item("frame", self.frame.into_pyarray(py))?;
        packets.set_item("time_us", self.time_us.into_pyarray(py))?;
        packets.set_item("linktype", self.linktype.into_pyarray(py))?;
        packets.set_item("skip", self.skip.into_pyarray(py))?;
        packets.set_item("captured_bytes", self.captured_bytes.into_pyarray(py))?;
        packets.set_item("wire_bytes", self.wire_bytes.into_pyarray(py))?;
        packets.set_item("ip_version", self.ip_version.into_pyarray(py))?;
        for (name, column) in ADDRESS_WORD_NAMES.iter().zip(self.address_words) {
            packets.set_item(name, column.into_pyarray(py))?;
        }
        packets.set_item("src_port", self.src_port.into_pyarray(py))?;
        packets.set_item("dst_port", self.dst_port.into_pyarray(py))?;
        packets.set_item("seq_raw", self.seq_raw.into_pyarray(py))?;
        packets.set_item("ack_raw", self.ack_raw.into_pyarray(py))?;
        packets.set_item("flags", self.flags.into_pyarray(py))?;
        packets.set_item("window_raw", self.window_raw.into_pyarray(py))?;
        packets.set_item("tcp_header_bytes", self.tcp_header_bytes.into_pyarray(py))?;
        packets.set_item("payload_bytes", self.payload_bytes.into_pyarray(py))?;
        packets.set_item(
            "payload_from_capture",
            self.payload_from_capture.into_pyarray(py),
        )?;
        packets.set_item("opt_mss", self.opt_mss.into_pyarray(py))?;
        packets.set_item("opt_window_scale", self.opt_window_scale.into_pyarray(py))?;
        packets.set_item(
            "opt_sack_permitted",
            self.opt_sack_permitted.into_pyarray(py),
        )?;
        packets.set_item("opt_has_timestamp", self.opt_has_timestamp.into_pyarray(py))?;
        packets.set_item(
            "opt_timestamp_value",
            self.opt_timestamp_value.into_pyarray(py),
        )?;
        packets.set_item(
            "opt_timestamp_echo",
            self.opt_timestamp_echo.into_pyarray(py),
        )?;
        packets.set_item(
            "opt_sack_block_count",
            self.opt_sack_block_count.into_pyarray(py),
        )?;
        if let Some(accepted) = self.accepted {
            packets.set_item("accepted", accepted.into_pyarray(py))?;
        }
        let sack_blocks = PyDict::new(py);
        sack_blocks.set_item("row", self.sack_row.into_pyarray(py))?;
        sack_blocks.set_item("left_raw", self.sack_left_raw.into_pyarray(py))?;
        sack_blocks.set_item("right_raw", self.sack_right_raw.into_pyarray(py))?;
        Ok((packets, sack_blocks))
    }
}
