//! Writing to Kafka topics: the job's sink, a repartition topic, the dead
//! letters — each through a [`CoreProducer`] (its own, or the core's
//! transactional one when exactly once).

use std::sync::Arc;

use rdkafka::ClientConfig;
use rdkafka::message::{Header, OwnedHeaders};
use rdkafka::producer::BaseRecord;

use super::producer::CoreProducer;
use super::{DeadLetter, DeadLetterSink, ExchangeOutput, KeptFrame, Sink};
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
                        payload: Some(rows.value(i)),
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
    /// Per partition, whether this core reads it and takes its frames in
    /// process ([`ExchangeOutput::read_here`]), and the frames kept for it
    /// (each its timestamp, `i64`, its length, `u32`, little-endian, then
    /// its bytes).
    here: Vec<bool>,
    kept: Vec<Vec<u8>>,
}

/// Appends a frame kept for a partition read here (see `ExchangeSink::kept`).
fn keep(kept: &mut Vec<u8>, timestamp: i64, frame: &[u8]) {
    kept.extend_from_slice(&timestamp.to_le_bytes());
    kept.extend_from_slice(&u32::try_from(frame.len()).unwrap_or(u32::MAX).to_le_bytes());
    kept.extend_from_slice(frame);
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
        Ok(Self::unwarmed(out, topic, partitions))
    }

    /// Without first learning the topic's leaders (tests, with no broker).
    fn unwarmed(out: Arc<CoreProducer>, topic: &str, partitions: i32) -> Self {
        let partitions = partitions.max(1);
        Self {
            out,
            topic: topic.to_owned(),
            partitions,
            packer: Packer::new(usize::try_from(partitions).unwrap_or(1)),
            frame: Vec::new(),
            here: Vec::new(),
            kept: Vec::new(),
        }
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
        let (out, topic, here, kept) = (&self.out, &self.topic, &self.here, &mut self.kept);
        let mut rejected = 0;
        // The keys chose the partitions; they are not written (the rows
        // hold their columns), which saves their bytes twice over the broker.
        self.packer.pack(from, rows, seqs, timestamps, &mut |p, pack, ts, single| {
            if here.get(p).copied().unwrap_or(false) {
                keep(&mut kept[p], ts, pack);
                return Ok(());
            }
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
                        payload: Some(row),
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
            let i = usize::try_from(p).unwrap_or(0);
            if self.here.get(i).copied().unwrap_or(false) {
                keep(&mut self.kept[i], 0, &self.frame);
                continue;
            }
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

    fn read_here(&mut self, partitions: &[usize]) {
        let n = usize::try_from(self.partitions).unwrap_or(1);
        self.here.resize(n, false);
        self.kept.resize_with(n, Vec::new);
        for &p in partitions {
            if let Some(h) = self.here.get_mut(p) {
                *h = true;
            }
        }
    }

    fn take_local(&mut self, f: &mut KeptFrame<'_>) -> Result<(), Error> {
        for (p, kept) in self.kept.iter_mut().enumerate() {
            let mut at = 0;
            while at + 12 <= kept.len() {
                let mut ts = [0u8; 8];
                ts.copy_from_slice(&kept[at..at + 8]);
                let mut len = [0u8; 4];
                len.copy_from_slice(&kept[at + 8..at + 12]);
                let start = at + 12;
                let end = start.saturating_add(usize::try_from(u32::from_le_bytes(len)).unwrap_or(usize::MAX));
                let end = end.min(kept.len());
                f(p, i64::from_le_bytes(ts), &kept[start..end])?;
                at = end;
            }
            kept.clear();
        }
        Ok(())
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
        // A tombstone's dead letter is the tombstone: no value.
        let mut record =
            BaseRecord::<[u8], [u8], usize>::with_opaque_to(&self.topic, 0).timestamp(r.timestamp_ms).headers(headers);
        if let Some(payload) = r.payload {
            record = record.payload(payload);
        }
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
            self.0.push((r.reason.to_owned(), r.payload.unwrap_or_default().to_vec()));
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
        let mut sink = ExchangeSink::unwarmed(out, "x", 1);
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

    /// Frames for a partition read here are kept, in order and with their
    /// timestamps, for the core's own pipeline, and handed over once; the
    /// other partitions' go to the producer.
    #[test]
    fn frames_for_a_partition_read_here_are_kept_in_order_and_handed_over_once() {
        use crate::frame::parse_frame;
        let config = producer_config(ExchangeSink::config(ClientConfig::new()));
        let out = CoreProducer::new(&config, "x", None, DrainDeadline::default()).unwrap();
        let mut sink = ExchangeSink::unwarmed(out, "x", 2);
        let mut rows = EncodedRows::default();
        for value in [b"aa".as_slice(), b"b", b"ccc"] {
            rows.values.extend_from_slice(value);
            rows.value_ends.push(rows.values.len());
            rows.keys.extend_from_slice(b"k");
            rows.key_ends.push(rows.keys.len());
        }
        let here = usize::try_from(sluice_crds::partition_for_key(Some(b"k"), 2)).unwrap();
        // A partition the topic does not have is ignored.
        sink.read_here(&[here, 7]);
        let mut dead = Collected::default();
        sink.send(3, &rows, &[10, 11, 12], &[500, 400, 600], &mut dead).unwrap();
        sink.mark(Frame::Watermark { from: 3, at: 77 }).unwrap();
        let mut got = Vec::new();
        sink.take_local(&mut |p, ts, frame| {
            let f = parse_frame(frame).unwrap();
            let rows: Vec<(i64, Vec<u8>)> =
                f.rows().map(|r| r.map(|(seq, row)| (seq, row.to_vec())).unwrap()).collect();
            got.push((p, ts, f.from(), rows, matches!(f, Frame::Watermark { at: 77, .. })));
            Ok(())
        })
        .unwrap();
        let packed = vec![(10, b"aa".to_vec()), (11, b"b".to_vec()), (12, b"ccc".to_vec())];
        assert_eq!(got, [(here, 400, 3, packed, false), (here, 0, 3, vec![], true)]);
        let mut again = 0;
        sink.take_local(&mut |_, _, _| {
            again += 1;
            Ok(())
        })
        .unwrap();
        assert_eq!(again, 0, "handed over once");
        assert!(dead.0.is_empty());
    }
}
