//! Top-N per key (`ROW_NUMBER() OVER (PARTITION BY k ORDER BY x) … WHERE
//! rn <= N`), and deduplication (N = 1).
//!
//! Each key keeps its best N rows, best first. A row that ranks among them
//! is inserted; the ranks it pushed down (its own and every one after it,
//! up to N) are emitted as upserts keyed by (key, rank), so a consumer that
//! keeps the last row per (key, rank) — a compacted topic, a table — holds
//! the current top N. A row that ranks below N changes nothing and emits
//! nothing. Ties keep the earlier row ahead (arrival order), so `ORDER BY
//! ts` with N = 1 keeps each key's first row and emits once per key, and
//! `ORDER BY ts DESC` keeps its latest. NULL sorts after every value
//! ascending and before every value descending, as in PostgreSQL.
//!
//! Emission follows `spec.engine.emitChanges`, as an aggregate's EMIT
//! CHANGES does. `Coalesced` (the default): after each batch, each key it
//! changed emits the ranks from the best one that changed to its last,
//! with the rows holding them then — one row per changed (key, rank), not
//! one per rank each row pushed down. A hot key taking many rows in a
//! batch (Nexmark q19's auctions) writes its top N once, not once per row;
//! the last row per (key, rank) is the same either way. `PerRecord`: the
//! ranks each row pushed down, as it arrives.
//!
//! Keys are found through the same group table as aggregates (no
//! allocation for a key already seen); a row is copied into state only
//! when it enters a top N, as one run of bytes (`sluice_plan::row_bytes`):
//! one allocation per kept row, not one per value and string.

use std::borrow::Cow;
use std::cmp::Ordering;
use std::ops::Range;

use hashbrown::HashMap;
use hashbrown::hash_map::Entry;
use serde::ser::{SerializeSeq, SerializeStruct};
use serde::{Deserialize, Serialize, Serializer};

use crate::Error;
use crate::operator::{
    BatchInput, Operator, OperatorOutput, OperatorTag, StateSize, read_state, write_head, write_state,
};
use crate::state::group_keys::BLOCK;
use crate::state::group_keys::{GroupTable, GroupTableState, KeyEncoder};
use crate::state::pages::{PageKeys, page_groups, page_keys, read_page_and_rest, restore_page_keys, write_page};
use crate::state::{PagedGroups, PagedState, place_keys};
use sluice_plan::row_bytes::{self, AsScalars};
use sluice_plan::{Batch, Column, ColumnData, Scalar, ScalarRef, TopNPlan, eval};

/// A row in a top N.
#[derive(Debug, Clone)]
struct Kept {
    /// The first ORDER BY key's value, compared with every row of the key.
    order: Scalar,
    /// The values of the ORDER BY keys after the first (none, and no
    /// allocation, for most plans).
    then: Box<[Scalar]>,
    /// Every source column's value ([`row_bytes`]), NULL for the columns
    /// the query does not read.
    row: Box<[u8]>,
}

/// A kept row as checkpoints hold it: the order value, then one list of
/// the source columns' values followed by the further keys' values (the
/// layout rows had as `Vec<Scalar>`, so checkpoints of either read as the
/// other).
#[derive(Deserialize)]
struct KeptIn {
    order: Scalar,
    row: Vec<Scalar>,
}

impl Serialize for Kept {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut kept = serializer.serialize_struct("Kept", 2)?;
        kept.serialize_field("order", &self.order)?;
        kept.serialize_field("row", &KeptValues(self))?;
        kept.end()
    }
}

/// A kept row's values as one list, each serialised as its `Scalar`.
struct KeptValues<'a>(&'a Kept);

impl Serialize for KeptValues<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let Kept { row, then, .. } = self.0;
        let row = AsScalars(row);
        let mut seq = serializer.serialize_seq(Some(row.len() + then.len()))?;
        row.serialize_elements(&mut seq)?;
        for value in then {
            seq.serialize_element(value)?;
        }
        seq.end()
    }
}

