//! An OVER window over a changelog: `AVG(price) OVER (PARTITION BY seller
//! ORDER BY t ROWS BETWEEN 10 PRECEDING AND CURRENT ROW)` over rows that
//! replace the last row of their key — the top-1 per auction of Nexmark
//! q6, each better bid replacing its auction's winner.
//!
//! Each key keeps its current row; each partition its rows in ORDER BY
//! order, ties by the key's first column when it is a number (Nexmark's
//! auction id), else by when the key was first seen. A row that replaces its key's row leaves its old
//! place and takes its new one, so the frames that held either place
//! change: its own, and the `n` rows after each place. Those rows are
//! computed again — at most `2(n + 1)` frames of `n + 1` rows each, however
//! long the partition — and emitted once per batch as upserts keyed by the
//! changelog's key, each its final value for the batch. Flink refuses this
//! shape (its OVER windows take no retractions); Feldera runs it.

use std::cmp::Ordering;
use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};

use crate::Error;
use crate::operator::{BatchInput, Operator, OperatorOutput, OperatorTag, StateSize, read_state, write_state};
use crate::state::group_keys::{GroupTable, GroupTableState, KeyEncoder};
use sluice_plan::{
    AggFunc, Batch, Column, ColumnData, DataType, PhysExpr, RowsFunction, RowsFunctionKind, RowsPlan, Scalar, eval,
};

/// Where a row is in its partition: (ORDER BY value, tie, key id).
type Place = (i64, i64, u32);

/// A key's current row.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Current {
    partition: u32,
    order: i64,
    /// Orders rows that tie on `order`.
    tie: i64,
    /// The source columns (the intermediate schema's first columns; NULL
    /// where the query does not read one).
    values: Vec<Scalar>,
    /// Each function's argument (NULL for COUNT(*)).
    args: Vec<Scalar>,
}

#[derive(Debug)]
pub struct RowsChangelogOperator {
    /// Why the plan cannot run, if it cannot (not one the planner makes).
    invalid: Option<String>,
    partition_by: Vec<PhysExpr>,
    order_by: PhysExpr,
    upsert_key: Vec<PhysExpr>,
    functions: Vec<RowsFunction>,
    /// Rows before the current one in a frame.
    preceding: usize,
    /// Which source columns the query reads: only those are kept.
    used: Vec<bool>,
    keys: GroupTable,
    partitions: GroupTable,
    /// Per key id: its current row.
    current: Vec<Option<Current>>,
    /// Per partition id: its rows by (ORDER BY value, tie, key id).
    ordered: Vec<BTreeSet<Place>>,
    /// Per key id: the batch it was last marked changed in (scratch).
    marked: Vec<u64>,
    batch: u64,
    heap: usize,
    scratch: Vec<u8>,
}

#[derive(Serialize, Deserialize)]
struct State {
    keys: GroupTableState,
    partitions: GroupTableState,
    current: Vec<Option<Current>>,
}

impl Current {
    fn heap_bytes(&self) -> usize {
        let cells = (self.values.len() + self.args.len()) * size_of::<Scalar>();
        let strings: usize = self
            .values
            .iter()
            .chain(&self.args)
            .map(|v| if let Scalar::String(s) = v { s.capacity() } else { 0 })
            .sum();
        cells + strings + size_of::<Self>() + 48
    }
}

impl RowsChangelogOperator {
    /// `used`: which of the source columns (the intermediate schema's
    /// first) the query reads.
    /// The planner gives a changelog window one spec, with an ORDER BY
    /// and `n PRECEDING` (`sql::dataflow`); a plan without them fails its
    /// first batch, saying so.
    pub fn new(plan: &RowsPlan, used: &[bool]) -> Self {
        let spec = plan.specs.first();
        let invalid = match spec {
            Some(s) if plan.specs.len() == 1 && s.order_by.is_some() && s.preceding.is_some() => {
                s.functions.iter().any(|f| f.kind == RowsFunctionKind::RowNumber).then_some("ROW_NUMBER")
            }
            _ => Some("one window with ORDER BY and n PRECEDING"),
        };
        Self {
            invalid: invalid.map(|what| format!("an OVER window over a changelog: {what}")),
            partition_by: spec.map(|s| s.partition_by.clone()).unwrap_or_default(),
            order_by: spec.and_then(|s| s.order_by.clone()).unwrap_or_else(|| PhysExpr::literal(Scalar::Bigint(0))),
            upsert_key: plan.upsert_key.clone(),
            functions: spec.map(|s| s.functions.clone()).unwrap_or_default(),
            preceding: spec.and_then(|s| s.preceding).map_or(0, |p| usize::try_from(p).unwrap_or(usize::MAX)),
            used: used.to_vec(),
            keys: GroupTable::default(),
            partitions: GroupTable::default(),
            current: Vec::new(),
            ordered: Vec::new(),
            marked: Vec::new(),
            batch: 0,
            heap: 0,
            scratch: Vec::new(),
        }
    }

