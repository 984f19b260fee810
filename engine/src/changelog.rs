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
//!
//! The keys' rows are the table, as large as the database's: they are kept
//! in pages of 8 keys, so a checkpoint writes the keys that changed, and
//! past the memory budget cold keys go to disk (`crate::state`), read back
//! when a version of them comes.

use serde::ser::SerializeSeq;
use serde::{Deserialize, Serialize, Serializer};

use crate::Error;
use crate::join::bools;
use crate::last_per_key::LastPerKey;
use crate::operator::{
    BatchInput, Operator, OperatorOutput, OperatorTag, StateSize, read_state, write_head, write_state,
};
use crate::state::group_keys::GroupTable;
use crate::state::pages::{KeyedPage, page_keys, write_page};
use crate::state::{PagedGroups, PagedState, load_keyed_page, restore_keyed_page};
use sluice_plan::row_bytes::{self, AsScalars};
use sluice_plan::{Batch, ChangelogPlan, Column, Scalar, StateValue, eval};

#[derive(Debug)]
pub struct ChangelogOperator {
    plan: ChangelogPlan,
    /// The retraction marker's column, after the source's.
    retract: usize,
    /// Groups in pages: their keys, pages changed since the last
    /// checkpoint, and what spilling keeps (`crate::state`).
    paged: PagedState,
    /// Per key id: its last row's kept columns, in `plan.kept` order, as
    /// bytes (`None`: an id without a row).
    rows: Vec<Option<Box<[u8]>>>,
    /// What the rows hold, with a 16-byte allocator header each, kept as
    /// they change (read after every batch).
    bytes: usize,
    latest: LastPerKey,
    /// A row being encoded (scratch).
    row: Vec<u8>,
    /// Positions of the batch's rows that count (scratch).
    counted: Vec<usize>,
}

/// A whole checkpoint, written by reference (each row as the scalars it
/// holds, the layout of rows kept as `Vec<Scalar>`)...
#[derive(Serialize)]
struct StateRef<'a> {
    last: Vec<(&'a [u8], AsScalars<'a>)>,
}

/// ...and read back owned.
#[derive(Deserialize)]
struct State {
    last: Vec<(Vec<u8>, Vec<Scalar>)>,
}

/// The rows of keys `groups`, one per key id (`None` for an id without).
struct RowsOut<'a> {
    rows: &'a [Option<Box<[u8]>>],
    groups: std::ops::Range<usize>,
}

impl Serialize for RowsOut<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut seq = serializer.serialize_seq(Some(self.groups.len()))?;
        for g in self.groups.clone() {
            seq.serialize_element(&self.rows.get(g).and_then(Option::as_deref).map(AsScalars))?;
        }
        seq.end()
    }
}

/// What a row holds: its bytes and an allocator header.
fn row_size(row: &[u8]) -> usize {
    row.len() + 16
}

impl ChangelogOperator {
    /// `columns`: how many columns the source has (the marker follows them).
    pub fn new(plan: &ChangelogPlan, columns: usize) -> Self {
        Self {
            plan: plan.clone(),
            retract: columns,
            paged: PagedState::default(),
            rows: Vec::new(),
            bytes: 0,
            latest: LastPerKey::default(),
            row: Vec::new(),
            counted: Vec::new(),
        }
    }

    /// Key `gid`'s row is `row` (`None`: it has none).
    fn set_row(&mut self, gid: u32, row: Option<Box<[u8]>>) {
        let g = gid as usize;
        if self.rows.len() <= g {
            self.rows.resize_with(g + 1, || None);
        }
        self.bytes += row.as_deref().map_or(0, row_size);
        let old = std::mem::replace(&mut self.rows[g], row);
        self.bytes -= old.as_deref().map_or(0, row_size);
    }

