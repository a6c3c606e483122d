//! Connections rebuilt in one pass over the decoded packets in file order, with state per
//! connection: which conversation each packet belongs to (Wireshark's `tcp.stream`, counted
//! over every TCP packet, also those a filter leaves out), its direction, its sequence and
//! ACK numbers relative to the ISNs, its role, and the connection table. The rules are those
//! of `nagledetect/flows/` (`connections.py`, `roles.py`, `handshake.py`, `vantage.py`); the
//! tables equal `build_flows`'s (tests/test_core_flows.py).

pub mod ack_lag;
pub mod connection;
pub mod side;
pub mod tables;

use crate::decode::TcpPacket;
use connection::Connection;
use tables::PacketRows;

pub const FLAG_FIN: u16 = 0x01;
pub const FLAG_SYN: u16 = 0x02;
pub const FLAG_RST: u16 = 0x04;
pub const FLAG_ACK: u16 = 0x10;
/// A SYN with a new ISN after this long a silence starts a new conversation on its 4-tuple.
const PORT_REUSE_SILENCE_US: i64 = 300 * 1_000_000;

/// An endpoint: its address as four words (IPv4 mapped as ::ffff:a.b.c.d) and its port.
pub type Endpoint = ([u32; 4], u16);

/// A 4-tuple's state across its lifetimes (`connections.new_lifetimes`).
struct Pair {
    stream: u32,
    /// The connection its current conversation is, once a packet of it was accepted.
    connection: Option<u32>,
    /// The ISN of its latest SYN (without ACK).
    syn_seq: Option<u32>,
    /// A FIN or RST since its latest SYN (or since its first packet, without one).
    closed: bool,
    last_us: i64,
}

/// A packet as the tracker takes it.
pub struct Packet<'a> {
    pub frame: u32,
    pub time_us: i64,
    pub captured_bytes: u32,
    pub tcp: &'a TcpPacket,
    /// Whether the filter (if any) accepts it: only accepted packets are analysed, but every
    /// TCP packet counts for the conversation numbers.
    pub accepted: bool,
}

/// The size of the tables at a point of the pass.
#[derive(Clone, Copy)]
pub struct Mark {
    packets: usize,
    pub connections: usize,
}

#[derive(Default)]
pub struct FlowTracker {
    /// Keyed with foldhash, seeded per process: fast, and a capture crafted to collide keys
    /// cannot know the seed.
    pairs: foldhash::HashMap<[Endpoint; 2], Pair>,
    streams: u32,
    connections: Vec<Connection>,
    packets: PacketRows,
}

/// A packet taken into its connection: where it went and what the events read of it.
pub struct Taken {
    pub connection: u32,
    pub sender: usize,
    /// Its row in the packet table.
    pub row: usize,
    pub role: u8,
    pub payload_bytes: u32,
    /// Its sequence number counted from its side's first packet.
    pub seq_u: i64,
    pub frame: u32,
    pub time_us: i64,
    pub flags: u16,
    /// Its sequence and ACK numbers counted from the ISNs as far as they are known when it
    /// comes (the ACK `NO_ACK` without the ACK flag), and its window in bytes.
    pub seq: i64,
    pub ack: i64,
    pub ack_raw: u32,
    pub window_bytes: i64,
    /// The left edge of its first SACK block, if it has one.
    pub first_sack_left_raw: Option<u32>,
}

