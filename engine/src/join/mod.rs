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
//!
//! Without a time bound (`JoinPlan::UNBOUNDED`, an INNER join only) it is
//! a regular join, as Flink's: every row is kept for good, each pair is
//! emitted when its second row arrives, nothing is late, and the output
//! has no watermark. Its state grows with its inputs (`stateMemoryLimit`
//! bounds it); an outer regular join would have to retract the
//! NULL-extended rows it emitted, so is not planned.

use std::borrow::Cow;
use std::cmp::Reverse;
use std::collections::BinaryHeap;

use crate::Error;
use crate::aggregate::int_values;
use crate::operator::{BatchInput, Closed, OUTPUT_CHUNK_ROWS, Operator, OperatorOutput, StateSize};
use crate::state::group_keys::{BLOCK, GroupTable, KeyEncoder};
use crate::state::page_due::PageDue;
use crate::state::pages::PAGE_GROUPS;
use crate::state::{PageIs, PagedGroups, PagedState};
use sluice_plan::{Batch, Column, ColumnData, DataType, JoinPlan, PhysExpr, ScalarRef, eval};

/// The kept rows of one side, column by column in arrival order: keeping
/// a row copies its cells into these columns (no allocation per row), and
/// a row is its slot. Let-go slots stay until at least half of the store
/// is let go; then a compaction drops them and renumbers the rest.
#[derive(Debug)]
pub(crate) struct Store {
    pub(crate) columns: Vec<Column>,
    pub(crate) time: Vec<i64>,
    matched: Vec<bool>,
    /// Slots not let go.
    pub(crate) live: usize,
}

impl Store {
    pub(crate) fn new(types: &[DataType]) -> Self {
        Self {
            columns: types.iter().map(|t| Column::with_capacity(*t, 0)).collect(),
            time: Vec::new(),
            matched: Vec::new(),
            live: 0,
        }
    }

    /// Keeps row `r` of `columns` (the side's columns of a batch).
    pub(crate) fn push(&mut self, columns: &[Column], r: usize, time: i64) -> Result<u32, Error> {
        for (kept, column) in self.columns.iter_mut().zip(columns) {
            kept.push_from(column, r)?;
        }
        self.time.push(time);
        self.matched.push(false);
        self.live += 1;
        Ok(u32::try_from(self.time.len() - 1).unwrap_or(u32::MAX))
    }

    /// Keeps a row given as its cells (restoring a checkpoint).
    pub(crate) fn push_values<'v>(
        &mut self,
        row: impl IntoIterator<Item = ScalarRef<'v>>,
        time: i64,
    ) -> Result<u32, Error> {
        for (kept, value) in self.columns.iter_mut().zip(row) {
            kept.push_value(value)?;
        }
        self.time.push(time);
        self.matched.push(false);
        self.live += 1;
        Ok(u32::try_from(self.time.len() - 1).unwrap_or(u32::MAX))
    }

    pub(crate) fn clear(&mut self) {
        self.columns.iter_mut().for_each(Column::clear);
        self.time.clear();
        self.matched.clear();
        self.live = 0;
    }

    /// The bytes of its slots, let go or not (see `Column::written_bytes`:
    /// what of its vectors' room is written, so held in memory).
    pub(crate) fn bytes(&self) -> usize {
        self.columns.iter().map(Column::written_bytes).sum::<usize>() + self.time.len() * 9
    }

    pub(crate) fn row(&self, slot: u32) -> Row<'_> {
        Row { columns: &self.columns, index: slot as usize, time: self.time[slot as usize] }
    }

    /// Keeps only the `live` slots, in order; returns each old slot's new one.
    pub(crate) fn compact(&mut self, live: &[u32]) -> Vec<u32> {
        let mut moved = vec![u32::MAX; self.time.len()];
        for (new, &old) in live.iter().enumerate() {
            moved[old as usize] = u32::try_from(new).unwrap_or(u32::MAX);
        }
        for c in &mut self.columns {
            c.retain_rows(live);
        }
        sluice_plan::retain_rows(&mut self.time, live);
        sluice_plan::retain_rows(&mut self.matched, live);
        moved
    }
}

/// One side's row: a row of some columns (a store's, or the input's).
#[derive(Clone, Copy)]
pub(crate) struct Row<'a> {
    pub(crate) columns: &'a [Column],
    pub(crate) index: usize,
    pub(crate) time: i64,
}

