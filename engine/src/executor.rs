//! One engine instance: the state and execution of a plan for one Kafka
//! partition, owned by one thread.
//!
//! ```text
//! batch ─▶ watermark per row ─▶ WHERE ─▶ operator ─▶ HAVING ─▶ SELECT list ─▶ Output
//! ```

use std::borrow::Cow;
use std::sync::Arc;

use sluice_crds::{EmitChangesMode, LateRecordPolicy};

use super::aggregate::{AggregateOperator, int_values};
use super::changelog::ChangelogOperator;
use super::hop_panes::HopPaneOperator;
use super::join::JoinOperator;
use super::merge::MergeOperator;
use super::operator::{BatchInput, Closed, Operator, OperatorOutput, OperatorTag};
use super::output::Output;
use super::rows_changelog::RowsChangelogOperator;
use super::rows_window::RowsOperator;
use super::session::SessionOperator;
use super::signed_aggregate::SignedAggregateOperator;
use super::stateless::Stateless;
use super::table_join::TableJoinOperator;
use super::top_n::TopNOperator;
use super::upsert_aggregate::UpsertAggregateOperator;
use crate::Error;
use crate::state::Paged;
use sluice_plan::EmittedRows;
use sluice_plan::{Batch, Selection};
use sluice_plan::{
    EmitMode, OperatorPlan, OutputColumn, Partitioning, Plan, TimeWindow, plan_fingerprint, state_fingerprint,
};
use sluice_plan::{Value, eval, filter_rows};

/// Per-engine settings (from `spec.engine`).
#[derive(Clone, Debug)]
pub struct EngineOptions {
    pub emit_changes: EmitChangesMode,
    pub late_records: LateRecordPolicy,
    pub state_limit_bytes: usize,
    /// The Kafka partition this engine owns (for error messages).
    pub partition: i32,
}

impl Default for EngineOptions {
    fn default() -> Self {
        Self {
            emit_changes: EmitChangesMode::Coalesced,
            late_records: LateRecordPolicy::Drop,
            state_limit_bytes: 256 << 20,
            partition: 0,
        }
    }
}

/// Counters an engine keeps; the runtime turns them into metrics per batch.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct EngineStats {
    pub records_in: u64,
    pub records_out: u64,
    pub late_records: u64,
    pub state_bytes: usize,
    pub state_entries: usize,
    /// Pages of state on disk (`crate::state`), and the bytes they take.
    pub spilled_pages: usize,
    pub spilled_bytes: u64,
}

#[derive(Debug)]
pub struct Engine {
    plan: Arc<Plan>,
    options: EngineOptions,
    operator: Box<dyn Operator>,
    /// Highest event time seen (i64::MIN before any) — or, for a stage fed
    /// by an exchange, the watermark the exchange established (see
    /// [`Engine::advance_watermark`]). Either way it is what the checkpoint
    /// keeps, so the watermark survives a restore.
    max_event_time: i64,
    /// The input crossed an exchange: its watermark is the minimum of the
    /// upstream partitions' watermarks, handed in between batches, not one
    /// computed from the rows this engine sees (rows of several upstream
    /// partitions interleave here in no particular order).
    from_exchange: bool,
    /// Rows kept by WHERE (scratch).
    selection: Vec<u32>,
    /// Watermark in force at each row of the current batch (scratch).
    watermark_before: Vec<i64>,
    /// For a stage fed by an exchange: `(row, watermark)` — the exchange's
    /// watermark reached `watermark` before row `row` of the batch in
    /// process (see [`Engine::process_exchanged`]).
    marks: Vec<(usize, i64)>,
    /// While a batch an UNNEST expanded runs: each row's source record,
    /// and the records' event times, which move the watermark whether or
    /// not a record has elements.
    unnested: Option<(Vec<u32>, Vec<i64>)>,
    /// Rows emitted by a stateful operator, before HAVING and the SELECT list (scratch).
    intermediate: Batch,
    /// Columns an operator computed for its input rows (scratch).
    columns: Vec<(usize, sluice_plan::Column)>,
    having: Vec<u32>,
    late: Vec<u32>,
    stats: EngineStats,
    /// `stats.records_in` when the state was last measured.
    state_measured_at: u64,
    /// The state was restored whole (or converted): the next incremental
    /// checkpoint writes every page, none of which the state topic holds yet.
    all_pages_dirty: bool,
}

const SNAPSHOT_VERSION: u32 = 1;

fn source_types(plan: &Plan) -> Vec<sluice_plan::DataType> {
    plan.source.schema.fields.iter().map(|f| f.data_type).collect()
}

/// A checkpoint: this header (postcard), then the operator's tag and state
/// (see [`crate::operator::write_state`]).
type SnapshotHeader = (u32, u64, i64);

