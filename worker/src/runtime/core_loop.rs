//! The loop one pinned core runs for its partitions:
//!
//! ```text
//! poll its own consumer (up to batchMaxRecords, or batchLingerMillis after the first record)
//!   → decode each record into its partition's batch (bad ones → dead letters)
//!   → run each partition's engine → encode → queue to the sink
//!   → every checkpointIntervalMillis: flush sink (all acks in) → save state → commit offsets
//! ```
//!
//! Nothing here is shared with another core: not the consumer, not the
//! engines, not the producer.

use std::sync::Arc;
use std::time::{Duration, Instant};

use sluice_crds::{SourceSpec, WorkerConfig};

use super::health::{CoreStatus, Health};
use super::partition::PartitionPipeline;
use super::state_store::StateStore;
use crate::Error;
use crate::kafka::client_config;
use crate::metrics::CoreMetrics;
use crate::sink::{DeadLetterSink, FileDeadLetter, KafkaDeadLetter, KafkaSink, LineSink, LogDeadLetter, Sink};
use crate::source::{CommittedPosition, Datagen, FileSource, KafkaSource, PollEnd, Source};
use sluice_engine::EngineOptions;
use sluice_formats::encode::{EncodedRows, JsonEncoder};
use sluice_plan::{OperatorPlan, Plan};

/// Everything a core needs to run its share of the job.
pub struct CoreSetup {
    pub core: usize,
    pub pin_to: Option<core_affinity::CoreId>,
    pub plan: Arc<Plan>,
    pub config: Arc<WorkerConfig>,
    pub source: SourceSpec,
    pub partitions: Vec<i32>,
    pub total_partitions: i32,
    pub bounded: bool,
    pub metrics: CoreMetrics,
    pub health: Arc<Health>,
}

/// What a core did, for the end-of-run summary.
#[derive(Debug, Default, Clone, Copy)]
pub struct CoreSummary {
    pub records_in: u64,
    pub records_out: u64,
    pub dead_lettered: u64,
    pub late: u64,
}

impl CoreSummary {
    pub fn add(&mut self, o: &CoreSummary) {
        self.records_in += o.records_in;
        self.records_out += o.records_out;
        self.dead_lettered += o.dead_lettered;
        self.late += o.late;
    }
}

struct Core<'a> {
    setup: &'a CoreSetup,
    source: Box<dyn Source>,
    sink: Box<dyn Sink>,
    dead_letter: Box<dyn DeadLetterSink>,
    state: Option<StateStore>,
    parts: Vec<PartitionPipeline>,
    encoder: JsonEncoder,
    encoded: EncodedRows,
    timestamps: Vec<i64>,
    /// Sink delivery failures already counted in the metrics.
    failures_seen: u64,
    /// Offsets are committed (Kafka sources only).
    commits: bool,
    /// When every owned partition's checkpoint was last committed.
    last_refresh: Instant,
    summary: CoreSummary,
}

/// Runs one core until its source is exhausted (bounded) or shutdown.
pub fn run_core(setup: &CoreSetup) -> Result<CoreSummary, Error> {
    if let Some(id) = setup.pin_to
        && !core_affinity::set_for_current(id)
    {
        tracing::warn!(core = setup.core, cpu = id.id, "could not pin thread to its CPU");
    }
    let mut core = Core::start(setup)?;
    setup.health.set(setup.core, CoreStatus::Running);
    tracing::info!(core = setup.core, partitions = ?setup.partitions, "core running");
    core.run()?;
    setup.health.set(setup.core, CoreStatus::Finished);
    Ok(core.summary)
}

