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
use crate::frame::{Frame, Packer};
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
    fn send(&mut self, rows: &EncodedRows, timestamps: &[i64], dead: &mut dyn DeadLetterSink) -> Result<u64, Error> {
        let mut rejected = 0;
        for i in 0..rows.len() {
            let ts = timestamps.get(i).copied().unwrap_or(0);
            let mut record =
                BaseRecord::<[u8], [u8], usize>::with_opaque_to(&self.topic, usize::try_from(ts).unwrap_or(0));
            // A deleted key is a tombstone: the key and no value, what a
            // compacted topic and an upsert consumer take as a deletion.
            if !rows.is_tombstone(i) {
                record = record.payload(rows.value(i));
            }
            if let Some(key) = rows.key(i) {
                record = record.key(key);
            }
            if ts > 0 {
                record = record.timestamp(ts);
            }
            match self.out.send(record) {
                Ok(()) => {}
                // Retried, it would fail the core again and again (and,
                // at least once, re-send what came before it each time).
                Err(e @ Error::RecordTooLarge { .. }) => {
                    // The dead-letter output logs it, bounded, when it is
                    // the log: no line per row here.
                    let reason = format!("result not written: {e}");
                    dead.send(&DeadLetter {
                        topic: &self.topic,
                        partition: -1,
                        offset: -1,
                        timestamp_ms: ts,
                        reason: &reason,
                        payload: rows.value(i),
                        key: rows.key(i),
                        headers: None,
                        stage: super::Stage::Produce,
                    })?;
                    rejected += 1;
                }
                Err(e) => return Err(e),
            }
        }
        Ok(rejected)
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
    fn send(
        &mut self,
        from: u32,
        rows: &EncodedRows,
        seqs: &[i64],
        timestamps: &[i64],
        dead: &mut dyn DeadLetterSink,
    ) -> Result<u64, Error> {
        let (out, topic) = (&self.out, &self.topic);
        let mut rejected = 0;
        // The keys chose the partitions; they are not written (the rows
        // hold their columns), which saves their bytes twice over the broker.
        self.packer.pack(from, rows, seqs, timestamps, &mut |p, pack, ts, single| {
            let partition = i32::try_from(p).unwrap_or(0);
            let mut record =
                BaseRecord::<[u8], [u8], usize>::with_opaque_to(topic, 0).partition(partition).payload(pack);
            if ts > 0 {
                record = record.timestamp(ts);
            }
            match (out.send(record), single) {
                // A row too large alone: retried, it would fail the core
                // again and again. Set aside, the next stage never sees
                // it (its number is skipped; a gap is no loss there).
                (Err(e @ Error::RecordTooLarge { .. }), Some(row)) => {
                    let reason = format!("intermediate row not written: {e}");
                    rejected += 1;
                    dead.send(&DeadLetter {
                        topic,
                        partition,
                        offset: -1,
                        timestamp_ms: ts,
                        reason: &reason,
                        payload: row,
                        key: None,
                        headers: None,
                        stage: super::Stage::Produce,
                    })
                }
                (sent, _) => sent,
            }
        })?;
        Ok(rejected)
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
    /// The job's name and this core's engine slot: Connect's connector
    /// name and task id headers.
    job: String,
    task: String,
}

impl std::fmt::Debug for KafkaDeadLetter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KafkaDeadLetter").field("topic", &self.topic).finish()
    }
}

impl KafkaDeadLetter {
    pub fn new(out: Arc<CoreProducer>, topic: &str, job: &str, task: u32) -> Result<Self, Error> {
        out.warm(topic)?;
        Ok(Self { out, topic: topic.to_owned(), job: job.to_owned(), task: task.to_string() })
    }
}

