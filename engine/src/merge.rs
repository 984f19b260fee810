//! The final phase of a two-phase global aggregate (see
//! [`sluice_plan::MergePlan`]).
//!
//! Every upstream partition aggregates its own rows and sends its running
//! partial; this operator, on the one partition they all go to, keeps the
//! latest partial of each upstream partition per window and combines them.
//! Partials replace, never add: the partial phase's state is checkpointed,
//! so after a crash an upstream partition sends partials it had sent
//! before — each one a complete account of that partition up to its
//! position — and the combination converges to the same result.
//!
//! Input rows are few (a partial per upstream partition and window per
//! batch), so state is kept as scalars, not columns.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::aggregate::int_values;
use crate::Error;
use crate::operator::{BatchInput, Operator, OperatorOutput, OperatorTag, StateSize, read_state, write_state};
use sluice_plan::{AggFunc, Batch, DataType, MergeCall, MergePlan, Scalar};

/// A window as `(end, start)`, so that windows sort in closing order. The
/// one group of a query without a window is `(0, 0)`.
type WindowKey = (i64, i64);

/// Each upstream partition's latest partial values, in
/// [`MergeOperator::inputs`] order.
type Partials = BTreeMap<u32, Vec<Scalar>>;

#[derive(Debug)]
pub struct MergeOperator {
    plan: MergePlan,
    /// Source columns of the partial values, every call's in order.
    inputs: Vec<usize>,
    windows: BTreeMap<WindowKey, Partials>,
    /// The watermark last handed in: a window that ended at or before it
    /// is closed, and a partial for it is late.
    watermark: i64,
    /// Windows a batch changed (scratch).
    touched: Vec<WindowKey>,
    /// The batch's selected rows (scratch).
    rows: Vec<usize>,
}

/// Checkpoint of a [`MergeOperator`], written by reference...
#[derive(Debug, Serialize)]
struct MergeStateRef<'a> {
    windows: &'a BTreeMap<WindowKey, Partials>,
    watermark: i64,
}

/// ...and read back owned (the two encode identically).
#[derive(Debug, Deserialize)]
struct MergeState {
    windows: BTreeMap<WindowKey, Partials>,
    watermark: i64,
}

impl MergeOperator {
    pub fn new(plan: &MergePlan) -> Self {
        Self {
            inputs: plan.calls.iter().flat_map(|c| c.partials.iter().copied()).collect(),
            plan: plan.clone(),
            windows: BTreeMap::new(),
            watermark: i64::MIN,
            touched: Vec::new(),
            rows: Vec::new(),
        }
    }

    /// Appends the combination of `partials` as one intermediate row.
    fn emit(&self, window: WindowKey, partials: &Partials, rows: &mut Batch) -> Result<(), Error> {
        let mut next = 0;
        if self.plan.window.is_some() {
            let (end, start) = window;
            for bound in [start, end] {
                let column = rows.columns.get_mut(next).ok_or_else(|| internal("window bound columns"))?;
                column.push_i64(bound)?;
                next += 1;
            }
        }
        let mut at = 0;
        for call in &self.plan.calls {
            let values = partials.values().map(|p| &p[at..at + call.partials.len()]);
            let merged = combine(call, values);
            let column = rows.columns.get_mut(next).ok_or_else(|| internal("an intermediate column per aggregate"))?;
            column.push_scalar(&merged)?;
            at += call.partials.len();
            next += 1;
        }
        rows.len += 1;
        Ok(())
    }

    fn close(&mut self, up_to: Option<i64>, emit: bool, rows: &mut Batch) -> Result<(), Error> {
        while let Some(entry) = self.windows.first_entry() {
            if up_to.is_some_and(|w| entry.key().0 > w) {
                break;
            }
            let (window, partials) = entry.remove_entry();
            if emit {
                self.emit(window, &partials, rows)?;
            }
        }
        Ok(())
    }
}

fn internal(what: &str) -> Error {
    Error::Internal(format!("merge of partial aggregates: missing {what}"))
}

