//! Sources, records and checks shared by the never-panics properties, the decoder-path checks
//! and the fuzzer (`examples/fuzz.rs`), so the three exercise the same
//! schemas. Included with `#[path]`; each user needs only some of it.
#![allow(dead_code)]

use std::sync::Arc;

use sluice_crds::{ColumnSpec, ColumnType, EventTimeSpec, SourceSpec};
use sluice_engine::{Engine, EngineOptions, Output};
use sluice_formats::decode::{AvroDecoder, DebeziumAvroDecoder, DebeziumDecoder, JsonDecoder, ProtobufDecoder};
use sluice_plan::EmittedRows;
use sluice_plan::{Batch, Plan};

/// Every type once; the event time `ts` a timestamp or a bigint (epoch
/// ms): a bigint takes any i64 from JSON, so both must be exercised.
pub fn all_types_source(ts: ColumnType) -> SourceSpec {
    SourceSpec {
        event_time: Some(EventTimeSpec { column: "ts".into(), watermark_delay_millis: 1_000 }),
        ..SourceSpec::table(
            "t",
            &[
                ("s", ColumnType::String, false),
                ("d", ColumnType::Double, false),
                ("n", ColumnType::Bigint, false),
                ("b", ColumnType::Boolean, false),
                ("ts", ts, false),
                ("m", ColumnType::Decimal { precision: 18, scale: 4 }, false),
                // 38 digits: i128 storage.
                ("w", ColumnType::Decimal { precision: 38, scale: 10 }, false),
            ],
        )
    }
}

/// The decoders' source: a required column, every type, and a declared
/// column the query does not read (type-checked only).
pub fn decoder_source() -> SourceSpec {
    SourceSpec::table(
        "t",
        &[
            ("id", ColumnType::Bigint, true),
            ("price", ColumnType::Double, false),
            ("name", ColumnType::String, false),
            ("ts", ColumnType::Timestamp, false),
            ("flag", ColumnType::Boolean, false),
            ("unread", ColumnType::Bigint, false),
            ("note", ColumnType::String, false),
            // A text column the query does not read: checked, not kept.
            ("memo", ColumnType::String, false),
            ("amount", ColumnType::Decimal { precision: 12, scale: 2 }, false),
            ("big", ColumnType::Decimal { precision: 38, scale: 10 }, false),
        ],
    )
}

/// The query the decoders run over [`decoder_source`].
pub const DECODER_SQL: &str = "SELECT id, price, name, ts, flag, note, amount, big FROM t";

/// Records at the edges of every type over [`all_types_source`], and some
/// the decoder must reject.
pub const EXTREME_RECORDS: &[&str] = &[
    r#"{"s":"abc","d":1.5,"n":1,"b":true,"ts":0,"m":0.0001,"w":0.0000000001}"#,
    r#"{"s":"","d":-1e308,"n":-9223372036854775808,"b":false,"ts":-8640000000000000,"m":-99999999999999.9999,"w":-9999999999999999999999999999.9999999999}"#,
    r#"{"s":"ÄÖü ß","d":1e308,"n":9223372036854775807,"b":null,"ts":8640000000000000,"m":"99999999999999.9999","w":"9999999999999999999999999999.9999999999"}"#,
    r#"{"s":null,"d":null,"n":0,"ts":-9223372036854775808,"m":1e-400,"w":1e-400}"#,
    r#"{"s":"x","d":0.0,"n":-1,"ts":0,"w":99999999999999999999999999999}"#,
    r#"{"s":"x","d":0.0,"n":-1,"ts":0,"m":100000000000000}"#,
    r#"{"s":"x","d":0.0,"n":-1,"ts":9223372036854775807}"#,
    r#"{"s":"x","d":0.0,"n":-1,"ts":-9223372036854770000}"#,
    r#"{"s":"x","d":0.0,"n":-1,"ts":9223372036854770000}"#,
    r#"{"n":"not a number"}"#,
    r#"not json"#,
];

