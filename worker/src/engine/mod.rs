//! Batch-at-a-time execution of a [`crate::sql::Plan`].
//!
//! One [`Engine`] per Kafka partition, owned by one thread: it keeps that
//! partition's state (groups, windows, row buffers) and turns each batch of
//! decoded columns into result rows for an [`Output`]. Nothing here is
//! shared between engines, locked, or aware of Kafka.

mod accumulators;
mod aggregate;
mod batch;
mod column;
pub(crate) mod eval;
mod executor;
mod group_keys;
mod output;
mod rows_window;
mod scalar_fns;
mod session;
pub mod timefmt;

pub use batch::{Batch, Selection};
pub use column::{Column, ColumnData, StrData};
pub use eval::Value;
pub use executor::{Engine, EngineOptions, EngineStats, plan_fingerprint};
pub use output::{EmittedRows, Output};
