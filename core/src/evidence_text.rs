//! The evidence rows of many findings as the JSON text of the document
//! (`nagledetect/report/evidence_text.py` gives the columns and the fixed text around the
//! numbers): each number as orjson writes the value the document rounds it to, so the text
//! is byte for byte what orjson writes for the rows as dicts.
//!
//! Numbers: whole columns in decimal; decimal ones rounded as numpy's `round` rounds (times
//! ten to the decimals, to even, divided back), then in their shortest form that reads back
//! as the same double (the `ryu` crate: the digits orjson's own Ryū gives, a fraction `.0`
//! for whole numbers, an exponent outside 1e-5..1e16), the exponent signed as orjson signs
//! it (`1e+16`, `1e-6`); not a number (the gaps a column does not measure) as `null`.

use numpy::PyReadonlyArray1;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyBytes;

/// Powers of ten as numpy's `round` makes them (exact up to 1e22).
const POWERS_OF_TEN: [f64; 10] = [1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9];

/// One column of evidence: whole numbers, or decimals rounded to so many places.
enum Column<'a> {
    Whole(&'a [i64]),
    Decimal(&'a [f64], f64),
}

impl Column<'_> {
    fn len(&self) -> usize {
        match self {
            Column::Whole(values) => values.len(),
            Column::Decimal(values, _) => values.len(),
        }
    }

    fn push(&self, row: usize, out: &mut Vec<u8>, numbers: &mut Numbers) {
        match self {
            Column::Whole(values) => {
                out.extend_from_slice(numbers.whole.format(values[row]).as_bytes())
            }
            Column::Decimal(values, scale) => push_decimal(out, values[row], *scale, numbers),
        }
    }
}

#[derive(Default)]
struct Numbers {
    whole: itoa::Buffer,
    decimal: ryu::Buffer,
}

fn push_decimal(out: &mut Vec<u8>, value: f64, scale: f64, numbers: &mut Numbers) {
    let rounded = (value * scale).round_ties_even() / scale;
    if !rounded.is_finite() {
        out.extend_from_slice(b"null");
        return;
    }
    let text = numbers.decimal.format_finite(rounded).as_bytes();
    match text.iter().position(|byte| *byte == b'e') {
        Some(at) if text.get(at + 1) != Some(&b'-') => {
            out.extend_from_slice(&text[..=at]);
            out.push(b'+');
            out.extend_from_slice(&text[at + 1..]);
        }
        _ => out.extend_from_slice(text),
    }
}

/// The fixed text of a row: before its first number (the first row of a finding's list
/// opens the list), between its numbers, after its last (the last row closes the list).
#[derive(FromPyObject)]
#[pyo3(from_item_all)]
pub struct RowText {
    row_open: Vec<u8>,
    first_row_open: Vec<u8>,
    between: Vec<Vec<u8>>,
    row_close: Vec<u8>,
    last_row_close: Vec<u8>,
}

/// Each finding's evidence rows (`counts` of them in turn, the columns' rows in order) as the
/// text of its JSON list, `[]` for none. `decimals`: each column's places, None for a whole
/// column (int64; decimal ones float64).
#[pyfunction]
pub fn evidence_texts<'py>(
    py: Python<'py>,
    columns: Vec<Bound<'py, PyAny>>,
    decimals: Vec<Option<usize>>,
    counts: Vec<usize>,
    text: RowText,
) -> PyResult<Vec<Bound<'py, PyBytes>>> {
    let rows = counts.iter().sum::<usize>();
    let agree = |columns: &[Column<'_>]| {
        decimals.len() == columns.len()
            && columns.len() == text.between.len() + 1
            && columns.iter().all(|column| column.len() == rows)
    };
    let arrays = (columns.iter().zip(&decimals))
        .map(|(column, places)| Array::of(column, *places))
        .collect::<PyResult<Vec<_>>>()?;
    let columns = arrays
        .iter()
        .map(Array::column)
        .collect::<PyResult<Vec<_>>>()?;
    if !agree(&columns) {
        return Err(PyValueError::new_err(
            "evidence columns, counts and row text do not agree",
        ));
    }
    let mut numbers = Numbers::default();
    let mut first = 0;
    let mut texts = Vec::with_capacity(counts.len());
    let mut out = Vec::new();
    for count in counts {
        out.clear();
        write_rows(
            &columns,
            first..first + count,
            &text,
            &mut out,
            &mut numbers,
        );
        texts.push(PyBytes::new(py, &out));
        first += count;
    }
    Ok(texts)
}

