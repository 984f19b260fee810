//! Kafka helpers over rdkafka's synchronous clients.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use rdkafka::ClientConfig;
use rdkafka::admin::{AdminClient, AdminOptions, NewPartitions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::KafkaError;
use rdkafka::message::{Header, Headers, Message, OwnedHeaders};
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use rdkafka::types::RDKafkaErrorCode;
use rdkafka::util::Timeout;
use rdkafka::{Offset, TopicPartitionList};

use crate::harness;

/// A record read back from a topic.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Record {
    pub partition: i32,
    pub offset: i64,
    pub key: Option<Vec<u8>>,
    /// The value's bytes (empty for a tombstone: see `tombstone`).
    pub value: Vec<u8>,
    /// The record has no value at all: a deletion of its key.
    pub tombstone: bool,
    pub timestamp_ms: Option<i64>,
    pub headers: Vec<(String, Vec<u8>)>,
}

impl Record {
    /// The value of header `name`, as text.
    pub fn header(&self, name: &str) -> Option<String> {
        self.headers.iter().find(|(k, _)| k == name).map(|(_, v)| String::from_utf8_lossy(v).into_owned())
    }
}

fn config() -> ClientConfig {
    let mut c = ClientConfig::new();
    c.set("bootstrap.servers", &harness().bootstrap);
    c
}

/// Creates `topic` with `partitions` partitions and waits until it exists.
pub fn create_topic(topic: &str, partitions: i32) {
    create_topic_with(topic, partitions, &[]);
}

/// [`create_topic`] with topic configs (`cleanup.policy=compact` for a table).
pub fn create_topic_with(topic: &str, partitions: i32, configs: &[(&str, &str)]) {
    let admin: AdminClient<DefaultClientContext> = config().create().expect("admin client");
    let mut new = NewTopic::new(topic, partitions, TopicReplication::Fixed(1));
    for (k, v) in configs {
        new = new.set(k, v);
    }
    let result = futures_block_on(admin.create_topics([&new], &AdminOptions::new()));
    for r in result.expect("create_topics request") {
        if let Err((name, code)) = r {
            panic!("cannot create topic {name}: {code}");
        }
    }
    wait_for_partitions(topic, partitions);
}

/// Grows `topic` to `partitions` partitions (as `kafka-topics --alter
/// --partitions` would) and waits until they all have leaders.
pub fn add_partitions(topic: &str, partitions: i32) {
    let admin: AdminClient<DefaultClientContext> = config().create().expect("admin client");
    let grow = NewPartitions::new(topic, usize::try_from(partitions).expect("partition count"));
    let result = futures_block_on(admin.create_partitions([&grow], &AdminOptions::new()));
    for r in result.expect("create_partitions request") {
        if let Err((name, code)) = r {
            panic!("cannot grow topic {name}: {code}");
        }
    }
    wait_for_partitions(topic, partitions);
}

