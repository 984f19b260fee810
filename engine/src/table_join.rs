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

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use serde::{Deserialize, Serialize};

use crate::Error;
use crate::aggregate::int_values;
use crate::group_keys::{GroupTable, GroupTableState, KeyEncoder};
use crate::join::{Joined, Row, Store, bools, eval_keys, push_joined_at, residual_passes};
use crate::operator::{BatchInput, Closed, Operator, OperatorOutput, OperatorTag, StateSize, read_state, write_state};
use sluice_plan::{Batch, Column, DataType, JoinKind, Scalar, TableJoinPlan, TableVersion};

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
    gid: u32,
}

/// A key's versions, as a checkpoint holds them.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
struct KeyVersions {
    versions: Vec<(i64, Option<Vec<Scalar>>)>,
}

#[derive(Serialize, Deserialize)]
struct TableJoinState {
    keys: GroupTableState,
    versions: Vec<KeyVersions>,
    /// `(time, key id, stream cells)`, in arrival order.
    waiting: Vec<(i64, u32, Vec<Scalar>)>,
}

#[derive(Debug)]
pub struct TableJoinOperator {
    plan: TableJoinPlan,
    at: Joined,
    keys: GroupTable,
    /// Table rows, by slot.
    table: Store,
    /// Per key id: its versions, oldest first (one, the current, when
    /// joining the latest).
    versions: Vec<Vec<Version>>,
    /// Stream rows waiting for the watermark, by slot (as-of joins).
    stream: Store,
    waiting: BinaryHeap<Reverse<Waiting>>,
    /// Per key id, how many stream rows wait under it.
    waiting_per_key: Vec<u32>,
    /// `(time of a version that superseded another, key id)`: once the
    /// watermark reaches it, the key's older versions can go.
    superseded: BinaryHeap<Reverse<(i64, u32)>>,
    seq: u64,
    key: Vec<u8>,
    /// Stream rows to emit: the stream row (batch row or stream slot),
    /// and the table slot of the version it joins.
    pairs: Vec<(u32, Option<u32>)>,
    candidates: Batch,
    passed: Vec<bool>,
    released: Vec<u32>,
}

impl TableJoinOperator {
    /// `types`: the source (= intermediate) schema's column types.
    pub fn new(plan: &TableJoinPlan, types: &[DataType]) -> Self {
        let side = |(start, end): (usize, usize)| Store::new(types.get(start..end).unwrap_or_default());
        Self {
            plan: plan.clone(),
            at: Joined { left: plan.left, right: plan.right, side: plan.side, time: plan.time },
            keys: GroupTable::default(),
            table: side(plan.right),
            versions: Vec::new(),
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
        }
    }

    fn as_of(&self) -> bool {
        self.plan.version == TableVersion::AsOfEventTime
    }

    fn key_id(&mut self, key: &[u8]) -> u32 {
        let (gid, _) = self.keys.find_or_insert(key);
        let g = gid as usize;
        if self.versions.len() <= g {
            self.versions.resize_with(g + 1, Vec::new);
            self.waiting_per_key.resize(g + 1, 0);
        }
        gid
    }

