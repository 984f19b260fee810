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
use crate::accumulators::Accumulator;
use crate::aggregate::{AggregateOperator, AggregateState, AggregateStateRef};
use crate::join::bools;
use crate::operator::{BatchInput, Operator, OperatorOutput, OperatorTag, StateSize, read_state_and_rest};
use crate::state::group_keys::KeyEncoder;
use sluice_plan::{AggFunc, AggregateCall, AggregatePlan, Column, DataType, PhysExpr, Scalar, Selection, eval};

#[derive(Debug)]
pub struct SignedAggregateOperator {
    /// The plain aggregate, keeping one more COUNT(*) than the query
    /// shows: the rows each group holds (additions less retractions),
    /// paged and spilled with the group's other accumulators.
    inner: AggregateOperator,
    retract: PhysExpr,
    /// Per aggregate, the row count included: whether it is COUNT(*)
    /// (which counts NULL rows too).
    star: Vec<bool>,
    /// Scratch, reused batch to batch.
    adds: Vec<u32>,
    takes: Vec<u32>,
    changed: Vec<u32>,
    key: Vec<u8>,
}

/// A whole checkpoint: the aggregate (its row counts among its
/// accumulators), and `members` empty. Releases before the row count
/// was an accumulator wrote it in `members`, by group id.
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

/// The hidden aggregate: each group's row count.
const ROW_COUNT: AggregateCall = AggregateCall {
    func: AggFunc::CountStar,
    arg: None,
    distinct: false,
    data_type: DataType::Bigint,
    order: Vec::new(),
};

impl SignedAggregateOperator {
    pub fn new(plan: &AggregatePlan, retract: &PhysExpr) -> Self {
        let inner = AggregateOperator::with_hidden(plan, &[ROW_COUNT]);
        Self {
            star: inner.plan.aggregates.iter().map(|a| a.func == AggFunc::CountStar).collect(),
            inner,
            retract: retract.clone(),
            adds: Vec::new(),
            takes: Vec::new(),
            changed: Vec::new(),
            key: Vec::new(),
        }
    }