    /// Lets go of key `gid` (deleted): its id is handed out again, and a
    /// block of keys all gone is handed back for the next page read back.
    fn let_go(&mut self, gid: u32) {
        if self.paged.table.key_of(gid).is_none() {
            return;
        }
        self.paged.dirty.mark(self.paged.spilling.stable(gid));
        self.set_row(gid, None);
        self.paged.spilling.remove_group(&mut self.paged.table, gid);
    }

    /// Files key `g`'s row from a checkpoint or a page read back.
    fn restore_row(&mut self, g: usize, row: Option<Vec<StateValue<'_>>>) {
        let row = row.map(|values| {
            let mut bytes = Vec::new();
            for value in &values {
                row_bytes::push(value.as_ref(), &mut bytes);
            }
            bytes.into_boxed_slice()
        });
        self.set_row(u32::try_from(g).unwrap_or(u32::MAX), row);
    }

    fn clear(&mut self) -> Result<(), Error> {
        self.paged.table = GroupTable::default();
        self.rows.clear();
        self.bytes = 0;
        self.paged.dirty.clear();
        self.paged.spilling.forget()
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
        // The keys of the rows that count: in memory, read back from disk,
        // or new.
        let latest = std::mem::take(&mut self.latest);
        let mut counted = std::mem::take(&mut self.counted);
        counted.clear();
        counted.extend(latest.keep.iter().map(|&at| at as usize));
        let found = self.with_spilling(|s, op| {
            s.find_keys(op, &counted, |at, key| {
                key.extend_from_slice(latest.key(at));
                true
            })
        });
        self.counted = counted;
        let processed = found.and_then(|()| self.apply(batch, &latest, &deleted, out.rows));
        self.latest = latest;
        processed
    }

    fn state_size(&self) -> StateSize {
        StateSize { bytes: self.own_bytes() + self.paged.spilling.heap_bytes(), entries: self.paged.table.live() }
    }

    fn snapshot(&self, out: Vec<u8>) -> Result<Vec<u8>, Error> {
        if self.paged.spilling.spilled_any() {
            // It spilled: its checkpoints are heads and pages.
            return Err(Error::Internal("a whole checkpoint of a changelog that spilled".into()));
        }
        let last = (0..self.paged.table.capacity())
            .filter_map(|g| {
                let gid = u32::try_from(g).unwrap_or(u32::MAX);
                let row = self.rows.get(g)?.as_deref()?;
                Some((self.paged.table.key_of(gid)?, AsScalars(row)))
            })
            .collect();
        write_state(OperatorTag::Changelog, &StateRef { last }, out)
    }

    /// A whole checkpoint, as every release wrote before checkpoints were
    /// incremental (the next checkpoint writes every page).
    fn restore(&mut self, bytes: &[u8]) -> Result<(), Error> {
        let state: State = read_state(OperatorTag::Changelog, bytes)?;
        self.clear()?;
        for (key, values) in state.last {
            let (gid, _) = self.paged.table.find_or_insert(&key);
            let mut row = Vec::new();
            row_bytes::push_scalars(&values, &mut row);
            self.set_row(gid, Some(row.into_boxed_slice()));
        }
        Ok(())
    }

    fn paged(&self) -> Option<&dyn crate::state::Paged> {
        Some(self)
    }

    fn paged_mut(&mut self) -> Option<&mut dyn crate::state::Paged> {
        Some(self)
    }
}