/// Waits until the broker's metadata shows `topic` with `partitions` partitions.
pub fn wait_for_partitions(topic: &str, partitions: i32) {
    let consumer: BaseConsumer = config().create().expect("consumer");
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Ok(md) = consumer.fetch_metadata(Some(topic), Duration::from_secs(5))
            && let Some(t) = md.topics().iter().find(|t| t.name() == topic)
            && t.error().is_none()
            && t.partitions().len() == usize::try_from(partitions).unwrap_or(0)
            && t.partitions().iter().all(|p| p.leader() >= 0)
        {
            return;
        }
        assert!(Instant::now() < deadline, "topic {topic} did not appear with {partitions} partitions");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// A record to produce: key, value and (when not left to the partitioner) partition.
pub type Outgoing<'a> = (Option<&'a [u8]>, &'a [u8], Option<i32>);

/// Produces `records` and waits for every delivery.
pub fn produce(topic: &str, records: &[Outgoing<'_>]) {
    send_all(
        topic,
        records.iter().map(|(key, value, partition)| {
            let mut rec = BaseRecord::<[u8], [u8]>::to(topic).payload(*value);
            if let Some(k) = key {
                rec = rec.key(*k);
            }
            if let Some(p) = partition {
                rec = rec.partition(*p);
            }
            rec
        }),
    );
}

/// A keyed record with its timestamp, to a partition; no value makes it a
/// tombstone (what deletes a key from a compacted topic).
pub type Timed<'a> = (&'a [u8], Option<&'a [u8]>, i32, i64);

/// Produces `records` in order and waits for every delivery.
pub fn produce_timed(topic: &str, records: &[Timed<'_>]) {
    send_all(
        topic,
        records.iter().map(|(key, value, partition, timestamp)| {
            let rec = BaseRecord::<[u8], [u8]>::to(topic).key(*key).partition(*partition).timestamp(*timestamp);
            match value {
                Some(v) => rec.payload(*v),
                None => rec,
            }
        }),
    );
}

/// A record with everything Kafka carries: key, value, partition,
/// timestamp and headers (a `None` header value is a null header).
pub type Full<'a> = (Option<&'a [u8]>, &'a [u8], i32, i64, &'a [(&'a str, Option<&'a [u8]>)]);

/// Produces `records` in order and waits for every delivery.
pub fn produce_full(topic: &str, records: &[Full<'_>]) {
    send_all(
        topic,
        records.iter().map(|(key, value, partition, timestamp, headers)| {
            let mut owned = OwnedHeaders::new_with_capacity(headers.len());
            for (name, value) in *headers {
                owned = owned.insert(Header { key: name, value: *value });
            }
            let rec = BaseRecord::<[u8], [u8]>::to(topic)
                .payload(*value)
                .partition(*partition)
                .timestamp(*timestamp)
                .headers(owned);
            match key {
                Some(k) => rec.key(*k),
                None => rec,
            }
        }),
    );
}

/// Sends every record, waiting out a full local queue, then flushes.
fn send_all<'a>(topic: &str, records: impl Iterator<Item = BaseRecord<'a, [u8], [u8]>>) {
    let producer: BaseProducer = config()
        .set("linger.ms", "5")
        // In order per partition even when a batch is retried: tests rely on
        // the event times they wrote arriving in the order they wrote them.
        .set("enable.idempotence", "true")
        .create()
        .expect("producer");
    for rec in records {
        let mut rec = Some(rec);
        while let Some(r) = rec.take() {
            if let Err((e, r)) = producer.send(r) {
                assert!(
                    matches!(e, KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull)),
                    "produce to {topic}: {e}"
                );
                producer.poll(Duration::from_millis(10));
                rec = Some(r);
            }
        }
    }
    producer.flush(Timeout::After(Duration::from_secs(120))).expect("flush");
}

/// Reads every partition of `topic` from the beginning until `expected`
/// records arrived or `timeout` passed, and returns what was read.
pub fn consume(topic: &str, expected: usize, timeout: Duration) -> Vec<Record> {
    read(topic, expected, None, timeout)
}

/// Reads every partition of `topic` from the beginning up to the end it
/// had when called (its high watermarks), and returns those records.
/// A fixed reading time cannot promise that on a loaded machine, where the
/// first fetch alone may take seconds; `timeout` only bounds a read that
/// cannot get there (it then returns what it read).
pub fn consume_all(topic: &str, timeout: Duration) -> Vec<Record> {
    let consumer: BaseConsumer = config().create().expect("consumer");
    let md = consumer.fetch_metadata(Some(topic), Duration::from_secs(10)).expect("metadata");
    let ends: HashMap<i32, i64> = md
        .topics()
        .iter()
        .filter(|t| t.name() == topic)
        .flat_map(|t| t.partitions())
        .filter_map(|p| {
            let (low, high) = consumer.fetch_watermarks(topic, p.id(), Duration::from_secs(10)).expect("watermarks");
            // An empty partition has nothing to wait for.
            (high > low).then_some((p.id(), high))
        })
        .collect();
    read(topic, usize::MAX, Some(&ends), timeout)
}

/// Reads `topic` from its beginning until `expected` records arrived, every
/// partition's reading position reached its offset in `ends` (if given), or
/// `timeout` passed.
fn read(topic: &str, expected: usize, ends: Option<&HashMap<i32, i64>>, timeout: Duration) -> Vec<Record> {
    let consumer: BaseConsumer = config()
        .set("group.id", crate::unique_name("reader"))
        .set("enable.auto.commit", "false")
        .create()
        .expect("consumer");
    let md = consumer.fetch_metadata(Some(topic), Duration::from_secs(10)).expect("metadata");
    let mut tpl = TopicPartitionList::new();
    for t in md.topics().iter().filter(|t| t.name() == topic) {
        for p in t.partitions() {
            tpl.add_partition_offset(topic, p.id(), Offset::Beginning).expect("tpl");
        }
    }
    consumer.assign(&tpl).expect("assign");
    // The next offset to read, per partition: after the last record read,
    // or the consumer's position (which also passes transaction markers).
    let mut next: HashMap<i32, i64> = HashMap::new();
    let reached = |next: &HashMap<i32, i64>, consumer: &BaseConsumer| {
        ends.is_some_and(|ends| {
            let positions = consumer.position().ok();
            ends.iter().all(|(p, end)| {
                let position = positions
                    .as_ref()
                    .and_then(|l| l.find_partition(topic, *p))
                    .and_then(|e| e.offset().to_raw())
                    .unwrap_or(0);
                next.get(p).copied().unwrap_or(0).max(position) >= *end
            })
        })
    };
    let deadline = Instant::now() + timeout;
    let mut out = Vec::with_capacity(expected.min(100_000));
    while out.len() < expected && Instant::now() < deadline && !reached(&next, &consumer) {
        if let Some(m) = consumer.poll(Duration::from_millis(100)) {
            // librdkafka reports a moment with no broker connection (an
            // idle connection the broker closed, a busy CI machine) as an
            // error event, then reconnects by itself: the reader goes on,
            // bounded by its deadline. Anything else fails the test.
            let m = match m {
                Err(KafkaError::MessageConsumption(
                    RDKafkaErrorCode::AllBrokersDown | RDKafkaErrorCode::BrokerTransportFailure,
                )) => continue,
                m => m.expect("consume"),
            };
            next.insert(m.partition(), m.offset() + 1);
            out.push(Record {
                partition: m.partition(),
                offset: m.offset(),
                key: m.key().map(<[u8]>::to_vec),
                value: m.payload().map(<[u8]>::to_vec).unwrap_or_default(),
                tombstone: m.payload().is_none(),
                timestamp_ms: m.timestamp().to_millis(),
                headers: m
                    .headers()
                    .map(|h| {
                        h.iter().map(|h| (h.key.to_owned(), h.value.map(<[u8]>::to_vec).unwrap_or_default())).collect()
                    })
                    .unwrap_or_default(),
            });
        }
    }
    out
}

/// Committed offsets of `group` on `topic`, per partition.
pub fn committed_offsets(group: &str, topic: &str, partitions: i32) -> HashMap<i32, i64> {
    committed_positions(group, topic, partitions).into_iter().map(|(p, (o, _))| (p, o)).collect()
}

/// Committed offsets and their commit metadata, per partition.
pub fn committed_positions(group: &str, topic: &str, partitions: i32) -> HashMap<i32, (i64, String)> {
    let consumer: BaseConsumer = config().set("group.id", group).create().expect("consumer");
    let mut tpl = TopicPartitionList::new();
    for p in 0..partitions {
        tpl.add_partition(topic, p);
    }
    let committed = consumer.committed_offsets(tpl, Duration::from_secs(10)).expect("committed offsets");
    committed
        .elements()
        .iter()
        .filter_map(|e| match e.offset() {
            Offset::Offset(o) => Some((e.partition(), (o, e.metadata().to_owned()))),
            _ => None,
        })
        .collect()
}

/// The names of the broker's topics that start with `prefix`.
pub fn topics_starting_with(prefix: &str) -> Vec<String> {
    let consumer: BaseConsumer = config().create().expect("consumer");
    let metadata = consumer.fetch_metadata(None, Duration::from_secs(10)).expect("metadata");
    metadata.topics().iter().map(|t| t.name().to_owned()).filter(|t| t.starts_with(prefix)).collect()
}

/// Whether the broker knows consumer group `group` (with committed
/// offsets or members; a deleted group is not listed, or listed `Dead`).
pub fn group_exists(group: &str) -> bool {
    let consumer: BaseConsumer = config().create().expect("consumer");
    let groups = consumer.fetch_group_list(Some(group), Duration::from_secs(10)).expect("group list");
    groups.groups().iter().any(|g| g.name() == group && g.state() != "Dead")
}

/// Runs a future to completion on the current thread. The admin client's
/// futures are driven by librdkafka's own threads, so a simple park/unpark
/// waker is all that is needed (and keeps tokio out of this crate).
fn futures_block_on<F: Future>(fut: F) -> F::Output {
    use std::sync::Arc;
    use std::task::{Context, Poll, Wake, Waker};
    struct Unpark(std::thread::Thread);
    impl Wake for Unpark {
        fn wake(self: Arc<Self>) {
            self.0.unpark();
        }
    }
    let waker = Waker::from(Arc::new(Unpark(std::thread::current())));
    let mut cx = Context::from_waker(&waker);
    let mut fut = std::pin::pin!(fut);
    loop {
        match fut.as_mut().poll(&mut cx) {
            Poll::Ready(v) => return v,
            Poll::Pending => std::thread::park_timeout(Duration::from_millis(50)),
        }
    }
}

/// The low and high watermark (first and next offset) of `topic`/`partition`.
pub fn watermarks(topic: &str, partition: i32) -> (i64, i64) {
    let consumer: BaseConsumer = config().create().expect("consumer");
    consumer.fetch_watermarks(topic, partition, Duration::from_secs(10)).expect("watermarks")
}
