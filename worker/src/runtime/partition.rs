//! Everything one Kafka partition needs on its core: a decoder, the batch
//! being filled, the engine holding the partition's state, and its offsets.
//! The partition is one of a source topic (the first stage of a query) or
//! of a repartition topic (a later stage: see [`super::exchange`]).

use std::sync::Arc;

use sluice_crds::{LateRecordPolicy, SourceSpec};

use super::exchange::ExchangeInput;
use crate::Error;
use crate::frame::{Frame, parse_frame};
use crate::registry::{Registry, as_given, references_of};
use crate::sink::{DeadLetter, DeadLetterSink, Stage};
use crate::source::Record;
use sluice_engine::{Engine, EngineOptions, Output};
use sluice_formats::decode::{BinaryDecoder, Envelope, RecordHeaders, RecordMeta, RowDecoder};
use sluice_formats::encode::{EncodedRows, JsonEncoder, RowEncoder};
use sluice_plan::Batch;
use sluice_plan::EmittedRows;
use sluice_plan::Plan;

mod progress;

pub struct PartitionPipeline {
    partition: i32,
    topic: Arc<str>,
    engine: Engine,
    decoder: RowDecoder,
    /// A column is the processing time: read the clock per record.
    clock: bool,
    batch: Batch,
    /// Source offset and timestamp of each row of `batch`.
    offsets: Vec<i64>,
    timestamps: Vec<i64>,
    /// Next offset to read: everything before it has been processed.
    next_offset: Option<i64>,
    committed_offset: Option<i64>,
    /// Checkpoint metadata of the last commit (points at the saved state).
    metadata: String,
    /// State changed since the last checkpoint.
    dirty: bool,
    /// `metadata` points at a state saved since the last commit: the next
    /// commit carries it even if the offset did not move (a partition fed
    /// in process by its own core's upstream changes state without reading
    /// its topic).
    saved_uncommitted: bool,
    late_policy: LateRecordPolicy,
    /// Encodes late rows for the dead-letter output.
    late_encoder: JsonEncoder,
    late_rows: Vec<u32>,
    counters: BatchCounters,
    /// Fed by an exchange: what is known of the upstream partitions.
    exchange: Option<ExchangeInput>,
    /// Where the exchange's combined watermark moved during the batch:
    /// `(row, watermark)` (see `Engine::process_exchanged`).
    marks: Vec<(usize, i64)>,
    /// The upstream partition of each row in the batch (fed by an exchange).
    upstreams: Vec<u32>,
    /// Rows this partition emitted that came from no input row (aggregate
    /// results) or from an exchange's (whose offsets are shared by a pack), counted so that, written to an exchange, each has a
    /// sequence number a replay after a restore repeats (it is checkpointed).
    emitted: i64,
    /// The watermark last sent downstream as a marker (writing to an exchange).
    marked: Option<i64>,
    /// When this partition last had input, and whether it has since told
    /// its downstream partitions it is idle.
    last_input: std::time::Instant,
    idle_sent: bool,
    /// The input ended (bounded runs) and the engine was finished.
    ended: bool,
    /// This partition as an upstream partition of the exchange its stage
    /// writes (a source's partitions follow the previous sources' in a
    /// UNION ALL).
    upstream: u32,
    /// The checkpoint carries more than the engine's state: the partition
    /// belongs to a query cut into stages (see [`PartitionPipeline::snapshot`]).
    framed: bool,
    /// How the source's records stand for rows (a table's tombstones).
    envelope: Envelope,
    /// Another plan's pipeline reads the same records (one source, two
    /// plans: see `shared_source`) and counts them as the job's input.
    input_counted_elsewhere: bool,
    /// Where the writer schemas of an Avro source's records are looked up.
    registry: Option<Arc<Registry>>,
    /// When the decoders last forgot the ids the registry did not have
    /// (they ask again after [`crate::registry::UNKNOWN_TTL`]).
    unknown_forgotten: std::time::Instant,
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
    /// `feed`: for a partition of a repartition topic, how many partitions
    /// write to it and the names of the values of their (binary) rows.
    pub fn new(
        plan: &Arc<Plan>,
        topic: Arc<str>,
        partition: i32,
        options: EngineOptions,
        capacity: usize,
        feed: Option<(usize, &[String])>,
    ) -> Self {
        let decoder = match feed {
            None => RowDecoder::json(plan),
            Some((_, writer)) => RowDecoder::Binary(BinaryDecoder::new(plan, writer)),
        };
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
            clock: decoder.reads_processing_time(),
            decoder,
            batch,
            offsets: Vec::with_capacity(capacity),
            timestamps: Vec::with_capacity(capacity),
            next_offset: None,
            committed_offset: None,
            metadata: String::new(),
            dirty: false,
            saved_uncommitted: false,
            late_encoder: JsonEncoder::new(&used, &[]),
            late_rows: Vec::new(),
            counters: BatchCounters::default(),
            exchange: feed.map(|(upstreams, _)| ExchangeInput::new(upstreams)),
            marks: Vec::new(),
            upstreams: Vec::new(),
            emitted: 0,
            marked: None,
            last_input: std::time::Instant::now(),
            idle_sent: false,
            ended: false,
            upstream: u32::try_from(partition).unwrap_or(0),
            framed: false,
            envelope: Envelope::Plain,
            input_counted_elsewhere: false,
            registry: None,
            unknown_forgotten: std::time::Instant::now(),
        }
    }

    /// Reads the source's records as its spec says (`format`,
    /// `keyFormat`, a table's tombstones): the decoder and the envelope
    /// are the formats crate's to choose.
    pub fn read_format(&mut self, source: &SourceSpec, registry: Option<&Arc<Registry>>) -> Result<(), Error> {
        let plan = self.engine.plan();
        self.decoder = RowDecoder::for_source(plan, source).map_err(Error::Config)?;
        self.envelope = Envelope::for_source(plan, source);
        let needs = [
            source.format.needs_registry().then(|| format!("format {}", source.format.name())),
            source.key_format.filter(|k| k.needs_registry()).map(|k| format!("keyFormat {}", k.name())),
        ];
        if let Some(what) = needs.into_iter().flatten().next() {
            let registry =
                registry.ok_or_else(|| Error::Config(format!("a source with {what} needs spec.schemaRegistry")))?;
            self.registry = Some(Arc::clone(registry));
        }
        Ok(())
    }

    /// About how many bytes its decoders' compiled writer schemas take:
    /// they come from records, so they count against the core's memory
    /// budget beside the state.
    pub fn decoder_bytes(&mut self) -> usize {
        let tombstones = match &mut self.envelope {
            Envelope::Upsert(t) => t.cache_bytes(),
            _ => 0,
        };
        self.decoder.cache_bytes() + tombstones
    }

    /// The partition's checkpoint: the engine's state, and for a partition
    /// of a repartition topic also its upstream positions and output count.
    pub fn snapshot(&self) -> Result<Vec<u8>, Error> {
        self.framed(self.engine.snapshot()?)
    }

    /// The head of an incremental checkpoint: as [`PartitionPipeline::snapshot`],
    /// with the engine's head ([`Engine::snapshot_head`]) for its state.
    pub fn snapshot_head(&self) -> Result<Vec<u8>, Error> {
        self.framed(self.engine.snapshot_head()?)
    }

    fn framed(&self, engine: Vec<u8>) -> Result<Vec<u8>, Error> {
        if !self.framed {
            return Ok(engine);
        }
        postcard::to_allocvec(&(&self.exchange, self.emitted, engine))
            .map_err(|e| Error::Checkpoint(format!("cannot serialise partition state: {e}")))
    }

    /// Restores [`PartitionPipeline::snapshot`]'s bytes, or with `head`
    /// [`PartitionPipeline::snapshot_head`]'s (its pages follow).
    pub fn restore(&mut self, bytes: &[u8], head: bool) -> Result<(), Error> {
        let restore_engine = |engine: &mut Engine, bytes: &[u8]| {
            if head { engine.restore_head(bytes) } else { engine.restore(bytes) }
        };
        if !self.framed {
            return Ok(restore_engine(&mut self.engine, bytes)?);
        }
        let (exchange, emitted, engine): (Option<ExchangeInput>, i64, Vec<u8>) =
            postcard::from_bytes(bytes).map_err(|e| Error::Checkpoint(format!("cannot read partition state: {e}")))?;
        restore_engine(&mut self.engine, &engine)?;
        self.emitted = emitted;
        if let (Some(mine), Some(saved)) = (&mut self.exchange, exchange) {
            let upstreams = mine.upstreams();
            *mine = saved.restored(upstreams);
        }
        Ok(())
    }

    /// The topic the partition reads (a source's, or a repartition's).
    pub fn topic(&self) -> &str {
        &self.topic
    }

    /// Whether the partition's checkpoints are incremental ([`Engine::paged`]).
    pub fn paged(&self) -> bool {
        self.engine.paged()
    }

    /// The pages changed since the last checkpoint.
    pub fn take_dirty_pages(&mut self) -> Vec<u32> {
        self.engine.take_dirty_pages()
    }

    pub fn snapshot_page(&self, page: u32) -> Result<Vec<u8>, Error> {
        Ok(self.engine.snapshot_page(page)?)
    }

    pub fn restore_page(&mut self, page: u32, bytes: &[u8]) -> Result<(), Error> {
        Ok(self.engine.restore_page(page, bytes)?)
    }

    pub fn pages_restored(&mut self) -> Result<(), Error> {
        Ok(self.engine.pages_restored()?)
    }

    /// Decodes one record into the batch (a packed exchange record: all its
    /// rows), or dead-letters it with the reason; the rows it added.
    pub fn push(&mut self, record: &Record<'_>, dead_letter: &mut dyn DeadLetterSink) -> Result<usize, Error> {
        self.next_offset = Some(record.offset + 1);
        self.accept(record, dead_letter)
    }

    /// Decodes a record of the exchange this partition reads that an
    /// upstream partition of the same core handed over in process
    /// (`super::direct`): the same frames as the repartition topic's, but
    /// not read from it, so the partition's offset in the topic stays.
    pub fn push_direct(&mut self, record: &Record<'_>, dead_letter: &mut dyn DeadLetterSink) -> Result<usize, Error> {
        self.accept(record, dead_letter)
    }

    /// Rows or markers in the batch that the engine has not processed yet.
    pub fn has_pending(&self) -> bool {
        self.batch.len > 0 || !self.marks.is_empty()
    }

    fn accept(&mut self, record: &Record<'_>, dead_letter: &mut dyn DeadLetterSink) -> Result<usize, Error> {
        let payload = record.payload.unwrap_or_default();
        self.counters.bytes += payload.len() as u64;
        let Some(exchange) = &mut self.exchange else {
            self.counters.records += 1;
            if payload.is_empty() {
                match self.envelope {
                    Envelope::Debezium => return Ok(0),
                    Envelope::Upsert(_) => return self.delete(record, dead_letter),
                    Envelope::Plain => {}
                }
            }
            return self.decode(payload, record, None, dead_letter);
        };
        let frame = match parse_frame(payload) {
            Ok(frame) => frame,
            Err(reason) => return self.reject(record, &reason, dead_letter).map(|()| 0),
        };
        if let Frame::Watermark { .. } | Frame::Idle { .. } = frame {
            return match exchange.accept_marker(frame) {
                Ok(w) => {
                    self.marks.extend(w.map(|w| (self.batch.len, w)));
                    Ok(0)
                }
                Err(reason) => self.reject(record, &reason, dead_letter).map(|()| 0),
            };
        }
        let from = frame.from();
        let mut added = 0;
        for row in frame.rows() {
            self.counters.records += 1;
            let fresh = match row {
                Ok((seq, row)) => self.exchange.as_mut().map(|x| x.accept_row(from, seq).map(|new| new.then_some(row))),
                Err(reason) => Some(Err(reason)),
            };
            match fresh {
                Some(Ok(Some(row))) => added += self.decode(row, record, Some(from), dead_letter)?,
                Some(Ok(None)) | None => {}
                // Not a record Sluice wrote: something else produced to
                // the job's internal topic.
                Some(Err(reason)) => {
                    self.reject(record, &reason, dead_letter)?;
                    break;
                }
            }
        }
        Ok(added)
    }

    /// What the decoders' metadata columns read of `record`.
    fn meta<'r>(&self, record: &Record<'r>) -> RecordMeta<'r> {
        RecordMeta {
            key: record.key,
            timestamp_ms: Some(record.timestamp_ms),
            partition: Some(self.partition),
            offset: Some(record.offset),
            processing_time_ms: self.clock.then(crate::clock::now_ms),
            headers: record.headers.map(|h| h as &dyn RecordHeaders),
        }
    }

    /// A table source's tombstone: the deletion of its key's row into the
    /// batch (built from the key alone: no value decoder sees it), or a
    /// dead letter saying why its key names no row.
    fn delete(&mut self, record: &Record<'_>, dead_letter: &mut dyn DeadLetterSink) -> Result<usize, Error> {
        let meta = self.meta(record);
        let Envelope::Upsert(tombstones) = &mut self.envelope else { return Ok(0) };
        if let (Some(registry), Some(key)) = (&self.registry, record.key)
            && let Some(id) = tombstones.key_needs_schema(key)
        {
            let lookup = registry.schema(id)?;
            tombstones.add_key_schema_with(id, as_given(&lookup), references_of(&lookup));
        }
        match tombstones.decode(&meta, &mut self.batch) {
            Ok(()) => {
                self.offsets.push(record.offset);
                self.timestamps.push(record.timestamp_ms);
                Ok(1)
            }
            Err(reason) => self.reject(record, &reason.0, dead_letter).map(|()| 0),
        }
    }

    /// Decodes one row into the batch, or dead-letters it with the reason.
    fn decode(
        &mut self,
        payload: &[u8],
        record: &Record<'_>,
        upstream: Option<u32>,
        dead_letter: &mut dyn DeadLetterSink,
    ) -> Result<usize, Error> {
        let meta = self.meta(record);
        if let Some(registry) = &self.registry {
            // First sight of a writer schema (the value's, or the key's):
            // a registry that does not answer fails the core (retried with
            // backoff), an id it does not know makes the record a dead
            // letter.
            if let Some(id) = self.decoder.needs_schema(payload) {
                let lookup = registry.schema(id)?;
                self.decoder.add_schema_with(id, as_given(&lookup), references_of(&lookup));
            }
            if let Some(key) = record.key
                && let Some(id) = self.decoder.key_needs_schema(key)
            {
                let lookup = registry.schema(id)?;
                self.decoder.add_key_schema_with(id, as_given(&lookup), references_of(&lookup));
            }
        }
        match self.decoder.decode_record(payload, &meta, &mut self.batch) {
            Ok(()) => {
                self.offsets.push(record.offset);
                self.timestamps.push(record.timestamp_ms);
                self.upstreams.extend(upstream);
                Ok(1)
            }
            Err(reason) => {
                self.counters.malformed += 1;
                dead_letter
                    .send(&DeadLetter {
                        topic: &self.topic,
                        partition: self.partition,
                        offset: record.offset,
                        timestamp_ms: record.timestamp_ms,
                        reason: &reason.0,
                        payload: Some(payload),
                        key: record.key,
                        headers: record.headers.map(|h| h as &dyn RecordHeaders),
                        stage: Stage::Decode,
                    })
                    .map(|()| 0)
            }
        }
    }

    /// Dead-letters a whole record with the reason.
    fn reject(&mut self, record: &Record<'_>, reason: &str, dead_letter: &mut dyn DeadLetterSink) -> Result<(), Error> {
        self.counters.malformed += 1;
        dead_letter.send(&DeadLetter {
            topic: &self.topic,
            partition: self.partition,
            offset: record.offset,
            timestamp_ms: record.timestamp_ms,
            reason,
            payload: record.payload,
            key: record.key,
            headers: record.headers.map(|h| h as &dyn RecordHeaders),
            stage: Stage::Decode,
        })
    }

    /// Runs the batch through the engine: results are encoded into `out`
    /// with one timestamp per row in `timestamps`; late rows are dead-lettered
    /// when the policy says so.
    pub fn process(
        &mut self,
        encoder: &RowEncoder,
        out: &mut Emitted,
        flush: Flush<'_>,
        dead_letter: &mut dyn DeadLetterSink,
    ) -> Result<(), Error> {
        if self.batch.len == 0 && self.marks.is_empty() {
            return Ok(());
        }
        if self.registry.is_some() && self.unknown_forgotten.elapsed() >= crate::registry::UNKNOWN_TTL {
            self.decoder.forget_unknown();
            if let Envelope::Upsert(t) = &mut self.envelope {
                t.forget_unknown();
            }
            self.unknown_forgotten = std::time::Instant::now();
        }
        let newest = self.timestamps.iter().copied().max().unwrap_or_else(crate::clock::now_ms);
        self.late_rows.clear();
        let mut sink = BatchOutput {
            encoder,
            out,
            input_timestamps: &self.timestamps,
            // Rows from an exchange share their packed record's offset:
            // numbered by the count of this partition's output instead.
            input_offsets: if self.exchange.is_some() { None } else { Some(&self.offsets) },
            emitted: &mut self.emitted,
            newest,
            late: &mut self.late_rows,
            flush: Some((flush, &mut *dead_letter)),
            failed: None,
        };
        let processed = self.engine.process_exchanged(&mut self.batch, &self.marks, &self.upstreams, &mut sink);
        if let Some(failed) = sink.failed.take() {
            return Err(failed);
        }
        processed?;
        self.marks.clear();
        self.dirty = true;
        self.counters.late += self.late_rows.len() as u64;
        if self.late_policy == LateRecordPolicy::DeadLetter && !self.late_rows.is_empty() {
            self.dead_letter_late(dead_letter)?;
        }
        self.batch.clear();
        self.offsets.clear();
        self.timestamps.clear();
        self.upstreams.clear();
        Ok(())
    }

    /// Closes every window (end of a bounded run): its results go to
    /// `flush` past the bound as they come, as a batch's do — every
    /// session or window still open closes here at once.
    pub fn finish(
        &mut self,
        encoder: &RowEncoder,
        out: &mut Emitted,
        flush: Flush<'_>,
        dead_letter: &mut dyn DeadLetterSink,
    ) -> Result<(), Error> {
        let mut sink = BatchOutput {
            encoder,
            out,
            input_timestamps: &[],
            input_offsets: None,
            emitted: &mut self.emitted,
            newest: crate::clock::now_ms(),
            late: &mut self.late_rows,
            flush: Some((flush, dead_letter)),
            failed: None,
        };
        let finished = self.engine.finish(&mut sink);
        if let Some(failed) = sink.failed.take() {
            return Err(failed);
        }
        finished?;
        self.dirty = true;
        self.ended = true;
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
                delete: false,
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
                payload: Some(encoded.value(i)),
                key: None,
                headers: None,
                stage: Stage::Late,
            })?;
        }
        Ok(())
    }
}