impl KeptIn {
    /// The row, its first `width` values the source columns'.
    fn into_kept(self, width: usize) -> Kept {
        let mut row = Vec::new();
        row_bytes::push_scalars(self.row.iter().take(width), &mut row);
        let then = self.row.into_iter().skip(width).collect();
        Kept { order: self.order, then, row: row.into_boxed_slice() }
    }
}

#[derive(Debug)]
pub struct TopNOperator {
    plan: TopNPlan,
    limit: usize,
    used: Vec<bool>,
    /// Groups in pages: their keys, pages changed since the last
    /// checkpoint, and what spilling keeps (`crate::state`).
    paged: PagedState,
    /// Per key id: its best rows, best first.
    kept: Vec<Vec<Kept>>,
    rows: usize,
    /// Rows the lists have room for (`rows` and the spare room).
    slots: usize,
    /// What the kept rows hold on the heap (their bytes, strings of their
    /// ORDER BY values), kept as rows come and go.
    heap: usize,
    /// A row being encoded (scratch).
    encoded: Vec<u8>,
    /// The keys a batch changed, in the order it first changed them, each
    /// with the best rank it changed (coalesced emission; scratch).
    changed: Vec<(u32, u32)>,
    /// Where each changed key is in `changed` (scratch).
    changed_at: HashMap<u32, usize>,
}

/// A full checkpoint, written by reference...
#[derive(Serialize)]
struct TopNStateRef<'a> {
    table: GroupTableState,
    kept: &'a [Vec<Kept>],
}

/// ...and read back owned.
#[derive(Deserialize)]
struct TopNState {
    table: GroupTableState,
    kept: Vec<Vec<KeptIn>>,
}

/// The keys of one page of an incremental checkpoint and their rows,
/// written by reference...
#[derive(Serialize)]
struct TopNPageRef<'a> {
    keys: PageKeys<'a>,
    kept: Vec<&'a [Kept]>,
}

/// ...and read back with the keys borrowed from the page's bytes (the
/// two encode identically).
#[derive(Deserialize)]
struct TopNPageIn<'a> {
    #[serde(borrow)]
    keys: Vec<Option<&'a [u8]>>,
    kept: Vec<Vec<KeptIn>>,
}

impl Kept {
    /// What it holds on the heap, each allocation with its 16-byte header.
    fn heap_bytes(&self) -> usize {
        let strings: usize = std::iter::once(&self.order)
            .chain(&self.then)
            .map(|v| if let Scalar::String(s) = v { s.capacity() + 16 } else { 0 })
            .sum();
        let then = if self.then.is_empty() { 0 } else { self.then.len() * size_of::<Scalar>() + 16 };
        self.row.len() + 16 + then + strings
    }
}

/// Orders row `r` of `column` against `b`, as [`compare`] would with the
/// row as a scalar, without making one (no allocation for a string).
fn compare_cell(column: &Column, r: usize, b: &Scalar) -> Ordering {
    if !column.is_valid(r) {
        return compare(&Scalar::Null, b);
    }
    match (&column.data, b) {
        (_, Scalar::Null) => Ordering::Less,
        // A decimal kept from this column has the column's scale.
        (ColumnData::Int(v), Scalar::Bigint(y) | Scalar::Timestamp(y)) => v[r].cmp(y),
        (ColumnData::Int(v), Scalar::Decimal(y, _)) => i128::from(v[r]).cmp(y),
        (ColumnData::Wide(v), Scalar::Decimal(y, _)) => v[r].cmp(y),
        (ColumnData::Float(v), Scalar::Double(y)) => v[r].total_cmp(y),
        (ColumnData::Str(v), Scalar::String(y)) => v.get(r).as_bytes().cmp(y.as_bytes()),
        (ColumnData::Bool(v), Scalar::Boolean(y)) => v[r].cmp(y),
        _ => compare(&column.scalar(r), b),
    }
}

