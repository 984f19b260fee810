//! Writing to Kafka topics: the job's sink, a repartition topic, the dead
//! letters — each through a [`CoreProducer`] (its own, or the core's
//! transactional one when exactly once).

use std::sync::Arc;

use rdkafka::ClientConfig;
use rdkafka::message::{Header, OwnedHeaders};
use rdkafka::producer::BaseRecord;

use super::producer::CoreProducer;
use super::{DeadLetter, DeadLetterSink, ExchangeOutput, Sink};
use crate::Error;
use crate::runtime::exchange::{Frame, Packer};
use sluice_formats::encode::EncodedRows;

/// Results to a Kafka topic, keyed by the query's key columns.
pub struct KafkaSink {
    out: Arc<CoreProducer>,
    topic: String,
}

impl std::fmt::Debug for KafkaSink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KafkaSink").field("topic", &self.topic).finish()
    }
}

impl KafkaSink {
    pub fn new(out: Arc<CoreProducer>, topic: &str) -> Result<Self, Error> {
        out.warm(topic)?;
        Ok(Self { out, topic: topic.to_owned() })
    }
}

impl Sink for KafkaSink {
    fn send(&mut self, rows: &EncodedRows, timestamps: &[i64]) -> Result<(), Error> {
        for i in 0..rows.len() {
            let ts = timestamps.get(i).copied().unwrap_or(0);
            let mut record =
                BaseRecord::<[u8], [u8], usize>::with_opaque_to(&self.topic, usize::try_from(ts).unwrap_or(0))
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
        self.out.failed_deliveries()
    }
}

/// `linger.ms` of a repartition topic's producer (see [`ExchangeSink::new`]).
const EXCHANGE_LINGER_MS: &str = "5";

/// A stage's results to the repartition topic the next stage reads: a
/// batch's rows packed per partition Kafka's partitioner gives their keys,
/// each with its upstream partition and sequence number; markers to every
/// partition (see [`crate::runtime::exchange`]).
pub struct ExchangeSink {
    out: Arc<CoreProducer>,
    topic: String,
    partitions: i32,
    packer: Packer,
    /// The marker being written (reused: no allocation per marker).
    frame: Vec<u8>,
}

impl std::fmt::Debug for ExchangeSink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ExchangeSink").field("topic", &self.topic).finish()
    }
}

impl ExchangeSink {
    /// A repartition topic's producer settings: fuller batches than the
    /// sink's, since every record crosses the broker twice more than
    /// without a shuffle, and on a busy broker batching is what it costs
    /// least to buy (measured in docs/benchmarks.md).
    pub fn config(mut config: ClientConfig) -> ClientConfig {
        crate::kafka::set_default(&mut config, "linger.ms", EXCHANGE_LINGER_MS);
        config
    }

    pub fn new(out: Arc<CoreProducer>, topic: &str, partitions: i32) -> Result<Self, Error> {
        out.warm(topic)?;
        let partitions = partitions.max(1);
        Ok(Self {
            out,
            topic: topic.to_owned(),
            partitions,
            packer: Packer::new(usize::try_from(partitions).unwrap_or(1)),
            frame: Vec::new(),
        })
    }
}

impl ExchangeOutput for ExchangeSink {
    fn send(&mut self, from: u32, rows: &EncodedRows, seqs: &[i64], timestamps: &[i64]) -> Result<(), Error> {
        let (out, topic) = (&self.out, &self.topic);
        // The keys chose the partitions; they are not written (the rows
        // hold their columns), which saves their bytes twice over the broker.
        self.packer.pack(from, rows, seqs, timestamps, &mut |p, pack, ts| {
            let mut record = BaseRecord::<[u8], [u8], usize>::with_opaque_to(topic, 0)
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
                BaseRecord::<[u8], [u8], usize>::with_opaque_to(&self.topic, 0).partition(p).payload(&self.frame),
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
    out: Arc<CoreProducer>,
    topic: String,
}

impl std::fmt::Debug for KafkaDeadLetter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KafkaDeadLetter").field("topic", &self.topic).finish()
    }
}

impl KafkaDeadLetter {
    pub fn new(out: Arc<CoreProducer>, topic: &str) -> Result<Self, Error> {
        out.warm(topic)?;
        Ok(Self { out, topic: topic.to_owned() })
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
        let record = BaseRecord::<[u8], [u8], usize>::with_opaque_to(&self.topic, 0)
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
