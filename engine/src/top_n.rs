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
//! Keys are found through the same group table as aggregates (no
//! allocation for a key already seen); a row is copied into state only
//! when it enters a top N.

use std::borrow::Cow;
use std::cmp::Ordering;

use serde::{Deserialize, Serialize};

use crate::Error;
use crate::group_keys::{GroupTable, GroupTableState, KeyEncoder};
use crate::operator::{BatchInput, Operator, OperatorOutput, OperatorTag, StateSize, read_state, write_state};
use crate::pages::{
    DirtyPages, TableHead, check_complete, page_groups, page_keys, read_page, restore_page_keys, write_page,
};
use sluice_plan::{Batch, Column, ColumnData, Scalar, TopNPlan, eval};

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Kept {
    order: Scalar,
    /// The source columns the query reads (others are NULL), then the
    /// values of the ORDER BY keys after the first (in the row, so a
    /// checkpoint of a plan without them reads as before).
    row: Vec<Scalar>,
}

#[derive(Debug)]
pub struct TopNOperator {
    plan: TopNPlan,
    limit: usize,
    used: Vec<bool>,
    table: GroupTable,
    /// Per key id: its best rows, best first.
    kept: Vec<Vec<Kept>>,
    rows: usize,
    /// What the kept rows' strings hold on the heap, kept as rows come and go.
    heap: usize,
    key: Vec<u8>,
    /// Pages changed since the last incremental checkpoint.
    dirty: DirtyPages,
}

#[derive(Serialize, Deserialize)]
struct TopNState {
    table: GroupTableState,
    kept: Vec<Vec<Kept>>,
}

/// The keys of one page of an incremental checkpoint and their rows,
/// written by reference...
#[derive(Serialize)]
struct TopNPageRef<'a> {
    keys: Vec<Option<Vec<u8>>>,
    kept: Vec<&'a [Kept]>,
}

/// ...and read back owned (the two encode identically).
#[derive(Deserialize)]
struct TopNPage {
    keys: Vec<Option<Vec<u8>>>,
    kept: Vec<Vec<Kept>>,
}