impl DeadLetterSink for KafkaDeadLetter {
    fn send(&mut self, r: &DeadLetter<'_>) -> Result<(), Error> {
        let (partition, offset) = (r.partition.to_string(), r.offset.to_string());
        // The record's own headers first, as they were; then Sluice's, and
        // Kafka Connect's dead-letter context headers (`errors.deadletter
        // queue.context.headers.enable`), which Connect tooling reads.
        let mut headers = OwnedHeaders::new();
        if let Some(original) = r.headers {
            for (name, value) in (0..original.count()).filter_map(|i| original.header(i)) {
                headers = headers.insert(Header { key: &String::from_utf8_lossy(name), value });
            }
        }
        let headers = headers
            .insert(Header { key: "sluice.error.reason", value: Some(r.reason) })
            .insert(Header { key: "sluice.source.topic", value: Some(r.topic) })
            .insert(Header { key: "sluice.source.partition", value: Some(partition.as_str()) })
            .insert(Header { key: "sluice.source.offset", value: Some(offset.as_str()) })
            .insert(Header { key: "__connect.errors.topic", value: Some(r.topic) })
            .insert(Header { key: "__connect.errors.partition", value: Some(partition.as_str()) })
            .insert(Header { key: "__connect.errors.offset", value: Some(offset.as_str()) })
            .insert(Header { key: "__connect.errors.connector.name", value: Some(self.job.as_str()) })
            .insert(Header { key: "__connect.errors.task.id", value: Some(self.task.as_str()) })
            .insert(Header { key: "__connect.errors.stage", value: Some(r.stage.connect_name()) })
            .insert(Header { key: "__connect.errors.class.name", value: Some("dev.sluice.worker") })
            .insert(Header { key: "__connect.errors.exception.class.name", value: Some(r.stage.error_class()) })
            .insert(Header { key: "__connect.errors.exception.message", value: Some(r.reason) });
        let mut record = BaseRecord::<[u8], [u8], usize>::with_opaque_to(&self.topic, 0)
            .payload(r.payload)
            .timestamp(r.timestamp_ms)
            .headers(headers);
        if let Some(key) = r.key {
            record = record.key(key);
        }
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
    // Test code: failing loudly is its job.
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;
    use crate::sink::DrainDeadline;
    use crate::sink::producer_config;

    #[derive(Default)]
    struct Collected(Vec<(String, Vec<u8>)>);

    impl DeadLetterSink for Collected {
        fn send(&mut self, r: &DeadLetter<'_>) -> Result<(), Error> {
            self.0.push((r.reason.to_owned(), r.payload.to_vec()));
            Ok(())
        }
    }

    /// A result larger than the producer's message.max.bytes is refused by
    /// the client whatever is retried: it used to fail the core, which
    /// restarted, met the same row and failed again, for good. It goes to
    /// the dead-letter output; the rows beside it are written.
    #[test]
    fn a_result_too_large_for_the_sink_is_dead_lettered_and_the_rest_go_on() {
        let mut config = ClientConfig::new();
        config.set("bootstrap.servers", "127.0.0.1:1").set("message.max.bytes", "1000");
        let out = CoreProducer::new(&producer_config(config), "out", None, DrainDeadline::default()).unwrap();
        let mut sink = KafkaSink { out, topic: "out".into() };
        let mut rows = EncodedRows::default();
        for value in [vec![b'a'; 10], vec![b'b'; 5_000], vec![b'c'; 10]] {
            rows.values.extend_from_slice(&value);
            rows.value_ends.push(rows.values.len());
        }
        let mut dead = Collected::default();
        assert_eq!(sink.send(&rows, &[1, 2, 3], &mut dead).unwrap(), 1);
        assert_eq!(dead.0.len(), 1);
        assert!(dead.0[0].0.contains("a record of 5000 bytes for topic out"), "{}", dead.0[0].0);
        assert_eq!(dead.0[0].1, vec![b'b'; 5_000]);
    }

    /// The same for a row on its way to the next stage: a row that would
    /// take a packed record past 64 KiB is packed alone, so one too large
    /// for the topic is dead-lettered as it was encoded, and the rows
    /// before and after it are written.
    #[test]
    fn an_intermediate_row_too_large_for_the_repartition_topic_is_dead_lettered_alone() {
        let mut config = ClientConfig::new();
        config.set("bootstrap.servers", "127.0.0.1:1").set("message.max.bytes", "70000");
        let out = CoreProducer::new(&producer_config(config), "x", None, DrainDeadline::default()).unwrap();
        let mut sink =
            ExchangeSink { out, topic: "x".into(), partitions: 1, packer: Packer::new(1), frame: Vec::new() };
        let mut rows = EncodedRows::default();
        for value in [vec![b'a'; 10], vec![b'b'; 100_000], vec![b'c'; 10]] {
            rows.values.extend_from_slice(&value);
            rows.value_ends.push(rows.values.len());
        }
        let mut dead = Collected::default();
        assert_eq!(sink.send(0, &rows, &[1, 2, 3], &[1, 2, 3], &mut dead).unwrap(), 1);
        assert_eq!(dead.0.len(), 1);
        assert!(dead.0[0].0.contains("intermediate row not written"), "{}", dead.0[0].0);
        assert!(dead.0[0].0.contains("a record of 100"), "{}", dead.0[0].0);
        assert_eq!(dead.0[0].1, vec![b'b'; 100_000], "the row alone");
    }
}
