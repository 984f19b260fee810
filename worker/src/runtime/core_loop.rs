//! The loop one pinned core runs for its partitions:
//!
//! ```text
//! poll its own consumer (up to batchMaxRecords, or batchLingerMillis after the first record)
//!   → decode each record into its partition's batch (bad ones → dead letters)
//!   → run each partition's engine → encode → queue to the stage's output
//!   → every checkpointIntervalMillis: flush outputs (all acks in) → save state → commit offsets
//! ```
//!
//! A query cut into stages (`sluice_plan::Dataflow`) runs every stage on
//! every core: the core's one consumer reads its partitions of the source
//! and of each repartition topic, and each partition's results go to its
//! stage's output — the job's sink for the last stage, the next repartition
//! topic for the others (rows by key, then watermark markers).
//!
//! Nothing here is shared with another core: not the consumer, not the
//! engines, not the producers.

use std::ops::Range;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rdkafka::admin::AdminClient;
use rdkafka::client::DefaultClientContext;
use sluice_crds::Delivery;

use super::direct;
use super::health::CoreStatus;
use super::local_exchange::{ExchangeInputChannel, LocalExchangeWriter, LocalStagedSource};
use super::outputs::{Writes, dead_letter, job_sink, sink_encoder, transactional_producer};
use super::partition::{BatchCounters, Emitted, PartitionPipeline};
use super::setup::CoreSetup;
use super::shared_source::SharedSource;
use super::spill_store::SpillDb;
use super::state_group::{group_members, restore_group, snapshot_group};
use super::state_pages::PageId;
use super::state_store::StateStore;
use super::summary::CoreSummary;
use super::topology::{Layout, topic_inputs};
use crate::Error;
use crate::frame::{END, Frame};
use crate::kafka::{client_config, delete_records};
use crate::sink::{CoreProducer, DeadLetterSink, ExchangeOutput, ExchangeSink, Sink, producer_config};
use crate::source::{CommittedPosition, KafkaSource, LocalSources, PollEnd, Source, local_source};
use sluice_engine::EngineOptions;
use sluice_formats::encode::{BinaryEncoder, RowEncoder};
use sluice_plan::StageOutput;

/// Where a stage's results go.
enum StageSink {
    /// The job's sink (the last stage).
    Job(Box<dyn Sink>),
    /// The exchange the next stage reads.
    Exchange(Box<dyn ExchangeOutput>),
}

impl StageSink {
    fn flush(&mut self) -> Result<(), Error> {
        match self {
            Self::Job(s) => s.flush(),
            Self::Exchange(x) => x.flush(),
        }
    }
}

/// One stage of the query as this core runs it.
struct StageRun {
    encoder: RowEncoder,
    sink: StageSink,
    /// Its partitions' slots in `Core::parts` (and the source's slots).
    slots: Range<usize>,
    /// What its partitions emitted, before it is written.
    emitted: Emitted,
    /// Per partition of the exchange it writes, the slots of this core
    /// that read it and take its frames in process (none until
    /// [`Core::catch_up`] allows: see `super::direct`).
    here: Vec<Vec<usize>>,
}

struct Core<'a> {
    setup: &'a CoreSetup,
    source: Box<dyn Source>,
    stages: Vec<StageRun>,
    dead_letter: Box<dyn DeadLetterSink>,
    parts: Vec<PartitionPipeline>,
    /// Per input, its partitions' slots in `parts`.
    input_slots: Vec<Range<usize>>,
    /// Where the state of the partitions of the slots is checkpointed (the
    /// inputs whose plan keeps state).
    stores: Vec<(Range<usize>, StateStore)>,
    /// Per slot, the slots checkpointed with it (see `restore_group`).
    companions: Vec<Vec<usize>>,
    /// Per input, whether it is read (not a second reader of a topic).
    read: Vec<bool>,
    /// `spec.engine.stateMemoryLimit`: the state the core's partitions may
    /// hold together.
    state_limit: usize,
    /// Sink delivery failures already counted in the metrics.
    failures_seen: u64,
    /// Offsets are committed (Kafka sources only).
    commits: bool,
    /// When every owned partition's checkpoint was last committed.
    last_refresh: Instant,
    /// Deletes what repartition partitions hold below their committed
    /// offsets, and when it last did.
    purge: Option<(AdminClient<DefaultClientContext>, Instant)>,
    /// A bounded source delivered everything.
    source_done: bool,
    /// The transactional producer of each checkpoint's transaction:
    /// exactly once, everything goes through it; at least once, the
    /// exchanges, state and offsets of a job whose stateful plan writes an
    /// exchange (`Dataflow::has_stateful_exchange_writer`).
    transaction: Option<Arc<CoreProducer>>,
    summary: CoreSummary,
    /// Where the partitions' operators spill state past their budget
    /// (with a state directory); it lives as long as the core.
    spill: Option<SpillDb>,
    /// Exchanges this core reads partitions of that its own upstream
    /// partitions write: handed over in process once their topics' backlog
    /// is read (see `super::direct`).
    direct: Option<direct::Direct>,
}

