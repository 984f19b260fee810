//! A table's changes as signed rows ([`ChangelogPlan`]): each new version
//! of a key takes the key's previous row back (`__retract` TRUE) and adds
//! the new one; a deletion takes it back only.
//!
//! An aggregate over a table needs this because a version says nothing of
//! the row it replaces: an order that moves to another customer must leave
//! the old customer's total, and a deletion (often only the key, as
//! Debezium writes it under Postgres's default replica identity) names no
//! group at all. Keyed by the primary key, this stage keeps each key's last
//! row — the columns the query reads, no more — and so can say exactly what
//! to take back, and the signed rows then cross an exchange keyed by the
//! aggregate's groups (the retraction goes where the old row was counted).
//! Within a batch only each key's last version counts; a version that
//! changes none of the columns kept emits nothing.

use std::collections::HashMap;

use serde::{Deserialize, Serialize};

use crate::Error;
use crate::join::bools;
use crate::last_per_key::LastPerKey;
use crate::operator::{BatchInput, Operator, OperatorOutput, OperatorTag, StateSize, read_state, write_state};
use sluice_plan::{Batch, ChangelogPlan, Scalar, eval};

#[derive(Debug)]
pub struct ChangelogOperator {
    plan: ChangelogPlan,
    /// The retraction marker's column, after the source's.
    retract: usize,
    /// Per key (encoded): its last row's kept columns, in `plan.kept` order.
    last: HashMap<Vec<u8>, Vec<Scalar>>,
    /// What `last` holds, kept as it changes (read after every batch).
    bytes: usize,
    latest: LastPerKey,
    row: Vec<Scalar>,
}

#[derive(Serialize)]
struct StateRef<'a> {
    last: Vec<(&'a [u8], &'a [Scalar])>,
}

#[derive(Deserialize)]
struct State {
    last: Vec<(Vec<u8>, Vec<Scalar>)>,
}

fn scalar_bytes(s: &Scalar) -> usize {
    size_of::<Scalar>() + if let Scalar::String(x) = s { x.len() } else { 0 }
}

fn entry_bytes(key: &[u8], row: &[Scalar]) -> usize {
    key.len() + size_of::<(Vec<u8>, Vec<Scalar>)>() + row.iter().map(scalar_bytes).sum::<usize>()
}

impl ChangelogOperator {
    /// `columns`: how many columns the source has (the marker follows them).
    pub fn new(plan: &ChangelogPlan, columns: usize) -> Self {
        Self {
            plan: plan.clone(),
            retract: columns,
            last: HashMap::new(),
            bytes: 0,
            latest: LastPerKey::default(),
            row: Vec::new(),
        }
    }

    /// Appends `row` (the kept columns; the others NULL) with its sign.
    fn push(&self, row: &[Scalar], retract: bool, out: &mut Batch) -> Result<(), Error> {
        let mut kept = self.plan.kept.iter().zip(row).peekable();
        for (i, column) in out.columns[..self.retract].iter_mut().enumerate() {
            match kept.next_if(|(k, _)| **k == i) {
                Some((_, value)) => column.push_scalar(value)?,
                None => column.push_null(),
            }
        }
        out.columns[self.retract].push_bool(retract)?;
        out.len += 1;
        Ok(())
    }
}

impl Operator for ChangelogOperator {
    fn process(&mut self, input: &BatchInput<'_>, out: &mut OperatorOutput<'_>) -> Result<(), Error> {
        let batch = input.batch;
        self.latest.select(&self.plan.key, batch, &input.selection)?;
        let deleted = eval(&self.plan.deleted, batch)?.into_column(batch.len);
        let deletes = bools(&deleted).ok_or_else(|| Error::Internal("the deletion marker is not BOOLEAN".into()))?;
        for i in 0..self.latest.keep.len() {
            let at = self.latest.keep[i] as usize;
            let r = self.latest.rows[at] as usize;
            let key = self.latest.key(at);
            let delete = deleted.is_valid(r) && deletes.get(r).copied().unwrap_or(false);
            if delete {
                if let Some(old) = self.last.remove(key) {
                    self.bytes -= entry_bytes(key, &old);
                    self.push(&old, true, out.rows)?;
                }
                continue;
            }
            let mut row = std::mem::take(&mut self.row);
            row.clear();
            row.extend(self.plan.kept.iter().map(|&c| batch.columns[c].scalar(r)));
            match self.last.get(key) {
                Some(old) if *old == row => {
                    self.row = row;
                    continue;
                }
                Some(old) => self.push(old, true, out.rows)?,
                None => {}
            }
            self.push(&row, false, out.rows)?;
            let added = entry_bytes(key, &row);
            match self.last.insert(key.to_vec(), row) {
                Some(old) => {
                    self.bytes = self.bytes + added - entry_bytes(key, &old);
                    self.row = old;
                }
                None => self.bytes += added,
            }
        }
        Ok(())
    }

