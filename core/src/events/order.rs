//! The order a table's rows are handed over in (`Order`: by a key, stably), found by a radix
//! sort where the keys allow, and applied a column at a time into a spare column (`Spare`).

use std::any::Any;

/// The order a table's rows are handed over in: as they are, or by a key (stably), row by
/// row or, where the rows come in long runs that follow one another, run by run (a
/// connection's rows of a table come together, so a table ordered by connection is mostly
/// runs as long as a connection's rows, each copied whole).
pub enum Order {
    AsTheyAre,
    Rows(Vec<usize>),
    Runs(Vec<Run>),
}

/// Runs shorter than this on average are gathered row by row: a copy per run costs more than
/// a few rows' gathering.
const MIN_MEAN_RUN_ROWS: usize = 8;

/// Rows `start..start + length`, in that order.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Run {
    start: usize,
    length: usize,
}

/// The rows in turn as runs of rows that follow one another.
fn runs_of(rows: &[usize]) -> Vec<Run> {
    let mut runs: Vec<Run> = Vec::new();
    for &row in rows {
        match runs.last_mut() {
            Some(run) if run.start + run.length == row => run.length += 1,
            _ => runs.push(Run {
                start: row,
                length: 1,
            }),
        }
    }
    runs
}

impl Order {
    /// The rows by `key` (ties in the order they are), or as they are where they already are.
    pub fn by<K: SortKey>(key: &[K]) -> Order {
        if key.is_sorted() {
            return Order::AsTheyAre;
        }
        let rows = match Ranks::of(key) {
            Some(ranks) => radix_rows(ranks),
            None => compared_rows(key),
        };
        let breaks = rows
            .windows(2)
            .filter(|pair| pair[1] != pair[0] + 1)
            .count();
        if (breaks + 1) * MIN_MEAN_RUN_ROWS > rows.len() {
            return Order::Rows(rows);
        }
        Order::Runs(runs_of(&rows))
    }

    /// Put `column` in this order, its rows gathered (or its runs copied) into the spare
    /// column where it is of the same type (`spare`), which is left holding the column as it
    /// was.
    pub fn apply<T: Copy + 'static>(&self, column: &mut Vec<T>, spare: &mut Spare) {
        let gathered = match self {
            Order::AsTheyAre => return,
            Order::Rows(rows) => {
                let mut gathered = spare.take::<T>();
                gathered.extend(rows.iter().map(|row| column[*row]));
                gathered
            }
            Order::Runs(runs) => {
                let mut gathered = spare.take::<T>();
                gathered.reserve(column.len());
                for run in runs {
                    gathered.extend_from_slice(&column[run.start..run.start + run.length]);
                }
                gathered
            }
        };
        spare.keep(std::mem::replace(column, gathered));
    }
}

/// A key the tables are put in order by: one or two integer columns, compared in order.
pub trait SortKey: Ord + Copy {
    /// The key as two numbers compared in order (the second 0 for a key of one column).
    fn parts(self) -> (i64, i64);
}

impl SortKey for i64 {
    fn parts(self) -> (i64, i64) {
        (self, 0)
    }
}

impl SortKey for i32 {
    fn parts(self) -> (i64, i64) {
        (i64::from(self), 0)
    }
}

impl SortKey for u32 {
    fn parts(self) -> (i64, i64) {
        (i64::from(self), 0)
    }
}

impl SortKey for (i64, i64) {
    fn parts(self) -> (i64, i64) {
        self
    }
}

/// Each row's key as one unsigned number in the keys' order (its first part above its
/// second, each counted from its smallest), with the row's number in the bits below it, so
/// that no two are equal and the row comes with its key; and how many bits the ranks take.
struct Ranks {
    packed: Vec<u64>,
    rank_bits: u32,
    row_bits: u32,
}

