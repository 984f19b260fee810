//! The final phase of a two-phase aggregate (see
//! [`sluice_plan::MergePlan`]).
//!
//! Every upstream partition aggregates its own rows and sends its running
//! partials; this operator, on the partition of each group, keeps the
//! latest partial of each part (an upstream partition, or an upstream
//! partition and the family of distinct values it counts) per group and
//! window, and combines them. Partials replace, never add: the partial
//! phase's state is checkpointed, so after a crash an upstream partition
//! sends partials it had sent before — each one a complete account of
//! that part up to its position — and the combination converges to the
//! same result.
//!
//! Input rows are few (a partial per part, group and window per batch),
//! so state is kept as scalars, not columns.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use super::aggregate::int_values;
use crate::Error;
use crate::operator::{
    BatchInput, Closed, Operator, OperatorOutput, OperatorTag, StateSize, read_state_and_rest, write_state,
};
use crate::shown::judge;
use crate::state::group_keys::KeyEncoder;
use sluice_plan::{AggFunc, Batch, Column, DataType, MergeCall, MergePlan, Scalar};

/// A window as `(end, start)`, so that windows sort in closing order. The
/// one window of a query without one is `(0, 0)`.
type WindowKey = (i64, i64);

/// A group of a window: the window, then its key's bytes (as
/// [`KeyEncoder`] writes them; empty without GROUP BY).
type GroupKey = (WindowKey, Vec<u8>);

/// A part: the upstream partition, and the encoded values of the plan's
/// part columns.
type Part = (u32, Vec<u8>);

/// One group's key values and the latest partials of each of its parts,
/// in [`MergeOperator::inputs`] order.
#[derive(Debug, Serialize, Deserialize)]
struct Group {
    key: Vec<Scalar>,
    parts: BTreeMap<Part, Vec<Scalar>>,
}

#[derive(Debug)]
pub struct MergeOperator {
    plan: MergePlan,
    /// Source columns of the partial values, every call's in order.
    inputs: Vec<usize>,
    groups: BTreeMap<GroupKey, Group>,
    /// The watermark last handed in: a window that ended at or before it
    /// is closed, and a partial for it is late.
    watermark: i64,
    /// Groups a batch changed (scratch).
    touched: Vec<GroupKey>,
    /// The group and part of the row at hand (scratch).
    probe: GroupKey,
    part_probe: Part,
    /// The batch's selected rows (scratch).
    rows: Vec<usize>,
    /// With HAVING over updates (`crate::shown`). `None`: not kept.
    shown: Option<ShownGroups>,
}

/// What HAVING over a merge's updates keeps (`crate::shown`).
#[derive(Debug, Default)]
struct ShownGroups {
    /// The groups whose last row passed HAVING.
    shown: BTreeSet<GroupKey>,
    /// The group of each row emitted since HAVING last judged them.
    emitted: Vec<GroupKey>,
    /// The groups closed since: judged as they were, then let go.
    gone: Vec<GroupKey>,
}

/// Checkpoint of a [`MergeOperator`], written by reference...
#[derive(Debug, Serialize)]
struct MergeStateRef<'a> {
    groups: &'a BTreeMap<GroupKey, Group>,
    watermark: i64,
}

/// ...and read back owned (the two encode identically).
#[derive(Debug, Deserialize)]
struct MergeState {
    groups: BTreeMap<GroupKey, Group>,
    watermark: i64,
}

/// A checkpoint of the global merge as it was before groups and parts
/// (tag [`OperatorTag::Merge`]): each window's partials per upstream.
#[derive(Debug, Deserialize)]
struct GlobalMergeState {
    windows: BTreeMap<WindowKey, BTreeMap<u32, Vec<Scalar>>>,
    watermark: i64,
}

impl MergeOperator {
    pub fn new(plan: &MergePlan) -> Self {
        Self {
            inputs: plan.calls.iter().flat_map(|c| c.partials.iter().copied()).collect(),
            plan: plan.clone(),
            groups: BTreeMap::new(),
            watermark: i64::MIN,
            touched: Vec::new(),
            probe: ((0, 0), Vec::new()),
            part_probe: (0, Vec::new()),
            rows: Vec::new(),
            shown: None,
        }
    }

