//! What an engine hands to whoever consumes its results.

use crate::Error;
use sluice_plan::Value;
use sluice_plan::{Batch, Selection};

/// Result rows of one batch: the SELECT list and the sink key columns,
/// for the rows in `selection`.
#[derive(Debug)]
pub struct EmittedRows<'a> {
    pub columns: &'a [Value<'a>],
    pub keys: &'a [Value<'a>],
    pub selection: Selection<'a>,
    /// True when `selection` indexes the input batch (one output per input
    /// row); false for rows an aggregation produced.
    pub from_input: bool,
    /// The rows delete their keys (a group an aggregate over a table no
    /// longer has, or one HAVING no longer lets through): only `keys`
    /// matter, and an upsert sink writes a tombstone.
    pub delete: bool,
}

/// Receives an engine's output. The runtime encodes rows and produces them
/// to the sink; tests collect them.
pub trait Output {
    fn rows(&mut self, rows: &EmittedRows<'_>) -> Result<(), Error>;
    /// Input rows that arrived after their window had closed.
    fn late(&mut self, batch: &Batch, rows: &[u32]) -> Result<(), Error>;
}
