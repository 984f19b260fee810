//! Joins on one core, in engine: JSON payloads → each side's stage →
//! binary rows → an in-process exchange of 4 partitions (Kafka's
//! partitioner) → the join's engines → JSON results, all on this thread,
//! beside S2 (GROUP BY trader, symbol, aligned) measured in the same run.
//!
//! `cargo bench -p sluice-worker --bench joins` (release profile).
//! `SLUICE_BENCH_RECORDS` sets the stream's records (default 2,000,000);
//! `SLUICE_BENCH_TABLE` the table's rows (default 1,000,000). Three rounds,
//! median reported.
//!
//! * **interval join**: two streams of trades, each trade meeting the one
//!   trade of the other stream with its symbol within ±1 s; events are
//!   both streams' records.
//! * **stream–table, latest**: the table's rows (customers keyed by id)
//!   are loaded first, then orders spread over every key are enriched;
//!   the rate is the orders' (the load's is shown beside).
//! * **stream–table, as of event time**: the same, with `FOR SYSTEM_TIME
//!   AS OF`: orders wait for the watermark, then join the version valid
//!   at their time.
//! * **column-bounded join, one key**: `r.ts BETWEEN l.ts AND l.until`
//!   (the Nexmark q4/q9 shape) with every row on one key and the right
//!   side all kept before the left arrives (the right runs ahead): 10 k,
//!   20 k and 40 k rows a side, each left row open for 5 right rows. The
//!   time of the whole run is shown (issue 37: under 0.2 s at 40 k).

// A benchmark binary: a broken scenario should stop it loudly.
#![allow(clippy::panic, clippy::cast_precision_loss, clippy::print_stdout)]

use std::hint::black_box;
use std::sync::Arc;
use std::time::{Duration, Instant};

use sluice_crds::{ColumnType, DatagenScenario, EventTimeSpec, SourceSpec, TableSpec};
use sluice_engine::{Engine, EngineOptions, Output};
use sluice_formats::decode::{BinaryDecoder, JsonDecoder, RowDecoder};
use sluice_formats::encode::{BinaryEncoder, EncodedRows, JsonEncoder, RowEncoder};
use sluice_plan::EmittedRows;
use sluice_plan::{Batch, Plan};
use sluice_sql::{plan_dataflow, plan_query};
use sluice_worker::runtime::exchange::UpstreamWatermarks;
use sluice_worker::runtime::topology::Topology;
use sluice_worker::source::write_record;

#[path = "../tests/support/local_exchange.rs"]
mod local_exchange;
use local_exchange::LocalExchange;

const BATCH: usize = 4096;
const EXCHANGE_PARTITIONS: usize = 4;

const S2: &str = "SELECT trader_id, symbol, COUNT(*) AS trade_count, AVG(price) AS avg_price, \
     SUM(quantity) AS total_quantity, SUM(price * quantity) AS total_value FROM a GROUP BY trader_id, symbol";
const INTERVAL: &str = "SELECT a.trader_id, a.symbol, a.price, b.price AS other_price, a.quantity FROM a JOIN b \
     ON a.symbol = b.symbol AND b.trade_time BETWEEN a.trade_time - INTERVAL '1' SECOND \
     AND a.trade_time + INTERVAL '1' SECOND";
const LATEST: &str = "SELECT o.order_id, o.amount, c.name, c.tier FROM orders o \
     LEFT JOIN customers c ON o.customer_id = c.id";
const BOUNDED: &str = "SELECT l.k, l.ts, r.ts AS right_ts FROM l JOIN r ON l.k = r.k AND r.ts BETWEEN l.ts AND l.until";
const AS_OF: &str = "SELECT o.order_id, o.amount, c.name, c.tier FROM orders o \
     LEFT JOIN customers FOR SYSTEM_TIME AS OF o.ts AS c ON o.customer_id = c.id";