impl Ranks {
    /// None where the two parts' spans and the rows do not fit in 64 bits together.
    fn of<K: SortKey>(key: &[K]) -> Option<Ranks> {
        let (first_low, first_high) = span(key.iter().map(|k| k.parts().0))?;
        let (second_low, second_high) = span(key.iter().map(|k| k.parts().1))?;
        let second_bits = bits_of(second_high.abs_diff(second_low));
        let rank_bits = bits_of(first_high.abs_diff(first_low)) + second_bits;
        let row_bits = bits_of(key.len() as u64 - 1);
        if rank_bits + row_bits > u64::BITS {
            return None;
        }
        let rank = |(first, second): (i64, i64)| {
            let first = first.abs_diff(first_low);
            let second = second.abs_diff(second_low);
            // A shift by 64 (a second part of 64 bits, the first then all equal) is none.
            first.checked_shl(second_bits).unwrap_or(0) | second
        };
        let packed = key
            .iter()
            .zip(0u64..)
            .map(|(k, row)| rank(k.parts()).checked_shl(row_bits).unwrap_or(0) | row)
            .collect();
        Some(Ranks {
            packed,
            rank_bits,
            row_bits,
        })
    }
}

/// The smallest and largest of `values` (None for none).
fn span(values: impl Iterator<Item = i64>) -> Option<(i64, i64)> {
    values.fold(None, |found, value| match found {
        None => Some((value, value)),
        Some((low, high)) => Some((low.min(value), high.max(value))),
    })
}

/// How many bits `value` takes.
fn bits_of(value: u64) -> u32 {
    u64::BITS - value.leading_zeros()
}

/// The most bits of the rank sorted on in one pass of the radix sort: its counts (1 MB)
/// still fit in the cache, and a key of connection numbers alone takes one pass.
const MAX_DIGIT_BITS: u32 = 17;

/// The rows in the order of their ranks, ties in row order: a least-significant-digit radix
/// sort of the ranks (the rows below them already in order), each pass a stable counting
/// sort on the next digit of them, in as few passes as digits of `MAX_DIGIT_BITS` allow.
fn radix_rows(ranks: Ranks) -> Vec<usize> {
    let Ranks {
        mut packed,
        rank_bits,
        row_bits,
    } = ranks;
    let passes = rank_bits.div_ceil(MAX_DIGIT_BITS);
    let digit_bits = rank_bits.div_ceil(passes);
    let mut sorted = vec![0u64; packed.len()];
    let mut starts = vec![0usize; 1 << digit_bits];
    for pass in 0..passes {
        let shift = row_bits + pass * digit_bits;
        let digit = |value: u64| ((value >> shift) & ((1 << digit_bits) - 1)) as usize;
        starts.fill(0);
        for value in &packed {
            starts[digit(*value)] += 1;
        }
        let mut start = 0;
        for slot in starts.iter_mut() {
            (*slot, start) = (start, start + *slot);
        }
        for &value in &packed {
            let slot = &mut starts[digit(value)];
            sorted[*slot] = value;
            *slot += 1;
        }
        std::mem::swap(&mut packed, &mut sorted);
    }
    let row_mask = 1u64.checked_shl(row_bits).map_or(u64::MAX, |bit| bit - 1);
    packed
        .into_iter()
        .map(|value| (value & row_mask) as usize)
        .collect()
}

/// The rows by `key` (ties in the order they are) by comparing keys.
fn compared_rows<K: SortKey>(key: &[K]) -> Vec<usize> {
    // No two (key, row) pairs are equal, so an unstable sort of the pairs is stable by key.
    let mut keyed: Vec<(K, usize)> = key.iter().copied().zip(0..).collect();
    keyed.sort_unstable();
    keyed.into_iter().map(|(_, row)| row).collect()
}

/// The column the last column put in order replaced, for the next to be gathered into where
/// it is of the same type: a table put in order reuses the memory of its columns put in order
/// before, rather than taking (and the system zeroing) new memory for each (the tables run to
/// hundreds of MB). One is kept at a time, so that ordering holds one column more at most.
#[derive(Default)]
pub struct Spare(Option<Box<dyn Any>>);

