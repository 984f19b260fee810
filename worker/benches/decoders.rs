//! How Sluice decodes JSON: the seed scenarios' payloads decoded into the
//! same column vectors four ways, side by side in one run:
//!
//! * **Sluice** — `JsonDecoder::decode`: the flat-object fast path
//!   (`decode/json/flat.rs`), falling back to the visitor for anything else;
//! * **visitor** — the schema-directed `serde_json` `DeserializeSeed` alone
//!   (`JsonDecoder::decode_with_serde`), which writes each value straight
//!   into its column;
//! * **serde_json::Value** — build a value tree per record, then look the
//!   columns up by name (what most JSON pipelines do);
//! * **simd-json (borrowed)** — copy the payload into a reusable buffer
//!   (simd-json parses in place), build its borrowed value tree with reused
//!   buffers, then look the columns up by name.
//!
//! Then the same records as Avro and as Protobuf in the Confluent wire
//! format, decoded by `AvroDecoder` and `ProtobufDecoder` beside JSON's.
//!
//! `cargo bench -p sluice-worker --bench decoders` (release profile;
//! `SLUICE_BENCH_RECORDS`, default 1,000,000). Schemas come from the
//! example manifests, so the bench decodes exactly what the examples declare.

// A benchmark binary: a broken input should stop it loudly.
#![allow(clippy::panic, clippy::unwrap_used, clippy::expect_used, clippy::cast_precision_loss, clippy::print_stdout)]

use std::hint::black_box;
use std::time::{Duration, Instant};

use simd_json::prelude::*;
use sluice_crds::{DatagenScenario, StreamJob};

use sluice_formats::decode::{AvroDecoder, JsonDecoder, ProtobufDecoder};
use sluice_plan::{Batch, Column};
use sluice_plan::{DataType, Plan};
use sluice_sql::plan_query;
use sluice_worker::source::write_record;

#[path = "support/avro_payloads.rs"]
mod avro_payloads;

const BATCH: usize = 4096;

/// A plan reading every column of the example's first source.
fn plan(example: &str) -> Plan {
    let path = format!("{}/../manifests/examples/{example}", env!("CARGO_MANIFEST_DIR"));
    let job: StreamJob = serde_saphyr::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    let source = job.spec.sources[0].clone();
    plan_query(&format!("SELECT * FROM {}", source.name), &[source]).unwrap()
}

/// Pushes one looked-up value into its column; the caller decides how a
/// value is read, so the three decoders share the column writes.
enum Field<'a> {
    Int(i64),
    Float(f64),
    Str(&'a str),
    Absent,
}

fn push(column: &mut Column, data_type: DataType, field: Field<'_>) {
    let ok = match (field, data_type) {
        (Field::Int(x), DataType::Double) => column.push_f64(x as f64),
        (Field::Int(x), _) => column.push_i64(x),
        (Field::Float(x), _) => column.push_f64(x),
        (Field::Str(s), _) => column.push_str(s),
        (Field::Absent, _) => {
            column.push_null();
            Ok(())
        }
    };
    ok.unwrap();
}

fn run(payloads: &[Vec<u8>], mut decode_one: impl FnMut(&[u8], &mut Batch), batch: &mut Batch) -> Duration {
    let started = Instant::now();
    for chunk in payloads.chunks(BATCH) {
        for p in chunk {
            decode_one(p, batch);
        }
        black_box(&*batch);
        batch.clear();
    }
    started.elapsed()
}

