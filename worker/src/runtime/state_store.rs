//! Engine state checkpoints in a compacted Kafka topic.
//!
//! The state of source partition `p` is written to partition `p` of the
//! state topic — by the one core that owns `p`, so a snapshot's chunks are
//! contiguous — as chunks of at most 512 KiB keyed `<topic>/<p>/<chunk>`.
//! The offset commit of `p` then carries `sluice:v1:<first offset>+<chunks>`
//! as metadata, so offsets and the state they belong to are committed
//! atomically together. Compaction keeps the newest snapshot of every key.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::Message;
use rdkafka::producer::{BaseProducer, BaseRecord, DeliveryResult, Producer, ProducerContext};
use rdkafka::util::Timeout;
use rdkafka::{ClientConfig, ClientContext, Offset, TopicPartitionList};

use crate::Error;

const CHUNK: usize = 512 * 1024;
const PREFIX: &str = "sluice:v1:";

/// Records the offsets at which chunks were written.
struct ChunkOffsets {
    written: Mutex<Vec<(i32, usize, i64)>>,
    failed: Mutex<Option<String>>,
}

impl ClientContext for ChunkOffsets {}

impl ProducerContext for ChunkOffsets {
    type DeliveryOpaque = Box<usize>;

    fn delivery(&self, result: &DeliveryResult<'_>, chunk: Box<usize>) {
        match result {
            Ok(m) => {
                if let Ok(mut w) = self.written.lock() {
                    w.push((m.partition(), *chunk, m.offset()));
                }
            }
            Err((e, _)) => {
                if let Ok(mut f) = self.failed.lock() {
                    f.get_or_insert_with(|| e.to_string());
                }
            }
        }
    }
}

pub struct StateStore {
    producer: BaseProducer<ChunkOffsets>,
    reader_config: ClientConfig,
    topic: String,
    source_topic: String,
}

impl std::fmt::Debug for StateStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StateStore").field("topic", &self.topic).finish()
    }
}

impl StateStore {
    /// Opens (creating if needed) the state topic with at least `partitions` partitions.
    pub fn open(config: &ClientConfig, topic: &str, source_topic: &str, partitions: i32) -> Result<Self, Error> {
        crate::kafka::ensure_topic(
            config,
            topic,
            partitions,
            &[("cleanup.policy", "compact"), ("max.message.bytes", "1048576"), ("min.compaction.lag.ms", "60000")],
        )?;
        let mut producer_config = config.clone();
        producer_config.set("acks", "all").set("linger.ms", "0").set("enable.idempotence", "true");
        let producer = producer_config
            .create_with_context(ChunkOffsets { written: Mutex::new(Vec::new()), failed: Mutex::new(None) })
            .map_err(|e| Error::kafka("create state producer", e))?;
        let mut reader_config = config.clone();
        reader_config.set("group.id", "sluice-state-reader").set("enable.auto.commit", "false");
        Ok(Self { producer, reader_config, topic: topic.to_owned(), source_topic: source_topic.to_owned() })
    }

    fn key(&self, partition: i32, chunk: usize) -> String {
        format!("{}/{partition}/{chunk}", self.source_topic)
    }

    /// Writes snapshots (source partition, bytes) and returns each one's
    /// commit metadata once every chunk is acknowledged.
    pub fn save(&mut self, snapshots: &[(i32, Vec<u8>)]) -> Result<Vec<(i32, String)>, Error> {
        if let Ok(mut w) = self.producer.context().written.lock() {
            w.clear();
        }
        let mut expected = Vec::with_capacity(snapshots.len());
        for (partition, bytes) in snapshots {
            let chunks: Vec<&[u8]> = if bytes.is_empty() { vec![&[][..]] } else { bytes.chunks(CHUNK).collect() };
            for (i, chunk) in chunks.iter().enumerate() {
                let key = self.key(*partition, i);
                let mut record = BaseRecord::with_opaque_to(&self.topic, Box::new(i))
                    .partition(*partition)
                    .key(key.as_bytes())
                    .payload(*chunk);
                loop {
                    match self.producer.send(record) {
                        Ok(()) => break,
                        Err((e, r)) if e.rdkafka_error_code() == Some(rdkafka::types::RDKafkaErrorCode::QueueFull) => {
                            record = r;
                            self.producer.poll(Duration::from_millis(5));
                        }
                        Err((e, _)) => return Err(Error::kafka(format!("write state to {}", self.topic), e)),
                    }
                }
            }
            expected.push((*partition, chunks.len()));
        }
        self.producer.flush(Timeout::After(Duration::from_secs(60))).map_err(|e| Error::kafka("flush state", e))?;
        if let Some(e) = self.producer.context().failed.lock().ok().and_then(|mut f| f.take()) {
            return Err(Error::Checkpoint(format!("state write to {} failed: {e}", self.topic)));
        }
        let written = self.producer.context().written.lock().map(|w| w.clone()).unwrap_or_default();
        expected
            .into_iter()
            .map(|(partition, chunks)| {
                let first = written
                    .iter()
                    .filter(|(p, c, _)| *p == partition && *c == 0)
                    .map(|(_, _, o)| *o)
                    .max()
                    .ok_or_else(|| {
                        Error::Checkpoint(format!("no acknowledgement for state of partition {partition}"))
                    })?;
                Ok((partition, format!("{PREFIX}{first}+{chunks}")))
            })
            .collect()
    }

    /// Reads the snapshot a commit's metadata points to, if it points to one.
    pub fn load(&self, partition: i32, metadata: &str) -> Result<Option<Vec<u8>>, Error> {
        let Some(rest) = metadata.strip_prefix(PREFIX) else {
            return Ok(None);
        };
        let (first, chunks) = rest
            .split_once('+')
            .and_then(|(a, b)| Some((a.parse::<i64>().ok()?, b.parse::<usize>().ok()?)))
            .ok_or_else(|| Error::Checkpoint(format!("unreadable checkpoint metadata {metadata:?}")))?;
        let consumer: BaseConsumer = self.reader_config.create().map_err(|e| Error::kafka("create state reader", e))?;
        let mut tpl = TopicPartitionList::new();
        tpl.add_partition_offset(&self.topic, partition, Offset::Offset(first))
            .map_err(|e| Error::kafka("state reader", e))?;
        consumer.assign(&tpl).map_err(|e| Error::kafka("assign state reader", e))?;
        let mut bytes = Vec::new();
        let mut next = 0usize;
        let deadline = Instant::now() + Duration::from_secs(60);
        while next < chunks {
            if Instant::now() > deadline {
                return Err(Error::Checkpoint(format!(
                    "timed out reading state of partition {partition} from {} at offset {first}",
                    self.topic
                )));
            }
            let Some(m) = consumer.poll(Duration::from_millis(200)) else { continue };
            let m = m.map_err(|e| Error::kafka("read state", e))?;
            if m.key() == Some(self.key(partition, next).as_bytes()) {
                bytes.extend_from_slice(m.payload().unwrap_or_default());
                next += 1;
            }
        }
        Ok(Some(bytes))
    }
}
