//! The Python face of the one-pass analysis (`Pass`: each packet decoded, taken into its
//! connection, `flows`, and into its events, `events`, as it comes): `flow_tables(paths,
//! bpf_filter)` reads captures one after another and returns the tables `build_flows` makes
//! of them, as one set (frames offset capture by capture, connections numbered on), with the
//! accounting of every packet read; `FlowBatches` reads one capture and hands its finished
//! connections over a batch at a time; a live capture (`live`) takes packets as they come.

use std::collections::BTreeMap;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Mutex;

use pyo3::prelude::*;
use pyo3::types::PyDict;

use crate::bpf::FilterError;
use crate::decode::Decoder;
use crate::events::{EventTables, Events, EventsSnapshot, Found, Load};
use crate::flows::packets::Finishing;
use crate::flows::settling::{MIN_PACKETS, Settling};
use crate::flows::tables::{ConnectionRecord, FlowTables, PacketRows};
use crate::flows::{FlowTracker, Packet};
use crate::reader;
use crate::skips;

/// A packet-table row takes about an eighth of what an event row does once in Python (130
/// bytes against `part_sizes.BYTES_PER_EVENT_ROW`): a batch is cut on them counted so.
const PACKET_ROWS_PER_ROW: usize = 8;
/// A live connection holding fewer packets is not made to let them go when the live
/// connections outgrow their budget: it would free less than what it then keeps apart (its
/// early rows' empty tables take about 2 KB).
const SQUEEZED_PACKETS: usize = 256;
/// Skip code of a TCP packet the filter does not accept (`nagledetect.read.skips`).
const EXCLUDED_BY_FILTER: i64 = 9;

/// What one capture's pass counted.
#[derive(Default)]
struct Counts {
    packets_read: u64,
    skipped: BTreeMap<i64, u64>,
    linktype: Option<u32>,
}

/// The two stages a packet goes through in the pass: its connection, then the events.
#[derive(Default)]
struct Stages {
    flows: FlowTracker,
    events: Events,
}

impl Stages {
    /// The rows of the connections finished and not yet taken: their event tables' and their
    /// own (a batch of connections without events is cut by these), and their rows of the
    /// packet table where one is kept, `PACKET_ROWS_PER_ROW` to a row.
    fn finished_rows(&self) -> usize {
        self.events.rows()
            + self.flows.finished_count()
            + self.flows.finished_packet_rows() / PACKET_ROWS_PER_ROW
    }

    /// Finish the connections found ended: their rows of the connection table and their events.
    fn finish_ended(&mut self) {
        self.finish_ended_until(usize::MAX);
    }

    /// As `finish_ended`, stopping once the finished connections and their events hold `rows`
    /// rows or more.
    fn finish_ended_until(&mut self, rows: usize) {
        // Checked first, as cheaply as can be: most packets end no connection.
        while self.flows.has_ended()
            && self.finished_rows() < rows
            && let Some(connection) = self.flows.next_ended()
        {
            let finishing = self.flows.end_connection(connection);
            self.events.finish_connection(connection, &finishing);
        }
    }
}

impl Stages {
    /// Let go what every live connection of `SQUEEZED_PACKETS` packets or more can of them
    /// (`Events::let_go`): whether they then hold at most `live_limit` packets, with a quarter
    /// of it to spare, so that the next look is a while away.
    fn squeeze(&mut self, live_limit: usize, load: Load) -> bool {
        if !self.events.lets_go() {
            return false;
        }
        for connection in self.events.live_connections() {
            if self.events.held_packets(connection) < SQUEEZED_PACKETS {
                continue;
            }
            let finishing = self.flows.settled_finishing(connection);
            self.events.let_go(connection, finishing.as_ref());
        }
        self.live_load(load) <= live_limit - live_limit / 4
    }

    /// What the live connections hold, counted in packets (`Events::live_load`), with the
    /// packet table's rows of packets already let go (a row takes less than a packet, but a
    /// pass that keeps the table is given fewer packets for it).
    fn live_load(&self, load: Load) -> usize {
        let rows = self.flows.live_packet_rows();
        self.events.live_load(load) + rows.saturating_sub(self.events.live_packets())
    }