/// How often a repartition topic is purged below the committed offsets
/// (Kafka Streams' `repartition.purge.interval.ms` default).
const PURGE_EVERY: Duration = Duration::from_secs(30);

/// Runs one core until its source is exhausted (bounded) or shutdown.
pub fn run_core(setup: &CoreSetup) -> Result<CoreSummary, Error> {
    if let Some(id) = setup.cpus.engine
        && !core_affinity::set_for_current(id)
    {
        tracing::warn!(core = setup.core, cpu = id.id, "could not pin thread to its CPU");
    }
    let mut core = Core::start(setup)?;
    setup.health.set(setup.core, CoreStatus::Running);
    let reads: Vec<(&str, &[i32])> = setup.inputs.iter().map(|i| (i.topic.as_str(), &i.partitions[..])).collect();
    tracing::info!(core = setup.core, partitions = ?reads, "core running");
    core.run()?;
    setup.health.set(setup.core, CoreStatus::Finished);
    Ok(core.summary)
}

impl<'a> Core<'a> {
    #[allow(clippy::too_many_lines)]
    fn start(setup: &'a CoreSetup) -> Result<Self, Error> {
        let config = &setup.config;
        let spec = &config.spec;
        let secrets = &config.worker.secrets_dir;
        let engine = &spec.engine;
        let state_limit = usize::try_from(engine.state_memory_limit_bytes().map_err(|e| Error::Config(e.to_string()))?)
            .unwrap_or(usize::MAX);
        setup.metrics.state_limit.set(i64::try_from(state_limit).unwrap_or(i64::MAX));
        let capacity = usize::try_from(engine.batch_max_records).unwrap_or(4096);
        let stages = &setup.dataflow.stages;
        let Layout { input_slots, stage_slots, read, readers, companions, counted_elsewhere, checkpointed } =
            Layout::new(&setup.inputs, &setup.dataflow)?;
        let mut parts = Vec::with_capacity(counted_elsewhere.len());
        for input in &setup.inputs {
            let topic: Arc<str> = input.topic.as_str().into();
            for &p in &input.partitions {
                let options = EngineOptions {
                    emit_changes: engine.emit_changes,
                    late_records: engine.late_records,
                    state_limit_bytes: state_limit,
                    partition: p,
                };
                let feed = input.upstreams.map(|n| (n, input.writer.as_slice()));
                let mut part = PartitionPipeline::new(&input.plan, Arc::clone(&topic), p, options, capacity, feed);
                part.framed = stages.len() > 1;
                if let Some(source) = &input.source {
                    part.read_format(source, setup.registry.as_ref())?;
                }
                part.upstream = input.upstream_offset + u32::try_from(p).unwrap_or(0);
                part.input_counted_elsewhere = counted_elsewhere[parts.len()];
                parts.push(part);
            }
        }
        let spill = super::spill_store::attach(setup, &mut parts, state_limit)?;
        let multi_stage = setup.dataflow.has_exchange();
        let mut stores = Vec::new();
        let mut exchange_client = None;
        let mut transaction = None;
        // The job's results and dead letters go through the transaction
        // only exactly once; at least once it holds internal writes only.
        let exactly_once = spec.delivery == Delivery::ExactlyOnce;
        let kafka = setup.inputs.iter().find_map(|i| i.source.as_ref().and_then(|s| s.kafka.as_ref()));
        let (source, positions): (Box<dyn Source>, Vec<CommittedPosition>) = match kafka {
            // A preview reads the source topics only — one consumer per
            // topic, numbered into the core's slots as local sources are —
            // and its stages exchange in process: it opens no repartition
            // topic, state topic or transaction, and commits nothing.
            Some(k) if setup.preview.is_some() => {
                let client = client_config(k.connection(), secrets)?;
                let mut sources = Vec::new();
                let mut base = 0;
                for (input, read) in setup.inputs.iter().zip(&read) {
                    if !read || input.partitions.is_empty() {
                        continue;
                    }
                    if input.source.is_some() {
                        let inputs = topic_inputs(std::slice::from_ref(input), &[true], false);
                        let (source, _) = KafkaSource::new(client.clone(), &config.consumer_group(), &inputs)?;
                        sources.push((Box::new(source) as Box<dyn Source>, base));
                    }
                    base += input.partitions.len();
                }
                (Box::new(LocalSources::new(sources)) as Box<dyn Source>, Vec::new())
            }
            Some(k) => {
                let client = client_config(k.connection(), secrets)?;
                if exactly_once {
                    // Before the committed offsets are read: no producer
                    // of an earlier owner of these partitions can commit
                    // after that.
                    transaction = Some(transactional_producer(setup, &client, Writes::Everything)?);
                } else if setup.dataflow.has_stateful_exchange_writer() {
                    if let Some(problem) = spec.internal_transaction_problem() {
                        return Err(Error::Config(problem));
                    }
                    transaction = Some(transactional_producer(setup, &client, Writes::Internal)?);
                }
                for s in 1..stages.len() {
                    crate::kafka::open_repartition_topic(
                        &client,
                        &config.repartition_topic(s),
                        setup.exchange_partitions,
                    )?;
                }
                let (slot, slots) = setup.slot();
                // Half the volume (a store needs room to compact), shared
                // by the worker's cores and each one's state topics.
                let stores_per_core = checkpointed.iter().filter(|c| **c).count().max(1);
                let shares = u64::from(spec.cores_per_worker.max(1).unsigned_abs())
                    .saturating_mul(u64::try_from(stores_per_core).unwrap_or(1));
                let budget = config.worker.state_dir_bytes.map(|b| b / shares / 2);
                for (i, input) in setup.inputs.iter().enumerate().filter(|(i, _)| checkpointed[*i]) {
                    let topic = setup.state_topic(i);
                    // One store per core, named by its engine slot: a
                    // restart with the same layout owns the same partitions.
                    let local =
                        config.worker.state_dir.as_ref().map(|dir| {
                            std::path::Path::new(dir).join(&topic).join(format!("engine-{slot}-of-{slots}"))
                        });
                    let store = StateStore::open(
                        &client,
                        transaction.clone(),
                        &topic,
                        &input.topic,
                        input.total,
                        setup.health.drain.clone(),
                        local.as_deref().map(|dir| (dir, budget, setup.cpus)),
                    )?;
                    stores.push((input_slots[i].clone(), store));
                }
                let inputs = topic_inputs(&setup.inputs, &read, setup.bounded);
                let mut consumer = client.clone();
                if transaction.is_some() {
                    // librdkafka's default, made sure of: a user property
                    // must not let a stage read what an upstream core may
                    // still abort.
                    consumer.set("isolation.level", "read_committed");
                }
                let (source, positions) = KafkaSource::new(consumer, &config.consumer_group(), &inputs)?;
                exchange_client = Some(client);
                (Box::new(source), positions)
            }
            None => {
                let mut locals = Vec::new();
                let mut base = 0;
                for (input, read) in setup.inputs.iter().zip(&read) {
                    // A source this core owns no partition of is not read
                    // here: a file (one partition) would be read by every
                    // core, into the next input's slot.
                    if !read || input.partitions.is_empty() {
                        continue;
                    }
                    if let Some(spec) = &input.source {
                        locals.push((local_source(spec, &input.partitions)?, base));
                    }
                    base += input.partitions.len();
                }
                let single = locals.len() == 1 && !multi_stage;
                match locals.pop() {
                    Some((only, 0)) if single => (only, Vec::new()),
                    last => {
                        locals.extend(last);
                        (Box::new(LocalSources::new(locals)) as Box<dyn Source>, Vec::new())
                    }
                }
            }
        };
        let shared = readers.is_some();
        // A source more than one plan reads is read once for all of them.
        let (source, positions): (Box<dyn Source>, Vec<CommittedPosition>) = match readers {
            None => (source, positions),
            // A local source commits nothing: no positions to spread.
            Some(readers) if positions.is_empty() => (Box::new(SharedSource::new(source, readers)?), positions),
            Some(readers) => {
                // Each reader of a partition resumes where it was committed.
                let mut by_slot = vec![CommittedPosition::default(); parts.len()];
                for (position, of) in positions.iter().zip(&readers) {
                    for &slot in of {
                        by_slot[slot] = position.clone();
                    }
                }
                (Box::new(SharedSource::new(source, readers)?), by_slot)
            }
        };
        let mut local_outputs = Vec::new();
        let mut backlog = None;
        let source: Box<dyn Source> = match (&exchange_client, multi_stage) {
            (None, true) => {
                let ends = setup.local_exchange.lock().ok().and_then(|mut e| e.take()).ok_or_else(|| {
                    Error::Internal("a local run of a query cut into stages without its exchanges".into())
                })?;
                let mut inputs = Vec::new();
                for (s, receivers) in ends.inputs.into_iter().enumerate() {
                    // Every plan reading the exchange (the stage's, and a
                    // branch's beside it) gets each of its records.
                    let readers: Vec<Range<usize>> = setup
                        .inputs
                        .iter()
                        .enumerate()
                        .filter(|(_, i)| i.stage == s + 1 && i.source.is_none())
                        .map(|(i, _)| input_slots[i].clone())
                        .collect();
                    for (k, from) in receivers.into_iter().enumerate() {
                        let slots = readers.iter().filter_map(|r| r.clone().nth(k)).collect();
                        inputs.push(ExchangeInputChannel { slots, from });
                    }
                }
                local_outputs = ends.outputs;
                backlog = Some(Arc::clone(&ends.backlog));
                Box::new(LocalStagedSource::new(source, inputs, ends.backlog))
            }
            _ => source,
        };
        // Resume each partition from its checkpoint.
        for (part, position) in parts.iter_mut().zip(&positions) {
            part.committed_offset = position.offset;
            // A partition with no commit gets its resolved start committed
            // by the first checkpoint (see `source::kafka::start_offset`).
            part.next_offset = Some(position.start);
            part.metadata.clone_from(&position.metadata);
        }
        for (slot, position) in positions.iter().enumerate() {
            let partition = parts[slot].partition;
            let started = Instant::now();
            if let Some((_, store)) = stores.iter_mut().find(|(r, _)| r.contains(&slot))
                && let Some(loaded) = store.load(partition, &position.metadata)?
            {
                if let Err(e) = restore_group(&mut parts, slot, &companions[slot], &loaded) {
                    if loaded.from_volume {
                        store.forget_local(partition);
                        return Err(Error::LocalCopy { partition, message: e.to_string() });
                    }
                    return Err(e);
                }
                let seconds = started.elapsed().as_secs_f64();
                setup.metrics.state_restore_seconds.observe(seconds);
                let from = if loaded.from_volume { "volume" } else { "topic" };
                setup.metrics.state_restores(loaded.from_volume).inc();
                tracing::info!(
                    slot, partition, bytes = loaded.bytes_read, pages = loaded.pages.as_ref().map(Vec::len),
                    seconds, offset = ?position.offset, from, "restored state"
                );
            }
        }
        let mut runs = Vec::with_capacity(stages.len());
        for ((s, stage), slots) in stages.iter().enumerate().zip(stage_slots) {
            let sink = match (stage.output, &exchange_client) {
                (StageOutput::Sink, _) => {
                    StageSink::Job(job_sink(setup, transaction.as_ref().filter(|_| exactly_once))?)
                }
                (StageOutput::Exchange, Some(client)) => {
                    let topic = config.repartition_topic(s + 1);
                    let out = match &transaction {
                        Some(t) => Arc::clone(t),
                        None => CoreProducer::new(
                            &producer_config(ExchangeSink::config(client.clone())),
                            &topic,
                            None,
                            setup.health.drain.clone(),
                        )?,
                    };
                    StageSink::Exchange(Box::new(ExchangeSink::new(out, &topic, setup.exchange_partitions)?))
                }
                (StageOutput::Exchange, None) => match (local_outputs.get_mut(s).and_then(Option::take), &backlog) {
                    (Some(to), Some(backlog)) => {
                        StageSink::Exchange(Box::new(LocalExchangeWriter::new(to, Arc::clone(backlog))))
                    }
                    _ => return Err(Error::Internal(format!("no exchange for stage {s}'s output"))),
                },
            };
            let names: Vec<String> = stage.plan.outputs.iter().map(|o| o.name.clone()).collect();
            let keys: Vec<String> = stage.plan.keys.iter().map(|o| o.name.clone()).collect();
            let encoder = match stage.output {
                StageOutput::Sink => sink_encoder(setup, &stage.plan, &names, &keys)?,
                StageOutput::Exchange => RowEncoder::Binary(BinaryEncoder),
            };
            runs.push(StageRun { encoder, sink, slots, emitted: Emitted::default(), here: Vec::new() });
        }
        // On a cluster, rows a core's partition writes to an exchange
        // partition the same core reads skip the broker (a preview's
        // exchanges are in process already; a topic two plans read is
        // shared by slot mappings the shortcut does not follow).
        let direct = match &exchange_client {
            Some(_) if multi_stage && !shared => {
                direct::Direct::plan(&setup.inputs, &input_slots, stages, setup.exchange_partitions)
            }
            _ => None,
        };
        let dead_letter = dead_letter(setup, transaction.as_ref().filter(|_| exactly_once))?;
        let purge = match &exchange_client {
            Some(client) if multi_stage => {
                let admin = client.create().map_err(|e| Error::kafka("create admin client", e))?;
                Some((admin, Instant::now()))
            }
            _ => None,
        };
        Self {
            setup,
            commits: setup.commits(),
            last_refresh: Instant::now(),
            source,
            stages: runs,
            dead_letter,
            parts,
            input_slots,
            stores,
            state_limit,
            companions,
            read,
            failures_seen: 0,
            purge,
            source_done: false,
            transaction,
            summary: CoreSummary::default(),
            spill,
            direct: None,
        }
        .with_direct(direct)
    }

