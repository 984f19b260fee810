//! Record bytes → columns.

mod avro;
mod binary;
mod cells;
mod debezium;
mod envelope;
mod error;
mod json;
mod key;
mod key_cells;
mod metadata;
mod protobuf;
mod raw;
mod row;
mod tombstone;
mod wire;

pub use avro::{AvroDecoder, schema_id};
pub use binary::BinaryDecoder;
pub use debezium::{DebeziumAvroDecoder, DebeziumDecoder};
pub use envelope::Envelope;
pub use error::DecodeError;
pub use json::JsonDecoder;
pub use key::KeyDecoder;
pub use metadata::{RecordHeaders, RecordMeta};
pub use protobuf::ProtobufDecoder;
#[cfg(test)]
pub(crate) use protobuf::parse_schema;
pub use raw::RawDecoder;
pub use row::RowDecoder;

/// The most writer schemas a decoder keeps compiled: ids come from
/// records, which anyone may write, so the cache is bounded (a topic uses
/// a handful).
pub(crate) const MAX_SCHEMAS: usize = 1_024;
pub use tombstone::TombstoneDecoder;

/// The plan of `sql` over a source `t` of one column of each type, for the
/// decoders' tests.
#[cfg(test)]
fn test_plan(sql: &str) -> sluice_plan::Plan {
    use sluice_crds::{ColumnType, SourceSpec};
    let source = SourceSpec::table(
        "t",
        &[
            ("id", ColumnType::Bigint, true),
            ("name", ColumnType::String, false),
            ("price", ColumnType::Double, false),
            ("ts", ColumnType::Timestamp, false),
            ("flag", ColumnType::Boolean, false),
        ],
    );
    #[allow(clippy::unwrap_used)]
    sluice_sql::plan_query(sql, &[source]).unwrap()
}
