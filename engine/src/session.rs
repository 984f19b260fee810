//! GROUP BY per session window: a session of a key spans its records while
//! they arrive less than `gap` apart in event time; it is
//! `[first event, last event + gap)` and closes when the watermark reaches
//! its end.
//!
//! Each record starts a window `[ts, ts + gap)` that merges with every open
//! session of its key it overlaps (their accumulators merge too). Sessions
//! the watermark had already closed when the record arrived are not merged
//! into; a record whose own window is already closed is late.

use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};

use super::accumulators::Accumulator;
use super::group_keys::{GroupTable, GroupTableState, KeyEncoder, decode_key_into};
use crate::Error;
use crate::operator::{BatchInput, Operator, OperatorOutput, OperatorTag, StateSize, read_state, write_state};
use sluice_plan::Batch;
use sluice_plan::Column;
use sluice_plan::eval;
use sluice_plan::{AggregatePlan, DataType};

#[derive(Debug)]
pub struct SessionOperator {
    plan: AggregatePlan,
    gap_ms: i64,
    group_types: Vec<DataType>,
    /// Group key → key id.
    keys: GroupTable,
    /// Open sessions (slot ids) of each key id.
    key_sessions: Vec<Vec<u32>>,
    sessions: Sessions,
    accs: Vec<Accumulator>,
    /// Sessions with changes to emit at the end of the batch (coalesced
    /// EMIT CHANGES), and a flag per slot so each is listed once.
    touched: Vec<u32>,
    is_touched: Vec<bool>,
    /// Scratch: the batch's selected rows, and the sessions one record
    /// overlaps (reused, so no allocation per record).
    rows: Vec<usize>,
    overlapping: Vec<u32>,
    key: Vec<u8>,
}

/// Session slots: bounds and owning key, with a free list and an index by end.
#[derive(Debug, Default, Serialize, Deserialize)]
struct Sessions {
    /// (start, end, key id) per slot; end == i64::MIN marks a free slot.
    slots: Vec<(i64, i64, u32)>,
    free: Vec<u32>,
    /// Released slots whose accumulator state is cleared before reuse.
    pending: Vec<u32>,
    by_end: BTreeSet<(i64, u32)>,
}

impl Sessions {
    fn alloc(&mut self, start: i64, end: i64, key: u32) -> u32 {
        let slot = match self.free.pop() {
            Some(s) => {
                self.slots[s as usize] = (start, end, key);
                s
            }
            None => {
                self.slots.push((start, end, key));
                u32::try_from(self.slots.len() - 1).unwrap_or(u32::MAX)
            }
        };
        self.by_end.insert((end, slot));
        slot
    }

    fn set_bounds(&mut self, slot: u32, start: i64, end: i64) {
        let s = &mut self.slots[slot as usize];
        self.by_end.remove(&(s.1, slot));
        s.0 = start;
        s.1 = end;
        self.by_end.insert((end, slot));
    }

    fn release(&mut self, slot: u32) {
        let s = &mut self.slots[slot as usize];
        self.by_end.remove(&(s.1, slot));
        s.1 = i64::MIN;
        self.pending.push(slot);
    }

    /// Clears the state of released slots and makes them available again.
    fn recycle(&mut self, accs: &mut [Accumulator]) {
        if self.pending.is_empty() {
            return;
        }
        for acc in accs.iter_mut() {
            for &s in &self.pending {
                acc.reset(s as usize);
            }
        }
        self.free.append(&mut self.pending);
    }
}

#[derive(Debug, Serialize)]
pub struct SessionStateRef<'a> {
    keys: GroupTableState,
    key_sessions: &'a [Vec<u32>],
    sessions: &'a Sessions,
    accs: &'a [Accumulator],
}

#[derive(Debug, Deserialize)]
pub struct SessionState {
    keys: GroupTableState,
    key_sessions: Vec<Vec<u32>>,
    sessions: Sessions,
    accs: Vec<Accumulator>,
}