/// A candidate pair found in a batch: the left and right rows' slots.
#[derive(Debug, Clone, Copy)]
struct Pair {
    left: u32,
    right: u32,
}

#[derive(Debug)]
pub struct JoinOperator {
    plan: JoinPlan,
    /// Groups in pages: their keys, pages changed since the last
    /// checkpoint, and what spilling keeps (`crate::state`).
    paged: PagedState,
    /// Left side, right side.
    stores: [Store; 2],
    /// Per key id, per side: the slots of its kept rows, in arrival order.
    keys: Vec<[Vec<u32>; 2]>,
    /// `(time at which a kept row of the key may be let go, key)`, the key
    /// by its id in checkpoints (`Spilling::stable`): the watermark visits
    /// only keys that have something to let go.
    expiry: BinaryHeap<Reverse<(i64, u32)>>,
    /// Per key id in memory, the earliest time of an entry of it in
    /// `expiry`: a key has one entry, at or before its first row's time
    /// to go — a row that may go later pushes none, and the watermark,
    /// once it let a key's rows go, schedules the key at its next. (An
    /// entry per row kept the heap as large as the rows, a key on disk
    /// included, and read the key back once per row.)
    scheduled: Vec<Option<i64>>,
    /// For keys on disk, their page's earliest time for a row to go
    /// (`JoinOperator::fold_expiry` moves their entries there).
    on_disk: PageDue,
    pairs: Vec<Pair>,
    /// Candidate pairs, joined, when a residual condition must pass first.
    candidates: Batch,
    passed: Vec<bool>,
}

impl JoinOperator {
    /// `types`: the source (= intermediate) schema's column types.
    pub fn new(plan: &JoinPlan, types: &[DataType]) -> Self {
        let side = |(start, end): (usize, usize)| Store::new(types.get(start..end).unwrap_or_default());
        Self {
            plan: plan.clone(),
            paged: PagedState::default(),
            stores: [side(plan.left), side(plan.right)],
            keys: Vec::new(),
            expiry: BinaryHeap::new(),
            scheduled: Vec::new(),
            on_disk: PageDue::default(),
            pairs: Vec::new(),
            candidates: Batch::new(types.iter().map(|t| Column::with_capacity(*t, 0)).collect(), 0),
            passed: Vec::new(),
        }
    }

    /// When a kept row of the side may be let go: once the watermark is
    /// past it, no row of the other side still to come can match it.
    fn expires(plan: &JoinPlan, right: bool, time: i64) -> i64 {
        if right { time.saturating_sub(plan.lower) } else { time.saturating_add(plan.upper) }
    }

    /// A kept left row's `until` column (`JoinPlan::until`): past it, no
    /// right row still to come can match it. NULL matches nothing: at once.
    fn until(&self, right: bool, slot: u32) -> Option<i64> {
        let column = self.plan.until?.checked_sub(self.plan.left.0).filter(|_| !right)?;
        let kept = self.stores[0].columns.get(column)?;
        let slot = slot as usize;
        Some(match &kept.data {
            ColumnData::Int(v) if kept.is_valid(slot) => v[slot],
            _ => i64::MIN,
        })
    }

    /// Whether a left row at `left` and a right row at `right` are in range.
    fn in_range(&self, left: i64, right: i64) -> bool {
        let d = i128::from(right) - i128::from(left);
        d >= i128::from(self.plan.lower) && d <= i128::from(self.plan.upper)
    }

    /// Files a kept row's slot under its key (`gid`, `id` in checkpoints),
    /// in time order (rows mostly arrive in order, so this is mostly an
    /// append), with the time it may be let go. Time order lets a probe
    /// find the rows in range by binary search, however many rows of its
    /// key are kept — when one side runs far ahead of the other, a key can
    /// hold many.
    fn file(&mut self, gid: u32, id: u32, right: bool, slot: u32, time: i64) {
        let g = gid as usize;
        if self.keys.len() <= g {
            self.keys.resize_with(g + 1, Default::default);
        }
        if self.scheduled.len() <= g {
            self.scheduled.resize(g + 1, None);
        }
        let times = &self.stores[usize::from(right)].time;
        let list = &mut self.keys[g][usize::from(right)];
        let at = list.partition_point(|&s| times[s as usize] <= time);
        list.insert(at, slot);
        if !self.plan.unbounded() {
            let at = match self.until(right, slot) {
                Some(until) => until,
                None => Self::expires(&self.plan, right, time),
            };
            // An entry at or before this time lets this row go with the
            // others, or schedules the key again.
            self.schedule(g, id, at);
        }
    }

