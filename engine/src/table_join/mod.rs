//! Stream–table join: each stream row enriched with the table row of its
//! key, INNER or LEFT.
//!
//! A table source's records are versions of rows: each is the row with its
//! primary key as of the record (an upsert), or its deletion. Both sides
//! arrive through one exchange keyed by the key (see [`TableJoinPlan`]),
//! so this partition holds every version of its keys. Two semantics:
//!
//! * **Latest** (ksqlDB's stream–table join): a stream row joins the
//!   version current when it is processed and is emitted at once. Only the
//!   current version of each key is kept. A stream row processed before the
//!   table's records that precede it in time were read joins what the table
//!   held then: the result depends on the order the exchange interleaves
//!   the sides, as it does in ksqlDB.
//! * **As of event time** (`FOR SYSTEM_TIME AS OF s.ts`, Flink's
//!   event-time temporal join): a stream row waits until the watermark — the
//!   minimum over both sides — passes its event time, then joins the version
//!   valid at that time: the last one at or before it. The result depends
//!   on event times only. A stream row below the watermark when it arrives
//!   is late (its turn has passed): reported, not joined. A table version
//!   below the watermark is still applied — rows still to come may need it,
//!   and dropping a deletion would keep a row forever. Versions older than
//!   the last one at or below the watermark are let go: no row still to
//!   come can see them.
//!
//! The rest of ON (the residual) is evaluated on the joined row; a LEFT
//! join emits a stream row whose version fails it, or that has none (a
//! deleted or never seen key, a NULL key), NULL-extended.
//!
//! Checkpoints are incremental, as a stream–stream join's: keys in pages
//! of [`PAGE_GROUPS`], each with its versions and how many stream rows
//! wait under it, a checkpoint writing the pages that changed and a head
//! with the rows waiting for the watermark (those are in flight: they go
//! once the watermark passes them). The table is the state that grows —
//! a CDC table of customers or products is as large as the database
//! holds — so its keys spill to disk past the memory budget
//! (`crate::state`): a stream row of a key on disk reads its page back,
//! the table's hot keys stay in memory.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use crate::Error;
use crate::aggregate::int_values;
use crate::join::{Joined, Row, Store, bools, eval_keys, push_joined_at, residual_passes};
use crate::operator::{BatchInput, Closed, Operator, OperatorOutput, StateSize};
use crate::state::group_keys::KeyEncoder;
use crate::state::pages::PAGE_GROUPS;
use crate::state::{PageIs, PagedGroups, PagedState};
use sluice_plan::{Batch, Column, DataType, JoinKind, TableJoinPlan, TableVersion};

/// One version of a key's table row: from `time` on, the row in `slot`
/// of the table store, or none (deleted).
#[derive(Debug, Clone, Copy)]
struct Version {
    time: i64,
    slot: Option<u32>,
}

/// A stream row waiting for the watermark (as-of joins).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
struct Waiting {
    time: i64,
    /// Arrival order, so rows of one time are joined as they came.
    seq: u64,
    slot: u32,
    /// Its key, by its id in checkpoints (`Spilling::stable`): the key
    /// may go to disk while the row waits.
    id: u32,
}

#[derive(Debug)]
pub struct TableJoinOperator {
    plan: TableJoinPlan,
    at: Joined,
    /// Groups in pages: their keys, pages changed since the last
    /// checkpoint, and what spilling keeps (`crate::state`).
    paged: PagedState,
    /// Table rows, by slot.
    rows: Store,
    /// Per key id: its versions, oldest first (one, the current, when
    /// joining the latest).
    versions: Vec<Vec<Version>>,
    /// Versions held in memory, over every key (the state's size without
    /// a walk).
    held: usize,
    /// Stream rows waiting for the watermark, by slot (as-of joins).
    stream: Store,
    waiting: BinaryHeap<Reverse<Waiting>>,
    /// Per key id, how many stream rows wait under it: such a key stays,
    /// and keeps its id, whatever its versions.
    waiting_per_key: Vec<u32>,
    /// `(time of a version that superseded another, key's id in
    /// checkpoints)`: once the watermark reaches it, the key's older
    /// versions can go.
    superseded: BinaryHeap<Reverse<(i64, u32)>>,
    seq: u64,
    key: Vec<u8>,
    /// Stream rows to emit: the stream row (batch row or stream slot),
    /// and the table slot of the version it joins.
    pairs: Vec<(u32, Option<u32>)>,
    candidates: Batch,
    passed: Vec<bool>,
    released: Vec<u32>,
    /// Keys a batch deleted (joining the latest): let go once the batch
    /// is through, so that every row of it finds its key where
    /// `Spilling::find_keys` put it.
    deleted: Vec<u32>,
    /// A restore is reading pages: each key's versions schedule the
    /// letting go of those no row can see.
    restoring: bool,
}

