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
use sluice_crds::{Delivery, KeyFormat, SinkFormat, SourceSpec, StartFrom, WorkerConfig};

use super::health::{CoreStatus, Health};
use super::local_exchange::{ExchangeInputChannel, LocalEnds, LocalExchangeWriter, LocalStagedSource};
use super::partition::{BatchCounters, Emitted, PartitionPipeline};
use super::shared_source::SharedSource;
use super::state_pages::PageId;
use super::state_store::{Loaded, Snapshot, StateStore};
use crate::Error;
use crate::frame::{END, Frame};
use crate::kafka::{client_config, create_topic, delete_records};
use crate::metrics::CoreMetrics;
use crate::sink::{
    CoreProducer, DeadLetterSink, ExchangeOutput, ExchangeSink, FileDeadLetter, KafkaDeadLetter, KafkaSink, LineSink,
    LogDeadLetter, Sink, producer_config,
};
use crate::source::{CommittedPosition, Datagen, FileSource, KafkaSource, PollEnd, Source, TopicInput};
use sluice_engine::EngineOptions;
use sluice_formats::encode::{
    AvroEncoder, BinaryEncoder, DebeziumJsonEncoder, JsonEncoder, KeyWriter, RowEncoder, key_record_full_name,
    key_schema, record_full_name, writer_schema,
};
use sluice_plan::{Dataflow, OperatorPlan, StageOutput};

/// Everything a core needs to run its share of the job.
pub struct CoreSetup {
    pub core: usize,
    /// The worker's ordinal (its StatefulSet index).
    pub ordinal: i32,
    pub pin_to: Option<core_affinity::CoreId>,
    pub dataflow: Arc<Dataflow>,
    pub config: Arc<WorkerConfig>,
    /// What this core reads, in stage order: per stage, stage 0's source
    /// or the stage's repartition topic, then the sources of the branches
    /// beside it (`sluice_plan::Branch`).
    pub inputs: Vec<CoreInput>,
    /// How many partitions each repartition topic has.
    pub exchange_partitions: i32,
    pub bounded: bool,
    pub metrics: CoreMetrics,
    pub health: Arc<Health>,
    /// A local run of a query cut into stages: this core's ends of the
    /// in-process exchanges (taken by the one start; local runs do not
    /// restart).
    pub local_exchange: std::sync::Mutex<Option<LocalEnds>>,
    /// The job's Schema Registry (`spec.schemaRegistry`), shared by the
    /// worker's cores.
    pub registry: Option<Arc<crate::registry::Registry>>,
}

/// One topic a core reads some partitions of.
#[derive(Debug, Clone)]
pub struct CoreInput {
    /// The stage whose engines process it.
    pub stage: usize,
    /// The plan its partitions run: a source's own (stage 0, branches) or
    /// the stage's.
    pub plan: Arc<sluice_plan::Plan>,
    /// The source it is; none for a repartition topic.
    pub source: Option<SourceSpec>,
    pub topic: String,
    /// This core's partitions of it.
    pub partitions: Vec<i32>,
    /// How many partitions the topic has.
    pub total: i32,
    /// Its partition `p` is upstream partition `upstream_offset + p` of the
    /// exchange its stage writes.
    pub upstream_offset: u32,
    /// For a repartition topic: how many upstream partitions write it.
    pub upstreams: Option<usize>,
}

impl CoreSetup {
    /// Whether the job commits offsets (its sources are Kafka topics).
    pub fn commits(&self) -> bool {
        self.inputs.iter().any(|i| i.source.as_ref().is_some_and(|s| s.kafka.is_some()))
    }

    /// This core's engine slot among the job's `workers × coresPerWorker`
    /// (see `sluice_crds::assign`), and how many there are.
    pub(crate) fn slot(&self) -> (u32, u32) {
        let spec = &self.config.spec;
        let (workers, cores) = (spec.workers.max(1), spec.cores_per_worker.max(1));
        let slot = i32::try_from(self.core).unwrap_or(0) * workers + self.ordinal;
        (u32::try_from(slot).unwrap_or(0), u32::try_from(workers * cores).unwrap_or(1))
    }

    /// The transactional id (exactly once, or at least once with a
    /// stateful stage before a repartition topic) of engine slot `slot` of a
    /// generation of `slots` slots. A fixed set per job and scale: a restart
    /// reuses its id (and so fences what it left running), and ids never
    /// accumulate.
    fn transactional_id(&self, slot: u32, slots: u32) -> String {
        format!("{}.tx-{slots}-{slot}", self.config.consumer_group())
    }

