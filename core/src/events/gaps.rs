//! The gaps of each connection's timeline (the rules of `nagledetect/events/gaps.py`), found as
//! the packets come. The timeline is the packets by which either side tried to move the
//! connection on (new data, a retransmission, a SYN, a keep-alive, a zero-window probe); a gap
//! runs from one of them to the next when it is 10 ms or more. The span a timeline packet
//! opens (it and every packet after it up to the next) keeps, per direction, what tells the
//! gap's cause: the first zero window, the dup ACKs, the smallest window edge, the latest ACK.
//! After a retransmission, the peer's first ACK that covers it is noted; D-SACKs and
//! retransmissions are kept per connection to tell, at the end, which retransmissions were
//! spurious. A connection's gaps are finished, their values counted, when it has ended; they
//! keep copies of what they read of their packets, not their rows, so that a long
//! connection's packets can be let go as it goes.

use super::tables::GapTable;
use crate::flows::packets::{Finishing, PacketRow};
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

/// What a gap reads of a packet other than its own two (the other side's latest packet, its
/// smallest window edge, its latest ACK): its ACK and window as it came (counted from the
/// ISN, and scaled, only once the connection is known whole) and its frame. A copy, so that the connection's packets can be let go; 16 bytes where the whole
/// packet took 40 (a gap keeps four), and none more as an `Option` (the flag's spare values
/// tell None).
#[derive(Clone, Copy)]
struct PeerMark {
    ack_u: i64,
    frame: u32,
    window_raw: u16,
    sender: u8,
    syn: bool,
}

impl PeerMark {
    fn of(packet: &PacketRow) -> PeerMark {
        PeerMark {
            ack_u: packet.ack_u,
            frame: packet.frame,
            window_raw: packet.window_raw,
            sender: packet.sender,
            syn: packet.flags & FLAG_SYN != 0,
        }
    }

    /// Its ACK counted from the peer's ISN (`NO_ACK` without the ACK flag).
    fn ack(&self, at: &Finishing) -> i64 {
        at.counted(self.sender, 0, self.ack_u).1
    }

    /// Its window in bytes.
    fn window_bytes(&self, at: &Finishing) -> i64 {
        let flags = if self.syn { FLAG_SYN } else { 0 };
        at.window_bytes(self.window_raw, flags, at.direction(self.sender))
    }

    /// The right edge of the window it offered.
    fn edge(&self, at: &Finishing) -> i64 {
        self.ack(at).wrapping_add(self.window_bytes(at))
    }
}

/// What a span's packets of one direction tell, kept as they came (`PeerMark`).
#[derive(Clone, Copy)]
struct Span {
    zero_frame: i64,
    dup_acks: i64,
    dup_frame: i64,
    /// The smallest window edge as the packets came (an edge within one side keeps its order
    /// whatever its ACKs are later counted from), and its first packet.
    edge: i64,
    edge_packet: Option<PeerMark>,
    ack_packet: Option<PeerMark>,
}

impl Default for Span {
    fn default() -> Span {
        Span {
            zero_frame: 0,
            dup_acks: 0,
            dup_frame: 0,
            edge: NO_EDGE,
            edge_packet: None,
            ack_packet: None,
        }
    }
}

/// The timeline packet that opened the current span.
#[derive(Clone, Copy)]
struct Opener {
    packet: PacketRow,
    kind: i64,
    /// Its sequence end as counted when it came (for the cover test).
    end: i64,
    /// The peer's latest packet before it (its window edge is the gap's edge at start).
    peer_latest: Option<PeerMark>,
    /// The gap it ended (its index), if it ended one: a retransmission's cover goes there.
    gap: Option<usize>,
    covered: bool,
}

/// One connection's timeline state.
#[derive(Clone, Default)]
pub struct ConnectionGaps {
    opener: Option<Opener>,
    /// By sending endpoint, what the current span's packets of that side tell.
    spans: [Span; 2],
    /// By sending endpoint, its latest packet.
    latest: [Option<PeerMark>; 2],
    /// By sending endpoint, the furthest its data reached, as a raw sequence number unwrapped
    /// (`seq_u`): counted from the ISN only once the connection is known whole.
    furthest_sent_u: [Option<i64>; 2],
    /// By the endpoint whose data they name: retransmissions (`seq_u`, frame) and D-SACKs
    /// (the ACK's `ack_u`, how far below it the block begins, frame).
    retransmissions: [Vec<(i64, u32)>; 2],
    dsacks: [Vec<(i64, i64, u32)>; 2],
    /// Its gaps.
    rows: Vec<Gap>,
}