impl<'a> Core<'a> {
    fn start(setup: &'a CoreSetup) -> Result<Self, Error> {
        let config = &setup.config;
        let spec = &config.spec;
        let secrets = &config.worker.secrets_dir;
        let topic: Arc<str> = setup.source.topic().into();
        let engine = &spec.engine;
        let state_limit = usize::try_from(engine.state_memory_limit_bytes().map_err(|e| Error::Config(e.to_string()))?)
            .unwrap_or(usize::MAX);
        let capacity = usize::try_from(engine.batch_max_records).unwrap_or(4096);
        let mut parts: Vec<PartitionPipeline> = setup
            .partitions
            .iter()
            .map(|&p| {
                let options = EngineOptions {
                    emit_changes: engine.emit_changes,
                    late_records: engine.late_records,
                    state_limit_bytes: state_limit,
                    partition: p,
                };
                PartitionPipeline::new(&setup.plan, Arc::clone(&topic), p, options, capacity)
            })
            .collect();
        let stateful = !matches!(setup.plan.operator, OperatorPlan::Stateless);
        let (source, positions, state): (Box<dyn Source>, Vec<CommittedPosition>, Option<StateStore>) =
            match (&setup.source.kafka, &setup.source.file, &setup.source.datagen) {
                (Some(k), _, _) => {
                    let client = client_config(&k.bootstrap_servers, &k.properties, k.secret_ref.as_ref(), secrets)?;
                    let state = if stateful {
                        Some(StateStore::open(
                            &client,
                            &config.state_topic(),
                            &k.topic,
                            setup.total_partitions,
                            setup.health.drain.clone(),
                        )?)
                    } else {
                        None
                    };
                    let (source, positions) = KafkaSource::new(
                        client,
                        &config.consumer_group(),
                        &k.topic,
                        &setup.partitions,
                        setup.total_partitions,
                        k.start_from,
                        setup.bounded,
                    )?;
                    (Box::new(source), positions, state)
                }
                (None, Some(f), _) => (Box::new(FileSource::open(&f.path)?), Vec::new(), None),
                (None, None, Some(d)) => {
                    let generator = Datagen::new(
                        d.scenario,
                        setup.source.partition_key.clone(),
                        u32::try_from(d.partitions).unwrap_or(1),
                        &setup.partitions,
                        d.records,
                        d.rate_per_second,
                    );
                    (Box::new(generator), Vec::new(), None)
                }
                _ => return Err(Error::Config(format!("source {} has no kafka, file or datagen", setup.source.name))),
            };
        // Resume each partition from its checkpoint.
        for (part, position) in parts.iter_mut().zip(&positions) {
            part.committed_offset = position.offset;
            // A partition with no commit gets its resolved start committed
            // by the first checkpoint (see `source::kafka::start_offset`).
            part.next_offset = Some(position.start);
            part.metadata.clone_from(&position.metadata);
            if let Some(store) = &state
                && let Some(bytes) = store.load(part.partition, &position.metadata)?
            {
                part.engine.restore(&bytes)?;
                tracing::info!(partition = part.partition, bytes = bytes.len(), offset = ?position.offset, "restored state");
            }
        }
        let sink: Box<dyn Sink> = match (&spec.sink.kafka, &spec.sink.file, spec.sink.stdout) {
            (Some(k), _, _) => Box::new(KafkaSink::new(
                client_config(&k.bootstrap_servers, &k.properties, k.secret_ref.as_ref(), secrets)?,
                &k.topic,
                Arc::clone(&setup.metrics.latency),
                setup.health.drain.clone(),
            )?),
            (None, Some(f), _) => Box::new(LineSink::file(&f.path)?),
            (None, None, Some(true)) => Box::new(LineSink::stdout()),
            _ => return Err(Error::Config("spec.sink needs kafka, file or stdout".into())),
        };
        let dead_letter: Box<dyn DeadLetterSink> = match &spec.dead_letter {
            Some(d) => match (&d.kafka, &d.file) {
                (Some(k), _) => Box::new(KafkaDeadLetter::new(
                    client_config(&k.bootstrap_servers, &k.properties, k.secret_ref.as_ref(), secrets)?,
                    &k.topic,
                    setup.health.drain.clone(),
                )?),
                (None, Some(f)) => Box::new(FileDeadLetter::open(&f.path)?),
                _ => Box::new(LogDeadLetter),
            },
            None => Box::new(LogDeadLetter),
        };
        let names: Vec<String> = setup.plan.outputs.iter().map(|o| o.name.clone()).collect();
        let keys: Vec<String> = setup.plan.keys.iter().map(|o| o.name.clone()).collect();
        Ok(Self {
            setup,
            commits: setup.source.kafka.is_some(),
            last_refresh: Instant::now(),
            source,
            sink,
            dead_letter,
            state,
            parts,
            encoder: JsonEncoder::new(&names, &keys),
            encoded: EncodedRows::default(),
            timestamps: Vec::new(),
            failures_seen: 0,
            summary: CoreSummary::default(),
        })
    }

