//! One producer per core, or one shared by the cores? Two threads each
//! produce the same records (keyed S0 result rows, ~90 bytes) to one topic,
//! side by side in one run:
//!
//! * **per core** — each thread owns a `BaseProducer` and serves its own
//!   delivery reports (what the worker does);
//! * **shared** — one `ThreadedProducer` (rust-rdkafka's shareable
//!   producer, with its own polling thread) used by both threads.
//!
//! Both use the worker's sink settings (`linger.ms=1`, `acks=all`, 32 K
//! message queue). Needs a broker: `bash bench/kafka_clients.sh` runs it
//! with the consume benchmark against the harness broker
//! (`SLUICE_KAFKA_BOOTSTRAP`; `SLUICE_BENCH_RECORDS` per thread, default
//! 1,000,000).

// A benchmark binary: a broken setup should stop it loudly.
#![allow(clippy::panic, clippy::unwrap_used, clippy::expect_used, clippy::cast_precision_loss, clippy::print_stdout)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use rdkafka::ClientConfig;
use rdkafka::error::KafkaError;
use rdkafka::producer::{BaseProducer, BaseRecord, DefaultProducerContext, Producer, ThreadedProducer};
use rdkafka::types::RDKafkaErrorCode;
use sluice_worker::sink::producer_config;

const THREADS: usize = 2;
const PARTITIONS: i32 = 4;

fn config(bootstrap: &str) -> ClientConfig {
    let mut c = ClientConfig::new();
    c.set("bootstrap.servers", bootstrap);
    producer_config(c)
}

/// The `i`th result row of S0 and its key.
fn row(i: u64, value: &mut Vec<u8>, key: &mut Vec<u8>) {
    value.clear();
    key.clear();
    let customer = i % 1000;
    value.extend_from_slice(
        format!(
            r#"{{"order_id":{i},"customer_id":{customer},"order_date":"2024-01-15","total_amount":{}.0}}"#,
            150 + i % 100
        )
        .as_bytes(),
    );
    key.extend_from_slice(i.to_string().as_bytes());
}

/// Sends every row of `rows`; `send` hands a record back when the local
/// queue is full (to be retried) and panics on any other error.
fn send_all<F>(rows: std::ops::Range<u64>, topic: &str, mut send: F)
where
    F: for<'r> FnMut(BaseRecord<'r, [u8], [u8]>) -> Option<BaseRecord<'r, [u8], [u8]>>,
{
    let (mut value, mut key) = (Vec::with_capacity(128), Vec::with_capacity(32));
    for i in rows {
        row(i, &mut value, &mut key);
        let mut record = BaseRecord::to(topic).payload(&value[..]).key(&key[..]);
        while let Some(r) = send(record) {
            record = r;
        }
    }
}

/// A record to send, and what a send returns.
type Record<'r> = BaseRecord<'r, [u8], [u8]>;
type Sent<'r> = Result<(), (KafkaError, Record<'r>)>;

/// A send's outcome as `send_all` wants it.
fn retry_if_full(sent: Sent<'_>) -> Option<Record<'_>> {
    match sent {
        Ok(()) => None,
        Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), r)) => Some(r),
        Err((e, _)) => panic!("produce: {e}"),
    }
}

fn per_core(bootstrap: &str, topic: &str, records: u64) -> f64 {
    let start = Instant::now();
    std::thread::scope(|s| {
        for t in 0..THREADS as u64 {
            s.spawn(move || {
                let producer: BaseProducer = config(bootstrap).create().unwrap();
                send_all(t * records..(t + 1) * records, topic, |r| {
                    let sent = retry_if_full(producer.send(r));
                    // Serve delivery reports as the worker does.
                    producer.poll(Duration::ZERO);
                    sent
                });
                producer.flush(Duration::from_secs(120)).unwrap();
            });
        }
    });
    (THREADS as u64 * records) as f64 / start.elapsed().as_secs_f64()
}

fn shared(bootstrap: &str, topic: &str, records: u64) -> f64 {
    let producer: Arc<ThreadedProducer<DefaultProducerContext>> = Arc::new(config(bootstrap).create().unwrap());
    let start = Instant::now();
    std::thread::scope(|s| {
        for t in 0..THREADS as u64 {
            let producer = Arc::clone(&producer);
            s.spawn(move || {
                send_all(t * records..(t + 1) * records, topic, |r| {
                    let sent = retry_if_full(producer.send(r));
                    if sent.is_some() {
                        // Full: the producer's own thread serves reports.
                        std::thread::sleep(Duration::from_micros(100));
                    }
                    sent
                });
            });
        }
    });
    producer.flush(Duration::from_secs(120)).unwrap();
    (THREADS as u64 * records) as f64 / start.elapsed().as_secs_f64()
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    let bootstrap = std::env::var("SLUICE_KAFKA_BOOTSTRAP")
        .expect("SLUICE_KAFKA_BOOTSTRAP: this benchmark needs a broker; run it with bash bench/kafka_clients.sh");
    let records: u64 = std::env::var("SLUICE_BENCH_RECORDS").ok().and_then(|v| v.parse().ok()).unwrap_or(1_000_000);
    let topic = format!("bench-produce-{}", std::process::id());
    let admin: ClientConfig = config(&bootstrap);
    sluice_worker::kafka::create_topic(&admin, &topic, PARTITIONS, &[]).unwrap();
    let (mut a, mut b) = (Vec::new(), Vec::new());
    for _round in 0..3 {
        a.push(per_core(&bootstrap, &topic, records));
        b.push(shared(&bootstrap, &topic, records));
    }
    let (a, b) = (median(a), median(b));
    println!(
        "{THREADS} threads × {records} records to {topic} ({PARTITIONS} partitions), median of 3 interleaved rounds\n"
    );
    println!("| producer | records/s | vs per core |\n|---|---:|---:|");
    println!("| one BaseProducer per core | {a:.0} | 1.00× |");
    println!("| one shared ThreadedProducer | {b:.0} | {:.2}× |", b / a);
}
