//! The rows the detectors read of the data segments, taken from each segment's context once its
//! connection is finished, so that Python needs no row per segment: the small segments that pass
//! the stall's packet tests (`nagle_stall.untimed_stalls`), the lone segments a pure ACK
//! answered (`delack_timer.answered_lone`, the delayed-ACK samples) and each direction's
//! payload sizes counted (`events/payloads.py`). The rules are the Python ones, which the
//! numpy path and the tests still run; `tests/test_core_flows.py` proves the rows equal.

use super::counts::Counts;
use super::segments::{NO_ROW, NONE, SegmentRows, wide};
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

impl Segment {
    /// The part after its last full MSS (0: it ends full).
    fn tail_bytes(&self) -> i64 {
        self.payload_bytes % self.mss.max(1)
    }
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
    fn take(&mut self, at: &Context, segment: &Segment, (message, pauses): (i64, Pauses)) {
        let tail_bytes = segment.tail_bytes();
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
        if passed {
            let release = Release::of(at, segment.previous, segment.peer_latest, true);
            self.push(segment, &release, (message, pauses), (0, prev_time_us));
        }
    }

    /// Keep tail `segment` (of message `message`, after `pauses`) as released by `release`;
    /// `(released_earlier, tail_prev_time_us)`: 1 where a burst's earlier ACK released it, and
    /// the time of the data just before it.
    fn push(
        &mut self,
        segment: &Segment,
        release: &Release,
        (message, pauses): (i64, Pauses),
        tail: (u8, i64),
    ) {
        self.connection.push(segment.connection as i32);
        self.direction.push(segment.direction);
        self.frame.push(segment.frame);
        self.time_us.push(segment.time_us);
        self.payload_bytes.push(segment.payload_bytes);
        self.tail_bytes.push(segment.tail_bytes());
        self.mss.push(segment.mss);
        self.prev_frame.push(release.prev_frame);
        self.prev_time_us.push(release.prev_time_us);
        self.prev_payload_bytes.push(release.prev_payload_bytes);
        self.peer_frame.push(release.peer_frame);
        self.peer_time_us.push(release.peer_time_us);
        self.peer_window_bytes.push(release.peer_window_bytes);
        self.message.push(message);
        self.full_gap_us.push(pauses.longest_us);
        self.final_flight_us.push(pauses.final_flight_us);
        self.released_earlier.push(tail.0);
        self.tail_prev_time_us.push(tail.1);
    }
}

/// The ACK that names a burst's release (`earlier_releases.py`): the peer's latest packet
/// before the first segment after the burst's opener that a pure ACK at or past the opener's
/// end preceded, and the data before that segment.
#[derive(Clone, Copy)]
struct Release {
    /// Whether the ACK acknowledged only data the capture saw sent.
    seen: bool,
    prev_frame: i64,
    prev_time_us: i64,
    prev_payload_bytes: i64,
    peer_frame: i64,
    peer_time_us: i64,
    peer_window_bytes: i64,
}

impl Release {
    /// The release by packet row `peer` of the data up to packet row `previous`.
    fn of(at: &Context, previous: i64, peer: i64, seen: bool) -> Release {
        Release {
            seen,
            prev_frame: at.frame(previous),
            prev_time_us: at.time_us(previous),
            prev_payload_bytes: at.payload_bytes(previous),
            peer_frame: at.frame(peer),
            peer_time_us: at.time_us(peer),
            peer_window_bytes: at.window_bytes(peer),
        }
    }
}

/// A direction's burst since its latest segment ending small (its opener).
#[derive(Clone, Copy, Default)]
struct Burst {
    /// The opener's sequence end and time (None: no segment ended small yet).
    opener: Option<(i64, i64)>,
    release: Option<Release>,
    /// Peer data or an own retransmission came within it.
    disturbed: bool,
}

/// A direction's message so far (`full_segment_gaps.py`): its latest segment (time, and
/// whether it was full), the longest pause between two consecutive full segments, and its
/// final flight: the segment after the latest pause at least half that long, once it came.
#[derive(Clone, Copy, Default)]
struct FullGaps {
    message: i64,
    latest: Option<(i64, bool)>,
    longest_us: i64,
    /// A pause that long ended at the latest segment: the flight's second is still to come.
    flight_opened: bool,
    flight_second_us: Option<i64>,
}

