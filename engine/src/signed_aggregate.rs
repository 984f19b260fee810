//! GROUP BY over signed rows: a table's changes as the changelog stage
//! writes them (`sluice_plan::ChangelogPlan`), each row added to its group
//! or, marked `__retract`, taken back out of it (as Flink's group
//! aggregate takes a retraction). A group's row count says when it has no
//! rows left: it is then emitted as a deletion — an upsert sink writes a
//! tombstone — and its state freed. Only aggregates that can take a value
//! back are planned here (`AggFunc::retracts`); the group table and
//! accumulators are the plain aggregate's. A global aggregate (no GROUP
//! BY) has no key to delete: it shows its empty group (COUNT 0).
//!
//! Within a batch the additions are folded first, then the retractions:
//! a retraction always follows the addition it takes back (both come from
//! the key's partition of the changelog stage, in order), so no group
//! goes below zero mid-batch. Each group that changed is emitted once,
//! after the batch, as an update or a deletion.

use std::borrow::Cow;

use serde::{Deserialize, Serialize};

use crate::Error;
use crate::aggregate::{AggregateOperator, AggregateState, AggregateStateRef};
use crate::group_keys::KeyEncoder;
use crate::join::bools;
use crate::operator::{BatchInput, Operator, OperatorOutput, OperatorTag, StateSize, read_state_and_rest, write_state};
use sluice_plan::{AggFunc, AggregatePlan, Column, PhysExpr, Selection, eval};

#[derive(Debug)]
pub struct SignedAggregateOperator {
    inner: AggregateOperator,
    retract: PhysExpr,
    /// Per aggregate: whether it is COUNT(*) (which counts NULL rows too).
    star: Vec<bool>,
    /// Rows each group holds (additions less retractions), by group id.
    members: Vec<i64>,
    /// Scratch, reused batch to batch.
    adds: Vec<u32>,
    takes: Vec<u32>,
    changed: Vec<u32>,
    key: Vec<u8>,
}

#[derive(Serialize)]
struct StateRef<'a> {
    inner: AggregateStateRef<'a>,
    members: &'a [i64],
}

#[derive(Deserialize)]
struct State {
    inner: AggregateState,
    members: Vec<i64>,
}

impl SignedAggregateOperator {
    pub fn new(plan: &AggregatePlan, retract: &PhysExpr) -> Self {
        Self {
            inner: AggregateOperator::new(plan),
            retract: retract.clone(),
            star: plan.aggregates.iter().map(|a| a.func == AggFunc::CountStar).collect(),
            members: Vec::new(),
            adds: Vec::new(),
            takes: Vec::new(),
            changed: Vec::new(),
            key: Vec::new(),
        }
    }

    fn member(&mut self, g: u32, by: i64) {
        let g = g as usize;
        if self.members.len() <= g {
            self.members.resize(g + 1, 0);
        }
        self.members[g] += by;
        self.changed.push(u32::try_from(g).unwrap_or(u32::MAX));
    }
}

impl Operator for SignedAggregateOperator {
    fn process(&mut self, input: &BatchInput<'_>, out: &mut OperatorOutput<'_>) -> Result<(), Error> {
        let batch = input.batch;
        let n = batch.len;
        let sign = eval(&self.retract, batch)?.into_column(n);
        let signs = bools(&sign).ok_or_else(|| Error::Internal("the retraction marker is not BOOLEAN".into()))?;
        self.adds.clear();
        self.takes.clear();
        input.selection.for_each(|r| {
            let retract = sign.is_valid(r) && signs.get(r).copied().unwrap_or(false);
            let r = u32::try_from(r).unwrap_or(u32::MAX);
            if retract { self.takes.push(r) } else { self.adds.push(r) }
        });
        // The additions, as any aggregate folds rows, emitting nothing yet.
        self.changed.clear();
        let adds = std::mem::take(&mut self.adds);
        let only = BatchInput { selection: Selection::Rows(&adds), emit_changes: false, per_record: false, ..*input };
        self.inner.process(&only, out)?;
        for i in 0..self.inner.gids.len() {
            self.member(self.inner.gids[i], 1);
        }
        self.adds = adds;
        // The retractions: each from the group its row is in.
        if !self.takes.is_empty() {
            let groups: Vec<Cow<'_, Column>> = self
                .inner
                .plan
                .group_exprs
                .iter()
                .map(|e| Ok::<_, Error>(eval(e, batch)?.into_column(n)))
                .collect::<Result<_, _>>()?;
            let refs: Vec<&Column> = groups.iter().map(AsRef::as_ref).collect();
            let encoder = KeyEncoder::new(&refs);
            let args: Vec<Option<Cow<'_, Column>>> = self
                .inner
                .plan
                .aggregates
                .iter()
                .map(|a| a.arg.as_ref().map(|e| Ok::<_, Error>(eval(e, batch)?.into_column(n))).transpose())
                .collect::<Result<_, _>>()?;
            let takes = std::mem::take(&mut self.takes);
            for &r in &takes {
                self.key.clear();
                encoder.encode(r as usize, &mut self.key);
                // A retraction is of a row this partition added; one of a
                // group it does not have could only take back what was
                // never counted.
                let Some(g) = self.inner.table.find(&self.key) else { continue };
                for ((acc, arg), &star) in self.inner.accs.iter_mut().zip(&args).zip(&self.star) {
                    let value = arg.as_ref().map_or(sluice_plan::Scalar::Null, |c| c.scalar(r as usize));
                    acc.retract(g as usize, &value, star)?;
                }
                self.member(g, -1);
            }
            self.takes = takes;
        }
        // Every group that changed, once: updated, or deleted when empty.
        self.changed.sort_unstable();
        self.changed.dedup();
        for i in 0..self.changed.len() {
            let g = self.changed[i];
            // One global group (no GROUP BY) is never deleted: COUNT(*)
            // of no rows is 0, and there is no key to delete.
            if self.members[g as usize] > 0 || self.inner.plan.group_exprs.is_empty() {
                if input.emit_changes {
                    self.inner.emit_group(g, out.rows)?;
                }
                continue;
            }
            out.deleted.push(u32::try_from(out.rows.len).unwrap_or(u32::MAX));
            self.inner.emit_group(g, out.rows)?;
            self.members[g as usize] = 0;
            self.inner.shown.forget(g);
            self.inner.table.remove(g);
            for acc in &mut self.inner.accs {
                acc.reset(g as usize);
            }
        }
        Ok(())
    }

