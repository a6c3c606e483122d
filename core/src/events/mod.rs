//! Events found as the packets come, from each packet as its connection took it
//! (`flows::Taken`): the data segments in context (`segments`), the gaps of each connection's
//! timeline (`gaps`), which the other causes' rules read, and the messages and write bursts
//! (`messages`). State is kept per live connection, with its own packets; when the connection
//! ends, its events are finished into the tables (`tables`), with the detectors' rows of its
//! segments (`detector_rows`), and its state is let go.

pub mod counts;
pub mod detector_rows;
pub mod finisher;
pub mod gaps;
pub mod messages;
pub mod order;
pub mod segments;
pub mod tables;

use crate::flows::Taken;
use crate::flows::packets::{ConnectionPackets, Finished, Finishing};
use crate::flows::side::ROLE_DATA;
use detector_rows::{Carried, PayloadSizes};
use finisher::{Ended, Finisher};
use gaps::ConnectionGaps;
use messages::{BURST_GAP_US, ConnectionMessages, IDLE_GAP_US};
use segments::{DirectionContext, SegmentRows};
use tables::ChartPackets;
pub use tables::{EventTables, Found, Mark};

/// What a live connection's own state costs, counted in packets (`Events::live_load`).
const CONNECTION_COST_PACKETS: usize = 10;

/// What a budget on the live connections counts (`Events::live_load`).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Load {
    /// Their packets and their state alone: a capture file's pass, whose events are its
    /// findings' evidence, kept to the end whichever way the capture is read.
    PacketsOnly,
    /// Their kept event rows too: a capture from an interface, which has no end.
    WithEvents,
}
/// A live connection holding this many packets has what it can of its events finished, and
/// the packets they no longer read let go (`ConnectionEvents::let_go`); then again each time
/// it holds this many more, or twice as many as it kept.
const LET_GO_PACKETS: usize = 1 << 16;

/// One live connection's events so far.
#[derive(Clone)]
struct ConnectionEvents {
    packets: ConnectionPackets,
    /// Its two directions' context (by sending endpoint).
    directions: [DirectionContext; 2],
    segments: SegmentRows,
    timeline: ConnectionGaps,
    messages: ConnectionMessages,
    bursts: ConnectionMessages,
    /// Its payload sizes counted as its segments are finished.
    sizes: PayloadSizes,
    /// What its directions' rows carry, as its segments are finished.
    carried: Carried,
    /// The rows finished while it went on, handed over with the rest when it ends.
    early: Option<Box<Found>>,
    /// How many packets it holds when it is next looked at to let some go.
    let_go_at: usize,
    /// Its kept rows (`kept_rows`) as `Events` last counted them.
    kept_counted: usize,
}

impl ConnectionEvents {
    fn new(let_go_at: usize) -> ConnectionEvents {
        ConnectionEvents {
            packets: ConnectionPackets::default(),
            directions: Default::default(),
            segments: SegmentRows::default(),
            timeline: ConnectionGaps::default(),
            messages: ConnectionMessages::cut_at(IDLE_GAP_US),
            bursts: ConnectionMessages::cut_at(BURST_GAP_US),
            sizes: PayloadSizes::default(),
            carried: Carried::default(),
            early: None,
            let_go_at,
            kept_counted: 0,
        }
    }

    /// What it keeps to its end beside its packets: the rows finished early, its gaps (and
    /// the retransmissions and D-SACKs that name their causes), its lone segments waiting for
    /// their answer.
    fn kept_rows(&self) -> usize {
        self.early.as_ref().map_or(0, |early| early.rows())
            + self.timeline.kept()
            + self.segments.waiting.len()
    }

    /// The connection (number `connection`) has ended: its events, read with `finishing`, go
    /// to `found` (with the segments in context where `made.context`, its packets' chart
    /// values where `made.chart_packets`).
    fn finish(self, connection: u32, finishing: &Finishing, found: &mut Found, made: Made) {
        let ConnectionEvents {
            packets,
            mut segments,
            timeline,
            messages,
            bursts,
            mut sizes,
            mut carried,
            early,
            ..
        } = self;
        let flows = Finished {
            packets: &packets,
            at: finishing,
        };
        if let Some(early) = early {
            found.append(*early);
        }
        timeline.finish(connection, finishing, &mut found.gaps);
        let rows: Vec<usize> = segments
            .rows
            .iter()
            .map(|segment| segment.row as usize)
            .collect();
        messages.finish_messages(
            connection,
            &rows,
            &flows,
            (&mut found.messages, &mut found.message_details),
        );
        bursts.finish_bursts(connection, &rows, &flows, &mut found.bursts);
        found.count_messages(connection, messages.count());
        let numbers = messages.numbers();
        let mut waiting = std::mem::take(&mut segments.waiting);
        detector_rows::test_waiting(&mut waiting, &flows, &mut found.lone_segments, true);
        detector_rows::detector_rows(
            connection,
            (&segments, &numbers, &mut carried),
            &flows,
            (&mut found.untimed_stalls, &mut found.lone_segments),
            (&mut sizes, None),
        );
        sizes.finish(connection, &mut found.payload_counts);
        if made.context {
            segments.finish_context(connection, &flows, &packets, &numbers, &mut found.segments);
        }
        if made.chart_packets {
            chart_packets(connection, &flows, &mut found.chart_packets);
        }
    }

