//! Result rows → Protobuf values in the Confluent wire format, for a sink
//! with `format: protobuf`: a zero byte, the writer schema's registry id,
//! the message indexes (the single byte `0`: the file's first message),
//! then the message. The writer schema is a proto3 file derived from the
//! query's output columns ([`proto_schema`]): one message, each column an
//! `optional` field numbered by its position. `optional` gives every field
//! presence, so a NULL is a field left out and a 0, `false` or `""` is a
//! field written — without it a reader could not tell the two apart.
//! Timestamps are `google.protobuf.Timestamp`, Protobuf's well-known type
//! for a time; arrays, maps and rows are repeated, map and message fields
//! ([`super::protobuf_nested`]). Keys are
//! JSON objects, Avro records, or messages of the key columns
//! ([`proto_key_schema`], `sink.keyFormat: protobuf`).
//!
//! Fields are written by hand from the typed column slices: the field's
//! key, then the value, with no message object per row.

use sluice_crds::SinkFormat;
use sluice_plan::EmittedRows;
use sluice_plan::{DataType, Scalar, Value};

use super::avro::{NAMESPACE, record_name};
use super::json::{EncodedRows, prefixes};
use super::key::{KeyWriter, wire_header};
use super::protobuf_nested::{message_body, uses_timestamp, write_field};
use super::protobuf_wire::{FIXED64, VARINT, decimal, text, timestamp, varint};
use super::view::{ColumnView, Data};

/// The writer schema of job `name`'s results: message `name` (a
/// Protobuf name made of the job's: other characters become `_`) in
/// package `dev.sluice`, one `optional` field per output column, in
/// order. An output column whose name is not a Protobuf field name is an
/// error naming it (alias it with `AS`).
pub fn proto_schema(name: &str, outputs: &[(String, DataType)]) -> Result<String, String> {
    message_schema(&record_name(name), outputs)
}

/// The schema of a query's record keys (`sink.keyFormat: protobuf`):
/// message `<name>Key` of the key columns.
pub fn proto_key_schema(name: &str, keys: &[(String, DataType)]) -> Result<String, String> {
    message_schema(&format!("{}Key", record_name(name)), keys)
}

fn message_schema(message: &str, columns: &[(String, DataType)]) -> Result<String, String> {
    if let Some(problem) = SinkFormat::Protobuf.outputs_problem(columns.iter().map(|c| c.0.as_str())) {
        return Err(problem);
    }
    let body = message_body(columns, "", "  ")?;
    let import = if columns.iter().any(|c| uses_timestamp(c.1)) {
        "import \"google/protobuf/timestamp.proto\";\n\n"
    } else {
        ""
    };
    Ok(format!(
        "syntax = \"proto3\";\n\npackage {NAMESPACE};\n\n{import}// Written by Sluice: one message per result row; an absent field is \
         NULL.\nmessage {message} {{\n{body}}}\n"
    ))
}

/// Appends row `row` of `fields` as one message, after `header` (the
/// wire format's, for the schema's id and message index `[0]`).
#[inline]
pub(super) fn write_message(header: &[u8; 6], fields: &[Field<'_>], row: usize, out: &mut Vec<u8>) {
    out.extend_from_slice(header);
    for f in fields {
        match f {
            Field::Const(bytes) => out.extend_from_slice(bytes),
            Field::Column(_, c) if c.is_null(row) => {}
            Field::Column(number, c) => cell(*number, &c.data, row, out),
        }
    }
}

/// A column of one batch as a field: its number shifted into a key, and
/// its values; or a constant, written once (key and value, nothing for
/// NULL).
pub(super) enum Field<'a> {
    Column(u32, ColumnView<'a>),
    Const(Vec<u8>),
}

/// The fields of `columns`, numbered from 1 in order.
pub(super) fn fields<'a>(columns: &'a [Value<'a>]) -> Vec<Field<'a>> {
    (1..)
        .zip(columns)
        .map(|(number, v): (u32, _)| match v {
            Value::Column(c) => Field::Column(number << 3, ColumnView::of(c)),
            Value::Scalar(s, t) => {
                let mut bytes = Vec::new();
                scalar(number << 3, s, *t, &mut bytes);
                Field::Const(bytes)
            }
        })
        .collect()
}

/// Row `row` of a column that is not NULL there, as field `key >> 3`.
#[inline]
fn cell(key: u32, data: &Data<'_>, row: usize, out: &mut Vec<u8>) {
    match data {
        Data::Int(x) => {
            varint(u64::from(key | VARINT), out);
            // int64: a negative number is its ten-byte two's complement.
            varint(x[row] as u64, out);
        }
        Data::Ts(x) => timestamp(key, x[row], out),
        Data::Float(x) => {
            varint(u64::from(key | FIXED64), out);
            out.extend_from_slice(&x[row].to_le_bytes());
        }
        Data::Bool(x) => {
            varint(u64::from(key | VARINT), out);
            out.push(u8::from(x[row]));
        }
        Data::Str(s) => text(key, s.get(row), out),
        Data::Dec(..) | Data::WideDec(..) => {
            let (v, s) = data.decimal(row);
            decimal(key, v, s, out);
        }
        Data::Nested(c) => write_field(key, c.value(row), c.data_type, out),
        Data::Null => {}
    }
}

/// A constant of type `t` as field `key >> 3`.
fn scalar(key: u32, s: &Scalar, t: DataType, out: &mut Vec<u8>) {
    match s {
        Scalar::Null => {}
        Scalar::List(_) | Scalar::Map(_) | Scalar::Row(_) => write_field(key, s.borrowed(), t, out),
        Scalar::Bigint(x) if t == DataType::Timestamp => timestamp(key, *x, out),
        Scalar::Timestamp(x) => timestamp(key, *x, out),
        Scalar::Bigint(x) => {
            varint(u64::from(key | VARINT), out);
            varint(*x as u64, out);
        }
        Scalar::Double(x) => {
            varint(u64::from(key | FIXED64), out);
            out.extend_from_slice(&x.to_le_bytes());
        }
        Scalar::Boolean(x) => {
            varint(u64::from(key | VARINT), out);
            out.push(u8::from(*x));
        }
        Scalar::String(x) => text(key, x, out),
        Scalar::Decimal(x, s) => {
            if let Some((x, s)) = super::view::decimal_constant(*x, *s, t) {
                decimal(key, x, s, out);
            }
        }
    }
}

/// Writes [`EmittedRows`] as Protobuf values of the schema registered as
/// `id`.
#[derive(Debug, Clone)]
pub struct ProtobufEncoder {
    header: [u8; 6],
    pub(super) keys: KeyWriter,
}

impl ProtobufEncoder {
    pub fn new(schema_id: u32, key_names: &[String]) -> Self {
        Self { header: wire_header(schema_id), keys: KeyWriter::json_prefixes(prefixes(key_names)) }
    }

    /// Appends the emitted rows to `out`.
    pub fn encode(&self, rows: &EmittedRows<'_>, out: &mut EncodedRows) {
        let fields = fields(rows.columns);
        out.values.reserve(rows.selection.len() * (6 + 10 * fields.len().max(1)));
        rows.selection.for_each(|row| {
            // A deletion is a tombstone: no value at all.
            if !rows.delete {
                write_message(&self.header, &fields, row, &mut out.values);
            }
            out.value_ends.push(out.values.len());
        });
    }
}

#[cfg(test)]
mod tests;