    fn state_size(&self) -> StateSize {
        let inner = self.inner.state_size();
        StateSize { bytes: inner.bytes + self.members.capacity() * size_of::<i64>(), entries: inner.entries }
    }

    fn snapshot(&self, out: Vec<u8>) -> Result<Vec<u8>, Error> {
        let state = StateRef { inner: self.inner.to_state(), members: &self.members };
        self.inner.write_shown(write_state(OperatorTag::SignedAggregate, &state, out)?)
    }

    fn restore(&mut self, bytes: &[u8]) -> Result<(), Error> {
        let (state, rest): (State, _) = read_state_and_rest(OperatorTag::SignedAggregate, bytes)?;
        self.inner.restore_state(state.inner)?;
        self.members = state.members;
        self.inner.read_shown(rest)
    }

    fn track_having(&mut self) {
        self.inner.track_having();
    }

    fn settle_having(
        &mut self,
        rows: usize,
        passed: &[u32],
        deleted: &[u32],
        retracted: &mut Vec<u32>,
    ) -> Result<(), Error> {
        self.inner.settle_having(rows, passed, deleted, retracted)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::operator::run_emitting_changes;
    use sluice_plan::{AggregateCall, Batch, DataType, Scalar};

    /// Input (customer, amount, __retract); per customer SUM(amount), COUNT(*).
    const TYPES: [DataType; 3] = [DataType::String, DataType::Bigint, DataType::Boolean];
    const OUT: [DataType; 3] = [DataType::String, DataType::Bigint, DataType::Bigint];

    fn operator() -> SignedAggregateOperator {
        let col = |index, data_type| PhysExpr::Column { index, data_type };
        let call = |func, arg, data_type| AggregateCall { func, arg, distinct: false, data_type };
        let plan = AggregatePlan {
            group_exprs: vec![col(0, DataType::String)],
            aggregates: vec![
                call(AggFunc::Sum, Some(col(1, DataType::Bigint)), DataType::Bigint),
                call(AggFunc::CountStar, None, DataType::Bigint),
            ],
            window: None,
            window_zone: None,
            upsert_key: Vec::new(),
            retract: Some(col(2, DataType::Boolean)),
        };
        SignedAggregateOperator::new(&plan, &col(2, DataType::Boolean))
    }

    /// One batch of (customer, amount, retract): the rows emitted as
    /// (customer, sum, count, deleted).
    fn run(op: &mut SignedAggregateOperator, rows: &[(&str, i64, bool)]) -> Vec<(String, i64, i64, bool)> {
        let mut b = Batch::empty(&TYPES);
        for &(c, a, x) in rows {
            b.columns[0].push_str(c).unwrap();
            b.columns[1].push_i64(a).unwrap();
            b.columns[2].push_bool(x).unwrap();
            b.len += 1;
        }
        let (out, deleted) = run_emitting_changes(op, &b, &OUT);
        (0..out.len)
            .map(|r| {
                let gone = deleted.contains(&u32::try_from(r).unwrap());
                // The SUM of no rows is NULL: shown as 0 here.
                match (out.columns[0].scalar(r), out.columns[1].scalar(r), out.columns[2].scalar(r)) {
                    (Scalar::String(c), Scalar::Bigint(s), Scalar::Bigint(n)) => (c, s, n, gone),
                    (Scalar::String(c), Scalar::Null, Scalar::Bigint(n)) => (c, 0, n, gone),
                    other => panic!("{other:?}"),
                }
            })
            .collect()
    }

    fn row(c: &str, sum: i64, count: i64, deleted: bool) -> (String, i64, i64, bool) {
        (c.to_owned(), sum, count, deleted)
    }

    /// Retractions take rows back out of their groups; a group left empty
    /// is a deletion and holds no state, and comes back like any new one.
    #[test]
    fn a_group_whose_rows_are_all_taken_back_is_deleted() {
        let mut op = operator();
        assert_eq!(
            run(&mut op, &[("ann", 10, false), ("bob", 5, false), ("ann", 2, false)]),
            [row("ann", 12, 2, false), row("bob", 5, 1, false)]
        );
        // An order moves from bob to ann: bob has nothing left.
        assert_eq!(
            run(&mut op, &[("bob", 5, true), ("ann", 6, false)]),
            [row("ann", 18, 3, false), row("bob", 0, 0, true)]
        );
        assert_eq!(op.state_size().entries, 1, "bob's group is freed");
        let saved = op.snapshot(Vec::new()).unwrap();
        let mut op = operator();
        op.restore(&saved).unwrap();
        // Added and taken back in one batch: deleted, not shown half-way.
        assert_eq!(
            run(&mut op, &[("cy", 1, false), ("cy", 1, true), ("ann", 10, true)]),
            [row("ann", 8, 2, false), row("cy", 0, 0, true)]
        );
        assert_eq!(run(&mut op, &[("bob", 7, false)]), [row("bob", 7, 1, false)], "a deleted group comes back");
        // A retraction of a group this partition never had changes nothing.
        assert_eq!(run(&mut op, &[("zed", 1, true)]), []);
    }
}