/// What a partition emitted: encoded rows, the timestamp each carries (its
/// input record's, or the batch's newest for aggregate results, so the sink
/// can measure end-to-end latency), and each one's sequence number for an
/// exchange (its input's offset, or a count of the partition's results).
#[derive(Debug, Default)]
pub struct Emitted {
    pub rows: EncodedRows,
    pub timestamps: Vec<i64>,
    pub seqs: Vec<i64>,
}

impl Emitted {
    pub fn clear(&mut self) {
        self.rows.clear();
        self.timestamps.clear();
        self.seqs.clear();
    }
}

/// Writes a partition's results so far to its stage's sink and clears
/// them, mid-batch: one batch's results have no bound (a join's pairs on
/// a hot key), so past [`FLUSH_ROWS`] rows or [`FLUSH_BYTES`] bytes they
/// go on instead of piling up until the batch ends.
pub type Flush<'a> = &'a mut dyn FnMut(&mut Emitted, &mut dyn DeadLetterSink) -> Result<(), Error>;

/// Encoded results a partition holds before writing them mid-batch: far
/// above what a batch of the default size emits, so that ordinary batches
/// are written whole as before. A flush changes no result nor its order;
/// it only writes part of a batch's results earlier.
pub const FLUSH_ROWS: usize = 131_072;
/// ... or bytes of encoded values.
pub const FLUSH_BYTES: usize = 32 << 20;

