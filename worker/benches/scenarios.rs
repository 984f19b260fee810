//! The five seed scenarios on one core: pre-encoded JSON payloads → decode →
//! engine → encoded JSON results, against the decode-only rate of the same
//! bytes measured in the same run.
//!
//! Then S2, Nexmark q0 and q5's bid stage with Avro in (and out)
//! (Confluent wire format) beside JSON, same records, same run
//! (`cargo bench -p sluice-worker --bench scenarios -- avro` for those alone).
//!
//! `cargo bench -p sluice-worker --bench scenarios` (release profile; set
//! `SLUICE_BENCH_RECORDS` to change the record count, default 2,000,000).
//! Decode-only and full runs alternate, three rounds each, and the median is
//! reported, so both see the same machine conditions.

// A benchmark binary: a broken scenario should stop it loudly.
#![allow(clippy::panic, clippy::cast_precision_loss, clippy::print_stdout)]

use std::hint::black_box;
use std::sync::Arc;
use std::time::{Duration, Instant};

use sluice_crds::{ColumnType, DatagenScenario, EmitChangesMode, EventTimeSpec, SourceSpec};
use sluice_engine::{Engine, EngineOptions, Output};
use sluice_formats::decode::{AvroDecoder, BinaryDecoder, JsonDecoder, RowDecoder};
use sluice_formats::encode::{AvroEncoder, BinaryEncoder, EncodedRows, JsonEncoder, RowEncoder};
use sluice_plan::Batch;
use sluice_plan::EmittedRows;
use sluice_plan::Plan;
use sluice_sql::{plan_dataflow, plan_query};
use sluice_worker::runtime::topology::Topology;
use sluice_worker::source::write_record;

#[path = "support/avro_payloads.rs"]
mod avro_payloads;
#[path = "../tests/support/local_exchange.rs"]
mod local_exchange;
use local_exchange::LocalExchange;

/// The seeds' engine on a 2-core machine of this kind (records/s, 100 K records).
const SEED: [(&str, f64); 6] = [
    ("S0 pure SELECT", 291_465.0),
    ("S1 ROWS WINDOW", 24_710.0),
    ("S2 GROUP BY", 172_710.0),
    ("S3a TUMBLING + GROUP BY", 130_428.0),
    ("S3b EMIT CHANGES (per record)", 5_048.0),
    ("S3b EMIT CHANGES (coalesced)", 5_048.0),
];

struct Scenario {
    name: &'static str,
    data: DatagenScenario,
    sql: &'static str,
    emit: EmitChangesMode,
}

const S2: &str = "SELECT trader_id, symbol, COUNT(*) AS trade_count, AVG(price) AS avg_price, \
     SUM(quantity) AS total_quantity, SUM(price * quantity) AS total_value FROM market_data GROUP BY trader_id, symbol";
const S3A: &str = "SELECT trader_id, symbol, COUNT(*) AS trade_count, AVG(price) AS avg_price, \
     SUM(quantity) AS total_quantity, SUM(price * quantity) AS total_value FROM market_data GROUP BY trader_id, symbol \
     WINDOW TUMBLING (trade_time, INTERVAL '1' MINUTE)";
const S3B: &str = "SELECT trader_id, symbol, COUNT(*) AS trade_count, AVG(price) AS avg_price, \
     SUM(quantity) AS total_quantity, SUM(price * quantity) AS total_value FROM market_data GROUP BY trader_id, symbol \
     WINDOW TUMBLING (trade_time, INTERVAL '1' MINUTE) EMIT CHANGES";

