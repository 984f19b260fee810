//! The Sluice worker runtime: the top of the crate graph.
//!
//! The data path, in the order records travel:
//!
//! * [`source`] — a core's own Kafka partitions (or a local file / generator)
//! * `sluice_formats::decode` — JSON payload bytes → typed column batches
//! * `sluice_engine` — a plan executed batch at a time, one engine per partition
//! * `sluice_formats::encode` — result rows → JSON bytes
//! * [`sink`] — the core's own producer (and the dead-letter output)
//!
//! [`runtime`] runs one pinned thread per core through that path and
//! checkpoints. `sluice_sql` turns a query into the `sluice_plan::Plan` the
//! engine runs; it is independent of the engine, the formats and Kafka, so
//! the operator validates SQL with the same code and nothing else.

mod clock;
pub mod config;
mod error;
pub mod explain;
pub mod frame;
pub mod http;
pub mod kafka;
pub mod metrics;
pub mod produce;
pub mod registry;
pub mod runtime;
pub mod sink;
pub mod source;
pub mod telemetry;

pub use error::Error;