    /// Whether live connections whose finishing values are not known yet (seen without
    /// their handshake) hold most of the live packets, where they could let them go.
    fn mostly_unsettled(&self) -> bool {
        if !self.events.lets_go() {
            return false;
        }
        let connections = self.events.live_connections();
        let held = |connection: &u32| self.events.held_packets(*connection);
        let unsettled: usize = connections
            .iter()
            .filter(|connection| self.flows.settled_finishing(**connection).is_none())
            .map(held)
            .sum();
        unsettled > connections.iter().map(held).sum::<usize>() / 2
    }
}

/// One pass over packets as they come, from a file or an interface: the stages they go
/// through, and what the current capture's pass counted.
#[derive(Default)]
pub struct Pass {
    stages: Stages,
    counts: Counts,
    /// Decodes the capture being read (its IP fragments held until each datagram is whole).
    decoder: Decoder,
}

/// Connections finished (or, for a look at the live ones, finished as if they ended now):
/// their rows of the connection table and their events.
pub struct ConnectionsBatch {
    records: Vec<ConnectionRecord>,
    found: Found,
    /// Their packet rows (numbered as the batch numbers them) and what each connection's are
    /// finished with, where the pass keeps a packet table.
    packets: (PacketRows, Vec<Finishing>),
}

impl ConnectionsBatch {
    /// A dict as `flow_tables` gives (with its packet table where the pass keeps one, else
    /// as with `packets=False`), the connections numbered 0 on in the order of their first
    /// packet, the events and packets naming them so, the messages numbered within the batch.
    pub fn into_python(self, py: Python<'_>) -> PyResult<Bound<'_, PyDict>> {
        self.prepared().into_python(py)
    }

    /// Its tables made and put in order, without Python (`PreparedBatch::into_python` only
    /// hands them over).
    pub fn prepared(self) -> PreparedBatch {
        let mut ids: Vec<u32> = self.records.iter().map(|record| record.id).collect();
        ids.sort_unstable();
        let (packets, finishing) = self.packets;
        PreparedBatch {
            events: self.found.ordered(Some(&ids)),
            tables: FlowTables::new(packets, self.records, &finishing),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.records.is_empty()
    }
}

/// A batch's tables as they are handed to Python.
pub struct PreparedBatch {
    events: Found,
    tables: FlowTables,
}

impl PreparedBatch {
    pub fn into_python(self, py: Python<'_>) -> PyResult<Bound<'_, PyDict>> {
        let events = self.events.into_python(py)?;
        let result = self.tables.into_python(py)?;
        put_events(&result, events)?;
        Ok(result)
    }
}

impl Pass {
    /// A pass that keeps no packet table (its events and connections are all it gives).
    pub fn without_packet_table() -> Pass {
        let mut pass = Pass::default();
        pass.stages.flows.without_packet_table();
        pass
    }

    /// Take one record of the capture (of link type `linktype`, its frame numbered on from
    /// `frame_offset`), `accepted` or not by the filter.
    pub fn take_record(
        &mut self,
        (linktype, time_us, data): (u32, i64, &[u8]),
        frame_offset: u64,
        accepted: bool,
    ) {
        let counts = &mut self.counts;
        let stages = &mut self.stages;
        counts.packets_read += 1;
        counts.linktype.get_or_insert(linktype);
        let code = match self.decoder.decode(linktype, data) {
            Ok(tcp) => {
                let packet = Packet {
                    frame: (frame_offset + counts.packets_read) as u32,
                    time_us,
                    captured_bytes: data.len() as u32,
                    tcp: &tcp,
                    accepted,
                };
                if let Some(taken) = stages.flows.take(&packet)
                    && stages.events.take(&taken)
                {
                    let finishing = stages.flows.settled_finishing(taken.connection);
                    stages.events.let_go(taken.connection, finishing.as_ref());
                }
                stages.finish_ended();
                skips::KEPT
            }
            Err(code) => code,
        };
        let code = if accepted { code } else { EXCLUDED_BY_FILTER };
        if code != skips::KEPT {
            *counts.skipped.entry(code).or_insert(0) += 1;
        }
    }

    /// What the live connections hold, counted in packets (`Events::live_load`).
    pub fn live_load(&self, load: Load) -> usize {
        self.stages.live_load(load)
    }

    /// Whether the live connections hold at most `live_limit` packets (as `load` counts
    /// them), once they have let go what they can where they held more (`Stages::squeeze`).
    pub fn fits(&mut self, live_limit: usize, load: Load) -> bool {
        self.live_load(load) <= live_limit || self.stages.squeeze(live_limit, load)
    }

    /// The capture has ended: every live connection ends and is finished.
    pub fn end_capture(&mut self) {
        self.stages.flows.end_capture();
        self.stages.finish_ended();
    }

    /// The connections finished since they were last taken.
    pub fn take_finished(&mut self) -> ConnectionsBatch {
        let records = self.stages.flows.take_records();
        let packets = self.stages.flows.take_packets_of(&records);
        ConnectionsBatch {
            records,
            found: self.stages.events.take_found(),
            packets,
        }
    }

    /// A copy of the live connections' state, to finish as if they ended now
    /// (`LiveSnapshot::finish`) while the pass goes on.
    pub fn snapshot(&self) -> LiveSnapshot {
        let live = self.stages.flows.peek();
        let finishing: Vec<(u32, Finishing)> = live
            .iter()
            .map(|(record, finishing)| (record.id, *finishing))
            .collect();
        LiveSnapshot {
            events: self.stages.events.snapshot(&finishing),
            records: live.into_iter().map(|(record, _)| record).collect(),
        }
    }
}

/// Live connections copied (`Pass::snapshot`): their rows of the connection table as they
/// stand, and their events.
pub struct LiveSnapshot {
    records: Vec<ConnectionRecord>,
    events: EventsSnapshot,
}

impl LiveSnapshot {
    /// The copied connections finished as if they ended now.
    pub fn finish(self) -> ConnectionsBatch {
        ConnectionsBatch {
            records: self.records,
            found: self.events.finish(),
            packets: Default::default(),
        }
    }
}

/// Read the capture of `stream` through the flow tracker alone: what its long connections
/// seen without their handshake (of `min_packets` packets or more) are finished with, by
/// connection number (`flows::settling`).
fn settling_pass(
    stream: &mut reader::Stream,
    min_packets: usize,
) -> Result<foldhash::HashMap<u32, Finishing>, FilterError> {
    let mut settling = Settling::new(min_packets);
    let mut decoder = Decoder::default();
    let mut packets_read = 0u64;
    stream.judge_some(usize::MAX, &mut |record, accepted| {
        packets_read += 1;
        if let Ok(tcp) = decoder.decode(record.linktype, record.data) {
            settling.take(&Packet {
                frame: packets_read as u32,
                time_us: record.time_us,
                captured_bytes: record.data.len() as u32,
                tcp: &tcp,
                accepted,
            });
        }
    })?;
    Ok(settling.finish())
}

/// Read one capture to its end (or to the damage that ends it) into `pass`, its frames
/// numbered on from `frame_offset`: what it counted.
fn one_pass(
    stream: &mut reader::Stream,
    pass: &mut Pass,
    frame_offset: u64,
) -> Result<Counts, FilterError> {
    pass.counts = Counts::default();
    take_records(stream, pass, frame_offset, usize::MAX)?;
    pass.end_capture();
    Ok(std::mem::take(&mut pass.counts))
}

/// Read at most `limit` records of the capture into `pass`: how many were read (fewer than
/// `limit` once the capture has ended).
fn take_records(
    stream: &mut reader::Stream,
    pass: &mut Pass,
    frame_offset: u64,
    limit: usize,
) -> Result<usize, FilterError> {
    stream.judge_some(limit, &mut |record, accepted| {
        pass.take_record(
            (record.linktype, record.time_us, record.data),
            frame_offset,
            accepted,
        );
    })
}

/// One capture read into `tracker`: its accounting as a dict (`packets_read`, `skipped`:
/// skip code -> packets, `linktype`: the first packet's, else the file's, `warnings`,
/// `cut_short`: why the read ended before the file's end or None, `clock_step_us`: the step
/// of a coarse clock that stamped the packets or None, `clock_spacing_us`: the interval
/// every packet came after the one before where all are the same, or None, `frame_offset`,
/// `connections_ended_silent`: how many connections were finished before the capture's end
/// for their silence) or the error that stopped it (`CaptureError` or `FilterError`, as `decode_file` raises
/// them), with the packets read before an error left out of the tables.
fn read_capture<'py>(
    py: Python<'py>,
    path: &str,
    bpf_filter: Option<&str>,
    pass: &mut Pass,
    frame_offset: u64,
) -> PyResult<(Bound<'py, PyDict>, u64)> {
    let mut stream = reader::open(py, path, bpf_filter)?;
    pass.stages.flows.next_capture();
    pass.decoder = Decoder::default();
    let outcome = py.detach(|| {
        catch_unwind(AssertUnwindSafe(|| {
            let counts = one_pass(&mut stream, pass, frame_offset)?;
            Ok(pass.stages.events.capture_read().then_some(counts))
        }))
    });
    let counts = match outcome {
        Ok(Ok(Some(counts))) => counts,
        Ok(Err(error)) => {
            return Err(reader::filter_error(
                py,
                bpf_filter.unwrap_or_default(),
                error,
            ));
        }
        Ok(Ok(None)) | Err(_) => return Err(reader::internal_error(path)),
    };
    let capture = accounting(py, &counts, &stream, &pass.stages, frame_offset)?;
    Ok((capture, counts.packets_read))
}

/// A capture's accounting as `read_capture` gives it.
fn accounting<'py>(
    py: Python<'py>,
    counts: &Counts,
    stream: &reader::Stream,
    stages: &Stages,
    frame_offset: u64,
) -> PyResult<Bound<'py, PyDict>> {
    let capture = PyDict::new(py);
    capture.set_item("packets_read", counts.packets_read)?;
    capture.set_item("skipped", counts.skipped.clone())?;
    capture.set_item("linktype", counts.linktype.or(stream.linktype()))?;
    capture.set_item("warnings", stream.warnings().to_vec())?;
    capture.set_item("cut_short", stream.cut_short())?;
    capture.set_item("clock_step_us", stream.clock_step_us())?;
    capture.set_item("clock_spacing_us", stream.clock_spacing_us())?;
    capture.set_item("frame_offset", frame_offset)?;
    capture.set_item("connections_ended_silent", stages.flows.ended_silent)?;
    Ok(capture)
}

