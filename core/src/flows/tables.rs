//! The packet and connection tables of `build_flows`, made at the end of the pass (a packet's
//! direction, the bases its numbers count from and its connection's MSS are known only once
//! the connection has ended), and handed to Python as numpy arrays of the same dtypes.

use numpy::IntoPyArray;
use pyo3::prelude::*;
use pyo3::types::PyDict;

use crate::flows::Packet;
use crate::flows::connection::{Connection, NO_ACK, Row};
use crate::flows::packets::Finishing;
use crate::flows::side::Numbered;

/// The analysed packets, in file order, as the pass leaves them, kept only where the caller
/// wants the packet table.
#[derive(Default)]
pub struct PacketRows {
    frame: Vec<u32>,
    time_us: Vec<i64>,
    connection: Vec<i32>,
    sender: Vec<u8>,
    flags: Vec<u16>,
    payload_bytes: Vec<u32>,
    seq_u: Vec<i64>,
    ack_u: Vec<i64>,
    seq_raw: Vec<u32>,
    ack_raw: Vec<u32>,
    window_raw: Vec<u16>,
    role: Vec<u8>,
    opt_has_timestamp: Vec<bool>,
    opt_timestamp_value: Vec<u32>,
    opt_timestamp_echo: Vec<u32>,
    opt_sack_block_count: Vec<u8>,
    captured_bytes: Vec<u32>,
    payload_from_capture: Vec<bool>,
    sack_frame: Vec<u32>,
    sack_left_raw: Vec<u32>,
    sack_right_raw: Vec<u32>,
}

impl PacketRows {
    pub fn len(&self) -> usize {
        self.frame.len()
    }

    /// Keep the first `rows` packets (and their SACK blocks).
    pub fn truncate(&mut self, rows: usize) {
        let Some(&first_dropped) = self.frame.get(rows) else {
            return;
        };
        macro_rules! cut {
            ($($column:ident),*) => { $(self.$column.truncate(rows);)* };
        }
        cut!(
            frame,
            time_us,
            connection,
            sender,
            flags,
            payload_bytes,
            seq_u,
            ack_u,
            seq_raw,
            ack_raw,
            window_raw,
            role,
            opt_has_timestamp,
            opt_timestamp_value,
            opt_timestamp_echo,
            opt_sack_block_count,
            captured_bytes,
            payload_from_capture
        );
        let blocks = self
            .sack_frame
            .partition_point(|frame| *frame < first_dropped);
        self.sack_frame.truncate(blocks);
        self.sack_left_raw.truncate(blocks);
        self.sack_right_raw.truncate(blocks);
    }

    /// The rows of the connections numbered `finished` (sorted), in their order, with their
    /// SACK blocks, taken out; the others stay, in theirs.
    pub fn split_off_finished(&mut self, finished: &[u32]) -> PacketRows {
        let taken: Vec<bool> = self
            .connection
            .iter()
            .map(|connection| finished.binary_search(&(*connection as u32)).is_ok())
            .collect();
        // Rows are in frame order, and a packet's blocks carry its frame.
        let blocks_taken: Vec<bool> = self
            .sack_frame
            .iter()
            .map(|frame| self.frame.binary_search(frame).is_ok_and(|row| taken[row]))
            .collect();
        let mut out = PacketRows::default();
        macro_rules! split {
            ($flags:expr; $($column:ident),*) => {$(
                out.$column = split_off(&mut self.$column, $flags);
            )*};
        }
        split!(&taken; frame, time_us, connection, sender, flags, payload_bytes, seq_u, ack_u,
            seq_raw, ack_raw, window_raw, role, opt_has_timestamp, opt_timestamp_value,
            opt_timestamp_echo, opt_sack_block_count, captured_bytes, payload_from_capture);
        split!(&blocks_taken; sack_frame, sack_left_raw, sack_right_raw);
        out
    }

    /// Name each row's connection by `local` of its number.
    pub fn renumber_connections(&mut self, local: impl Fn(u32) -> u32) {
        for connection in &mut self.connection {
            *connection = local(*connection as u32) as i32;
        }
    }

