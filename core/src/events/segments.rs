//! Data segments in their context, found as the packets come (the rules of
//! `nagledetect/events/segments.py`): for each new-data segment, the previous new-data segment
//! of its direction, the peer's latest packet before it and next packet after it, its own
//! direction's next data packet, the highest sequence end sent before it, and what came between
//! it and the previous one (the peer's data packets, its own retransmissions). Context packets
//! are named by their row among the connection's packets; a segment waits for the packets
//! after it only until they come.

use super::detector_rows::LoneCandidate;
use super::tables::SegmentContext;
use crate::flows::Taken;
use crate::flows::packets::{ConnectionPackets, Finished};
use crate::flows::side::{ROLE_DATA, ROLE_OUT_OF_ORDER, ROLE_RETRANSMISSION};

/// No such packet (or no value), as the numpy path marks it.
pub const NONE: i64 = -1;
/// No such packet, in the segments' own columns: rows are held in 32 bits (frame numbers are
/// too, so a pass never has more rows), half the memory of a segment's context.
pub const NO_ROW: u32 = u32::MAX;
/// Nothing sent before the segment, in `sent_max_u`.
pub const NOTHING_SENT: i64 = i64::MIN;

/// One direction's running context.
#[derive(Clone, Default)]
pub struct DirectionContext {
    latest_row: Option<usize>,
    last_new_data_row: Option<usize>,
    /// The highest sequence end (payload only) sent so far, counted from the side's first.
    max_end_u: Option<i64>,
    data_packets: i64,
    retransmissions: i64,
    /// The peer's data packets and this side's retransmissions when the last new-data segment
    /// was sent.
    peer_data_at_last_new_data: i64,
    retransmissions_at_last_new_data: i64,
    /// Segments (by index) waiting for the peer's next packet, and the one waiting for this
    /// side's next data packet.
    awaiting_peer: Vec<usize>,
    awaiting_own_data: Option<usize>,
}

/// A segment in its context: packets named by their rows among the connection's packets
/// (NO_ROW where none).
#[derive(Clone)]
pub struct SegmentRow {
    /// The highest end sent before, counted from the side's first packet (NOTHING_SENT:
    /// nothing sent before).
    pub sent_max_u: i64,
    pub row: u32,
    pub previous_data: u32,
    pub peer_latest: u32,
    pub peer_next: u32,
    pub own_next_data: u32,
    pub peer_data_between: u32,
    pub own_retransmissions_between: u32,
    pub sender: u8,
}

/// A connection's segments found so far and held: a long connection's segments may be
/// finished as it goes and let go (`let_go_all`), but for the lone segments still waiting for
/// the packets that tell whether they were answered (`waiting`); segments keep their numbers.
#[derive(Clone, Default)]
pub struct SegmentRows {
    pub rows: Vec<SegmentRow>,
    /// The number of the first held.
    first: usize,
    /// Segments let go that wait for their context, by number.
    pub waiting: Vec<LoneCandidate>,
}

impl SegmentRows {
    /// How many segments the connection has had.
    pub fn len(&self) -> usize {
        self.first + self.rows.len()
    }

    /// Segment `index`'s peer's next packet is at row `row`.
    fn peer_next(&mut self, index: usize, row: usize) {
        if let Some(at) = index.checked_sub(self.first) {
            self.rows[at].peer_next = row as u32;
        } else if let Some(waiting) = self.waiting_mut(index) {
            waiting.peer_next = row as u32;
        }
    }

    /// Segment `index`'s side's next data packet is at row `row`.
    fn own_next_data(&mut self, index: usize, row: usize) {
        if let Some(at) = index.checked_sub(self.first) {
            self.rows[at].own_next_data = row as u32;
        } else if let Some(waiting) = self.waiting_mut(index) {
            waiting.own_next_data = row as u32;
        }
    }

    fn waiting_mut(&mut self, index: usize) -> Option<&mut LoneCandidate> {
        let at = self
            .waiting
            .binary_search_by_key(&index, |waiting| waiting.index)
            .ok()?;
        Some(&mut self.waiting[at])
    }

    /// Whether segment `index` is held or waits.
    fn awaits_context(&self, index: usize) -> bool {
        index >= self.first
            || self
                .waiting
                .binary_search_by_key(&index, |waiting| waiting.index)
                .is_ok()
    }

    /// Let go of every held segment (`waiting` keeps what still waits for its context), and
    /// of what `sides` wait for among them no longer.
    pub fn let_go_all(&mut self, sides: &mut [DirectionContext; 2]) {
        self.first += self.rows.len();
        self.rows = Vec::new();
        for side in sides.iter_mut() {
            side.awaiting_peer
                .retain(|index| self.awaits_context(*index));
            side.awaiting_own_data = side
                .awaiting_own_data
                .filter(|index| self.awaits_context(*index));
        }
    }

