//! Connections rebuilt in one pass over the decoded packets in file order, with state per
//! connection: which conversation each packet belongs to (Wireshark's `tcp.stream`, counted
//! over every TCP packet, also those a filter leaves out), its direction, its sequence and
//! ACK numbers relative to the ISNs, its role, and the connection table. The rules are those
//! of `nagledetect/flows/` (`connections.py`, `roles.py`, `handshake.py`, `vantage.py`); the
//! tables equal `build_flows`'s (tests/test_core_flows.py).
//!
//! A connection's state is kept while it is live. It ends when a new SYN starts a new
//! conversation on its 4-tuple, when its capture ends, or when it has been silent for long
//! enough after its close (a FIN each way, or a RST: `CLOSED_LINGER_US`) or without one
//! (`IDLE_RELEASE_US`): then
//! its row of the connection table is made and its state let go (`end_connection`), so that
//! memory follows the live connections, not the packets. A packet that comes on a 4-tuple
//! after its connection was let go for silence begins a new connection of the same
//! conversation.

pub mod ack_lag;
pub mod connection;
pub mod packets;
pub mod settling;
pub mod side;
pub mod tables;

use crate::decode::TcpPacket;
use connection::{Connection, NO_ACK};
use packets::Finishing;
use tables::{ConnectionRecord, PacketRows};

pub const FLAG_FIN: u16 = 0x01;
pub const FLAG_SYN: u16 = 0x02;
pub const FLAG_RST: u16 = 0x04;
pub const FLAG_ACK: u16 = 0x10;
/// A SYN with a new ISN after this long a silence starts a new conversation on its 4-tuple.
const PORT_REUSE_SILENCE_US: i64 = 300 * 1_000_000;
/// A connection closed both ways (or reset) is let go after this long a silence: Linux holds a
/// closed connection's 4-tuple in TIME_WAIT for 60 s, and a late retransmission of the close
/// comes within it. A half-closed connection is not closed: its other side may send for long.
const CLOSED_LINGER_US: i64 = 120 * 1_000_000;
/// A connection not closed is let go after this long a silence: longer than Linux's default
/// keepalive time (2 h), so that a connection kept alive is never split.
const IDLE_RELEASE_US: i64 = 3 * 3600 * 1_000_000;
/// ... and only once this many TCP packets of the capture have come since its last: a damaged
/// or edited capture's timestamps can leap years ahead and back, and a silence counted by them
/// alone would end connections that go on.
const RELEASE_AFTER_PACKETS: u64 = 10_000;
/// Silent connections are looked for at most this often (capture time), and only once as many
/// packets have come since the last look as there were live connections then, so that looking
/// costs a bounded share of the pass.
const SWEEP_INTERVAL_US: i64 = 10 * 1_000_000;

/// A 4-tuple: its two endpoints in order, and whether they are IPv4 addresses (held as IPv4-mapped
/// IPv6 ones, which an IPv6 packet may also carry: Wireshark counts those a conversation of
/// their own).
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
struct Tuple {
    endpoints: [Endpoint; 2],
    ipv4: bool,
}

/// Every 4-tuple seen: those of IPv4 packets under a key of 12 bytes, the others under their
/// two endpoints, 40 bytes (a capture of a million connections holds a million of them, kept
/// for the conversation numbers to the capture's end: 170 MB with every key of 40 bytes).
#[derive(Default)]
struct Pairs {
    ipv4: foldhash::HashMap<[u32; 3], Pair>,
    others: foldhash::HashMap<[Endpoint; 2], Pair>,
}

impl Pairs {
    /// The 4-tuple's state, made by `new` if it has none yet; and whether it was made.
    fn get_or_insert_with(
        &mut self,
        tuple: Tuple,
        new: impl FnOnce() -> Pair,
    ) -> (&mut Pair, bool) {
        let mut made = false;
        let pair = match ipv4_key(&tuple) {
            Some(key) => self.ipv4.entry(key).or_insert_with(|| {
                made = true;
                new()
            }),
            None => self.others.entry(tuple.endpoints).or_insert_with(|| {
                made = true;
                new()
            }),
        };
        (pair, made)
    }

    fn get_mut(&mut self, tuple: &Tuple) -> Option<&mut Pair> {
        match ipv4_key(tuple) {
            Some(key) => self.ipv4.get_mut(&key),
            None => self.others.get_mut(&tuple.endpoints),
        }
    }

    fn values_mut(&mut self) -> impl Iterator<Item = &mut Pair> {
        self.ipv4.values_mut().chain(self.others.values_mut())
    }