    /// Compacts a side's store once most of its slots were let go, and
    /// they are at least a quarter as many as the keys: a compaction visits
    /// every key, so one side with few rows kept (q4's bids, let go as soon
    /// as the watermark passes them) beside many keys (its auctions) would
    /// otherwise pay for all the keys every thousand rows.
    fn compact(&mut self, right: bool) {
        let store = &self.stores[usize::from(right)];
        let gone = store.time.len() - store.live;
        if gone < 1024 || gone < store.live || gone < self.keys.len() / 4 {
            return;
        }
        let mut live: Vec<u32> = self.keys.iter().flat_map(|k| k[usize::from(right)].iter().copied()).collect();
        live.sort_unstable();
        let moved = self.stores[usize::from(right)].compact(&live);
        for k in &mut self.keys {
            for slot in &mut k[usize::from(right)] {
                *slot = moved[*slot as usize];
            }
        }
    }
}

/// Where a joined row's parts go, in the layout every join's rows share:
/// the left side's columns, the right side's, which side, the event time.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Joined {
    pub(crate) left: (usize, usize),
    pub(crate) right: (usize, usize),
    pub(crate) side: usize,
    pub(crate) time: usize,
}

/// Appends a joined row (either side may be absent: NULL-extended) at
/// event time `time`; the caller fills any column beyond the layout.
pub(crate) fn push_joined_at(
    at: Joined,
    left: Option<Row<'_>>,
    right: Option<Row<'_>>,
    time: i64,
    out: &mut Batch,
) -> Result<(), Error> {
    for ((start, end), row) in [(at.left, left), (at.right, right)] {
        match row {
            Some(row) => {
                for (c, column) in (start..end).zip(row.columns) {
                    out.columns[c].push_from(column, row.index)?;
                }
            }
            None => (start..end).for_each(|c| out.columns[c].push_null()),
        }
    }
    out.columns[at.side].push_bool(left.is_none())?;
    out.columns[at.time].push_i64(time)?;
    out.len += 1;
    Ok(())
}

/// Appends a joined row at the later of its sides' event times.
fn push_joined(plan: &JoinPlan, left: Option<Row<'_>>, right: Option<Row<'_>>, out: &mut Batch) -> Result<(), Error> {
    let at = Joined { left: plan.left, right: plan.right, side: plan.side, time: plan.time };
    let time = [left, right].into_iter().flatten().map(|r| r.time).max().unwrap_or(0);
    push_joined_at(at, left, right, time, out)
}

/// Evaluates a join's residual condition over candidate joined rows:
/// `passed[r]` is whether row `r` passes (NULL does not).
pub(crate) fn residual_passes(residual: &PhysExpr, candidates: &Batch, passed: &mut Vec<bool>) -> Result<(), Error> {
    let n = candidates.len;
    let value = eval(residual, candidates)?.into_column(n);
    passed.clear();
    match &value.data {
        ColumnData::Bool(b) => passed.extend((0..n).map(|r| value.is_valid(r) && b[r])),
        _ => passed.resize(n, false),
    }
    Ok(())
}

/// Appends a row that matched nothing, if its side keeps those.
fn push_unmatched(plan: &JoinPlan, right: bool, row: Row<'_>, out: &mut Batch) -> Result<(), Error> {
    if !plan.kind.keeps_unmatched(right) {
        return Ok(());
    }
    if right { push_joined(plan, None, Some(row), out) } else { push_joined(plan, Some(row), None, out) }
}

impl JoinOperator {
    /// Joins the batch's candidate pairs into `out`, marking both rows of
    /// every pair that passes the residual condition as matched.
    fn emit_pairs(&mut self, out: &mut Batch) -> Result<(), Error> {
        let [left, right] = &mut self.stores;
        let Some(residual) = &self.plan.residual else {
            for p in &self.pairs {
                push_joined(&self.plan, Some(left.row(p.left)), Some(right.row(p.right)), out)?;
                left.matched[p.left as usize] = true;
                right.matched[p.right as usize] = true;
            }
            self.pairs.clear();
            return Ok(());
        };
        let target = &mut self.candidates;
        target.clear();
        for p in &self.pairs {
            push_joined(&self.plan, Some(left.row(p.left)), Some(right.row(p.right)), target)?;
        }
        residual_passes(residual, target, &mut self.passed)?;
        for (r, (p, ok)) in self.pairs.iter().zip(&self.passed).enumerate() {
            if *ok {
                for (column, from) in out.columns.iter_mut().zip(&target.columns) {
                    column.push_from(from, r)?;
                }
                out.len += 1;
                left.matched[p.left as usize] = true;
                right.matched[p.right as usize] = true;
            }
        }
        self.pairs.clear();
        Ok(())
    }
}

