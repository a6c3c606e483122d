//! The smallest lag from a side's data segment to the first of the peer's ACKs that covers it,
//! by the rule of `nagledetect/flows/vantage.py` (`AckLags`), a packet at a time.
//!
//! A segment's covering ACK is the first of the peer's ACKs, in file order, whose running
//! highest ACK reaches the segment's end; its lag counts when it is neither negative nor longer
//! than a receiver may hold an ACK. A segment not covered yet waits for the ACK that raises the
//! highest ACK past its end; one covered already looks it up among the ACKs that raised it.
//! Memory follows what is in flight, not the connection: an ACK that raised the highest ACK is
//! kept only while a packet still to come may lie at or before its time (a capture's clock
//! steps back, between packets of two interfaces or CPUs, by far less than `CLOCK_STEP_BACK_US`),
//! and a segment waits only while an ACK could still come within the longest delay.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};

/// The longest a receiver may hold an ACK (RFC 1122, 4.2.3.2): a longer lag is idle time.
const MAX_ACK_DELAY_US: i64 = 500_000;
/// Values are clipped below this, as the numpy rule keys them.
const VALUE_SPAN: i64 = 1 << 40;
/// How far back a capture's clock may step between packets for the lags to stay exact.
const CLOCK_STEP_BACK_US: i64 = 1_000_000;
/// Waiting segments are swept of those too old to count once there are this many.
const SWEEP_WAITING: usize = 4096;

/// What one side's ACKs have said, read by the peer's data segments.
#[derive(Default)]
pub struct AcksSent {
    /// The highest ACK so far (None before the first).
    highest: Option<i64>,
    /// The ACKs that raised it, oldest first, while a later packet may share their time.
    raised: VecDeque<(i64, i64)>,
    /// The highest of the raising ACKs let go: a segment at or below it was covered earlier
    /// than any packet still to come.
    let_go_up_to: Option<i64>,
}

/// The lags of one side's data segments.
#[derive(Default)]
pub struct DataLags {
    waiting: BinaryHeap<Reverse<(i64, i64)>>,
    pub smallest_us: Option<i64>,
}

impl DataLags {
    fn note(&mut self, lag_us: i64) {
        if (0..=MAX_ACK_DELAY_US).contains(&lag_us) {
            self.smallest_us = Some(self.smallest_us.map_or(lag_us, |s| s.min(lag_us)));
        }
    }

    /// A data segment ending at `end` (counted from its side's ISN) at `time_us`, against the
    /// peer's ACKs so far (`acks`).
    pub fn segment(&mut self, end: i64, time_us: i64, acks: &AcksSent) {
        let end = end.clamp(0, VALUE_SPAN - 1);
        if acks.highest.is_some_and(|highest| end <= highest) {
            if acks.let_go_up_to.is_some_and(|let_go| end <= let_go) {
                return;
            }
            let covering = acks.raised.partition_point(|&(key, _)| key < end);
            if let Some(&(_, ack_us)) = acks.raised.get(covering) {
                self.note(ack_us - time_us);
            }
            return;
        }
        self.waiting.push(Reverse((end, time_us)));
        if self.waiting.len() >= SWEEP_WAITING {
            self.waiting.retain(|Reverse((_, sent_us))| {
                time_us - sent_us <= MAX_ACK_DELAY_US + CLOCK_STEP_BACK_US
            });
        }
    }

    /// The peer's ACK of `ack` (counted from this side's ISN) at `time_us`: the segments it
    /// covers first have their lag.
    pub fn ack(&mut self, ack: i64, time_us: i64, acks: &mut AcksSent) {
        if ack < 0 {
            return;
        }
        let key = ack.min(VALUE_SPAN - 1);
        while let Some(&(raised_key, raised_us)) = acks.raised.front() {
            if raised_us >= time_us - CLOCK_STEP_BACK_US {
                break;
            }
            acks.let_go_up_to = Some(raised_key);
            acks.raised.pop_front();
        }
        if acks.highest.is_some_and(|highest| key <= highest) {
            return;
        }
        acks.highest = Some(key);
        acks.raised.push_back((key, time_us));
        while let Some(&Reverse((end, sent_us))) = self.waiting.peek() {
            if end > key {
                break;
            }
            self.waiting.pop();
            self.note(time_us - sent_us);
        }
    }
}