/// One gap of a connection, as the pass leaves it: its packets as they came, their values
/// counted when it is finished.
#[derive(Clone)]
struct Gap {
    before: PacketRow,
    after: PacketRow,
    peer_edge: Option<PeerMark>,
    peer_ack: Option<PeerMark>,
    peer_latest: Option<PeerMark>,
    peer_latest_at_start: Option<PeerMark>,
    /// How far the after packet's side's data had reached before it (`seq_u`).
    furthest_sent_u: Option<i64>,
    cover_time_us: i64,
    zero_frame: u32,
    peer_dup_frame: u32,
    cover_frame: u32,
    dsack_frame: u32,
    peer_dup_acks: u32,
    before_kind: u8,
    after_kind: u8,
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
        let sender = packet.sender;
        let peer = 1 - sender;
        let copy = PacketRow::of(packet);
        let edge = packet.ack.wrapping_add(packet.window_bytes);
        let kind = kind_of(packet.role, packet.payload_bytes, packet.flags);
        let end = packet.seq + i64::from(packet.payload_bytes);
        self.note_cover(packet);
        self.note_dsack(packet);
        if let Some(kind) = kind {
            if kind == RETRANSMISSION {
                self.retransmissions[sender].push((packet.seq_u, packet.frame));
            }
            let mut gap = None;
            if let Some(opener) = self.opener
                && packet.time_us - opener.packet.time_us >= GAP_MIN_US
            {
                gap = Some(self.rows.len());
                self.push_gap(&opener, copy, kind);
            }
            self.opener = Some(Opener {
                packet: copy,
                kind,
                end,
                peer_latest: self.latest[peer],
                gap,
                covered: false,
            });
            self.spans = [Span::default(), Span::default()];
        }
        self.note_span(copy, packet.window_bytes, edge);
        self.latest[sender] = Some(PeerMark::of(&copy));
        let sent_u = packet.seq_u + i64::from(packet.payload_bytes);
        let furthest = &mut self.furthest_sent_u[sender];
        if packet.payload_bytes > 0 && furthest.is_none_or(|most| sent_u > most) {
            *furthest = Some(sent_u);
        }
    }

    /// How many gaps, retransmissions and D-SACKs it keeps until the connection ends.
    pub fn kept(&self) -> usize {
        self.rows.len()
            + self.retransmissions.iter().map(Vec::len).sum::<usize>()
            + self.dsacks.iter().map(Vec::len).sum::<usize>()
    }

    fn push_gap(&mut self, opener: &Opener, after: PacketRow, kind: i64) {
        let peer = 1 - usize::from(after.sender);
        let span = &self.spans[peer];
        self.rows.push(Gap {
            before: opener.packet,
            after,
            peer_edge: span.edge_packet,
            peer_ack: span.ack_packet,
            peer_latest: self.latest[peer],
            peer_latest_at_start: opener.peer_latest,
            furthest_sent_u: self.furthest_sent_u[usize::from(after.sender)],
            cover_time_us: 0,
            zero_frame: span.zero_frame as u32,
            peer_dup_frame: span.dup_frame as u32,
            cover_frame: 0,
            dsack_frame: 0,
            peer_dup_acks: span.dup_acks as u32,
            before_kind: opener.kind as u8,
            after_kind: kind as u8,
        });
    }

    /// What this packet (its window `window_bytes` as far as known when it came) tells of its
    /// side's part of the current span.
    fn note_span(&mut self, packet: PacketRow, window_bytes: i64, edge: i64) {
        let span = &mut self.spans[usize::from(packet.sender)];
        let role = packet.role;
        let counted = role != ROLE_SYN && role != ROLE_RST;
        if counted && window_bytes == 0 && span.zero_frame == 0 {
            span.zero_frame = i64::from(packet.frame);
        }
        if role == ROLE_DUP_ACK {
            span.dup_acks += 1;
            span.dup_frame = i64::from(packet.frame);
        }
        if counted && window_bytes > 0 && edge < span.edge {
            span.edge = edge;
            span.edge_packet = Some(PeerMark::of(&packet));
        }
        if role != ROLE_SYN {
            span.ack_packet = Some(PeerMark::of(&packet));
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
            && packet.sender != usize::from(opener.packet.sender)
            && packet.ack >= opener.end
            && packet.role != ROLE_SYN;
        if !covers {
            return;
        }
        opener.covered = true;
        if let Some(gap) = opener.gap {
            let gap = &mut self.rows[gap];
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
            self.dsacks[acknowledged].push((packet.ack_u, below, packet.frame));
        }
    }

    /// The D-SACK column of this connection's gaps: a gap ending in a retransmission gets
    /// the first D-SACK within its range after it, where there are at least as many such
    /// D-SACKs as retransmissions of that range from it on (numbers counted by `at`).
    fn note_dsacks(&mut self, at: &Finishing) {
        for gap in &mut self.rows {
            if i64::from(gap.after_kind) != RETRANSMISSION {
                continue;
            }
            let side = gap.after.sender;
            let seq = at.seq(&gap.after);
            let end = seq + i64::from(gap.after.payload_bytes);
            let after = gap.after.frame;
            let within = |value: i64| seq <= value && value < end;
            let acking = 1 - side;
            let reported: Vec<u32> = self.dsacks[usize::from(side)]
                .iter()
                .filter(|(ack_u, below, frame)| {
                    let ack = at.counted(acking, 0, *ack_u).1;
                    within(ack.wrapping_sub(*below)) && *frame > after
                })
                .map(|(_, _, frame)| *frame)
                .collect();
            let again = self.retransmissions[usize::from(side)]
                .iter()
                .filter(|(seq_u, frame)| {
                    within(at.counted(side, *seq_u, NO_ACK).0) && *frame >= after
                })
                .count();
            if !reported.is_empty() && reported.len() >= again {
                gap.dsack_frame = reported.iter().copied().min().unwrap_or(0);
            }
        }
    }

    /// The connection (number `connection`) has ended: its gaps, their values counted by its
    /// finishing values `at`, go to `table`.
    pub fn finish(mut self, connection: u32, at: &Finishing, table: &mut GapTable) {
        self.note_dsacks(at);
        for gap in &self.rows {
            push_gap_row(gap, connection, at, table);
        }
    }
}