/// Adapts the engine's output to the encoder.
struct BatchOutput<'a> {
    encoder: &'a RowEncoder,
    out: &'a mut Emitted,
    input_timestamps: &'a [i64],
    /// The offset of each input row when it is unique to the row (a source's).
    input_offsets: Option<&'a [i64]>,
    emitted: &'a mut i64,
    newest: i64,
    late: &'a mut Vec<u32>,
    /// Where results go once they pass the bound (absent: held to the end).
    flush: Option<(Flush<'a>, &'a mut dyn DeadLetterSink)>,
    /// A flush's error as it was (the engine's error type cannot carry
    /// a sink's classification through).
    failed: Option<Error>,
}

impl Output for BatchOutput<'_> {
    fn rows(&mut self, rows: &EmittedRows<'_>) -> Result<(), sluice_engine::Error> {
        self.push(rows);
        let out = &mut *self.out;
        if out.rows.len() < FLUSH_ROWS && out.rows.values.len() < FLUSH_BYTES {
            return Ok(());
        }
        let Some((flush, dead)) = &mut self.flush else { return Ok(()) };
        match flush(out, &mut **dead) {
            Ok(()) => {
                out.clear();
                Ok(())
            }
            Err(e) => {
                self.failed = Some(e);
                Err(sluice_engine::Error::Internal("writing results mid-batch failed".into()))
            }
        }
    }

    fn late(&mut self, _batch: &Batch, rows: &[u32]) -> Result<(), sluice_engine::Error> {
        self.late.extend_from_slice(rows);
        Ok(())
    }
}