    /// Where input `i`'s state is checkpointed: the job's state topic for
    /// stage 0's source, one per later stage's repartition topic, one per
    /// branch source that keeps state (a windowed side of a join).
    fn state_topic(&self, i: usize) -> String {
        let input = &self.inputs[i];
        if input.source.is_none() || i == 0 {
            return self.config.stage_state_topic(input.stage);
        }
        let branch = self.inputs[..i].iter().filter(|x| x.source.is_some()).count();
        format!("{}-branch-{branch}", self.config.state_topic())
    }
}

/// What a core did, for the end-of-run summary.
#[derive(Debug, Default, Clone, Copy)]
pub struct CoreSummary {
    pub records_in: u64,
    pub records_out: u64,
    pub dead_lettered: u64,
    pub late: u64,
    /// The most state the core held after any batch (`Engine::stats`).
    pub peak_state_bytes: u64,
}

impl CoreSummary {
    /// Adds another core's (peaks add up: an upper bound on the job's).
    pub fn add(&mut self, o: &CoreSummary) {
        self.records_in += o.records_in;
        self.records_out += o.records_out;
        self.dead_lettered += o.dead_lettered;
        self.late += o.late;
        self.peak_state_bytes += o.peak_state_bytes;
    }
}

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
}

/// How often a repartition topic is purged below the committed offsets
/// (Kafka Streams' `repartition.purge.interval.ms` default).
const PURGE_EVERY: Duration = Duration::from_secs(30);

