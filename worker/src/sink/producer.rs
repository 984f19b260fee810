//! The Kafka producer a core's outputs write through.
//!
//! At least once, each output (the sink, each repartition topic, the dead
//! letters, the state topic) has a producer of its own, tuned for it — but
//! where a stateful stage writes a repartition topic, the repartition
//! topics, the state and the offsets share one transactional producer.
//! Exactly once, all of a core's outputs share one: a Kafka transaction is
//! a producer's, and one transaction per checkpoint must hold everything
//! it covers together with the input offsets (see [`CoreProducer::commit`]).
//!
//! The delivery callback records the end-to-end latency of every
//! acknowledged result (record timestamp → ack), the offsets of state
//! chunks (a checkpoint's metadata points to them), and failures; `flush`
//! reports a failure as an error, so a checkpoint never commits offsets
//! whose results were not written.

use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rdkafka::consumer::ConsumerGroupMetadata;
use rdkafka::error::KafkaError;
use rdkafka::producer::{BaseProducer, BaseRecord, DeliveryResult, Producer, ProducerContext};
use rdkafka::types::RDKafkaErrorCode;
use rdkafka::util::Timeout;
use rdkafka::{ClientConfig, ClientContext, TopicPartitionList};

use super::drain::DrainDeadline;
use crate::Error;
use crate::metrics::LatencyHistogram;

/// The producer settings a core starts from, tuned for low latency; a
/// sink's `properties` override any of them (the benchmarks use them as
/// they are, through [`producer_config`]).
///
/// librdkafka keeps ~300 bytes of bookkeeping per queued message on top of
/// its payload, so the message count, not the kilobytes, bounds memory:
/// 32 K messages is ~30 ms of output at 1 M records/s per core (measured: S0
/// on 2 cores peaked at 89 MB RSS with 100 K, 63 MB with 32 K, at the same
/// throughput).
pub const PRODUCER_DEFAULTS: [(&str, &str); 4] = [
    ("linger.ms", "1"),
    ("batch.size", "1000000"),
    ("queue.buffering.max.messages", "32768"),
    ("queue.buffering.max.kbytes", "8192"),
];

/// What no property may change: an idempotent producer waiting for every
/// in-sync replica. Without idempotence a batch retried after a timeout can
/// land after a newer one, and a compacted sink then ends on an older value
/// (validation rejects properties that try; these are set regardless).
pub const PRODUCER_GUARANTEES: [(&str, &str); 2] = [("enable.idempotence", "true"), ("acks", "all")];

/// A sink producer's configuration: the defaults under the user's
/// properties, the guarantees over them.
pub fn producer_config(mut config: ClientConfig) -> ClientConfig {
    for (k, v) in PRODUCER_DEFAULTS {
        crate::kafka::set_default(&mut config, k, v);
    }
    for (k, v) in PRODUCER_GUARANTEES {
        config.set(k, v);
    }
    config
}

/// A delivery opaque with this bit set is a state chunk's index (see
/// [`CoreProducer::chunk_opaque`]); without it, the input timestamp of a
/// result (0: none), for latency.
const CHUNK: usize = 1 << (usize::BITS - 1);

/// Delivery reports of one producer.
pub struct DeliveryContext {
    latency: Option<Arc<LatencyHistogram>>,
    /// Wall clock (epoch ms) read once before each poll: every report served
    /// by that poll is timed against it, instead of reading the clock once
    /// per record (a measurable cost at a million records per second).
    clock_ms: AtomicI64,
    failed: AtomicU64,
    first_error: Mutex<Option<String>>,
    /// The first failure retrying cannot fix ([`refusal`]).
    refused: Mutex<Option<String>>,
    /// A topic a delivery failed for as unknown: missing for good, or only
    /// being created (see [`CoreProducer::check_failures`]).
    unknown_topic: Mutex<Option<String>>,
    /// State chunks acknowledged: (partition, chunk, offset).
    chunks: Mutex<Vec<(i32, usize, i64)>>,
}

impl ClientContext for DeliveryContext {}

impl ProducerContext for DeliveryContext {
    /// The timestamp (epoch ms) of the input record a result came from,
    /// carried through librdkafka without allocating, so latency does not
    /// depend on the output topic's timestamp type; or a chunk's index.
    type DeliveryOpaque = usize;

