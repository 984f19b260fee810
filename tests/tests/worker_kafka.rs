//! The worker against the real broker: results over several partitions and
//! cores, exclusive partition ownership, at-least-once delivery across a
//! `kill -9`, dead letters, and draining on SIGTERM.
//!
//! Expected results are computed here, in plain Rust over the records the
//! test produces — never taken from Sluice's own output.

// Test code: failing loudly is its job.
#![allow(clippy::panic, clippy::expect_used, clippy::unwrap_used)]

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::Path;
use std::time::{Duration, Instant};

use sluice_crds::{SourcePartitions, assign};
use sluice_e2e::jobs::wait_until;
use sluice_e2e::kafka::{self, Record};
use sluice_e2e::worker::{Worker, config_file, metric_values, worker_config, write_temp};
use sluice_e2e::{copy_dir, harness, unique_name};

/// A trade of the test's own data set; record `i` is a pure function of `i`.
#[derive(Debug, Clone, Copy)]
struct Trade {
    trader: u64,
    symbol: u64,
    price: f64,
    qty: i64,
    ts: i64,
}

fn trade(i: u64) -> Trade {
    Trade {
        trader: i % 8,
        symbol: i % 5,
        price: 10.0 + (i % 13) as f64 * 0.5,
        qty: 1 + (i % 7) as i64,
        ts: 1_700_000_000_000 + i as i64 * 100,
    }
}

fn trade_json(t: &Trade) -> String {
    format!(
        r#"{{"trader":"T{}","symbol":"S{}","price":{},"qty":{},"ts":{}}}"#,
        t.trader, t.symbol, t.price, t.qty, t.ts
    )
}

/// Produces trades `range` to `topic`, keyed by trader, partition trader mod `partitions`.
fn produce_trades(topic: &str, range: std::ops::Range<u64>, partitions: u64) {
    let values: Vec<(String, String, i32)> = range
        .map(|i| {
            let t = trade(i);
            (format!("T{}", t.trader), trade_json(&t), i32::try_from(t.trader % partitions).unwrap())
        })
        .collect();
    let records: Vec<_> = values.iter().map(|(k, v, p)| (Some(k.as_bytes()), v.as_bytes(), Some(*p))).collect();
    kafka::produce(topic, &records);
}

/// Produces trades 0‥`records` to the 4-partition `topic` in chunks of
/// `chunk`, `pause` apart, from a thread: input still arriving while a
/// fault is injected.
fn produce_trades_slowly_to(topic: &str, records: u64, chunk: u64, pause: Duration) -> Producer {
    let topic = topic.to_owned();
    Producer::spawn(records / chunk, pause, move |c| produce_trades(&topic, c * chunk..(c + 1) * chunk, 4))
}

/// Input arriving in chunks on a thread of its own while a test injects
/// faults. The last chunk waits for [`Producer::finish`]: however slow the
/// machine makes a kill and restart, input still arrives after it (on a
/// fixed schedule alone, a loaded machine could let the producer end
/// before the fault, and the test check that it had not).
struct Producer {
    thread: std::thread::JoinHandle<()>,
    release: std::sync::mpsc::Sender<()>,
}

impl Producer {
    /// Sends chunks `0..chunks` with `send`, `pause` after each.
    fn spawn(chunks: u64, pause: Duration, mut send: impl FnMut(u64) + Send + 'static) -> Self {
        let (release, gate) = std::sync::mpsc::channel::<()>();
        let thread = std::thread::spawn(move || {
            for c in 0..chunks {
                if c + 1 == chunks {
                    // A test that failed first drops the sender: no wait.
                    let _ = gate.recv_timeout(Duration::from_secs(300));
                }
                send(c);
                std::thread::sleep(pause);
            }
        });
        Self { thread, release }
    }

    /// Whether input is still to come (its last chunk at least).
    fn still_arriving(&self) -> bool {
        !self.thread.is_finished()
    }

    /// Lets the last chunk go and waits until it is written.
    fn finish(self) {
        let _ = self.release.send(());
        self.thread.join().unwrap();
    }
}

fn manifest(name: &str, sql: &str, topic: &str, out: &str, extra: &str) -> String {
    let bootstrap = &harness().bootstrap;
    format!(
        r#"apiVersion: sluice.dev/v1alpha1
kind: StreamJob
metadata:
  name: {name}
spec:
  sql: |
    {sql}
  sources:
    - name: trades
      kafka: {{ bootstrapServers: "{bootstrap}", topic: {topic} }}
      schema:
        columns:
          - {{ name: trader, type: string, required: true }}
          - {{ name: symbol, type: string, required: true }}
          - {{ name: price, type: double, required: true }}
          - {{ name: qty, type: bigint, required: true }}
          - {{ name: ts, type: timestamp, required: true }}
      eventTime: {{ column: ts, watermarkDelayMillis: 1000 }}
      partitionKey: [trader]
  sink:
    kafka: {{ bootstrapServers: "{bootstrap}", topic: {out} }}
  engine:
    checkpointIntervalMillis: 200
{extra}"#
    )
}

/// The last record per key (the worker keys results by the GROUP BY key).
fn final_per_key(records: &[Record]) -> BTreeMap<String, serde_json::Value> {
    let mut out = BTreeMap::new();
    for r in records {
        let key = String::from_utf8(r.key.clone().unwrap_or_default()).unwrap();
        out.insert(key, serde_json::from_slice(&r.value).unwrap());
    }
    out
}

/// The last `(total, traders)` per symbol of an aggregate over an updating
/// aggregate (`SELECT symbol, SUM(volume) AS total, COUNT(*) AS traders …`),
/// the flush records' symbol F left out (one trader on every partition is
/// against the source's partitionKey).
fn symbol_totals(records: &[Record]) -> BTreeMap<String, (i64, i64)> {
    final_per_key(records)
        .values()
        .filter(|v| v["symbol"] != "F")
        .map(|v| {
            let symbol = v["symbol"].as_str().unwrap().to_owned();
            (symbol, (v["total"].as_i64().unwrap(), v["traders"].as_i64().unwrap()))
        })
        .collect()
}

/// Count, quantity and value per (trader, symbol), computed independently.
fn expected_totals(range: std::ops::Range<u64>) -> BTreeMap<(String, String), (i64, i64, f64)> {
    let mut m: BTreeMap<(String, String), (i64, i64, f64)> = BTreeMap::new();
    for i in range {
        let t = trade(i);
        let e = m.entry((format!("T{}", t.trader), format!("S{}", t.symbol))).or_default();
        e.0 += 1;
        e.1 += t.qty;
        e.2 += t.price * t.qty as f64;
    }
    m
}

fn assert_totals(got: &BTreeMap<String, serde_json::Value>, expected: &BTreeMap<(String, String), (i64, i64, f64)>) {
    let got: BTreeMap<(String, String), (i64, i64, f64)> = got
        .values()
        .map(|v| {
            (
                (v["trader"].as_str().unwrap().to_owned(), v["symbol"].as_str().unwrap().to_owned()),
                (v["n"].as_i64().unwrap(), v["qty"].as_i64().unwrap(), v["value"].as_f64().unwrap()),
            )
        })
        .collect();
    assert_eq!(got.len(), expected.len(), "groups");
    for (k, (n, q, value)) in expected {
        let (gn, gq, gv) = got.get(k).unwrap_or_else(|| panic!("no result for {k:?}"));
        assert_eq!((gn, gq), (n, q), "count and quantity of {k:?}");
        assert!((gv - value).abs() < 1e-6 * value.abs().max(1.0), "value of {k:?}: {gv} vs {value}");
    }
}

const GROUP_BY: &str = "SELECT trader, symbol, COUNT(*) AS n, SUM(qty) AS qty, SUM(price * qty) AS value FROM trades GROUP BY trader, symbol";

/// Polls the sink until `done(records)` or the timeout.
fn wait_for_output(topic: &str, timeout: Duration, done: impl Fn(&[Record]) -> bool) -> Vec<Record> {
    let deadline = Instant::now() + timeout;
    loop {
        let records = kafka::consume(topic, usize::MAX, Duration::from_secs(2));
        if done(&records) || Instant::now() > deadline {
            return records;
        }
    }
}

#[test]
fn group_by_over_four_partitions_and_two_cores_matches_independent_totals() {
    let (topic, out) = (unique_name("trades"), unique_name("totals"));
    kafka::create_topic(&topic, 4);
    kafka::create_topic(&out, 2);
    produce_trades(&topic, 0..20_000, 4);
    let m = write_temp("job.yaml", &manifest(&unique_name("gb"), GROUP_BY, &topic, &out, ""));
    let mut w = Worker::run(&m, &["--bounded", "--cores", "2", "--group", &unique_name("g")]);
    let status = w.wait(Duration::from_secs(120));
    assert!(status.success(), "worker failed:\n{}", w.log());
    assert!(w.log().contains("records in: 20000"), "{}", w.log());
    let results = kafka::consume_all(&out, Duration::from_secs(60));
    assert_totals(&final_per_key(&results), &expected_totals(0..20_000));
}

#[test]
fn tumbling_windows_over_partitions_match_independent_results() {
    let (topic, out) = (unique_name("trades"), unique_name("minutes"));
    kafka::create_topic(&topic, 4);
    kafka::create_topic(&out, 1);
    produce_trades(&topic, 0..6_000, 4);
    let sql = "SELECT trader, CAST(window_start AS BIGINT) AS start_ms, COUNT(*) AS n, SUM(qty) AS qty FROM trades \
               GROUP BY trader WINDOW TUMBLING (ts, INTERVAL '1' MINUTE)";
    let m = write_temp("job.yaml", &manifest(&unique_name("tw"), sql, &topic, &out, ""));
    let mut w = Worker::run(&m, &["--bounded", "--cores", "2", "--group", &unique_name("g")]);
    assert!(w.wait(Duration::from_secs(120)).success(), "{}", w.log());
    let mut expected: BTreeMap<(String, i64), (i64, i64)> = BTreeMap::new();
    for i in 0..6_000 {
        let t = trade(i);
        let e = expected.entry((format!("T{}", t.trader), t.ts - t.ts.rem_euclid(60_000))).or_default();
        e.0 += 1;
        e.1 += t.qty;
    }
    let results = kafka::consume_all(&out, Duration::from_secs(60));
    assert_eq!(results.len(), expected.len(), "one final row per trader and minute");
    for r in &results {
        let v: serde_json::Value = serde_json::from_slice(&r.value).unwrap();
        let want = expected[&(v["trader"].as_str().unwrap().to_owned(), v["start_ms"].as_i64().unwrap())];
        assert_eq!((v["n"].as_i64().unwrap(), v["qty"].as_i64().unwrap()), want, "{v}");
    }
}

/// Count and quantity per symbol for trades `range`, computed independently.
fn expected_per_symbol(range: std::ops::Range<u64>) -> BTreeMap<String, (i64, i64)> {
    let mut m: BTreeMap<String, (i64, i64)> = BTreeMap::new();
    for i in range {
        let t = trade(i);
        let e = m.entry(format!("S{}", t.symbol)).or_default();
        e.0 += 1;
        e.1 += t.qty;
    }
    m
}

const BY_SYMBOL: &str = "SELECT symbol, COUNT(*) AS n, SUM(qty) AS qty FROM trades GROUP BY symbol";

/// The last `(n, qty)` per symbol that [`BY_SYMBOL`] wrote to `out`.
fn per_symbol_results(out: &str) -> BTreeMap<String, (i64, i64)> {
    final_per_key(&kafka::consume_all(out, Duration::from_secs(60)))
        .values()
        .map(|v| (v["symbol"].as_str().unwrap().to_owned(), (v["n"].as_i64().unwrap(), v["qty"].as_i64().unwrap())))
        .collect()
}

#[test]
fn a_group_by_keyed_differently_from_the_topic_goes_through_a_repartition_topic() {
    let (topic, out) = (unique_name("trades"), unique_name("per-symbol"));
    kafka::create_topic(&topic, 4);
    kafka::create_topic(&out, 1);
    produce_trades(&topic, 0..20_000, 4);
    let group = unique_name("g");
    let m = write_temp("job.yaml", &manifest(&unique_name("rk"), BY_SYMBOL, &topic, &out, ""));
    let mut w = Worker::run(&m, &["--bounded", "--cores", "2", "--group", &group]);
    assert!(w.wait(Duration::from_secs(120)).success(), "worker failed:\n{}", w.log());
    assert!(w.log().contains("records in: 20000"), "{}", w.log());
    let got = per_symbol_results(&out);
    assert_eq!(got, expected_per_symbol(0..20_000));
    // The rows bound for the other core crossed the job's repartition
    // topic (it has as many partitions as the source), packed many to a
    // record, and its reader committed past them; those bound for a
    // partition their own core reads (about half, on two cores) were
    // handed over in process.
    let repartition = format!("{group}.repartition-1");
    let committed = kafka::committed_offsets(&group, &repartition, 4);
    let crossed: i64 = committed.values().sum();
    assert!(
        (20_000 / 2 / 64 / 2..20_000 / 2).contains(&crossed),
        "about half the 20,000 rows and the markers were read from {repartition} in packs: {committed:?}"
    );
    // What the reader committed past was deleted (the purge at the end of
    // the run), as Kafka Streams purges its repartition topics.
    for (p, offset) in &committed {
        let (low, high) = kafka::watermarks(&repartition, *p);
        assert_eq!((low, high), (*offset, *offset), "{repartition}/{p}: purged up to the commit");
    }
}

/// Rows a core writes to a repartition partition it reads itself skip the
/// broker — but only once it has read what the topic already held for
/// that partition. Here worker 1 of two (one core each) is frozen, so the
/// partitions of the repartition topic it owns fill with worker 0's rows,
/// whose source offsets worker 0 commits; both are then killed, and one
/// worker of one core takes over every partition. Its first stage must not
/// hand over a row before those left in the topic are read (they would be
/// dropped as replays, their numbers being lower): the totals are exact,
/// and everything it wrote itself went through no topic (the repartition
/// topic did not grow).
#[test]
fn a_core_reads_its_repartition_backlog_before_it_hands_its_own_rows_over_in_process() {
    let (topic, out) = (unique_name("trades"), unique_name("per-symbol"));
    kafka::create_topic(&topic, 4);
    kafka::create_topic(&out, 1);
    let group = unique_name("g");
    let m = manifest(&unique_name("backlog"), BY_SYMBOL, &topic, &out, "");
    let configs: Vec<_> = (0..2).map(|o| config_file(&worker_config(&m, 4, 2, 1, o, &group))).collect();
    let mut first = Worker::serve(&configs[0], &[]);
    let mut frozen = Worker::serve(&configs[1], &[]);
    first.wait_ready(Duration::from_secs(60));
    frozen.wait_ready(Duration::from_secs(60));
    frozen.signal("STOP");
    produce_trades(&topic, 0..10_000, 4);
    // Worker 0 checkpoints its sources to their ends.
    let mine: Vec<i32> =
        owners(&[&first]).keys().filter(|(t, _)| *t == topic).filter_map(|(_, p)| p.parse().ok()).collect();
    assert_eq!(mine.len(), 2, "worker 0 owns two of the four partitions");
    let at_end = |p: &i32| kafka::committed_offsets(&group, &topic, 4).get(p) == Some(&kafka::watermarks(&topic, *p).1);
    wait_until("worker 0 to commit its partitions to their ends", Duration::from_secs(60), || {
        mine.iter().all(at_end).then_some(())
    });
    let repartition = format!("{group}.repartition-1");
    let committed = kafka::committed_offsets(&group, &repartition, 4);
    let ends: Vec<i64> = (0..4).map(|p| kafka::watermarks(&repartition, p).1).collect();
    let backlog: i64 = (0..4).map(|p| ends[p as usize] - committed.get(&p).copied().unwrap_or(0)).sum();
    assert!(backlog > 0, "the frozen worker's repartition partitions hold worker 0's rows: {ends:?} {committed:?}");
    for w in [&first, &frozen] {
        w.signal("KILL");
    }
    let _ = first.wait(Duration::from_secs(10));
    let _ = frozen.wait(Duration::from_secs(10));
    produce_trades(&topic, 10_000..20_000, 4);
    let file = write_temp("job.yaml", &m);
    let mut one = Worker::run(&file, &["--bounded", "--cores", "1", "--group", &group]);
    assert!(one.wait(Duration::from_secs(120)).success(), "worker failed:\n{}", one.log());
    assert!(one.log().contains("reading the exchange partitions this core owns up to their ends"), "{}", one.log());
    let got = per_symbol_results(&out);
    assert_eq!(got, expected_per_symbol(0..20_000));
    let after: Vec<i64> = (0..4).map(|p| kafka::watermarks(&repartition, p).1).collect();
    assert_eq!(after, ends, "the one core's rows and markers went to no topic");
}

/// UNION ALL of two Kafka topics (4 and 2 partitions) feeding a GROUP BY:
/// every source partition of both writes the repartition topic as an
/// upstream of it, and the totals per symbol are exact.
#[test]
fn a_union_all_of_two_topics_feeds_one_re_keyed_aggregate() {
    let (first, second, out) = (unique_name("trades"), unique_name("more-trades"), unique_name("per-symbol"));
    kafka::create_topic(&first, 4);
    kafka::create_topic(&second, 2);
    kafka::create_topic(&out, 1);
    produce_trades(&first, 0..12_000, 4);
    produce_trades(&second, 0..5_000, 2);
    let sql = "SELECT symbol, COUNT(*) AS n, SUM(qty) AS qty \
               FROM (SELECT symbol, qty FROM trades UNION ALL SELECT symbol, qty FROM more) AS t GROUP BY symbol";
    let m = manifest(&unique_name("union"), sql, &first, &out, "");
    // The second source: the first's declaration, renamed and on its own topic.
    let block = &m[m.find("    - name: trades").unwrap()..m.find("  sink:").unwrap()];
    let more = block.replace("- name: trades", "- name: more").replace(&first, &second);
    let m = m.replace("  sink:", &format!("{more}  sink:"));
    let path = write_temp("job.yaml", &m);
    let mut w = Worker::run(&path, &["--bounded", "--cores", "2", "--group", &unique_name("g")]);
    assert!(w.wait(Duration::from_secs(120)).success(), "worker failed:\n{}", w.log());
    assert!(w.log().contains("records in: 17000"), "{}", w.log());
    let got = per_symbol_results(&out);
    let mut expected = expected_per_symbol(0..12_000);
    for (k, (n, q)) in expected_per_symbol(0..5_000) {
        let e = expected.entry(k).or_default();
        e.0 += n;
        e.1 += q;
    }
    assert_eq!(got, expected);
}

