//! DECIMAL through every encoding and back: each writes every digit, and
//! Sluice's decoders read the same values back, rescaling (rounded half
//! away from zero) into a column of another scale.

use std::borrow::Cow;

use sluice_crds::{ColumnType, SourceSpec};
use sluice_plan::EmittedRows;
use sluice_plan::{Column, DataType, Plan, Scalar, Selection, Value};

use super::{AvroEncoder, BinaryEncoder, EncodedRows, JsonEncoder, ProtobufEncoder, proto_schema, writer_schema};
use crate::decode::{AvroDecoder, BinaryDecoder, JsonDecoder, ProtobufDecoder};

const D: DataType = DataType::Decimal(12, 2);

/// 12.50, -0.05, the largest decimal(12,2), NULL; and a constant of
/// another scale (1.5, written as 1.50).
fn values() -> Vec<Scalar> {
    vec![Scalar::Decimal(1250, 2), Scalar::Decimal(-5, 2), Scalar::Decimal(999_999_999_999, 2), Scalar::Null]
}

fn emitted<'a>(columns: &'a [Value<'a>]) -> EmittedRows<'a> {
    EmittedRows { columns, keys: &[], selection: Selection::All(4), from_input: false, delete: false }
}

fn columns() -> Vec<Value<'static>> {
    let mut c = Column::with_capacity(D, 4);
    values().iter().for_each(|v| c.push_scalar(v).unwrap());
    vec![Value::Column(Cow::Owned(c)), Value::Scalar(Scalar::Decimal(15, 1), D)]
}

/// A plan reading `d` and `c` as columns of `t`.
fn plan(t: ColumnType) -> Plan {
    let source = SourceSpec::table("r", &[("d", t.clone(), false), ("c", t, false)]);
    sluice_sql::plan_query("SELECT d, c FROM r", &[source]).unwrap()
}

fn read(batch: &sluice_plan::Batch) -> Vec<(Scalar, Scalar)> {
    (0..batch.len).map(|r| (batch.columns[0].scalar(r), batch.columns[1].scalar(r))).collect()
}

fn as_written() -> Vec<(Scalar, Scalar)> {
    values().into_iter().map(|v| (v, Scalar::Decimal(150, 2))).collect()
}

const DECIMAL_12_2: ColumnType = ColumnType::Decimal { precision: 12, scale: 2 };