    pub fn push(
        &mut self,
        packet: &Packet<'_>,
        connection: u32,
        sender: usize,
        numbered: &Numbered,
    ) {
        let tcp = packet.tcp;
        self.frame.push(packet.frame);
        self.time_us.push(packet.time_us);
        self.connection.push(connection as i32);
        self.sender.push(sender as u8);
        self.flags.push(tcp.flags);
        self.payload_bytes.push(tcp.payload_bytes);
        self.seq_u.push(numbered.seq_u);
        self.ack_u.push(numbered.ack_u.unwrap_or(NO_ACK));
        self.window_raw.push(tcp.window);
        self.role.push(numbered.role);
        self.seq_raw.push(tcp.seq);
        self.ack_raw.push(tcp.ack);
        let options = &tcp.options;
        self.opt_has_timestamp.push(options.timestamp.is_some());
        let (value, echo) = options.timestamp.unwrap_or((0, 0));
        self.opt_timestamp_value.push(value);
        self.opt_timestamp_echo.push(echo);
        self.opt_sack_block_count.push(options.sack_block_count);
        self.captured_bytes.push(packet.captured_bytes);
        self.payload_from_capture.push(tcp.payload_from_capture);
        for (left, right) in &options.sack_blocks[..usize::from(options.sack_block_count)] {
            self.sack_frame.push(packet.frame);
            self.sack_left_raw.push(*left);
            self.sack_right_raw.push(*right);
        }
    }
}

/// The values of `column` where `taken` holds, moved out in order; the others stay, in theirs
/// (compacted in place: the live connections' rows are most of the table).
fn split_off<T: Copy>(column: &mut Vec<T>, taken: &[bool]) -> Vec<T> {
    let mut moved = Vec::with_capacity(taken.iter().filter(|take| **take).count());
    let mut kept = 0;
    for (row, take) in taken.iter().enumerate() {
        if *take {
            moved.push(column[row]);
        } else {
            column[kept] = column[row];
            kept += 1;
        }
    }
    column.truncate(kept);
    moved
}

pub struct FlowTables {
    packets: PacketRows,
    direction: Vec<u8>,
    window_bytes: Vec<i64>,
    wire_segments: Vec<u32>,
    super_segment: Vec<bool>,
    connections: ConnectionColumns,
}

impl FlowTables {
    /// The tables of `packets` (the run's packet rows, where kept) and of the finished
    /// connections `records`, in any order; `finishing` holds, by connection, what its packets
    /// are finished with (needed only where packet rows were kept).
    pub fn new(
        mut packets: PacketRows,
        mut records: Vec<ConnectionRecord>,
        finishing: &[Finishing],
    ) -> FlowTables {
        records.sort_by_key(|record| record.id);
        let count = packets.frame.len();
        let mut tables = FlowTables {
            direction: Vec::with_capacity(count),
            window_bytes: Vec::with_capacity(count),
            wire_segments: Vec::with_capacity(count),
            super_segment: Vec::with_capacity(count),
            connections: ConnectionColumns::of(&records),
            packets: PacketRows::default(),
        };
        for index in 0..count {
            let at = &finishing[packets.connection[index] as usize];
            tables.finish_packet(&mut packets, index, at);
        }
        tables.packets = packets;
        tables
    }

    fn finish_packet(&mut self, packets: &mut PacketRows, index: usize, at: &Finishing) {
        let sender = packets.sender[index];
        let direction = at.direction(sender);
        self.direction.push(direction);
        (packets.seq_u[index], packets.ack_u[index]) =
            at.counted(sender, packets.seq_u[index], packets.ack_u[index]);
        self.window_bytes.push(at.window_bytes(
            packets.window_raw[index],
            packets.flags[index],
            direction,
        ));
        let (wire, super_segment) = at.wire_segments(packets.payload_bytes[index]);
        self.super_segment.push(super_segment);
        self.wire_segments.push(wire);
    }

