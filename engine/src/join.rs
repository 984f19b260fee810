//! Stream–stream interval join (`a JOIN b ON a.k = b.k AND b.ts BETWEEN
//! a.ts - INTERVAL … AND a.ts + INTERVAL …`), INNER, LEFT, RIGHT and FULL.
//!
//! Both sides arrive through one exchange keyed by the join key (see
//! [`JoinPlan`]), so every row of a key is on this partition. Each row is
//! kept under its key until the watermark says no row of the other side
//! that is still to come can match it, and is joined with the other side's
//! kept rows of its key whose event time is in range. As Flink's interval
//! join, a row whose event time is below the watermark when it arrives is
//! late: it is reported as such and joins nothing. That makes the result
//! independent of batching and of when state is let go: a row that is not
//! late finds every partner it can have still kept (a left row is let go
//! once its time + upper bound is below the watermark, and any right row
//! it could match has a time at or above it — so was late).
//!
//! Outer joins emit a kept row that never matched, NULL-extended, when it
//! is let go (the watermark passed its range) or at the end of a bounded
//! input. A row whose key has a NULL can never match: an outer side emits
//! it at once.
//!
//! The ON condition beyond the keys and the time bound (the residual) is
//! evaluated on each candidate pair; only pairs that pass count as
//! matches, so for outer joins it decides which rows are NULL-extended.

use std::borrow::Cow;
use std::cmp::Reverse;
use std::collections::BinaryHeap;

use serde::{Deserialize, Serialize};

use crate::Error;
use crate::group_keys::{GroupTable, GroupTableState, KeyEncoder};
use crate::operator::{BatchInput, Operator, OperatorOutput, OperatorTag, StateSize, read_state, write_state};
use sluice_plan::{Batch, Column, ColumnData, DataType, JoinPlan, Scalar, eval};

/// A kept row: its side's columns only.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Kept {
    time: i64,
    matched: bool,
    row: Vec<Scalar>,
}

/// The kept rows of one key: left side, right side.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
struct KeyRows {
    sides: [Vec<Kept>; 2],
}

#[derive(Serialize, Deserialize)]
struct JoinState {
    table: GroupTableState,
    keys: Vec<KeyRows>,
}

/// A candidate pair found in a batch: key, the new row's side and index in
/// its list, the partner's index in the other side's list.
#[derive(Debug, Clone, Copy)]
struct Pair {
    key: u32,
    right: bool,
    new: u32,
    other: u32,
}

#[derive(Debug)]
pub struct JoinOperator {
    plan: JoinPlan,
    types: Vec<DataType>,
    table: GroupTable,
    keys: Vec<KeyRows>,
    /// `(time at which a kept row of the key may be let go, key)`: the
    /// watermark visits only keys that have something to let go.
    expiry: BinaryHeap<Reverse<(i64, u32)>>,
    rows: usize,
    key: Vec<u8>,
    pairs: Vec<Pair>,
    /// Candidate pairs, joined, when a residual condition must pass first.
    candidates: Batch,
}

impl JoinOperator {
    /// `types`: the source (= intermediate) schema's column types.
    pub fn new(plan: &JoinPlan, types: &[DataType]) -> Self {
        Self {
            plan: plan.clone(),
            types: types.to_vec(),
            table: GroupTable::default(),
            keys: Vec::new(),
            expiry: BinaryHeap::new(),
            rows: 0,
            key: Vec::new(),
            pairs: Vec::new(),
            candidates: Batch::new(types.iter().map(|t| Column::with_capacity(*t, 0)).collect(), 0),
        }
    }

    fn range(&self, right: bool) -> (usize, usize) {
        if right { self.plan.right } else { self.plan.left }
    }

    /// When a kept row of the side may be let go: once the watermark is
    /// past it, no row of the other side still to come can match it.
    fn expires(&self, right: bool, time: i64) -> i64 {
        if right { time.saturating_sub(self.plan.lower) } else { time.saturating_add(self.plan.upper) }
    }

