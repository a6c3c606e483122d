//! The event tables as the finished connections fill them: values, not packet rows, so that a
//! connection's packets can be let go once it is finished. Connections finish in the order they
//! end, so each table is put in its order (by connection, or by frame) when it is handed to
//! Python, a column at a time.

use numpy::IntoPyArray;
use pyo3::prelude::*;
use pyo3::types::PyDict;

use super::order::{Order, SortKey, Spare};

/// A table of named columns of one length: `len`, `truncate`, `ordered` (its rows taken in
/// an `Order`) and `into_python`, which hands its columns to Python under their names, in
/// the order declared.
macro_rules! event_table {
    ($(#[$meta:meta])* $name:ident {
        $(#[$first_meta:meta])* $first:ident: $first_type:ty
        $(, $(#[$field_meta:meta])* $field:ident: $field_type:ty)* $(,)?
    }) => {
        $(#[$meta])*
        #[derive(Clone, Default)]
        pub struct $name {
            $(#[$first_meta])* pub $first: Vec<$first_type>,
            $($(#[$field_meta])* pub $field: Vec<$field_type>,)*
        }

        impl $name {
            #[allow(dead_code)] // not every table's length is read
            pub fn len(&self) -> usize {
                self.$first.len()
            }

            pub fn truncate(&mut self, count: usize) {
                self.$first.truncate(count);
                $(self.$field.truncate(count);)*
            }

            /// Move the rows of `other` to the end of this table (taking its columns
            /// whole where this one is empty and has no room for them, rather than copying
            /// them).
            pub fn append(&mut self, other: &mut $name) {
                if self.$first.is_empty() && self.$first.capacity() < other.$first.len() {
                    std::mem::swap(self, other);
                    return;
                }
                self.$first.append(&mut other.$first);
                $(self.$field.append(&mut other.$field);)*
            }

            /// The rows taken in `order`, each column gathered into the spare column where
            /// it is of the same type (`Spare`), which then keeps the column it replaced.
            pub fn ordered(mut self, order: &Order, spare: &mut Spare) -> $name {
                order.apply(&mut self.$first, spare);
                $(order.apply(&mut self.$field, spare);)*
                self
            }

            /// The rows by the column `key` picks (ties as they are).
            #[allow(dead_code)] // some tables are ordered by two columns, or by another's
            pub fn ordered_by<K: SortKey>(
                self,
                key: impl FnOnce(&$name) -> &[K],
                spare: &mut Spare,
            ) -> $name {
                let order = Order::by(key(&self));
                self.ordered(&order, spare)
            }

            pub fn into_python<'py>(self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
                let table = PyDict::new(py);
                table.set_item(stringify!($first), self.$first.into_pyarray(py))?;
                $(table.set_item(stringify!($field), self.$field.into_pyarray(py))?;)*
                Ok(table)
            }
        }

        impl Rows for $name {
            fn cut_to(&mut self, rows: usize) {
                self.truncate(rows);
            }

            fn make_room(&mut self, rows: usize) {
                let more = rows.saturating_sub(self.len());
                self.$first.reserve(more);
                $(self.$field.reserve(more);)*
            }
        }
    };
}

/// What is done to every event table by its length: cut back to a length, or given room for
/// so many rows in all.
trait Rows {
    fn cut_to(&mut self, rows: usize);
    fn make_room(&mut self, rows: usize);
}

event_table!(
    /// The gaps (`GapsBySlice.gaps`'s columns), the sides as directions (0: from the client).
    GapTable {
        connection: i64,
        before_frame: i64,
        after_frame: i64,
        before_time_us: i64,
        after_time_us: i64,
        before_direction: i64,
        after_direction: i64,
        before_kind: i64,
        after_kind: i64,
        after_seq: i64,
        after_end: i64,
        after_payload_bytes: i64,
        zero_frame: i64,
        peer_dup_acks: i64,
        peer_dup_frame: i64,
        peer_edge: i64,
        peer_edge_frame: i64,
        peer_edge_window: i64,
        peer_ack: i64,
        peer_ack_frame: i64,
        peer_window_before: i64,
        before_end: i64,
        peer_edge_at_start: i64,
        /// The furthest sequence end the after packet's side had sent before it (i64::MIN:
        /// no data yet).
        after_sent_end: i64,
        cover_frame: i64,
        cover_time_us: i64,
        dsack_frame: i64,
    }
);

event_table!(
    /// Messages (or write bursts) by their sizes: the columns the tinygram detector reads of
    /// write bursts (`tinygram_flood.BURST_COLUMNS`), and the first of the message table.
    MessageSizes {
        connection: i32,
        direction: u8,
        bytes: i64,
        packets: i64,
        mss: i64,
        median_payload_bytes: f64,
        segments_needed: i64,
    }
);

event_table!(
    /// The rest of the message table (`messages.messages`'s columns). `message` holds the
    /// number within its connection until the run's numbers are known (`number_messages`).
    MessageDetails {
        message: i64,
        first_frame: i64,
        last_frame: i64,
        start_us: i64,
        end_us: i64,
        wire_segments: i64,
        last_segment_full: bool,
        odd_segments: bool,
    }
);

event_table!(
    /// The small segments that passed the stall's packet tests (`UNTIMED_STALL_COLUMNS`);
    /// `message` as in `MessageDetails`.
    UntimedStalls {
        connection: i32,
        direction: u8,
        frame: i64,
        time_us: i64,
        payload_bytes: i64,
        tail_bytes: i64,
        mss: i64,
        prev_frame: i64,
        prev_time_us: i64,
        prev_payload_bytes: i64,
        peer_frame: i64,
        peer_time_us: i64,
        peer_window_bytes: i64,
        message: i64,
        /// The longest pause between two consecutive full segments of the tail's message
        /// before it (`full_segment_gaps.py`).
        full_gap_us: i64,
        /// How long the final flight had been going out at the data before the tail, from
        /// its second segment on (`full_segment_gaps.py`).
        final_flight_us: i64,
        /// 1 where a burst's earlier ACK released the tail (`earlier_releases.py`).
        released_earlier: u8,
        /// The time of the data just before the tail (`earlier_releases.TAIL_PREV_TIME`).
        tail_prev_time_us: i64,
    }
);

event_table!(
    /// The lone segments a pure ACK answered (`LONE_SEGMENT_COLUMNS`).
    LoneSegments {
        connection: i32,
        direction: u8,
        frame: i64,
        time_us: i64,
        payload_bytes: i64,
        next_peer_frame: i64,
        next_peer_time_us: i64,
    }
);

event_table!(
    /// How often each (direction key, payload size) occurs (`payloads.PayloadCounts`).
    PayloadCounts {
        key: i64,
        size: i64,
        count: i64,
    }
);

event_table!(
    /// The segments in context, their context packets named by their rows of the run's packet
    /// table (`segments.NONE` where none): made only where that table is kept. `message` as
    /// in `MessageDetails`; `connection` only says where the message numbers count from.
    SegmentContext {
        row: i64,
        previous_data: i64,
        peer_latest: i64,
        peer_next: i64,
        own_next_data: i64,
        sent_max_before: i64,
        peer_data_between: i64,
        own_retransmissions_between: i64,
        message: i64,
        connection: u32,
    }
);

event_table!(
    /// What the report's charts read of every packet (`chart_data.connection_charts`: the
    /// packet table's columns of these names), made only where charts are drawn and no packet
    /// table is kept (a capture read a batch of connections at a time).
    ChartPackets {
        frame: u32,
        time_us: i64,
        connection: i32,
        direction: u8,
        payload_bytes: u32,
        rel_seq: i64,
        rel_ack: i64,
    }
);

/// The event tables of the finished connections.
#[derive(Clone, Default)]
pub struct Found {
    pub gaps: GapTable,
    pub messages: MessageSizes,
    pub message_details: MessageDetails,
    pub bursts: MessageSizes,
    pub untimed_stalls: UntimedStalls,
    pub lone_segments: LoneSegments,
    pub payload_counts: PayloadCounts,
    pub segments: SegmentContext,
    pub chart_packets: ChartPackets,
    /// The finished connections' numbers, each with how many messages it has.
    pub message_counts: Vec<(u32, u32)>,
}

/// How many rows each table holds, and of how many finished connections: where the tables
/// stand, to go back to, or to make room for as many.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct Mark {
    lengths: [usize; 8],
    finished: usize,
}

impl Mark {
    pub fn rows(&self) -> usize {
        self.lengths.iter().sum()
    }

    /// How many connections the tables held the rows of.
    pub fn connections(&self) -> usize {
        self.finished
    }
}

/// The event tables as dicts of numpy arrays.
pub struct EventTables<'py> {
    pub segments: Bound<'py, PyDict>,
    pub gaps: Bound<'py, PyDict>,
    pub messages: Bound<'py, PyDict>,
    pub bursts: Bound<'py, PyDict>,
    pub untimed_stalls: Bound<'py, PyDict>,
    pub lone_segments: Bound<'py, PyDict>,
    pub payload_counts: Bound<'py, PyDict>,
    pub chart_packets: Bound<'py, PyDict>,
}

impl Found {
    /// How many rows the tables hold.
    pub fn rows(&self) -> usize {
        self.lengths().iter().sum()
    }

    fn lengths(&self) -> [usize; 8] {
        [
            self.gaps.len(),
            self.messages.len(),
            self.bursts.len(),
            self.untimed_stalls.len(),
            self.lone_segments.len(),
            self.payload_counts.len(),
            self.segments.len(),
            self.chart_packets.len(),
        ]
    }

    /// Each table, with its length's place in a `Mark` (the message tables share one).
    fn tables(&mut self) -> [(&mut dyn Rows, usize); 9] {
        [
            (&mut self.gaps, 0),
            (&mut self.messages, 1),
            (&mut self.message_details, 1),
            (&mut self.bursts, 2),
            (&mut self.untimed_stalls, 3),
            (&mut self.lone_segments, 4),
            (&mut self.payload_counts, 5),
            (&mut self.segments, 6),
            (&mut self.chart_packets, 7),
        ]
    }

    /// Make room in each table for the rows `sizes` counted and a quarter more: a batch
    /// about as large as the last then fills them without its columns moving as they grow
    /// (by doubling, each column was copied again and again).
    pub fn make_room(&mut self, sizes: &Mark) {
        let room = |rows: usize| rows + rows / 4;
        for (table, at) in self.tables() {
            table.make_room(room(sizes.lengths[at]));
        }
        let finished = room(sizes.finished).saturating_sub(self.message_counts.len());
        self.message_counts.reserve(finished);
    }

    pub fn mark(&self) -> Mark {
        Mark {
            lengths: self.lengths(),
            finished: self.message_counts.len(),
        }
    }

    /// Drop what was found since `mark` (a capture whose read failed adds nothing).
    pub fn truncate(&mut self, mark: Mark) {
        for (table, at) in self.tables() {
            table.cut_to(mark.lengths[at]);
        }
        self.message_counts.truncate(mark.finished);
    }

    /// Move the rows of `other` (of connections not counted in either) to the end of these.
    pub fn append(&mut self, mut other: Found) {
        self.gaps.append(&mut other.gaps);
        self.messages.append(&mut other.messages);
        self.message_details.append(&mut other.message_details);
        self.bursts.append(&mut other.bursts);
        self.untimed_stalls.append(&mut other.untimed_stalls);
        self.lone_segments.append(&mut other.lone_segments);
        self.payload_counts.append(&mut other.payload_counts);
        self.segments.append(&mut other.segments);
        self.chart_packets.append(&mut other.chart_packets);
    }

    /// Connection `connection` finished with `messages` messages.
    pub fn count_messages(&mut self, connection: u32, messages: u32) {
        self.message_counts.push((connection, messages));
    }

    /// Messages are numbered in connection order (a connection's first, then the next
    /// connection's...): a message's number is its number within its connection plus the
    /// messages of the connections before it among `ids` (sorted).
    fn number_messages(&mut self, ids: &[u32]) {
        let size = ids.last().map_or(0, |last| *last as usize + 1);
        let mut counts = vec![0i64; size];
        for (id, count) in &self.message_counts {
            counts[*id as usize] = i64::from(*count);
        }
        let mut first = vec![0i64; size];
        let mut total = 0i64;
        for id in ids {
            first[*id as usize] = total;
            total += counts[*id as usize];
        }
        let renumber = |numbers: &mut [i64], connection: &dyn Fn(usize) -> usize| {
            for (row, number) in numbers.iter_mut().enumerate() {
                *number += first[connection(row)];
            }
        };
        let messages = &self.messages.connection;
        renumber(&mut self.message_details.message, &|row| {
            messages[row] as usize
        });
        let stalls = &self.untimed_stalls.connection;
        renumber(&mut self.untimed_stalls.message, &|row| {
            stalls[row] as usize
        });
        let segments = &self.segments.connection;
        renumber(&mut self.segments.message, &|row| segments[row] as usize);
    }

    /// Name the connections by their positions in `ids` (sorted), as the batch's connection
    /// table has them.
    fn renumber_connections(&mut self, ids: &[u32]) {
        let mut position = vec![0u32; ids.last().map_or(0, |last| *last as usize + 1)];
        for (at, id) in ids.iter().enumerate() {
            position[*id as usize] = at as u32;
        }
        let local = |id: i64| i64::from(position[id as usize]);
        for connection in &mut self.gaps.connection {
            *connection = local(*connection);
        }
        for column in [
            &mut self.messages.connection,
            &mut self.bursts.connection,
            &mut self.untimed_stalls.connection,
            &mut self.lone_segments.connection,
            &mut self.chart_packets.connection,
        ] {
            for connection in column.iter_mut() {
                *connection = local(i64::from(*connection)) as i32;
            }
        }
        for key in &mut self.payload_counts.key {
            *key = local(*key / 2) * 2 + *key % 2;
        }
    }

    /// The tables in the orders the tables of a pass over the whole capture have (`batch`:
    /// see below): gaps by connection then frame, messages, bursts and payload counts by
    /// connection, the segments' rows and the chart packets by frame. With `batch` (the
    /// numbers of the connections finished, sorted), the messages are numbered among them and
    /// the connections named by their positions in it. Done without Python, so that the pass
    /// of one capture can put a batch in order while Python analyses the batch before.
    pub fn ordered(mut self, batch: Option<&[u32]>) -> Found {
        match batch {
            Some(ids) => {
                self.number_messages(ids);
                self.renumber_connections(ids);
            }
            None => {
                let mut all: Vec<u32> = self.message_counts.iter().map(|(id, _)| *id).collect();
                all.sort_unstable();
                self.number_messages(&all);
            }
        }
        // Each order is let go once its tables are in it: the largest tables' orders are not
        // held together.
        let spare = &mut Spare::default();
        let gap_keys: Vec<(i64, i64)> = self
            .gaps
            .connection
            .iter()
            .zip(&self.gaps.after_frame)
            .map(|(connection, frame)| (*connection, *frame))
            .collect();
        let gap_order = Order::by(&gap_keys);
        drop(gap_keys);
        let gaps = self.gaps.ordered(&gap_order, spare);
        drop(gap_order);
        let message_order = Order::by(&self.messages.connection);
        let message_details = self.message_details.ordered(&message_order, spare);
        let messages = self.messages.ordered(&message_order, spare);
        drop(message_order);
        Found {
            gaps,
            message_details,
            messages,
            bursts: self.bursts.ordered_by(|table| &table.connection, spare),
            untimed_stalls: self.untimed_stalls.ordered_by(|table| &table.frame, spare),
            lone_segments: self.lone_segments.ordered_by(|table| &table.frame, spare),
            payload_counts: self.payload_counts.ordered_by(|table| &table.key, spare),
            segments: self.segments.ordered_by(|table| &table.row, spare),
            chart_packets: self.chart_packets.ordered_by(|table| &table.frame, spare),
            ..self
        }
    }

    /// The tables as dicts of numpy arrays, in the order they are in (`ordered` puts them in
    /// the pass's).
    pub fn into_python(self, py: Python<'_>) -> PyResult<EventTables<'_>> {
        let segments = self.segments.into_python(py)?;
        segments.del_item("connection")?;
        Ok(EventTables {
            segments,
            gaps: self.gaps.into_python(py)?,
            messages: {
                let messages = self.messages.into_python(py)?;
                let details = self.message_details.into_python(py)?;
                messages.update(details.as_mapping())?;
                messages
            },
            bursts: self.bursts.into_python(py)?,
            untimed_stalls: self.untimed_stalls.into_python(py)?,
            lone_segments: self.lone_segments.into_python(py)?,
            payload_counts: self.payload_counts.into_python(py)?,
            chart_packets: self.chart_packets.into_python(py)?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_next_batch_has_room_for_as_many_rows_and_keeps_it() {
        let mut found = Found::default();
        found.gaps.connection.extend(0..400);
        found.gaps.after_frame.extend(0..400);
        found.messages.connection.extend(0..80);
        let mut next = Found::default();
        next.make_room(&found.mark());
        assert_eq!(next.rows(), 0);
        assert!(next.gaps.connection.capacity() >= 500);
        assert!(next.gaps.dsack_frame.capacity() >= 500);
        assert!(next.messages.segments_needed.capacity() >= 100);
        // A finished connection's few early rows are copied in, not swapped for the room.
        let mut early = GapTable::default();
        early.connection.extend([7, 7]);
        early.after_frame.extend([1, 2]);
        next.gaps.append(&mut early);
        assert_eq!(next.gaps.after_frame, [1, 2]);
        assert!(next.gaps.connection.capacity() >= 500);
    }
}
