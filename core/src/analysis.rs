//! The Python face of the one-pass analysis: `flow_tables(paths, bpf_filter)` reads captures
//! one after another, decodes each packet and rebuilds its connections (`flows`) as it goes,
//! and returns the tables `build_flows` makes of them, as one set (frames offset capture by
//! capture, connections numbered on), with the accounting of every packet read.

use std::collections::BTreeMap;
use std::panic::{AssertUnwindSafe, catch_unwind};

use pyo3::prelude::*;
use pyo3::types::PyDict;

use crate::bpf::FilterError;
use crate::decode;
use crate::events::Events;
use crate::flows::{FlowTracker, Packet};
use crate::reader;
use crate::skips;

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
    /// Finish the connections found ended: their rows of the connection table and their events.
    fn finish_ended(&mut self) {
        while let Some(connection) = self.flows.next_ended() {
            let finishing = self.flows.end_connection(connection);
            self.events.finish_connection(connection, &finishing);
        }
    }
}

/// Read one capture to its end (or to the damage that ends it) into `stages`, its frames
/// numbered on from `frame_offset`.
fn one_pass(
    stream: &mut reader::Stream,
    stages: &mut Stages,
    frame_offset: u64,
) -> Result<Counts, FilterError> {
    let mut counts = Counts::default();
    stream.judge_all(&mut |record, accepted| {
        counts.packets_read += 1;
        counts.linktype.get_or_insert(record.linktype);
        let code = match decode::decode(record.linktype, record.data) {
            Ok(tcp) => {
                let packet = Packet {
                    frame: (frame_offset + counts.packets_read) as u32,
                    time_us: record.time_us,
                    captured_bytes: record.data.len() as u32,
                    tcp: &tcp,
                    accepted,
                };
                if let Some(taken) = stages.flows.take(&packet) {
                    stages.events.take(&taken);
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
    })?;
    stages.flows.end_capture();
    stages.finish_ended();
    Ok(counts)
}

/// One capture read into `tracker`: its accounting as a dict (`packets_read`, `skipped`:
/// skip code -> packets, `linktype`: the first packet's, else the file's, `warnings`, `cut_short`: why
/// the read ended before the file's end or None, `frame_offset`, `connections_ended_silent`: how
/// many connections were finished before the capture's end for their silence)
/// or the error that stopped it (`CaptureError` or `FilterError`, as `decode_file` raises
/// them), with the packets read before an error left out of the tables.
fn read_capture<'py>(
    py: Python<'py>,
    path: &str,
    bpf_filter: Option<&str>,
    stages: &mut Stages,
    frame_offset: u64,
) -> PyResult<(Bound<'py, PyDict>, u64)> {
    let mut stream = reader::open(py, path, bpf_filter)?;
    stages.flows.next_capture();
    let outcome = py.detach(|| {
        catch_unwind(AssertUnwindSafe(|| {
            one_pass(&mut stream, stages, frame_offset)
        }))
    });
    let counts = match outcome {
        Ok(Ok(counts)) => counts,
        Ok(Err(error)) => {
            return Err(reader::filter_error(
                py,
                bpf_filter.unwrap_or_default(),
                error,
            ));
        }
        Err(_) => return Err(reader::internal_error(path)),
    };
    let capture = PyDict::new(py);
    capture.set_item("packets_read", counts.packets_read)?;
    capture.set_item("skipped", counts.skipped)?;
    capture.set_item("linktype", counts.linktype.or(stream.linktype()))?;
    capture.set_item("warnings", stream.warnings().to_vec())?;
    capture.set_item("cut_short", stream.cut_short())?;
    capture.set_item("frame_offset", frame_offset)?;
    capture.set_item("connections_ended_silent", stages.flows.ended_silent)?;
    Ok((capture, counts.packets_read))
}

/// Read the captures at `paths` one after another, each with the BPF filter `bpf_filter` if
/// one is given, and return a dict: `packets`, `sack_blocks` and `connections` of all of
/// them (see `FlowTables::into_python`; frames offset by each capture's `frame_offset`,
/// connections numbered on from the captures' before, `stream` ids each capture's own), and
/// `captures`: per path, its accounting (see `read_capture`) or the exception that stopped
/// its read (a capture whose read fails adds nothing to the tables). Without `packets` the
/// packet table, the SACK blocks and the segments' context rows are left out (no rows): the
/// events, the detectors' rows and the connections are all a caller then reads.
#[pyfunction]
#[pyo3(signature = (paths, bpf_filter=None, packets=true))]
pub fn flow_tables<'py>(
    py: Python<'py>,
    paths: Vec<String>,
    bpf_filter: Option<&str>,
    packets: bool,
) -> PyResult<Bound<'py, PyDict>> {
    let mut stages = Stages::default();
    if packets {
        stages.events.with_context();
    } else {
        stages.flows.without_packet_table();
    }
    let mut captures = Vec::with_capacity(paths.len());
    let mut frame_offset = 0u64;
    for path in &paths {
        let connections = stages.flows.connections();
        let marks = (stages.flows.mark(), stages.events.mark(connections));
        match read_capture(py, path, bpf_filter, &mut stages, frame_offset) {
            Ok((capture, packets_read)) => {
                frame_offset += packets_read;
                captures.push(capture.into_any());
            }
            Err(error) => {
                stages.flows.truncate(marks.0);
                stages.events.truncate(marks.1, connections);
                captures.push(error.into_value(py).into_bound(py).into_any());
            }
        }
    }
    let events = stages.events.into_python(py)?;
    let result = stages.flows.finish().into_python(py)?;
    result.set_item("segments", events.segments)?;
    result.set_item("gaps", events.gaps)?;
    result.set_item("messages", events.messages)?;
    result.set_item("bursts", events.bursts)?;
    result.set_item("untimed_stalls", events.untimed_stalls)?;
    result.set_item("lone_segments", events.lone_segments)?;
    result.set_item("payload_counts", events.payload_counts)?;
    result.set_item("captures", captures)?;
    Ok(result)
}
