//! GROUP BY, optionally per tumbling or hopping event-time window.
//!
//! For each batch: evaluate the group expressions and aggregate arguments
//! once, map every (row, window) to a dense group id, then fold whole
//! argument columns into the accumulators. A group of a windowed query is
//! (window start, key); the window closes when the watermark reaches its end.
//!
//! A row is late when every window it belongs to had already closed before
//! the row arrived — judged with the watermark as it stood at that row, not
//! at the end of the batch, so results never depend on where batches split.

use std::collections::BTreeMap;

use super::accumulators::Accumulator;
use super::agg_args::{Selected, eval_args};
use crate::Error;
use crate::operator::{BatchInput, Closed, Operator, OperatorOutput, OperatorTag, StateSize, read_state_and_rest};
use crate::shown::Shown;
use crate::state::group_keys::{KeyEncoder, decode_key_into};
use crate::state::pages::PAGE_GROUPS;
use crate::state::{PagedGroups, PagedState};
use sluice_plan::Batch;
use sluice_plan::eval;
use sluice_plan::time_zone::{TimeZone, time_zone, zoned_hops, zoned_tumble};
use sluice_plan::{AggregatePlan, DataType, TimeWindow};
use sluice_plan::{Column, ColumnData};

#[derive(Debug)]
pub struct AggregateOperator {
    pub(crate) plan: AggregatePlan,
    group_types: Vec<DataType>,
    /// Groups in pages: their keys, pages changed since the last
    /// checkpoint, and what spilling keeps (`crate::state`).
    pub(crate) paged: PagedState,
    pub(crate) accs: Vec<Accumulator>,
    /// The accumulators a group's row shows: the first `visible` of
    /// `accs` (the rest are kept for an operator built on this one, as
    /// the signed aggregate keeps each group's row count).
    visible: usize,
    /// (start, end) of each group's window.
    pub(crate) bounds: Vec<(i64, i64)>,
    /// The zone whose wall clock tumbling and hopping windows follow
    /// (`plan.window_zone`); `None` for UTC.
    zone: Option<TimeZone>,
    /// Open windows by end: the groups the watermark will close.
    pub(crate) open_by_end: BTreeMap<i64, Vec<u32>>,
    touched: Vec<u32>,
    touched_flag: Vec<bool>,
    rows: Vec<u32>,
    /// The group of each row of the last batch folded (scratch; read by
    /// the upsert aggregate, which records where each key's row went).
    pub(crate) gids: Vec<u32>,
    /// Whether each of `gids` was created by its row (scratch).
    fresh: Vec<bool>,
    /// The rows an aggregate's FILTER selects (scratch).
    selected: Selected,
    key: Vec<u8>,
    /// Which groups' last row passed HAVING (when the plan has one and
    /// emits updates).
    pub(crate) shown: Shown,
    /// Rows of the batch in fold whose key was not in memory: once the
    /// others are placed, each is looked up on disk, then made new
    /// (scratch of a spilling operator; keys in `pending_keys`).
    pending: Vec<Pending>,
    pending_keys: Vec<u8>,
}

/// A row whose key was not in memory: its place in `gids`, its window
/// and its key's bytes in `pending_keys`.
#[derive(Debug)]
struct Pending {
    at: usize,
    start: Option<i64>,
    end: i64,
    key: std::ops::Range<usize>,
}

impl AggregateOperator {
    pub fn new(plan: &AggregatePlan) -> Self {
        Self {
            group_types: plan.group_exprs.iter().map(sluice_plan::PhysExpr::data_type).collect(),
            accs: plan.aggregates.iter().map(Accumulator::new).collect(),
            visible: plan.aggregates.len(),
            plan: plan.clone(),
            paged: PagedState::default(),
            bounds: Vec::new(),
            zone: plan.window_zone.as_deref().and_then(time_zone),
            open_by_end: BTreeMap::new(),
            touched: Vec::new(),
            touched_flag: Vec::new(),
            rows: Vec::new(),
            gids: Vec::new(),
            fresh: Vec::new(),
            selected: Selected::default(),
            key: Vec::with_capacity(64),
            shown: Shown::default(),
            pending: Vec::new(),
            pending_keys: Vec::new(),
        }
    }