/// Read the captures at `paths` one after another, each with the BPF filter `bpf_filter` if
/// one is given, and return a dict: `packets`, `sack_blocks` and `connections` of all of
/// them (see `FlowTables::into_python`; frames offset by each capture's `frame_offset`,
/// connections numbered on from the captures' before, `stream` ids each capture's own), and
/// `captures`: per path, its accounting (see `read_capture`) or the exception that stopped
/// its read (a capture whose read fails adds nothing to the tables). Without `packets` the
/// packet table, the SACK blocks and the segments' context rows are left out (no rows): the
/// events, the detectors' rows and the connections are all a caller then reads. A long
/// connection's events are finished as it goes, and its packets let go, each time it holds
/// `let_go_packets` more (`Events::let_go`; given to test that on small captures).
#[pyfunction]
#[pyo3(signature = (paths, bpf_filter=None, packets=true, let_go_packets=None))]
pub fn flow_tables<'py>(
    py: Python<'py>,
    paths: Vec<String>,
    bpf_filter: Option<&str>,
    packets: bool,
    let_go_packets: Option<usize>,
) -> PyResult<Bound<'py, PyDict>> {
    let mut pass = if packets {
        Pass::default()
    } else {
        Pass::without_packet_table()
    };
    let stages = &mut pass.stages;
    if packets {
        stages.events.with_context();
    }
    if let Some(packets) = let_go_packets {
        stages.events.let_go_at(packets);
    }
    // One capture is finished apart (`events::finisher`), a run over many in place.
    if paths.len() == 1 {
        stages.events.finish_apart();
    }
    let mut captures = Vec::with_capacity(paths.len());
    let mut frame_offset = 0u64;
    for path in &paths {
        let connections = pass.stages.flows.connections();
        let marks = (
            pass.stages.flows.mark(),
            pass.stages.events.capture_begins(),
        );
        match read_capture(py, path, bpf_filter, &mut pass, frame_offset) {
            Ok((capture, packets_read)) => {
                frame_offset += packets_read;
                captures.push(capture.into_any());
            }
            Err(error) => {
                pass.stages.flows.truncate(marks.0);
                pass.stages.events.truncate(marks.1, connections);
                captures.push(error.into_value(py).into_bound(py).into_any());
            }
        }
    }
    let events = pass.stages.events.into_python(py)?;
    let result = pass.stages.flows.finish().into_python(py)?;
    put_events(&result, events)?;
    result.set_item("captures", captures)?;
    Ok(result)
}