fn scenarios() -> Vec<Scenario> {
    vec![
        Scenario {
            name: SEED[0].0,
            data: DatagenScenario::Orders,
            sql: "SELECT order_id, customer_id, order_date, total_amount FROM orders WHERE total_amount > 100",
            emit: EmitChangesMode::Coalesced,
        },
        Scenario {
            name: SEED[1].0,
            data: DatagenScenario::MarketData,
            sql: "SELECT symbol, price, \
                  AVG(price) OVER (ROWS WINDOW BUFFER 100 ROWS PARTITION BY symbol ORDER BY timestamp) AS moving_avg, \
                  MIN(price) OVER (ROWS WINDOW BUFFER 100 ROWS PARTITION BY symbol ORDER BY timestamp) AS min_price, \
                  MAX(price) OVER (ROWS WINDOW BUFFER 100 ROWS PARTITION BY symbol ORDER BY timestamp) AS max_price \
                  FROM market_data",
            emit: EmitChangesMode::Coalesced,
        },
        Scenario { name: SEED[2].0, data: DatagenScenario::Trades, sql: S2, emit: EmitChangesMode::Coalesced },
        Scenario { name: SEED[3].0, data: DatagenScenario::Trades, sql: S3A, emit: EmitChangesMode::Coalesced },
        Scenario { name: SEED[4].0, data: DatagenScenario::Trades, sql: S3B, emit: EmitChangesMode::PerRecord },
        Scenario { name: SEED[5].0, data: DatagenScenario::Trades, sql: S3B, emit: EmitChangesMode::Coalesced },
    ]
}

fn source(data: DatagenScenario) -> SourceSpec {
    use ColumnType::{Bigint, Double, String, Timestamp};
    let (name, columns, event_time): (_, &[_], _) = match data {
        DatagenScenario::Orders => (
            "orders",
            &[
                ("order_id", Bigint, true),
                ("customer_id", Bigint, true),
                ("order_date", String, true),
                ("total_amount", Double, true),
            ],
            None,
        ),
        DatagenScenario::MarketData => (
            "market_data",
            &[("symbol", String, true), ("price", Double, true), ("timestamp", Timestamp, true)],
            Some("timestamp"),
        ),
        DatagenScenario::Trades => (
            "market_data",
            &[
                ("trader_id", String, true),
                ("symbol", String, true),
                ("price", Double, true),
                ("quantity", Bigint, true),
                ("trade_time", Timestamp, true),
            ],
            Some("trade_time"),
        ),
        DatagenScenario::NexmarkPerson | DatagenScenario::NexmarkAuction | DatagenScenario::NexmarkBid => {
            panic!("{data:?} is not a seed scenario (Nexmark's come from their manifests)")
        }
    };
    SourceSpec {
        event_time: event_time.map(|c| EventTimeSpec { column: c.into(), watermark_delay_millis: 1000 }),
        ..SourceSpec::table(name, columns)
    }
}

/// Payloads back to back, with end offsets.
struct Payloads {
    bytes: Vec<u8>,
    ends: Vec<usize>,
}

impl Payloads {
    fn generate(data: DatagenScenario, n: u64) -> Self {
        let mut p = Payloads { bytes: Vec::with_capacity(n as usize * 110), ends: Vec::with_capacity(n as usize) };
        let mut buf = Vec::new();
        for i in 0..n {
            write_record(data, i, &mut buf);
            p.bytes.extend_from_slice(&buf);
            p.ends.push(p.bytes.len());
        }
        p
    }

    fn from_records(records: &[Vec<u8>]) -> Self {
        let mut p = Payloads { bytes: Vec::new(), ends: Vec::with_capacity(records.len()) };
        for r in records {
            p.bytes.extend_from_slice(r);
            p.ends.push(p.bytes.len());
        }
        p
    }

    fn records(&self) -> impl Iterator<Item = &[u8]> {
        self.ends.iter().scan(0, |start, &end| {
            let r = &self.bytes[*start..end];
            *start = end;
            Some(r)
        })
    }

    fn each_batch(&self, batch: usize, mut f: impl FnMut(&[u8], &[usize], usize)) {
        let mut start = 0;
        for chunk in self.ends.chunks(batch) {
            f(&self.bytes, chunk, start);
            start = *chunk.last().unwrap_or(&start);
        }
    }
}

