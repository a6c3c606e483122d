//! The gaps of each connection's timeline (the rules of `nagledetect/events/gaps.py`), found as
//! the packets come. The timeline is the packets by which either side tried to move the
//! connection on (new data, a retransmission, a SYN, a keep-alive, a zero-window probe); a gap
//! runs from one of them to the next when it is 10 ms or more. The span a timeline packet
//! opens (it and every packet after it up to the next) keeps, per direction, what tells the
//! gap's cause: the first zero window, the dup ACKs, the smallest window edge, the latest ACK.
//! After a retransmission, the peer's first ACK that covers it is noted; D-SACKs and
//! retransmissions are kept per connection to tell, at the end, which retransmissions were
//! spurious.

use numpy::IntoPyArray;
use pyo3::prelude::*;
use pyo3::types::PyDict;

use crate::flows::side::{
    ROLE_DATA, ROLE_DUP_ACK, ROLE_KEEPALIVE, ROLE_OUT_OF_ORDER, ROLE_RETRANSMISSION, ROLE_RST,
    ROLE_SYN, ROLE_ZERO_WINDOW_PROBE,
};
use crate::flows::tables::FlowTables;
use crate::flows::{FLAG_SYN, Taken};

/// A gap this long or longer is named (inclusive).
const GAP_MIN_US: i64 = 10_000;
const NEW_DATA: i64 = 0;
const RETRANSMISSION: i64 = 1;
const SYN: i64 = 2;
const SYN_RETRY: i64 = 3;
const PROBE: i64 = 4;
const KEEPALIVE: i64 = 5;
const NO_EDGE: i64 = i64::MAX;
const NO_ACK: i64 = i64::MIN;

/// What a span's packets of one direction tell. Values are read from the finished packet
/// table (`rows`): a packet's numbers are counted from the ISNs, and its window scaled, only
/// once the connection is known whole.
#[derive(Clone, Copy)]
struct Span {
    zero_frame: i64,
    dup_acks: i64,
    dup_frame: i64,
    /// The smallest window edge as the packets came (an edge within one side keeps its order
    /// whatever its ACKs are later counted from), and the row of its first packet.
    edge: i64,
    edge_row: Option<usize>,
    ack_row: Option<usize>,
}

impl Default for Span {
    fn default() -> Span {
        Span {
            zero_frame: 0,
            dup_acks: 0,
            dup_frame: 0,
            edge: NO_EDGE,
            edge_row: None,
            ack_row: None,
        }
    }
}

/// The timeline packet that opened the current span.
#[derive(Clone, Copy)]
struct Opener {
    row: usize,
    frame: i64,
    time_us: i64,
    sender: usize,
    kind: i64,
    /// Its sequence end as counted when it came (for the cover test).
    end: i64,
    /// The peer's latest packet before it (its window edge is the gap's edge at start).
    peer_latest_row: Option<usize>,
    /// The gap it ended (its row), if it ended one: a retransmission's cover goes there.
    gap_row: Option<usize>,
    covered: bool,
}

/// One connection's timeline state.
#[derive(Default)]
pub struct ConnectionGaps {
    opener: Option<Opener>,
    /// By sending endpoint, what the current span's packets of that side tell.
    spans: [Span; 2],
    /// By sending endpoint, its latest packet's row.
    latest_row: [Option<usize>; 2],
    /// By the endpoint whose data they name: retransmissions (row, frame) and D-SACKs (row,
    /// how far below the packet's ACK the block begins, frame).
    retransmissions: [Vec<(usize, i64)>; 2],
    dsacks: [Vec<(usize, i64, i64)>; 2],
    /// The rows of its gaps.
    gap_rows: Vec<usize>,
}

