//! Application messages (the rules of `nagledetect/events/messages.py`): the data segments one
//! side sends between the other side's data, or between idle gaps of more than a second, found
//! as the segments come; and write bursts, the same cut at gaps of more than a millisecond.
//! A connection numbers its own messages from 0; the run's numbers (in connection order) are
//! given when the tables are handed over (`tables::Found`).

use super::tables::{MessageDetails, MessageSizes};
use crate::flows::Taken;
use crate::flows::packets::Finished;

/// A pause longer than this in a connection's data begins a new message.
pub const IDLE_GAP_US: i64 = 1_000_000;
/// ... and a new write burst (`messages.BURST_GAP_US`).
pub const BURST_GAP_US: i64 = 1_000;

/// A message: its side and how many segments it holds. A connection's messages follow one
/// another, so its segments, taken in order, are its messages' one after another: their rows
/// are found at the end from the connection's segments, not kept a message at a time.
#[derive(Clone)]
struct Message {
    sender: u8,
    segments: u32,
}

/// One connection's messages (or write bursts).
#[derive(Clone)]
pub struct ConnectionMessages {
    /// A pause longer than this begins a new message.
    gap_us: i64,
    /// The latest segment's sender and time.
    latest: Option<(usize, i64)>,
    messages: Vec<Message>,
}

/// A message's row of `table`: its direction, its sizes and the MSS; its bytes and the
/// segments they need, which the message table reads again.
fn push_sizes(
    table: &mut MessageSizes,
    connection: u32,
    (message, rows): (&Message, &[usize]),
    flows: &Finished,
) -> (i64, i64) {
    let mut payloads: Vec<i64> = rows.iter().map(|row| flows.payload_bytes(*row)).collect();
    let bytes: i64 = payloads.iter().sum();
    payloads.sort_unstable();
    let lower = payloads[(payloads.len() - 1) / 2];
    let upper = payloads[payloads.len() / 2];
    let mss = flows.effective_mss();
    table.connection.push(connection as i32);
    table.direction.push(flows.direction(message.sender));
    table.bytes.push(bytes);
    table.packets.push(payloads.len() as i64);
    table.mss.push(mss);
    table
        .median_payload_bytes
        .push((lower as f64 + upper as f64) / 2.0);
    let needed = (bytes + mss.max(1) - 1) / mss.max(1);
    table.segments_needed.push(needed);
    (bytes, needed)
}

impl ConnectionMessages {
    /// Messages cut at pauses longer than `gap_us`.
    pub fn cut_at(gap_us: i64) -> ConnectionMessages {
        ConnectionMessages {
            gap_us,
            latest: None,
            messages: Vec::new(),
        }
    }

    /// A new-data segment of the connection.
    pub fn segment(&mut self, packet: &Taken) {
        let continues = self.latest.is_some_and(|(sender, time_us)| {
            sender == packet.sender && packet.time_us - time_us <= self.gap_us
        });
        if !continues {
            self.messages.push(Message {
                sender: packet.sender as u8,
                segments: 0,
            });
        }
        if let Some(message) = self.messages.last_mut() {
            message.segments += 1;
        }
        self.latest = Some((packet.sender, packet.time_us));
    }

    pub fn count(&self) -> u32 {
        self.messages.len() as u32
    }

    /// Each segment's message number within the connection (the segments in order).
    pub fn numbers(&self) -> Vec<i64> {
        let mut numbers = Vec::new();
        for (number, message) in self.messages.iter().enumerate() {
            numbers.extend(std::iter::repeat_n(
                number as i64,
                message.segments as usize,
            ));
        }
        numbers
    }

    /// Each message with the packet rows of its segments (`rows`: the connection's segments'
    /// rows, in order).
    fn with_rows<'a>(
        &'a self,
        rows: &'a [usize],
    ) -> impl Iterator<Item = (&'a Message, &'a [usize])> {
        let mut taken = 0usize;
        self.messages.iter().map(move |message| {
            let run = &rows[taken..taken + message.segments as usize];
            taken += run.len();
            (message, run)
        })
    }

    /// The connection (number `connection`) has ended: its messages go to `sizes` and
    /// `details` (`rows`: its segments' packet rows, in order).
    pub fn finish_messages(
        &self,
        connection: u32,
        rows: &[usize],
        flows: &Finished,
        (sizes, details): (&mut MessageSizes, &mut MessageDetails),
    ) {
        for (number, (message, rows)) in self.with_rows(rows).enumerate() {
            let (bytes, needed) = push_sizes(sizes, connection, (message, rows), flows);
            let (first, last) = (rows[0], rows[rows.len() - 1]);
            details.message.push(number as i64);
            details.first_frame.push(i64::from(flows.frame(first)));
            details.last_frame.push(i64::from(flows.frame(last)));
            details.start_us.push(flows.time_us(first));
            details.end_us.push(flows.time_us(last));
            details.wire_segments.push(
                rows.iter()
                    .map(|row| i64::from(flows.wire_segments(*row)))
                    .sum(),
            );
            let mss = flows.effective_mss().max(1);
            details.last_segment_full.push(bytes % mss == 0);
            details.odd_segments.push(needed % 2 == 1);
        }
    }

    /// The connection (number `connection`) has ended: its write bursts go to `sizes`.
    pub fn finish_bursts(
        &self,
        connection: u32,
        rows: &[usize],
        flows: &Finished,
        sizes: &mut MessageSizes,
    ) {
        for message in self.with_rows(rows) {
            push_sizes(sizes, connection, message, flows);
        }
    }
}
