//! A Kafka consumer owned by one core, `assign()`ed to exactly that core's
//! partitions: no group rebalancing (ownership comes from the deterministic
//! assignment), no router thread. Its partitions' messages are read a batch
//! at a time from a queue of the core's own (`batch_queue.rs`); the
//! consumer's main queue, served without blocking on every poll, carries
//! only events (statistics for the lag metric, errors).
//!
//! Offsets are committed to the job's consumer group by the checkpoint,
//! with the checkpoint's metadata, only after every output derived from them
//! is acknowledged.

use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Duration;

use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer, ConsumerContext};
use rdkafka::error::KafkaError;
use rdkafka::message::Message;
use rdkafka::statistics::Statistics;
use rdkafka::types::RDKafkaErrorCode;
use rdkafka::{ClientConfig, ClientContext, Offset, TopicPartitionList};
use sluice_crds::StartFrom;

use super::batch_queue::{BatchConsumer, Fetched, MessageHeaders};
use super::offsets::{GroupOffsets, Offsets};
use super::{Deliver, PollEnd, Record, Source};
use crate::Error;

/// Consumer lag per slot, from librdkafka's periodic statistics.
pub struct LagContext {
    /// The topic and partition of each slot.
    slots: Vec<(String, i32)>,
    lag: Vec<AtomicI64>,
}

impl ClientContext for LagContext {
    fn error(&self, error: KafkaError, reason: &str) {
        super::log_client_error(&error, reason);
    }

    fn stats(&self, stats: Statistics) {
        for ((topic, p), lag) in self.slots.iter().zip(&self.lag) {
            if let Some(part) = stats.topics.get(topic).and_then(|t| t.partitions.get(p))
                && part.consumer_lag >= 0
            {
                lag.store(part.consumer_lag, Ordering::Relaxed);
            }
        }
    }
}

impl ConsumerContext for LagContext {}

/// Where a partition resumes: the committed offset and checkpoint metadata,
/// and the offset consumption starts at (the committed one, or the one
/// [`start_offset`] resolved for a partition with no commit).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CommittedPosition {
    pub offset: Option<i64>,
    pub metadata: String,
    pub start: i64,
}

/// Where a partition with no committed offset starts. `spec.startFrom`
/// applies only when the job has never committed on this topic: once it
/// has (`topic_started`), a partition without a commit is one added to the
/// topic since, and every record on it arrived while the job was running —
/// starting it at its end would silently skip them. The offset is resolved
/// here, not left to `auto.offset.reset`, so the first checkpoint commits it
/// and a later restart finds the job started even on a partition that has
/// had no traffic.
/// `by_time` is, for `startFrom: <time>`, the first offset whose record's
/// timestamp is at or after it (Kafka's offsets-for-times); `None` when no
/// record is, and then the partition starts at its end.
pub fn start_offset(start_from: StartFrom, topic_started: bool, low: i64, high: i64, by_time: Option<i64>) -> i64 {
    match (start_from, topic_started) {
        (StartFrom::Latest, false) => high,
        (StartFrom::Timestamp(_), false) => by_time.map_or(high, |o| o.clamp(low, high)),
        (StartFrom::Earliest, _) | (StartFrom::Latest | StartFrom::Timestamp(_), true) => low,
    }
}

/// The first offset of each of `partitions` of `topic` whose record's
/// timestamp is at or after `ms` (`None`: no such record yet).
fn offsets_for_time<C: ConsumerContext>(
    consumer: &BaseConsumer<C>,
    topic: &str,
    partitions: &[i32],
    ms: i64,
) -> Result<Vec<Option<i64>>, Error> {
    let mut tpl = TopicPartitionList::new();
    for &p in partitions {
        tpl.add_partition_offset(topic, p, Offset::Offset(ms)).map_err(|e| Error::kafka("offsets for a time", e))?;
    }
    let found = consumer
        .offsets_for_times(tpl, METADATA_TIMEOUT)
        .map_err(|e| Error::kafka(format!("offsets of {topic} for startFrom {}", StartFrom::Timestamp(ms)), e))?;
    Ok(partitions
        .iter()
        .map(|&p| match found.find_partition(topic, p).map(|e| e.offset()) {
            Some(Offset::Offset(o)) if o >= 0 => Some(o),
            _ => None,
        })
        .collect())
}

