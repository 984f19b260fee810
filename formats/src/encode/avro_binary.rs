//! Avro's binary encoding of values, flat and nested, and the schema a
//! nested result column is written with: an `array` of `["null", T]`
//! items, a `map` of `["null", V]` values (a `bigint` key as its text: Avro
//! map keys are strings), a `record` of nullable fields, each record named
//! after the output column and numbered, so the names of one schema are
//! unique.

use sluice_plan::{Column, ColumnData, DataType, NestedRef, Scalar, ScalarRef};

pub(super) fn zigzag(v: i64, out: &mut Vec<u8>) {
    let mut z = ((v << 1) ^ (v >> 63)) as u64;
    while z >= 0x80 {
        out.push((z as u8) | 0x80);
        z >>= 7;
    }
    out.push(z as u8);
}

/// A decimal's unscaled value as Avro `bytes`: its length, then the
/// shortest big-endian two's complement (the decimal logical type's form).
pub(super) fn decimal_bytes(v: i128, out: &mut Vec<u8>) {
    let be = v.to_be_bytes();
    // Drop leading bytes that only repeat the sign.
    let mut start = 0;
    while start < 15 && ((be[start] == 0 && be[start + 1] < 0x80) || (be[start] == 0xff && be[start + 1] >= 0x80)) {
        start += 1;
    }
    zigzag(16 - start as i64, out);
    out.extend_from_slice(&be[start..]);
}

pub(super) fn text(s: &str, out: &mut Vec<u8>) {
    zigzag(i64::try_from(s.len()).unwrap_or(i64::MAX), out);
    out.extend_from_slice(s.as_bytes());
}

/// A result column's Avro type (the union's second branch).
pub(super) fn avro_type(t: DataType) -> serde_json::Value {
    match t {
        DataType::Bigint => "long".into(),
        DataType::Double => "double".into(),
        DataType::String => "string".into(),
        DataType::Boolean => "boolean".into(),
        DataType::Timestamp => serde_json::json!({ "type": "long", "logicalType": "timestamp-millis" }),
        DataType::Decimal(precision, scale) => {
            serde_json::json!({ "type": "bytes", "logicalType": "decimal", "precision": precision, "scale": scale })
        }
        // A column of NULLs only: the union's `null` branch always. Nested
        // types have their own (`avro_binary::nested_schema`).
        DataType::Null | DataType::Array(_) | DataType::Map(_) | DataType::Row(_) => "null".into(),
    }
}

/// The schema of nested type `t` of output column `column` of record
/// `record`; `rows` numbers the records it names.
pub(super) fn nested_schema(
    t: DataType,
    record: &str,
    column: &str,
    rows: &mut usize,
) -> Result<serde_json::Value, String> {
    let nullable = |s: serde_json::Value| serde_json::json!(["null", s]);
    let inner = |t: DataType, rows: &mut usize| -> Result<serde_json::Value, String> {
        Ok(match t {
            DataType::Null => serde_json::json!("null"),
            t if t.is_nested() => nullable(nested_schema(t, record, column, rows)?),
            t => nullable(avro_type(t)),
        })
    };
    Ok(match t {
        DataType::Array(_) => {
            serde_json::json!({ "type": "array", "items": inner(t.element().unwrap_or(DataType::Null), rows)? })
        }
        DataType::Map(_) => {
            let (_, v) = t.map_types().unwrap_or((DataType::String, DataType::Null));
            serde_json::json!({ "type": "map", "values": inner(v, rows)? })
        }
        _ => {
            *rows += 1;
            let name = format!("{record}_{}_{}", avro_name(column), rows);
            let mut fields = Vec::new();
            for (field, ft) in t.fields() {
                if !is_avro_name(field) {
                    return Err(format!(
                        "output column `{column}`: row field `{field}` is no Avro name (letters, digits and _, not \
                         starting with a digit); CAST it to a row type with other names"
                    ));
                }
                fields.push(serde_json::json!({ "name": field, "type": inner(*ft, rows)?, "default": null }));
            }
            serde_json::json!({ "type": "record", "name": name, "fields": fields })
        }
    })
}

fn is_avro_name(s: &str) -> bool {
    s.chars().next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && s.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
}

