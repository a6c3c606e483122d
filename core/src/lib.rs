//! nagledetect's compiled core: reads a capture and decodes its packets into the columns the
//! numpy decoder (`nagledetect.read.decode`) produces, one row per packet in file order.

mod capture;
mod columns;
mod decode;
mod reader;
mod skips;
mod source;

use pyo3::create_exception;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

create_exception!(
    _core,
    CaptureError,
    PyValueError,
    "A file the core cannot read as a capture (the message names the file and why)."
);

/// Read and decode the capture at `path` (one row per packet, in file order).
///
/// Returns a dict: `packets` (column name -> numpy array: `frame`, `time_us`, `linktype`,
/// `skip` (0 for a TCP packet, else the code of `nagledetect.read.skips`) and the TCP columns
/// of `nagledetect.read.decode`, zero where `skip` is not 0), `sack_blocks` (`row`: the
/// packet's row, `left_raw`, `right_raw`) and `warnings` (a list of str: why the read ended
/// early). A file that is not a capture raises `CaptureError`. The file is read streaming
/// (gzip, bzip2 and xz decompressed on the way); `Reader` gives it a batch at a time.
#[pyfunction]
fn decode_file<'py>(py: Python<'py>, path: &str) -> PyResult<Bound<'py, pyo3::types::PyDict>> {
    let mut capture = reader::open(py, path)?;
    let columns = reader::next_columns(py, path, &mut capture, usize::MAX)?;
    let result = reader::batch_dict(py, columns)?;
    result.set_item("warnings", capture.warnings().to_vec())?;
    Ok(result)
}

#[pymodule]
fn _core(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(decode_file, m)?)?;
    m.add_class::<reader::Reader>()?;
    m.add("CaptureError", m.py().get_type::<CaptureError>())?;
    Ok(())
}