    /// Marks `key` and the `preceding` rows after place `at` of partition
    /// `p` as changed (`at` itself when it is still there).
    fn mark_after(&mut self, p: u32, at: Place, changed: &mut Vec<u32>) {
        let (batch, preceding) = (self.batch, self.preceding);
        let rows = &self.ordered[p as usize];
        let after = rows.range(at..).take(preceding + 1).map(|&(_, _, k)| k);
        for k in std::iter::once(at.2).chain(after) {
            let slot = &mut self.marked[k as usize];
            if *slot != batch {
                *slot = batch;
                changed.push(k);
            }
        }
    }

    /// Appends key `k`'s row and its frame's results to `out`.
    fn emit(&self, k: u32, out: &mut Batch) -> Result<(), Error> {
        let Some(row) = &self.current[k as usize] else { return Ok(()) };
        for (c, v) in row.values.iter().enumerate() {
            out.columns[c].push_scalar(v)?;
        }
        // The frame is walked once per function (n + 1 steps of the
        // partition's order), rather than collected.
        let frame = || {
            self.ordered[row.partition as usize]
                .range(..=(row.order, row.tie, k))
                .rev()
                .take(self.preceding + 1)
                .filter_map(|&(_, _, f)| self.current[f as usize].as_ref())
        };
        for (i, f) in self.functions.iter().enumerate() {
            let value = frame_value(f, frame().map(|r| &r.args[i]));
            out.columns[f.output].push_scalar(&value)?;
        }
        out.len += 1;
        Ok(())
    }
}

/// One function over a frame's arguments.
fn frame_value<'a>(f: &RowsFunction, args: impl Iterator<Item = &'a Scalar>) -> Scalar {
    let RowsFunctionKind::Aggregate(func) = f.kind else { return Scalar::Null };
    let (mut count, mut int, mut float, mut best): (i64, i128, f64, Option<&Scalar>) = (0, 0, 0.0, None);
    // Times the i128 sum wrapped (38-digit decimals can): a total that
    // wrapped fits no decimal.
    let mut wraps = 0i64;
    for v in args {
        if v.is_null() && func != AggFunc::CountStar {
            continue;
        }
        count += 1;
        match v {
            Scalar::Bigint(x) => int += i128::from(*x),
            Scalar::Decimal(x, _) => sluice_plan::decimal::add_wrapping(&mut int, &mut wraps, *x),
            Scalar::Double(x) => float += x,
            _ => {}
        }
        let better = best.is_none_or(|b| match crate::top_n::compare(v, b) {
            Ordering::Greater => func == AggFunc::Max,
            Ordering::Less => func == AggFunc::Min,
            Ordering::Equal => false,
        });
        if better {
            best = Some(v);
        }
    }
    match func {
        AggFunc::CountStar | AggFunc::Count => Scalar::Bigint(count),
        _ if count == 0 => Scalar::Null,
        AggFunc::Min | AggFunc::Max => best.cloned().unwrap_or(Scalar::Null),
        AggFunc::Sum => match f.data_type {
            DataType::Double => Scalar::Double(float),
            DataType::Decimal(p, s) => sluice_plan::decimal::total_of(int, wraps)
                .and_then(|v| sluice_plan::decimal::fit(v, p))
                .map_or(Scalar::Null, |v| Scalar::Decimal(v, s)),
            _ => i64::try_from(int).map_or(Scalar::Null, Scalar::Bigint),
        },
        // The planner makes AVG's argument a double.
        #[allow(clippy::cast_precision_loss)]
        AggFunc::Avg => Scalar::Double(float / count as f64),
        _ => Scalar::Null,
    }
}

