//! The Wireshark display filter that shows each finding's evidence
//! (`nagledetect/report/display_filter.py` says why it takes this shape and gives the caps):
//! `tcp.stream eq 3 && frame.number in {40..42, 45..47}`, the evidence frames as runs of
//! consecutive frames; past the caps, the stream's frames from the first evidence frame to
//! the last; the stream alone without evidence frames.

use std::fmt::Write;

use numpy::PyReadonlyArray1;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

/// The caps on listing a finding's frames one run at a time.
#[derive(Clone, Copy)]
struct Caps {
    /// More events than this: the span, without sorting their frames.
    events_listed: usize,
    /// More runs of consecutive frames than this: the span.
    frame_runs: usize,
}

/// Each finding's filter: finding k is on stream `connections[k]` and has the next
/// `counts[k]` rows of the three frame columns (0 or less: no such packet).
#[pyfunction]
pub fn display_filters(
    connections: Vec<i64>,
    counts: Vec<usize>,
    last_data_frame: PyReadonlyArray1<'_, i64>,
    ack_frame: PyReadonlyArray1<'_, i64>,
    released_frame: PyReadonlyArray1<'_, i64>,
    max_events_listed: usize,
    max_frame_runs: usize,
) -> PyResult<Vec<String>> {
    let columns = [
        last_data_frame.as_slice()?,
        ack_frame.as_slice()?,
        released_frame.as_slice()?,
    ];
    let rows = counts.iter().sum::<usize>();
    if connections.len() != counts.len() || columns.iter().any(|column| column.len() != rows) {
        return Err(PyValueError::new_err(
            "connections, counts and frame columns do not agree",
        ));
    }
    let caps = Caps {
        events_listed: max_events_listed,
        frame_runs: max_frame_runs,
    };
    let mut frames = Vec::new();
    let mut first = 0;
    let mut filters = Vec::with_capacity(counts.len());
    for (connection, count) in connections.into_iter().zip(counts) {
        frames.clear();
        for column in columns {
            frames.extend(
                column[first..first + count]
                    .iter()
                    .filter(|&&frame| frame > 0),
            );
        }
        filters.push(filter(connection, &mut frames, count, caps));
        first += count;
    }
    Ok(filters)
}

/// One finding's filter, from its evidence frames (in any order, with repeats).
fn filter(connection: i64, frames: &mut Vec<i64>, events: usize, caps: Caps) -> String {
    let mut text = format!("tcp.stream eq {connection}");
    if frames.is_empty() {
        return text;
    }
    if events > caps.events_listed {
        let (low, high) = frames.iter().fold((i64::MAX, i64::MIN), |(low, high), &f| {
            (low.min(f), high.max(f))
        });
        let _ = write!(text, " && frame.number in {{{low}..{high}}}");
        return text;
    }
    frames.sort_unstable();
    frames.dedup();
    let runs = runs(frames);
    text.push_str(" && frame.number in {");
    if runs.len() > caps.frame_runs {
        let _ = write!(text, "{}..{}", runs[0].0, runs[runs.len() - 1].1);
    } else {
        for (position, &(start, end)) in runs.iter().enumerate() {
            let comma = if position > 0 { ", " } else { "" };
            let _ = if start == end {
                write!(text, "{comma}{start}")
            } else {
                write!(text, "{comma}{start}..{end}")
            };
        }
    }
    text.push('}');
    text
}

/// The first and last frame of each run of consecutive frames (`frames` sorted, distinct).
fn runs(frames: &[i64]) -> Vec<(i64, i64)> {
    let mut found: Vec<(i64, i64)> = Vec::new();
    for &frame in frames {
        match found.last_mut() {
            Some((_, end)) if *end + 1 == frame => *end = frame,
            _ => found.push((frame, frame)),
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    const CAPS: Caps = Caps {
        events_listed: 4,
        frame_runs: 2,
    };

    fn made(frames: &[i64], events: usize) -> String {
        filter(3, &mut frames.to_vec(), events, CAPS)
    }

    /// Worked out by hand from the frames given.
    #[test]
    fn shapes() {
        assert_eq!(made(&[], 0), "tcp.stream eq 3");
        assert_eq!(
            made(&[42, 40, 41, 41], 2),
            "tcp.stream eq 3 && frame.number in {40..42}"
        );
        assert_eq!(
            made(&[40, 41, 45], 1),
            "tcp.stream eq 3 && frame.number in {40..41, 45}"
        );
        assert_eq!(
            made(&[40, 45, 50], 1),
            "tcp.stream eq 3 && frame.number in {40..50}"
        );
        assert_eq!(
            made(&[9, 7, 30, 2], 5),
            "tcp.stream eq 3 && frame.number in {2..30}"
        );
    }
}