struct Discard;
impl Output for Discard {
    fn rows(&mut self, _: &EmittedRows<'_>) -> Result<(), sluice_engine::Error> {
        Ok(())
    }
    fn late(&mut self, _: &Batch, _: &[u32]) -> Result<(), sluice_engine::Error> {
        Ok(())
    }
}

/// Runs `plan` over [`EXTREME_RECORDS`] to the end of input. What it
/// returns does not matter; that it returns (no panic, no hang) does.
/// Records the decoder rejects are dead letters, not panics.
pub fn run_on_extreme_records(plan: Plan) {
    let plan = Arc::new(plan);
    let mut engine = Engine::new(Arc::clone(&plan), EngineOptions::default());
    let mut decoder = JsonDecoder::new(&plan);
    let mut batch = decoder.new_batch(16);
    for r in EXTREME_RECORDS {
        let _ = decoder.decode(r.as_bytes(), &mut batch);
    }
    let _ = engine.process(&mut batch, &mut Discard);
    let _ = engine.finish(&mut Discard);
}

/// Every cell of `batch`, as text precise to the bit (so -0.0 ≠ 0.0).
pub fn cells(batch: &Batch) -> Vec<String> {
    let mut out = Vec::new();
    for row in 0..batch.len {
        for c in &batch.columns {
            if c.len() > row {
                out.push(format!("{:?}", c.scalar(row)));
            }
        }
    }
    out
}

/// Avro writer schemas, by id, with every construct: unions, nested and
/// recursive records, arrays, maps, enums, fixed, decimals, logical types.
pub const AVRO_SCHEMAS: &[(u32, &str)] = &[
    (
        1,
        r#"{"type":"record","name":"R","fields":[
            {"name":"id","type":"long"},
            {"name":"price","type":["null","double","string"]},
            {"name":"name","type":{"type":"enum","name":"E","symbols":["A","B","C"]}},
            {"name":"ts","type":{"type":"long","logicalType":"timestamp-micros"}},
            {"name":"tags","type":{"type":"array","items":["null","string"]}},
            {"name":"attrs","type":{"type":"map","values":{"type":"fixed","name":"F","size":3}}},
            {"name":"amount","type":{"type":"bytes","logicalType":"decimal","scale":4}},
            {"name":"flag","type":"boolean"}
        ]}"#,
    ),
    (
        2,
        r#"{"type":"record","name":"L","fields":[
            {"name":"id","type":"int"},
            {"name":"nested","type":["null",{"type":"record","name":"N","fields":[
                {"name":"day","type":{"type":"int","logicalType":"date"}},
                {"name":"next","type":["null","L"]}]}]},
            {"name":"name","type":"bytes"}
        ]}"#,
    ),
    (3, r#"{"type":"record","name":"S","fields":[{"name":"id","type":"float"},{"name":"flag","type":"string"}]}"#),
];

/// A writer schema the decoder reads by its flat path: values and
/// nullable values only, a field no column reads, none for `nested.day`.
pub const AVRO_FLAT_SCHEMA: &str = r#"{"type":"record","name":"F","fields":[
    {"name":"id","type":"long"},
    {"name":"price","type":["null","double"]},
    {"name":"extra","type":"string"},
    {"name":"name","type":["string","null"]},
    {"name":"ts","type":{"type":"long","logicalType":"timestamp-millis"}},
    {"name":"amount","type":["null",{"type":"bytes","logicalType":"decimal","scale":2}]},
    {"name":"flag","type":["null","boolean"]}
]}"#;

/// The columns the binary decoders' fixtures read: some of every field of
/// [`AVRO_SCHEMAS`] and [`PROTOBUF_SCHEMA`], nested ones too.
#[allow(clippy::unwrap_used)]
fn binary_decoder_plan() -> Plan {
    sluice_sql::plan_query(
        r#"SELECT id, price, name, ts, amount, "nested.day", flag FROM t"#,
        &[binary_decoder_source()],
    )
    .unwrap()
}

