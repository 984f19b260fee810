use protox::prost::Message;
use protox::prost_reflect::{DynamicMessage, MapKey, Value};
use sluice_crds::{ColumnSpec, ColumnType, SourceSpec};
use sluice_plan::{Batch, Scalar};

use super::super::{ProtobufDecoder, parse_schema};

const ORDER: &str = r#"
syntax = "proto3";
package shop;
import "google/protobuf/timestamp.proto";
message Item {
  string sku = 1;
  int32 qty = 2;
  double price = 3;
  optional string note = 4;
}
message Meta { string channel = 1; repeated string flags = 2; google.protobuf.Timestamp at = 3; }
message Order {
  int64 id = 1;
  repeated Item items = 2;
  map<string, string> attrs = 3;
  repeated int64 tags = 4;
  Meta meta = 5;
  map<int64, Item> by_line = 6;
  repeated string names = 7;
  int64 total = 8;
}
"#;

fn t(s: &str) -> ColumnType {
    ColumnType::parse(s).unwrap()
}

fn decoder(columns: &[(&str, &str)]) -> ProtobufDecoder {
    let specs = columns.iter().map(|(n, ty)| ColumnSpec::field(*n, t(ty), false)).collect();
    let source = SourceSpec {
        schema: sluice_crds::SchemaSpec { columns: specs, registry: None },
        ..SourceSpec::table("orders", &[])
    };
    let list: Vec<String> = columns.iter().map(|(n, _)| format!("\"{n}\"")).collect();
    let sql = format!("SELECT {} FROM orders", list.join(", "));
    let mut d = ProtobufDecoder::new(&sluice_sql::plan_query(&sql, &[source]).unwrap());
    d.add_schema(3, ORDER);
    d
}

fn message(name: &str) -> DynamicMessage {
    DynamicMessage::new(parse_schema(ORDER).unwrap().get_message_by_name(name).unwrap())
}

fn item(sku: &str, qty: i32, price: f64) -> Value {
    let mut m = message("shop.Item");
    m.set_field_by_name("sku", Value::String(sku.into()));
    m.set_field_by_name("qty", Value::I32(qty));
    m.set_field_by_name("price", Value::F64(price));
    Value::Message(m)
}

/// Magic, schema id 3, message index [2] (`Order`), then `body`.
fn framed(body: &[u8]) -> Vec<u8> {
    let mut out = vec![0, 0, 0, 0, 3, 2, 4];
    out.extend_from_slice(body);
    out
}

/// A field by hand: its key, then `value` (length-prefixed for wire 2).
fn field(number: u32, wire: u8, value: &[u8]) -> Vec<u8> {
    let mut out = vec![(number << 3 | u32::from(wire)) as u8];
    if wire == 2 {
        out.push(value.len() as u8);
    }
    out.extend_from_slice(value);
    out
}

fn s(x: &str) -> Scalar {
    Scalar::String(x.into())
}

fn item_row(sku: &str, qty: i64, price: f64, note: Option<&str>) -> Scalar {
    Scalar::Row(vec![s(sku), Scalar::Bigint(qty), Scalar::Double(price), note.map_or(Scalar::Null, s)])
}

fn decode(d: &mut ProtobufDecoder, payload: &[u8]) -> Batch {
    let mut b = d.new_batch(1);
    d.decode(payload, &mut b).unwrap();
    b
}

const ITEMS: &str = "array<row<sku string, qty bigint, price double, note string>>";

