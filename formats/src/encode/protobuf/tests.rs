use std::borrow::Cow;

use protox::prost_reflect::{DynamicMessage, Value as Field};
use sluice_crds::{ColumnType, SourceSpec};
use sluice_plan::EmittedRows;
use sluice_plan::{Column, DataType, Scalar, Selection, Value};

use super::{ProtobufEncoder, proto_key_schema, proto_schema};
use crate::decode::{ProtobufDecoder, parse_schema};
use crate::encode::{EncodedRows, JsonEncoder, KeyWriter, RowEncoder};

fn column(t: DataType, values: &[Scalar]) -> Value<'static> {
    let mut c = Column::with_capacity(t, values.len());
    values.iter().for_each(|v| c.push_scalar(v).unwrap());
    Value::Column(Cow::Owned(c))
}

fn outputs() -> Vec<(String, DataType)> {
    [
        ("k", DataType::Bigint),
        ("p", DataType::Double),
        ("s", DataType::String),
        ("b", DataType::Boolean),
        ("t", DataType::Timestamp),
        ("c", DataType::String),
        ("nothing", DataType::Null),
    ]
    .iter()
    .map(|(n, t)| ((*n).to_owned(), *t))
    .collect()
}

/// Every type, its extremes, its zero (written: present) and NULL (left
/// out), and constant columns.
fn rows() -> [[Scalar; 5]; 4] {
    [
        [
            Scalar::Bigint(-3),
            Scalar::Double(1.5),
            Scalar::String("é✓".into()),
            Scalar::Boolean(true),
            Scalar::Timestamp(1_700_000_000_250),
        ],
        [Scalar::Null, Scalar::Null, Scalar::Null, Scalar::Null, Scalar::Null],
        [
            Scalar::Bigint(0),
            Scalar::Double(0.0),
            Scalar::String(String::new()),
            Scalar::Boolean(false),
            Scalar::Timestamp(0),
        ],
        [
            Scalar::Bigint(i64::MIN),
            Scalar::Double(f64::MAX),
            Scalar::String("x".repeat(300)),
            Scalar::Boolean(true),
            // Before 1970: seconds floored, nanos positive.
            Scalar::Timestamp(-1),
        ],
    ]
}

fn encoded() -> EncodedRows {
    let rows = rows();
    let mut columns: Vec<Value<'_>> =
        (0..5).map(|c| column(outputs()[c].1, &rows.iter().map(|r| r[c].clone()).collect::<Vec<_>>())).collect();
    columns.push(Value::Scalar(Scalar::String("const".into()), DataType::String));
    columns.push(Value::Scalar(Scalar::Null, DataType::Null));
    let mut out = EncodedRows::default();
    let rows = EmittedRows {
        columns: &columns,
        keys: &[],
        selection: Selection::All(rows.len()),
        from_input: false,
        delete: false,
    };
    ProtobufEncoder::new(42, &[]).encode(&rows, &mut out);
    out
}

/// What the encoder writes, Sluice's Protobuf decoder reads back as it
/// was, under the schema derived for it.
#[test]
fn results_written_as_protobuf_read_back_as_they_were() {
    let schema = proto_schema("my-job", &outputs()).unwrap();
    let out = encoded();
    let c = |n: &'static str, t| (n, t, false);
    let source = SourceSpec::table(
        "r",
        &[
            c("k", ColumnType::Bigint),
            c("p", ColumnType::Double),
            c("s", ColumnType::String),
            c("b", ColumnType::Boolean),
            c("t", ColumnType::Timestamp),
            c("c", ColumnType::String),
            c("nothing", ColumnType::String),
        ],
    );
    let plan = sluice_sql::plan_query("SELECT k, p, s, b, t, c, nothing FROM r", &[source]).unwrap();
    let mut decoder = ProtobufDecoder::new(&plan);
    assert_eq!(crate::decode::Encoding::needs_schema(&decoder, out.value(0)), Some(42));
    decoder.add_schema(42, &schema);
    let mut batch = decoder.new_batch(4);
    for i in 0..4 {
        decoder.decode(out.value(i), &mut batch).unwrap();
    }
    for (r, want) in rows().iter().enumerate() {
        let got: Vec<Scalar> = batch.columns.iter().map(|c| c.scalar(r)).collect();
        assert_eq!(got[..5], want[..], "row {r}");
        assert_eq!(got[5..], [Scalar::String("const".into()), Scalar::Null], "row {r}");
    }
}

