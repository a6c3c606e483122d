//! Application messages (the rules of `nagledetect/events/messages.py`): the data segments one
//! side sends between the other side's data, or between idle gaps of more than a second, found
//! as the segments come; and write bursts, the same cut at gaps of more than a millisecond.
//! A connection numbers its own messages from 0; the run's numbers (in connection order) are
//! given when the tables are handed over (`tables::Found`).

use super::counts::Counts;
use super::tables::{MessageDetails, MessageSizes};
use crate::flows::Taken;
use crate::flows::packets::Finished;

/// A pause longer than this in a connection's data begins a new message.
pub const IDLE_GAP_US: i64 = 1_000_000;
/// ... and a new write burst (`messages.BURST_GAP_US`).
pub const BURST_GAP_US: i64 = 1_000;

/// A message: its side, and how many of its segments are held. A connection's messages follow
/// one another, so its held segments, taken in order, are its messages' one after another:
/// their rows are found from the connection's segments, not kept a message at a time. Where a
/// long connection's events are finished as it goes, the part of a message whose segments were
/// let go is kept counted (`Counted`).
#[derive(Clone)]
struct Message {
    sender: u8,
    segments: u32,
    counted: Option<Box<Counted>>,
}

/// What a message's segments already let go tell.
#[derive(Clone, Default)]
struct Counted {
    first_frame: u32,
    start_us: i64,
    last_frame: u32,
    end_us: i64,
    bytes: i64,
    wire_segments: i64,
    /// The payload sizes and how often each came.
    sizes: Counts,
}

impl Counted {
    fn packets(&self) -> u64 {
        self.sizes.total()
    }

    /// Count the message's segments at `rows` (the first it held; one at least).
    fn take(&mut self, rows: &[usize], flows: &Finished) {
        let (Some(first), Some(last)) = (rows.first(), rows.last()) else {
            return;
        };
        if self.sizes.is_empty() {
            self.first_frame = flows.frame(*first);
            self.start_us = flows.time_us(*first);
        }
        self.last_frame = flows.frame(*last);
        self.end_us = flows.time_us(*last);
        let payloads = sorted_payloads(rows, flows);
        self.bytes += payloads.iter().sum::<i64>();
        self.wire_segments += wire_segments(rows, flows);
        self.sizes.add_sorted(&payloads);
    }
}

/// The payloads of the segments at `rows`, sorted.
fn sorted_payloads(rows: &[usize], flows: &Finished) -> Vec<i64> {
    let mut payloads = Vec::new();
    sort_payloads_into(rows, flows, &mut payloads);
    payloads
}

/// The payloads of the segments at `rows`, sorted, in `payloads` (emptied first): one vector
/// serves a connection's messages one after another, rather than one allocated for each.
fn sort_payloads_into(rows: &[usize], flows: &Finished, payloads: &mut Vec<i64>) {
    payloads.clear();
    payloads.extend(rows.iter().map(|row| flows.payload_bytes(*row)));
    payloads.sort_unstable();
}

fn wire_segments(rows: &[usize], flows: &Finished) -> i64 {
    rows.iter()
        .map(|row| i64::from(flows.wire_segments(*row)))
        .sum()
}

/// The `k`th smallest (from 0) of the values `sorted` and those `counted` (by size) together.
fn kth_smallest(sorted: &[i64], counted: &[(i64, u64)], k: u64) -> i64 {
    let mut taken = 0u64;
    let mut next = 0usize;
    for (size, seen) in counted {
        let smaller = sorted[next..].partition_point(|value| value < size);
        if k < taken + smaller as u64 {
            return sorted[next + (k - taken) as usize];
        }
        taken += smaller as u64;
        next += smaller;
        if k < taken + seen {
            return *size;
        }
        taken += seen;
    }
    sorted[next + (k - taken) as usize]
}

/// One connection's messages (or write bursts).
#[derive(Clone)]
pub struct ConnectionMessages {
    /// A pause longer than this begins a new message.
    gap_us: i64,
    /// The latest segment's sender and time.
    latest: Option<(usize, i64)>,
    /// How many of its messages were finished as it went (they come before `messages`).
    finished: u32,
    messages: Vec<Message>,
}

/// What a message is, whole: its held segments' rows and the part of it let go.
struct Whole<'a> {
    message: &'a Message,
    rows: &'a [usize],
}

impl Whole<'_> {
    fn counted(&self) -> Option<&Counted> {
        self.message.counted.as_deref()
    }

    fn first(&self, flows: &Finished) -> (u32, i64) {
        match (self.counted(), self.rows.first()) {
            (Some(counted), _) => (counted.first_frame, counted.start_us),
            (None, Some(row)) => (flows.frame(*row), flows.time_us(*row)),
            (None, None) => (0, 0),
        }
    }

    fn last(&self, flows: &Finished) -> (u32, i64) {
        match (self.rows.last(), self.counted()) {
            (Some(row), _) => (flows.frame(*row), flows.time_us(*row)),
            (None, Some(counted)) => (counted.last_frame, counted.end_us),
            (None, None) => (0, 0),
        }
    }

    fn wire_segments(&self, flows: &Finished) -> i64 {
        self.counted().map_or(0, |counted| counted.wire_segments) + wire_segments(self.rows, flows)
    }
}