    /// An aggregate that also keeps `hidden` — folded, taken back, paged
    /// and spilled with the others, never shown in a group's row.
    pub(crate) fn with_hidden(plan: &AggregatePlan, hidden: &[sluice_plan::AggregateCall]) -> Self {
        let mut all = plan.clone();
        all.aggregates.extend_from_slice(hidden);
        Self { visible: plan.aggregates.len(), ..Self::new(&all) }
    }

    /// The group of key `key`, in memory or read back from disk; `None`
    /// when this operator holds no such group.
    pub(crate) fn find_group(&mut self, key: &[u8]) -> Result<Option<u32>, Error> {
        match self.paged.table.find(key) {
            Some(g) => Ok(Some(g)),
            None if self.paged.spilling.spilled_any() => self.with_spilling(|s, op| s.find(op, key)),
            None => Ok(None),
        }
    }

    /// Notes that group `g` changed outside a fold (its page is written at
    /// the next checkpoint, and it counts as used for eviction).
    pub(crate) fn changed(&mut self, g: u32) {
        self.paged.spilling.touch(g);
        self.paged.dirty.mark(self.stable(g));
    }

    /// Deletes group `g`, which holds nothing any more: its key and
    /// accumulators go, and a block left without groups is handed back
    /// (not while HAVING's bits wait to be settled by slot).
    pub(crate) fn delete_group(&mut self, g: u32) {
        self.paged.dirty.mark(self.stable(g));
        self.shown.forget(g);
        for acc in &mut self.accs {
            acc.reset(g as usize);
        }
        if self.shown.tracking() {
            self.paged.table.remove(g);
        } else {
            self.paged.spilling.remove_group(&mut self.paged.table, g);
        }
    }

    /// The id group `slot` has in checkpoints: `slot` itself until the
    /// operator spilled.
    #[inline]
    fn stable(&self, slot: u32) -> u32 {
        self.paged.spilling.stable(slot)
    }