impl SessionOperator {
    pub fn new(plan: &AggregatePlan, gap_ms: i64) -> Self {
        Self {
            group_types: plan.group_exprs.iter().map(sluice_plan::PhysExpr::data_type).collect(),
            accs: plan.aggregates.iter().map(Accumulator::new).collect(),
            plan: plan.clone(),
            gap_ms,
            keys: GroupTable::default(),
            key_sessions: Vec::new(),
            sessions: Sessions::default(),
            touched: Vec::new(),
            is_touched: Vec::new(),
            rows: Vec::new(),
            overlapping: Vec::new(),
            key: Vec::with_capacity(64),
        }
    }

    fn fold_batch(&mut self, input: &BatchInput<'_>, out: &mut Batch, late: &mut Vec<u32>) -> Result<(), Error> {
        let batch = input.batch;
        let n = batch.len;
        let group_cols = self
            .plan
            .group_exprs
            .iter()
            .map(|e| eval(e, batch).map(|v| v.into_column(n)))
            .collect::<Result<Vec<_>, _>>()?;
        let args = self
            .plan
            .aggregates
            .iter()
            .map(|a| a.arg.as_ref().map(|e| eval(e, batch).map(|v| v.into_column(n))).transpose())
            .collect::<Result<Vec<_>, _>>()?;
        let refs: Vec<&Column> = group_cols.iter().map(AsRef::as_ref).collect();
        let encoder = KeyEncoder::new(&refs);
        let mut rows = std::mem::take(&mut self.rows);
        let mut overlapping = std::mem::take(&mut self.overlapping);
        rows.clear();
        input.selection.for_each(|r| rows.push(r));
        let result = self.process_rows(&rows, &mut overlapping, input, &encoder, &args, out, late);
        self.rows = rows;
        self.overlapping = overlapping;
        result?;
        for slot in std::mem::take(&mut self.touched) {
            self.is_touched[slot as usize] = false;
            // A touched session may have been merged away later in the batch.
            if self.sessions.slots[slot as usize].1 != i64::MIN {
                self.emit_session(slot, out)?;
            }
        }
        self.sessions.recycle(&mut self.accs);
        Ok(())
    }

