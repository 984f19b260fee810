//! Everything one Kafka partition needs on its core: a decoder, the batch
//! being filled, the engine holding the partition's state, and its offsets.

use std::sync::Arc;

use sluice_crds::LateRecordPolicy;

use crate::Error;
use crate::sink::{DeadLetter, DeadLetterSink};
use crate::source::Record;
use sluice_engine::{EmittedRows, Engine, EngineOptions, Output};
use sluice_formats::decode::JsonDecoder;
use sluice_formats::encode::{EncodedRows, JsonEncoder};
use sluice_plan::Batch;
use sluice_plan::Plan;

pub struct PartitionPipeline {
    pub partition: i32,
    topic: Arc<str>,
    pub engine: Engine,
    decoder: JsonDecoder,
    batch: Batch,
    /// Source offset and timestamp of each row of `batch`.
    offsets: Vec<i64>,
    timestamps: Vec<i64>,
    /// Next offset to read: everything before it has been processed.
    pub next_offset: Option<i64>,
    pub committed_offset: Option<i64>,
    /// Checkpoint metadata of the last commit (points at the saved state).
    pub metadata: String,
    /// State changed since the last checkpoint.
    pub dirty: bool,
    late_policy: LateRecordPolicy,
    /// Encodes late rows for the dead-letter output.
    late_encoder: JsonEncoder,
    late_rows: Vec<u32>,
    pub counters: BatchCounters,
}

/// Per-batch tallies, turned into metrics once per batch.
#[derive(Debug, Default, Clone, Copy)]
pub struct BatchCounters {
    pub records: u64,
    pub bytes: u64,
    pub malformed: u64,
    pub late: u64,
}

impl PartitionPipeline {
    pub fn new(plan: &Arc<Plan>, topic: Arc<str>, partition: i32, options: EngineOptions, capacity: usize) -> Self {
        let decoder = JsonDecoder::new(plan);
        let batch = decoder.new_batch(capacity);
        let used: Vec<String> = plan
            .source
            .schema
            .fields
            .iter()
            .zip(&plan.used_columns)
            .filter(|(_, u)| **u)
            .map(|(f, _)| f.name.clone())
            .collect();
        Self {
            partition,
            topic,
            late_policy: options.late_records,
            engine: Engine::new(Arc::clone(plan), options),
            decoder,
            batch,
            offsets: Vec::with_capacity(capacity),
            timestamps: Vec::with_capacity(capacity),
            next_offset: None,
            committed_offset: None,
            metadata: String::new(),
            dirty: false,
            late_encoder: JsonEncoder::new(&used, &[]),
            late_rows: Vec::new(),
            counters: BatchCounters::default(),
        }
    }

    /// Decodes one record into the batch, or dead-letters it with the reason.
    pub fn push(&mut self, record: &Record<'_>, dead_letter: &mut dyn DeadLetterSink) -> Result<(), Error> {
        self.next_offset = Some(record.offset + 1);
        self.counters.records += 1;
        self.counters.bytes += record.payload.len() as u64;
        match self.decoder.decode(record.payload, &mut self.batch) {
            Ok(()) => {
                self.offsets.push(record.offset);
                self.timestamps.push(record.timestamp_ms);
                Ok(())
            }
            Err(reason) => {
                self.counters.malformed += 1;
                dead_letter.send(&DeadLetter {
                    topic: &self.topic,
                    partition: self.partition,
                    offset: record.offset,
                    timestamp_ms: record.timestamp_ms,
                    reason: &reason.0,
                    payload: record.payload,
                })
            }
        }
    }

