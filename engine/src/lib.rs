//! Batch-at-a-time execution of a [`sluice_plan::Plan`].
//!
//! One [`Engine`] per Kafka partition, owned by one thread: it keeps that
//! partition's state (groups, windows, row buffers) and turns each batch of
//! decoded columns into result rows for an [`Output`]. Nothing here is
//! shared between engines, locked, or aware of Kafka or of record formats.

mod accumulators;
mod agg_args;
mod aggregate;
mod changelog;
mod collect;
mod distinct;
mod error;
mod executor;
mod hop_panes;
mod join;
mod last_per_key;
mod merge;
mod operator;
mod output;
mod rows_changelog;
mod rows_window;
mod session;
mod shown;
mod signed_aggregate;
mod state;
mod stateless;
mod table_join;
#[cfg(test)]
mod test_drivers;
mod top_n;
mod unnest;
mod upsert_aggregate;

pub use error::Error;
pub use executor::{Engine, EngineOptions, EngineStats};
pub use operator::{BatchInput, Closed, Operator, OperatorOutput, StateSize};
pub use output::Output;
pub use state::{Paged, SpillStore};