    #[allow(clippy::too_many_arguments)]
    fn process_rows(
        &mut self,
        rows: &[usize],
        overlapping: &mut Vec<u32>,
        input: &BatchInput<'_>,
        encoder: &KeyEncoder<'_>,
        args: &[Option<std::borrow::Cow<'_, Column>>],
        out: &mut Batch,
        late: &mut Vec<u32>,
    ) -> Result<(), Error> {
        for &r in rows {
            let ts = input.event_times[r];
            let wm = input.watermark_before[r];
            self.key.clear();
            encoder.encode(r, &mut self.key);
            let (key_id, _) = self.keys.find_or_insert(&self.key);
            if self.key_sessions.len() <= key_id as usize {
                self.key_sessions.resize_with(key_id as usize + 1, Vec::new);
            }
            let (mut start, mut end) = (ts, ts.saturating_add(self.gap_ms));
            // Open, not yet closable sessions that overlap [ts, ts + gap).
            overlapping.clear();
            overlapping.extend(self.key_sessions[key_id as usize].iter().copied().filter(|&s| {
                let (s_start, s_end, _) = self.sessions.slots[s as usize];
                s_end > wm && s_start < end && ts < s_end
            }));
            if overlapping.is_empty() && end <= wm {
                late.push(u32::try_from(r).unwrap_or(u32::MAX));
                if self.key_sessions[key_id as usize].is_empty() {
                    self.keys.remove(key_id);
                }
                continue;
            }
            let slot = match overlapping.split_first() {
                None => self.sessions.alloc(start, end, key_id),
                Some((&keep, rest)) => {
                    for &s in rest {
                        let (s_start, s_end, _) = self.sessions.slots[s as usize];
                        start = start.min(s_start);
                        end = end.max(s_end);
                        for acc in &mut self.accs {
                            acc.merge(keep as usize, s as usize)?;
                        }
                        self.drop_slot(key_id, s);
                    }
                    let (k_start, k_end, _) = self.sessions.slots[keep as usize];
                    self.sessions.set_bounds(keep, start.min(k_start), end.max(k_end));
                    keep
                }
            };
            if !self.key_sessions[key_id as usize].contains(&slot) {
                self.key_sessions[key_id as usize].push(slot);
            }
            let slots = self.sessions.slots.len();
            for (acc, arg) in self.accs.iter_mut().zip(args) {
                acc.ensure(slots);
                let row = u32::try_from(r).unwrap_or(u32::MAX);
                acc.update(&[row], &[slot], arg.as_deref())?;
            }
            if input.emit_changes {
                if input.per_record {
                    self.emit_session(slot, out)?;
                } else {
                    if self.is_touched.len() <= slot as usize {
                        self.is_touched.resize(slot as usize + 1, false);
                    }
                    if !std::mem::replace(&mut self.is_touched[slot as usize], true) {
                        self.touched.push(slot);
                    }
                }
            }
        }
        Ok(())
    }

    /// Releases a session slot; its state is cleared by the next recycle.
    fn drop_slot(&mut self, key_id: u32, slot: u32) {
        self.key_sessions[key_id as usize].retain(|&s| s != slot);
        self.sessions.release(slot);
    }

    fn close_windows(&mut self, watermark: i64, emit: bool, out: &mut Batch) -> Result<usize, Error> {
        let mut closed = 0;
        while let Some(&(end, slot)) = self.sessions.by_end.first() {
            if end > watermark {
                break;
            }
            if emit {
                self.emit_session(slot, out)?;
            }
            let key_id = self.sessions.slots[slot as usize].2;
            self.drop_slot(key_id, slot);
            if self.key_sessions[key_id as usize].is_empty() {
                self.keys.remove(key_id);
            }
            closed += 1;
        }
        self.sessions.recycle(&mut self.accs);
        Ok(closed)
    }

    fn emit_session(&self, slot: u32, out: &mut Batch) -> Result<(), Error> {
        let (start, end, key_id) = self.sessions.slots[slot as usize];
        let ng = self.group_types.len();
        decode_key_into(self.keys.key(key_id), 0, &self.group_types, &mut out.columns[..ng])?;
        out.columns[ng].push_i64(start)?;
        out.columns[ng + 1].push_i64(end)?;
        for (acc, col) in self.accs.iter().zip(&mut out.columns[ng + 2..]) {
            acc.emit(slot as usize, col)?;
        }
        out.len += 1;
        Ok(())
    }

    fn groups(&self) -> usize {
        self.sessions.by_end.len()
    }

    fn state_bytes(&self) -> usize {
        self.keys.heap_bytes()
            + self.key_sessions.iter().map(|v| v.capacity() * 4 + 24).sum::<usize>()
            + self.sessions.slots.capacity() * 24
            + self.sessions.by_end.len() * 40
            + self.accs.iter().map(Accumulator::heap_bytes).sum::<usize>()
    }

    fn to_state(&self) -> SessionStateRef<'_> {
        SessionStateRef {
            keys: self.keys.to_state(),
            key_sessions: &self.key_sessions,
            sessions: &self.sessions,
            accs: &self.accs,
        }
    }

    fn restore_state(&mut self, state: SessionState) {
        self.keys = GroupTable::from_state(state.keys);
        self.key_sessions = state.key_sessions;
        self.sessions = state.sessions;
        self.accs = state.accs;
    }
}

impl Operator for SessionOperator {
    fn process(&mut self, input: &BatchInput<'_>, out: &mut OperatorOutput<'_>) -> Result<(), Error> {
        self.fold_batch(input, out.rows, out.late)
    }

    fn on_watermark(&mut self, watermark: i64, emit: bool, rows: &mut Batch) -> Result<(), Error> {
        self.close_windows(watermark, emit, rows)?;
        Ok(())
    }

    fn finish(&mut self, emit: bool, rows: &mut Batch) -> Result<(), Error> {
        self.close_windows(i64::MAX, emit, rows)?;
        Ok(())
    }

    fn state_size(&self) -> StateSize {
        StateSize { bytes: self.state_bytes(), entries: self.groups() }
    }

    /// Every key's session list is visited.
    fn state_size_walks(&self) -> bool {
        true
    }

    fn state_entries(&self) -> usize {
        self.groups()
    }

    fn snapshot(&self, out: Vec<u8>) -> Result<Vec<u8>, Error> {
        write_state(OperatorTag::Session, &self.to_state(), out)
    }

    fn restore(&mut self, bytes: &[u8]) -> Result<(), Error> {
        self.restore_state(read_state(OperatorTag::Session, bytes)?);
        Ok(())
    }
}