    /// Starts handing over in process what this core's partitions write to
    /// exchange partitions it reads — at once, or once it caught up with
    /// its sources held (see `super::direct`).
    fn with_direct(mut self, direct: Option<direct::Direct>) -> Result<Self, Error> {
        let Some(mut direct) = direct else { return Ok(self) };
        if direct.start(self.setup.core, self.source.as_mut(), &self.parts)? {
            read_here(&mut self.stages, &direct);
        }
        self.direct = Some(direct);
        Ok(self)
    }

    /// While the sources are held: whether the catch-up ended, and then
    /// the handover starts.
    fn catch_up(&mut self) -> Result<(), Error> {
        let Some(direct) = &mut self.direct else { return Ok(()) };
        if direct.catch_up(self.setup.core, self.source.as_mut(), &self.parts)? {
            read_here(&mut self.stages, direct);
        }
        Ok(())
    }

    fn run(&mut self) -> Result<(), Error> {
        let engine = &self.setup.config.spec.engine;
        let batch_max = usize::try_from(engine.batch_max_records).unwrap_or(4096).max(1);
        let linger = Duration::from_millis(u64::try_from(engine.batch_linger_millis).unwrap_or(0));
        let checkpoint_every = Duration::from_millis(u64::try_from(engine.checkpoint_interval_millis).unwrap_or(1000));
        let idle_after = Duration::from_millis(u64::try_from(engine.idle_timeout_millis).unwrap_or(0));
        let idle_wait = Duration::from_millis(100);
        let mut last_checkpoint = Instant::now();
        while !self.all_ended() && !self.setup.health.stopping() {
            // One root span per batch: exported (and sampled) when OTLP is on.
            let span = tracing::info_span!("batch", core = self.setup.core, records = tracing::field::Empty);
            let _entered = span.enter();
            // Collect one batch of about `batch_max` rows: sources count
            // what they deliver in the rows each record added (a packed
            // exchange record holds many), so a batch's memory is bounded
            // whatever mix of sources and exchanges a core reads.
            let mut collected = 0;
            let mut first_at: Option<Instant> = None;
            // Busy time is the iteration's time less the polls that may
            // have waited: those that returned fewer records than asked
            // for (a trickle waits up to the poll timeout for its first
            // record). A saturated core gets full polls: all busy. Waiting
            // for input is what a faster core cannot shorten.
            let iteration = Instant::now();
            let mut waited = Duration::ZERO;
            let mut push_error = None;
            loop {
                let timeout = match first_at {
                    None => idle_wait,
                    Some(t) => linger.saturating_sub(t.elapsed()),
                };
                let (parts, dead_letter) = (&mut self.parts, &mut self.dead_letter);
                let want = batch_max - collected;
                let polled_at = Instant::now();
                let (n, end) = self.source.poll(want, timeout, &mut |record| {
                    if push_error.is_some() {
                        return 1;
                    }
                    match parts[record.slot].push(&record, dead_letter.as_mut()) {
                        Ok(added) => added,
                        Err(e) => {
                            push_error = Some(e);
                            1
                        }
                    }
                })?;
                if let Some(e) = push_error.take() {
                    return Err(e);
                }
                if n < want {
                    waited += polled_at.elapsed();
                }
                if n > 0 && first_at.is_none() {
                    first_at = Some(Instant::now());
                }
                collected = (collected + n).min(batch_max);
                if end == PollEnd::Exhausted {
                    self.source_done = true;
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
            self.catch_up()?;
            self.end_inputs()?;
            if !idle_after.is_zero() {
                self.mark_idle(idle_after)?;
            }
            if self.commits && last_checkpoint.elapsed() >= checkpoint_every {
                self.checkpoint()?;
                last_checkpoint = Instant::now();
            }
            self.setup.metrics.busy_seconds.inc_by(iteration.elapsed().saturating_sub(waited).as_secs_f64());
        }
        for stage in &mut self.stages {
            stage.sink.flush()?;
        }
        self.dead_letter.flush()?;
        if self.commits {
            self.checkpoint()?;
            // What the last commit passed is purged now, not left for the
            // next run's first interval.
            if let Some((_, last)) = &mut self.purge {
                *last = Instant::now().checked_sub(PURGE_EVERY).unwrap_or(*last);
            }
            self.purge();
        }
        Ok(())
    }

    /// Whether every partition's input ended (only ever in bounded runs).
    fn all_ended(&self) -> bool {
        (self.source_done || self.parts.iter().all(|p| p.exchange.is_some())) && self.parts.iter().all(|p| p.ended)
    }

    fn process_batch(&mut self) -> Result<(), Error> {
        let started = Instant::now();
        let m = &self.setup.metrics;
        let mut totals = BatchCounters::default();
        let mut input = BatchCounters::default();
        let (mut out_records, mut out_bytes) = (0u64, 0u64);
        // What partitions wrote mid-batch: records, bytes, dead-lettered.
        let mut written = (0u64, 0u64, 0u64);
        for stage in &mut self.stages {
            for slot in stage.slots.clone() {
                let p = &mut self.parts[slot];
                let from = p.upstream;
                p.process(
                    &stage.encoder,
                    &mut stage.emitted,
                    &mut flush_to(&mut stage.sink, from, &mut written),
                    self.dead_letter.as_mut(),
                )?;
                let c = std::mem::take(&mut p.counters);
                if c.records > 0 {
                    p.last_input = started;
                    p.idle_sent = false;
                }
                if p.exchange.is_none() && !p.input_counted_elsewhere {
                    input.records += c.records;
                    input.bytes += c.bytes;
                }
                totals.malformed += c.malformed;
                totals.late += c.late;
                let (records, bytes, rejected) = write(stage, p, self.dead_letter.as_mut())?;
                totals.malformed += rejected;
                out_records += records;
                out_bytes += bytes;
            }
            // The next stage's partitions on this core take theirs before
            // they run, in this batch.
            hand_over(stage, &mut self.parts, self.dead_letter.as_mut())?;
        }
        totals.malformed += written.2;
        out_records += written.0;
        out_bytes += written.1;
        let mut polled = Ok(());
        for stage in &mut self.stages {
            match &mut stage.sink {
                StageSink::Job(sink) => {
                    let r = sink.poll();
                    let failed = sink.failed_deliveries();
                    m.produce_errors.inc_by(failed - self.failures_seen.min(failed));
                    self.failures_seen = failed;
                    polled = polled.and(r);
                }
                StageSink::Exchange(x) => polled = polled.and(x.poll()),
            }
        }
        polled?;
        self.dead_letter.poll()?;
        // Metrics: once per batch.
        if input.records > 0 {
            m.records_in.inc_by(input.records);
            m.bytes_in.inc_by(input.bytes);
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
        let now = crate::clock::now_ms();
        // Writer schemas compiled from what records name count too.
        let decoders: usize = self.parts.iter_mut().map(PartitionPipeline::decoder_bytes).sum();
        let (mut entries, mut bytes, mut largest, mut largest_slot) = (0usize, decoders, 0usize, 0usize);
        for (slot, p) in self.parts.iter().enumerate() {
            let stats = p.engine.stats();
            entries += stats.state_entries;
            bytes += stats.state_bytes;
            if stats.state_bytes > largest {
                (largest, largest_slot) = (stats.state_bytes, slot);
            }
            let Some(pm) = m.partitions.get(slot) else { continue };
            if let Some(lag) = self.source.lag(slot) {
                pm.consumer_lag.set(lag);
            }
            if let Some(next) = p.next_offset {
                pm.position.set(next);
            }
            // A stage behind an exchange holds a watermark near i64::MIN
            // until every upstream partition has sent one: no lag to show.
            if let Some(lag) = p.engine.watermark().filter(|w| *w != END).and_then(|w| now.checked_sub(w)) {
                #[allow(clippy::cast_precision_loss)]
                pm.watermark_lag.set(lag as f64 / 1000.0);
            }
        }
        m.state_entries.set(i64::try_from(entries).unwrap_or(i64::MAX));
        m.state_bytes.set(i64::try_from(bytes).unwrap_or(i64::MAX));
        m.state_largest.set(i64::try_from(largest).unwrap_or(i64::MAX));
        if let Some(spill) = &self.spill {
            let spilled: u64 = self.parts.iter().map(|p| p.engine.stats().spilled_bytes).sum();
            m.state_spilled.set(i64::try_from(spilled).unwrap_or(i64::MAX));
            self.summary.peak_spilled_bytes = self.summary.peak_spilled_bytes.max(spilled);
            if let Some(limit) = spill.budget
                && spilled > limit
            {
                return Err(Error::SpillLimit { core: self.setup.core, used: spilled, limit });
            }
        }
        self.summary.records_in += input.records;
        self.summary.records_out += out_records;
        self.summary.dead_lettered += totals.malformed;
        self.summary.late += totals.late;
        self.summary.peak_state_bytes = self.summary.peak_state_bytes.max(bytes as u64);
        // One bound for the core's partitions together: the pod's memory is
        // sized per core from it (each engine also stops at it alone).
        if bytes > self.state_limit {
            let p = &self.parts[largest_slot];
            let stats = p.engine.stats();
            return Err(Error::StateLimit {
                core: self.setup.core,
                partitions: self.parts.len(),
                used: bytes,
                limit: self.state_limit,
                largest: format!(
                    "the largest, reading {} partition {}, holds {largest} bytes in memory ({} entries, {} bytes \
                     spilled to disk)",
                    p.topic(),
                    p.partition,
                    stats.state_entries,
                    stats.spilled_bytes
                ),
            });
        }
        Ok(())
    }

    /// Finishes the partitions whose input ended (bounded runs): a source
    /// partition once the source is exhausted, a repartition partition once
    /// every upstream partition said it ended. Their last results are
    /// written, and a stage writing to a repartition topic says the end
    /// downstream.
    fn end_inputs(&mut self) -> Result<(), Error> {
        // Records, bytes and dead letters written, mid-finish included.
        let mut written = (0u64, 0u64, 0u64);
        for stage in &mut self.stages {
            for slot in stage.slots.clone() {
                let p = &mut self.parts[slot];
                let ended = match &p.exchange {
                    None => self.source_done,
                    Some(x) => x.ended(),
                };
                // Rows handed over in process since the batch ran are
                // processed first (by the next batch).
                if p.ended || !ended || p.has_pending() {
                    continue;
                }
                let from = p.upstream;
                p.finish(
                    &stage.encoder,
                    &mut stage.emitted,
                    &mut flush_to(&mut stage.sink, from, &mut written),
                    self.dead_letter.as_mut(),
                )?;
                let (r, b, rejected) = write(stage, p, self.dead_letter.as_mut())?;
                written = (written.0 + r, written.1 + b, written.2 + rejected);
                if let StageSink::Exchange(x) = &mut stage.sink {
                    x.mark(Frame::Watermark { from: p.upstream, at: END })?;
                }
            }
            hand_over(stage, &mut self.parts, self.dead_letter.as_mut())?;
        }
        let (records, bytes, rejected) = written;
        self.summary.dead_lettered += rejected;
        self.summary.records_out += records;
        self.setup.metrics.records_out.inc_by(records);
        self.setup.metrics.bytes_out.inc_by(bytes);
        Ok(())
    }

    /// Tells downstream partitions which of this core's partitions have had
    /// no input for `after`, so they stop holding the watermark back.
    fn mark_idle(&mut self, after: Duration) -> Result<(), Error> {
        for stage in &mut self.stages {
            let StageSink::Exchange(x) = &mut stage.sink else { continue };
            for p in &mut self.parts[stage.slots.clone()] {
                if !p.idle_sent && !p.ended && p.last_input.elapsed() >= after {
                    x.mark(Frame::Idle { from: p.upstream })?;
                    p.idle_sent = true;
                    tracing::info!(partition = p.partition, idle_for = ?after, "partition idle: it no longer holds back the watermark after the shuffle");
                }
            }
            hand_over(stage, &mut self.parts, self.dead_letter.as_mut())?;
        }
        Ok(())
    }

    /// Makes everything processed so far durable: wait for every output to
    /// acknowledge every result, save changed state, then commit offsets
    /// (with a pointer to that state). A crash before the commit replays
    /// from the previous checkpoint: nothing lost, results possibly
    /// repeated (and rows repeated on a repartition topic are recognised
    /// and dropped by the partition that reads them).
    fn checkpoint(&mut self) -> Result<(), Error> {
        let result = self.try_checkpoint();
        if result.is_err() {
            // The core restarts from its last checkpoint; the count is what
            // dashboards and alerts see of it.
            self.setup.metrics.checkpoint_failures.inc();
        }
        result
    }

    fn try_checkpoint(&mut self) -> Result<(), Error> {
        let started = Instant::now();
        // What was handed over in process after the batch ran (markers, a
        // bounded run's last rows) is in no state yet, but its upstream's
        // offsets are about to be committed.
        if self.parts.iter().any(PartitionPipeline::has_pending) {
            self.process_batch()?;
        }
        for stage in &mut self.stages {
            stage.sink.flush()?;
        }
        self.dead_letter.flush()?;
        for (slots, store) in &mut self.stores {
            let mut snapshots = Vec::new();
            let mut members = Vec::new();
            for slot in slots.clone() {
                let group = &self.companions[slot];
                if !self.parts[slot].dirty && !group.iter().any(|&c| self.parts[c].dirty) {
                    continue;
                }
                snapshots.push(snapshot_group(&mut self.parts, slot, group)?);
                members.push(group_members(slot, group).collect::<Vec<_>>());
            }
            if snapshots.is_empty() {
                continue;
            }
            let parts = &self.parts;
            let mut page = |i: usize, (component, page): PageId| {
                let m = members[i].get(usize::from(component)).copied();
                let m = m.ok_or_else(|| Error::Internal(format!("a page of plan {component} of no partition")))?;
                parts[m].snapshot_page(page)
            };
            let (saved, bytes) = store.save(&snapshots, &mut page)?;
            self.setup.metrics.state_bytes_written.inc_by(u64::try_from(bytes).unwrap_or(u64::MAX));
            for (partition, metadata) in saved {
                if let Some(slot) = slots.clone().find(|&s| self.parts[s].partition == partition) {
                    for &c in &self.companions[slot] {
                        self.parts[c].metadata.clone_from(&metadata);
                        self.parts[c].dirty = false;
                        self.parts[c].saved_uncommitted = true;
                    }
                    self.parts[slot].metadata = metadata;
                    self.parts[slot].dirty = false;
                    self.parts[slot].saved_uncommitted = true;
                }
            }
        }
        super::commit_position::past_markers(&mut self.parts, self.source.as_mut());
        let refresh_every = Duration::from_millis(self.setup.config.worker.offset_refresh_millis);
        let refresh = self.last_refresh.elapsed() >= refresh_every;
        let mut positions: Vec<(usize, i64, String)> = self
            .parts
            .iter()
            .enumerate()
            .filter_map(|(slot, p)| {
                let next = super::commit_position::to_commit(
                    p.next_offset,
                    p.committed_offset,
                    refresh || p.saved_uncommitted,
                )?;
                Some((slot, next, p.metadata.clone()))
            })
            .collect();
        if refresh {
            self.last_refresh = Instant::now();
        }
        let committed = match &self.transaction {
            // Everything written since the last checkpoint, the state and
            // the offsets: visible together, or (on any error) never. A
            // transaction commits even with no offset to move: outputs
            // (watermark markers, idle frames) may be in it.
            Some(transaction) => {
                let (slot, slots) = self.setup.slot();
                for (_, _, metadata) in &mut positions {
                    *metadata = StateStore::with_owner(metadata, slots, slot);
                }
                let (offsets, group) = self.source.transactional_offsets(&positions).ok_or_else(|| {
                    Error::Internal("a transactional checkpoint over a source without offsets".into())
                })??;
                transaction.commit(&offsets, &group)?;
                true
            }
            None if positions.is_empty() => false,
            None => {
                self.source.commit(&positions)?;
                true
            }
        };
        if committed {
            for (slot, offset, _) in positions {
                self.parts[slot].committed_offset = Some(offset);
                self.parts[slot].saved_uncommitted = false;
            }
            self.setup.metrics.checkpoints.inc();
            self.setup.metrics.checkpoint_seconds.observe(started.elapsed().as_secs_f64());
        }
        self.purge();
        Ok(())
    }

    /// Deletes what this core's repartition partitions hold below their
    /// committed offsets: it is never read again (a restart resumes at the
    /// commit). At most every [`PURGE_EVERY`]; a failure is only logged
    /// (it costs disk, not correctness) and retried next time.
    fn purge(&mut self) {
        let Some((admin, last)) = &mut self.purge else { return };
        if last.elapsed() < PURGE_EVERY {
            return;
        }
        *last = Instant::now();
        let mut before = Vec::new();
        for ((input, slots), read) in self.setup.inputs.iter().zip(&self.input_slots).zip(&self.read) {
            // A topic two plans read is purged once (a request naming a
            // partition twice fails whole).
            if input.source.is_some() || !read {
                continue;
            }
            for p in &self.parts[slots.clone()] {
                if let Some(offset) = p.committed_offset {
                    before.push((input.topic.as_str(), p.partition, offset));
                }
            }
        }
        if let Err(e) = delete_records(admin, &before) {
            tracing::warn!(error = %e, "could not purge the repartition topic (retried at the next checkpoint)");
        }
    }
}

/// Writes what partition `p` of `stage` emitted to the stage's output; for
/// a repartition topic, followed by a marker if its watermark moved.
/// Returns the records and bytes written to the job's sink, and how many
/// results went to the dead-letter output instead (too large for it).
fn write(
    stage: &mut StageRun,
    p: &mut PartitionPipeline,
    dead: &mut dyn DeadLetterSink,
) -> Result<(u64, u64, u64), Error> {
    let written = send(&mut stage.sink, p.upstream, &stage.emitted, dead)?;
    stage.emitted.clear();
    if let StageSink::Exchange(x) = &mut stage.sink
        && let Some(w) = p.engine.output_watermark()
        && p.marked.is_none_or(|m| w > m)
    {
        x.mark(Frame::Watermark { from: p.upstream, at: w })?;
        p.marked = Some(w);
    }
    Ok(written)
}

/// Sets the first stage's output to keep the frames of the partitions
/// this core reads.
fn read_here(stages: &mut [StageRun], direct: &direct::Direct) {
    if let Some(stage) = stages.first_mut()
        && let StageSink::Exchange(x) = &mut stage.sink
    {
        x.read_here(&direct::partitions(&direct.here));
        stage.here.clone_from(&direct.here);
    }
}

/// Hands what `stage` wrote to exchange partitions of this core over to
/// their pipelines (see `super::direct`).
fn hand_over(
    stage: &mut StageRun,
    parts: &mut [PartitionPipeline],
    dead: &mut dyn DeadLetterSink,
) -> Result<(), Error> {
    let (StageSink::Exchange(x), false) = (&mut stage.sink, stage.here.is_empty()) else { return Ok(()) };
    direct::hand_over(x.as_mut(), &stage.here, parts, dead)
}

/// A partition's mid-batch flush ([`Flush`]): sends to its stage's sink
/// and adds what was written to `written` (records, bytes, dead letters).
fn flush_to<'a>(
    sink: &'a mut StageSink,
    from: u32,
    written: &'a mut (u64, u64, u64),
) -> impl FnMut(&mut Emitted, &mut dyn DeadLetterSink) -> Result<(), Error> + 'a {
    move |emitted, dead| {
        let (records, bytes, rejected) = send(sink, from, emitted, dead)?;
        *written = (written.0 + records, written.1 + bytes, written.2 + rejected);
        Ok(())
    }
}

/// Sends a partition's results (`from`: its number upstream of an
/// exchange) to its stage's sink: records and bytes written, records
/// dead-lettered instead.
fn send(
    sink: &mut StageSink,
    from: u32,
    emitted: &Emitted,
    dead: &mut dyn DeadLetterSink,
) -> Result<(u64, u64, u64), Error> {
    if emitted.rows.is_empty() {
        return Ok((0, 0, 0));
    }
    match sink {
        StageSink::Job(sink) => {
            let rejected = sink.send(&emitted.rows, &emitted.timestamps, dead)?;
            Ok((emitted.rows.len() as u64 - rejected, emitted.rows.values.len() as u64, rejected))
        }
        StageSink::Exchange(x) => {
            let rejected = x.send(from, &emitted.rows, &emitted.seqs, &emitted.timestamps, dead)?;
            Ok((0, 0, rejected))
        }
    }
}