    fn clear(&mut self) {
        self.ipv4.clear();
        self.others.clear();
    }
}

/// An IPv4 4-tuple as three words: both addresses (the last word of each mapped one), then
/// both ports; None for any other. One 4-tuple has one key, and no other has it.
fn ipv4_key(tuple: &Tuple) -> Option<[u32; 3]> {
    let [(first, first_port), (second, second_port)] = tuple.endpoints;
    tuple.ipv4.then(|| {
        [
            first[3],
            second[3],
            (u32::from(first_port) << 16) | u32::from(second_port),
        ]
    })
}

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
    /// Since its latest SYN, by endpoint: whether it sent a FIN; and whether either sent a RST.
    fin_sent: [bool; 2],
    reset: bool,
    last_us: i64,
    /// The capture's count of TCP packets at its latest packet.
    last_packet: u64,
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
    connections: usize,
    records: usize,
}

pub struct FlowTracker {
    /// Keyed with foldhash, seeded per process: fast, and a capture crafted to collide keys
    /// cannot know the seed.
    pairs: Pairs,
    streams: u32,
    /// The TCP packets of the capture so far.
    tcp_packets: u64,
    /// The capture's connections ended for their silence so far.
    pub ended_silent: u64,
    /// By connection number, its state while it is live (None once it has ended).
    live: Vec<Option<Box<Connection>>>,
    /// Connections whose end was found and which are not yet finished, and whether they are
    /// in descending order (the next to finish last).
    ended: Vec<u32>,
    ended_in_order: bool,
    next_sweep_us: i64,
    next_sweep_packet: u64,
    /// The 4-tuples that had a live connection at the last look, and those given one since.
    live_pairs: Vec<Tuple>,
    /// The ended connections' rows of the connection table, in the order they ended.
    records: Vec<ConnectionRecord>,
    /// Whether the packet table is kept; then also, for each connection finished and not yet
    /// taken (`take_packets_of`; or all of them, for `finish`), what its packets are finished
    /// with, and how many rows of the table are theirs.
    keep_packets: bool,
    packets: PacketRows,
    finishing: Vec<(u32, Finishing)>,
    finished_packet_rows: usize,
    /// What connections seen without their handshake are finished with, learnt ahead
    /// (`settling`), by connection number.
    known_finishing: foldhash::HashMap<u32, Finishing>,
}

impl Default for FlowTracker {
    fn default() -> FlowTracker {
        FlowTracker {
            pairs: Pairs::default(),
            streams: 0,
            tcp_packets: 0,
            ended_silent: 0,
            live: Vec::new(),
            ended: Vec::new(),
            ended_in_order: true,
            next_sweep_us: i64::MIN,
            next_sweep_packet: 0,
            live_pairs: Vec::new(),
            records: Vec::new(),
            keep_packets: true,
            packets: PacketRows::default(),
            finishing: Vec::new(),
            finished_packet_rows: 0,
            known_finishing: foldhash::HashMap::default(),
        }
    }
}

