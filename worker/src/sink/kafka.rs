//! Producing to Kafka: one `BaseProducer` per core, polled by that core.
//!
//! The delivery callback records the end-to-end latency of every
//! acknowledged record (record timestamp → ack) and remembers failures;
//! `flush` reports a failure as an error so the checkpoint never commits
//! offsets whose results were not written.

use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::time::Duration;

use rdkafka::error::KafkaError;
use rdkafka::message::{Header, OwnedHeaders};
use rdkafka::producer::{BaseProducer, BaseRecord, DeliveryResult, Producer, ProducerContext};
use rdkafka::types::RDKafkaErrorCode;
use rdkafka::util::Timeout;
use rdkafka::{ClientConfig, ClientContext};

use super::{DeadLetter, DeadLetterSink, DrainDeadline, ExchangeOutput, Sink};
use crate::Error;
use crate::metrics::LatencyHistogram;
use crate::runtime::exchange::{Frame, Packer};
use sluice_formats::encode::EncodedRows;

/// Delivery reports of one producer.
pub struct DeliveryContext {
    latency: Option<Arc<LatencyHistogram>>,
    /// Wall clock (epoch ms) read once before each poll: every report served
    /// by that poll is timed against it, instead of reading the clock once
    /// per record (a measurable cost at a million records per second).
    clock_ms: AtomicI64,
    failed: AtomicU64,
    first_error: Mutex<Option<String>>,
}

impl ClientContext for DeliveryContext {}

impl ProducerContext for DeliveryContext {
    /// The timestamp (epoch ms) of the input record the result came from,
    /// carried through librdkafka without allocating, so latency does not
    /// depend on the output topic's timestamp type.
    type DeliveryOpaque = usize;

    fn delivery(&self, result: &DeliveryResult<'_>, input_timestamp: usize) {
        match result {
            Ok(_) => {
                if let (Some(h), Ok(ts)) = (&self.latency, i64::try_from(input_timestamp))
                    && ts > 0
                {
                    h.observe_millis(self.clock_ms.load(Ordering::Relaxed) - ts);
                }
            }
            Err((e, _)) => {
                self.failed.fetch_add(1, Ordering::Relaxed);
                if let Ok(mut first) = self.first_error.lock() {
                    first.get_or_insert_with(|| e.to_string());
                }
            }
        }
    }
}

/// A producer and the bookkeeping every Kafka output needs.
struct Producing {
    producer: BaseProducer<DeliveryContext>,
    topic: String,
    reported_failures: u64,
    drain: DrainDeadline,
}

const FLUSH_TIMEOUT: Duration = Duration::from_secs(60);
const METADATA_TIMEOUT: Duration = Duration::from_secs(15);
/// Bounds one non-blocking poll, so a flood of reports cannot starve the loop.
const MAX_EVENTS_PER_POLL: usize = 10_000;

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

impl Producing {
    fn new(
        config: ClientConfig,
        topic: &str,
        latency: Option<Arc<LatencyHistogram>>,
        drain: DrainDeadline,
    ) -> Result<Self, Error> {
        let config = producer_config(config);
        let context = DeliveryContext {
            latency,
            clock_ms: AtomicI64::new(0),
            failed: AtomicU64::new(0),
            first_error: Mutex::new(None),
        };
        let producer: BaseProducer<DeliveryContext> =
            config.create_with_context(context).map_err(|e| Error::kafka(format!("create producer for {topic}"), e))?;
        // Connect and learn the topic's leaders now, not when the first
        // results wait on it (measured: ~0.5 s added to the first records).
        match producer.client().fetch_metadata(Some(topic), Timeout::After(METADATA_TIMEOUT)) {
            Ok(m) => {
                if let Some(e) = m.topics().first().and_then(rdkafka::metadata::MetadataTopic::error) {
                    tracing::warn!(topic, error = %RDKafkaErrorCode::from(e), "output topic not usable yet");
                }
            }
            Err(e) => return Err(Error::kafka(format!("metadata of output topic {topic}"), e)),
        }
        Ok(Self { producer, topic: topic.to_owned(), reported_failures: 0, drain })
    }