fn put_events<'py>(result: &Bound<'py, PyDict>, events: EventTables<'py>) -> PyResult<()> {
    result.set_item("segments", events.segments)?;
    result.set_item("gaps", events.gaps)?;
    result.set_item("messages", events.messages)?;
    result.set_item("bursts", events.bursts)?;
    result.set_item("untimed_stalls", events.untimed_stalls)?;
    result.set_item("lone_segments", events.lone_segments)?;
    result.set_item("payload_counts", events.payload_counts)?;
    result.set_item("chart_packets", events.chart_packets)?;
    Ok(())
}

/// Records read between looks at the tables, in a pass a batch at a time.
const RECORDS_PER_LOOK: usize = 4096;

/// One capture's pass, a batch of finished connections at a time (`FlowBatches`).
struct BatchPass {
    stream: reader::Stream,
    pass: Pass,
    /// The capture has been read to its end (its live connections have ended).
    read_whole: bool,
    /// The live connections came to hold more packets than allowed, and letting go of what
    /// they could did not bring them well under it; and whether connections whose finishing
    /// values were not known then held most of them.
    over_budget: bool,
    unsettled: bool,
}

/// The capture at `path` read in one pass (with the BPF filter `bpf_filter` if one is
/// given) and handed over a batch of finished connections at a time: each item is a dict as
/// `flow_tables` gives with `packets=False` (no packet table), of the connections finished
/// since the last (once they and their events hold `batch_rows` rows or more), numbered 0 on in the
/// order of their first packet, the events naming them so, the messages numbered within the
/// batch. Memory follows the live connections, the events they keep and one batch; where the
/// live connections come to hold more than `live_packets_limit` packets (each connection
/// counted as 10 packets too, `Events::live_load`; the events they keep are not counted: they
/// are the evidence of the capture's findings, kept whichever way it is read), the iteration
/// ends early with `over_budget` set (the batches given are then not the whole capture's). With `chart_packets`, each batch
/// also gives its connections' packets as the report's charts read them (`chart_packets`, by
/// frame; counted among its rows); with `packet_table`, each batch has its connections' rows
/// of the packet table and their SACK blocks, by frame. `capture` is the accounting
/// (`read_capture`'s) once the iteration has ended; `packets_read` and `bytes_read` say how
/// far the read has got. `let_go_packets` as in `flow_tables`. With `settle_first`, the
/// capture is read twice: first through the flow tracker alone, to learn what its long
/// connections seen without their handshake are finished with, so that they too let their
/// packets go as they go (`flows::settling`; worth it where `unsettled` says so). A file that
/// is not a capture raises `CaptureError` here, a filter that does not compile `FilterError`
/// from the iteration.
#[pyclass(module = "nagledetect._core")]
pub struct FlowBatches {
    path: String,
    bpf_filter: Option<String>,
    batch_rows: usize,
    /// None once read to its end, or after an error.
    pass: Mutex<Option<BatchPass>>,
    capture: Option<Py<PyDict>>,
    /// The most packets the live connections may hold: beyond it the pass stops
    /// (`over_budget`), for the caller to analyse the capture another way.
    live_packets_limit: usize,
    #[pyo3(get)]
    over_budget: bool,
    /// Whether, when the pass stopped, live connections seen without their handshake held
    /// most of its live packets: read again with `settle_first`, it may not stop.
    #[pyo3(get)]
    unsettled: bool,
    /// Records and bytes (decompressed) read so far.
    #[pyo3(get)]
    packets_read: u64,
    #[pyo3(get)]
    bytes_read: u64,
}