/// What a segment reads of its message's pauses before it: the longest, and how long the
/// final flight had been going out at the segment before it, from its second segment on (0:
/// no such flight).
#[derive(Clone, Copy)]
struct Pauses {
    longest_us: i64,
    final_flight_us: i64,
}

impl FullGaps {
    /// The pauses of `segment`'s message (number `message`) before it; then take it.
    fn take(&mut self, segment: &Segment, message: i64) -> Pauses {
        if message != self.message {
            *self = FullGaps {
                message,
                ..FullGaps::default()
            };
        }
        let final_flight_us = match (self.latest, self.flight_second_us) {
            (Some((latest_us, _)), Some(second_us)) => (latest_us - second_us).max(0),
            _ => 0,
        };
        let before = Pauses {
            longest_us: self.longest_us,
            final_flight_us,
        };
        let time_us = segment.time_us;
        if self.flight_opened {
            self.flight_second_us = Some(time_us);
            self.flight_opened = false;
        }
        let full = segment.tail_bytes() == 0;
        if let (true, Some((latest_us, true))) = (full, self.latest) {
            let pause_us = time_us - latest_us;
            self.longest_us = self.longest_us.max(pause_us);
            if pause_us > 0 && 2 * pause_us >= self.longest_us {
                self.flight_opened = true;
                self.flight_second_us = None;
            }
        }
        self.latest = Some((time_us, full));
        before
    }
}

/// What a connection's rows carry from one batch of its segments to the next: each
/// direction's open burst and its message's pauses between full segments.
#[derive(Clone, Default)]
pub struct Carried {
    earlier: EarlierReleases,
    full_gaps: [FullGaps; 2],
}

/// The tails Linux's Nagle held until their burst's earlier ACK (`earlier_releases.py`):
/// each direction's open burst, kept while its connection goes on.
#[derive(Clone, Default)]
struct EarlierReleases {
    bursts: [Burst; 2],
}

impl EarlierReleases {
    /// Take the connection's next segment: a full one may name its burst's release; one
    /// ending small is a tail that release may have let go, and opens the next burst.
    fn take(
        &mut self,
        at: &Context,
        segment: &Segment,
        message: (i64, Pauses),
        untimed: &mut UntimedStalls,
    ) {
        let burst = &mut self.bursts[usize::from(segment.direction)];
        let disturbing = segment.peer_data_between > 0 || segment.own_retransmissions_between > 0;
        if segment.tail_bytes() == 0 {
            burst.disturbed |= disturbing;
            if burst.release.is_none() {
                burst.release = burst
                    .opener
                    .and_then(|opener| named_release(at, segment, opener));
            }
            return;
        }
        let release = burst.release.or_else(|| {
            burst
                .opener
                .and_then(|opener| released_by_own_ack(at, segment, opener))
        });
        if let Some(release) = release
            && release.seen
            && !burst.disturbed
            && !disturbing
            && release.peer_window_bytes > 0
            && segment.rel_seq == segment.sent_max_before
            && segment.time_us - release.prev_time_us >= MIN_STALL_US
        {
            untimed.push(
                segment,
                &release,
                message,
                (1, at.time_us(segment.previous)),
            );
        }
        *burst = Burst {
            opener: Some((segment.rel_seq + segment.payload_bytes, segment.time_us)),
            release: None,
            disturbed: false,
        };
    }
}

/// Where no full segment named the release, tail `segment`'s own latest peer packet: a pure
/// ACK at or past the opener's end, later than the opener and than the data before the tail,
/// that left some data unacknowledged (else the plain test pairs them).
fn released_by_own_ack(
    at: &Context,
    segment: &Segment,
    (end, time_us): (i64, i64),
) -> Option<Release> {
    let peer = segment.peer_latest;
    let peer_ack = at.ack(peer);
    let peer_time_us = at.time_us(peer);
    let prev_time_us = at.time_us(segment.previous);
    let names = at.role(peer) == ROLE_PURE_ACK
        && peer_ack >= end
        && peer_ack < segment.sent_max_before
        && peer_time_us > time_us
        && peer_time_us > prev_time_us;
    names.then(|| Release::of(at, segment.previous, peer, true))
}

