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
//! changes none of the columns kept emits nothing. A key's row is kept as
//! one run of bytes (`sluice_plan::row_bytes`): one allocation per key,
//! not one per value and string, for tables of millions of rows.

use std::collections::HashMap;

use serde::{Deserialize, Serialize};

use crate::Error;
use crate::join::bools;
use crate::last_per_key::LastPerKey;
use crate::operator::{BatchInput, Operator, OperatorOutput, OperatorTag, StateSize, read_state, write_state};
use sluice_plan::row_bytes::{self, AsScalars};
use sluice_plan::{Batch, ChangelogPlan, Scalar, eval};

#[derive(Debug)]
pub struct ChangelogOperator {
    plan: ChangelogPlan,
    /// The retraction marker's column, after the source's.
    retract: usize,
    /// Per key (encoded): its last row's kept columns, in `plan.kept`
    /// order, as bytes.
    last: HashMap<Vec<u8>, Box<[u8]>>,
    /// What `last` holds, kept as it changes (read after every batch).
    bytes: usize,
    latest: LastPerKey,
    /// A row being encoded (scratch).
    row: Vec<u8>,
}

/// A checkpoint, written by reference (each row as the scalars it holds,
/// the layout of rows kept as `Vec<Scalar>`)...
#[derive(Serialize)]
struct StateRef<'a> {
    last: Vec<(&'a [u8], AsScalars<'a>)>,
}

/// ...and read back owned.
#[derive(Deserialize)]
struct State {
    last: Vec<(Vec<u8>, Vec<Scalar>)>,
}

/// What a key's entry holds outside the map's slots: the key's and the
/// row's bytes, with a 16-byte allocator header each.
fn entry_bytes(key: &[u8], row: &[u8]) -> usize {
    key.len() + row.len() + 32
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
}

/// Appends `row` (the bytes of the columns `kept`; the others NULL) with
/// its sign in column `retract`.
fn push(kept: &[usize], retract: usize, row: &[u8], retracted: bool, out: &mut Batch) -> Result<(), Error> {
    let mut kept = kept.iter().zip(row_bytes::values(row)).peekable();
    for (i, column) in out.columns[..retract].iter_mut().enumerate() {
        match kept.next_if(|(k, _)| **k == i) {
            Some((_, value)) => column.push_value(value?)?,
            None => column.push_null(),
        }
    }
    out.columns[retract].push_bool(retracted)?;
    out.len += 1;
    Ok(())
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
                    push(&self.plan.kept, self.retract, &old, true, out.rows)?;
                }
                continue;
            }
            self.row.clear();
            for &c in &self.plan.kept {
                row_bytes::push_cell(&batch.columns[c], r, &mut self.row);
            }
            // Bytes compare as the values do, but for doubles: -0.0 after
            // 0.0 is a change here, NaN after the same NaN is not. One
            // lookup per row; a known key's row is replaced in place.
            let (kept, retract) = (&self.plan.kept, self.retract);
            match self.last.get_mut(key) {
                Some(old) if **old == *self.row => {}
                Some(old) => {
                    push(kept, retract, old, true, out.rows)?;
                    push(kept, retract, &self.row, false, out.rows)?;
                    self.bytes = self.bytes + self.row.len() - old.len();
                    *old = self.row.as_slice().into();
                }
                None => {
                    push(kept, retract, &self.row, false, out.rows)?;
                    self.bytes += entry_bytes(key, &self.row);
                    self.last.insert(key.to_vec(), self.row.as_slice().into());
                }
            }
        }
        Ok(())
    }

    fn state_size(&self) -> StateSize {
        // The map's slots as allocated: a slot and a control byte per
        // bucket, a bucket per 7/8 of a slot it can hold (at a million
        // keys the slots are as much as the rows).
        let slots = self.last.capacity() * (size_of::<(Vec<u8>, Box<[u8]>)>() + 1) * 8 / 7;
        StateSize { bytes: self.bytes + slots, entries: self.last.len() }
    }

    fn snapshot(&self, out: Vec<u8>) -> Result<Vec<u8>, Error> {
        let last = self.last.iter().map(|(k, v)| (k.as_slice(), AsScalars(v))).collect();
        write_state(OperatorTag::Changelog, &StateRef { last }, out)
    }

    fn restore(&mut self, bytes: &[u8]) -> Result<(), Error> {
        let state: State = read_state(OperatorTag::Changelog, bytes)?;
        self.last = state
            .last
            .into_iter()
            .map(|(key, values)| {
                let mut row = Vec::new();
                row_bytes::push_scalars(&values, &mut row);
                (key, row.into_boxed_slice())
            })
            .collect();
        self.bytes = self.last.iter().map(|(k, v)| entry_bytes(k, v)).sum();
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
        assert_eq!((op.bytes, op.state_size().entries), (0, 0), "{before} bytes all given back");
    }

    /// A checkpoint of rows kept as bytes is the one rows kept as scalars
    /// wrote, so checkpoints of either build restore in the other.
    #[test]
    fn a_checkpoint_keeps_the_layout_of_rows_kept_as_scalars() {
        let mut op = operator();
        run(&mut op, &[(1, "ann", 10, false)]);
        #[derive(Serialize)]
        struct Before {
            last: Vec<(Vec<u8>, Vec<Scalar>)>,
        }
        let (key, _) = op.last.iter().next().unwrap();
        let written = Before {
            last: vec![(key.clone(), vec![Scalar::Bigint(1), Scalar::String("ann".into()), Scalar::Bigint(10)])],
        };
        let saved = op.snapshot(Vec::new()).unwrap();
        assert_eq!(saved, write_state(OperatorTag::Changelog, &written, Vec::new()).unwrap());
        let mut back = operator();
        back.restore(&saved).unwrap();
        assert_eq!(back.state_size(), op.state_size());
        assert_eq!(run(&mut back, &[(1, "bob", 10, false)]), [row(1, "ann", 10, true), row(1, "bob", 10, false)]);
    }
}
