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

use serde::{Deserialize, Serialize};

use super::group_keys::{GroupTable, GroupTableState, KeyEncoder};
use crate::Error;
use crate::operator::{BatchInput, Operator, OperatorOutput, OperatorTag, StateSize, read_state, write_state};
use sluice_plan::eval;
use sluice_plan::{AggFunc, DataType, RowsFunctionKind, RowsPlan, RowsSpec};
use sluice_plan::{Column, ColumnData};

#[derive(Debug)]
pub struct RowsOperator {
    specs: Vec<SpecState>,
}

#[derive(Debug)]
struct SpecState {
    spec: RowsSpec,
    keys: GroupTable,
    partitions: Vec<Partition>,
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
    fn push(&mut self, seq: u64, value: Option<T>, frame: Option<u64>) -> Option<T> {
        if let Some(v) = value {
            while self.deque.back().is_some_and(|(_, b)| if self.max { *b <= v } else { *b >= v }) {
                self.deque.pop_back();
            }
            self.deque.push_back((seq, v));
        }
        if let Some(n) = frame {
            while self.deque.front().is_some_and(|(s, _)| *s + n < seq) {
                self.deque.pop_front();
            }
        }
        self.deque.front().map(|(_, v)| *v)
    }
}

#[derive(Debug, Serialize)]
pub struct RowsStateRef<'a> {
    specs: Vec<(GroupTableState, &'a [Partition])>,
}

#[derive(Debug, Deserialize)]
pub struct RowsState {
    specs: Vec<(GroupTableState, Vec<Partition>)>,
}

/// Output column of one function: values at the selected rows.
enum Out {
    Int(Vec<i64>, Vec<bool>),
    Float(Vec<f64>, Vec<bool>),
}

impl RowsOperator {
    pub fn new(plan: &RowsPlan) -> Self {
        Self {
            specs: plan
                .specs
                .iter()
                .map(|s| SpecState { spec: s.clone(), keys: GroupTable::default(), partitions: Vec::new() })
                .collect(),
        }
    }

    /// Computes every function for the selected rows and appends the result
    /// columns (batch-length; unselected rows are NULL) to `batch_columns`,
    /// in intermediate-schema order.
    fn compute(&mut self, input: &BatchInput<'_>, outputs: &mut Vec<(usize, Column)>) -> Result<(), Error> {
        let batch = input.batch;
        let n = batch.len;
        for spec in &mut self.specs {
            let part_cols = spec
                .spec
                .partition_by
                .iter()
                .map(|e| eval(e, batch).map(|v| v.into_column(n)))
                .collect::<Result<Vec<_>, _>>()?;
            let args = spec
                .spec
                .functions
                .iter()
                .map(|f| f.arg.as_ref().map(|e| eval(e, batch).map(|v| v.into_column(n))).transpose())
                .collect::<Result<Vec<_>, _>>()?;
            let refs: Vec<&Column> = part_cols.iter().map(AsRef::as_ref).collect();
            let encoder = KeyEncoder::new(&refs);
            let mut outs: Vec<Out> = spec
                .spec
                .functions
                .iter()
                .map(|f| match f.data_type {
                    DataType::Double => Out::Float(vec![0.0; n], vec![false; n]),
                    _ => Out::Int(vec![0; n], vec![false; n]),
                })
                .collect();
            let frame = spec.spec.preceding;
            let mut key = Vec::with_capacity(32);
            let mut result: Result<(), Error> = Ok(());
            input.selection.for_each(|r| {
                key.clear();
                encoder.encode(r, &mut key);
                let (pid, new) = spec.keys.find_or_insert(&key);
                let pid = pid as usize;
                if new {
                    if spec.partitions.len() <= pid {
                        spec.partitions.resize_with(pid + 1, Partition::default);
                    }
                    spec.partitions[pid] = Partition {
                        rows: 0,
                        functions: spec
                            .spec
                            .functions
                            .iter()
                            .map(|f| new_state(f.kind, f.arg.as_ref().map(sluice_plan::PhysExpr::data_type)))
                            .collect(),
                    };
                }
                let part = &mut spec.partitions[pid];
                let seq = part.rows;
                part.rows += 1;
                for ((state, arg), out) in part.functions.iter_mut().zip(&args).zip(&mut outs) {
                    if let Err(e) = step(state, seq, frame, arg.as_deref(), r, out) {
                        result = Err(e);
                    }
                }
            });
            result?;
            for (f, out) in spec.spec.functions.iter().zip(outs) {
                let col = match out {
                    Out::Int(v, valid) => Column::new(f.data_type, ColumnData::Int(v), Some(valid)),
                    Out::Float(v, valid) => Column::new(DataType::Double, ColumnData::Float(v), Some(valid)),
                };
                outputs.push((f.output, col));
            }
        }
        outputs.sort_by_key(|(i, _)| *i);
        Ok(())
    }

    fn partitions(&self) -> usize {
        self.specs.iter().map(|s| s.keys.live()).sum()
    }

    fn state_bytes(&self) -> usize {
        self.specs
            .iter()
            .map(|s| {
                s.keys.heap_bytes()
                    + s.partitions
                        .iter()
                        .map(|p| {
                            32 + p
                                .functions
                                .iter()
                                .map(|f| match f {
                                    FunctionState::Float(x) => x.values.capacity() * 16 + 40,
                                    FunctionState::Int(x) => x.values.capacity() * 16 + 40,
                                    FunctionState::MinMaxFloat(x) => x.deque.capacity() * 16 + 40,
                                    FunctionState::MinMaxInt(x) => x.deque.capacity() * 16 + 40,
                                    _ => 8,
                                })
                                .sum::<usize>()
                        })
                        .sum::<usize>()
            })
            .sum()
    }

    fn to_state(&self) -> RowsStateRef<'_> {
        RowsStateRef { specs: self.specs.iter().map(|s| (s.keys.to_state(), s.partitions.as_slice())).collect() }
    }

    fn restore_state(&mut self, state: RowsState) -> Result<(), Error> {
        if state.specs.len() != self.specs.len() {
            return Err(Error::Checkpoint("checkpoint does not match the query's window specs".into()));
        }
        for (spec, (keys, partitions)) in self.specs.iter_mut().zip(state.specs) {
            spec.keys = GroupTable::from_state(keys);
            spec.partitions = partitions;
        }
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

fn step(
    state: &mut FunctionState,
    seq: u64,
    frame: Option<u64>,
    arg: Option<&Column>,
    row: usize,
    out: &mut Out,
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
            f.values.push_back(value);
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
            f.values.push_back(value);
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
            write_float(out, x.push(seq, value, frame));
        }
        FunctionState::MinMaxInt(x) => {
            let value = match arg.map(|c| &c.data) {
                Some(ColumnData::Int(v)) if arg_valid => Some(v[row]),
                _ => None,
            };
            write_int(out, x.push(seq, value, frame));
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
        StateSize { bytes: self.state_bytes(), entries: self.partitions() }
    }

    /// Every PARTITION BY key's frame is visited.
    fn state_size_walks(&self) -> bool {
        true
    }

    fn state_entries(&self) -> usize {
        self.partitions()
    }

    fn snapshot(&self, out: Vec<u8>) -> Result<Vec<u8>, Error> {
        write_state(OperatorTag::Rows, &self.to_state(), out)
    }

    fn restore(&mut self, bytes: &[u8]) -> Result<(), Error> {
        self.restore_state(read_state(OperatorTag::Rows, bytes)?)
    }
}