/// Orders values as PostgreSQL does for one type, NULL greatest.
pub(crate) fn compare(a: &Scalar, b: &Scalar) -> Ordering {
    match (a, b) {
        (Scalar::Null, Scalar::Null) => Ordering::Equal,
        (Scalar::Null, _) => Ordering::Greater,
        (_, Scalar::Null) => Ordering::Less,
        (Scalar::Bigint(x) | Scalar::Timestamp(x), Scalar::Bigint(y) | Scalar::Timestamp(y)) => x.cmp(y),
        (Scalar::Double(x), Scalar::Double(y)) => x.total_cmp(y),
        (Scalar::Decimal(x, sx), Scalar::Decimal(y, sy)) => sluice_plan::decimal::cmp(*x, *sx, *y, *sy),
        (Scalar::String(x), Scalar::String(y)) => x.as_bytes().cmp(y.as_bytes()),
        (Scalar::Boolean(x), Scalar::Boolean(y)) => x.cmp(y),
        // One ORDER BY expression has one type.
        _ => Ordering::Equal,
    }
}

impl TopNOperator {
    /// `used`: which source columns the query reads.
    pub fn new(plan: &TopNPlan, used: &[bool]) -> Self {
        Self {
            plan: plan.clone(),
            limit: usize::try_from(plan.limit).unwrap_or(usize::MAX).max(1),
            used: used.to_vec(),
            paged: PagedState::default(),
            kept: Vec::new(),
            rows: 0,
            slots: 0,
            heap: 0,
            encoded: Vec::new(),
            changed: Vec::new(),
            changed_at: HashMap::default(),
        }
    }

    /// The bytes the kept rows hold in memory, what spilling keeps aside.
    fn own_bytes(&self) -> usize {
        // Per key id its list (a vector in the outer one) and, for a live
        // key, the list's allocation (a 16-byte allocator header, and its
        // slots); per row what it holds on the heap (`heap`, kept as rows
        // come and go).
        let keys = self.kept.capacity() * size_of::<Vec<Kept>>() + self.paged.table.live() * 16;
        self.paged.table.heap_bytes() + keys + self.slots * size_of::<Kept>() + self.heap
    }

    /// Takes the rows of key id `gid` into the counts of what is kept.
    fn count_in(&mut self, gid: usize) {
        let list = &self.kept[gid];
        self.rows += list.len();
        self.slots += list.capacity();
        self.heap += list.iter().map(Kept::heap_bytes).sum::<usize>();
    }