    fn delivery(&self, result: &DeliveryResult<'_>, opaque: usize) {
        match result {
            Ok(m) if opaque & CHUNK != 0 => {
                use rdkafka::message::Message;
                if let Ok(mut chunks) = self.chunks.lock() {
                    chunks.push((m.partition(), opaque & !CHUNK, m.offset()));
                }
            }
            Ok(_) => {
                if let (Some(h), Ok(ts)) = (&self.latency, i64::try_from(opaque))
                    && ts > 0
                {
                    h.observe_millis(self.clock_ms.load(Ordering::Relaxed) - ts);
                }
            }
            Err((e, m)) => {
                self.failed.fetch_add(1, Ordering::Relaxed);
                if let Ok(mut first) = self.first_error.lock() {
                    first.get_or_insert_with(|| e.to_string());
                }
                use rdkafka::message::Message;
                let code = e.rdkafka_error_code();
                if let Some(why) = code.and_then(refusal)
                    && let Ok(mut refused) = self.refused.lock()
                {
                    refused.get_or_insert_with(|| format!("topic {}: {why}", m.topic()));
                }
                if code == Some(RDKafkaErrorCode::UnknownTopicOrPartition)
                    && let Ok(mut unknown) = self.unknown_topic.lock()
                {
                    unknown.get_or_insert_with(|| m.topic().to_owned());
                }
            }
        }
    }
}

/// One producer, polled only by the core that owns it.
pub struct CoreProducer {
    producer: BaseProducer<DeliveryContext>,
    /// What it writes, for errors.
    name: String,
    reported_failures: AtomicU64,
    drain: DrainDeadline,
    /// Its transactional id, when it is transactional.
    transactional_id: Option<String>,
}

impl std::fmt::Debug for CoreProducer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CoreProducer").field("name", &self.name).finish()
    }
}

const FLUSH_TIMEOUT: Duration = Duration::from_secs(60);
const METADATA_TIMEOUT: Duration = Duration::from_secs(15);
/// How long a transaction's start, offsets or commit may wait on the broker.
const TRANSACTION_TIMEOUT: Duration = Duration::from_secs(60);
/// Bounds one non-blocking poll, so a flood of reports cannot starve the loop.
const MAX_EVENTS_PER_POLL: usize = 10_000;

impl CoreProducer {
    /// A producer from `config` (complete: see `sink::producer_config`)
    /// for the outputs `name` says; results it writes time their latency
    /// into `latency`. With a `transactional.id` in `config`, it is
    /// initialised for transactions — which fences any earlier producer of
    /// that id — and its first transaction begun.
    pub fn new(
        config: &ClientConfig,
        name: &str,
        latency: Option<Arc<LatencyHistogram>>,
        drain: DrainDeadline,
    ) -> Result<Arc<Self>, Error> {
        let context = DeliveryContext {
            latency,
            clock_ms: AtomicI64::new(0),
            failed: AtomicU64::new(0),
            first_error: Mutex::new(None),
            refused: Mutex::new(None),
            unknown_topic: Mutex::new(None),
            chunks: Mutex::new(Vec::new()),
        };
        let producer: BaseProducer<DeliveryContext> =
            config.create_with_context(context).map_err(|e| Error::kafka(format!("create producer for {name}"), e))?;
        let transactional_id = config.get("transactional.id").map(str::to_owned);
        let p = Self { producer, name: name.to_owned(), reported_failures: AtomicU64::new(0), drain, transactional_id };
        if let Some(id) = &p.transactional_id {
            p.producer
                .init_transactions(Timeout::After(TRANSACTION_TIMEOUT))
                .map_err(|e| produce_error(format!("initialise transactions of {id}"), &e))?;
            p.producer.begin_transaction().map_err(|e| produce_error(format!("begin a transaction of {id}"), &e))?;
        }
        Ok(Arc::new(p))
    }

    /// Connects and learns `topic`'s leaders now, not when the first
    /// results wait on it (measured: ~0.5 s added to the first records).
    pub fn warm(&self, topic: &str) -> Result<(), Error> {
        match self.producer.client().fetch_metadata(Some(topic), Timeout::After(METADATA_TIMEOUT)) {
            Ok(m) => {
                if let Some(e) = m.topics().first().and_then(rdkafka::metadata::MetadataTopic::error) {
                    tracing::warn!(topic, error = %RDKafkaErrorCode::from(e), "output topic not usable yet");
                }
                Ok(())
            }
            Err(e) => Err(Error::kafka(format!("metadata of output topic {topic}"), e)),
        }
    }