/// One aggregate over the latest partials of every upstream partition.
fn combine<'a>(call: &MergeCall, partials: impl Iterator<Item = &'a [Scalar]>) -> Scalar {
    match call.func {
        AggFunc::CountStar | AggFunc::Count => {
            Scalar::Bigint(partials.map(|p| if let Some(Scalar::Bigint(n)) = p.first() { *n } else { 0 }).sum())
        }
        AggFunc::Sum if call.data_type == DataType::Bigint => {
            // In 128 bits, as the one-phase sum: NULL when there was no
            // value, or when the total does not fit a BIGINT.
            let mut seen = false;
            let mut total: i128 = 0;
            for p in partials {
                if let Some(Scalar::Bigint(x)) = p.first() {
                    seen = true;
                    total += i128::from(*x);
                }
            }
            match i64::try_from(total) {
                Ok(v) if seen => Scalar::Bigint(v),
                _ => Scalar::Null,
            }
        }
        AggFunc::Sum => {
            let mut total = None;
            for p in partials {
                if let Some(Scalar::Double(x)) = p.first() {
                    total = Some(total.unwrap_or(0.0) + x);
                }
            }
            total.map_or(Scalar::Null, Scalar::Double)
        }
        AggFunc::Avg => {
            let (mut sum, mut count) = (0.0, 0i64);
            for p in partials {
                if let [Scalar::Double(s), Scalar::Bigint(n)] = p {
                    sum += s;
                    count += n;
                }
            }
            #[allow(clippy::cast_precision_loss)]
            if count == 0 { Scalar::Null } else { Scalar::Double(sum / count as f64) }
        }
        AggFunc::Min | AggFunc::Max => {
            let max = call.func == AggFunc::Max;
            let mut best: Option<&Scalar> = None;
            for p in partials {
                let Some(v) = p.first().filter(|v| !v.is_null()) else { continue };
                let better = best.is_none_or(|b| match compare(v, b) {
                    Some(std::cmp::Ordering::Greater) => max,
                    Some(std::cmp::Ordering::Less) => !max,
                    _ => false,
                });
                if better {
                    best = Some(v);
                }
            }
            best.cloned().unwrap_or(Scalar::Null)
        }
        // The planner merges only the functions above (AggFunc::merges).
        AggFunc::StddevSamp | AggFunc::StddevPop | AggFunc::VarSamp | AggFunc::VarPop => Scalar::Null,
    }
}

fn compare(a: &Scalar, b: &Scalar) -> Option<std::cmp::Ordering> {
    match (a, b) {
        (Scalar::Bigint(x) | Scalar::Timestamp(x), Scalar::Bigint(y) | Scalar::Timestamp(y)) => Some(x.cmp(y)),
        (Scalar::Double(x), Scalar::Double(y)) => x.partial_cmp(y),
        (Scalar::Boolean(x), Scalar::Boolean(y)) => Some(x.cmp(y)),
        (Scalar::String(x), Scalar::String(y)) => Some(x.cmp(y)),
        _ => None,
    }
}

impl Operator for MergeOperator {
    fn process(&mut self, input: &BatchInput<'_>, out: &mut OperatorOutput<'_>) -> Result<(), Error> {
        let batch = input.batch;
        let bounds = match self.plan.window {
            Some((s, e)) => {
                let column = |i: usize| batch.columns.get(i).and_then(int_values);
                Some((
                    column(s).ok_or_else(|| internal("window start"))?,
                    column(e).ok_or_else(|| internal("window end"))?,
                ))
            }
            None => None,
        };
        self.touched.clear();
        self.rows.clear();
        input.selection.for_each(|r| self.rows.push(r));
        for i in 0..self.rows.len() {
            let r = self.rows[i];
            let window = bounds.map_or((0, 0), |(s, e)| (e[r], s[r]));
            if bounds.is_some() && window.0 <= self.watermark {
                out.late.push(u32::try_from(r).unwrap_or(u32::MAX));
                continue;
            }
            let from = input.upstreams.get(r).copied().unwrap_or(0);
            let partials = self.windows.entry(window).or_default().entry(from).or_default();
            partials.clear();
            for &c in &self.inputs {
                partials.push(batch.columns.get(c).ok_or_else(|| internal("a partial column"))?.scalar(r));
            }
            if input.emit_changes && input.per_record {
                // One update per input row, as EMIT CHANGES per record
                // promises: each partial is one upstream row's update.
                self.emit(window, &self.windows[&window], out.rows)?;
            } else if input.emit_changes && !self.touched.contains(&window) {
                self.touched.push(window);
            }
        }
        for &window in &self.touched {
            if let Some(partials) = self.windows.get(&window) {
                self.emit(window, partials, out.rows)?;
            }
        }
        Ok(())
    }