    /// The tables as dicts of numpy arrays: `packets` (the columns of `build.PACKET_COLUMNS`,
    /// `role` as codes), `sack_blocks` and `connections` (the numbers of the connection table;
    /// the endpoints as `client_words` and `server_words`, four columns each, and ports).
    pub fn into_python(self, py: Python<'_>) -> PyResult<Bound<'_, PyDict>> {
        let p = self.packets;
        let packets = PyDict::new(py);
        packets.set_item("frame", p.frame.into_pyarray(py))?;
        packets.set_item("time_us", p.time_us.into_pyarray(py))?;
        packets.set_item("connection", p.connection.into_pyarray(py))?;
        packets.set_item("direction", self.direction.into_pyarray(py))?;
        packets.set_item("flags", p.flags.into_pyarray(py))?;
        packets.set_item("payload_bytes", p.payload_bytes.into_pyarray(py))?;
        packets.set_item("rel_seq", p.seq_u.into_pyarray(py))?;
        packets.set_item("rel_ack", p.ack_u.into_pyarray(py))?;
        packets.set_item("seq_raw", p.seq_raw.into_pyarray(py))?;
        packets.set_item("ack_raw", p.ack_raw.into_pyarray(py))?;
        packets.set_item("window_raw", p.window_raw.into_pyarray(py))?;
        packets.set_item("window_bytes", self.window_bytes.into_pyarray(py))?;
        packets.set_item("role", p.role.into_pyarray(py))?;
        packets.set_item("wire_segments", self.wire_segments.into_pyarray(py))?;
        packets.set_item("super_segment", self.super_segment.into_pyarray(py))?;
        packets.set_item("opt_has_timestamp", p.opt_has_timestamp.into_pyarray(py))?;
        packets.set_item(
            "opt_timestamp_value",
            p.opt_timestamp_value.into_pyarray(py),
        )?;
        packets.set_item("opt_timestamp_echo", p.opt_timestamp_echo.into_pyarray(py))?;
        packets.set_item(
            "opt_sack_block_count",
            p.opt_sack_block_count.into_pyarray(py),
        )?;
        packets.set_item("captured_bytes", p.captured_bytes.into_pyarray(py))?;
        packets.set_item(
            "payload_from_capture",
            p.payload_from_capture.into_pyarray(py),
        )?;
        let sack_blocks = PyDict::new(py);
        sack_blocks.set_item("frame", p.sack_frame.into_pyarray(py))?;
        sack_blocks.set_item("left_raw", p.sack_left_raw.into_pyarray(py))?;
        sack_blocks.set_item("right_raw", p.sack_right_raw.into_pyarray(py))?;
        let tables = PyDict::new(py);
        tables.set_item("packets", packets)?;
        tables.set_item("sack_blocks", sack_blocks)?;
        tables.set_item("connections", self.connections.into_python(py)?)?;
        Ok(tables)
    }
}

/// A finished connection's row of the connection table: what is left of it once its packets
/// have been read (its state while live is let go).
pub struct ConnectionRecord {
    /// Its number in the run (the table's order).
    pub id: u32,
    stream: u32,
    first_frame: u32,
    endpoints: [crate::flows::Endpoint; 2],
    ip_version: u8,
    start_us: i64,
    end_us: i64,
    /// By direction (0: the client's).
    packets: [i64; 2],
    payload_bytes: [i64; 2],
    row: Row,
}

impl ConnectionRecord {
    /// How many of its packets were taken (its rows of the packet table).
    pub fn packet_count(&self) -> usize {
        (self.packets[0] + self.packets[1]) as usize
    }

