//! GROUP BY per session window: a session of a key spans its records while
//! they arrive less than `gap` apart in event time; it is
//! `[first event, last event + gap)` and closes when the watermark reaches
//! its end.
//!
//! Each record starts a window `[ts, ts + gap)` that merges with every open
//! session of its key it overlaps (their accumulators merge too). Sessions
//! the watermark had already closed when the record arrived are not merged
//! into; a record whose own window is already closed is late.
//!
//! A key's open sessions live with the key in a group table, so the state
//! pages and spills as an aggregate's does (`crate::state::pages`,
//! `crate::state`): a checkpoint writes the pages of keys whose sessions
//! changed, and past its budget cold keys go to disk with their sessions.
//! What stays in memory of the sessions on disk is each page's earliest
//! end (`crate::state::page_due`): the watermark reads the page back then.

use std::collections::BTreeSet;
use std::ops::Range;

use serde::{Deserialize, Serialize};

use super::accumulators::Accumulator;
use crate::Error;
use crate::operator::{
    BatchInput, Closed, Operator, OperatorOutput, OperatorTag, StateSize, read_state, write_head, write_state,
};
use crate::state::group_keys::{BLOCK, GroupTable, GroupTableState, KeyEncoder, decode_key_into};
use crate::state::page_due::PageDue;
use crate::state::pages::{
    PAGE_GROUPS, PageKeys, page_groups, page_keys, read_page_and_rest, restore_page_keys, write_page,
};
use crate::state::{FOLD_AT, PageIs, PagedGroups, PagedState, place_keys};
use sluice_plan::Batch;
use sluice_plan::Column;
use sluice_plan::eval;
use sluice_plan::{AggregatePlan, DataType};

#[derive(Debug)]
pub struct SessionOperator {
    plan: AggregatePlan,
    gap_ms: i64,
    group_types: Vec<DataType>,
    /// Groups in pages: their keys, pages changed since the last
    /// checkpoint, and what spilling keeps (`crate::state`).
    paged: PagedState,
    /// Open sessions (slot ids) of each key id in memory.
    key_sessions: Vec<Vec<u32>>,
    /// What the lists of `key_sessions` hold on the heap.
    list_bytes: usize,
    sessions: Sessions,
    /// Every open session by (end, its key's id in checkpoints): the
    /// order the watermark closes them in. Once folded (`fold_ends`), the
    /// sessions of a page on disk are in `on_disk` instead.
    by_end: BTreeSet<(i64, u32)>,
    /// The earliest end of each page on disk.
    on_disk: PageDue,
    accs: Vec<Accumulator>,
    /// Sessions with changes to emit at the end of the batch (coalesced
    /// EMIT CHANGES), and a flag per slot so each is listed once.
    touched: Vec<u32>,
    is_touched: Vec<bool>,
    /// Scratch: the batch's selected rows, and the sessions one record
    /// overlaps (reused, so no allocation per record).
    rows: Vec<usize>,
    overlapping: Vec<u32>,
}

/// Session slots: bounds and owning key, with a free list.
#[derive(Debug, Default)]
struct Sessions {
    /// (start, end, key id) per slot; end == i64::MIN marks a free slot.
    slots: Vec<(i64, i64, u32)>,
    free: Vec<u32>,
    /// Released slots whose accumulator state is cleared before reuse.
    pending: Vec<u32>,
}

impl Sessions {
    fn alloc(&mut self, start: i64, end: i64, key: u32) -> u32 {
        match self.free.pop() {
            Some(s) => {
                self.slots[s as usize] = (start, end, key);
                s
            }
            None => {
                self.slots.push((start, end, key));
                u32::try_from(self.slots.len() - 1).unwrap_or(u32::MAX)
            }
        }
    }

