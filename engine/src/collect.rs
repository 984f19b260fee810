//! ARRAY_AGG and MAP_AGG state: each group's argument rows, as they came.
//!
//! The argument is one row per input row — `ROW(x, order keys…)` or
//! `ROW(key, value)` (the planner packs it) — kept whole, so a row taken
//! back (an updating or signed input) is found and removed, and the result
//! is built when the group is emitted: the values in the order of the
//! call's `ORDER BY` (NULL last ascending and first descending, as
//! PostgreSQL sorts; ties as they came), or the map's entries by key (the
//! same whatever order the rows came in, over any partitioning; a key
//! given twice keeps the value that came last).
//!
//! The state holds every value, as PostgreSQL's and Flink's do: its bytes
//! are counted ([`Collected::heap_bytes`]), so a core's memory budget
//! spills or stops a job whose groups grow past it.

use std::cmp::Ordering;

use serde::{Deserialize, Serialize};

use crate::Error;
use crate::top_n::compare;
use sluice_plan::{Column, Scalar};

#[derive(Debug, Default, Serialize, Deserialize)]
pub struct Collected {
    /// Per group, its argument rows (each a `Scalar::Row`).
    groups: Vec<Vec<Scalar>>,
    /// Per ORDER BY key (fields 1… of a row), whether it is descending.
    order: Vec<bool>,
    /// MAP_AGG: fields 0 and 1 are a key and a value.
    map: bool,
    /// About how many bytes the values hold.
    bytes: usize,
}

/// About how many bytes `s` takes in memory.
fn scalar_bytes(s: &Scalar) -> usize {
    size_of::<Scalar>()
        + match s {
            Scalar::String(x) => x.capacity(),
            Scalar::List(v) | Scalar::Row(v) => v.iter().map(scalar_bytes).sum(),
            Scalar::Map(v) => v.iter().map(|(k, x)| scalar_bytes(k) + scalar_bytes(x)).sum(),
            _ => 0,
        }
}

fn fields(row: &Scalar) -> &[Scalar] {
    match row {
        Scalar::Row(f) => f,
        _ => &[],
    }
}

impl Collected {
    pub fn new(order: &[bool], map: bool) -> Self {
        Self { groups: Vec::new(), order: order.to_vec(), map, bytes: 0 }
    }

    pub fn ensure(&mut self, groups: usize) {
        if self.groups.len() < groups {
            self.groups.resize_with(groups, Vec::new);
        }
    }

    pub fn reset(&mut self, g: usize) {
        let old = std::mem::take(&mut self.groups[g]);
        self.bytes = self.bytes.saturating_sub(old.iter().map(scalar_bytes).sum());
    }

    pub fn groups(&self) -> usize {
        self.groups.len()
    }

    /// Groups `groups` as a state of its own, numbered from 0.
    pub fn gather(&self, groups: impl Iterator<Item = usize>) -> Self {
        let groups: Vec<Vec<Scalar>> = groups.map(|g| self.groups.get(g).cloned().unwrap_or_default()).collect();
        let bytes = groups.iter().flatten().map(scalar_bytes).sum();
        Self { groups, order: self.order.clone(), map: self.map, bytes }
    }

    /// Writes a state cut by [`Collected::gather`] back into `groups`.
    pub fn scatter(&mut self, groups: impl Iterator<Item = usize>, page: Self) {
        for (g, values) in groups.zip(page.groups) {
            self.ensure(g + 1);
            self.reset(g);
            self.bytes += values.iter().map(scalar_bytes).sum::<usize>();
            self.groups[g] = values;
        }
    }

    /// Row `r` of `arg` (a row column) into group `g`, for each pair.
    pub fn update(&mut self, pairs: impl Iterator<Item = (usize, usize)>, arg: &Column) {
        for (r, g) in pairs {
            let value = arg.scalar(r);
            self.bytes += scalar_bytes(&value);
            self.groups[g].push(value);
        }
    }

    /// Takes `value` (an argument row folded into group `g`) back out.
    pub fn retract(&mut self, g: usize, value: &Scalar) -> Result<(), Error> {
        let values = &mut self.groups[g];
        let Some(at) = values.iter().rposition(|v| v == value) else {
            return Err(Error::Internal("ARRAY_AGG/MAP_AGG: a value taken back was never added".into()));
        };
        let removed = values.remove(at);
        self.bytes = self.bytes.saturating_sub(scalar_bytes(&removed));
        Ok(())
    }

    /// Folds group `src`'s values into group `dst` (session windows
    /// merging), after `dst`'s.
    pub fn merge(&mut self, dst: usize, src: usize) {
        let moved = std::mem::take(&mut self.groups[src]);
        self.groups[dst].extend(moved);
    }

    /// Group `g`'s array or map into `out`; NULL for a group with no rows.
    pub fn emit(&self, g: usize, out: &mut Column) -> Result<(), sluice_plan::Error> {
        let values = &self.groups[g];
        if values.is_empty() {
            out.push_null();
            return Ok(());
        }
        let mut at: Vec<usize> = (0..values.len()).collect();
        if self.map {
            // By key; of equal keys the last that came, first after the
            // stable sort's reversal.
            at.reverse();
            at.sort_by(|&a, &b| compare(&fields(&values[a])[0], &fields(&values[b])[0]));
            at.dedup_by(|b, a| fields(&values[*a])[0] == fields(&values[*b])[0]);
            let entries = at
                .iter()
                .filter_map(|&i| match fields(&values[i]) {
                    [Scalar::Null, _] => None,
                    [k, v] => Some((k.clone(), v.clone())),
                    _ => None,
                })
                .collect();
            return out.push_scalar(&Scalar::Map(entries));
        }
        if !self.order.is_empty() {
            at.sort_by(|&a, &b| self.ordered(&values[a], &values[b]));
        }
        let items = at.iter().map(|&i| fields(&values[i]).first().cloned().unwrap_or(Scalar::Null)).collect();
        out.push_scalar(&Scalar::List(items))
    }

