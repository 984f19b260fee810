//! How a core should read its partitions: three rust-rdkafka/librdkafka
//! consume paths over the same topic, side by side in one run, each
//! consuming every record of every partition (assigned, no group
//! rebalancing) and touching every payload byte:
//!
//! * **StreamConsumer** — rust-rdkafka's async stream, one `await` per message;
//! * **BaseConsumer::poll** — one poll per message, no async;
//! * **batch queue** — Sluice's `BatchConsumer`: librdkafka's
//!   `rd_kafka_consume_batch_queue`, up to 4,096 messages per call.
//!
//! Needs a broker: `bash bench/kafka_clients.sh` starts the harness broker and runs
//! `cargo bench -p sluice-worker --bench consume` against it
//! (`SLUICE_KAFKA_BOOTSTRAP`; `SLUICE_BENCH_RECORDS`, default 2,000,000,
//! produced once into a 4-partition topic of the seeds' S2 trade records).

// A benchmark binary: a broken setup should stop it loudly.
#![allow(clippy::panic, clippy::unwrap_used, clippy::expect_used, clippy::cast_precision_loss, clippy::print_stdout)]

use std::time::{Duration, Instant};

use futures::StreamExt;
use rdkafka::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer, DefaultConsumerContext, StreamConsumer};
use rdkafka::message::Message;
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use rdkafka::{Offset, TopicPartitionList};
use sluice_crds::DatagenScenario;
use sluice_worker::source::{BatchConsumer, CONSUMER_DEFAULTS, write_record};

const PARTITIONS: i32 = 4;
const BATCH: usize = 4096;

fn config(bootstrap: &str) -> ClientConfig {
    let mut c = ClientConfig::new();
    c.set("bootstrap.servers", bootstrap)
        .set("group.id", "sluice-bench-consume")
        .set("enable.auto.commit", "false")
        .set("enable.partition.eof", "false");
    // The worker's own consumer settings. SLUICE_BENCH_PREFETCH=default:
    // librdkafka's own prefetch bounds (up to 100,000 messages / 64 MiB per
    // partition) instead of the worker's.
    let librdkafka_prefetch = std::env::var("SLUICE_BENCH_PREFETCH").as_deref() == Ok("default");
    for (k, v) in CONSUMER_DEFAULTS {
        if !(librdkafka_prefetch && k.starts_with("queued.")) {
            c.set(k, v);
        }
    }
    c
}

fn assignment(topic: &str) -> TopicPartitionList {
    let mut tpl = TopicPartitionList::new();
    for p in 0..PARTITIONS {
        tpl.add_partition_offset(topic, p, Offset::Beginning).unwrap();
    }
    tpl
}

/// Fills `topic` with `records` S2 trade records unless it already has them.
fn prepare(bootstrap: &str, topic: &str, records: u64) {
    let probe: BaseConsumer = config(bootstrap).create().unwrap();
    let have: i64 = (0..PARTITIONS)
        .map(|p| probe.fetch_watermarks(topic, p, Duration::from_secs(10)).map(|(lo, hi)| hi - lo).unwrap_or(0))
        .sum();
    if u64::try_from(have).unwrap_or(0) >= records {
        return;
    }
    let admin_config = config(bootstrap);
    sluice_worker::kafka::create_topic(&admin_config, topic, PARTITIONS, &[]).unwrap();
    let producer: BaseProducer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("linger.ms", "5")
        .set("batch.size", "1000000")
        .set("queue.buffering.max.messages", "1000000")
        .create()
        .unwrap();
    let mut buf = Vec::new();
    for i in 0..records {
        buf.clear();
        write_record(DatagenScenario::Trades, i, &mut buf);
        let p = i32::try_from(i % u64::from(PARTITIONS.unsigned_abs())).unwrap();
        let mut record = BaseRecord::<[u8], [u8]>::to(topic).partition(p).payload(&buf[..]);
        loop {
            match producer.send(record) {
                Ok(()) => break,
                Err((_, r)) => {
                    record = r;
                    producer.poll(Duration::from_millis(5));
                }
            }
        }
    }
    producer.flush(Duration::from_secs(120)).unwrap();
}

/// Records/s of one way to consume all `records`; `sum` of payload bytes
/// keeps the reads from being optimised away and checks all were seen.
fn timed(records: u64, run: impl FnOnce() -> (u64, u64)) -> (f64, u64) {
    let start = Instant::now();
    let (n, bytes) = run();
    assert_eq!(n, records, "every record consumed exactly once");
    (records as f64 / start.elapsed().as_secs_f64(), bytes)
}