impl Engine {
    pub fn new(plan: Arc<Plan>, options: EngineOptions) -> Self {
        let mut operator: Box<dyn Operator> = match &plan.operator {
            OperatorPlan::Stateless => Box::new(Stateless),
            OperatorPlan::Aggregate(a) => match a.window {
                Some(TimeWindow::Session { gap_ms }) => Box::new(SessionOperator::new(a, gap_ms)),
                _ if !a.upsert_key.is_empty() => Box::new(UpsertAggregateOperator::new(a)),
                _ if let Some(retract) = &a.retract => Box::new(SignedAggregateOperator::new(a, retract)),
                _ => match HopPaneOperator::applies(a, plan.emit) {
                    Some((size, advance)) => Box::new(HopPaneOperator::new(a, size, advance)),
                    None => Box::new(AggregateOperator::new(a)),
                },
            },
            OperatorPlan::Rows(r) if !r.upsert_key.is_empty() => {
                Box::new(RowsChangelogOperator::new(r, &plan.used_columns))
            }
            OperatorPlan::Rows(r) => Box::new(RowsOperator::new(r)),
            OperatorPlan::TopN(t) => Box::new(TopNOperator::new(t, &plan.used_columns)),
            OperatorPlan::Merge(m) => Box::new(MergeOperator::new(m)),
            OperatorPlan::Join(j) => Box::new(JoinOperator::new(j, &source_types(&plan))),
            OperatorPlan::TableJoin(j) => Box::new(TableJoinOperator::new(j, &source_types(&plan))),
            OperatorPlan::Changelog(c) => Box::new(ChangelogOperator::new(c, plan.source.schema.fields.len())),
        };
        if plan.having.is_some() && plan.emit == EmitMode::Changes {
            operator.track_having();
        }
        let types: Vec<_> = plan.intermediate.fields.iter().map(|f| f.data_type).collect();
        let from_exchange = plan.partitioning == Partitioning::ByExchange;
        Self {
            intermediate: Batch::empty(&types),
            plan,
            options,
            operator,
            max_event_time: i64::MIN,
            from_exchange,
            selection: Vec::new(),
            watermark_before: Vec::new(),
            marks: Vec::new(),
            unnested: None,
            columns: Vec::new(),
            having: Vec::new(),
            late: Vec::new(),
            stats: EngineStats::default(),
            state_measured_at: 0,
            all_pages_dirty: false,
        }
    }

    pub fn plan(&self) -> &Arc<Plan> {
        &self.plan
    }

    pub fn stats(&self) -> EngineStats {
        self.stats
    }

    /// Whether the operator keeps which groups HAVING showed (HAVING
    /// over EMIT CHANGES): their rows are settled all at once.
    fn tracks_having(&self) -> bool {
        self.plan.having.is_some() && self.plan.emit == EmitMode::Changes
    }

    /// The current watermark (event time below which windows are closed).
    pub fn watermark(&self) -> Option<i64> {
        if self.from_exchange {
            return (self.max_event_time != i64::MIN).then_some(self.max_event_time);
        }
        let delay = self.plan.source.event_time?.delay_ms;
        (self.max_event_time != i64::MIN).then(|| self.max_event_time.saturating_sub(delay))
    }

    /// The watermark of what this engine emits: no row it emits later is
    /// older. Its input's watermark, unless the operator may still emit
    /// rows older than that (see [`Operator::output_watermark`]). This is
    /// what a stage writing an exchange tells the next stage.
    pub fn output_watermark(&self) -> Option<i64> {
        self.watermark().map(|w| if w == i64::MAX { w } else { self.operator.output_watermark(w) })
    }

    /// Processes one batch. `batch` is borrowed mutably only so ROWS window
    /// results can be appended as extra columns without copying the input;
    /// it is returned unchanged.
    pub fn process(&mut self, batch: &mut Batch, out: &mut dyn Output) -> Result<(), Error> {
        self.run(batch, &[], out)
    }

    /// [`Engine::process`], with the upstream partition of every row when
    /// the batch came through an exchange.
    fn run(&mut self, batch: &mut Batch, upstreams: &[u32], out: &mut dyn Output) -> Result<(), Error> {
        let plan = Arc::clone(&self.plan);
        match &plan.unnest {
            // A plan that unnests reads a source, never an exchange: no
            // upstreams or watermark marks to carry over to its rows.
            Some(unnest) => {
                let (mut rows, parents) = crate::unnest::unnest(unnest, batch)?;
                let times = plan
                    .source
                    .event_time
                    .and_then(|et| batch.columns.get(et.column).and_then(int_values))
                    .map(<[i64]>::to_vec)
                    .unwrap_or_default();
                let newest = times.iter().copied().max();
                let mut out = crate::unnest::ToRecords { out, parents: &parents, records: batch };
                self.unnested = Some((parents.clone(), times));
                let result = self.run_input(&mut rows, &[], &mut out);
                self.unnested = None;
                // A batch of records without elements still moves time on.
                if let Some(t) = newest {
                    self.max_event_time = self.max_event_time.max(t);
                }
                result
            }
            None => self.run_input(batch, upstreams, out),
        }
    }