    /// Two argument rows in the call's ORDER BY.
    fn ordered(&self, a: &Scalar, b: &Scalar) -> Ordering {
        let (a, b) = (fields(a), fields(b));
        for (k, desc) in self.order.iter().enumerate() {
            let (x, y) = (a.get(k + 1).unwrap_or(&Scalar::Null), b.get(k + 1).unwrap_or(&Scalar::Null));
            let o = compare(x, y);
            let o = if *desc { o.reverse() } else { o };
            if o != Ordering::Equal {
                return o;
            }
        }
        Ordering::Equal
    }

    pub fn heap_bytes(&self) -> usize {
        self.groups.capacity() * size_of::<Vec<Scalar>>() + self.bytes
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_plan::DataType;

    fn row(fields: Vec<Scalar>) -> Scalar {
        Scalar::Row(fields)
    }

    fn rows(t: DataType, values: &[Scalar]) -> Column {
        let mut c = Column::with_capacity(t, values.len());
        values.iter().for_each(|v| c.push_scalar(v).unwrap());
        c
    }

    fn emitted(state: &Collected, t: DataType, g: usize) -> Scalar {
        let mut out = Column::with_capacity(t, 1);
        state.emit(g, &mut out).unwrap();
        out.scalar(0)
    }

    /// Values in ORDER BY order (NULLs last ascending), ties as they
    /// came; a value taken back leaves; a group emptied is NULL; saved
    /// and paged state reads back the same.
    #[test]
    fn values_in_order_taken_back_and_paged() {
        let arg = DataType::row(vec![("f1".into(), DataType::String), ("f2".into(), DataType::Bigint)]).unwrap();
        let out = DataType::array(DataType::String).unwrap();
        let s = |x: &str| Scalar::String(x.into());
        let values = [
            row(vec![s("b"), Scalar::Bigint(2)]),
            row(vec![s("a"), Scalar::Bigint(1)]),
            row(vec![s("n"), Scalar::Null]),
            row(vec![Scalar::Null, Scalar::Bigint(1)]),
            row(vec![s("z"), Scalar::Bigint(9)]),
        ];
        let mut state = Collected::new(&[false], false);
        state.ensure(2);
        state.update([(0, 0), (1, 0), (2, 0), (3, 0), (4, 1)].into_iter(), &rows(arg, &values));
        assert_eq!(emitted(&state, out, 0), Scalar::List(vec![s("a"), Scalar::Null, s("b"), s("n")]));
        state.retract(0, &values[1]).unwrap();
        assert_eq!(emitted(&state, out, 0), Scalar::List(vec![Scalar::Null, s("b"), s("n")]));
        assert!(state.retract(0, &values[4]).is_err(), "group 1's value is not group 0's");
        let saved: Collected = postcard::from_bytes(&postcard::to_allocvec(&state).unwrap()).unwrap();
        let mut paged = Collected::new(&[false], false);
        paged.scatter(0..2, saved.gather(0..2));
        assert_eq!(emitted(&paged, out, 1), Scalar::List(vec![s("z")]));
        paged.retract(1, &values[4]).unwrap();
        assert_eq!(emitted(&paged, out, 1), Scalar::Null);
        let before = paged.heap_bytes();
        paged.reset(0);
        assert!(paged.heap_bytes() < before);
        let mut desc = Collected::new(&[true], false);
        desc.ensure(1);
        desc.update((0..4).map(|r| (r, 0)), &rows(arg, &values));
        assert_eq!(emitted(&desc, out, 0), Scalar::List(vec![s("n"), s("b"), s("a"), Scalar::Null]));
    }

    /// A map's entries by key, the last value of a key given twice, NULL
    /// keys skipped.
    #[test]
    fn map_entries_by_key_last_value_wins() {
        let arg = DataType::row(vec![("f1".into(), DataType::String), ("f2".into(), DataType::Bigint)]).unwrap();
        let out = DataType::map(DataType::String, DataType::Bigint).unwrap();
        let s = |x: &str| Scalar::String(x.into());
        let values = [
            row(vec![s("k"), Scalar::Bigint(1)]),
            row(vec![s("a"), Scalar::Bigint(2)]),
            row(vec![s("k"), Scalar::Bigint(3)]),
            row(vec![Scalar::Null, Scalar::Bigint(4)]),
        ];
        let mut state = Collected::new(&[], true);
        state.ensure(1);
        state.update((0..4).map(|r| (r, 0)), &rows(arg, &values));
        assert_eq!(
            emitted(&state, out, 0),
            Scalar::Map(vec![(s("a"), Scalar::Bigint(2)), (s("k"), Scalar::Bigint(3))])
        );
        state.retract(0, &values[2]).unwrap();
        assert_eq!(
            emitted(&state, out, 0),
            Scalar::Map(vec![(s("a"), Scalar::Bigint(2)), (s("k"), Scalar::Bigint(1))])
        );
    }
}