/// A join's key expressions over a batch, column by column.
pub(crate) fn eval_keys<'b>(exprs: &[PhysExpr], batch: &'b Batch) -> Result<Vec<Cow<'b, Column>>, Error> {
    exprs.iter().map(|e| Ok(eval(e, batch)?.into_column(batch.len))).collect()
}

pub(crate) fn bools(column: &Column) -> Option<&[bool]> {
    match &column.data {
        ColumnData::Bool(b) => Some(b),
        _ => None,
    }
}

impl Operator for JoinOperator {
    fn process(&mut self, input: &BatchInput<'_>, out: &mut OperatorOutput<'_>) -> Result<(), Error> {
        let batch = input.batch;
        let internal = |what: &str| Error::Internal(format!("join input without its {what} column"));
        let side = batch.columns.get(self.plan.side).ok_or_else(|| internal("side"))?;
        let sides = bools(side).ok_or_else(|| internal("side"))?;
        let times = batch.columns.get(self.plan.time).and_then(int_values).ok_or_else(|| internal("time"))?;
        let left_keys = eval_keys(&self.plan.left_keys, batch)?;
        let right_keys = eval_keys(&self.plan.right_keys, batch)?;
        let left_refs: Vec<&Column> = left_keys.iter().map(AsRef::as_ref).collect();
        let right_refs: Vec<&Column> = right_keys.iter().map(AsRef::as_ref).collect();
        let encoders = [KeyEncoder::new(&left_refs), KeyEncoder::new(&right_refs)];
        let (left_columns, right_columns) = (
            batch.columns.get(self.plan.left.0..self.plan.left.1).unwrap_or_default(),
            batch.columns.get(self.plan.right.0..self.plan.right.1).unwrap_or_default(),
        );
        let mut rows = Vec::with_capacity(input.selection.len());
        input.selection.for_each(|r| rows.push(r));
        let unbounded = self.plan.unbounded();
        // A regular join lets nothing go, so a row below the watermark
        // still finds every partner: it is not late.
        let late = |r: usize| !unbounded && input.watermark_before.get(r).is_some_and(|w| times[r] < *w);
        let right_of = |r: usize| side.is_valid(r) && sides[r];
        // NULL equals nothing: a row with a NULL key can never match.
        let keyed = |r: usize| {
            let key_columns = if right_of(r) { &right_refs } else { &left_refs };
            key_columns.iter().all(|c| c.is_valid(r))
        };
        self.with_spilling(|s, op| {
            s.find_keys(op, &rows, |r, key| {
                let filed = !late(r) && keyed(r);
                if filed {
                    encoders[usize::from(right_of(r))].encode(r, key);
                }
                filed
            })
        })?;
        for (i, r) in rows.into_iter().enumerate() {
            let right = right_of(r);
            let t = times[r];
            if late(r) {
                out.late.push(u32::try_from(r).unwrap_or(u32::MAX));
                continue;
            }
            let columns = if right { right_columns } else { left_columns };
            if !keyed(r) {
                push_unmatched(&self.plan, right, Row { columns, index: r, time: t }, out.rows)?;
                continue;
            }
            let gid = self.paged.spilling.gids[i];
            let id = self.paged.spilling.stable(gid);
            // Every row that probes its key is filed: the rows whose
            // matched flag it sets are of this key too.
            self.paged.dirty.mark(id);
            let new = self.stores[usize::from(right)].push(columns, r, t)?;
            self.file(gid, id, right, new, t);
            // The other side's rows whose time is in range, from the first.
            let (lower, upper) = (self.plan.lower, self.plan.upper);
            let first = if right { t.saturating_sub(upper) } else { t.saturating_add(lower) };
            // A left row bounded by its column (`b.ts BETWEEN a.ts AND
            // a.until`) stops at the column: the right rows past it would
            // all fail the residual, and when the right side runs ahead of
            // the left every kept right row would be a candidate for every
            // left row (quadratic in the rows kept).
            let last = if right { i64::MAX } else { self.until(false, new).unwrap_or(i64::MAX) };
            let mut at = {
                let other = &self.stores[usize::from(!right)];
                self.keys[gid as usize][usize::from(!right)].partition_point(|&s| other.time[s as usize] < first)
            };
            while let Some(&slot) = self.keys[gid as usize][usize::from(!right)].get(at) {
                let time = self.stores[usize::from(!right)].time[slot as usize];
                let (l, rt) = if right { (time, t) } else { (t, time) };
                if time > last || !self.in_range(l, rt) {
                    break;
                }
                let (left, right) = if right { (slot, new) } else { (new, slot) };
                self.pairs.push(Pair { left, right });
                at += 1;
                // A key with many rows a side pairs quadratically: what a
                // batch joins goes on in chunks, never held whole.
                if self.pairs.len() >= OUTPUT_CHUNK_ROWS {
                    self.emit_pairs(out.rows)?;
                    out.drain_if_full()?;
                }
            }
        }
        self.emit_pairs(out.rows)
    }