/// Runs one core until its source is exhausted (bounded) or shutdown.
pub fn run_core(setup: &CoreSetup) -> Result<CoreSummary, Error> {
    if let Some(id) = setup.pin_to
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
        let mut parts = Vec::new();
        let mut slots: Vec<Range<usize>> = stages.iter().map(|_| 0..0).collect();
        // Per input, its slots.
        let mut input_slots = Vec::with_capacity(setup.inputs.len());
        for input in &setup.inputs {
            let topic: Arc<str> = input.topic.as_str().into();
            let first = parts.len();
            if slots[input.stage].is_empty() {
                slots[input.stage] = parts.len()..parts.len();
            }
            // An exchange's rows are the previous stage's outputs, in order.
            let writer: Vec<String> = input
                .stage
                .checked_sub(1)
                .map(|s| stages[s].plan.outputs.iter().map(|o| o.name.clone()).collect())
                .unwrap_or_default();
            for &p in &input.partitions {
                let options = EngineOptions {
                    emit_changes: engine.emit_changes,
                    late_records: engine.late_records,
                    state_limit_bytes: state_limit,
                    partition: p,
                };
                let feed = input.upstreams.map(|n| (n, writer.as_slice()));
                let mut part = PartitionPipeline::new(&input.plan, Arc::clone(&topic), p, options, capacity, feed);
                part.framed = stages.len() > 1;
                part.tombstones = input.source.as_ref().and_then(super::tombstone::Tombstones::of);
                if let Some(source) = &input.source {
                    part.read_format(source, setup.registry.as_ref())?;
                }
                part.upstream = input.upstream_offset + u32::try_from(p).unwrap_or(0);
                parts.push(part);
            }
            slots[input.stage].end = parts.len();
            input_slots.push(first..parts.len());
        }
        let multi_stage = setup.dataflow.has_exchange();
        let (read, readers) = shared_reads(setup, &input_slots)?;
        // Per slot, the exchange-fed plans that read its input after it:
        // checkpointed with it, as the one commit of that input carries
        // one state pointer.
        let mut companions: Vec<Vec<usize>> = vec![Vec::new(); parts.len()];
        for of in readers.iter().flatten() {
            for &slot in of.iter().skip(1) {
                parts[slot].input_counted_elsewhere = true;
            }
            if let Some((&first, rest)) = of.split_first() {
                companions[first] = rest.iter().copied().filter(|&c| parts[c].exchange.is_some()).collect();
            }
        }
        let mut stores = Vec::new();
        let mut exchange_client = None;
        let mut transaction = None;
        // The job's results and dead letters go through the transaction
        // only exactly once; at least once it holds internal writes only.
        let exactly_once = spec.delivery == Delivery::ExactlyOnce;
        let kafka = setup.inputs.iter().find_map(|i| i.source.as_ref().and_then(|s| s.kafka.as_ref()));
        let (source, positions): (Box<dyn Source>, Vec<CommittedPosition>) = match kafka {
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
                    open_repartition_topic(&client, &config.repartition_topic(s), setup.exchange_partitions)?;
                }
                for (i, input) in setup.inputs.iter().enumerate() {
                    // A plan fed by an exchange that writes one keeps its
                    // upstream positions and its output count even when
                    // its operator keeps nothing: a replay after a restart
                    // must number its rows as before, or the next stage
                    // would take them for ones it already had. Such a plan
                    // reading what another reads first is checkpointed
                    // with that one (`companions`): one commit carries one
                    // state pointer.
                    let stateful = !matches!(input.plan.operator, OperatorPlan::Stateless);
                    let numbers_rows = input.source.is_none()
                        && read[i]
                        && stages.get(input.stage).is_some_and(|s| s.output == StageOutput::Exchange);
                    if stateful || numbers_rows {
                        let store = StateStore::open(
                            &client,
                            transaction.clone(),
                            &setup.state_topic(i),
                            &input.topic,
                            input.total,
                            setup.health.drain.clone(),
                        )?;
                        stores.push((input_slots[i].clone(), store));
                    }
                }
                let inputs: Vec<TopicInput> = setup
                    .inputs
                    .iter()
                    .zip(&read)
                    .filter(|(_, read)| **read)
                    .map(|(i, _)| TopicInput {
                        topic: i.topic.clone(),
                        partitions: i.partitions.clone(),
                        topic_partitions: i.total,
                        // A repartition topic is read from its start:
                        // everything on it was written for this job.
                        start_from: i
                            .source
                            .as_ref()
                            .and_then(|s| s.kafka.as_ref())
                            .map_or(StartFrom::Earliest, |k| k.start_from),
                        bounded: setup.bounded && i.source.is_some(),
                    })
                    .collect();
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
                restore_group(&mut parts, slot, &companions[slot], &loaded)?;
                let seconds = started.elapsed().as_secs_f64();
                setup.metrics.state_restore_seconds.observe(seconds);
                tracing::info!(
                    slot, partition, bytes = loaded.bytes_read, pages = loaded.pages.as_ref().map(Vec::len),
                    seconds, offset = ?position.offset, "restored state"
                );
            }
        }
        let mut runs = Vec::with_capacity(stages.len());
        for ((s, stage), slots) in stages.iter().enumerate().zip(slots) {
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
            runs.push(StageRun { encoder, sink, slots, emitted: Emitted::default() });
        }
        let dead_letter: Box<dyn DeadLetterSink> = match &spec.dead_letter {
            Some(d) => match (&d.kafka, &d.file) {
                (Some(k), _) => {
                    let out = match transaction.as_ref().filter(|_| exactly_once) {
                        Some(t) => Arc::clone(t),
                        None => {
                            let config = client_config(k.connection(), secrets)?;
                            CoreProducer::new(&producer_config(config), &k.topic, None, setup.health.drain.clone())?
                        }
                    };
                    Box::new(KafkaDeadLetter::new(out, &k.topic, &setup.config.job.name, setup.slot().0)?)
                }
                (None, Some(f)) => Box::new(FileDeadLetter::open(&f.path)?),
                _ => Box::new(LogDeadLetter::default()),
            },
            None => Box::new(LogDeadLetter::default()),
        };
        let purge = match &exchange_client {
            Some(client) if multi_stage => {
                let admin = client.create().map_err(|e| Error::kafka("create admin client", e))?;
                Some((admin, Instant::now()))
            }
            _ => None,
        };
        Ok(Self {
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
        })
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
                let (from, sink, flushed) = (p.upstream, &mut stage.sink, &mut written);
                let mut flush = |emitted: &mut Emitted, dead: &mut dyn DeadLetterSink| {
                    let (records, bytes, rejected) = send(sink, from, emitted, dead)?;
                    *flushed = (flushed.0 + records, flushed.1 + bytes, flushed.2 + rejected);
                    Ok(())
                };
                p.process(&stage.encoder, &mut stage.emitted, &mut flush, self.dead_letter.as_mut())?;
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
        let (mut entries, mut bytes, mut largest) = (0usize, 0usize, 0usize);
        for (slot, p) in self.parts.iter().enumerate() {
            let stats = p.engine.stats();
            entries += stats.state_entries;
            bytes += stats.state_bytes;
            largest = largest.max(stats.state_bytes);
            let Some(pm) = m.partitions.get(slot) else { continue };
            if let Some(lag) = self.source.lag(slot) {
                pm.consumer_lag.set(lag);
            }
            if let Some(next) = p.next_offset {
                pm.position.set(next);
            }
            if let Some(w) = p.engine.watermark().filter(|w| *w != END) {
                #[allow(clippy::cast_precision_loss)]
                pm.watermark_lag.set((now - w) as f64 / 1000.0);
            }
        }
        m.state_entries.set(i64::try_from(entries).unwrap_or(i64::MAX));
        m.state_bytes.set(i64::try_from(bytes).unwrap_or(i64::MAX));
        m.state_largest.set(i64::try_from(largest).unwrap_or(i64::MAX));
        self.summary.records_in += input.records;
        self.summary.records_out += out_records;
        self.summary.dead_lettered += totals.malformed;
        self.summary.late += totals.late;
        self.summary.peak_state_bytes = self.summary.peak_state_bytes.max(bytes as u64);
        // One bound for the core's partitions together: the pod's memory is
        // sized per core from it (each engine also stops at it alone).
        if bytes > self.state_limit {
            return Err(Error::StateLimit {
                core: self.setup.core,
                partitions: self.parts.len(),
                used: bytes,
                limit: self.state_limit,
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
        let (mut records, mut bytes) = (0, 0);
        for stage in &mut self.stages {
            for slot in stage.slots.clone() {
                let p = &mut self.parts[slot];
                let ended = match &p.exchange {
                    None => self.source_done,
                    Some(x) => x.ended(),
                };
                if p.ended || !ended {
                    continue;
                }
                p.finish(&stage.encoder, &mut stage.emitted)?;
                let (r, b, rejected) = write(stage, p, self.dead_letter.as_mut())?;
                self.summary.dead_lettered += rejected;
                records += r;
                bytes += b;
                if let StageSink::Exchange(x) = &mut stage.sink {
                    x.mark(Frame::Watermark { from: p.upstream, at: END })?;
                }
            }
        }
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
                    }
                    self.parts[slot].metadata = metadata;
                    self.parts[slot].dirty = false;
                }
            }
        }
        let refresh_every = Duration::from_millis(self.setup.config.worker.offset_refresh_millis);
        let refresh = self.last_refresh.elapsed() >= refresh_every;
        let mut positions: Vec<(usize, i64, String)> = self
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