/// Repeated messages as an array of rows, a map field as a map, a packed
/// repeated scalar, a message as a row (its own repeated field and a
/// Timestamp inside), a map of messages: everything a confluent-kafka
/// `ProtobufSerializer` writes for such a schema.
#[test]
fn repeated_map_and_message_fields_fill_nested_columns() {
    let mut d = decoder(&[
        ("id", "bigint"),
        ("items", ITEMS),
        ("attrs", "map<string, string>"),
        ("tags", "array<bigint>"),
        ("meta", "row<channel string, flags array<string>, at timestamp>"),
        ("by_line", "map<bigint, row<sku string, qty bigint>>"),
    ]);
    let mut o = message("shop.Order");
    o.set_field_by_name("id", Value::I64(7));
    o.set_field_by_name("items", Value::List(vec![item("a", 2, 1.5), item("b", 1, 0.25)]));
    o.set_field_by_name(
        "attrs",
        Value::Map([(MapKey::String("color".into()), Value::String("red".into()))].into_iter().collect()),
    );
    o.set_field_by_name("tags", Value::List(vec![Value::I64(-1), Value::I64(300)]));
    let mut meta = message("shop.Meta");
    meta.set_field_by_name("channel", Value::String("web".into()));
    meta.set_field_by_name("flags", Value::List(vec![Value::String("x".into()), Value::String("y".into())]));
    let mut at = message("google.protobuf.Timestamp");
    at.set_field_by_name("seconds", Value::I64(1_700_000_000));
    o.set_field_by_name("meta", Value::Message(meta));
    o.get_field_by_name_mut("meta").unwrap().as_message_mut().unwrap().set_field_by_name("at", Value::Message(at));
    o.set_field_by_name("by_line", Value::Map([(MapKey::I64(2), item("c", 5, 9.0))].into_iter().collect()));
    let b = decode(&mut d, &framed(&o.encode_to_vec()));
    assert_eq!(b.columns[0].scalar(0), Scalar::Bigint(7));
    assert_eq!(b.columns[1].scalar(0), Scalar::List(vec![item_row("a", 2, 1.5, None), item_row("b", 1, 0.25, None)]));
    assert_eq!(b.columns[2].scalar(0), Scalar::Map(vec![(s("color"), s("red"))]));
    assert_eq!(b.columns[3].scalar(0), Scalar::List(vec![Scalar::Bigint(-1), Scalar::Bigint(300)]));
    assert_eq!(
        b.columns[4].scalar(0),
        Scalar::Row(vec![s("web"), Scalar::List(vec![s("x"), s("y")]), Scalar::Timestamp(1_700_000_000_000)])
    );
    assert_eq!(
        b.columns[5].scalar(0),
        Scalar::Map(vec![(Scalar::Bigint(2), Scalar::Row(vec![s("c"), Scalar::Bigint(5)]))])
    );
}

/// A record that leaves them out: repeated and map fields are empty (they
/// have no presence), a message is NULL.
#[test]
fn fields_left_out_are_empty_arrays_and_maps_and_null_rows() {
    let mut d = decoder(&[
        ("id", "bigint"),
        ("items", ITEMS),
        ("attrs", "map<string, string>"),
        ("meta", "row<channel string>"),
    ]);
    let b = decode(&mut d, &framed(&field(1, 0, &[9])));
    assert_eq!(b.columns[1].scalar(0), Scalar::List(vec![]));
    assert_eq!(b.columns[2].scalar(0), Scalar::Map(vec![]));
    assert_eq!(b.columns[3].scalar(0), Scalar::Null);
}

/// What parsers accept and serializers of other languages may write:
/// repeated elements apart, packed and unpacked mixed; a message field
/// written twice, merged; a map key written twice, the last kept.
#[test]
fn protobufs_merge_rules_hold_for_nested_fields() {
    let mut d = decoder(&[
        ("tags", "array<bigint>"),
        ("names", "array<string>"),
        ("meta", "row<channel string, flags array<string>>"),
        ("attrs", "map<string, string>"),
    ]);
    let entry = |k: &str, v: &str| [field(1, 2, k.as_bytes()), field(2, 2, v.as_bytes())].concat();
    let body = [
        field(4, 0, &[1]),    // tags: 1, unpacked
        field(7, 2, b"p"),    // names: p
        field(4, 2, &[2, 3]), // tags: 2, 3, packed
        field(5, 2, &[field(1, 2, b"web"), field(2, 2, b"f1")].concat()),
        field(3, 2, &entry("k", "old")),
        field(8, 0, &[1]),                // total, between
        field(7, 2, b"q"),                // names: q
        field(5, 2, &field(2, 2, b"f2")), // meta again: channel kept, flags added
        field(3, 2, &entry("j", "x")),
        field(3, 2, &entry("k", "new")),
        field(4, 0, &[4]), // tags: 4
    ]
    .concat();
    let b = decode(&mut d, &framed(&body));
    assert_eq!(b.columns[0].scalar(0), Scalar::List((1..=4).map(Scalar::Bigint).collect()));
    assert_eq!(b.columns[1].scalar(0), Scalar::List(vec![s("p"), s("q")]));
    assert_eq!(b.columns[2].scalar(0), Scalar::Row(vec![s("web"), Scalar::List(vec![s("f1"), s("f2")])]));
    assert_eq!(b.columns[3].scalar(0), Scalar::Map(vec![(s("j"), s("x")), (s("k"), s("new"))]));
}