    /// The connection (number `connection`) goes on, its finishing values `finishing` known
    /// for sure: finish its held segments (their detectors' rows, their messages and write
    /// bursts that have ended, their payload sizes counted; a lone segment whose test waits
    /// for packets to come is kept aside), and let go of them and of every packet but those
    /// the next segments read: how many packets.
    fn let_go(&mut self, connection: u32, finishing: &Finishing) -> usize {
        let flows = Finished {
            packets: &self.packets,
            at: finishing,
        };
        let numbers = self.messages.numbers();
        let rows: Vec<usize> = self
            .segments
            .rows
            .iter()
            .map(|segment| segment.row as usize)
            .collect();
        let early = self.early.get_or_insert_with(Box::default);
        let mut waiting = std::mem::take(&mut self.segments.waiting);
        detector_rows::test_waiting(&mut waiting, &flows, &mut early.lone_segments, false);
        detector_rows::detector_rows(
            connection,
            (&self.segments, &numbers, &mut self.carried),
            &flows,
            (&mut early.untimed_stalls, &mut early.lone_segments),
            (&mut self.sizes, Some(&mut waiting)),
        );
        self.segments.waiting = waiting;
        self.messages.let_go(
            connection,
            &rows,
            &flows,
            (&mut early.messages, Some(&mut early.message_details)),
        );
        self.bursts
            .let_go(connection, &rows, &flows, (&mut early.bursts, None));
        self.segments.let_go_all(&mut self.directions);
        let read: Vec<usize> = self
            .directions
            .iter()
            .flat_map(DirectionContext::rows_read)
            .collect();
        self.packets.let_go_all_but(&read)
    }
}

/// What is made of each finished connection beside its events.
#[derive(Clone, Copy, Default)]
struct Made {
    /// The segments in context, their packets named by rows of the run's packet table.
    context: bool,
    /// What the charts read of each packet (`tables::ChartPackets`).
    chart_packets: bool,
}

/// A finished connection's packets as the charts read them, with the packet table's values.
fn chart_packets(connection: u32, flows: &Finished, table: &mut ChartPackets) {
    for row in flows.packets.held() {
        table.frame.push(flows.frame(row));
        table.time_us.push(flows.time_us(row));
        table.connection.push(connection as i32);
        table.direction.push(flows.direction(flows.sender(row)));
        table.payload_bytes.push(flows.payload_bytes(row) as u32);
        table.rel_seq.push(flows.seq(row));
        table.rel_ack.push(flows.ack(row));
    }
}

/// Live connections' events copied (`Events::snapshot`).
pub struct EventsSnapshot(Vec<(u32, Finishing, ConnectionEvents)>);

impl EventsSnapshot {
    /// The copied events finished as if their connections ended now.
    pub fn finish(self) -> Found {
        let mut found = Found::default();
        for (connection, finishing, events) in self.0 {
            events.finish(connection, &finishing, &mut found, Made::default());
        }
        found
    }
}

/// A batch of fewer connections makes no room for the next: a long connection's rows come
/// whole (its early rows, taken over as they are) or grow by mapping more memory, not by
/// copying, and room for millions of rows held the memory the batch before let go of.
const ROOM_MIN_CONNECTIONS: usize = 64;

pub struct Events {
    /// By connection number, its events while it is live (None once finished).
    live: Vec<Option<Box<ConnectionEvents>>>,
    found: Found,
    /// Where ended connections are finished in a thread of their own (`finisher`), rather
    /// than into `found` as they end.
    finisher: Option<Finisher>,
    /// What is made beside the events: the segments in context where the run's packet table
    /// is kept (their packets named by its rows), or the packets' chart values.
    made: Made,
    /// The sizes of the tables last taken, until the next batch's are given room for as many.
    room_for: Option<Mark>,
    /// The packets the live connections hold, how many they are, and the rows they keep
    /// beside them once they have let packets go (`ConnectionEvents::kept_rows`, counted as
    /// they let go).
    live_packets: usize,
    live_connections: usize,
    kept_rows: usize,
    /// A connection holding this many packets has some let go (`LET_GO_PACKETS`); never where
    /// a packet table or the charts read every packet as the connection ends.
    let_go_packets: Option<usize>,
}