/// The consumer settings a core starts from; a source's `properties`
/// override any of them (the benchmarks use them as they are).
///
/// Prefetch enough to keep a core busy, not librdkafka's default of up to
/// 64 MB per partition (which dominates RSS on a backlog). And once a
/// partition's prefetch queue is full, librdkafka 2.x stops fetching it for
/// `fetch.queue.backoff.ms` — 1 s by default, which throttled a fast core to
/// one queue-full per second (measured: 33 K records/s instead of over
/// 1 M). A few milliseconds keeps it fed.
pub const CONSUMER_DEFAULTS: [(&str, &str); 5] = [
    ("statistics.interval.ms", "5000"),
    ("fetch.wait.max.ms", "100"),
    ("fetch.queue.backoff.ms", "2"),
    // librdkafka keeps ~300 bytes of bookkeeping per queued message: the
    // count limit, not the kilobytes, bounds memory. 5 000 per partition is
    // several milliseconds of work for a core (measured: 10 000 → 5 000 took
    // S1 on 2 cores from 80 MB to 74 MB peak RSS with no loss of throughput).
    ("queued.min.messages", "5000"),
    ("queued.max.messages.kbytes", "4096"),
];

/// Some partitions of one topic that a core reads.
#[derive(Debug, Clone)]
pub struct TopicInput {
    pub topic: String,
    pub partitions: Vec<i32>,
    /// How many partitions the topic has.
    pub topic_partitions: i32,
    pub start_from: StartFrom,
    /// A bounded run ends these partitions at the end offsets seen at start
    /// (a source topic); others (a repartition topic, which the job itself
    /// is still writing) end when the caller says.
    pub bounded: bool,
}

/// One consumer for all of a core's partitions, of one topic or several
/// (a source and the repartition topics of later stages): slots are
/// numbered through the inputs in order.
pub struct KafkaSource {
    consumer: BatchConsumer<LagContext>,
    /// The topic and partition of each slot.
    slots: Vec<(String, i32)>,
    /// The topics read, in input order.
    topics: Vec<String>,
    /// Per topic index: the slot of each partition.
    slot_of: Vec<Vec<Option<usize>>>,
    /// The high watermark captured at start, per slot of a bounded input.
    end_offsets: Vec<Option<i64>>,
    done: Vec<bool>,
    /// Slots held ([`Source::hold`]): their records are dropped.
    held: Vec<bool>,
}

impl std::fmt::Debug for KafkaSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KafkaSource").field("slots", &self.slots).finish()
    }
}

const METADATA_TIMEOUT: Duration = Duration::from_secs(15);