fn write_rows(
    columns: &[Column<'_>],
    rows: std::ops::Range<usize>,
    text: &RowText,
    out: &mut Vec<u8>,
    numbers: &mut Numbers,
) {
    if rows.is_empty() {
        out.extend_from_slice(b"[]");
        return;
    }
    let (first, last) = (rows.start, rows.end - 1);
    for row in rows {
        out.extend_from_slice(if row == first {
            &text.first_row_open
        } else {
            &text.row_open
        });
        for (index, column) in columns.iter().enumerate() {
            if index > 0 {
                out.extend_from_slice(&text.between[index - 1]);
            }
            column.push(row, out, numbers);
        }
        out.extend_from_slice(if row == last {
            &text.last_row_close
        } else {
            &text.row_close
        });
    }
}

/// A column as a numpy array of its kind, read in place.
enum Array<'py> {
    Whole(PyReadonlyArray1<'py, i64>),
    Decimal(PyReadonlyArray1<'py, f64>, usize),
}

impl<'py> Array<'py> {
    fn of(column: &Bound<'py, PyAny>, places: Option<usize>) -> PyResult<Array<'py>> {
        match places {
            None => Ok(Array::Whole(column.extract()?)),
            Some(places) if places < POWERS_OF_TEN.len() => {
                Ok(Array::Decimal(column.extract()?, places))
            }
            Some(_) => Err(PyValueError::new_err("evidence decimals out of range")),
        }
    }

    fn column(&self) -> PyResult<Column<'_>> {
        let contiguous = |error| PyValueError::new_err(format!("{error}"));
        Ok(match self {
            Array::Whole(values) => Column::Whole(values.as_slice().map_err(contiguous)?),
            Array::Decimal(values, places) => Column::Decimal(
                values.as_slice().map_err(contiguous)?,
                POWERS_OF_TEN[*places],
            ),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decimal(value: f64, places: usize) -> String {
        let mut out = Vec::new();
        push_decimal(
            &mut out,
            value,
            POWERS_OF_TEN[places],
            &mut Numbers::default(),
        );
        String::from_utf8(out).unwrap()
    }

    /// orjson's text for these values, read from `orjson.dumps` (3.13) by hand.
    #[test]
    fn decimals_are_written_as_orjson_writes_them() {
        let cases = [
            (0.0, 6, "0.0"),
            (-0.0, 6, "-0.0"),
            (1e-6, 6, "1e-6"),
            (1.5e-5, 6, "0.000015"),
            (0.000123, 6, "0.000123"),
            (1e15, 3, "1000000000000000.0"),
            (1e16, 3, "1e+16"),
            (1.2e16, 3, "1.2e+16"),
            (1427336413.70782, 6, "1427336413.70782"),
            (100.0, 3, "100.0"),
            (-3.25, 3, "-3.25"),
            (f64::NAN, 3, "null"),
            (f64::INFINITY, 3, "null"),
        ];
        for (value, places, expected) in cases {
            assert_eq!(decimal(value, places), expected, "{value}");
        }
    }

    /// numpy's `round` rounds halves to even after scaling: np.round(0.0625, 3) is 0.062
    /// (62.5 to 62), np.round(0.0635, 3) is 0.064 (0.0635 * 1000 is 63.5 in doubles, to 64),
    /// np.round(2.5, 0) is 2.0, checked in numpy.
    #[test]
    fn rounding_is_numpys() {
        assert_eq!(decimal(0.0625, 3), "0.062");
        assert_eq!(decimal(0.0635, 3), "0.064");
        assert_eq!(decimal(2.5, 0), "2.0");
        assert_eq!(decimal(0.2080564999, 6), "0.208056");
    }
}
