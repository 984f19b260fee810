//! An encoding of a record's value (JSON, Avro, Protobuf, raw text, a
//! Debezium change event in JSON or Avro): what every decoder of source
//! records gives the runtime, behind one trait, so that the runtime and
//! [`super::RowDecoder`] name none of them. A new encoding is a file that
//! implements this and an arm of [`super::RowDecoder::for_source`].
//!
//! The columns it fills are a [`SourceColumns`], the same for every
//! encoding: metadata columns (key, timestamp, headers) are filled there
//! after the value, whatever the encoding.

use sluice_plan::Batch;

use super::columns::SourceColumns;
use super::error::DecodeError;
use super::record::RecordMeta;

/// The most writer schemas a decoder keeps compiled: ids come from
/// records, which anyone may write, so the cache is bounded (a topic uses
/// a handful).
pub(crate) const MAX_SCHEMAS: usize = 1_024;

pub trait Encoding: EncodingClone + Send + std::fmt::Debug {
    /// The columns a record fills.
    fn columns(&self) -> &SourceColumns;
    fn columns_mut(&mut self) -> &mut SourceColumns;

    /// Appends the record whose value is `payload` as one row of `batch`
    /// (its metadata columns empty), or explains why it cannot; `batch` is
    /// left as it was then.
    fn decode(&mut self, payload: &[u8], batch: &mut Batch) -> Result<(), DecodeError>;

    /// [`Encoding::decode`], then the record's metadata columns from
    /// `meta`.
    fn decode_record(&mut self, payload: &[u8], meta: &RecordMeta<'_>, batch: &mut Batch) -> Result<(), DecodeError> {
        self.decode(payload, batch)?;
        self.columns_mut().push_metadata_columns(meta, batch)
    }

    /// The registry's name for the schemas records of this encoding name
    /// by id (`AVRO`, `PROTOBUF`); `None` for an encoding without
    /// registry (the methods below are then never called).
    fn registry_type(&self) -> Option<&'static str> {
        None
    }

    /// The registry id of the writer schema `payload` needs and the
    /// decoder does not have yet.
    fn needs_schema(&self, _payload: &[u8]) -> Option<u32> {
        None
    }

    /// Schema `id`'s text, with its references (`(name, text)`,
    /// dependencies first).
    fn add_schema_with(&mut self, _id: u32, _text: &str, _references: &[(String, String)]) {}

    /// Schema `id` cannot be had (`why`): its records are dead letters
    /// saying so.
    fn add_unknown(&mut self, _id: u32, _why: String) {}

    /// About how many bytes the compiled writer schemas take.
    fn cache_bytes(&self) -> usize {
        0
    }

    /// Forgets the ids the registry did not have.
    fn forget_unknown(&mut self) {}
}

/// A copy of a boxed [`Encoding`], for a decoder cloned per partition.
pub trait EncodingClone {
    fn boxed_clone(&self) -> Box<dyn Encoding>;
}

impl<T: Encoding + Clone + 'static> EncodingClone for T {
    fn boxed_clone(&self) -> Box<dyn Encoding> {
        Box::new(self.clone())
    }
}

impl Clone for Box<dyn Encoding> {
    fn clone(&self) -> Self {
        self.boxed_clone()
    }
}
