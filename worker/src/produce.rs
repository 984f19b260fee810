//! Filling a Kafka topic with a seed scenario's records (for tests and the
//! end-to-end benchmark). Records are keyed by the given columns, so a topic
//! filled this way is partitioned like a real keyed topic.

use std::fmt;
use std::time::{Duration, Instant};

use rdkafka::ClientConfig;
use rdkafka::error::KafkaError;
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use rdkafka::types::RDKafkaErrorCode;
use rdkafka::util::Timeout;
use sluice_crds::DatagenScenario;

use crate::Error;
use crate::source::{nexmark, nexmark_kind, scenario_key, write_record};

#[derive(Debug, Clone, Copy)]
pub struct ProduceSummary {
    pub records: u64,
    pub elapsed: Duration,
}

impl fmt::Display for ProduceSummary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let secs = self.elapsed.as_secs_f64().max(1e-9);
        #[allow(clippy::cast_precision_loss)]
        let rate = self.records as f64 / secs;
        write!(f, "produced {} records in {:.3}s ({:.0} records/s)", self.records, secs, rate)
    }
}

/// Event time (epoch ms) of record `i`, for `--timestamps event`.
fn event_time(scenario: DatagenScenario, i: u64) -> i64 {
    if let Some(kind) = nexmark_kind(scenario) {
        return nexmark::timestamp(nexmark::event_id(kind, i));
    }
    let i = i64::try_from(i).unwrap_or(i64::MAX);
    match scenario {
        DatagenScenario::MarketData => 1_700_000_000_000 + i * 1000,
        DatagenScenario::Trades => 1_700_000_000_000 + i * 900,
        _ => crate::clock::now_ms(),
    }
}

/// Produces records `start..start + records` of `scenario` to `topic`.
#[allow(clippy::too_many_arguments)]
pub fn produce(
    scenario: DatagenScenario,
    start: u64,
    records: u64,
    bootstrap: &str,
    topic: &str,
    key_columns: &[String],
    rate: u64,
    event_timestamps: bool,
) -> Result<ProduceSummary, Error> {
    // Paced (latency) runs batch no longer than Sluice's own sink does, so the
    // load generator's batching is not counted as Sluice's latency.
    let linger = if rate > 0 { "1" } else { "5" };
    let producer: BaseProducer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("linger.ms", linger)
        .set("batch.size", "1000000")
        .set("queue.buffering.max.messages", "1000000")
        .set("acks", "all")
        // Without idempotence a retried batch can land after later ones, and
        // a topic of in-order event times arrives out of order: a CI run once
        // saw 2978 of 100000 trades late in S3b because of it.
        .set("enable.idempotence", "true")
        .create()
        .map_err(|e| Error::kafka("create producer", e))?;
    // Connect and learn the partition leaders before the clock starts: the
    // first records of a paced run must not wait for the client's start-up.
    producer
        .client()
        .fetch_metadata(Some(topic), Timeout::After(Duration::from_secs(30)))
        .map_err(|e| Error::kafka(format!("metadata of {topic}"), e))?;
    let started = Instant::now();
    let (mut value, mut key, mut part) = (Vec::with_capacity(256), Vec::with_capacity(64), Vec::with_capacity(32));
    for n in 0..records {
        let i = start + n;
        if rate > 0 {
            #[allow(clippy::cast_precision_loss)]
            let due = Duration::from_secs_f64(n as f64 / rate as f64);
            if let Some(wait) = due.checked_sub(started.elapsed()) {
                producer.poll(wait);
            }
        }
        write_record(scenario, i, &mut value);
        key.clear();
        for (k, c) in key_columns.iter().enumerate() {
            if k > 0 {
                key.push(b'|');
            }
            if scenario_key(scenario, c, i, &mut part) {
                key.extend_from_slice(&part);
            }
        }
        let ts = if event_timestamps { event_time(scenario, i) } else { crate::clock::now_ms() };
        let mut record = BaseRecord::<[u8], [u8]>::to(topic).payload(&value).timestamp(ts);
        if !key_columns.is_empty() {
            record = record.key(&key);
        }
        loop {
            match producer.send(record) {
                Ok(()) => break,
                Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), r)) => {
                    record = r;
                    producer.poll(Duration::from_millis(5));
                }
                Err((e, _)) => return Err(Error::kafka(format!("produce to {topic}"), e)),
            }
        }
        producer.poll(Duration::ZERO);
    }
    producer.flush(Timeout::After(Duration::from_secs(120))).map_err(|e| Error::kafka(format!("flush {topic}"), e))?;
    Ok(ProduceSummary { records, elapsed: started.elapsed() })
}