/// Which live worker (by index in `workers`) reports reading each
/// `(topic, partition)`; every one must be read by exactly one.
fn owners(workers: &[&Worker]) -> BTreeMap<(String, String), Vec<usize>> {
    let mut owners: BTreeMap<(String, String), Vec<usize>> = BTreeMap::new();
    for (i, w) in workers.iter().enumerate() {
        let text = w.get("/metrics").map(|(_, b)| b).unwrap_or_default();
        for (labels, _) in metric_values(&text, "sluice_consumer_position") {
            let get = |k: &str| labels.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone()).unwrap_or_default();
            owners.entry((get("topic"), get("partition"))).or_default().push(i);
        }
    }
    owners
}

/// `(count, sum of qty)` per symbol and 10-second window of trades `range`.
fn symbol_windows_of(range: std::ops::Range<u64>) -> BTreeMap<(String, i64), (i64, i64)> {
    let mut windows: BTreeMap<(String, i64), (i64, i64)> = BTreeMap::new();
    for i in range {
        let t = trade(i);
        let e = windows.entry((format!("S{}", t.symbol), t.ts - t.ts.rem_euclid(10_000))).or_default();
        e.0 += 1;
        e.1 += t.qty;
    }
    windows
}

/// Waits until `worker` checkpointed one of the partitions of the
/// 4-partition `topic` it owns (a commit by another worker would leave a
/// restart of this one nothing to restore), so killing it then tests a
/// restore.
fn wait_for_own_checkpoint(worker: &Worker, group: &str, topic: &str) {
    let mine: Vec<i32> =
        owners(&[worker]).keys().filter(|(t, _)| t == topic).filter_map(|(_, p)| p.parse().ok()).collect();
    assert!(!mine.is_empty(), "the worker owns a partition of {topic}");
    let deadline = Instant::now() + Duration::from_secs(60);
    while kafka::committed_offsets(group, topic, 4).iter().all(|(p, o)| *o == 0 || !mine.contains(p)) {
        assert!(Instant::now() < deadline, "no checkpoint within 60 s:\n{}", worker.log());
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// A `sources` entry reading `topic` as a table of string key `key`, one
/// string column `value` and event time `ts`.
fn kafka_table(name: &str, topic: &str, key: &str, value: &str) -> String {
    let bootstrap = &harness().bootstrap;
    format!(
        r#"    - name: {name}
      kafka: {{ bootstrapServers: "{bootstrap}", topic: {topic} }}
      table: {{ primaryKey: [{key}] }}
      schema:
        columns:
          - {{ name: {key}, type: string, required: true }}
          - {{ name: {value}, type: string, required: true }}
          - {{ name: ts, type: timestamp, required: true }}
      eventTime: {{ column: ts, watermarkDelayMillis: 1000 }}
"#
    )
}

/// Table records (key, value or none for a tombstone, partition, timestamp).
type TableRows = Vec<(String, Option<String>, i32, i64)>;

fn publish(topic: &str, rows: &TableRows) {
    let timed: Vec<kafka::Timed<'_>> =
        rows.iter().map(|(k, v, p, ts)| (k.as_bytes(), v.as_deref().map(str::as_bytes), *p, *ts)).collect();
    kafka::produce_timed(topic, &timed);
}

/// Starts workers 0 and 1 of a 2 × 2 job over 4 partitions and waits
/// until both are ready.
fn serve_two(manifest: &str, group: &str) -> (Vec<std::path::PathBuf>, Worker, Worker) {
    let configs: Vec<_> = (0..2).map(|o| config_file(&worker_config(manifest, 4, 2, 2, o, group))).collect();
    let mut first = Worker::serve(&configs[0], &[]);
    let mut second = Worker::serve(&configs[1], &[]);
    first.wait_ready(Duration::from_secs(60));
    second.wait_ready(Duration::from_secs(60));
    (configs, first, second)
}

/// The fault the kill -9 tests inject: once `worker` has checkpointed a
/// partition of `topic` that it owns, `after` that, and while `producer` is
/// still writing, SIGKILL it; then start it again from `config`, ready.
fn kill_nine_mid_run(
    mut worker: Worker,
    config: &Path,
    group: &str,
    topic: &str,
    producer: &Producer,
    after: Duration,
) -> Worker {
    wait_for_own_checkpoint(&worker, group, topic);
    std::thread::sleep(after);
    assert!(producer.still_arriving(), "the input is still arriving when the worker dies");
    worker.signal("KILL");
    let _ = worker.wait(Duration::from_secs(10));
    std::thread::sleep(Duration::from_secs(2));
    let mut restarted = Worker::serve(config, &[]);
    restarted.wait_ready(Duration::from_secs(60));
    restarted
}

/// The acceptance run of the shuffle: a tumbling-window GROUP BY symbol
/// over a 4-partition topic keyed by trader, on 2 workers × 2 cores, so
/// every row crosses the repartition topic and every window's watermark is
/// the minimum over 4 upstream partitions that progress unevenly. One
/// worker is killed with SIGKILL mid-run and restarted; the final window
/// results are exact, and no partition of either topic is ever read by two
/// live processes.
#[test]
fn a_re_keyed_window_on_two_workers_survives_kill_nine_with_exact_results() {
    let (topic, out) = (unique_name("trades"), unique_name("windows"));
    kafka::create_topic(&topic, 4);
    kafka::create_topic(&out, 2);
    let group = unique_name("g");
    let sql = "SELECT symbol, CAST(window_start AS BIGINT) AS start_ms, COUNT(*) AS n, SUM(qty) AS qty FROM trades \
               GROUP BY symbol WINDOW TUMBLING (ts, INTERVAL '10' SECOND)";
    let m = manifest(&unique_name("rkw"), sql, &topic, &out, "");
    let configs: Vec<_> = (0..2).map(|o| config_file(&worker_config(&m, 4, 2, 2, o, &group))).collect();
    let mut first = Worker::serve(&configs[0], &[]);
    let mut second = Worker::serve(&configs[1], &[]);
    first.wait_ready(Duration::from_secs(60));
    second.wait_ready(Duration::from_secs(60));
    let repartition = format!("{group}.repartition-1");
    let check_owners = |workers: &[&Worker]| {
        let owners = owners(workers);
        for t in [&topic, &repartition] {
            for p in 0..4 {
                let o = owners.get(&(t.clone(), p.to_string())).cloned().unwrap_or_default();
                assert_eq!(o.len(), 1, "{t}/{p} read by workers {o:?}");
            }
        }
    };
    check_owners(&[&first, &second]);
    const RECORDS: u64 = 20_000;
    let producer = produce_trades_slowly_to(&topic, 20_000, 1_000, Duration::from_millis(150));
    let mut second = kill_nine_mid_run(second, &configs[1], &group, &repartition, &producer, Duration::ZERO);
    check_owners(&[&first, &second]);
    producer.finish();
    // One late trade per partition, far ahead, moves every watermark past
    // the last window of the data set.
    produce_trades(&topic, 100_000_000..100_000_008, 4);
    let expected = symbol_windows_of(0..RECORDS);
    let windows = |records: &[Record]| -> BTreeMap<(String, i64), (i64, i64)> {
        final_per_key(records)
            .values()
            .map(|v| {
                (
                    (v["symbol"].as_str().unwrap().to_owned(), v["start_ms"].as_i64().unwrap()),
                    (v["n"].as_i64().unwrap(), v["qty"].as_i64().unwrap()),
                )
            })
            .collect()
    };
    let results = wait_for_output(&out, Duration::from_secs(120), |r| windows(r).len() >= expected.len());
    assert_eq!(windows(&results), expected, "final windows after kill -9 and restart");
    assert!(second.log().contains("restored state"), "the restarted worker restored its state:\n{}", second.log());
    for w in [&first, &second] {
        w.signal("TERM");
    }
    assert!(first.wait(Duration::from_secs(30)).success(), "{}", first.log());
    assert!(second.wait(Duration::from_secs(30)).success(), "{}", second.log());
}

/// Nexmark q5's shape over trades keyed by trader, on 2 workers × 2
/// cores: per 1-second window, the symbols with the most trades of
/// quantity over 3 (every one on a tie) — the counts joined with their
/// per-window maximum. The counts cross to the maximum's repartition topic,
/// which the maximum and the counts' projection beside it read once; one
/// worker is killed with SIGKILL after checkpointing a partition of that
/// topic, and restarted. Both restore their positions there (the
/// projection numbers its rows on from its checkpoint, so the join does
/// not take them for replays), and every window's top symbols come out.
#[test]
fn a_join_with_an_aggregate_of_its_rows_on_two_workers_survives_kill_nine() {
    let (topic, out) = (unique_name("trades"), unique_name("tops"));
    kafka::create_topic(&topic, 4);
    kafka::create_topic(&out, 2);
    let group = unique_name("g");
    let counts = "SELECT symbol, COUNT(*) AS n, window_start AS ws, window_end AS we FROM trades WHERE qty > 3 \
                  GROUP BY symbol, TUMBLE(ts, INTERVAL '1' SECOND)";
    let inner = "SELECT COUNT(*) AS n, window_start AS ws, window_end AS we FROM trades WHERE qty > 3 \
                 GROUP BY symbol, TUMBLE(ts, INTERVAL '1' SECOND)";
    let sql = format!(
        "SELECT c.symbol, CAST(c.ws AS BIGINT) AS start_ms, c.n FROM ({counts}) AS c \
         JOIN (SELECT MAX(x.n) AS top, x.ws, x.we FROM ({inner}) AS x GROUP BY x.ws, x.we) AS m \
         ON c.ws = m.ws AND c.we = m.we AND c.n >= m.top"
    );
    let m = manifest(&unique_name("tops"), &sql, &topic, &out, "");
    let (configs, mut first, second) = serve_two(&m, &group);
    const RECORDS: u64 = 20_000;
    let producer = produce_trades_slowly_to(&topic, 20_000, 1_000, Duration::from_millis(150));
    let maxima = format!("{group}.repartition-2");
    let mut second = kill_nine_mid_run(second, &configs[1], &group, &maxima, &producer, Duration::ZERO);
    producer.finish();
    produce_trades(&topic, 100_000_000..100_000_008, 4);
    let mut per_window: BTreeMap<i64, BTreeMap<String, i64>> = BTreeMap::new();
    for t in (0..RECORDS).map(trade).filter(|t| t.qty > 3) {
        *per_window.entry(t.ts / 1000 * 1000).or_default().entry(format!("S{}", t.symbol)).or_default() += 1;
    }
    let mut expected = BTreeSet::new();
    for (start, counts) in &per_window {
        let top = counts.values().copied().max().unwrap_or(0);
        expected.extend(counts.iter().filter(|(_, n)| **n == top).map(|(s, n)| (s.clone(), *start, *n)));
    }
    let last = trade(RECORDS - 1).ts;
    let rows = |records: &[Record]| -> BTreeSet<(String, i64, i64)> {
        records
            .iter()
            .map(|r| serde_json::from_slice::<serde_json::Value>(&r.value).unwrap())
            .map(|v| {
                (v["symbol"].as_str().unwrap().to_owned(), v["start_ms"].as_i64().unwrap(), v["n"].as_i64().unwrap())
            })
            .filter(|(_, start, _)| *start <= last)
            .collect()
    };
    let results = wait_for_output(&out, Duration::from_secs(120), |r| rows(r).len() >= expected.len());
    let got = rows(&results);
    let missing: Vec<_> = expected.difference(&got).collect();
    let wrong: Vec<_> = got.difference(&expected).collect();
    assert!(
        missing.is_empty() && wrong.is_empty(),
        "after kill -9 and restart, {} of {} rows missing (e.g. {:?}), {} wrong (e.g. {:?})",
        missing.len(),
        expected.len(),
        &missing[..missing.len().min(3)],
        wrong.len(),
        &wrong[..wrong.len().min(3)]
    );
    assert!(second.log().contains("restored state"), "the restarted worker restored its state:\n{}", second.log());
    for w in [&first, &second] {
        w.signal("TERM");
    }
    assert!(first.wait(Duration::from_secs(30)).success(), "{}", first.log());
    assert!(second.wait(Duration::from_secs(30)).success(), "{}", second.log());
}

/// A LEFT interval join of two 4-partition topics keyed by trader, joined
/// by symbol, on 2 workers × 2 cores: both sides cross the repartition
/// topic keyed by symbol. Trade i of `trades` meets trade i of `fills` (same
/// symbol, same time; the next fill with that symbol is 500 ms later, out
/// of the 200 ms bound). One worker is killed with SIGKILL mid-run and
/// restarted: every pair is still emitted, and every trade past the end of
/// `fills` once NULL-extended — at least once (a replay after the kill may
/// repeat a row), never a wrong pair.
#[test]
fn a_left_interval_join_on_two_workers_survives_kill_nine_with_every_row() {
    let (trades, fills, out) = (unique_name("trades"), unique_name("fills"), unique_name("joined"));
    kafka::create_topic(&trades, 4);
    kafka::create_topic(&fills, 4);
    kafka::create_topic(&out, 2);
    let group = unique_name("g");
    let sql = "SELECT CAST(a.ts AS BIGINT) AS ats, a.qty, b.qty AS bq FROM trades a LEFT JOIN fills b \
               ON a.symbol = b.symbol AND b.ts BETWEEN a.ts AND a.ts + INTERVAL '200' MILLISECOND";
    let m = manifest(&unique_name("join"), sql, &trades, &out, "");
    let block = &m[m.find("    - name: trades").unwrap()..m.find("  sink:").unwrap()];
    let second = block.replace("- name: trades", "- name: fills").replace(&trades, &fills);
    let m = m.replace("  sink:", &format!("{second}  sink:"));
    let configs: Vec<_> = (0..2).map(|o| config_file(&worker_config(&m, 4, 2, 2, o, &group))).collect();
    let mut first = Worker::serve(&configs[0], &[]);
    let mut second = Worker::serve(&configs[1], &[]);
    first.wait_ready(Duration::from_secs(60));
    second.wait_ready(Duration::from_secs(60));
    const TRADES: u64 = 8_000;
    const FILLS: u64 = 6_000;
    let producer = {
        let (trades, fills) = (trades.clone(), fills.clone());
        Producer::spawn(16, Duration::from_millis(150), move |chunk| {
            produce_trades(&trades, chunk * 500..(chunk + 1) * 500, 4);
            if chunk * 500 < FILLS {
                produce_trades(&fills, chunk * 500..((chunk + 1) * 500).min(FILLS), 4);
            }
        })
    };
    let mut second =
        kill_nine_mid_run(second, &configs[1], &group, &format!("{group}.repartition-1"), &producer, Duration::ZERO);
    producer.finish();
    // Far ahead on both sides: every watermark passes the last range.
    produce_trades(&trades, 100_000_000..100_000_008, 4);
    produce_trades(&fills, 100_000_000..100_000_008, 4);
    let last = trade(TRADES - 1).ts;
    // Distinct rows: a trade both paired and NULL-extended would show twice.
    let rows = |records: &[Record]| -> BTreeSet<(i64, Option<i64>)> {
        records
            .iter()
            .map(|r| serde_json::from_slice::<serde_json::Value>(&r.value).unwrap())
            .map(|v| (v["ats"].as_i64().unwrap(), v["bq"].as_i64()))
            .filter(|(ats, _)| *ats <= last)
            .collect()
    };
    let results = wait_for_output(&out, Duration::from_secs(120), |r| rows(r).len() >= TRADES as usize);
    let expected: BTreeSet<(i64, Option<i64>)> =
        (0..TRADES).map(|i| (trade(i).ts, (i < FILLS).then(|| trade(i).qty))).collect();
    assert_eq!(rows(&results), expected, "every pair, and every trade past the fills NULL-extended");
    for r in &results {
        let v: serde_json::Value = serde_json::from_slice(&r.value).unwrap();
        if let Some(bq) = v["bq"].as_i64() {
            assert_eq!(Some(bq), v["qty"].as_i64(), "a wrong pair: {v}");
        }
    }
    for w in [&first, &second] {
        w.signal("TERM");
    }
    assert!(first.wait(Duration::from_secs(30)).success(), "{}", first.log());
    assert!(second.wait(Duration::from_secs(30)).success(), "{}", second.log());
}

/// A source partition with no records holds back the watermark after the
/// shuffle (it is the minimum over all upstream partitions) until the
/// idleness timeout says it is idle: with the timeout windows close, and a
/// job without one (0) still waits.
#[test]
fn an_idle_source_partition_stops_holding_windows_open_after_the_idle_timeout() {
    let topic = unique_name("trades");
    kafka::create_topic(&topic, 4);
    // Partition 3 stays empty.
    produce_trades(&topic, 0..3_000, 3);
    produce_trades(&topic, 100_000_000..100_000_003, 3);
    let sql = "SELECT symbol, CAST(window_start AS BIGINT) AS start_ms, COUNT(*) AS n FROM trades \
               GROUP BY symbol WINDOW TUMBLING (ts, INTERVAL '10' SECOND)";
    let mut expected: BTreeMap<(String, i64), i64> = BTreeMap::new();
    for i in 0..3_000 {
        let t = trade(i);
        *expected.entry((format!("S{}", t.symbol), t.ts - t.ts.rem_euclid(10_000))).or_default() += 1;
    }
    let windows = |records: &[Record]| -> BTreeMap<(String, i64), i64> {
        records
            .iter()
            .map(|r| serde_json::from_slice::<serde_json::Value>(&r.value).unwrap())
            .map(|v| {
                ((v["symbol"].as_str().unwrap().to_owned(), v["start_ms"].as_i64().unwrap()), v["n"].as_i64().unwrap())
            })
            .collect()
    };
    let mut workers = Vec::new();
    let mut outs = Vec::new();
    for idle in [2_000, 0] {
        let out = unique_name("windows");
        kafka::create_topic(&out, 1);
        let extra = format!("    idleTimeoutMillis: {idle}");
        let m = manifest(&unique_name("idle"), sql, &topic, &out, &extra);
        let cfg = config_file(&worker_config(&m, 4, 1, 2, 0, &unique_name("g")));
        workers.push(Worker::serve(&cfg, &[]));
        outs.push(out);
    }
    let results = wait_for_output(&outs[0], Duration::from_secs(60), |r| windows(r).len() >= expected.len());
    assert_eq!(windows(&results), expected, "windows closed once partition 3 was declared idle");
    assert!(workers[0].log().contains("partition idle"), "{}", workers[0].log());
    let held = kafka::consume_all(&outs[1], Duration::from_secs(60));
    assert!(held.is_empty(), "without an idle timeout the empty partition holds every window open: {}", held.len());
    for w in &workers {
        w.signal("TERM");
    }
    for w in &mut workers {
        assert!(w.wait(Duration::from_secs(30)).success(), "{}", w.log());
    }
}

#[test]
fn every_partition_is_read_by_exactly_one_core_of_one_worker() {
    let (topic, out) = (unique_name("trades"), unique_name("totals"));
    kafka::create_topic(&topic, 8);
    kafka::create_topic(&out, 1);
    let group = unique_name("g");
    let m = manifest(&unique_name("own"), GROUP_BY, &topic, &out, "");
    let mut workers: Vec<Worker> = (0..2)
        .map(|ordinal| {
            let cfg = config_file(&worker_config(&m, 8, 2, 2, ordinal, &group));
            Worker::serve(&cfg, &[])
        })
        .collect();
    for w in &mut workers {
        w.wait_ready(Duration::from_secs(60));
    }
    produce_trades(&topic, 0..8_000, 8);
    // Wait until both workers together have read everything.
    let deadline = Instant::now() + Duration::from_secs(60);
    let scraped: Vec<String> = loop {
        let scraped: Vec<String> =
            workers.iter().map(|w| w.get("/metrics").map(|(_, b)| b).unwrap_or_default()).collect();
        let read: f64 = scraped.iter().flat_map(|t| metric_values(t, "sluice_records_in_total")).map(|(_, v)| v).sum();
        // The position gauges are set a moment after the counter: a scrape
        // between the two sees the count but not yet every position.
        let positioned = scraped
            .iter()
            .flat_map(|t| metric_values(t, "sluice_consumer_position"))
            .filter(|(_, v)| *v == 1_000.0)
            .count();
        if (read >= 8_000.0 && positioned >= 8) || Instant::now() > deadline {
            assert_eq!(read, 8_000.0, "every record read exactly once across workers and cores");
            break scraped;
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    // Which (worker, core) reports each partition, against the shared assignment function.
    let mut owners: BTreeMap<i32, Vec<(i32, i32)>> = BTreeMap::new();
    for (ordinal, text) in scraped.iter().enumerate() {
        for (labels, value) in metric_values(text, "sluice_consumer_position") {
            let get = |k: &str| labels.iter().find(|(n, _)| n == k).map(|(_, v)| v.parse::<i32>().unwrap()).unwrap();
            assert_eq!(value, 1_000.0, "partition {} fully read", get("partition"));
            owners.entry(get("partition")).or_default().push((i32::try_from(ordinal).unwrap(), get("core")));
        }
    }
    let assignment = assign(&[SourcePartitions { source: "trades".into(), partitions: 8 }], 2, 2);
    for p in 0..8 {
        let o = owners.get(&p).cloned().unwrap_or_default();
        assert_eq!(o.len(), 1, "partition {p} read by {o:?}");
        let expected: Vec<(i32, i32)> = assignment
            .workers
            .iter()
            .flat_map(|w| w.cores.iter().map(move |c| (w.worker, c)))
            .filter(|(_, c)| c.partitions[0].partitions.contains(&p))
            .map(|(w, c)| (w, c.core))
            .collect();
        assert_eq!(o, expected, "partition {p} owner matches assign()");
    }
    let owned: BTreeSet<i32> = owners.keys().copied().collect();
    assert_eq!(owned, (0..8).collect(), "every partition has an owner");
    for w in &workers {
        w.signal("TERM");
    }
    for w in &mut workers {
        assert!(w.wait(Duration::from_secs(30)).success(), "{}", w.log());
    }
}

#[test]
fn kill_dash_nine_then_restart_loses_nothing_and_counts_nothing_twice() {
    let (topic, out) = (unique_name("trades"), unique_name("totals"));
    kafka::create_topic(&topic, 4);
    kafka::create_topic(&out, 2);
    let group = unique_name("g");
    let m = manifest(&unique_name("k9"), GROUP_BY, &topic, &out, "");
    let cfg = config_file(&worker_config(&m, 4, 1, 2, 0, &group));
    let mut first = Worker::serve(&cfg, &[]);
    first.wait_ready(Duration::from_secs(60));
    // Records keep arriving while the worker is killed.
    let producer = produce_trades_slowly_to(&topic, 20_000, 1_000, Duration::from_millis(100));
    // Kill it mid-run, once it has checkpointed at least once.
    let deadline = Instant::now() + Duration::from_secs(60);
    while kafka::committed_positions(&group, &topic, 4).values().all(|(o, _)| *o == 0) {
        assert!(Instant::now() < deadline, "no checkpoint within 60 s:\n{}", first.log());
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(producer.still_arriving(), "the input is still arriving when the worker dies");
    first.signal("KILL");
    let _ = first.wait(Duration::from_secs(10));
    // The killed worker had checkpointed: offsets with a pointer to saved state.
    let committed = kafka::committed_positions(&group, &topic, 4);
    for (p, (offset, metadata)) in committed.iter().filter(|(_, (o, _))| *o > 0) {
        assert!(
            metadata.starts_with("sluice:v3:"),
            "partition {p}: offset {offset} committed without an incremental checkpoint: {metadata:?}"
        );
    }
    let mut second = Worker::serve(&cfg, &[]);
    producer.finish();
    second.wait_ready(Duration::from_secs(60));
    let expected = expected_totals(0..20_000);
    let total: i64 = expected.values().map(|e| e.0).sum();
    let results = wait_for_output(&out, Duration::from_secs(90), |r| {
        final_per_key(r).values().map(|v| v["n"].as_i64().unwrap_or(0)).sum::<i64>() == total
    });
    // State was restored from the last checkpoint and the input replayed
    // from its offsets: final totals are exact, not merely at least.
    assert_totals(&final_per_key(&results), &expected);
    assert!(
        second.log().contains("restored state"),
        "the restarted worker restored checkpointed state:\n{}",
        second.log()
    );
    second.signal("TERM");
    assert!(second.wait(Duration::from_secs(30)).success());
}

/// At least once, two shapes whose first stage keeps state and writes a
/// repartition topic: an aggregate over an updating aggregate, and a global
/// aggregate in two phases. What such a stage emits depends on how its
/// input was cut into batches (one coalesced change per group per batch):
/// live, batches are small; a replay after a restart reads the backlog in
/// full batches and emits far fewer rows. Rows were numbered by a count of
/// the stage's output, and the next stage drops what it numbered as seen,
/// so after the replay real updates were dropped and groups kept stale
/// values for good. Here the worker checkpoints rarely, is killed with
/// SIGKILL long after its checkpoint, and restarts into a backlog; every
/// group's final value must be exact.
#[test]
fn at_least_once_an_aggregate_of_an_updating_aggregate_is_exact_after_kill_nine_into_a_backlog() {
    const CHUNK: u64 = 40;
    let jobs = [
        (
            "per-symbol",
            "SELECT symbol, SUM(volume) AS total, COUNT(*) AS traders FROM (SELECT trader, symbol, SUM(qty) AS \
             volume FROM trades GROUP BY trader, symbol) AS t GROUP BY symbol",
        ),
        ("global", "SELECT COUNT(*) AS n, SUM(qty) AS qty FROM trades"),
    ];
    for (name, sql) in jobs {
        let (topic, out, group) = (unique_name("trades"), unique_name(name), unique_name("g"));
        kafka::create_topic(&topic, 4);
        kafka::create_topic(&out, 2);
        // Checkpoints far apart: much is emitted after the last one.
        let m = manifest(&unique_name(name), sql, &topic, &out, "")
            .replace("checkpointIntervalMillis: 200", "checkpointIntervalMillis: 4000");
        let cfg = config_file(&worker_config(&m, 4, 1, 2, 0, &group));
        let mut worker = Worker::serve(&cfg, &[]);
        worker.wait_ready(Duration::from_secs(60));
        // Small chunks, often, until told to stop: live batches are small.
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let producer = {
            let (topic, stop) = (topic.clone(), std::sync::Arc::clone(&stop));
            std::thread::spawn(move || {
                let mut c = 0;
                while !stop.load(std::sync::atomic::Ordering::SeqCst) {
                    produce_trades(&topic, c * CHUNK..(c + 1) * CHUNK, 4);
                    c += 1;
                    std::thread::sleep(Duration::from_millis(40));
                }
                c * CHUNK
            })
        };
        wait_for_own_checkpoint(&worker, &group, &topic);
        // Most of a checkpoint interval of live output after it.
        std::thread::sleep(Duration::from_millis(3_000));
        assert!(!producer.is_finished(), "the input is still arriving when the worker dies");
        worker.signal("KILL");
        let _ = worker.wait(Duration::from_secs(10));
        // A backlog builds up meanwhile; then the input stops but for a
        // few records after the restart.
        std::thread::sleep(Duration::from_secs(2));
        stop.store(true, std::sync::atomic::Ordering::SeqCst);
        let sent = producer.join().unwrap();
        let mut worker = Worker::serve(&cfg, &[]);
        worker.wait_ready(Duration::from_secs(60));
        let records = sent + 4 * CHUNK;
        produce_trades(&topic, sent..records, 4);
        let want = |symbol: Option<u64>| {
            let trades: Vec<Trade> = (0..records).map(trade).filter(|t| symbol.is_none_or(|s| t.symbol == s)).collect();
            let traders: BTreeSet<u64> = trades.iter().map(|t| t.trader).collect();
            (trades.iter().map(|t| t.qty).sum::<i64>(), i64::try_from(traders.len()).unwrap(), trades.len())
        };
        if name == "global" {
            // The result with the highest count (the sink has two
            // partitions, so arrival order says nothing): it reaches every
            // record, exactly.
            let (qty, _, n) = want(None);
            let want = (i64::try_from(n).unwrap(), qty);
            let global = |records: &[Record]| {
                records
                    .iter()
                    .map(|r| serde_json::from_slice::<serde_json::Value>(&r.value).unwrap())
                    .map(|v| (v["n"].as_i64().unwrap(), v["qty"].as_i64().unwrap()))
                    .max()
            };
            let results = wait_for_output(&out, Duration::from_secs(60), |r| global(r) >= Some(want));
            assert_eq!(global(&results), Some(want), "global count and quantity after kill -9 and a backlog");
        } else {
            let want: BTreeMap<String, (i64, i64)> = (0..5)
                .map(|s| {
                    let (total, traders, _) = want(Some(s));
                    (format!("S{s}"), (total, traders))
                })
                .collect();
            let results = wait_for_output(&out, Duration::from_secs(60), |r| symbol_totals(r) == want);
            assert_eq!(
                symbol_totals(&results),
                want,
                "per symbol: total volume and traders after kill -9 and a backlog"
            );
        }
        assert!(worker.log().contains("restored state"), "the restarted worker restored its state:\n{}", worker.log());
        worker.signal("TERM");
        assert!(worker.wait(Duration::from_secs(30)).success());
    }
}

/// A sink topic that does not exist, on a broker that creates none: the
/// core stops, naming the topic, and the worker stays up not ready with
/// that reason (what the operator reads to set Degraded). It used to count
/// as a broker outage: the core restarted forever, its results re-sent
/// each time, and `/readyz` flipped between ready and starting.
#[test]
fn a_sink_topic_that_does_not_exist_stops_the_job_naming_it_instead_of_restarting_forever() {
    let (topic, out) = (unique_name("trades"), unique_name("missing"));
    kafka::create_topic(&topic, 4);
    let m = manifest(&unique_name("missing-sink"), GROUP_BY, &topic, &out, "");
    let cfg = config_file(&worker_config(&m, 4, 1, 1, 0, &unique_name("g")));
    let mut worker = Worker::serve(&cfg, &[]);
    worker.wait_ready(Duration::from_secs(60));
    produce_trades(&topic, 0..100, 4);
    // librdkafka gives up on an unknown topic after
    // topic.metadata.propagation.max.ms (30 s).
    let deadline = Instant::now() + Duration::from_secs(90);
    let reason = loop {
        if let Some((503, body)) = worker.get("/readyz")
            && body.contains("does not exist")
        {
            break body;
        }
        assert!(Instant::now() < deadline, "no refusal within 90 s:\n{}", worker.log());
        std::thread::sleep(Duration::from_millis(500));
    };
    assert!(reason.contains(&out), "the reason names the topic: {reason}");
    assert!(!worker.log().contains("restarting from its last checkpoint"), "not retried:\n{}", worker.log());
    // And it stays so.
    std::thread::sleep(Duration::from_secs(3));
    assert!(worker.get("/readyz").is_some_and(|(code, body)| code == 503 && body.contains("does not exist")));
    worker.signal("TERM");
    let _ = worker.wait(Duration::from_secs(30));
}

#[test]
fn malformed_records_go_to_the_dead_letter_topic_with_reason_and_good_ones_flow() {
    let (topic, out, dlq) = (unique_name("trades"), unique_name("out"), unique_name("dlq"));
    kafka::create_topic(&topic, 2);
    kafka::create_topic(&out, 1);
    kafka::create_topic(&dlq, 1);
    let good: Vec<String> = (0..10).map(|i| trade_json(&trade(i))).collect();
    let bad: Vec<(&str, &str)> = vec![
        ("this is not json", "malformed JSON"),
        (r#"{"trader":"T1","symbol":"S1","price":"cheap","qty":1,"ts":1}"#, "field `price`: expected double"),
        (r#"{"trader":"T1","symbol":"S1","price":1.0,"ts":1}"#, "missing required field `qty`"),
    ];
    let mut records: Vec<kafka::Outgoing<'_>> = Vec::new();
    for (i, g) in good.iter().enumerate() {
        records.push((None, g.as_bytes(), Some(i32::try_from(i % 2).unwrap())));
        if let Some((b, _)) = bad.get(i) {
            records.push((None, b.as_bytes(), Some(i32::try_from(i % 2).unwrap())));
        }
    }
    kafka::produce(&topic, &records);
    let bootstrap = &harness().bootstrap;
    let extra = format!("  deadLetter:\n    kafka: {{ bootstrapServers: \"{bootstrap}\", topic: {dlq} }}\n");
    let m = write_temp(
        "job.yaml",
        &manifest(&unique_name("dl"), "SELECT trader, qty FROM trades WHERE qty > 0", &topic, &out, &extra),
    );
    let mut w = Worker::run(&m, &["--bounded", "--cores", "2", "--group", &unique_name("g")]);
    assert!(w.wait(Duration::from_secs(120)).success(), "{}", w.log());
    assert!(w.log().contains("dead-lettered: 3,"), "{}", w.log());
    assert_eq!(kafka::consume(&out, 10, Duration::from_secs(20)).len(), 10, "all good records processed");
    let letters = kafka::consume(&dlq, 3, Duration::from_secs(20));
    assert_eq!(letters.len(), 3);
    for (payload, reason) in &bad {
        let l = letters
            .iter()
            .find(|l| l.value == payload.as_bytes())
            .unwrap_or_else(|| panic!("{payload} not dead-lettered"));
        let got = l.header("sluice.error.reason").unwrap_or_default();
        assert!(got.contains(reason), "reason {got:?} should mention {reason:?}");
        assert_eq!(l.header("sluice.source.topic").as_deref(), Some(topic.as_str()));
        assert!(l.header("sluice.source.partition").is_some() && l.header("sluice.source.offset").is_some());
    }
}

#[test]
fn sigterm_drains_and_commits_and_a_restart_resumes_from_the_committed_offsets() {
    let (topic, out) = (unique_name("trades"), unique_name("out"));
    kafka::create_topic(&topic, 2);
    kafka::create_topic(&out, 1);
    let group = unique_name("g");
    let m = manifest(&unique_name("st"), "SELECT trader, qty, ts FROM trades", &topic, &out, "");
    let cfg = config_file(&worker_config(&m, 2, 1, 2, 0, &group));
    let mut first = Worker::serve(&cfg, &[]);
    first.wait_ready(Duration::from_secs(60));
    produce_trades(&topic, 0..3_000, 2);
    let seen = wait_for_output(&out, Duration::from_secs(60), |r| r.len() >= 3_000);
    assert_eq!(seen.len(), 3_000);
    first.signal("TERM");
    let status = first.wait(Duration::from_secs(30));
    assert!(status.success(), "drained and exited cleanly: {status}\n{}", first.log());
    let committed = kafka::committed_offsets(&group, &topic, 2);
    assert_eq!(committed.values().sum::<i64>(), 3_000, "offsets committed on shutdown: {committed:?}");
    produce_trades(&topic, 3_000..5_000, 2);
    let mut second = Worker::serve(&cfg, &[]);
    second.wait_ready(Duration::from_secs(60));
    let after = wait_for_output(&out, Duration::from_secs(60), |r| r.len() >= 5_000);
    std::thread::sleep(Duration::from_secs(1));
    let after = if after.len() == 5_000 { kafka::consume_all(&out, Duration::from_secs(60)) } else { after };
    assert_eq!(
        after.len(),
        5_000,
        "the restart resumed where the first run committed: nothing replayed, nothing skipped"
    );
    second.signal("TERM");
    assert!(second.wait(Duration::from_secs(30)).success());
}

/// Partitions added to a running stateless job's source (finding 4): the
/// records written to them before the job's workers are given the new
/// partition count are not skipped, even with `startFrom: Latest` — a
/// partition the job never committed on, on a topic it did, starts at its
/// beginning.
#[test]
fn partitions_added_to_a_stateless_source_are_read_from_their_beginning() {
    let (topic, out) = (unique_name("trades"), unique_name("out"));
    kafka::create_topic(&topic, 2);
    kafka::create_topic(&out, 1);
    let group = unique_name("g");
    let m = manifest(&unique_name("grow"), "SELECT trader, qty, ts FROM trades", &topic, &out, "")
        .replace(&format!("topic: {topic} }}"), &format!("topic: {topic}, startFrom: Latest }}"));
    let mut first = Worker::serve(&config_file(&worker_config(&m, 2, 1, 1, 0, &group)), &[]);
    first.wait_ready(Duration::from_secs(60));
    produce_trades(&topic, 0..1_000, 2);
    assert_eq!(wait_for_output(&out, Duration::from_secs(60), |r| r.len() >= 1_000).len(), 1_000);

    // Grow the topic; the producer spreads over all four partitions, so half
    // of the new records land where the running worker does not read.
    kafka::add_partitions(&topic, 4);
    produce_trades(&topic, 1_000..2_000, 4);
    wait_for_output(&out, Duration::from_secs(60), |r| r.len() >= 1_500);
    first.signal("TERM");
    assert!(first.wait(Duration::from_secs(30)).success(), "{}", first.log());

    // The next generation owns all four partitions (the operator's rescale).
    let mut second = Worker::serve(&config_file(&worker_config(&m, 4, 1, 1, 0, &group)), &[]);
    second.wait_ready(Duration::from_secs(60));
    let records = wait_for_output(&out, Duration::from_secs(60), |r| r.len() >= 2_000);
    // Every trade has its own event time: distinct times are distinct records.
    let times: BTreeSet<String> = records
        .iter()
        .map(|r| serde_json::from_slice::<serde_json::Value>(&r.value).unwrap()["ts"].to_string())
        .collect();
    assert_eq!(times.len(), 2_000, "{} record(s) skipped", 2_000 - times.len().min(2_000));
    assert_eq!(records.len(), 2_000, "and none read twice");
    second.signal("TERM");
    assert!(second.wait(Duration::from_secs(30)).success(), "{}", second.log());
}

/// `startFrom: <time>` (Kafka's offsets-for-times): a job that has never
/// committed starts each partition at its first record whose Kafka
/// timestamp is at or after the time — here records 600 onwards of the
/// two partitions that have them — and a partition with no record that
/// late starts at its end. The records' Kafka timestamps are set apart
/// from their event times, so the cut is the broker's, not the query's.
#[test]
fn start_from_a_time_reads_each_partition_from_its_first_record_at_or_after_it() {
    let (topic, out) = (unique_name("timed"), unique_name("out"));
    kafka::create_topic(&topic, 3);
    kafka::create_topic(&out, 1);
    let t0 = 1_760_000_000_000i64;
    let keys_values: Vec<(String, i32, i64)> = (0..900u64)
        .map(|i| (trade_json(&trade(i)), i32::try_from(i % 2).unwrap(), t0 + i64::try_from(i).unwrap() * 1000))
        // Partition 2 holds only records older than the cut.
        .chain((0..100u64).map(|j| (trade_json(&trade(10_000 + j)), 2, t0 + i64::try_from(j).unwrap() * 1000)))
        .collect();
    let records: Vec<kafka::Timed<'_>> =
        keys_values.iter().map(|(v, p, ts)| (&b"k"[..], Some(v.as_bytes()), *p, *ts)).collect();
    kafka::produce_timed(&topic, &records);
    let cut = jiff::Timestamp::from_millisecond(t0 + 600 * 1000).unwrap().to_string();
    let m =
        manifest(&unique_name("from-time"), "SELECT trader, CAST(ts AS BIGINT) AS ms FROM trades", &topic, &out, "")
            .replace(&format!("topic: {topic} }}"), &format!("topic: {topic}, startFrom: \"{cut}\" }}"));
    let path = write_temp("start-from-time.yaml", &m);
    let explained = std::process::Command::new(sluice_e2e::worker::worker_bin())
        .args(["explain", "-f", path.to_str().unwrap()])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&explained.stdout);
    assert!(text.contains(&format!("from the first record at or after {cut}")), "{text}");
    let mut w = Worker::run(&path, &["--bounded", "--group", &unique_name("g")]);
    assert!(w.wait(Duration::from_secs(120)).success(), "{}", w.log());
    let got: BTreeSet<i64> = kafka::consume_all(&out, Duration::from_secs(30))
        .iter()
        .map(|r| serde_json::from_slice::<serde_json::Value>(&r.value).unwrap()["ms"].as_i64().unwrap())
        .collect();
    let expected: BTreeSet<i64> = (600..900).map(|i| trade(i).ts).collect();
    assert_eq!(got.len(), 300, "records before the cut read, or records after it skipped");
    assert_eq!(got, expected);
}

/// `sluice-worker preview` runs a query keyed differently from its topic
/// against the real topic and prints result rows: exactly `--limit` of
/// them, each a row of the query. It writes nothing to Kafka — its
/// consumer group has no offsets (it does not exist), and no topic appears:
/// no repartition or state topic, no sink, no dead-letter topic.
#[test]
fn preview_prints_rows_of_the_real_topic_and_writes_nothing_to_kafka() {
    let (topic, out) = (unique_name("preview"), unique_name("preview-out"));
    kafka::create_topic(&topic, 4);
    produce_trades(&topic, 0..4_000, 4);
    let sql = "SELECT symbol, COUNT(*) AS n, SUM(qty) AS qty FROM trades GROUP BY symbol";
    let m = manifest(&unique_name("preview"), sql, &topic, &out, "")
        + &format!("  deadLetter:\n    kafka: {{ bootstrapServers: \"{}\", topic: {out}-dlq }}\n", harness().bootstrap);
    let path = write_temp("preview.yaml", &m);
    let before = kafka::topics_starting_with("");
    // Each symbol's first change is a row: at least 5 come, so a limit of
    // 3 ends the preview (bounded by `timeout`, should it not).
    let worker = sluice_e2e::worker::worker_bin();
    let result = std::process::Command::new("timeout")
        .args(["120", worker.to_str().unwrap(), "preview", "-f", path.to_str().unwrap(), "--limit", "3"])
        .args(["--from", "earliest"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&result.stderr);
    assert!(result.status.success(), "{stderr}");
    let rows: Vec<serde_json::Value> =
        String::from_utf8_lossy(&result.stdout).lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(rows.len(), 3, "{rows:?}\n{stderr}");
    let symbols: BTreeSet<String> = (0..5).map(|s| format!("S{s}")).collect();
    for row in &rows {
        assert!(symbols.contains(row["symbol"].as_str().unwrap()), "{row}");
        assert!(row["n"].as_i64().unwrap() >= 1 && row["qty"].as_i64().unwrap() >= 1, "{row}");
    }
    let group = stderr
        .split("consumer group ")
        .nth(1)
        .and_then(|rest| rest.split_whitespace().next())
        .unwrap_or_else(|| panic!("no consumer group named: {stderr}"));
    assert!(!kafka::group_exists(group), "the preview's group {group} has offsets");
    let after = kafka::topics_starting_with("");
    let new: Vec<&String> = after.iter().filter(|t| !before.contains(t)).collect();
    assert!(new.iter().all(|t| !t.starts_with(group) && !t.starts_with(&out)), "the preview created topics: {new:?}");
}

/// Partitions added to a keyed job's source (finding 4): keys now hash to
/// other partitions, so the job's state can no longer follow them. The next
/// generation of workers stops before consuming anything — not ready, with
/// the reason and what to do — instead of splitting every key's totals.
#[test]
fn partitions_added_to_a_keyed_source_stop_the_job_with_what_to_do() {
    let (topic, out) = (unique_name("trades"), unique_name("totals"));
    kafka::create_topic(&topic, 2);
    kafka::create_topic(&out, 1);
    let group = unique_name("g");
    let m = manifest(&unique_name("grow-gb"), GROUP_BY, &topic, &out, "");
    let mut first = Worker::serve(&config_file(&worker_config(&m, 2, 1, 1, 0, &group)), &[]);
    first.wait_ready(Duration::from_secs(60));
    produce_trades(&topic, 0..2_000, 2);
    let expected = expected_totals(0..2_000);
    let settled = |r: &[Record]| {
        final_per_key(r).len() == expected.len() && {
            let n: i64 = final_per_key(r).values().map(|v| v["n"].as_i64().unwrap()).sum();
            n == 2_000
        }
    };
    let before = wait_for_output(&out, Duration::from_secs(60), settled);
    assert_totals(&final_per_key(&before), &expected);
    first.signal("TERM");
    assert!(first.wait(Duration::from_secs(30)).success(), "{}", first.log());
    let committed = kafka::committed_offsets(&group, &topic, 2);

    kafka::add_partitions(&topic, 4);
    produce_trades(&topic, 2_000..3_000, 4);
    let mut second = Worker::serve(&config_file(&worker_config(&m, 4, 1, 1, 0, &group)), &[]);
    let deadline = Instant::now() + Duration::from_secs(60);
    let reason = loop {
        if let Some((503, body)) = second.get("/readyz")
            && body.contains("laid out for 2")
        {
            break body;
        }
        assert!(Instant::now() < deadline, "the worker did not report the change:\n{}", second.log());
        std::thread::sleep(Duration::from_millis(200));
    };
    assert!(reason.contains(&format!("source topic {topic} has 4 partitions")), "{reason}");
    assert!(reason.contains("rename the job"), "says what to do: {reason}");
    std::thread::sleep(Duration::from_secs(2));
    let after = kafka::consume_all(&out, Duration::from_secs(60));
    assert_eq!(after.len(), before.len(), "nothing emitted after the change");
    assert_eq!(kafka::committed_offsets(&group, &topic, 4), committed, "nothing consumed after the change");
    second.signal("TERM");
    second.wait(Duration::from_secs(30));
}

/// SIGKILLs a worker and starts it again from its config (not waiting
/// until it is ready: the fault runs kill again at random moments).
fn kill_and_restart((config, worker): &mut (std::path::PathBuf, Worker)) {
    worker.signal("KILL");
    let _ = worker.wait(Duration::from_secs(10));
    *worker = Worker::serve(config, &[]);
}

/// Closes every window: one far-future record per partition, of a trader
/// of its own (FLUSH, so no expected group changes), moves every watermark on.
fn close_every_window(topic: &str, partitions: i32) {
    let flush: Vec<(String, i32)> = (0..partitions)
        .map(|p| (format!(r#"{{"trader":"FLUSH","symbol":"F","price":1,"qty":1,"ts":{}}}"#, 1_800_000_000_000i64), p))
        .collect();
    let records: Vec<_> = flush.iter().map(|(v, p)| (Some(&b"FLUSH"[..]), v.as_bytes(), Some(*p))).collect();
    kafka::produce(topic, &records);
}

/// A small deterministic generator for fault schedules (`FAULT_SEED`).
struct Schedule(u64);

impl Schedule {
    fn from_env() -> Self {
        Self(std::env::var("FAULT_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or(0x5EED_FA17) | 1)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}

/// Fault suite: `kill -9` of random workers at random times, ≥ 10 times in
/// one run (`FAULT_KILLS`, default 12), over a GROUP BY, a windowed, a ROWS
/// job, a window re-keyed through a repartition topic, a three-stage
/// aggregate over a re-keyed window, a re-keyed top-N, a global
/// aggregate in two phases and an aggregate over an updating aggregate,
/// running side by side while input keeps arriving. Every job's results are checked against results computed
/// here: GROUP BY totals and window counts exact, one correct moving
/// minimum per input row, the top 3 per symbol, the global count reached
/// and never passed, every symbol's total over its traders' totals exact.
/// Prints
/// the figures recorded in docs/reliability.md.
#[test]
fn random_kill_nine_of_group_by_windowed_rows_and_re_keyed_jobs_loses_nothing() {
    const RECORDS: u64 = 16_000;
    const PARTITIONS: i32 = 4;
    let kills: usize = std::env::var("FAULT_KILLS").ok().and_then(|s| s.parse().ok()).unwrap_or(12);
    let mut schedule = Schedule::from_env();
    let topic = unique_name("trades");
    kafka::create_topic(&topic, PARTITIONS);
    let jobs = [
        ("group-by", GROUP_BY.to_owned()),
        (
            "windowed",
            "SELECT trader, symbol, CAST(window_start AS BIGINT) AS start_ms, COUNT(*) AS n, SUM(qty) AS qty \
             FROM trades GROUP BY trader, symbol WINDOW TUMBLING (ts, INTERVAL '10' SECOND)"
                .to_owned(),
        ),
        (
            "rows",
            "SELECT trader, CAST(ts AS BIGINT) AS ts_ms, qty, \
             MIN(qty) OVER (ROWS WINDOW BUFFER 5 ROWS PARTITION BY trader ORDER BY ts) AS m FROM trades"
                .to_owned(),
        ),
        // Keyed by symbol over a topic keyed by trader: two stages joined
        // by the job's repartition topic.
        (
            "re-keyed",
            "SELECT symbol, CAST(window_start AS BIGINT) AS start_ms, COUNT(*) AS n, SUM(qty) AS qty FROM trades \
             GROUP BY symbol WINDOW TUMBLING (ts, INTERVAL '10' SECOND)"
                .to_owned(),
        ),
        // Nexmark q5's shape: three stages, the second (stateful) one
        // writing the second repartition topic.
        (
            "three-stage",
            "SELECT CAST(window_start AS BIGINT) AS start_ms, MAX(n) AS top, SUM(n) AS trades \
             FROM (SELECT symbol, window_start, COUNT(*) AS n FROM trades \
                   GROUP BY symbol, TUMBLE(ts, INTERVAL '10' SECOND)) AS c GROUP BY window_start"
                .to_owned(),
        ),
        // Top-N re-keyed by symbol: a row replayed into the repartition
        // topic and counted twice would take a second rank.
        (
            "top-n",
            "SELECT symbol, trader, ts_ms, rn FROM (SELECT symbol, trader, CAST(ts AS BIGINT) AS ts_ms, \
             ROW_NUMBER() OVER (PARTITION BY symbol ORDER BY ts DESC) AS rn FROM trades) AS latest WHERE rn <= 3"
                .to_owned(),
        ),
        // A global aggregate in two phases: each partition's running
        // partial crosses the repartition topic, and replayed partials
        // replace rather than add to what was combined.
        ("global", "SELECT COUNT(*) AS n, SUM(qty) AS qty, MIN(qty) AS low, MAX(ts) AS latest FROM trades".to_owned()),
        // An aggregate over an updating aggregate: each (trader, symbol)
        // total crosses the repartition topic as changes, coalesced per
        // batch (a replay's batches are not the live run's).
        (
            "updating",
            "SELECT symbol, SUM(volume) AS total, COUNT(*) AS traders FROM (SELECT trader, symbol, SUM(qty) AS \
             volume FROM trades GROUP BY trader, symbol) AS t GROUP BY symbol"
                .to_owned(),
        ),
        // Few groups in three phases (Nexmark q15's shape): each row
        // crosses once per column counted distinct, keyed by its value;
        // per-partition partials cross again to the minute's partition,
        // where replayed partials replace what they had sent.
        (
            "few-groups",
            "SELECT CAST(DATE_TRUNC('minute', ts) AS BIGINT) AS minute_ms, COUNT(*) AS n, SUM(qty) AS qty, \
             COUNT(DISTINCT symbol) AS symbols, COUNT(DISTINCT trader) FILTER (WHERE qty > 5) AS big_traders \
             FROM trades GROUP BY DATE_TRUNC('minute', ts)"
                .to_owned(),
        ),
    ];
    let mut outs = Vec::new();
    let mut workers: Vec<(std::path::PathBuf, Worker)> = Vec::new();
    for (name, sql) in &jobs {
        let out = unique_name(name);
        kafka::create_topic(&out, 2);
        let m = manifest(&unique_name(name), sql, &topic, &out, "");
        let cfg = config_file(&worker_config(&m, PARTITIONS, 1, 2, 0, &unique_name("g")));
        let mut w = Worker::serve(&cfg, &[]);
        w.wait_ready(Duration::from_secs(60));
        workers.push((cfg, w));
        outs.push(out);
    }
    let producer = {
        let topic = topic.clone();
        let chunk = RECORDS / 40;
        Producer::spawn(40, Duration::from_millis(150), move |c| {
            produce_trades(&topic, c * chunk..(c + 1) * chunk, u64::try_from(PARTITIONS).unwrap());
        })
    };
    let mut killed = [0usize; 9];
    for _ in 0..kills {
        std::thread::sleep(Duration::from_millis(300 + schedule.below(900)));
        let j = usize::try_from(schedule.below(9)).unwrap();
        kill_and_restart(&mut workers[j]);
        killed[j] += 1;
    }
    producer.finish();
    close_every_window(&topic, PARTITIONS);

    // GROUP BY: exact totals (state restored, input replayed from its offsets).
    let expected = expected_totals(0..RECORDS);
    let total: i64 = expected.values().map(|e| e.0).sum();
    let results = wait_for_output(&outs[0], Duration::from_secs(120), |r| {
        final_per_key(r).values().filter(|v| v["trader"] != "FLUSH").map(|v| v["n"].as_i64().unwrap_or(0)).sum::<i64>()
            == total
    });
    let mut got = final_per_key(&results);
    got.retain(|_, v| v["trader"] != "FLUSH");
    assert_totals(&got, &expected);
    let group_by_records = results.len();

    // Windowed: every 10-second window of the input, each with its exact count.
    let mut windows: BTreeMap<(String, String, i64), (i64, i64)> = BTreeMap::new();
    for i in 0..RECORDS {
        let t = trade(i);
        let e = windows
            .entry((format!("T{}", t.trader), format!("S{}", t.symbol), t.ts - t.ts.rem_euclid(10_000)))
            .or_default();
        e.0 += 1;
        e.1 += t.qty;
    }
    let window_key = |v: &serde_json::Value| {
        (
            v["trader"].as_str().unwrap().to_owned(),
            v["symbol"].as_str().unwrap().to_owned(),
            v["start_ms"].as_i64().unwrap(),
        )
    };
    let results = wait_for_output(&outs[1], Duration::from_secs(120), |r| {
        let seen: BTreeSet<_> = r
            .iter()
            .map(|r| window_key(&serde_json::from_slice(&r.value).unwrap()))
            .filter(|k| windows.contains_key(k))
            .collect();
        seen.len() == windows.len()
    });
    let mut window_rows = 0usize;
    for r in &results {
        let v: serde_json::Value = serde_json::from_slice(&r.value).unwrap();
        if v["trader"] == "FLUSH" {
            continue;
        }
        let want = windows.get(&window_key(&v)).unwrap_or_else(|| panic!("a window that does not exist: {v}"));
        assert_eq!((v["n"].as_i64().unwrap(), v["qty"].as_i64().unwrap()), *want, "{v}");
        window_rows += 1;
    }

    // ROWS: one row per input row, each with the minimum of its trader's
    // last five quantities (in event-time order).
    let mut moving: BTreeMap<(String, i64), i64> = BTreeMap::new();
    for trader in 0..8u64 {
        let mut last: Vec<i64> = Vec::new();
        for i in (trader..RECORDS).step_by(8) {
            let t = trade(i);
            last.push(t.qty);
            let from = last.len().saturating_sub(5);
            moving.insert((format!("T{trader}"), t.ts), *last[from..].iter().min().unwrap());
        }
    }
    let rows_key = |v: &serde_json::Value| (v["trader"].as_str().unwrap().to_owned(), v["ts_ms"].as_i64().unwrap());
    let results = wait_for_output(&outs[2], Duration::from_secs(120), |r| {
        let seen: BTreeSet<_> = r
            .iter()
            .map(|r| serde_json::from_slice::<serde_json::Value>(&r.value).unwrap())
            .filter(|v| v["trader"] != "FLUSH")
            .map(|v| rows_key(&v))
            .collect();
        seen.len() == moving.len()
    });
    let mut rows_seen = BTreeSet::new();
    let mut rows_out = 0usize;
    for r in &results {
        let v: serde_json::Value = serde_json::from_slice(&r.value).unwrap();
        if v["trader"] == "FLUSH" {
            continue;
        }
        let key = rows_key(&v);
        let want = moving.get(&key).unwrap_or_else(|| panic!("a row that was never produced: {v}"));
        assert_eq!(v["m"].as_i64().unwrap(), *want, "{v}");
        rows_out += 1;
        rows_seen.insert(key);
    }
    let rows_duplicates = rows_out - rows_seen.len();

    // Re-keyed: every 10-second window per symbol, exact, though every row
    // crossed the repartition topic and stage 0 replays after each kill.
    let per_symbol = symbol_windows_of(0..RECORDS);
    let symbol_windows = |records: &[Record]| -> BTreeMap<(String, i64), (i64, i64)> {
        records
            .iter()
            .map(|r| serde_json::from_slice::<serde_json::Value>(&r.value).unwrap())
            .filter(|v| v["symbol"] != "F")
            .map(|v| {
                let key = (v["symbol"].as_str().unwrap().to_owned(), v["start_ms"].as_i64().unwrap());
                (key, (v["n"].as_i64().unwrap(), v["qty"].as_i64().unwrap()))
            })
            .collect()
    };
    let results = wait_for_output(&outs[3], Duration::from_secs(120), |r| symbol_windows(r).len() >= per_symbol.len());
    // Every row of a window is the same (a repeat after a kill repeats it).
    for r in &results {
        let v: serde_json::Value = serde_json::from_slice(&r.value).unwrap();
        if v["symbol"] == "F" {
            continue;
        }
        let key = (v["symbol"].as_str().unwrap().to_owned(), v["start_ms"].as_i64().unwrap());
        let want = per_symbol.get(&key).unwrap_or_else(|| panic!("a window that does not exist: {v}"));
        assert_eq!((v["n"].as_i64().unwrap(), v["qty"].as_i64().unwrap()), *want, "{v}");
    }
    assert_eq!(symbol_windows(&results), per_symbol, "re-keyed windows");

    // Three stages: per 10-second window, the busiest symbol's count and the total.
    let mut q5: BTreeMap<i64, (i64, i64)> = BTreeMap::new();
    for ((_, start), (n, _)) in &per_symbol {
        let e = q5.entry(*start).or_default();
        e.0 = e.0.max(*n);
        e.1 += n;
    }
    let last_per_window = |records: &[Record]| -> BTreeMap<i64, (i64, i64)> {
        records
            .iter()
            .map(|r| serde_json::from_slice::<serde_json::Value>(&r.value).unwrap())
            .map(|v| (v["start_ms"].as_i64().unwrap(), (v["top"].as_i64().unwrap(), v["trades"].as_i64().unwrap())))
            .collect()
    };
    let results = wait_for_output(&outs[4], Duration::from_secs(120), |r| last_per_window(r) == q5);
    assert_eq!(last_per_window(&results), q5, "three-stage windows");

    // Top-N: per symbol, the three latest trades (the flush trade is its
    // own symbol), as the last row per (symbol, rank).
    let mut latest: BTreeMap<(String, i64), (String, i64)> = BTreeMap::new();
    for symbol in 0..5u64 {
        let mut ts: Vec<(i64, u64)> = (symbol..RECORDS).step_by(5).map(|i| (trade(i).ts, i)).collect();
        ts.sort_unstable_by(|a, b| b.cmp(a));
        for (rank, (t, i)) in ts.into_iter().take(3).enumerate() {
            let trader = format!("T{}", trade(i).trader);
            latest.insert((format!("S{symbol}"), i64::try_from(rank).unwrap() + 1), (trader, t));
        }
    }
    let ranks = |records: &[Record]| -> BTreeMap<(String, i64), (String, i64)> {
        records
            .iter()
            .map(|r| serde_json::from_slice::<serde_json::Value>(&r.value).unwrap())
            .filter(|v| v["symbol"] != "F")
            .map(|v| {
                let key = (v["symbol"].as_str().unwrap().to_owned(), v["rn"].as_i64().unwrap());
                (key, (v["trader"].as_str().unwrap().to_owned(), v["ts_ms"].as_i64().unwrap()))
            })
            .collect()
    };
    let results = wait_for_output(&outs[5], Duration::from_secs(120), |r| ranks(r) == latest);
    assert_eq!(ranks(&results), latest, "top 3 per symbol");

    // Global: the count over every record (the flush records included)
    // is reached, never passed, and the row that reaches it is exact.
    let all: Vec<Trade> = (0..RECORDS).map(trade).collect();
    let flushes = i64::from(PARTITIONS);
    let want = (
        i64::try_from(RECORDS).unwrap() + flushes,
        all.iter().map(|t| t.qty).sum::<i64>() + flushes,
        all.iter().map(|t| t.qty).min().unwrap().min(1),
    );
    let highest = |records: &[Record]| {
        records
            .iter()
            .map(|r| serde_json::from_slice::<serde_json::Value>(&r.value).unwrap())
            .max_by_key(|v| v["n"].as_i64().unwrap())
    };
    let results = wait_for_output(&outs[6], Duration::from_secs(120), |r| {
        highest(r).is_some_and(|v| v["n"].as_i64() >= Some(want.0))
    });
    let top = highest(&results).unwrap();
    assert_eq!((top["n"].as_i64().unwrap(), top["qty"].as_i64().unwrap(), top["low"].as_i64().unwrap()), want, "{top}");
    assert_eq!(top["latest"], "2027-01-15T08:00:00.000Z", "{top}");
    let global_rows = results.len();

    // Updating: per symbol, the total quantity and how many traders
    // traded it (the flush records left out, see `symbol_totals`).
    let mut updating: BTreeMap<String, (i64, BTreeSet<String>)> = BTreeMap::new();
    for t in &all {
        let e = updating.entry(format!("S{}", t.symbol)).or_default();
        e.0 += t.qty;
        e.1.insert(format!("T{}", t.trader));
    }
    let updating: BTreeMap<String, (i64, i64)> =
        updating.into_iter().map(|(s, (q, t))| (s, (q, i64::try_from(t.len()).unwrap()))).collect();
    let results = wait_for_output(&outs[7], Duration::from_secs(120), |r| symbol_totals(r) == updating);
    assert_eq!(symbol_totals(&results), updating, "an aggregate over an updating aggregate, per symbol");

    // Few groups: per minute, the exact count, sum and distinct counts.
    let mut minutes: BTreeMap<i64, (i64, i64, BTreeSet<u64>, BTreeSet<u64>)> = BTreeMap::new();
    for i in 0..RECORDS {
        let t = trade(i);
        let e = minutes.entry(t.ts - t.ts.rem_euclid(60_000)).or_default();
        e.0 += 1;
        e.1 += t.qty;
        e.2.insert(t.symbol);
        if t.qty > 5 {
            e.3.insert(t.trader);
        }
    }
    let minutes: BTreeMap<i64, [i64; 4]> = minutes
        .into_iter()
        .map(|(m, (n, q, s, t))| (m, [n, q, i64::try_from(s.len()).unwrap(), i64::try_from(t.len()).unwrap()]))
        .collect();
    let per_minute = |records: &[Record]| -> BTreeMap<i64, [i64; 4]> {
        records
            .iter()
            .map(|r| serde_json::from_slice::<serde_json::Value>(&r.value).unwrap())
            .filter(|v| minutes.contains_key(&v["minute_ms"].as_i64().unwrap()))
            .map(|v| {
                // Until the first column's partial of a minute arrives, its
                // SUM is NULL (docs/sql.md): only the last row must be exact.
                let n = |c: &str| v[c].as_i64().unwrap_or(-1);
                (n("minute_ms"), [n("n"), n("qty"), n("symbols"), n("big_traders")])
            })
            .collect()
    };
    let results = wait_for_output(&outs[8], Duration::from_secs(120), |r| per_minute(r) == minutes);
    assert_eq!(per_minute(&results), minutes, "per minute, in three phases");
    println!(
        "FIGURES kills={kills} (group-by {}, windowed {}, rows {}, re-keyed {}, three-stage {}, top-n {}, global {}, \
         updating {}, few-groups {}) input={RECORDS} group_by_results={group_by_records} keys_exact={} windows={} \
         window_rows={window_rows} rows={} rows_duplicated={rows_duplicates} re_keyed_windows={} \
         three_stage_windows={} top_n_ranks={} global_rows={global_rows} updating_symbols_exact={} \
         few_groups_minutes_exact={} lost=0 wedged=0",
        killed[0],
        killed[1],
        killed[2],
        killed[3],
        killed[4],
        killed[5],
        killed[6],
        killed[7],
        killed[8],
        expected.len(),
        windows.len(),
        rows_seen.len(),
        per_symbol.len(),
        q5.len(),
        latest.len(),
        updating.len(),
        minutes.len()
    );
    for (_, w) in &mut workers {
        w.signal("TERM");
        let _ = w.wait(Duration::from_secs(30));
    }
}

/// A stream–table enrichment against the broker, as of event time: 8,000
/// trades on 4 partitions, each joined with the version of its symbol's
/// row valid at its time, from a compacted topic on which a new version of
/// every symbol arrives each 1,000 trades' worth of time — and a tombstone
/// deletes S4 for one of those spans. 2 workers × 2 cores; one worker is
/// killed with SIGKILL mid-run and restarted: every trade is still emitted,
/// with the one right name (or NULL while S4 is deleted) — at least once,
/// never a wrong version.
#[test]
fn a_temporal_table_join_on_two_workers_survives_kill_nine_with_every_row() {
    let (trades, symbols, out) = (unique_name("trades"), unique_name("symbols"), unique_name("enriched"));
    kafka::create_topic(&trades, 4);
    kafka::create_topic_with(&symbols, 4, &[("cleanup.policy", "compact")]);
    kafka::create_topic(&out, 2);
    let group = unique_name("g");
    let sql = "SELECT CAST(t.ts AS BIGINT) AS ats, t.qty, s.name FROM trades t \
               LEFT JOIN symbols FOR SYSTEM_TIME AS OF t.ts AS s ON t.symbol = s.symbol";
    let m = manifest(&unique_name("enrich"), sql, &trades, &out, "");
    let m = m.replace("  sink:", &format!("{}  sink:", kafka_table("symbols", &symbols, "symbol", "name")));
    let (configs, mut first, second) = serve_two(&m, &group);
    const TRADES: u64 = 8_000;
    let base = trade(0).ts;
    // Version k of every symbol from base + k·100 s (trades k·1000 on);
    // S4 deleted from version 5's time until version 6.
    let versions = move |k: i64, far: bool| {
        let ts = if far { base + 10_000_000_000 } else { base + k * 100_000 };
        let mut rows: TableRows = (0..5)
            .map(|s| {
                let v = format!(r#"{{"symbol":"S{s}","name":"S{s}-v{k}","ts":{ts}}}"#);
                (format!("S{s}"), Some(v), s % 4, ts)
            })
            .collect();
        if k == 5 && !far {
            rows[4].1 = None;
        }
        rows
    };
    let producer = {
        let (trades, symbols) = (trades.clone(), symbols.clone());
        Producer::spawn(16, Duration::from_millis(150), move |chunk| {
            if chunk % 2 == 0 {
                publish(&symbols, &versions(i64::try_from(chunk / 2).unwrap(), false));
            }
            produce_trades(&trades, chunk * 500..(chunk + 1) * 500, 4);
        })
    };
    let mut second =
        kill_nine_mid_run(second, &configs[1], &group, &format!("{group}.repartition-1"), &producer, Duration::ZERO);
    producer.finish();
    // Far ahead on both sides: every watermark passes the last trade.
    publish(&symbols, &versions(99, true));
    produce_trades(&trades, 100_000_000..100_000_008, 4);
    let last = trade(TRADES - 1).ts;
    let rows = |records: &[Record]| -> BTreeSet<(i64, Option<String>)> {
        records
            .iter()
            .map(|r| serde_json::from_slice::<serde_json::Value>(&r.value).unwrap())
            .map(|v| (v["ats"].as_i64().unwrap(), v["name"].as_str().map(str::to_owned)))
            .filter(|(ats, _)| *ats <= last)
            .collect()
    };
    let results = wait_for_output(&out, Duration::from_secs(120), |r| rows(r).len() >= TRADES as usize);
    let expected: BTreeSet<(i64, Option<String>)> = (0..TRADES)
        .map(|i| {
            let (t, k) = (trade(i), i / 1000);
            let deleted = t.symbol == 4 && k == 5;
            (t.ts, (!deleted).then(|| format!("S{}-v{k}", t.symbol)))
        })
        .collect();
    let got = rows(&results);
    let wrong: Vec<_> = got.difference(&expected).take(5).collect();
    assert!(wrong.is_empty(), "wrong versions: {wrong:?}");
    assert_eq!(got, expected, "every trade, with the version valid at its time");
    for w in [&first, &second] {
        w.signal("TERM");
    }
    assert!(first.wait(Duration::from_secs(30)).success(), "{}", first.log());
    assert!(second.wait(Duration::from_secs(30)).success(), "{}", second.log());
}

/// A join of a join against the real broker: trades enriched with their
/// symbol's name and then their trader's desk, each as of the trade's time,
/// from two compacted topics — three stages, the traders table written
/// beside the first join's stage into the second repartition topic. One of
/// 2 workers × 2 cores is killed with SIGKILL mid-run and restarted: every
/// trade still comes out, with the versions valid at its time.
#[test]
fn a_join_of_a_join_on_two_workers_survives_kill_nine_with_every_row() {
    let (trades, symbols, traders, out) =
        (unique_name("trades"), unique_name("symbols"), unique_name("traders"), unique_name("enriched"));
    kafka::create_topic(&trades, 4);
    kafka::create_topic_with(&symbols, 4, &[("cleanup.policy", "compact")]);
    kafka::create_topic_with(&traders, 4, &[("cleanup.policy", "compact")]);
    kafka::create_topic(&out, 2);
    let group = unique_name("g");
    let sql = "SELECT CAST(t.ts AS BIGINT) AS ats, s.name, d.desk FROM trades t \
               LEFT JOIN symbols FOR SYSTEM_TIME AS OF t.ts AS s ON t.symbol = s.symbol \
               JOIN traders FOR SYSTEM_TIME AS OF t.ts AS d ON t.trader = d.trader";
    let m = manifest(&unique_name("chain"), sql, &trades, &out, "");
    let tables =
        kafka_table("symbols", &symbols, "symbol", "name") + &kafka_table("traders", &traders, "trader", "desk");
    let m = m.replace("  sink:", &format!("{tables}  sink:"));
    let (configs, mut first, second) = serve_two(&m, &group);
    const TRADES: u64 = 6_000;
    let base = trade(0).ts;
    // Version k of every symbol, and of every trader's desk, from base +
    // k·100 s (trades k·1000 on); trader T3 has no desk from version 2's
    // time to version 3's, so its trades there drop out of the INNER join.
    let versions = move |k: i64, far: bool| {
        let ts = if far { base + 10_000_000_000 } else { base + k * 100_000 };
        let symbols: Vec<_> = (0..5)
            .map(|s| (format!("S{s}"), Some(format!(r#"{{"symbol":"S{s}","name":"S{s}-v{k}","ts":{ts}}}"#)), s % 4, ts))
            .collect();
        let traders: Vec<_> = (0..8)
            .map(|t| {
                let v = format!(r#"{{"trader":"T{t}","desk":"D{}-v{k}","ts":{ts}}}"#, t % 3);
                (format!("T{t}"), (t != 3 || k != 2 || far).then_some(v), t % 2, ts)
            })
            .collect();
        (symbols, traders)
    };
    let producer = {
        let (trades, symbols, traders) = (trades.clone(), symbols.clone(), traders.clone());
        Producer::spawn(12, Duration::from_millis(150), move |chunk| {
            if chunk % 2 == 0 {
                let (s, t) = versions(i64::try_from(chunk / 2).unwrap(), false);
                publish(&symbols, &s);
                publish(&traders, &t);
            }
            produce_trades(&trades, chunk * 500..(chunk + 1) * 500, 4);
        })
    };
    let mut second =
        kill_nine_mid_run(second, &configs[1], &group, &format!("{group}.repartition-2"), &producer, Duration::ZERO);
    producer.finish();
    // Far ahead on every source: every watermark passes the last trade.
    let (s, t) = versions(99, true);
    publish(&symbols, &s);
    publish(&traders, &t);
    produce_trades(&trades, 100_000_000..100_000_008, 4);
    let last = trade(TRADES - 1).ts;
    let expected: BTreeSet<(i64, Option<String>, String)> = (0..TRADES)
        .filter_map(|i| {
            let (t, k) = (trade(i), i / 1000);
            (t.trader != 3 || k != 2)
                .then(|| (t.ts, Some(format!("S{}-v{k}", t.symbol)), format!("D{}-v{k}", t.trader % 3)))
        })
        .collect();
    let rows = |records: &[Record]| -> BTreeSet<(i64, Option<String>, String)> {
        records
            .iter()
            .map(|r| serde_json::from_slice::<serde_json::Value>(&r.value).unwrap())
            .map(|v| {
                let desk = v["desk"].as_str().unwrap_or_default().to_owned();
                (v["ats"].as_i64().unwrap(), v["name"].as_str().map(str::to_owned), desk)
            })
            .filter(|(ats, _, _)| *ats <= last)
            .collect()
    };
    let results = wait_for_output(&out, Duration::from_secs(120), |r| rows(r).len() >= expected.len());
    let got = rows(&results);
    let wrong: Vec<_> = got.difference(&expected).take(5).collect();
    assert!(wrong.is_empty(), "wrong versions: {wrong:?}");
    assert_eq!(got, expected, "every trade, with the versions valid at its time");
    for w in [&first, &second] {
        w.signal("TERM");
    }
    assert!(first.wait(Duration::from_secs(30)).success(), "{}", first.log());
    assert!(second.wait(Duration::from_secs(30)).success(), "{}", second.log());
}

/// An exactly-once job over a new 4-partition trades topic: a running
/// count per `key` (trader, or symbol: through a repartition topic), one
/// update per trade (`emitChanges: PerRecord`), with checkpoints 1.5 s
/// apart. Returns (trades topic, sink topic, group, manifest).
fn exactly_once_counts_job(key: &str) -> (String, String, String, String) {
    let (trades, out) = (unique_name("trades"), unique_name("counts"));
    kafka::create_topic(&trades, 4);
    kafka::create_topic(&out, 2);
    let sql = format!("SELECT {key}, COUNT(*) AS n FROM trades GROUP BY {key}");
    let extra = "    emitChanges: PerRecord\n  delivery: ExactlyOnce\n";
    let m = manifest(&unique_name("eos"), &sql, &trades, &out, extra)
        .replace("checkpointIntervalMillis: 200", "checkpointIntervalMillis: 1500");
    (trades, out, unique_name("g"), m)
}

/// Waits until a `read_committed` reader of `out` sees the count of each
/// of the `keys` values of `key` reach its total for 12 000 trades, then
/// checks each one's counts are 1, 2, … n exactly once and in order.
fn assert_every_count_once(out: &str, key: &str, keys: usize) {
    let per_key = 12_000 / i64::try_from(keys).unwrap();
    let results = wait_for_output(out, Duration::from_secs(120), |r| {
        let c = counts_of(r, key);
        c.len() == keys && c.values().all(|n| n.last().copied() == Some(per_key))
    });
    for (value, n) in counts_of(&results, key) {
        assert_once_in_order(&value, &n, per_key);
    }
}

/// [`assert_every_count_once`] for the values of `key` and their totals
/// (no other value may come out).
fn assert_counts_once(out: &str, key: &str, totals: &BTreeMap<String, i64>) {
    let results = wait_for_output(out, Duration::from_secs(120), |r| {
        let c = counts_of(r, key);
        totals.iter().all(|(value, total)| c.get(value).and_then(|n| n.last()) == Some(total))
    });
    let counts = counts_of(&results, key);
    assert_eq!(counts.keys().collect::<Vec<_>>(), totals.keys().collect::<Vec<_>>(), "the values of {key}");
    for (value, n) in counts {
        assert_once_in_order(&value, &n, totals[&value]);
    }
}

/// Each value of `key` in `records` and the counts `n` it came out with,
/// in order.
fn counts_of(records: &[Record], key: &str) -> BTreeMap<String, Vec<i64>> {
    let mut m: BTreeMap<String, Vec<i64>> = BTreeMap::new();
    for r in records {
        let v: serde_json::Value = serde_json::from_slice(&r.value).unwrap();
        m.entry(v[key].as_str().unwrap().to_owned()).or_default().push(v["n"].as_i64().unwrap());
    }
    m
}

fn assert_once_in_order(value: &str, n: &[i64], total: i64) {
    let repeated = n.windows(2).filter(|w| w[1] <= w[0]).count();
    assert_eq!(repeated, 0, "{value}: {repeated} update(s) repeated or out of order");
    assert_eq!(n, (1..=total).collect::<Vec<_>>(), "{value}: every count once, in order");
}

/// Runs the exactly-once counts per `key` (`keys` values) on 2 workers ×
/// 2 cores while trades arrive, kills each worker of `victims` with
/// SIGKILL well into a checkpoint interval (once it checkpointed a
/// partition of the topic `watch` names for the job's group) and restarts
/// it, then checks every count comes out once and in order.
fn exactly_once_counts_through_kills(
    key: &str,
    keys: usize,
    victims: &[usize],
    watch: impl Fn(&str, &str) -> String,
    settles: bool,
) {
    let (trades, out, group, m) = exactly_once_counts_job(key);
    let (configs, first, second) = serve_two(&m, &group);
    let mut workers = [Some(first), Some(second)];
    let producer = produce_trades_slowly_to(&trades, 12_000, 300, Duration::from_millis(150));
    // Well into an interval: what a worker wrote since its last checkpoint is plenty.
    let into = Duration::from_millis(1000);
    for &v in victims {
        let w = workers[v].take().unwrap();
        workers[v] = Some(kill_nine_mid_run(w, &configs[v], &group, &watch(&group, &trades), &producer, into));
    }
    producer.finish();
    assert_every_count_once(&out, key, keys);
    if settles {
        // At idle the stage's committed offsets reach the end of the
        // repartition topic, past the transaction markers after its last
        // records (which a read_committed consumer never hands over): a
        // lag monitor shows no lag. (They once stopped 6–28 short for good.)
        let topic = watch(&group, &trades);
        let ends: HashMap<i32, i64> = (0..4).map(|p| (p, kafka::watermarks(&topic, p).1)).collect();
        wait_until("the repartition topic committed to its end", Duration::from_secs(60), || {
            let committed = kafka::committed_offsets(&group, &topic, 4);
            (0..4).all(|p| committed.get(&p) == ends.get(&p)).then_some(())
        });
    }
    for w in workers.iter().flatten() {
        w.signal("TERM");
    }
    for w in workers.iter_mut().flatten() {
        assert!(w.wait(Duration::from_secs(30)).success(), "{}", w.log());
    }
}

/// Exactly once against the real broker: the running counts per trader,
/// each worker killed with SIGKILL once well into a checkpoint interval and
/// restarted. A `read_committed` consumer of the sink sees every trader's
/// counts 1, 2, … n exactly once and in order: nothing a killed worker
/// wrote after its last checkpoint is visible, and nothing is missing. (At
/// least once, the same run repeats updates: checked when this test was
/// written, by running it without `delivery`.)
#[test]
fn exactly_once_running_counts_survive_kill_nine_with_every_update_once() {
    exactly_once_counts_through_kills("trader", 8, &[1, 0], |_, trades| trades.to_owned(), false);
}

/// Exactly once through a repartition topic: running counts per symbol
/// over trades keyed by trader (two stages: the counts run after the
/// shuffle, and both stages' cores write in transactions), one worker
/// killed with SIGKILL well into a checkpoint interval and restarted.
/// Every symbol's counts come out 1, 2, … n exactly once and in order: a
/// killed upstream core's uncommitted repartition records are never read
/// downstream, and the downstream core's sink writes and repartition
/// offsets commit together. (Without `delivery`, it repeats updates.)
#[test]
fn exactly_once_covers_the_repartition_topic_of_a_re_keyed_count() {
    exactly_once_counts_through_kills("symbol", 5, &[1], |group, _| format!("{group}.repartition-1"), true);
}

/// Exactly once with every row handed over in process: running counts per
/// symbol over trades keyed by trader on one worker of one core, so every
/// row's repartition partition is its own core's. Killed with SIGKILL well
/// into a checkpoint interval and restarted, it emits every symbol's
/// counts 1, 2, … n once and in order (what it handed over is committed
/// with the source offsets it came from, or not at all), and no record
/// ever reached the repartition topic.
#[test]
fn exactly_once_a_one_core_re_keyed_count_hands_its_rows_over_and_survives_kill_nine() {
    let (trades, out, group, m) = exactly_once_counts_job("symbol");
    let config = config_file(&worker_config(&m, 4, 1, 1, 0, &group));
    let mut worker = Worker::serve(&config, &[]);
    worker.wait_ready(Duration::from_secs(60));
    let producer = produce_trades_slowly_to(&trades, 12_000, 300, Duration::from_millis(150));
    // Past two checkpoints with input: each must commit the new state
    // pointer of the repartition partitions, whose offsets never move.
    let committed = || kafka::committed_offsets(&group, &trades, 4).values().sum::<i64>();
    let mut seen = 0;
    for _ in 0..2 {
        seen =
            wait_until("a checkpoint with input", Duration::from_secs(60), || Some(committed()).filter(|&c| c > seen));
    }
    let mut worker = kill_nine_mid_run(worker, &config, &group, &trades, &producer, Duration::from_millis(1000));
    producer.finish();
    assert_every_count_once(&out, "symbol", 5);
    let repartition = format!("{group}.repartition-1");
    let ends: Vec<i64> = (0..4).map(|p| kafka::watermarks(&repartition, p).1).collect();
    assert_eq!(ends, [0; 4], "nothing went through {repartition}");
    worker.signal("TERM");
    assert!(worker.wait(Duration::from_secs(30)).success(), "{}", worker.log());
}

/// Exactly once, a zombie: worker 1 is frozen (SIGSTOP) well into a
/// checkpoint interval, a replacement with its identity starts (its
/// transactional id fences the frozen one's) and runs, then the frozen
/// process is let go (SIGCONT). It finds itself fenced and stops writing
/// — not ready, saying why, and not fencing the replacement back — and
/// nothing it wrote is ever visible: every count once.
#[test]
fn exactly_once_a_frozen_worker_resumed_after_its_replacement_started_commits_nothing() {
    let (trades, out, group, m) = exactly_once_counts_job("trader");
    let (configs, mut first, mut zombie) = serve_two(&m, &group);
    let producer = produce_trades_slowly_to(&trades, 12_000, 300, Duration::from_millis(150));
    wait_for_own_checkpoint(&zombie, &group, &trades);
    std::thread::sleep(Duration::from_millis(1000));
    zombie.signal("STOP");
    let mut replacement = Worker::serve(&configs[1], &[]);
    replacement.wait_ready(Duration::from_secs(60));
    std::thread::sleep(Duration::from_secs(3));
    zombie.signal("CONT");
    // Sluice's own error, not librdkafka's log of the fencing: the worker
    // has then stopped writing and reports itself not ready.
    let deadline = Instant::now() + Duration::from_secs(60);
    while !(zombie.log().contains("fenced: another instance")
        && zombie.get("/readyz").is_none_or(|(code, _)| code != 200))
    {
        assert!(
            Instant::now() < deadline,
            "the resumed zombie never stopped as fenced and not ready:\n{}",
            zombie.log()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    producer.finish();
    assert_every_count_once(&out, "trader", 8);
    assert!(!replacement.log().contains("fenced: "), "the zombie fenced its replacement:\n{}", replacement.log());
    for w in [&first, &replacement, &zombie] {
        w.signal("TERM");
    }
    assert!(first.wait(Duration::from_secs(30)).success(), "{}", first.log());
    assert!(replacement.wait(Duration::from_secs(30)).success(), "{}", replacement.log());
    let _ = zombie.wait(Duration::from_secs(30));
}

/// Exactly once across a rescale: 2 workers × 2 cores stopped mid-run and
/// 3 workers started in their place (6 engine slots: every partition may
/// change hands, and the new slots have new transactional ids). Every count
/// still comes out exactly once.
#[test]
fn exactly_once_running_counts_survive_a_rescale_from_two_workers_to_three() {
    let (trades, out, group, m) = exactly_once_counts_job("trader");
    let (_, mut first, mut second) = serve_two(&m, &group);
    let producer = produce_trades_slowly_to(&trades, 12_000, 300, Duration::from_millis(150));
    wait_for_own_checkpoint(&second, &group, &trades);
    std::thread::sleep(Duration::from_millis(1000));
    for w in [&first, &second] {
        w.signal("TERM");
    }
    assert!(first.wait(Duration::from_secs(30)).success(), "{}", first.log());
    assert!(second.wait(Duration::from_secs(30)).success(), "{}", second.log());
    // As the operator renders them: with the scale the job leaves.
    let configs: Vec<_> = (0..3)
        .map(|o| {
            let mut c = worker_config(&m, 4, 3, 2, o, &group);
            c.earlier_slots = vec![4];
            config_file(&c)
        })
        .collect();
    let mut workers: Vec<Worker> = configs.iter().map(|c| Worker::serve(c, &[])).collect();
    for w in &mut workers {
        w.wait_ready(Duration::from_secs(60));
    }
    assert!(producer.still_arriving(), "the input is still arriving across the rescale");
    producer.finish();
    assert_every_count_once(&out, "trader", 8);
    for w in &workers {
        w.signal("TERM");
    }
    for w in &mut workers {
        assert!(w.wait(Duration::from_secs(30)).success(), "{}", w.log());
    }
}

/// Exactly once through random faults, run by `bench/faults.sh` on a
/// harness of its own (the broker restart would break tests running
/// beside it): a running count per trader (one update per trade) and
/// 10-second windows per trader and symbol (EMIT FINAL), both
/// `delivery: ExactlyOnce` on 2 workers × 2 cores, while trades arrive;
/// `FAULT_KILLS` (default 10) SIGKILLs of random workers of either job at
/// random moments (`FAULT_SEED`), and the broker stopped for 5 s and
/// started again halfway. A `read_committed` reader of the sinks sees every
/// trader's counts 1, 2, … n once and in order, and every window once with
/// its exact count: 0 missing, 0 duplicated.
#[test]
#[ignore = "disruptive: restarts the shared broker; run by bench/faults.sh"]
fn exactly_once_through_random_kill_nines_and_a_broker_restart_every_result_once() {
    const PARTITIONS: i32 = 4;
    let kills: usize = std::env::var("FAULT_KILLS").ok().and_then(|s| s.parse().ok()).unwrap_or(10);
    let mut schedule = Schedule::from_env();
    let (trades, counts_out, group_counts, counts_job) = exactly_once_counts_job("trader");
    let windows_out = unique_name("windows");
    kafka::create_topic(&windows_out, 2);
    let windowed = "SELECT trader, symbol, CAST(window_start AS BIGINT) AS start_ms, COUNT(*) AS n \
                    FROM trades GROUP BY trader, symbol WINDOW TUMBLING (ts, INTERVAL '10' SECOND)";
    let windows_job =
        manifest(&unique_name("eos-windows"), windowed, &trades, &windows_out, "  delivery: ExactlyOnce\n")
            .replace("checkpointIntervalMillis: 200", "checkpointIntervalMillis: 1000");
    let group_windows = unique_name("g");
    let mut workers: Vec<(std::path::PathBuf, Worker)> = Vec::new();
    for (m, group) in [(&counts_job, &group_counts), (&windows_job, &group_windows)] {
        let (configs, first, second) = serve_two(m, group);
        workers.extend(configs.into_iter().zip([first, second]));
    }
    let producer = produce_trades_slowly_to(&trades, 12_000, 300, Duration::from_millis(150));
    let started = Instant::now();
    let mut killed = [0usize; 4];
    let mut restarted_broker = false;
    for k in 0..kills {
        std::thread::sleep(Duration::from_millis(300 + schedule.below(900)));
        if !restarted_broker && k >= kills / 2 {
            let infra = |action: &str| {
                let status = std::process::Command::new("bash")
                    .arg(harness().repo.join("tests/infra/kafka.sh"))
                    .arg(action)
                    .status()
                    .unwrap();
                assert!(status.success(), "kafka.sh {action}");
            };
            infra("stop");
            std::thread::sleep(Duration::from_secs(5));
            infra("start");
            restarted_broker = true;
        }
        let j = usize::try_from(schedule.below(4)).unwrap();
        kill_and_restart(&mut workers[j]);
        killed[j] += 1;
    }
    producer.finish();
    close_every_window(&trades, PARTITIONS);

    // The counts: every one once, in order (FLUSH's own count aside).
    let per_trader = 12_000 / 8;
    let results = wait_for_output(&counts_out, Duration::from_secs(180), |r| {
        let last = final_per_key(r);
        (0..8).all(|t| last.get(&format!("T{t}")).is_some_and(|v| v["n"].as_i64() == Some(per_trader)))
    });
    let mut counts: BTreeMap<String, Vec<i64>> = BTreeMap::new();
    for r in &results {
        let v: serde_json::Value = serde_json::from_slice(&r.value).unwrap();
        counts.entry(v["trader"].as_str().unwrap().to_owned()).or_default().push(v["n"].as_i64().unwrap());
    }
    counts.remove("FLUSH");
    let expected: Vec<i64> = (1..=per_trader).collect();
    let duplicated: usize = counts.values().map(|n| n.len().saturating_sub(usize::try_from(per_trader).unwrap())).sum();
    for (trader, n) in &counts {
        assert_eq!(n, &expected, "{trader}: every count once, in order");
    }

    // The windows: each once, with its exact count.
    let mut windows: BTreeMap<(String, String, i64), i64> = BTreeMap::new();
    for i in 0..12_000 {
        let t = trade(i);
        *windows
            .entry((format!("T{}", t.trader), format!("S{}", t.symbol), t.ts - t.ts.rem_euclid(10_000)))
            .or_default() += 1;
    }
    let window_of = |r: &Record| {
        let v: serde_json::Value = serde_json::from_slice(&r.value).unwrap();
        let key = (
            v["trader"].as_str().unwrap().to_owned(),
            v["symbol"].as_str().unwrap().to_owned(),
            v["start_ms"].as_i64().unwrap(),
        );
        (key, v["n"].as_i64().unwrap())
    };
    let results = wait_for_output(&windows_out, Duration::from_secs(180), |r| {
        r.iter().map(window_of).filter(|(k, _)| windows.contains_key(k)).count() >= windows.len()
    });
    let got: Vec<_> = results.iter().map(window_of).filter(|(k, _)| k.0 != "FLUSH").collect();
    let distinct: BTreeMap<_, _> = got.iter().cloned().collect();
    assert_eq!(got.len(), distinct.len(), "every window once: {} rows for {} windows", got.len(), distinct.len());
    assert_eq!(distinct, windows, "every window with its exact count");
    println!(
        "FIGURES exactly-once: kills={kills} (counts job {}+{}, windows job {}+{}) broker_restarts=1 \
         updates={} windows={} missing=0 duplicated={duplicated} elapsed={:.0}s",
        killed[0],
        killed[1],
        killed[2],
        killed[3],
        counts.values().map(Vec::len).sum::<usize>(),
        distinct.len(),
        started.elapsed().as_secs_f64()
    );
    for (_, w) in &workers {
        w.signal("TERM");
    }
    for (_, w) in &mut workers {
        assert!(w.wait(Duration::from_secs(30)).success(), "{}", w.log());
    }
}

/// Nexmark through the broker: the generator's first 1000 events (the
/// golden suite's `worker/tests/golden/nexmark/*.txt`) on two-partition
/// topics, and seven of `manifests/nexmark/` as written — q0 (pass-through),
/// q17 (re-keyed by auction and day through a repartition topic, FILTER and
/// DATE_FORMAT), q19 (top-10 per auction), q4 (a join bounded by a column,
/// an updating aggregate after it and an aggregate over that: three
/// repartition topics), q8 (the auctions re-keyed by seller before their
/// windowed aggregate, the people's written beside it) and q9 (a top-1
/// after a join), and q7 (the bids joined with a windowed aggregate of
/// themselves: one topic read once for two plans; at the golden case's
/// 10 ms windows), and q5 (per-window counts joined with their per-window
/// maximum: one repartition topic read once by the maximum and by the
/// counts' projection beside it; 10 ms windows every 2 ms) — run with
/// `sluice-worker run` on two cores. Each result
/// equals what the DuckDB oracle computed for the same events
/// (`worker/tests/golden/expected`).
#[test]
fn nexmark_queries_through_the_broker_match_the_oracle() {
    let repo = &harness().repo;
    // Each kind on a topic of its own, in the partitions the files give.
    let topics: Vec<(&str, String)> = ["person", "auction", "bid"]
        .into_iter()
        .map(|kind| {
            let topic = unique_name(&format!("nexmark-{kind}"));
            kafka::create_topic(&topic, 2);
            let events = std::fs::read_to_string(repo.join(format!("worker/tests/golden/nexmark/{kind}.txt"))).unwrap();
            let lines: Vec<(i32, &str)> =
                events.lines().map(|l| l.split_once(' ').map(|(p, v)| (p.parse().unwrap(), v)).unwrap()).collect();
            let records: Vec<kafka::Outgoing<'_>> = lines.iter().map(|(p, v)| (None, v.as_bytes(), Some(*p))).collect();
            kafka::produce(&topic, &records);
            (kind, topic)
        })
        .collect();
    let expected = |q: &str| -> Vec<serde_json::Value> {
        let file = repo.join(format!("worker/tests/golden/expected/nexmark_{q}.json"));
        let v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(file).unwrap()).unwrap();
        v["rows"].as_array().unwrap().clone()
    };
    // Floats (q17's average) to 12 significant digits, as the oracle's
    // own check compares them.
    let canonical = |v: &serde_json::Value| -> String {
        let m: BTreeMap<String, String> = v
            .as_object()
            .unwrap()
            .iter()
            .map(|(k, x)| (k.clone(), x.as_f64().filter(|_| x.is_f64()).map_or(x.to_string(), |f| format!("{f:.12e}"))))
            .collect();
        format!("{m:?}")
    };
    // (query, whether it writes upserts, the records it reads: 20 people,
    // 60 auctions, 920 bids).
    for (q, upserts, read) in [
        ("q0", false, 920),
        ("q17", true, 920),
        ("q19", true, 920),
        ("q4", true, 980),
        ("q8", false, 80),
        ("q9", true, 980),
        ("q7", false, 920),
        ("q5", false, 920),
    ] {
        let out = unique_name(&format!("nexmark-{q}"));
        kafka::create_topic(&out, 2);
        let mut text = std::fs::read_to_string(repo.join(format!("manifests/nexmark/{q}.yaml")))
            .unwrap()
            .replace("kafka:9092", &harness().bootstrap)
            .replace(&format!("topic: nexmark-{q} "), &format!("topic: {out} "));
        if q == "q7" || q == "q5" {
            // The golden cases' scale: the 920 bids span 100 ms.
            text = text
                .replace("'10' SECOND", "'10' MILLISECOND")
                .replace("'2' SECOND", "'2' MILLISECOND")
                .replace("watermarkDelayMillis: 1000", "watermarkDelayMillis: 2");
        }
        for (kind, topic) in &topics {
            text = text.replace(&format!("topic: nexmark-{kind} "), &format!("topic: {topic} "));
        }
        let m = write_temp(&format!("nexmark-{q}.yaml"), &text);
        let mut w = Worker::run(&m, &["--bounded", "--cores", "2", "--group", &unique_name("g")]);
        assert!(w.wait(Duration::from_secs(120)).success(), "{q} failed:\n{}", w.log());
        assert!(w.log().contains(&format!("records in: {read},")), "{q}: {}", w.log());
        let records = kafka::consume_all(&out, Duration::from_secs(60));
        // An aggregate or a top-N writes upserts: the last row per key.
        let rows: Vec<serde_json::Value> = if upserts {
            final_per_key(&records).into_values().collect()
        } else {
            records.iter().map(|r| serde_json::from_slice(&r.value).unwrap()).collect()
        };
        let mut got: Vec<String> = rows.iter().map(canonical).collect();
        let mut want: Vec<String> = expected(q).iter().map(canonical).collect();
        got.sort();
        want.sort();
        assert_eq!(got.len(), want.len(), "{q}: rows");
        assert!(got == want, "{q}: results differ from the oracle's");
    }
}

/// A source whose value nests the fields it reads and whose other columns
/// come from the Kafka record: the key (also the partition key), the
/// timestamp (also the event time windows use), partition, offset, one
/// header and all of them.
fn metadata_source(topic: &str) -> String {
    let bootstrap = &harness().bootstrap;
    format!(
        r#"    - name: bids
      kafka: {{ bootstrapServers: "{bootstrap}", topic: {topic} }}
      schema:
        columns:
          - {{ name: bid.price, type: bigint, required: true }}
          - {{ name: bid.url.host, type: string }}
          - {{ name: bidder, type: string, metadata: key, required: true }}
          - {{ name: ts, type: timestamp, metadata: timestamp }}
          - {{ name: part, type: bigint, metadata: partition }}
          - {{ name: off, type: bigint, metadata: offset }}
          - {{ name: trace, type: string, metadata: header, header: trace-id }}
          - {{ name: hs, type: string, metadata: headers }}
      eventTime: {{ column: ts, watermarkDelayMillis: 0 }}
      partitionKey: [bidder]
"#
    )
}

fn job_over(name: &str, sql: &str, source: &str, out: &str, dlq: &str) -> String {
    let bootstrap = &harness().bootstrap;
    format!(
        "apiVersion: sluice.dev/v1alpha1\nkind: StreamJob\nmetadata:\n  name: {name}\nspec:\n  sql: |\n    {sql}\n  \
         sources:\n{source}  sink:\n    kafka: {{ bootstrapServers: \"{bootstrap}\", topic: {out} }}\n  deadLetter:\n    \
         kafka: {{ bootstrapServers: \"{bootstrap}\", topic: {dlq} }}\n"
    )
}

#[test]
fn nested_fields_and_kafka_metadata_columns_read_through_the_broker() {
    let (topic, dlq) = (unique_name("bids"), unique_name("dlq"));
    kafka::create_topic(&topic, 2);
    kafka::create_topic(&dlq, 1);
    let trace: &[(&str, Option<&[u8]>)] = &[("trace-id", Some(b"t-1")), ("empty", None), ("trace-id", Some(b"t-2"))];
    let bad_header: &[(&str, Option<&[u8]>)] = &[("trace-id", Some(b"\xff"))];
    // Bidder `a` on partition 0, `b` on 1; record timestamps place them in
    // one-second windows.
    let records: Vec<kafka::Full<'_>> = vec![
        (Some(b"a"), br#"{"bid":{"price":10,"url":{"host":"x.org"}}}"#, 0, 1_000, trace),
        (Some(b"a"), br#"{"bid":{"price":20}}"#, 0, 1_500, &[]),
        (Some(b"b"), br#"{"bid":{"price":5,"url":null}}"#, 1, 1_200, &[]),
        (Some(b"a"), br#"{"bid":{"price":30}}"#, 0, 2_100, &[]),
        (Some(b"b"), br#"{"bid":{"price":7}}"#, 1, 2_500, &[]),
        // Dead letters: a scalar where an object is declared, a missing
        // required nested field, no key, a header that is not text.
        (Some(b"a"), br#"{"bid":3}"#, 0, 2_600, &[]),
        (Some(b"b"), br#"{"bid":{"url":{"host":"y"}}}"#, 1, 2_700, &[]),
        (None, br#"{"bid":{"price":1}}"#, 1, 2_800, &[]),
        (Some(b"b"), br#"{"bid":{"price":1}}"#, 1, 2_900, bad_header),
    ];
    kafka::produce_full(&topic, &records);

    // Every column as read.
    let out = unique_name("rows");
    kafka::create_topic(&out, 1);
    let sql = "SELECT bidder, bid.price, bid.url.host AS host, ts, part, off, trace, hs FROM bids";
    let m = write_temp("rows.yaml", &job_over(&unique_name("meta"), sql, &metadata_source(&topic), &out, &dlq));
    let mut w = Worker::run(&m, &["--bounded", "--cores", "2", "--group", &unique_name("g")]);
    assert!(w.wait(Duration::from_secs(120)).success(), "{}", w.log());
    let rows: Vec<serde_json::Value> = kafka::consume(&out, 5, Duration::from_secs(20))
        .iter()
        .map(|r| serde_json::from_slice(&r.value).unwrap())
        .collect();
    assert_eq!(rows.len(), 5, "{rows:?}");
    let first = rows.iter().find(|r| r["price"] == 10).expect("the first bid");
    assert_eq!(first["bidder"], "a");
    assert_eq!(first["host"], "x.org");
    assert_eq!(first["part"], 0);
    assert_eq!(first["off"], 0);
    assert_eq!(first["trace"], "t-2", "the last value of a repeated header");
    assert_eq!(first["hs"], r#"{"trace-id":"t-2","empty":null}"#);
    assert_eq!(first["ts"], "1970-01-01T00:00:01.000Z", "the record's timestamp");
    let third = rows.iter().find(|r| r["price"] == 5).unwrap();
    assert_eq!(
        (third["bidder"].as_str(), third["part"].as_i64(), third["off"].as_i64()),
        (Some("b"), Some(1), Some(0))
    );
    assert!(third["host"].is_null() && third["trace"].is_null() && third["hs"] == "{}", "{third}");

    let letters = kafka::consume(&dlq, 4, Duration::from_secs(20));
    let reasons: Vec<String> = letters.iter().map(|l| l.header("sluice.error.reason").unwrap_or_default()).collect();
    for want in [
        "field `bid`: expected an object, got number 3",
        "missing required field `bid.price`",
        "required column `bidder` is null: the record has no key",
        "header `trace-id` is not valid UTF-8",
    ] {
        assert!(reasons.iter().any(|r| r.contains(want)), "no dead letter for {want:?}: {reasons:?}");
    }

    // The key as the partition key and the record timestamp as event time:
    // a per-bidder window needs no repartition.
    let out = unique_name("windows");
    kafka::create_topic(&out, 1);
    let sql = "SELECT bidder, window_start, COUNT(*) AS n, SUM(bid.price) AS total FROM bids \
               GROUP BY bidder, TUMBLE(ts, INTERVAL '1' SECOND) EMIT FINAL";
    let m = write_temp("windows.yaml", &job_over(&unique_name("meta-w"), sql, &metadata_source(&topic), &out, &dlq));
    let mut w = Worker::run(&m, &["--bounded", "--cores", "2", "--group", &unique_name("g")]);
    assert!(w.wait(Duration::from_secs(120)).success(), "{}", w.log());
    assert!(w.log().contains("dead-lettered: 4,"), "{}", w.log());
    let mut got: Vec<(String, i64, i64)> = kafka::consume(&out, 4, Duration::from_secs(20))
        .iter()
        .map(|r| serde_json::from_slice::<serde_json::Value>(&r.value).unwrap())
        .map(|v| (v["bidder"].as_str().unwrap().to_owned(), v["n"].as_i64().unwrap(), v["total"].as_i64().unwrap()))
        .collect();
    got.sort();
    assert_eq!(got, [("a".into(), 1, 30), ("a".into(), 2, 30), ("b".into(), 1, 5), ("b".into(), 1, 7)]);
}

/// Incremental checkpoints: a job holding 30,000 groups, then fed 30,000
/// updates of 10 hot keys across many checkpoints, writes to its state
/// topic a small fraction of what building the state wrote (a whole-state
/// checkpoint rewrote all 30,000 groups at every interval). Killed with
/// SIGKILL, it restores from the head and the pages and its totals stay
/// exact.
#[test]
fn incremental_checkpoints_write_what_changed_and_restore_exactly_after_kill_nine() {
    let (topic, out) = (unique_name("hot"), unique_name("hot-totals"));
    kafka::create_topic(&topic, 1);
    kafka::create_topic(&out, 1);
    let group = unique_name("g");
    let sql = "SELECT trader, COUNT(*) AS n, SUM(qty) AS qty FROM trades GROUP BY trader";
    let m = manifest(&unique_name("incr"), sql, &topic, &out, "");
    let cfg = config_file(&worker_config(&m, 1, 1, 1, 0, &group));
    let record = |trader: u64, qty: u64| {
        format!(r#"{{"trader":"T{trader}","symbol":"S","price":1.0,"qty":{qty},"ts":{}}}"#, 1_000 + trader)
    };
    let produce = |lines: &[String]| {
        let records: Vec<_> = lines.iter().map(|v| (None, v.as_bytes(), Some(0))).collect();
        kafka::produce(&topic, &records);
    };
    let mut expected: BTreeMap<String, (i64, i64)> = BTreeMap::new();
    let mut note = |trader: u64, qty: u64| {
        let e = expected.entry(format!("T{trader}")).or_default();
        e.0 += 1;
        e.1 += i64::try_from(qty).unwrap();
    };
    let written = |w: &Worker| -> f64 {
        let text = w.get("/metrics").map(|(_, b)| b).unwrap_or_default();
        metric_values(&text, "sluice_state_written_bytes_total").iter().map(|(_, v)| v).sum()
    };
    let checkpointed_through =
        |offset: i64| kafka::committed_positions(&group, &topic, 1).get(&0).is_some_and(|(o, _)| *o >= offset);

    let mut worker = Worker::serve(&cfg, &[]);
    worker.wait_ready(Duration::from_secs(60));
    let build: Vec<String> = (0..30_000).map(|t| record(t, 1)).collect();
    (0..30_000).for_each(|t| note(t, 1));
    produce(&build);
    let deadline = Instant::now() + Duration::from_secs(90);
    while !checkpointed_through(30_000) {
        assert!(Instant::now() < deadline, "state not checkpointed:\n{}", worker.log());
        std::thread::sleep(Duration::from_millis(100));
    }
    let built = written(&worker);
    assert!(built > 0.0, "the build wrote state");
    // 30,000 updates of 10 hot keys, in 30 bursts over several checkpoints.
    let mut next = 30_000;
    for burst in 0..30u64 {
        let lines: Vec<String> = (0..1_000u64).map(|i| record(i % 10, burst + 2)).collect();
        (0..1_000u64).for_each(|i| note(i % 10, burst + 2));
        produce(&lines);
        next += 1_000;
        std::thread::sleep(Duration::from_millis(100));
    }
    let deadline = Instant::now() + Duration::from_secs(90);
    while !checkpointed_through(next) {
        assert!(Instant::now() < deadline, "updates not checkpointed:\n{}", worker.log());
        std::thread::sleep(Duration::from_millis(100));
    }
    let updates = written(&worker) - built;
    let checkpoints: f64 =
        metric_values(&worker.get("/metrics").unwrap().1, "sluice_checkpoints_total").iter().map(|(_, v)| v).sum();
    eprintln!("state written: building {built} bytes, updating {updates} bytes ({checkpoints} checkpoints)");
    assert!(
        updates < built / 5.0,
        "updating 10 of 30,000 keys over {checkpoints} checkpoints wrote {updates} bytes of state, building them \
         wrote {built}: checkpoints are not incremental"
    );
    let (_, metadata) = kafka::committed_positions(&group, &topic, 1).remove(&0).unwrap();
    assert!(metadata.starts_with("sluice:v3:"), "an incremental checkpoint: {metadata}");

    // Killed after a few more updates; restored, the totals are exact.
    let lines: Vec<String> = (0..500u64).map(|i| record(i * 7, 5)).collect();
    (0..500u64).for_each(|i| note(i * 7, 5));
    produce(&lines);
    std::thread::sleep(Duration::from_millis(300));
    worker.signal("KILL");
    let _ = worker.wait(Duration::from_secs(10));
    let lines: Vec<String> = (0..500u64).map(|i| record(i * 11 + 3, 7)).collect();
    (0..500u64).for_each(|i| note(i * 11 + 3, 7));
    produce(&lines);
    let mut second = Worker::serve(&cfg, &[]);
    second.wait_ready(Duration::from_secs(60));
    assert_trader_totals(&out, &expected);
    let log = second.log();
    assert!(log.contains("restored state") && log.contains("pages"), "restored from pages:\n{log}");
    second.signal("TERM");
    assert!(second.wait(Duration::from_secs(30)).success(), "{}", second.log());
}

/// A GROUP BY of 30,000 traders under a 1 MiB state limit (under half
/// of what they take in memory: without spilling the job stops at the
/// limit) spills its cold groups to the worker's volume and reads them
/// back as their keys come again, spread over all of them. Killed with
/// SIGKILL mid-run, it restores (pages past half its budget straight to
/// disk) and its totals stay exact.
#[test]
fn a_state_larger_than_its_memory_spills_to_the_volume_and_stays_exact_after_kill_nine() {
    spill_through_kill_nine(false);
}

/// The same job exactly once, every update emitted (`emitChanges:
/// PerRecord`): while its state spills, and after the kill is restored
/// past its budget, a `read_committed` reader of the sink sees each
/// trader's counts 1, 2, … n once and in order — nothing the killed
/// worker wrote after its last checkpoint, nothing missing.
#[test]
fn exactly_once_with_a_state_larger_than_its_memory_emits_every_count_once_through_kill_nine() {
    spill_through_kill_nine(true);
}

/// A stream enriched with the latest row of a table of 30,000 symbols
/// under a 1 MiB state limit (the table alone takes several times that in
/// memory): the table's cold keys go to the worker's volume and a trade
/// of a symbol on disk reads its key back. A second version of a sixth of
/// the symbols arrives between two runs of trades; the worker is killed
/// with SIGKILL mid-run and restores its table (pages past half its budget
/// straight to disk). Every trade comes out with the version current when
/// it was read — at least once, never a wrong or missing name.
#[test]
fn a_table_larger_than_its_memory_spills_to_the_volume_and_enriches_exactly_after_kill_nine() {
    const SYMBOLS: u64 = 30_000;
    let (trades, symbols, out) = (unique_name("trades"), unique_name("symbols"), unique_name("enriched"));
    kafka::create_topic(&trades, 1);
    kafka::create_topic_with(&symbols, 1, &[("cleanup.policy", "compact")]);
    kafka::create_topic(&out, 1);
    let group = unique_name("g");
    let sql = "SELECT t.trader, s.name FROM trades t LEFT JOIN symbols s ON t.symbol = s.symbol";
    let extra = "    stateMemoryLimit: 1Mi\n    batchMaxRecords: 256\n";
    let m = manifest(&unique_name("spill-table"), sql, &trades, &out, extra);
    let m = m.replace("  sink:", &format!("{}  sink:", kafka_table("symbols", &symbols, "symbol", "name")));
    let cfg = config_file(&worker_config(&m, 1, 1, 1, 0, &group));
    let dir = std::env::temp_dir().join(unique_name("sluice-spill-table-volume"));
    let dir_s = dir.display().to_string();
    let env = [("SLUICE_WORKER__STATE_DIR", dir_s.as_str())];
    let version = |k: u64, v: u32| -> (String, Option<String>, i32, i64) {
        let name = format!(r#"{{"symbol":"S{k}","name":"S{k}-v{v}","ts":1000}}"#);
        (format!("S{k}"), Some(name), 0, 1_000)
    };
    let mut expected: BTreeMap<String, String> = BTreeMap::new();
    let mut names: BTreeMap<u64, u32> = BTreeMap::new();
    let mut next_trade = 0u64;
    let mut produce_trades = |n: u64, names: &BTreeMap<u64, u32>| {
        let lines: Vec<String> = (next_trade..next_trade + n)
            .map(|i| {
                let symbol = (i * 7_919) % SYMBOLS;
                expected.insert(format!("T{i}"), format!("S{symbol}-v{}", names[&symbol]));
                format!(r#"{{"trader":"T{i}","symbol":"S{symbol}","price":1.0,"qty":1,"ts":{}}}"#, 1_000 + i)
            })
            .collect();
        next_trade += n;
        let records: Vec<_> = lines.iter().map(|v| (None, v.as_bytes(), Some(0))).collect();
        kafka::produce(&trades, &records);
        next_trade
    };
    let spilled = |w: &Worker| -> f64 {
        let text = w.get("/metrics").map(|(_, b)| b).unwrap_or_default();
        metric_values(&text, "sluice_state_spilled_bytes").iter().map(|(_, v)| *v).fold(0.0, f64::max)
    };
    let checkpointed = |w: &Worker, topic: &str, at: i64| {
        let deadline = Instant::now() + Duration::from_secs(120);
        while kafka::committed_positions(&group, topic, 1).get(&0).is_none_or(|(o, _)| *o < at) {
            assert!(Instant::now() < deadline, "{topic} not checkpointed through {at}:\n{}", w.log());
            std::thread::sleep(Duration::from_millis(100));
        }
    };
    let mut worker = Worker::serve(&cfg, &env);
    worker.wait_ready(Duration::from_secs(60));
    publish(&symbols, &(0..SYMBOLS).map(|k| version(k, 1)).collect());
    names.extend((0..SYMBOLS).map(|k| (k, 1)));
    checkpointed(&worker, &symbols, 30_000);
    let read = produce_trades(10_000, &names);
    checkpointed(&worker, &trades, i64::try_from(read).unwrap());
    let most = spilled(&worker);
    assert!(most > 256.0 * 1024.0, "the table went to disk: {most} bytes");
    // A second version of every sixth symbol, read and checkpointed
    // before the trades that see it.
    publish(&symbols, &(0..SYMBOLS).step_by(6).map(|k| version(k, 2)).collect());
    names.extend((0..SYMBOLS).step_by(6).map(|k| (k, 2)));
    checkpointed(&worker, &symbols, 35_000);
    produce_trades(10_000, &names);
    std::thread::sleep(Duration::from_millis(300));
    worker.signal("KILL");
    let _ = worker.wait(Duration::from_secs(10));
    produce_trades(5_000, &names);
    let mut second = Worker::serve(&cfg, &env);
    second.wait_ready(Duration::from_secs(60));
    let named = |records: &[Record]| -> BTreeMap<String, BTreeSet<String>> {
        let mut by_trader: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        for r in records {
            let v: serde_json::Value = serde_json::from_slice(&r.value).unwrap();
            let name = v["name"].as_str().unwrap_or("NULL").to_owned();
            by_trader.entry(v["trader"].as_str().unwrap_or_default().to_owned()).or_default().insert(name);
        }
        by_trader
    };
    let results = wait_for_output(&out, Duration::from_secs(120), |r| named(r).len() >= expected.len());
    let got = named(&results);
    let wrong: Vec<_> = expected
        .iter()
        .filter(|(t, name)| got.get(*t).is_none_or(|n| n.len() != 1 || !n.contains(*name)))
        .take(5)
        .collect();
    assert!(wrong.is_empty(), "trades without their one right name (of {}): {wrong:?}", expected.len());
    assert_eq!(got.len(), expected.len(), "every trade, no other");
    assert!(spilled(&second) > 0.0, "the restored table spilled too");
    second.signal("TERM");
    assert!(second.wait(Duration::from_secs(30)).success(), "{}", second.log());
    let _ = std::fs::remove_dir_all(&dir);
}

fn spill_through_kill_nine(exactly_once: bool) {
    let (topic, out) = (unique_name("spill"), unique_name("spill-totals"));
    kafka::create_topic(&topic, 1);
    kafka::create_topic(&out, 1);
    let group = unique_name("g");
    let sql = "SELECT trader, COUNT(*) AS n, SUM(qty) AS qty FROM trades GROUP BY trader";
    // Batches of 256 rows: a batch brings back a page of 8 groups per
    // key that was on disk, which must fit the small budget.
    let mut extra = "    stateMemoryLimit: 1Mi\n    batchMaxRecords: 256\n".to_owned();
    if exactly_once {
        extra.push_str("    emitChanges: PerRecord\n  delivery: ExactlyOnce\n");
    }
    let m = manifest(&unique_name("spill"), sql, &topic, &out, &extra);
    let cfg = config_file(&worker_config(&m, 1, 1, 1, 0, &group));
    let dir = std::env::temp_dir().join(unique_name("sluice-spill-volume"));
    let dir_s = dir.display().to_string();
    let env = [("SLUICE_WORKER__STATE_DIR", dir_s.as_str())];
    let mut expected: BTreeMap<String, (i64, i64)> = BTreeMap::new();
    let mut produce = |keys: &mut dyn Iterator<Item = u64>, qty: u64| {
        let lines: Vec<String> = keys
            .map(|t| {
                let e = expected.entry(format!("T{t}")).or_default();
                e.0 += 1;
                e.1 += i64::try_from(qty).unwrap();
                format!(r#"{{"trader":"T{t}","symbol":"S","price":1.0,"qty":{qty},"ts":{}}}"#, 1_000 + t)
            })
            .collect();
        let records: Vec<_> = lines.iter().map(|v| (None, v.as_bytes(), Some(0))).collect();
        kafka::produce(&topic, &records);
        expected.clone()
    };
    let spilled = |w: &Worker| -> f64 {
        let text = w.get("/metrics").map(|(_, b)| b).unwrap_or_default();
        metric_values(&text, "sluice_state_spilled_bytes").iter().map(|(_, v)| *v).fold(0.0, f64::max)
    };
    let mut worker = Worker::serve(&cfg, &env);
    worker.wait_ready(Duration::from_secs(60));
    produce(&mut (0..30_000), 1);
    // Keys again, spread over all of them: most are on disk by now.
    produce(&mut (0..15_000).map(|i| (i * 7_919) % 30_000), 2);
    let mut most = 0.0f64;
    let deadline = Instant::now() + Duration::from_secs(120);
    while kafka::committed_positions(&group, &topic, 1).get(&0).is_none_or(|(o, _)| *o < 45_000) {
        assert!(Instant::now() < deadline, "not checkpointed through 45,000:\n{}", worker.log());
        most = most.max(spilled(&worker));
        std::thread::sleep(Duration::from_millis(100));
    }
    most = most.max(spilled(&worker));
    assert!(most > 256.0 * 1024.0, "the state went to disk: {most} bytes at most");
    produce(&mut (0..10_000).map(|i| (i * 31) % 30_000), 3);
    std::thread::sleep(Duration::from_millis(300));
    worker.signal("KILL");
    let _ = worker.wait(Duration::from_secs(10));
    let expected = produce(&mut (0..5_000).map(|i| (i * 13 + 5) % 30_000), 5);
    let mut second = Worker::serve(&cfg, &env);
    second.wait_ready(Duration::from_secs(60));
    if exactly_once {
        assert_counts_once(&out, "trader", &expected.iter().map(|(k, (n, _))| (k.clone(), *n)).collect());
    } else {
        assert_trader_totals(&out, &expected);
    }
    assert!(spilled(&second) > 0.0, "the restored state spilled too");
    second.signal("TERM");
    assert!(second.wait(Duration::from_secs(30)).success(), "{}", second.log());
    let _ = std::fs::remove_dir_all(&dir);
}

/// The last row per trader in `out` is, for each trader, the expected
/// `(n, qty)`: every group there, each exact.
fn assert_trader_totals(out: &str, expected: &BTreeMap<String, (i64, i64)>) {
    let by_trader = |r: &[Record]| -> BTreeMap<String, serde_json::Value> {
        final_per_key(r).into_values().map(|v| (v["trader"].as_str().unwrap_or_default().to_owned(), v)).collect()
    };
    let results = wait_for_output(out, Duration::from_secs(90), |r| {
        let last = by_trader(r);
        expected.iter().all(|(k, (n, _))| last.get(k).is_some_and(|v| v["n"].as_i64() == Some(*n)))
    });
    let last = by_trader(&results);
    assert_eq!(last.len(), expected.len(), "groups");
    for (trader, (n, qty)) in expected {
        let v = &last[trader];
        assert_eq!((v["n"].as_i64(), v["qty"].as_i64()), (Some(*n), Some(*qty)), "{trader}");
    }
}

/// A worker with a volume for local state keeps a copy of its checkpoints
/// there. Restarted after `kill -9` on the same volume, it restores from
/// the copy (the metric says so) with exact totals; given a copy from an
/// earlier checkpoint (a stale or foreign volume), it does not trust it,
/// reads the state topic instead, and is exact again.
#[test]
fn a_restart_restores_from_its_volume_and_never_from_a_stale_copy() {
    let (topic, out) = (unique_name("vol"), unique_name("vol-totals"));
    kafka::create_topic(&topic, 1);
    kafka::create_topic(&out, 1);
    let group = unique_name("g");
    let sql = "SELECT trader, COUNT(*) AS n, SUM(qty) AS qty FROM trades GROUP BY trader";
    let m = manifest(&unique_name("vol"), sql, &topic, &out, "");
    let cfg = config_file(&worker_config(&m, 1, 1, 1, 0, &group));
    let dir = std::env::temp_dir().join(unique_name("sluice-volume"));
    let stale = std::env::temp_dir().join(unique_name("sluice-stale-volume"));
    let dir_s = dir.display().to_string();
    let env = [("SLUICE_WORKER__STATE_DIR", dir_s.as_str())];
    let mut expected: BTreeMap<String, (i64, i64)> = BTreeMap::new();
    let mut produced = 0i64;
    let mut produce = |from: u64, n: u64, qty: u64| {
        let lines: Vec<String> = (from..from + n)
            .map(|i| {
                format!(r#"{{"trader":"T{}","symbol":"S","price":1.0,"qty":{qty},"ts":{}}}"#, i % 3_000, 1_000 + i)
            })
            .collect();
        for i in from..from + n {
            let e = expected.entry(format!("T{}", i % 3_000)).or_default();
            e.0 += 1;
            e.1 += i64::try_from(qty).unwrap();
        }
        let records: Vec<_> = lines.iter().map(|v| (None, v.as_bytes(), Some(0))).collect();
        kafka::produce(&topic, &records);
        produced += i64::try_from(n).unwrap();
        (produced, expected.clone())
    };
    let checkpointed = |offset: i64, w: &Worker| {
        let deadline = Instant::now() + Duration::from_secs(90);
        while kafka::committed_positions(&group, &topic, 1).get(&0).is_none_or(|(o, _)| *o < offset) {
            assert!(Instant::now() < deadline, "not checkpointed through {offset}:\n{}", w.log());
            std::thread::sleep(Duration::from_millis(100));
        }
    };
    let restores = |w: &Worker, from: &str| -> f64 {
        let text = w.get("/metrics").map(|(_, b)| b).unwrap_or_default();
        metric_values(&text, "sluice_state_restores_total")
            .iter()
            .filter(|(l, _)| l.iter().any(|(k, v)| k == "from" && v == from))
            .map(|(_, v)| v)
            .sum()
    };

    // The first run starts its copy; stopped cleanly, the copy is kept
    // aside (it will be stale).
    let mut worker = Worker::serve(&cfg, &env);
    worker.wait_ready(Duration::from_secs(60));
    let (through, _) = produce(0, 6_000, 1);
    checkpointed(through, &worker);
    worker.signal("TERM");
    assert!(worker.wait(Duration::from_secs(30)).success(), "{}", worker.log());
    copy_dir(&dir, &stale);

    // More checkpoints, then kill -9 and more input: restored from the volume.
    let mut worker = Worker::serve(&cfg, &env);
    worker.wait_ready(Duration::from_secs(60));
    assert_eq!(restores(&worker, "topic"), 0.0, "the first restart finds its own copy:\n{}", worker.log());
    assert_eq!(restores(&worker, "volume"), 1.0, "{}", worker.log());
    let (through, _) = produce(6_000, 6_000, 2);
    checkpointed(through, &worker);
    produce(12_000, 500, 3);
    std::thread::sleep(Duration::from_millis(300));
    worker.signal("KILL");
    let _ = worker.wait(Duration::from_secs(10));
    let (_, expected_now) = produce(12_500, 500, 4);
    let mut worker = Worker::serve(&cfg, &env);
    worker.wait_ready(Duration::from_secs(60));
    assert_eq!((restores(&worker, "volume"), restores(&worker, "topic")), (1.0, 0.0), "{}", worker.log());
    assert_trader_totals(&out, &expected_now);
    worker.signal("TERM");
    assert!(worker.wait(Duration::from_secs(30)).success(), "{}", worker.log());

    // The volume holds an earlier checkpoint than the one committed: the
    // state topic is read, and the totals are exact.
    std::fs::remove_dir_all(&dir).unwrap();
    copy_dir(&stale, &dir);
    let (_, expected_now) = produce(13_000, 1_000, 5);
    let mut worker = Worker::serve(&cfg, &env);
    worker.wait_ready(Duration::from_secs(60));
    assert_eq!((restores(&worker, "volume"), restores(&worker, "topic")), (0.0, 1.0), "{}", worker.log());
    assert_trader_totals(&out, &expected_now);
    worker.signal("TERM");
    assert!(worker.wait(Duration::from_secs(30)).success(), "{}", worker.log());
    // Read from the topic, the copy starts again from that checkpoint.
    let mut worker = Worker::serve(&cfg, &env);
    worker.wait_ready(Duration::from_secs(60));
    assert_eq!(restores(&worker, "volume"), 1.0, "{}", worker.log());
    worker.signal("TERM");
    assert!(worker.wait(Duration::from_secs(30)).success(), "{}", worker.log());
    let _ = std::fs::remove_dir_all(&dir);
    let _ = std::fs::remove_dir_all(&stale);
}

/// `stateMemoryLimit` bounds a core's partitions together, not each
/// partition engine alone: eight partitions on one core, each holding
/// under a tenth of the limit, together over it, stop the core with a
/// reason naming the core — before a pod sized from the limit runs out of
/// memory (eight partitions once held eight limits' worth on a pod sized
/// for one).
#[test]
fn the_state_limit_bounds_a_cores_partitions_together() {
    let (topic, out) = (unique_name("distinct"), unique_name("distinct-out"));
    kafka::create_topic(&topic, 8);
    kafka::create_topic(&out, 1);
    let sql = "SELECT trader, COUNT(DISTINCT price) AS n FROM trades GROUP BY trader";
    let m = manifest(&unique_name("bound"), sql, &topic, &out, "    stateMemoryLimit: 1Mi\n");
    let cfg = config_file(&worker_config(&m, 8, 1, 1, 0, &unique_name("g")));
    let mut worker = Worker::serve(&cfg, &[]);
    worker.wait_ready(Duration::from_secs(60));
    let lines: Vec<(String, i32)> = (0..40_000u32)
        .map(|i| {
            let trader = i % 16;
            (format!(r#"{{"trader":"T{trader}","symbol":"S","price":{i}.5,"qty":1,"ts":1000}}"#), (trader % 8) as i32)
        })
        .collect();
    let records: Vec<_> = lines.iter().map(|(v, p)| (None, v.as_bytes(), Some(*p))).collect();
    kafka::produce(&topic, &records);
    let deadline = Instant::now() + Duration::from_secs(90);
    let reason = loop {
        if let Some((503, body)) = worker.get("/readyz")
            && body.contains("stateMemoryLimit")
        {
            break body;
        }
        assert!(Instant::now() < deadline, "the core did not stop within 90 s:\n{}", worker.log());
        std::thread::sleep(Duration::from_millis(300));
    };
    assert!(
        reason.contains("the state of core 0 (8 partition engine(s))"),
        "the core's bound, not one partition's: {reason}"
    );
    assert!(reason.contains(&format!("the largest, reading {topic} partition ")), "names its largest engine: {reason}");
    let metrics = worker.get("/metrics").map(|(_, b)| b).unwrap_or_default();
    let largest: f64 =
        metric_values(&metrics, "sluice_state_bytes_largest_partition").iter().map(|(_, v)| *v).fold(0.0, f64::max);
    assert!(largest < 1024.0 * 1024.0 / 2.0, "every partition alone is well under the limit: {largest}");
    worker.signal("TERM");
    let _ = worker.wait(Duration::from_secs(30));
}
