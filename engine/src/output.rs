//! What an engine hands to whoever consumes its results.

use crate::Error;
use sluice_plan::{Batch, EmittedRows};

/// Receives an engine's output. The runtime encodes rows and produces them
/// to the sink; tests collect them.
pub trait Output {
    fn rows(&mut self, rows: &EmittedRows<'_>) -> Result<(), Error>;
    /// Input rows that arrived after their window had closed.
    fn late(&mut self, batch: &Batch, rows: &[u32]) -> Result<(), Error>;
}
