//! How a core starts, in phases: its partitions' pipelines; its source,
//! opened per mode (a Kafka consumer with its state stores and
//! transaction, a preview's consumers of the source topics only, or local
//! sources), shared where two plans read one topic and fed by in-process
//! exchanges where the stages have no topics; each partition restored
//! from its checkpoint; then the stages' outputs.

use std::ops::Range;
use std::sync::Arc;
use std::sync::mpsc::Sender;
use std::time::Instant;

use rdkafka::ClientConfig;
use sluice_crds::{Delivery, KafkaConnection};
use sluice_engine::EngineOptions;
use sluice_formats::encode::{BinaryEncoder, RowEncoder};
use sluice_plan::StageOutput;

use super::{Core, StageRun, StageSink};
use crate::Error;
use crate::kafka::client_config;
use crate::runtime::direct;
use crate::runtime::local_exchange::{Backlog, Chunk, ExchangeInputChannel, LocalExchangeWriter, LocalStagedSource};
use crate::runtime::outputs::{Writes, dead_letter, job_sink, sink_encoder, transactional_producer};
use crate::runtime::partition::{Emitted, PartitionPipeline};
use crate::runtime::setup::CoreSetup;
use crate::runtime::shared_source::SharedSource;
use crate::runtime::state_group::restore_group;
use crate::runtime::state_store::StateStore;
use crate::runtime::summary::CoreSummary;
use crate::runtime::topology::{Layout, Readers, topic_inputs};
use crate::sink::{CoreProducer, ExchangeSink, producer_config};
use crate::source::{CommittedPosition, KafkaSource, LocalSources, Source, local_source};

/// A core's source as opened, with what opening it set up.
struct Opened {
    source: Box<dyn Source>,
    /// Where each slot resumes (committed offsets; none for local sources).
    positions: Vec<CommittedPosition>,
    /// Per checkpointed input, its slots and their state store.
    stores: Vec<(Range<usize>, StateStore)>,
    /// The transactional producer of each checkpoint, if any.
    transaction: Option<Arc<CoreProducer>>,
    /// The cluster's client, for the stages' exchanges (none in a preview
    /// or a local run: their stages exchange in process).
    client: Option<ClientConfig>,
}

impl<'a> Core<'a> {
    pub(super) fn start(setup: &'a CoreSetup) -> Result<Self, Error> {
        let spec = &setup.config.spec;
        let state_limit =
            usize::try_from(spec.engine.state_memory_limit_bytes().map_err(|e| Error::Config(e.to_string()))?)
                .unwrap_or(usize::MAX);
        setup.metrics.state_limit.set(i64::try_from(state_limit).unwrap_or(i64::MAX));
        let layout = Layout::new(&setup.inputs, &setup.dataflow)?;
        let mut parts = pipelines(setup, &layout, state_limit)?;
        let spill = crate::runtime::spill_store::attach(setup, &mut parts, state_limit)?;
        let exactly_once = spec.delivery == Delivery::ExactlyOnce;
        let kafka = setup.inputs.iter().find_map(|i| i.source.as_ref().and_then(|s| s.kafka.as_ref()));
        let opened = match kafka {
            Some(k) if setup.preview.is_some() => open_preview(setup, &layout.read, k.connection())?,
            Some(k) => open_kafka(setup, &layout, k.connection(), exactly_once)?,
            None => open_local(setup, &layout.read)?,
        };
        let Opened { source, positions, mut stores, transaction, client } = opened;
        let shared = layout.readers.is_some();
        let (source, positions) = share(source, positions, layout.readers, parts.len())?;
        let multi_stage = setup.dataflow.has_exchange();
        let (source, local) = match (&client, multi_stage) {
            (None, true) => {
                let (source, outputs) = exchange_in_process(setup, &layout.input_slots, source)?;
                (source, Some(outputs))
            }
            _ => (source, None),
        };
        restore(setup, &mut parts, &positions, &mut stores, &layout.companions)?;
        let outputs = Outputs { client: client.as_ref(), transaction: transaction.as_ref(), exactly_once, local };
        let stages = stage_runs(setup, layout.stage_slots, outputs)?;
        // On a cluster, rows a core's partition writes to an exchange
        // partition the same core reads skip the broker (a preview's
        // exchanges are in process already; a topic two plans read is
        // shared by slot mappings the shortcut does not follow).
        let direct = match &client {
            Some(_) if multi_stage && !shared => direct::Direct::plan(
                &setup.inputs,
                &layout.input_slots,
                &setup.dataflow.stages,
                setup.exchange_partitions,
            ),
            _ => None,
        };
        let dead_letter = dead_letter(setup, transaction.as_ref().filter(|_| exactly_once))?;
        let purge = match &client {
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
            stages,
            dead_letter,
            parts,
            input_slots: layout.input_slots,
            stores,
            state_limit,
            companions: layout.companions,
            read: layout.read,
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
}

/// A pipeline per partition of each input, reading its source's format.
fn pipelines(setup: &CoreSetup, layout: &Layout, state_limit: usize) -> Result<Vec<PartitionPipeline>, Error> {
    let engine = &setup.config.spec.engine;
    let capacity = usize::try_from(engine.batch_max_records).unwrap_or(4096);
    let framed = setup.dataflow.stages.len() > 1;
    let mut parts = Vec::with_capacity(layout.counted_elsewhere.len());
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
            if let Some(source) = &input.source {
                part.read_format(source, setup.registry.as_ref())?;
            }
            let upstream = input.upstream_offset + u32::try_from(p).unwrap_or(0);
            part.place(upstream, framed, layout.counted_elsewhere[parts.len()]);
            parts.push(part);
        }
    }
    Ok(parts)
}

