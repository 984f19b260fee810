//! Nested data on the hot path: orders of ten line items each, decoded
//! from JSON and from Avro into an `array<row<…>>` column and unnested by
//! the engine (`SELECT o.id, i.sku, i.qty * i.price FROM orders o CROSS
//! JOIN UNNEST(o.items) AS i`), side by side in one run. The figure is
//! line items out per second on one core.
//!
//! `cargo bench -p sluice-worker --bench nested` (release profile;
//! `SLUICE_BENCH_RECORDS` orders, default 200,000: 2,000,000 line items).

// A benchmark binary: a broken input should stop it loudly.
#![allow(clippy::panic, clippy::unwrap_used, clippy::expect_used, clippy::cast_precision_loss, clippy::print_stdout)]

use std::hint::black_box;
use std::sync::Arc;
use std::time::{Duration, Instant};

use sluice_crds::{ColumnType, SourceSpec};
use sluice_engine::{Engine, EngineOptions, Output};
use sluice_formats::decode::{AvroDecoder, JsonDecoder};
use sluice_plan::{Batch, EmittedRows, Plan};

const BATCH: usize = 1024;
const ITEMS: usize = 10;

const ORDER_SCHEMA: &str = r#"{"type":"record","name":"Order","fields":[
    {"name":"id","type":"long"},
    {"name":"customer","type":"string"},
    {"name":"items","type":{"type":"array","items":{"type":"record","name":"Item","fields":[
        {"name":"sku","type":"string"},
        {"name":"qty","type":"int"},
        {"name":"price","type":{"type":"bytes","logicalType":"decimal","precision":9,"scale":2}}]}}}
]}"#;

fn plan() -> Plan {
    let source = SourceSpec::table(
        "orders",
        &[
            ("id", ColumnType::Bigint, true),
            ("customer", ColumnType::String, false),
            ("items", ColumnType::parse("array<row<sku string, qty bigint, price decimal(9,2)>>").unwrap(), false),
        ],
    );
    sluice_sql::plan_query(
        "SELECT o.id, i.sku, i.qty * i.price AS amount FROM orders AS o CROSS JOIN UNNEST(o.items) AS i",
        &[source],
    )
    .unwrap()
}

fn json_orders(n: usize) -> Vec<Vec<u8>> {
    (0..n)
        .map(|o| {
            let items: Vec<String> = (0..ITEMS)
                .map(|j| {
                    format!(
                        r#"{{"sku":"sku-{:05}","qty":{},"price":"{}.{:02}"}}"#,
                        (o * 7 + j) % 50_000,
                        j + 1,
                        o % 100,
                        j
                    )
                })
                .collect();
            format!(r#"{{"id":{o},"customer":"c-{}","items":[{}]}}"#, o % 1000, items.join(",")).into_bytes()
        })
        .collect()
}

fn zigzag(v: i64, out: &mut Vec<u8>) {
    let mut z = ((v << 1) ^ (v >> 63)) as u64;
    while z >= 0x80 {
        out.push((z as u8) | 0x80);
        z >>= 7;
    }
    out.push(z as u8);
}

fn avro_text(s: &str, out: &mut Vec<u8>) {
    zigzag(s.len() as i64, out);
    out.extend_from_slice(s.as_bytes());
}

/// The same orders in the Confluent wire format (schema id 1).
fn avro_orders(n: usize) -> Vec<Vec<u8>> {
    (0..n)
        .map(|o| {
            let mut v = vec![0, 0, 0, 0, 1];
            zigzag(o as i64, &mut v);
            avro_text(&format!("c-{}", o % 1000), &mut v);
            zigzag(ITEMS as i64, &mut v);
            for j in 0..ITEMS {
                avro_text(&format!("sku-{:05}", (o * 7 + j) % 50_000), &mut v);
                zigzag(j as i64 + 1, &mut v);
                let cents = ((o % 100) * 100 + j) as u32;
                let be = cents.to_be_bytes();
                zigzag(3, &mut v);
                v.extend_from_slice(&be[1..]);
            }
            zigzag(0, &mut v);
            v
        })
        .collect()
}

/// Counts the rows the engine emits.
struct Count(usize);

impl Output for Count {
    fn rows(&mut self, rows: &EmittedRows<'_>) -> Result<(), sluice_engine::Error> {
        self.0 += rows.selection.len();
        black_box(rows.columns);
        Ok(())
    }

    fn late(&mut self, _: &Batch, _: &[u32]) -> Result<(), sluice_engine::Error> {
        Ok(())
    }
}

/// Decodes `payloads` a batch at a time with `decode` and unnests each
/// batch; the time taken and the line items out.
fn run(
    payloads: &[Vec<u8>],
    plan: &Arc<Plan>,
    mut new_batch: impl FnMut() -> Batch,
    mut decode: impl FnMut(&[u8], &mut Batch),
) -> (Duration, usize) {
    let mut engine = Engine::new(Arc::clone(plan), EngineOptions::default());
    let mut out = Count(0);
    let mut batch = new_batch();
    let started = Instant::now();
    for chunk in payloads.chunks(BATCH) {
        for p in chunk {
            decode(p, &mut batch);
        }
        engine.process(&mut batch, &mut out).unwrap();
        batch = new_batch();
    }
    (started.elapsed(), out.0)
}

fn main() {
    let orders: usize = std::env::var("SLUICE_BENCH_RECORDS").ok().and_then(|v| v.parse().ok()).unwrap_or(200_000);
    let plan = Arc::new(plan());
    let json = json_orders(orders);
    let avro = avro_orders(orders);
    let json_bytes: usize = json.iter().map(Vec::len).sum();
    let avro_bytes: usize = avro.iter().map(Vec::len).sum();
    println!(
        "{orders} orders of {ITEMS} line items: JSON {:.0} bytes/order, Avro {:.0} bytes/order",
        json_bytes as f64 / orders as f64,
        avro_bytes as f64 / orders as f64
    );
    let mut best = [f64::MAX; 2];
    for round in 0..5 {
        let mut jd = JsonDecoder::new(&plan);
        let template = jd.new_batch(BATCH);
        let (tj, nj) = run(&json, &plan, || template.clone(), |p, b| jd.decode(p, b).unwrap());
        let mut ad = AvroDecoder::new(&plan);
        ad.add_schema(1, ORDER_SCHEMA);
        let template = ad.new_batch(BATCH);
        let (ta, na) = run(&avro, &plan, || template.clone(), |p, b| ad.decode(p, b).unwrap());
        assert_eq!((nj, na), (orders * ITEMS, orders * ITEMS), "every line item, once");
        best[0] = best[0].min(tj.as_secs_f64());
        best[1] = best[1].min(ta.as_secs_f64());
        println!(
            "round {round}: JSON {:.2} M line items/s, Avro {:.2} M line items/s",
            nj as f64 / tj.as_secs_f64() / 1e6,
            na as f64 / ta.as_secs_f64() / 1e6
        );
    }
    let items = (orders * ITEMS) as f64;
    println!(
        "best of 5: JSON {:.2} M line items/s, Avro {:.2} M line items/s, Avro/JSON {:.2}x",
        items / best[0] / 1e6,
        items / best[1] / 1e6,
        best[0] / best[1]
    );
}
