//! Where a core's results and dead letters go. Each core owns its sink
//! (one producer per core: no cross-core queue or lock on the data path).
//!
//! A sink only *queues* records in `send`; `flush` returns once every queued
//! record is acknowledged, or with an error if any was not. Checkpoints flush
//! before committing offsets, which is what makes delivery at-least-once.

mod dead_letter;
mod kafka;
mod local;

pub use dead_letter::{DeadLetter, DeadLetterSink, LogDeadLetter};
pub use kafka::{KafkaDeadLetter, KafkaSink, PRODUCER_DEFAULTS};
pub use local::{FileDeadLetter, LineSink};

use crate::Error;
use crate::encode::EncodedRows;

pub trait Sink: Send {
    /// Queues `rows`; `timestamps[i]` is the record timestamp of row `i`
    /// (the input record it came from, for end-to-end latency).
    fn send(&mut self, rows: &EncodedRows, timestamps: &[i64]) -> Result<(), Error>;
    /// Serves delivery reports without blocking.
    fn poll(&mut self) -> Result<(), Error>;
    /// Waits until everything queued is acknowledged.
    fn flush(&mut self) -> Result<(), Error>;
    /// Records the sink failed to deliver so far (a cumulative count).
    fn failed_deliveries(&self) -> u64 {
        0
    }
}