/// Payloads back to back, with end offsets.
struct Payloads {
    bytes: Vec<u8>,
    ends: Vec<usize>,
}

impl Payloads {
    fn from_fn(n: u64, mut write: impl FnMut(u64, &mut Vec<u8>)) -> Self {
        let mut p = Self { bytes: Vec::with_capacity(n as usize * 100), ends: Vec::with_capacity(n as usize) };
        let mut buf = Vec::new();
        for i in 0..n {
            buf.clear();
            write(i, &mut buf);
            p.bytes.extend_from_slice(&buf);
            p.ends.push(p.bytes.len());
        }
        p
    }

    /// Batch `b` of at most [`BATCH`]: its payloads' bytes and ends.
    fn batch(&self, b: usize) -> Option<(usize, &[usize])> {
        let ends = self.ends.chunks(BATCH).nth(b)?;
        let start = if b == 0 { 0 } else { self.ends[b * BATCH - 1] };
        Some((start, ends))
    }
}

fn trades(name: &str) -> SourceSpec {
    use ColumnType::{Bigint, Double, String, Timestamp};
    SourceSpec {
        event_time: Some(EventTimeSpec { column: "trade_time".into(), watermark_delay_millis: 1000 }),
        ..SourceSpec::table(
            name,
            &[
                ("trader_id", String, true),
                ("symbol", String, true),
                ("price", Double, true),
                ("quantity", Bigint, true),
                ("trade_time", Timestamp, true),
            ],
        )
    }
}

fn orders() -> SourceSpec {
    use ColumnType::{Bigint, Double, Timestamp};
    SourceSpec {
        event_time: Some(EventTimeSpec { column: "ts".into(), watermark_delay_millis: 1000 }),
        ..SourceSpec::table(
            "orders",
            &[
                ("order_id", Bigint, true),
                ("customer_id", Bigint, true),
                ("amount", Double, true),
                ("ts", Timestamp, true),
            ],
        )
    }
}

fn customers(with_time: bool) -> SourceSpec {
    use ColumnType::{Bigint, String, Timestamp};
    SourceSpec {
        event_time: with_time.then(|| EventTimeSpec { column: "ts".into(), watermark_delay_millis: 0 }),
        table: Some(TableSpec { primary_key: vec!["id".into()] }),
        ..SourceSpec::table(
            "customers",
            &[("id", Bigint, true), ("name", String, true), ("tier", String, false), ("ts", Timestamp, false)],
        )
    }
}

/// A side of the column-bounded join: `k`, `ts`, and on the left `until`.
fn bounded_side(name: &str, until: bool) -> SourceSpec {
    use ColumnType::{Bigint, Timestamp};
    let columns: &[(&str, ColumnType, bool)] = if until {
        &[("k", Bigint, true), ("ts", Timestamp, true), ("until", Timestamp, true)]
    } else {
        &[("k", Bigint, true), ("ts", Timestamp, true)]
    };
    SourceSpec {
        event_time: Some(EventTimeSpec { column: "ts".into(), watermark_delay_millis: 0 }),
        ..SourceSpec::table(name, columns)
    }
}

struct Sink {
    encoder: RowEncoder,
    out: EncodedRows,
    rows: u64,
}

impl Output for Sink {
    fn rows(&mut self, rows: &EmittedRows<'_>) -> Result<(), sluice_engine::Error> {
        self.encoder.encode(rows, &mut self.out);
        self.rows += self.out.len() as u64;
        black_box(&self.out.values);
        self.out.clear();
        Ok(())
    }
    fn late(&mut self, _: &Batch, _: &[u32]) -> Result<(), sluice_engine::Error> {
        Ok(())
    }
}

/// Keeps what a side's engine emitted, as binary rows, for the exchange.
struct Collect {
    out: EncodedRows,
}