impl Operator for RowsChangelogOperator {
    fn process(&mut self, input: &BatchInput<'_>, out: &mut OperatorOutput<'_>) -> Result<(), Error> {
        if let Some(why) = &self.invalid {
            return Err(Error::Internal(why.clone()));
        }
        let batch = input.batch;
        let n = batch.len;
        let columns = |exprs: &[PhysExpr]| -> Result<Vec<_>, Error> {
            exprs.iter().map(|e| Ok(eval(e, batch)?.into_column(n))).collect()
        };
        let keys = columns(&self.upsert_key)?;
        let parts = columns(&self.partition_by)?;
        let order = eval(&self.order_by, batch)?.into_column(n);
        let ColumnData::Int(times) = &order.data else {
            return Err(Error::Internal("an OVER window's ORDER BY over a changelog is not a time or bigint".into()));
        };
        let args: Vec<Option<std::borrow::Cow<'_, Column>>> = self
            .functions
            .iter()
            .map(|f| f.arg.as_ref().map(|e| Ok::<_, Error>(eval(e, batch)?.into_column(n))).transpose())
            .collect::<Result<_, _>>()?;
        let ties = match keys.first().map(|c| &c.data) {
            Some(ColumnData::Int(v)) => Some(v),
            _ => None,
        };
        let key_encoder = KeyEncoder::new(&keys.iter().map(AsRef::as_ref).collect::<Vec<_>>());
        let part_encoder = KeyEncoder::new(&parts.iter().map(AsRef::as_ref).collect::<Vec<_>>());
        self.batch += 1;
        let mut changed = Vec::new();
        let mut rows = Vec::with_capacity(input.selection.len());
        input.selection.for_each(|r| rows.push(r));
        for r in rows {
            self.scratch.clear();
            key_encoder.encode(r, &mut self.scratch);
            let (k, _) = self.keys.find_or_insert(&self.scratch);
            self.scratch.clear();
            part_encoder.encode(r, &mut self.scratch);
            let (p, _) = self.partitions.find_or_insert(&self.scratch);
            if self.current.len() <= k as usize {
                self.current.resize(k as usize + 1, None);
                self.marked.resize(k as usize + 1, 0);
            }
            if self.ordered.len() <= p as usize {
                self.ordered.resize_with(p as usize + 1, BTreeSet::new);
            }
            // NULL orders first (PostgreSQL puts it last ascending); the
            // ORDER BY column is the changelog's time, which Nexmark never
            // leaves NULL.
            let tie = ties.filter(|_| keys[0].is_valid(r)).map_or(0, |v| v[r]);
            let place = (if order.is_valid(r) { times[r] } else { i64::MIN }, tie, k);
            if let Some(old) = self.current[k as usize].take() {
                self.heap -= old.heap_bytes();
                let was = (old.order, old.tie, k);
                self.ordered[old.partition as usize].remove(&was);
                self.mark_after(old.partition, was, &mut changed);
            }
            let row = Current {
                partition: p,
                order: place.0,
                tie,
                values: self
                    .used
                    .iter()
                    .enumerate()
                    .map(|(c, u)| if *u { batch.columns[c].scalar(r) } else { Scalar::Null })
                    .collect(),
                args: args.iter().map(|a| a.as_ref().map_or(Scalar::Null, |c| c.scalar(r))).collect(),
            };
            self.heap += row.heap_bytes();
            self.current[k as usize] = Some(row);
            self.ordered[p as usize].insert(place);
            self.mark_after(p, place, &mut changed);
        }
        for k in changed {
            self.emit(k, out.rows)?;
        }
        Ok(())
    }

    fn state_size(&self) -> StateSize {
        let entries = self.current.iter().flatten().count();
        let ordered = entries * (size_of::<Place>() + 16);
        StateSize { bytes: self.keys.heap_bytes() + self.partitions.heap_bytes() + self.heap + ordered, entries }
    }

    fn snapshot(&self, out: Vec<u8>) -> Result<Vec<u8>, Error> {
        let state =
            State { keys: self.keys.to_state(), partitions: self.partitions.to_state(), current: self.current.clone() };
        write_state(OperatorTag::RowsChangelog, &state, out)
    }