    /// Files a version (`slot`: the row; `None`: a deletion) of key `gid`.
    fn apply(&mut self, gid: u32, time: i64, slot: Option<u32>) {
        let as_of = self.as_of();
        let versions = &mut self.versions[gid as usize];
        if !as_of {
            // Only the current version matters.
            if versions.pop().and_then(|v| v.slot).is_some() {
                self.table.live -= 1;
            }
            versions.push(Version { time, slot });
            return;
        }
        // After every version of the same or an earlier time: of two
        // versions of one time, the later to arrive holds.
        let at = versions.partition_point(|v| v.time <= time);
        versions.insert(at, Version { time, slot });
        if versions.len() > 1 {
            self.superseded.push(Reverse((time, gid)));
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

    /// Joining the latest: lets go of a key whose row was deleted.
    fn forget_if_deleted(&mut self, gid: u32) {
        let versions = &mut self.versions[gid as usize];
        if versions.last().is_some_and(|v| v.slot.is_none()) {
            versions.clear();
            self.keys.remove(gid);
        }
    }

    /// Compacts a store once most of its slots were let go.
    fn compact(&mut self) {
        let table = &self.table;
        if table.time.len() >= 1024 && table.live * 2 <= table.time.len() {
            let mut live: Vec<u32> = self.versions.iter().flatten().filter_map(|v| v.slot).collect();
            live.sort_unstable();
            let moved = self.table.compact(&live);
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
        let table = &self.table;
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
        let left_columns = batch.columns.get(self.plan.left.0..self.plan.left.1).unwrap_or_default();
        let right_columns = batch.columns.get(self.plan.right.0..self.plan.right.1).unwrap_or_default();
        let as_of = self.as_of();
        let mut rows = Vec::with_capacity(input.selection.len());
        input.selection.for_each(|r| rows.push(r));
        for r in rows {
            let right = side_valid.is_valid(r) && sides[r];
            let t = times[r];
            let key_columns = if right { &right_refs } else { &left_refs };
            let null_key = key_columns.iter().any(|c| !c.is_valid(r));
            if right {
                if null_key {
                    // A table row without its key (its source requires the
                    // primary key, so only a NULL computed key): it names no row.
                    continue;
                }
                self.key.clear();
                encoders[1].encode(r, &mut self.key);
                let key = std::mem::take(&mut self.key);
                let gid = self.key_id(&key);
                self.key = key;
                let slot = if deletes.get(r).copied().unwrap_or(false) && batch.columns[self.plan.deleted].is_valid(r) {
                    None
                } else {
                    Some(self.table.push(right_columns, r, t)?)
                };
                self.apply(gid, t, slot);
                if !as_of {
                    self.forget_if_deleted(gid);
                }
                continue;
            }
            let r32 = u32::try_from(r).unwrap_or(u32::MAX);
            if as_of && input.watermark_before.get(r).is_some_and(|w| t < *w) {
                out.late.push(r32);
                continue;
            }
            if null_key {
                // NULL equals nothing: the row joins no version.
                self.pairs.push((r32, None));
                continue;
            }
            self.key.clear();
            encoders[0].encode(r, &mut self.key);
            if !as_of {
                let version = self.keys.find(&self.key).and_then(|gid| self.version_at(gid, t));
                self.pairs.push((r32, version));
                continue;
            }
            let key = std::mem::take(&mut self.key);
            let gid = self.key_id(&key);
            self.key = key;
            let slot = self.stream.push(left_columns, r, t)?;
            self.waiting_per_key[gid as usize] += 1;
            self.seq += 1;
            self.waiting.push(Reverse(Waiting { time: t, seq: self.seq, slot, gid }));
        }
        // Stream rows joined now: the latest's, and NULL keys.
        self.emit(left_columns, &|r| times[r as usize], out.rows)?;
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
            let version = self.version_at(w.gid, w.time);
            self.pairs.push((w.slot, version));
            self.released.push(w.gid);
            self.waiting_per_key[w.gid as usize] -= 1;
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
        while let Some(&Reverse((at, gid))) = self.superseded.peek() {
            if at >= watermark {
                break;
            }
            self.superseded.pop();
            let versions = &mut self.versions[gid as usize];
            let below = versions.partition_point(|v| v.time < watermark);
            if below > 1 {
                let gone = versions.drain(..below - 1).filter(|v| v.slot.is_some()).count();
                self.table.live -= gone;
            }
            self.released.push(gid);
        }
        let mut released = std::mem::take(&mut self.released);
        released.sort_unstable();
        released.dedup();
        for &gid in &released {
            let versions = &self.versions[gid as usize];
            // A key whose only version is a deletion the watermark passed
            // holds nothing any row can see.
            if let [only] = versions.as_slice()
                && only.slot.is_none()
                && only.time < watermark
            {
                self.versions[gid as usize].clear();
            }
            if self.versions[gid as usize].is_empty() && self.waiting_per_key[gid as usize] == 0 {
                self.keys.remove(gid);
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
        let rows = self.state_entries();
        let bytes = [&self.table, &self.stream].iter().map(|s| s.bytes()).sum::<usize>()
            + self.versions.iter().map(|v| v.capacity() * size_of::<Version>()).sum::<usize>()
            + self.versions.capacity() * size_of::<Vec<Version>>()
            + self.waiting.capacity() * size_of::<Waiting>();
        StateSize { bytes: self.keys.heap_bytes() + bytes, entries: rows }
    }

    /// Every key's version list is visited.
    fn state_size_walks(&self) -> bool {
        true
    }

    fn state_entries(&self) -> usize {
        self.table.live + self.stream.live
    }

    fn snapshot(&self, out: Vec<u8>) -> Result<Vec<u8>, Error> {
        let cells = |store: &Store, slot: u32| store.columns.iter().map(|c| c.scalar(slot as usize)).collect();
        let versions = self
            .versions
            .iter()
            .map(|vs| KeyVersions {
                versions: vs.iter().map(|v| (v.time, v.slot.map(|s| cells(&self.table, s)))).collect(),
            })
            .collect();
        let mut waiting: Vec<Waiting> = self.waiting.iter().map(|Reverse(w)| *w).collect();
        waiting.sort_unstable_by_key(|w| w.seq);
        let waiting = waiting.iter().map(|w| (w.time, w.gid, cells(&self.stream, w.slot))).collect();
        write_state(OperatorTag::TableJoin, &TableJoinState { keys: self.keys.to_state(), versions, waiting }, out)
    }

    fn restore(&mut self, bytes: &[u8]) -> Result<(), Error> {
        let state: TableJoinState = read_state(OperatorTag::TableJoin, bytes)?;
        self.keys = GroupTable::from_state(state.keys);
        self.table.clear();
        self.stream.clear();
        self.versions.clear();
        self.waiting.clear();
        self.waiting_per_key.clear();
        self.superseded.clear();
        let n = state.versions.len().max(self.keys.capacity());
        self.versions.resize_with(n, Vec::new);
        self.waiting_per_key.resize(n, 0);
        for (g, key) in state.versions.into_iter().enumerate() {
            for (time, row) in key.versions {
                let slot =
                    row.map(|cells| self.table.push_values(cells.iter().map(Scalar::borrowed), time)).transpose()?;
                self.versions[g].push(Version { time, slot });
            }
            if let [.., last] = self.versions[g].as_slice() {
                let gid = u32::try_from(g).unwrap_or(u32::MAX);
                self.superseded.push(Reverse((last.time, gid)));
            }
        }
        for (time, gid, cells) in state.waiting {
            let slot = self.stream.push_values(cells.iter().map(Scalar::borrowed), time)?;
            if let Some(count) = self.waiting_per_key.get_mut(gid as usize) {
                *count += 1;
            }
            self.seq += 1;
            self.waiting.push(Reverse(Waiting { time, seq: self.seq, slot, gid }));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::operator::run_at_watermark;
    use sluice_plan::{CmpOp, PhysExpr};

    /// Layout: stream (k, v), table (k, v), __right, __time, __deleted.
    const TYPES: [DataType; 7] = [
        DataType::Bigint,
        DataType::Bigint,
        DataType::Bigint,
        DataType::Bigint,
        DataType::Boolean,
        DataType::Timestamp,
        DataType::Boolean,
    ];

    fn plan(kind: JoinKind, version: TableVersion) -> TableJoinPlan {
        let col = |index| PhysExpr::Column { index, data_type: DataType::Bigint };
        TableJoinPlan {
            kind,
            left: (0, 2),
            right: (2, 4),
            side: 4,
            time: 5,
            deleted: 6,
            left_keys: vec![col(0)],
            right_keys: vec![col(2)],
            residual: None,
            version,
        }
    }

    #[derive(Clone, Copy)]
    enum In {
        /// A stream row: key, value, time.
        S(i64, i64, i64),
        /// A table version: key, value, time.
        T(i64, i64, i64),
        /// A table deletion: key, time.
        D(i64, i64),
    }

    fn batch(rows: &[In]) -> Batch {
        let mut b = Batch::empty(&TYPES);
        for &row in rows {
            let (right, k, v, t, deleted) = match row {
                In::S(k, v, t) => (false, k, Some(v), t, false),
                In::T(k, v, t) => (true, k, Some(v), t, false),
                In::D(k, t) => (true, k, None, t, true),
            };
            let (own, other) = if right { (2, 0) } else { (0, 2) };
            b.columns[own].push_i64(k).unwrap();
            match v {
                Some(v) => b.columns[own + 1].push_i64(v).unwrap(),
                None => b.columns[own + 1].push_null(),
            }
            b.columns[other].push_null();
            b.columns[other + 1].push_null();
            b.columns[4].push_bool(right).unwrap();
            b.columns[5].push_i64(t).unwrap();
            b.columns[6].push_bool(deleted).unwrap();
            b.len += 1;
        }
        b
    }

    /// Runs a batch whose rows all saw `watermark`, then the watermark;
    /// the joined rows as `(stream value, table value)` and the late rows.
    fn run(op: &mut TableJoinOperator, rows: &[In], watermark: i64) -> (Vec<(Scalar, Scalar)>, Vec<u32>) {
        let b = batch(rows);
        let times: Vec<i64> = (0..b.len).map(|r| int_values(&b.columns[5]).unwrap()[r]).collect();
        let (out, late) = run_at_watermark(op, &b, &times, watermark, &TYPES);
        assert!(out.columns.iter().all(|c| c.len() == out.len), "every column has a cell per row");
        let mut pairs: Vec<(Scalar, Scalar)> =
            (0..out.len).map(|r| (out.columns[1].scalar(r), out.columns[3].scalar(r))).collect();
        pairs.sort_by_key(|p| format!("{p:?}"));
        (pairs, late)
    }

    fn joined(pairs: &[(i64, Option<i64>)]) -> Vec<(Scalar, Scalar)> {
        let mut v: Vec<_> =
            pairs.iter().map(|&(s, t)| (Scalar::Bigint(s), t.map_or(Scalar::Null, Scalar::Bigint))).collect();
        v.sort_by_key(|p| format!("{p:?}"));
        v
    }

    #[test]
    fn joining_the_latest_sees_each_update_and_deletion_in_processing_order() {
        let mut op = TableJoinOperator::new(&plan(JoinKind::Left, TableVersion::Latest), &TYPES);
        // Event times play no part: processing order decides.
        let rows = [In::S(1, 100, 9), In::T(1, 10, 5), In::S(1, 101, 1), In::T(1, 11, 1), In::S(1, 102, 0)];
        let (out, late) = run(&mut op, &rows, 50);
        assert_eq!(out, joined(&[(100, None), (101, Some(10)), (102, Some(11))]));
        assert!(late.is_empty(), "joining the latest judges no row late");
        let (out, _) = run(&mut op, &[In::D(1, 0), In::S(1, 103, 0), In::S(2, 104, 0)], 50);
        assert_eq!(out, joined(&[(103, None), (104, None)]));
        assert_eq!(op.state_size().entries, 0, "a deleted key holds nothing");
        let mut inner = TableJoinOperator::new(&plan(JoinKind::Inner, TableVersion::Latest), &TYPES);
        let (out, _) = run(&mut inner, &rows, 50);
        assert_eq!(out, joined(&[(101, Some(10)), (102, Some(11))]));
    }

    #[test]
    fn joining_as_of_event_time_waits_for_the_watermark_and_takes_the_version_valid_then() {
        let mut op = TableJoinOperator::new(&plan(JoinKind::Left, TableVersion::AsOfEventTime), &TYPES);
        // Stream rows first, versions after, out of order: order must not matter.
        let (out, _) = run(&mut op, &[In::S(1, 350, 350), In::S(1, 150, 150), In::S(1, 50, 50)], 0);
        assert!(out.is_empty(), "rows wait until the watermark passes them");
        let (out, _) = run(&mut op, &[In::T(1, 2, 200), In::S(1, 250, 250), In::T(1, 1, 100), In::D(1, 300)], 0);
        assert!(out.is_empty());
        let saved = op.snapshot(Vec::new()).unwrap();
        let mut op = TableJoinOperator::new(&plan(JoinKind::Left, TableVersion::AsOfEventTime), &TYPES);
        op.restore(&saved).unwrap();
        let (out, _) = run(&mut op, &[], 200);
        assert_eq!(out, joined(&[(50, None), (150, Some(1))]), "only rows below the watermark");
        let (out, late) = run(&mut op, &[In::S(1, 199, 199)], 1_000);
        assert_eq!(late, [0], "a row below the watermark is late");
        assert_eq!(out, joined(&[(250, Some(2)), (350, None)]), "the deletion at 300 holds at 350");
        assert_eq!(op.state_size().entries, 0, "a key deleted below the watermark holds nothing");
    }

    #[test]
    fn a_version_below_the_watermark_still_counts_for_rows_to_come() {
        let mut op = TableJoinOperator::new(&plan(JoinKind::Left, TableVersion::AsOfEventTime), &TYPES);
        run(&mut op, &[In::T(1, 1, 100)], 500);
        // Late for any row before 500, but the current version from 400 on.
        let (out, late) = run(&mut op, &[In::T(1, 2, 400), In::S(1, 600, 600)], 500);
        assert!(late.is_empty() && out.is_empty());
        let (out, _) = run(&mut op, &[], 700);
        assert_eq!(out, joined(&[(600, Some(2))]));
    }

    #[test]
    fn versions_no_row_can_see_are_let_go() {
        let mut op = TableJoinOperator::new(&plan(JoinKind::Inner, TableVersion::AsOfEventTime), &TYPES);
        for i in 0..5_000i64 {
            let (out, late) = run(&mut op, &[In::T(i % 3, i, i * 10), In::S(i % 3, i, i * 10 + 5)], i * 10 - 20);
            assert!(late.is_empty());
            // The watermark passed the stream row of three rounds ago.
            if i >= 3 {
                assert_eq!(out, joined(&[(i - 3, Some(i - 3))]), "row {i}: the version of its own time");
            }
        }
        let size = op.state_size();
        assert!(size.entries < 20, "{size:?}");
        assert!(op.table.time.len() < 2_100 && op.stream.time.len() < 2_100, "let-go slots are compacted away");
    }

    /// The table is the state: what `stateMemoryLimit` checks and
    /// `sluice_state_bytes` reports grows with its rows, and a deletion
    /// gives a row's share back.
    #[test]
    fn state_size_counts_every_table_row() {
        let mut op = TableJoinOperator::new(&plan(JoinKind::Left, TableVersion::Latest), &TYPES);
        let rows: Vec<In> = (0..1_000).map(|k| In::T(k, k, 0)).collect();
        run(&mut op, &rows, 0);
        let size = op.state_size();
        assert_eq!(size.entries, 1_000);
        assert!(size.bytes >= 1_000 * (2 * 8 + 8), "two cells and a time per row at least: {size:?}");
        let deletions: Vec<In> = (0..500).map(|k| In::D(k, 0)).collect();
        run(&mut op, &deletions, 0);
        assert_eq!(op.state_size().entries, 500);
    }

    #[test]
    fn a_left_join_null_extends_a_row_whose_version_fails_the_residual() {
        let mut p = plan(JoinKind::Left, TableVersion::Latest);
        // ON s.k = t.k AND t.v > 5
        p.residual = Some(PhysExpr::Compare {
            op: CmpOp::Gt,
            left: Box::new(PhysExpr::Column { index: 3, data_type: DataType::Bigint }),
            right: Box::new(PhysExpr::literal(Scalar::Bigint(5))),
        });
        let mut op = TableJoinOperator::new(&p, &TYPES);
        let (out, _) = run(&mut op, &[In::T(1, 3, 0), In::T(2, 9, 0), In::S(1, 100, 0), In::S(2, 200, 0)], 0);
        assert_eq!(out, joined(&[(100, None), (200, Some(9))]));
    }
}
