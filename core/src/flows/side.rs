//! One sending side of a connection: its sequence and acknowledgement numbers unwrapped, the
//! role of each of its packets, and its packet and byte totals. The rules are those of
//! `nagledetect/flows/roles.py` and `sequence.py`, applied a packet at a time in file order.
//!
//! Sequence and ACK values are kept relative to the side's first packet (`_u` values): the
//! base they are finally counted from (the ISN, or the peer's) may be learned later, and is
//! added when the tables are made (`offsets`). Every rule compares values of one side, or
//! values counted from the same base, so the offset never changes a role.

use crate::flows::{FLAG_ACK, FLAG_FIN, FLAG_RST, FLAG_SYN};

pub const ROLE_DATA: u8 = 0;
pub const ROLE_PURE_ACK: u8 = 1;
pub const ROLE_WINDOW_UPDATE: u8 = 2;
pub const ROLE_DUP_ACK: u8 = 3;
pub const ROLE_RETRANSMISSION: u8 = 4;
pub const ROLE_OUT_OF_ORDER: u8 = 5;
pub const ROLE_KEEPALIVE: u8 = 6;
pub const ROLE_ZERO_WINDOW_PROBE: u8 = 7;
pub const ROLE_SYN: u8 = 8;
pub const ROLE_FIN: u8 = 9;
pub const ROLE_RST: u8 = 10;
/// The role of a packet that does not exist (a segment's missing context packet): the code
/// after the roles, as `events.segments` names it "none" after `roles.ROLES`.
pub const ROLE_NONE: u8 = 11;
/// Old data this soon after the segment that last advanced the stream, not ending where the
/// stream had got to, fills a hole: out of order, not sent again (as Wireshark's 3 ms).
const OUT_OF_ORDER_WINDOW_US: i64 = 3_000;

/// A packet as the side's rules read it.
#[derive(Clone, Copy)]
pub struct Segment {
    pub time_us: i64,
    pub flags: u16,
    pub seq_raw: u32,
    pub ack_raw: u32,
    pub window_raw: u16,
    pub payload_bytes: u32,
}

impl Segment {
    fn has(&self, flag: u16) -> bool {
        self.flags & flag != 0
    }
}

/// The latest packet a side sent, as its peer's rules read it.
#[derive(Clone, Copy)]
pub struct Latest {
    pub window_raw: u16,
    pub seq_raw: u32,
    pub payload_bytes: u32,
    pub flags: u16,
}

/// What a side's previous packet said, for the repeat tests (duplicate ACK, window update).
#[derive(Clone, Copy)]
struct Previous {
    ack_u: Option<i64>,
    window_raw: u16,
    seq_u: i64,
}

/// A packet numbered and classified: its sequence and ACK relative to the side's first
/// (`ack_u` None without the ACK flag), its role and where its sequence space ends.
pub struct Numbered {
    pub seq_u: i64,
    pub ack_u: Option<i64>,
    pub role: u8,
}

#[derive(Default)]
pub struct Side {
    pub packets: i64,
    pub payload_bytes: i64,
    pub first_us: Option<i64>,
    pub last_us: i64,
    pub first_seq_raw: Option<u32>,
    /// The sequence number of the side's first SYN: its ISN.
    pub syn_seq_raw: Option<u32>,
    last_seq_raw: u32,
    seq_u: i64,
    pub first_ack_raw: Option<u32>,
    last_ack_raw: u32,
    ack_u: i64,
    previous: Option<Previous>,
    /// The highest sequence end sent so far (SYN and FIN count one).
    max_end_u: Option<i64>,
    /// When the stream last advanced.
    advance_us: i64,
    pub latest: Option<Latest>,
}

impl Side {
    /// The raw value this side's relative sequence numbers count from: the ISN of its first
    /// SYN, else its first sequence number less one (None before its first packet).
    pub fn base_raw(&self) -> Option<u32> {
        self.syn_seq_raw
            .or(self.first_seq_raw.map(|first| first.wrapping_sub(1)))
    }

    /// What to add to a `seq_u` value to count it from the ISN.
    pub fn seq_offset(&self) -> i64 {
        match (self.first_seq_raw, self.base_raw()) {
            (Some(first), Some(base)) => wrapped_distance(first, base),
            _ => 0,
        }
    }

    /// What to add to an `ack_u` value to count it from the peer's ISN (`peer_base_raw`,
    /// None where the peer never sent: the first ACK then counts as 1).
    pub fn ack_offset(&self, peer_base_raw: Option<u32>) -> i64 {
        match (self.first_ack_raw, peer_base_raw) {
            (Some(first), Some(base)) => wrapped_distance(first, base),
            (Some(_), None) => 1,
            _ => 0,
        }
    }

    /// Number the packet `segment` sent by this side and give its role (`peer`: the latest
    /// packet the peer sent before it).
    pub fn take(&mut self, segment: &Segment, peer: Option<&Latest>) -> Numbered {
        let seq_u = self.unwrapped_seq(segment);
        let ack_u = segment.has(FLAG_ACK).then(|| self.unwrapped_ack(segment));
        let role = self.role(segment, seq_u, ack_u, peer);
        self.note_totals(segment);
        self.previous = Some(Previous {
            ack_u,
            window_raw: segment.window_raw,
            seq_u,
        });
        self.latest = Some(Latest {
            window_raw: segment.window_raw,
            seq_raw: segment.seq_raw,
            payload_bytes: segment.payload_bytes,
            flags: segment.flags,
        });
        Numbered { seq_u, ack_u, role }
    }