    fn release(&mut self, slot: u32) {
        self.slots[slot as usize].1 = i64::MIN;
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

    /// The open sessions' slots (end, slot), as whole checkpoints index them.
    fn by_end(&self) -> BTreeSet<(i64, u32)> {
        self.slots
            .iter()
            .enumerate()
            .filter(|(_, s)| s.1 != i64::MIN)
            .map(|(slot, s)| (s.1, u32::try_from(slot).unwrap_or(u32::MAX)))
            .collect()
    }
}

/// The slots as whole checkpoints write them: with an index by end of
/// slots (the layout before sessions were paged, still read and written).
#[derive(Debug, Serialize)]
struct SessionsRef<'a> {
    slots: &'a [(i64, i64, u32)],
    free: &'a [u32],
    pending: &'a [u32],
    by_end: BTreeSet<(i64, u32)>,
}

#[derive(Debug, Deserialize)]
struct SessionsIn {
    slots: Vec<(i64, i64, u32)>,
    free: Vec<u32>,
    pending: Vec<u32>,
    #[serde(rename = "by_end")]
    _by_end: BTreeSet<(i64, u32)>,
}

/// A whole checkpoint, written by reference...
#[derive(Debug, Serialize)]
struct SessionStateRef<'a> {
    keys: GroupTableState,
    key_sessions: &'a [Vec<u32>],
    sessions: SessionsRef<'a>,
    accs: &'a [Accumulator],
}

/// ...and read back owned.
#[derive(Debug, Deserialize)]
struct SessionState {
    keys: GroupTableState,
    key_sessions: Vec<Vec<u32>>,
    sessions: SessionsIn,
    accs: Vec<Accumulator>,
}

/// One page of an incremental checkpoint: its keys, each key's sessions
/// (start, end), and the accumulators of those sessions in that order.
#[derive(Serialize)]
struct SessionPageRef<'a> {
    keys: PageKeys<'a>,
    sessions: Vec<Vec<(i64, i64)>>,
    accs: Vec<Accumulator>,
}

/// ...read back with the keys borrowed from the page's bytes.
#[derive(Deserialize)]
struct SessionPageIn<'a> {
    #[serde(borrow)]
    keys: Vec<Option<&'a [u8]>>,
    sessions: Vec<Vec<(i64, i64)>>,
    accs: Vec<Accumulator>,
}

impl SessionOperator {
    pub fn new(plan: &AggregatePlan, gap_ms: i64) -> Self {
        Self {
            group_types: plan.group_exprs.iter().map(sluice_plan::PhysExpr::data_type).collect(),
            accs: plan.aggregates.iter().map(Accumulator::new).collect(),
            plan: plan.clone(),
            gap_ms,
            paged: PagedState::default(),
            key_sessions: Vec::new(),
            list_bytes: 0,
            sessions: Sessions::default(),
            by_end: BTreeSet::new(),
            on_disk: PageDue::default(),
            touched: Vec::new(),
            is_touched: Vec::new(),
            rows: Vec::new(),
            overlapping: Vec::new(),
        }
    }

