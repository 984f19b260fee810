//! The door to decoding: which decoder reads a source's records is
//! decided here, from the source's spec (its format's encoding, its keys'
//! format), not by the runtime — as Vector's `DeserializerConfig::build`
//! and RisingWave's parser builders decide it. A new encoding is a file of
//! its own, an arm of [`RowDecoder`] and an arm of [`RowDecoder::for_source`];
//! the dispatch below is the only place that lists them all.

use sluice_crds::{SourceFormat, SourceSpec};
use sluice_plan::{Batch, Plan};

use super::binary::BinaryDecoder;
use super::error::DecodeError;
use super::metadata::RecordMeta;
use super::{AvroDecoder, DebeziumAvroDecoder, DebeziumDecoder, JsonDecoder, ProtobufDecoder, RawDecoder};

/// How a partition reads its records: a source's in its declared format
/// (JSON, Avro), binary rows from an exchange.
#[derive(Debug, Clone)]
pub enum RowDecoder {
    Json(JsonDecoder),
    Avro(Box<AvroDecoder>),
    Protobuf(Box<ProtobufDecoder>),
    Debezium(Box<DebeziumDecoder>),
    DebeziumAvro(Box<DebeziumAvroDecoder>),
    Raw(Box<RawDecoder>),
    Binary(BinaryDecoder),
}

impl RowDecoder {
    /// The decoder of `source`'s records, which `plan` reads: its
    /// format's, reading keys in its `keyFormat` (key fields named after
    /// its `keyFieldsPrefix`), Avro fields resolved against the columns'
    /// aliases and defaults. An error says what in the spec cannot be read.
    pub fn for_source(plan: &Plan, source: &SourceSpec) -> Result<Self, String> {
        let mut decoder = match source.format {
            SourceFormat::Json => Self::Json(JsonDecoder::new(plan)),
            SourceFormat::Raw => Self::Raw(Box::new(RawDecoder::new(plan).ok_or_else(|| {
                "a source with format raw has one column of type string (metadata besides)".to_owned()
            })?)),
            SourceFormat::DebeziumJson => Self::Debezium(Box::new(DebeziumDecoder::new(plan))),
            SourceFormat::Avro => {
                let mut avro = AvroDecoder::new(plan);
                avro.resolve_with(source)?;
                Self::Avro(Box::new(avro))
            }
            SourceFormat::Protobuf => Self::Protobuf(Box::new(ProtobufDecoder::new(plan))),
            SourceFormat::DebeziumAvro => Self::DebeziumAvro(Box::new(DebeziumAvroDecoder::new(plan))),
        };
        if let Some(key_format) = source.key_format {
            decoder.read_keys(plan, key_format, source.key_fields_prefix.as_deref().unwrap_or_default());
        }
        Ok(decoder)
    }

    pub fn new_batch(&self, capacity: usize) -> Batch {
        match self {
            Self::Json(d) => d.new_batch(capacity),
            Self::Avro(d) => d.new_batch(capacity),
            Self::Protobuf(d) => d.new_batch(capacity),
            Self::Debezium(d) => d.new_batch(capacity),
            Self::DebeziumAvro(d) => d.new_batch(capacity),
            Self::Raw(d) => d.new_batch(capacity),
            Self::Binary(d) => d.new_batch(capacity),
        }
    }

    pub fn decode(&mut self, payload: &[u8], batch: &mut Batch) -> Result<(), DecodeError> {
        match self {
            Self::Json(d) => d.decode(payload, batch),
            Self::Avro(d) => d.decode(payload, batch),
            Self::Protobuf(d) => d.decode(payload, batch),
            Self::Debezium(d) => d.decode_record(payload, &RecordMeta::default(), batch),
            Self::DebeziumAvro(d) => d.decode_record(payload, &RecordMeta::default(), batch),
            Self::Raw(d) => d.decode_record(payload, &RecordMeta::default(), batch),
            Self::Binary(d) => d.decode(payload, batch),
        }
    }

    /// The registry id of the writer schema `payload` needs and the
    /// decoder does not have yet (see [`AvroDecoder::needs_schema`]).
    pub fn needs_schema(&self, payload: &[u8]) -> Option<u32> {
        match self {
            Self::Avro(d) => d.needs_schema(payload),
            Self::Protobuf(d) => d.needs_schema(payload),
            Self::DebeziumAvro(d) => d.needs_schema(payload),
            _ => None,
        }
    }

    /// Hands over what the registry said of schema `id`: its type and
    /// text, or why it has none. A schema of another type than the
    /// source's format makes its records dead letters saying so.
    pub fn add_schema(&mut self, id: u32, schema: Result<(&str, &str), String>) {
        self.add_schema_with(id, schema, &[]);
    }