#[pymethods]
impl FlowBatches {
    #[new]
    #[pyo3(signature = (path, bpf_filter = None, batch_rows = 1 << 20, live_packets_limit = usize::MAX, chart_packets = false, packet_table = false, let_go_packets = None, settle_first = false))]
    #[allow(clippy::too_many_arguments)] // Python's keywords, each with its default
    fn new(
        py: Python<'_>,
        path: &str,
        bpf_filter: Option<&str>,
        batch_rows: usize,
        live_packets_limit: usize,
        chart_packets: bool,
        packet_table: bool,
        let_go_packets: Option<usize>,
        settle_first: bool,
    ) -> PyResult<FlowBatches> {
        let mut pass = if packet_table {
            Pass::default()
        } else {
            Pass::without_packet_table()
        };
        if chart_packets {
            pass.stages.events.with_chart_packets();
        }
        if let Some(packets) = let_go_packets {
            pass.stages.events.let_go_at(packets);
        }
        let stream = reader::open(py, path, bpf_filter)?;
        if settle_first {
            // A read that fails here fails the same way in the pass proper, which says why.
            let mut first = reader::open(py, path, bpf_filter)?;
            // Connections letting go more often than `MIN_PACKETS` (a test) are learnt so too.
            let min_packets =
                let_go_packets.map_or(MIN_PACKETS, |packets| packets.min(MIN_PACKETS));
            let learnt = py.detach(|| {
                catch_unwind(AssertUnwindSafe(|| settling_pass(&mut first, min_packets)))
            });
            if let Ok(Ok(known)) = learnt {
                pass.stages.flows.know_finishing(known);
            }
        }
        Ok(FlowBatches {
            path: path.to_string(),
            bpf_filter: bpf_filter.map(str::to_string),
            batch_rows: batch_rows.max(1),
            pass: Mutex::new(Some(BatchPass {
                stream,
                pass,
                read_whole: false,
                over_budget: false,
                unsettled: false,
            })),
            capture: None,
            live_packets_limit,
            over_budget: false,
            unsettled: false,
            packets_read: 0,
            bytes_read: 0,
        })
    }