    fn on_watermark(&mut self, watermark: i64, _emit: bool, out: &mut Closed<'_>) -> Result<(), Error> {
        let mut due = Vec::new();
        loop {
            let next = self.expiry.peek().map(|e| e.0).filter(|&(at, _)| at < watermark);
            if self.on_disk.first().is_some_and(|at| at < watermark && next.is_none_or(|(n, _)| at <= n)) {
                // Pages on disk (a run at most) come back; their keys,
                // filed again as they are read, are visited by their own
                // entries.
                due.clear();
                self.on_disk.take_run(watermark - 1, &mut due);
                for &page in &due {
                    if self.paged.spilling.pages.as_ref().is_some_and(|m| m.where_is(page) == PageIs::Spilled) {
                        self.with_spilling(|s, op| s.read_back(op, page))?;
                    }
                }
                continue;
            }
            let Some((at, id)) = next else { break };
            self.expiry.pop();
            // A key on disk comes back to let its rows go.
            let gid = match self.paged.spilling.pages.as_ref().map(|m| m.where_is(id / PAGE_GROUPS)) {
                None => id,
                Some(PageIs::InBlock(_) | PageIs::Spilled) => self.with_spilling(|s, op| s.slot_of(op, id))?,
                Some(PageIs::Unused | PageIs::Missing) => continue,
            };
            let g = gid as usize;
            if g >= self.keys.len() {
                continue;
            }
            if self.scheduled.get(g) == Some(&Some(at)) {
                self.scheduled[g] = None;
            }
            self.paged.dirty.mark(id);
            for right in [false, true] {
                if !right && self.plan.until.is_some() {
                    // Let go by their column, not their time: any of them.
                    // (INNER only: nothing comes out unmatched.)
                    let mut list = std::mem::take(&mut self.keys[g][0]);
                    let before = list.len();
                    list.retain(|&slot| self.until(false, slot).is_none_or(|u| u >= watermark));
                    self.stores[0].live -= before - list.len();
                    self.keys[g][0] = list;
                    continue;
                }
                let store = &mut self.stores[usize::from(right)];
                let list = &mut self.keys[g][usize::from(right)];
                // In time order, so the rows to let go are a prefix.
                let gone =
                    list.partition_point(|&s| Self::expires(&self.plan, right, store.time[s as usize]) < watermark);
                for &slot in &list[..gone] {
                    if !store.matched[slot as usize] {
                        push_unmatched(&self.plan, right, store.row(slot), out.rows)?;
                        out.drain_if_full()?;
                    }
                }
                list.drain(..gone);
                store.live -= gone;
            }
            if self.keys[g].iter().all(Vec::is_empty) {
                // A key that takes the id next schedules itself afresh.
                if let Some(due) = self.scheduled.get_mut(g) {
                    *due = None;
                }
                self.paged.spilling.remove_group(&mut self.paged.table, gid);
            } else if let Some(next) = self.next_expiry(g) {
                self.schedule(g, id, next);
            }
        }
        self.compact(false);
        self.compact(true);
        Ok(())
    }