    /// The id key `key_id` has in checkpoints and in the index by end.
    fn stable(&self, key_id: u32) -> u32 {
        self.paged.spilling.stable(key_id)
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
        let result = self
            .with_spilling(|s, op| {
                s.find_keys(op, &rows, |r, key| {
                    encoder.encode(r, key);
                    true
                })
            })
            .and_then(|()| self.process_rows(&rows, &mut overlapping, input, &args, out, late));
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

    fn process_rows(
        &mut self,
        rows: &[usize],
        overlapping: &mut Vec<u32>,
        input: &BatchInput<'_>,
        args: &[Option<std::borrow::Cow<'_, Column>>],
        out: &mut Batch,
        late: &mut Vec<u32>,
    ) -> Result<(), Error> {
        if self.key_sessions.len() < self.paged.table.capacity() {
            self.key_sessions.resize_with(self.paged.table.capacity(), Vec::new);
        }
        for (i, &r) in rows.iter().enumerate() {
            let ts = input.event_times[r];
            let wm = input.watermark_before[r];
            let key_id = self.paged.spilling.gids[i];
            let id = self.stable(key_id);
            let (mut start, mut end) = (ts, ts.saturating_add(self.gap_ms));
            // Open, not yet closable sessions that overlap [ts, ts + gap).
            overlapping.clear();
            overlapping.extend(self.key_sessions[key_id as usize].iter().copied().filter(|&s| {
                let (s_start, s_end, _) = self.sessions.slots[s as usize];
                s_end > wm && s_start < end && ts < s_end
            }));
            if overlapping.is_empty() && end <= wm {
                late.push(u32::try_from(r).unwrap_or(u32::MAX));
                continue;
            }
            self.paged.dirty.mark(id);
            let slot = match overlapping.split_first() {
                None => {
                    self.by_end.insert((end, id));
                    let slot = self.sessions.alloc(start, end, key_id);
                    let list = &mut self.key_sessions[key_id as usize];
                    let before = list.capacity();
                    list.push(slot);
                    self.list_bytes += (list.capacity() - before) * 4;
                    slot
                }
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
                    let end = end.max(k_end);
                    if end != k_end {
                        self.by_end.remove(&(k_end, id));
                        self.by_end.insert((end, id));
                    }
                    let s = &mut self.sessions.slots[keep as usize];
                    (s.0, s.1) = (start.min(k_start), end);
                    keep
                }
            };
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
        // A key made for late rows alone goes again — after the batch, as
        // its later rows carry its id.
        for (i, _) in rows.iter().enumerate() {
            let key_id = self.paged.spilling.gids[i];
            if self.key_sessions[key_id as usize].is_empty() && self.paged.table.is_live(key_id) {
                self.remove_key(key_id);
            }
        }
        Ok(())
    }

    /// Releases a session slot and its entry by end; its state is cleared
    /// by the next recycle.
    fn drop_slot(&mut self, key_id: u32, slot: u32) {
        let end = self.sessions.slots[slot as usize].1;
        self.by_end.remove(&(end, self.stable(key_id)));
        self.key_sessions[key_id as usize].retain(|&s| s != slot);
        self.sessions.release(slot);
    }

    /// Lets a key with no open session go.
    fn remove_key(&mut self, key_id: u32) {
        self.paged.dirty.mark(self.stable(key_id));
        self.paged.table.remove(key_id);
        let list = std::mem::take(&mut self.key_sessions[key_id as usize]);
        self.list_bytes -= list.capacity() * 4;
    }

    fn close_windows(&mut self, watermark: i64, emit: bool, out: &mut Closed<'_>) -> Result<usize, Error> {
        let mut closed = 0;
        let mut due = Vec::new();
        loop {
            let next = self.by_end.first().copied().filter(|&(end, _)| end <= watermark);
            if self.on_disk.first().is_some_and(|at| at <= watermark && next.is_none_or(|(end, _)| at <= end)) {
                // Pages on disk whose first session may close, before
                // any later session closes: read back (a run of pages at
                // most), their sessions are filed by end again, each.
                due.clear();
                self.on_disk.take_run(watermark, &mut due);
                for &page in &due {
                    if self.paged.spilling.pages.as_ref().is_some_and(|m| m.where_is(page) == PageIs::Spilled) {
                        self.with_spilling(|s, op| s.read_back(op, page))?;
                    }
                }
                continue;
            }
            let Some((end, id)) = next else { break };
            // A session on disk comes back with its key's page.
            let key_id =
                if self.paged.spilling.spilled_any() { self.with_spilling(|s, op| s.slot_of(op, id))? } else { id };
            let slot = self
                .key_sessions
                .get(key_id as usize)
                .and_then(|list| list.iter().copied().find(|&s| self.sessions.slots[s as usize].1 == end))
                .ok_or_else(|| Error::Internal(format!("a session of key {id} ending at {end} is not open")))?;
            if emit {
                self.emit_session(slot, out.rows)?;
                out.drain_if_full()?;
            }
            self.paged.dirty.mark(id);
            self.drop_slot(key_id, slot);
            if self.key_sessions[key_id as usize].is_empty() {
                self.remove_key(key_id);
                // A block whose keys are all gone is handed back at once,
                // so closing sessions larger than memory holds a page of
                // them at a time.
                let block = key_id / PAGE_GROUPS;
                if self.paged.table.block_is_free(block)
                    && let Some(pages) = &mut self.paged.spilling.pages
                {
                    self.sessions.recycle(&mut self.accs);
                    pages.evicted(block, false);
                    self.paged.table.evict_blocks(&[block]);
                }
            }
            closed += 1;
        }
        self.sessions.recycle(&mut self.accs);
        Ok(closed)
    }

    fn emit_session(&self, slot: u32, out: &mut Batch) -> Result<(), Error> {
        let (start, end, key_id) = self.sessions.slots[slot as usize];
        let ng = self.group_types.len();
        decode_key_into(self.paged.table.key(key_id), 0, &self.group_types, &mut out.columns[..ng])?;
        out.columns[ng].push_i64(start)?;
        out.columns[ng + 1].push_i64(end)?;
        for (acc, col) in self.accs.iter().zip(&mut out.columns[ng + 2..]) {
            acc.emit(slot as usize, col)?;
        }
        out.len += 1;
        Ok(())
    }

    /// Keys with open sessions, in memory and on disk.
    fn groups(&self) -> usize {
        self.paged.spilling.groups(&self.paged.table)
    }

    /// Moves the index by end's entries for keys on disk to `on_disk`,
    /// their page's earliest end.
    fn fold_ends(&mut self) {
        let Some(pages) = &self.paged.spilling.pages else { return };
        let on_disk = &mut self.on_disk;
        self.by_end.retain(|&(end, id)| match pages.where_is(id / PAGE_GROUPS) {
            PageIs::Spilled => {
                on_disk.file(id / PAGE_GROUPS, end);
                false
            }
            PageIs::InBlock(_) => true,
            PageIs::Unused | PageIs::Missing => false,
        });
    }

    /// Open sessions in memory.
    fn sessions_in_memory(&self) -> usize {
        self.sessions.slots.len() - self.sessions.free.len() - self.sessions.pending.len()
    }

    /// The state's bytes in memory, what spilling keeps aside.
    fn own_bytes(&self) -> usize {
        self.paged.table.heap_bytes()
            + self.key_sessions.capacity() * size_of::<Vec<u32>>()
            + self.list_bytes
            + self.sessions.slots.capacity() * 24
            + (self.sessions.free.capacity() + self.sessions.pending.capacity()) * 4
            + self.by_end.len() * 40
            + self.on_disk.heap_bytes()
            + self.accs.iter().map(Accumulator::heap_bytes).sum::<usize>()
            + self.is_touched.capacity()
    }

    /// A whole checkpoint, in the layout written before sessions were
    /// paged.
    fn to_state(&self) -> SessionStateRef<'_> {
        SessionStateRef {
            keys: self.paged.table.to_state(),
            key_sessions: &self.key_sessions,
            sessions: SessionsRef {
                slots: &self.sessions.slots,
                free: &self.sessions.free,
                pending: &self.sessions.pending,
                by_end: self.sessions.by_end(),
            },
            accs: &self.accs,
        }
    }

    fn restore_state(&mut self, state: SessionState) -> Result<(), Error> {
        self.paged.spilling.forget()?;
        self.paged.dirty.clear();
        self.paged.table = GroupTable::from_state(state.keys);
        self.key_sessions = state.key_sessions;
        self.list_bytes = self.key_sessions.iter().map(|l| l.capacity() * 4).sum();
        let SessionsIn { slots, free, pending, .. } = state.sessions;
        self.sessions = Sessions { slots, free, pending };
        self.by_end = self.sessions.slots.iter().filter(|s| s.1 != i64::MIN).map(|s| (s.1, s.2)).collect();
        self.on_disk.clear();
        self.accs = state.accs;
        self.touched.clear();
        self.is_touched.clear();
        Ok(())
    }

    /// Forgets every session (a restore of pages starts over).
    fn clear(&mut self) {
        self.key_sessions = Vec::new();
        self.list_bytes = 0;
        self.sessions = Sessions::default();
        self.by_end.clear();
        self.on_disk.clear();
        self.accs = self.plan.aggregates.iter().map(Accumulator::new).collect();
        self.touched.clear();
        self.is_touched.clear();
        self.paged.dirty.clear();
    }

    /// Puts page `page`'s key ids `ids` (their keys already in the table)
    /// back with their sessions, each filed by end under the page's id.
    fn place_sessions(&mut self, page: u32, p: SessionPageIn<'_>, ids: Range<usize>) -> Result<(), Error> {
        if self.key_sessions.len() < ids.end {
            self.key_sessions.resize_with(ids.end, Vec::new);
        }
        let mut slots = Vec::new();
        for ((key_id, bounds), i) in ids.zip(p.sessions).zip(0u32..) {
            let key = u32::try_from(key_id).unwrap_or(u32::MAX);
            let list = &mut self.key_sessions[key_id];
            self.list_bytes -= list.capacity() * 4;
            list.clear();
            for (start, end) in bounds {
                let slot = self.sessions.alloc(start, end, key);
                list.push(slot);
                slots.push(slot as usize);
                self.by_end.insert((end, page * PAGE_GROUPS + i));
            }
            self.list_bytes += list.capacity() * 4;
        }
        for (acc, from) in self.accs.iter_mut().zip(p.accs) {
            acc.ensure(self.sessions.slots.len());
            acc.scatter(&slots.iter().copied(), from)?;
        }
        Ok(())
    }
}

impl Operator for SessionOperator {
    fn process(&mut self, input: &BatchInput<'_>, out: &mut OperatorOutput<'_>) -> Result<(), Error> {
        self.fold_batch(input, out.rows, out.late)
    }

