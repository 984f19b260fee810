//! Helpers for tests that run jobs through the operator on the harness:
//! the examples pointed at fresh topics, the seed trades schema's records
//! and their independently computed counts, and waits on a job's status.

#![allow(clippy::unwrap_used)]

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use serde_json::Value;

use sluice_crds::{WorkerConfig, assign};

use crate::kafka::{self, Record};
use crate::kube::{kubectl, kubectl_ok};
use crate::kubelet::{ProcessRecord, kubelet};
use crate::worker::write_temp;
use crate::{harness, unique_name};

/// Topics of one job: source, sink and dead letters.
#[derive(Debug)]
pub struct Topics {
    pub trades: String,
    pub out: String,
    pub dlq: String,
}

pub fn topics(partitions: i32) -> Topics {
    let t = Topics { trades: unique_name("trades"), out: unique_name("totals"), dlq: unique_name("dlq") };
    kafka::create_topic(&t.trades, partitions);
    kafka::create_topic(&t.out, 2);
    kafka::create_topic(&t.dlq, 1);
    t
}

/// `manifests/examples/<file>`, pointed at the harness broker and these topics.
pub fn example(file: &str, t: &Topics, edit: impl Fn(String) -> String) -> PathBuf {
    let text = std::fs::read_to_string(harness().repo.join("manifests/examples").join(file)).unwrap();
    let text = text
        .replace("kafka:9092", &harness().bootstrap)
        .replace("topic: trades-dlq", &format!("topic: {}", t.dlq))
        .replace("topic: trades", &format!("topic: {}", t.trades))
        .replace("topic: trader-totals", &format!("topic: {}", t.out));
    write_temp(file, &edit(text))
}

pub fn get(kind: &str, name: &str, ns: &str) -> Option<Value> {
    let r = kubectl(["get", kind, name, "-n", ns, "-o", "json"]);
    r.success.then(|| serde_json::from_str(&r.stdout).unwrap())
}

pub fn condition(job: &Value, type_: &str) -> Option<(String, String, String)> {
    job["status"]["conditions"].as_array()?.iter().find(|c| c["type"] == type_).map(|c| {
        (
            c["status"].as_str().unwrap_or_default().to_owned(),
            c["reason"].as_str().unwrap_or_default().to_owned(),
            c["message"].as_str().unwrap_or_default().to_owned(),
        )
    })
}

pub fn wait_until<T>(what: &str, timeout: Duration, mut f: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(Instant::now() < deadline, "timed out after {timeout:?} waiting for {what}");
        std::thread::sleep(Duration::from_millis(250));
    }
}

/// Waits for a Warning event with `reason` in `ns`; returns the event list.
pub fn wait_for_warning(ns: &str, reason: &str) -> Value {
    wait_for_event(ns, "Warning", reason, Duration::from_secs(30))
}

/// Waits for an event of `type_` (Normal, Warning) with `reason` in `ns`;
/// returns the event list. Events stay, so unlike a condition that may
/// pass by between two polls, one cannot be missed.
pub fn wait_for_event(ns: &str, type_: &str, reason: &str, timeout: Duration) -> Value {
    wait_until(&format!("{type_} event {reason}"), timeout, || {
        let e = kubectl_ok(["get", "events", "-n", ns, "-o", "json"]);
        let v: Value = serde_json::from_str(&e).unwrap();
        v["items"].as_array().unwrap().iter().any(|e| e["reason"] == reason && e["type"] == type_).then_some(v)
    })
}

pub fn wait_ready(name: &str, ns: &str, workers: i64) -> Value {
    wait_until(&format!("{name} Ready with {workers} worker(s)"), Duration::from_secs(180), || {
        let job = get("sj", name, ns)?;
        let ready = condition(&job, "Ready")?;
        (ready.0 == "True" && job["status"]["readyWorkers"].as_i64() == Some(workers)).then_some(job)
    })
}