/// The release `segment` names in a burst opened at `(end, time_us)`: where the peer's latest
/// packet before it is a pure ACK at or past the opener's end, later than the opener.
fn named_release(at: &Context, segment: &Segment, (end, time_us): (i64, i64)) -> Option<Release> {
    let peer = segment.peer_latest;
    let peer_ack = at.ack(peer);
    let peer_time_us = at.time_us(peer);
    let names = at.role(peer) == ROLE_PURE_ACK && peer_ack >= end && peer_time_us > time_us;
    names.then(|| {
        Release::of(
            at,
            segment.previous,
            peer,
            peer_ack <= segment.sent_max_before,
        )
    })
}

/// A lone segment whose test waits for the packets after it (`LoneSegments`): the peer's
/// next packet, and its side's next data packet; what the test reads of it and of them.
#[derive(Clone)]
pub struct LoneCandidate {
    /// The segment's number within its connection.
    pub index: usize,
    connection: u32,
    direction: u8,
    frame: i64,
    time_us: i64,
    payload_bytes: i64,
    end_seq: i64,
    /// The rows of the packets after it, as they come (NO_ROW until then).
    pub peer_next: u32,
    pub own_next_data: u32,
    /// The peer's next packet's time and frame, once it has come and answered the segment.
    answer: Option<(i64, i64)>,
    /// Its side's next data packet's time, once it has come.
    own_next_us: Option<i64>,
}

/// What a lone segment's test comes to.
enum Verdict {
    Answered,
    NotAnswered,
    Waiting,
}

impl LoneCandidate {
    /// `segment`, where it may have been answered: everything before it was acknowledged when
    /// it left, and its window was not filled by it.
    fn of(at: &Context, segment: &Segment, index: usize) -> Option<LoneCandidate> {
        let end_seq = segment.rel_seq + segment.payload_bytes;
        let peer_ack = at.ack(segment.peer_latest);
        let may_be = peer_ack >= segment.rel_seq
            && end_seq - peer_ack < at.window_bytes(segment.peer_latest);
        may_be.then(|| LoneCandidate {
            index,
            connection: segment.connection,
            direction: segment.direction,
            frame: segment.frame,
            time_us: segment.time_us,
            payload_bytes: segment.payload_bytes,
            end_seq,
            peer_next: as_row(segment.peer_next),
            own_next_data: as_row(segment.own_next_data),
            answer: None,
            own_next_us: None,
        })
    }

    /// Read the packets after it that have come (their rows held), once each: the peer's
    /// next, a pure ACK (or a duplicate or a window update) acknowledging up to its end and
    /// no further, came before its sender's next data. An ACK of more answers what came
    /// after the segment (its sender's FIN), not the segment. `ended`: no more packets come.
    fn verdict(&mut self, at: &Context, ended: bool) -> Verdict {
        if self.answer.is_none() && self.peer_next != NO_ROW {
            let peer_next = wide(self.peer_next);
            let answers = matches!(
                at.role(peer_next),
                ROLE_PURE_ACK | ROLE_DUP_ACK | ROLE_WINDOW_UPDATE
            ) && at.ack(peer_next) == self.end_seq;
            if !answers {
                return Verdict::NotAnswered;
            }
            self.answer = Some((at.time_us(peer_next), at.frame(peer_next)));
        }
        if self.own_next_us.is_none() && self.own_next_data != NO_ROW {
            self.own_next_us = Some(at.time_us(wide(self.own_next_data)));
        }
        match (self.answer, self.own_next_us) {
            (Some((peer_us, _)), Some(own_us)) if own_us >= 0 && own_us <= peer_us => {
                Verdict::NotAnswered
            }
            (Some(_), Some(_)) => Verdict::Answered,
            (Some(_), None) | (None, _) if !ended => Verdict::Waiting,
            (Some(_), None) => Verdict::Answered,
            (None, _) => Verdict::NotAnswered,
        }
    }
}

