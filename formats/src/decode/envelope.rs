//! How a source's records stand for rows — the envelope, apart from the
//! encoding of their bytes, as RisingWave splits them: a plain record is a
//! row; a table's (upsert) record is its key's latest row and a record
//! with no value (a tombstone) the deletion of it; a Debezium record is a
//! change event, and the tombstone Debezium writes after a delete (for
//! compaction) says nothing more. The encoding is the [`RowDecoder`]'s.

use sluice_crds::SourceSpec;
use sluice_plan::Plan;

#[cfg(doc)]
use super::RowDecoder;
use super::TombstoneDecoder;

#[derive(Debug, Clone, Default)]
pub enum Envelope {
    #[default]
    Plain,
    /// A table source: a record without a value deletes its key's row.
    Upsert(Box<TombstoneDecoder>),
    /// Change events: a record without a value is skipped.
    Debezium,
}

impl Envelope {
    /// The envelope of `source`'s records, which `plan` reads.
    pub fn for_source(plan: &Plan, source: &SourceSpec) -> Self {
        if source.format.is_debezium() {
            return Self::Debezium;
        }
        TombstoneDecoder::new(plan, source).map_or(Self::Plain, |t| Self::Upsert(Box::new(t)))
    }
}