fn main() {
    let records: usize = std::env::var("SLUICE_BENCH_RECORDS").ok().and_then(|v| v.parse().ok()).unwrap_or(1_000_000);
    println!("JSON → columns, one core, {records} records per payload kind, median of 3 interleaved rounds\n");
    println!(
        "| payload | Sluice (records/s) | visitor alone | vs Sluice | serde_json::Value | vs Sluice | simd-json borrowed | vs Sluice |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---:|");
    for (name, example, data) in [
        ("S0 orders", "s0-pure-select.yaml", DatagenScenario::Orders),
        ("S1 market data", "s1-rows-window.yaml", DatagenScenario::MarketData),
        ("S2/S3 trades", "s2-group-by.yaml", DatagenScenario::Trades),
    ] {
        let plan = plan(example);
        let names: Vec<String> = plan.source.schema.fields.iter().map(|f| f.name.clone()).collect();
        let types: Vec<DataType> = plan.source.schema.fields.iter().map(|f| f.data_type).collect();
        let payloads: Vec<Vec<u8>> = (0..records as u64)
            .map(|i| {
                let mut v = Vec::new();
                write_record(data, i, &mut v);
                v
            })
            .collect();
        let mut decoder = JsonDecoder::new(&plan);
        let mut batch = decoder.new_batch(BATCH);
        let (mut sluice, mut visitor, mut value, mut simd) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        let mut scratch = Vec::with_capacity(256);
        let mut buffers = simd_json::Buffers::default();
        for _ in 0..3 {
            sluice.push(run(&payloads, |p, b| decoder.decode(p, b).unwrap(), &mut batch));
            visitor.push(run(&payloads, |p, b| decoder.decode_with_serde(p, b).unwrap(), &mut batch));
            value.push(run(
                &payloads,
                |p, b| {
                    let v: serde_json::Value = serde_json::from_slice(p).unwrap();
                    let o = v.as_object().unwrap();
                    for (i, name) in names.iter().enumerate() {
                        let f = match o.get(name) {
                            Some(serde_json::Value::String(s)) => Field::Str(s),
                            Some(n) if n.is_i64() => Field::Int(n.as_i64().unwrap()),
                            Some(n) if n.is_f64() => Field::Float(n.as_f64().unwrap()),
                            _ => Field::Absent,
                        };
                        push(&mut b.columns[i], types[i], f);
                    }
                    b.len += 1;
                },
                &mut batch,
            ));
            simd.push(run(
                &payloads,
                |p, b| {
                    scratch.clear();
                    scratch.extend_from_slice(p);
                    let v = simd_json::value::borrowed::to_value_with_buffers(&mut scratch, &mut buffers).unwrap();
                    for (i, name) in names.iter().enumerate() {
                        let f = match v.get(name.as_str()) {
                            Some(x) if x.is_str() => Field::Str(x.as_str().unwrap()),
                            Some(x) if x.is_i64() => Field::Int(x.as_i64().unwrap()),
                            Some(x) if x.is_f64() => Field::Float(x.as_f64().unwrap()),
                            _ => Field::Absent,
                        };
                        push(&mut b.columns[i], types[i], f);
                    }
                    b.len += 1;
                },
                &mut batch,
            ));
        }
        let rate = |mut v: Vec<Duration>| {
            v.sort();
            records as f64 / v[1].as_secs_f64()
        };
        let (a, v, b, c) = (rate(sluice), rate(visitor), rate(value), rate(simd));
        println!("| {name} | {a:.0} | {v:.0} | {:.2}× | {b:.0} | {:.2}× | {c:.0} | {:.2}× |", v / a, b / a, c / a);
    }
    binary_vs_json(records);
}

/// A proto3 schema of the columns (`int64`, `double`, `string`, `bool`;
/// a timestamp as `int64` epoch milliseconds), field `i + 1` each.
fn proto_schema(fields: &[(String, DataType)]) -> String {
    let mut text = String::from("syntax = \"proto3\";\nmessage Bench {\n");
    for (i, (name, t)) in fields.iter().enumerate() {
        let ty = match t {
            DataType::Double => "double",
            DataType::String => "string",
            DataType::Boolean => "bool",
            _ => "int64",
        };
        text.push_str(&format!("  {ty} {name} = {};\n", i + 1));
    }
    text + "}\n"
}

fn proto_varint(mut v: u64, out: &mut Vec<u8>) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// Row `r` of `batch` as a Protobuf message in the Confluent wire format
/// (schema id 1, message index [0]), as a proto3 serializer writes it:
/// NULLs and default values left out.
fn proto_record(batch: &Batch, r: usize, out: &mut Vec<u8>) {
    out.extend_from_slice(&[0, 0, 0, 0, 1, 0]);
    for (i, c) in batch.columns.iter().enumerate() {
        let number = (i + 1) as u64;
        match c.scalar(r) {
            sluice_plan::Scalar::Bigint(0) | sluice_plan::Scalar::Timestamp(0) | sluice_plan::Scalar::Null => {}
            sluice_plan::Scalar::Bigint(x) | sluice_plan::Scalar::Timestamp(x) => {
                proto_varint(number << 3, out);
                proto_varint(x as u64, out);
            }
            sluice_plan::Scalar::Double(x) if x != 0.0 => {
                proto_varint(number << 3 | 1, out);
                out.extend_from_slice(&x.to_le_bytes());
            }
            sluice_plan::Scalar::String(x) if !x.is_empty() => {
                proto_varint(number << 3 | 2, out);
                proto_varint(x.len() as u64, out);
                out.extend_from_slice(x.as_bytes());
            }
            sluice_plan::Scalar::Boolean(true) => {
                proto_varint(number << 3, out);
                out.push(1);
            }
            _ => {}
        }
    }
}

