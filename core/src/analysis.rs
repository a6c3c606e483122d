//! The Python face of the one-pass analysis: `flow_tables(path, bpf_filter)` reads a capture,
//! decodes each packet and rebuilds its connections (`flows`) as it goes, and returns the
//! tables `build_flows` makes with the accounting of every packet read.

use std::collections::BTreeMap;
use std::panic::{AssertUnwindSafe, catch_unwind};

use pyo3::prelude::*;
use pyo3::types::PyDict;

use crate::bpf::FilterError;
use crate::decode;
use crate::flows::{FlowTracker, Packet};
use crate::reader;
use crate::skips;

/// Skip code of a TCP packet the filter does not accept (`nagledetect.read.skips`).
const EXCLUDED_BY_FILTER: i64 = 9;

/// What one pass gives: the flow tables and the accounting.
struct Pass {
    tables: crate::flows::tables::FlowTables,
    packets_read: u64,
    skipped: BTreeMap<i64, u64>,
    linktype: Option<u32>,
}

fn one_pass(stream: &mut reader::Stream) -> Result<Pass, FilterError> {
    let mut tracker = FlowTracker::default();
    let mut skipped = BTreeMap::new();
    let mut packets_read = 0u64;
    let mut linktype = None;
    stream.judge_all(&mut |record, accepted| {
        packets_read += 1;
        linktype.get_or_insert(record.linktype);
        let code = match decode::decode(record.linktype, record.data) {
            Ok(tcp) => {
                tracker.take(&Packet {
                    frame: packets_read as u32,
                    time_us: record.time_us,
                    captured_bytes: record.data.len() as u32,
                    tcp: &tcp,
                    accepted,
                });
                skips::KEPT
            }
            Err(code) => code,
        };
        let code = if accepted { code } else { EXCLUDED_BY_FILTER };
        if code != skips::KEPT {
            *skipped.entry(code).or_insert(0) += 1;
        }
    })?;
    Ok(Pass {
        tables: tracker.finish(),
        packets_read,
        skipped,
        linktype,
    })
}

/// Read the capture at `path` once, with the BPF filter `bpf_filter` if one is given, and
/// return a dict: `packets`, `sack_blocks` and `connections` (see `FlowTables::into_python`),
/// `packets_read`, `skipped` (skip code -> packets), `linktype` (the first packet's, None
/// without packets) and `warnings` (why the read ended early). Errors as `decode_file`'s.
#[pyfunction]
#[pyo3(signature = (path, bpf_filter=None))]
pub fn flow_tables<'py>(
    py: Python<'py>,
    path: &str,
    bpf_filter: Option<&str>,
) -> PyResult<Bound<'py, PyDict>> {
    let mut stream = reader::open(py, path, bpf_filter)?;
    let outcome = py.detach(|| catch_unwind(AssertUnwindSafe(|| one_pass(&mut stream))));
    let pass = match outcome {
        Ok(Ok(pass)) => pass,
        Ok(Err(error)) => {
            return Err(reader::filter_error(
                py,
                bpf_filter.unwrap_or_default(),
                error,
            ));
        }
        Err(_) => return Err(reader::internal_error(path)),
    };
    let result = pass.tables.into_python(py)?;
    result.set_item("packets_read", pass.packets_read)?;
    result.set_item("skipped", pass.skipped)?;
    result.set_item("linktype", pass.linktype)?;
    result.set_item("warnings", stream.warnings().to_vec())?;
    Ok(result)
}
