//! Arrays, maps and rows as JSON: an array, an object of the map's
//! entries (a `bigint` key as the text of its number, JSON's keys being
//! strings), an object of the row's fields in order.

use sluice_plan::{Column, ColumnData, DataType, NestedRef, Scalar, ScalarRef};

use super::json_text::{write_float, write_str, write_timestamp};

/// Writes `value`, of type `t`.
pub(super) fn write_value(value: ScalarRef<'_>, t: DataType, out: &mut Vec<u8>) {
    match value {
        ScalarRef::Null => out.extend_from_slice(b"null"),
        ScalarRef::Bigint(x) if t == DataType::Timestamp => write_timestamp(x, out),
        ScalarRef::Bigint(x) => out.extend_from_slice(itoa::Buffer::new().format(x).as_bytes()),
        ScalarRef::Timestamp(x) => write_timestamp(x, out),
        ScalarRef::Double(x) => write_float(x, out),
        ScalarRef::Decimal(x, s) => sluice_plan::decimal::write(x, s, out),
        ScalarRef::Boolean(b) => out.extend_from_slice(if b { b"true" } else { b"false" }),
        ScalarRef::String(s) => write_str(s, out),
        ScalarRef::List(n) | ScalarRef::Map(n) | ScalarRef::Row(n) => write_nested(n, t, out),
    }
}

fn write_nested(n: NestedRef<'_>, t: DataType, out: &mut Vec<u8>) {
    let NestedRef::Cell(cells, i) = n else {
        return write_scalar(&n.to_scalar(), t, out);
    };
    let Some(c) = cells.as_any().downcast_ref::<Column>() else {
        return write_scalar(&n.to_scalar(), t, out);
    };
    match (&c.data, t) {
        (ColumnData::List(list), DataType::Map(_)) => {
            let (kt, vt) = t.map_types().unwrap_or((DataType::String, DataType::Null));
            let ColumnData::Struct(entries) = &list.values.data else { return out.extend_from_slice(b"null") };
            out.push(b'{');
            for (k, j) in list.range(i).enumerate() {
                if k > 0 {
                    out.push(b',');
                }
                write_key(entries.fields[0].value(j), kt, out);
                out.push(b':');
                write_value(entries.fields[1].value(j), vt, out);
            }
            out.push(b'}');
        }
        (ColumnData::List(list), _) => {
            let et = list.values.data_type;
            out.push(b'[');
            for (k, j) in list.range(i).enumerate() {
                if k > 0 {
                    out.push(b',');
                }
                write_value(list.values.value(j), et, out);
            }
            out.push(b']');
        }
        (ColumnData::Struct(row), _) => {
            out.push(b'{');
            for (k, ((name, ft), f)) in t.fields().iter().zip(&row.fields).enumerate() {
                if k > 0 {
                    out.push(b',');
                }
                write_str(name, out);
                out.push(b':');
                write_value(f.value(i), *ft, out);
            }
            out.push(b'}');
        }
        _ => out.extend_from_slice(b"null"),
    }
}

/// A nested constant (or a value read back from state) of type `t`.
pub(super) fn write_scalar(s: &Scalar, t: DataType, out: &mut Vec<u8>) {
    match s {
        Scalar::List(items) => {
            let et = t.element().unwrap_or(DataType::Null);
            out.push(b'[');
            for (k, item) in items.iter().enumerate() {
                if k > 0 {
                    out.push(b',');
                }
                write_value(item.borrowed(), et, out);
            }
            out.push(b']');
        }
        Scalar::Map(entries) => {
            let (kt, vt) = t.map_types().unwrap_or((DataType::String, DataType::Null));
            out.push(b'{');
            for (k, (key, value)) in entries.iter().enumerate() {
                if k > 0 {
                    out.push(b',');
                }
                write_key(key.borrowed(), kt, out);
                out.push(b':');
                write_value(value.borrowed(), vt, out);
            }
            out.push(b'}');
        }
        Scalar::Row(values) => {
            out.push(b'{');
            for (k, ((name, ft), v)) in t.fields().iter().zip(values).enumerate() {
                if k > 0 {
                    out.push(b',');
                }
                write_str(name, out);
                out.push(b':');
                write_value(v.borrowed(), *ft, out);
            }
            out.push(b'}');
        }
        flat => write_value(flat.borrowed(), t, out),
    }
}

/// A map key: JSON object keys are strings.
fn write_key(key: ScalarRef<'_>, t: DataType, out: &mut Vec<u8>) {
    match key {
        ScalarRef::String(s) => write_str(s, out),
        other => {
            let mut text = Vec::new();
            write_value(other, t, &mut text);
            let text = String::from_utf8_lossy(&text);
            write_str(text.trim_matches('"'), out);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arrays_maps_and_rows_write_as_json_and_constants_as_columns_do() {
        let item = DataType::row(vec![("sku".into(), DataType::String), ("qty".into(), DataType::Bigint)]).unwrap();
        let t = DataType::array(item).unwrap();
        let v = Scalar::List(vec![
            Scalar::Row(vec![Scalar::String("a\"b".into()), Scalar::Bigint(2)]),
            Scalar::Row(vec![Scalar::Null, Scalar::Null]),
        ]);
        let mut c = Column::with_capacity(t, 1);
        c.push_scalar(&v).unwrap();
        let (mut from_column, mut from_scalar) = (Vec::new(), Vec::new());
        write_value(c.value(0), t, &mut from_column);
        write_scalar(&v, t, &mut from_scalar);
        assert_eq!(
            String::from_utf8(from_column.clone()).unwrap(),
            r#"[{"sku":"a\"b","qty":2},{"sku":null,"qty":null}]"#
        );
        assert_eq!(from_column, from_scalar);
        let m = DataType::map(DataType::Bigint, DataType::Double).unwrap();
        let mut out = Vec::new();
        write_scalar(&Scalar::Map(vec![(Scalar::Bigint(7), Scalar::Double(1.5))]), m, &mut out);
        assert_eq!(String::from_utf8(out).unwrap(), r#"{"7":1.5}"#);
    }
}