    /// The rows group `g` holds.
    fn members(&self, g: u32) -> i64 {
        match self.inner.accs.last() {
            Some(Accumulator::Count { counts }) => counts.get(g as usize).copied().unwrap_or(0),
            _ => 0,
        }
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
        // The additions, as any aggregate folds rows (the row count
        // among them), emitting nothing yet.
        self.changed.clear();
        let adds = std::mem::take(&mut self.adds);
        let only = BatchInput { selection: Selection::Rows(&adds), emit_changes: false, per_record: false, ..*input };
        self.inner.process(&only, out)?;
        self.changed.extend_from_slice(&self.inner.gids);
        self.adds = adds;
        // The retractions: each from the group its row is in, read back
        // from disk when it spilled.
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
            let mut key = std::mem::take(&mut self.key);
            for &r in &takes {
                key.clear();
                encoder.encode(r as usize, &mut key);
                // A retraction is of a row this partition added; one of a
                // group it does not have could only take back what was
                // never counted.
                let Some(g) = self.inner.find_group(&key)? else { continue };
                for ((acc, arg), &star) in self.inner.accs.iter_mut().zip(&args).zip(&self.star) {
                    let value = arg.as_ref().map_or(Scalar::Null, |c| c.scalar(r as usize));
                    acc.retract(g as usize, &value, star)?;
                }
                self.inner.changed(g);
                self.changed.push(g);
            }
            self.key = key;
            self.takes = takes;
        }
        // Every group that changed, once: updated, or deleted when empty.
        self.changed.sort_unstable();
        self.changed.dedup();
        for i in 0..self.changed.len() {
            let g = self.changed[i];
            // One global group (no GROUP BY) is never deleted: COUNT(*)
            // of no rows is 0, and there is no key to delete.
            if self.members(g) > 0 || self.inner.plan.group_exprs.is_empty() {
                if input.emit_changes {
                    self.inner.emit_group(g, out.rows)?;
                }
                continue;
            }
            out.deleted.push(u32::try_from(out.rows.len).unwrap_or(u32::MAX));
            self.inner.emit_group(g, out.rows)?;
            self.inner.delete_group(g);
        }
        Ok(())
    }

    fn state_size(&self) -> StateSize {
        self.inner.state_size()
    }

    fn state_size_walks(&self) -> bool {
        self.inner.state_size_walks()
    }

    fn state_entries(&self) -> usize {
        self.inner.state_entries()
    }

    fn snapshot(&self, out: Vec<u8>) -> Result<Vec<u8>, Error> {
        self.inner.snapshot_as(OperatorTag::SignedAggregate, |table| StateRef { inner: table, members: &[] }, out)
    }

    fn restore(&mut self, bytes: &[u8]) -> Result<(), Error> {
        let (mut state, rest): (State, _) = read_state_and_rest(OperatorTag::SignedAggregate, bytes)?;
        if state.inner.accs.len() + 1 == self.inner.plan.aggregates.len() {
            state.inner.accs.push(Accumulator::Count { counts: state.members });
        }
        self.inner.restore_state(state.inner)?;
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

    // Pages, checkpoints in pages and spilling: the aggregate's, row
    // counts included.
    fn paged(&self) -> Option<&dyn crate::state::Paged> {
        self.inner.paged()
    }

    fn paged_mut(&mut self) -> Option<&mut dyn crate::state::Paged> {
        self.inner.paged_mut()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_drivers::{
        agrees_through_page_restores, checkpoint_pages as checkpoint, restore_pages as restored, run_emitting_changes,
    };
    use sluice_plan::{AggregateCall, Batch, DataType, Scalar};

    /// Input (customer, amount, __retract); per customer SUM(amount), COUNT(*).
    const TYPES: [DataType; 3] = [DataType::String, DataType::Bigint, DataType::Boolean];
    const OUT: [DataType; 3] = [DataType::String, DataType::Bigint, DataType::Bigint];

    fn operator() -> SignedAggregateOperator {
        let col = |index, data_type| PhysExpr::Column { index, data_type };
        let call = |func, arg, data_type| AggregateCall { func, arg, distinct: false, data_type, order: Vec::new() };
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

    /// A seeded round of `n` changes to a table of `orders` orders (a
    /// third on 10 hot ones), each order's customer drawn from
    /// `customers`: the signed rows a changelog writes for them — an
    /// update or a delete takes the order's last row back first.
    fn round(
        seed: &mut u64,
        table: &mut std::collections::HashMap<u64, (String, i64)>,
        orders: u64,
        customers: u64,
        n: usize,
    ) -> Vec<(String, i64, bool)> {
        let mut next = |m: u64| {
            *seed = seed.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
            (*seed >> 33) % m
        };
        let mut rows = Vec::new();
        for _ in 0..n {
            let id = if next(3) == 0 { next(10) } else { next(orders) };
            let delete = next(6) == 0;
            if let Some((c, a)) = table.remove(&id) {
                rows.push((c, a, true));
            }
            if !delete {
                let (c, a) = (format!("c{}", next(customers)), i64::try_from(next(100)).unwrap());
                rows.push((c.clone(), a, false));
                table.insert(id, (c, a));
            }
        }
        rows
    }

    /// What one batch emitted, in key order (group ids, which order what
    /// an aggregate emits, differ between one restored or spilled and one
    /// never).
    fn sorted(op: &mut SignedAggregateOperator, rows: &[(String, i64, bool)]) -> Vec<(String, i64, i64, bool)> {
        let rows: Vec<(&str, i64, bool)> = rows.iter().map(|(c, a, x)| (c.as_str(), *a, *x)).collect();
        let mut out = run(op, &rows);
        out.sort();
        out
    }

    /// Incremental checkpoints: an aggregate over a table restored every
    /// few batches from a head and the pages written so far emits what
    /// one never restored does — the row counts that say when a group is
    /// deleted come back with its pages; a checkpoint writes the pages of
    /// the groups that changed, not all.
    #[test]
    fn a_signed_aggregate_restored_from_pages_emits_what_one_never_restored_does() {
        let (mut seed, mut table, mut deleted) = (0x51a9_u64, std::collections::HashMap::new(), 0);
        let next = || round(&mut seed, &mut table, 300, 400, 20);
        let seen = agrees_through_page_restores(operator, None, (60, 4), next, |op, rows| {
            let out = sorted(op, rows);
            deleted += out.iter().filter(|row| row.3).count();
            out
        });
        assert!(deleted > 100, "{deleted} groups deleted by the two");
        assert_eq!(seen.entries.0, seen.entries.1);
        assert!(seen.fewest_written < seen.pages / 2, "{seen:?}");
    }

    /// A whole checkpoint of an earlier release — each group's row count
    /// beside the aggregate, not among its accumulators — restores; the
    /// next checkpoint writes every page, and an aggregate restored from
    /// those goes on as the one never restored.
    #[test]
    fn a_whole_checkpoint_of_an_earlier_release_restores_into_pages() {
        let mut first = operator();
        let mut table = std::collections::HashMap::new();
        let mut seed = 0x0e1d_u64;
        for _ in 0..20 {
            sorted(&mut first, &round(&mut seed, &mut table, 200, 50, 20));
        }
        // As the earlier release wrote it: the aggregate without the row
        // count, the counts by group id after it.
        let mut visible = first.inner.to_state();
        let counts = match first.inner.accs.last() {
            Some(Accumulator::Count { counts }) => counts.clone(),
            other => panic!("{other:?}"),
        };
        visible.accs = &first.inner.accs[..first.inner.accs.len() - 1];
        let earlier = crate::operator::write_state(
            OperatorTag::SignedAggregate,
            &StateRef { inner: visible, members: &counts },
            Vec::new(),
        )
        .unwrap();
        let earlier = first.inner.write_shown(earlier).unwrap();
        let mut from_whole = operator();
        from_whole.restore(&earlier).unwrap();
        let mut pages = std::collections::BTreeMap::new();
        let head = checkpoint(&mut from_whole, &mut pages, true);
        let mut second = restored(operator(), &head, &pages);
        for r in 20..40 {
            let rows = round(&mut seed, &mut table, 200, 50, 20);
            assert_eq!(sorted(&mut first, &rows), sorted(&mut second, &rows), "round {r}");
        }
    }

    /// State larger than memory: under a budget far below the groups it
    /// keeps, an aggregate over a table moves cold groups to disk and
    /// reads each back when a row is added to it or taken back from it —
    /// emitting what one in memory does, deletions included, through
    /// checkpoints of its pages and restores into an empty store.
    #[test]
    fn a_signed_aggregate_that_spills_emits_what_one_in_memory_does() {
        let (mut seed, mut table, mut deleted) = (0x5b12_u64, std::collections::HashMap::new(), 0);
        let next = || round(&mut seed, &mut table, 30_000, 30_000, 400);
        let seen = agrees_through_page_restores(operator, Some(16 << 10), (80, 10), next, |op, rows| {
            let out = sorted(op, rows);
            deleted += out.iter().filter(|row| row.3).count();
            out
        });
        assert!(deleted > 200, "{deleted} groups deleted by the two");
        assert_eq!(seen.entries.0, seen.entries.1);
        assert!(seen.most_spilled > 100, "{seen:?}");
        assert!(seen.most_state * 3 < seen.in_memory, "{seen:?}");
    }
}