impl TableJoinOperator {
    /// `types`: the source (= intermediate) schema's column types.
    pub fn new(plan: &TableJoinPlan, types: &[DataType]) -> Self {
        let side = |(start, end): (usize, usize)| Store::new(types.get(start..end).unwrap_or_default());
        Self {
            plan: plan.clone(),
            at: Joined { left: plan.left, right: plan.right, side: plan.side, time: plan.time },
            paged: PagedState::default(),
            rows: side(plan.right),
            versions: Vec::new(),
            held: 0,
            stream: side(plan.left),
            waiting: BinaryHeap::new(),
            waiting_per_key: Vec::new(),
            superseded: BinaryHeap::new(),
            seq: 0,
            key: Vec::new(),
            pairs: Vec::new(),
            candidates: Batch::new(types.iter().map(|t| Column::with_capacity(*t, 0)).collect(), 0),
            passed: Vec::new(),
            released: Vec::new(),
            deleted: Vec::new(),
            restoring: false,
        }
    }

    fn as_of(&self) -> bool {
        self.plan.version == TableVersion::AsOfEventTime
    }

    /// Makes room for key `gid`'s versions and count.
    fn grow(&mut self, gid: u32) {
        let g = gid as usize;
        if self.versions.len() <= g {
            self.versions.resize_with(g + 1, Vec::new);
            self.waiting_per_key.resize(g + 1, 0);
        }
    }

    /// Files a version (`slot`: the row; `None`: a deletion) of key `gid`
    /// (`id` in checkpoints).
    fn apply(&mut self, gid: u32, id: u32, time: i64, slot: Option<u32>) {
        self.grow(gid);
        let as_of = self.as_of();
        let versions = &mut self.versions[gid as usize];
        self.held += 1;
        if !as_of {
            // Only the current version matters.
            if let Some(old) = versions.pop() {
                self.held -= 1;
                if old.slot.is_some() {
                    self.rows.live -= 1;
                }
            }
            versions.push(Version { time, slot });
            return;
        }
        // After every version of the same or an earlier time: of two
        // versions of one time, the later to arrive holds.
        let at = versions.partition_point(|v| v.time <= time);
        versions.insert(at, Version { time, slot });
        if versions.len() > 1 {
            self.superseded.push(Reverse((time, id)));
        }
    }

    /// The table slot of `gid`'s version valid at `time` (as-of), or its
    /// current one.
    fn version_at(&self, gid: u32, time: i64) -> Option<u32> {
        let versions = self.versions.get(gid as usize)?;
        if !self.as_of() {
            return versions.last()?.slot;
        }
        let after = versions.partition_point(|v| v.time <= time);
        versions.get(after.checked_sub(1)?)?.slot
    }

    /// Whether a key's versions hold some the watermark will let go: older
    /// ones, or a deletion alone.
    fn has_versions_to_go(versions: &[Version]) -> bool {
        versions.len() > 1 || versions.first().is_some_and(|v| v.slot.is_none())
    }

    /// The key of a stream row joining the latest: in memory, or read
    /// back from disk. A stream row makes no key.
    fn lookup(&mut self, key: &[u8]) -> Result<Option<u32>, Error> {
        let gid = match self.paged.table.find(key) {
            Some(gid) => Some(gid),
            None if self.paged.spilling.spilled_any() => self.with_spilling(|s, op| s.find(op, key))?,
            None => None,
        };
        if let Some(gid) = gid {
            self.paged.spilling.touch(gid);
        }
        Ok(gid)
    }

    /// The key id in memory of a key's id in checkpoints, its page read
    /// back from disk if it is there; `None` for an id no key holds.
    fn gid_of(&mut self, id: u32) -> Result<Option<u32>, Error> {
        match self.paged.spilling.pages.as_ref().map(|m| m.where_is(id / PAGE_GROUPS)) {
            None => Ok(Some(id)),
            Some(PageIs::InBlock(_) | PageIs::Spilled) => self.with_spilling(|s, op| s.slot_of(op, id)).map(Some),
            Some(PageIs::Unused | PageIs::Missing) => Ok(None),
        }
    }

