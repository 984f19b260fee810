//! The Avro decoder on hostile bytes: arbitrary datums after a valid
//! header, and valid datums cut short, flipped and extended, under
//! writer schemas with every construct (unions, nested and recursive
//! records, arrays, maps, enums, fixed, decimals, logical types). It must
//! never panic or loop, and a record is either one whole row or none.
//! (CI runs a fixed seed; `bash bench/fuzz.sh avro` explores at volume.)

// Test code: failing loudly is its job.
#![allow(clippy::panic, clippy::expect_used, clippy::unwrap_used)]

use proptest::prelude::*;

mod support;
use sluice_crds::{ColumnType, SourceSpec};
use sluice_formats::decode::AvroDecoder;
use sluice_plan::Batch;

/// Writer schemas, by id: the columns below read some of each.
pub const SCHEMAS: &[(u32, &str)] = &[
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

fn decoder() -> AvroDecoder {
    let source = SourceSpec::table(
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
    );
    let plan =
        sluice_sql::plan_query(r#"SELECT id, price, name, ts, amount, "nested.day", flag FROM t"#, &[source]).unwrap();
    let mut d = AvroDecoder::new(&plan);
    for (id, schema) in SCHEMAS {
        d.add_schema(*id, schema);
    }
    d
}

fn framed(id: u32, body: &[u8]) -> Vec<u8> {
    let mut v = vec![0];
    v.extend_from_slice(&id.to_be_bytes());
    v.extend_from_slice(body);
    v
}

/// Decodes, checking the batch took a whole row or nothing.
fn check(d: &mut AvroDecoder, batch: &mut Batch, payload: &[u8]) {
    let before = batch.len;
    let lengths: Vec<usize> = batch.columns.iter().map(sluice_plan::Column::len).collect();
    match d.decode(payload, batch) {
        Ok(()) => {
            assert_eq!(batch.len, before + 1);
            for (c, was) in batch.columns.iter().zip(&lengths) {
                assert_eq!(c.len(), was + 1, "{payload:?}: one value per column");
            }
        }
        Err(e) => {
            assert!(!e.0.is_empty());
            assert_eq!(batch.len, before);
            let now: Vec<usize> = batch.columns.iter().map(sluice_plan::Column::len).collect();
            assert_eq!(now, lengths, "{payload:?}: rolled back ({e})");
        }
    }
}

/// Small zig-zag varints and the bytes Avro values are made of.
fn chunk() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        (-3i64..70).prop_map(|v| vec![((v << 1) ^ (v >> 63)) as u8]),
        Just(vec![0x80, 0x01]),
        Just(vec![0xff; 10]),
        Just(vec![0x81, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x01]),
        Just(vec![2, b'A']),
        Just(vec![6, b'x', b'y', b'z']),
        Just(vec![1]),
        Just(vec![0]),
        prop::collection::vec(any::<u8>(), 0..9),
    ]
}

proptest! {
    #![proptest_config(support::deterministic(3_000))]

    #[test]
    fn arbitrary_datums_never_panic(id in 1u32..5, parts in prop::collection::vec(chunk(), 0..24)) {
        let mut d = decoder();
        let mut batch = d.new_batch(4);
        check(&mut d, &mut batch, &framed(id, &parts.concat()));
    }

    #[test]
    fn arbitrary_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..64)) {
        let mut d = decoder();
        let mut batch = d.new_batch(4);
        check(&mut d, &mut batch, &bytes);
    }
}