    fn on_watermark(&mut self, watermark: i64, emit: bool, out: &mut Closed<'_>) -> Result<(), Error> {
        self.close_windows(watermark, emit, out)?;
        Ok(())
    }

    fn finish(&mut self, emit: bool, out: &mut Closed<'_>) -> Result<(), Error> {
        self.close_windows(i64::MAX, emit, out)?;
        Ok(())
    }

    fn state_size(&self) -> StateSize {
        StateSize { bytes: self.own_bytes() + self.paged.spilling.heap_bytes(), entries: self.groups() }
    }

    /// A string's MIN/MAX is measured string by string.
    fn state_size_walks(&self) -> bool {
        self.accs.iter().any(Accumulator::heap_bytes_walks)
    }

    fn state_entries(&self) -> usize {
        self.groups()
    }

    fn snapshot(&self, out: Vec<u8>) -> Result<Vec<u8>, Error> {
        if self.paged.spilling.spilled_any() {
            // It spilled: its checkpoints are heads and pages.
            return Err(Error::Internal("a whole checkpoint of session windows that spilled".into()));
        }
        write_state(OperatorTag::Session, &self.to_state(), out)
    }

    fn restore(&mut self, bytes: &[u8]) -> Result<(), Error> {
        self.restore_state(read_state(OperatorTag::Session, bytes)?)
    }