    fn on_watermark(&mut self, watermark: i64, emit: bool, rows: &mut Batch) -> Result<(), Error> {
        if self.plan.window.is_some() && watermark > self.watermark {
            self.watermark = watermark;
            self.close(Some(watermark), emit, rows)?;
        }
        Ok(())
    }

    fn finish(&mut self, emit: bool, rows: &mut Batch) -> Result<(), Error> {
        // Without a window the one group never closes: its changes were
        // all emitted already.
        if self.plan.window.is_some() {
            self.close(None, emit, rows)?;
        }
        Ok(())
    }

    fn state_size(&self) -> StateSize {
        let entries = self.state_entries();
        let strings: usize = self
            .windows
            .values()
            .flat_map(BTreeMap::values)
            .flatten()
            .map(|v| if let Scalar::String(s) = v { s.capacity() } else { 0 })
            .sum();
        StateSize { bytes: entries * (self.inputs.len() * size_of::<Scalar>() + 64) + strings, entries }
    }

    fn state_size_walks(&self) -> bool {
        true
    }

    /// One step per open window (a handful), not per entry.
    fn state_entries(&self) -> usize {
        self.windows.values().map(BTreeMap::len).sum()
    }

    fn snapshot(&self, out: Vec<u8>) -> Result<Vec<u8>, Error> {
        write_state(OperatorTag::Merge, &MergeStateRef { windows: &self.windows, watermark: self.watermark }, out)
    }

    fn restore(&mut self, bytes: &[u8]) -> Result<(), Error> {
        let state: MergeState = read_state(OperatorTag::Merge, bytes)?;
        self.windows = state.windows;
        self.watermark = state.watermark;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use sluice_plan::{AggFunc, Batch, Column, DataType, MergeCall, MergePlan, Selection};

    use super::MergeOperator;
    use crate::operator::{BatchInput, Operator, OperatorOutput};

    /// COUNT(*) from partial 0, SUM(BIGINT) from 1, MIN(VARCHAR) from 2,
    /// AVG from a sum (3) and a count (4).
    fn plan() -> MergePlan {
        let call = |func, partials: &[usize], data_type| MergeCall { func, partials: partials.to_vec(), data_type };
        MergePlan {
            window: None,
            calls: vec![
                call(AggFunc::CountStar, &[0], DataType::Bigint),
                call(AggFunc::Sum, &[1], DataType::Bigint),
                call(AggFunc::Min, &[2], DataType::String),
                call(AggFunc::Avg, &[3, 4], DataType::Double),
            ],
        }
    }

    /// A partial row: count, sum, min, AVG's sum and count.
    type Partial<'a> = (i64, Option<i64>, Option<&'a str>, f64, i64);
    /// A combined row: count, sum, min, avg.
    type Combined = (i64, Option<i64>, Option<String>, Option<f64>);