#[test]
fn json_writes_every_digit_and_reads_it_back() {
    let mut out = EncodedRows::default();
    JsonEncoder::new(&["d".into(), "c".into()], &[]).encode(&emitted(&columns()), &mut out);
    let text: Vec<&str> = (0..4).map(|i| std::str::from_utf8(out.value(i)).unwrap()).collect();
    assert_eq!(
        text,
        [
            r#"{"d":12.50,"c":1.50}"#,
            r#"{"d":-0.05,"c":1.50}"#,
            r#"{"d":9999999999.99,"c":1.50}"#,
            r#"{"d":null,"c":1.50}"#
        ]
    );
    let p = plan(DECIMAL_12_2);
    let mut d = JsonDecoder::new(&p);
    let mut b = d.new_batch(4);
    for i in 0..4 {
        d.decode(out.value(i), &mut b).unwrap();
    }
    assert_eq!(read(&b), as_written());
    // The general path (nested or unusual records) reads the same digits,
    // strings too; a value beyond the precision is a dead letter.
    let mut b = d.new_batch(4);
    d.decode_with_serde(br#"{"d":"12.5","c":1.495}"#, &mut b).unwrap();
    // 16 digits: more than a double holds, read exactly on both paths.
    let long = br#"{"d":9999999999.985,"c":-1234567890.125}"#;
    d.decode_with_serde(long, &mut b).unwrap();
    d.decode(long, &mut b).unwrap();
    let exact = (Scalar::Decimal(999_999_999_999, 2), Scalar::Decimal(-123_456_789_013, 2));
    assert_eq!(read(&b), [(Scalar::Decimal(1250, 2), Scalar::Decimal(150, 2)), exact.clone(), exact]);
    let e = d.decode(br#"{"d":10000000000,"c":1}"#, &mut b).unwrap_err().to_string();
    assert!(e.contains("`d`") && e.contains("decimal(12,2)"), "{e}");
}

#[test]
fn avro_writes_the_decimal_logical_type_and_reads_it_back_at_any_scale() {
    let schema = writer_schema("j", &[("d".into(), D), ("c".into(), D)]).unwrap();
    assert!(schema.contains(r#""logicalType":"decimal","precision":12,"scale":2"#), "{schema}");
    let mut out = EncodedRows::default();
    AvroEncoder::new(7, &[D, D], &[]).encode(&emitted(&columns()), &mut out);
    // 12.50 is 1250: two bytes of two's complement, after the union
    // branch and the length.
    assert_eq!(&out.value(0)[5..10], &[2, 4, 0x04, 0xe2, 2]);
    let decode = |t: ColumnType| {
        let p = plan(t);
        let mut d = AvroDecoder::new(&p);
        d.add_schema(7, &schema);
        let mut b = d.new_batch(4);
        for i in 0..4 {
            d.decode(out.value(i), &mut b).unwrap();
        }
        read(&b)
    };
    assert_eq!(decode(DECIMAL_12_2), as_written());
    let one_place = decode(ColumnType::Decimal { precision: 12, scale: 1 });
    assert_eq!(one_place[0], (Scalar::Decimal(125, 1), Scalar::Decimal(15, 1)));
    assert_eq!(one_place[1].0, Scalar::Decimal(-1, 1), "-0.05 rounds away from zero");
    assert_eq!(decode(ColumnType::String)[1].0, Scalar::String("-0.05".into()));
    // 9999999999.99 does not fit decimal(11,2): the record is refused.
    let p = plan(ColumnType::Decimal { precision: 11, scale: 2 });
    let mut d = AvroDecoder::new(&p);
    d.add_schema(7, &schema);
    let mut b = d.new_batch(1);
    let e = d.decode(out.value(2), &mut b).unwrap_err().to_string();
    assert!(e.contains("does not fit decimal(11,2)"), "{e}");
}

#[test]
fn protobuf_writes_decimal_text_and_reads_it_back() {
    let schema = proto_schema("j", &[("d".into(), D), ("c".into(), D)]).unwrap();
    assert!(schema.contains("optional string d = 1;"), "{schema}");
    let mut out = EncodedRows::default();
    ProtobufEncoder::new(7, &[]).encode(&emitted(&columns()), &mut out);
    let p = plan(DECIMAL_12_2);
    let mut d = ProtobufDecoder::new(&p);
    d.add_schema(7, &schema);
    let mut b = d.new_batch(4);
    for i in 0..4 {
        d.decode(out.value(i), &mut b).unwrap();
    }
    assert_eq!(read(&b), as_written());
}

#[test]
fn exchange_rows_carry_unscaled_values() {
    let mut out = EncodedRows::default();
    BinaryEncoder.encode(&emitted(&columns()), &mut out);
    let p = plan(DECIMAL_12_2);
    let mut d = BinaryDecoder::new(&p, &["d".into(), "c".into()]);
    let mut b = d.new_batch(4);
    for i in 0..4 {
        d.decode(out.value(i), &mut b).unwrap();
    }
    assert_eq!(read(&b), as_written());
}

/// DECIMAL(38, 10), stored as i128: every encoding writes all 38 digits
/// and reads them back, and Avro's `bytes` carry up to 16 bytes of two's
/// complement (a `fixed` longer than 16 whose extra bytes only extend the
/// sign reads too).
#[test]
fn thirty_eight_digits_go_through_every_encoding() {
    const W: DataType = DataType::Decimal(38, 10);
    const WIDE: ColumnType = ColumnType::Decimal { precision: 38, scale: 10 };
    let max = sluice_plan::decimal::pow10(38) - 1;
    let rows = [Scalar::Decimal(max, 10), Scalar::Decimal(-max, 10), Scalar::Decimal(12_345, 10), Scalar::Null];
    let mut c = Column::with_capacity(W, 4);
    rows.iter().for_each(|v| c.push_scalar(v).unwrap());
    assert!(matches!(c.data, sluice_plan::ColumnData::Wide(_)));
    let cols = vec![Value::Column(Cow::Owned(c)), Value::Scalar(Scalar::Decimal(-max, 10), W)];
    let written: Vec<(Scalar, Scalar)> = rows.iter().map(|v| (v.clone(), Scalar::Decimal(-max, 10))).collect();
    let decode_all = |out: &EncodedRows, decode: &mut dyn FnMut(&[u8], &mut sluice_plan::Batch)| {
        let p = plan(WIDE);
        let mut b = JsonDecoder::new(&p).new_batch(4);
        (0..4).for_each(|i| decode(out.value(i), &mut b));
        read(&b)
    };

    let mut out = EncodedRows::default();
    JsonEncoder::new(&["d".into(), "c".into()], &[]).encode(&emitted(&cols), &mut out);
    assert_eq!(
        std::str::from_utf8(out.value(0)).unwrap(),
        r#"{"d":9999999999999999999999999999.9999999999,"c":-9999999999999999999999999999.9999999999}"#
    );
    let p = plan(WIDE);
    let mut d = JsonDecoder::new(&p);
    assert_eq!(decode_all(&out, &mut |v, b| d.decode(v, b).unwrap()), written);
    assert_eq!(decode_all(&out, &mut |v, b| d.decode_with_serde(v, b).unwrap()), written);
    let mut b = d.new_batch(1);
    let e = d.decode(br#"{"d":99999999999999999999999999999,"c":1}"#, &mut b).unwrap_err().to_string();
    assert!(e.contains("`d`") && e.contains("decimal(38,10)"), "39 digits: {e}");

    let schema = writer_schema("j", &[("d".into(), W), ("c".into(), W)]).unwrap();
    assert!(schema.contains(r#""logicalType":"decimal","precision":38,"scale":10"#), "{schema}");
    let mut out = EncodedRows::default();
    AvroEncoder::new(7, &[W, W], &[]).encode(&emitted(&cols), &mut out);
    let p = plan(WIDE);
    let mut d = AvroDecoder::new(&p);
    d.add_schema(7, &schema);
    assert_eq!(decode_all(&out, &mut |v, b| d.decode(v, b).unwrap()), written);

    let schema = proto_schema("j", &[("d".into(), W), ("c".into(), W)]).unwrap();
    let mut out = EncodedRows::default();
    ProtobufEncoder::new(7, &[]).encode(&emitted(&cols), &mut out);
    let p = plan(WIDE);
    let mut d = ProtobufDecoder::new(&p);
    d.add_schema(7, &schema);
    assert_eq!(decode_all(&out, &mut |v, b| d.decode(v, b).unwrap()), written);

    let mut out = EncodedRows::default();
    BinaryEncoder.encode(&emitted(&cols), &mut out);
    let p = plan(WIDE);
    let mut d = BinaryDecoder::new(&p, &["d".into(), "c".into()]);
    assert_eq!(decode_all(&out, &mut |v, b| d.decode(v, b).unwrap()), written);
}
