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

    /// A packet's sequence number counted from its sender's ISN.
    pub fn seq(&self, packet: &PacketRow) -> i64 {
        self.counted(packet.sender, packet.seq_u, packet.ack_u).0
    }

    /// A packet's ACK counted from its peer's ISN (`NO_ACK` without the ACK flag).
    pub fn ack(&self, packet: &PacketRow) -> i64 {
        self.counted(packet.sender, packet.seq_u, packet.ack_u).1
    }

    /// A packet's window in bytes.
    pub fn packet_window_bytes(&self, packet: &PacketRow) -> i64 {
        self.window_bytes(
            packet.window_raw,
            packet.flags,
            self.direction(packet.sender),
        )
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

/// One packet as its connection's events read it: its values as it came, which its finishing
/// values count and scale (`Finishing::seq`, `ack`, `window_bytes`).
#[derive(Clone, Copy)]
pub struct PacketRow {
    pub time_us: i64,
    pub seq_u: i64,
    pub ack_u: i64,
    pub frame: u32,
    pub payload_bytes: u32,
    pub flags: u16,
    pub window_raw: u16,
    pub sender: u8,
    pub role: u8,
}

impl PacketRow {
    pub fn of(packet: &Taken) -> PacketRow {
        PacketRow {
            time_us: packet.time_us,
            seq_u: packet.seq_u,
            ack_u: packet.ack_u,
            frame: packet.frame,
            payload_bytes: packet.payload_bytes,
            flags: packet.flags,
            window_raw: packet.window_raw,
            sender: packet.sender as u8,
            role: packet.role,
        }
    }
}

/// A connection's packets in the order they came: one vector of rows, so that each live
/// connection grows one allocation. A long connection's events may be finished as it goes
/// (`Events::let_go`), and its packets then let go but the few its next events will read
/// (`let_go_all_but`): rows keep their numbers.
#[derive(Clone, Default)]
pub struct ConnectionPackets {
    rows: Vec<PacketRow>,
    /// The number of the first row of `rows`.
    first_row: usize,
    /// Rows before it still read, by number.
    kept: Vec<(usize, PacketRow)>,
    /// Each packet's row in the run's packet table, where one is kept.
    table_row: Vec<u32>,
}

impl ConnectionPackets {
    /// How many packets are held.
    pub fn len(&self) -> usize {
        self.rows.len() + self.kept.len()
    }

    /// The rows of `rows` (those held in order).
    pub fn held(&self) -> std::ops::Range<usize> {
        self.first_row..self.first_row + self.rows.len()
    }

    /// Keep `packet`; its row.
    pub fn push(&mut self, packet: &Taken, keep_table_row: bool) -> usize {
        self.rows.push(PacketRow::of(packet));
        if keep_table_row {
            self.table_row.push(packet.table_row as u32);
        }
        self.first_row + self.rows.len() - 1
    }

    pub fn row(&self, row: usize) -> &PacketRow {
        match row.checked_sub(self.first_row) {
            Some(at) => &self.rows[at],
            None => {
                let at = self
                    .kept
                    .binary_search_by_key(&row, |(number, _)| *number)
                    .expect("a row let go is not read");
                &self.kept[at].1
            }
        }
    }

    /// The packet's row in the run's packet table.
    pub fn table_row(&self, row: usize) -> u32 {
        self.table_row[row - self.first_row]
    }

    /// Let go of every packet but those at rows `read` (held: the next events read them):
    /// how many.
    pub fn let_go_all_but(&mut self, read: &[usize]) -> usize {
        let before = self.len();
        let mut kept: Vec<(usize, PacketRow)> =
            read.iter().map(|row| (*row, *self.row(*row))).collect();
        kept.sort_unstable_by_key(|(number, _)| *number);
        kept.dedup_by_key(|(number, _)| *number);
        self.kept = kept;
        self.first_row += self.rows.len();
        self.rows = Vec::new();
        self.table_row = Vec::new();
        before - self.len()
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
        self.packets.row(row).frame
    }

    pub fn time_us(&self, row: usize) -> i64 {
        self.packets.row(row).time_us
    }

    pub fn seq(&self, row: usize) -> i64 {
        self.at.seq(self.packets.row(row))
    }

    pub fn ack(&self, row: usize) -> i64 {
        self.at.ack(self.packets.row(row))
    }

    pub fn payload_bytes(&self, row: usize) -> i64 {
        i64::from(self.packets.row(row).payload_bytes)
    }

    pub fn window_bytes(&self, row: usize) -> i64 {
        self.at.packet_window_bytes(self.packets.row(row))
    }

    pub fn wire_segments(&self, row: usize) -> u32 {
        self.at.wire_segments(self.packets.row(row).payload_bytes).0
    }

    /// The endpoint that sent the packet (0: the low one).
    pub fn sender(&self, row: usize) -> u8 {
        self.packets.row(row).sender
    }

    /// The packet's role (a code of `roles.ROLES`).
    pub fn role(&self, row: usize) -> u8 {
        self.packets.row(row).role
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