    /// The highest sequence end sent before held segment `index` (counted among the held),
    /// counted from the ISN (NONE: nothing sent before).
    pub fn sent_max_before(&self, index: usize, flows: &Finished) -> i64 {
        let sent = self.rows[index].sent_max_u;
        if sent == NOTHING_SENT {
            NONE
        } else {
            (sent + flows.seq_offset(self.rows[index].sender)).max(NONE)
        }
    }

    /// The connection (number `connection`) has ended: its segments in context go to `table`,
    /// their packets named by their rows of the run's packet table (`packets.table_row`);
    /// `message` is each segment's message number within the connection.
    pub fn finish_context(
        &self,
        connection: u32,
        flows: &Finished,
        packets: &ConnectionPackets,
        message: &[i64],
        table: &mut SegmentContext,
    ) {
        let table_row = |row: u32| {
            if row == NO_ROW {
                NONE
            } else {
                i64::from(packets.table_row(row as usize))
            }
        };
        for (index, (segment, message)) in self.rows.iter().zip(message).enumerate() {
            table.row.push(table_row(segment.row));
            table.previous_data.push(table_row(segment.previous_data));
            table.peer_latest.push(table_row(segment.peer_latest));
            table.peer_next.push(table_row(segment.peer_next));
            table.own_next_data.push(table_row(segment.own_next_data));
            table
                .sent_max_before
                .push(self.sent_max_before(index, flows));
            table
                .peer_data_between
                .push(i64::from(segment.peer_data_between));
            table
                .own_retransmissions_between
                .push(i64::from(segment.own_retransmissions_between));
            table.message.push(*message);
            table.connection.push(connection);
        }
    }
}

impl DirectionContext {
    /// The packet rows the next segments may read as context.
    pub fn rows_read(&self) -> impl Iterator<Item = usize> {
        self.latest_row.into_iter().chain(self.last_new_data_row)
    }
}

fn as_row(row: Option<usize>) -> u32 {
    row.map_or(NO_ROW, |row| row as u32)
}

/// A row of the segments' columns as the tables give it (NONE where none).
pub fn wide(row: u32) -> i64 {
    if row == NO_ROW { NONE } else { i64::from(row) }
}

/// Take one packet of a connection whose two directions' context is `sides` (by sender).
pub fn take(sides: &mut [DirectionContext; 2], packet: &Taken, segments: &mut SegmentRows) {
    let own = packet.sender;
    let peer = 1 - own;
    for waiting in sides[peer].awaiting_peer.drain(..) {
        segments.peer_next(waiting, packet.row);
    }
    let carries_data = packet.payload_bytes > 0;
    if carries_data && let Some(waiting) = sides[own].awaiting_own_data.take() {
        segments.own_next_data(waiting, packet.row);
    }
    if packet.role == ROLE_DATA && carries_data {
        new_data_segment(sides, packet, segments);
    }
    let side = &mut sides[own];
    if carries_data {
        side.data_packets += 1;
    }
    if packet.role == ROLE_RETRANSMISSION || packet.role == ROLE_OUT_OF_ORDER {
        side.retransmissions += 1;
    }
    let end_u = packet.seq_u + i64::from(packet.payload_bytes);
    side.max_end_u = Some(side.max_end_u.map_or(end_u, |max_end| max_end.max(end_u)));
    side.latest_row = Some(packet.row);
}

fn new_data_segment(sides: &mut [DirectionContext; 2], packet: &Taken, segments: &mut SegmentRows) {
    let own = packet.sender;
    let peer_data_packets = sides[1 - own].data_packets;
    let peer_latest = sides[1 - own].latest_row;
    let side = &mut sides[own];
    let previous = side.last_new_data_row;
    let (peer_data_between, own_retransmissions_between) = match previous {
        Some(_) => (
            peer_data_packets - side.peer_data_at_last_new_data,
            side.retransmissions - side.retransmissions_at_last_new_data,
        ),
        None => (peer_data_packets, 0),
    };
    let index = segments.len();
    segments.rows.push(SegmentRow {
        sent_max_u: side.max_end_u.unwrap_or(NOTHING_SENT),
        row: packet.row as u32,
        previous_data: as_row(previous),
        peer_latest: as_row(peer_latest),
        peer_next: NO_ROW,
        own_next_data: NO_ROW,
        peer_data_between: peer_data_between as u32,
        own_retransmissions_between: own_retransmissions_between as u32,
        sender: own as u8,
    });
    side.awaiting_peer.push(index);
    side.awaiting_own_data = Some(index);
    side.last_new_data_row = Some(packet.row);
    side.peer_data_at_last_new_data = peer_data_packets;
    side.retransmissions_at_last_new_data = side.retransmissions;
}
