//! Analytic functions over ROWS frames: `AGG(x) OVER (PARTITION BY k ROWS
//! BETWEEN n PRECEDING AND CURRENT ROW)`, one output value per input row.
//!
//! Per partition key and function the state is incremental, so each row
//! costs O(1) amortised whatever the frame size: a ring buffer of the frame's
//! values with a running sum for SUM/AVG/COUNT, and a monotonic deque for
//! MIN/MAX (a value that can never again be the extreme is dropped on
//! arrival). Running float sums are recomputed from the buffer once per
//! frame length to keep rounding error bounded.

use std::collections::VecDeque;
use std::ops::Range;

use serde::{Deserialize, Serialize};

use crate::Error;
use crate::operator::{
    BatchInput, Operator, OperatorOutput, OperatorTag, StateSize, read_state, write_head, write_state,
};
use crate::state::group_keys::{BLOCK, GroupTable, GroupTableState, KeyEncoder};
use crate::state::pages::{PageKeys, page_groups, page_keys, read_page_and_rest, restore_page_keys, write_page};
use crate::state::{PagedGroups, PagedState, place_keys};
use sluice_plan::eval;
use sluice_plan::{AggFunc, DataType, RowsFunctionKind, RowsPlan, RowsSpec};
use sluice_plan::{Column, ColumnData};

/// The operator keeps every spec's frames per PARTITION BY key in one
/// group table (a key prefixed with its spec's number when there are
/// several), so its state pages and spills as an aggregate's or a top
/// N's does (`crate::state::pages`, `crate::state`): a checkpoint writes the
/// pages of keys that got rows since the last one, and past its budget
/// cold keys' frames go to disk. A key's frame never ends (a ROWS frame
/// counts rows, not time), so without spilling its state grows with the
/// keys it has seen.
#[derive(Debug)]
pub struct RowsOperator {
    specs: Vec<RowsSpec>,
    /// Groups in pages: their keys, pages changed since the last
    /// checkpoint, and what spilling keeps (`crate::state`).
    paged: PagedState,
    /// Per key id: its frames (no function for an id without a key).
    partitions: Vec<Partition>,
    /// What the frames hold on the heap, kept as rows come.
    heap: usize,
    /// The batch's selected rows (scratch).
    rows: Vec<usize>,
}

#[derive(Debug, Default, Serialize, Deserialize)]
struct Partition {
    rows: u64,
    functions: Vec<FunctionState>,
}

#[derive(Debug, Serialize, Deserialize)]
enum FunctionState {
    RowNumber,
    CountStar,
    /// SUM/AVG/COUNT over doubles (or COUNT over anything).
    Float(FloatFrame),
    /// SUM/COUNT over bigints, exact.
    Int(IntFrame),
    MinMaxFloat(Extremes<f64>),
    MinMaxInt(Extremes<i64>),
}

/// What a frame function reports from its running totals.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
enum FrameOutput {
    #[default]
    Sum,
    Avg,
    Count,
}

#[derive(Debug, Default, Serialize, Deserialize)]
struct FloatFrame {
    values: VecDeque<Option<f64>>,
    sum: f64,
    count: i64,
    evictions: u64,
    output: FrameOutput,
}

#[derive(Debug, Default, Serialize, Deserialize)]
struct IntFrame {
    values: VecDeque<Option<i64>>,
    sum: i128,
    count: i64,
    output: FrameOutput,
}

/// Monotonic deque of (row number, value): values that are not better than
/// a later value are discarded, so the front is always the frame's extreme.
#[derive(Debug, Default, Serialize, Deserialize)]
struct Extremes<T> {
    deque: VecDeque<(u64, T)>,
    max: bool,
}

impl<T: PartialOrd + Copy> Extremes<T> {
    /// Adds row `seq`'s value; `heap` takes what the deque grew by.
    fn push(&mut self, seq: u64, value: Option<T>, frame: Option<u64>, heap: &mut usize) -> Option<T> {
        if let Some(v) = value {
            while self.deque.back().is_some_and(|(_, b)| if self.max { *b <= v } else { *b >= v }) {
                self.deque.pop_back();
            }
            let before = self.deque.capacity();
            self.deque.push_back((seq, v));
            *heap += grown::<(u64, T)>(before, self.deque.capacity());
        }
        if let Some(n) = frame {
            while self.deque.front().is_some_and(|(s, _)| *s + n < seq) {
                self.deque.pop_front();
            }
        }
        self.deque.front().map(|(_, v)| *v)
    }
}