    /// [`Engine::run`] once the input is what the plan reads (unnested).
    fn run_input(&mut self, batch: &mut Batch, upstreams: &[u32], out: &mut dyn Output) -> Result<(), Error> {
        let n = batch.len;
        if n == 0 {
            return Ok(());
        }
        if self.plan.shared.is_empty() {
            return self.run_rows(batch, upstreams, out);
        }
        // The plan's shared subexpressions, once, as columns after the
        // source's (`sluice_plan::Plan::shared`).
        let inputs = batch.columns.len();
        if inputs != self.plan.input_width() {
            return Err(Error::Internal(format!(
                "a batch of {inputs} columns for an input of {}",
                self.plan.input_width()
            )));
        }
        let plan = Arc::clone(&self.plan);
        for e in &plan.shared {
            let column = match eval(e, batch) {
                Ok(v) => v.into_column(n).into_owned(),
                Err(e) => {
                    batch.columns.truncate(inputs);
                    return Err(e.into());
                }
            };
            batch.columns.push(column);
        }
        let result = self.run_rows(batch, upstreams, out);
        batch.columns.truncate(inputs);
        result
    }

    fn run_rows(&mut self, batch: &mut Batch, upstreams: &[u32], out: &mut dyn Output) -> Result<(), Error> {
        let n = batch.len;
        self.stats.records_in += n as u64;
        let windowed = self.plan.judges_lateness();
        let mut event_times: &[i64] = &[];
        if let Some(et) = self.plan.source.event_time
            && let Some(ts) = batch.columns.get(et.column).and_then(int_values)
            && ts.len() == n
        {
            if self.from_exchange {
                if windowed {
                    // The exchange's watermark as it stood at each row: the
                    // markers that arrived between rows say where it moved.
                    self.watermark_before.clear();
                    let (mut at, mut next) = (self.max_event_time, 0);
                    for row in 0..n {
                        while let Some(&(_, w)) = self.marks.get(next).filter(|m| m.0 <= row) {
                            at = at.max(w);
                            next += 1;
                        }
                        self.watermark_before.push(at);
                    }
                }
            } else if windowed {
                // The watermark each row saw: all rows before it count, so
                // lateness does not depend on batch boundaries.
                self.watermark_before.clear();
                let mut max = self.max_event_time;
                match &self.unnested {
                    // Per source record, then each of its rows.
                    Some((parents, times)) => {
                        let mut per_record = Vec::with_capacity(times.len());
                        for &t in times {
                            per_record.push(max.saturating_sub(et.delay_ms));
                            max = max.max(t);
                        }
                        let at = |p: &u32| per_record.get(*p as usize).copied().unwrap_or(max);
                        self.watermark_before.extend(parents.iter().map(at));
                    }
                    None => {
                        for &t in ts {
                            self.watermark_before.push(max.saturating_sub(et.delay_ms));
                            max = max.max(t);
                        }
                    }
                }
                self.max_event_time = max;
            } else {
                let times = self.unnested.as_ref().map_or(ts, |(_, times)| times.as_slice());
                self.max_event_time = times.iter().copied().fold(self.max_event_time, i64::max);
            }
            event_times = ts;
        }
        let filtered = match &self.plan.filter {
            Some(f) => filter_rows(f, batch, &mut self.selection)?,
            None => false,
        };
        self.late.clear();
        let per_record = self.options.emit_changes == EmitChangesMode::PerRecord;
        let emit_changes = self.plan.emit == EmitMode::Changes;
        let watermark = self.watermark();
        let plan = Arc::clone(&self.plan);
        let selection = if filtered { Selection::Rows(&self.selection) } else { Selection::All(n) };
        self.intermediate.clear();
        self.columns.clear();
        let mut drained = 0;
        let deleted;
        {
            let input = BatchInput {
                batch,
                selection,
                event_times,
                watermark_before: &self.watermark_before,
                per_record,
                emit_changes,
                upstreams,
            };
            let having = &mut self.having;
            let mut drain = |rows: &Batch| {
                drained += emit_intermediate(&plan, rows, &[], having, None, out)?;
                Ok(())
            };
            let mut produced = OperatorOutput {
                drain: Some(&mut drain),
                ..OperatorOutput::new(&mut self.intermediate, &mut self.columns, &mut self.late)
            };
            self.operator.process(&input, &mut produced)?;
            deleted = produced.deleted;
        }
        self.stats.records_out += drained as u64;
        if let Some(wm) = watermark {
            // The batch's own rows stay where `deleted` points.
            let chunked = deleted.is_empty() && !self.tracks_having();
            let (operator, having) = (&mut self.operator, &mut self.having);
            self.stats.records_out += close_in_chunks(&plan, &mut self.intermediate, having, chunked, out, |c| {
                operator.on_watermark(wm, !emit_changes, c)
            })? as u64;
        }
        if self.operator.passes_input_through() {
            // The operator's columns join the input's for the SELECT list.
            let inputs = batch.columns.len();
            batch.columns.extend(self.columns.drain(..).map(|(_, c)| c));
            // An unnested row is not one input record: its record's
            // timestamp and offset do not carry over row for row.
            let result = emit(&plan.outputs, &plan.keys, batch, selection, plan.unnest.is_none(), out);
            batch.columns.truncate(inputs);
            self.stats.records_out += result? as u64;
        } else {
            let operator = Some(&mut *self.operator);
            self.stats.records_out +=
                emit_intermediate(&plan, &self.intermediate, &deleted, &mut self.having, operator, out)? as u64;
        }
        if !self.late.is_empty() {
            self.stats.late_records += self.late.len() as u64;
            out.late(batch, &self.late)?;
        }
        self.check_state_limit()
    }

