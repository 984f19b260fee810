//! Result rows → record bytes.

mod avro;
mod avro_binary;
mod binary;
mod debezium;
mod json;
mod json_nested;
mod json_text;
mod key;
mod protobuf;
mod protobuf_nested;
mod protobuf_wire;
mod view;

pub use avro::{AvroEncoder, key_record_full_name, key_schema, record_full_name, writer_schema};
pub use binary::{BOOL, BinaryEncoder, FLOAT, INT, NESTED, NULL, STR, WIDE};
pub use debezium::DebeziumJsonEncoder;
pub use json::{EncodedRows, JsonEncoder};
pub use json_text::{write_float, write_str};
pub use key::KeyWriter;
pub use protobuf::{ProtobufEncoder, proto_key_schema, proto_schema};

/// How a stage writes its rows: JSON, Avro, Protobuf or Debezium events for the
/// job's sink, binary rows for an exchange between stages.
#[derive(Debug, Clone)]
pub enum RowEncoder {
    Json(JsonEncoder),
    Avro(AvroEncoder),
    Protobuf(ProtobufEncoder),
    DebeziumJson(DebeziumJsonEncoder),
    Binary(BinaryEncoder),
}

impl RowEncoder {
    /// The encoder, writing record keys with `keys` (a sink's `keyFormat`).
    pub fn with_keys(mut self, keys: KeyWriter) -> Self {
        match &mut self {
            Self::Json(e) => e.keys = keys,
            Self::Avro(e) => e.keys = keys,
            Self::Protobuf(e) => e.keys = keys,
            Self::DebeziumJson(e) => e.keys = keys,
            Self::Binary(_) => {}
        }
        self
    }

    /// Appends the emitted rows to `out`. Deletions are tombstones, but for
    /// Debezium, whose `d` event is a value.
    pub fn encode(&self, rows: &sluice_plan::EmittedRows<'_>, out: &mut EncodedRows) {
        let from = out.len();
        match self {
            Self::Json(e) => {
                e.encode(rows, out);
                write_keys(&e.keys, rows, out);
            }
            Self::Avro(e) => {
                e.encode(rows, out);
                write_keys(&e.keys, rows, out);
            }
            Self::Protobuf(e) => {
                e.encode(rows, out);
                write_keys(&e.keys, rows, out);
            }
            Self::DebeziumJson(e) => {
                e.encode(rows, out);
                write_keys(&e.keys, rows, out);
            }
            // A deletion does not cross an exchange: the planner refuses an
            // aggregate over an aggregate of a table, and the deletions of
            // a group that stops passing HAVING are for the sink; a later
            // stage sees, as before, only the rows that pass.
            Self::Binary(_) if rows.delete => {}
            Self::Binary(e) => e.encode(rows, out),
        }
        out.mark_tombstones(from, rows.delete && !matches!(self, Self::DebeziumJson(_)));
    }
}

/// Appends each selected row's key to `out` (nothing for a query without
/// a key), as `keys` says: after the values, one key per value.
fn write_keys(keys: &KeyWriter, rows: &sluice_plan::EmittedRows<'_>, out: &mut EncodedRows) {
    use view::View;
    if rows.keys.is_empty() {
        return;
    }
    match &keys.0 {
        key::Kind::Json(prefixes) => {
            let views: Vec<View<'_>> = rows.keys.iter().map(View::of::<json::Json>).collect();
            rows.selection.for_each(|row| {
                json::write_object(prefixes, &views, row, &mut out.keys);
                out.key_ends.push(out.keys.len());
            });
        }
        key::Kind::Avro { header, bare_null } => {
            let views: Vec<View<'_>> = rows.keys.iter().map(View::of::<avro::Avro>).collect();
            rows.selection.for_each(|row| {
                avro::write_record(header, bare_null, &views, row, &mut out.keys);
                out.key_ends.push(out.keys.len());
            });
        }
        key::Kind::Protobuf(header) => {
            let fields = protobuf::fields(rows.keys);
            rows.selection.for_each(|row| {
                protobuf::write_message(header, &fields, row, &mut out.keys);
                out.key_ends.push(out.keys.len());
            });
        }
    }
}

#[cfg(test)]
mod decimal_tests;
