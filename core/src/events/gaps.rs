//! The gaps of each connection's timeline (the rules of `nagledetect/events/gaps.py`), found as
//! the packets come. The timeline is the packets by which either side tried to move the
//! connection on (new data, a retransmission, a SYN, a keep-alive, a zero-window probe); a gap
//! runs from one of them to the next when it is 10 ms or more. The span a timeline packet
//! opens (it and every packet after it up to the next) keeps, per direction, what tells the
//! gap's cause: the first zero window, the dup ACKs, the smallest window edge, the latest ACK.
//! After a retransmission, the peer's first ACK that covers it is noted; D-SACKs and
//! retransmissions are kept per connection to tell, at the end, which retransmissions were
//! spurious. A connection's gaps are finished, their values read, when it has ended.

use super::segments::NO_ROW;
use super::tables::GapTable;
use crate::flows::packets::Finished;
use crate::flows::side::{
    ROLE_DATA, ROLE_DUP_ACK, ROLE_KEEPALIVE, ROLE_OUT_OF_ORDER, ROLE_RETRANSMISSION, ROLE_RST,
    ROLE_SYN, ROLE_ZERO_WINDOW_PROBE,
};
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

/// What a span's packets of one direction tell. Values are read from the finished packets
/// (`rows`): a packet's numbers are counted from the ISNs, and its window scaled, only once
/// the connection is known whole.
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
#[derive(Clone, Default)]
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
    /// Its gaps.
    rows: Vec<Gap>,
}

/// One gap of a connection, as the pass leaves it: packets are named by their rows among
/// the connection's packets (`NO_ROW`: none), their values read when it is finished.
#[derive(Clone)]
struct Gap {
    before_time_us: i64,
    after_time_us: i64,
    cover_time_us: i64,
    before_frame: u32,
    after_frame: u32,
    zero_frame: u32,
    peer_dup_frame: u32,
    cover_frame: u32,
    dsack_frame: u32,
    before_row: u32,
    after_row: u32,
    peer_edge_row: u32,
    peer_ack_row: u32,
    peer_latest_row: u32,
    peer_latest_at_start_row: u32,
    after_payload_bytes: u32,
    peer_dup_acks: u32,
    before_kind: u8,
    after_kind: u8,
    before_sender: u8,
    after_sender: u8,
}

/// A packet row as a gap holds it.
fn as_row(row: Option<usize>) -> u32 {
    row.map_or(NO_ROW, |row| row as u32)
}

