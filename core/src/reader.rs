//! The Python face of the streaming reader: `Reader(path, batch_packets, bpf_filter)` hands a
//! capture's decoded packets a batch at a time, so that memory follows the batch, never the
//! file, each packet judged by the BPF filter (kept across batches) if one is given;
//! `decode_file` is the whole capture as one batch.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Mutex;

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyDict;

use crate::bpf::{self, FilterError};
use crate::capture::{CaptureReader, NotACapture, Record};
use crate::clock::Clock;
use crate::columns::Columns;
use crate::decode::Decoder;
use crate::{CaptureError, FilterError as PyFilterError};

const DEFAULT_BATCH_PACKETS: usize = 1 << 16;

pub(crate) fn internal_error(path: &str) -> PyErr {
    CaptureError::new_err(format!(
        "{path}: internal error in the compiled core; please report this"
    ))
}

/// A capture being read, and the filter its packets are judged by if one was given.
pub struct Stream {
    capture: CaptureReader,
    filter: Option<bpf::Filter>,
    /// Decodes the records read into columns (`next_columns`), holding IP fragments across
    /// batches.
    decoder: Decoder,
}

impl Stream {
    /// The capture's bytes read so far (decompressed).
    pub fn bytes_read(&self) -> u64 {
        self.capture.bytes_read()
    }

    /// Why the read ended early (complete once it has ended).
    pub fn warnings(&self) -> &[String] {
        self.capture.warnings()
    }

    /// The capture clock's step where it is coarse (once the read has ended).
    pub fn clock_step_us(&self) -> Option<u64> {
        self.capture.clock().and_then(Clock::coarse_step_us)
    }

    /// The interval every packet came after the one before, where all are the same (once the
    /// read has ended).
    pub fn clock_spacing_us(&self) -> Option<u64> {
        self.capture.clock().and_then(Clock::even_spacing_us)
    }

    /// The capture's link type as libpcap reports it for the file (`CaptureReader::linktype`).
    pub fn linktype(&self) -> Option<u32> {
        self.capture.linktype()
    }

    /// Why the read ended before the file's end, if it did (once it has ended).
    pub fn cut_short(&self) -> Option<&str> {
        self.capture.cut_short()
    }
}

/// The filter's refusal as the Python layer words an input error: "invalid filter
/// 'EXPRESSION': " and libpcap's message (the expression quoted as Python's repr quotes it).
pub(crate) fn filter_error(
    py: Python<'_>,
    expression: &str,
    FilterError(message): FilterError,
) -> PyErr {
    match pyo3::types::PyString::new(py, expression).repr() {
        Ok(quoted) => PyFilterError::new_err(format!("invalid filter {quoted}: {message}")),
        Err(error) => error,
    }
}

/// Open the capture at `path`, its file header read, with the filter `bpf_filter` for its
/// byte order; a file that is not a capture raises `CaptureError` naming it.
pub fn open(py: Python<'_>, path: &str, bpf_filter: Option<&str>) -> PyResult<Stream> {
    // A panic is a bug in the core; it becomes one exception naming the file, never an abort.
    let capture = match py.detach(|| catch_unwind(|| CaptureReader::open(path))) {
        Ok(Ok(reader)) => reader,
        Ok(Err(NotACapture(why))) => return Err(CaptureError::new_err(format!("{path}: {why}"))),
        Err(_) => return Err(internal_error(path)),
    };
    let filter = bpf_filter
        .map(|expression| {
            bpf::Filter::new(expression, capture.big_endian())
                .map_err(|error| filter_error(py, expression, error))
        })
        .transpose()?;
    Ok(Stream {
        capture,
        filter,
        decoder: Decoder::default(),
    })
}