impl KafkaSource {
    /// Creates the consumer, reads the committed positions of every input's
    /// partitions in `group`, and assigns them: from the committed offset,
    /// or else as [`start_offset`] decides. For a bounded input the current
    /// end offsets are captured.
    pub fn new(
        mut config: ClientConfig,
        group: &str,
        inputs: &[TopicInput],
    ) -> Result<(Self, Vec<CommittedPosition>), Error> {
        // Start offsets are resolved explicitly below; the reset policy only
        // applies to a committed offset that retention has since deleted,
        // and then reading what is left beats skipping to the end.
        config
            .set("group.id", group)
            .set("enable.auto.commit", "false")
            .set("enable.auto.offset.store", "false")
            .set("enable.partition.eof", "false")
            .set("auto.offset.reset", "earliest");
        for (k, v) in CONSUMER_DEFAULTS {
            crate::kafka::set_default(&mut config, k, v);
        }
        let slots: Vec<(String, i32)> =
            inputs.iter().flat_map(|i| i.partitions.iter().map(|&p| (i.topic.clone(), p))).collect();
        let context = LagContext { lag: slots.iter().map(|_| AtomicI64::new(-1)).collect(), slots: slots.clone() };
        let names: Vec<&str> = inputs.iter().map(|i| i.topic.as_str()).collect();
        let servers = crate::kafka::servers(&config).to_owned();
        let consumer: BaseConsumer<LagContext> = config
            .create_with_context(context)
            .map_err(|e| Error::kafka(format!("create consumer for {}", names.join(", ")), e))?;
        let mut positions = Vec::with_capacity(slots.len());
        let mut assignment = TopicPartitionList::new();
        let mut done = Vec::with_capacity(slots.len());
        let mut end_offsets = Vec::with_capacity(slots.len());
        for input in inputs {
            let topic = input.topic.as_str();
            let all = input.topic_partitions.max(input.partitions.iter().copied().max().map_or(0, |p| p + 1));
            let mut tpl = TopicPartitionList::new();
            for p in 0..all {
                tpl.add_partition(topic, p);
            }
            let committed = consumer
                .committed_offsets(tpl, METADATA_TIMEOUT)
                .map_err(|e| Error::kafka(format!("committed offsets of group {group}"), e))?;
            let committed_offset = |p: i32| match committed.find_partition(topic, p).map(|e| e.offset()) {
                Some(Offset::Offset(o)) if o >= 0 => Some(o),
                _ => None,
            };
            let topic_started = (0..all).any(|p| committed_offset(p).is_some());
            let by_time = match input.start_from {
                StartFrom::Timestamp(ms) if !topic_started => {
                    offsets_for_time(&consumer, topic, &input.partitions, ms)?
                }
                _ => vec![None; input.partitions.len()],
            };
            for (&p, by_time) in input.partitions.iter().zip(by_time) {
                let offset = committed_offset(p);
                let metadata = match (offset, committed.find_partition(topic, p)) {
                    (Some(_), Some(e)) => e.metadata().to_owned(),
                    _ => String::new(),
                };
                let watermarks = if offset.is_none() || input.bounded {
                    Some(
                        consumer
                            .fetch_watermarks(topic, p, METADATA_TIMEOUT)
                            .map_err(|e| Error::kafka(format!("offsets of {topic}/{p}"), e))?,
                    )
                } else {
                    None
                };
                let start = match (offset, watermarks) {
                    (Some(o), _) => o,
                    (None, Some((low, high))) => {
                        let start = start_offset(input.start_from, topic_started, low, high, by_time);
                        if topic_started && input.start_from != StartFrom::Earliest {
                            tracing::info!(
                                topic,
                                partition = p,
                                offset = start,
                                "a partition added since the job started: reading it from its beginning"
                            );
                        }
                        start
                    }
                    (None, None) => 0,
                };
                let end = watermarks.filter(|_| input.bounded).map(|(_, high)| high);
                done.push(end.is_some_and(|high| start >= high));
                end_offsets.push(end);
                assignment
                    .add_partition_offset(topic, p, Offset::Offset(start))
                    .map_err(|e| Error::kafka("assignment", e))?;
                positions.push(CommittedPosition { offset, metadata, start });
            }
            // Learn the partition leaders before assigning: a partition
            // assigned with no known leader waits for librdkafka's
            // offset-query retry timer (measured: ~0.5 s before the first
            // fetch), so the core would report ready while not consuming.
            // This also names a missing topic.
            let metadata = consumer
                .fetch_metadata(Some(topic), METADATA_TIMEOUT)
                .map_err(|e| Error::kafka(format!("metadata of {topic} from {servers}"), e))?;
            if let Some(e) = metadata.topics().first().and_then(rdkafka::metadata::MetadataTopic::error) {
                return Err(Error::kafka(format!("topic {topic}"), RDKafkaErrorCode::from(e)));
            }
        }
        let forwards: Vec<(&str, &[i32])> = inputs.iter().map(|i| (i.topic.as_str(), &i.partitions[..])).collect();
        let consumer = BatchConsumer::new(consumer, &forwards)?;
        consumer.consumer().assign(&assignment).map_err(|e| Error::kafka(format!("assign {}", names.join(", ")), e))?;
        let mut slot_of = Vec::with_capacity(inputs.len());
        let mut next = 0;
        for input in inputs {
            let max = input.partitions.iter().copied().max().unwrap_or(0);
            let mut of = vec![None; usize::try_from(max).unwrap_or(0) + 1];
            for &p in &input.partitions {
                of[usize::try_from(p).unwrap_or(0)] = Some(next);
                next += 1;
            }
            slot_of.push(of);
        }
        let topics = names.iter().map(|t| (*t).to_owned()).collect();
        let held = vec![false; slots.len()];
        Ok((Self { consumer, slots, topics, slot_of, end_offsets, done, held }, positions))
    }