    /// For a stage fed by an exchange: processes a batch during which the
    /// exchange's watermark moved — `marks` holds `(row, watermark)`, in
    /// row order, for each move before row `row` — then advances to the
    /// last. A row is late exactly when it would be with the batch cut at
    /// every mark, so results do not depend on where batches end; windows
    /// a mark closed are emitted after the batch rather than mid-batch.
    /// `upstreams` names the upstream partition of each row.
    pub fn process_exchanged(
        &mut self,
        batch: &mut Batch,
        marks: &[(usize, i64)],
        upstreams: &[u32],
        out: &mut dyn Output,
    ) -> Result<(), Error> {
        self.marks.clear();
        self.marks.extend_from_slice(marks);
        let processed = self.run(batch, upstreams, out);
        self.marks.clear();
        processed?;
        match marks.iter().map(|m| m.1).max() {
            Some(w) => self.advance_watermark(w, out),
            None => Ok(()),
        }
    }

    /// For a stage fed by an exchange: the watermark of its input — the
    /// minimum over the upstream partitions' watermarks — reached
    /// `watermark`. Closes (and, under EMIT FINAL, emits) what it passed.
    /// A watermark never moves back; other engines ignore this.
    pub fn advance_watermark(&mut self, watermark: i64, out: &mut dyn Output) -> Result<(), Error> {
        if !self.from_exchange || watermark <= self.max_event_time {
            return Ok(());
        }
        self.max_event_time = watermark;
        self.intermediate.clear();
        let emit = self.plan.emit != EmitMode::Changes;
        let plan = Arc::clone(&self.plan);
        let chunked = !self.tracks_having();
        let (operator, having) = (&mut self.operator, &mut self.having);
        self.stats.records_out += close_in_chunks(&plan, &mut self.intermediate, having, chunked, out, |c| {
            operator.on_watermark(watermark, emit, c)
        })? as u64;
        let operator = Some(&mut *self.operator);
        self.stats.records_out +=
            emit_intermediate(&plan, &self.intermediate, &[], &mut self.having, operator, out)? as u64;
        self.check_state_limit()
    }

    /// Ends a bounded run: closes every open window and emits what EMIT
    /// FINAL would emit when the watermark passed it.
    pub fn finish(&mut self, out: &mut dyn Output) -> Result<(), Error> {
        self.intermediate.clear();
        let emit_final = self.plan.emit == EmitMode::Final;
        let plan = Arc::clone(&self.plan);
        let chunked = !self.tracks_having();
        let (operator, having) = (&mut self.operator, &mut self.having);
        self.stats.records_out +=
            close_in_chunks(&plan, &mut self.intermediate, having, chunked, out, |c| operator.finish(emit_final, c))?
                as u64;
        let operator = Some(&mut *self.operator);
        self.stats.records_out +=
            emit_intermediate(&plan, &self.intermediate, &[], &mut self.having, operator, out)? as u64;
        self.check_state_limit()
    }

    /// Measures the operator's state and fails past the limit. An operator
    /// whose measure walks its state (`Operator::state_size_walks`) is
    /// measured once at least an eighth as many rows as its state had
    /// entries have come since the last measure, or once its entry count
    /// (read without a walk) moved by an eighth either way: a few steps a
    /// row or a removed entry however large the state, where measuring
    /// after every batch cost a walk of a million keys per 4,096 rows.
    /// Between measures the state grows by about an eighth at most, which
    /// the limit (a guard, not an account) allows; and a state emptied by
    /// closing windows, with no row since, is reported at its new size.
    fn check_state_limit(&mut self) -> Result<(), Error> {
        if let Some(paged) = self.operator.paged_mut() {
            paged.spill()?;
            (self.stats.spilled_pages, self.stats.spilled_bytes) = paged.spilled();
        }
        if self.operator.state_size_walks() {
            let measured = self.stats.state_entries;
            let since = self.stats.records_in.saturating_sub(self.state_measured_at);
            if since < u64::try_from(measured / 8).unwrap_or(u64::MAX)
                && self.operator.state_entries().abs_diff(measured) < (measured / 8).max(1)
            {
                return Ok(());
            }
        }
        self.state_measured_at = self.stats.records_in;
        let size = self.operator.state_size();
        let bytes = size.bytes;
        self.stats.state_bytes = bytes;
        self.stats.state_entries = size.entries;
        if bytes > self.options.state_limit_bytes {
            return Err(Error::StateLimit {
                partition: self.options.partition,
                used: bytes,
                limit: self.options.state_limit_bytes,
            });
        }
        Ok(())
    }