    fn paged(&self) -> Option<&dyn crate::state::Paged> {
        Some(self)
    }

    fn paged_mut(&mut self) -> Option<&mut dyn crate::state::Paged> {
        Some(self)
    }
}

impl PagedGroups for SessionOperator {
    fn groups(&self) -> &PagedState {
        &self.paged
    }

    fn groups_mut(&mut self) -> &mut PagedState {
        &mut self.paged
    }

    fn head_bytes(&self, out: Vec<u8>) -> Result<Vec<u8>, Error> {
        write_head(&self.paged, [OperatorTag::SessionSpilledHead, OperatorTag::SessionHead], out)
    }

    fn restore_from_head(&mut self, bytes: &[u8]) -> Result<(), Error> {
        self.clear();
        self.paged.table = GroupTable::default();
        if let Some(head) = self.paged.spilling.restore_either_head(
            bytes,
            OperatorTag::SessionSpilledHead as u32,
            OperatorTag::SessionHead as u32,
        )? {
            self.key_sessions.resize_with(head.groups as usize, Vec::new);
            self.paged.table = head.table();
        }
        Ok(())
    }

    fn check_restored(&mut self) -> Result<(), Error> {
        self.paged.spilling.pages_restored(&self.paged.table)
    }

    /// The index by end is folded once its entries of keys on disk pass
    /// a quarter of those in memory (and `FOLD_AT / 4`): at 40 bytes an
    /// entry, twice the live ones (a join's heap's rule, 16 bytes an
    /// entry) took a third of the budget at the peak. A fold visits the
    /// index once, for at least a fifth of it removed.
    fn spill_cold(&mut self) -> Result<(), Error> {
        self.with_spilling(|s, op| s.spill_cold(op))?;
        let live = self.sessions_in_memory();
        if self.by_end.len() > live + live / 4 + FOLD_AT / 4 {
            self.fold_ends();
        }
        Ok(())
    }

