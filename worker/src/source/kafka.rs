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

use super::batch_queue::{BatchConsumer, Fetched};
use super::{PollEnd, Record, Source};
use crate::Error;

/// Consumer lag per slot, from librdkafka's periodic statistics.
pub struct LagContext {
    topic: String,
    partitions: Vec<i32>,
    lag: Vec<AtomicI64>,
}

impl ClientContext for LagContext {
    fn stats(&self, stats: Statistics) {
        if let Some(t) = stats.topics.get(&self.topic) {
            for (slot, p) in self.partitions.iter().enumerate() {
                if let Some(part) = t.partitions.get(p)
                    && part.consumer_lag >= 0
                {
                    self.lag[slot].store(part.consumer_lag, Ordering::Relaxed);
                }
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
pub fn start_offset(start_from: StartFrom, topic_started: bool, low: i64, high: i64) -> i64 {
    match (start_from, topic_started) {
        (StartFrom::Latest, false) => high,
        (StartFrom::Earliest, _) | (StartFrom::Latest, true) => low,
    }
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

pub struct KafkaSource {
    consumer: BatchConsumer<LagContext>,
    topic: String,
    partitions: Vec<i32>,
    slot_of: Vec<Option<usize>>,
    /// Bounded runs: the high watermark captured at start, per slot.
    end_offsets: Option<Vec<i64>>,
    done: Vec<bool>,
}

impl std::fmt::Debug for KafkaSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KafkaSource").field("topic", &self.topic).field("partitions", &self.partitions).finish()
    }
}

const METADATA_TIMEOUT: Duration = Duration::from_secs(15);

impl KafkaSource {
    /// Creates the consumer, reads the committed positions of `partitions`
    /// in `group`, and assigns them: from the committed offset, or else as
    /// [`start_offset`] decides (`topic_partitions`: how many the topic has,
    /// to tell whether the job has committed on it before). For a bounded
    /// run the current end offsets are captured.
    pub fn new(
        mut config: ClientConfig,
        group: &str,
        topic: &str,
        partitions: &[i32],
        topic_partitions: i32,
        start_from: StartFrom,
        bounded: bool,
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
        let context = LagContext {
            topic: topic.to_owned(),
            partitions: partitions.to_vec(),
            lag: partitions.iter().map(|_| AtomicI64::new(-1)).collect(),
        };
        let consumer: BaseConsumer<LagContext> =
            config.create_with_context(context).map_err(|e| Error::kafka(format!("create consumer for {topic}"), e))?;
        let all = topic_partitions.max(partitions.iter().copied().max().map_or(0, |p| p + 1));
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
        let mut positions = Vec::with_capacity(partitions.len());
        let mut assignment = TopicPartitionList::new();
        let mut done = vec![false; partitions.len()];
        let mut ends = Vec::with_capacity(partitions.len());
        for (slot, &p) in partitions.iter().enumerate() {
            let offset = committed_offset(p);
            let metadata = match (offset, committed.find_partition(topic, p)) {
                (Some(_), Some(e)) => e.metadata().to_owned(),
                _ => String::new(),
            };
            let watermarks = if offset.is_none() || bounded {
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
                    let start = start_offset(start_from, topic_started, low, high);
                    if topic_started && start_from == StartFrom::Latest {
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
            if let Some((_, high)) = watermarks.filter(|_| bounded) {
                done[slot] = start >= high;
                ends.push(high);
            }
            assignment
                .add_partition_offset(topic, p, Offset::Offset(start))
                .map_err(|e| Error::kafka("assignment", e))?;
            positions.push(CommittedPosition { offset, metadata, start });
        }
        let end_offsets = bounded.then_some(ends);
        // Learn the partition leaders before assigning: a partition assigned
        // with no known leader waits for librdkafka's offset-query retry
        // timer (measured: ~0.5 s before the first fetch), so the core would
        // report ready while not consuming. This also names a missing topic.
        let metadata = consumer
            .fetch_metadata(Some(topic), METADATA_TIMEOUT)
            .map_err(|e| Error::kafka(format!("metadata of {topic}"), e))?;
        if let Some(e) = metadata.topics().first().and_then(rdkafka::metadata::MetadataTopic::error) {
            return Err(Error::kafka(format!("source topic {topic}"), RDKafkaErrorCode::from(e)));
        }
        let consumer = BatchConsumer::new(consumer, topic, partitions)?;
        consumer
            .consumer()
            .assign(&assignment)
            .map_err(|e| Error::kafka(format!("assign {topic} {partitions:?}"), e))?;
        let max = partitions.iter().copied().max().unwrap_or(0);
        let mut slot_of = vec![None; usize::try_from(max).unwrap_or(0) + 1];
        for (slot, &p) in partitions.iter().enumerate() {
            slot_of[usize::try_from(p).unwrap_or(0)] = Some(slot);
        }
        let source =
            Self { consumer, topic: topic.to_owned(), partitions: partitions.to_vec(), slot_of, end_offsets, done };
        Ok((source, positions))
    }

    fn exhausted(&self) -> bool {
        self.end_offsets.is_some() && self.done.iter().all(|d| *d)
    }
}

impl KafkaSource {
    /// Hands one fetched message to `f` as a record of its slot, unless a
    /// bounded run already has everything up to its end offset.
    fn deliver(
        slot_of: &[Option<usize>],
        bounds: Option<(&[i64], &mut [bool])>,
        m: Fetched<'_>,
        f: &mut dyn FnMut(Record<'_>),
    ) -> bool {
        let Some(slot) = usize::try_from(m.partition).ok().and_then(|p| slot_of.get(p).copied().flatten()) else {
            return false;
        };
        if let Some((ends, done)) = bounds {
            if m.offset >= ends[slot] {
                done[slot] = true;
                return false;
            }
            if m.offset + 1 >= ends[slot] {
                done[slot] = true;
            }
        }
        let timestamp_ms = m.timestamp_ms.unwrap_or_else(crate::runtime::now_ms);
        f(Record { slot, offset: m.offset, timestamp_ms, payload: m.payload });
        true
    }

    /// Serves the main queue's events without blocking: statistics (the lag
    /// metric) and client errors. Fetched messages do not arrive here.
    fn serve_events(&mut self, f: &mut dyn FnMut(Record<'_>)) -> Result<usize, Error> {
        let mut n = 0;
        while let Some(event) = self.consumer.consumer().poll(Duration::ZERO) {
            match event {
                Ok(m) => {
                    // Only possible if a message was fetched before the
                    // forward took effect; deliver it like any other.
                    let fetched = Fetched {
                        partition: m.partition(),
                        offset: m.offset(),
                        timestamp_ms: m.timestamp().to_millis(),
                        payload: m.payload().unwrap_or_default(),
                    };
                    let bounds = self.end_offsets.as_deref().map(|e| (e, &mut self.done[..]));
                    n += usize::from(Self::deliver(&self.slot_of, bounds, fetched, f));
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
            return Err(Error::kafka(format!("consume {}", self.topic), e));
        }
        tracing::warn!(topic = %self.topic, error = %e, "consumer error (will retry)");
        Ok(())
    }

    /// Up to `want` messages from the batch queue, waiting at most `wait`
    /// for a full batch.
    fn consume(&mut self, want: usize, wait: Duration, f: &mut dyn FnMut(Record<'_>)) -> Result<usize, Error> {
        let (slot_of, mut bounds) = (&self.slot_of, self.end_offsets.as_deref().map(|e| (e, &mut self.done[..])));
        let mut delivered = 0;
        let result = self.consumer.consume(want, wait, &mut |m| {
            let b = bounds.as_mut().map(|(e, d)| (*e, &mut **d));
            delivered += usize::from(Self::deliver(slot_of, b, m, f));
        });
        if let Err((_, code)) = result {
            self.consumer_error(Some(code), &code)?;
        }
        Ok(delivered)
    }

    /// A bounded run is done with a partition once its position reaches the
    /// end offset, even when the last offsets held no record to see
    /// (transaction markers, compacted records).
    fn check_positions(&mut self) -> Result<(), Error> {
        let Some(ends) = &self.end_offsets else { return Ok(()) };
        if self.done.iter().all(|d| *d) {
            return Ok(());
        }
        let positions =
            self.consumer.consumer().position().map_err(|e| Error::kafka(format!("position in {}", self.topic), e))?;
        for (slot, &p) in self.partitions.iter().enumerate() {
            if let Some(Offset::Offset(o)) = positions.find_partition(&self.topic, p).map(|e| e.offset())
                && o >= ends[slot]
            {
                self.done[slot] = true;
            }
        }
        Ok(())
    }
}

impl Source for KafkaSource {
    fn poll(
        &mut self,
        max: usize,
        timeout: Duration,
        f: &mut dyn FnMut(Record<'_>),
    ) -> Result<(usize, PollEnd), Error> {
        if self.exhausted() {
            return Ok((0, PollEnd::Exhausted));
        }
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

    fn commit(&mut self, positions: &[(usize, i64, String)]) -> Result<(), Error> {
        if positions.is_empty() {
            return Ok(());
        }
        let mut tpl = TopicPartitionList::new();
        for (slot, offset, metadata) in positions {
            let p = self.partitions[*slot];
            tpl.add_partition_offset(&self.topic, p, Offset::Offset(*offset))
                .map_err(|e| Error::kafka("commit list", e))?;
            if let Some(mut e) = tpl.find_partition(&self.topic, p) {
                e.set_metadata(metadata.clone());
            }
        }
        self.consumer
            .consumer()
            .commit(&tpl, CommitMode::Sync)
            .map_err(|e| Error::kafka(format!("commit offsets of {}", self.topic), e))
    }

    fn lag(&self, slot: usize) -> Option<i64> {
        let v = self.consumer.consumer().context().lag.get(slot)?.load(Ordering::Relaxed);
        (v >= 0).then_some(v)
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
        assert_eq!(start_offset(StartFrom::Latest, false, 5, 90), 90);
        assert_eq!(start_offset(StartFrom::Earliest, false, 5, 90), 5);
        // A partition added to a topic the job already reads: every record
        // on it came while the job ran, so none is skipped.
        assert_eq!(start_offset(StartFrom::Latest, true, 0, 40), 0);
        assert_eq!(start_offset(StartFrom::Earliest, true, 0, 40), 0);
    }
}