/// Trades `indices` of the examples' seed schema (trader_id, symbol, price,
/// quantity, trade_time) to `topic`, trader `i % 20` on partition
/// `trader % partitions`.
pub fn produce_trades(topic: &str, indices: impl IntoIterator<Item = u64>, partitions: u64) {
    let values: Vec<(String, String, i32)> = indices
        .into_iter()
        .map(|i| {
            let trader = i % 20;
            let v = format!(
                r#"{{"trader_id":"TRADER{trader}","symbol":"SYM{}","price":{}.0,"quantity":{},"trade_time":{}}}"#,
                i % 10,
                100 + i % 50,
                100 + i % 1000,
                1_700_000_000_000 + i * 900
            );
            (format!("TRADER{trader}"), v, i32::try_from(trader % partitions).unwrap())
        })
        .collect();
    let records: Vec<_> = values.iter().map(|(k, v, p)| (Some(k.as_bytes()), v.as_bytes(), Some(*p))).collect();
    kafka::produce(topic, &records);
}

/// trade_count per (trader_id, symbol) for trades `indices`, computed here.
pub fn expected_counts(indices: impl IntoIterator<Item = u64>) -> BTreeMap<(String, String), i64> {
    let mut m = BTreeMap::new();
    for i in indices {
        *m.entry((format!("TRADER{}", i % 20), format!("SYM{}", i % 10))).or_insert(0) += 1;
    }
    m
}

pub fn final_counts(records: &[Record]) -> BTreeMap<(String, String), i64> {
    let mut last: BTreeMap<Vec<u8>, Value> = BTreeMap::new();
    for r in records {
        last.insert(r.key.clone().unwrap_or_default(), serde_json::from_slice(&r.value).unwrap());
    }
    last.values()
        .map(|v| {
            (
                (v["trader_id"].as_str().unwrap().to_owned(), v["symbol"].as_str().unwrap().to_owned()),
                v["trade_count"].as_i64().unwrap(),
            )
        })
        .collect()
}

pub fn wait_for_counts(topic: &str, expected: &BTreeMap<(String, String), i64>, timeout: Duration) {
    let deadline = Instant::now() + timeout;
    loop {
        let got = final_counts(&kafka::consume(topic, usize::MAX, Duration::from_secs(2)));
        if &got == expected {
            return;
        }
        assert!(Instant::now() < deadline, "results never matched: {} groups, expected {}", got.len(), expected.len());
    }
}

/// A GROUP BY job (one worker, `partitions` source partitions) in `ns`
/// through the operator, Ready, with `records` trades counted.
pub fn group_by_job(ns: &str, partitions: i32, records: u64) -> Topics {
    let t = topics(partitions);
    let file = example("s2-group-by.yaml", &t, |s| s.replace("workers: 2", "workers: 1"));
    kubectl_ok(["apply", "-n", ns, "-f", file.to_str().unwrap()]);
    wait_ready("s2-group-by", ns, 1);
    produce_trades(&t.trades, 0..records, u64::try_from(partitions).unwrap());
    wait_for_counts(&t.out, &expected_counts(0..records), Duration::from_secs(90));
    t
}

/// Partitions a worker process owned: from the config it was started with
/// and its ordinal, by the shared assignment function.
pub fn owned(record: &ProcessRecord) -> BTreeSet<i32> {
    let config = WorkerConfig::from_yaml(&record.config).unwrap();
    let ordinal: i32 = record.pod.rsplit('-').next().unwrap().parse().unwrap();
    let a = assign(&config.partitions, config.spec.workers, config.spec.cores_per_worker);
    a.worker(ordinal)
        .map(|w| w.cores.iter().flat_map(|c| c.partitions[0].partitions.clone()).collect())
        .unwrap_or_default()
}

/// No two worker processes alive at the same time owned a partition in
/// common, and every worker that stopped drained cleanly (exit 0).
pub fn assert_no_overlap_and_clean_drains(ns: &str) {
    let history = kubelet().history(ns);
    let now = Instant::now();
    for (i, a) in history.iter().enumerate() {
        for b in &history[i + 1..] {
            let overlap = a.started < b.stopped.unwrap_or(now) && b.started < a.stopped.unwrap_or(now);
            if overlap {
                let shared: Vec<i32> = owned(a).intersection(&owned(b)).copied().collect();
                assert!(
                    shared.is_empty(),
                    "{} (pid {}) and {} (pid {}) both owned {shared:?}",
                    a.pod,
                    a.pid,
                    b.pod,
                    b.pid
                );
            }
        }
    }
    let unclean: Vec<String> = history
        .iter()
        .filter(|r| r.stopped.is_some() && r.exit_ok != Some(true))
        .map(|r| format!("{} (pid {})", r.pod, r.pid))
        .collect();
    assert!(unclean.is_empty(), "old workers drained cleanly; these did not: {unclean:?}");
}