/// The source [`binary_decoder_plan`] reads.
fn binary_decoder_source() -> SourceSpec {
    SourceSpec::table(
        "t",
        &[
            ("id", ColumnType::Bigint, true),
            ("price", ColumnType::Double, false),
            ("name", ColumnType::String, false),
            ("ts", ColumnType::Timestamp, false),
            ("amount", ColumnType::String, false),
            ("nested.day", ColumnType::Timestamp, false),
            ("flag", ColumnType::Boolean, false),
        ],
    )
}

/// An Avro decoder of the fixtures' columns, with every [`AVRO_SCHEMAS`]
/// entry, and schema 1's array and map as nested columns.
#[allow(clippy::unwrap_used)]
pub fn avro_decoder() -> AvroDecoder {
    let mut source = binary_decoder_source();
    for (name, t) in [("tags", "array<string>"), ("attrs", "map<string, string>")] {
        source.schema.columns.push(ColumnSpec::field(name, ColumnType::parse(t).unwrap(), false));
    }
    let plan = sluice_sql::plan_query(
        r#"SELECT id, price, name, ts, amount, "nested.day", flag, tags, attrs FROM t"#,
        &[source],
    )
    .unwrap();
    let mut d = AvroDecoder::new(&plan);
    for (id, schema) in AVRO_SCHEMAS {
        d.add_schema(*id, schema);
    }
    d
}

fn avro_long(v: i64, out: &mut Vec<u8>) {
    let mut z = ((v << 1) ^ (v >> 63)) as u64;
    while z >= 0x80 {
        out.push((z as u8) | 0x80);
        z >>= 7;
    }
    out.push(z as u8);
}

fn avro_bytes(b: &[u8], out: &mut Vec<u8>) {
    avro_long(i64::try_from(b.len()).unwrap_or(i64::MAX), out);
    out.extend_from_slice(b);
}

/// A valid datum of each [`AVRO_SCHEMAS`] entry, in the wire format.
pub fn avro_seeds() -> Vec<Vec<u8>> {
    let framed = |id: u32| {
        let mut v = vec![0];
        v.extend_from_slice(&id.to_be_bytes());
        v
    };
    let mut r = framed(1);
    avro_long(5, &mut r);
    avro_long(1, &mut r);
    r.extend_from_slice(&2.5f64.to_le_bytes());
    avro_long(2, &mut r);
    avro_long(1_700_000_000_000_000, &mut r);
    for v in [2, 1] {
        avro_long(v, &mut r);
    }
    avro_bytes(b"a", &mut r);
    avro_long(0, &mut r);
    avro_long(0, &mut r);
    avro_long(1, &mut r);
    avro_bytes(b"k", &mut r);
    r.extend_from_slice(b"xyz");
    avro_long(0, &mut r);
    avro_bytes(&[0x01, 0x02], &mut r);
    r.push(1);
    let mut l = framed(2);
    for v in [3, 1, 19_000, 1, 4, 0] {
        avro_long(v, &mut l);
    }
    avro_bytes(b"in", &mut l);
    avro_bytes(b"out", &mut l);
    let mut s = framed(3);
    s.extend_from_slice(&1.5f32.to_le_bytes());
    avro_bytes(b"true", &mut s);
    vec![r, l, s]
}

/// A JSON decoder of nested columns: arrays of rows holding arrays, maps,
/// deep arrays, rows of rows.
#[allow(clippy::unwrap_used)]
pub fn nested_json_decoder() -> JsonDecoder {
    let nested = |s: &str| ColumnType::parse(s).unwrap();
    let source = SourceSpec::table(
        "t",
        &[
            ("id", ColumnType::Bigint, true),
            ("items", nested("array<row<sku string, qty bigint, price decimal(9,2), tags array<string>>>"), false),
            ("attrs", nested("map<string, bigint>"), false),
            ("codes", nested("map<bigint, timestamp>"), false),
            ("deep", nested("array<array<array<double>>>"), false),
            ("r", nested("row<a row<b array<map<string, boolean>>>, c decimal(38,10)>"), false),
        ],
    );
    JsonDecoder::new(&sluice_sql::plan_query("SELECT id, items, attrs, codes, deep, r FROM t", &[source]).unwrap())
}