    fn unwrapped_seq(&mut self, segment: &Segment) -> i64 {
        if segment.has(FLAG_SYN) && self.syn_seq_raw.is_none() {
            self.syn_seq_raw = Some(segment.seq_raw);
        }
        unwrapped(
            segment.seq_raw,
            &mut self.first_seq_raw,
            &mut self.last_seq_raw,
            &mut self.seq_u,
        )
    }

    fn unwrapped_ack(&mut self, segment: &Segment) -> i64 {
        unwrapped(
            segment.ack_raw,
            &mut self.first_ack_raw,
            &mut self.last_ack_raw,
            &mut self.ack_u,
        )
    }

    fn note_totals(&mut self, segment: &Segment) {
        self.packets += 1;
        self.payload_bytes += i64::from(segment.payload_bytes);
        self.first_us = Some(
            self.first_us
                .map_or(segment.time_us, |t| t.min(segment.time_us)),
        );
        self.last_us = if self.packets == 1 {
            segment.time_us
        } else {
            self.last_us.max(segment.time_us)
        };
    }

    /// The role, by the rules of `roles.assign_roles` in their order (a later rule wins).
    fn role(
        &mut self,
        segment: &Segment,
        seq_u: i64,
        ack_u: Option<i64>,
        peer: Option<&Latest>,
    ) -> u8 {
        let payload = i64::from(segment.payload_bytes);
        let carries_data = payload > 0;
        let fin_or_syn = segment.has(FLAG_FIN | FLAG_SYN);
        let end_u = seq_u + payload + i64::from(fin_or_syn);
        let max_end_before = self.max_end_u;
        let previous = self.previous;
        let keepalive = max_end_before
            .is_some_and(|max_end| payload <= 1 && seq_u == max_end - 1 && !fin_or_syn);
        let old_data = max_end_before.is_some_and(|max_end| seq_u < max_end) && !keepalive;
        let same_ack = previous.is_some_and(|p| p.ack_u == ack_u);
        let same_window = previous.is_some_and(|p| p.window_raw == segment.window_raw);
        let same_seq = previous.is_some_and(|p| p.seq_u == seq_u);
        let bare = !carries_data && !segment.has(FLAG_SYN | FLAG_FIN | FLAG_RST);
        if max_end_before.is_none_or(|max_end| end_u > max_end) {
            self.advance_us = segment.time_us;
        }
        self.max_end_u = Some(max_end_before.map_or(end_u, |max_end| max_end.max(end_u)));

        let mut role = ROLE_PURE_ACK;
        if carries_data {
            role = ROLE_DATA;
        }
        if bare && same_ack && same_seq && !same_window {
            role = ROLE_WINDOW_UPDATE;
        }
        if bare && same_ack && same_window && segment.window_raw != 0 {
            let answers_keepalive = peer.is_some_and(|peer| {
                peer.payload_bytes <= 1
                    && ack_u.is_some()
                    && segment.ack_raw == peer.seq_raw.wrapping_add(1)
                    && peer.flags & (FLAG_SYN | FLAG_FIN) == 0
            });
            if !answers_keepalive {
                role = ROLE_DUP_ACK;
            }
        }
        let probe = payload == 1 && max_end_before == Some(seq_u);
        if probe && peer.is_some_and(|peer| peer.window_raw == 0) {
            role = ROLE_ZERO_WINDOW_PROBE;
        }
        if !carries_data && segment.has(FLAG_FIN) {
            role = ROLE_FIN;
        }
        if segment.has(FLAG_SYN) {
            role = ROLE_SYN;
        }
        if (carries_data || fin_or_syn) && old_data {
            role = ROLE_RETRANSMISSION;
        }
        if carries_data && old_data {
            let fills_hole = Some(end_u) != max_end_before
                && segment.time_us - self.advance_us < OUT_OF_ORDER_WINDOW_US;
            if fills_hole {
                role = ROLE_OUT_OF_ORDER;
            }
        }
        if keepalive {
            role = ROLE_KEEPALIVE;
        }
        if segment.has(FLAG_RST) {
            role = ROLE_RST;
        }
        role
    }
}

/// `raw` unwrapped: counted from the first raw value (`first`, set by the first call), a
/// signed step on from the last (`last`, `value`: the last raw value and its unwrapped one).
fn unwrapped(raw: u32, first: &mut Option<u32>, last: &mut u32, value: &mut i64) -> i64 {
    if first.is_none() {
        *first = Some(raw);
        *value = 0;
    } else {
        *value += signed_step(raw, *last);
    }
    *last = raw;
    *value
}

/// `later - earlier` of 32-bit sequence values, read as the signed step between them.
fn signed_step(later: u32, earlier: u32) -> i64 {
    i64::from(later.wrapping_sub(earlier) as i32)
}

/// `value - base` on the 32-bit circle, as a signed number.
pub fn wrapped_distance(value: u32, base: u32) -> i64 {
    signed_step(value, base)
}