    /// Folds a batch into the groups; appends emitted rows to `out` and the
    /// indices of late rows to `late`.
    pub(crate) fn fold_batch(
        &mut self,
        input: &BatchInput<'_>,
        out: &mut Batch,
        late: &mut Vec<u32>,
    ) -> Result<(), Error> {
        let batch = input.batch;
        let n = batch.len;
        let group_cols = self
            .plan
            .group_exprs
            .iter()
            .map(|e| eval(e, batch).map(|v| v.into_column(n)))
            .collect::<Result<Vec<_>, _>>()?;
        let args = eval_args(&self.plan.aggregates, batch)?;
        if let (Some(name), None) = (&self.plan.window_zone, &self.zone) {
            return Err(Error::Internal(format!("time zone {name:?} of a planned window is unknown")));
        }
        let zone = self.zone.as_ref();
        let refs: Vec<&Column> = group_cols.iter().map(AsRef::as_ref).collect();
        let encoder = KeyEncoder::new(&refs);

        self.rows.clear();
        self.gids.clear();
        self.fresh.clear();
        self.pending.clear();
        self.pending_keys.clear();
        let (rows, gids, fresh, key, table) =
            (&mut self.rows, &mut self.gids, &mut self.fresh, &mut self.key, &mut self.paged.table);
        // Once anything spilled, a key not in memory may be on disk: it
        // waits until the batch's other rows are placed (see `Pending`).
        let spilling = self.paged.spilling.spilled_any();
        let (pending, pending_keys) = (&mut self.pending, &mut self.pending_keys);
        // Without aggregates (SELECT DISTINCT, GROUP BY alone) a group's row
        // never changes once it exists: only its first appearance is news.
        let only_new = self.accs.is_empty();
        let (bounds, open) = (&mut self.bounds, &mut self.open_by_end);
        let mut assign = |row: usize, start: Option<i64>, end: i64| {
            key.clear();
            if let Some(s) = start {
                key.extend_from_slice(&s.to_le_bytes());
            }
            encoder.encode(row, key);
            let (gid, new) = if spilling {
                match table.find(key) {
                    Some(gid) => (gid, false),
                    None => {
                        let at = pending_keys.len();
                        pending_keys.extend_from_slice(key);
                        pending.push(Pending { at: gids.len(), start, end, key: at..pending_keys.len() });
                        (u32::MAX, false)
                    }
                }
            } else {
                table.find_or_insert(key)
            };
            if let (true, Some(s)) = (new, start) {
                open_window_group(bounds, open, gid, gid, s, end);
            }
            rows.push(u32::try_from(row).unwrap_or(u32::MAX));
            gids.push(gid);
            if only_new {
                fresh.push(new);
            }
        };
        match self.plan.window {
            None => input.selection.for_each(|r| assign(r, None, 0)),
            // Window bounds use checked arithmetic: an event time the decoder
            // let through is within ±273,000 years, but a window whose start
            // cannot be represented must make its row late, never overflow
            // (a debug panic, or a release-mode loop that never ends).
            // A zone's clock: windows from its local midnight (a day
            // window 23 or 25 hours long across a clock change).
            Some(TimeWindow::Tumbling { size_ms }) if let Some(zone) = zone => {
                input.selection.for_each(|r| match zoned_tumble(input.event_times[r], size_ms, zone) {
                    Some((start, end)) if end > input.watermark_before[r] => assign(r, Some(start), end),
                    _ => late.push(u32::try_from(r).unwrap_or(u32::MAX)),
                })
            }
            Some(TimeWindow::Tumbling { size_ms }) => input.selection.for_each(|r| {
                let ts = input.event_times[r];
                match ts.checked_sub(ts.rem_euclid(size_ms)) {
                    Some(start) if start.saturating_add(size_ms) > input.watermark_before[r] => {
                        assign(r, Some(start), start.saturating_add(size_ms));
                    }
                    _ => late.push(u32::try_from(r).unwrap_or(u32::MAX)),
                }
            }),
            Some(TimeWindow::Hopping { size_ms, advance_ms }) if let Some(zone) = zone => {
                input.selection.for_each(|r| {
                    let mut on_time = false;
                    for (start, end) in zoned_hops(input.event_times[r], size_ms, advance_ms, zone) {
                        if end > input.watermark_before[r] {
                            on_time = true;
                            assign(r, Some(start), end);
                        }
                    }
                    if !on_time {
                        late.push(u32::try_from(r).unwrap_or(u32::MAX));
                    }
                });
            }
            Some(TimeWindow::Hopping { size_ms, advance_ms }) => input.selection.for_each(|r| {
                let ts = input.event_times[r];
                let lowest = ts.saturating_sub(size_ms);
                let mut on_time = false;
                let mut next = ts.checked_sub(ts.rem_euclid(advance_ms));
                while let Some(start) = next.filter(|&s| s > lowest) {
                    let end = start.saturating_add(size_ms);
                    if end > input.watermark_before[r] {
                        on_time = true;
                        assign(r, Some(start), end);
                    }
                    next = start.checked_sub(advance_ms);
                }
                if !on_time {
                    late.push(u32::try_from(r).unwrap_or(u32::MAX));
                }
            }),
            Some(TimeWindow::Session { .. }) => {
                return Err(Error::Internal("session windows are handled by the session operator".into()));
            }
        }
        if !self.pending.is_empty() {
            self.place_pending(only_new)?;
        }
        if let Some(pages) = &mut self.paged.spilling.pages {
            for &g in &self.gids {
                pages.touch(g);
                self.paged.dirty.mark(pages.stable(g));
            }
        } else {
            for &g in &self.gids {
                self.paged.dirty.mark(g);
            }
        }
        let groups = self.paged.table.capacity();
        for acc in &mut self.accs {
            acc.ensure(groups);
        }
        if self.touched_flag.len() < groups {
            self.touched_flag.resize(groups, false);
        }
        if input.per_record && input.emit_changes {
            // One update per input row, showing the group right after it.
            for i in 0..self.rows.len() {
                for (acc, arg) in self.accs.iter_mut().zip(&args) {
                    arg.update(acc, &self.rows[i..=i], &self.gids[i..=i], &mut self.selected)?;
                }
                if !only_new || self.fresh[i] {
                    let g = self.gids[i];
                    self.emit_group(g, out)?;
                }
            }
            return Ok(());
        }
        for (acc, arg) in self.accs.iter_mut().zip(&args) {
            arg.update(acc, &self.rows, &self.gids, &mut self.selected)?;
        }
        if input.emit_changes {
            for (i, &g) in self.gids.iter().enumerate() {
                if (!only_new || self.fresh[i]) && !self.touched_flag[g as usize] {
                    self.touched_flag[g as usize] = true;
                    self.touched.push(g);
                }
            }
            let touched = std::mem::take(&mut self.touched);
            for &g in &touched {
                self.touched_flag[g as usize] = false;
                self.emit_group(g, out)?;
            }
            self.touched = touched;
            self.touched.clear();
        }
        Ok(())
    }