/// A whole checkpoint: per spec its keys and their frames, written by
/// reference...
#[derive(Debug, Serialize)]
struct RowsStateRef<'a> {
    specs: Vec<(GroupTableState, Vec<&'a Partition>)>,
}

/// ...and read back owned.
#[derive(Debug, Deserialize)]
struct RowsState {
    specs: Vec<(GroupTableState, Vec<Partition>)>,
}

/// The keys of one page of an incremental checkpoint and their frames,
/// written by reference...
#[derive(Serialize)]
struct RowsPageRef<'a> {
    keys: PageKeys<'a>,
    partitions: Vec<&'a Partition>,
}

/// ...and read back with the keys borrowed from the page's bytes.
#[derive(Deserialize)]
struct RowsPageIn<'a> {
    #[serde(borrow)]
    keys: Vec<Option<&'a [u8]>>,
    partitions: Vec<Partition>,
}

/// The frames of an id without a key.
static NO_PARTITION: Partition = Partition { rows: 0, functions: Vec::new() };

/// The heap bytes of a deque of `capacity` slots of `T`, with the
/// allocator's header.
fn deque_bytes<T>(capacity: usize) -> usize {
    if capacity == 0 { 0 } else { capacity * size_of::<T>() + 16 }
}

/// What a deque of `T` grew by from `before` slots to `after` (a push
/// grows a deque, never shrinks it): kept as rows come, so the state's
/// size is read without a walk and without measuring every frame a row
/// passes through.
#[inline]
fn grown<T>(before: usize, after: usize) -> usize {
    if before == after { 0 } else { deque_bytes::<T>(after) - deque_bytes::<T>(before) }
}

impl Partition {
    /// What its frames hold on the heap.
    fn heap_bytes(&self) -> usize {
        if self.functions.capacity() == 0 {
            return 0;
        }
        let frames: usize = self
            .functions
            .iter()
            .map(|f| match f {
                FunctionState::Float(x) => deque_bytes::<Option<f64>>(x.values.capacity()),
                FunctionState::Int(x) => deque_bytes::<Option<i64>>(x.values.capacity()),
                FunctionState::MinMaxFloat(x) => deque_bytes::<(u64, f64)>(x.deque.capacity()),
                FunctionState::MinMaxInt(x) => deque_bytes::<(u64, i64)>(x.deque.capacity()),
                FunctionState::RowNumber | FunctionState::CountStar => 0,
            })
            .sum();
        self.functions.capacity() * size_of::<FunctionState>() + 16 + frames
    }
}

/// Output column of one function: values at the selected rows.
enum Out {
    Int(Vec<i64>, Vec<bool>),
    Float(Vec<f64>, Vec<bool>),
}

impl RowsOperator {
    pub fn new(plan: &RowsPlan) -> Self {
        Self {
            specs: plan.specs.clone(),
            paged: PagedState::default(),
            partitions: Vec::new(),
            heap: 0,
            rows: Vec::new(),
        }
    }

    /// The bytes before a key of spec `spec` in the table: none with one
    /// spec (its keys are the PARTITION BY values, as before specs shared
    /// a table), else the spec's number.
    fn key_prefix(specs: usize, spec: usize, key: &mut Vec<u8>) {
        if specs > 1 {
            key.extend_from_slice(&u16::try_from(spec).unwrap_or(u16::MAX).to_be_bytes());
        }
    }