/// The next (at most) `limit` packets decoded and judged by the filter, with the Python lock
/// let go. A filter libpcap does not compile for the capture's link type raises `FilterError`
/// (`bpf_filter` is its expression, for the message).
pub fn next_columns(
    py: Python<'_>,
    path: &str,
    bpf_filter: Option<&str>,
    stream: &mut Stream,
    limit: usize,
) -> PyResult<Columns> {
    let outcome = py.detach(|| catch_unwind(AssertUnwindSafe(|| read_columns(stream, limit))));
    match outcome {
        Ok(Ok(columns)) => Ok(columns),
        Ok(Err(error)) => Err(filter_error(py, bpf_filter.unwrap_or_default(), error)),
        Err(_) => Err(internal_error(path)),
    }
}

fn read_columns(stream: &mut Stream, limit: usize) -> Result<Columns, FilterError> {
    let Stream {
        capture,
        filter,
        decoder,
    } = stream;
    let mut columns = Columns::after(capture.packets());
    let Some(filter) = filter.as_mut() else {
        capture.read(limit, &mut |record| columns.push(&record, decoder));
        return Ok(columns);
    };
    columns.filtered();
    let mut refused = None;
    let given = capture.read(limit, &mut |record| {
        if refused.is_none() {
            bpf::judge(filter, &record, &mut columns, decoder)
                .unwrap_or_else(|e| refused = Some(e));
        }
    });
    if let Some(error) = refused {
        return Err(error);
    }
    if given < limit {
        // The capture has ended: one without packets still has its expression checked.
        filter.check_unused()?;
    }
    Ok(columns)
}