    /// Lets the operator keep state larger than memory: past `budget`
    /// bytes it moves cold pages to `store` (`crate::state`). False when
    /// the operator cannot spill (its state stays in memory, bounded by
    /// the state limit).
    pub fn attach_spill(&mut self, store: Box<dyn crate::SpillStore>, budget: usize) -> bool {
        let Some(paged) = self.operator.paged_mut() else { return false };
        paged.attach_spill(store, budget);
        true
    }

    /// Whether the engine's state can spill ([`Engine::attach_spill`]
    /// takes a store).
    pub fn spills(&self) -> bool {
        self.operator.paged().is_some()
    }

    /// Serialises the engine's state (see [`Engine::restore`]), headed by
    /// the fingerprint of the state it holds ([`state_fingerprint`]).
    pub fn snapshot(&self) -> Result<Vec<u8>, Error> {
        self.operator.snapshot(self.snapshot_header()?)
    }

    /// Whether checkpoints of this engine are incremental: a head
    /// ([`Engine::snapshot_head`]) and the pages that changed
    /// ([`Engine::take_dirty_pages`], [`Engine::snapshot_page`]).
    pub fn paged(&self) -> bool {
        self.operator.paged().is_some()
    }

    /// The head of an incremental checkpoint: [`Engine::snapshot`]'s
    /// header, then what the operator keeps outside its pages (all of its
    /// state when it is not paged).
    pub fn snapshot_head(&self) -> Result<Vec<u8>, Error> {
        let header = self.snapshot_header()?;
        match self.operator.paged() {
            Some(paged) => paged.snapshot_head(header),
            None => self.operator.snapshot(header),
        }
    }

    fn snapshot_header(&self) -> Result<Vec<u8>, Error> {
        let header: SnapshotHeader = (SNAPSHOT_VERSION, state_fingerprint(&self.plan), self.max_event_time);
        postcard::to_allocvec(&header).map_err(|e| Error::Checkpoint(format!("cannot serialise state: {e}")))
    }

    /// The pages changed since the last call (all of them after a whole
    /// state was restored), in increasing order.
    pub fn take_dirty_pages(&mut self) -> Vec<u32> {
        let mut pages = Vec::new();
        let all = std::mem::take(&mut self.all_pages_dirty);
        if let Some(paged) = self.operator.paged_mut() {
            paged.take_dirty_pages(all, &mut pages);
        }
        pages
    }

    pub fn snapshot_page(&self, page: u32) -> Result<Vec<u8>, Error> {
        self.paged_state()?.snapshot_page(page, Vec::new())
    }

    /// Restores a head written by [`Engine::snapshot_head`]; its pages
    /// follow ([`Engine::restore_page`]), then [`Engine::pages_restored`].
    pub fn restore_head(&mut self, bytes: &[u8]) -> Result<(), Error> {
        let operator = self.restore_header(bytes)?;
        match self.operator.paged_mut() {
            Some(paged) => paged.restore_head(operator)?,
            None => self.operator.restore(operator)?,
        }
        self.all_pages_dirty = false;
        Ok(())
    }

    pub fn restore_page(&mut self, page: u32, bytes: &[u8]) -> Result<(), Error> {
        self.paged_state_mut()?.restore_page(page, bytes)
    }

    pub fn pages_restored(&mut self) -> Result<(), Error> {
        if let Some(paged) = self.operator.paged_mut() {
            paged.pages_restored()?;
        }
        self.check_state_limit()
    }

    /// The operator's paged state, for a page of a checkpoint.
    fn paged_state(&self) -> Result<&dyn Paged, Error> {
        self.operator.paged().ok_or_else(|| Error::Internal("a page of an operator whose state is not paged".into()))
    }

    fn paged_state_mut(&mut self) -> Result<&mut dyn Paged, Error> {
        self.operator
            .paged_mut()
            .ok_or_else(|| Error::Internal("a page restored into an operator whose state is not paged".into()))
    }

    /// A hopping aggregate's checkpoint written in panes (EMIT FINAL),
    /// restored into the same query emitting changes, which runs per
    /// window: its panes merged into the windows still open. `None` for
    /// any other checkpoint.
    fn panes_to_windows(&self, operator: &[u8]) -> Result<Option<AggregateOperator>, Error> {
        let OperatorPlan::Aggregate(a) = &self.plan.operator else { return Ok(None) };
        let Some(TimeWindow::Hopping { size_ms, advance_ms }) = a.window else { return Ok(None) };
        let tag = postcard::take_from_bytes::<u32>(operator).map(|(t, _)| t).unwrap_or(u32::MAX);
        if tag != OperatorTag::HopPanes as u32 || HopPaneOperator::applies(a, self.plan.emit).is_some() {
            return Ok(None);
        }
        let mut panes = HopPaneOperator::new(a, size_ms, advance_ms);
        panes.restore(operator)?;
        panes.into_windows().map(Some)
    }