/// The gap rows, a column each (senders where the table has directions).
#[derive(Default)]
pub struct GapRows {
    pub connection: Vec<i64>,
    pub before_frame: Vec<i64>,
    pub after_frame: Vec<i64>,
    pub before_time_us: Vec<i64>,
    pub after_time_us: Vec<i64>,
    pub before_sender: Vec<u8>,
    pub after_sender: Vec<u8>,
    pub before_kind: Vec<i64>,
    pub after_kind: Vec<i64>,
    /// Packet rows the values are read at when the table is finished (None: no such packet).
    pub after_row: Vec<usize>,
    pub before_row: Vec<usize>,
    pub peer_edge_row: Vec<Option<usize>>,
    pub peer_ack_row: Vec<Option<usize>>,
    pub peer_latest_row: Vec<Option<usize>>,
    pub peer_latest_at_start_row: Vec<Option<usize>>,
    pub after_payload_bytes: Vec<i64>,
    pub zero_frame: Vec<i64>,
    pub peer_dup_acks: Vec<i64>,
    pub peer_dup_frame: Vec<i64>,
    pub cover_frame: Vec<i64>,
    pub cover_time_us: Vec<i64>,
    pub dsack_frame: Vec<i64>,
}

/// The timeline kind of a packet (`gaps.event_kinds`), None for the rest.
fn kind_of(role: u8, payload_bytes: u32, flags: u16) -> Option<i64> {
    let syn = flags & FLAG_SYN != 0;
    let mut kind = None;
    if role == ROLE_DATA && payload_bytes > 0 {
        kind = Some(NEW_DATA);
    }
    if (role == ROLE_RETRANSMISSION || role == ROLE_OUT_OF_ORDER) && payload_bytes > 0 {
        kind = Some(RETRANSMISSION);
    }
    if role == ROLE_ZERO_WINDOW_PROBE {
        kind = Some(PROBE);
    }
    if role == ROLE_KEEPALIVE {
        kind = Some(KEEPALIVE);
    }
    if syn && role == ROLE_SYN {
        kind = Some(SYN);
    }
    if syn && role == ROLE_RETRANSMISSION {
        kind = Some(SYN_RETRY);
    }
    kind
}

impl ConnectionGaps {
    /// Take one packet of the connection; a gap it ends goes to `rows` (its cover and D-SACK
    /// columns are filled at the end, `finish`).
    pub fn take(&mut self, packet: &Taken, rows: &mut GapRows) {
        let taken = packet;
        let sender = taken.sender;
        let peer = 1 - sender;
        let edge = packet.ack.wrapping_add(packet.window_bytes);
        let kind = kind_of(taken.role, taken.payload_bytes, packet.flags);
        let end = packet.seq + i64::from(taken.payload_bytes);
        self.note_cover(packet, rows);
        self.note_dsack(packet);
        if let Some(kind) = kind {
            if kind == RETRANSMISSION {
                self.retransmissions[sender].push((packet.row, i64::from(packet.frame)));
            }
            let mut gap_row = None;
            if let Some(opener) = self.opener
                && packet.time_us - opener.time_us >= GAP_MIN_US
            {
                gap_row = Some(rows.connection.len());
                self.gap_rows.push(rows.connection.len());
                self.push_gap(&opener, packet, kind, rows);
            }
            self.opener = Some(Opener {
                row: packet.row,
                frame: i64::from(packet.frame),
                time_us: packet.time_us,
                sender,
                kind,
                end,
                peer_latest_row: self.latest_row[peer],
                gap_row,
                covered: false,
            });
            self.spans = [Span::default(), Span::default()];
        }
        self.note_span(packet, edge);
        self.latest_row[sender] = Some(packet.row);
    }

    fn push_gap(&self, opener: &Opener, packet: &Taken, kind: i64, rows: &mut GapRows) {
        let peer = 1 - packet.sender;
        let span = &self.spans[peer];
        rows.connection.push(i64::from(packet.connection));
        rows.before_frame.push(opener.frame);
        rows.after_frame.push(i64::from(packet.frame));
        rows.before_time_us.push(opener.time_us);
        rows.after_time_us.push(packet.time_us);
        rows.before_sender.push(opener.sender as u8);
        rows.after_sender.push(packet.sender as u8);
        rows.before_kind.push(opener.kind);
        rows.after_kind.push(kind);
        rows.after_row.push(packet.row);
        rows.before_row.push(opener.row);
        rows.peer_edge_row.push(span.edge_row);
        rows.peer_ack_row.push(span.ack_row);
        rows.peer_latest_row.push(self.latest_row[peer]);
        rows.peer_latest_at_start_row.push(opener.peer_latest_row);
        rows.after_payload_bytes
            .push(i64::from(packet.payload_bytes));
        rows.zero_frame.push(span.zero_frame);
        rows.peer_dup_acks.push(span.dup_acks);
        rows.peer_dup_frame.push(span.dup_frame);
        rows.cover_frame.push(0);
        rows.cover_time_us.push(0);
        rows.dsack_frame.push(0);
    }

