use base64::Engine;
use protox::prost::Message;
use protox::prost_reflect::{DynamicMessage, ReflectMessage, Value};
use sluice_crds::{ColumnSpec, ColumnType, SourceSpec};
use sluice_plan::{Batch, Scalar};

use super::{ProtobufDecoder, parse_schema};
use crate::decode::Encoding;

const SCHEMA: &str = r#"
syntax = "proto3";
package sluice.test;
import "google/protobuf/timestamp.proto";
message Unused { string x = 1; }
message Trade {
  enum Side { SIDE_UNKNOWN = 0; BUY = 1; SELL = 2; }
  message Meta { int64 ts = 1; string venue = 2; }
  string symbol = 1;
  int64 quantity = 2;
  double price = 3;
  optional string note = 4;
  bool buy = 5;
  Meta meta = 6;
  Side side = 7;
  google.protobuf.Timestamp at = 8;
  sint64 delta = 9;
  fixed32 lot = 10;
  repeated string tags = 11;
  uint64 big = 12;
}
"#;

/// Columns: symbol (required), quantity, price, note, buy, meta.ts,
/// meta.venue, side, at, delta, lot, missing (no such field).
fn decoder() -> ProtobufDecoder {
    let c = |name: &str, t, required| ColumnSpec::field(name, t, required);
    let source = SourceSpec {
        schema: sluice_crds::SchemaSpec {
            columns: vec![
                c("symbol", ColumnType::String, true),
                c("quantity", ColumnType::Bigint, false),
                c("price", ColumnType::Double, false),
                c("note", ColumnType::String, false),
                c("buy", ColumnType::Boolean, false),
                c("meta.ts", ColumnType::Timestamp, false),
                c("meta.venue", ColumnType::String, false),
                c("side", ColumnType::String, false),
                c("at", ColumnType::Timestamp, false),
                c("delta", ColumnType::Bigint, false),
                c("lot", ColumnType::Bigint, false),
                c("missing", ColumnType::String, false),
            ],
            registry: None,
        },
        ..SourceSpec::table("t", &[])
    };
    let sql =
        r#"SELECT symbol, quantity, price, note, buy, "meta.ts", "meta.venue", side, at, delta, lot, missing FROM t"#;
    ProtobufDecoder::new(&sluice_sql::plan_query(sql, &[source]).unwrap())
}

fn trade() -> DynamicMessage {
    let pool = parse_schema(SCHEMA).unwrap();
    DynamicMessage::new(pool.get_message_by_name("sluice.test.Trade").unwrap())
}

/// The Confluent wire format: magic, id, message indexes, the message.
fn wire(id: u32, indexes: &[u8], m: &DynamicMessage) -> Vec<u8> {
    let mut out = vec![0];
    out.extend_from_slice(&id.to_be_bytes());
    out.extend_from_slice(indexes);
    out.extend(m.encode_to_vec());
    out
}

fn row(batch: &Batch, r: usize) -> Vec<Scalar> {
    batch.columns.iter().map(|c| c.scalar(r)).collect()
}

fn s(x: &str) -> Scalar {
    Scalar::String(x.into())
}