impl Default for Events {
    fn default() -> Events {
        Events {
            live: Vec::new(),
            found: Found::default(),
            finisher: None,
            made: Made::default(),
            room_for: None,
            live_packets: 0,
            live_connections: 0,
            kept_rows: 0,
            let_go_packets: Some(LET_GO_PACKETS),
        }
    }
}

impl Events {
    /// Make the segments in context, naming packets by their rows of the run's packet table.
    pub fn with_context(&mut self) {
        self.made.context = true;
        self.let_go_packets = None;
    }

    /// Give each finished connection's packets as the charts read them (`ChartPackets`).
    pub fn with_chart_packets(&mut self) {
        self.made.chart_packets = true;
        self.let_go_packets = None;
    }

    /// Whether live connections let their packets go as they go.
    pub fn lets_go(&self) -> bool {
        self.let_go_packets.is_some()
    }

    /// Look at a live connection to let packets go once it holds `packets` packets (to
    /// test the letting go on small captures).
    pub fn let_go_at(&mut self, packets: usize) {
        if self.let_go_packets.is_some() {
            self.let_go_packets = Some(packets.max(1));
        }
    }

    /// Take `packet`: whether its connection is to be looked at to let packets go
    /// (`let_go`).
    pub fn take(&mut self, packet: &Taken) -> bool {
        let connection = packet.connection as usize;
        if connection >= self.live.len() {
            self.live.resize_with(connection + 1, || None);
        }
        if self.live[connection].is_none() {
            self.live_connections += 1;
        }
        let first_look = self.let_go_packets.unwrap_or(usize::MAX);
        let events = self.live[connection]
            .get_or_insert_with(|| Box::new(ConnectionEvents::new(first_look)));
        let row = events.packets.push(packet, self.made.context);
        self.live_packets += 1;
        let packet = &Taken { row, ..*packet };
        segments::take(&mut events.directions, packet, &mut events.segments);
        if packet.role == ROLE_DATA && packet.payload_bytes > 0 {
            events.messages.segment(packet);
            events.bursts.segment(packet);
        }
        events.timeline.take(packet);
        events.packets.len() >= events.let_go_at
    }

    /// Let go what live connection `connection` can of its packets, where its finishing
    /// values are known for sure (`finishing`), and look again once it holds
    /// `LET_GO_PACKETS` more packets, or twice as many as it kept.
    pub fn let_go(&mut self, connection: u32, finishing: Option<&Finishing>) {
        let Some(events) = self
            .live
            .get_mut(connection as usize)
            .and_then(Option::as_mut)
        else {
            return;
        };
        // Where a packet table or the charts read every packet when the connection ends
        // (`let_go_packets` None), nothing is let go, however the call came.
        if let Some(finishing) = finishing.filter(|_| self.let_go_packets.is_some()) {
            self.live_packets -= events.let_go(connection, finishing);
            let kept = events.kept_rows();
            self.kept_rows = self.kept_rows - events.kept_counted + kept;
            events.kept_counted = kept;
        }
        let held = events.packets.len();
        let step = self.let_go_packets.unwrap_or(usize::MAX);
        events.let_go_at = held.saturating_add(step.max(held));
    }

    /// How many packets live connection `connection` holds.
    pub fn held_packets(&self, connection: u32) -> usize {
        self.live
            .get(connection as usize)
            .and_then(Option::as_ref)
            .map_or(0, |events| events.packets.len())
    }

    /// The numbers of the live connections.
    pub fn live_connections(&self) -> Vec<u32> {
        self.live
            .iter()
            .enumerate()
            .filter(|(_, events)| events.is_some())
            .map(|(connection, _)| connection as u32)
            .collect()
    }

    /// Connection `connection` has ended: its events, read with `finishing`, go to the tables,
    /// and its state is let go.
    pub fn finish_connection(&mut self, connection: u32, finishing: &Finishing) {
        let Some(events) = self
            .live
            .get_mut(connection as usize)
            .and_then(Option::take)
        else {
            return;
        };
        self.live_packets -= events.packets.len();
        self.live_connections -= 1;
        self.kept_rows -= events.kept_counted;
        match &self.finisher {
            Some(finisher) => finisher.finish(Ended {
                connection,
                finishing: *finishing,
                events,
            }),
            None => {
                events.finish(connection, finishing, &mut self.found, self.made);
                self.make_room_when_due();
            }
        }
    }

