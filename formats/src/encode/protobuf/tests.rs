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
    encode(42, &columns, rows.len())
}

/// `rows` rows of `columns` written under schema id `id`.
fn encode(id: u32, columns: &[Value<'_>], rows: usize) -> EncodedRows {
    let mut out = EncodedRows::default();
    let rows = EmittedRows { columns, keys: &[], selection: Selection::All(rows), from_input: false, delete: false };
    ProtobufEncoder::new(id, &[]).encode(&rows, &mut out);
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

fn ty(s: &str) -> DataType {
    DataType::of_column(&ColumnType::parse(s).unwrap()).unwrap()
}

const NESTED: [(&str, &str); 7] = [
    ("items", "array<row<sku string, qty bigint, price decimal(9,2), at timestamp>>"),
    ("attrs", "map<string, string>"),
    ("by_id", "map<bigint, double>"),
    ("tags", "array<bigint>"),
    ("scores", "array<double>"),
    ("names", "array<string>"),
    ("meta", "row<channel string, inner row<b boolean, items array<string>>>"),
];

fn s(x: &str) -> Scalar {
    Scalar::String(x.into())
}

/// A full row (NULLs inside), a NULL in every column, empty values.
fn nested_rows() -> Vec<Vec<Scalar>> {
    let item =
        |sku: &str, qty, cents, at| Scalar::Row(vec![s(sku), Scalar::Bigint(qty), Scalar::Decimal(cents, 2), at]);
    vec![
        vec![
            Scalar::List(vec![
                item("a", 2, 150, Scalar::Timestamp(1_700_000_000_001)),
                item("b", -1, -5, Scalar::Null),
            ]),
            Scalar::Map(vec![(s("color"), s("red")), (s("size"), Scalar::Null)]),
            Scalar::Map(vec![(Scalar::Bigint(-7), Scalar::Double(0.5))]),
            Scalar::List(vec![Scalar::Bigint(1), Scalar::Bigint(-300), Scalar::Bigint(i64::MAX)]),
            Scalar::List(vec![Scalar::Double(1.25)]),
            Scalar::List(vec![s("x"), s(&"y".repeat(200))]),
            Scalar::Row(vec![s("web"), Scalar::Row(vec![Scalar::Boolean(true), Scalar::List(vec![s("i")])])]),
        ],
        vec![Scalar::Null; 7],
        vec![
            Scalar::List(vec![]),
            Scalar::Map(vec![]),
            Scalar::Map(vec![]),
            Scalar::List(vec![]),
            Scalar::List(vec![]),
            Scalar::List(vec![]),
            Scalar::Row(vec![Scalar::Null, Scalar::Row(vec![Scalar::Null, Scalar::List(vec![])])]),
        ],
    ]
}

fn nested_encoded() -> EncodedRows {
    let rows = nested_rows();
    let mut columns: Vec<Value<'_>> = (0..NESTED.len())
        .map(|c| column(ty(NESTED[c].1), &rows.iter().map(|r| r[c].clone()).collect::<Vec<_>>()))
        .collect();
    columns.push(Value::Scalar(Scalar::List(vec![Scalar::Bigint(4)]), ty("array<bigint>")));
    encode(5, &columns, rows.len())
}

fn nested_outputs() -> Vec<(String, DataType)> {
    let mut outputs: Vec<(String, DataType)> = NESTED.iter().map(|(n, t)| ((*n).to_owned(), ty(t))).collect();
    outputs.push(("constant".into(), ty("array<bigint>")));
    outputs
}

/// Arrays, maps and rows written under the derived schema (repeated
/// fields, map fields, messages inside the result's) read back by Sluice's
/// decoder: as they were, except what Protobuf cannot hold — a NULL
/// element or map value is its default, a NULL array or map an empty one.
#[test]
fn nested_results_written_as_protobuf_read_back_with_protobufs_defaults() {
    let schema = proto_schema("orders", &nested_outputs()).unwrap();
    for line in [
        "repeated Items items = 1;",
        "map<string, string> attrs = 2;",
        "map<int64, double> by_id = 3;",
        "repeated int64 tags = 4;",
        "Meta meta = 7;",
        "message Inner {",
        "optional google.protobuf.Timestamp at = 4;",
    ] {
        assert!(schema.contains(line), "{line}: {schema}");
    }
    let out = nested_encoded();
    let mut columns: Vec<(&str, ColumnType, bool)> =
        NESTED.iter().map(|(n, t)| (*n, ColumnType::parse(t).unwrap(), false)).collect();
    columns.push(("constant", ColumnType::parse("array<bigint>").unwrap(), false));
    let source = SourceSpec::table("r", &columns);
    let plan = sluice_sql::plan_query("SELECT * FROM r", &[source]).unwrap();
    let mut decoder = ProtobufDecoder::new(&plan);
    decoder.add_schema(5, &schema);
    let mut batch = decoder.new_batch(3);
    for i in 0..3 {
        decoder.decode(out.value(i), &mut batch).unwrap();
    }
    let mut want = nested_rows();
    // A NULL map value: the default. A NULL array or map: empty.
    let Scalar::Map(attrs) = &mut want[0][1] else { unreachable!() };
    attrs[1].1 = s("");
    for (c, empty) in [(0, Scalar::List(vec![])), (1, Scalar::Map(vec![])), (2, Scalar::Map(vec![]))] {
        want[1][c] = empty;
    }
    want[1][3..6].fill(Scalar::List(vec![]));
    for (r, want) in want.iter().enumerate() {
        let got: Vec<Scalar> = batch.columns.iter().map(|c| c.scalar(r)).collect();
        assert_eq!(got[..7], want[..], "row {r}");
        assert_eq!(got[7], Scalar::List(vec![Scalar::Bigint(4)]), "row {r}");
    }
}

/// The same bytes through prost-reflect's decoder: repeated messages,
/// packed numbers, map entries and messages inside messages.
#[test]
fn nested_results_read_back_by_prost_reflect() {
    let schema = proto_schema("orders", &nested_outputs()).unwrap();
    let pool = parse_schema(&schema).unwrap();
    let descriptor = pool.get_message_by_name("dev.sluice.orders").unwrap();
    let out = nested_encoded();
    let m = DynamicMessage::decode(descriptor, &out.value(0)[6..]).unwrap();
    let items = m.get_field_by_name("items").unwrap();
    let items = items.as_list().unwrap();
    assert_eq!(items.len(), 2);
    let second = items[1].as_message().unwrap();
    assert_eq!(second.get_field_by_name("sku").unwrap().as_str(), Some("b"));
    assert_eq!(second.get_field_by_name("price").unwrap().as_str(), Some("-0.05"));
    assert!(!second.has_field_by_name("at"), "a NULL field of a row is left out");
    let tags = m.get_field_by_name("tags").unwrap();
    assert_eq!(tags.as_list().unwrap(), &[Field::I64(1), Field::I64(-300), Field::I64(i64::MAX)]);
    let meta = m.get_field_by_name("meta").unwrap();
    let inner = meta.as_message().unwrap().get_field_by_name("inner").unwrap();
    assert_eq!(inner.as_message().unwrap().get_field_by_name("b").unwrap().as_bool(), Some(true));
    let by_id = m.get_field_by_name("by_id").unwrap();
    assert_eq!(by_id.as_map().unwrap().len(), 1);
}

#[test]
fn nested_types_protobuf_cannot_hold_are_refused_naming_the_column() {
    let e = proto_schema("j", &[("grid".into(), ty("array<array<bigint>>"))]).unwrap_err();
    assert!(e.contains("`grid`") && e.contains("holds lists"), "{e}");
    let e = proto_schema("j", &[("r".into(), ty("row<a map<string, array<bigint>>>"))]).unwrap_err();
    assert!(e.contains("`r.a`") && e.contains("holds lists"), "{e}");
    let e = proto_schema("j", &[("r".into(), ty("row<\"count(*)\" bigint>"))]).unwrap_err();
    assert!(e.contains("`r`") && e.contains("count(*)"), "{e}");
}
