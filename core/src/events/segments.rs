//! Data segments in their context, found as the packets come (the rules of
//! `nagledetect/events/segments.py`): for each new-data segment, the previous new-data segment
//! of its direction, the peer's latest packet before it and next packet after it, its own
//! direction's next data packet, the highest sequence end sent before it, and what came between
//! it and the previous one (the peer's data packets, its own retransmissions). Context packets
//! are named by their row in the packet table; a segment waits for the packets after it only
//! until they come.

use crate::flows::Taken;
use crate::flows::side::{ROLE_DATA, ROLE_OUT_OF_ORDER, ROLE_RETRANSMISSION};

/// No such packet (or no value), as the numpy path marks it.
pub const NONE: i64 = -1;
/// No such packet, in the segments' own columns: rows are held in 32 bits (frame numbers are
/// too, so a pass never has more rows), half the memory of a segment's context.
pub const NO_ROW: u32 = u32::MAX;
/// Nothing sent before the segment, in `sent_max_u`.
pub const NOTHING_SENT: i64 = i64::MIN;

/// One direction's running context.
#[derive(Default)]
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

/// The segments found so far, a column each (rows are packet rows, NO_ROW where none).
#[derive(Default)]
pub struct SegmentRows {
    pub row: Vec<u32>,
    pub connection: Vec<u32>,
    pub sender: Vec<u8>,
    pub previous_data: Vec<u32>,
    pub peer_latest: Vec<u32>,
    pub peer_next: Vec<u32>,
    pub own_next_data: Vec<u32>,
    /// The highest end sent before, counted from the side's first packet (NOTHING_SENT:
    /// nothing sent before).
    pub sent_max_u: Vec<i64>,
    pub peer_data_between: Vec<u32>,
    pub own_retransmissions_between: Vec<u32>,
}

impl SegmentRows {
    pub fn len(&self) -> usize {
        self.row.len()
    }

    /// Keep the first `count` segments.
    pub fn truncate(&mut self, count: usize) {
        self.row.truncate(count);
        self.connection.truncate(count);
        self.sender.truncate(count);
        self.previous_data.truncate(count);
        self.peer_latest.truncate(count);
        self.peer_next.truncate(count);
        self.own_next_data.truncate(count);
        self.sent_max_u.truncate(count);
        self.peer_data_between.truncate(count);
        self.own_retransmissions_between.truncate(count);
    }
}

fn as_row(row: Option<usize>) -> u32 {
    row.map_or(NO_ROW, |row| row as u32)
}

/// The segments' indices in connection order, each connection's in the order they came.
pub fn in_connection_order(segments: &SegmentRows) -> Vec<usize> {
    let mut order: Vec<usize> = (0..segments.len()).collect();
    order.sort_by_key(|index| segments.connection[*index]);
    order
}

/// A row of the segments' columns as the tables give it (NONE where none).
pub fn wide(row: u32) -> i64 {
    if row == NO_ROW { NONE } else { i64::from(row) }
}

/// A column of rows as the tables give it (NONE where none).
pub fn wide_rows(rows: &[u32]) -> Vec<i64> {
    rows.iter().map(|row| wide(*row)).collect()
}

/// Take one packet of a connection whose two directions' context is `sides` (by sender).
pub fn take(sides: &mut [DirectionContext; 2], packet: &Taken, segments: &mut SegmentRows) {
    let own = packet.sender;
    let peer = 1 - own;
    for waiting in sides[peer].awaiting_peer.drain(..) {
        segments.peer_next[waiting] = packet.row as u32;
    }
    let carries_data = packet.payload_bytes > 0;
    if carries_data && let Some(waiting) = sides[own].awaiting_own_data.take() {
        segments.own_next_data[waiting] = packet.row as u32;
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
    segments.row.push(packet.row as u32);
    segments.connection.push(packet.connection);
    segments.sender.push(own as u8);
    segments.previous_data.push(as_row(previous));
    segments.peer_latest.push(as_row(peer_latest));
    segments.peer_next.push(NO_ROW);
    segments.own_next_data.push(NO_ROW);
    segments
        .sent_max_u
        .push(side.max_end_u.unwrap_or(NOTHING_SENT));
    segments.peer_data_between.push(peer_data_between as u32);
    segments
        .own_retransmissions_between
        .push(own_retransmissions_between as u32);
    side.awaiting_peer.push(index);
    side.awaiting_own_data = Some(index);
    side.last_new_data_row = Some(packet.row);
    side.peer_data_at_last_new_data = peer_data_packets;
    side.retransmissions_at_last_new_data = side.retransmissions;
}