    /// Whether every bounded slot reached its end offset.
    fn exhausted(&self) -> bool {
        self.end_offsets.iter().any(Option::is_some)
            && self.end_offsets.iter().zip(&self.done).all(|(end, done)| end.is_none() || *done)
    }
}

impl KafkaSource {
    /// Hands one fetched message to `f` as a record of its slot, unless a
    /// bounded run already has everything up to its end offset; returns its
    /// weight (0 if not delivered).
    fn deliver(
        (slot_of, held): (&[Vec<Option<usize>>], &[bool]),
        (ends, done): (&[Option<i64>], &mut [bool]),
        m: Fetched<'_>,
        f: &mut Deliver<'_>,
    ) -> usize {
        let Some(slot) = slot_of
            .get(m.topic)
            .and_then(|of| usize::try_from(m.partition).ok().and_then(|p| of.get(p).copied().flatten()))
        else {
            return 0;
        };
        if held[slot] {
            return 0;
        }
        if let Some(end) = ends[slot] {
            if m.offset >= end {
                done[slot] = true;
                return 0;
            }
            if m.offset + 1 >= end {
                done[slot] = true;
            }
        }
        let timestamp_ms = m.timestamp_ms.unwrap_or_else(crate::clock::now_ms);
        f(Record { slot, offset: m.offset, timestamp_ms, payload: m.payload, key: m.key, headers: m.headers }).max(1)
    }

    /// Serves the main queue's events without blocking: statistics (the lag
    /// metric) and client errors. Fetched messages do not arrive here.
    fn serve_events(&mut self, f: &mut Deliver<'_>) -> Result<usize, Error> {
        let mut n = 0;
        while let Some(event) = self.consumer.consumer().poll(Duration::ZERO) {
            match event {
                Ok(m) => {
                    // Only possible if a message was fetched before the
                    // forward took effect; deliver it like any other.
                    let Some(topic) = self.topics.iter().position(|t| t == m.topic()) else { continue };
                    let headers = MessageHeaders::of_message(&m);
                    let fetched = Fetched {
                        topic,
                        partition: m.partition(),
                        offset: m.offset(),
                        timestamp_ms: m.timestamp().to_millis(),
                        payload: m.payload(),
                        key: m.key(),
                        headers: Some(&headers),
                    };
                    let bounds = (&self.end_offsets[..], &mut self.done[..]);
                    n += Self::deliver((&self.slot_of, &self.held), bounds, fetched, f);
                }
                Err(KafkaError::PartitionEOF(_)) => {}
                Err(e) => self.consumer_error(e.rdkafka_error_code(), &e)?,
            }
        }
        Ok(n)
    }

    /// librdkafka retries connections and fetches itself: only what is
    /// fatal stops the core.
    fn consumer_error(&self, code: Option<RDKafkaErrorCode>, e: &dyn std::fmt::Display) -> Result<(), Error> {
        if code.is_some_and(is_fatal) {
            return Err(Error::kafka(format!("consume {}", self.topics.join(", ")), e));
        }
        tracing::warn!(topics = ?self.topics, error = %e, "consumer error (will retry)");
        Ok(())
    }

    /// Messages from the batch queue until their weight reaches `want`,
    /// waiting at most `wait` for a full first batch. A batch is taken
    /// whole, so messages are asked for a few at a time: a weight is only
    /// known once its message is delivered (a repartition record packs up
    /// to `frame::PACK_MAX_ROWS` rows), and each batch may pass `want`
    /// by at most [`CONSUME_STEP`] messages.
    fn consume(&mut self, want: usize, wait: Duration, f: &mut Deliver<'_>) -> Result<usize, Error> {
        let (slot_of, held) = (&self.slot_of[..], &self.held[..]);
        let (ends, done) = (&self.end_offsets[..], &mut self.done[..]);
        let mut delivered = 0;
        let mut wait = wait;
        let mut error = None;
        while delivered < want {
            let mut fetched = 0;
            let step = (want - delivered).min(CONSUME_STEP);
            let result = self.consumer.consume(step, wait, &mut |m| {
                fetched += 1;
                delivered += Self::deliver((slot_of, held), (ends, &mut *done), m, f);
            });
            if let Err((_, code)) = result {
                error = Some(code);
                break;
            }
            if fetched < step {
                break;
            }
            wait = Duration::ZERO;
        }
        if let Some(code) = error {
            self.consumer_error(Some(code), &code)?;
        }
        Ok(delivered)
    }