    /// Computes every function for the selected rows and appends the result
    /// columns (batch-length; unselected rows are NULL) to `batch_columns`,
    /// in intermediate-schema order.
    fn compute(&mut self, input: &BatchInput<'_>, outputs: &mut Vec<(usize, Column)>) -> Result<(), Error> {
        let specs = std::mem::take(&mut self.specs);
        let mut rows = std::mem::take(&mut self.rows);
        rows.clear();
        input.selection.for_each(|r| rows.push(r));
        let result = specs
            .iter()
            .enumerate()
            .try_for_each(|(s, spec)| self.compute_spec(&specs, s, spec, input, &rows, outputs));
        self.specs = specs;
        self.rows = rows;
        result?;
        outputs.sort_by_key(|(i, _)| *i);
        Ok(())
    }

    fn compute_spec(
        &mut self,
        specs: &[RowsSpec],
        s: usize,
        spec: &RowsSpec,
        input: &BatchInput<'_>,
        rows: &[usize],
        outputs: &mut Vec<(usize, Column)>,
    ) -> Result<(), Error> {
        let batch = input.batch;
        let n = batch.len;
        let part_cols = spec
            .partition_by
            .iter()
            .map(|e| eval(e, batch).map(|v| v.into_column(n)))
            .collect::<Result<Vec<_>, _>>()?;
        let args = spec
            .functions
            .iter()
            .map(|f| f.arg.as_ref().map(|e| eval(e, batch).map(|v| v.into_column(n))).transpose())
            .collect::<Result<Vec<_>, _>>()?;
        let refs: Vec<&Column> = part_cols.iter().map(AsRef::as_ref).collect();
        let encoder = KeyEncoder::new(&refs);
        self.with_spilling(|sp, op| {
            sp.find_keys(op, rows, |r, key| {
                Self::key_prefix(specs.len(), s, key);
                encoder.encode(r, key);
                true
            })
        })?;
        if self.partitions.len() < self.paged.table.capacity() {
            self.partitions.resize_with(self.paged.table.capacity(), Partition::default);
        }
        let mut outs: Vec<Out> = spec
            .functions
            .iter()
            .map(|f| match f.data_type {
                DataType::Double => Out::Float(vec![0.0; n], vec![false; n]),
                _ => Out::Int(vec![0; n], vec![false; n]),
            })
            .collect();
        let frame = spec.preceding;
        for (i, &r) in rows.iter().enumerate() {
            let gid = self.paged.spilling.gids[i];
            self.paged.dirty.mark(self.paged.spilling.stable(gid));
            let part = &mut self.partitions[gid as usize];
            if part.functions.is_empty() {
                // A key new to the table (or an id a spill freed).
                part.rows = 0;
                part.functions = spec
                    .functions
                    .iter()
                    .map(|f| new_state(f.kind, f.arg.as_ref().map(sluice_plan::PhysExpr::data_type)))
                    .collect();
                self.heap += part.heap_bytes();
            }
            let seq = part.rows;
            part.rows += 1;
            for ((state, arg), out) in part.functions.iter_mut().zip(&args).zip(&mut outs) {
                step(state, seq, frame, arg.as_deref(), r, out, &mut self.heap)?;
            }
        }
        for (f, out) in spec.functions.iter().zip(outs) {
            let col = match out {
                Out::Int(v, valid) => Column::new(f.data_type, ColumnData::Int(v), Some(valid)),
                Out::Float(v, valid) => Column::new(DataType::Double, ColumnData::Float(v), Some(valid)),
            };
            outputs.push((f.output, col));
        }
        Ok(())
    }

    /// The bytes the frames and their keys hold in memory, what spilling
    /// keeps aside.
    fn own_bytes(&self) -> usize {
        self.paged.table.heap_bytes() + self.partitions.capacity() * size_of::<Partition>() + self.heap
    }