    /// Lets go of key `gid`, which holds nothing a row can see: its id is
    /// handed out again, and a block of keys all gone is handed back for
    /// the next page read back.
    fn let_go(&mut self, gid: u32) {
        if self.paged.table.key_of(gid).is_none() {
            return;
        }
        self.paged.dirty.mark(self.paged.spilling.stable(gid));
        if let Some(versions) = self.versions.get_mut(gid as usize) {
            self.held -= versions.len();
            self.rows.live -= versions.iter().filter(|v| v.slot.is_some()).count();
            *versions = Vec::new();
        }
        self.paged.spilling.remove_group(&mut self.paged.table, gid);
    }

    /// Compacts a store once most of its slots were let go.
    fn compact(&mut self) {
        let rows = &self.rows;
        if rows.time.len() >= 1024 && rows.live * 2 <= rows.time.len() {
            let mut live: Vec<u32> = self.versions.iter().flatten().filter_map(|v| v.slot).collect();
            live.sort_unstable();
            let moved = self.rows.compact(&live);
            for v in self.versions.iter_mut().flatten() {
                if let Some(slot) = &mut v.slot {
                    *slot = moved[*slot as usize];
                }
            }
        }
        let stream = &self.stream;
        if stream.time.len() >= 1024 && stream.live * 2 <= stream.time.len() {
            let mut waiting: Vec<Waiting> = self.waiting.drain().map(|Reverse(w)| w).collect();
            waiting.sort_unstable_by_key(|w| w.slot);
            let live: Vec<u32> = waiting.iter().map(|w| w.slot).collect();
            let moved = self.stream.compact(&live);
            self.waiting =
                waiting.into_iter().map(|w| Reverse(Waiting { slot: moved[w.slot as usize], ..w })).collect();
        }
    }

    /// Emits `self.pairs` — left rows from `left` (a batch's stream columns,
    /// or the stream store) with their times — joined, or NULL-extended
    /// under LEFT when they have no version or it fails the residual.
    fn emit(&mut self, left: &[Column], times: &dyn Fn(u32) -> i64, out: &mut Batch) -> Result<(), Error> {
        let (at, deleted) = (self.at, self.plan.deleted);
        let keep_unmatched = self.plan.kind == JoinKind::Left;
        let table = &self.rows;
        let row = |l: u32| Row { columns: left, index: l as usize, time: times(l) };
        let push = |l: u32, r: Option<u32>, out: &mut Batch| -> Result<(), Error> {
            push_joined_at(at, Some(row(l)), r.map(|r| table.row(r)), times(l), out)?;
            Ok(out.columns[deleted].push_bool(false)?)
        };
        let Some(residual) = &self.plan.residual else {
            for &(l, r) in &self.pairs {
                if r.is_some() || keep_unmatched {
                    push(l, r, out)?;
                }
            }
            self.pairs.clear();
            return Ok(());
        };
        let candidates = &mut self.candidates;
        candidates.clear();
        for &(l, r) in &self.pairs {
            if r.is_some() {
                push(l, r, candidates)?;
            }
        }
        residual_passes(residual, candidates, &mut self.passed)?;
        let mut next = 0;
        for &(l, r) in &self.pairs {
            if r.is_none() {
                if keep_unmatched {
                    push(l, None, out)?;
                }
                continue;
            }
            let (c, ok) = (next, self.passed[next]);
            next += 1;
            if ok {
                for (column, from) in out.columns.iter_mut().zip(&candidates.columns) {
                    column.push_from(from, c)?;
                }
                out.len += 1;
            } else if keep_unmatched {
                push(l, None, out)?;
            }
        }
        self.pairs.clear();
        Ok(())
    }

    /// The bytes its state holds in memory, what spilling keeps aside.
    fn own_bytes(&self) -> usize {
        // Per key holding versions, its list's allocation (a 16-byte
        // allocator header beside the versions).
        self.paged.table.heap_bytes()
            + self.rows.bytes()
            + self.stream.bytes()
            + self.versions.capacity() * size_of::<Vec<Version>>()
            + self.waiting_per_key.capacity() * size_of::<u32>()
            + self.held * size_of::<Version>()
            + self.paged.table.live() * 16
            + self.waiting.capacity() * size_of::<Waiting>()
            + self.superseded.capacity() * size_of::<(i64, u32)>()
    }
}