    /// Runs the batch through the engine: results are encoded into `out`
    /// with one timestamp per row in `timestamps`; late rows are dead-lettered
    /// when the policy says so.
    pub fn process(
        &mut self,
        encoder: &JsonEncoder,
        out: &mut EncodedRows,
        timestamps: &mut Vec<i64>,
        dead_letter: &mut dyn DeadLetterSink,
    ) -> Result<(), Error> {
        if self.batch.len == 0 {
            return Ok(());
        }
        let newest = self.timestamps.iter().copied().max().unwrap_or_else(super::now_ms);
        self.late_rows.clear();
        let mut sink = BatchOutput {
            encoder,
            out,
            timestamps,
            input_timestamps: &self.timestamps,
            newest,
            late: &mut self.late_rows,
        };
        self.engine.process(&mut self.batch, &mut sink)?;
        self.dirty = true;
        self.counters.late += self.late_rows.len() as u64;
        if self.late_policy == LateRecordPolicy::DeadLetter && !self.late_rows.is_empty() {
            self.dead_letter_late(dead_letter)?;
        }
        self.batch.clear();
        self.offsets.clear();
        self.timestamps.clear();
        Ok(())
    }

    /// Closes every window (end of a bounded run).
    pub fn finish(
        &mut self,
        encoder: &JsonEncoder,
        out: &mut EncodedRows,
        timestamps: &mut Vec<i64>,
    ) -> Result<(), Error> {
        let mut sink = BatchOutput {
            encoder,
            out,
            timestamps,
            input_timestamps: &[],
            newest: super::now_ms(),
            late: &mut self.late_rows,
        };
        self.engine.finish(&mut sink)?;
        self.dirty = true;
        Ok(())
    }

    fn dead_letter_late(&mut self, dead_letter: &mut dyn DeadLetterSink) -> Result<(), Error> {
        // The original bytes are gone once decoded; the row is re-encoded
        // from the columns the query reads.
        let columns: Vec<sluice_plan::Value<'_>> = self
            .batch
            .columns
            .iter()
            .zip(self.engine.plan().used_columns.iter())
            .filter(|(_, u)| **u)
            .map(|(c, _)| sluice_plan::Value::Column(std::borrow::Cow::Borrowed(c)))
            .collect();
        let mut encoded = EncodedRows::default();
        self.late_encoder.encode(
            &EmittedRows {
                columns: &columns,
                keys: &[],
                selection: sluice_plan::Selection::Rows(&self.late_rows),
                from_input: true,
            },
            &mut encoded,
        );
        let reason = format!(
            "late: its window had closed (watermark {})",
            self.engine.watermark().map_or_else(|| "unset".into(), |w| w.to_string())
        );
        for (i, &row) in self.late_rows.iter().enumerate() {
            dead_letter.send(&DeadLetter {
                topic: &self.topic,
                partition: self.partition,
                offset: self.offsets[row as usize],
                timestamp_ms: self.timestamps[row as usize],
                reason: &reason,
                payload: encoded.value(i),
            })?;
        }
        Ok(())
    }
}

/// Adapts the engine's output to the encoder, recording the timestamp each
/// produced record carries (its input record's, or the batch's newest for
/// aggregate results) so the sink can measure end-to-end latency.
struct BatchOutput<'a> {
    encoder: &'a JsonEncoder,
    out: &'a mut EncodedRows,
    timestamps: &'a mut Vec<i64>,
    input_timestamps: &'a [i64],
    newest: i64,
    late: &'a mut Vec<u32>,
}

impl Output for BatchOutput<'_> {
    fn rows(&mut self, rows: &EmittedRows<'_>) -> Result<(), sluice_engine::Error> {
        self.encoder.encode(rows, self.out);
        if rows.from_input && !self.input_timestamps.is_empty() {
            let ts = self.input_timestamps;
            rows.selection.for_each(|r| self.timestamps.push(ts[r]));
        } else {
            let n = rows.selection.len();
            self.timestamps.extend(std::iter::repeat_n(self.newest, n));
        }
        Ok(())
    }

    fn late(&mut self, _batch: &Batch, rows: &[u32]) -> Result<(), sluice_engine::Error> {
        self.late.extend_from_slice(rows);
        Ok(())
    }
}
