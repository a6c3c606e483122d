//! A connection's own packets, kept while it is live for the events to read when it finishes,
//! and the values they are finished with: the direction, the bases its numbers count from, the
//! window scaling and the MSS are known for sure only once the connection has ended. Rows here
//! are the connection's own (0 is its first packet); once it is finished and its events made,
//! they are let go.

use crate::flows::connection::{Connection, MAX_WINDOW_SCALE, NO_ACK, Row};
use crate::flows::{FLAG_SYN, Taken};

/// The per-connection values its packets are finished with.
#[derive(Clone, Copy)]
pub struct Finishing {
    /// Which endpoint is its client (0: the low one).
    pub client: u8,
    /// By sending endpoint, what to add to its `seq_u` and `ack_u` values to count them from
    /// the ISNs.
    pub offsets: [(i64, i64); 2],
    /// Window scale shift by direction (0 where scaling was not agreed).
    pub shift: [u32; 2],
    pub effective_mss: i64,
    pub single_frame_bytes: i64,
}

impl Finishing {
    pub fn of(connection: &Connection, row: &Row) -> Finishing {
        let scale = |shift: i8| {
            if row.window_scaling {
                shift.clamp(0, MAX_WINDOW_SCALE) as u32
            } else {
                0
            }
        };
        Finishing {
            client: row.client as u8,
            offsets: connection.offsets(),
            shift: [scale(row.syn.window_scale), scale(row.syn_ack.window_scale)],
            effective_mss: row.effective_mss,
            single_frame_bytes: row.effective_mss.max(1).max(row.frame_payload_limit_bytes),
        }
    }

    /// The direction of endpoint `sender`'s packets (0: the client's).
    pub fn direction(&self, sender: u8) -> u8 {
        u8::from(sender != self.client)
    }

    /// A packet of endpoint `sender`, its `seq_u` and `ack_u` values counted from the ISNs
    /// (`NO_ACK` stays: the packet has no ACK).
    pub fn counted(&self, sender: u8, seq_u: i64, ack_u: i64) -> (i64, i64) {
        let (seq_offset, ack_offset) = self.offsets[usize::from(sender)];
        let ack = if ack_u == NO_ACK {
            NO_ACK
        } else {
            ack_u + ack_offset
        };
        (seq_u + seq_offset, ack)
    }

    /// A packet's window in bytes: scaled by its direction's shift, except on a SYN.
    pub fn window_bytes(&self, window_raw: u16, flags: u16, direction: u8) -> i64 {
        let shift = if flags & FLAG_SYN != 0 {
            0
        } else {
            self.shift[usize::from(direction)]
        };
        i64::from(window_raw) << shift
    }

    /// How many wire segments a payload of `payload_bytes` was, and whether it was more than
    /// one frame could carry (a segment the sender's offload split).
    pub fn wire_segments(&self, payload_bytes: u32) -> (u32, bool) {
        let payload = i64::from(payload_bytes);
        let unknown = self.effective_mss <= 0;
        let mss = self.effective_mss.max(1);
        let super_segment = payload > self.single_frame_bytes;
        let wire = if super_segment {
            if unknown {
                1
            } else {
                (payload + mss - 1) / mss
            }
        } else {
            i64::from(payload > 0 || unknown)
        };
        (wire as u32, super_segment)
    }
}

/// One packet as its connection's events read it.
#[derive(Clone)]
struct PacketRow {
    time_us: i64,
    seq_u: i64,
    ack_u: i64,
    frame: u32,
    payload_bytes: u32,
    flags: u16,
    window_raw: u16,
    sender: u8,
    role: u8,
}

/// A connection's packets in the order they came: one vector of rows, so that each live
/// connection grows one allocation.
#[derive(Clone, Default)]
pub struct ConnectionPackets {
    rows: Vec<PacketRow>,
    /// Each packet's row in the run's packet table, where one is kept.
    pub table_row: Vec<u32>,
}

impl ConnectionPackets {
    pub fn len(&self) -> usize {
        self.rows.len()
    }

    /// Keep `packet`; its row here.
    pub fn push(&mut self, packet: &Taken, keep_table_row: bool) -> usize {
        self.rows.push(PacketRow {
            time_us: packet.time_us,
            seq_u: packet.seq_u,
            ack_u: packet.ack_u,
            frame: packet.frame,
            payload_bytes: packet.payload_bytes,
            flags: packet.flags,
            window_raw: packet.window_raw,
            sender: packet.sender as u8,
            role: packet.role,
        });
        if keep_table_row {
            self.table_row.push(packet.table_row as u32);
        }
        self.rows.len() - 1
    }
}

/// A finished connection's packets read with their finishing values: numbers counted from the
/// ISNs (`NO_ACK` without the ACK flag), windows in bytes, wire segments by the MSS.
pub struct Finished<'a> {
    pub packets: &'a ConnectionPackets,
    pub at: &'a Finishing,
}

impl Finished<'_> {
    pub fn frame(&self, row: usize) -> u32 {
        self.packets.rows[row].frame
    }

    pub fn time_us(&self, row: usize) -> i64 {
        self.packets.rows[row].time_us
    }

    /// The packet's sequence and ACK numbers counted from the ISNs (`Finishing::counted`).
    fn counted(&self, row: usize) -> (i64, i64) {
        let packet = &self.packets.rows[row];
        self.at.counted(packet.sender, packet.seq_u, packet.ack_u)
    }

    pub fn seq(&self, row: usize) -> i64 {
        self.counted(row).0
    }

    pub fn ack(&self, row: usize) -> i64 {
        self.counted(row).1
    }

    pub fn payload_bytes(&self, row: usize) -> i64 {
        i64::from(self.packets.rows[row].payload_bytes)
    }

    pub fn window_bytes(&self, row: usize) -> i64 {
        let packet = &self.packets.rows[row];
        let direction = self.at.direction(packet.sender);
        self.at
            .window_bytes(packet.window_raw, packet.flags, direction)
    }

    pub fn wire_segments(&self, row: usize) -> u32 {
        self.at
            .wire_segments(self.packets.rows[row].payload_bytes)
            .0
    }

    /// The endpoint that sent the packet (0: the low one).
    pub fn sender(&self, row: usize) -> u8 {
        self.packets.rows[row].sender
    }

    /// The packet's role (a code of `roles.ROLES`).
    pub fn role(&self, row: usize) -> u8 {
        self.packets.rows[row].role
    }

    /// The connection's effective MSS (the table's `effective_mss`).
    pub fn effective_mss(&self) -> i64 {
        self.at.effective_mss
    }

    /// The direction of endpoint `sender`'s packets (0: the client's).
    pub fn direction(&self, sender: u8) -> u8 {
        self.at.direction(sender)
    }

    /// What to add to a `seq_u` value of endpoint `sender` to count it from the ISN.
    pub fn seq_offset(&self, sender: u8) -> i64 {
        self.at.offsets[usize::from(sender)].0
    }
}