    fn __iter__(slf: PyRef<'_, Self>) -> PyRef<'_, Self> {
        slf
    }

    fn __next__<'py>(&mut self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyDict>>> {
        let slot = self
            .pass
            .get_mut()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let Some(pass) = slot.as_mut() else {
            return Ok(None);
        };
        let (rows, limit) = (self.batch_rows, self.live_packets_limit);
        let outcome = py.detach(|| catch_unwind(AssertUnwindSafe(|| pass.fill(rows, limit))));
        match outcome {
            Ok(Ok(())) => {}
            Ok(Err(error)) => {
                *slot = None;
                let expression = self.bpf_filter.as_deref().unwrap_or_default();
                return Err(reader::filter_error(py, expression, error));
            }
            Err(_) => {
                *slot = None;
                return Err(reader::internal_error(&self.path));
            }
        }
        self.packets_read = pass.pass.counts.packets_read;
        self.bytes_read = pass.stream.bytes_read();
        if pass.over_budget {
            self.over_budget = true;
            self.unsettled = pass.unsettled;
            *slot = None;
            return Ok(None);
        }
        let done = pass.done();
        if done && pass.pass.stages.flows.finished_count() == 0 {
            self.capture = Some(pass.accounting(py)?.unbind());
            *slot = None;
            return Ok(None);
        }
        // The batch is made without the interpreter's lock: Python goes on with the one before.
        let prepared =
            py.detach(|| catch_unwind(AssertUnwindSafe(|| pass.pass.take_finished().prepared())));
        let batch = prepared
            .and_then(|prepared| catch_unwind(AssertUnwindSafe(|| prepared.into_python(py))));
        let Ok(batch) = batch else {
            *slot = None;
            return Err(reader::internal_error(&self.path));
        };
        let batch = batch?;
        if done {
            self.capture = Some(pass.accounting(py)?.unbind());
            *slot = None;
        }
        Ok(Some(batch))
    }

    /// The capture's accounting (None until the iteration has ended).
    #[getter]
    fn capture(&self, py: Python<'_>) -> Option<Py<PyDict>> {
        self.capture.as_ref().map(|capture| capture.clone_ref(py))
    }
}