    /// A bounded run is done with a partition once its position reaches the
    /// end offset, even when the last offsets held no record to see
    /// (transaction markers, compacted records).
    fn check_positions(&mut self) -> Result<(), Error> {
        if self.end_offsets.iter().zip(&self.done).all(|(end, done)| end.is_none() || *done) {
            return Ok(());
        }
        let positions = self.consumer.consumer().position().map_err(|e| Error::kafka("consumer position", e))?;
        for (slot, (topic, p)) in self.slots.iter().enumerate() {
            // A held slot's consumer reads on and drops what it reads:
            // its position says nothing of what was delivered.
            if self.held[slot] {
                continue;
            }
            if let (Some(end), Some(Offset::Offset(o))) =
                (self.end_offsets[slot], positions.find_partition(topic, *p).map(|e| e.offset()))
                && o >= end
            {
                self.done[slot] = true;
            }
        }
        Ok(())
    }
}

/// The most messages one batch call takes (see `KafkaSource::consume`).
const CONSUME_STEP: usize = 256;

impl Source for KafkaSource {
    fn poll(&mut self, max: usize, timeout: Duration, f: &mut Deliver<'_>) -> Result<(usize, PollEnd), Error> {
        // Once the bounded slots are done, the others (repartition topics
        // the job is still writing) are read on until the caller stops.
        let mut n = self.serve_events(f)?;
        // What is there now; if nothing is, wait up to `timeout` for one
        // message (the batch call waits for a *full* batch), then take
        // whatever arrived with it.
        n += self.consume(max.saturating_sub(n), Duration::ZERO, f)?;
        if n == 0 && !timeout.is_zero() {
            n += self.consume(1, timeout, f)?;
            if n > 0 {
                n += self.consume(max.saturating_sub(n), Duration::ZERO, f)?;
            }
        }
        if n == 0 {
            self.check_positions()?;
        }
        Ok((n, if self.exhausted() { PollEnd::Exhausted } else { PollEnd::Open }))
    }

    fn offsets(&self) -> Option<&dyn Offsets> {
        Some(self)
    }

    fn offsets_mut(&mut self) -> Option<&mut dyn Offsets> {
        Some(self)
    }
}

impl Offsets for KafkaSource {
    fn commit(&mut self, positions: &[(usize, i64, String)]) -> Result<(), Error> {
        if positions.is_empty() {
            return Ok(());
        }
        let tpl = self.commit_list(positions)?;
        self.consumer
            .consumer()
            .commit(&tpl, CommitMode::Sync)
            .map_err(|e| Error::kafka(format!("commit offsets of {}", self.topics.join(", ")), e))
    }

    fn transactional_offsets(&self, positions: &[(usize, i64, String)]) -> Option<Result<GroupOffsets, Error>> {
        let group = self.consumer.consumer().group_metadata()?;
        Some(self.commit_list(positions).map(|offsets| GroupOffsets { offsets, group }))
    }

    fn lag(&self, slot: usize) -> Option<i64> {
        let v = self.consumer.consumer().context().lag.get(slot)?.load(Ordering::Relaxed);
        (v >= 0).then_some(v)
    }

    fn end_offsets(&mut self, slots: &[usize]) -> Result<Vec<i64>, Error> {
        slots
            .iter()
            .map(|&slot| {
                let (topic, p) = self.slot(slot)?;
                let (_, high) = self
                    .consumer
                    .consumer()
                    .fetch_watermarks(topic, p, METADATA_TIMEOUT)
                    .map_err(|e| Error::kafka(format!("offsets of {topic}/{p}"), e))?;
                Ok(high)
            })
            .collect()
    }