impl ChangelogOperator {
    /// Emits the signed rows of `batch`'s rows that count (their keys
    /// found: `Spilling::gids`, in the order of `latest.keep`).
    fn apply(&mut self, batch: &Batch, latest: &LastPerKey, deleted: &Column, out: &mut Batch) -> Result<(), Error> {
        let deletes = bools(deleted).ok_or_else(|| Error::Internal("the deletion marker is not BOOLEAN".into()))?;
        let retract = self.retract;
        for (i, &at) in latest.keep.iter().enumerate() {
            let r = latest.rows[at as usize] as usize;
            let gid = self.paged.spilling.gids[i];
            let delete = deleted.is_valid(r) && deletes.get(r).copied().unwrap_or(false);
            if delete {
                // A delete of a key never seen says nothing.
                if let Some(Some(old)) = self.rows.get(gid as usize) {
                    push(&self.plan.kept, retract, old, true, out)?;
                }
                self.let_go(gid);
                continue;
            }
            self.row.clear();
            for &c in &self.plan.kept {
                row_bytes::push_cell(&batch.columns[c], r, &mut self.row);
            }
            // Bytes compare as the values do, but for doubles: -0.0 after
            // 0.0 is a change here, NaN after the same NaN is not. A known
            // key's row is replaced in place.
            match self.rows.get_mut(gid as usize) {
                Some(Some(old)) if **old == *self.row => continue,
                Some(Some(old)) => {
                    push(&self.plan.kept, retract, old, true, out)?;
                    push(&self.plan.kept, retract, &self.row, false, out)?;
                    self.bytes = self.bytes - old.len() + self.row.len();
                    *old = self.row.as_slice().into();
                }
                _ => {
                    push(&self.plan.kept, retract, &self.row, false, out)?;
                    let row = self.row.as_slice().into();
                    self.set_row(gid, Some(row));
                }
            }
            self.paged.dirty.mark(self.paged.spilling.stable(gid));
        }
        Ok(())
    }
}

impl PagedGroups for ChangelogOperator {
    fn groups(&self) -> &PagedState {
        &self.paged
    }

    fn groups_mut(&mut self) -> &mut PagedState {
        &mut self.paged
    }

    fn head_bytes(&self, out: Vec<u8>) -> Result<Vec<u8>, Error> {
        write_head(&self.paged, [OperatorTag::ChangelogSpilledHead, OperatorTag::ChangelogHead], out)
    }

    fn restore_from_head(&mut self, bytes: &[u8]) -> Result<(), Error> {
        self.clear()?;
        if let Some(head) = self.paged.spilling.restore_either_head(
            bytes,
            OperatorTag::ChangelogSpilledHead as u32,
            OperatorTag::ChangelogHead as u32,
        )? {
            self.paged.table = head.table();
        }
        Ok(())
    }