    fn restore_from_page(&mut self, page: u32, bytes: &[u8]) -> Result<(), Error> {
        if self.with_spilling(|s, op| s.restore_page(op, page, bytes))? {
            return Ok(());
        }
        let (p, _): (SessionPageIn<'_>, _) = read_page_and_rest(page, bytes)?;
        restore_page_keys(&mut self.paged.table, page, &p.keys)?;
        let ids = page_groups(page, self.paged.table.capacity());
        self.place_sessions(page, p, ids)
    }

    fn page_bytes(&self, groups: Range<usize>, out: Vec<u8>) -> Result<Vec<u8>, Error> {
        let lists = groups.clone().map(|g| self.key_sessions.get(g).map_or(&[][..], Vec::as_slice));
        let sessions = lists
            .clone()
            .map(|l| {
                l.iter().map(|&s| (self.sessions.slots[s as usize].0, self.sessions.slots[s as usize].1)).collect()
            })
            .collect();
        let slots = lists.flatten().map(|&s| s as usize);
        let accs = self.accs.iter().map(|a| a.gather(slots.clone())).collect::<Result<_, _>>()?;
        write_page(&SessionPageRef { keys: page_keys(&self.paged.table, groups), sessions, accs }, out)
    }

    fn load_page(&mut self, page: u32, bytes: &[u8], block: u32) -> Result<(), Error> {
        let (p, _): (SessionPageIn<'_>, _) = read_page_and_rest(page, bytes)?;
        place_keys(&mut self.paged.table, block, &p.keys)?;
        self.on_disk.forget(page);
        let start = block as usize * BLOCK;
        self.place_sessions(page, p, start..start + BLOCK)
    }

    /// The sessions stay in the index by end: the watermark reads their
    /// page back when it closes them.
    fn drop_groups(&mut self, groups: Range<usize>) {
        for g in groups {
            if let Some(list) = self.key_sessions.get_mut(g) {
                let list = std::mem::take(list);
                self.list_bytes -= list.capacity() * 4;
                for slot in list {
                    self.sessions.release(slot);
                }
            }
        }
        self.sessions.recycle(&mut self.accs);
    }

    fn own_bytes(&self) -> usize {
        SessionOperator::own_bytes(self)
    }

    /// A page restored straight to disk is filed by its earliest end.
    fn restored_to_disk(&mut self, page: u32, bytes: &[u8]) -> Result<(), Error> {
        let (p, _): (SessionPageIn<'_>, _) = read_page_and_rest(page, bytes)?;
        if let Some(end) = p.sessions.iter().flatten().map(|&(_, end)| end).min() {
            self.on_disk.file(page, end);
        }
        Ok(())
    }
}