    /// Queues one record, serving delivery reports while the local queue is full.
    fn send(&self, record: BaseRecord<'_, [u8], [u8], usize>) -> Result<(), Error> {
        let mut record = record;
        loop {
            match self.producer.send(record) {
                Ok(()) => return Ok(()),
                Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), r)) => {
                    record = r;
                    if self.drain.passed() {
                        return Err(Error::kafka(
                            format!("produce to {}", self.topic),
                            "the local queue is still full at the drain deadline",
                        ));
                    }
                    if !self.drain() {
                        // Nothing acknowledged yet: wait for the broker.
                        self.serve(Duration::from_millis(1));
                    }
                }
                Err((e, _)) => return Err(Error::kafka(format!("produce to {}", self.topic), e)),
            }
        }
    }

    fn check_failures(&mut self) -> Result<(), Error> {
        let failed = self.producer.context().failed.load(Ordering::Relaxed);
        if failed > self.reported_failures {
            self.reported_failures = failed;
            let first = self.producer.context().first_error.lock().ok().and_then(|f| f.clone()).unwrap_or_default();
            return Err(Error::kafka(
                format!("deliver to {}", self.topic),
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
        self.producer.context().clock_ms.store(crate::runtime::now_ms(), Ordering::Relaxed);
        self.producer.poll(timeout);
    }

    fn poll(&mut self) -> Result<(), Error> {
        self.drain();
        self.check_failures()
    }

    /// Waits until every queued record is acknowledged (or failed).
    ///
    /// Not `Producer::flush`: rust-rdkafka's flush polls in steps of 100 ms
    /// that always run to the end, so every checkpoint cost at least 100 ms
    /// of stalled processing (seen as a latency spike once per checkpoint
    /// interval). Here the wait is served in 1 ms steps.
    fn flush(&mut self) -> Result<(), Error> {
        // A zero-timeout flush only tells librdkafka to send lingering batches now.
        let _ = self.producer.flush(Timeout::After(Duration::ZERO));
        let started = std::time::Instant::now();
        let deadline = self.drain.bound(FLUSH_TIMEOUT);
        loop {
            self.drain();
            let waiting = self.producer.in_flight_count();
            if waiting == 0 {
                return self.check_failures();
            }
            if std::time::Instant::now() >= deadline {
                self.check_failures()?;
                return Err(Error::kafka(
                    format!("flush {}", self.topic),
                    format!("{waiting} record(s) still unacknowledged after {:.1}s", started.elapsed().as_secs_f64()),
                ));
            }
            self.serve(Duration::from_millis(1));
        }
    }
}

/// Results to a Kafka topic, keyed by the query's key columns.
pub struct KafkaSink {
    out: Producing,
}

impl std::fmt::Debug for KafkaSink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KafkaSink").field("topic", &self.out.topic).finish()
    }
}

impl KafkaSink {
    pub fn new(
        config: ClientConfig,
        topic: &str,
        latency: Arc<LatencyHistogram>,
        drain: DrainDeadline,
    ) -> Result<Self, Error> {
        Ok(Self { out: Producing::new(config, topic, Some(latency), drain)? })
    }
}

impl Sink for KafkaSink {
    fn send(&mut self, rows: &EncodedRows, timestamps: &[i64]) -> Result<(), Error> {
        for i in 0..rows.len() {
            let ts = timestamps.get(i).copied().unwrap_or(0);
            let mut record =
                BaseRecord::<[u8], [u8], usize>::with_opaque_to(&self.out.topic, usize::try_from(ts).unwrap_or(0))
                    .payload(rows.value(i));
            if let Some(key) = rows.key(i) {
                record = record.key(key);
            }
            if ts > 0 {
                record = record.timestamp(ts);
            }
            self.out.send(record)?;
        }
        Ok(())
    }

    fn poll(&mut self) -> Result<(), Error> {
        self.out.poll()
    }

    fn flush(&mut self) -> Result<(), Error> {
        self.out.flush()
    }

    fn failed_deliveries(&self) -> u64 {
        self.out.producer.context().failed.load(Ordering::Relaxed)
    }
}

/// `linger.ms` of a repartition topic's producer (see [`ExchangeSink::new`]).
const EXCHANGE_LINGER_MS: &str = "5";

/// A stage's results to the repartition topic the next stage reads: a
/// batch's rows packed per partition Kafka's partitioner gives their keys,
/// each with its upstream partition and sequence number; markers to every
/// partition (see [`crate::runtime::exchange`]).
pub struct ExchangeSink {
    out: Producing,
    partitions: i32,
    packer: Packer,
    /// The marker being written (reused: no allocation per marker).
    frame: Vec<u8>,
}

impl std::fmt::Debug for ExchangeSink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ExchangeSink").field("topic", &self.out.topic).finish()
    }
}