    /// Connection `id`'s record, and what its packets are finished with.
    pub fn of(id: u32, connection: &Connection) -> (ConnectionRecord, Finishing) {
        let ip_version = ip_version(&connection.endpoints[0].0);
        let row = connection.row(ip_version);
        let finishing = Finishing::of(connection, &row);
        let sides = [
            &connection.sides[row.client],
            &connection.sides[1 - row.client],
        ];
        let record = ConnectionRecord {
            id,
            stream: connection.stream,
            first_frame: connection.first_frame,
            endpoints: connection.endpoints,
            ip_version,
            start_us: sides
                .iter()
                .filter_map(|side| side.first_us)
                .min()
                .unwrap_or(i64::MAX),
            end_us: sides
                .iter()
                .filter(|side| side.packets > 0)
                .map(|side| side.last_us)
                .max()
                .unwrap_or(i64::MIN),
            packets: sides.map(|side| side.packets),
            payload_bytes: sides.map(|side| side.payload_bytes),
            row,
        };
        (record, finishing)
    }
}

/// IPv4 where the address words are IPv4-mapped, else IPv6.
fn ip_version(words: &[u32; 4]) -> u8 {
    if words[..3] == [0, 0, 0xFFFF] { 4 } else { 6 }
}

/// The connection table's numbers, a column each.
#[derive(Default)]
struct ConnectionColumns {
    stream: Vec<i64>,
    first_frame: Vec<i64>,
    client_words: [Vec<u32>; 4],
    server_words: [Vec<u32>; 4],
    client_port: Vec<i64>,
    server_port: Vec<i64>,
    ip_version: Vec<i64>,
    start_us: Vec<i64>,
    end_us: Vec<i64>,
    packets: [Vec<i64>; 2],
    payload_bytes: [Vec<i64>; 2],
    client_guessed: Vec<bool>,
    frame: [Vec<u32>; 2],
    mss: [Vec<i64>; 2],
    window_scale: [Vec<i8>; 2],
    sack_permitted: [Vec<bool>; 2],
    timestamps_each: [Vec<bool>; 2],
    handshake: Vec<bool>,
    timestamps: Vec<bool>,
    window_scaling: Vec<bool>,
    mss_estimated: Vec<bool>,
    effective_mss: Vec<i64>,
    frame_payload_limit_bytes: Vec<i64>,
    rtt_client_side_us: Vec<i64>,
    rtt_server_side_us: Vec<i64>,
    rtt_from_handshake: Vec<bool>,
    rtt_unsplit_us: Vec<i64>,
    vantage: Vec<&'static str>,
}

impl ConnectionColumns {
    fn of(records: &[ConnectionRecord]) -> ConnectionColumns {
        let mut columns = ConnectionColumns::default();
        for record in records {
            columns.push(record);
        }
        columns
    }

    fn push(&mut self, record: &ConnectionRecord) {
        let row = &record.row;
        let client = row.client;
        let server = 1 - client;
        self.stream.push(i64::from(record.stream));
        self.first_frame.push(i64::from(record.first_frame));
        for (index, words) in [client, server].into_iter().enumerate() {
            let (address, port) = record.endpoints[words];
            let columns = if index == 0 {
                &mut self.client_words
            } else {
                &mut self.server_words
            };
            for (column, word) in columns.iter_mut().zip(address) {
                column.push(word);
            }
            let ports = if index == 0 {
                &mut self.client_port
            } else {
                &mut self.server_port
            };
            ports.push(i64::from(port));
        }
        self.ip_version.push(i64::from(record.ip_version));
        self.start_us.push(record.start_us);
        self.end_us.push(record.end_us);
        for direction in 0..2 {
            self.packets[direction].push(record.packets[direction]);
            self.payload_bytes[direction].push(record.payload_bytes[direction]);
        }
        self.client_guessed.push(row.client_guessed);
        for (index, options) in [row.syn, row.syn_ack].iter().enumerate() {
            self.frame[index].push(options.frame);
            self.mss[index].push(options.mss);
            self.window_scale[index].push(options.window_scale);
            self.sack_permitted[index].push(options.sack_permitted);
            self.timestamps_each[index].push(options.timestamps);
        }
        self.handshake.push(row.handshake);
        self.timestamps.push(row.timestamps);
        self.window_scaling.push(row.window_scaling);
        self.mss_estimated.push(row.mss_estimated);
        self.effective_mss.push(row.effective_mss);
        self.frame_payload_limit_bytes
            .push(row.frame_payload_limit_bytes);
        self.rtt_client_side_us
            .push(row.rtt_client_side_us.unwrap_or(-1));
        self.rtt_server_side_us
            .push(row.rtt_server_side_us.unwrap_or(-1));
        self.rtt_from_handshake.push(row.rtt_from_handshake);
        self.rtt_unsplit_us.push(row.rtt_unsplit_us.unwrap_or(-1));
        self.vantage.push(row.vantage);
    }

