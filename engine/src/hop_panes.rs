//! GROUP BY over hopping windows, folded once per row into panes.
//!
//! A row of a window of size `size` that advances by `advance` falls in
//! `size / advance` windows: folding it into each costs that many group
//! lookups (q5's 10 s windows every 2 s: five a bid, the most expensive part
//! of the query). When the size is a multiple of the advance, the windows
//! are unions of `advance`-wide panes, so each row is folded into its one
//! pane, and a window's groups are the merge of its panes' when the
//! watermark closes it — Flink's sliced windows. Only aggregates whose
//! merge is exact and leaves the pane as it was take this path
//! ([`Accumulator::merges_from`]); the results are those of folding each
//! row into each window, which the golden suite checks against DuckDB.
//!
//! A row some of whose windows the watermark had already passed when it
//! arrived belongs to the rest of them only, not to its whole pane: it is
//! folded into those windows directly, as the per-window operator
//! ([`AggregateOperator`]) does. Closing a window merges its panes into
//! the window groups that operator keeps, so both kinds of rows meet
//! there, in the per-window operator's own layout — which is also how a
//! checkpoint it wrote (before panes) is restored.

use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};

use crate::Error;
use crate::accumulators::Accumulator;
use crate::aggregate::{AggregateOperator, AggregateState, AggregateStateRef, open_window_group};
use crate::operator::{BatchInput, Closed, Operator, OperatorOutput, OperatorTag, StateSize, read_state, write_state};
use sluice_plan::{AggregatePlan, EmitMode, Selection, TimeWindow};

#[derive(Debug)]
pub struct HopPaneOperator {
    size: i64,
    advance: i64,
    /// Groups of (pane start, key): a tumbling aggregate of width `advance`.
    panes: AggregateOperator,
    /// Groups of (window start, key): the windows' rows that were not
    /// folded into panes, and each window's merge when it closes.
    windows: AggregateOperator,
    /// Every window ending at or before this has been closed.
    closed_through: i64,
    late: Vec<u32>,
    key: Vec<u8>,
}

/// Checkpoint of a [`HopPaneOperator`], written by reference...
#[derive(Debug, Serialize)]
struct HopPaneStateRef<'a> {
    windows: AggregateStateRef<'a>,
    panes: AggregateStateRef<'a>,
    closed_through: i64,
}

/// ...and read back owned.
#[derive(Debug, Deserialize)]
struct HopPaneState {
    windows: AggregateState,
    panes: AggregateState,
    closed_through: i64,
}

impl HopPaneOperator {
    /// The window's size and advance, if `plan` (emitting `emit`) can run
    /// on panes: a hopping window whose size is a multiple of its advance,
    /// with results emitted when windows close, and aggregates that merge.
    pub fn applies(plan: &AggregatePlan, emit: EmitMode) -> Option<(i64, i64)> {
        let Some(TimeWindow::Hopping { size_ms, advance_ms }) = plan.window else { return None };
        let mergeable = plan.aggregates.iter().all(|a| Accumulator::new(a).merges_from());
        // A zone's windows are not panes of equal length (a clock change
        // makes one longer or shorter): folded per window instead.
        (emit == EmitMode::Final
            && plan.upsert_key.is_empty()
            && plan.window_zone.is_none()
            && mergeable
            && advance_ms > 0
            && size_ms % advance_ms == 0
            && size_ms / advance_ms >= 2)
            .then_some((size_ms, advance_ms))
    }

    pub fn new(plan: &AggregatePlan, size: i64, advance: i64) -> Self {
        let pane_plan = AggregatePlan { window: Some(TimeWindow::Tumbling { size_ms: advance }), ..plan.clone() };
        Self {
            size,
            advance,
            panes: AggregateOperator::new(&pane_plan),
            windows: AggregateOperator::new(plan),
            closed_through: i64::MIN,
            late: Vec::new(),
            key: Vec::with_capacity(64),
        }
    }

