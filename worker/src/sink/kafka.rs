//! Producing to Kafka: one `BaseProducer` per core, polled by that core.
//!
//! The delivery callback records the end-to-end latency of every
//! acknowledged record (record timestamp → ack) and remembers failures;
//! `flush` reports a failure as an error so the checkpoint never commits
//! offsets whose results were not written.

use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use rdkafka::error::KafkaError;
use rdkafka::message::{Header, Message, OwnedHeaders};
use rdkafka::producer::{BaseProducer, BaseRecord, DeliveryResult, Producer, ProducerContext};
use rdkafka::types::RDKafkaErrorCode;
use rdkafka::util::Timeout;
use rdkafka::{ClientConfig, ClientContext};

use super::{DeadLetter, DeadLetterSink, Sink};
use crate::Error;
use crate::encode::EncodedRows;
use crate::metrics::LatencyHistogram;

/// Delivery reports of one producer.
pub struct DeliveryContext {
    latency: Option<Arc<LatencyHistogram>>,
    failed: AtomicU64,
    first_error: Mutex<Option<String>>,
}

impl ClientContext for DeliveryContext {}

impl ProducerContext for DeliveryContext {
    type DeliveryOpaque = ();

    fn delivery(&self, result: &DeliveryResult<'_>, _: ()) {
        match result {
            Ok(message) => {
                if let (Some(h), Some(ts)) = (&self.latency, message.timestamp().to_millis()) {
                    h.observe_millis(crate::runtime::now_ms() - ts);
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
}

const FLUSH_TIMEOUT: Duration = Duration::from_secs(60);

impl Producing {
    fn new(mut config: ClientConfig, topic: &str, latency: Option<Arc<LatencyHistogram>>) -> Result<Self, Error> {
        // Low-latency defaults; any of them can be overridden in the sink's properties.
        for (k, v) in [
            ("linger.ms", "1"),
            ("batch.size", "1000000"),
            ("queue.buffering.max.messages", "1000000"),
            ("queue.buffering.max.kbytes", "1048576"),
            ("acks", "all"),
        ] {
            crate::kafka::set_default(&mut config, k, v);
        }
        let context = DeliveryContext { latency, failed: AtomicU64::new(0), first_error: Mutex::new(None) };
        let producer =
            config.create_with_context(context).map_err(|e| Error::kafka(format!("create producer for {topic}"), e))?;
        Ok(Self { producer, topic: topic.to_owned(), reported_failures: 0 })
    }

    /// Queues one record, serving delivery reports while the local queue is full.
    fn send(&self, record: BaseRecord<'_, [u8], [u8]>) -> Result<(), Error> {
        let mut record = record;
        loop {
            match self.producer.send(record) {
                Ok(()) => return Ok(()),
                Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), r)) => {
                    record = r;
                    self.producer.poll(Duration::from_millis(5));
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

    fn poll(&mut self) -> Result<(), Error> {
        self.producer.poll(Duration::ZERO);
        self.check_failures()
    }

    fn flush(&mut self) -> Result<(), Error> {
        self.producer
            .flush(Timeout::After(FLUSH_TIMEOUT))
            .map_err(|e| Error::kafka(format!("flush {}", self.topic), e))?;
        self.check_failures()
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
    pub fn new(config: ClientConfig, topic: &str, latency: Arc<LatencyHistogram>) -> Result<Self, Error> {
        Ok(Self { out: Producing::new(config, topic, Some(latency))? })
    }
}

impl Sink for KafkaSink {
    fn send(&mut self, rows: &EncodedRows, timestamps: &[i64]) -> Result<(), Error> {
        for i in 0..rows.len() {
            let mut record = BaseRecord::<[u8], [u8]>::to(&self.out.topic).payload(rows.value(i));
            if let Some(key) = rows.key(i) {
                record = record.key(key);
            }
            if let Some(ts) = timestamps.get(i) {
                record = record.timestamp(*ts);
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
    pub fn new(config: ClientConfig, topic: &str) -> Result<Self, Error> {
        Ok(Self { out: Producing::new(config, topic, None)? })
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
        let record =
            BaseRecord::<[u8], [u8]>::to(&self.out.topic).payload(r.payload).timestamp(r.timestamp_ms).headers(headers);
        self.out.send(record)
    }

    fn poll(&mut self) -> Result<(), Error> {
        self.out.poll()
    }

    fn flush(&mut self) -> Result<(), Error> {
        self.out.flush()
    }
}