/// A packet taken into its connection: where it went and what the events read of it.
#[derive(Clone, Copy)]
pub struct Taken {
    pub connection: u32,
    pub sender: usize,
    /// Its row among its connection's packets (set as its connection's events keep it).
    pub row: usize,
    /// Its row in the packet table, where one is kept.
    pub table_row: usize,
    pub role: u8,
    pub payload_bytes: u32,
    /// Its sequence and ACK numbers counted from its side's first packet (the ACK `NO_ACK`
    /// without the ACK flag), and its raw window.
    pub seq_u: i64,
    pub ack_u: i64,
    pub window_raw: u16,
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
        let tuple = Tuple {
            endpoints,
            ipv4: tcp.ip_version == 4,
        };
        self.tcp_packets += 1;
        self.sweep(packet.time_us);
        let FlowTracker {
            pairs,
            streams,
            tcp_packets,
            live,
            live_pairs,
            ended,
            ended_in_order,
            packets,
            keep_packets,
            ..
        } = self;
        let before = ended.len();
        let pair = lifetime_of(pairs, streams, (tuple, sender), tcp, packet.time_us, ended);
        if ended.len() != before {
            *ended_in_order = false;
        }
        pair.last_packet = *tcp_packets;
        if !packet.accepted {
            return None;
        }
        let stream = pair.stream;
        let connection = *pair.connection.get_or_insert_with(|| {
            live_pairs.push(tuple);
            live.push(Some(Box::new(Connection::new(
                stream,
                endpoints,
                packet.frame,
                sender,
            ))));
            (live.len() - 1) as u32
        });
        let state = live[connection as usize]
            .as_mut()
            .expect("a 4-tuple's connection is live");
        let numbered = state.take(packet.frame, packet.time_us, tcp, sender);
        let (seq, ack, window_bytes) = state.counted(sender, &numbered, tcp);
        let options = &tcp.options;
        let taken = Taken {
            connection,
            sender,
            row: 0,
            table_row: packets.len(),
            role: numbered.role,
            payload_bytes: tcp.payload_bytes,
            seq_u: numbered.seq_u,
            ack_u: numbered.ack_u.unwrap_or(NO_ACK),
            window_raw: tcp.window,
            frame: packet.frame,
            time_us: packet.time_us,
            flags: tcp.flags,
            seq,
            ack,
            ack_raw: tcp.ack,
            window_bytes,
            first_sack_left_raw: (options.sack_block_count > 0).then(|| options.sack_blocks[0].0),
        };
        if *keep_packets {
            packets.push(packet, connection, sender, &numbered);
        }
        Some(taken)
    }

    /// Keep no packet table: the caller reads only the connections and the events.
    pub fn without_packet_table(&mut self) {
        self.keep_packets = false;
    }

    /// Note the connections silent long enough to let go (see the module's comment), looking
    /// at most once every `SWEEP_INTERVAL_US` of capture time.
    fn sweep(&mut self, now_us: i64) {
        if now_us < self.next_sweep_us || self.tcp_packets < self.next_sweep_packet {
            return;
        }
        let FlowTracker {
            pairs,
            live_pairs,
            ended,
            ended_in_order,
            ended_silent,
            tcp_packets,
            ..
        } = self;
        live_pairs.retain(|tuple| {
            let Some(pair) = pairs.get_mut(tuple) else {
                return false;
            };
            let Some(connection) = pair.connection else {
                return false;
            };
            let linger = if pair.reset || pair.fin_sent == [true, true] {
                CLOSED_LINGER_US
            } else {
                IDLE_RELEASE_US
            };
            let silent = now_us.saturating_sub(pair.last_us) > linger
                && *tcp_packets - pair.last_packet > RELEASE_AFTER_PACKETS;
            if silent {
                pair.connection = None;
                ended.push(connection);
                *ended_silent += 1;
                *ended_in_order = false;
            }
            !silent
        });
        // A 4-tuple whose connection a SYN replaced is listed again: once is enough.
        live_pairs.sort_unstable();
        live_pairs.dedup();
        self.next_sweep_us = now_us.saturating_add(SWEEP_INTERVAL_US);
        self.next_sweep_packet = self.tcp_packets + self.live_pairs.len() as u64;
    }

    /// The next connection found ended, to finish (`end_connection`): the lowest numbered
    /// first, so that the tables, kept in connection order, are mostly made in that order.
    /// The connections found ended since the last call are put in order once.
    pub fn next_ended(&mut self) -> Option<u32> {
        if !self.ended_in_order {
            self.ended.sort_unstable_by(|a, b| b.cmp(a));
            self.ended_in_order = true;
        }
        self.ended.pop()
    }

    /// Make connection `connection`'s row of the connection table and let its state go; what
    /// its packets are finished with.
    pub fn end_connection(&mut self, connection: u32) -> Finishing {
        let state = self.live[connection as usize]
            .take()
            .expect("a connection ends once");
        let (record, finishing) = ConnectionRecord::of(connection, &state);
        if self.keep_packets {
            self.finishing.push((connection, finishing));
            self.finished_packet_rows += record.packet_count();
        }
        self.records.push(record);
        finishing
    }

    /// Whether connections found ended wait to be finished.
    pub fn has_ended(&self) -> bool {
        !self.ended.is_empty()
    }

    /// The packet table's rows of live connections (none where no table is kept): kept until
    /// each connection ends, even where the pass lets its packets go.
    pub fn live_packet_rows(&self) -> usize {
        if self.keep_packets {
            self.packets.len() - self.finished_packet_rows
        } else {
            0
        }
    }

    /// How many connections were finished since the records were last taken.
    pub fn finished_count(&self) -> usize {
        self.records.len()
    }

    /// The rows of the connections finished since the records were last taken.
    pub fn take_records(&mut self) -> Vec<ConnectionRecord> {
        std::mem::take(&mut self.records)
    }

    /// The kept packet rows of the connections `records` (those finished since the last take),
    /// taken out of the packet table, their connections named by their positions among the
    /// records' numbers (sorted), with what each position's packets are finished with; none
    /// where no packet table is kept.
    pub fn take_packets_of(
        &mut self,
        records: &[ConnectionRecord],
    ) -> (PacketRows, Vec<Finishing>) {
        if !self.keep_packets {
            return (PacketRows::default(), Vec::new());
        }
        let mut finishing = std::mem::take(&mut self.finishing);
        finishing.sort_unstable_by_key(|(id, _)| *id);
        let ids: Vec<u32> = finishing.iter().map(|(id, _)| *id).collect();
        debug_assert_eq!(ids.len(), records.len());
        let mut rows = self.packets.split_off_finished(&ids);
        rows.renumber_connections(|id| ids.binary_search(&id).unwrap_or(0) as u32);
        self.finished_packet_rows = 0;
        (rows, finishing.into_iter().map(|(_, at)| at).collect())
    }

    /// The packet table's rows of the connections finished and not yet taken.
    pub fn finished_packet_rows(&self) -> usize {
        self.finished_packet_rows
    }

    /// Each live connection's row of the connection table and what its packets are finished
    /// with, as if it ended now (its state left as it is).
    pub fn peek(&self) -> Vec<(ConnectionRecord, Finishing)> {
        self.live
            .iter()
            .enumerate()
            .filter_map(|(id, state)| {
                state
                    .as_ref()
                    .map(|state| ConnectionRecord::of(id as u32, state))
            })
            .collect()
    }

    /// What live connection `connection`'s packets are finished with, where that is known
    /// for sure before it ends: once its SYN and SYN/ACK have come, one from each side, its
    /// client, the bases its numbers count from, its window scaling and its MSS no longer
    /// change (`Connection::handshake_seen`); else, where a first pass learnt them
    /// (`know_finishing`).
    pub fn settled_finishing(&self, connection: u32) -> Option<Finishing> {
        let state = self.live.get(connection as usize)?.as_ref()?;
        if state.handshake_seen() {
            return Some(ConnectionRecord::of(connection, state).1);
        }
        self.known_finishing.get(&connection).copied()
    }

    /// What connections seen without their handshake are finished with, by connection
    /// number, learnt by a first pass over the capture (`settling`).
    pub fn know_finishing(&mut self, known: foldhash::HashMap<u32, Finishing>) {
        self.known_finishing = known;
    }

    /// The capture's end: every live connection has ended.
    pub fn end_capture(&mut self) {
        for pair in self.pairs.values_mut() {
            if let Some(connection) = pair.connection.take() {
                self.ended.push(connection);
                self.ended_in_order = false;
            }
        }
    }

    /// Start on the next capture of a run read together: its conversations and connections
    /// are its own (numbered from 0, and on from the earlier captures' respectively).
    pub fn next_capture(&mut self) {
        self.pairs.clear();
        self.ended.clear();
        self.ended_in_order = true;
        self.streams = 0;
        self.tcp_packets = 0;
        self.ended_silent = 0;
        self.next_sweep_us = i64::MIN;
        self.next_sweep_packet = 0;
        self.live_pairs.clear();
    }

    /// Where the tables stand, to go back to if a capture's read fails (`truncate`).
    pub fn mark(&self) -> Mark {
        Mark {
            packets: self.packets.len(),
            connections: self.live.len(),
            records: self.records.len(),
        }
    }

    /// How many connections the run has numbered.
    pub fn connections(&self) -> usize {
        self.live.len()
    }

    /// Drop what was taken since `mark`: a capture whose read failed adds nothing.
    pub fn truncate(&mut self, mark: Mark) {
        self.packets.truncate(mark.packets);
        self.live.truncate(mark.connections);
        self.records.truncate(mark.records);
        self.finishing
            .retain(|(id, _)| (*id as usize) < mark.connections);
        self.next_capture();
    }

    /// The packet and connection tables (every connection finished).
    pub fn finish(self) -> tables::FlowTables {
        let mut finishing = self.finishing;
        finishing.sort_unstable_by_key(|(id, _)| *id);
        // Every connection is finished: the one at position i is connection i.
        let finishing: Vec<Finishing> = finishing.into_iter().map(|(_, at)| at).collect();
        tables::FlowTables::new(self.packets, self.records, &finishing)
    }
}

