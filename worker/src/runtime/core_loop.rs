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

use super::direct;
use super::health::CoreStatus;
use super::partition::{BatchCounters, Emitted, PartitionPipeline};
use super::setup::CoreSetup;
use super::spill_store::SpillDb;
use super::state_group::{group_members, snapshot_group};
use super::state_pages::PageId;
use super::state_store::StateStore;
use super::summary::CoreSummary;
use crate::Error;
use crate::frame::{END, Frame};
use crate::kafka::delete_records;
use crate::sink::{CoreProducer, DeadLetterSink, ExchangeOutput, Sink};
use crate::source::{PollEnd, Source};
use sluice_formats::encode::RowEncoder;

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

mod start;

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
        (self.source_done || self.parts.iter().all(PartitionPipeline::reads_exchange))
            && self.parts.iter().all(PartitionPipeline::ended)
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
                let from = p.upstream();
                p.process(
                    &stage.encoder,
                    &mut stage.emitted,
                    &mut flush_to(&mut stage.sink, from, &mut written),
                    self.dead_letter.as_mut(),
                )?;
                let c = p.take_counters(started);
                if p.counts_input() {
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
            let stats = p.engine().stats();
            entries += stats.state_entries;
            bytes += stats.state_bytes;
            if stats.state_bytes > largest {
                (largest, largest_slot) = (stats.state_bytes, slot);
            }
            let Some(pm) = m.partitions.get(slot) else { continue };
            if let Some(lag) = self.source.offsets().and_then(|o| o.lag(slot)) {
                pm.consumer_lag.set(lag);
            }
            if let Some(next) = p.next_offset() {
                pm.position.set(next);
            }
            // A stage behind an exchange holds a watermark near i64::MIN
            // until every upstream partition has sent one: no lag to show.
            if let Some(lag) = p.engine().watermark().filter(|w| *w != END).and_then(|w| now.checked_sub(w)) {
                #[allow(clippy::cast_precision_loss)]
                pm.watermark_lag.set(lag as f64 / 1000.0);
            }
        }
        m.state_entries.set(i64::try_from(entries).unwrap_or(i64::MAX));
        m.state_bytes.set(i64::try_from(bytes).unwrap_or(i64::MAX));
        m.state_largest.set(i64::try_from(largest).unwrap_or(i64::MAX));
        if let Some(spill) = &self.spill {
            let spilled: u64 = self.parts.iter().map(|p| p.engine().stats().spilled_bytes).sum();
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
            let stats = p.engine().stats();
            return Err(Error::StateLimit {
                core: self.setup.core,
                partitions: self.parts.len(),
                used: bytes,
                limit: self.state_limit,
                largest: format!(
                    "the largest, reading {} partition {}, holds {largest} bytes in memory ({} entries, {} bytes \
                     spilled to disk)",
                    p.topic(),
                    p.partition(),
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
                // Rows handed over in process since the batch ran are
                // processed first (by the next batch).
                if p.ended() || !p.input_ended(self.source_done) || p.has_pending() {
                    continue;
                }
                let from = p.upstream();
                p.finish(
                    &stage.encoder,
                    &mut stage.emitted,
                    &mut flush_to(&mut stage.sink, from, &mut written),
                    self.dead_letter.as_mut(),
                )?;
                let (r, b, rejected) = write(stage, p, self.dead_letter.as_mut())?;
                written = (written.0 + r, written.1 + b, written.2 + rejected);
                if let StageSink::Exchange(x) = &mut stage.sink {
                    x.mark(Frame::Watermark { from: p.upstream(), at: END })?;
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
                if p.goes_idle(after) {
                    x.mark(Frame::Idle { from: p.upstream() })?;
                    tracing::info!(partition = p.partition(), idle_for = ?after, "partition idle: it no longer holds back the watermark after the shuffle");
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
                if !self.parts[slot].needs_saving() && !group.iter().any(|&c| self.parts[c].needs_saving()) {
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
                if let Some(slot) = slots.clone().find(|&s| self.parts[s].partition() == partition) {
                    for &c in self.companions[slot].iter().chain([&slot]) {
                        self.parts[c].saved(&metadata);
                    }
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
            .filter_map(|(slot, p)| p.to_commit(refresh).map(|(next, metadata)| (slot, next, metadata)))
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
                let group =
                    self.source.offsets().and_then(|o| o.transactional_offsets(&positions)).ok_or_else(|| {
                        Error::Internal("a transactional checkpoint over a source without offsets".into())
                    })??;
                transaction.commit(&group.offsets, &group.group)?;
                true
            }
            None if positions.is_empty() => false,
            None => {
                if let Some(offsets) = self.source.offsets_mut() {
                    offsets.commit(&positions)?;
                }
                true
            }
        };
        if committed {
            for (slot, offset, _) in positions {
                self.parts[slot].committed(offset);
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
                if let Some(offset) = p.committed_offset() {
                    before.push((input.topic.as_str(), p.partition(), offset));
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
    let written = send(&mut stage.sink, p.upstream(), &stage.emitted, dead)?;
    stage.emitted.clear();
    if let StageSink::Exchange(x) = &mut stage.sink
        && let Some(w) = p.watermark_to_mark()
    {
        x.mark(Frame::Watermark { from: p.upstream(), at: w })?;
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
