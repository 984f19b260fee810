//! Every manifest in `manifests/examples/` runs on the cluster harness
//! (real API server, controller-manager and broker; the harness kubelet
//! runs the workers) and computes what it should — checked against results
//! computed here from the records the test produces. The quickstart's
//! bounded `datagen` source finishes and the job says so, its worker up and
//! never restarted (issue 12, finding 11: it used to exit, be restarted by
//! Kubernetes and generate everything again).

// Test code: failing loudly is its job.
#![allow(clippy::panic, clippy::expect_used, clippy::unwrap_used)]

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use serde_json::Value;
use sluice_e2e::jobs::{condition, get, produce_trades, wait_until};
use sluice_e2e::kafka::{self, Record};
use sluice_e2e::kube::{kubectl_ok, new_namespace};
use sluice_e2e::kubelet::kubelet;
use sluice_e2e::operator::start_operator;
use sluice_e2e::worker::write_temp;
use sluice_e2e::{harness, unique_name};

/// The example pointed at the harness broker, every topic it names
/// replaced by a fresh one (2 partitions), and one worker; returns the file
/// and the topic map (example's name → fresh name).
fn example(file: &str) -> (PathBuf, BTreeMap<String, String>) {
    let text = std::fs::read_to_string(harness().repo.join("manifests/examples").join(file)).unwrap();
    let mut topics = BTreeMap::new();
    let mut out = String::new();
    for line in text.lines() {
        let mut line = line.replace("kafka:9092", &harness().bootstrap).replace("  workers: 2", "  workers: 1");
        if let Some(at) = line.find("topic: ") {
            let rest = &line[at + 7..];
            let name: String = rest.chars().take_while(|c| c.is_alphanumeric() || *c == '-' || *c == '_').collect();
            let fresh = topics.entry(name.clone()).or_insert_with(|| {
                let t = unique_name(&name);
                kafka::create_topic(&t, 2);
                t
            });
            line = format!("{}topic: {fresh}{}", &line[..at], &rest[name.len()..]);
        }
        out.push_str(&line);
        out.push('\n');
    }
    if file == "enrich-orders.yaml" {
        // The orders come well after the job starts on a busy machine (the
        // other examples are checked first). Idle that long, the orders'
        // partitions would stop holding the watermark back, and the
        // customers' far-ahead row would make every order late, as
        // documented (docs/sql.md, "idleTimeoutMillis"): this job waits.
        out.push_str("  engine: { idleTimeoutMillis: 0 }\n");
    }
    (write_temp(file, &out), topics)
}

/// The records' JSON values, each with its Kafka key added as `_key`.
fn values(records: &[Record]) -> Vec<Value> {
    records
        .iter()
        .map(|r| {
            let mut v: Value = serde_json::from_slice(&r.value).unwrap();
            v["_key"] = Value::String(String::from_utf8_lossy(r.key.as_deref().unwrap_or_default()).into_owned());
            v
        })
        .collect()
}

/// Polls `topic` until `done` holds for its records (or fails after `timeout`).
fn wait_for(topic: &str, what: &str, timeout: Duration, done: impl Fn(&[Value]) -> bool) -> Vec<Value> {
    let deadline = Instant::now() + timeout;
    loop {
        let v = values(&kafka::consume(topic, usize::MAX, Duration::from_secs(2)));
        if done(&v) {
            return v;
        }
        assert!(Instant::now() < deadline, "{what}: not there after {timeout:?} ({} records)", v.len());
    }
}

/// (trader, symbol, count) of every 1-minute window of trades `range`, as a
/// sorted multiset (`produce_trades`: trade i at 1.7e12 + 900·i ms).
fn window_counts(range: std::ops::Range<u64>) -> Vec<(String, String, i64)> {
    let mut m: BTreeMap<(u64, u64, u64), i64> = BTreeMap::new();
    for i in range {
        let minute = (1_700_000_000_000 + i * 900) / 60_000;
        *m.entry((i % 20, i % 10, minute)).or_default() += 1;
    }
    let mut v: Vec<_> = m.into_iter().map(|((t, s, _), n)| (format!("TRADER{t}"), format!("SYM{s}"), n)).collect();
    v.sort();
    v
}

fn trader_symbol_count(v: &Value) -> (String, String, i64) {
    (
        v["trader_id"].as_str().unwrap().to_owned(),
        v["symbol"].as_str().unwrap().to_owned(),
        v["trade_count"].as_i64().unwrap(),
    )
}