    /// Whether row `r` of the ORDER BY columns (the first key's, then the
    /// others') ranks strictly ahead of `old`: the first key that does not
    /// tie decides.
    fn ahead(&self, order: &Column, then: &[Cow<'_, Column>], r: usize, old: &Kept) -> bool {
        let directed = |o: Ordering, descending: bool| if descending { o.reverse() } else { o };
        let mut o = directed(compare_cell(order, r, &old.order), self.plan.descending);
        for ((key, column), value) in self.plan.then_by.iter().zip(then).zip(&old.then) {
            if o != Ordering::Equal {
                break;
            }
            o = directed(compare_cell(column, r, value), key.descending);
        }
        o == Ordering::Less
    }

    /// Appends rank `rank` (1-based) of key `gid` as an intermediate row.
    fn emit(&self, gid: usize, rank: usize, out: &mut Batch) -> Result<(), Error> {
        let kept = &self.kept[gid][rank];
        let width = self.used.len();
        for (c, value) in row_bytes::values(&kept.row).take(width).enumerate() {
            out.columns[c].push_value(value?)?;
        }
        out.columns[width].push_i64(i64::try_from(rank + 1).unwrap_or(i64::MAX))?;
        out.len += 1;
        Ok(())
    }
}

impl Operator for TopNOperator {
    fn process(&mut self, input: &BatchInput<'_>, out: &mut OperatorOutput<'_>) -> Result<(), Error> {
        let batch = input.batch;
        let n = batch.len;
        let keys: Vec<Cow<'_, Column>> =
            self.plan.partition_by.iter().map(|e| Ok(eval(e, batch)?.into_column(n))).collect::<Result<_, Error>>()?;
        let key_columns: Vec<&Column> = keys.iter().map(AsRef::as_ref).collect();
        let encoder = KeyEncoder::new(&key_columns);
        let order = eval(&self.plan.order_by, batch)?.into_column(n);
        let then: Vec<Cow<'_, Column>> =
            self.plan.then_by.iter().map(|k| Ok(eval(&k.expr, batch)?.into_column(n))).collect::<Result<_, Error>>()?;
        let mut rows = Vec::with_capacity(input.selection.len());
        input.selection.for_each(|r| rows.push(r));
        self.with_spilling(|s, op| {
            s.find_keys(op, &rows, |r, key| {
                encoder.encode(r, key);
                true
            })
        })?;
        if self.kept.len() < self.paged.table.capacity() {
            self.kept.resize_with(self.paged.table.capacity(), Vec::new);
        }
        for (i, r) in rows.into_iter().enumerate() {
            // A new key's row always enters its (empty) top N, which marks
            // its page below.
            let gid = self.paged.spilling.gids[i] as usize;
            let list = &self.kept[gid];
            let at = list.iter().position(|k| self.ahead(&order, &then, r, k)).unwrap_or(list.len());
            if at >= self.limit {
                continue;
            }
            // Only a row that enters the top N is copied into state.
            self.encoded.clear();
            for (c, u) in self.used.iter().enumerate() {
                let value = if *u { batch.columns[c].value(r) } else { ScalarRef::Null };
                row_bytes::push(value, &mut self.encoded);
            }
            let kept = Kept {
                order: order.scalar(r),
                then: then.iter().map(|c| c.scalar(r)).collect(),
                row: self.encoded.as_slice().into(),
            };
            self.paged.dirty.mark(self.paged.spilling.stable(u32::try_from(gid).unwrap_or(u32::MAX)));
            self.heap += kept.heap_bytes();
            let list = &mut self.kept[gid];
            // The last row leaves before the new one enters, so a full
            // list never grows past its N; below it a list doubles, up to
            // N (a deduplication's list is one row long, not the four a
            // vector grows to).
            if list.len() >= self.limit {
                if let Some(out) = list.pop() {
                    self.heap -= out.heap_bytes();
                }
            } else {
                if list.len() == list.capacity() {
                    let before = list.capacity();
                    list.reserve_exact(before.max(1).min(self.limit - before));
                    self.slots += list.capacity() - before;
                }
                self.rows += 1;
            }
            list.insert(at, kept);
            if input.per_record {
                for rank in at..self.kept[gid].len() {
                    self.emit(gid, rank, out.rows)?;
                }
                continue;
            }
            let at = u32::try_from(at).unwrap_or(u32::MAX);
            match self.changed_at.entry(self.paged.spilling.gids[i]) {
                Entry::Occupied(e) => {
                    let best = &mut self.changed[*e.get()].1;
                    *best = (*best).min(at);
                }
                Entry::Vacant(e) => {
                    e.insert(self.changed.len());
                    self.changed.push((self.paged.spilling.gids[i], at));
                }
            }
        }
        // Coalesced: each changed key's ranks as the batch left them.
        for &(gid, from) in &self.changed {
            for rank in from as usize..self.kept[gid as usize].len() {
                self.emit(gid as usize, rank, out.rows)?;
            }
        }
        self.changed.clear();
        self.changed_at.clear();
        Ok(())
    }

    fn state_size(&self) -> StateSize {
        StateSize { bytes: self.own_bytes() + self.paged.spilling.heap_bytes(), entries: self.rows }
    }

    fn snapshot(&self, out: Vec<u8>) -> Result<Vec<u8>, Error> {
        if self.paged.spilling.spilled_any() {
            // It spilled: its checkpoints are heads and pages.
            return Err(Error::Internal("a whole checkpoint of a top N that spilled".into()));
        }
        write_state(OperatorTag::TopN, &TopNStateRef { table: self.paged.table.to_state(), kept: &self.kept }, out)
    }

