//! The rows the detectors read of the data segments, taken from each segment's context once its
//! connection is finished, so that Python needs no row per segment: the small segments that pass
//! the stall's packet tests (`nagle_stall.untimed_stalls`), the lone segments a pure ACK
//! answered (`delack_timer.answered_lone`, the delayed-ACK samples) and each direction's
//! payload sizes counted (`events/payloads.py`). The rules are the Python ones, which the
//! numpy path and the tests still run; `tests/test_core_flows.py` proves the rows equal.

use super::segments::{NONE, SegmentRows, wide};
use super::tables::{LoneSegments, PayloadCounts, UntimedStalls};
use crate::flows::packets::Finished;
use crate::flows::side::{ROLE_DUP_ACK, ROLE_NONE, ROLE_PURE_ACK, ROLE_WINDOW_UPDATE};

/// A stall of either kind is at least this long: `nagle_stall.MIN_STALL_MS`, the same rule
/// (`tests/test_core_flows.py` compares the rows the two give).
const MIN_STALL_US: i64 = 10_000;
/// Payload sizes are 32-bit: a count's key is its direction key above them.
const SIZE_BITS: u32 = 32;

/// One segment's values as the segment table reads them (NONE where there is no such packet).
struct Segment {
    connection: u32,
    direction: u8,
    frame: i64,
    time_us: i64,
    payload_bytes: i64,
    rel_seq: i64,
    mss: i64,
    sent_max_before: i64,
    previous: i64,
    peer_latest: i64,
    peer_next: i64,
    own_next_data: i64,
    peer_data_between: i64,
    own_retransmissions_between: i64,
}

/// The finished packets read at a context row, NONE (or the "none" role) without one.
struct Context<'a> {
    flows: &'a Finished<'a>,
}

impl Context<'_> {
    fn at(&self, row: i64, read: impl Fn(usize) -> i64) -> i64 {
        if row < 0 { NONE } else { read(row as usize) }
    }

    fn frame(&self, row: i64) -> i64 {
        self.at(row, |row| i64::from(self.flows.frame(row)))
    }

    fn time_us(&self, row: i64) -> i64 {
        self.at(row, |row| self.flows.time_us(row))
    }

    fn payload_bytes(&self, row: i64) -> i64 {
        self.at(row, |row| self.flows.payload_bytes(row))
    }

    fn ack(&self, row: i64) -> i64 {
        self.at(row, |row| self.flows.ack(row))
    }

    fn window_bytes(&self, row: i64) -> i64 {
        self.at(row, |row| self.flows.window_bytes(row))
    }

    fn role(&self, row: i64) -> u8 {
        if row < 0 {
            ROLE_NONE
        } else {
            self.flows.role(row as usize)
        }
    }

    fn segment(&self, connection: u32, segments: &SegmentRows, index: usize) -> Segment {
        let row = wide(segments.rows[index].row);
        Segment {
            connection,
            direction: self.flows.direction(segments.rows[index].sender),
            frame: self.frame(row),
            time_us: self.time_us(row),
            payload_bytes: self.payload_bytes(row),
            rel_seq: self.at(row, |row| self.flows.seq(row)),
            mss: self.flows.effective_mss(),
            sent_max_before: segments.sent_max_before(index, self.flows),
            previous: wide(segments.rows[index].previous_data),
            peer_latest: wide(segments.rows[index].peer_latest),
            peer_next: wide(segments.rows[index].peer_next),
            own_next_data: wide(segments.rows[index].own_next_data),
            peer_data_between: i64::from(segments.rows[index].peer_data_between),
            own_retransmissions_between: i64::from(
                segments.rows[index].own_retransmissions_between,
            ),
        }
    }
}