    fn state_size(&self) -> StateSize {
        StateSize { bytes: self.bytes, entries: self.last.len() }
    }

    fn snapshot(&self, out: Vec<u8>) -> Result<Vec<u8>, Error> {
        let last = self.last.iter().map(|(k, v)| (k.as_slice(), v.as_slice())).collect();
        write_state(OperatorTag::Changelog, &StateRef { last }, out)
    }

    fn restore(&mut self, bytes: &[u8]) -> Result<(), Error> {
        let state: State = read_state(OperatorTag::Changelog, bytes)?;
        self.bytes = state.last.iter().map(|(k, v)| entry_bytes(k, v)).sum();
        self.last = state.last.into_iter().collect();
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::operator::run_emitting_changes;
    use sluice_plan::{DataType, PhysExpr};

    /// Source (id, customer, amount, note, __deleted); the query reads
    /// id, customer and amount.
    const TYPES: [DataType; 5] =
        [DataType::Bigint, DataType::String, DataType::Bigint, DataType::String, DataType::Boolean];

    fn operator() -> ChangelogOperator {
        let plan = ChangelogPlan {
            key: vec![PhysExpr::Column { index: 0, data_type: DataType::Bigint }],
            deleted: PhysExpr::Column { index: 4, data_type: DataType::Boolean },
            kept: vec![0, 1, 2],
        };
        ChangelogOperator::new(&plan, TYPES.len())
    }

    type Row<'a> = (i64, &'a str, i64, bool);

    /// Runs one batch of (id, customer, amount, deleted): the signed rows
    /// as (id, customer, amount, retract).
    fn run(op: &mut ChangelogOperator, rows: &[Row<'_>]) -> Vec<(i64, String, i64, bool)> {
        let mut b = Batch::empty(&TYPES);
        for &(id, customer, amount, deleted) in rows {
            b.columns[0].push_i64(id).unwrap();
            b.columns[1].push_str(customer).unwrap();
            b.columns[2].push_i64(amount).unwrap();
            b.columns[3].push_str("not kept").unwrap();
            b.columns[4].push_bool(deleted).unwrap();
            b.len += 1;
        }
        let mut types = TYPES.to_vec();
        types.push(DataType::Boolean);
        let (out, _) = run_emitting_changes(op, &b, &types);
        (0..out.len)
            .map(|r| {
                assert_eq!(out.columns[3].scalar(r), Scalar::Null, "a column the query does not read is not kept");
                match (
                    out.columns[0].scalar(r),
                    out.columns[1].scalar(r),
                    out.columns[2].scalar(r),
                    out.columns[5].scalar(r),
                ) {
                    (Scalar::Bigint(id), Scalar::String(c), Scalar::Bigint(a), Scalar::Boolean(x)) => (id, c, a, x),
                    other => panic!("{other:?}"),
                }
            })
            .collect()
    }

    fn row(id: i64, customer: &str, amount: i64, retract: bool) -> (i64, String, i64, bool) {
        (id, customer.to_owned(), amount, retract)
    }

    /// An update takes the old row back (with the group it was in) before
    /// adding the new; a delete, keyed only, takes back the row it names;
    /// an unchanged version and the delete of an unknown key say nothing.
    #[test]
    fn each_version_takes_back_the_row_it_replaces() {
        let mut op = operator();
        assert_eq!(
            run(&mut op, &[(1, "ann", 10, false), (2, "bob", 5, false)]),
            [row(1, "ann", 10, false), row(2, "bob", 5, false)]
        );
        // Order 1 moves to bob, twice in one batch: the last version counts.
        assert_eq!(
            run(&mut op, &[(1, "cy", 12, false), (1, "bob", 12, false)]),
            [row(1, "ann", 10, true), row(1, "bob", 12, false)]
        );
        let saved = op.snapshot(Vec::new()).unwrap();
        let mut op = operator();
        op.restore(&saved).unwrap();
        assert_eq!(op.state_size().entries, 2);
        // A delete carrying only its key (the other columns are whatever
        // the decoder left); the same version again; an unknown key's delete.
        assert_eq!(
            run(&mut op, &[(2, "", 0, true), (1, "bob", 12, false), (9, "", 0, true)]),
            [row(2, "bob", 5, true)]
        );
        assert_eq!(op.state_size().entries, 1);
        let before = op.state_size().bytes;
        assert_eq!(run(&mut op, &[(1, "", 0, true)]), [row(1, "bob", 12, true)]);
        assert_eq!(op.state_size(), StateSize { bytes: 0, entries: 0 }, "{before} bytes all given back");
    }
}
