//! GROUP BY over a changelog: the rows of an updating aggregate, keyed by
//! its group (Nexmark q4: per category, the average of each auction's
//! running highest bid, `AggregatePlan::upsert_key`).
//!
//! Each input row is the latest version of its key and replaces the one
//! before: that one's aggregate arguments are taken back out of the group
//! it went to (`Accumulator::retract`), then the new row is folded in as
//! any aggregate folds a row. Within a batch only each key's last row
//! counts — the versions before it are superseded in the same batch —
//! so a batch is one retraction and one fold per key, whatever its
//! batching. A group whose key moved to another group is emitted again
//! too. Only aggregates that can take a value back are planned here
//! (`AggFunc::retracts`); the group table and accumulators are the plain
//! aggregate's.

use std::borrow::Cow;
use std::collections::HashMap;

use serde::{Deserialize, Serialize};

use crate::Error;
use crate::aggregate::{AggregateOperator, AggregateState, AggregateStateRef};
use crate::last_per_key::LastPerKey;
use crate::operator::{
    BatchInput, Closed, Operator, OperatorOutput, OperatorTag, StateSize, read_state_and_rest, write_state,
};
use sluice_plan::{AggFunc, AggregatePlan, Column, PhysExpr, Scalar, Selection, eval};

#[derive(Debug)]
pub struct UpsertAggregateOperator {
    inner: AggregateOperator,
    key_exprs: Vec<PhysExpr>,
    arg_exprs: Vec<Option<PhysExpr>>,
    /// Per aggregate: whether it is COUNT(*) (which counts NULL rows too).
    star: Vec<bool>,
    /// Per key (encoded): the group its last row went to, and that row's
    /// aggregate arguments, to take back when the key's next row comes.
    last: HashMap<Vec<u8>, (u32, Vec<Scalar>)>,
    /// The bytes of `last`'s keys, kept as keys are added: the state's size
    /// is read after every batch, and summing them was a pass over every
    /// key per batch.
    key_bytes: usize,
    /// Scratch, reused batch to batch: the rows that count, the groups
    /// rows went to (sorted), and the groups keys left.
    latest: LastPerKey,
    placed: Vec<u32>,
    moved: Vec<u32>,
}

#[derive(Serialize)]
struct UpsertStateRef<'a> {
    inner: AggregateStateRef<'a>,
    last: Vec<(&'a [u8], u32, &'a [Scalar])>,
}

#[derive(Deserialize)]
struct UpsertState {
    inner: AggregateState,
    last: Vec<(Vec<u8>, u32, Vec<Scalar>)>,
}

impl UpsertAggregateOperator {
    pub fn new(plan: &AggregatePlan) -> Self {
        Self {
            inner: AggregateOperator::new(plan),
            key_exprs: plan.upsert_key.clone(),
            arg_exprs: plan.aggregates.iter().map(|a| a.arg.clone()).collect(),
            star: plan.aggregates.iter().map(|a| a.func == AggFunc::CountStar).collect(),
            last: HashMap::new(),
            key_bytes: 0,
            latest: LastPerKey::default(),
            placed: Vec::new(),
            moved: Vec::new(),
        }
    }
}

impl Operator for UpsertAggregateOperator {
    fn process(&mut self, input: &BatchInput<'_>, out: &mut OperatorOutput<'_>) -> Result<(), Error> {
        let batch = input.batch;
        self.latest.select(&self.key_exprs, batch, &input.selection)?;
        // Take back what each counting row's key contributed before.
        self.moved.clear();
        for &at in &self.latest.keep {
            let Some((gid, args)) = self.last.get(self.latest.key(at as usize)) else { continue };
            for ((acc, value), star) in self.inner.accs.iter_mut().zip(args).zip(&self.star) {
                acc.retract(*gid as usize, value, *star)?;
            }
            self.moved.push(*gid);
        }
        let counting: Vec<u32> = self.latest.keep.iter().map(|&at| self.latest.rows[at as usize]).collect();
        let only = BatchInput { selection: Selection::Rows(&counting), ..*input };
        self.inner.process(&only, out)?;
        // Where each counting row went, and what it brought.
        let n = batch.len;
        let args: Vec<Option<Cow<'_, Column>>> = self
            .arg_exprs
            .iter()
            .map(|e| e.as_ref().map(|e| Ok::<_, Error>(eval(e, batch)?.into_column(n))).transpose())
            .collect::<Result<_, Error>>()?;
        let Self { inner, last, key_bytes, latest, placed, moved, .. } = self;
        for ((&at, &row), &gid) in latest.keep.iter().zip(&counting).zip(&inner.gids) {
            let key = latest.key(at as usize);
            let values = args.iter().map(|a| a.as_ref().map_or(Scalar::Null, |c| c.scalar(row as usize)));
            match last.get_mut(key) {
                Some((g, kept)) => {
                    *g = gid;
                    kept.clear();
                    kept.extend(values);
                }
                None => {
                    *key_bytes += key.len();
                    last.insert(key.to_vec(), (gid, values.collect()));
                }
            }
        }
        // A group a key left (its new row went to another) changed too,
        // unless a row went to it (then the aggregate emitted it already).
        placed.clear();
        placed.extend_from_slice(&inner.gids);
        placed.sort_unstable();
        moved.sort_unstable();
        moved.dedup();
        moved.retain(|g| placed.binary_search(g).is_err());
        if input.emit_changes {
            for &g in &self.moved {
                self.inner.emit_group(g, out.rows)?;
            }
        }
        Ok(())
    }

    fn on_watermark(&mut self, watermark: i64, emit: bool, out: &mut Closed<'_>) -> Result<(), Error> {
        self.inner.on_watermark(watermark, emit, out)
    }

