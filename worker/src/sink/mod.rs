//! Where a core's results and dead letters go. Each core owns its sink
//! (one producer per core: no cross-core queue or lock on the data path).
//!
//! A sink only *queues* records in `send`; `flush` returns once every queued
//! record is acknowledged, or with an error if any was not. Checkpoints flush
//! before committing offsets, which is what makes delivery at-least-once.

mod dead_letter;
mod drain;
mod kafka;
mod local;
mod producer;

pub use dead_letter::{DeadLetter, DeadLetterSink, LogDeadLetter, Stage};
pub use drain::DrainDeadline;
pub use kafka::{ExchangeSink, KafkaDeadLetter, KafkaSink};
pub use local::{FileDeadLetter, LineSink, RowBudget};
pub use producer::{CoreProducer, PRODUCER_DEFAULTS, producer_config};

use crate::Error;
use sluice_formats::encode::EncodedRows;

/// A stage's output to the exchange the next stage reads: a repartition
/// topic ([`ExchangeSink`]), or channels in a local run. Rows go to the
/// partition their key hashes to, markers to every partition (see
/// `crate::runtime::exchange`).
/// A frame kept for a partition read here: partition, record timestamp,
/// frame (see [`ExchangeOutput::take_local`]).
pub type KeptFrame<'a> = dyn FnMut(usize, i64, &[u8]) -> Result<(), Error> + 'a;

pub trait ExchangeOutput: Send {
    /// Queues the rows upstream partition `from` emitted, with their
    /// sequence numbers and timestamps. A row the topic can never take
    /// (larger than the producer's `message.max.bytes`) goes to `dead`
    /// instead: returns how many did.
    fn send(
        &mut self,
        from: u32,
        rows: &EncodedRows,
        seqs: &[i64],
        timestamps: &[i64],
        dead: &mut dyn DeadLetterSink,
    ) -> Result<u64, Error>;
    /// Queues a marker to every partition, after the rows sent so far.
    fn mark(&mut self, marker: crate::frame::Frame<'_>) -> Result<(), Error>;
    /// Serves delivery without blocking.
    fn poll(&mut self) -> Result<(), Error>;
    /// Waits until everything queued is delivered.
    fn flush(&mut self) -> Result<(), Error>;
    /// From now on, frames for these partitions (the ones this core reads
    /// itself) are kept for [`ExchangeOutput::take_local`] instead of
    /// written. Outputs that have no such shortcut ignore it.
    fn read_here(&mut self, partitions: &[usize]) {
        let _ = partitions;
    }
    /// Hands each frame kept for a partition read here to `f` (partition,
    /// record timestamp, frame), in the order written, and forgets them.
    fn take_local(&mut self, f: &mut KeptFrame<'_>) -> Result<(), Error> {
        let _ = f;
        Ok(())
    }
}

pub trait Sink: Send {
    /// Queues `rows`; `timestamps[i]` is the record timestamp of row `i`
    /// (the input record it came from, for end-to-end latency). A row the
    /// output can never take (larger than a Kafka producer's
    /// `message.max.bytes`) goes to `dead` instead: returns how many did.
    fn send(&mut self, rows: &EncodedRows, timestamps: &[i64], dead: &mut dyn DeadLetterSink) -> Result<u64, Error>;
    /// Serves delivery reports without blocking.
    fn poll(&mut self) -> Result<(), Error>;
    /// Waits until everything queued is acknowledged.
    fn flush(&mut self) -> Result<(), Error>;
    /// Records the sink failed to deliver so far (a cumulative count).
    fn failed_deliveries(&self) -> u64 {
        0
    }
}
