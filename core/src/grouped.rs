//! Order statistics per group for the Python detectors (`nagledetect/flows/grouped.py`'s
//! `KeyGroups.median`): numpy has no grouped median, and ranking every row within its group
//! took two sorts of the whole column, a tenth of the detectors' time on a capture whose every
//! connection stalls. Here each group's values are selected in place, in one pass.

use numpy::{IntoPyArray, PyArray1, PyReadonlyArray1};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

/// Each group's median of `values`, laid out group after group, the groups beginning at the
/// rows `first` (in order, the first at 0): the middle value of those that are not NaN, or the
/// mean of the two middle ones, as pandas computes it; NaN for a group without one. Group
/// bounds that do not fit `values` raise ValueError.
#[pyfunction]
pub fn group_medians<'py>(
    py: Python<'py>,
    values: PyReadonlyArray1<'py, f64>,
    first: PyReadonlyArray1<'py, i64>,
) -> PyResult<Bound<'py, PyArray1<f64>>> {
    let medians = medians(values.as_slice()?, first.as_slice()?).map_err(PyValueError::new_err)?;
    Ok(medians.into_pyarray(py))
}

fn medians(values: &[f64], first: &[i64]) -> Result<Vec<f64>, &'static str> {
    let bounds = group_bounds(first, values.len())?;
    let mut scratch = Vec::new();
    Ok(bounds
        .map(|(start, end)| {
            scratch.clear();
            scratch.extend(values[start..end].iter().copied().filter(|v| !v.is_nan()));
            median_of(&mut scratch)
        })
        .collect())
}

/// Each group's rows as (start, end), checked against the `rows` there are.
fn group_bounds(
    first: &[i64],
    rows: usize,
) -> Result<impl Iterator<Item = (usize, usize)> + '_, &'static str> {
    let ends = first.iter().skip(1).copied().chain([rows as i64]);
    let ordered = first
        .iter()
        .zip(ends.clone())
        .all(|(start, end)| 0 <= *start && start <= &end && end <= rows as i64);
    if !ordered || first.first().is_some_and(|start| *start != 0) {
        return Err("group starts must rise from 0 within the values");
    }
    Ok(first
        .iter()
        .zip(ends)
        .map(|(start, end)| (*start as usize, end as usize)))
}

/// The middle value, or the mean of the two middle ones; NaN for none (`values` reordered).
fn median_of(values: &mut [f64]) -> f64 {
    let count = values.len();
    if count == 0 {
        return f64::NAN;
    }
    let (below, upper, _) = values.select_nth_unstable_by(count / 2, f64::total_cmp);
    let upper = *upper;
    let lower = if count % 2 == 1 {
        upper
    } else {
        below.iter().copied().fold(f64::NEG_INFINITY, f64::max)
    };
    (lower + upper) / 2.0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn medians_skip_nan_and_take_the_mean_of_two_middles() {
        let values = [3.0, f64::NAN, 1.0, 2.0, 4.0, 10.0, f64::NAN, 7.0];
        let found = medians(&values, &[0, 4, 6, 7]).unwrap();
        assert_eq!(found[..2], [2.0, 7.0]);
        assert!(found[2].is_nan());
        assert_eq!(found[3], 7.0);
    }

    #[test]
    fn bounds_outside_the_values_are_refused() {
        assert!(medians(&[1.0, 2.0], &[0, 3]).is_err());
        assert!(medians(&[1.0, 2.0], &[1]).is_err());
        assert!(medians(&[1.0, 2.0], &[0, 2, 1]).is_err());
        assert_eq!(medians(&[], &[]).unwrap(), Vec::<f64>::new());
    }
}