impl Operator for TableJoinOperator {
    fn process(&mut self, input: &BatchInput<'_>, out: &mut OperatorOutput<'_>) -> Result<(), Error> {
        let batch = input.batch;
        let internal = |what: &str| Error::Internal(format!("table join input without its {what} column"));
        let sides = batch.columns.get(self.plan.side).and_then(bools).ok_or_else(|| internal("side"))?;
        let deletes = batch.columns.get(self.plan.deleted).and_then(bools).ok_or_else(|| internal("deleted"))?;
        let times = batch.columns.get(self.plan.time).and_then(int_values).ok_or_else(|| internal("time"))?;
        let left_keys = eval_keys(&self.plan.left_keys, batch)?;
        let right_keys = eval_keys(&self.plan.right_keys, batch)?;
        let left_refs: Vec<&Column> = left_keys.iter().map(AsRef::as_ref).collect();
        let right_refs: Vec<&Column> = right_keys.iter().map(AsRef::as_ref).collect();
        let encoders = [KeyEncoder::new(&left_refs), KeyEncoder::new(&right_refs)];
        let side_valid = &batch.columns[self.plan.side];
        let deleted_valid = &batch.columns[self.plan.deleted];
        let left_columns = batch.columns.get(self.plan.left.0..self.plan.left.1).unwrap_or_default();
        let right_columns = batch.columns.get(self.plan.right.0..self.plan.right.1).unwrap_or_default();
        let as_of = self.as_of();
        let mut rows = Vec::with_capacity(input.selection.len());
        input.selection.for_each(|r| rows.push(r));
        let right_of = |r: usize| side_valid.is_valid(r) && sides[r];
        // A stream row below the watermark when it arrives missed its turn.
        let late = |r: usize| as_of && !right_of(r) && input.watermark_before.get(r).is_some_and(|w| times[r] < *w);
        // NULL equals nothing: such a stream row joins no version, and a
        // table row without its key (only a NULL computed key: its source
        // requires the primary key) names no row.
        let keyed = |r: usize| {
            let key_columns = if right_of(r) { &right_refs } else { &left_refs };
            key_columns.iter().all(|c| c.is_valid(r))
        };
        // The keys that get state: every table row's, and (as of event
        // time) every waiting stream row's. Joining the latest, a stream
        // row looks its key up as it comes.
        self.with_spilling(|s, op| {
            s.find_keys(op, &rows, |r, key| {
                let right = right_of(r);
                let filed = keyed(r) && !late(r) && (right || as_of);
                if filed {
                    encoders[usize::from(right)].encode(r, key);
                }
                filed
            })
        })?;
        for (i, r) in rows.into_iter().enumerate() {
            let t = times[r];
            if right_of(r) {
                if !keyed(r) {
                    continue;
                }
                let gid = self.paged.spilling.gids[i];
                let id = self.paged.spilling.stable(gid);
                self.paged.dirty.mark(id);
                let slot = if deletes[r] && deleted_valid.is_valid(r) {
                    None
                } else {
                    Some(self.rows.push(right_columns, r, t)?)
                };
                self.apply(gid, id, t, slot);
                if !as_of && slot.is_none() {
                    self.deleted.push(gid);
                }
                continue;
            }
            let r32 = u32::try_from(r).unwrap_or(u32::MAX);
            if late(r) {
                out.late.push(r32);
                continue;
            }
            if !keyed(r) {
                self.pairs.push((r32, None));
                continue;
            }
            if !as_of {
                self.key.clear();
                encoders[0].encode(r, &mut self.key);
                let key = std::mem::take(&mut self.key);
                let gid = self.lookup(&key);
                self.key = key;
                let version = gid?.and_then(|gid| self.version_at(gid, t));
                self.pairs.push((r32, version));
                continue;
            }
            let gid = self.paged.spilling.gids[i];
            let id = self.paged.spilling.stable(gid);
            self.grow(gid);
            self.paged.dirty.mark(id);
            let slot = self.stream.push(left_columns, r, t)?;
            self.waiting_per_key[gid as usize] += 1;
            self.seq += 1;
            self.waiting.push(Reverse(Waiting { time: t, seq: self.seq, slot, id }));
        }
        // Stream rows joined now: the latest's, and NULL keys.
        self.emit(left_columns, &|r| times[r as usize], out.rows)?;
        // A key whose row was deleted holds nothing.
        let mut deleted = std::mem::take(&mut self.deleted);
        for &gid in &deleted {
            if self.versions.get(gid as usize).and_then(|v| v.last()).is_some_and(|v| v.slot.is_none()) {
                self.let_go(gid);
            }
        }
        deleted.clear();
        self.deleted = deleted;
        self.compact();
        Ok(())
    }