    fn restore_from_page(&mut self, page: u32, bytes: &[u8]) -> Result<(), Error> {
        restore_keyed_page(self, page, bytes, |op, g, row: Option<Vec<StateValue<'_>>>| {
            op.restore_row(g, row);
            Ok(())
        })
    }

    fn page_bytes(&self, groups: std::ops::Range<usize>, out: Vec<u8>) -> Result<Vec<u8>, Error> {
        let keys = page_keys(&self.paged.table, groups.clone());
        write_page(&KeyedPage { keys, groups: RowsOut { rows: &self.rows, groups } }, out)
    }

    fn load_page(&mut self, page: u32, bytes: &[u8], block: u32) -> Result<(), Error> {
        load_keyed_page(self, page, bytes, block, |op, g, _, row: Option<Vec<StateValue<'_>>>| {
            op.restore_row(g, row);
            Ok(())
        })
    }

    fn drop_groups(&mut self, groups: std::ops::Range<usize>) {
        for g in groups {
            if self.rows.get(g).is_some_and(Option::is_some) {
                self.set_row(u32::try_from(g).unwrap_or(u32::MAX), None);
            }
        }
    }

    fn own_bytes(&self) -> usize {
        self.paged.table.heap_bytes() + self.rows.capacity() * size_of::<Option<Box<[u8]>>>() + self.bytes
    }

    /// The rows: a table's rows grow on keys it holds (a longer version).
    fn row_bytes(&self) -> usize {
        self.bytes
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_drivers::{
        agrees_through_page_restores, checkpoint_pages as checkpoint, restore_pages as restored, run_emitting_changes,
    };
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
        let key = op.paged.table.key_of(0).unwrap().to_vec();
        let written =
            Before { last: vec![(key, vec![Scalar::Bigint(1), Scalar::String("ann".into()), Scalar::Bigint(10)])] };
        let saved = op.snapshot(Vec::new()).unwrap();
        assert_eq!(saved, write_state(OperatorTag::Changelog, &written, Vec::new()).unwrap());
        let mut back = operator();
        back.restore(&saved).unwrap();
        assert_eq!((back.bytes, back.state_size().entries), (op.bytes, op.state_size().entries));
        assert_eq!(run(&mut back, &[(1, "bob", 10, false)]), [row(1, "ann", 10, true), row(1, "bob", 10, false)]);
    }

    /// A seeded round of versions and deletes of `keys` keys (a third on
    /// 10 hot keys), customers drawn from 5.
    fn round(seed: &mut u64, keys: i64, n: usize) -> Vec<(i64, &'static str, i64, bool)> {
        const CUSTOMERS: [&str; 5] = ["ann", "bob", "cy", "dee", "eve"];
        let mut next = |m: u64| {
            *seed = seed.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
            i64::try_from((*seed >> 33) % m).unwrap()
        };
        (0..n)
            .map(|_| {
                let id = if next(3) == 0 { next(10) } else { next(u64::try_from(keys).unwrap()) };
                let delete = next(8) == 0;
                (id, CUSTOMERS[usize::try_from(next(5)).unwrap()], next(4), delete)
            })
            .collect()
    }

    /// Incremental checkpoints: a changelog restored every few batches
    /// from a head and the pages written so far takes back what one never
    /// restored does; a checkpoint writes the pages of the keys that
    /// changed, not all.
    #[test]
    fn a_changelog_restored_from_pages_signs_what_one_never_restored_does() {
        let (mut seed, mut retracted) = (0xc4a9_u64, 0);
        let seen = agrees_through_page_restores(
            operator,
            None,
            (60, 4),
            || round(&mut seed, 400, 30),
            |op, rows| {
                let out = run(op, rows);
                retracted += out.iter().filter(|row| row.3).count();
                out
            },
        );
        assert!(retracted > 600, "{retracted} rows taken back by the two");
        assert_eq!(seen.entries.0, seen.entries.1);
        assert!(seen.fewest_written < seen.pages / 2, "{seen:?}");
    }

    /// A whole checkpoint, as every release wrote before checkpoints were
    /// incremental, restores; the next checkpoint writes every page, and a
    /// changelog restored from those goes on as the one never restored.
    #[test]
    fn a_whole_checkpoint_of_an_earlier_release_restores_into_pages() {
        let mut first = operator();
        let mut seed = 0x01d_u64;
        for _ in 0..20 {
            run(&mut first, &round(&mut seed, 300, 30));
        }
        let mut from_whole = operator();
        from_whole.restore(&first.snapshot(Vec::new()).unwrap()).unwrap();
        let mut pages = std::collections::BTreeMap::new();
        let head = checkpoint(&mut from_whole, &mut pages, true);
        let mut second = restored(operator(), &head, &pages);
        for r in 20..40 {
            let rows = round(&mut seed, 300, 30);
            assert_eq!(run(&mut first, &rows), run(&mut second, &rows), "round {r}");
        }
    }

    /// State larger than memory: under a budget far below the table it
    /// keeps, a changelog moves cold keys to disk and reads each back when
    /// a version or a delete of it comes — taking back what one in memory
    /// does, through checkpoints of its pages and restores into a new
    /// operator with an empty store.
    #[test]
    fn a_changelog_that_spills_signs_what_one_in_memory_does() {
        let mut seed = 0x5b11_u64;
        let seen = agrees_through_page_restores(
            operator,
            Some(16 << 10),
            (80, 10),
            || round(&mut seed, 6_000, 200),
            |op, rows| run(op, rows),
        );
        assert!(seen.most_spilled > 100, "{seen:?}");
        assert!(seen.most_state * 3 < seen.in_memory, "{seen:?}");
    }
}
