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
pub use kafka::{ExchangeSink, KafkaDeadLetter, KafkaSink, PRODUCER_DEFAULTS, producer_config};
pub use local::{FileDeadLetter, LineSink};

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::{Duration, Instant};

use crate::Error;
use sluice_formats::encode::EncodedRows;

/// The moment a draining worker stops waiting on the broker. After SIGTERM
/// the worker must flush, checkpoint and exit before Kubernetes kills it at
/// the end of the grace period; every wait on the broker (a full producer
/// queue, a flush before the final checkpoint) gives up at this deadline.
/// Giving up loses nothing: offsets are committed only after a complete
/// flush, so what was not acknowledged is replayed by the next worker.
#[derive(Clone, Debug, Default)]
pub struct DrainDeadline(Arc<AtomicI64>);

impl DrainDeadline {
    /// Starts the drain: waits end `within` from now.
    pub fn start(&self, within: Duration) {
        let at = crate::runtime::now_ms().saturating_add(i64::try_from(within.as_millis()).unwrap_or(i64::MAX));
        self.0.store(at, Ordering::Release);
    }

    /// The earlier of `now + wait` and the drain deadline.
    pub fn bound(&self, wait: Duration) -> Instant {
        let now = Instant::now();
        match self.0.load(Ordering::Acquire) {
            0 => now + wait,
            at => {
                let left = u64::try_from(at - crate::runtime::now_ms()).unwrap_or(0);
                now + wait.min(Duration::from_millis(left))
            }
        }
    }

    /// Whether a drain started and its deadline has passed.
    pub fn passed(&self) -> bool {
        let at = self.0.load(Ordering::Acquire);
        at != 0 && crate::runtime::now_ms() >= at
    }
}

/// A stage's output to the exchange the next stage reads: a repartition
/// topic ([`ExchangeSink`]), or channels in a local run. Rows go to the
/// partition their key hashes to, markers to every partition (see
/// `crate::runtime::exchange`).
pub trait ExchangeOutput: Send {
    /// Queues the rows upstream partition `from` emitted, with their
    /// sequence numbers and timestamps.
    fn send(&mut self, from: u32, rows: &EncodedRows, seqs: &[i64], timestamps: &[i64]) -> Result<(), Error>;
    /// Queues a marker to every partition, after the rows sent so far.
    fn mark(&mut self, marker: crate::runtime::exchange::Frame<'_>) -> Result<(), Error>;
    /// Serves delivery without blocking.
    fn poll(&mut self) -> Result<(), Error>;
    /// Waits until everything queued is delivered.
    fn flush(&mut self) -> Result<(), Error>;
}

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