    /// Whether a left row at `left` and a right row at `right` are in range.
    fn in_range(&self, left: i64, right: i64) -> bool {
        let d = i128::from(right) - i128::from(left);
        d >= i128::from(self.plan.lower) && d <= i128::from(self.plan.upper)
    }

    /// Appends a joined row (either side may be absent: NULL-extended).
    fn push_joined(&self, left: Option<&Kept>, right: Option<&Kept>, out: &mut Batch) -> Result<(), Error> {
        for (side, kept) in [(false, left), (true, right)] {
            let (start, end) = self.range(side);
            match kept {
                Some(k) => {
                    for (c, value) in (start..end).zip(&k.row) {
                        out.columns[c].push_scalar(value)?;
                    }
                }
                None => (start..end).for_each(|c| out.columns[c].push_null()),
            }
        }
        out.columns[self.plan.side].push_bool(left.is_none())?;
        let time = [left, right].into_iter().flatten().map(|k| k.time).max().unwrap_or(0);
        out.columns[self.plan.time].push_i64(time)?;
        out.len += 1;
        Ok(())
    }

    /// Appends a row that matched nothing, if its side keeps those.
    fn push_unmatched(&self, right: bool, kept: &Kept, out: &mut Batch) -> Result<(), Error> {
        if !self.plan.kind.keeps_unmatched(right) {
            return Ok(());
        }
        if right { self.push_joined(None, Some(kept), out) } else { self.push_joined(Some(kept), None, out) }
    }

    /// Joins the batch's candidate pairs into `out`, marking both rows of
    /// every pair that passes the residual condition as matched.
    fn emit_pairs(&mut self, out: &mut Batch) -> Result<(), Error> {
        let pairs = std::mem::take(&mut self.pairs);
        let mut target = std::mem::replace(&mut self.candidates, Batch::new(Vec::new(), 0));
        target.clear();
        let direct = self.plan.residual.is_none();
        for p in &pairs {
            let rows = &self.keys[p.key as usize];
            let (new, other) = (
                &rows.sides[usize::from(p.right)][p.new as usize],
                &rows.sides[usize::from(!p.right)][p.other as usize],
            );
            let (left, right) = if p.right { (other, new) } else { (new, other) };
            self.push_joined(Some(left), Some(right), if direct { &mut *out } else { &mut target })?;
        }
        let passed: Vec<bool> = match &self.plan.residual {
            None => vec![true; pairs.len()],
            Some(residual) => {
                let n = target.len;
                let value = eval(residual, &target)?.into_column(n);
                let passed: Vec<bool> = match &value.data {
                    ColumnData::Bool(b) => (0..n).map(|r| value.is_valid(r) && b[r]).collect(),
                    _ => vec![false; n],
                };
                for (r, ok) in passed.iter().enumerate() {
                    if *ok {
                        for (c, column) in out.columns.iter_mut().enumerate() {
                            column.push_from(&target.columns[c], r)?;
                        }
                        out.len += 1;
                    }
                }
                passed
            }
        };
        for (p, ok) in pairs.iter().zip(passed) {
            if ok {
                let rows = &mut self.keys[p.key as usize];
                rows.sides[usize::from(p.right)][p.new as usize].matched = true;
                rows.sides[usize::from(!p.right)][p.other as usize].matched = true;
            }
        }
        self.candidates = target;
        self.pairs = pairs;
        self.pairs.clear();
        Ok(())
    }
}

fn bools(column: &Column) -> Option<&[bool]> {
    match &column.data {
        ColumnData::Bool(b) => Some(b),
        _ => None,
    }
}

fn ints(column: &Column) -> Option<&[i64]> {
    match &column.data {
        ColumnData::Int(v) => Some(v),
        _ => None,
    }
}