    /// Closes the windows that end at or before `watermark`, emitting them
    /// when `emit` (EMIT FINAL) and freeing their state.
    pub(crate) fn close_windows(&mut self, watermark: i64, emit: bool, out: &mut Closed<'_>) -> Result<usize, Error> {
        let mut closed = Vec::new();
        while let Some(entry) = self.open_by_end.first_entry() {
            if *entry.key() > watermark {
                break;
            }
            closed.extend(entry.remove());
        }
        if closed.is_empty() {
            return Ok(0);
        }
        if self.paged.spilling.spilled_any() {
            return self.close_spilled(&closed, emit, out);
        }
        if emit {
            for &g in &closed {
                self.emit_group(g, out.rows)?;
                out.drain_if_full()?;
            }
        }
        self.free(&closed);
        Ok(closed.len())
    }

    /// [`AggregateOperator::close_windows`] once the operator spilled:
    /// group by group, each page read back when it is on disk, and a
    /// block whose groups are all closed handed back at once — so closing
    /// a window larger than memory holds a page of it at a time, not the
    /// whole window. (Not with HAVING's bits: they are settled after the
    /// batch, by slot, and a slot must not change hands before.)
    fn close_spilled(&mut self, closed: &[u32], emit: bool, out: &mut Closed<'_>) -> Result<usize, Error> {
        let hand_back = !self.shown.tracking();
        for &id in closed {
            let slot = self.with_spilling(|s, op| s.slot_of(op, id))?;
            if emit {
                self.emit_group(slot, out.rows)?;
                out.drain_if_full()?;
            }
            self.free(&[slot]);
            let block = slot / PAGE_GROUPS;
            if hand_back
                && self.paged.table.block_is_free(block)
                && let Some(pages) = &mut self.paged.spilling.pages
            {
                pages.evicted(block, false);
                self.paged.table.evict_blocks(&[block]);
            }
        }
        Ok(closed.len())
    }

    /// Closes every open window (end of a bounded run).
    pub(crate) fn close_all(&mut self, emit: bool, out: &mut Closed<'_>) -> Result<usize, Error> {
        self.close_windows(i64::MAX, emit, out)
    }

    pub(crate) fn free(&mut self, gids: &[u32]) {
        for &g in gids {
            self.paged.dirty.mark(self.stable(g));
            self.shown.forget(g);
            self.paged.table.remove(g);
            for acc in &mut self.accs {
                acc.reset(g as usize);
            }
        }
    }

    /// Appends group `g` as one intermediate row.
    pub(crate) fn emit_group(&mut self, g: u32, out: &mut Batch) -> Result<(), Error> {
        self.shown.emitted(g);
        let ng = self.group_types.len();
        let windowed = self.plan.window.is_some();
        decode_key_into(
            self.paged.table.key(g),
            if windowed { 8 } else { 0 },
            &self.group_types,
            &mut out.columns[..ng],
        )?;
        let mut next = ng;
        if windowed {
            let (start, end) = self.bounds[g as usize];
            out.columns[ng].push_i64(start)?;
            out.columns[ng + 1].push_i64(end)?;
            next += 2;
        }
        for (acc, col) in self.accs[..self.visible].iter().zip(&mut out.columns[next..]) {
            acc.emit(g as usize, col)?;
        }
        out.len += 1;
        Ok(())
    }

    pub(crate) fn groups(&self) -> usize {
        self.paged.spilling.groups(&self.paged.table)
    }

    pub(crate) fn state_bytes(&self) -> usize {
        self.own_bytes() + self.paged.spilling.heap_bytes()
    }

    /// [`AggregateOperator::state_bytes`] but what spilling keeps.
    fn own_bytes(&self) -> usize {
        self.paged.table.heap_bytes()
            + self.accs.iter().map(Accumulator::heap_bytes).sum::<usize>()
            + self.bounds.capacity() * 16
            + self.open_by_end.len() * 48
            + self.open_by_end.values().map(|v| v.capacity() * 4).sum::<usize>()
            + self.shown.heap_bytes()
            + self.pending.capacity() * size_of::<Pending>()
            + self.pending_keys.capacity()
    }