/// The same bytes through prost-reflect's own decoder, under the schema
/// text compiled by protox: a NULL is an absent field, a zero a present
/// one, a time a `google.protobuf.Timestamp`.
#[test]
fn a_null_is_an_absent_field_and_a_zero_a_present_one() {
    let schema = proto_schema("my-job", &outputs()).unwrap();
    assert!(schema.contains("message my_job {") && schema.contains("package dev.sluice;"), "{schema}");
    assert!(schema.contains("import \"google/protobuf/timestamp.proto\";"), "{schema}");
    let pool = parse_schema(&schema).unwrap();
    let descriptor = pool.get_message_by_name("dev.sluice.my_job").unwrap();
    let out = encoded();
    let read = |i: usize| {
        let value = out.value(i);
        assert_eq!(value[..6], [0, 0, 0, 0, 42, 0], "magic, id, message index [0]");
        DynamicMessage::decode(descriptor.clone(), &value[6..]).unwrap()
    };
    let zeros = read(2);
    for f in ["k", "p", "s", "b", "t", "c"] {
        assert!(zeros.has_field_by_name(f), "a zero is written: {f}");
    }
    let nulls = read(1);
    for f in ["k", "p", "s", "b", "t", "nothing"] {
        assert!(!nulls.has_field_by_name(f), "a NULL is left out: {f}");
    }
    let extremes = read(3);
    assert_eq!(extremes.get_field_by_name("k").unwrap().as_i64(), Some(i64::MIN));
    let t = extremes.get_field_by_name("t").unwrap();
    let t = t.as_message().unwrap();
    assert_eq!(t.get_field_by_name("seconds").unwrap().into_owned(), Field::I64(-1));
    assert_eq!(t.get_field_by_name("nanos").unwrap().into_owned(), Field::I32(999_000_000));
}

/// Protobuf keys beside JSON values, read back under the key schema; a
/// tombstone keeps its key.
#[test]
fn protobuf_keys_read_back_under_the_key_schema() {
    let mut symbol = Column::with_capacity(DataType::String, 2);
    symbol.push_str("AAPL").unwrap();
    symbol.push_null();
    let keys = [Value::Column(Cow::Owned(symbol)), Value::Scalar(Scalar::Bigint(7), DataType::Bigint)];
    let columns = [Value::Scalar(Scalar::Bigint(1), DataType::Bigint)];
    let names = ["symbol".to_owned(), "venue".to_owned()];
    let encoder = RowEncoder::Json(JsonEncoder::new(&["n".to_owned()], &names)).with_keys(KeyWriter::protobuf(9));
    let mut out = EncodedRows::default();
    for delete in [false, true] {
        let rows =
            EmittedRows { columns: &columns, keys: &keys, selection: Selection::All(2), from_input: false, delete };
        encoder.encode(&rows, &mut out);
    }
    assert!(out.is_tombstone(2) && !out.is_tombstone(0));
    let schema =
        proto_key_schema("job", &[("symbol".to_owned(), DataType::String), ("venue".to_owned(), DataType::Bigint)])
            .unwrap();
    assert!(schema.contains("message jobKey {"), "{schema}");
    assert!(!schema.contains("import"), "no Timestamp, no import: {schema}");
    let source = SourceSpec::table("k", &[("symbol", ColumnType::String, false), ("venue", ColumnType::Bigint, false)]);
    let plan = sluice_sql::plan_query("SELECT symbol, venue FROM k", &[source]).unwrap();
    let mut decoder = ProtobufDecoder::new(&plan);
    decoder.add_schema(9, &schema);
    let mut batch = decoder.new_batch(4);
    for i in 0..4 {
        decoder.decode(out.key(i).unwrap(), &mut batch).unwrap();
    }
    let got: Vec<(Scalar, Scalar)> = (0..4).map(|r| (batch.columns[0].scalar(r), batch.columns[1].scalar(r))).collect();
    let row = |s: Option<&str>| (s.map_or(Scalar::Null, |s| Scalar::String(s.into())), Scalar::Bigint(7));
    assert_eq!(got, [row(Some("AAPL")), row(None), row(Some("AAPL")), row(None)]);
}

#[test]
fn output_names_protobuf_cannot_hold_are_refused_naming_them() {
    let e = proto_schema("j", &[("count(*)".into(), DataType::Bigint)]).unwrap_err();
    assert!(e.contains("`count(*)`") && e.contains("Protobuf") && e.contains("AS"), "{e}");
    let e = proto_schema("j", &[("a_b".into(), DataType::Bigint), ("aB".into(), DataType::Bigint)]).unwrap_err();
    assert!(e.contains("`a_b`") && e.contains("`aB`"), "{e}");
}