/// A gap's packet row, None where it names none.
fn row_of(row: u32) -> Option<usize> {
    (row != NO_ROW).then_some(row as usize)
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
    /// Take one packet of the connection; a gap it ends is kept (its cover and D-SACK columns
    /// are filled at the end, `finish`).
    pub fn take(&mut self, packet: &Taken) {
        let taken = packet;
        let sender = taken.sender;
        let peer = 1 - sender;
        let edge = packet.ack.wrapping_add(packet.window_bytes);
        let kind = kind_of(taken.role, taken.payload_bytes, packet.flags);
        let end = packet.seq + i64::from(taken.payload_bytes);
        self.note_cover(packet);
        self.note_dsack(packet);
        if let Some(kind) = kind {
            if kind == RETRANSMISSION {
                self.retransmissions[sender].push((packet.row, i64::from(packet.frame)));
            }
            let mut gap_row = None;
            if let Some(opener) = self.opener
                && packet.time_us - opener.time_us >= GAP_MIN_US
            {
                gap_row = Some(self.rows.len());
                self.push_gap(&opener, packet, kind);
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

    fn push_gap(&mut self, opener: &Opener, packet: &Taken, kind: i64) {
        let peer = 1 - packet.sender;
        let span = &self.spans[peer];
        self.rows.push(Gap {
            before_time_us: opener.time_us,
            after_time_us: packet.time_us,
            cover_time_us: 0,
            before_frame: opener.frame as u32,
            after_frame: packet.frame,
            zero_frame: span.zero_frame as u32,
            peer_dup_frame: span.dup_frame as u32,
            cover_frame: 0,
            dsack_frame: 0,
            before_row: opener.row as u32,
            after_row: packet.row as u32,
            peer_edge_row: as_row(span.edge_row),
            peer_ack_row: as_row(span.ack_row),
            peer_latest_row: as_row(self.latest_row[peer]),
            peer_latest_at_start_row: as_row(opener.peer_latest_row),
            after_payload_bytes: packet.payload_bytes,
            peer_dup_acks: span.dup_acks as u32,
            before_kind: opener.kind as u8,
            after_kind: kind as u8,
            before_sender: opener.sender as u8,
            after_sender: packet.sender as u8,
        });
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
    fn note_cover(&mut self, packet: &Taken) {
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
            let gap = &mut self.rows[row];
            gap.cover_frame = packet.frame;
            gap.cover_time_us = packet.time_us;
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
    /// D-SACKs as retransmissions of that range from it on (numbers from the finished packets).
    fn note_dsacks(&mut self, flows: &Finished) {
        for gap in &mut self.rows {
            if i64::from(gap.after_kind) != RETRANSMISSION {
                continue;
            }
            let side = usize::from(gap.after_sender);
            let after_row = gap.after_row as usize;
            let seq = flows.seq(after_row);
            let end = seq + flows.payload_bytes(after_row);
            let after = i64::from(gap.after_frame);
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
                gap.dsack_frame = reported.iter().copied().min().unwrap_or(0) as u32;
            }
        }
    }

    /// The connection (number `connection`) has ended: its gaps, their values read from its
    /// finished packets `flows`, go to `table`.
    pub fn finish(mut self, connection: u32, flows: &Finished, table: &mut GapTable) {
        self.note_dsacks(flows);
        let edge = |row: usize| flows.ack(row).wrapping_add(flows.window_bytes(row));
        let end = |row: usize| flows.seq(row) + flows.payload_bytes(row);
        let frame = |row: usize| i64::from(flows.frame(row));
        let maybe =
            |row: u32, value: &dyn Fn(usize) -> i64, none: i64| row_of(row).map_or(none, value);
        for gap in &self.rows {
            let after_row = gap.after_row as usize;
            table.connection.push(i64::from(connection));
            table.before_frame.push(i64::from(gap.before_frame));
            table.after_frame.push(i64::from(gap.after_frame));
            table.before_time_us.push(gap.before_time_us);
            table.after_time_us.push(gap.after_time_us);
            table
                .before_direction
                .push(i64::from(flows.direction(gap.before_sender)));
            table
                .after_direction
                .push(i64::from(flows.direction(gap.after_sender)));
            table.before_kind.push(i64::from(gap.before_kind));
            table.after_kind.push(i64::from(gap.after_kind));
            table.after_seq.push(flows.seq(after_row));
            table.after_end.push(end(after_row));
            table
                .after_payload_bytes
                .push(i64::from(gap.after_payload_bytes));
            table.zero_frame.push(i64::from(gap.zero_frame));
            table.peer_dup_acks.push(i64::from(gap.peer_dup_acks));
            table.peer_dup_frame.push(i64::from(gap.peer_dup_frame));
            table
                .peer_edge
                .push(maybe(gap.peer_edge_row, &edge, NO_EDGE));
            table
                .peer_edge_frame
                .push(maybe(gap.peer_edge_row, &frame, 0));
            table.peer_edge_window.push(maybe(
                gap.peer_edge_row,
                &|row| flows.window_bytes(row),
                0,
            ));
            table
                .peer_ack
                .push(maybe(gap.peer_ack_row, &|row| flows.ack(row), NO_ACK));
            table
                .peer_ack_frame
                .push(maybe(gap.peer_ack_row, &frame, 0));
            table.peer_window_before.push(maybe(
                gap.peer_latest_row,
                &|row| flows.window_bytes(row),
                -1,
            ));
            table.before_end.push(end(gap.before_row as usize));
            table
                .peer_edge_at_start
                .push(maybe(gap.peer_latest_at_start_row, &edge, -1));
            table.cover_frame.push(i64::from(gap.cover_frame));
            table.cover_time_us.push(gap.cover_time_us);
            table.dsack_frame.push(i64::from(gap.dsack_frame));
        }
    }
}