    /// A joined row carries the left row's time. A left row is kept until
    /// the watermark passes its time + the upper bound, and may join (or,
    /// in an outer join, come out unmatched) until then: so what comes out
    /// from now on is at least `watermark − upper`. A row joining a kept
    /// left row arrives at or above the watermark, so its partner's time is
    /// at least `watermark − upper` too.
    ///
    /// A regular join's rows have no watermark (as in Flink, its output
    /// has no time attribute): a row kept for good can join at any time.
    fn output_watermark(&self, watermark: i64) -> i64 {
        if self.plan.unbounded() {
            return i64::MIN;
        }
        watermark.saturating_sub(self.plan.upper.max(0))
    }

    fn finish(&mut self, _emit: bool, out: &mut Closed<'_>) -> Result<(), Error> {
        // An outer join's unmatched rows on disk come back, a page at a
        // time, to be emitted.
        let unmatched = self.plan.kind.keeps_unmatched(false) || self.plan.kind.keeps_unmatched(true);
        if unmatched && let Some(pages) = &self.paged.spilling.pages {
            let spilled: Vec<u32> = (0..pages.pages()).filter(|&p| pages.where_is(p) == PageIs::Spilled).collect();
            for page in spilled {
                let block = self.with_spilling(|s, op| s.slot_of(op, page * PAGE_GROUPS))? / PAGE_GROUPS;
                let start = block as usize * BLOCK;
                self.push_unmatched_of(start..start + BLOCK, out)?;
                self.drop_groups(start..start + BLOCK);
                if let Some(pages) = &mut self.paged.spilling.pages {
                    pages.evicted(block, false);
                }
                self.paged.table.evict_blocks(&[block]);
            }
        }
        self.push_unmatched_of(0..self.keys.len(), out)?;
        self.stores.iter_mut().for_each(Store::clear);
        self.keys.clear();
        self.paged.table = GroupTable::default();
        self.expiry.clear();
        self.scheduled.clear();
        self.on_disk.clear();
        self.paged.spilling.forget()
    }

    fn state_size(&self) -> StateSize {
        StateSize {
            bytes: self.own_bytes() + self.paged.spilling.heap_bytes(),
            entries: self.stores[0].live + self.stores[1].live,
        }
    }

    fn snapshot(&self, out: Vec<u8>) -> Result<Vec<u8>, Error> {
        if self.paged.spilling.spilled_any() {
            // It spilled: its checkpoints are heads and pages.
            return Err(Error::Internal("a whole checkpoint of a join that spilled".into()));
        }
        self.write_whole(out)
    }

    fn restore(&mut self, bytes: &[u8]) -> Result<(), Error> {
        self.read_whole(bytes)
    }

    fn paged(&self) -> Option<&dyn crate::state::Paged> {
        Some(self)
    }

    fn paged_mut(&mut self) -> Option<&mut dyn crate::state::Paged> {
        Some(self)
    }
}

impl JoinOperator {
    /// The bytes its state holds in memory, what spilling keeps aside.
    fn own_bytes(&self) -> usize {
        let rows = self.stores[0].live + self.stores[1].live;
        // Per key its two slot lists (each, once it holds a row, an
        // allocation of its own: a 16-byte allocator header and room for
        // at least four slots) and its scheduled expiry; per row a slot.
        let per_key = 2 * (16 + 4 * size_of::<u32>());
        let bytes = self.stores.iter().map(Store::bytes).sum::<usize>()
            + self.keys.capacity() * size_of::<[Vec<u32>; 2]>()
            + self.scheduled.capacity() * size_of::<Option<i64>>()
            + self.expiry.capacity() * size_of::<(i64, u32)>()
            + self.on_disk.heap_bytes()
            + self.paged.table.live() * per_key
            + rows * size_of::<u32>();
        self.paged.table.heap_bytes() + bytes
    }

    /// Appends the kept rows of keys `groups` that never matched (for an
    /// outer join's end).
    fn push_unmatched_of(&self, groups: std::ops::Range<usize>, out: &mut Closed<'_>) -> Result<(), Error> {
        let n = self.keys.len();
        for entry in &self.keys[groups.start.min(n)..groups.end.min(n)] {
            for right in [false, true] {
                let store = &self.stores[usize::from(right)];
                for &slot in &entry[usize::from(right)] {
                    if !store.matched[slot as usize] {
                        push_unmatched(&self.plan, right, store.row(slot), out.rows)?;
                        out.drain_if_full()?;
                    }
                }
            }
        }
        Ok(())
    }
}

mod expiry;
mod pages;
#[cfg(test)]
mod tests;