    /// What this packet tells of its side's part of the current span.
    fn note_span(&mut self, packet: &Taken, edge: i64) {
        let taken = packet;
        let span = &mut self.spans[taken.sender];
        let role = taken.role;
        let counted = role != ROLE_SYN && role != ROLE_RST;
        if counted && packet.window_bytes == 0 && span.zero_frame == 0 {
            span.zero_frame = i64::from(packet.frame);
        }
        if role == ROLE_DUP_ACK {
            span.dup_acks += 1;
            span.dup_frame = i64::from(packet.frame);
        }
        if counted && packet.window_bytes > 0 && edge < span.edge {
            span.edge = edge;
            span.edge_row = Some(packet.row);
        }
        if role != ROLE_SYN {
            span.ack_row = Some(packet.row);
        }
    }

    /// The first packet of the peer that ACKs the retransmission opening the current span
    /// (for a timeline packet: the span it closes) is the retransmission's cover.
    fn note_cover(&mut self, packet: &Taken, rows: &mut GapRows) {
        let Some(opener) = self.opener.as_mut() else {
            return;
        };
        let covers = !opener.covered
            && opener.kind == RETRANSMISSION
            && packet.sender != opener.sender
            && packet.ack >= opener.end
            && packet.role != ROLE_SYN;
        if !covers {
            return;
        }
        opener.covered = true;
        if let Some(row) = opener.gap_row {
            rows.cover_frame[row] = i64::from(packet.frame);
            rows.cover_time_us[row] = packet.time_us;
        }
    }

    /// A D-SACK: the packet's first SACK block lies below its cumulative ACK (RFC 2883).
    fn note_dsack(&mut self, packet: &Taken) {
        let Some(left_raw) = packet.first_sack_left_raw else {
            return;
        };
        let below = i64::from(packet.ack_raw.wrapping_sub(left_raw));
        if below > 0 && below < 1 << 31 && packet.role != ROLE_SYN {
            let acknowledged = 1 - packet.sender;
            self.dsacks[acknowledged].push((packet.row, below, i64::from(packet.frame)));
        }
    }

    /// The D-SACK column of this connection's gaps: a gap ending in a retransmission gets
    /// the first D-SACK within its range after it, where there are at least as many such
    /// D-SACKs as retransmissions of that range from it on (numbers from the finished table).
    pub fn finish(&self, rows: &mut GapRows, flows: &FlowTables) {
        for &row in &self.gap_rows {
            if rows.after_kind[row] != RETRANSMISSION {
                continue;
            }
            let side = usize::from(rows.after_sender[row]);
            let after_row = rows.after_row[row];
            let seq = flows.seq(after_row);
            let end = seq + flows.payload_bytes(after_row);
            let after = rows.after_frame[row];
            let within = |value: i64| seq <= value && value < end;
            let reported: Vec<i64> = self.dsacks[side]
                .iter()
                .filter(|(at, below, frame)| {
                    within(flows.ack(*at).wrapping_sub(*below)) && *frame > after
                })
                .map(|(_, _, frame)| *frame)
                .collect();
            let again = self.retransmissions[side]
                .iter()
                .filter(|(at, frame)| within(flows.seq(*at)) && *frame >= after)
                .count();
            if !reported.is_empty() && reported.len() >= again {
                rows.dsack_frame[row] = reported.iter().copied().min().unwrap_or(0);
            }
        }
    }
}

impl GapRows {
    pub fn len(&self) -> usize {
        self.connection.len()
    }