impl Operator for JoinOperator {
    fn process(&mut self, input: &BatchInput<'_>, out: &mut OperatorOutput<'_>) -> Result<(), Error> {
        let batch = input.batch;
        let n = batch.len;
        let internal = |what: &str| Error::Internal(format!("join input without its {what} column"));
        let side = batch.columns.get(self.plan.side).ok_or_else(|| internal("side"))?;
        let sides = bools(side).ok_or_else(|| internal("side"))?;
        let time = batch.columns.get(self.plan.time).ok_or_else(|| internal("time"))?;
        let times = ints(time).ok_or_else(|| internal("time"))?;
        let eval_keys = |exprs: &[sluice_plan::PhysExpr]| -> Result<Vec<Cow<'_, Column>>, Error> {
            exprs.iter().map(|e| Ok(eval(e, batch)?.into_column(n))).collect()
        };
        let left_keys = eval_keys(&self.plan.left_keys)?;
        let right_keys = eval_keys(&self.plan.right_keys)?;
        let left_refs: Vec<&Column> = left_keys.iter().map(AsRef::as_ref).collect();
        let right_refs: Vec<&Column> = right_keys.iter().map(AsRef::as_ref).collect();
        let encoders = [KeyEncoder::new(&left_refs), KeyEncoder::new(&right_refs)];
        let mut rows = Vec::with_capacity(input.selection.len());
        input.selection.for_each(|r| rows.push(r));
        for r in rows {
            let right = side.is_valid(r) && sides[r];
            let t = times[r];
            if input.watermark_before.get(r).is_some_and(|w| t < *w) {
                out.late.push(u32::try_from(r).unwrap_or(u32::MAX));
                continue;
            }
            let (start, end) = self.range(right);
            let kept =
                Kept { time: t, matched: false, row: (start..end).map(|c| batch.columns[c].scalar(r)).collect() };
            let key_columns = if right { &right_refs } else { &left_refs };
            if key_columns.iter().any(|c| !c.is_valid(r)) {
                // NULL equals nothing: the row can never match.
                self.push_unmatched(right, &kept, out.rows)?;
                continue;
            }
            self.key.clear();
            encoders[usize::from(right)].encode(r, &mut self.key);
            let (gid, _) = self.table.find_or_insert(&self.key);
            let g = gid as usize;
            if self.keys.len() <= g {
                self.keys.resize_with(g + 1, KeyRows::default);
            }
            let new = u32::try_from(self.keys[g].sides[usize::from(right)].len()).unwrap_or(u32::MAX);
            for (j, other) in self.keys[g].sides[usize::from(!right)].iter().enumerate() {
                let ok = if right { self.in_range(other.time, t) } else { self.in_range(t, other.time) };
                if ok {
                    self.pairs.push(Pair { key: gid, right, new, other: u32::try_from(j).unwrap_or(u32::MAX) });
                }
            }
            self.expiry.push(Reverse((self.expires(right, t), gid)));
            self.keys[g].sides[usize::from(right)].push(kept);
            self.rows += 1;
        }
        self.emit_pairs(out.rows)
    }

    fn on_watermark(&mut self, watermark: i64, _emit: bool, rows: &mut Batch) -> Result<(), Error> {
        while let Some(&Reverse((at, gid))) = self.expiry.peek() {
            if at >= watermark {
                break;
            }
            self.expiry.pop();
            let g = gid as usize;
            let Some(entry) = self.keys.get_mut(g) else { continue };
            let mut taken = std::mem::take(entry);
            for right in [false, true] {
                let list = std::mem::take(&mut taken.sides[usize::from(right)]);
                for kept in list {
                    if self.expires(right, kept.time) >= watermark {
                        taken.sides[usize::from(right)].push(kept);
                        continue;
                    }
                    self.rows -= 1;
                    if !kept.matched {
                        self.push_unmatched(right, &kept, rows)?;
                    }
                }
            }
            if taken.sides.iter().all(Vec::is_empty) {
                self.table.remove(gid);
            }
            self.keys[g] = taken;
        }
        Ok(())
    }

    fn finish(&mut self, _emit: bool, rows: &mut Batch) -> Result<(), Error> {
        for entry in std::mem::take(&mut self.keys) {
            for right in [false, true] {
                for kept in entry.sides[usize::from(right)].iter().filter(|k| !k.matched) {
                    self.push_unmatched(right, kept, rows)?;
                }
            }
        }
        self.table = GroupTable::default();
        self.expiry.clear();
        self.rows = 0;
        Ok(())
    }

    fn state_size(&self) -> StateSize {
        let width = self.types.len() / 2 + 1;
        let per_row = size_of::<Kept>() + width * size_of::<Scalar>();
        StateSize { bytes: self.table.heap_bytes() + self.rows * per_row, entries: self.rows }
    }

    fn snapshot(&self, out: Vec<u8>) -> Result<Vec<u8>, Error> {
        write_state(OperatorTag::Join, &JoinState { table: self.table.to_state(), keys: self.keys.clone() }, out)
    }

    fn restore(&mut self, bytes: &[u8]) -> Result<(), Error> {
        let state: JoinState = read_state(OperatorTag::Join, bytes)?;
        self.table = GroupTable::from_state(state.table);
        self.keys = state.keys;
        self.expiry.clear();
        self.rows = 0;
        for (g, entry) in self.keys.iter().enumerate() {
            for right in [false, true] {
                for kept in &entry.sides[usize::from(right)] {
                    let gid = u32::try_from(g).unwrap_or(u32::MAX);
                    self.expiry.push(Reverse((self.expires(right, kept.time), gid)));
                    self.rows += 1;
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::aggregate::empty_batch;
    use sluice_plan::{JoinKind, PhysExpr, Selection};

    /// Layout: left (k, v), right (k, v), __right, __time.
    const TYPES: [DataType; 6] = [
        DataType::Bigint,
        DataType::Bigint,
        DataType::Bigint,
        DataType::Bigint,
        DataType::Boolean,
        DataType::Timestamp,
    ];

    fn plan(kind: JoinKind) -> JoinPlan {
        let col = |index| PhysExpr::Column { index, data_type: DataType::Bigint };
        JoinPlan {
            kind,
            left: (0, 2),
            right: (2, 4),
            side: 4,
            time: 5,
            left_keys: vec![col(0)],
            right_keys: vec![col(2)],
            lower: 0,
            upper: 10,
            residual: None,
        }
    }

    /// `(right, key, value, time)` rows.
    fn batch(rows: &[(bool, i64, i64, i64)]) -> Batch {
        let mut b = empty_batch(&TYPES);
        for &(right, k, v, t) in rows {
            let (own, other) = if right { (2, 0) } else { (0, 2) };
            b.columns[own].push_i64(k).unwrap();
            b.columns[own + 1].push_i64(v).unwrap();
            b.columns[other].push_null();
            b.columns[other + 1].push_null();
            b.columns[4].push_bool(right).unwrap();
            b.columns[5].push_i64(t).unwrap();
            b.len += 1;
        }
        b
    }

    /// Runs a batch whose rows all saw `watermark`; the joined rows as
    /// `(left value, right value)` and the late rows.
    fn run(op: &mut JoinOperator, rows: &[(bool, i64, i64, i64)], watermark: i64) -> (Vec<(Scalar, Scalar)>, Vec<u32>) {
        let b = batch(rows);
        let times: Vec<i64> = rows.iter().map(|r| r.3).collect();
        let before = vec![watermark; rows.len()];
        let input = BatchInput {
            batch: &b,
            selection: Selection::All(b.len),
            event_times: &times,
            watermark_before: &before,
            per_record: false,
            emit_changes: false,
            upstreams: &[],
        };
        let mut rows_out = empty_batch(&TYPES);
        let (mut columns, mut late) = (Vec::new(), Vec::new());
        op.process(&input, &mut OperatorOutput { rows: &mut rows_out, columns: &mut columns, late: &mut late })
            .unwrap();
        op.on_watermark(watermark, true, &mut rows_out).unwrap();
        (pairs(&rows_out), late)
    }

    fn pairs(b: &Batch) -> Vec<(Scalar, Scalar)> {
        (0..b.len).map(|r| (b.columns[1].scalar(r), b.columns[3].scalar(r))).collect()
    }

    #[test]
    fn rows_in_range_join_and_late_rows_are_reported_not_joined() {
        let mut op = JoinOperator::new(&plan(JoinKind::Inner), &TYPES);
        let (joined, late) = run(&mut op, &[(false, 1, 100, 1_000), (true, 1, 200, 1_005), (true, 1, 201, 1_011)], 0);
        assert_eq!(joined, [(Scalar::Bigint(100), Scalar::Bigint(200))], "1_011 is past the upper bound");
        assert!(late.is_empty());
        // The watermark is at 1_003: a right row at 1_002 is late, though
        // it is in the left row's range.
        let (joined, late) = run(&mut op, &[(true, 1, 202, 1_002)], 1_003);
        assert!(joined.is_empty());
        assert_eq!(late, [0]);
    }

    #[test]
    fn an_unmatched_outer_row_comes_out_once_the_watermark_passes_its_range_and_survives_a_restore() {
        let mut op = JoinOperator::new(&plan(JoinKind::Full), &TYPES);
        let (joined, _) = run(&mut op, &[(false, 1, 100, 1_000), (true, 2, 200, 1_000)], 0);
        assert!(joined.is_empty(), "neither can be emitted while a partner may still come");
        let saved = op.snapshot(Vec::new()).unwrap();
        let mut op = JoinOperator::new(&plan(JoinKind::Full), &TYPES);
        op.restore(&saved).unwrap();
        assert_eq!(op.state_size().entries, 2);
        // The right row may still meet a left row from 990 on: it goes once
        // the watermark passes 1_000 (its time minus the lower bound).
        let (joined, _) = run(&mut op, &[], 1_001);
        assert_eq!(joined, [(Scalar::Null, Scalar::Bigint(200))]);
        let (joined, _) = run(&mut op, &[], 1_010);
        assert!(joined.is_empty(), "the left row may still meet a right row at 1_010");
        let (joined, _) = run(&mut op, &[], 1_011);
        assert_eq!(joined, [(Scalar::Bigint(100), Scalar::Null)]);
        assert_eq!(op.state_size().entries, 0, "nothing kept once both ranges passed");
    }

    #[test]
    fn a_null_key_never_matches_and_an_outer_side_emits_it_at_once() {
        let mut op = JoinOperator::new(&plan(JoinKind::Left), &TYPES);
        let mut b = batch(&[(false, 0, 100, 1_000), (true, 0, 200, 1_000)]);
        b.columns[0] = {
            let mut c = Column::with_capacity(DataType::Bigint, 2);
            c.push_null();
            c.push_null();
            c
        };
        b.columns[2] = {
            let mut c = Column::with_capacity(DataType::Bigint, 2);
            c.push_null();
            c.push_null();
            c
        };
        let input = BatchInput {
            batch: &b,
            selection: Selection::All(2),
            event_times: &[1_000, 1_000],
            watermark_before: &[0, 0],
            per_record: false,
            emit_changes: false,
            upstreams: &[],
        };
        let mut out = empty_batch(&TYPES);
        let (mut columns, mut late) = (Vec::new(), Vec::new());
        op.process(&input, &mut OperatorOutput { rows: &mut out, columns: &mut columns, late: &mut late }).unwrap();
        assert_eq!(pairs(&out), [(Scalar::Bigint(100), Scalar::Null)], "LEFT keeps the left row; the right is dropped");
        assert_eq!(op.state_size().entries, 0);
    }
}