/// Valid records of [`nested_json_decoder`]'s columns, to mutate.
pub const NESTED_JSON_SEEDS: &[&str] = &[
    r#"{"id":1,"items":[{"sku":"a","qty":2,"price":"1.50","tags":["x","y"]},{"sku":"b","qty":null,"price":0.1}],"attrs":{"k":1,"l":-2},"codes":{"7":0,"-3":"2024-01-01T00:00:00Z"},"deep":[[[1.5,null],[]],null],"r":{"a":{"b":[{"t":true},{}]},"c":"12345678901234567890.0123456789"}}"#,
    r#"{"id":2,"items":[],"attrs":{},"codes":null,"deep":[],"r":null}"#,
    r#"{"id":3,"items":null,"r":{"a":null,"c":-1}}"#,
    r#"{"id":4,"items":[null,{"SKU":"c"}],"deep":[[[1e308,-0.0]]],"r":{"A":{"B":null}}}"#,
];

/// Decodes with `decode`, checking that the batch took one whole row (a
/// value in every column) or, on an error, nothing at all.
pub fn decode_whole_row_or_none(
    batch: &mut Batch,
    decode: impl FnOnce(&mut Batch) -> Result<(), sluice_formats::decode::DecodeError>,
) -> Result<(), String> {
    let before = batch.len;
    let lengths: Vec<usize> = batch.columns.iter().map(sluice_plan::Column::len).collect();
    let now = |batch: &Batch| -> Vec<usize> { batch.columns.iter().map(sluice_plan::Column::len).collect() };
    match decode(batch) {
        Ok(()) => {
            let grown: Vec<usize> = lengths.iter().map(|n| n + 1).collect();
            if batch.len != before + 1 || now(batch) != grown {
                return Err(format!("a row of {:?} columns after {lengths:?}", now(batch)));
            }
        }
        Err(e) => {
            if e.0.is_empty() || batch.len != before || now(batch) != lengths {
                return Err(format!("not rolled back after `{e}`: {:?}", now(batch)));
            }
        }
    }
    Ok(())
}

/// A Protobuf schema with every construct the decoder meets: nested and
/// recursive messages, an enum, a well-known import, a repeated field,
/// every wire type; `Other` first, so `R` is message index [1].
pub const PROTOBUF_SCHEMA: &str = r#"
syntax = "proto3";
package fz;
import "google/protobuf/timestamp.proto";
message Other { int32 a = 1; }
message R {
  enum E { A = 0; B = 1; }
  message N { sint64 day = 1; string s = 2; N next = 3; }
  int64 id = 1;
  double price = 2;
  E name = 3;
  google.protobuf.Timestamp ts = 4;
  repeated string tags = 5;
  N nested = 6;
  bool flag = 7;
  fixed64 f = 8;
  float g = 9;
  optional string amount = 10;
  repeated N ns = 11;
  map<string, sint64> m = 12;
  repeated int64 packed = 13;
}
"#;

/// A Protobuf decoder of the fixtures' columns, with [`PROTOBUF_SCHEMA`]
/// as id 1 and a schema that does not compile as id 2; `R`'s repeated,
/// map and message fields as nested columns too.
#[allow(clippy::unwrap_used)]
pub fn protobuf_decoder() -> ProtobufDecoder {
    let mut source = binary_decoder_source();
    for (name, t) in [
        ("tags", "array<string>"),
        ("ns", "array<row<day bigint, s string, next row<day timestamp, next row<s string>>>>"),
        ("m", "map<string, bigint>"),
        ("packed", "array<bigint>"),
    ] {
        source.schema.columns.push(ColumnSpec::field(name, ColumnType::parse(t).unwrap(), false));
    }
    let plan = sluice_sql::plan_query(
        r#"SELECT id, price, name, ts, amount, "nested.day", flag, tags, ns, m, packed FROM t"#,
        &[source],
    )
    .unwrap();
    let mut d = ProtobufDecoder::new(&plan);
    d.add_schema(1, PROTOBUF_SCHEMA);
    d.add_schema(2, "message {");
    d
}

