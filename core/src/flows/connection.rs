//! One connection's state, kept while its packets are read: its two sides (by endpoint, low
//! and high, as the client is known for sure only at the end), its handshake, and what its
//! connection-table row is made of (`Row`), by the rules of `nagledetect/flows/connections.py`,
//! `handshake.py` and `vantage.py`.

use std::collections::HashMap;

use crate::decode::TcpPacket;
use crate::flows::ack_lag::{AcksSent, DataLags};
use crate::flows::side::{Numbered, Segment, Side};
use crate::flows::{Endpoint, FLAG_ACK, FLAG_FIN, FLAG_RST, FLAG_SYN};

const EPHEMERAL_PORT_START: u16 = 49152;
const TIMESTAMP_OPTION_BYTES: i64 = 12;
const DEFAULT_MSS_BYTES: i64 = 536;
const SMALLEST_FULL_SEGMENT_BYTES: i64 = 536;
const ETHERNET_MTU_BYTES: i64 = 1500;
const JUMBO_MTU_BYTES: i64 = 9000;
const TCP_HEADER_BYTES: i64 = 20;
const MIN_JUMBO_FRAMES: u32 = 2;
const NEAR_SIDE_SHARE: f64 = 1.0 / 3.0;
/// A tap-side round trip no longer than this may be the far host's reaction alone.
const DISTINCT_ROUND_TRIP_US: i64 = 500;
/// `rel_ack` of a packet without the ACK flag (numpy's int64 minimum, as `sequence.NO_ACK`).
pub const NO_ACK: i64 = i64::MIN;
/// The largest window scale shift RFC 7323 allows; a larger one is taken as this.
pub const MAX_WINDOW_SCALE: i8 = 14;

/// The options of a connection's first SYN or SYN/ACK.
#[derive(Clone, Copy, Default)]
pub struct HandshakeOptions {
    pub frame: u32,
    pub mss: i64,
    pub window_scale: i8,
    pub sack_permitted: bool,
    pub timestamps: bool,
}

impl HandshakeOptions {
    /// The values a missing SYN or SYN/ACK gives (frame 0, no window scale).
    fn missing() -> HandshakeOptions {
        HandshakeOptions {
            window_scale: -1,
            ..HandshakeOptions::default()
        }
    }

    fn of(frame: u32, tcp: &TcpPacket) -> HandshakeOptions {
        HandshakeOptions {
            frame,
            mss: i64::from(tcp.options.mss),
            window_scale: tcp
                .options
                .window_scale
                .map_or(crate::decode::NO_WINDOW_SCALE, |s| s as i8),
            sack_permitted: tcp.options.sack_permitted,
            timestamps: tcp.options.timestamp.is_some(),
        }
    }
}

/// Where the handshake's two round trips begin and end (`vantage.HandshakeTimes`), with the
/// client's ACK kept for each endpoint until the client is known.
#[derive(Default)]
struct HandshakeClock {
    /// The latest SYN before the first SYN/ACK: the one the SYN/ACK answers.
    syn_us: Option<i64>,
    syn_ack_us: Option<i64>,
    latest_syn_ack_us: Option<i64>,
    /// A SYN came after the latest SYN/ACK: that SYN/ACK had not arrived.
    syn_since_syn_ack: bool,
    /// By sending endpoint: its first pure ACK after a SYN/ACK, and the SYN/ACK it answered.
    ack: [Option<(i64, Option<i64>)>; 2],
    /// By sending endpoint, while no SYN/ACK has come: the latest SYN before its first pure
    /// ACK after one, and that ACK. Where the capture misses the SYN/ACK (it sees one
    /// direction), the two span the whole round trip, which it cannot split at the tap.
    unanswered_ack: [Option<(i64, i64)>; 2],
}

impl HandshakeClock {
    fn take(&mut self, flags: u16, payload_bytes: u32, time_us: i64, sender: usize) {
        match flags & (FLAG_SYN | FLAG_ACK) {
            FLAG_SYN => {
                if self.syn_ack_us.is_none() {
                    self.syn_us = Some(time_us);
                }
                self.syn_since_syn_ack = true;
            }
            both if both == FLAG_SYN | FLAG_ACK => {
                self.syn_ack_us.get_or_insert(time_us);
                self.latest_syn_ack_us = Some(time_us);
                self.syn_since_syn_ack = false;
            }
            _ => {}
        }
        let pure_ack =
            flags & (FLAG_SYN | FLAG_ACK | FLAG_FIN | FLAG_RST) == FLAG_ACK && payload_bytes == 0;
        if pure_ack && self.syn_ack_us.is_some() && self.ack[sender].is_none() {
            let answered = self.latest_syn_ack_us.filter(|_| !self.syn_since_syn_ack);
            self.ack[sender] = Some((time_us, answered));
        }
        if let (true, None, Some(syn), None) = (
            pure_ack,
            self.syn_ack_us,
            self.syn_us,
            self.unanswered_ack[sender],
        ) {
            self.unanswered_ack[sender] = Some((syn, time_us));
        }
    }