    fn restore(&mut self, bytes: &[u8]) -> Result<(), Error> {
        let state: TopNState = read_state(OperatorTag::TopN, bytes)?;
        self.paged.table = GroupTable::from_state(state.table);
        let width = self.used.len();
        self.kept = state.kept.into_iter().map(|list| list.into_iter().map(|k| k.into_kept(width)).collect()).collect();
        self.rows = self.kept.iter().map(Vec::len).sum();
        self.slots = self.kept.iter().map(Vec::capacity).sum();
        self.heap = self.kept.iter().flatten().map(Kept::heap_bytes).sum();
        self.paged.dirty.clear();
        self.paged.spilling.forget()
    }

    fn paged(&self) -> Option<&dyn crate::state::Paged> {
        Some(self)
    }

    fn paged_mut(&mut self) -> Option<&mut dyn crate::state::Paged> {
        Some(self)
    }
}

impl PagedGroups for TopNOperator {
    fn groups(&self) -> &PagedState {
        &self.paged
    }

    fn groups_mut(&mut self) -> &mut PagedState {
        &mut self.paged
    }

    fn head_bytes(&self, out: Vec<u8>) -> Result<Vec<u8>, Error> {
        write_head(&self.paged, [OperatorTag::TopNSpilledHead, OperatorTag::TopNHead], out)
    }

    fn restore_from_head(&mut self, bytes: &[u8]) -> Result<(), Error> {
        self.rows = 0;
        self.slots = 0;
        self.heap = 0;
        self.paged.dirty.clear();
        self.kept = Vec::new();
        self.paged.table = GroupTable::default();
        if let Some(head) = self.paged.spilling.restore_either_head(
            bytes,
            OperatorTag::TopNSpilledHead as u32,
            OperatorTag::TopNHead as u32,
        )? {
            self.kept = vec![Vec::new(); head.groups as usize];
            self.paged.table = head.table();
        }
        Ok(())
    }