    /// Finish ended connections in a thread of their own (`finisher`): for a pass whose
    /// tables are all taken at its end (`finished`, `into_python`), not a batch at a time
    /// (`take_found`), with nothing else running beside it.
    pub fn finish_apart(&mut self) {
        self.finisher = Some(Finisher::start(self.made));
    }

    /// A copy of the live connections' events (numbered, each with what its packets are
    /// finished with), to finish as if the connections ended now (`EventsSnapshot::finish`)
    /// while the pass goes on.
    pub fn snapshot(&self, live: &[(u32, Finishing)]) -> EventsSnapshot {
        EventsSnapshot(
            live.iter()
                .filter_map(|(connection, finishing)| {
                    let events = self.live.get(*connection as usize)?.as_ref()?;
                    Some((*connection, *finishing, (**events).clone()))
                })
                .collect(),
        )
    }

    /// The event tables of the connections finished since they were last taken. The next
    /// batch's are given room for as many rows once they hold an eighth of them
    /// (`Found::make_room`): made at once, the room was taken while Python still held the
    /// batch before, and the memory Python let go of after was not reused.
    pub fn take_found(&mut self) -> Found {
        let sizes = self.found.mark();
        self.room_for = (sizes.connections() >= ROOM_MIN_CONNECTIONS).then_some(sizes);
        std::mem::take(&mut self.found)
    }

    /// Make the tables' room once they hold an eighth of the last batch's rows.
    fn make_room_when_due(&mut self) {
        if let Some(sizes) = self.room_for
            && self.found.rows() * 8 >= sizes.rows()
        {
            self.found.make_room(&sizes);
            self.room_for = None;
        }
    }

    /// Where the tables stand as a capture begins, to go back to if it cannot be read
    /// (`truncate`). Where connections are finished apart, the finishing thread keeps that
    /// place itself, in the order of the work it is handed, and the mark returned is unused.
    pub fn capture_begins(&mut self) -> Mark {
        if let Some(finisher) = &self.finisher {
            finisher.capture_begins();
        }
        self.found.mark()
    }

    /// Whether the capture begun last was finished whole (its connections' events, finished
    /// apart, raised no panic).
    pub fn capture_read(&self) -> bool {
        self.finisher.as_ref().is_none_or(Finisher::capture_read)
    }

    /// Drop what was found since `mark`, as the capture begun last began (a capture whose
    /// read failed adds nothing).
    pub fn truncate(&mut self, mark: Mark, connections: usize) {
        match &self.finisher {
            Some(finisher) => finisher.capture_failed(),
            None => self.found.truncate(mark),
        }
        self.live.truncate(connections);
        self.live_packets = self
            .live
            .iter()
            .flatten()
            .map(|events| events.packets.len())
            .sum();
        self.kept_rows = self
            .live
            .iter()
            .flatten()
            .map(|events| events.kept_counted)
            .sum();
        self.live_connections = self.live.iter().flatten().count();
    }

    /// The event tables as dicts of numpy arrays (every connection finished): the segments
    /// in context (`row`: the segment's packet row, `previous_data`, `peer_latest`,
    /// `peer_next`, `own_next_data`: packet rows, NONE: none; `sent_max_before`, counted from
    /// the ISN, NONE: nothing sent before; the counts `peer_data_between` and
    /// `own_retransmissions_between`; `message`), empty columns without `with_context`; the
    /// gaps, the messages, the write bursts and the detectors' rows.
    pub fn into_python(self, py: pyo3::Python<'_>) -> pyo3::PyResult<EventTables<'_>> {
        py.detach(|| self.finished().ordered(None)).into_python(py)
    }

    /// The event tables of every connection finished, as they were finished (waiting for the
    /// finishing thread, where there is one).
    pub fn finished(self) -> Found {
        match self.finisher {
            Some(finisher) => finisher.found(),
            None => self.found,
        }
    }

    /// How many packets the live connections hold.
    pub fn live_packets(&self) -> usize {
        self.live_packets
    }

    /// What the live connections hold, counted in packets: each packet, each connection as
    /// `CONNECTION_COST_PACKETS` (its state takes about 2 KB whatever its packets, as much as
    /// 10 packets' share of rows, segments and gaps), and with `Load::WithEvents` each row
    /// they keep beside their packets once they have let some go.
    pub fn live_load(&self, load: Load) -> usize {
        let kept_rows = match load {
            Load::WithEvents => self.kept_rows,
            Load::PacketsOnly => 0,
        };
        self.live_packets + kept_rows + self.live_connections * CONNECTION_COST_PACKETS
    }

    /// How many rows the event tables hold.
    pub fn rows(&self) -> usize {
        self.found.rows()
    }
}