    fn run(&mut self) -> Result<(), Error> {
        let engine = &self.setup.config.spec.engine;
        let batch_max = usize::try_from(engine.batch_max_records).unwrap_or(4096).max(1);
        let linger = Duration::from_millis(u64::try_from(engine.batch_linger_millis).unwrap_or(0));
        let checkpoint_every = Duration::from_millis(u64::try_from(engine.checkpoint_interval_millis).unwrap_or(1000));
        let idle_wait = Duration::from_millis(100);
        let mut last_checkpoint = Instant::now();
        let mut exhausted = false;
        while !exhausted && !self.setup.health.stopping() {
            // One root span per batch: exported (and sampled) when OTLP is on.
            let span = tracing::info_span!("batch", core = self.setup.core, records = tracing::field::Empty);
            let _entered = span.enter();
            // Collect one batch.
            let mut collected = 0;
            let mut first_at: Option<Instant> = None;
            let mut push_error = None;
            loop {
                let timeout = match first_at {
                    None => idle_wait,
                    Some(t) => linger.saturating_sub(t.elapsed()),
                };
                let (parts, dead_letter) = (&mut self.parts, &mut self.dead_letter);
                let (n, end) = self.source.poll(batch_max - collected, timeout, &mut |record| {
                    if push_error.is_none()
                        && let Err(e) = parts[record.slot].push(&record, dead_letter.as_mut())
                    {
                        push_error = Some(e);
                    }
                })?;
                if let Some(e) = push_error.take() {
                    return Err(e);
                }
                if n > 0 && first_at.is_none() {
                    first_at = Some(Instant::now());
                }
                collected += n;
                if end == PollEnd::Exhausted {
                    exhausted = true;
                    break;
                }
                let lingered = first_at.is_some_and(|t| t.elapsed() >= linger);
                // A drain does not wait out the linger: the batch so far is
                // processed and checkpointed now.
                let stop = self.setup.health.stopping();
                if collected >= batch_max || lingered || (collected == 0 && n == 0) || stop {
                    break;
                }
            }
            span.record("records", collected);
            self.process_batch()?;
            if self.commits && last_checkpoint.elapsed() >= checkpoint_every {
                self.checkpoint()?;
                last_checkpoint = Instant::now();
            }
        }
        if exhausted {
            // A bounded run: every open window is final now.
            for p in &mut self.parts {
                p.finish(&self.encoder, &mut self.encoded, &mut self.timestamps)?;
            }
            let (records, bytes) = (self.encoded.len() as u64, self.encoded.values.len() as u64);
            self.summary.records_out += records;
            self.setup.metrics.records_out.inc_by(records);
            self.setup.metrics.bytes_out.inc_by(bytes);
            self.send_encoded()?;
        }
        self.sink.flush()?;
        self.dead_letter.flush()?;
        if self.commits {
            self.checkpoint()?;
        }
        Ok(())
    }

    fn process_batch(&mut self) -> Result<(), Error> {
        let started = Instant::now();
        let m = &self.setup.metrics;
        let mut totals = super::partition::BatchCounters::default();
        for p in &mut self.parts {
            p.process(&self.encoder, &mut self.encoded, &mut self.timestamps, self.dead_letter.as_mut())?;
            let c = std::mem::take(&mut p.counters);
            totals.records += c.records;
            totals.bytes += c.bytes;
            totals.malformed += c.malformed;
            totals.late += c.late;
        }
        let out_records = self.encoded.len() as u64;
        let out_bytes = self.encoded.values.len() as u64;
        self.send_encoded()?;
        let polled = self.sink.poll();
        let failed = self.sink.failed_deliveries();
        m.produce_errors.inc_by(failed - self.failures_seen.min(failed));
        self.failures_seen = failed;
        polled?;
        self.dead_letter.poll()?;
        // Metrics: once per batch.
        if totals.records > 0 {
            m.records_in.inc_by(totals.records);
            m.bytes_in.inc_by(totals.bytes);
            m.batches.inc();
            m.batch_seconds.observe(started.elapsed().as_secs_f64());
        }
        m.records_out.inc_by(out_records);
        m.bytes_out.inc_by(out_bytes);
        m.dead_letter_malformed.inc_by(totals.malformed);
        m.late.inc_by(totals.late);
        if self.setup.config.spec.engine.late_records == sluice_crds::LateRecordPolicy::DeadLetter {
            m.dead_letter_late.inc_by(totals.late);
        }
        let now = super::now_ms();
        let (mut entries, mut bytes) = (0usize, 0usize);
        for (slot, p) in self.parts.iter().enumerate() {
            let stats = p.engine.stats();
            entries += stats.state_entries;
            bytes += stats.state_bytes;
            let pm = &m.partitions[slot];
            if let Some(lag) = self.source.lag(slot) {
                pm.consumer_lag.set(lag);
            }
            if let Some(next) = p.next_offset {
                pm.position.set(next);
            }
            if let Some(w) = p.engine.watermark() {
                #[allow(clippy::cast_precision_loss)]
                pm.watermark_lag.set((now - w) as f64 / 1000.0);
            }
        }
        m.state_entries.set(i64::try_from(entries).unwrap_or(i64::MAX));
        m.state_bytes.set(i64::try_from(bytes).unwrap_or(i64::MAX));
        self.summary.records_in += totals.records;
        self.summary.records_out += out_records;
        self.summary.dead_lettered += totals.malformed;
        self.summary.late += totals.late;
        Ok(())
    }