struct Sink<'a> {
    encoder: &'a RowEncoder,
    out: EncodedRows,
    rows: u64,
    bytes: u64,
}

impl Output for Sink<'_> {
    fn rows(&mut self, rows: &EmittedRows<'_>) -> Result<(), sluice_engine::Error> {
        self.encoder.encode(rows, &mut self.out);
        self.rows += self.out.len() as u64;
        self.bytes += self.out.values.len() as u64;
        black_box(&self.out.values);
        self.out.clear();
        Ok(())
    }
    fn late(&mut self, _: &Batch, _: &[u32]) -> Result<(), sluice_engine::Error> {
        Ok(())
    }
}

const BATCH: usize = 4096;

fn decode_only(plan: &Plan, payloads: &Payloads) -> Duration {
    let mut decoder = JsonDecoder::new(plan);
    let mut batch = decoder.new_batch(BATCH);
    let started = Instant::now();
    payloads.each_batch(BATCH, |bytes, ends, mut start| {
        for &end in ends {
            let _ = decoder.decode(&bytes[start..end], &mut batch);
            start = end;
        }
        black_box(&batch);
        batch.clear();
    });
    started.elapsed()
}

fn json_encoder(plan: &Plan) -> RowEncoder {
    let names: Vec<String> = plan.outputs.iter().map(|o| o.name.clone()).collect();
    let keys: Vec<String> = plan.keys.iter().map(|o| o.name.clone()).collect();
    RowEncoder::Json(JsonEncoder::new(&names, &keys))
}

fn full(plan: &Arc<Plan>, emit: EmitChangesMode, payloads: &Payloads) -> (Duration, u64) {
    full_with(plan, emit, payloads, RowDecoder::json(plan), &json_encoder(plan))
}

/// Decode with `decoder`, run the engine, encode with `encoder`.
fn full_with(
    plan: &Arc<Plan>,
    emit: EmitChangesMode,
    payloads: &Payloads,
    mut decoder: RowDecoder,
    encoder: &RowEncoder,
) -> (Duration, u64) {
    let mut batch = decoder.new_batch(BATCH);
    let mut engine = Engine::new(Arc::clone(plan), EngineOptions { emit_changes: emit, ..EngineOptions::default() });
    let mut sink = Sink { encoder, out: EncodedRows::default(), rows: 0, bytes: 0 };
    let started = Instant::now();
    payloads.each_batch(BATCH, |bytes, ends, mut start| {
        for &end in ends {
            let _ = decoder.decode(&bytes[start..end], &mut batch);
            start = end;
        }
        if let Err(e) = engine.process(&mut batch, &mut sink) {
            eprintln!("engine error: {e}");
        }
        batch.clear();
    });
    if let Err(e) = engine.finish(&mut sink) {
        eprintln!("engine error: {e}");
    }
    (started.elapsed(), sink.rows)
}