    /// Group `at` was emitted as the next row.
    fn emitted(&mut self, at: &GroupKey) {
        if let Some(having) = &mut self.shown {
            having.emitted.push(at.clone());
        }
    }

    /// Appends the combination of `group`'s partials as one intermediate
    /// row: the group's key, the window, the aggregates.
    fn emit(&self, window: WindowKey, group: &Group, rows: &mut Batch) -> Result<(), Error> {
        let mut next = 0;
        for value in &group.key {
            let column = rows.columns.get_mut(next).ok_or_else(|| internal("group key columns"))?;
            column.push_scalar(value)?;
            next += 1;
        }
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
            let values = group.parts.values().map(|p| &p[at..at + call.partials.len()]);
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
        while let Some(entry) = self.groups.first_entry() {
            if up_to.is_some_and(|w| entry.key().0.0 > w) {
                break;
            }
            let (at, group) = entry.remove_entry();
            if emit {
                self.emit(at.0, &group, rows)?;
                self.emitted(&at);
            }
            if let Some(having) = &mut self.shown {
                having.gone.push(at);
            }
        }
        Ok(())
    }
}

/// The columns of `batch` at `indexes`.
fn columns<'a>(batch: &'a Batch, indexes: &[usize], what: &str) -> Result<Vec<&'a Column>, Error> {
    indexes.iter().map(|&i| batch.columns.get(i).ok_or_else(|| internal(what))).collect()
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
        AggFunc::Sum if matches!(call.data_type, DataType::Decimal(..)) => {
            let DataType::Decimal(precision, scale) = call.data_type else { return Scalar::Null };
            let (mut seen, mut total, mut wraps) = (false, 0i128, 0i64);
            for p in partials {
                if let Some(Scalar::Decimal(x, _)) = p.first() {
                    seen = true;
                    sluice_plan::decimal::add_wrapping(&mut total, &mut wraps, *x);
                }
            }
            match sluice_plan::decimal::total_of(total, wraps).and_then(|v| sluice_plan::decimal::fit(v, precision)) {
                Some(v) if seen => Scalar::Decimal(v, scale),
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
        // Not split in phases (`AggFunc::merges`).
        AggFunc::StddevSamp
        | AggFunc::StddevPop
        | AggFunc::VarSamp
        | AggFunc::VarPop
        | AggFunc::ArrayAgg
        | AggFunc::MapAgg => Scalar::Null,
    }
}