    /// [`RowDecoder::add_schema`] for a schema with references (`(name,
    /// text)`, dependencies first): named Avro types, imported `.proto`
    /// files.
    pub fn add_schema_with(&mut self, id: u32, schema: Result<(&str, &str), String>, references: &[(String, String)]) {
        let expected = match self {
            Self::Avro(_) | Self::DebeziumAvro(_) => "AVRO",
            Self::Protobuf(_) => "PROTOBUF",
            _ => return,
        };
        let schema = schema.and_then(|(kind, text)| {
            if kind == expected {
                Ok(text)
            } else {
                Err(format!(
                    "schema id {id} is a {kind} schema, but the source's format is {}",
                    expected.to_ascii_lowercase()
                ))
            }
        });
        match (self, schema) {
            (Self::Avro(d), Ok(text)) => d.add_schema_with(id, text, references),
            (Self::Avro(d), Err(why)) => d.add_unknown(id, why),
            (Self::Protobuf(d), Ok(text)) => d.add_schema_with(id, text, references),
            (Self::Protobuf(d), Err(why)) => d.add_unknown(id, why),
            (Self::DebeziumAvro(d), Ok(text)) => d.add_schema_with(id, text, references),
            (Self::DebeziumAvro(d), Err(why)) => d.add_unknown(id, why),
            _ => {}
        }
    }

    /// About how many bytes the decoder's compiled writer schemas take,
    /// the key's too: they come from records, so the core counts them
    /// against its memory budget.
    pub fn cache_bytes(&mut self) -> usize {
        let own = match self {
            Self::Avro(d) => d.cache_bytes(),
            Self::Protobuf(d) => d.cache_bytes(),
            Self::DebeziumAvro(d) => d.cache_bytes(),
            _ => 0,
        };
        own + self.columns_mut().and_then(|c| c.key.as_deref_mut()).map_or(0, |k| k.cache_bytes())
    }

    /// Forgets the schema ids the registry did not have, the key's too:
    /// each is asked for again (the runtime's registry client answers
    /// from its own cache while that answer is fresh).
    pub fn forget_unknown(&mut self) {
        match self {
            Self::Avro(d) => d.forget_unknown(),
            Self::Protobuf(d) => d.forget_unknown(),
            Self::DebeziumAvro(d) => d.forget_unknown(),
            _ => {}
        }
        if let Some(key) = self.columns_mut().and_then(|c| c.key.as_deref_mut()) {
            key.forget_unknown();
        }
    }

    /// [`RowDecoder::decode`] with the record's metadata, for the columns
    /// that read it (an internal topic's rows carry none).
    pub fn decode_record(
        &mut self,
        payload: &[u8],
        meta: &RecordMeta<'_>,
        batch: &mut Batch,
    ) -> Result<(), DecodeError> {
        match self {
            Self::Json(d) => d.decode_record(payload, meta, batch),
            Self::Avro(d) => {
                d.decode(payload, batch)?;
                d.columns.push_metadata_columns(meta, batch)
            }
            Self::Protobuf(d) => {
                d.decode(payload, batch)?;
                d.columns.push_metadata_columns(meta, batch)
            }
            Self::Debezium(d) => d.decode_record(payload, meta, batch),
            Self::DebeziumAvro(d) => d.decode_record(payload, meta, batch),
            Self::Raw(d) => d.decode_record(payload, meta, batch),
            Self::Binary(d) => d.decode(payload, batch),
        }
    }

    /// The columns' decoder a source's decoder fills its metadata columns
    /// with (`None` for binary rows, which have none).
    pub(super) fn columns_mut(&mut self) -> Option<&mut JsonDecoder> {
        match self {
            Self::Json(d) => Some(d),
            Self::Avro(d) => Some(&mut d.columns),
            Self::Protobuf(d) => Some(&mut d.columns),
            Self::Debezium(d) => Some(&mut d.rows),
            Self::DebeziumAvro(d) => Some(d.columns_mut()),
            Self::Raw(d) => Some(&mut d.columns),
            Self::Binary(_) => None,
        }
    }

    /// Whether each record needs its processing time.
    pub fn reads_processing_time(&self) -> bool {
        match self {
            Self::Json(d) => d.reads_processing_time(),
            Self::Avro(d) => d.columns.reads_processing_time(),
            Self::Protobuf(d) => d.columns.reads_processing_time(),
            Self::Debezium(d) => d.rows.reads_processing_time(),
            Self::DebeziumAvro(d) => d.reads_processing_time(),
            Self::Raw(d) => d.columns.reads_processing_time(),
            Self::Binary(_) => false,
        }
    }
}