    /// Places the rows whose key was not in memory (see [`Pending`]), in
    /// their order: a key on disk brings its page back, any other makes a
    /// new group.
    fn place_pending(&mut self, only_new: bool) -> Result<(), Error> {
        let pending = std::mem::take(&mut self.pending);
        let keys = std::mem::take(&mut self.pending_keys);
        for p in &pending {
            let key = &keys[p.key.clone()];
            let (gid, new) = match self.with_spilling(|s, op| s.find(op, key))? {
                Some(gid) => (gid, false),
                None => self.paged.table.find_or_insert(key),
            };
            if new {
                self.paged.spilling.touch(gid);
                if let Some(start) = p.start {
                    let id = self.paged.spilling.stable(gid);
                    open_window_group(&mut self.bounds, &mut self.open_by_end, gid, id, start, p.end);
                }
            }
            self.gids[p.at] = gid;
            if only_new {
                self.fresh[p.at] = new;
            }
        }
        self.pending = pending;
        self.pending_keys = keys;
        Ok(())
    }
}

/// True if `c` is an integer column (event times).
pub fn int_values(c: &Column) -> Option<&[i64]> {
    match &c.data {
        ColumnData::Int(v) => Some(v),
        _ => None,
    }
}

mod pages;

pub use pages::{AggregateState, AggregateStateRef};

impl Operator for AggregateOperator {
    fn process(&mut self, input: &BatchInput<'_>, out: &mut OperatorOutput<'_>) -> Result<(), Error> {
        self.fold_batch(input, out.rows, out.late)
    }

    fn on_watermark(&mut self, watermark: i64, emit: bool, out: &mut Closed<'_>) -> Result<(), Error> {
        if self.plan.window.is_some() {
            self.close_windows(watermark, emit, out)?;
        }
        Ok(())
    }

    fn finish(&mut self, emit: bool, out: &mut Closed<'_>) -> Result<(), Error> {
        // Without a window, groups never close: nothing more to say.
        if self.plan.window.is_some() {
            self.close_all(emit, out)?;
        }
        Ok(())
    }

    fn state_size(&self) -> StateSize {
        StateSize { bytes: self.state_bytes(), entries: self.groups() }
    }

    fn state_size_walks(&self) -> bool {
        self.accs.iter().any(Accumulator::heap_bytes_walks)
    }

    fn state_entries(&self) -> usize {
        self.groups()
    }

    fn snapshot(&self, out: Vec<u8>) -> Result<Vec<u8>, Error> {
        self.snapshot_as(OperatorTag::Aggregate, |state| state, out)
    }

    fn restore(&mut self, bytes: &[u8]) -> Result<(), Error> {
        let (state, rest) = read_state_and_rest(OperatorTag::Aggregate, bytes)?;
        self.restore_state(state)?;
        self.read_shown(rest)
    }

    fn track_having(&mut self) {
        self.shown.track();
    }

    fn settle_having(
        &mut self,
        rows: usize,
        passed: &[u32],
        deleted: &[u32],
        retracted: &mut Vec<u32>,
    ) -> Result<(), Error> {
        self.shown.settle(rows, passed, deleted, retracted)
    }

    fn paged(&self) -> Option<&dyn crate::state::Paged> {
        Some(self)
    }

    fn paged_mut(&mut self) -> Option<&mut dyn crate::state::Paged> {
        Some(self)
    }
}

/// Files new group `gid` of window `[start, end)`: its bounds, and its
/// place among the groups the watermark closes at `end`.
/// `id` is the group's id in checkpoints (its slot `gid` until the
/// operator spilled).
pub(crate) fn open_window_group(
    bounds: &mut Vec<(i64, i64)>,
    open_by_end: &mut BTreeMap<i64, Vec<u32>>,
    gid: u32,
    id: u32,
    start: i64,
    end: i64,
) {
    if bounds.len() <= gid as usize {
        bounds.resize(gid as usize + 1, (0, 0));
    }
    bounds[gid as usize] = (start, end);
    open_by_end.entry(end).or_default().push(id);
}