/// How the job's results are written: JSON, Debezium events, or Avro under the writer
/// schema registered for the sink topic (`<topic>-value`, Confluent's
/// TopicNameStrategy) when the core starts; their keys as JSON objects,
/// or Avro records under `<topic>-key` (`sink.keyFormat: avro`).
fn sink_encoder(
    setup: &CoreSetup,
    plan: &sluice_plan::Plan,
    names: &[String],
    keys: &[String],
) -> Result<RowEncoder, Error> {
    let spec = &setup.config.spec;
    let encoder = sink_value_encoder(setup, plan, names, keys)?;
    if spec.sink.key_format != Some(KeyFormat::Avro) || keys.is_empty() {
        return Ok(encoder);
    }
    let (Some(registry), Some(kafka)) = (&setup.registry, &spec.sink.kafka) else {
        return Err(Error::Config("a sink with keyFormat avro needs a Kafka topic and spec.schemaRegistry".into()));
    };
    let columns: Vec<(String, sluice_plan::DataType)> =
        plan.keys.iter().map(|o| (o.name.clone(), o.expr.data_type())).collect();
    let schema = key_schema(&setup.config.job.name, &columns)
        .map_err(|e| Error::Config(format!("spec.sink.keyFormat avro: {e}")))?;
    let strategy = spec.schema_registry.as_ref().map(|r| r.subject_name_strategy).unwrap_or_default();
    let subject = strategy.key_subject(&kafka.topic, &key_record_full_name(&setup.config.job.name));
    let id = registry.register(&subject, &schema)?;
    let types: Vec<sluice_plan::DataType> = columns.iter().map(|c| c.1).collect();
    Ok(encoder.with_keys(KeyWriter::avro(id, &types)))
}

/// The value half of [`sink_encoder`].
fn sink_value_encoder(
    setup: &CoreSetup,
    plan: &sluice_plan::Plan,
    names: &[String],
    keys: &[String],
) -> Result<RowEncoder, Error> {
    let spec = &setup.config.spec;
    match spec.sink.format {
        SinkFormat::Json => Ok(RowEncoder::Json(JsonEncoder::new(names, keys))),
        SinkFormat::DebeziumJson => Ok(RowEncoder::DebeziumJson(DebeziumJsonEncoder::new(names, keys))),
        SinkFormat::Avro => {
            let (Some(registry), Some(kafka)) = (&setup.registry, &spec.sink.kafka) else {
                return Err(Error::Config(
                    "a sink with format avro needs a Kafka topic and spec.schemaRegistry".into(),
                ));
            };
            let outputs: Vec<(String, sluice_plan::DataType)> =
                plan.outputs.iter().map(|o| (o.name.clone(), o.expr.data_type())).collect();
            let schema = writer_schema(&setup.config.job.name, &outputs)
                .map_err(|e| Error::Config(format!("spec.sink.format avro: {e}")))?;
            let strategy = spec.schema_registry.as_ref().map(|r| r.subject_name_strategy).unwrap_or_default();
            let subject = strategy.value_subject(&kafka.topic, &record_full_name(&setup.config.job.name));
            let id = registry.register(&subject, &schema)?;
            let types: Vec<sluice_plan::DataType> = outputs.iter().map(|o| o.1).collect();
            Ok(RowEncoder::Avro(AvroEncoder::new(id, &types, keys)))
        }
    }
}