    /// The opaque that makes chunk `chunk`'s delivery recorded for
    /// [`Self::take_chunks`].
    pub fn chunk_opaque(chunk: usize) -> usize {
        CHUNK | chunk
    }

    /// The state chunks acknowledged since the last call.
    pub fn take_chunks(&self) -> Vec<(i32, usize, i64)> {
        self.producer.context().chunks.lock().map(|mut c| std::mem::take(&mut *c)).unwrap_or_default()
    }

    /// Queues one record, serving delivery reports while the local queue is full.
    pub fn send(&self, record: BaseRecord<'_, [u8], [u8], usize>) -> Result<(), Error> {
        let mut record = record;
        loop {
            match self.producer.send(record) {
                Ok(()) => return Ok(()),
                Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), r)) => {
                    record = r;
                    if self.drain.passed() {
                        return Err(Error::kafka(
                            format!("produce to {}", record.topic),
                            "the local queue is still full at the drain deadline",
                        ));
                    }
                    if !self.drain() {
                        // Nothing acknowledged yet: wait for the broker.
                        self.serve(Duration::from_millis(1));
                    }
                }
                Err((KafkaError::MessageProduction(RDKafkaErrorCode::MessageSizeTooLarge), r)) => {
                    let bytes = r.payload.map_or(0, <[u8]>::len) + r.key.map_or(0, <[u8]>::len);
                    return Err(Error::RecordTooLarge { topic: r.topic.to_owned(), bytes });
                }
                Err((e, r)) => return Err(produce_error(format!("produce to {}", r.topic), &e)),
            }
        }
    }

    /// The cumulative count of records it failed to deliver.
    pub fn failed_deliveries(&self) -> u64 {
        self.producer.context().failed.load(Ordering::Relaxed)
    }

    fn check_failures(&self) -> Result<(), Error> {
        // A transactional producer that a newer one of its id fenced fails
        // every delivery from then on; that is not a broker outage to wait
        // out, and retrying would fence the newer one in turn.
        if let Some((code, reason)) = self.producer.client().fatal_error() {
            // An idempotent producer refused on the cluster fails for good
            // too (its deliveries then fail as `_FATAL`).
            if let Some(why) = refusal(code) {
                return Err(Error::Refused(format!("{}: {why} ({reason})", self.name)));
            }
            if self.transactional_id.is_some()
                && matches!(code, RDKafkaErrorCode::Fenced | RDKafkaErrorCode::ProducerFenced)
            {
                return Err(Error::Fenced(format!("{}: {reason}", self.name)));
            }
        }
        if let Some(why) = self.producer.context().refused.lock().ok().and_then(|r| r.clone()) {
            return Err(Error::Refused(format!("deliver to {}: {why}", self.name)));
        }
        // Deliveries failed as "unknown topic" (after message.timeout.ms of
        // retries): refused for good if the broker still does not know the
        // topic; a topic only being created passes.
        if let Some(topic) = self.producer.context().unknown_topic.lock().ok().and_then(|mut t| t.take())
            && let Ok(m) = self.producer.client().fetch_metadata(Some(&topic), Timeout::After(METADATA_TIMEOUT))
            && m.topics().first().and_then(rdkafka::metadata::MetadataTopic::error).map(RDKafkaErrorCode::from)
                == Some(RDKafkaErrorCode::UnknownTopicOrPartition)
        {
            return Err(Error::Refused(format!(
                "deliver to {}: topic {topic}: {}",
                self.name,
                refusal(RDKafkaErrorCode::UnknownTopic).unwrap_or_default()
            )));
        }
        let failed = self.failed_deliveries();
        if failed > self.reported_failures.load(Ordering::Relaxed) {
            self.reported_failures.store(failed, Ordering::Relaxed);
            let first = self.producer.context().first_error.lock().ok().and_then(|f| f.clone()).unwrap_or_default();
            return Err(Error::kafka(
                format!("deliver to {}", self.name),
                format!("{failed} record(s) not acknowledged: {first}"),
            ));
        }
        Ok(())
    }

    /// Serves every delivery report that is waiting, without blocking;
    /// returns whether any was served.
    ///
    /// `BaseProducer::poll` serves one event per call, and one event holds
    /// the reports of one produce request (one partition): a single call per
    /// batch falls behind as soon as a batch spans partitions, the reports
    /// pile up until the local queue is full, and latency and memory grow
    /// with them. The queue length counts unserved reports, and only this
    /// thread adds to it, so it shrinks exactly when a poll served one.
    fn drain(&self) -> bool {
        let before = self.producer.in_flight_count();
        let mut waiting = before;
        for _ in 0..MAX_EVENTS_PER_POLL {
            self.serve(Duration::ZERO);
            let now = self.producer.in_flight_count();
            if now >= waiting {
                break;
            }
            waiting = now;
        }
        waiting < before
    }

    /// Serves delivery reports for up to `timeout` (the whole of it: see
    /// `BaseProducer::poll`), timing them against the clock read now.
    fn serve(&self, timeout: Duration) {
        self.producer.context().clock_ms.store(crate::clock::now_ms(), Ordering::Relaxed);
        self.producer.poll(timeout);
    }

    /// Serves delivery reports without blocking; an error if any failed.
    pub fn poll(&self) -> Result<(), Error> {
        self.drain();
        self.check_failures()
    }

    /// Waits until every queued record is acknowledged (or failed).
    ///
    /// Not `Producer::flush`: rust-rdkafka's flush polls in steps of 100 ms
    /// that always run to the end, so every checkpoint cost at least 100 ms
    /// of stalled processing (seen as a latency spike once per checkpoint
    /// interval). Here the wait is served in 1 ms steps.
    pub fn flush(&self) -> Result<(), Error> {
        // A zero-timeout flush only tells librdkafka to send lingering batches now.
        let _ = self.producer.flush(Timeout::After(Duration::ZERO));
        let started = Instant::now();
        let deadline = self.drain.bound(FLUSH_TIMEOUT);
        loop {
            self.drain();
            let waiting = self.producer.in_flight_count();
            if waiting == 0 {
                return self.check_failures();
            }
            if Instant::now() >= deadline {
                self.check_failures()?;
                return Err(Error::kafka(
                    format!("flush {}", self.name),
                    format!("{waiting} record(s) still unacknowledged after {:.1}s", started.elapsed().as_secs_f64()),
                ));
            }
            self.serve(Duration::from_millis(1));
        }
    }

    /// Ends the checkpoint's transaction: everything written since it began
    /// and `offsets` (the inputs' next offsets, with their checkpoint
    /// metadata, for consumer group `group`) become visible together, then
    /// the next transaction begins. On any error the transaction is aborted
    /// — nothing of it is ever visible — and the error returned: the core
    /// restarts from the last committed checkpoint. A fenced producer (a
    /// newer instance of this id started) is fatal: see [`Error::Fenced`].
    pub fn commit(&self, offsets: &TopicPartitionList, group: &ConsumerGroupMetadata) -> Result<(), Error> {
        let Some(id) = &self.transactional_id else {
            return Err(Error::Internal(format!("{} is not transactional", self.name)));
        };
        let result = self.flush().and_then(|()| {
            if offsets.count() > 0 {
                self.producer
                    .send_offsets_to_transaction(offsets, group, Timeout::After(TRANSACTION_TIMEOUT))
                    .map_err(|e| produce_error(format!("offsets into the transaction of {id}"), &e))?;
            }
            self.producer
                .commit_transaction(Timeout::After(TRANSACTION_TIMEOUT))
                .map_err(|e| produce_error(format!("commit the transaction of {id}"), &e))
        });
        if let Err(e) = result {
            if !matches!(e, Error::Fenced(_)) {
                let _ = self.producer.abort_transaction(Timeout::After(TRANSACTION_TIMEOUT));
            }
            return Err(e);
        }
        self.producer.begin_transaction().map_err(|e| produce_error(format!("begin a transaction of {id}"), &e))
    }
}