impl FlowTracker {
    /// Take `packet`: None where the filter does not accept it (it only counts for the
    /// conversation numbers).
    pub fn take(&mut self, packet: &Packet<'_>) -> Option<Taken> {
        let tcp = packet.tcp;
        let src = (tcp.src, tcp.src_port);
        let dst = (tcp.dst, tcp.dst_port);
        let (endpoints, sender) = if src <= dst {
            ([src, dst], 0)
        } else {
            ([dst, src], 1)
        };
        let FlowTracker {
            pairs,
            streams,
            connections,
            packets,
        } = self;
        let pair = lifetime_of(pairs, streams, endpoints, tcp, packet.time_us);
        if !packet.accepted {
            return None;
        }
        let stream = pair.stream;
        let connection = *pair.connection.get_or_insert_with(|| {
            connections.push(Connection::new(stream, endpoints, packet.frame, sender));
            (connections.len() - 1) as u32
        });
        let state = &mut connections[connection as usize];
        let numbered = state.take(packet.frame, packet.time_us, tcp, sender);
        let (seq, ack, window_bytes) = state.counted(sender, &numbered, tcp);
        let options = &tcp.options;
        let taken = Taken {
            connection,
            sender,
            row: packets.len(),
            role: numbered.role,
            payload_bytes: tcp.payload_bytes,
            seq_u: numbered.seq_u,
            frame: packet.frame,
            time_us: packet.time_us,
            flags: tcp.flags,
            seq,
            ack,
            ack_raw: tcp.ack,
            window_bytes,
            first_sack_left_raw: (options.sack_block_count > 0).then(|| options.sack_blocks[0].0),
        };
        packets.push(packet, connection, sender, &numbered);
        Some(taken)
    }

    /// Keep only the packet columns the events read (see `PacketRows`).
    pub fn events_only(&mut self) {
        self.packets.events_only = true;
    }

    /// Start on the next capture of a run read together: its conversations and connections
    /// are its own (numbered from 0, and on from the earlier captures' respectively).
    pub fn next_capture(&mut self) {
        self.pairs.clear();
        self.streams = 0;
    }

    /// Where the tables stand, to go back to if a capture's read fails (`truncate`).
    pub fn mark(&self) -> Mark {
        Mark {
            packets: self.packets.len(),
            connections: self.connections.len(),
        }
    }

    /// Drop what was taken since `mark`: a capture whose read failed adds nothing.
    pub fn truncate(&mut self, mark: Mark) {
        self.packets.truncate(mark.packets);
        self.connections.truncate(mark.connections);
        self.next_capture();
    }

    /// The packet and connection tables.
    pub fn finish(self) -> tables::FlowTables {
        tables::FlowTables::new(self.packets, &self.connections)
    }
}

/// The state of the 4-tuple `endpoints` with the packet `tcp` taken: its conversation number
/// (`stream`) is its current one, or a new one where this packet starts one (a SYN with a new
/// ISN after a FIN or RST since the 4-tuple's previous SYN, or after a long silence);
/// conversations are numbered in order of their first packet.
fn lifetime_of<'a>(
    pairs: &'a mut foldhash::HashMap<[Endpoint; 2], Pair>,
    streams: &mut u32,
    endpoints: [Endpoint; 2],
    tcp: &TcpPacket,
    time_us: i64,
) -> &'a mut Pair {
    let syn_only = tcp.flags & (FLAG_SYN | FLAG_ACK) == FLAG_SYN;
    let closing = tcp.flags & (FLAG_FIN | FLAG_RST) != 0;
    let mut first = false;
    let pair = pairs.entry(endpoints).or_insert_with(|| {
        first = true;
        *streams += 1;
        Pair {
            stream: *streams - 1,
            connection: None,
            syn_seq: syn_only.then_some(tcp.seq),
            closed: !syn_only && closing,
            last_us: time_us,
        }
    });
    if first {
        return pair;
    }
    if syn_only {
        let new_isn = pair.syn_seq != Some(tcp.seq);
        let silence = time_us - pair.last_us > PORT_REUSE_SILENCE_US;
        if new_isn && (pair.closed || silence) {
            pair.stream = *streams;
            pair.connection = None;
            *streams += 1;
        }
        pair.syn_seq = Some(tcp.seq);
        pair.closed = false;
    } else if closing {
        pair.closed = true;
    }
    pair.last_us = time_us;
    pair
}