/// Partition `slot`'s checkpoint, with those of the plans that read its
/// input beside it (`companions`): a plan fed by an exchange keeps its
/// upstream positions and output count even when its operator keeps
/// nothing, and the input's commit can point at one snapshot only.
/// Incremental when any of them is paged: their heads, and the pages that
/// changed (of pipeline 0, the partition's own, or 1 + its place among
/// the companions).
fn snapshot_group(parts: &mut [PartitionPipeline], slot: usize, companions: &[usize]) -> Result<Snapshot, Error> {
    let members = || group_members(slot, companions);
    let paged = members().any(|m| parts[m].paged());
    let heads = members()
        .map(|m| if paged { parts[m].snapshot_head() } else { parts[m].snapshot() })
        .collect::<Result<Vec<_>, _>>()?;
    let pages = if paged {
        let mut pages = Vec::new();
        for (component, m) in members().enumerate() {
            if parts[m].paged() {
                let component = u8::try_from(component)
                    .map_err(|_| Error::Internal("more than 255 plans read one partition".into()))?;
                pages.extend(parts[m].take_dirty_pages().into_iter().map(|page| (component, page)));
            }
        }
        Some(pages)
    } else {
        None
    };
    let p = &parts[slot];
    let mut heads = heads.into_iter();
    let own = heads.next().unwrap_or_default();
    let head = if companions.is_empty() {
        own
    } else {
        let others: Vec<Vec<u8>> = heads.collect();
        postcard::to_allocvec(&(own, others))
            .map_err(|e| Error::Checkpoint(format!("cannot serialise the state of partition {}: {e}", p.partition)))?
    };
    Ok(Snapshot { partition: p.partition, head, slot: StateStore::next_slot(&p.metadata), pages })
}

/// The slots checkpointed together with `slot`, itself first: the order
/// of the pipelines a checkpoint's pages number.
fn group_members(slot: usize, companions: &[usize]) -> impl Iterator<Item = usize> + '_ {
    std::iter::once(slot).chain(companions.iter().copied())
}

/// Restores [`snapshot_group`]'s checkpoint.
fn restore_group(
    parts: &mut [PartitionPipeline],
    slot: usize,
    companions: &[usize],
    loaded: &Loaded,
) -> Result<(), Error> {
    let head = loaded.pages.is_some();
    let partition = parts[slot].partition;
    if companions.is_empty() {
        parts[slot].restore(&loaded.head, head)?;
    } else {
        let (own, others): (Vec<u8>, Vec<Vec<u8>>) = postcard::from_bytes(&loaded.head)
            .map_err(|e| Error::Checkpoint(format!("cannot read the state of partition {partition}: {e}")))?;
        if others.len() != companions.len() {
            return Err(Error::Checkpoint(format!(
                "the state of partition {partition} is of {} plan(s) reading it, this query has {}",
                others.len() + 1,
                companions.len() + 1
            )));
        }
        parts[slot].restore(&own, head)?;
        for (&c, bytes) in companions.iter().zip(&others) {
            parts[c].restore(bytes, head)?;
        }
    }
    let Some(pages) = &loaded.pages else { return Ok(()) };
    let members: Vec<usize> = group_members(slot, companions).collect();
    for ((component, page), bytes) in pages {
        let m = members.get(usize::from(*component)).copied().ok_or_else(|| {
            Error::Checkpoint(format!(
                "the state of partition {partition} has pages of plan {component}, this query has {}",
                members.len()
            ))
        })?;
        parts[m].restore_page(*page, bytes)?;
    }
    for m in members {
        if parts[m].paged() {
            parts[m].pages_restored()?;
        }
    }
    Ok(())
}

/// Creates a repartition topic (or finds it) with the partition count the
/// job expects. Records are deleted by the purge, not by retention: one
/// expiring before the next stage read it would be lost.
fn open_repartition_topic(client: &rdkafka::ClientConfig, topic: &str, partitions: i32) -> Result<(), Error> {
    let laid_out = create_topic(client, topic, partitions, &[("cleanup.policy", "delete"), ("retention.ms", "-1")])?;
    if laid_out != partitions {
        return Err(Error::Config(format!(
            "repartition topic {topic} has {laid_out} partitions but this job needs {partitions} (the largest \
             source partition count, or spec.engine.repartitionPartitions, changed): rows of a key would reach \
             other partitions than its state. Nothing was consumed. Rename the job (a new consumer group and \
             internal topics) or delete its consumer group and internal topics to start over"
        )));
    }
    Ok(())
}

/// Per slot of what a core's source reads, the pipeline slots its records
/// go to (see `shared_source`).
type Readers = Vec<Vec<usize>>;