    /// The round trip from a SYN to its sender's ACK where no SYN/ACK was seen (`client`: the
    /// endpoint that sent the SYN).
    fn unsplit_round_trip_us(&self, client: usize) -> Option<i64> {
        match (self.syn_ack_us, self.unanswered_ack[client]) {
            (None, Some((syn, ack))) if ack >= syn => Some(ack - syn),
            _ => None,
        }
    }
}

pub struct Connection {
    pub stream: u32,
    /// The endpoints, low first (`Endpoint` order).
    pub endpoints: [Endpoint; 2],
    pub first_frame: u32,
    first_sender: usize,
    first_ports: (u16, u16),
    syn_sender: Option<usize>,
    syn_ack_sender: Option<usize>,
    syn: Option<HandshakeOptions>,
    syn_ack: Option<HandshakeOptions>,
    uses_timestamps: bool,
    /// How often each full-looking payload size was seen, while no SYN or SYN/ACK has been.
    sizes: Option<HashMap<u32, u32>>,
    clock: HandshakeClock,
    /// By sending endpoint (0: the low one).
    pub sides: [Side; 2],
    acks: [AcksSent; 2],
    lags: [DataLags; 2],
}

/// What the tables read of a finished connection.
pub struct Row {
    pub client: usize,
    pub client_guessed: bool,
    pub syn: HandshakeOptions,
    pub syn_ack: HandshakeOptions,
    pub handshake: bool,
    pub timestamps: bool,
    pub window_scaling: bool,
    pub mss_estimated: bool,
    pub effective_mss: i64,
    pub frame_payload_limit_bytes: i64,
    /// Round trips to each side of the tap, in µs (None: unknown), and where the tap is.
    pub rtt_client_side_us: Option<i64>,
    pub rtt_server_side_us: Option<i64>,
    pub rtt_from_handshake: bool,
    /// The whole round trip from the SYN to the client's ACK where the capture missed the
    /// SYN/ACK (`HandshakeClock::unanswered_ack`), in µs.
    pub rtt_unsplit_us: Option<i64>,
    pub vantage: &'static str,
}

impl Connection {
    pub fn new(stream: u32, endpoints: [Endpoint; 2], frame: u32, sender: usize) -> Connection {
        Connection {
            stream,
            endpoints,
            first_frame: frame,
            first_sender: sender,
            first_ports: (endpoints[sender].1, endpoints[1 - sender].1),
            syn_sender: None,
            syn_ack_sender: None,
            syn: None,
            syn_ack: None,
            uses_timestamps: false,
            sizes: Some(HashMap::new()),
            clock: HandshakeClock::default(),
            sides: [Side::default(), Side::default()],
            acks: [AcksSent::default(), AcksSent::default()],
            lags: [DataLags::default(), DataLags::default()],
        }
    }

    /// Take the packet `tcp` (frame `frame`) sent by endpoint `sender`.
    pub fn take(&mut self, frame: u32, time_us: i64, tcp: &TcpPacket, sender: usize) -> Numbered {
        self.note_handshake(frame, tcp, sender);
        self.clock
            .take(tcp.flags, tcp.payload_bytes, time_us, sender);
        let segment = Segment {
            time_us,
            flags: tcp.flags,
            seq_raw: tcp.seq,
            ack_raw: tcp.ack,
            window_raw: tcp.window,
            payload_bytes: tcp.payload_bytes,
        };
        let [low, high] = &mut self.sides;
        let (own, peer) = if sender == 0 {
            (low, high)
        } else {
            (high, low)
        };
        let numbered = own.take(&segment, peer.latest.as_ref());
        self.note_lags(&numbered, &segment, sender);
        numbered
    }

    fn note_handshake(&mut self, frame: u32, tcp: &TcpPacket, sender: usize) {
        self.uses_timestamps |= tcp.options.timestamp.is_some();
        match tcp.flags & (FLAG_SYN | FLAG_ACK) {
            FLAG_SYN if self.syn.is_none() => {
                self.syn = Some(HandshakeOptions::of(frame, tcp));
                self.syn_sender = Some(sender);
                self.sizes = None;
            }
            both if both == FLAG_SYN | FLAG_ACK && self.syn_ack.is_none() => {
                self.syn_ack = Some(HandshakeOptions::of(frame, tcp));
                self.syn_ack_sender = Some(sender);
                self.sizes = None;
            }
            _ => {}
        }
        let payload = i64::from(tcp.payload_bytes);
        if let Some(sizes) = self.sizes.as_mut()
            && (SMALLEST_FULL_SEGMENT_BYTES..=JUMBO_MTU_BYTES).contains(&payload)
        {
            *sizes.entry(tcp.payload_bytes).or_insert(0) += 1;
        }
    }