impl Output for Collect {
    fn rows(&mut self, rows: &EmittedRows<'_>) -> Result<(), sluice_engine::Error> {
        RowEncoder::Binary(BinaryEncoder).encode(rows, &mut self.out);
        Ok(())
    }
    fn late(&mut self, _: &Batch, _: &[u32]) -> Result<(), sluice_engine::Error> {
        Ok(())
    }
}

fn names(plan: &Plan) -> (Vec<String>, Vec<String>) {
    (plan.outputs.iter().map(|o| o.name.clone()).collect(), plan.keys.iter().map(|o| o.name.clone()).collect())
}

/// One side: its source's decoder and engine, and where its rows go.
struct Side {
    decoder: JsonDecoder,
    batch: Batch,
    engine: Engine,
    collect: Collect,
}

/// The join's stage on the exchange's partitions.
struct Joiner {
    parts: Vec<(RowDecoder, Batch, Engine, UpstreamWatermarks)>,
    sink: Sink,
}

impl Joiner {
    fn drain(&mut self, exchange: &mut LocalExchange) {
        let mut marks = Vec::new();
        for (p, (decoder, batch, engine, watermarks)) in self.parts.iter_mut().enumerate() {
            let part = exchange.take(p);
            marks.clear();
            for &(at, from, w) in &part.marks {
                if let Some(c) = watermarks.update(from, w) {
                    marks.push((at, c));
                }
            }
            for i in 0..part.rows.len() {
                let _ = decoder.decode(part.rows.value(i), batch);
            }
            if let Err(e) = engine.process_exchanged(batch, &marks, &part.upstreams, &mut self.sink) {
                panic!("join: {e}");
            }
            batch.clear();
        }
    }
}

/// A join of two one-partition sources, planned and wired as the worker
/// plans and wires it (an exchange of [`EXCHANGE_PARTITIONS`]).
fn wired(sql: &str, sources: &[SourceSpec]) -> Topology {
    let partitions = i32::try_from(EXCHANGE_PARTITIONS).unwrap_or(4);
    let flow = plan_dataflow(sql, sources, partitions).unwrap_or_else(|e| panic!("{sql}: {e}"));
    Topology::new(&flow, sources, |_| Some(1), Some(partitions), |s| format!("exchange-{s}"))
        .unwrap_or_else(|e| panic!("{sql}: {e}"))
}