impl BatchOutput<'_> {
    fn push(&mut self, rows: &EmittedRows<'_>) {
        self.encoder.encode(rows, &mut self.out.rows);
        let out = &mut *self.out;
        let n = rows.selection.len();
        let from_input = rows.from_input && !self.input_timestamps.is_empty();
        if from_input {
            let ts = self.input_timestamps;
            rows.selection.for_each(|r| out.timestamps.push(ts[r]));
        } else {
            out.timestamps.extend(std::iter::repeat_n(self.newest, n));
        }
        match self.input_offsets.filter(|_| from_input) {
            Some(offsets) => rows.selection.for_each(|r| out.seqs.push(offsets[r])),
            None => {
                let first = *self.emitted + 1;
                *self.emitted += i64::try_from(n).unwrap_or(i64::MAX);
                out.seqs.extend(first..=*self.emitted);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    // Test code: failing loudly is its job.
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use std::sync::Arc;

    use sluice_crds::{ColumnType, SourceSpec, TableSpec};
    use sluice_engine::EngineOptions;

    use super::PartitionPipeline;
    use crate::Error;
    use crate::sink::{DeadLetter, DeadLetterSink};
    use crate::source::Record;

    #[derive(Default)]
    struct Reasons(Vec<String>);

    impl DeadLetterSink for Reasons {
        fn send(&mut self, record: &DeadLetter<'_>) -> Result<(), Error> {
            self.0.push(record.reason.to_owned());
            Ok(())
        }
    }

    /// Results past the bound go to the stage's sink mid-batch, every row
    /// once and in order; a sink's error comes back as it was.
    #[test]
    fn results_past_the_bound_are_written_mid_batch_and_a_failed_write_keeps_its_error() {
        use sluice_engine::Output;
        use sluice_formats::encode::{BinaryEncoder, RowEncoder};
        use sluice_plan::EmittedRows;
        use sluice_plan::{Column, DataType, Selection, Value};

        use super::{BatchOutput, Emitted, FLUSH_ROWS};

        let mut column = Column::with_capacity(DataType::Bigint, 1000);
        (0..1000).for_each(|v| column.push_i64(v).unwrap());
        let columns = [Value::Column(std::borrow::Cow::Borrowed(&column))];
        let rows = EmittedRows {
            columns: &columns,
            keys: &[],
            selection: Selection::All(1000),
            from_input: false,
            delete: false,
        };
        let encoder = RowEncoder::Binary(BinaryEncoder);
        for fail in [false, true] {
            let (mut out, mut emitted, mut late, mut dead) = (Emitted::default(), 0, Vec::new(), Reasons::default());
            let mut written = Vec::new();
            let mut flush = |e: &mut Emitted, _: &mut dyn DeadLetterSink| {
                if fail {
                    return Err(Error::Refused("topic `out`: not authorised".into()));
                }
                written.push((e.rows.len(), e.seqs[0], *e.seqs.last().unwrap()));
                Ok(())
            };
            let mut sink = BatchOutput {
                encoder: &encoder,
                out: &mut out,
                input_timestamps: &[],
                input_offsets: None,
                emitted: &mut emitted,
                newest: 0,
                late: &mut late,
                flush: Some((&mut flush, &mut dead)),
                failed: None,
            };
            let mut result = Ok(());
            for _ in 0..300 {
                result = sink.rows(&rows);
                if result.is_err() {
                    break;
                }
            }
            if fail {
                assert!(result.is_err());
                assert!(matches!(sink.failed, Some(Error::Refused(_))), "{:?}", sink.failed);
                continue;
            }
            assert!(result.is_ok());
            let held = out.rows.len();
            assert!(held < FLUSH_ROWS, "{held}");
            assert_eq!(written.len(), 300_000 / FLUSH_ROWS, "{written:?}");
            let mut next = 1;
            for (n, first, last) in &written {
                assert_eq!((*first, *last), (next, next + *n as i64 - 1), "in order, every row once");
                next += *n as i64;
            }
            assert_eq!(out.seqs[0], next, "the rest held, continuing the count");
            assert_eq!(next - 1 + held as i64, 300_000);
        }
    }

    /// A table source's partition reads a tombstone as the deletion of
    /// its key's row, and dead-letters one whose key names no row.
    #[test]
    fn a_tombstone_of_a_table_source_becomes_a_deletion_or_a_dead_letter() {
        let orders =
            SourceSpec::table("orders", &[("id", ColumnType::Bigint, true), ("cid", ColumnType::Bigint, true)]);
        let customers = SourceSpec {
            table: Some(TableSpec { primary_key: vec!["id".into()] }),
            ..SourceSpec::table("customers", &[("id", ColumnType::Bigint, true), ("name", ColumnType::String, true)])
        };
        let sources = [orders, customers];
        let flow = sluice_sql::plan_dataflow(
            "SELECT o.id, c.name FROM orders o LEFT JOIN customers c ON o.cid = c.id",
            &sources,
            1,
        )
        .unwrap();
        let plan = Arc::new(flow.branches[0].plan.clone());
        let mut part = PartitionPipeline::new(&plan, "customers".into(), 0, EngineOptions::default(), 16, None);
        part.read_format(&sources[1], None).unwrap();
        let mut dead = Reasons::default();
        let tombstone = |key| Record { slot: 0, offset: 0, timestamp_ms: 5, payload: None, key, headers: None };
        assert_eq!(part.push(&tombstone(Some(b"7")), &mut dead).unwrap(), 1, "a row that deletes key 7");
        assert_eq!(part.batch.len, 1);
        /// The payload of each dead letter, `None` for a null one.
        #[derive(Default)]
        struct Payloads(Vec<(String, Option<Vec<u8>>)>);
        impl DeadLetterSink for Payloads {
            fn send(&mut self, record: &DeadLetter<'_>) -> Result<(), Error> {
                self.0.push((record.reason.to_owned(), record.payload.map(<[u8]>::to_vec)));
                Ok(())
            }
        }
        let mut dead = Payloads::default();
        assert_eq!(part.push(&tombstone(None), &mut dead).unwrap(), 0);
        assert_eq!(dead.0.len(), 1, "{:?}", dead.0);
        assert!(dead.0[0].0.contains("has no key"), "{:?}", dead.0);
        assert_eq!(dead.0[0].1, None, "the dead letter is the tombstone: no value, not an empty one");
        assert_eq!(part.counters.malformed, 1);
    }

    /// Every window still open closes when a bounded input ends: past the
    /// bound, its results go to the sink as they come (every row once, in
    /// order), not all held until the end.
    #[test]
    fn windows_closed_at_the_end_of_the_input_are_written_past_the_bound() {
        use sluice_crds::EventTimeSpec;
        use sluice_formats::encode::{BinaryEncoder, RowEncoder};

        use super::{Emitted, FLUSH_ROWS};

        let source = SourceSpec {
            event_time: Some(EventTimeSpec { column: "ts".into(), watermark_delay_millis: 0 }),
            ..SourceSpec::table("t", &[("k", ColumnType::Bigint, true), ("ts", ColumnType::Timestamp, true)])
        };
        let sql = "SELECT k, COUNT(*) AS n FROM t GROUP BY k, SESSION(ts, INTERVAL '1' MINUTE)";
        let plan = Arc::new(sluice_sql::plan_dataflow(sql, &[source], 1).unwrap().stages[0].plan.clone());
        let keys = 2 * FLUSH_ROWS + 1_000;
        let mut part = PartitionPipeline::new(&plan, "t".into(), 0, EngineOptions::default(), keys, None);
        let (encoder, mut out, mut dead) = (RowEncoder::Binary(BinaryEncoder), Emitted::default(), Reasons::default());
        for k in 0..keys {
            let payload = format!(r#"{{"k":{k},"ts":1000}}"#);
            let record = Record {
                slot: 0,
                offset: k as i64,
                timestamp_ms: 5,
                payload: Some(payload.as_bytes()),
                key: None,
                headers: None,
            };
            part.push(&record, &mut dead).unwrap();
        }
        let mut written = Vec::new();
        part.process(&encoder, &mut out, &mut |_: &mut Emitted, _: &mut dyn DeadLetterSink| Ok(()), &mut dead).unwrap();
        assert!(out.rows.is_empty(), "no session closed before the end");
        let mut flush = |e: &mut Emitted, _: &mut dyn DeadLetterSink| {
            written.push((e.rows.len(), e.seqs[0], *e.seqs.last().unwrap()));
            Ok(())
        };
        part.finish(&encoder, &mut out, &mut flush, &mut dead).unwrap();
        assert_eq!(written.len(), 2, "{written:?}");
        let mut next = 1;
        for (n, first, last) in &written {
            assert!(*n < FLUSH_ROWS + FLUSH_ROWS / 8, "past the bound by a chunk of the engine's at most: {n}");
            assert_eq!((*first, *last), (next, next + *n as i64 - 1), "in order, every row once");
            next += *n as i64;
        }
        assert_eq!(next - 1 + out.rows.len() as i64, keys as i64, "the rest held");
    }
}