    fn consumed_positions(&mut self, slots: &[usize]) -> Vec<Option<i64>> {
        let Ok(positions) = self.consumer.consumer().position() else { return vec![None; slots.len()] };
        slots
            .iter()
            .map(|&slot| {
                // A held slot's messages are dropped, to be read again; a
                // bounded run's past its end are not processed.
                if self.held.get(slot).copied().unwrap_or(true) || !matches!(self.end_offsets.get(slot), Some(None)) {
                    return None;
                }
                let (topic, p) = self.slot(slot).ok()?;
                match positions.find_partition(topic, p).map(|e| e.offset()) {
                    Some(Offset::Offset(o)) => Some(o),
                    _ => None,
                }
            })
            .collect()
    }

    fn reached(&mut self, ends: &[(usize, i64)]) -> Result<bool, Error> {
        let positions = self.consumer.consumer().position().map_err(|e| Error::kafka("consumer position", e))?;
        for &(slot, end) in ends {
            let (topic, p) = self.slot(slot)?;
            match positions.find_partition(topic, p).map(|e| e.offset()) {
                Some(Offset::Offset(o)) if o >= end => {}
                _ => return Ok(false),
            }
        }
        Ok(true)
    }

    fn hold(&mut self, slots: &[usize]) -> Result<(), Error> {
        for &slot in slots {
            self.slot(slot)?;
            self.held[slot] = true;
        }
        Ok(())
    }

    /// A seek discards what was fetched before it (librdkafka drops the
    /// partition's messages of an older fetch version), so nothing held is
    /// delivered after it.
    fn release(&mut self, at: &[(usize, i64)]) -> Result<(), Error> {
        for &(slot, offset) in at {
            let (topic, p) = self.slot(slot)?;
            self.consumer
                .consumer()
                .seek(topic, p, Offset::Offset(offset), METADATA_TIMEOUT)
                .map_err(|e| Error::kafka(format!("seek {topic}/{p} to {offset}"), e))?;
            self.held[slot] = false;
        }
        Ok(())
    }
}

impl KafkaSource {
    fn slot(&self, slot: usize) -> Result<(&str, i32), Error> {
        self.slots
            .get(slot)
            .map(|(t, p)| (t.as_str(), *p))
            .ok_or_else(|| Error::Internal(format!("slot {slot} of a consumer of {} slots", self.slots.len())))
    }
}

impl KafkaSource {
    /// Slots' next offsets and checkpoint metadata, as a commit carries them.
    fn commit_list(&self, positions: &[(usize, i64, String)]) -> Result<TopicPartitionList, Error> {
        let mut tpl = TopicPartitionList::new();
        for (slot, offset, metadata) in positions {
            let (topic, p) = &self.slots[*slot];
            tpl.add_partition_offset(topic, *p, Offset::Offset(*offset)).map_err(|e| Error::kafka("commit list", e))?;
            if let Some(mut e) = tpl.find_partition(topic, *p) {
                e.set_metadata(metadata.clone());
            }
        }
        Ok(tpl)
    }
}

/// Errors no retry can fix.
fn is_fatal(code: RDKafkaErrorCode) -> bool {
    use RDKafkaErrorCode as C;
    matches!(code, C::Fatal | C::TopicAuthorizationFailed | C::GroupAuthorizationFailed | C::SaslAuthenticationFailed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn start_from_applies_only_before_the_job_first_committed_on_the_topic() {
        // A new job: as the spec says.
        assert_eq!(start_offset(StartFrom::Latest, false, 5, 90, None), 90);
        assert_eq!(start_offset(StartFrom::Earliest, false, 5, 90, None), 5);
        // A time: the first record at or after it, or the end when none is.
        assert_eq!(start_offset(StartFrom::Timestamp(1), false, 5, 90, Some(40)), 40);
        assert_eq!(start_offset(StartFrom::Timestamp(1), false, 5, 90, None), 90);
        assert_eq!(start_offset(StartFrom::Timestamp(1), true, 0, 40, Some(30)), 0);
        // A partition added to a topic the job already reads: every record
        // on it came while the job ran, so none is skipped.
        assert_eq!(start_offset(StartFrom::Latest, true, 0, 40, None), 0);
        assert_eq!(start_offset(StartFrom::Earliest, true, 0, 40, None), 0);
    }
}
