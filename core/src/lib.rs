//! nagledetect's compiled core, in the pipeline's order: reading captures (`source`,
//! `capture`, `bpf`, `decode`, `reader`: the decoded columns of `decode_file` and `Reader`),
//! then one pass that rebuilds connections (`flows`) and finds events (`events`) as packets
//! come (`analysis`: `flow_tables`, and `FlowBatches` a batch of finished connections at a
//! time); for the detectors, medians per group (`grouped`); at the other end, the JSON text
//! of the findings' evidence rows (`evidence_text`).

mod analysis;
mod bpf;
mod capture;
mod clock;
mod columns;
mod decode;
mod display_filter;
mod events;
mod evidence_text;
mod flows;
mod fragments;
mod grouped;
mod live;
mod pcap_types;
mod reader;
mod skips;
mod source;

use pyo3::create_exception;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

create_exception!(
    _core,
    FilterError,
    PyValueError,
    "A BPF filter libpcap does not compile for the capture's link type (its message)."
);

create_exception!(
    _core,
    CaptureError,
    PyValueError,
    "A file the core cannot read as a capture (the message names the file and why)."
);

/// Read and decode the capture at `path` (one row per packet, in file order), with the BPF
/// filter `bpf_filter` applied as tcpdump applies it if one is given.
///
/// Returns a dict: `packets` (column name -> numpy array: `frame`, `time_us`, `linktype`,
/// `skip` (0 for a TCP packet, else the code of `nagledetect.read.skips`) and the TCP columns
/// (`columns.rs`), zero where `skip` is not 0), `sack_blocks` (`row`: the
/// packet's row, `left_raw`, `right_raw`) and `warnings` (a list of str: why the read ended
/// early). With a filter, `packets` also has `accepted` (bool: whether the filter accepts
/// the packet; `skip` stays decoding's code), and `excluded_by_filter` counts the packets it
/// does not accept (0 without a filter). A file that is not a capture raises `CaptureError`;
/// a filter libpcap does not compile for the file's link type raises `FilterError`
/// ("invalid filter 'EXPRESSION': " and libpcap's message). The file is read streaming (gzip,
/// bzip2 and xz decompressed on the way); `Reader` gives it a batch at a time.
#[pyfunction]
#[pyo3(signature = (path, bpf_filter=None))]
fn decode_file<'py>(
    py: Python<'py>,
    path: &str,
    bpf_filter: Option<&str>,
) -> PyResult<Bound<'py, pyo3::types::PyDict>> {
    let mut stream = reader::open(py, path, bpf_filter)?;
    let columns = reader::next_columns(py, path, bpf_filter, &mut stream, usize::MAX)?;
    let result = reader::batch_dict(py, columns)?;
    result.set_item("warnings", stream.warnings().to_vec())?;
    Ok(result)
}

#[pymodule]
fn _core(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(decode_file, m)?)?;
    m.add_function(wrap_pyfunction!(evidence_text::evidence_texts, m)?)?;
    m.add_function(wrap_pyfunction!(display_filter::display_filters, m)?)?;
    m.add_function(wrap_pyfunction!(grouped::group_medians, m)?)?;
    m.add_function(wrap_pyfunction!(analysis::flow_tables, m)?)?;
    m.add_class::<analysis::FlowBatches>()?;
    m.add_class::<reader::Reader>()?;
    live::register(m)?;
    m.add("CaptureError", m.py().get_type::<CaptureError>())?;
    m.add("FilterError", m.py().get_type::<FilterError>())?;
    Ok(())
}