    /// A whole checkpoint, per spec as they were written before specs
    /// shared a table: each spec's keys (without their prefix) in a table
    /// of their own, and their frames.
    fn to_state(&self) -> RowsStateRef<'_> {
        let ids = u32::try_from(self.paged.table.capacity()).unwrap_or(u32::MAX);
        let frames = |gid: u32| self.partitions.get(gid as usize).unwrap_or(&NO_PARTITION);
        if self.specs.len() == 1 {
            let partitions = (0..ids).map(frames).collect();
            return RowsStateRef { specs: vec![(self.paged.table.to_state(), partitions)] };
        }
        let mut specs: Vec<(GroupTable, Vec<&Partition>)> =
            self.specs.iter().map(|_| (GroupTable::default(), Vec::new())).collect();
        for gid in 0..ids {
            let Some((prefix, key)) = self.paged.table.key_of(gid).and_then(|k| k.split_first_chunk::<2>()) else {
                continue;
            };
            if let Some((table, partitions)) = specs.get_mut(usize::from(u16::from_be_bytes(*prefix))) {
                let (id, _) = table.find_or_insert(key);
                if partitions.len() <= id as usize {
                    partitions.resize(id as usize + 1, &NO_PARTITION);
                }
                partitions[id as usize] = frames(gid);
            }
        }
        RowsStateRef { specs: specs.into_iter().map(|(t, p)| (t.to_state(), p)).collect() }
    }

    fn restore_state(&mut self, state: RowsState) -> Result<(), Error> {
        if state.specs.len() != self.specs.len() {
            return Err(Error::Checkpoint("checkpoint does not match the query's window specs".into()));
        }
        self.paged.spilling.forget()?;
        self.paged.dirty.clear();
        let specs = self.specs.len();
        if specs == 1 {
            let Some((keys, partitions)) = state.specs.into_iter().next() else { return Ok(()) };
            self.paged.table = GroupTable::from_state(keys);
            self.partitions = partitions;
        } else {
            self.paged.table = GroupTable::default();
            self.partitions = Vec::new();
            let mut key = Vec::new();
            for (s, (keys, mut partitions)) in state.specs.into_iter().enumerate() {
                let table = GroupTable::from_state(keys);
                for gid in 0..u32::try_from(table.capacity()).unwrap_or(u32::MAX) {
                    let Some(k) = table.key_of(gid) else { continue };
                    key.clear();
                    Self::key_prefix(specs, s, &mut key);
                    key.extend_from_slice(k);
                    let (id, _) = self.paged.table.find_or_insert(&key);
                    if self.partitions.len() <= id as usize {
                        self.partitions.resize_with(id as usize + 1, Partition::default);
                    }
                    if let Some(p) = partitions.get_mut(gid as usize) {
                        self.partitions[id as usize] = std::mem::take(p);
                    }
                }
            }
        }
        self.heap = self.partitions.iter().map(Partition::heap_bytes).sum();
        Ok(())
    }
}

fn new_state(kind: RowsFunctionKind, arg: Option<DataType>) -> FunctionState {
    match (kind, arg) {
        (RowsFunctionKind::RowNumber, _) => FunctionState::RowNumber,
        (RowsFunctionKind::Aggregate(AggFunc::CountStar), _) => FunctionState::CountStar,
        (RowsFunctionKind::Aggregate(AggFunc::Min | AggFunc::Max), Some(DataType::Double)) => {
            FunctionState::MinMaxFloat(Extremes {
                deque: VecDeque::new(),
                max: kind == RowsFunctionKind::Aggregate(AggFunc::Max),
            })
        }
        (RowsFunctionKind::Aggregate(AggFunc::Min | AggFunc::Max), _) => FunctionState::MinMaxInt(Extremes {
            deque: VecDeque::new(),
            max: kind == RowsFunctionKind::Aggregate(AggFunc::Max),
        }),
        (RowsFunctionKind::Aggregate(f), arg) => {
            let output = match f {
                AggFunc::Avg => FrameOutput::Avg,
                AggFunc::Count => FrameOutput::Count,
                _ => FrameOutput::Sum,
            };
            if arg == Some(DataType::Double) {
                FunctionState::Float(FloatFrame { output, ..FloatFrame::default() })
            } else {
                FunctionState::Int(IntFrame { output, ..IntFrame::default() })
            }
        }
    }
}

/// The frame size in rows (current row included), if bounded.
fn frame_len(frame: Option<u64>) -> Option<usize> {
    frame.map(|n| usize::try_from(n).unwrap_or(usize::MAX).saturating_add(1))
}