/// Every field kind into its column, nested fields by path, an enum by
/// name, a Timestamp in milliseconds; a proto3 field left out is its
/// default, an `optional` one and an absent message's fields NULL.
#[test]
fn a_message_reads_into_its_columns_with_protobufs_defaults() {
    let mut d = decoder();
    d.add_schema(7, SCHEMA);
    let mut full = trade();
    full.set_field_by_name("symbol", Value::String("AAPL".into()));
    full.set_field_by_name("quantity", Value::I64(-5));
    full.set_field_by_name("price", Value::F64(101.5));
    full.set_field_by_name("note", Value::String("n".into()));
    full.set_field_by_name("buy", Value::Bool(true));
    let mut meta =
        DynamicMessage::new(full.descriptor().get_field_by_name("meta").unwrap().kind().as_message().unwrap().clone());
    meta.set_field_by_name("ts", Value::I64(1_700_000_000_000));
    meta.set_field_by_name("venue", Value::String("X".into()));
    full.set_field_by_name("meta", Value::Message(meta));
    full.set_field_by_name("side", Value::EnumNumber(2));
    let at = full.descriptor().get_field_by_name("at").unwrap().kind().as_message().unwrap().clone();
    let mut ts = DynamicMessage::new(at);
    ts.set_field_by_name("seconds", Value::I64(1_700_000_000));
    ts.set_field_by_name("nanos", Value::I32(250_000_000));
    full.set_field_by_name("at", Value::Message(ts));
    full.set_field_by_name("delta", Value::I64(-3));
    full.set_field_by_name("lot", Value::U32(4_000_000_000));
    full.set_field_by_name("tags", Value::List(vec![Value::String("a".into())]));
    let mut sparse = trade();
    sparse.set_field_by_name("symbol", Value::String("MSFT".into()));
    let mut batch = d.new_batch(2);
    d.decode(&wire(7, &[2, 2], &full), &mut batch).unwrap();
    d.decode(&wire(7, &[2, 2], &sparse), &mut batch).unwrap();
    assert_eq!(
        row(&batch, 0),
        [
            s("AAPL"),
            Scalar::Bigint(-5),
            Scalar::Double(101.5),
            s("n"),
            Scalar::Boolean(true),
            Scalar::Timestamp(1_700_000_000_000),
            s("X"),
            s("SELL"),
            Scalar::Timestamp(1_700_000_000_250),
            Scalar::Bigint(-3),
            Scalar::Bigint(4_000_000_000),
            Scalar::Null,
        ]
    );
    assert_eq!(
        row(&batch, 1),
        [
            s("MSFT"),
            Scalar::Bigint(0),
            Scalar::Double(0.0),
            Scalar::Null,
            Scalar::Boolean(false),
            Scalar::Null,
            Scalar::Null,
            s("SIDE_UNKNOWN"),
            Scalar::Null,
            Scalar::Bigint(0),
            Scalar::Bigint(0),
            Scalar::Null,
        ]
    );
}

/// The schema as Python's serializer registers it (base64 of a
/// FileDescriptorProto) reads as its `.proto` text does; index `[0]` is
/// the single byte 0; fields in any order, the last of a repeated one
/// counting.
#[test]
fn a_base64_descriptor_and_message_indexes_name_the_message() {
    let pool = parse_schema(SCHEMA).unwrap();
    let file = pool.files().find(|f| f.name().ends_with("registry-schema.proto")).unwrap();
    let encoded = base64::engine::general_purpose::STANDARD.encode(file.file_descriptor_proto().encode_to_vec());
    let mut d = decoder();
    d.add_schema(9, &encoded);
    let mut m = trade();
    m.set_field_by_name("symbol", Value::String("GOOG".into()));
    let mut batch = d.new_batch(2);
    d.decode(&wire(9, &[2, 2], &m), &mut batch).unwrap();
    // quantity 7, then symbol "Z", then quantity 9: the last counts.
    let mut value = vec![0, 0, 0, 0, 9, 2, 2, 0x10, 7, 0x0a, 1, b'Z', 0x10, 9];
    d.decode(&value, &mut batch).unwrap();
    assert_eq!(row(&batch, 0)[0], s("GOOG"));
    assert_eq!(&row(&batch, 1)[..2], &[s("Z"), Scalar::Bigint(9)]);
    // Index [0] is `Unused`, which has no `symbol`: the required column
    // makes its records dead letters, saying so.
    value[5..7].copy_from_slice(&[0, 0x0a]);
    let err = d.decode(&[0, 0, 0, 0, 9, 0, 0x0a, 1, b'x'], &mut batch).unwrap_err().0;
    assert!(err.contains("Unused has no field `symbol`"), "{err}");
    assert_eq!(batch.len, 2);
}