    fn send_encoded(&mut self) -> Result<(), Error> {
        if !self.encoded.is_empty() {
            self.sink.send(&self.encoded, &self.timestamps)?;
        }
        self.encoded.clear();
        self.timestamps.clear();
        Ok(())
    }

    /// Makes everything processed so far durable: wait for the sink to
    /// acknowledge every result, save changed state, then commit offsets
    /// (with a pointer to that state). A crash before the commit replays
    /// from the previous checkpoint: nothing lost, results possibly repeated.
    fn checkpoint(&mut self) -> Result<(), Error> {
        let started = Instant::now();
        self.sink.flush()?;
        self.dead_letter.flush()?;
        if let Some(store) = &mut self.state {
            let mut snapshots = Vec::new();
            for p in self.parts.iter().filter(|p| p.dirty) {
                snapshots.push((p.partition, p.engine.snapshot()?, StateStore::next_slot(&p.metadata)));
            }
            if !snapshots.is_empty() {
                for (partition, metadata) in store.save(&snapshots)? {
                    if let Some(p) = self.parts.iter_mut().find(|p| p.partition == partition) {
                        p.metadata = metadata;
                        p.dirty = false;
                    }
                }
            }
        }
        let refresh_every = Duration::from_millis(self.setup.config.worker.offset_refresh_millis);
        let refresh = self.last_refresh.elapsed() >= refresh_every;
        let positions: Vec<(usize, i64, String)> = self
            .parts
            .iter()
            .enumerate()
            .filter_map(|(slot, p)| {
                let next = to_commit(p.next_offset, p.committed_offset, refresh)?;
                Some((slot, next, p.metadata.clone()))
            })
            .collect();
        if refresh {
            self.last_refresh = Instant::now();
        }
        if !positions.is_empty() {
            self.source.commit(&positions)?;
            for (slot, offset, _) in positions {
                self.parts[slot].committed_offset = Some(offset);
            }
            self.setup.metrics.checkpoints.inc();
            self.setup.metrics.checkpoint_seconds.observe(started.elapsed().as_secs_f64());
        }
        Ok(())
    }
}

/// The offset to commit for a partition at a checkpoint: its position when
/// it moved, and also when it did not but a refresh is due — Kafka expires a
/// standalone group's offsets some time after their last commit, and an idle
/// partition would otherwise lose its committed offset and state pointer.
fn to_commit(next: Option<i64>, committed: Option<i64>, refresh: bool) -> Option<i64> {
    next.filter(|n| refresh || committed != Some(*n))
}

#[cfg(test)]
mod tests {
    use super::to_commit;

    #[test]
    fn idle_partitions_are_committed_again_when_a_refresh_is_due() {
        assert_eq!(to_commit(Some(10), Some(5), false), Some(10), "moved");
        assert_eq!(to_commit(Some(10), Some(10), false), None, "idle, no refresh due");
        assert_eq!(to_commit(Some(10), Some(10), true), Some(10), "idle, refreshed");
        assert_eq!(to_commit(None, None, true), None, "nothing consumed and nothing committed");
    }
}