/// The same, with only columns of `R`'s own fields (no `nested.day`): the
/// message the one-pass path reads.
#[allow(clippy::unwrap_used)]
pub fn protobuf_flat_decoder() -> ProtobufDecoder {
    let source = SourceSpec::table(
        "t",
        &[
            ("id", ColumnType::Bigint, true),
            ("price", ColumnType::Double, false),
            ("name", ColumnType::String, false),
            ("ts", ColumnType::Timestamp, false),
            ("amount", ColumnType::String, false),
            ("flag", ColumnType::Boolean, false),
            ("f", ColumnType::Bigint, false),
            ("g", ColumnType::Double, false),
        ],
    );
    let plan = sluice_sql::plan_query("SELECT id, price, name, ts, amount, flag, f, g FROM t", &[source]).unwrap();
    let mut d = ProtobufDecoder::new(&plan);
    d.add_schema(1, PROTOBUF_SCHEMA);
    d
}

fn pb_varint(mut v: u64, out: &mut Vec<u8>) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// Field `number`, length-delimited.
fn pb_bytes(number: u64, b: &[u8], out: &mut Vec<u8>) {
    pb_varint(number << 3 | 2, out);
    pb_varint(b.len() as u64, out);
    out.extend_from_slice(b);
}

/// Valid records of [`PROTOBUF_SCHEMA`] in the wire format: an `R` with
/// every field, a sparse one, and an `Other` (index [0]).
pub fn protobuf_seeds() -> Vec<Vec<u8>> {
    let header = |indexes: &[u8]| {
        let mut v = vec![0, 0, 0, 0, 1];
        v.extend_from_slice(indexes);
        v
    };
    let mut r = header(&[2, 2]);
    r.extend_from_slice(&[0x08, 0x05]);
    r.push(0x11);
    r.extend_from_slice(&2.5f64.to_le_bytes());
    r.extend_from_slice(&[0x18, 0x01]);
    let mut ts = vec![0x08];
    pb_varint(1_700_000_000, &mut ts);
    ts.extend_from_slice(&[0x10, 0x05]);
    pb_bytes(4, &ts, &mut r);
    pb_bytes(5, b"a", &mut r);
    let mut next = vec![0x08, 0x02];
    pb_bytes(2, b"y", &mut next);
    let mut nested = vec![0x08, 0x05];
    pb_bytes(2, b"x", &mut nested);
    pb_bytes(3, &next, &mut nested);
    pb_bytes(6, &nested, &mut r);
    r.extend_from_slice(&[0x38, 0x01]);
    r.push(0x41);
    r.extend_from_slice(&7u64.to_le_bytes());
    r.push(0x4d);
    r.extend_from_slice(&1.5f32.to_le_bytes());
    pb_bytes(10, b"1.5", &mut r);
    pb_bytes(11, &nested, &mut r);
    pb_bytes(11, &next, &mut r);
    pb_bytes(12, &[0x0a, 0x01, b'k', 0x10, 0x03], &mut r);
    pb_bytes(12, &[0x10, 0x04], &mut r);
    pb_bytes(13, &[0x01, 0x96, 0x01, 0x7f], &mut r);
    r.extend_from_slice(&[0x68, 0x05]);
    let mut sparse = header(&[2, 2]);
    sparse.extend_from_slice(&[0x08, 0x7f]);
    let mut other = header(&[0]);
    other.extend_from_slice(&[0x08, 0x07]);
    vec![r, sparse, other]
}

/// A Debezium table source's plan: its columns, the deletion marker, and
/// the envelope's `op`, `source.table` and `ts_ms`.
#[allow(clippy::unwrap_used)]
fn debezium_plan() -> Plan {
    let source = SourceSpec::table(
        "customers",
        &[
            ("id", ColumnType::Bigint, true),
            ("name", ColumnType::String, false),
            ("__deleted", ColumnType::Boolean, false),
            ("op", ColumnType::String, false),
            ("source.table", ColumnType::String, false),
            ("ts_ms", ColumnType::Timestamp, false),
        ],
    );
    let sql = r#"SELECT id, name, __deleted, op, "source.table", ts_ms FROM customers"#;
    sluice_sql::plan_query(sql, &[source]).unwrap()
}

