//! Application messages (the rules of `nagledetect/events/messages.py`): the data segments one
//! side sends between the other side's data, or between idle gaps of more than a second, found
//! as the segments come; and write bursts, the same cut at gaps of more than a millisecond.
//! Messages are numbered in connection order (a connection's first, then the next
//! connection's...), which is known only at the end; each connection numbers its own from 0
//! meanwhile.

use numpy::IntoPyArray;
use pyo3::prelude::*;
use pyo3::types::PyDict;

use super::segments::SegmentRows;
use crate::flows::Taken;
use crate::flows::tables::FlowTables;

/// A pause longer than this in a connection's data begins a new message.
pub const IDLE_GAP_US: i64 = 1_000_000;
/// ... and a new write burst (`messages.BURST_GAP_US`).
pub const BURST_GAP_US: i64 = 1_000;

/// A message: its connection, its side, its number within the connection and how many
/// segments it holds. A connection's messages follow one another, so its segments, taken in
/// order, are its messages' one after another: the rows are found at the end from the
/// segments' own table (`SegmentRows`), not kept a message at a time.
struct Message {
    connection: u32,
    sender: u8,
    local: u32,
    segments: u32,
}

/// One connection's latest segment, for the cut rules, and its message (an index into
/// `Messages::messages`).
#[derive(Clone, Copy)]
struct Latest {
    sender: usize,
    time_us: i64,
    message: usize,
}

pub struct Messages {
    /// A pause longer than this begins a new message.
    gap_us: i64,
    /// By connection: its latest segment, and how many messages it has begun.
    latest: Vec<Option<Latest>>,
    begun: Vec<u32>,
    messages: Vec<Message>,
}

/// Where the message table stands, to go back to.
#[derive(Clone, Copy)]
pub struct Mark {
    messages: usize,
    connections: usize,
}

impl Messages {
    /// Messages cut at pauses longer than `gap_us`.
    pub fn cut_at(gap_us: i64) -> Messages {
        Messages {
            gap_us,
            latest: Vec::new(),
            begun: Vec::new(),
            messages: Vec::new(),
        }
    }

    /// A new-data segment of `packet`'s connection.
    pub fn segment(&mut self, packet: &Taken) {
        let connection = packet.connection as usize;
        if connection >= self.latest.len() {
            self.latest.resize(connection + 1, None);
            self.begun.resize(connection + 1, 0);
        }
        let continues = self.latest[connection].filter(|latest| {
            latest.sender == packet.sender && packet.time_us - latest.time_us <= self.gap_us
        });
        let message = match continues {
            Some(latest) => latest.message,
            None => {
                self.messages.push(Message {
                    connection: packet.connection,
                    sender: packet.sender as u8,
                    local: self.begun[connection],
                    segments: 0,
                });
                self.begun[connection] += 1;
                self.messages.len() - 1
            }
        };
        self.messages[message].segments += 1;
        self.latest[connection] = Some(Latest {
            sender: packet.sender,
            time_us: packet.time_us,
            message,
        });
    }

    pub fn mark(&self) -> Mark {
        Mark {
            messages: self.messages.len(),
            connections: self.latest.len(),
        }
    }

    pub fn truncate(&mut self, mark: Mark) {
        self.messages.truncate(mark.messages);
        self.latest.truncate(mark.connections);
        self.begun.truncate(mark.connections);
    }