    fn into_python(self, py: Python<'_>) -> PyResult<Bound<'_, PyDict>> {
        let table = PyDict::new(py);
        table.set_item("stream", self.stream.into_pyarray(py))?;
        table.set_item("first_frame", self.first_frame.into_pyarray(py))?;
        for (side, words) in [("client", self.client_words), ("server", self.server_words)] {
            for (index, column) in words.into_iter().enumerate() {
                table.set_item(format!("{side}_word_{index}"), column.into_pyarray(py))?;
            }
        }
        table.set_item("client_port", self.client_port.into_pyarray(py))?;
        table.set_item("server_port", self.server_port.into_pyarray(py))?;
        table.set_item("ip_version", self.ip_version.into_pyarray(py))?;
        table.set_item("start_us", self.start_us.into_pyarray(py))?;
        table.set_item("end_us", self.end_us.into_pyarray(py))?;
        let [to_server, to_client] = self.packets;
        table.set_item("packets_client_to_server", to_server.into_pyarray(py))?;
        table.set_item("packets_server_to_client", to_client.into_pyarray(py))?;
        let [to_server, to_client] = self.payload_bytes;
        table.set_item("bytes_client_to_server", to_server.into_pyarray(py))?;
        table.set_item("bytes_server_to_client", to_client.into_pyarray(py))?;
        table.set_item("client_guessed", self.client_guessed.into_pyarray(py))?;
        let [syn_frame, syn_ack_frame] = self.frame;
        table.set_item("syn_frame", syn_frame.into_pyarray(py))?;
        table.set_item("syn_ack_frame", syn_ack_frame.into_pyarray(py))?;
        let sides = ["client", "server"];
        for (side, column) in sides.iter().zip(self.mss) {
            table.set_item(format!("mss_{side}"), column.into_pyarray(py))?;
        }
        for (side, column) in sides.iter().zip(self.window_scale) {
            table.set_item(format!("window_scale_{side}"), column.into_pyarray(py))?;
        }
        for (side, column) in sides.iter().zip(self.sack_permitted) {
            table.set_item(format!("sack_permitted_{side}"), column.into_pyarray(py))?;
        }
        for (side, column) in sides.iter().zip(self.timestamps_each) {
            table.set_item(format!("timestamps_{side}"), column.into_pyarray(py))?;
        }
        table.set_item("handshake", self.handshake.into_pyarray(py))?;
        table.set_item("timestamps", self.timestamps.into_pyarray(py))?;
        table.set_item("window_scaling", self.window_scaling.into_pyarray(py))?;
        table.set_item("mss_estimated", self.mss_estimated.into_pyarray(py))?;
        table.set_item("effective_mss", self.effective_mss.into_pyarray(py))?;
        table.set_item(
            "frame_payload_limit_bytes",
            self.frame_payload_limit_bytes.into_pyarray(py),
        )?;
        table.set_item(
            "rtt_client_side_us",
            self.rtt_client_side_us.into_pyarray(py),
        )?;
        table.set_item(
            "rtt_server_side_us",
            self.rtt_server_side_us.into_pyarray(py),
        )?;
        table.set_item(
            "rtt_from_handshake",
            self.rtt_from_handshake.into_pyarray(py),
        )?;
        table.set_item("rtt_unsplit_us", self.rtt_unsplit_us.into_pyarray(py))?;
        table.set_item("vantage", self.vantage)?;
        Ok(table)
    }
}
