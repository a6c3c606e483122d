//! The Python face of the streaming reader: `Reader(path, batch_packets)` hands a capture's
//! decoded packets a batch at a time, so that memory follows the batch, never the file;
//! `decode_file` is the whole capture as one batch.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Mutex;

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyDict;

use crate::CaptureError;
use crate::capture::{CaptureReader, NotACapture};
use crate::columns::Columns;

const DEFAULT_BATCH_PACKETS: usize = 1 << 16;

fn internal_error(path: &str) -> PyErr {
    CaptureError::new_err(format!(
        "{path}: internal error in the compiled core; please report this"
    ))
}

/// Open the capture at `path`, its file header read; a file that is not a capture raises
/// `CaptureError` naming it.
pub fn open(py: Python<'_>, path: &str) -> PyResult<CaptureReader> {
    // A panic is a bug in the core; it becomes one exception naming the file, never an abort.
    match py.detach(|| catch_unwind(|| CaptureReader::open(path))) {
        Ok(Ok(reader)) => Ok(reader),
        Ok(Err(NotACapture(why))) => Err(CaptureError::new_err(format!("{path}: {why}"))),
        Err(_) => Err(internal_error(path)),
    }
}

/// The next (at most) `limit` packets decoded, with the Python lock let go.
pub fn next_columns(
    py: Python<'_>,
    path: &str,
    reader: &mut CaptureReader,
    limit: usize,
) -> PyResult<Columns> {
    py.detach(|| {
        catch_unwind(AssertUnwindSafe(|| {
            let mut columns = Columns::after(reader.packets());
            reader.read(limit, &mut |record| columns.push(&record));
            columns
        }))
    })
    .map_err(|_| internal_error(path))
}

/// A dict of a batch's `packets` and `sack_blocks` (as `decode_file` gives them).
pub fn batch_dict(py: Python<'_>, columns: Columns) -> PyResult<Bound<'_, PyDict>> {
    let batch = PyDict::new(py);
    let (packets, sack_blocks) = columns.into_python(py)?;
    batch.set_item("packets", packets)?;
    batch.set_item("sack_blocks", sack_blocks)?;
    Ok(batch)
}

/// A capture read a batch at a time: iterating gives dicts of `packets` and `sack_blocks`
/// as `decode_file` does (frames count from the capture's start; a SACK block's `row` is its
/// packet's row in the batch), of at most `batch_packets` packets each; `warnings` says why
/// the read ended early, complete once the iteration has ended. A file that is not a capture
/// raises `CaptureError` here.
#[pyclass(module = "nagledetect._core")]
pub struct Reader {
    path: String,
    batch_packets: usize,
    /// None once read to its end (its buffer let go) or after an internal error.
    capture: Mutex<Option<CaptureReader>>,
    warnings: Vec<String>,
}

#[pymethods]
impl Reader {
    #[new]
    #[pyo3(signature = (path, batch_packets = DEFAULT_BATCH_PACKETS))]
    fn new(py: Python<'_>, path: &str, batch_packets: usize) -> PyResult<Reader> {
        if batch_packets == 0 {
            return Err(PyValueError::new_err("batch_packets must be at least 1"));
        }
        Ok(Reader {
            path: path.to_string(),
            batch_packets,
            capture: Mutex::new(Some(open(py, path)?)),
            warnings: Vec::new(),
        })
    }

    fn __iter__(slf: PyRef<'_, Self>) -> PyRef<'_, Self> {
        slf
    }

    fn __next__<'py>(&mut self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyDict>>> {
        let slot = self
            .capture
            .get_mut()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let Some(capture) = slot.as_mut() else {
            return Ok(None);
        };
        let columns = match next_columns(py, &self.path, capture, self.batch_packets) {
            Ok(columns) => columns,
            Err(error) => {
                *slot = None;
                return Err(error);
            }
        };
        if columns.is_empty() {
            self.warnings = capture.warnings().to_vec();
            *slot = None;
            return Ok(None);
        }
        batch_dict(py, columns).map(Some)
    }

    /// Why the read ended early (a list of str; complete once the iteration has ended).
    #[getter]
    fn warnings(&self) -> Vec<String> {
        self.warnings.clone()
    }
}