    fn restore_from_page(&mut self, page: u32, bytes: &[u8]) -> Result<(), Error> {
        if self.with_spilling(|s, op| s.restore_page(op, page, bytes))? {
            return Ok(());
        }
        let (p, _): (TopNPageIn<'_>, _) = read_page_and_rest(page, bytes)?;
        restore_page_keys(&mut self.paged.table, page, &p.keys)?;
        let start = page_groups(page, usize::MAX).start;
        let width = self.used.len();
        for (i, rows) in p.kept.into_iter().enumerate() {
            if let Some(slot) = self.kept.get_mut(start + i) {
                let rows: Vec<Kept> = rows.into_iter().map(|k| k.into_kept(width)).collect();
                self.rows += rows.len();
                self.slots += rows.capacity();
                self.heap += rows.iter().map(Kept::heap_bytes).sum::<usize>();
                *slot = rows;
            }
        }
        Ok(())
    }

    fn page_bytes(&self, groups: Range<usize>, out: Vec<u8>) -> Result<Vec<u8>, Error> {
        let kept = groups.clone().map(|g| self.kept.get(g).map_or(&[][..], Vec::as_slice)).collect();
        write_page(&TopNPageRef { keys: page_keys(&self.paged.table, groups), kept }, out)
    }

    fn load_page(&mut self, page: u32, bytes: &[u8], block: u32) -> Result<(), Error> {
        let (p, _): (TopNPageIn<'_>, _) = read_page_and_rest(page, bytes)?;
        place_keys(&mut self.paged.table, block, &p.keys)?;
        let start = block as usize * BLOCK;
        if self.kept.len() < start + BLOCK {
            self.kept.resize_with(start + BLOCK, Vec::new);
        }
        let width = self.used.len();
        for (i, rows) in p.kept.into_iter().enumerate().take(BLOCK) {
            self.kept[start + i] = rows.into_iter().map(|k| k.into_kept(width)).collect();
            self.count_in(start + i);
        }
        Ok(())
    }

    fn drop_groups(&mut self, groups: Range<usize>) {
        for g in groups {
            if let Some(list) = self.kept.get_mut(g) {
                let list = std::mem::take(list);
                self.rows -= list.len();
                self.slots -= list.capacity();
                self.heap -= list.iter().map(Kept::heap_bytes).sum::<usize>();
            }
        }
    }

    fn own_bytes(&self) -> usize {
        TopNOperator::own_bytes(self)
    }
}

#[cfg(test)]
mod tests {
    use super::compare;
    use sluice_plan::Scalar;
    use std::cmp::Ordering;

    #[test]
    fn a_cell_orders_as_its_scalar_does() {
        use super::compare_cell;
        use sluice_plan::{Column, DataType};
        let mut strings = Column::with_capacity(DataType::String, 2);
        strings.push_str("b").unwrap();
        strings.push_null();
        let mut ints = Column::with_capacity(DataType::Timestamp, 1);
        ints.push_i64(7).unwrap();
        for b in [Scalar::String("ab".into()), Scalar::String("b".into()), Scalar::String("c".into()), Scalar::Null] {
            assert_eq!(compare_cell(&strings, 0, &b), compare(&strings.scalar(0), &b), "{b:?}");
            assert_eq!(compare_cell(&strings, 1, &b), compare(&Scalar::Null, &b), "{b:?}");
        }
        for b in [Scalar::Timestamp(6), Scalar::Timestamp(7), Scalar::Bigint(8), Scalar::Null] {
            assert_eq!(compare_cell(&ints, 0, &b), compare(&ints.scalar(0), &b), "{b:?}");
        }
        // A decimal ORDER BY: 1.25 against kept values of its column.
        let decimals = Column::ints(DataType::Decimal(9, 2), vec![125]);
        for b in [Scalar::Decimal(124, 2), Scalar::Decimal(125, 2), Scalar::Decimal(-3, 2), Scalar::Null] {
            assert_eq!(compare_cell(&decimals, 0, &b), compare(&decimals.scalar(0), &b), "{b:?}");
        }
        assert_eq!(compare(&Scalar::Decimal(125, 2), &Scalar::Decimal(124, 2)), Ordering::Greater);
    }

    #[test]
    fn a_kept_row_checkpoints_as_a_list_of_scalars_did_and_reads_back() {
        use super::{Kept, KeptIn};
        use sluice_plan::row_bytes;
        /// The layout of checkpoints written before rows were bytes.
        #[derive(serde::Serialize)]
        struct Before {
            order: Scalar,
            row: Vec<Scalar>,
        }
        let source = vec![Scalar::Bigint(7), Scalar::Null, Scalar::String("url".into()), Scalar::Double(-0.0)];
        let then = vec![Scalar::String("b".into()), Scalar::Timestamp(5)];
        let mut row = Vec::new();
        for v in &source {
            row_bytes::push(v.borrowed(), &mut row);
        }
        let kept = Kept { order: Scalar::Timestamp(9), then: then.clone().into(), row: row.into() };
        let before = Before { order: Scalar::Timestamp(9), row: source.iter().chain(&then).cloned().collect() };
        let bytes = postcard::to_allocvec(&kept).unwrap();
        assert_eq!(bytes, postcard::to_allocvec(&before).unwrap());
        let back = postcard::from_bytes::<KeptIn>(&bytes).unwrap().into_kept(source.len());
        assert_eq!(back.order, kept.order);
        assert_eq!(back.then, kept.then);
        assert_eq!(back.row, kept.row);
    }

    #[test]
    fn null_sorts_after_every_value_as_in_postgresql() {
        assert_eq!(compare(&Scalar::Null, &Scalar::Bigint(i64::MAX)), Ordering::Greater);
        assert_eq!(compare(&Scalar::Double(f64::NEG_INFINITY), &Scalar::Null), Ordering::Less);
        assert_eq!(compare(&Scalar::String("b".into()), &Scalar::String("ab".into())), Ordering::Greater);
        assert_eq!(compare(&Scalar::Timestamp(5), &Scalar::Timestamp(5)), Ordering::Equal);
    }
}

#[cfg(test)]
mod emission {
    use super::TopNOperator;
    use crate::operator::{BatchInput, Operator, OperatorOutput};
    use sluice_plan::{Batch, Column, DataType, PhysExpr, Scalar, Selection, TopNPlan};

    /// Top 3 by price per auction, over (auction, price).
    fn operator() -> TopNOperator {
        let column = |index| PhysExpr::Column { index, data_type: DataType::Bigint };
        let plan = TopNPlan {
            partition_by: vec![column(0)],
            order_by: column(1),
            descending: true,
            limit: 3,
            then_by: vec![],
        };
        TopNOperator::new(&plan, &[true, true])
    }

    /// Runs one batch of (auction, price): the (auction, price, rank) rows
    /// emitted.
    fn run(op: &mut TopNOperator, rows: &[(i64, i64)], per_record: bool) -> Vec<(i64, i64, i64)> {
        let (auctions, prices) = rows.iter().copied().unzip();
        let batch = Batch::new(
            vec![Column::ints(DataType::Bigint, auctions), Column::ints(DataType::Bigint, prices)],
            rows.len(),
        );
        let zeros = vec![0; rows.len()];
        let input = BatchInput {
            batch: &batch,
            selection: Selection::All(rows.len()),
            event_times: &zeros,
            watermark_before: &zeros,
            per_record,
            emit_changes: true,
            upstreams: &[],
        };
        let mut out = Batch::empty(&[DataType::Bigint; 3]);
        let (mut columns, mut late) = (Vec::new(), Vec::new());
        op.process(&input, &mut OperatorOutput::new(&mut out, &mut columns, &mut late)).unwrap();
        let int = |c: usize, r| match out.columns[c].scalar(r) {
            Scalar::Bigint(v) => v,
            other => panic!("{other:?}"),
        };
        (0..out.len).map(|r| (int(0, r), int(1, r), int(2, r))).collect()
    }

    /// A hot key taking many rows in one batch emits each rank it changed
    /// once, holding the row it ends the batch with; per record, every row
    /// that enters emits the ranks it pushed down. The last row per
    /// (key, rank) is the same.
    #[test]
    fn coalesced_ranks_are_emitted_once_a_batch_as_the_batch_left_them() {
        let first = [(7, 10), (7, 20), (8, 5), (7, 30), (7, 1), (7, 25)];
        let second = [(8, 4), (7, 22), (7, 21), (8, 6)];
        let mut coalesced = operator();
        assert_eq!(
            run(&mut coalesced, &first, false),
            [(7, 30, 1), (7, 25, 2), (7, 20, 3), (8, 5, 1)],
            "auction 7's ranks 1–3 and auction 8's rank 1, in the order the batch first changed them"
        );
        // Auction 8 changed first (rank 2, then rank 1); 22 takes auction
        // 7's rank 3 and 21 ranks below its top 3.
        assert_eq!(run(&mut coalesced, &second, false), [(8, 6, 1), (8, 5, 2), (8, 4, 3), (7, 22, 3)]);
        let mut per_record = operator();
        let rows: Vec<_> = [run(&mut per_record, &first, true), run(&mut per_record, &second, true)].concat();
        assert_eq!(rows.len(), 14, "{rows:?}");
        let last = |rows: &[(i64, i64, i64)]| {
            rows.iter().map(|&(k, v, rank)| ((k, rank), v)).collect::<std::collections::BTreeMap<_, _>>()
        };
        let mut again = operator();
        let coalesced_rows: Vec<_> = [run(&mut again, &first, false), run(&mut again, &second, false)].concat();
        assert_eq!(last(&coalesced_rows), last(&rows));
    }
}