/// The stage of Nexmark query `q` that reads the bids, planned from its
/// manifest (`manifests/nexmark/<q>.yaml`) as the worker plans it.
fn nexmark_bid_stage(q: &str) -> Arc<Plan> {
    let path = format!("{}/../manifests/nexmark/{q}.yaml", env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    let job: sluice_crds::StreamJob = serde_saphyr::from_str(&text).unwrap_or_else(|e| panic!("{path}: {e}"));
    let flow = plan_dataflow(&job.spec.sql, &job.spec.sources, 4).unwrap_or_else(|e| panic!("{q}: {e}"));
    let topology = Topology::new(&flow, &job.spec.sources, |_| Some(4), None, |s| format!("exchange-{s}"))
        .unwrap_or_else(|e| panic!("{q}: {e}"));
    let bids = topology.inputs.iter().find(|i| i.source.as_ref().is_some_and(|s| s.name == "bid"));
    Arc::clone(&bids.unwrap_or_else(|| panic!("{q}: no input reads the bids")).plan)
}

/// A query's one stage with Avro in (each record in the Confluent wire
/// format, decoded by `AvroDecoder`) and, when its results go to the sink,
/// out (the Avro sink's encoder), beside the same records and results as
/// JSON: S2, Nexmark q0, and the stage of Nexmark q5 that reads the bids
/// (decode → hop windows → binary rows to its exchange, the same whatever
/// the source's format). Three rounds, medians.
fn over_avro(records: u64) {
    let s2 = Arc::new(plan_query(S2, &[source(DatagenScenario::Trades)]).unwrap_or_else(|e| panic!("S2: {e}")));
    let cases = [
        ("S2 GROUP BY", s2, DatagenScenario::Trades, true),
        ("Nexmark q0 (SELECT *)", nexmark_bid_stage("q0"), DatagenScenario::NexmarkBid, true),
        ("Nexmark q5, its bid stage", nexmark_bid_stage("q5"), DatagenScenario::NexmarkBid, false),
    ];
    println!("\nJSON vs Avro in (and out, to the sink), decode → engine → encode, one core\n");
    println!("| query | JSON records/s | Avro records/s | Avro ÷ JSON | bytes/record JSON | Avro | output rows |");
    println!("|---|---:|---:|---:|---:|---:|---:|");
    for (name, plan, data, to_sink) in cases {
        let json = Payloads::generate(data, records);
        let (schema, avro) = avro_payloads::to_avro(&plan, json.records());
        let avro = Payloads::from_records(&avro);
        let types: Vec<sluice_plan::DataType> = plan.outputs.iter().map(|o| o.expr.data_type()).collect();
        let keys: Vec<String> = plan.keys.iter().map(|o| o.name.clone()).collect();
        let (json_out, avro_out) = if to_sink {
            (json_encoder(&plan), RowEncoder::Avro(AvroEncoder::new(2, &types, &keys)))
        } else {
            (RowEncoder::Binary(BinaryEncoder), RowEncoder::Binary(BinaryEncoder))
        };
        let (mut j, mut a, mut rows) = (Vec::new(), Vec::new(), (0, 0));
        for _ in 0..3 {
            let json_in = RowDecoder::json(&plan);
            let (t, r) = full_with(&plan, EmitChangesMode::Coalesced, &json, json_in, &json_out);
            j.push(t);
            let mut decoder = AvroDecoder::new(&plan);
            decoder.add_schema(1, &schema);
            let avro_in = RowDecoder::encoded(decoder);
            let (u, q) = full_with(&plan, EmitChangesMode::Coalesced, &avro, avro_in, &avro_out);
            a.push(u);
            rows = (r, q);
        }
        assert_eq!(rows.0, rows.1, "{name}: the same rows whatever the format");
        let (j, a) = (median(j), median(a));
        let rate = |t: Duration| records as f64 / t.as_secs_f64();
        let size = |p: &Payloads| p.bytes.len() as f64 / p.ends.len() as f64;
        println!(
            "| {name} | {:.0} | {:.0} | {:.2} | {:.1} | {:.1} | {} |",
            rate(j),
            rate(a),
            rate(a) / rate(j),
            size(&json),
            size(&avro),
            rows.0
        );
    }
}

/// S2's aggregates per symbol, over the trades keyed by trader: one
/// stage when the topic is keyed by symbol (aligned), two joined by an
/// exchange when it is keyed by trader (re-keyed: forward, encode, route
/// by Kafka's partitioner, decode again, aggregate). The re-keyed run goes
/// through four exchange partitions on this one core, as a repartition
/// topic with four partitions would be read by one core.
const REKEYED_SQL: &str = "SELECT symbol, COUNT(*) AS trade_count, AVG(price) AS avg_price, \
     SUM(quantity) AS total_quantity, SUM(price * quantity) AS total_value FROM market_data GROUP BY symbol";
const EXCHANGE_PARTITIONS: usize = 4;

fn market_data_keyed_by(key: &str) -> SourceSpec {
    SourceSpec { partition_key: vec![key.into()], ..source(DatagenScenario::Trades) }
}

/// `binary`: rows cross the exchange as binary rows, as they do in the
/// worker; otherwise as JSON (what they did before), for comparison.
fn rekeyed(payloads: &Payloads, binary: bool) -> (Duration, u64) {
    let partitions = i32::try_from(EXCHANGE_PARTITIONS).unwrap_or(4);
    let dataflow = plan_dataflow(REKEYED_SQL, &[market_data_keyed_by("trader_id")], partitions)
        .unwrap_or_else(|e| panic!("re-keyed S2: {e}"));
    let sources = [market_data_keyed_by("trader_id")];
    let topology = Topology::new(&dataflow, &sources, |_| Some(1), Some(partitions), |s| format!("exchange-{s}"))
        .unwrap_or_else(|e| panic!("re-keyed S2: {e}"));
    let [forward, aggregate] = topology.inputs.as_slice() else { panic!("re-keyed S2 is two stages") };
    let writer = &aggregate.writer;
    let (forward, aggregate) = (Arc::clone(&forward.plan), Arc::clone(&aggregate.plan));
    let encoder_for = |plan: &Plan| {
        let names: Vec<String> = plan.outputs.iter().map(|o| o.name.clone()).collect();
        let keys: Vec<String> = plan.keys.iter().map(|o| o.name.clone()).collect();
        JsonEncoder::new(&names, &keys)
    };
    let forward_encoder =
        if binary { RowEncoder::Binary(BinaryEncoder) } else { RowEncoder::Json(encoder_for(&forward)) };
    let aggregate_encoder = RowEncoder::Json(encoder_for(&aggregate));
    let mut decoder = JsonDecoder::new(&forward);
    let mut batch = decoder.new_batch(BATCH);
    let mut stage0 = Engine::new(Arc::clone(&forward), EngineOptions::default());
    let mut routed = Collect { encoder: &forward_encoder, out: EncodedRows::default() };
    let mut exchange = LocalExchange::new(EXCHANGE_PARTITIONS);
    let mut downstream: Vec<(RowDecoder, Batch, Engine)> = (0..EXCHANGE_PARTITIONS)
        .map(|p| {
            let d = if binary {
                RowDecoder::Binary(BinaryDecoder::new(&aggregate, writer))
            } else {
                RowDecoder::json(&aggregate)
            };
            let b = d.new_batch(BATCH);
            let options = EngineOptions { partition: i32::try_from(p).unwrap_or(0), ..EngineOptions::default() };
            (d, b, Engine::new(Arc::clone(&aggregate), options))
        })
        .collect();
    let mut sink = Sink { encoder: &aggregate_encoder, out: EncodedRows::default(), rows: 0, bytes: 0 };
    let started = Instant::now();
    payloads.each_batch(BATCH, |bytes, ends, mut start| {
        for &end in ends {
            let _ = decoder.decode(&bytes[start..end], &mut batch);
            start = end;
        }
        if let Err(e) = stage0.process(&mut batch, &mut routed) {
            eprintln!("engine error: {e}");
        }
        batch.clear();
        exchange.route(0, &routed.out);
        routed.out.clear();
        for (p, (d, b, engine)) in downstream.iter_mut().enumerate() {
            let part = exchange.take(p);
            for i in 0..part.rows.len() {
                let _ = d.decode(part.rows.value(i), b);
            }
            if let Err(e) = engine.process(b, &mut sink) {
                eprintln!("engine error: {e}");
            }
            b.clear();
        }
    });
    (started.elapsed(), sink.rows)
}

/// Keeps what an engine emitted, encoded, for the exchange.
struct Collect<'a> {
    encoder: &'a RowEncoder,
    out: EncodedRows,
}