impl BatchPass {
    /// Read on until the event tables hold `rows` rows or more, the capture's connections
    /// are all finished, or the live connections hold more than `live_limit` packets even
    /// after letting go what they could (`over_budget`).
    fn fill(&mut self, rows: usize, live_limit: usize) -> Result<(), FilterError> {
        loop {
            self.pass.stages.finish_ended_until(rows);
            if !self.pass.fits(live_limit, Load::PacketsOnly) {
                self.over_budget = true;
                self.unsettled = self.pass.stages.mostly_unsettled();
                return Ok(());
            }
            if self.pass.stages.finished_rows() >= rows || self.read_whole {
                return Ok(());
            }
            let read = take_records(&mut self.stream, &mut self.pass, 0, RECORDS_PER_LOOK)?;
            if read < RECORDS_PER_LOOK {
                self.pass.stages.flows.end_capture();
                self.read_whole = true;
            }
        }
    }

    /// Read whole, every connection finished and handed over but the batch in hand.
    fn done(&self) -> bool {
        self.read_whole && !self.pass.stages.flows.has_ended()
    }

    fn accounting<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        accounting(py, &self.pass.counts, &self.stream, &self.pass.stages, 0)
    }
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use super::*;
    use crate::capture::CaptureReader;
    use crate::events::Mark;

    fn sample_trace(name: &str) -> String {
        let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("../sample_traces")
            .join(name);
        path.to_string_lossy().into_owned()
    }

    /// Read the capture at `path` into `pass` as `flow_tables` reads each of its captures.
    fn read_into(pass: &mut Pass, path: &str) {
        pass.stages.flows.next_capture();
        pass.decoder = Decoder::default();
        let mut reader = CaptureReader::open(path).expect("a sample trace");
        while reader.read(4096, &mut |record| {
            pass.take_record((record.linktype, record.time_us, record.data), 0, true);
        }) > 0
        {}
        pass.end_capture();
    }

    /// What the finished tables hold, table by table, and a column of each.
    fn rows_of(found: &Found) -> (Mark, Vec<Vec<i64>>) {
        let columns = vec![
            found.gaps.after_frame.clone(),
            found.messages.bytes.clone(),
            found.bursts.bytes.clone(),
            found.untimed_stalls.frame.clone(),
            found.lone_segments.frame.clone(),
            found.payload_counts.key.clone(),
            found
                .message_counts
                .iter()
                .map(|(id, count)| i64::from(*id) * 1_000_000 + i64::from(*count))
                .collect(),
        ];
        (found.mark(), columns)
    }

    fn finished(names: &[&str], apart: bool) -> (Mark, Vec<Vec<i64>>) {
        let mut pass = Pass::without_packet_table();
        if apart {
            pass.stages.events.finish_apart();
        }
        for name in names {
            pass.stages.events.capture_begins();
            read_into(&mut pass, &sample_trace(name));
            assert!(pass.stages.events.capture_read());
        }
        rows_of(&pass.stages.events.finished())
    }

    #[test]
    fn connections_finished_apart_give_the_tables_finished_in_place() {
        // The mixed capture's six connections of several kinds, each table with rows.
        for names in [
            &["mixed.pcap"][..],
            &["mixed.pcap", "seed003-nagle.pcap"][..],
        ] {
            let (apart, in_place) = (finished(names, true), finished(names, false));
            assert!(apart.0.rows() > 0 && apart.1.iter().all(|column| !column.is_empty()));
            assert_eq!(apart, in_place, "{names:?}");
        }
    }

    #[test]
    fn a_capture_that_failed_leaves_nothing_of_it_finished_apart() {
        let once = finished(&["mixed.pcap"], true);
        let mut pass = Pass::without_packet_table();
        pass.stages.events.finish_apart();
        pass.stages.events.capture_begins();
        read_into(&mut pass, &sample_trace("mixed.pcap"));
        assert!(pass.stages.events.capture_read());
        let connections = pass.stages.flows.connections();
        let marks = (
            pass.stages.flows.mark(),
            pass.stages.events.capture_begins(),
        );
        read_into(&mut pass, &sample_trace("seed003-nagle.pcap"));
        pass.stages.flows.truncate(marks.0);
        pass.stages.events.truncate(marks.1, connections);
        assert_eq!(rows_of(&pass.stages.events.finished()), once);
    }
}