/// Gap `gap` of connection `connection`, its values counted by `at`, goes to `table`.
fn push_gap_row(gap: &Gap, connection: u32, at: &Finishing, table: &mut GapTable) {
    let end = |packet: &PacketRow| at.seq(packet) + i64::from(packet.payload_bytes);
    let frame = |packet: &PacketRow| i64::from(packet.frame);
    let maybe = |mark: &Option<PeerMark>, value: &dyn Fn(&PeerMark) -> i64, none: i64| {
        mark.as_ref().map_or(none, value)
    };
    let edge = |mark: &PeerMark| mark.edge(at);
    let mark_frame = |mark: &PeerMark| i64::from(mark.frame);
    let (before, after) = (&gap.before, &gap.after);
    table.connection.push(i64::from(connection));
    table.before_frame.push(frame(before));
    table.after_frame.push(frame(after));
    table.before_time_us.push(before.time_us);
    table.after_time_us.push(after.time_us);
    table
        .before_direction
        .push(i64::from(at.direction(before.sender)));
    table
        .after_direction
        .push(i64::from(at.direction(after.sender)));
    table.before_kind.push(i64::from(gap.before_kind));
    table.after_kind.push(i64::from(gap.after_kind));
    table.after_seq.push(at.seq(after));
    table.after_end.push(end(after));
    table
        .after_payload_bytes
        .push(i64::from(after.payload_bytes));
    table.zero_frame.push(i64::from(gap.zero_frame));
    table.peer_dup_acks.push(i64::from(gap.peer_dup_acks));
    table.peer_dup_frame.push(i64::from(gap.peer_dup_frame));
    table.peer_edge.push(maybe(&gap.peer_edge, &edge, NO_EDGE));
    table
        .peer_edge_frame
        .push(maybe(&gap.peer_edge, &mark_frame, 0));
    table
        .peer_edge_window
        .push(maybe(&gap.peer_edge, &|mark| mark.window_bytes(at), 0));
    table
        .peer_ack
        .push(maybe(&gap.peer_ack, &|mark| mark.ack(at), NO_ACK));
    table
        .peer_ack_frame
        .push(maybe(&gap.peer_ack, &mark_frame, 0));
    table
        .peer_window_before
        .push(maybe(&gap.peer_latest, &|mark| mark.window_bytes(at), -1));
    table.before_end.push(end(before));
    table
        .peer_edge_at_start
        .push(maybe(&gap.peer_latest_at_start, &edge, -1));
    table.after_sent_end.push(
        gap.furthest_sent_u
            .map_or(NO_ACK, |sent_u| at.counted(after.sender, sent_u, NO_ACK).0),
    );
    table.cover_frame.push(i64::from(gap.cover_frame));
    table.cover_time_us.push(gap.cover_time_us);
    table.dsack_frame.push(i64::from(gap.dsack_frame));
}
