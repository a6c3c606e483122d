//! A pass of the flow tracker alone, ahead of the pass proper, over a capture whose long
//! connections are seen without their handshake (a capture begun after they were): such a
//! connection's client, the bases its numbers count from and its MSS (estimated from the
//! payload sizes it carries) are known for sure only at its end, so it cannot let its packets
//! go as it goes (`Events::let_go`). This pass learns them, so that the pass proper knows
//! them from the connection's first packet (`FlowTracker::know_finishing`). Connections are
//! numbered alike in both passes: by their first packet the filter accepts.

use crate::flows::packets::Finishing;
use crate::flows::{FlowTracker, Packet};

/// A connection of fewer packets than this is not worth learning ahead: it holds little.
pub const MIN_PACKETS: usize = 1024;

pub struct Settling {
    flows: FlowTracker,
    /// Connections of fewer packets are not learnt.
    min_packets: usize,
    /// By connection number, what the long connections are finished with (those whose
    /// handshake comes early do not need it, but it costs little to keep).
    known: foldhash::HashMap<u32, Finishing>,
}

impl Settling {
    /// Learn connections of `min_packets` packets or more (`MIN_PACKETS`, or fewer to test it
    /// on small captures).
    pub fn new(min_packets: usize) -> Settling {
        let mut flows = FlowTracker::default();
        flows.without_packet_table();
        Settling {
            flows,
            min_packets,
            known: foldhash::HashMap::default(),
        }
    }

    pub fn take(&mut self, packet: &Packet<'_>) {
        self.flows.take(packet);
        self.note_ended();
    }

    /// The connections found ended: their finishing values, where they are to be known.
    fn note_ended(&mut self) {
        while let Some(connection) = self.flows.next_ended() {
            let finishing = self.flows.end_connection(connection);
            for record in self.flows.take_records() {
                if record.packet_count() >= self.min_packets {
                    self.known.insert(record.id, finishing);
                }
            }
        }
    }

    /// The capture has ended: what its long connections are finished with, by connection
    /// number.
    pub fn finish(mut self) -> foldhash::HashMap<u32, Finishing> {
        self.flows.end_capture();
        self.note_ended();
        self.known
    }
}