fn avro_name(s: &str) -> String {
    s.chars().map(|c| if c.is_ascii_alphanumeric() { c } else { '_' }).collect()
}

/// A nullable value inside a nested one: its union branch, then it.
fn write_item(value: ScalarRef<'_>, t: DataType, out: &mut Vec<u8>) {
    if matches!(value, ScalarRef::Null) || t == DataType::Null {
        if t != DataType::Null {
            out.push(0);
        }
        return;
    }
    out.push(2);
    match value {
        ScalarRef::Bigint(x) | ScalarRef::Timestamp(x) => zigzag(x, out),
        ScalarRef::Double(x) => out.extend_from_slice(&x.to_le_bytes()),
        ScalarRef::Boolean(b) => out.push(u8::from(b)),
        ScalarRef::String(s) => text(s, out),
        ScalarRef::Decimal(x, scale) => match t {
            DataType::Decimal(p, s) => match sluice_plan::decimal::rescale(x, scale, s, p) {
                Some(v) => decimal_bytes(v, out),
                None => decimal_bytes(0, out),
            },
            _ => decimal_bytes(x, out),
        },
        ScalarRef::List(_) | ScalarRef::Map(_) | ScalarRef::Row(_) => write_nested(value, t, out),
        ScalarRef::Null => {}
    }
}

/// A nested value of type `t` (not NULL: the caller wrote its branch).
pub(super) fn write_nested(value: ScalarRef<'_>, t: DataType, out: &mut Vec<u8>) {
    let n = match value {
        ScalarRef::List(n) | ScalarRef::Map(n) | ScalarRef::Row(n) => n,
        _ => return,
    };
    let column = match n {
        NestedRef::Cell(cells, i) => cells.as_any().downcast_ref::<Column>().map(|c| (c, i)),
        _ => None,
    };
    let Some((c, i)) = column else {
        return write_scalar(&n.to_scalar(), t, out);
    };
    match (&c.data, t) {
        (ColumnData::List(list), DataType::Map(_)) => {
            let (kt, vt) = t.map_types().unwrap_or((DataType::String, DataType::Null));
            let ColumnData::Struct(entries) = &list.values.data else { return out.push(0) };
            let r = list.range(i);
            if !r.is_empty() {
                zigzag(r.len() as i64, out);
                for j in r {
                    write_key(entries.fields[0].value(j), kt, out);
                    write_item(entries.fields[1].value(j), vt, out);
                }
            }
            out.push(0);
        }
        (ColumnData::List(list), _) => {
            let et = list.values.data_type;
            let r = list.range(i);
            if !r.is_empty() {
                zigzag(r.len() as i64, out);
                for j in r {
                    write_item(list.values.value(j), et, out);
                }
            }
            out.push(0);
        }
        (ColumnData::Struct(row), _) => {
            for ((_, ft), f) in t.fields().iter().zip(&row.fields) {
                write_item(f.value(i), *ft, out);
            }
        }
        _ => {}
    }
}

/// A nested constant, or a value read back from state.
fn write_scalar(s: &Scalar, t: DataType, out: &mut Vec<u8>) {
    match s {
        Scalar::List(items) => {
            let et = t.element().unwrap_or(DataType::Null);
            if !items.is_empty() {
                zigzag(items.len() as i64, out);
                items.iter().for_each(|v| write_item(v.borrowed(), et, out));
            }
            out.push(0);
        }
        Scalar::Map(entries) => {
            let (kt, vt) = t.map_types().unwrap_or((DataType::String, DataType::Null));
            if !entries.is_empty() {
                zigzag(entries.len() as i64, out);
                for (k, v) in entries {
                    write_key(k.borrowed(), kt, out);
                    write_item(v.borrowed(), vt, out);
                }
            }
            out.push(0);
        }
        Scalar::Row(values) => {
            for ((_, ft), v) in t.fields().iter().zip(values) {
                write_item(v.borrowed(), *ft, out);
            }
        }
        _ => {}
    }
}