/// Which inputs the core's source reads (each source once: a later input
/// of a source an earlier one reads is not read again), and, if some
/// source is read by more than one input, per slot of what is read the
/// pipeline slots its records go to, the one that commits first: the
/// input whose plan keeps state (see `shared_source`).
fn shared_reads(setup: &CoreSetup, input_slots: &[Range<usize>]) -> Result<(Vec<bool>, Option<Readers>), Error> {
    let inputs = &setup.inputs;
    let first_reader: Vec<Option<usize>> = inputs
        .iter()
        .enumerate()
        .map(|(i, input)| match &input.source {
            Some(spec) => inputs[..i]
                .iter()
                .position(|o| o.source.as_ref().is_some_and(|s| s.name.eq_ignore_ascii_case(&spec.name))),
            // A branch reading the repartition topic its stage reads.
            None => inputs[..i].iter().position(|o| o.source.is_none() && o.topic == input.topic),
        })
        .collect();
    let read: Vec<bool> = first_reader.iter().map(Option::is_none).collect();
    if read.iter().all(|r| *r) {
        return Ok((read, None));
    }
    let mut readers = Vec::new();
    for (i, input) in inputs.iter().enumerate().filter(|(i, _)| read[*i]) {
        let mut group = vec![i];
        group.extend((i + 1..inputs.len()).filter(|&t| first_reader[t] == Some(i)));
        if let Some(t) = group.iter().find(|&&t| inputs[t].partitions != input.partitions) {
            return Err(Error::Internal(format!(
                "two plans read source {} but own different partitions of it ({:?}, {:?})",
                input.topic, input.partitions, inputs[*t].partitions
            )));
        }
        if let Some(k) = group.iter().position(|&g| !matches!(inputs[g].plan.operator, OperatorPlan::Stateless)) {
            group.swap(0, k);
        }
        for k in 0..input.partitions.len() {
            readers.push(group.iter().map(|&g| input_slots[g].start + k).collect());
        }
    }
    Ok((read, Some(readers)))
}

/// A source that is not a Kafka topic (a file, the generator), for its
/// partitions on this core.
fn local_source(spec: &SourceSpec, partitions: &[i32]) -> Result<Box<dyn Source>, Error> {
    match (&spec.file, &spec.datagen) {
        (Some(f), _) => Ok(Box::new(FileSource::open(&f.path)?)),
        (None, Some(d)) => Ok(Box::new(Datagen::new(
            d.scenario,
            spec.partition_key.clone(),
            u32::try_from(d.partitions).unwrap_or(1),
            partitions,
            d.records,
            d.rate_per_second,
        ))),
        _ => Err(Error::Config(format!("source {} has no kafka, file or datagen", spec.name))),
    }
}

/// Several local sources read as one (UNION ALL, or a join's sides): each
/// delivers its records as the slots from its offset on, and the whole is
/// exhausted when every one is.
///
/// Each poll starts at the next source in turn: a generator always has a
/// full poll's worth, so a fixed order would read nothing else until it
/// ended — never, unbounded — and a table beside it would stay empty. A
/// poll first takes what is ready without waiting, and waits (on one
/// source) only when nothing was: a rate-limited generator's wait for its
/// next record must not hold up a source with records ready.
struct LocalSources {
    sources: Vec<(Box<dyn Source>, usize)>,
    /// The sources that delivered everything they will: not polled again.
    done: Vec<bool>,
    /// The source the next poll starts at.
    next: usize,
}

impl LocalSources {
    fn new(sources: Vec<(Box<dyn Source>, usize)>) -> Self {
        Self { done: vec![false; sources.len()], sources, next: 0 }
    }
}

impl Source for LocalSources {
    fn poll(
        &mut self,
        max: usize,
        timeout: Duration,
        f: &mut crate::source::Deliver<'_>,
    ) -> Result<(usize, PollEnd), Error> {
        let count = self.sources.len();
        let first = self.next;
        self.next = (first + 1) % count.max(1);
        let mut n = 0;
        for wait in [Duration::ZERO, timeout] {
            let mut waited = false;
            for i in 0..count {
                let k = (first + i) % count;
                if self.done[k] {
                    continue;
                }
                let t = if n == 0 && !waited { wait } else { Duration::ZERO };
                waited |= !t.is_zero();
                let (source, offset) = &mut self.sources[k];
                let (got, end) =
                    source.poll(max - n, t, &mut |r| f(crate::source::Record { slot: r.slot + *offset, ..r }))?;
                n += got;
                self.done[k] = end == PollEnd::Exhausted;
                if n >= max {
                    return Ok((n, PollEnd::Open));
                }
            }
            if n > 0 || timeout.is_zero() {
                break;
            }
        }
        let open = self.done.iter().any(|done| !done);
        Ok((n, if open { PollEnd::Open } else { PollEnd::Exhausted }))
    }
}