impl Output for Collect<'_> {
    fn rows(&mut self, rows: &EmittedRows<'_>) -> Result<(), sluice_engine::Error> {
        self.encoder.encode(rows, &mut self.out);
        Ok(())
    }
    fn late(&mut self, _: &Batch, _: &[u32]) -> Result<(), sluice_engine::Error> {
        Ok(())
    }
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn main() {
    // `cargo bench` passes --bench; `cargo test --benches` would too, with a filter.
    let records: u64 = std::env::var("SLUICE_BENCH_RECORDS").ok().and_then(|v| v.parse().ok()).unwrap_or(2_000_000);
    let only: Option<String> = std::env::args().skip(1).find(|a| !a.starts_with('-'));
    println!("Sluice engine, one core, {records} records per scenario, batches of {BATCH}, median of 3 rounds\n");
    println!(
        "| scenario | records/s | ns/record | decode-only records/s | vs decode-only | vs seeds' engine | output rows |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|");
    for (s, (_, seed)) in scenarios().iter().zip(SEED) {
        if only.as_deref().is_some_and(|o| !s.name.to_lowercase().contains(&o.to_lowercase())) {
            continue;
        }
        let plan = Arc::new(plan_query(s.sql, &[source(s.data)]).unwrap_or_else(|e| panic!("{}: {e}", s.name)));
        let payloads = Payloads::generate(s.data, records);
        let (mut d, mut f, mut rows) = (Vec::new(), Vec::new(), 0);
        for _ in 0..3 {
            d.push(decode_only(&plan, &payloads));
            let (t, r) = full(&plan, s.emit, &payloads);
            f.push(t);
            rows = r;
        }
        let (d, f) = (median(d), median(f));
        let rate = |t: Duration| records as f64 / t.as_secs_f64();
        println!(
            "| {} | {:.0} | {:.0} | {:.0} | {:.0}% | {:.1}× | {} |",
            s.name,
            rate(f),
            f.as_nanos() as f64 / records as f64,
            rate(d),
            100.0 * rate(f) / rate(d),
            rate(f) / seed,
            rows
        );
    }
    if only.as_deref().is_none_or(|o| "avro".contains(&o.to_lowercase())) {
        over_avro(records);
    }
    if only.as_deref().is_some_and(|o| !"s2 re-keyed".contains(&o.to_lowercase())) {
        return;
    }
    // Same records, same query; the topic keyed by symbol or by trader.
    let aligned_plan = Arc::new(
        plan_query(REKEYED_SQL, &[market_data_keyed_by("symbol")]).unwrap_or_else(|e| panic!("aligned S2: {e}")),
    );
    let payloads = Payloads::generate(DatagenScenario::Trades, records);
    let (mut aligned, mut rekeyed_runs, mut json_runs, mut rows) = (Vec::new(), Vec::new(), Vec::new(), (0, 0, 0));
    for _ in 0..3 {
        let (t, r) = full(&aligned_plan, EmitChangesMode::Coalesced, &payloads);
        aligned.push(t);
        let (u, q) = rekeyed(&payloads, true);
        rekeyed_runs.push(u);
        let (v, j) = rekeyed(&payloads, false);
        json_runs.push(v);
        rows = (r, q, j);
    }
    let (a, r, j) = (median(aligned), median(rekeyed_runs), median(json_runs));
    let rate = |t: Duration| records as f64 / t.as_secs_f64();
    println!(
        "\nS2 per symbol: aligned (one stage) vs re-keyed (two stages, in-process exchange of {EXCHANGE_PARTITIONS})\n"
    );
    println!("| run | records/s | ns/record | output rows |");
    println!("|---|---:|---:|---:|");
    println!("| aligned | {:.0} | {:.0} | {} |", rate(a), a.as_nanos() as f64 / records as f64, rows.0);
    println!("| re-keyed | {:.0} | {:.0} | {} |", rate(r), r.as_nanos() as f64 / records as f64, rows.1);
    println!(
        "| re-keyed, JSON rows on the exchange | {:.0} | {:.0} | {} |",
        rate(j),
        j.as_nanos() as f64 / records as f64,
        rows.2
    );
    println!("\nre-keyed ÷ aligned: {:.2} (JSON rows: {:.2})", rate(r) / rate(a), rate(j) / rate(a));
}