    /// The smallest data -> ACK lags: this packet's data against the peer's ACKs, and its ACK
    /// against the peer's data (both counted from the ISNs as far as they are known).
    fn note_lags(&mut self, numbered: &Numbered, segment: &Segment, sender: usize) {
        let peer = 1 - sender;
        if segment.payload_bytes > 0 {
            let end =
                numbered.seq_u + self.sides[sender].seq_offset() + i64::from(segment.payload_bytes);
            self.lags[sender].segment(end, segment.time_us, &self.acks[peer]);
        }
        if let Some(ack_u) = numbered.ack_u {
            let peer_base = self.sides[peer].base_raw();
            let ack = ack_u + self.sides[sender].ack_offset(peer_base);
            self.lags[peer].ack(ack, segment.time_us, &mut self.acks[sender]);
        }
    }

    /// Whether endpoint `sender`'s packets go client -> server is known only at the end; this
    /// is the rule of `connections.client_is_low`: the first SYN's sender, else the first
    /// SYN/ACK's receiver, else the port rule on the first packet (guessed).
    fn client(&self) -> (usize, bool) {
        if let Some(sender) = self.syn_sender {
            return (sender, false);
        }
        if let Some(sender) = self.syn_ack_sender {
            return (1 - sender, false);
        }
        let (src, dst) = self.first_ports;
        let src_ephemeral = src >= EPHEMERAL_PORT_START;
        let dst_ephemeral = dst >= EPHEMERAL_PORT_START;
        let first_is_client = if src_ephemeral != dst_ephemeral {
            src_ephemeral
        } else {
            // On equal ports the first packet's sender is the client.
            src >= dst
        };
        let client = if first_is_client {
            self.first_sender
        } else {
            1 - self.first_sender
        };
        (client, true)
    }

    /// Whether what its packets are finished with can no longer change: its first SYN and
    /// SYN/ACK have come (its client, window scaling and MSS are theirs), and each side has
    /// sent a SYN-flagged packet (the base its numbers count from). A SYN and a SYN/ACK from
    /// the same side (an odd or hostile capture) leave the other side's base to change.
    pub fn handshake_seen(&self) -> bool {
        self.syn.is_some()
            && self.syn_ack.is_some()
            && self.sides.iter().all(|side| side.syn_seq_raw.is_some())
    }

    /// The connection-table row (`ip_version` of its addresses).
    pub fn row(&self, ip_version: u8) -> Row {
        let (client, client_guessed) = self.client();
        let syn = self.syn.unwrap_or_else(HandshakeOptions::missing);
        let syn_ack = self.syn_ack.unwrap_or_else(HandshakeOptions::missing);
        let handshake = self.syn.is_some() && self.syn_ack.is_some();
        let timestamps =
            (syn.timestamps && syn_ack.timestamps) || (!handshake && self.uses_timestamps);
        let announced = [syn.mss, syn_ack.mss].into_iter().filter(|m| *m > 0).min();
        let smallest = announced.or_else(|| {
            (self.syn.is_some() || self.syn_ack.is_some()).then_some(DEFAULT_MSS_BYTES)
        });
        let ethernet = frame_payload_bytes(ETHERNET_MTU_BYTES, ip_version, timestamps);
        let jumbo_limit = frame_payload_bytes(JUMBO_MTU_BYTES, ip_version, timestamps);
        let (effective_mss, jumbo) = match smallest {
            Some(mss) => (mss - TIMESTAMP_OPTION_BYTES * i64::from(timestamps), false),
            None => estimated_mss(self.sizes.as_ref(), ethernet, jumbo_limit),
        };
        let mut row = Row {
            client,
            client_guessed,
            syn,
            syn_ack,
            handshake,
            timestamps,
            window_scaling: syn.window_scale >= 0 && syn_ack.window_scale >= 0,
            mss_estimated: smallest.is_none(),
            effective_mss,
            frame_payload_limit_bytes: if jumbo { jumbo_limit } else { ethernet },
            rtt_client_side_us: None,
            rtt_server_side_us: None,
            rtt_from_handshake: false,
            rtt_unsplit_us: self.clock.unsplit_round_trip_us(client),
            vantage: "unknown",
        };
        self.place_tap(&mut row);
        row
    }