/// A message's row of `table`: its direction, its sizes and the MSS; its bytes and the
/// segments they need, which the message table reads again. `payloads` is room to sort its
/// payloads in.
fn push_sizes(
    (table, payloads): (&mut MessageSizes, &mut Vec<i64>),
    connection: u32,
    message: &Whole,
    flows: &Finished,
) -> (i64, i64) {
    sort_payloads_into(message.rows, flows, payloads);
    let counted = message.counted();
    let bytes = payloads.iter().sum::<i64>() + counted.map_or(0, |counted| counted.bytes);
    let packets = payloads.len() as u64 + counted.map_or(0, Counted::packets);
    let sizes = counted.map_or(&[][..], |counted| counted.sizes.as_slice());
    let lower = kth_smallest(payloads, sizes, (packets - 1) / 2);
    let upper = kth_smallest(payloads, sizes, packets / 2);
    let mss = flows.effective_mss();
    table.connection.push(connection as i32);
    table
        .direction
        .push(flows.direction(message.message.sender));
    table.bytes.push(bytes);
    table.packets.push(packets as i64);
    table.mss.push(mss);
    table
        .median_payload_bytes
        .push((lower as f64 + upper as f64) / 2.0);
    let needed = (bytes + mss.max(1) - 1) / mss.max(1);
    table.segments_needed.push(needed);
    (bytes, needed)
}

/// A message's rows of `sizes` and `details` (numbered `number` within its connection;
/// `payloads` as in `push_sizes`).
fn push_message(
    (sizes, details, payloads): (&mut MessageSizes, &mut MessageDetails, &mut Vec<i64>),
    (connection, number): (u32, u32),
    message: &Whole,
    flows: &Finished,
) {
    let (bytes, needed) = push_sizes((sizes, payloads), connection, message, flows);
    let (first_frame, start_us) = message.first(flows);
    let (last_frame, end_us) = message.last(flows);
    details.message.push(i64::from(number));
    details.first_frame.push(i64::from(first_frame));
    details.last_frame.push(i64::from(last_frame));
    details.start_us.push(start_us);
    details.end_us.push(end_us);
    details.wire_segments.push(message.wire_segments(flows));
    let mss = flows.effective_mss().max(1);
    details.last_segment_full.push(bytes % mss == 0);
    details.odd_segments.push(needed % 2 == 1);
}

impl ConnectionMessages {
    /// Messages cut at pauses longer than `gap_us`.
    pub fn cut_at(gap_us: i64) -> ConnectionMessages {
        ConnectionMessages {
            gap_us,
            latest: None,
            finished: 0,
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
                counted: None,
            });
        }
        if let Some(message) = self.messages.last_mut() {
            message.segments += 1;
        }
        self.latest = Some((packet.sender, packet.time_us));
    }

    pub fn count(&self) -> u32 {
        self.finished + self.messages.len() as u32
    }

    /// Each held segment's message number within the connection (the segments in order).
    pub fn numbers(&self) -> Vec<i64> {
        let mut numbers = Vec::new();
        for (at, message) in self.messages.iter().enumerate() {
            let number = i64::from(self.finished) + at as i64;
            numbers.extend(std::iter::repeat_n(number, message.segments as usize));
        }
        numbers
    }

    /// Each held message, whole (`rows`: the connection's held segments' rows, in order).
    fn wholes<'a>(&'a self, rows: &'a [usize]) -> impl Iterator<Item = Whole<'a>> {
        let mut taken = 0usize;
        self.messages.iter().map(move |message| {
            let held = &rows[taken..taken + message.segments as usize];
            taken += held.len();
            Whole {
                message,
                rows: held,
            }
        })
    }

    /// The connection (number `connection`) has ended: its messages go to `sizes` and
    /// `details` (`rows`: its held segments' packet rows, in order).
    pub fn finish_messages(
        &self,
        connection: u32,
        rows: &[usize],
        flows: &Finished,
        (sizes, details): (&mut MessageSizes, &mut MessageDetails),
    ) {
        let payloads = &mut Vec::new();
        for (at, message) in self.wholes(rows).enumerate() {
            let number = self.finished + at as u32;
            let tables = (&mut *sizes, &mut *details, &mut *payloads);
            push_message(tables, (connection, number), &message, flows);
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
        let payloads = &mut Vec::new();
        for message in self.wholes(rows) {
            push_sizes((&mut *sizes, &mut *payloads), connection, &message, flows);
        }
    }

    /// The connection's first held segments (their rows `rows`) are let go as it goes on: the
    /// messages wholly among them, but the latest, are finished to `sizes` (and `details`,
    /// for messages); the rest of them is counted in its message.
    pub fn let_go(
        &mut self,
        connection: u32,
        rows: &[usize],
        flows: &Finished,
        (sizes, mut details): (&mut MessageSizes, Option<&mut MessageDetails>),
    ) {
        let mut taken = 0usize;
        let mut ended = 0usize;
        let count = self.messages.len();
        let payloads = &mut Vec::new();
        for (at, message) in self.messages.iter_mut().enumerate() {
            let held = message.segments as usize;
            let latest = at + 1 == count;
            if taken + held <= rows.len() && !latest {
                let whole = Whole {
                    message,
                    rows: &rows[taken..taken + held],
                };
                match details.as_deref_mut() {
                    Some(details) => {
                        let number = self.finished + at as u32;
                        let tables = (&mut *sizes, details, &mut *payloads);
                        push_message(tables, (connection, number), &whole, flows);
                    }
                    None => {
                        push_sizes((&mut *sizes, &mut *payloads), connection, &whole, flows);
                    }
                }
                taken += held;
                ended += 1;
                continue;
            }
            let part = &rows[taken..rows.len().min(taken + held)];
            if !part.is_empty() {
                message
                    .counted
                    .get_or_insert_with(Box::default)
                    .take(part, flows);
                message.segments -= part.len() as u32;
            }
            break;
        }
        self.messages.drain(..ended);
        self.finished += ended as u32;
    }
}