impl UntimedStalls {
    /// Keep `segment` when it passes: small, after a pure ACK of exactly everything sent that
    /// came after the previous data, starting where that ACK ends, no peer data or own
    /// retransmission since the previous data, an open window, and at least `MIN_STALL_US`
    /// after the previous data.
    fn take(&mut self, at: &Context, segment: &Segment, message: i64) {
        let tail_bytes = segment.payload_bytes % segment.mss.max(1);
        let peer_ack = at.ack(segment.peer_latest);
        let peer_window_bytes = at.window_bytes(segment.peer_latest);
        let peer_time_us = at.time_us(segment.peer_latest);
        let prev_time_us = at.time_us(segment.previous);
        let passed = tail_bytes > 0
            && segment.previous >= 0
            && at.role(segment.peer_latest) == ROLE_PURE_ACK
            && peer_time_us > prev_time_us
            && peer_ack == segment.sent_max_before
            && segment.rel_seq == peer_ack
            && segment.peer_data_between == 0
            && segment.own_retransmissions_between == 0
            && peer_window_bytes > 0
            && segment.time_us - prev_time_us >= MIN_STALL_US;
        if !passed {
            return;
        }
        self.connection.push(segment.connection as i32);
        self.direction.push(segment.direction);
        self.frame.push(segment.frame);
        self.time_us.push(segment.time_us);
        self.payload_bytes.push(segment.payload_bytes);
        self.tail_bytes.push(tail_bytes);
        self.mss.push(segment.mss);
        self.prev_frame.push(at.frame(segment.previous));
        self.prev_time_us.push(prev_time_us);
        self.prev_payload_bytes
            .push(at.payload_bytes(segment.previous));
        self.peer_frame.push(at.frame(segment.peer_latest));
        self.peer_time_us.push(peer_time_us);
        self.peer_window_bytes.push(peer_window_bytes);
        self.message.push(message);
    }
}

impl LoneSegments {
    /// Keep `segment` when everything before it was acknowledged when it left, its window was
    /// not filled by it, and the peer's next packet, a pure ACK (or a duplicate or a window
    /// update) covering it, came before its sender's next data.
    fn take(&mut self, at: &Context, segment: &Segment) {
        let end_seq = segment.rel_seq + segment.payload_bytes;
        let peer_ack = at.ack(segment.peer_latest);
        let next_peer_time_us = at.time_us(segment.peer_next);
        let next_own_us = at.time_us(segment.own_next_data);
        let answered = peer_ack >= segment.rel_seq
            && end_seq - peer_ack < at.window_bytes(segment.peer_latest)
            && matches!(
                at.role(segment.peer_next),
                ROLE_PURE_ACK | ROLE_DUP_ACK | ROLE_WINDOW_UPDATE
            )
            && at.ack(segment.peer_next) >= end_seq
            && (next_own_us < 0 || next_own_us > next_peer_time_us);
        if !answered {
            return;
        }
        self.connection.push(segment.connection as i32);
        self.direction.push(segment.direction);
        self.frame.push(segment.frame);
        self.time_us.push(segment.time_us);
        self.next_peer_frame.push(at.frame(segment.peer_next));
        self.next_peer_time_us.push(next_peer_time_us);
    }
}

/// The detectors' rows of a finished connection (number `connection`): its stall candidates,
/// its lone answered segments and its payload sizes counted, read from its segments (with
/// `message`, each one's message number within the connection) and finished packets.
pub fn detector_rows(
    connection: u32,
    segments: &SegmentRows,
    message: &[i64],
    flows: &Finished,
    tables: (&mut UntimedStalls, &mut LoneSegments, &mut PayloadCounts),
) {
    let (untimed, lone, payload_counts) = tables;
    let at = Context { flows };
    let mut keyed_sizes = Vec::with_capacity(segments.len());
    for (index, message) in message.iter().enumerate() {
        let segment = at.segment(connection, segments, index);
        untimed.take(&at, &segment, *message);
        lone.take(&at, &segment);
        let key = i64::from(segment.connection) * 2 + i64::from(segment.direction);
        keyed_sizes.push((key << SIZE_BITS) | segment.payload_bytes);
    }
    count_payloads(keyed_sizes, payload_counts);
}

/// How often each (direction key, payload size) occurs, sorted by key, then size.
fn count_payloads(mut keyed_sizes: Vec<i64>, table: &mut PayloadCounts) {
    keyed_sizes.sort_unstable();
    for (index, keyed) in keyed_sizes.iter().enumerate() {
        if index > 0 && keyed_sizes[index - 1] == *keyed {
            *table.count.last_mut().expect("a count for the run") += 1;
            continue;
        }
        table.key.push(keyed >> SIZE_BITS);
        table.size.push(keyed & ((1 << SIZE_BITS) - 1));
        table.count.push(1);
    }
}