/// A produce or transaction error: fenced ([`Error::Fenced`]), or transient
/// (the broker's trouble, or an abortable failure: the core starts again
/// from its last checkpoint).
fn produce_error(what: String, e: &KafkaError) -> Error {
    if let Some(why) = e.rdkafka_error_code().and_then(refusal) {
        return Error::Refused(format!("{what}: {why}"));
    }
    if is_fenced(e) { Error::Fenced(format!("{what}: {e}")) } else { Error::kafka(what, e) }
}

/// Why Kafka refused for good, when `code` says so (see
/// [`Error::Refused`]); `None` for what may pass (a broker down, a leader
/// moving, a timeout).
fn refusal(code: RDKafkaErrorCode) -> Option<&'static str> {
    use RDKafkaErrorCode as C;
    Some(match code {
        C::TopicAuthorizationFailed => {
            "not authorized to write the topic: grant the job's principal Write and Describe on it \
             (docs/operations.md, the ACLs a job needs)"
        }
        C::TransactionalIdAuthorizationFailed => {
            "not authorized to use the core's transactional id: grant the job's principal Write and Describe on \
             transactional ids prefixed <group>.tx- (docs/operations.md, the ACLs a job needs)"
        }
        C::ClusterAuthorizationFailed => {
            "not authorized on the cluster: an idempotent producer needs IdempotentWrite there (Kafka < 3.0)"
        }
        C::UnknownTopic => "the topic does not exist and the broker does not create topics: create it",
        _ => return None,
    })
}