    /// Restores state written by [`Engine::snapshot`] for a plan that keeps
    /// the same state: the query may have changed its filters and outputs
    /// since (a compatible upgrade), not its keys and aggregates.
    /// Checkpoints of earlier releases carry the whole plan's fingerprint
    /// instead, which still restores into the same plan.
    pub fn restore(&mut self, bytes: &[u8]) -> Result<(), Error> {
        let operator = self.restore_header(bytes)?;
        match self.panes_to_windows(operator)? {
            Some(windows) => self.operator = Box::new(windows),
            None => self.operator.restore(operator)?,
        }
        self.all_pages_dirty = true;
        self.check_state_limit()
    }

    /// Checks a checkpoint's header and takes its watermark: the
    /// operator's bytes that follow.
    fn restore_header<'b>(&mut self, bytes: &'b [u8]) -> Result<&'b [u8], Error> {
        let ((version, fingerprint, max_event_time), operator): (SnapshotHeader, &[u8]) =
            postcard::take_from_bytes(bytes).map_err(|e| Error::Checkpoint(format!("cannot read state: {e}")))?;
        if version != SNAPSHOT_VERSION {
            return Err(Error::Checkpoint(format!("state format {version} is not {SNAPSHOT_VERSION}")));
        }
        let state = state_fingerprint(&self.plan);
        if fingerprint != state && fingerprint != plan_fingerprint(&self.plan) {
            return Err(Error::Checkpoint(format!(
                "the checkpoint was written by a query that keeps different state (state fingerprint \
                 {fingerprint:016x}, this query's is {state:016x}); to start this query over, set the job's \
                 spec.upgradeMode to Fresh"
            )));
        }
        self.max_event_time = max_event_time;
        Ok(operator)
    }
}