/// A preview reads the source topics only — one consumer per topic,
/// numbered into the core's slots as local sources are — and its stages
/// exchange in process: it opens no repartition topic, state topic or
/// transaction, and commits nothing.
fn open_preview(setup: &CoreSetup, read: &[bool], connection: KafkaConnection<'_>) -> Result<Opened, Error> {
    let config = &setup.config;
    let client = client_config(connection, &config.worker.secrets_dir)?;
    let mut sources = Vec::new();
    let mut base = 0;
    for (input, read) in setup.inputs.iter().zip(read) {
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
    let source = Box::new(LocalSources::new(sources));
    Ok(Opened { source, positions: Vec::new(), stores: Vec::new(), transaction: None, client: None })
}

/// On a cluster: the transaction (before the committed offsets are read,
/// so that no producer of an earlier owner of these partitions can commit
/// after that), the repartition topics, the state stores, then the
/// consumer of every topic the core reads and where each slot resumes.
fn open_kafka(
    setup: &CoreSetup,
    layout: &Layout,
    connection: KafkaConnection<'_>,
    exactly_once: bool,
) -> Result<Opened, Error> {
    let config = &setup.config;
    let spec = &config.spec;
    let client = client_config(connection, &config.worker.secrets_dir)?;
    // The job's results and dead letters go through the transaction only
    // exactly once; at least once it holds internal writes only.
    let transaction = if exactly_once {
        Some(transactional_producer(setup, &client, Writes::Everything)?)
    } else if setup.dataflow.has_stateful_exchange_writer() {
        if let Some(problem) = spec.internal_transaction_problem() {
            return Err(Error::Config(problem));
        }
        Some(transactional_producer(setup, &client, Writes::Internal)?)
    } else {
        None
    };
    for s in 1..setup.dataflow.stages.len() {
        crate::kafka::open_repartition_topic(&client, &config.repartition_topic(s), setup.exchange_partitions)?;
    }
    let (slot, slots) = setup.slot();
    // Half the volume (a store needs room to compact), shared by the
    // worker's cores and each one's state topics.
    let stores_per_core = layout.checkpointed.iter().filter(|c| **c).count().max(1);
    let shares = u64::from(spec.cores_per_worker.max(1).unsigned_abs())
        .saturating_mul(u64::try_from(stores_per_core).unwrap_or(1));
    let budget = config.worker.state_dir_bytes.map(|b| b / shares / 2);
    let mut stores = Vec::new();
    for (i, input) in setup.inputs.iter().enumerate().filter(|(i, _)| layout.checkpointed[*i]) {
        let topic = setup.state_topic(i);
        // One store per core, named by its engine slot: a restart with
        // the same layout owns the same partitions.
        let local = config
            .worker
            .state_dir
            .as_ref()
            .map(|dir| std::path::Path::new(dir).join(&topic).join(format!("engine-{slot}-of-{slots}")));
        let store = StateStore::open(
            &client,
            transaction.clone(),
            &topic,
            &input.topic,
            input.total,
            setup.health.drain.clone(),
            local.as_deref().map(|dir| (dir, budget, setup.cpus)),
        )?;
        stores.push((layout.input_slots[i].clone(), store));
    }
    let inputs = topic_inputs(&setup.inputs, &layout.read, setup.bounded);
    let mut consumer = client.clone();
    if transaction.is_some() {
        // librdkafka's default, made sure of: a user property must not
        // let a stage read what an upstream core may still abort.
        consumer.set("isolation.level", "read_committed");
    }
    let (source, positions) = KafkaSource::new(consumer, &config.consumer_group(), &inputs)?;
    Ok(Opened { source: Box::new(source), positions, stores, transaction, client: Some(client) })
}

/// Files and the generator: the sources of the inputs this core owns
/// partitions of.
fn open_local(setup: &CoreSetup, read: &[bool]) -> Result<Opened, Error> {
    let mut locals = Vec::new();
    let mut base = 0;
    for (input, read) in setup.inputs.iter().zip(read) {
        // A source this core owns no partition of is not read here: a
        // file (one partition) would be read by every core, into the next
        // input's slot.
        if !read || input.partitions.is_empty() {
            continue;
        }
        if let Some(spec) = &input.source {
            locals.push((local_source(spec, &input.partitions)?, base));
        }
        base += input.partitions.len();
    }
    let single = locals.len() == 1 && !setup.dataflow.has_exchange();
    let source = match locals.pop() {
        Some((only, 0)) if single => only,
        last => {
            locals.extend(last);
            Box::new(LocalSources::new(locals)) as Box<dyn Source>
        }
    };
    Ok(Opened { source, positions: Vec::new(), stores: Vec::new(), transaction: None, client: None })
}

/// A source more than one plan reads is read once for all of them; each
/// reader of a partition resumes where it was committed.
fn share(
    source: Box<dyn Source>,
    positions: Vec<CommittedPosition>,
    readers: Option<Readers>,
    slots: usize,
) -> Result<(Box<dyn Source>, Vec<CommittedPosition>), Error> {
    let Some(readers) = readers else { return Ok((source, positions)) };
    if positions.is_empty() {
        // A local source commits nothing: no positions to spread.
        return Ok((Box::new(SharedSource::new(source, readers)?), positions));
    }
    let mut by_slot = vec![CommittedPosition::default(); slots];
    for (position, of) in positions.iter().zip(&readers) {
        for &slot in of {
            by_slot[slot] = position.clone();
        }
    }
    Ok((Box::new(SharedSource::new(source, readers)?), by_slot))
}

/// The outputs of a local run's stages that exchange in process: per
/// stage, the sending ends, and the backlog they share.
type LocalOutputs = (Vec<Option<Vec<Sender<Chunk>>>>, Backlog);

/// A local run of a query cut into stages: the core's source fed, beside
/// its own records, by the in-process exchanges' records for every plan
/// that reads them.
fn exchange_in_process(
    setup: &CoreSetup,
    input_slots: &[Range<usize>],
    source: Box<dyn Source>,
) -> Result<(Box<dyn Source>, LocalOutputs), Error> {
    let ends = setup
        .local_exchange
        .lock()
        .ok()
        .and_then(|mut e| e.take())
        .ok_or_else(|| Error::Internal("a local run of a query cut into stages without its exchanges".into()))?;
    let mut inputs = Vec::new();
    for (s, receivers) in ends.inputs.into_iter().enumerate() {
        // Every plan reading the exchange (the stage's, and a branch's
        // beside it) gets each of its records.
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
    let backlog = Arc::clone(&ends.backlog);
    Ok((Box::new(LocalStagedSource::new(source, inputs, ends.backlog)), (ends.outputs, backlog)))
}

/// Resumes each partition from its checkpoint: its committed offset, and
/// its state from the store (the worker's volume, or the state topic).
fn restore(
    setup: &CoreSetup,
    parts: &mut [PartitionPipeline],
    positions: &[CommittedPosition],
    stores: &mut [(Range<usize>, StateStore)],
    companions: &[Vec<usize>],
) -> Result<(), Error> {
    for (part, position) in parts.iter_mut().zip(positions) {
        part.resume(position);
    }
    for (slot, position) in positions.iter().enumerate() {
        let partition = parts[slot].partition();
        let started = Instant::now();
        let Some((_, store)) = stores.iter_mut().find(|(r, _)| r.contains(&slot)) else { continue };
        let Some(loaded) = store.load(partition, &position.metadata)? else { continue };
        if let Err(e) = restore_group(parts, slot, &companions[slot], &loaded) {
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
    Ok(())
}

/// Where the stages' results can go.
struct Outputs<'o> {
    client: Option<&'o ClientConfig>,
    transaction: Option<&'o Arc<CoreProducer>>,
    exactly_once: bool,
    /// A local run's in-process exchanges.
    local: Option<LocalOutputs>,
}

/// Each stage's encoder and output: the job's sink for the last, the
/// next stage's exchange (a repartition topic, or in process) for the
/// others.
fn stage_runs(setup: &CoreSetup, stage_slots: Vec<Range<usize>>, mut out: Outputs<'_>) -> Result<Vec<StageRun>, Error> {
    let stages = &setup.dataflow.stages;
    let mut runs = Vec::with_capacity(stages.len());
    for ((s, stage), slots) in stages.iter().enumerate().zip(stage_slots) {
        let sink = match (stage.output, out.client) {
            (StageOutput::Sink, _) => StageSink::Job(job_sink(setup, out.transaction.filter(|_| out.exactly_once))?),
            (StageOutput::Exchange, Some(client)) => {
                let topic = setup.config.repartition_topic(s + 1);
                let producer = match out.transaction {
                    Some(t) => Arc::clone(t),
                    None => CoreProducer::new(
                        &producer_config(ExchangeSink::config(client.clone())),
                        &topic,
                        None,
                        setup.health.drain.clone(),
                    )?,
                };
                StageSink::Exchange(Box::new(ExchangeSink::new(producer, &topic, setup.exchange_partitions)?))
            }
            (StageOutput::Exchange, None) => {
                let local = out.local.as_mut().and_then(|(outputs, backlog)| {
                    outputs.get_mut(s).and_then(Option::take).map(|to| (to, Arc::clone(backlog)))
                });
                match local {
                    Some((to, backlog)) => StageSink::Exchange(Box::new(LocalExchangeWriter::new(to, backlog))),
                    None => return Err(Error::Internal(format!("no exchange for stage {s}'s output"))),
                }
            }
        };
        let names: Vec<String> = stage.plan.outputs.iter().map(|o| o.name.clone()).collect();
        let keys: Vec<String> = stage.plan.keys.iter().map(|o| o.name.clone()).collect();
        let encoder = match stage.output {
            StageOutput::Sink => sink_encoder(setup, &stage.plan, &names, &keys)?,
            StageOutput::Exchange => RowEncoder::Binary(BinaryEncoder),
        };
        runs.push(StageRun { encoder, sink, slots, emitted: Emitted::default(), here: Vec::new() });
    }
    Ok(runs)
}