    fn restore(&mut self, bytes: &[u8]) -> Result<(), Error> {
        let state: State = read_state(OperatorTag::RowsChangelog, bytes)?;
        self.keys = GroupTable::from_state(state.keys);
        self.partitions = GroupTable::from_state(state.partitions);
        self.ordered = vec![BTreeSet::new(); self.partitions.capacity()];
        for (k, row) in state.current.iter().enumerate() {
            if let Some(row) = row {
                let set = self.ordered.get_mut(row.partition as usize).ok_or_else(|| {
                    Error::Checkpoint("an OVER window's checkpoint names a partition it does not hold".into())
                })?;
                set.insert((row.order, row.tie, u32::try_from(k).unwrap_or(u32::MAX)));
            }
        }
        self.heap = state.current.iter().flatten().map(Current::heap_bytes).sum();
        self.marked = vec![0; state.current.len()];
        self.current = state.current;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use sluice_plan::{AggFunc, Batch, Column, DataType, PhysExpr, RowsFunction, RowsFunctionKind, RowsPlan, RowsSpec};

    use super::RowsChangelogOperator;
    use crate::operator::Operator;
    use crate::test_drivers::run_at_watermark;

    const INT: DataType = DataType::Bigint;

    /// Rows (key, partition, time, value) → SUM(value) OVER (PARTITION BY
    /// partition ORDER BY time ROWS 1 PRECEDING), upserts keyed by key.
    fn op() -> RowsChangelogOperator {
        let key = vec![PhysExpr::Column { index: 0, data_type: INT }];
        RowsChangelogOperator::new(&RowsPlan { specs: vec![op_spec()], upsert_key: key }, &[true; 4])
    }

    /// (key, sum) of each row emitted, by key (one row per key a batch).
    fn run(op: &mut dyn Operator, rows: &[[i64; 4]]) -> Vec<(i64, i64)> {
        let columns = (0..4).map(|c| Column::ints(INT, rows.iter().map(|r| r[c]).collect())).collect();
        let batch = Batch::new(columns, rows.len());
        let (out, _) = run_at_watermark(op, &batch, &[], i64::MIN, &[INT; 5]);
        let mut rows: Vec<(i64, i64)> =
            (0..out.len).map(|r| (as_i64(&out.columns[0].scalar(r)), as_i64(&out.columns[4].scalar(r)))).collect();
        rows.sort_unstable();
        rows
    }

    fn as_i64(s: &sluice_plan::Scalar) -> i64 {
        if let sluice_plan::Scalar::Bigint(v) = s { *v } else { panic!("{s:?}") }
    }

    #[test]
    fn a_replaced_row_moves_and_the_frames_it_left_and_entered_are_computed_again() {
        let mut op = op();
        // Keys 1, 2, 3 at times 10, 20, 30: sums 5, 5+7, 7+9.
        assert_eq!(run(&mut op, &[[1, 0, 10, 5], [2, 0, 20, 7], [3, 0, 30, 9]]), [(1, 5), (2, 12), (3, 16)]);
        // Key 2 moves to time 40 with 100: key 3 now follows key 1 (5 + 9),
        // key 2 follows key 3 (9 + 100). Key 1's frame did not change.
        assert_eq!(run(&mut op, &[[2, 0, 40, 100]]), [(2, 109), (3, 14)]);
        // Another partition is its own.
        assert_eq!(run(&mut op, &[[4, 1, 15, 1]]), [(4, 1)]);
        // A snapshot restores the order and the rows.
        let mut back = self::op();
        back.restore(&op.snapshot(Vec::new()).unwrap()).unwrap();
        assert_eq!(run(&mut back, &[[5, 0, 35, 1]]), [(2, 101), (5, 10)]);
    }

    fn op_spec() -> RowsSpec {
        let col = |index| PhysExpr::Column { index, data_type: INT };
        let sum = RowsFunction {
            kind: RowsFunctionKind::Aggregate(AggFunc::Sum),
            arg: Some(col(3)),
            data_type: INT,
            output: 4,
        };
        RowsSpec { partition_by: vec![col(1)], order_by: Some(col(2)), preceding: Some(1), functions: vec![sum] }
    }

    #[test]
    fn a_plan_the_planner_does_not_make_fails_its_first_batch() {
        let spec = RowsSpec { order_by: None, ..op_spec() };
        let mut op = RowsChangelogOperator::new(&RowsPlan { specs: vec![spec], upsert_key: vec![] }, &[true; 4]);
        let batch = Batch::new((0..4).map(|_| Column::ints(INT, vec![1])).collect(), 1);
        let input = crate::operator::BatchInput {
            batch: &batch,
            selection: sluice_plan::Selection::All(1),
            event_times: &[],
            watermark_before: &[],
            per_record: false,
            emit_changes: false,
            upstreams: &[],
        };
        let mut out = Batch::empty(&[INT; 5]);
        let (mut columns, mut late) = (Vec::new(), Vec::new());
        let e = op
            .process(&input, &mut crate::operator::OperatorOutput::new(&mut out, &mut columns, &mut late))
            .unwrap_err();
        assert!(e.to_string().contains("ORDER BY"), "{e}");
    }
}