/// Runs `close` (a watermark's or the input end's closing) with its rows
/// going on through HAVING and the SELECT list to `out` in chunks as they
/// come, when `chunked`; what is left is in `rows` when it returns.
/// Returns the rows it handed on. Not chunked where HAVING keeps which
/// groups were shown (settled once all rows are in), or where the rows
/// already in `rows` must stay where the batch's deletions point.
fn close_in_chunks(
    plan: &Plan,
    rows: &mut Batch,
    having: &mut Vec<u32>,
    chunked: bool,
    out: &mut dyn Output,
    close: impl FnOnce(&mut Closed<'_>) -> Result<(), Error>,
) -> Result<usize, Error> {
    let mut drained = 0;
    let mut drain = |rows: &Batch| {
        drained += emit_intermediate(plan, rows, &[], having, None, out)?;
        Ok(())
    };
    close(&mut Closed { rows, drain: if chunked { Some(&mut drain) } else { None } })?;
    Ok(drained)
}

/// Evaluates the SELECT list and keys over `batch` and hands the selected
/// rows to `out`. Returns the number of rows emitted.
fn emit(
    outputs: &[OutputColumn],
    keys: &[OutputColumn],
    batch: &Batch,
    selection: Selection<'_>,
    from_input: bool,
    out: &mut dyn Output,
) -> Result<usize, Error> {
    if selection.is_empty() {
        return Ok(0);
    }
    let columns: Vec<Value<'_>> = outputs.iter().map(|o| eval(&o.expr, batch)).collect::<Result<_, _>>()?;
    let keys: Vec<Value<'_>> = keys.iter().map(|o| eval(&o.expr, batch)).collect::<Result<_, _>>()?;
    out.rows(&EmittedRows { columns: &columns, keys: &keys, selection, from_input, delete: false })?;
    Ok(selection.len())
}

/// HAVING over the operator's rows, then the SELECT list. The rows in
/// `deleted` (increasing) delete their keys: they skip HAVING (the group
/// is gone whatever it held) and go out after the others, marked. So do
/// the rows of groups that were shown and now fail HAVING, when
/// `operator` (absent for rows drained mid-batch, which no operator that
/// tracks HAVING drains) keeps which groups are shown
/// ([`Operator::settle_having`]).
fn emit_intermediate(
    plan: &Plan,
    rows: &Batch,
    deleted: &[u32],
    having: &mut Vec<u32>,
    operator: Option<&mut (dyn Operator + 'static)>,
    out: &mut dyn Output,
) -> Result<usize, Error> {
    let filtered = match &plan.having {
        Some(h) if !rows.is_empty() => filter_rows(h, rows, having)?,
        _ => false,
    };
    let settle = operator.filter(|_| plan.having.is_some());
    if !filtered && (settle.is_some() || !deleted.is_empty()) {
        having.clear();
        having.extend(0..u32::try_from(rows.len).unwrap_or(u32::MAX));
    }
    let mut gone = Vec::new();
    if let Some(op) = settle {
        op.settle_having(rows.len, having, deleted, &mut gone)?;
    }
    let deleted = merge_sorted(deleted, &gone);
    if rows.is_empty() {
        return Ok(0);
    }
    if deleted.is_empty() {
        let selection = if filtered { Selection::Rows(having) } else { Selection::All(rows.len) };
        return emit(&plan.outputs, &plan.keys, rows, selection, false, out);
    }
    let deleted = &deleted[..];
    let is_deleted = |r: &u32| deleted.binary_search(r).is_ok();
    having.retain(|r| !is_deleted(r));
    // The SELECT list once, for the upserts and the deletions alike.
    let columns: Vec<Value<'_>> = plan.outputs.iter().map(|o| eval(&o.expr, rows)).collect::<Result<_, _>>()?;
    let keys: Vec<Value<'_>> = plan.keys.iter().map(|o| eval(&o.expr, rows)).collect::<Result<_, _>>()?;
    for (selection, delete) in [(Selection::Rows(having), false), (Selection::Rows(deleted), true)] {
        if !selection.is_empty() {
            out.rows(&EmittedRows { columns: &columns, keys: &keys, selection, from_input: false, delete })?;
        }
    }
    Ok(having.len() + deleted.len())
}

/// Two increasing lists of rows, as one (`gone` is empty but for an
/// aggregate whose groups stop passing HAVING).
fn merge_sorted<'a>(a: &'a [u32], b: &[u32]) -> Cow<'a, [u32]> {
    if b.is_empty() {
        return Cow::Borrowed(a);
    }
    let mut all = Vec::with_capacity(a.len() + b.len());
    all.extend_from_slice(a);
    all.extend_from_slice(b);
    all.sort_unstable();
    Cow::Owned(all)
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use sluice_crds::{ColumnType, EventTimeSpec, SourceSpec};
    use sluice_plan::Batch;

    use super::{Engine, EngineOptions};
    use crate::Output;
    use sluice_plan::EmittedRows;

    struct Discard;
    impl Output for Discard {
        fn rows(&mut self, _: &EmittedRows<'_>) -> Result<(), crate::Error> {
            Ok(())
        }
        fn late(&mut self, _: &Batch, _: &[u32]) -> Result<(), crate::Error> {
            Ok(())
        }
    }

    /// A session window's size with a string's MIN walks every session's
    /// string, so it is measured once an eighth as many rows as it had
    /// entries arrived, not after every batch, or once closing windows
    /// removed an eighth of its entries; the limit still stops it.
    #[test]
    fn a_state_whose_size_walks_it_is_measured_once_an_eighth_of_its_entries_arrived() {
        use sluice_plan::{Column, ColumnData, DataType};
        let source = SourceSpec {
            partition_key: vec!["k".into()],
            event_time: Some(EventTimeSpec { column: "ts".into(), watermark_delay_millis: 0 }),
            ..SourceSpec::table(
                "t",
                &[
                    ("k", ColumnType::Bigint, true),
                    ("ts", ColumnType::Timestamp, true),
                    ("s", ColumnType::String, true),
                ],
            )
        };
        let sql = "SELECT k, MIN(s) AS lo FROM t GROUP BY k, SESSION(ts, INTERVAL '1' MINUTE)";
        let plan = Arc::new(sluice_sql::plan_dataflow(sql, &[source], 1).unwrap().stages[0].plan.clone());
        let strings = |n: usize| {
            let mut s = Column::with_capacity(DataType::String, n);
            (0..n).for_each(|_| s.push_str("x").unwrap());
            s
        };
        let batch = |keys: std::ops::Range<i64>| {
            let n = keys.clone().count();
            let k = Column::new(DataType::Bigint, ColumnData::Int(keys.collect()), None);
            let ts = Column::new(DataType::Timestamp, ColumnData::Int(vec![1_000; n]), None);
            Batch::new(vec![k, ts, strings(n)], n)
        };
        let mut engine = Engine::new(Arc::clone(&plan), EngineOptions::default());
        engine.process(&mut batch(0..1_000), &mut Discard).unwrap();
        assert_eq!(engine.stats().state_entries, 1_000, "measured: nothing was before");
        engine.process(&mut batch(1_000..1_100), &mut Discard).unwrap();
        assert_eq!(engine.stats().state_entries, 1_000, "100 rows since, under 1,000 / 8: not measured");
        engine.process(&mut batch(1_100..1_200), &mut Discard).unwrap();
        assert_eq!(engine.stats().state_entries, 1_200, "200 rows since: measured");
        // One row ten minutes on: the watermark closes the 1,200 sessions.
        // A single row is far under an eighth of them, but the state
        // shrank by more than an eighth: it is measured again.
        let later = Column::new(DataType::Timestamp, ColumnData::Int(vec![600_000]), None);
        let k = Column::new(DataType::Bigint, ColumnData::Int(vec![5_000]), None);
        engine.process(&mut Batch::new(vec![k, later, strings(1)], 1), &mut Discard).unwrap();
        assert_eq!(engine.stats().state_entries, 1, "the closed sessions are gone from the measure");
        let tight = EngineOptions { state_limit_bytes: 1 << 10, ..EngineOptions::default() };
        let mut limited = Engine::new(plan, tight);
        assert!(limited.process(&mut batch(0..1_000), &mut Discard).is_err(), "past the limit");
    }

    #[test]
    fn an_exchange_fed_engine_takes_its_watermark_from_outside_and_keeps_it_in_checkpoints() {
        let source = SourceSpec {
            partition_key: vec!["trader".into()],
            event_time: Some(EventTimeSpec { column: "ts".into(), watermark_delay_millis: 1_000 }),
            ..SourceSpec::table("t", &[("trader", ColumnType::String, true), ("ts", ColumnType::Timestamp, true)])
        };
        let sql = "SELECT COUNT(*) AS n FROM t GROUP BY TUMBLE(ts, INTERVAL '1' MINUTE)";
        let dataflow = sluice_sql::plan_dataflow(sql, &[source], 2).unwrap();
        let plan = Arc::new(dataflow.stages[1].plan.clone());
        let mut engine = Engine::new(Arc::clone(&plan), EngineOptions::default());
        assert_eq!(engine.watermark(), None, "no watermark before the exchange sends one");
        engine.advance_watermark(120_000, &mut Discard).unwrap();
        engine.advance_watermark(60_000, &mut Discard).unwrap();
        assert_eq!(engine.watermark(), Some(120_000), "a watermark never moves back");
        let mut restored = Engine::new(plan, EngineOptions::default());
        restored.restore(&engine.snapshot().unwrap()).unwrap();
        assert_eq!(restored.watermark(), Some(120_000));
    }

    /// The rows of each call to an output.
    #[derive(Default)]
    struct Calls(Vec<usize>);
    impl Output for Calls {
        fn rows(&mut self, rows: &EmittedRows<'_>) -> Result<(), crate::Error> {
            self.0.push(rows.selection.len());
            Ok(())
        }
        fn late(&mut self, _: &Batch, _: &[u32]) -> Result<(), crate::Error> {
            Ok(())
        }
    }

    /// A watermark that passes every open window, or the end of a bounded
    /// input, closes them all at once: their rows go on in chunks of
    /// `OUTPUT_CHUNK_ROWS`, as they close, not in one batch as large as
    /// the state (2.9 M sessions took over 1 GB past their state that way).
    #[test]
    fn windows_closed_at_once_go_out_in_chunks() {
        use crate::operator::OUTPUT_CHUNK_ROWS;
        use sluice_plan::{Column, ColumnData, DataType};
        let source = SourceSpec {
            partition_key: vec!["k".into()],
            event_time: Some(EventTimeSpec { column: "ts".into(), watermark_delay_millis: 0 }),
            ..SourceSpec::table("t", &[("k", ColumnType::Bigint, true), ("ts", ColumnType::Timestamp, true)])
        };
        let batch = |keys: std::ops::Range<i64>, ts: i64| {
            let n = keys.clone().count();
            let k = Column::new(DataType::Bigint, ColumnData::Int(keys.collect()), None);
            let ts = Column::new(DataType::Timestamp, ColumnData::Int(vec![ts; n]), None);
            Batch::new(vec![k, ts], n)
        };
        let keys = 3 * OUTPUT_CHUNK_ROWS as i64 + 100;
        for window in ["SESSION(ts, INTERVAL '1' MINUTE)", "TUMBLE(ts, INTERVAL '1' MINUTE)"] {
            let sql = format!("SELECT k, COUNT(*) AS n FROM t GROUP BY k, {window}");
            let plan = Arc::new(sluice_plan_of(&sql, &source));
            let mut engine = Engine::new(Arc::clone(&plan), EngineOptions::default());
            let mut out = Calls::default();
            engine.process(&mut batch(0..keys, 1_000), &mut out).unwrap();
            assert!(out.0.is_empty(), "{window}: nothing closed yet");
            // One row ten minutes on: its watermark closes every window.
            engine.process(&mut batch(0..1, 600_000), &mut out).unwrap();
            assert_eq!(out.0.iter().sum::<usize>(), keys as usize, "{window}: every window closed");
            assert!(out.0.len() > 3, "{window}: in {} calls", out.0.len());
            assert!(out.0.iter().all(|&n| n <= OUTPUT_CHUNK_ROWS), "{window}: {:?}", out.0);
            // And at the end of the input.
            engine.process(&mut batch(0..keys, 700_000), &mut out).unwrap();
            out.0.clear();
            engine.finish(&mut out).unwrap();
            assert_eq!(out.0.iter().sum::<usize>(), keys as usize, "{window}: every window finished");
            assert!(out.0.len() > 3 && out.0.iter().all(|&n| n <= OUTPUT_CHUNK_ROWS), "{window}: {:?}", out.0);
        }
    }

    fn sluice_plan_of(sql: &str, source: &SourceSpec) -> sluice_plan::Plan {
        sluice_sql::plan_dataflow(sql, std::slice::from_ref(source), 1).unwrap().stages[0].plan.clone()
    }
}
