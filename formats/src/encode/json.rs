//! Result rows → JSON bytes.
//!
//! Field-name prefixes (`{"name":` / `,"name":`) are escaped once, when the
//! encoder is built. Per batch, every column is viewed as a typed slice;
//! per row, values are written with `itoa` / `ryu` into one output buffer
//! that keeps its capacity across batches. Row `i` of the output is
//! `values[ends[i-1]..ends[i]]`.

use sluice_plan::EmittedRows;

use super::json_nested::{write_scalar, write_value};
use super::json_text::{write_float, write_str, write_timestamp};
use super::key::KeyWriter;
use super::view::{Cells, Data, View};
use sluice_plan::{DataType, Scalar};

/// Encoded rows: values (and keys) back to back, with end offsets.
#[derive(Debug, Default)]
pub struct EncodedRows {
    pub values: Vec<u8>,
    pub value_ends: Vec<usize>,
    pub keys: Vec<u8>,
    pub key_ends: Vec<usize>,
    /// Per row, whether it is a tombstone (a deleted key: a Kafka sink
    /// writes the key and no value); empty while no row is.
    pub tombstones: Vec<bool>,
}

impl EncodedRows {
    pub fn clear(&mut self) {
        self.values.clear();
        self.value_ends.clear();
        self.keys.clear();
        self.key_ends.clear();
        self.tombstones.clear();
    }

    /// Whether row `i` is a tombstone: its key, and no value.
    pub fn is_tombstone(&self, i: usize) -> bool {
        self.tombstones.get(i).copied().unwrap_or(false)
    }

    /// Marks the rows from `from` on as tombstones or not.
    pub(super) fn mark_tombstones(&mut self, from: usize, tombstone: bool) {
        if tombstone || !self.tombstones.is_empty() {
            self.tombstones.resize(from, false);
            self.tombstones.resize(self.len(), tombstone);
        }
    }

    pub fn len(&self) -> usize {
        self.value_ends.len()
    }

    pub fn is_empty(&self) -> bool {
        self.value_ends.is_empty()
    }

    /// Row `i`'s value bytes.
    pub fn value(&self, i: usize) -> &[u8] {
        let start = if i == 0 { 0 } else { self.value_ends[i - 1] };
        &self.values[start..self.value_ends[i]]
    }

    /// Row `i`'s key bytes, if the query has a key.
    pub fn key(&self, i: usize) -> Option<&[u8]> {
        if self.key_ends.is_empty() {
            return None;
        }
        let start = if i == 0 { 0 } else { self.key_ends[i - 1] };
        Some(&self.keys[start..self.key_ends[i]])
    }
}

#[derive(Debug, Clone)]
pub struct JsonEncoder {
    value_prefixes: Vec<Vec<u8>>,
    pub(super) keys: KeyWriter,
    /// The key columns after `{"__deleted":true`: how a deletion reads
    /// where there is no tombstone (a file or stdout), and how a file
    /// table source reads a deletion back.
    deleted_prefixes: Vec<Vec<u8>>,
}

/// How a deletion's line starts where a sink has no tombstones.
const DELETED: &[u8] = br#"{"__deleted":true"#;

/// The JSON encoding of one value.
pub(super) struct Json;

impl Cells for Json {
    fn null(out: &mut Vec<u8>) {
        out.extend_from_slice(b"null");
    }

    #[inline]
    fn cell(data: &Data<'_>, row: usize, out: &mut Vec<u8>) {
        match data {
            Data::Int(x) => out.extend_from_slice(itoa::Buffer::new().format(x[row]).as_bytes()),
            Data::Ts(x) => write_timestamp(x[row], out),
            Data::Float(x) => write_float(x[row], out),
            // A JSON number with every digit: readers that parse numbers as
            // decimals (Jackson's BigDecimal, Python's `Decimal`) get it exactly.
            Data::Dec(..) | Data::WideDec(..) => {
                let (v, s) = data.decimal(row);
                sluice_plan::decimal::write(v, s, out);
            }
            Data::Bool(x) => out.extend_from_slice(if x[row] { b"true" } else { b"false" }),
            Data::Str(s) => write_str(s.get(row), out),
            Data::Null => out.extend_from_slice(b"null"),
            Data::Nested(c) => write_value(c.value(row), c.data_type, out),
        }
    }

    fn scalar(s: &Scalar, t: DataType, out: &mut Vec<u8>) {
        match s {
            Scalar::Null => out.extend_from_slice(b"null"),
            Scalar::Bigint(x) if t == DataType::Timestamp => write_timestamp(*x, out),
            Scalar::Bigint(x) => out.extend_from_slice(itoa::Buffer::new().format(*x).as_bytes()),
            Scalar::Timestamp(x) => write_timestamp(*x, out),
            Scalar::Double(x) => write_float(*x, out),
            Scalar::Decimal(x, s) => match super::view::decimal_constant(*x, *s, t) {
                Some((x, s)) => sluice_plan::decimal::write(x, s, out),
                None => out.extend_from_slice(b"null"),
            },
            Scalar::Boolean(b) => out.extend_from_slice(if *b { b"true" } else { b"false" }),
            Scalar::String(x) => write_str(x, out),
            Scalar::List(_) | Scalar::Map(_) | Scalar::Row(_) => write_scalar(s, t, out),
        }
    }
}