/// What a core's transactional producer writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Writes {
    /// Exactly once: results, dead letters, exchanges, state and offsets.
    Everything,
    /// At least once, for a job whose stateful plan writes an exchange:
    /// exchanges, state and offsets (the results and dead letters go
    /// through producers of their own, flushed before each commit).
    Internal,
}

/// The core's transactional producer. Exactly once it writes with the
/// sink's client settings (validation puts every output on the sink's
/// cluster); at least once, with the source's, where the internal topics
/// are. Creating it fences any earlier producer of its id; then the
/// producers of the earlier generations that owned this core's partitions
/// (a rescale since) are fenced too, before anything is read.
fn transactional_producer(
    setup: &CoreSetup,
    client: &rdkafka::ClientConfig,
    writes: Writes,
) -> Result<Arc<CoreProducer>, Error> {
    let spec = &setup.config.spec;
    let (mut config, latency) = match writes {
        Writes::Everything => {
            let sink = spec.sink.kafka.as_ref().ok_or_else(|| {
                Error::Config("spec.delivery: ExactlyOnce needs a Kafka sink (spec.sink.kafka)".into())
            })?;
            let config = client_config(sink.connection(), &setup.config.worker.secrets_dir)?;
            (config, Some(Arc::clone(&setup.metrics.latency)))
        }
        Writes::Internal => (client.clone(), None),
    };
    // Results are visible at commit, so fuller batches cost no latency.
    crate::kafka::set_default(&mut config, "linger.ms", "5");
    let interval = u64::try_from(spec.engine.checkpoint_interval_millis).unwrap_or(1000);
    let timeout = (interval * 10).clamp(60_000, 900_000);
    crate::kafka::set_default(&mut config, "transaction.timeout.ms", &timeout.to_string());
    let (slot, slots) = setup.slot();
    let id = setup.transactional_id(slot, slots);
    config.set("transactional.id", &id);
    let producer = CoreProducer::new(&producer_config(config.clone()), &id, latency, setup.health.drain.clone())?;
    for (old_slots, old_slot) in earlier_owners(setup, client, slots)? {
        let old = setup.transactional_id(old_slot, old_slots);
        config.set("transactional.id", &old);
        // Initialising an id fences its producer; this one is dropped at once.
        CoreProducer::new(&producer_config(config.clone()), &old, None, setup.health.drain.clone())?;
        tracing::info!(core = setup.core, fenced = %old, "fenced the producer of an earlier owner of this core's partitions");
    }
    match writes {
        Writes::Everything => {
            tracing::info!(core = setup.core, transactional_id = %id, "exactly once: writing in one transaction per checkpoint");
        }
        Writes::Internal => tracing::info!(
            core = setup.core, transactional_id = %id,
            "at least once, with a stateful stage before a repartition topic: the repartition topics, state and \
             offsets are written in one transaction per checkpoint, so a replay is never seen twice downstream"
        ),
    }
    Ok(producer)
}

/// The engine slots of earlier scales (other `slots`) that owned this
/// core's partitions: those that committed them last, as their checkpoint
/// metadata says, and under every scale the operator says the job ran at
/// (`earlierSlots`: a scale that never committed is known only so) the slot
/// each partition went to.
fn earlier_owners(setup: &CoreSetup, client: &rdkafka::ClientConfig, slots: u32) -> Result<Vec<(u32, u32)>, Error> {
    let topics: Vec<(&str, &[i32])> = setup.inputs.iter().map(|i| (i.topic.as_str(), &i.partitions[..])).collect();
    let committed = crate::kafka::committed(client, &setup.config.consumer_group(), &topics)?;
    let mut owners: Vec<(u32, u32)> =
        committed.iter().filter_map(|metadata| super::state_store::owner(metadata)).collect();
    for earlier in setup.config.earlier_slots.iter().filter_map(|s| u32::try_from(*s).ok()).filter(|s| *s > 0) {
        for (_, partitions) in &topics {
            owners.extend(partitions.iter().filter_map(|p| u32::try_from(*p).ok()).map(|p| (earlier, p % earlier)));
        }
    }
    owners.retain(|(s, _)| *s != slots);
    owners.sort_unstable();
    owners.dedup();
    Ok(owners)
}

