//! Values counted by how often each came, in order of value: what a long connection keeps of
//! its segments once it lets them go (`ConnectionEvents::let_go`), its payload sizes by
//! direction and the payload sizes of its latest message.

#[derive(Clone, Default)]
pub struct Counts(Vec<(i64, u64)>);

impl Counts {
    /// Count the values `sorted` (in order) too.
    pub fn add_sorted(&mut self, sorted: &[i64]) {
        let mut merged = Vec::with_capacity(self.0.len() + 1);
        let add = |merged: &mut Vec<(i64, u64)>, value: i64, seen: u64| match merged.last_mut() {
            Some((last, count)) if *last == value => *count += seen,
            _ => merged.push((value, seen)),
        };
        let mut held = self.0.iter().copied().peekable();
        for value in sorted {
            while let Some((smaller, seen)) = held.next_if(|(held, _)| held <= value) {
                add(&mut merged, smaller, seen);
            }
            add(&mut merged, *value, 1);
        }
        for (value, seen) in held {
            add(&mut merged, value, seen);
        }
        self.0 = merged;
    }

    /// Each value with how often it came, in order.
    pub fn as_slice(&self) -> &[(i64, u64)] {
        &self.0
    }

    /// How many values were counted.
    pub fn total(&self) -> u64 {
        self.0.iter().map(|(_, seen)| seen).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}
