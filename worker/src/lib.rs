//! The Sluice worker.
//!
//! The data path, in the order records travel:
//!
//! * [`source`] — a core's own Kafka partitions (or a local file / generator)
//! * [`decode`] — JSON payload bytes → typed column batches
//! * [`engine`] — a plan executed batch at a time, one engine per partition
//! * [`encode`] — result rows → JSON bytes
//! * [`sink`] — the core's own producer (and the dead-letter output)
//!
//! [`runtime`] runs one pinned thread per core through that path and
//! checkpoints; [`sql`] turns a query into the plan the engine runs and is
//! independent of Kafka, so the operator validates SQL with the same code.

pub mod decode;
pub mod encode;
pub mod engine;
mod error;
pub mod sql;

#[cfg(feature = "runtime")]
pub mod config;
#[cfg(feature = "runtime")]
pub mod http;
#[cfg(feature = "runtime")]
pub mod kafka;
#[cfg(feature = "runtime")]
pub mod metrics;
#[cfg(feature = "runtime")]
pub mod produce;
#[cfg(feature = "runtime")]
pub mod runtime;
#[cfg(feature = "runtime")]
pub mod sink;
#[cfg(feature = "runtime")]
pub mod source;
#[cfg(feature = "runtime")]
pub mod telemetry;

pub use error::Error;