/// The job's sink for this core: exactly once, through the transaction.
fn job_sink(setup: &CoreSetup, transaction: Option<&Arc<CoreProducer>>) -> Result<Box<dyn Sink>, Error> {
    let spec = &setup.config.spec;
    let secrets = &setup.config.worker.secrets_dir;
    Ok(match (&spec.sink.kafka, &spec.sink.file, spec.sink.stdout) {
        (Some(k), _, _) => {
            let out = match transaction {
                Some(t) => Arc::clone(t),
                None => {
                    let config = client_config(k.connection(), secrets)?;
                    let latency = Some(Arc::clone(&setup.metrics.latency));
                    CoreProducer::new(&producer_config(config), &k.topic, latency, setup.health.drain.clone())?
                }
            };
            Box::new(KafkaSink::new(out, &k.topic)?)
        }
        (None, Some(f), _) => Box::new(LineSink::file(&f.path)?),
        (None, None, Some(true)) => Box::new(LineSink::stdout()),
        _ => return Err(Error::Config("spec.sink needs kafka, file or stdout".into())),
    })
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
    use super::{LocalSources, to_commit};
    use crate::error::Error;
    use crate::source::{Deliver, PollEnd, Record, Source};
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Duration;

    /// A source with `left` records (`None`: without end), delivered as
    /// fast as asked for.
    struct Counted {
        left: Option<usize>,
        offset: i64,
    }

    impl Source for Counted {
        fn poll(&mut self, max: usize, _: Duration, f: &mut Deliver<'_>) -> Result<(usize, PollEnd), Error> {
            let n = self.left.map_or(max, |left| left.min(max));
            for _ in 0..n {
                f(Record { slot: 0, offset: self.offset, timestamp_ms: 0, payload: b"{}", key: None, headers: None });
                self.offset += 1;
            }
            self.left = self.left.map(|left| left - n);
            Ok((n, if self.left == Some(0) { PollEnd::Exhausted } else { PollEnd::Open }))
        }
    }

    /// Counts the polls that would wait, and every poll; has no records.
    struct Waiting {
        waits: Arc<AtomicUsize>,
    }

    impl Source for Waiting {
        fn poll(&mut self, _: usize, timeout: Duration, _: &mut Deliver<'_>) -> Result<(usize, PollEnd), Error> {
            if !timeout.is_zero() {
                self.waits.fetch_add(1, Ordering::Relaxed);
            }
            Ok((0, PollEnd::Open))
        }
    }

    /// A source that would wait (a rate-limited generator) does not when
    /// another has records ready; once that one is exhausted it is not
    /// polled again, and the poll waits, on one source.
    #[test]
    fn local_sources_wait_only_when_nothing_is_ready_and_skip_exhausted_ones() {
        let waits = Arc::new(AtomicUsize::new(0));
        let waiting = Box::new(Waiting { waits: Arc::clone(&waits) }) as Box<dyn Source>;
        let ready = Box::new(Counted { left: Some(10), offset: 0 }) as Box<dyn Source>;
        let mut sources = LocalSources::new(vec![(waiting, 0), (ready, 1)]);
        let mut got = 0;
        let (n, end) = sources
            .poll(100, Duration::from_millis(5), &mut |_| {
                got += 1;
                1
            })
            .unwrap();
        assert_eq!((n, end, waits.load(Ordering::Relaxed)), (10, PollEnd::Open, 0), "records were ready: no wait");
        for poll in 1..=3 {
            let (n, end) = sources.poll(100, Duration::from_millis(5), &mut |_| 1).unwrap();
            assert_eq!((n, end), (0, PollEnd::Open));
            assert_eq!(waits.load(Ordering::Relaxed), poll, "one wait per empty poll");
        }
        assert_eq!(got, 10);
        assert_eq!(sources.done, [false, true]);
    }

    /// A generator without end beside a small table: the table's records
    /// come in the second poll, not after the generator (never).
    #[test]
    fn local_sources_take_turns_so_an_endless_one_starves_none() {
        let endless = Box::new(Counted { left: None, offset: 0 }) as Box<dyn Source>;
        let table = Box::new(Counted { left: Some(10), offset: 0 }) as Box<dyn Source>;
        let mut sources = LocalSources::new(vec![(endless, 0), (table, 4)]);
        let mut slots = Vec::new();
        for _ in 0..3 {
            let (n, end) = sources
                .poll(100, Duration::ZERO, &mut |r| {
                    slots.push(r.slot);
                    1
                })
                .unwrap();
            assert_eq!((n, end), (100, PollEnd::Open));
        }
        assert_eq!(slots.iter().filter(|&&s| s == 4).count(), 10, "every table record, in slot 4");
        assert_eq!(slots[100..110], [4; 10], "the second poll starts at the table");
    }

    #[test]
    fn idle_partitions_are_committed_again_when_a_refresh_is_due() {
        assert_eq!(to_commit(Some(10), Some(5), false), Some(10), "moved");
        assert_eq!(to_commit(Some(10), Some(10), false), None, "idle, no refresh due");
        assert_eq!(to_commit(Some(10), Some(10), true), Some(10), "idle, refreshed");
        assert_eq!(to_commit(None, None, true), None, "nothing consumed and nothing committed");
    }
}