/// A packet row as a candidate holds it.
fn as_row(row: i64) -> u32 {
    if row < 0 { NO_ROW } else { row as u32 }
}

impl LoneSegments {
    /// Keep `candidate`, answered.
    fn push(&mut self, candidate: &LoneCandidate) {
        let (peer_us, peer_frame) = candidate.answer.expect("an answered segment's answer");
        self.connection.push(candidate.connection as i32);
        self.direction.push(candidate.direction);
        self.frame.push(candidate.frame);
        self.time_us.push(candidate.time_us);
        self.payload_bytes.push(candidate.payload_bytes);
        self.next_peer_frame.push(peer_frame);
        self.next_peer_time_us.push(peer_us);
    }

    /// Test `candidate`: kept where answered, given back where it waits (unless `ended`).
    fn test(
        &mut self,
        at: &Context,
        mut candidate: LoneCandidate,
        ended: bool,
    ) -> Option<LoneCandidate> {
        match candidate.verdict(at, ended) {
            Verdict::Answered => self.push(&candidate),
            Verdict::NotAnswered => {}
            Verdict::Waiting => return Some(candidate),
        }
        None
    }
}

/// Test again the lone segments `waiting` (their packets' rows held, read with `flows`): the
/// answered go to `lone`, those still waiting stay (none where `ended`).
pub fn test_waiting(
    waiting: &mut Vec<LoneCandidate>,
    flows: &Finished,
    lone: &mut LoneSegments,
    ended: bool,
) {
    let at = Context { flows };
    let candidates = std::mem::take(waiting);
    *waiting = candidates
        .into_iter()
        .filter_map(|candidate| lone.test(&at, candidate, ended))
        .collect();
}

/// A connection's payload sizes counted so far, by direction and size: each is
/// `(direction << SIZE_BITS) | size`.
#[derive(Clone, Default)]
pub struct PayloadSizes(Counts);

impl PayloadSizes {
    /// Count the sizes `keyed` (each `(direction << SIZE_BITS) | size`).
    fn count(&mut self, mut keyed: Vec<i64>) {
        keyed.sort_unstable();
        self.0.add_sorted(&keyed);
    }

    /// The counts, of connection `connection`, go to `table` (by direction key, then size).
    pub fn finish(&self, connection: u32, table: &mut PayloadCounts) {
        for (keyed, seen) in self.0.as_slice() {
            let direction = keyed >> SIZE_BITS;
            table.key.push(i64::from(connection) * 2 + direction);
            table.size.push(keyed & ((1 << SIZE_BITS) - 1));
            table.count.push(*seen as i64);
        }
    }
}

/// The detectors' rows of a connection's held segments (`message`: each one's message number
/// within the connection), read with its packets `flows`: its stall candidates and its lone
/// answered segments go to the tables, its payload sizes are counted in `sizes`. Where the
/// connection goes on (`waiting` given), a lone segment whose test waits for packets still to
/// come goes to `waiting`.
pub fn detector_rows(
    connection: u32,
    (segments, message, carried): (&SegmentRows, &[i64], &mut Carried),
    flows: &Finished,
    (untimed, lone): (&mut UntimedStalls, &mut LoneSegments),
    (sizes, mut waiting): (&mut PayloadSizes, Option<&mut Vec<LoneCandidate>>),
) {
    let at = Context { flows };
    let mut keyed_sizes = Vec::with_capacity(message.len());
    let first = segments.len() - segments.rows.len();
    for (index, message) in message.iter().enumerate() {
        let segment = at.segment(connection, segments, index);
        let pauses = carried.full_gaps[usize::from(segment.direction)].take(&segment, *message);
        untimed.take(&at, &segment, (*message, pauses));
        carried
            .earlier
            .take(&at, &segment, (*message, pauses), untimed);
        if let Some(candidate) = LoneCandidate::of(&at, &segment, first + index) {
            let ended = waiting.is_none();
            if let Some(left) = lone.test(&at, candidate, ended)
                && let Some(waiting) = waiting.as_deref_mut()
            {
                waiting.push(left);
            }
        }
        keyed_sizes.push((i64::from(segment.direction) << SIZE_BITS) | segment.payload_bytes);
    }
    sizes.count(keyed_sizes);
}