/// The state of the 4-tuple `tuple` with the packet `tcp` taken: its conversation number
/// (`stream`) is its current one, or a new one where this packet starts one (a SYN with a new
/// ISN after a FIN or RST since the 4-tuple's previous SYN, or after a long silence);
/// conversations are numbered in order of their first packet. A connection this packet ends
/// (its conversation's) goes to `ended`. `sender` is the packet's endpoint.
fn lifetime_of<'a>(
    pairs: &'a mut Pairs,
    streams: &mut u32,
    (tuple, sender): (Tuple, usize),
    tcp: &TcpPacket,
    time_us: i64,
    ended: &mut Vec<u32>,
) -> &'a mut Pair {
    let pair = conversation_of(pairs, streams, tuple, tcp, time_us, ended);
    pair.fin_sent[sender] |= tcp.flags & FLAG_FIN != 0;
    pair.reset |= tcp.flags & FLAG_RST != 0;
    pair
}

fn conversation_of<'a>(
    pairs: &'a mut Pairs,
    streams: &mut u32,
    tuple: Tuple,
    tcp: &TcpPacket,
    time_us: i64,
    ended: &mut Vec<u32>,
) -> &'a mut Pair {
    let syn_only = tcp.flags & (FLAG_SYN | FLAG_ACK) == FLAG_SYN;
    let closing = tcp.flags & (FLAG_FIN | FLAG_RST) != 0;
    let (pair, first) = pairs.get_or_insert_with(tuple, || {
        *streams += 1;
        Pair {
            stream: *streams - 1,
            connection: None,
            syn_seq: syn_only.then_some(tcp.seq),
            closed: !syn_only && closing,
            fin_sent: [false, false],
            reset: false,
            last_us: time_us,
            last_packet: 0,
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
            ended.extend(pair.connection.take());
            *streams += 1;
        }
        pair.syn_seq = Some(tcp.seq);
        pair.closed = false;
        pair.fin_sent = [false, false];
        pair.reset = false;
    } else if closing {
        pair.closed = true;
    }
    pair.last_us = time_us;
    pair
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ipv4(last_word: u32, port: u16) -> Endpoint {
        ([0, 0, 0xFFFF, last_word], port)
    }

    fn tuple(endpoints: [Endpoint; 2], ipv4: bool) -> Tuple {
        Tuple { endpoints, ipv4 }
    }

    #[test]
    fn ipv4_pairs_take_short_keys_and_no_two_pairs_share_one() {
        let pairs = [
            [ipv4(0x0A00_0001, 80), ipv4(0x0A00_0002, 40000)],
            [ipv4(0x0A00_0001, 40000), ipv4(0x0A00_0002, 80)],
            [ipv4(0x0A00_0002, 80), ipv4(0x0A00_0001, 40000)],
            [ipv4(0x0A00_0001, 80), ipv4(0x0A00_0002, 40001)],
        ];
        let keys: Vec<[u32; 3]> = pairs
            .iter()
            .filter_map(|&endpoints| ipv4_key(&tuple(endpoints, true)))
            .collect();
        assert_eq!(keys.len(), pairs.len());
        for (index, key) in keys.iter().enumerate() {
            assert!(!keys[index + 1..].contains(key));
        }
        assert_eq!(keys[0], [0x0A00_0001, 0x0A00_0002, (80 << 16) | 40000]);
        // The same words from an IPv6 packet (IPv4-mapped addresses) keep their long key.
        assert_eq!(ipv4_key(&tuple(pairs[0], false)), None);
    }

    #[test]
    fn pairs_of_either_family_keep_their_own_state() {
        let mut pairs = Pairs::default();
        let new = |stream| Pair {
            stream,
            connection: None,
            syn_seq: None,
            closed: false,
            fin_sent: [false, false],
            reset: false,
            last_us: 0,
            last_packet: 0,
        };
        let v4 = tuple([ipv4(1, 80), ipv4(2, 81)], true);
        let mapped = tuple([ipv4(1, 80), ipv4(2, 81)], false);
        let v6 = tuple(
            [([0x2001_0DB8, 0, 0, 1], 80), ([0x2001_0DB8, 0, 0, 2], 81)],
            false,
        );
        assert!(pairs.get_or_insert_with(v4, || new(0)).1);
        assert!(pairs.get_or_insert_with(mapped, || new(1)).1);
        assert!(pairs.get_or_insert_with(v6, || new(2)).1);
        let (again, made) = pairs.get_or_insert_with(v4, || new(3));
        assert!(!made && again.stream == 0);
        assert_eq!(pairs.get_mut(&mapped).map(|pair| pair.stream), Some(1));
        assert_eq!(pairs.get_mut(&v6).map(|pair| pair.stream), Some(2));
        assert_eq!(pairs.values_mut().count(), 3);
        pairs.clear();
        assert!(pairs.get_mut(&v4).is_none());
    }
}