/// Runs a two-source join dataflow over `inputs` (left, right): batches
/// of the sides in turn, or all of the right side first when
/// `right_first` (a table loaded before the stream). Returns the time the
/// right side alone took when it went first, the total, and the rows out.
fn run_join(topology: &Topology, inputs: [&Payloads; 2], right_first: bool) -> (Duration, Duration, u64) {
    let [left, right, join] = topology.inputs.as_slice() else { panic!("a join is two stages and a branch") };
    let plans = [Arc::clone(&left.plan), Arc::clone(&right.plan)];
    let joined = Arc::clone(&join.plan);
    let mut sides: Vec<Side> = plans
        .iter()
        .map(|plan| {
            let decoder = JsonDecoder::new(plan);
            Side {
                batch: decoder.new_batch(BATCH),
                decoder,
                engine: Engine::new(Arc::clone(plan), EngineOptions::default()),
                collect: Collect { out: EncodedRows::default() },
            }
        })
        .collect();
    let writer = &join.writer;
    let (out_names, out_keys) = names(&joined);
    let mut joiner = Joiner {
        parts: (0..EXCHANGE_PARTITIONS)
            .map(|p| {
                let decoder = RowDecoder::Binary(BinaryDecoder::new(&joined, writer));
                let batch = decoder.new_batch(BATCH);
                let options = EngineOptions { partition: i32::try_from(p).unwrap_or(0), ..EngineOptions::default() };
                (
                    decoder,
                    batch,
                    Engine::new(Arc::clone(&joined), options),
                    UpstreamWatermarks::new(join.upstreams.unwrap_or(0)),
                )
            })
            .collect(),
        sink: Sink {
            encoder: RowEncoder::Json(JsonEncoder::new(&out_names, &out_keys)),
            out: EncodedRows::default(),
            rows: 0,
        },
    };
    let mut exchange = LocalExchange::new(EXCHANGE_PARTITIONS);
    let mut step = |s: usize, b: usize, exchange: &mut LocalExchange, joiner: &mut Joiner| -> bool {
        let Some((mut start, ends)) = inputs[s].batch(b) else { return false };
        let side = &mut sides[s];
        for &end in ends {
            let _ = side.decoder.decode(&inputs[s].bytes[start..end], &mut side.batch);
            start = end;
        }
        if let Err(e) = side.engine.process(&mut side.batch, &mut side.collect) {
            panic!("side {s}: {e}");
        }
        side.batch.clear();
        exchange.route(u32::try_from(s).unwrap_or(0), &side.collect.out);
        side.collect.out.clear();
        if let Some(w) = side.engine.output_watermark() {
            exchange.watermark(s, w);
        }
        joiner.drain(exchange);
        true
    };
    let started = Instant::now();
    let mut loaded = Duration::ZERO;
    if right_first {
        let mut b = 0;
        while step(1, b, &mut exchange, &mut joiner) {
            b += 1;
        }
        loaded = started.elapsed();
    }
    let mut b = 0;
    loop {
        let more_left = step(0, b, &mut exchange, &mut joiner);
        let more_right = !right_first && step(1, b, &mut exchange, &mut joiner);
        if !more_left && !more_right {
            break;
        }
        b += 1;
    }
    // The end of the input: every watermark passes everything.
    for s in 0..2 {
        exchange.watermark(s, i64::MAX);
    }
    joiner.drain(&mut exchange);
    for (_, _, engine, _) in &mut joiner.parts {
        if let Err(e) = engine.finish(&mut joiner.sink) {
            panic!("finish: {e}");
        }
    }
    (loaded, started.elapsed(), joiner.sink.rows)
}