/// The Debezium (JSON) decoder of [`debezium_plan`].
pub fn debezium_decoder() -> DebeziumDecoder {
    DebeziumDecoder::new(&debezium_plan())
}

/// Debezium's Avro envelope for `customers (id, name)`, registered as id 7:
/// both images, `source`, `op`, `ts_ms` and a `transaction` block.
pub const DEBEZIUM_AVRO_ENVELOPE: &str = r#"{"type":"record","name":"Envelope","fields":[
    {"name":"before","type":["null",{"type":"record","name":"Value","fields":[
        {"name":"id","type":"long"},{"name":"name","type":["null","string"],"default":null}]}],"default":null},
    {"name":"after","type":["null","Value"],"default":null},
    {"name":"source","type":{"type":"record","name":"Source","fields":[
        {"name":"table","type":"string"},{"name":"ts_ms","type":"long"}]}},
    {"name":"op","type":"string"},
    {"name":"ts_ms","type":["null","long"],"default":null},
    {"name":"transaction","type":["null",{"type":"record","name":"block","fields":[
        {"name":"id","type":"string"},{"name":"total_order","type":"long"}]}],"default":null}
]}"#;

/// The Debezium Avro decoder of [`debezium_plan`], with
/// [`DEBEZIUM_AVRO_ENVELOPE`] handed over as schema id 7.
pub fn debezium_avro_decoder() -> DebeziumAvroDecoder {
    let mut d = DebeziumAvroDecoder::new(&debezium_plan());
    d.add_schema(7, DEBEZIUM_AVRO_ENVELOPE);
    d
}

/// Valid change events under [`DEBEZIUM_AVRO_ENVELOPE`]: an insert, an
/// update inside a transaction, a delete by key.
pub fn debezium_avro_seeds() -> Vec<Vec<u8>> {
    let event = |before: Option<(i64, Option<&[u8]>)>, after: Option<(i64, Option<&[u8]>)>, op: &[u8], tx: bool| {
        let mut v = vec![0, 0, 0, 0, 7];
        for image in [before, after] {
            match image {
                None => avro_long(0, &mut v),
                Some((id, name)) => {
                    avro_long(1, &mut v);
                    avro_long(id, &mut v);
                    match name {
                        None => avro_long(0, &mut v),
                        Some(n) => {
                            avro_long(1, &mut v);
                            avro_bytes(n, &mut v);
                        }
                    }
                }
            }
        }
        avro_bytes(b"customers", &mut v);
        avro_long(995, &mut v);
        avro_bytes(op, &mut v);
        avro_long(1, &mut v);
        avro_long(1000, &mut v);
        if tx {
            avro_long(1, &mut v);
            avro_bytes(b"tx", &mut v);
            avro_long(3, &mut v);
        } else {
            avro_long(0, &mut v);
        }
        v
    };
    vec![
        event(None, Some((1, Some(b"Ann"))), b"c", false),
        event(Some((1, Some(b"Ann"))), Some((1, Some(b"Anne"))), b"u", true),
        event(Some((2, None)), None, b"d", false),
    ]
}

/// Change events of every kind: schemas off and on, a delete by key, an
/// update, an empty image.
pub const DEBEZIUM_EVENTS: &[&str] = &[
    r#"{"before":null,"after":{"id":1,"name":"Ann"},"source":{"table":"customers","ts_ms":5},"op":"c","ts_ms":1000}"#,
    r#"{"schema":{"type":"struct"},"payload":{"before":{"id":2},"after":null,"source":{"table":"c"},"op":"d","ts_ms":7}}"#,
    r#"{"op":"u","after":{ "id" : 3 , "name" : "a\"b" },"before":{"id":3}}"#,
    r#"{"op":"r","after":{}}"#,
];