/// A map key: Avro's keys are strings (a `bigint` key as its text).
fn write_key(key: ScalarRef<'_>, _t: DataType, out: &mut Vec<u8>) {
    match key {
        ScalarRef::String(s) => text(s, out),
        ScalarRef::Bigint(x) => text(itoa::Buffer::new().format(x), out),
        _ => text("", out),
    }
}

#[cfg(test)]
mod tests {
    use std::borrow::Cow;

    use sluice_crds::{ColumnType, SourceSpec};
    use sluice_plan::{Column, DataType, EmittedRows, Scalar, Selection, Value};

    use crate::decode::{AvroDecoder, Encoding};
    use crate::encode::{AvroEncoder, EncodedRows, writer_schema};

    /// Nested results written as Avro under the derived schema read back
    /// as they were, NULLs at every level included.
    #[test]
    fn nested_results_written_as_avro_read_back_as_they_were() {
        let t = |s: &str| DataType::of_column(&ColumnType::parse(s).unwrap()).unwrap();
        let types = [
            t("array<row<sku string, qty bigint, price decimal(9,2)>>"),
            t("map<string, array<bigint>>"),
            t("row<name string, at timestamp, inner row<ok boolean>>"),
        ];
        let outputs: Vec<(String, DataType)> =
            ["items", "attrs", "who"].iter().zip(types).map(|(n, t)| ((*n).to_owned(), t)).collect();
        let schema = writer_schema("orders-out", &outputs).unwrap();
        let item = |sku: &str, qty: i64| {
            Scalar::Row(vec![Scalar::String(sku.into()), Scalar::Bigint(qty), Scalar::Decimal(1234, 2)])
        };
        let rows = [
            [
                Scalar::List(vec![item("a", 1), Scalar::Null, item("b", -2)]),
                Scalar::Map(vec![
                    (Scalar::String("k".into()), Scalar::List(vec![Scalar::Bigint(1), Scalar::Null])),
                    (Scalar::String("e".into()), Scalar::List(vec![])),
                ]),
                Scalar::Row(vec![
                    Scalar::String("ann".into()),
                    Scalar::Timestamp(1_700_000_000_000),
                    Scalar::Row(vec![Scalar::Boolean(true)]),
                ]),
            ],
            [Scalar::List(vec![]), Scalar::Null, Scalar::Row(vec![Scalar::Null, Scalar::Null, Scalar::Null])],
        ];
        let columns: Vec<Value<'_>> = (0..3)
            .map(|c| {
                let mut col = Column::with_capacity(types[c], 2);
                rows.iter().for_each(|r| col.push_scalar(&r[c]).unwrap());
                Value::Column(Cow::Owned(col))
            })
            .collect();
        let mut out = EncodedRows::default();
        AvroEncoder::new(7, &types, &[]).encode(
            &EmittedRows {
                columns: &columns,
                keys: &[],
                selection: Selection::All(2),
                from_input: false,
                delete: false,
            },
            &mut out,
        );
        let source = SourceSpec::table(
            "r",
            &[
                ("items", ColumnType::parse("array<row<sku string, qty bigint, price decimal(9,2)>>").unwrap(), false),
                ("attrs", ColumnType::parse("map<string, array<bigint>>").unwrap(), false),
                ("who", ColumnType::parse("row<name string, at timestamp, inner row<ok boolean>>").unwrap(), false),
            ],
        );
        let plan = sluice_sql::plan_query("SELECT items, attrs, who FROM r", &[source]).unwrap();
        let mut decoder = AvroDecoder::new(&plan);
        decoder.add_schema(7, &schema);
        let mut batch = decoder.new_batch(2);
        for i in 0..2 {
            Encoding::decode(&mut decoder, out.value(i), &mut batch).unwrap();
        }
        for (r, want) in rows.iter().enumerate() {
            let got: Vec<Scalar> = batch.columns.iter().map(|c| c.scalar(r)).collect();
            assert_eq!(got, want.to_vec(), "row {r}");
        }
    }

    #[test]
    fn a_row_field_avro_cannot_name_is_refused_naming_it() {
        let t = DataType::row(vec![("line item".into(), DataType::Bigint)]).unwrap();
        let e = writer_schema("j", &[("r".into(), t)]).unwrap_err();
        assert!(e.contains("`line item`"), "{e}");
    }
}