impl Kept {
    /// What its strings hold on the heap, each with its allocator header.
    fn heap_bytes(&self) -> usize {
        std::iter::once(&self.order)
            .chain(&self.row)
            .map(|v| if let Scalar::String(s) = v { s.capacity() + 16 } else { 0 })
            .sum()
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
            table: GroupTable::default(),
            kept: Vec::new(),
            rows: 0,
            heap: 0,
            key: Vec::new(),
            dirty: DirtyPages::default(),
        }
    }

    /// Whether row `r` of the ORDER BY columns (the first key's, then the
    /// others') ranks strictly ahead of `old`: the first key that does not
    /// tie decides.
    fn ahead(&self, order: &Column, then: &[Cow<'_, Column>], r: usize, old: &Kept) -> bool {
        let directed = |o: Ordering, descending: bool| if descending { o.reverse() } else { o };
        let mut o = directed(compare_cell(order, r, &old.order), self.plan.descending);
        let kept_then = old.row.get(self.used.len()..).unwrap_or_default();
        for ((key, column), value) in self.plan.then_by.iter().zip(then).zip(kept_then) {
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
        for (c, value) in kept.row.iter().take(width).enumerate() {
            out.columns[c].push_scalar(value)?;
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
        for r in rows {
            self.key.clear();
            encoder.encode(r, &mut self.key);
            // A new key's row always enters its (empty) top N, which marks
            // its page below.
            let (gid, _) = self.table.find_or_insert(&self.key);
            let gid = gid as usize;
            if self.kept.len() <= gid {
                self.kept.resize_with(gid + 1, Vec::new);
            }
            let list = &self.kept[gid];
            let at = list.iter().position(|k| self.ahead(&order, &then, r, k)).unwrap_or(list.len());
            if at >= self.limit {
                continue;
            }
            // Only a row that enters the top N is copied into state.
            let value = order.scalar(r);
            let row = self
                .used
                .iter()
                .enumerate()
                .map(|(c, u)| if *u { batch.columns[c].scalar(r) } else { Scalar::Null })
                .chain(then.iter().map(|c| c.scalar(r)))
                .collect();
            self.dirty.mark(u32::try_from(gid).unwrap_or(u32::MAX));
            let kept = Kept { order: value, row };
            self.heap += kept.heap_bytes();
            let list = &mut self.kept[gid];
            list.insert(at, kept);
            if list.len() > self.limit {
                if let Some(out) = list.pop() {
                    self.heap -= out.heap_bytes();
                }
            } else {
                self.rows += 1;
            }
            for rank in at..self.kept[gid].len() {
                self.emit(gid, rank, out.rows)?;
            }
        }
        Ok(())
    }

    fn state_size(&self) -> StateSize {
        // Per key its list (a vector in the outer one, and an allocation
        // of its own); per row its slot in the list and its cells, as
        // allocated (a 16-byte allocator header each), strings counted as
        // they come and go (`heap`).
        let per_row = size_of::<Kept>() + 16 + (self.used.len() + self.plan.then_by.len()) * size_of::<Scalar>();
        let per_key = size_of::<Vec<Kept>>() + 16;
        let bytes = self.table.heap_bytes() + self.table.live() * per_key + self.rows * per_row + self.heap;
        StateSize { bytes, entries: self.rows }
    }

    fn snapshot(&self, out: Vec<u8>) -> Result<Vec<u8>, Error> {
        write_state(OperatorTag::TopN, &TopNState { table: self.table.to_state(), kept: self.kept.clone() }, out)
    }

    fn restore(&mut self, bytes: &[u8]) -> Result<(), Error> {
        let state: TopNState = read_state(OperatorTag::TopN, bytes)?;
        self.table = GroupTable::from_state(state.table);
        self.rows = state.kept.iter().map(Vec::len).sum();
        self.heap = state.kept.iter().flatten().map(Kept::heap_bytes).sum();
        self.kept = state.kept;
        self.dirty.clear();
        Ok(())
    }

    fn paged(&self) -> bool {
        true
    }

    fn snapshot_head(&self, out: Vec<u8>) -> Result<Vec<u8>, Error> {
        write_state(OperatorTag::TopNHead, &TableHead::of(&self.table), out)
    }

    fn restore_head(&mut self, bytes: &[u8]) -> Result<(), Error> {
        let head: TableHead = read_state(OperatorTag::TopNHead, bytes)?;
        self.kept = vec![Vec::new(); head.groups as usize];
        self.table = head.table();
        self.rows = 0;
        self.heap = 0;
        self.dirty.clear();
        Ok(())
    }

    fn take_dirty_pages(&mut self, all: bool, out: &mut Vec<u32>) {
        self.dirty.take(all, self.table.capacity(), out);
    }

    fn snapshot_page(&self, page: u32, out: Vec<u8>) -> Result<Vec<u8>, Error> {
        let groups = page_groups(page, self.table.capacity());
        let kept = groups.clone().map(|g| self.kept.get(g).map_or(&[][..], Vec::as_slice)).collect();
        let page = TopNPageRef { keys: page_keys(&self.table, groups), kept };
        write_page(&page, out)
    }

    fn restore_page(&mut self, page: u32, bytes: &[u8]) -> Result<(), Error> {
        let p: TopNPage = read_page(page, bytes)?;
        restore_page_keys(&mut self.table, page, &p.keys)?;
        let start = page_groups(page, usize::MAX).start;
        for (i, rows) in p.kept.into_iter().enumerate() {
            if let Some(slot) = self.kept.get_mut(start + i) {
                self.rows += rows.len();
                self.heap += rows.iter().map(Kept::heap_bytes).sum::<usize>();
                *slot = rows;
            }
        }
        Ok(())
    }

    fn pages_restored(&mut self) -> Result<(), Error> {
        check_complete(&self.table)
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
    fn null_sorts_after_every_value_as_in_postgresql() {
        assert_eq!(compare(&Scalar::Null, &Scalar::Bigint(i64::MAX)), Ordering::Greater);
        assert_eq!(compare(&Scalar::Double(f64::NEG_INFINITY), &Scalar::Null), Ordering::Less);
        assert_eq!(compare(&Scalar::String("b".into()), &Scalar::String("ab".into())), Ordering::Greater);
        assert_eq!(compare(&Scalar::Timestamp(5), &Scalar::Timestamp(5)), Ordering::Equal);
    }
}