fn touch(payload: &[u8]) -> u64 {
    payload.iter().map(|b| u64::from(*b)).sum()
}

/// rust-rdkafka's tokio runtime glue (Sluice builds rdkafka without its
/// `tokio` feature: the worker never uses the async consumer).
struct Tokio;

impl rdkafka::util::AsyncRuntime for Tokio {
    type Delay = tokio::time::Sleep;

    fn spawn<T>(task: T)
    where
        T: Future<Output = ()> + Send + 'static,
    {
        tokio::spawn(task);
    }

    fn delay_for(duration: Duration) -> Self::Delay {
        tokio::time::sleep(duration)
    }
}

fn stream_consumer(bootstrap: &str, topic: &str, records: u64) -> (u64, u64) {
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    runtime.block_on(async {
        let consumer: StreamConsumer<DefaultConsumerContext, Tokio> = config(bootstrap).create().unwrap();
        consumer.assign(&assignment(topic)).unwrap();
        let mut stream = consumer.stream();
        let (mut n, mut bytes) = (0, 0);
        while n < records {
            let m = stream.next().await.unwrap().unwrap();
            bytes += touch(m.payload().unwrap_or_default());
            n += 1;
        }
        (n, bytes)
    })
}

fn base_consumer(bootstrap: &str, topic: &str, records: u64) -> (u64, u64) {
    let consumer: BaseConsumer = config(bootstrap).create().unwrap();
    consumer.assign(&assignment(topic)).unwrap();
    let (mut n, mut bytes) = (0, 0);
    while n < records {
        if let Some(m) = consumer.poll(Duration::from_millis(100)) {
            bytes += touch(m.unwrap().payload().unwrap_or_default());
            n += 1;
        }
    }
    (n, bytes)
}

fn batch_queue(bootstrap: &str, topic: &str, records: u64) -> (u64, u64) {
    let consumer: BaseConsumer = config(bootstrap).create().unwrap();
    let partitions: Vec<i32> = (0..PARTITIONS).collect();
    let mut batched = BatchConsumer::new(consumer, &[(topic, &partitions[..])]).unwrap();
    batched.consumer().assign(&assignment(topic)).unwrap();
    let (mut n, mut bytes) = (0, 0);
    while n < records {
        let _ = batched.consumer().poll(Duration::ZERO);
        batched
            .consume(BATCH, Duration::from_millis(1), &mut |m| {
                bytes += touch(m.payload.unwrap_or_default());
                n += 1;
            })
            .unwrap();
    }
    (n, bytes)
}

/// One way to consume: (bootstrap, topic, records) → (records, payload checksum).
type Way = fn(&str, &str, u64) -> (u64, u64);

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    let bootstrap = std::env::var("SLUICE_KAFKA_BOOTSTRAP")
        .expect("SLUICE_KAFKA_BOOTSTRAP: this benchmark needs a broker; run it with bash bench/kafka_clients.sh");
    let records: u64 = std::env::var("SLUICE_BENCH_RECORDS").ok().and_then(|v| v.parse().ok()).unwrap_or(2_000_000);
    let topic = format!("bench-consume-{records}");
    prepare(&bootstrap, &topic, records);
    let ways: [(&str, Way); 3] =
        [("StreamConsumer", stream_consumer), ("BaseConsumer::poll", base_consumer), ("batch queue", batch_queue)];
    let mut rates = vec![Vec::new(); ways.len()];
    let mut checksum = None;
    for _round in 0..3 {
        for (i, (_, way)) in ways.iter().enumerate() {
            let (rate, bytes) = timed(records, || way(&bootstrap, &topic, records));
            assert_eq!(*checksum.get_or_insert(bytes), bytes, "every way reads the same bytes");
            rates[i].push(rate);
        }
    }
    let batch = median(rates[2].clone());
    println!("{records} records of {topic}, {PARTITIONS} partitions, median of 3 interleaved rounds\n");
    println!("| consume path | records/s | vs batch queue |\n|---|---:|---:|");
    for ((name, _), r) in ways.iter().zip(rates) {
        let m = median(r);
        println!("| {name} | {m:.0} | {:.2}× |", m / batch);
    }
}