/// What cannot be read is rejected with a reason, the batch as it was.
#[test]
fn records_that_cannot_be_read_are_rejected_with_a_reason() {
    let mut d = decoder();
    d.add_schema(7, SCHEMA);
    d.add_unknown(8, "schema id 8: not found".into());
    d.add_schema(10, "syntax = \"proto3\"; message {");
    let mut m = trade();
    m.set_field_by_name("symbol", Value::String("AAPL".into()));
    m.set_field_by_name("quantity", Value::I64(3));
    let good = wire(7, &[2, 2], &m);
    let mut batch = d.new_batch(4);
    let cases: Vec<(Vec<u8>, &str)> = vec![
        (b"{\"json\":1}".to_vec(), "not in the Confluent wire format"),
        (vec![], "an empty value"),
        (wire(8, &[2, 2], &m), "schema id 8: not found"),
        (wire(10, &[2, 2], &m), "schema id 10 is not a Protobuf schema"),
        (wire(11, &[2, 2], &m), "schema id 11 was not fetched"),
        (wire(7, &[2, 8], &m), "name no message"),
        (good[..good.len() - 1].to_vec(), "ends"),
        // symbol (field 1) as a varint.
        (vec![0, 0, 0, 0, 7, 2, 2, 0x08, 1], "field 1 has wire type 0"),
        (vec![0, 0, 0, 0, 7, 2, 2, 0xa3, 0x01], "group"),
        (vec![0, 0, 0, 0, 7, 2, 2, 0x0a, 2, 0xff, 0xfe], "not UTF-8"),
        // quantity (field 2) as a varint of 11 bytes.
        (
            vec![0, 0, 0, 0, 7, 2, 2, 0x10, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01],
            "a number longer",
        ),
    ];
    for (value, reason) in cases {
        let err = d.decode(&value, &mut batch).expect_err(reason).0;
        assert!(err.contains(reason), "{value:?}: {err} (expected {reason})");
        assert_eq!(batch.len, 0);
        assert!(batch.columns.iter().all(|c| c.is_empty()), "rolled back after {value:?}");
    }
    d.decode(&good, &mut batch).unwrap();
    assert_eq!(batch.len, 1);
}

/// A column the message cannot fill is refused when the schema is
/// compiled: a repeated field, a type that does not fit.
#[test]
fn columns_a_message_cannot_fill_are_refused_naming_them() {
    let plan = |columns: Vec<ColumnSpec>| {
        let source =
            SourceSpec { schema: sluice_crds::SchemaSpec { columns, registry: None }, ..SourceSpec::table("t", &[]) };
        sluice_sql::plan_query("SELECT * FROM t", &[source]).unwrap()
    };
    let mut m = trade();
    m.set_field_by_name("symbol", Value::String("AAPL".into()));
    for (column, t, reason) in [
        ("tags", ColumnType::String, "repeated"),
        ("price", ColumnType::Bigint, "floating-point"),
        ("symbol", ColumnType::Bigint, "a string"),
        ("meta", ColumnType::String, "columns read its fields"),
        ("symbol.x", ColumnType::String, "not a message"),
    ] {
        let mut d = ProtobufDecoder::new(&plan(vec![ColumnSpec::field(column, t, false)]));
        d.add_schema(7, SCHEMA);
        let err = d.decode(&wire(7, &[2, 2], &m), &mut d.new_batch(1)).unwrap_err().0;
        assert!(err.contains(reason) && err.contains(column.split('.').next().unwrap()), "{column}: {err}");
    }
}