/// A bad element fails the record naming the path to it, and nothing of
/// the record stays in the batch.
#[test]
fn a_bad_element_fails_the_record_naming_its_path_and_leaves_nothing() {
    let mut d = decoder(&[("id", "bigint"), ("items", ITEMS), ("tags", "array<bigint>")]);
    let good = field(2, 2, &[field(1, 2, b"a"), field(2, 0, &[1])].concat());
    let mut b = d.new_batch(2);
    d.decode(&framed(&[field(1, 0, &[1]), good.clone()].concat()), &mut b).unwrap();
    // The second item's qty written as a string.
    let bad = field(2, 2, &[field(1, 2, b"b"), field(2, 2, b"x")].concat());
    let e = d.decode(&framed(&[field(1, 0, &[2]), good, bad].concat()), &mut b).unwrap_err().0;
    assert!(e.contains("items[2].qty"), "{e}");
    // A packed run that ends inside a number.
    let e = d.decode(&framed(&[field(1, 0, &[3]), field(4, 2, &[0x80])].concat()), &mut b).unwrap_err().0;
    assert!(e.contains("tags[1]"), "{e}");
    // Not UTF-8 inside an element.
    let bad = field(2, 2, &field(1, 2, &[0xff]));
    let e = d.decode(&framed(&[field(1, 0, &[4]), bad].concat()), &mut b).unwrap_err().0;
    assert!(e.contains("items[1].sku") && e.contains("UTF-8"), "{e}");
    assert_eq!(b.len, 1);
    assert!(b.columns.iter().all(|c| c.len() == 1), "nothing of the failed records stays");
    assert_eq!(b.columns[1].scalar(0), Scalar::List(vec![item_row("a", 1, 0.0, None)]));
}

/// A column whose type the field cannot fill is refused when the schema
/// is first used, naming the column, the field and what to declare.
#[test]
fn a_column_the_field_cannot_fill_is_refused_naming_both() {
    for (column, ty, expect) in [
        ("id", "array<bigint>", "is a single value"),
        ("items", "array<bigint>", "read as rows (declare them row<…>)"),
        ("tags", "array<array<bigint>>", "no repeated of repeated"),
        ("attrs", "array<string>", "is a map (declare it map<K, V>)"),
        ("meta", "map<string, string>", "is a message (shop.Meta) (declare it row<…>)"),
        ("items", "row<sku string>", "is repeated (declare it array<T>)"),
    ] {
        let mut d = decoder(&[(column, ty)]);
        let mut b = d.new_batch(1);
        let e = d.decode(&framed(&field(1, 0, &[1])), &mut b).unwrap_err().0;
        assert!(e.contains(column) && e.contains(expect), "{column} {ty}: {e}");
    }
}

/// A nested column the query does not read is not decoded: a record whose
/// array is broken still reads the other columns.
#[test]
fn a_nested_column_the_query_does_not_read_costs_no_decoding() {
    let specs = vec![ColumnSpec::field("id", ColumnType::Bigint, false), ColumnSpec::field("items", t(ITEMS), false)];
    let source = SourceSpec {
        schema: sluice_crds::SchemaSpec { columns: specs, registry: None },
        ..SourceSpec::table("orders", &[])
    };
    let mut d = ProtobufDecoder::new(&sluice_sql::plan_query("SELECT id FROM orders", &[source]).unwrap());
    d.add_schema(3, ORDER);
    let bad = field(2, 2, &field(2, 2, b"x"));
    let b = decode(&mut d, &framed(&[field(1, 0, &[5]), bad].concat()));
    assert_eq!(b.columns[0].scalar(0), Scalar::Bigint(5));
}