    /// The segments' message numbers (in segment order) and the message table
    /// (`messages.messages`'s columns), numbered in connection order. `segments` are the
    /// segments these messages were cut from, `in_connection_order` their indices in
    /// connection order (`segments::in_connection_order`): the messages, taken in the same
    /// order, take them a run at a time. With `summary_only`, the table has only the columns
    /// the tinygram detector reads of write bursts (`tinygram_flood.BURST_COLUMNS`).
    pub fn into_python<'py>(
        mut self,
        py: Python<'py>,
        segments: &SegmentRows,
        in_connection_order: &[usize],
        flows: &FlowTables,
        summary_only: bool,
    ) -> PyResult<(Vec<i64>, Bound<'py, PyDict>)> {
        let mut first_number = vec![0i64; self.begun.len() + 1];
        for (connection, begun) in self.begun.iter().enumerate() {
            first_number[connection + 1] = first_number[connection] + i64::from(*begun);
        }
        self.messages
            .sort_by_key(|message| (message.connection, message.local));
        let mut numbers = vec![0i64; segments.len()];
        let mut rows = Vec::new();
        let mut columns = MessageColumns {
            summary_only,
            ..MessageColumns::default()
        };
        let mut taken = 0usize;
        for message in &self.messages {
            let number = first_number[message.connection as usize] + i64::from(message.local);
            let run = &in_connection_order[taken..taken + message.segments as usize];
            taken += run.len();
            rows.clear();
            for index in run {
                numbers[*index] = number;
                rows.push(segments.row[*index] as usize);
            }
            columns.push(message, number, &rows, flows);
        }
        Ok((numbers, columns.into_python(py)?))
    }
}

#[derive(Default)]
struct MessageColumns {
    /// Only connection, direction, bytes, packets, mss, median payload and segments needed.
    summary_only: bool,
    message: Vec<i64>,
    connection: Vec<i32>,
    direction: Vec<u8>,
    first_frame: Vec<i64>,
    last_frame: Vec<i64>,
    start_us: Vec<i64>,
    end_us: Vec<i64>,
    bytes: Vec<i64>,
    packets: Vec<i64>,
    wire_segments: Vec<i64>,
    mss: Vec<i64>,
    median_payload_bytes: Vec<f64>,
    segments_needed: Vec<i64>,
    last_segment_full: Vec<bool>,
    odd_segments: Vec<bool>,
}

impl MessageColumns {
    /// Add `message`, numbered `number`, whose segments are the packets at `rows`.
    fn push(&mut self, message: &Message, number: i64, rows: &[usize], flows: &FlowTables) {
        let (Some(&first), Some(&last)) = (rows.first(), rows.last()) else {
            return;
        };
        let connection = message.connection;
        self.connection.push(connection as i32);
        self.direction
            .push(u8::from(message.sender != flows.client(connection)));
        let mut payloads: Vec<i64> = rows.iter().map(|row| flows.payload_bytes(*row)).collect();
        let bytes: i64 = payloads.iter().sum();
        self.bytes.push(bytes);
        self.packets.push(payloads.len() as i64);
        if !self.summary_only {
            self.message.push(number);
            self.first_frame.push(i64::from(flows.frame(first)));
            self.last_frame.push(i64::from(flows.frame(last)));
            self.start_us.push(flows.time_us(first));
            self.end_us.push(flows.time_us(last));
            self.wire_segments.push(
                rows.iter()
                    .map(|row| i64::from(flows.wire_segments(*row)))
                    .sum(),
            );
        }
        payloads.sort_unstable();
        let lower = payloads[(payloads.len() - 1) / 2];
        let upper = payloads[payloads.len() / 2];
        self.median_payload_bytes
            .push((lower as f64 + upper as f64) / 2.0);
        let mss = flows.effective_mss(connection);
        self.mss.push(mss);
        let mss = mss.max(1);
        let needed = (bytes + mss - 1) / mss;
        self.segments_needed.push(needed);
        if !self.summary_only {
            self.last_segment_full.push(bytes % mss == 0);
            self.odd_segments.push(needed % 2 == 1);
        }
    }

    fn into_python(self, py: Python<'_>) -> PyResult<Bound<'_, PyDict>> {
        let table = PyDict::new(py);
        set_columns!(
            table,
            py,
            self,
            connection,
            direction,
            bytes,
            packets,
            mss,
            median_payload_bytes,
            segments_needed
        );
        if !self.summary_only {
            set_columns!(
                table,
                py,
                self,
                message,
                first_frame,
                last_frame,
                start_us,
                end_us,
                wire_segments,
                last_segment_full,
                odd_segments
            );
        }
        Ok(table)
    }
}