    fn finish(&mut self, emit: bool, out: &mut Closed<'_>) -> Result<(), Error> {
        self.inner.finish(emit, out)
    }

    fn state_size(&self) -> StateSize {
        let inner = self.inner.state_size();
        let per_key = size_of::<(Vec<u8>, u32, Vec<Scalar>)>() + self.star.len() * size_of::<Scalar>();
        StateSize {
            bytes: inner.bytes + self.key_bytes + self.last.len() * per_key,
            entries: inner.entries + self.last.len(),
        }
    }

    fn state_size_walks(&self) -> bool {
        self.inner.state_size_walks()
    }

    fn state_entries(&self) -> usize {
        self.inner.state_entries() + self.last.len()
    }

    fn snapshot(&self, out: Vec<u8>) -> Result<Vec<u8>, Error> {
        // In key order: the same state writes the same bytes (a hash
        // map's order changes from run to run), so checkpoints compare.
        let mut last: Vec<_> = self.last.iter().map(|(k, (g, v))| (k.as_slice(), *g, v.as_slice())).collect();
        last.sort_unstable_by_key(|e| e.0);
        let state = UpsertStateRef { inner: self.inner.to_state(), last };
        self.inner.write_shown(write_state(OperatorTag::UpsertAggregate, &state, out)?)
    }

    fn restore(&mut self, bytes: &[u8]) -> Result<(), Error> {
        let (state, rest): (UpsertState, _) = read_state_and_rest(OperatorTag::UpsertAggregate, bytes)?;
        self.inner.restore_state(state.inner)?;
        self.last = state.last.into_iter().map(|(k, g, v)| (k, (g, v))).collect();
        self.key_bytes = self.last.keys().map(Vec::len).sum();
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
    use crate::test_drivers::run_emitting_changes;
    use sluice_plan::{AggregateCall, Batch, DataType};

    /// Input (auction, category, final); per category AVG(final) and COUNT(*).
    const TYPES: [DataType; 3] = [DataType::Bigint, DataType::Bigint, DataType::Double];
    const OUT: [DataType; 3] = [DataType::Bigint, DataType::Double, DataType::Bigint];

    fn plan() -> AggregatePlan {
        let col = |index, data_type| PhysExpr::Column { index, data_type };
        let call = |func, arg, data_type| AggregateCall { func, arg, distinct: false, data_type, order: Vec::new() };
        AggregatePlan {
            group_exprs: vec![col(1, DataType::Bigint)],
            aggregates: vec![
                call(AggFunc::Avg, Some(col(2, DataType::Double)), DataType::Double),
                call(AggFunc::CountStar, None, DataType::Bigint),
            ],
            window: None,
            window_zone: None,
            upsert_key: vec![col(0, DataType::Bigint), col(1, DataType::Bigint)],
            retract: None,
        }
    }

    fn run(op: &mut UpsertAggregateOperator, rows: &[(i64, i64, f64)]) -> Vec<(i64, f64, i64)> {
        let mut b = Batch::empty(&TYPES);
        for &(a, c, f) in rows {
            b.columns[0].push_i64(a).unwrap();
            b.columns[1].push_i64(c).unwrap();
            b.columns[2].push_scalar(&Scalar::Double(f)).unwrap();
            b.len += 1;
        }
        let (out, _) = run_emitting_changes(op, &b, &OUT);
        (0..out.len)
            .map(|r| match (out.columns[0].scalar(r), out.columns[1].scalar(r), out.columns[2].scalar(r)) {
                (Scalar::Bigint(c), Scalar::Double(a), Scalar::Bigint(n)) => (c, a, n),
                other => panic!("{other:?}"),
            })
            .collect()
    }

    /// A key's new row replaces its old one in its group's aggregates, in
    /// the same batch or a later one, before and after a restore.
    #[test]
    fn a_new_row_of_a_key_replaces_its_last_in_the_group() {
        let mut op = UpsertAggregateOperator::new(&plan());
        assert_eq!(run(&mut op, &[(1, 10, 4.0), (2, 10, 8.0)]), [(10, 6.0, 2)]);
        // Auction 1's highest bid rises to 10, twice in one batch: 10 counts.
        assert_eq!(run(&mut op, &[(1, 10, 6.0), (1, 10, 10.0), (3, 11, 1.0)]), [(10, 9.0, 2), (11, 1.0, 1)]);
        let saved = op.snapshot(Vec::new()).unwrap();
        let mut op = UpsertAggregateOperator::new(&plan());
        op.restore(&saved).unwrap();
        assert_eq!(run(&mut op, &[(2, 10, 12.0)]), [(10, 11.0, 2)]);
        assert_eq!(op.state_size().entries, 2 + 3, "two groups, three keys");
    }

    /// Keyed by the auction alone, a key's new row may go to another group:
    /// the group it left is emitted too, without it; one a row went to
    /// once, not twice.
    #[test]
    fn a_group_a_key_left_is_emitted_again() {
        let by_auction =
            AggregatePlan { upsert_key: vec![PhysExpr::Column { index: 0, data_type: DataType::Bigint }], ..plan() };
        let mut op = UpsertAggregateOperator::new(&by_auction);
        assert_eq!(run(&mut op, &[(1, 10, 4.0), (2, 10, 8.0), (3, 11, 1.0)]), [(10, 6.0, 2), (11, 1.0, 1)]);
        let mut changed = run(&mut op, &[(1, 11, 5.0)]);
        changed.sort_by_key(|r| r.0);
        assert_eq!(changed, [(10, 8.0, 1), (11, 3.0, 2)]);
    }
}