    /// Round trips on each side of the tap and the vantage (`vantage.vantage_table`).
    fn place_tap(&self, row: &mut Row) {
        let client = row.client;
        let server = 1 - client;
        let clock = &self.clock;
        let server_leg = match (clock.syn_us, clock.syn_ack_us) {
            (Some(syn), Some(syn_ack)) if syn_ack >= syn => Some(syn_ack - syn),
            _ => None,
        };
        let client_leg = match clock.ack[client] {
            Some((ack, Some(answered))) if ack >= answered => Some(ack - answered),
            _ => None,
        };
        row.rtt_from_handshake = server_leg.is_some() && client_leg.is_some();
        let server_side = smaller_known(server_leg, self.lags[client].smallest_us);
        let client_side = smaller_known(client_leg, self.lags[server].smallest_us);
        row.rtt_server_side_us = server_side;
        row.rtt_client_side_us = client_side;
        let (Some(server_side), Some(client_side)) = (server_side, client_side) else {
            return;
        };
        let total = (server_side + client_side) as f64;
        if server_side.max(client_side) <= DISTINCT_ROUND_TRIP_US {
            return;
        }
        row.vantage = if (server_side as f64) < NEAR_SIDE_SHARE * total {
            "server"
        } else if (client_side as f64) < NEAR_SIDE_SHARE * total {
            "client"
        } else {
            "middle"
        };
    }

    /// The packet's sequence and ACK numbers counted from the ISNs as far as they are known
    /// now (`NO_ACK` without the ACK flag), and its window in bytes: scaled by its sender's
    /// shift where both sides of the handshake offered scaling, as the tables finish them.
    pub fn counted(&self, sender: usize, numbered: &Numbered, tcp: &TcpPacket) -> (i64, i64, i64) {
        let side = &self.sides[sender];
        let seq = numbered.seq_u + side.seq_offset();
        let peer_base = self.sides[1 - sender].base_raw();
        let ack = numbered
            .ack_u
            .map_or(NO_ACK, |ack_u| ack_u + side.ack_offset(peer_base));
        let scaling = match (self.syn, self.syn_ack) {
            (Some(syn), Some(syn_ack)) => syn.window_scale >= 0 && syn_ack.window_scale >= 0,
            _ => false,
        };
        let offered = if self.syn_sender == Some(sender) {
            self.syn
        } else {
            self.syn_ack
        };
        let shift = match offered {
            Some(options) if scaling && tcp.flags & FLAG_SYN == 0 => {
                options.window_scale.clamp(0, MAX_WINDOW_SCALE) as u32
            }
            _ => 0,
        };
        (seq, ack, i64::from(tcp.window) << shift)
    }

    /// What to add to each endpoint's `seq_u` and `ack_u` values to count them from the ISNs.
    pub fn offsets(&self) -> [(i64, i64); 2] {
        let bases = [self.sides[0].base_raw(), self.sides[1].base_raw()];
        [0, 1].map(|sender| {
            let side = &self.sides[sender];
            (side.seq_offset(), side.ack_offset(bases[1 - sender]))
        })
    }
}

/// The smaller of two round-trip estimates where both are known.
fn smaller_known(first: Option<i64>, second: Option<i64>) -> Option<i64> {
    match (first, second) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// The largest payload one frame of this MTU carries on the connection.
fn frame_payload_bytes(mtu_bytes: i64, ip_version: u8, timestamps: bool) -> i64 {
    let ip_header = if ip_version == 6 { 40 } else { 20 };
    mtu_bytes - ip_header - TCP_HEADER_BYTES - TIMESTAMP_OPTION_BYTES * i64::from(timestamps)
}

/// The MSS estimated from the payload sizes seen, where no handshake announced one, and
/// whether the connection shows jumbo frames (`handshake._estimated_mss`).
fn estimated_mss(
    sizes: Option<&HashMap<u32, u32>>,
    ethernet: i64,
    jumbo_limit: i64,
) -> (i64, bool) {
    let Some(sizes) = sizes else {
        return (ethernet, false);
    };
    let sized = || sizes.iter().map(|(size, seen)| (i64::from(*size), *seen));
    let largest_fitting = sized()
        .filter(|(size, _)| *size <= ethernet)
        .map(|(size, _)| size)
        .max()
        .unwrap_or(0);
    let found = largest_fitting >= SMALLEST_FULL_SEGMENT_BYTES;
    let estimate = if found { largest_fitting } else { ethernet };
    let over: Vec<(i64, u32)> = sized()
        .filter(|(size, _)| *size > ethernet && *size <= jumbo_limit)
        .collect();
    let largest = over.iter().map(|(size, _)| *size).max();
    let most_seen = over.iter().map(|(_, seen)| *seen).max();
    let jumbo_size = over
        .iter()
        .find(|(size, seen)| {
            Some(*size) == largest && Some(*seen) == most_seen && *seen >= MIN_JUMBO_FRAMES
        })
        .map(|(size, _)| *size)
        .filter(|size| size % ethernet != 0 && size % estimate != 0);
    match jumbo_size {
        Some(size) => (size, true),
        None => (estimate, false),
    }
}