    /// Keep the first `count` gaps.
    pub fn truncate(&mut self, count: usize) {
        macro_rules! cut {
            ($($column:ident),*) => { $(self.$column.truncate(count);)* };
        }
        cut!(
            connection,
            before_frame,
            after_frame,
            before_time_us,
            after_time_us,
            before_sender,
            after_sender,
            before_kind,
            after_kind,
            after_row,
            before_row,
            peer_edge_row,
            peer_ack_row,
            peer_latest_row,
            peer_latest_at_start_row,
            after_payload_bytes,
            zero_frame,
            peer_dup_acks,
            peer_dup_frame,
            cover_frame,
            cover_time_us,
            dsack_frame
        );
    }

    /// The gaps as `GapsBySlice.gaps` gives them: a dict of int64 columns, in connection then
    /// frame order, the sides as directions (0: from the client).
    pub fn into_python<'py>(
        self,
        py: Python<'py>,
        flows: &FlowTables,
    ) -> PyResult<Bound<'py, PyDict>> {
        let mut order: Vec<usize> = (0..self.len()).collect();
        order.sort_by_key(|&row| (self.connection[row], self.after_frame[row]));
        let direction = |senders: &[u8]| -> Vec<i64> {
            order
                .iter()
                .map(|&row| {
                    let client = flows.client(self.connection[row] as u32);
                    i64::from(senders[row] != client)
                })
                .collect()
        };
        let before_direction = direction(&self.before_sender);
        let after_direction = direction(&self.after_sender);
        let table = PyDict::new(py);
        let put = |name: &str, column: &[i64]| -> PyResult<()> {
            let ordered: Vec<i64> = order.iter().map(|&row| column[row]).collect();
            table.set_item(name, ordered.into_pyarray(py))
        };
        put("connection", &self.connection)?;
        put("before_frame", &self.before_frame)?;
        put("after_frame", &self.after_frame)?;
        put("before_time_us", &self.before_time_us)?;
        put("after_time_us", &self.after_time_us)?;
        table.set_item("before_direction", before_direction.into_pyarray(py))?;
        table.set_item("after_direction", after_direction.into_pyarray(py))?;
        put("before_kind", &self.before_kind)?;
        put("after_kind", &self.after_kind)?;
        let at = |rows: &[usize], value: &dyn Fn(usize) -> i64| -> Vec<i64> {
            rows.iter().map(|&row| value(row)).collect()
        };
        let maybe = |rows: &[Option<usize>], value: &dyn Fn(usize) -> i64, none: i64| -> Vec<i64> {
            rows.iter().map(|row| row.map_or(none, value)).collect()
        };
        let edge = |row: usize| flows.ack(row).wrapping_add(flows.window_bytes(row));
        let end = |row: usize| flows.seq(row) + flows.payload_bytes(row);
        let frame = |row: usize| i64::from(flows.frame(row));
        put("after_seq", &at(&self.after_row, &|row| flows.seq(row)))?;
        put("after_end", &at(&self.after_row, &end))?;
        put("after_payload_bytes", &self.after_payload_bytes)?;
        put("zero_frame", &self.zero_frame)?;
        put("peer_dup_acks", &self.peer_dup_acks)?;
        put("peer_dup_frame", &self.peer_dup_frame)?;
        put("peer_edge", &maybe(&self.peer_edge_row, &edge, NO_EDGE))?;
        put("peer_edge_frame", &maybe(&self.peer_edge_row, &frame, 0))?;
        put(
            "peer_edge_window",
            &maybe(&self.peer_edge_row, &|row| flows.window_bytes(row), 0),
        )?;
        put(
            "peer_ack",
            &maybe(&self.peer_ack_row, &|row| flows.ack(row), NO_ACK),
        )?;
        put("peer_ack_frame", &maybe(&self.peer_ack_row, &frame, 0))?;
        put(
            "peer_window_before",
            &maybe(&self.peer_latest_row, &|row| flows.window_bytes(row), -1),
        )?;
        put("before_end", &at(&self.before_row, &end))?;
        put(
            "peer_edge_at_start",
            &maybe(&self.peer_latest_at_start_row, &edge, -1),
        )?;
        put("cover_frame", &self.cover_frame)?;
        put("cover_time_us", &self.cover_time_us)?;
        put("dsack_frame", &self.dsack_frame)?;
        Ok(table)
    }
}