    /// Closes every window ending at or before `watermark`, in order of
    /// their ends: merges its panes into its groups, emits them when
    /// `emit`, then lets go of the panes no open window still needs.
    fn close(&mut self, watermark: i64, emit: bool, out: &mut Closed<'_>) -> Result<(), Error> {
        if watermark <= self.closed_through {
            return Ok(());
        }
        let mut ends = self.pane_window_ends(watermark);
        ends.extend(self.windows.open_by_end.range(..=watermark).map(|(e, _)| *e));
        for end in ends {
            self.merge_window(end)?;
            self.windows.close_windows(end, emit, out)?;
        }
        self.closed_through = watermark;
        // The last window of a pane ending at `end` ends at `end + size - advance`.
        self.panes.close_windows(watermark.saturating_sub(self.size - self.advance), false, out)?;
        Ok(())
    }

    /// The ends of the windows not yet closed that panes ending at or
    /// before `through` fall in, up to `through`: a pane ending at `end` is
    /// in the windows ending at `end`, `end + advance`, …,
    /// `end + size - advance`.
    fn pane_window_ends(&self, through: i64) -> BTreeSet<i64> {
        let mut ends = BTreeSet::new();
        for &pane_end in self.panes.open_by_end.range(..=through).map(|(e, _)| e) {
            let last = pane_end.saturating_add(self.size - self.advance).min(through);
            let mut end = pane_end;
            if end <= self.closed_through {
                let behind = self.closed_through.saturating_sub(end) / self.advance + 1;
                end = end.saturating_add(behind.saturating_mul(self.advance));
            }
            while end <= last {
                ends.insert(end);
                let Some(next) = end.checked_add(self.advance) else { break };
                end = next;
            }
        }
        ends
    }

    /// Merges the panes of the window ending at `end` into its groups.
    fn merge_window(&mut self, end: i64) -> Result<(), Error> {
        let start = end.saturating_sub(self.size);
        for (_, pane_groups) in self.panes.open_by_end.range(start.saturating_add(1)..=end) {
            for &g in pane_groups {
                self.key.clear();
                self.key.extend_from_slice(&start.to_le_bytes());
                self.key.extend_from_slice(&self.panes.paged.table.key(g)[8..]);
                let (w, new) = self.windows.paged.table.find_or_insert(&self.key);
                if new {
                    let groups = self.windows.paged.table.capacity();
                    open_window_group(&mut self.windows.bounds, &mut self.windows.open_by_end, w, w, start, end);
                    for acc in &mut self.windows.accs {
                        acc.ensure(groups);
                    }
                }
                for (acc, from) in self.windows.accs.iter_mut().zip(&self.panes.accs) {
                    acc.merge_from(w as usize, from, g as usize)?;
                }
            }
        }
        Ok(())
    }

    /// The per-window operator holding what this one holds: every window
    /// still open, its panes merged in. A checkpoint taken under EMIT
    /// FINAL restores into a query changed to EMIT CHANGES (the same
    /// state, `state_fingerprint` says), which panes cannot run.
    pub fn into_windows(mut self) -> Result<AggregateOperator, Error> {
        let ends = self.pane_window_ends(i64::MAX);
        for end in ends {
            self.merge_window(end)?;
        }
        Ok(self.windows)
    }
}

impl Operator for HopPaneOperator {
    fn process(&mut self, input: &BatchInput<'_>, out: &mut OperatorOutput<'_>) -> Result<(), Error> {
        if input.emit_changes {
            return Err(Error::Internal("hopping panes emit only when windows close".into()));
        }
        // The pane aggregate finds "late" every row whose pane (its first
        // window) the watermark had passed: those go to the windows still
        // open for them, or are late for all.
        self.late.clear();
        self.panes.fold_batch(input, out.rows, &mut self.late)?;
        if !self.late.is_empty() {
            let rest = BatchInput { selection: Selection::Rows(&self.late), ..*input };
            self.windows.fold_batch(&rest, out.rows, out.late)?;
        }
        Ok(())
    }

    fn on_watermark(&mut self, watermark: i64, emit: bool, out: &mut Closed<'_>) -> Result<(), Error> {
        self.close(watermark, emit, out)
    }

    fn finish(&mut self, emit: bool, out: &mut Closed<'_>) -> Result<(), Error> {
        self.close(i64::MAX, emit, out)
    }

