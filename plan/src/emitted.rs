//! Result rows as an engine hands them on: the SELECT list's and the
//! sink key's columns for the rows selected. A plan type, so that the
//! formats that encode them need not depend on the engine that makes them.

use crate::{Selection, Value};

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