fn is_fenced(e: &KafkaError) -> bool {
    use RDKafkaErrorCode as C;
    match e {
        KafkaError::Transaction(t) => {
            matches!(t.code(), C::ProducerFenced | C::InvalidProducerEpoch) || (t.is_fatal() && t.code() == C::Fenced)
        }
        other => matches!(other.rdkafka_error_code(), Some(C::ProducerFenced | C::Fenced | C::InvalidProducerEpoch)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A flush during a drain gives up at the drain deadline, not after the
    /// 60 s flush timeout: the worker must checkpoint (or give up on it)
    /// and exit before the end of the pod's grace period.
    #[test]
    fn a_flush_with_the_broker_away_ends_at_the_drain_deadline() {
        let mut config = ClientConfig::new();
        config.set("bootstrap.servers", "127.0.0.1:1").set("message.timeout.ms", "600000");
        let drain = DrainDeadline::default();
        let p = CoreProducer::new(&producer_config(config), "t", None, drain.clone()).unwrap();
        p.send(BaseRecord::with_opaque_to("t", 0).payload(&b"x"[..]).key(&b"k"[..])).unwrap();
        drain.start(Duration::from_millis(300));
        let started = Instant::now();
        let e = p.flush().unwrap_err();
        assert!(started.elapsed() < Duration::from_secs(5), "flush took {:?}", started.elapsed());
        assert!(e.to_string().contains("still unacknowledged"), "{e}");
    }

    /// Authorization and a missing topic stop the core with why (retried,
    /// they restarted it forever); a fence is a fence, not an ACL; a broker
    /// away stays transient.
    #[test]
    fn refusals_are_named_and_not_retried() {
        use rdkafka::types::RDKafkaErrorCode as C;
        let e = produce_error("produce to out".into(), &KafkaError::MessageProduction(C::TopicAuthorizationFailed));
        assert!(matches!(&e, Error::Refused(m) if m.starts_with("produce to out: not authorized")), "{e}");
        assert!(!e.is_transient());
        // A transaction's errors carry their code the same way.
        assert!(refusal(C::TransactionalIdAuthorizationFailed).is_some_and(|r| r.contains("<group>.tx-")));
        let e = produce_error("commit".into(), &KafkaError::MessageProduction(C::ProducerFenced));
        assert!(matches!(e, Error::Fenced(_)), "{e}");
        assert!(refusal(C::UnknownTopic).is_some_and(|r| r.contains("does not exist")));
        for transient in [C::BrokerTransportFailure, C::RequestTimedOut, C::NotLeaderForPartition, C::MessageTimedOut] {
            assert!(refusal(transient).is_none(), "{transient:?}");
            assert!(produce_error("x".into(), &KafkaError::MessageProduction(transient)).is_transient());
        }
    }

    #[test]
    fn properties_tune_the_producer_but_cannot_weaken_delivery() {
        let mut user = ClientConfig::new();
        user.set("linger.ms", "5").set("acks", "1").set("enable.idempotence", "false");
        let c = producer_config(user);
        assert_eq!(c.get("linger.ms"), Some("5"), "a tuning property wins over the default");
        assert_eq!(c.get("acks"), Some("all"));
        assert_eq!(c.get("enable.idempotence"), Some("true"));
        let c = producer_config(ClientConfig::new());
        assert_eq!(c.get("enable.idempotence"), Some("true"), "idempotent by default");
        assert_eq!(c.get("queue.buffering.max.messages"), Some("32768"));
    }

    #[test]
    fn a_chunk_opaque_is_told_apart_from_any_timestamp() {
        let ts = usize::try_from(i64::MAX).unwrap();
        assert_eq!(ts & CHUNK, 0, "no timestamp has the chunk bit");
        assert_eq!(CoreProducer::chunk_opaque(7) & !CHUNK, 7);
        assert_ne!(CoreProducer::chunk_opaque(0) & CHUNK, 0);
    }
}