#[test]
fn every_example_runs_on_the_cluster() {
    let ns = new_namespace("examples");
    let _kubelet = kubelet().manage(&ns);
    let _operator = start_operator(&ns, "op-a");
    let mut files: Vec<String> = std::fs::read_dir(harness().repo.join("manifests/examples"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|f| f.ends_with(".yaml"))
        .collect();
    files.sort();
    let mut topics = BTreeMap::new();
    for f in &files {
        let (file, t) = example(f);
        kubectl_ok(["apply", "-n", &ns, "-f", file.to_str().unwrap()]);
        topics.insert(f.trim_end_matches(".yaml").to_owned(), t);
    }
    let checked: BTreeSet<&str> =
        ["quickstart", "s0-pure-select", "s1-rows-window", "s2-group-by", "s2r-group-by-symbol", "s3a-tumbling"]
            .into_iter()
            .chain(["s3b-tumbling-emit-changes", "enrich-orders"])
            .collect();
    assert_eq!(topics.keys().map(String::as_str).collect::<BTreeSet<_>>(), checked, "a new example needs a check here");
    for name in topics.keys() {
        wait_until(&format!("{name} Ready"), Duration::from_secs(180), || {
            (condition(&get("sj", name, &ns)?, "Ready")?.0 == "True").then_some(())
        });
    }

    // S0: orders over 100 pass the filter, each exactly once.
    let s0 = &topics["s0-pure-select"];
    let orders: Vec<String> = (0..1_000)
        .map(|i| {
            format!(
                r#"{{"order_id":{i},"customer_id":{},"order_date":"2026-01-01","total_amount":{}.5}}"#,
                i % 7,
                i % 200
            )
        })
        .collect();
    let records: Vec<_> = orders.iter().map(|o| (None, o.as_bytes(), Some(i32::from(o.len() % 2 == 0)))).collect();
    kafka::produce(&s0["orders"], &records);
    let expected: BTreeSet<i64> = (0..1_000).filter(|i| i % 200 >= 100).collect();
    let got = wait_for(&s0["orders-over-100"], "S0 results", Duration::from_secs(90), |v| v.len() >= expected.len());
    let ids: BTreeSet<i64> = got.iter().map(|v| v["order_id"].as_i64().unwrap()).collect();
    assert_eq!((ids, got.len()), (expected.clone(), expected.len()), "S0: the orders over 100, once each");

    // S1: one row per input row, the moving figures over the symbol's rows so far.
    let s1 = &topics["s1-rows-window"];
    let ticks: Vec<(String, String, i32)> = (0..1_000u64)
        .map(|i| {
            let symbol = format!("SYM{}", i % 5);
            let v =
                format!(r#"{{"symbol":"{symbol}","price":{}.0,"timestamp":{}}}"#, i % 50, 1_700_000_000_000 + i * 10);
            (symbol, v, i32::try_from(i % 5 % 2).unwrap())
        })
        .collect();
    let records: Vec<_> = ticks.iter().map(|(k, v, p)| (Some(k.as_bytes()), v.as_bytes(), Some(*p))).collect();
    kafka::produce(&s1["market-data"], &records);
    let got = wait_for(&s1["market-data-moving"], "S1 results", Duration::from_secs(90), |v| v.len() >= 1_000);
    assert_eq!(got.len(), 1_000, "S1: one row per input row");
    // Symbol s's rows have prices s, s+5, …, s+45, then again: the first
    // ten rows' running minimum is s and their maximum grows by 5 a row.
    for v in &got {
        let s: i64 = v["symbol"].as_str().unwrap()[3..].parse().unwrap();
        assert_eq!(v["min_price"].as_f64().unwrap(), s as f64, "{v}");
    }

    // S2, S2r, S3a, S3b read the same trades (each job has its own topic).
    for job in ["s2-group-by", "s2r-group-by-symbol", "s3a-tumbling", "s3b-tumbling-emit-changes"] {
        produce_trades(&topics[job]["trades"], 0..2_000, 2);
    }
    let mut totals: BTreeMap<(String, String), i64> = BTreeMap::new();
    for i in 0..2_000u64 {
        *totals.entry((format!("TRADER{}", i % 20), format!("SYM{}", i % 10))).or_default() += 1;
    }
    wait_for(&topics["s2-group-by"]["trader-totals"], "S2 totals", Duration::from_secs(90), |v| {
        let mut last = BTreeMap::new();
        for r in v {
            let (t, s, n) = trader_symbol_count(r);
            last.insert((t, s), n);
        }
        last == totals
    });
    // S2r is keyed by symbol, not by the topic's trader: its rows cross the
    // job's repartition topic between its two stages.
    let per_symbol: BTreeMap<String, i64> = (0..10).map(|s| (format!("SYM{s}"), 200)).collect();
    wait_for(&topics["s2r-group-by-symbol"]["symbol-totals"], "S2r totals", Duration::from_secs(90), |v| {
        let last: BTreeMap<String, i64> = v
            .iter()
            .map(|r| (r["symbol"].as_str().unwrap_or_default().to_owned(), r["trade_count"].as_i64().unwrap_or(0)))
            .collect();
        last == per_symbol
    });
    // S3b emits every update: each window's last update is its full count.
    let expected = window_counts(0..2_000);
    wait_for(
        &topics["s3b-tumbling-emit-changes"]["trader-minutes-changes"],
        "S3b windows",
        Duration::from_secs(90),
        |v| {
            let mut last: BTreeMap<(String, String, String), i64> = BTreeMap::new();
            for r in v {
                let (t, s, n) = trader_symbol_count(r);
                // The query selects no window bounds; the record key tells windows apart.
                let e = last.entry((t, s, r["_key"].to_string())).or_default();
                *e = (*e).max(n);
            }
            let mut got: Vec<_> = last.into_iter().map(|((t, s, _), n)| (t, s, n)).collect();
            got.sort();
            got == expected
        },
    );
    // S3a emits each window once it closes: every row is a complete window.
    let got =
        wait_for(&topics["s3a-tumbling"]["trader-minutes"], "S3a windows", Duration::from_secs(90), |v| v.len() >= 100);
    let mut remaining = expected;
    for v in &got {
        let row = trader_symbol_count(v);
        let at =
            remaining.iter().position(|e| *e == row).unwrap_or_else(|| panic!("S3a: {v} is not a complete window"));
        remaining.remove(at);
    }

    // Enrichment: each order with its customer's row as of the order's
    // time (customers 10 and 11 have none); a record far ahead on every
    // partition of both topics moves the watermark past every order.
    let enrich = &topics["enrich-orders"];
    let customers: Vec<(String, String, i32)> = (0..10)
        .chain(100..102)
        .map(|c| {
            let at = if c < 100 { 1_700_000_000_000_i64 } else { 1_800_000_000_000 };
            (c.to_string(), format!(r#"{{"id":{c},"name":"c{c}","updated_at":{at}}}"#), c % 2)
        })
        .collect();
    let records: Vec<_> = customers.iter().map(|(k, v, p)| (Some(k.as_bytes()), v.as_bytes(), Some(*p))).collect();
    kafka::produce(&enrich["customers"], &records);
    let orders: Vec<(String, i32)> = (0..100)
        .chain(1_000..1_002)
        .map(|i: i64| {
            let at = if i < 1_000 { 1_700_000_100_000 + i * 100 } else { 1_800_000_000_000 };
            (format!(r#"{{"order_id":{i},"customer_id":{},"amount":1.5,"ts":{at}}}"#, i % 12), i32::from(i % 2 == 1))
        })
        .collect();
    let records: Vec<_> = orders.iter().map(|(v, p)| (None, v.as_bytes(), Some(*p))).collect();
    kafka::produce(&enrich["orders"], &records);
    let got = wait_for(&enrich["enriched-orders"], "enriched orders", Duration::from_secs(90), |v| {
        v.iter().filter(|r| r["order_id"].as_i64().is_some_and(|i| i < 1_000)).count() >= 100
    });
    let names: BTreeMap<i64, Value> = got
        .iter()
        .filter(|r| r["order_id"].as_i64().is_some_and(|i| i < 1_000))
        .map(|r| (r["order_id"].as_i64().unwrap(), r["name"].clone()))
        .collect();
    let expected: BTreeMap<i64, Value> = (0..100)
        .map(|i: i64| (i, if i % 12 < 10 { Value::String(format!("c{}", i % 12)) } else { Value::Null }))
        .collect();
    assert_eq!(names, expected, "every order once, with its customer's name or NULL");

    // The quickstart's datagen source is bounded: the job finishes, says
    // so, and its worker stays up rather than being restarted.
    let (_, reason, message) = wait_until("quickstart Finished", Duration::from_secs(180), || {
        condition(&get("sj", "quickstart", &ns)?, "Ready").filter(|c| c.1 == "Finished")
    });
    assert_eq!(reason, "Finished");
    assert!(message.contains("records in: 200000"), "{message}");
    std::thread::sleep(Duration::from_secs(3));
    let runs: Vec<_> = kubelet().history(&ns).into_iter().filter(|r| r.pod == "quickstart-0").collect();
    assert_eq!(runs.len(), 1, "the quickstart's worker ran once: {runs:?}");
    assert!(runs[0].stopped.is_none(), "and is still up");
    kubectl_ok(["delete", "namespace", &ns, "--wait=false"]);
}