pub(super) fn prefixes(names: &[String]) -> Vec<Vec<u8>> {
    names
        .iter()
        .enumerate()
        .map(|(i, n)| {
            let mut p = vec![if i == 0 { b'{' } else { b',' }];
            write_str(n, &mut p);
            p.push(b':');
            p
        })
        .collect()
}

impl JsonEncoder {
    pub fn new(output_names: &[String], key_names: &[String]) -> Self {
        let mut deleted_prefixes = prefixes(key_names);
        if let Some(first) = deleted_prefixes.first_mut() {
            first[0] = b',';
        }
        Self {
            value_prefixes: prefixes(output_names),
            keys: KeyWriter::json_prefixes(prefixes(key_names)),
            deleted_prefixes,
        }
    }

    /// Appends the emitted rows to `out`.
    pub fn encode(&self, rows: &EmittedRows<'_>, out: &mut EncodedRows) {
        let values: Vec<View<'_>> = rows.columns.iter().map(View::of::<Json>).collect();
        let deleted: Vec<View<'_>> =
            if rows.delete { rows.keys.iter().map(View::of::<Json>).collect() } else { Vec::new() };
        out.values.reserve(rows.selection.len() * 16 * values.len().max(1));
        rows.selection.for_each(|row| {
            if rows.delete {
                out.values.extend_from_slice(DELETED);
                for (p, v) in self.deleted_prefixes.iter().zip(&deleted) {
                    out.values.extend_from_slice(p);
                    v.write::<Json>(row, &mut out.values);
                }
                out.values.push(b'}');
            } else {
                write_object(&self.value_prefixes, &values, row, &mut out.values);
            }
            out.value_ends.push(out.values.len());
        });
    }
}

#[inline]
pub(super) fn write_object(prefixes: &[Vec<u8>], views: &[View<'_>], row: usize, out: &mut Vec<u8>) {
    if views.is_empty() {
        out.extend_from_slice(b"{}");
        return;
    }
    for (p, v) in prefixes.iter().zip(views) {
        out.extend_from_slice(p);
        v.write::<Json>(row, out);
    }
    out.push(b'}');
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_plan::{Column, Selection, Value};
    use std::borrow::Cow;

    #[test]
    fn whole_floats_are_written_exactly_as_ryu_writes_them() {
        let mut values = vec![0.0, -0.0, 1.0, -1.0, 150.0, 0.5, 1e15, -1e15, 1e15 - 1.0, 9.5e14, 1e16, 123_456.0, -7.0];
        values.extend((0..2000).map(|i| f64::from(i) * 37.0 - 20_000.0));
        values.extend((0..200).map(|i| 2f64.powi(i)));
        for x in values {
            let mut out = Vec::new();
            write_float(x, &mut out);
            assert_eq!(String::from_utf8(out).unwrap(), ryu::Buffer::new().format_finite(x), "{x}");
        }
    }

    #[test]
    fn encodes_rows_with_escapes_nulls_and_constants() {
        let mut s = Column::with_capacity(DataType::String, 2);
        s.push_str("a\"b\n\u{1}é").unwrap();
        s.push_null();
        let f = Column::floats(vec![1.5, f64::NAN]);
        let t = Column::ints(DataType::Timestamp, vec![0, 1_700_000_000_000]);
        let columns = vec![
            Value::Column(Cow::Borrowed(&s)),
            Value::Column(Cow::Borrowed(&f)),
            Value::Column(Cow::Borrowed(&t)),
            Value::Scalar(Scalar::Bigint(7), DataType::Bigint),
        ];
        let keys = vec![Value::Column(Cow::Borrowed(&s))];
        let enc = crate::encode::RowEncoder::Json(JsonEncoder::new(
            &["s".into(), "f".into(), "t".into(), "k".into()],
            &["s".into()],
        ));
        let mut out = EncodedRows::default();
        enc.encode(
            &EmittedRows {
                columns: &columns,
                keys: &keys,
                selection: Selection::All(2),
                from_input: true,
                delete: false,
            },
            &mut out,
        );
        assert_eq!(
            std::str::from_utf8(out.value(0)).unwrap(),
            r#"{"s":"a\"b\n\u0001é","f":1.5,"t":"1970-01-01T00:00:00.000Z","k":7}"#
        );
        assert_eq!(
            std::str::from_utf8(out.value(1)).unwrap(),
            r#"{"s":null,"f":null,"t":"2023-11-14T22:13:20.000Z","k":7}"#
        );
        assert_eq!(out.key(1), Some(&br#"{"s":null}"#[..]));
        for i in 0..2 {
            let v: serde_json::Value = serde_json::from_slice(out.value(i)).unwrap();
            assert!(v.is_object());
        }
    }
}
