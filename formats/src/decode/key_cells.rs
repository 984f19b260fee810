//! What the columns' decoder asks of a record's key decoder.
//!
//! A key is decoded by a value decoder of its own (JSON, Avro or Protobuf:
//! [`super::KeyDecoder`]), and every value decoder fills its `metadata: key`
//! columns from it, so the two types nest. The columns' decoder holds the
//! key decoder through this trait, which names neither, so that the files
//! of the two do not import each other.

use sluice_plan::Column;

use super::error::DecodeError;

pub trait KeyCells: std::fmt::Debug + Send {
    /// Decodes the record's key, before its key columns are filled.
    fn decode(&mut self, key: Option<&[u8]>) -> Result<(), DecodeError>;

    /// Column `col`'s cell of the key just decoded; `None` when the column
    /// reads the key's bytes instead (no key, a JSON scalar).
    fn cell(&self, col: usize) -> Option<&Column>;

    /// The registry id of the schema `key` names, if not known yet.
    fn needs_schema(&self, key: &[u8]) -> Option<u32>;

    /// Hands over what the registry said of schema `id`.
    fn add_schema(&mut self, id: u32, schema: Result<(&str, &str), String>, references: &[(String, String)]);

    /// Forgets the schema ids the registry did not have.
    fn forget_unknown(&mut self);

    /// About how many bytes its compiled schemas take.
    fn cache_bytes(&mut self) -> usize;

    /// A copy, for a decoder cloned per partition.
    fn boxed_clone(&self) -> Box<dyn KeyCells>;
}

impl Clone for Box<dyn KeyCells> {
    fn clone(&self) -> Self {
        self.boxed_clone()
    }
}
