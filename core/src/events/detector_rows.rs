//! The rows the detectors read of the data segments, taken from each segment's context once the
//! tables are finished, so that Python needs no row per segment: the small segments that pass
//! the stall's packet tests (`nagle_stall.untimed_stalls`), the lone segments a pure ACK
//! answered (`delack_timer.answered_lone`, the delayed-ACK samples) and each direction's
//! payload sizes counted (`events/payloads.py`). The rules are the Python ones, which the
//! numpy path and the tests still run; `tests/test_core_flows.py` proves the rows equal.

use numpy::IntoPyArray;
use pyo3::prelude::*;
use pyo3::types::PyDict;

use super::segments::{NONE, SegmentRows, wide};
use crate::flows::side::{ROLE_DUP_ACK, ROLE_NONE, ROLE_PURE_ACK, ROLE_WINDOW_UPDATE};
use crate::flows::tables::FlowTables;

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

/// The finished tables read at a context row, NONE (or the "none" role) without one.
struct Context<'a> {
    flows: &'a FlowTables,
}

impl Context<'_> {
    fn at(&self, row: i64, read: impl Fn(&FlowTables, usize) -> i64) -> i64 {
        if row < 0 {
            NONE
        } else {
            read(self.flows, row as usize)
        }
    }

    fn frame(&self, row: i64) -> i64 {
        self.at(row, |flows, row| i64::from(flows.frame(row)))
    }

    fn time_us(&self, row: i64) -> i64 {
        self.at(row, FlowTables::time_us)
    }

    fn payload_bytes(&self, row: i64) -> i64 {
        self.at(row, FlowTables::payload_bytes)
    }

    fn ack(&self, row: i64) -> i64 {
        self.at(row, FlowTables::ack)
    }

    fn window_bytes(&self, row: i64) -> i64 {
        self.at(row, FlowTables::window_bytes)
    }

    fn role(&self, row: i64) -> u8 {
        if row < 0 {
            ROLE_NONE
        } else {
            self.flows.role(row as usize)
        }
    }

    fn segment(&self, segments: &SegmentRows, sent_max_before: i64, index: usize) -> Segment {
        let row = wide(segments.row[index]);
        let connection = segments.connection[index];
        Segment {
            connection,
            direction: self.flows.direction(connection, segments.sender[index]),
            frame: self.frame(row),
            time_us: self.time_us(row),
            payload_bytes: self.payload_bytes(row),
            rel_seq: self.at(row, FlowTables::seq),
            mss: self.flows.effective_mss(connection),
            sent_max_before,
            previous: wide(segments.previous_data[index]),
            peer_latest: wide(segments.peer_latest[index]),
            peer_next: wide(segments.peer_next[index]),
            own_next_data: wide(segments.own_next_data[index]),
            peer_data_between: i64::from(segments.peer_data_between[index]),
            own_retransmissions_between: i64::from(segments.own_retransmissions_between[index]),
        }
    }
}

/// The small segments that passed the stall's packet tests (`UNTIMED_STALL_COLUMNS`).
#[derive(Default)]
struct UntimedStalls {
    connection: Vec<i32>,
    direction: Vec<u8>,
    frame: Vec<i64>,
    time_us: Vec<i64>,
    payload_bytes: Vec<i64>,
    tail_bytes: Vec<i64>,
    mss: Vec<i64>,
    prev_frame: Vec<i64>,
    prev_time_us: Vec<i64>,
    prev_payload_bytes: Vec<i64>,
    peer_frame: Vec<i64>,
    peer_time_us: Vec<i64>,
    peer_window_bytes: Vec<i64>,
    message: Vec<i64>,
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

    fn into_python(self, py: Python<'_>) -> PyResult<Bound<'_, PyDict>> {
        let table = PyDict::new(py);
        set_columns!(
            table,
            py,
            self,
            connection,
            direction,
            frame,
            time_us,
            payload_bytes,
            tail_bytes,
            mss,
            prev_frame,
            prev_time_us,
            prev_payload_bytes,
            peer_frame,
            peer_time_us,
            peer_window_bytes,
            message
        );
        Ok(table)
    }
}

/// The lone segments a pure ACK answered (`LONE_SEGMENT_COLUMNS`).
#[derive(Default)]
struct LoneSegments {
    connection: Vec<i32>,
    direction: Vec<u8>,
    frame: Vec<i64>,
    time_us: Vec<i64>,
    next_peer_frame: Vec<i64>,
    next_peer_time_us: Vec<i64>,
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

    fn into_python(self, py: Python<'_>) -> PyResult<Bound<'_, PyDict>> {
        let table = PyDict::new(py);
        set_columns!(
            table,
            py,
            self,
            connection,
            direction,
            frame,
            time_us,
            next_peer_frame,
            next_peer_time_us
        );
        Ok(table)
    }
}

/// The detectors' rows as dicts of numpy arrays.
pub struct DetectorRows<'py> {
    pub untimed_stalls: Bound<'py, PyDict>,
    pub lone_segments: Bound<'py, PyDict>,
    pub payload_counts: Bound<'py, PyDict>,
}

/// The detectors' rows of every segment; `sent_max_before` and `message` are the segments'
/// columns of those names.
pub fn detector_rows<'py>(
    py: Python<'py>,
    segments: &SegmentRows,
    sent_max_before: &[i64],
    message: &[i64],
    flows: &FlowTables,
) -> PyResult<DetectorRows<'py>> {
    let at = Context { flows };
    let mut untimed = UntimedStalls::default();
    let mut lone = LoneSegments::default();
    let mut keyed_sizes = Vec::with_capacity(segments.len());
    for index in 0..segments.len() {
        let segment = at.segment(segments, sent_max_before[index], index);
        untimed.take(&at, &segment, message[index]);
        lone.take(&at, &segment);
        let key = i64::from(segment.connection) * 2 + i64::from(segment.direction);
        keyed_sizes.push((key << SIZE_BITS) | segment.payload_bytes);
    }
    Ok(DetectorRows {
        untimed_stalls: untimed.into_python(py)?,
        lone_segments: lone.into_python(py)?,
        payload_counts: payload_counts(py, keyed_sizes)?,
    })
}

/// How often each (direction key, payload size) occurs, sorted by key, then size
/// (`payloads.PayloadCounts`'s columns).
fn payload_counts(py: Python<'_>, mut keyed_sizes: Vec<i64>) -> PyResult<Bound<'_, PyDict>> {
    keyed_sizes.sort_unstable();
    let (mut key, mut size, mut count) = (Vec::new(), Vec::new(), Vec::<i64>::new());
    for (index, keyed) in keyed_sizes.iter().enumerate() {
        if index > 0 && keyed_sizes[index - 1] == *keyed {
            *count.last_mut().expect("a count for the run") += 1;
            continue;
        }
        key.push(keyed >> SIZE_BITS);
        size.push(keyed & ((1 << SIZE_BITS) - 1));
        count.push(1);
    }
    let table = PyDict::new(py);
    table.set_item("key", key.into_pyarray(py))?;
    table.set_item("size", size.into_pyarray(py))?;
    table.set_item("count", count.into_pyarray(py))?;
    Ok(table)
}