/// A message whose columns are all its own fields is compiled for the
/// one-pass path, and a record in field-number order (fields left out
/// included) takes it; one out of order takes the general path, with the
/// same row.
#[test]
fn records_in_field_number_order_take_the_one_pass_path() {
    let c = |name: &str, t, required| ColumnSpec::field(name, t, required);
    let source = SourceSpec {
        schema: sluice_crds::SchemaSpec {
            columns: vec![
                c("symbol", ColumnType::String, true),
                c("quantity", ColumnType::Bigint, false),
                c("price", ColumnType::Double, false),
                c("buy", ColumnType::Boolean, false),
            ],
            registry: None,
        },
        ..SourceSpec::table("t", &[])
    };
    let plan = sluice_sql::plan_query("SELECT symbol, quantity, price, buy FROM t", &[source]).unwrap();
    let mut d = ProtobufDecoder::new(&plan);
    d.add_schema(1, SCHEMA);
    let header = [0u8, 0, 0, 0, 1, 2, 2];
    let symbol = [0x0a, 0x01, b'A'];
    let quantity = [0x10, 0x07];
    let buy = [0x28, 0x01];
    let mut batch = d.new_batch(2);
    d.decode(&[&header[..], &symbol, &quantity, &buy].concat(), &mut batch).unwrap();
    assert_eq!(d.flat_reads, 1);
    d.decode(&[&header[..], &quantity, &symbol, &buy].concat(), &mut batch).unwrap();
    assert_eq!(d.flat_reads, 1, "out of order: the general path");
    for r in 0..2 {
        let row: Vec<Scalar> = batch.columns.iter().map(|c| c.scalar(r)).collect();
        assert_eq!(row, [Scalar::String("A".into()), Scalar::Bigint(7), Scalar::Double(0.0), Scalar::Boolean(true)]);
    }
}

/// Message indexes come from records: a flood of distinct paths under one
/// valid id compiles nothing for a path that names no message, and keeps
/// at most `MAX_PROGRAMS` programs for those that do; unknown ids are
/// forgotten on demand, valid schemas kept.
#[test]
fn the_compiled_programs_are_bounded_whatever_the_records_name() {
    let mut d = decoder();
    d.add_schema(7, SCHEMA);
    let mut t = trade();
    t.set_field_by_name("symbol", Value::String("A".into()));
    let mut batch = d.new_batch(4);
    for path in 0..5_000u32 {
        // Two indexes, zigzag varints: [1, path] — message 1 has no nested
        // message of that number past the few it declares.
        let mut indexes = vec![4u8];
        let mut n = u64::from(path) << 1;
        loop {
            let b = (n & 0x7f) as u8;
            n >>= 7;
            if n == 0 {
                indexes.push(b);
                break;
            }
            indexes.push(b | 0x80);
        }
        let e = d.decode(&wire(7, &indexes, &t), &mut batch);
        assert!(path < 2 || e.is_err(), "path {path}");
    }
    assert!(d.compiled.len() <= super::MAX_PROGRAMS && d.programs.len() <= super::MAX_PROGRAMS);
    assert!(d.programs.iter().all(Result::is_ok), "no error is kept as a program");
    let held = d.cache_bytes();
    assert!(held > 1024 && held <= 1024 * 1024, "the schema and its programs, counted: {held}");
    d.add_unknown(8, "no such id".into());
    assert_eq!(d.cache_bytes(), held + "no such id".len());
    d.forget_unknown();
    assert_eq!(d.cache_bytes(), held, "forgotten, uncounted");
    assert_eq!(d.needs_schema(&wire(8, &[0], &t)), Some(8), "asked again");
    assert_eq!(d.needs_schema(&wire(7, &[0], &t)), None, "a schema read stays");
}

/// A schema that imports a shared file (a schema reference, registered
/// under its import name): compiled with the file; without it, the import
/// is not found.
#[test]
fn an_imported_file_from_a_reference_is_compiled_with_the_schema() {
    let common = "syntax = \"proto3\";\npackage shared;\nmessage Money { int64 units = 1; string currency = 2; }\n";
    let order = "syntax = \"proto3\";\npackage shop;\nimport \"shared/money.proto\";\n\
                 message Order { int64 id = 1; shared.Money total = 2; }\n";
    let pool = super::parse_schema_with(order, &[("shared/money.proto".to_owned(), common.to_owned())]).unwrap();
    assert!(pool.get_message_by_name("shop.Order").is_some());
    let e = parse_schema(order).unwrap_err();
    assert!(e.contains("shared/money.proto"), "{e}");
}