/// A dict of a batch's `packets`, `sack_blocks` and `excluded_by_filter` (as `decode_file`
/// gives them).
pub fn batch_dict(py: Python<'_>, columns: Columns) -> PyResult<Bound<'_, PyDict>> {
    let batch = PyDict::new(py);
    batch.set_item("excluded_by_filter", columns.excluded_by_filter())?;
    let (packets, sack_blocks) = columns.into_python(py)?;
    batch.set_item("packets", packets)?;
    batch.set_item("sack_blocks", sack_blocks)?;
    Ok(batch)
}

/// A capture read a batch at a time: iterating gives dicts of `packets`, `sack_blocks` and
/// `excluded_by_filter` as `decode_file` does (frames count from the capture's start; a SACK
/// block's `row` is its packet's row in the batch), of at most `batch_packets` packets each;
/// `warnings` says why the read ended early, complete once the iteration has ended. With
/// `bpf_filter`, one filter judges every packet (its programs kept across batches), each
/// batch's `packets` has `accepted`, and each batch's `excluded_by_filter` counts that batch's
/// packets the filter does not accept (their sum over the batches is `decode_file`'s). A file
/// that is not a capture raises `CaptureError` here; a filter libpcap does not compile for the
/// capture's link type raises `FilterError` from the first batch (or, for a capture without
/// packets, when the iteration would end). `linktype` and `cut_short` say what the file's
/// header named and why the read ended early, `clock_step_us` the step of a coarse clock
/// that stamped the packets, `clock_spacing_us` the interval every packet came after the one before where all are the same.
/// Each batch also says `bytes_read`: the
/// capture's bytes (decompressed) read up to its end.
#[pyclass(module = "nagledetect._core")]
pub struct Reader {
    path: String,
    batch_packets: usize,
    bpf_filter: Option<String>,
    /// None once read to its end (its buffer let go) or after an error.
    stream: Mutex<Option<Stream>>,
    /// What the stream said when it was let go (its values before, while it is read).
    ended: Ended,
}

/// What a reader keeps of its stream once the stream is let go.
#[derive(Default)]
struct Ended {
    warnings: Vec<String>,
    linktype: Option<u32>,
    cut_short: Option<String>,
    clock_step_us: Option<u64>,
    clock_spacing_us: Option<u64>,
}

impl Ended {
    fn of(stream: &Stream) -> Ended {
        Ended {
            warnings: stream.warnings().to_vec(),
            linktype: stream.linktype(),
            cut_short: stream.cut_short().map(str::to_string),
            clock_step_us: stream.clock_step_us(),
            clock_spacing_us: stream.clock_spacing_us(),
        }
    }
}

#[pymethods]
impl Reader {
    #[new]
    #[pyo3(signature = (path, batch_packets = DEFAULT_BATCH_PACKETS, bpf_filter = None))]
    fn new(
        py: Python<'_>,
        path: &str,
        batch_packets: usize,
        bpf_filter: Option<&str>,
    ) -> PyResult<Reader> {
        if batch_packets == 0 {
            return Err(PyValueError::new_err("batch_packets must be at least 1"));
        }
        let stream = open(py, path, bpf_filter)?;
        Ok(Reader {
            path: path.to_string(),
            batch_packets,
            bpf_filter: bpf_filter.map(str::to_string),
            ended: Ended::of(&stream),
            stream: Mutex::new(Some(stream)),
        })
    }

    fn __iter__(slf: PyRef<'_, Self>) -> PyRef<'_, Self> {
        slf
    }

    fn __next__<'py>(&mut self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyDict>>> {
        let slot = self
            .stream
            .get_mut()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let Some(stream) = slot.as_mut() else {
            return Ok(None);
        };
        let filter = self.bpf_filter.as_deref();
        let columns = match next_columns(py, &self.path, filter, stream, self.batch_packets) {
            Ok(columns) => columns,
            Err(error) => {
                *slot = None;
                return Err(error);
            }
        };
        self.ended = Ended::of(stream);
        if columns.is_empty() {
            *slot = None;
            return Ok(None);
        }
        let batch = batch_dict(py, columns)?;
        batch.set_item("bytes_read", stream.bytes_read())?;
        Ok(Some(batch))
    }

    /// Why the read ended early (a list of str; complete once the iteration has ended).
    #[getter]
    fn warnings(&self) -> Vec<String> {
        self.ended.warnings.clone()
    }

    /// The link type the file's header names (its first interface's for a pcapng file; None
    /// for a pcapng file without one).
    #[getter]
    fn linktype(&self) -> Option<u32> {
        self.ended.linktype
    }

    /// Why the read ended before the file's end, if it did (once the iteration has ended).
    #[getter]
    fn cut_short(&self) -> Option<String> {
        self.ended.cut_short.clone()
    }

    /// The step of the clock that stamped the packets, in microseconds, where it is 1 ms or
    /// more; else None (once the iteration has ended).
    #[getter]
    fn clock_step_us(&self) -> Option<u64> {
        self.ended.clock_step_us
    }

    /// The interval every packet came after the one before, in microseconds, where the
    /// intervals are all the same; else None (once the iteration has ended).
    #[getter]
    fn clock_spacing_us(&self) -> Option<u64> {
        self.ended.clock_spacing_us
    }
}

impl Stream {
    /// Hand at most `limit` records to `sink` in file order with the filter's verdict on each
    /// (true without a filter): how many were read (fewer than `limit` once the capture has
    /// ended). A filter libpcap does not compile for the capture's link type ends the read
    /// with its error.
    pub fn judge_some(
        &mut self,
        limit: usize,
        sink: &mut dyn FnMut(&Record<'_>, bool),
    ) -> Result<usize, FilterError> {
        let mut refused = None;
        let filter = &mut self.filter;
        let read = self.capture.read(limit, &mut |record| {
            if refused.is_some() {
                return;
            }
            let accepted = match filter.as_mut() {
                None => true,
                Some(filter) => {
                    match filter.accepts(record.linktype, record.data, record.wire_bytes) {
                        Ok(accepted) => accepted,
                        Err(error) => {
                            refused = Some(error);
                            return;
                        }
                    }
                }
            };
            sink(&record, accepted);
        });
        if let Some(error) = refused {
            return Err(error);
        }
        if read < limit {
            self.filter
                .as_ref()
                .map_or(Ok(()), bpf::Filter::check_unused)?;
        }
        Ok(read)
    }
}