/// Steps one function's frame by row `row`; `heap` takes what its
/// buffers grew by.
fn step(
    state: &mut FunctionState,
    seq: u64,
    frame: Option<u64>,
    arg: Option<&Column>,
    row: usize,
    out: &mut Out,
    heap: &mut usize,
) -> Result<(), Error> {
    let arg_valid = arg.is_some_and(|c| c.is_valid(row));
    let write_int = |out: &mut Out, v: Option<i64>| {
        if let Out::Int(values, valid) = out {
            values[row] = v.unwrap_or(0);
            valid[row] = v.is_some();
        }
    };
    let write_float = |out: &mut Out, v: Option<f64>| {
        if let Out::Float(values, valid) = out {
            values[row] = v.unwrap_or(0.0);
            valid[row] = v.is_some();
        }
    };
    match state {
        FunctionState::RowNumber => write_int(out, Some(i64::try_from(seq + 1).unwrap_or(i64::MAX))),
        FunctionState::CountStar => {
            let count = frame.map_or(seq + 1, |n| (seq + 1).min(n + 1));
            write_int(out, Some(i64::try_from(count).unwrap_or(i64::MAX)));
        }
        FunctionState::Float(f) => {
            let value = match arg.map(|c| &c.data) {
                Some(ColumnData::Float(v)) if arg_valid => Some(v[row]),
                #[allow(clippy::cast_precision_loss)]
                Some(ColumnData::Int(v)) if arg_valid => Some(v[row] as f64),
                _ => None,
            };
            let before = f.values.capacity();
            f.values.push_back(value);
            *heap += grown::<Option<f64>>(before, f.values.capacity());
            if let Some(v) = value {
                f.sum += v;
                f.count += 1;
            }
            if let Some(len) = frame_len(frame) {
                while f.values.len() > len {
                    if let Some(Some(old)) = f.values.pop_front() {
                        f.sum -= old;
                        f.count -= 1;
                    }
                    f.evictions += 1;
                    if f.evictions % (len as u64).max(64) == 0 {
                        f.sum = f.values.iter().flatten().sum();
                    }
                }
            } else {
                // Unbounded frames only need the running totals.
                f.values.clear();
            }
            match f.output {
                FrameOutput::Count => write_int(out, Some(f.count)),
                FrameOutput::Sum => write_float(out, (f.count > 0).then_some(f.sum)),
                #[allow(clippy::cast_precision_loss)]
                FrameOutput::Avg => write_float(out, (f.count > 0).then(|| f.sum / f.count as f64)),
            }
        }
        FunctionState::Int(f) => {
            let value = match arg.map(|c| &c.data) {
                Some(ColumnData::Int(v)) if arg_valid => Some(v[row]),
                Some(_) if arg_valid => Some(1),
                _ => None,
            };
            let before = f.values.capacity();
            f.values.push_back(value);
            *heap += grown::<Option<i64>>(before, f.values.capacity());
            if let Some(v) = value {
                f.sum += i128::from(v);
                f.count += 1;
            }
            if let Some(len) = frame_len(frame) {
                while f.values.len() > len {
                    if let Some(Some(old)) = f.values.pop_front() {
                        f.sum -= i128::from(old);
                        f.count -= 1;
                    }
                }
            } else {
                f.values.clear();
            }
            match f.output {
                FrameOutput::Count => write_int(out, Some(f.count)),
                _ => write_int(out, (f.count > 0).then(|| i64::try_from(f.sum).unwrap_or(i64::MAX))),
            }
        }
        FunctionState::MinMaxFloat(x) => {
            let value = match arg.map(|c| &c.data) {
                Some(ColumnData::Float(v)) if arg_valid => Some(v[row]),
                _ => None,
            };
            write_float(out, x.push(seq, value, frame, heap));
        }
        FunctionState::MinMaxInt(x) => {
            let value = match arg.map(|c| &c.data) {
                Some(ColumnData::Int(v)) if arg_valid => Some(v[row]),
                _ => None,
            };
            write_int(out, x.push(seq, value, frame, heap));
        }
    }
    Ok(())
}

impl Operator for RowsOperator {
    fn process(&mut self, input: &BatchInput<'_>, out: &mut OperatorOutput<'_>) -> Result<(), Error> {
        self.compute(input, out.columns)
    }