    fn state_size(&self) -> StateSize {
        StateSize {
            bytes: self.panes.state_bytes() + self.windows.state_bytes(),
            entries: self.panes.groups() + self.windows.groups(),
        }
    }

    fn state_size_walks(&self) -> bool {
        self.panes.state_size_walks() || self.windows.state_size_walks()
    }

    fn state_entries(&self) -> usize {
        self.panes.groups() + self.windows.groups()
    }

    fn snapshot(&self, out: Vec<u8>) -> Result<Vec<u8>, Error> {
        let state = HopPaneStateRef {
            windows: self.windows.to_state(),
            panes: self.panes.to_state(),
            closed_through: self.closed_through,
        };
        write_state(OperatorTag::HopPanes, &state, out)
    }

    fn restore(&mut self, bytes: &[u8]) -> Result<(), Error> {
        // A checkpoint of the per-window operator (written before panes)
        // is its window groups, all still open: they close as before.
        let (tag, _) = postcard::take_from_bytes::<u32>(bytes)
            .map_err(|e| Error::Checkpoint(format!("cannot read state: {e}")))?;
        if tag == OperatorTag::Aggregate as u32 {
            self.windows.restore_state(read_state(OperatorTag::Aggregate, bytes)?)?;
            self.closed_through = i64::MIN;
            return Ok(());
        }
        let state: HopPaneState = read_state(OperatorTag::HopPanes, bytes)?;
        self.windows.restore_state(state.windows)?;
        self.panes.restore_state(state.panes)?;
        self.closed_through = state.closed_through;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_plan::{AggFunc, AggregateCall, Batch, DataType, PhysExpr};

    /// (key, value) rows; per key and window COUNT(*), SUM(value), MAX(value).
    const TYPES: [DataType; 2] = [DataType::Bigint, DataType::Bigint];
    const OUT: [DataType; 6] = [DataType::Bigint; 6];

    fn plan() -> AggregatePlan {
        let col = |index| PhysExpr::Column { index, data_type: DataType::Bigint };
        let call =
            |func, arg| AggregateCall { func, arg, distinct: false, data_type: DataType::Bigint, order: Vec::new() };
        AggregatePlan {
            group_exprs: vec![col(0)],
            aggregates: vec![
                call(AggFunc::CountStar, None),
                call(AggFunc::Sum, Some(col(1))),
                call(AggFunc::Max, Some(col(1))),
            ],
            window: Some(TimeWindow::Hopping { size_ms: 10, advance_ms: 2 }),
            window_zone: None,
            upsert_key: vec![],
            retract: None,
        }
    }

    /// One batch: rows (key, value, time), the watermark each row saw,
    /// then the watermark after it. What was emitted (sorted: the order of
    /// groups within a window is not part of the result) and which rows
    /// were late.
    fn step(op: &mut dyn Operator, rows: &[(i64, i64, i64)], before: &[i64], after: i64) -> (Vec<String>, Vec<u32>) {
        let mut b = Batch::empty(&TYPES);
        for &(k, v, _) in rows {
            b.columns[0].push_i64(k).unwrap();
            b.columns[1].push_i64(v).unwrap();
            b.len += 1;
        }
        let times: Vec<i64> = rows.iter().map(|r| r.2).collect();
        let input = BatchInput {
            batch: &b,
            selection: Selection::All(b.len),
            event_times: &times,
            watermark_before: before,
            per_record: false,
            emit_changes: false,
            upstreams: &[],
        };
        let mut out = Batch::empty(&OUT);
        let (mut columns, mut late) = (Vec::new(), Vec::new());
        op.process(&input, &mut OperatorOutput::new(&mut out, &mut columns, &mut late)).unwrap();
        op.on_watermark(after, true, &mut Closed::new(&mut out)).unwrap();
        let mut emitted: Vec<String> = (0..out.len)
            .map(|r| format!("{:?}", (0..6).map(|c| out.columns[c].scalar(r)).collect::<Vec<_>>()))
            .collect();
        emitted.sort();
        (emitted, late)
    }

    /// Batches of out-of-order rows whose watermark moves within batches
    /// (rows for which some of their windows had closed, others not) and
    /// rows late for every window: panes give what folding each row into
    /// each of its windows gives, batch by batch — also when either side is
    /// checkpointed and restored, and from the per-window operator's own
    /// checkpoint. Fixed seed.
    #[test]
    fn panes_emit_what_per_window_folding_emits() {
        let mut seed = 0x2545_F491_4F6C_DD1Du64;
        let mut next = |n: i64| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            i64::try_from(seed % u64::try_from(n).unwrap()).unwrap()
        };
        let (size, advance) = (10, 2);
        let mut windows = AggregateOperator::new(&plan());
        let mut panes = HopPaneOperator::new(&plan(), size, advance);
        let (mut max_time, mut watermark) = (0i64, i64::MIN);
        let mut partial = 0;
        for batch in 0..400 {
            let rows: Vec<(i64, i64, i64)> =
                (0..next(6)).map(|_| (next(4), next(100) - 50, max_time + next(12) - 8)).collect();
            let mut before = Vec::new();
            for r in &rows {
                before.push(watermark);
                let first_end = r.2 - r.2.rem_euclid(advance) + advance;
                partial += usize::from(first_end <= watermark && r.2 - r.2.rem_euclid(advance) + size > watermark);
                max_time = max_time.max(r.2);
                // The watermark trails the newest time by 3 ms, and moves
                // within a batch.
                if next(2) == 0 {
                    watermark = watermark.max(max_time - 3);
                }
            }
            watermark = watermark.max(max_time - 3);
            let want = step(&mut windows, &rows, &before, watermark);
            let got = step(&mut panes, &rows, &before, watermark);
            assert_eq!(got, want, "batch {batch}: {rows:?} seeing {before:?}, then {watermark}");
            match batch % 50 {
                17 => {
                    let saved = panes.snapshot(Vec::new()).unwrap();
                    panes = HopPaneOperator::new(&plan(), size, advance);
                    panes.restore(&saved).unwrap();
                }
                41 => {
                    // Panes turned back into windows (a FINAL checkpoint
                    // restored under EMIT CHANGES) hold the same state.
                    let saved = panes.snapshot(Vec::new()).unwrap();
                    let mut restored = HopPaneOperator::new(&plan(), size, advance);
                    restored.restore(&saved).unwrap();
                    windows = restored.into_windows().unwrap();
                }
                33 => {
                    // A checkpoint of the per-window operator restores into panes.
                    let saved = windows.snapshot(Vec::new()).unwrap();
                    panes = HopPaneOperator::new(&plan(), size, advance);
                    panes.restore(&saved).unwrap();
                }
                _ => {}
            }
        }
        let mut rest = (Batch::empty(&OUT), Batch::empty(&OUT));
        windows.finish(true, &mut Closed::new(&mut rest.0)).unwrap();
        panes.finish(true, &mut Closed::new(&mut rest.1)).unwrap();
        assert_eq!(rest.0.len, rest.1.len);
        assert!(partial > 20, "only {partial} rows found some of their windows closed");
        assert_eq!(panes.state_size().entries, 0, "every pane and window let go");
    }

    #[test]
    fn only_exact_mergeable_hops_take_panes() {
        let hop = plan();
        assert_eq!(HopPaneOperator::applies(&hop, EmitMode::Final), Some((10, 2)));
        assert_eq!(HopPaneOperator::applies(&hop, EmitMode::Changes), None, "EMIT CHANGES updates every window");
        let uneven = AggregatePlan { window: Some(TimeWindow::Hopping { size_ms: 10, advance_ms: 3 }), ..plan() };
        assert_eq!(HopPaneOperator::applies(&uneven, EmitMode::Final), None);
        let mut float = plan();
        float.aggregates[1] = AggregateCall {
            func: AggFunc::Sum,
            arg: Some(PhysExpr::Column { index: 1, data_type: DataType::Double }),
            distinct: false,
            data_type: DataType::Double,
            order: Vec::new(),
        };
        assert_eq!(HopPaneOperator::applies(&float, EmitMode::Final), None, "a float sum rounds by order");
    }
}
