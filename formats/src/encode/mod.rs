//! Result rows → record bytes.

mod avro;
mod binary;
mod json;
mod view;

pub use avro::{AvroEncoder, writer_schema};
pub use binary::{BOOL, BinaryEncoder, FLOAT, INT, NULL, STR};
pub use json::{EncodedRows, JsonEncoder, write_float, write_str};

/// How a stage writes its rows: JSON or Avro for the job's sink, binary
/// rows for an exchange between stages.
#[derive(Debug, Clone)]
pub enum RowEncoder {
    Json(JsonEncoder),
    Avro(AvroEncoder),
    Binary(BinaryEncoder),
}

impl RowEncoder {
    /// Appends the emitted rows to `out`.
    pub fn encode(&self, rows: &sluice_engine::EmittedRows<'_>, out: &mut EncodedRows) {
        match self {
            Self::Json(e) => e.encode(rows, out),
            Self::Avro(e) => e.encode(rows, out),
            Self::Binary(e) => e.encode(rows, out),
        }
    }
}