    fn passes_input_through(&self) -> bool {
        true
    }

    fn state_size(&self) -> StateSize {
        StateSize {
            bytes: self.own_bytes() + self.paged.spilling.heap_bytes(),
            entries: self.paged.spilling.groups(&self.paged.table),
        }
    }

    fn snapshot(&self, out: Vec<u8>) -> Result<Vec<u8>, Error> {
        if self.paged.spilling.spilled_any() {
            // It spilled: its checkpoints are heads and pages.
            return Err(Error::Internal("a whole checkpoint of an OVER window that spilled".into()));
        }
        write_state(OperatorTag::Rows, &self.to_state(), out)
    }

    fn restore(&mut self, bytes: &[u8]) -> Result<(), Error> {
        self.restore_state(read_state(OperatorTag::Rows, bytes)?)
    }

    fn paged(&self) -> Option<&dyn crate::state::Paged> {
        Some(self)
    }

    fn paged_mut(&mut self) -> Option<&mut dyn crate::state::Paged> {
        Some(self)
    }
}

impl PagedGroups for RowsOperator {
    fn groups(&self) -> &PagedState {
        &self.paged
    }

    fn groups_mut(&mut self) -> &mut PagedState {
        &mut self.paged
    }

    fn head_bytes(&self, out: Vec<u8>) -> Result<Vec<u8>, Error> {
        write_head(&self.paged, [OperatorTag::RowsSpilledHead, OperatorTag::RowsHead], out)
    }

    fn restore_from_head(&mut self, bytes: &[u8]) -> Result<(), Error> {
        self.heap = 0;
        self.paged.dirty.clear();
        self.partitions = Vec::new();
        self.paged.table = GroupTable::default();
        if let Some(head) = self.paged.spilling.restore_either_head(
            bytes,
            OperatorTag::RowsSpilledHead as u32,
            OperatorTag::RowsHead as u32,
        )? {
            self.partitions.resize_with(head.groups as usize, Partition::default);
            self.paged.table = head.table();
        }
        Ok(())
    }

    fn restore_from_page(&mut self, page: u32, bytes: &[u8]) -> Result<(), Error> {
        if self.with_spilling(|s, op| s.restore_page(op, page, bytes))? {
            return Ok(());
        }
        let (p, _): (RowsPageIn<'_>, _) = read_page_and_rest(page, bytes)?;
        restore_page_keys(&mut self.paged.table, page, &p.keys)?;
        let start = page_groups(page, usize::MAX).start;
        for (i, frames) in p.partitions.into_iter().enumerate() {
            if let Some(slot) = self.partitions.get_mut(start + i) {
                self.heap += frames.heap_bytes();
                *slot = frames;
            }
        }
        Ok(())
    }

    fn page_bytes(&self, groups: Range<usize>, out: Vec<u8>) -> Result<Vec<u8>, Error> {
        let partitions = groups.clone().map(|g| self.partitions.get(g).unwrap_or(&NO_PARTITION)).collect();
        write_page(&RowsPageRef { keys: page_keys(&self.paged.table, groups), partitions }, out)
    }

    fn load_page(&mut self, page: u32, bytes: &[u8], block: u32) -> Result<(), Error> {
        let (p, _): (RowsPageIn<'_>, _) = read_page_and_rest(page, bytes)?;
        place_keys(&mut self.paged.table, block, &p.keys)?;
        let start = block as usize * BLOCK;
        if self.partitions.len() < start + BLOCK {
            self.partitions.resize_with(start + BLOCK, Partition::default);
        }
        for (i, frames) in p.partitions.into_iter().enumerate().take(BLOCK) {
            self.heap += frames.heap_bytes();
            self.partitions[start + i] = frames;
        }
        Ok(())
    }

    fn drop_groups(&mut self, groups: Range<usize>) {
        for g in groups {
            if let Some(frames) = self.partitions.get_mut(g) {
                self.heap -= frames.heap_bytes();
                *frames = Partition::default();
            }
        }
    }

    fn own_bytes(&self) -> usize {
        RowsOperator::own_bytes(self)
    }
}