impl ExchangeSink {
    pub fn new(mut config: ClientConfig, topic: &str, partitions: i32, drain: DrainDeadline) -> Result<Self, Error> {
        // Fuller batches than the sink's: every record crosses the broker
        // twice more than without a shuffle, and on a busy broker batching
        // is what it costs least to buy (measured in docs/benchmarks.md).
        crate::kafka::set_default(&mut config, "linger.ms", EXCHANGE_LINGER_MS);
        let partitions = partitions.max(1);
        Ok(Self {
            out: Producing::new(config, topic, None, drain)?,
            partitions,
            packer: Packer::new(usize::try_from(partitions).unwrap_or(1)),
            frame: Vec::new(),
        })
    }
}

impl ExchangeOutput for ExchangeSink {
    fn send(&mut self, from: u32, rows: &EncodedRows, seqs: &[i64], timestamps: &[i64]) -> Result<(), Error> {
        let out = &self.out;
        // The keys chose the partitions; they are not written (the rows
        // hold their columns), which saves their bytes twice over the broker.
        self.packer.pack(from, rows, seqs, timestamps, &mut |p, pack, ts| {
            let mut record = BaseRecord::<[u8], [u8], usize>::with_opaque_to(&out.topic, 0)
                .partition(i32::try_from(p).unwrap_or(0))
                .payload(pack);
            if ts > 0 {
                record = record.timestamp(ts);
            }
            out.send(record)
        })
    }

    fn mark(&mut self, marker: Frame<'_>) -> Result<(), Error> {
        self.frame.clear();
        marker.write(&mut self.frame);
        for p in 0..self.partitions {
            self.out.send(
                BaseRecord::<[u8], [u8], usize>::with_opaque_to(&self.out.topic, 0).partition(p).payload(&self.frame),
            )?;
        }
        Ok(())
    }

    fn poll(&mut self) -> Result<(), Error> {
        self.out.poll()
    }

    fn flush(&mut self) -> Result<(), Error> {
        self.out.flush()
    }
}

/// Dead letters to a Kafka topic: the original payload bytes untouched, the
/// reason and source coordinates in headers (as Kafka Connect does).
pub struct KafkaDeadLetter {
    out: Producing,
}

impl std::fmt::Debug for KafkaDeadLetter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KafkaDeadLetter").field("topic", &self.out.topic).finish()
    }
}

impl KafkaDeadLetter {
    pub fn new(config: ClientConfig, topic: &str, drain: DrainDeadline) -> Result<Self, Error> {
        Ok(Self { out: Producing::new(config, topic, None, drain)? })
    }
}

impl DeadLetterSink for KafkaDeadLetter {
    fn send(&mut self, r: &DeadLetter<'_>) -> Result<(), Error> {
        let (partition, offset) = (r.partition.to_string(), r.offset.to_string());
        let headers = OwnedHeaders::new()
            .insert(Header { key: "sluice.error.reason", value: Some(r.reason) })
            .insert(Header { key: "sluice.source.topic", value: Some(r.topic) })
            .insert(Header { key: "sluice.source.partition", value: Some(partition.as_str()) })
            .insert(Header { key: "sluice.source.offset", value: Some(offset.as_str()) });
        let record = BaseRecord::<[u8], [u8], usize>::with_opaque_to(&self.out.topic, 0)
            .payload(r.payload)
            .timestamp(r.timestamp_ms)
            .headers(headers);
        self.out.send(record)
    }

    fn poll(&mut self) -> Result<(), Error> {
        self.out.poll()
    }

    fn flush(&mut self) -> Result<(), Error> {
        self.out.flush()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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

    /// A flush during a drain gives up at the drain deadline, not after the
    /// 60 s flush timeout: the worker must checkpoint (or give up on it)
    /// and exit before the end of the pod's grace period.
    #[test]
    fn a_flush_with_the_broker_away_ends_at_the_drain_deadline() {
        let mut config = ClientConfig::new();
        config.set("bootstrap.servers", "127.0.0.1:1").set("message.timeout.ms", "600000");
        let drain = DrainDeadline::default();
        let mut p = Producing {
            producer: producer_config(config)
                .create_with_context(DeliveryContext {
                    latency: None,
                    clock_ms: AtomicI64::new(0),
                    failed: AtomicU64::new(0),
                    first_error: Mutex::new(None),
                })
                .unwrap(),
            topic: "t".into(),
            reported_failures: 0,
            drain: drain.clone(),
        };
        p.send(BaseRecord::with_opaque_to("t", 0).payload(&b"x"[..]).key(&b"k"[..])).unwrap();
        drain.start(Duration::from_millis(300));
        let started = std::time::Instant::now();
        let e = p.flush().unwrap_err();
        assert!(started.elapsed() < Duration::from_secs(5), "flush took {:?}", started.elapsed());
        assert!(e.to_string().contains("still unacknowledged"), "{e}");
    }
}
