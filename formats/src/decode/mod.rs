//! Record bytes → columns.
//!
//! The door to decoding: which decoder reads a source's records is
//! decided here, from the source's spec (its format's encoding, its keys'
//! format), not by the runtime — as Vector's `DeserializerConfig::build`
//! and RisingWave's parser builders decide it. An encoding is a file of
//! its own implementing [`Encoding`]; a new one is that file, its `mod`
//! line and its arm in [`RowDecoder::for_source`] below — the only place
//! that lists them all.

mod avro;
mod binary;
mod cells;
mod columns;
mod csv;
mod debezium;
mod encoding;
mod envelope;
mod error;
mod json;
mod key;
mod key_cells;
mod metadata;
mod nested_path;
mod protobuf;
mod raw;
mod record;
mod row;
mod tombstone;
mod wire;

pub use avro::{AvroDecoder, schema_id};
pub use binary::BinaryDecoder;
pub use columns::SourceColumns;
pub use debezium::{DebeziumAvroDecoder, DebeziumDecoder};
pub use encoding::Encoding;
pub use envelope::Envelope;
pub use error::DecodeError;
pub use json::JsonDecoder;
pub use key::KeyDecoder;
pub use protobuf::ProtobufDecoder;
#[cfg(test)]
pub(crate) use protobuf::parse_schema;
pub(crate) use protobuf::{parse_schema_with, schema_file};
pub use raw::RawDecoder;
pub use record::{RecordHeaders, RecordMeta};
pub use row::RowDecoder;

impl RowDecoder {
    /// The decoder of `source`'s records, which `plan` reads: its
    /// format's, reading keys in its `keyFormat` (key fields named after
    /// its `keyFieldsPrefix`), Avro fields resolved against the columns'
    /// aliases and defaults. An error says what in the spec cannot be read.
    pub fn for_source(plan: &sluice_plan::Plan, source: &sluice_crds::SourceSpec) -> Result<Self, String> {
        use sluice_crds::SourceFormat;
        let mut decoder = match source.format {
            SourceFormat::Json => Self::encoded(JsonDecoder::new(plan)),
            SourceFormat::Raw => Self::encoded(RawDecoder::new(plan).ok_or_else(|| {
                "a source with format raw has one column of type string (metadata besides)".to_owned()
            })?),
            SourceFormat::DebeziumJson => Self::encoded(DebeziumDecoder::new(plan)),
            SourceFormat::Avro => {
                let mut avro = AvroDecoder::new(plan);
                avro.resolve_with(source)?;
                Self::encoded(avro)
            }
            SourceFormat::Protobuf => Self::encoded(ProtobufDecoder::new(plan)),
            SourceFormat::DebeziumAvro => Self::encoded(DebeziumAvroDecoder::new(plan)),
            SourceFormat::Csv => Self::encoded(csv::CsvDecoder::new(plan)?),
        };
        if let Some(key_format) = source.key_format {
            decoder.read_keys(plan, key_format, source.key_fields_prefix.as_deref().unwrap_or_default());
        }
        Ok(decoder)
    }
}

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