fn compare(a: &Scalar, b: &Scalar) -> Option<std::cmp::Ordering> {
    match (a, b) {
        (Scalar::Bigint(x) | Scalar::Timestamp(x), Scalar::Bigint(y) | Scalar::Timestamp(y)) => Some(x.cmp(y)),
        (Scalar::Double(x), Scalar::Double(y)) => x.partial_cmp(y),
        (Scalar::Decimal(x, sx), Scalar::Decimal(y, sy)) => Some(sluice_plan::decimal::cmp(*x, *sx, *y, *sy)),
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
        let group_columns = columns(batch, &self.plan.groups, "a group key column")?;
        let part_columns = columns(batch, &self.plan.parts, "a part column")?;
        let (group_keys, part_keys) = (KeyEncoder::new(&group_columns), KeyEncoder::new(&part_columns));
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
            // The group and part are encoded into reused probes; a key is
            // copied only when its group or part is new.
            let (at, part) = (&mut self.probe, &mut self.part_probe);
            at.0 = window;
            at.1.clear();
            group_keys.encode(r, &mut at.1);
            part.0 = input.upstreams.get(r).copied().unwrap_or(0);
            part.1.clear();
            part_keys.encode(r, &mut part.1);
            if !self.groups.contains_key(at) {
                let key = group_columns.iter().map(|c| c.scalar(r)).collect();
                self.groups.insert(at.clone(), Group { key, parts: BTreeMap::new() });
            }
            let group = self.groups.get_mut(at).ok_or_else(|| internal("the group just found"))?;
            if !group.parts.contains_key(part) {
                group.parts.insert(part.clone(), Vec::new());
            }
            let partials = group.parts.get_mut(part).ok_or_else(|| internal("the part just found"))?;
            partials.clear();
            for &c in &self.inputs {
                partials.push(batch.columns.get(c).ok_or_else(|| internal("a partial column"))?.scalar(r));
            }
            if input.emit_changes && input.per_record {
                // One update per input row, as EMIT CHANGES per record
                // promises: each partial is one upstream row's update.
                self.emit(window, &self.groups[&self.probe], out.rows)?;
                let at = self.probe.clone();
                self.emitted(&at);
            } else if input.emit_changes && !self.touched.contains(&self.probe) {
                self.touched.push(self.probe.clone());
            }
        }
        let touched = std::mem::take(&mut self.touched);
        for at in &touched {
            if let Some(group) = self.groups.get(at) {
                self.emit(at.0, group, out.rows)?;
                self.emitted(at);
            }
        }
        self.touched = touched;
        Ok(())
    }

    /// Its rows are not drained: HAVING settles which groups were shown
    /// only once they are all emitted.
    fn on_watermark(&mut self, watermark: i64, emit: bool, out: &mut Closed<'_>) -> Result<(), Error> {
        if self.plan.window.is_some() && watermark > self.watermark {
            self.watermark = watermark;
            self.close(Some(watermark), emit, out.rows)?;
        }
        Ok(())
    }

    fn finish(&mut self, emit: bool, out: &mut Closed<'_>) -> Result<(), Error> {
        // Without a window the one group never closes: its changes were
        // all emitted already.
        if self.plan.window.is_some() {
            self.close(None, emit, out.rows)?;
        }
        Ok(())
    }

    fn state_size(&self) -> StateSize {
        let entries = self.state_entries();
        let text = |v: &Scalar| if let Scalar::String(s) = v { s.capacity() } else { 0 };
        let strings: usize = self
            .groups
            .iter()
            .map(|((_, key), g)| {
                key.capacity()
                    + g.key.iter().map(text).sum::<usize>()
                    + g.parts.iter().map(|((_, p), v)| p.capacity() + v.iter().map(text).sum::<usize>()).sum::<usize>()
            })
            .sum();
        StateSize { bytes: entries * (self.inputs.len() * size_of::<Scalar>() + 64) + strings, entries }
    }

    fn state_size_walks(&self) -> bool {
        true
    }

    /// One step per group of an open window, not per entry.
    fn state_entries(&self) -> usize {
        self.groups.values().map(|g| g.parts.len()).sum()
    }

    fn snapshot(&self, out: Vec<u8>) -> Result<Vec<u8>, Error> {
        let out = write_state(
            OperatorTag::MergeGroups,
            &MergeStateRef { groups: &self.groups, watermark: self.watermark },
            out,
        )?;
        match &self.shown {
            // After the state, as an aggregate's bits (`crate::shown`).
            Some(having) => postcard::to_extend(&having.shown, out)
                .map_err(|e| Error::Checkpoint(format!("cannot serialise HAVING's groups: {e}"))),
            None => Ok(out),
        }
    }

    fn restore(&mut self, bytes: &[u8]) -> Result<(), Error> {
        let (state, rest): (MergeState, &[u8]) = match read_state_and_rest(OperatorTag::MergeGroups, bytes) {
            Ok(state) => state,
            // A checkpoint of the global merge before groups: each window's
            // one group, its parts the upstream partitions.
            Err(newer) => {
                let (old, rest): (GlobalMergeState, _) =
                    read_state_and_rest(OperatorTag::Merge, bytes).map_err(|_| newer)?;
                let groups = old
                    .windows
                    .into_iter()
                    .map(|(window, partials)| {
                        let parts = partials.into_iter().map(|(from, p)| ((from, Vec::new()), p)).collect();
                        ((window, Vec::new()), Group { key: Vec::new(), parts })
                    })
                    .collect();
                (MergeState { groups, watermark: old.watermark }, rest)
            }
        };
        self.groups = state.groups;
        self.watermark = state.watermark;
        if let Some(having) = &mut self.shown {
            having.emitted.clear();
            having.gone.clear();
            // A checkpoint from before HAVING's groups were kept counts
            // every group as shown (see `crate::shown`).
            having.shown = if rest.is_empty() {
                self.groups.keys().cloned().collect()
            } else {
                postcard::from_bytes(rest)
                    .map_err(|e| Error::Checkpoint(format!("cannot read HAVING's groups: {e}")))?
            };
        }
        Ok(())
    }

    fn track_having(&mut self) {
        self.shown.get_or_insert_default();
    }

    fn settle_having(
        &mut self,
        rows: usize,
        passed: &[u32],
        deleted: &[u32],
        retracted: &mut Vec<u32>,
    ) -> Result<(), Error> {
        let Some(ShownGroups { shown, emitted, gone }) = &mut self.shown else { return Ok(()) };
        judge(emitted, rows, passed, deleted, retracted, |at, now| match now {
            Some(true) => shown.contains(at) || !shown.insert(at.clone()),
            _ => shown.remove(at),
        })?;
        for at in gone.drain(..) {
            shown.remove(&at);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use sluice_plan::{AggFunc, Batch, Column, DataType, MergeCall, MergePlan, Selection};

    use std::collections::BTreeMap;

    use sluice_plan::Scalar;

    use super::MergeOperator;
    use crate::operator::{BatchInput, Operator, OperatorOutput, OperatorTag, write_state};

    /// COUNT(*) from partial 0, SUM(BIGINT) from 1, MIN(VARCHAR) from 2,
    /// AVG from a sum (3) and a count (4).
    fn plan() -> MergePlan {
        let call = |func, partials: &[usize], data_type| MergeCall { func, partials: partials.to_vec(), data_type };
        MergePlan {
            groups: Vec::new(),
            parts: Vec::new(),
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
                let int = |c| if let Scalar::Bigint(x) = scalar(c) { Some(x) } else { None };
                let text = if let Scalar::String(s) = scalar(2) { Some(s) } else { None };
                let avg = if let Scalar::Double(x) = scalar(3) { Some(x) } else { None };
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

    #[test]
    fn a_checkpoint_of_the_global_merge_from_before_groups_restores() {
        /// The state as the global merge wrote it: partials per window and upstream.
        #[derive(serde::Serialize)]
        struct Before {
            windows: BTreeMap<(i64, i64), BTreeMap<u32, Vec<Scalar>>>,
            watermark: i64,
        }
        let partial = |n, sum, min: &str, avg_sum, avg_n| {
            vec![
                Scalar::Bigint(n),
                Scalar::Bigint(sum),
                Scalar::String(min.into()),
                Scalar::Double(avg_sum),
                Scalar::Bigint(avg_n),
            ]
        };
        let upstreams = BTreeMap::from([(0, partial(2, 10, "k", 1.0, 1)), (1, partial(1, -3, "m", 2.0, 1))]);
        let before = Before { windows: BTreeMap::from([((0, 0), upstreams)]), watermark: i64::MIN };
        let bytes = write_state(OperatorTag::Merge, &before, Vec::new()).unwrap();
        let mut op = MergeOperator::new(&plan());
        op.restore(&bytes).unwrap();
        // Upstream 1 moves on; upstream 0's restored partial still counts.
        let out = feed(&mut op, &[(4, Some(20), Some("c"), 8.0, 4)], &[1]);
        assert_eq!(out, [(6, Some(30), Some("c".into()), Some(9.0 / 5.0))]);
        // What it writes now restores too.
        let mut again = MergeOperator::new(&plan());
        again.restore(&op.snapshot(Vec::new()).unwrap()).unwrap();
        let out = feed(&mut again, &[(1, Some(1), Some("a"), 1.0, 1)], &[2]);
        assert_eq!(out, [(7, Some(31), Some("a".into()), Some(10.0 / 6.0))]);
    }
}