    /// Partials from `upstreams`;
    /// the rows emitted.
    fn feed(op: &mut MergeOperator, partials: &[Partial<'_>], upstreams: &[u32]) -> Vec<Combined> {
        let mut columns = vec![
            Column::with_capacity(DataType::Bigint, 4),
            Column::with_capacity(DataType::Bigint, 4),
            Column::with_capacity(DataType::String, 4),
            Column::with_capacity(DataType::Double, 4),
            Column::with_capacity(DataType::Bigint, 4),
        ];
        for &(n, sum, min, avg_sum, avg_n) in partials {
            columns[0].push_i64(n).unwrap();
            match sum {
                Some(s) => columns[1].push_i64(s).unwrap(),
                None => columns[1].push_null(),
            }
            match min {
                Some(m) => columns[2].push_str(m).unwrap(),
                None => columns[2].push_null(),
            }
            columns[3].push_f64(avg_sum).unwrap();
            columns[4].push_i64(avg_n).unwrap();
        }
        let batch = Batch::new(columns, partials.len());
        let mut rows = Batch::new(
            vec![
                Column::with_capacity(DataType::Bigint, 4),
                Column::with_capacity(DataType::Bigint, 4),
                Column::with_capacity(DataType::String, 4),
                Column::with_capacity(DataType::Double, 4),
            ],
            0,
        );
        let input = BatchInput {
            batch: &batch,
            selection: Selection::All(batch.len),
            event_times: &[],
            watermark_before: &[],
            per_record: false,
            emit_changes: true,
            upstreams,
        };
        let (mut extra, mut late) = (Vec::new(), Vec::new());
        op.process(&input, &mut OperatorOutput::new(&mut rows, &mut extra, &mut late)).unwrap();
        (0..rows.len)
            .map(|r| {
                let scalar = |c: usize| rows.columns[c].scalar(r);
                let int = |c| if let sluice_plan::Scalar::Bigint(x) = scalar(c) { Some(x) } else { None };
                let text = if let sluice_plan::Scalar::String(s) = scalar(2) { Some(s) } else { None };
                let avg = if let sluice_plan::Scalar::Double(x) = scalar(3) { Some(x) } else { None };
                (int(0).unwrap(), int(1), text, avg)
            })
            .collect()
    }

    #[test]
    fn a_newer_partial_of_an_upstream_replaces_its_older_one() {
        let mut op = MergeOperator::new(&plan());
        let out = feed(&mut op, &[(2, Some(10), Some("m"), 4.0, 2), (1, Some(-3), Some("k"), 1.0, 1)], &[0, 1]);
        assert_eq!(out, [(3, Some(7), Some("k".into()), Some(5.0 / 3.0))], "one combined row per batch");
        // Upstream 0 moved on (its running partial includes the two rows
        // above); then, after a restart, it repeats an older partial with a
        // newer one following: nothing is counted twice.
        let out = feed(&mut op, &[(4, Some(20), Some("c"), 8.0, 4)], &[0]);
        assert_eq!(out, [(5, Some(17), Some("c".into()), Some(9.0 / 5.0))]);
        let out = feed(&mut op, &[(3, Some(15), Some("c"), 6.0, 3), (4, Some(20), Some("c"), 8.0, 4)], &[0, 0]);
        assert_eq!(out, [(5, Some(17), Some("c".into()), Some(9.0 / 5.0))]);
    }

    #[test]
    fn nulls_stay_null_until_a_partial_has_a_value_and_state_survives_a_checkpoint() {
        let mut op = MergeOperator::new(&plan());
        let out = feed(&mut op, &[(1, None, None, 0.0, 0)], &[3]);
        assert_eq!(out, [(1, None, None, None)], "SUM, MIN and AVG of no values are NULL");
        let mut restored = MergeOperator::new(&plan());
        restored.restore(&op.snapshot(Vec::new()).unwrap()).unwrap();
        let out = feed(&mut restored, &[(2, Some(i64::MAX), Some("z"), 2.0, 1)], &[1]);
        assert_eq!(out, [(3, Some(i64::MAX), Some("z".into()), Some(2.0))]);
        // A total beyond BIGINT is NULL, as a one-phase SUM's.
        let out = feed(&mut restored, &[(1, Some(1), Some("y"), 0.0, 0)], &[2]);
        assert_eq!(out, [(4, None, Some("y".into()), Some(2.0))]);
    }
}