/// The same records as JSON, as Avro (made by decoding the JSON and
/// writing the columns with the Avro sink's encoder, under the schema it
/// derives) and as Protobuf (written as a proto3 serializer writes them,
/// [`proto_record`]), all in the Confluent wire format, each decoded into
/// the same columns: JSON by `JsonDecoder`, Avro by `AvroDecoder`,
/// Protobuf by `ProtobufDecoder`.
fn binary_vs_json(records: usize) {
    println!("\nJSON, Avro and Protobuf → columns, the same records, one core, median of 3 interleaved rounds\n");
    println!(
        "| payload | JSON (records/s) | bytes/record | Avro (records/s) | bytes/record | Avro vs JSON | \
         Protobuf (records/s) | bytes/record | Protobuf vs JSON | Protobuf, general path only | one pass vs general |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    for (name, example, data) in [
        ("S0 orders", "s0-pure-select.yaml", DatagenScenario::Orders),
        ("S1 market data", "s1-rows-window.yaml", DatagenScenario::MarketData),
        ("S2/S3 trades", "s2-group-by.yaml", DatagenScenario::Trades),
    ] {
        let plan = plan(example);
        let json: Vec<Vec<u8>> = (0..records as u64)
            .map(|i| {
                let mut v = Vec::new();
                write_record(data, i, &mut v);
                v
            })
            .collect();
        let fields: Vec<(String, DataType)> =
            plan.source.schema.fields.iter().map(|f| (f.name.clone(), f.data_type)).collect();
        let (schema, avro) = avro_payloads::to_avro(&plan, json.iter().map(Vec::as_slice));
        let mut decoder = JsonDecoder::new(&plan);
        let mut batch = decoder.new_batch(BATCH);
        let mut proto = Vec::with_capacity(records);
        for chunk in json.chunks(BATCH) {
            for p in chunk {
                decoder.decode(p, &mut batch).unwrap();
            }
            for r in 0..batch.len {
                let mut v = Vec::new();
                proto_record(&batch, r, &mut v);
                proto.push(v);
            }
            batch.clear();
        }
        let mut reader = AvroDecoder::new(&plan);
        reader.add_schema(1, &schema);
        let mut proto_reader = ProtobufDecoder::new(&plan);
        proto_reader.add_schema(1, &proto_schema(&fields));
        // The same records through the general reader alone: what the
        // one-pass path for records in field-number order saves.
        let mut proto_general = ProtobufDecoder::new(&plan).without_flat_path();
        proto_general.add_schema(1, &proto_schema(&fields));
        let (mut j, mut a, mut pb, mut pg) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        for _ in 0..3 {
            j.push(run(&json, |p, b| decoder.decode(p, b).unwrap(), &mut batch));
            a.push(run(&avro, |p, b| reader.decode(p, b).unwrap(), &mut batch));
            pb.push(run(&proto, |p, b| proto_reader.decode(p, b).unwrap(), &mut batch));
            pg.push(run(&proto, |p, b| proto_general.decode(p, b).unwrap(), &mut batch));
        }
        let rate = |mut v: Vec<Duration>| {
            v.sort();
            records as f64 / v[1].as_secs_f64()
        };
        let size = |v: &[Vec<u8>]| v.iter().map(Vec::len).sum::<usize>() as f64 / v.len() as f64;
        let (jr, ar, pr, gr) = (rate(j), rate(a), rate(pb), rate(pg));
        println!(
            "| {name} | {jr:.0} | {:.1} | {ar:.0} | {:.1} | {:.2}× | {pr:.0} | {:.1} | {:.2}× | {gr:.0} | {:.2}× |",
            size(&json),
            size(&avro),
            ar / jr,
            size(&proto),
            pr / jr,
            pr / gr
        );
    }
}