    fn on_watermark(&mut self, watermark: i64, _emit: bool, out: &mut Closed<'_>) -> Result<(), Error> {
        if !self.as_of() {
            return Ok(());
        }
        // Stream rows the watermark passed: no version at or before their
        // time can still arrive on time.
        self.released.clear();
        while let Some(&Reverse(w)) = self.waiting.peek() {
            if w.time >= watermark {
                break;
            }
            self.waiting.pop();
            let Some(gid) = self.gid_of(w.id)? else {
                return Err(Error::Internal(format!("a stream row waits under key {} that is gone", w.id)));
            };
            let version = self.version_at(gid, w.time);
            self.pairs.push((w.slot, version));
            self.released.push(gid);
            if let Some(count) = self.waiting_per_key.get_mut(gid as usize) {
                *count = count.saturating_sub(1);
            }
            self.paged.dirty.mark(w.id);
            self.stream.live -= 1;
        }
        if !self.pairs.is_empty() {
            let stream = std::mem::replace(&mut self.stream, Store::new(&[]));
            let emitted = self.emit(&stream.columns, &|s| stream.time[s as usize], out.rows);
            self.stream = stream;
            emitted?;
        }
        // Versions no row still to come can see: all but the last at or
        // below the watermark.
        while let Some(&Reverse((at, id))) = self.superseded.peek() {
            if at >= watermark {
                break;
            }
            self.superseded.pop();
            let Some(gid) = self.gid_of(id)? else { continue };
            let Some(versions) = self.versions.get_mut(gid as usize) else { continue };
            let below = versions.partition_point(|v| v.time < watermark);
            if below > 1 {
                let gone = versions.drain(..below - 1).filter(|v| v.slot.is_some()).count();
                self.held -= below - 1;
                self.rows.live -= gone;
                self.paged.dirty.mark(id);
            }
            self.released.push(gid);
        }
        let mut released = std::mem::take(&mut self.released);
        released.sort_unstable();
        released.dedup();
        for &gid in &released {
            let g = gid as usize;
            // A key whose only version is a deletion the watermark passed
            // holds nothing any row can see.
            if let Some([only]) = self.versions.get(g).map(Vec::as_slice)
                && only.slot.is_none()
                && only.time < watermark
            {
                self.versions[g].clear();
                self.held -= 1;
                self.paged.dirty.mark(self.paged.spilling.stable(gid));
            }
            if self.versions.get(g).is_none_or(Vec::is_empty) && self.waiting_per_key.get(g).is_none_or(|&n| n == 0) {
                self.let_go(gid);
            }
        }
        self.released = released;
        self.compact();
        Ok(())
    }

    fn finish(&mut self, _emit: bool, out: &mut Closed<'_>) -> Result<(), Error> {
        if self.as_of() {
            // The end of a bounded input: every waiting row joins the
            // version valid at its time.
            self.on_watermark(i64::MAX, true, out)?;
        }
        Ok(())
    }

    fn state_size(&self) -> StateSize {
        StateSize { bytes: self.own_bytes() + self.paged.spilling.heap_bytes(), entries: self.state_entries() }
    }

    fn state_entries(&self) -> usize {
        self.rows.live + self.stream.live
    }

    fn snapshot(&self, out: Vec<u8>) -> Result<Vec<u8>, Error> {
        if self.paged.spilling.spilled_any() {
            // It spilled: its checkpoints are heads and pages.
            return Err(Error::Internal("a whole checkpoint of a table join that spilled".into()));
        }
        self.write_whole(out)
    }

    /// A whole checkpoint: what every release wrote before checkpoints
    /// were incremental (the next checkpoint writes every page).
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

mod pages;

#[cfg(test)]
mod tests;
