//! nagledetect's compiled core: reads a capture and decodes its packets into the columns the
//! numpy decoder (`nagledetect.read.decode`) produces, one row per packet in file order.

mod bpf;
mod capture;
mod columns;
mod decode;
mod skips;

use std::panic::{AssertUnwindSafe, catch_unwind};

use pyo3::create_exception;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

use crate::columns::Columns;

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

/// What decoding a file gives: the packet columns, the SACK blocks, and the warning that
/// ended the read early if any.
struct Decoded {
    columns: Columns,
    warning: Option<String>,
}

enum Unreadable {
    Capture(capture::NotACapture),
    Filter(bpf::FilterError),
}

fn decode_bytes(file: &[u8], expression: Option<&str>) -> Result<Decoded, Unreadable> {
    let mut columns = Columns::default();
    let Some(expression) = expression else {
        let warning = capture::read_records(file, &mut |record| columns.push(&record))
            .map_err(Unreadable::Capture)?;
        return Ok(Decoded { columns, warning });
    };
    let big_endian = bpf::big_endian_capture(file);
    let mut filter = bpf::Filter::new(expression, big_endian).map_err(Unreadable::Filter)?;
    columns.filtered();
    let mut refused = None;
    let warning = capture::read_records(file, &mut |record| {
        if refused.is_none() {
            bpf::judge(&mut filter, &record, &mut columns).unwrap_or_else(|e| refused = Some(e));
        }
    })
    .map_err(Unreadable::Capture)?;
    if let Some(error) = refused {
        return Err(Unreadable::Filter(error));
    }
    filter.check_unused().map_err(Unreadable::Filter)?;
    Ok(Decoded { columns, warning })
}

/// Read and decode the capture at `path` (one row per packet, in file order), with the BPF
/// filter `bpf_filter` applied as tcpdump applies it if one is given.
///
/// Returns a dict: `packets` (column name -> numpy array: `frame`, `time_us`, `linktype`,
/// `skip` (0 for a TCP packet, else the code of `nagledetect.read.skips`) and the TCP columns
/// of `nagledetect.read.decode`, zero where `skip` is not 0), `sack_blocks` (`row`: the
/// packet's row, `left_raw`, `right_raw`) and `warnings` (a list of str: why the read ended
/// early). With a filter, `packets` also has `accepted` (bool: whether the filter accepts
/// the packet; `skip` stays decoding's code), and `excluded_by_filter` counts the packets it
/// does not accept (0 without a filter). A file that is not a capture raises `CaptureError`;
/// a filter libpcap does not compile for the file's link type raises `FilterError`
/// ("invalid filter 'EXPRESSION': " and libpcap's message).
#[pyfunction]
#[pyo3(signature = (path, bpf_filter=None))]
fn decode_file<'py>(
    py: Python<'py>,
    path: &str,
    bpf_filter: Option<&str>,
) -> PyResult<Bound<'py, pyo3::types::PyDict>> {
    let file = std::fs::read(path).map_err(|error| {
        let why = match error.kind() {
            std::io::ErrorKind::NotFound => "no such file".to_string(),
            std::io::ErrorKind::PermissionDenied => "permission denied".to_string(),
            std::io::ErrorKind::IsADirectory => "is a directory, not a capture file".to_string(),
            _ => error.to_string(),
        };
        CaptureError::new_err(format!("{path}: {why}"))
    })?;
    // A panic is a bug in the core; it becomes one exception naming the file, never an abort.
    let outcome = py.detach(|| catch_unwind(AssertUnwindSafe(|| decode_bytes(&file, bpf_filter))));
    let decoded = match outcome {
        Ok(Ok(decoded)) => decoded,
        Ok(Err(Unreadable::Capture(capture::NotACapture(why)))) => {
            return Err(CaptureError::new_err(format!("{path}: {why}")));
        }
        Ok(Err(Unreadable::Filter(bpf::FilterError(message)))) => {
            // Worded as the numpy path words it (the expression as Python's repr quotes it).
            let quoted = pyo3::types::PyString::new(py, bpf_filter.unwrap_or_default()).repr()?;
            return Err(FilterError::new_err(format!(
                "invalid filter {quoted}: {message}"
            )));
        }
        Err(_) => {
            return Err(CaptureError::new_err(format!(
                "{path}: internal error in the compiled core; please report this"
            )));
        }
    };
    let result = pyo3::types::PyDict::new(py);
    result.set_item("excluded_by_filter", decoded.columns.excluded_by_filter())?;
    let (packets, sack_blocks) = decoded.columns.into_python(py)?;
    result.set_item("packets", packets)?;
    result.set_item("sack_blocks", sack_blocks)?;
    result.set_item("warnings", decoded.warning.into_iter().collect::<Vec<_>>())?;
    Ok(result)
}

#[pymodule]
fn _core(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(decode_file, m)?)?;
    m.add("CaptureError", m.py().get_type::<CaptureError>())?;
    m.add("FilterError", m.py().get_type::<FilterError>())?;
    Ok(())
}
