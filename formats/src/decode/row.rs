//! What a partition decodes its records with: a source's records in their
//! encoding ([`Encoding`], chosen from the source's spec by
//! [`RowDecoder::for_source`]), or binary rows from an exchange. The
//! runtime holds one of these and names no encoding.

use sluice_plan::{Batch, Plan};

use super::binary::BinaryDecoder;
use super::encoding::Encoding;
use super::error::DecodeError;
use super::json::JsonDecoder;
use super::record::RecordMeta;

#[cfg(doc)]
use super::columns::SourceColumns;

#[derive(Debug, Clone)]
pub enum RowDecoder {
    /// A source's records, in their encoding.
    Encoded(Box<dyn Encoding>),
    /// Rows an upstream stage wrote to an exchange.
    Binary(BinaryDecoder),
}

impl RowDecoder {
    /// Records in JSON (a source's default format; an exchange's rows in
    /// tests).
    pub fn json(plan: &Plan) -> Self {
        Self::encoded(JsonDecoder::new(plan))
    }

    pub fn encoded(encoding: impl Encoding + 'static) -> Self {
        Self::Encoded(Box::new(encoding))
    }

    pub fn new_batch(&self, capacity: usize) -> Batch {
        match self {
            Self::Encoded(d) => d.columns().new_batch(capacity),
            Self::Binary(d) => d.new_batch(capacity),
        }
    }

    /// Appends the record whose value is `payload` as one row of `batch`
    /// (metadata columns empty), or explains why it cannot.
    pub fn decode(&mut self, payload: &[u8], batch: &mut Batch) -> Result<(), DecodeError> {
        match self {
            Self::Encoded(d) => d.decode(payload, batch),
            Self::Binary(d) => d.decode(payload, batch),
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
            Self::Encoded(d) => d.decode_record(payload, meta, batch),
            Self::Binary(d) => d.decode(payload, batch),
        }
    }

    /// The registry id of the writer schema `payload` needs and the
    /// decoder does not have yet.
    pub fn needs_schema(&self, payload: &[u8]) -> Option<u32> {
        match self {
            Self::Encoded(d) => d.needs_schema(payload),
            Self::Binary(_) => None,
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
        let Self::Encoded(d) = self else { return };
        let Some(expected) = d.registry_type() else { return };
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
        match schema {
            Ok(text) => d.add_schema_with(id, text, references),
            Err(why) => d.add_unknown(id, why),
        }
    }

    /// About how many bytes the decoder's compiled writer schemas take,
    /// the key's too: they come from records, so the core counts them
    /// against its memory budget.
    pub fn cache_bytes(&mut self) -> usize {
        let Self::Encoded(d) = self else { return 0 };
        d.cache_bytes() + d.columns_mut().key.as_deref_mut().map_or(0, |k| k.cache_bytes())
    }

    /// Forgets the schema ids the registry did not have, the key's too:
    /// each is asked for again (the runtime's registry client answers
    /// from its own cache while that answer is fresh).
    pub fn forget_unknown(&mut self) {
        let Self::Encoded(d) = self else { return };
        d.forget_unknown();
        if let Some(key) = d.columns_mut().key.as_deref_mut() {
            key.forget_unknown();
        }
    }

    /// The [`SourceColumns`] a source's decoder fills (`None` for binary
    /// rows, which have no metadata columns).
    pub(super) fn columns_mut(&mut self) -> Option<&mut super::columns::SourceColumns> {
        match self {
            Self::Encoded(d) => Some(d.columns_mut()),
            Self::Binary(_) => None,
        }
    }

    /// Whether each record needs its processing time.
    pub fn reads_processing_time(&self) -> bool {
        match self {
            Self::Encoded(d) => d.columns().reads_processing_time(),
            Self::Binary(_) => false,
        }
    }
}