/// S2 on one stage, as in the scenarios bench.
fn s2(plan: &Arc<Plan>, payloads: &Payloads) -> (Duration, u64) {
    let mut decoder = JsonDecoder::new(plan);
    let mut batch = decoder.new_batch(BATCH);
    let mut engine = Engine::new(Arc::clone(plan), EngineOptions::default());
    let (out_names, out_keys) = names(plan);
    let mut sink = Sink {
        encoder: RowEncoder::Json(JsonEncoder::new(&out_names, &out_keys)),
        out: EncodedRows::default(),
        rows: 0,
    };
    let started = Instant::now();
    let mut b = 0;
    while let Some((mut start, ends)) = payloads.batch(b) {
        for &end in ends {
            let _ = decoder.decode(&payloads.bytes[start..end], &mut batch);
            start = end;
        }
        if let Err(e) = engine.process(&mut batch, &mut sink) {
            panic!("S2: {e}");
        }
        batch.clear();
        b += 1;
    }
    if let Err(e) = engine.finish(&mut sink) {
        panic!("S2: {e}");
    }
    (started.elapsed(), sink.rows)
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn main() {
    let env = |name: &str, default: u64| std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default);
    let records = env("SLUICE_BENCH_RECORDS", 2_000_000);
    let table_rows = env("SLUICE_BENCH_TABLE", 1_000_000);
    println!(
        "Sluice joins, one core, in engine: {records} stream records, a {table_rows}-row table, batches of {BATCH}, \
         an exchange of {EXCHANGE_PARTITIONS} partitions; median of 3 rounds\n"
    );
    let trades_a = Payloads::from_fn(records, |i, out| write_record(DatagenScenario::Trades, i, out));
    let orders_p = Payloads::from_fn(records, |i, out| {
        // Every customer id in turn, scattered: each order meets one row.
        let customer = (i * 7_919) % table_rows.max(1);
        let line = format!(
            r#"{{"order_id":{i},"customer_id":{customer},"amount":{}.5,"ts":{}}}"#,
            10 + i % 90,
            1_700_000_000_000 + i * 10
        );
        out.extend_from_slice(line.as_bytes());
    });
    let table = |with_time: bool| {
        Payloads::from_fn(table_rows, move |i, out| {
            let time = if with_time { ",\"ts\":1600000000000" } else { "" };
            let line = format!(
                r#"{{"id":{i},"name":"customer {i}","tier":"{}"{time}}}"#,
                ["gold", "silver"][(i % 2) as usize]
            );
            out.extend_from_slice(line.as_bytes());
        })
    };
    let (plain_table, timed_table) = (table(false), table(true));
    let s2_plan = Arc::new(plan_query(S2, &[trades("a")]).unwrap_or_else(|e| panic!("S2: {e}")));
    let interval = wired(INTERVAL, &[trades("a"), trades("b")]);
    let latest = wired(LATEST, &[orders(), customers(false)]);
    let as_of = wired(AS_OF, &[orders(), customers(true)]);
    let mut runs: [(Vec<Duration>, Vec<Duration>, u64); 4] = Default::default();
    for _ in 0..3 {
        let (t, rows) = s2(&s2_plan, &trades_a);
        runs[0].1.push(t);
        runs[0].2 = rows;
        let (_, t, rows) = run_join(&interval, [&trades_a, &trades_a], false);
        runs[1].1.push(t);
        runs[1].2 = rows;
        for (i, (flow, t)) in [(&latest, &plain_table), (&as_of, &timed_table)].into_iter().enumerate() {
            let (load, total, rows) = run_join(flow, [&orders_p, t], true);
            runs[2 + i].0.push(load);
            runs[2 + i].1.push(total.saturating_sub(load));
            runs[2 + i].2 = rows;
        }
    }
    let bounded = wired(BOUNDED, &[bounded_side("l", true), bounded_side("r", false)]);
    let mut bounded_runs = Vec::new();
    for rows in [10_000u64, 20_000, 40_000] {
        let left = Payloads::from_fn(rows, |i, out| {
            let ts = 1_700_000_000_000 + i * 10;
            out.extend_from_slice(format!(r#"{{"k":1,"ts":{ts},"until":{}}}"#, ts + 40).as_bytes());
        });
        let right = Payloads::from_fn(rows, |i, out| {
            out.extend_from_slice(format!(r#"{{"k":1,"ts":{}}}"#, 1_700_000_000_000 + i * 10).as_bytes());
        });
        let times: Vec<Duration> = (0..3).map(|_| run_join(&bounded, [&left, &right], true).1).collect();
        let out = run_join(&bounded, [&left, &right], true).2;
        bounded_runs.push((rows, median(times), out));
    }
    println!("| query | events/s | ns/event | table load rows/s | output rows |");
    println!("|---|---:|---:|---:|---:|");
    let labels = ["S2 GROUP BY (aligned)", "interval join (2 streams)", "stream–table, latest", "stream–table, as of"];
    for (i, (label, (loads, totals, rows))) in labels.iter().zip(&runs).enumerate() {
        let events = if i == 1 { 2 * records } else { records } as f64;
        let t = median(totals.clone());
        let load = if loads.is_empty() {
            "–".to_owned()
        } else {
            format!("{:.0}", table_rows as f64 / median(loads.clone()).as_secs_f64())
        };
        println!(
            "| {label} | {:.0} | {:.0} | {load} | {rows} |",
            events / t.as_secs_f64(),
            t.as_nanos() as f64 / events
        );
    }
    println!("\n| column-bounded join, one key, right side first | whole run | output rows |");
    println!("|---|---:|---:|");
    for (rows, t, out) in bounded_runs {
        println!("| {rows} rows a side | {:.3} s | {out} |", t.as_secs_f64());
    }
}
