//! Events found as the packets come, from each packet as its connection took it
//! (`flows::Taken`): the data segments in context (`segments`), the event table the Nagle
//! rules read, the gaps of each connection's timeline (`gaps`), which the other causes'
//! rules read, and the messages and write bursts (`messages`). State is kept per connection.
//! At the end the segments give the rows the detectors read (`detector_rows`).

pub mod detector_rows;
pub mod gaps;
pub mod messages;
pub mod segments;

use numpy::IntoPyArray;
use pyo3::prelude::*;
use pyo3::types::PyDict;

use crate::flows::Taken;
use crate::flows::side::ROLE_DATA;
use crate::flows::tables::FlowTables;
use detector_rows::{DetectorRows, detector_rows};
use gaps::{ConnectionGaps, GapRows};
use messages::{BURST_GAP_US, IDLE_GAP_US, Messages};
use segments::{DirectionContext, NONE, NOTHING_SENT, SegmentRows, in_connection_order, wide_rows};

/// The event tables as dicts of numpy arrays.
pub struct EventTables<'py> {
    pub segments: Bound<'py, PyDict>,
    pub gaps: Bound<'py, PyDict>,
    pub messages: Bound<'py, PyDict>,
    pub bursts: Bound<'py, PyDict>,
    pub detector_rows: DetectorRows<'py>,
}

pub struct Events {
    /// By connection, its two directions' context (by sending endpoint).
    directions: Vec<[DirectionContext; 2]>,
    segments: SegmentRows,
    /// By connection, its timeline.
    timelines: Vec<ConnectionGaps>,
    gaps: GapRows,
    messages: Messages,
    bursts: Messages,
}

impl Default for Events {
    fn default() -> Events {
        Events {
            directions: Vec::new(),
            segments: SegmentRows::default(),
            timelines: Vec::new(),
            gaps: GapRows::default(),
            messages: Messages::cut_at(IDLE_GAP_US),
            bursts: Messages::cut_at(BURST_GAP_US),
        }
    }
}

/// The size of the event tables at a point of the pass.
#[derive(Clone, Copy)]
pub struct Mark {
    segments: usize,
    gaps: usize,
    connections: usize,
    messages: messages::Mark,
    bursts: messages::Mark,
}

impl Events {
    pub fn take(&mut self, packet: &Taken) {
        let connection = packet.connection as usize;
        if connection == self.directions.len() {
            self.directions.push(Default::default());
            self.timelines.push(ConnectionGaps::default());
        }
        segments::take(&mut self.directions[connection], packet, &mut self.segments);
        if packet.role == ROLE_DATA && packet.payload_bytes > 0 {
            self.messages.segment(packet);
            self.bursts.segment(packet);
        }
        self.timelines[connection].take(packet, &mut self.gaps);
    }

    pub fn mark(&self) -> Mark {
        Mark {
            segments: self.segments.len(),
            gaps: self.gaps.len(),
            connections: self.directions.len(),
            messages: self.messages.mark(),
            bursts: self.bursts.mark(),
        }
    }

    /// Drop what was found since `mark` (a capture whose read failed adds nothing).
    pub fn truncate(&mut self, mark: Mark) {
        self.segments.truncate(mark.segments);
        self.directions.truncate(mark.connections);
        self.gaps.truncate(mark.gaps);
        self.timelines.truncate(mark.connections);
        self.messages.truncate(mark.messages);
        self.bursts.truncate(mark.bursts);
    }

    /// The segments as a dict of numpy arrays: `row` (the segment's packet row),
    /// `previous_data`, `peer_latest`, `peer_next`, `own_next_data` (packet rows, NONE: none),
    /// `sent_max_before` (counted from the ISN, NONE: nothing sent before), and the counts
    /// `peer_data_between` and `own_retransmissions_between`. `flows` counts the sequence
    /// numbers from the ISNs. With them: the gaps, the messages, the write bursts and the
    /// detectors' rows (`detector_rows`).
    /// Without `context` the segments' rows are left out (empty columns): their rows name
    /// packets of a packet table the caller did not want.
    pub fn into_python<'py>(
        mut self,
        py: Python<'py>,
        flows: &FlowTables,
        context: bool,
    ) -> PyResult<EventTables<'py>> {
        for timeline in &self.timelines {
            timeline.finish(&mut self.gaps, flows);
        }
        let gaps = self.gaps.into_python(py, flows)?;
        let order = in_connection_order(&self.segments);
        let (message_numbers, messages) =
            self.messages
                .into_python(py, &self.segments, &order, flows, false)?;
        let (_, bursts) = self
            .bursts
            .into_python(py, &self.segments, &order, flows, true)?;
        drop(order);
        let s = self.segments;
        let sent_max_before: Vec<i64> = s
            .sent_max_u
            .iter()
            .zip(s.connection.iter().zip(&s.sender))
            .map(|(sent, (connection, sender))| {
                let offset = flows.seq_offset(*connection, usize::from(*sender));
                if *sent == NOTHING_SENT {
                    NONE
                } else {
                    (sent + offset).max(NONE)
                }
            })
            .collect();
        let segments = PyDict::new(py);
        let detector_rows = detector_rows(py, &s, &sent_max_before, &message_numbers, flows)?;
        let (s, sent_max_before, message_numbers) = if context {
            (s, sent_max_before, message_numbers)
        } else {
            (SegmentRows::default(), Vec::new(), Vec::new())
        };
        let counts = |column: Vec<u32>| column.into_iter().map(i64::from).collect::<Vec<_>>();
        segments.set_item("row", wide_rows(&s.row).into_pyarray(py))?;
        segments.set_item(
            "previous_data",
            wide_rows(&s.previous_data).into_pyarray(py),
        )?;
        segments.set_item("peer_latest", wide_rows(&s.peer_latest).into_pyarray(py))?;
        segments.set_item("peer_next", wide_rows(&s.peer_next).into_pyarray(py))?;
        segments.set_item(
            "own_next_data",
            wide_rows(&s.own_next_data).into_pyarray(py),
        )?;
        segments.set_item("sent_max_before", sent_max_before.into_pyarray(py))?;
        segments.set_item(
            "peer_data_between",
            counts(s.peer_data_between).into_pyarray(py),
        )?;
        segments.set_item(
            "own_retransmissions_between",
            counts(s.own_retransmissions_between).into_pyarray(py),
        )?;
        segments.set_item("message", message_numbers.into_pyarray(py))?;
        Ok(EventTables {
            segments,
            gaps,
            messages,
            bursts,
            detector_rows,
        })
    }
}