impl Spare {
    /// The spare column where it is of type `T` (emptied), else a new one (a spare of
    /// another type is let go).
    fn take<T: 'static>(&mut self) -> Vec<T> {
        let spare = self
            .0
            .take()
            .and_then(|spare| spare.downcast::<Vec<T>>().ok());
        let mut column = spare.map_or_else(Vec::new, |spare| *spare);
        column.clear();
        column
    }

    fn keep<T: 'static>(&mut self, column: Vec<T>) {
        self.0 = Some(Box::new(column));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The rows a stable sort by key gives.
    fn stable_rows<K: SortKey>(key: &[K]) -> Vec<usize> {
        let mut rows: Vec<usize> = (0..key.len()).collect();
        rows.sort_by_key(|row| key[*row]);
        rows
    }

    fn rows_of<K: SortKey>(key: &[K]) -> Vec<usize> {
        match Order::by(key) {
            Order::AsTheyAre => (0..key.len()).collect(),
            Order::Rows(rows) => rows,
            Order::Runs(runs) => runs
                .iter()
                .flat_map(|run| run.start..run.start + run.length)
                .collect(),
        }
    }

    /// Keys of a small generator's values, with many ties.
    fn keys(count: usize, modulus: u64, seed: u64) -> Vec<i64> {
        let mut state = seed;
        (0..count)
            .map(|_| {
                state = state
                    .wrapping_mul(6_364_136_223_846_793_005)
                    .wrapping_add(1_442_695_040_888_963_407);
                ((state >> 33) % modulus) as i64
            })
            .collect()
    }

    #[test]
    fn radix_order_is_the_stable_order() {
        for (count, modulus) in [(2, 3), (5000, 7), (5000, 1 << 20), (3000, 1 << 40)] {
            let first = keys(count, modulus, 1);
            assert_eq!(rows_of(&first), stable_rows(&first), "{count} {modulus}");
            let second: Vec<i64> = keys(count, 5, 2).iter().map(|k| k - 2).collect();
            let pairs: Vec<(i64, i64)> = first.iter().copied().zip(second).collect();
            assert_eq!(rows_of(&pairs), stable_rows(&pairs), "{count} {modulus}");
            let narrow: Vec<i32> = first.iter().map(|k| *k as i32 - 9).collect();
            assert_eq!(rows_of(&narrow), stable_rows(&narrow));
        }
    }

    #[test]
    fn keys_too_wide_for_one_rank_are_compared() {
        let pairs = [
            (i64::MAX, 1),
            (i64::MIN, 2),
            (0, i64::MIN),
            (0, i64::MAX),
            (0, 0),
        ];
        assert!(Ranks::of(&pairs).is_none());
        assert_eq!(rows_of(&pairs), stable_rows(&pairs));
        let wide = [i64::MAX, i64::MIN, 0, i64::MIN, -1];
        assert!(Ranks::of(&wide).is_none());
        assert_eq!(rows_of(&wide), stable_rows(&wide));
    }

    #[test]
    fn rows_that_follow_one_another_are_copied_as_runs() {
        let mut key: Vec<i64> = [5; 10].into_iter().chain([1; 10]).collect();
        key.push(3);
        let Order::Runs(runs) = Order::by(&key) else {
            panic!("runs of ten rows are not copied as runs");
        };
        let run = |start, length| Run { start, length };
        assert_eq!(runs, [run(10, 11), run(0, 10)]);
        let mut column: Vec<i64> = (0..21).collect();
        Order::Runs(runs).apply(&mut column, &mut Spare::default());
        let expected: Vec<i64> = (10..20).chain([20]).chain(0..10).collect();
        assert_eq!(column, expected);
        assert!(matches!(
            Order::by(&[5i64, 5, 5, 1, 1, 9, 1]),
            Order::Rows(_)
        ));
    }

    #[test]
    fn columns_are_put_in_order_through_the_spare() {
        let order = Order::by(&[3i64, 1, 2, 1]);
        let mut spare = Spare::default();
        let mut column = vec![30.0, 10.0, 20.0, 11.0];
        order.apply(&mut column, &mut spare);
        assert_eq!(column, [10.0, 11.0, 20.0, 30.0]);
        let mut again = vec![31.0, 12.0, 21.0, 13.0];
        order.apply(&mut again, &mut spare);
        assert_eq!(again, [12.0, 13.0, 21.0, 31.0]);
        let mut flags = vec![true, false, false, true];
        order.apply(&mut flags, &mut spare);
        assert_eq!(flags, [false, true, false, true]);
        assert_eq!(spare.take::<bool>(), Vec::<bool>::new());
    }
}
