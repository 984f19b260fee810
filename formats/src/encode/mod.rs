//! Result rows → record bytes.

mod avro;
mod binary;
mod debezium;
mod json;
mod key;
mod view;

pub use avro::{AvroEncoder, key_record_full_name, key_schema, record_full_name, writer_schema};
pub use binary::{BOOL, BinaryEncoder, FLOAT, INT, NULL, STR};
pub use debezium::DebeziumJsonEncoder;
pub use json::{EncodedRows, JsonEncoder, write_float, write_str};
pub use key::KeyWriter;

/// How a stage writes its rows: JSON, Avro or Debezium events for the
/// job's sink, binary rows for an exchange between stages.
#[derive(Debug, Clone)]
pub enum RowEncoder {
    Json(JsonEncoder),
    Avro(AvroEncoder),
    DebeziumJson(DebeziumJsonEncoder),
    Binary(BinaryEncoder),
}

impl RowEncoder {
    /// The encoder, writing record keys with `keys` (a sink's `keyFormat`).
    pub fn with_keys(mut self, keys: KeyWriter) -> Self {
        match &mut self {
            Self::Json(e) => e.keys = keys,
            Self::Avro(e) => e.keys = keys,
            Self::DebeziumJson(e) => e.keys = keys,
            Self::Binary(_) => {}
        }
        self
    }

    /// Appends the emitted rows to `out`. Deletions are tombstones, but for
    /// Debezium, whose `d` event is a value.
    pub fn encode(&self, rows: &sluice_engine::EmittedRows<'_>, out: &mut EncodedRows) {
        let from = out.len();
        match self {
            Self::Json(e) => e.encode(rows, out),
            Self::Avro(e) => e.encode(rows, out),
            Self::DebeziumJson(e) => e.encode(rows, out),
            // No plan deletes rows on their way to an exchange: the
            // planner refuses an aggregate over an aggregate of a table,
            // the one shape where they would cross one.
            Self::Binary(_) if rows.delete => {}
            Self::Binary(e) => e.encode(rows, out),
        }
        out.mark_tombstones(from, rows.delete && !matches!(self, Self::DebeziumJson(_)));
    }
}
