//! Where a core's records come from. Each core owns one source instance for
//! exactly its partitions: a Kafka consumer `assign()`ed to them, a local
//! file, or the built-in generator. No source is shared between cores.

mod batch_queue;
mod client_log;
mod datagen;
mod file;
mod kafka;
mod local;
pub mod nexmark;

pub use batch_queue::{BatchConsumer, Fetched};
pub use client_log::{QuietContext, log_client_error};
pub use datagen::{Datagen, nexmark_kind, partition_of, scenario_key, write_record};
pub use file::FileSource;
pub use kafka::{CONSUMER_DEFAULTS, CommittedPosition, KafkaSource, TopicInput};
pub(crate) use local::{LocalSources, local_source};

use std::time::Duration;

pub use batch_queue::MessageHeaders;

use crate::Error;

/// One record, borrowed from the source until the callback returns.
#[derive(Debug, Clone, Copy)]
pub struct Record<'a> {
    /// Index of the partition in the core's partition list (not the Kafka id).
    pub slot: usize,
    pub offset: i64,
    /// Record timestamp (Kafka CreateTime / LogAppendTime, or generation time).
    pub timestamp_ms: i64,
    /// The value; `None` for a null one (Kafka's tombstone).
    pub payload: Option<&'a [u8]>,
    /// The record's key (Kafka); a table source reads a deletion's row
    /// from it.
    pub key: Option<&'a [u8]>,
    /// The record's headers (Kafka), read only by header columns.
    pub headers: Option<&'a MessageHeaders<'a>>,
}

/// What a poll ended with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PollEnd {
    /// More records may come.
    Open,
    /// A bounded source has delivered everything it will.
    Exhausted,
}

/// What a record weighs towards a poll's `max`: the rows `f` says it added
/// (an exchange record packs up to `frame::PACK_MAX_ROWS`), at least
/// one, so a run of dead-lettered records still ends a poll.
pub type Deliver<'f> = dyn FnMut(Record<'_>) -> usize + 'f;

pub trait Source: Send {
    /// Delivers records to `f` until their weights (what `f` returns: rows)
    /// reach `max`, waiting at most `timeout` for the first; returns the
    /// weight delivered. Counted in rows, not records, so a batch is about
    /// `max` rows however many rows each record packs: counting records,
    /// a poll of packed exchange records once made a batch of 64× the rows
    /// (and of the memory) asked for.
    fn poll(&mut self, max: usize, timeout: Duration, f: &mut Deliver<'_>) -> Result<(usize, PollEnd), Error>;

    /// Records the next offset to read of each slot (and checkpoint metadata)
    /// as committed. Sources without commits ignore this.
    fn commit(&mut self, positions: &[(usize, i64, String)]) -> Result<(), Error> {
        let _ = positions;
        Ok(())
    }

    /// Exactly once: the offsets [`Source::commit`] would commit, and the
    /// consumer group they belong to, for a producer to commit in its
    /// transaction instead. `None` for a source without commits.
    fn transactional_offsets(
        &self,
        positions: &[(usize, i64, String)],
    ) -> Option<Result<(rdkafka::TopicPartitionList, rdkafka::consumer::ConsumerGroupMetadata), Error>> {
        let _ = positions;
        None
    }

    /// Consumer lag per slot, when known.
    fn lag(&self, slot: usize) -> Option<i64> {
        let _ = slot;
        None
    }

    /// The offset past the last record of each slot now (Kafka's high
    /// watermark). Only a Kafka source has them.
    fn end_offsets(&mut self, slots: &[usize]) -> Result<Vec<i64>, Error> {
        let _ = slots;
        Err(Error::Internal("end offsets of a source without offsets".into()))
    }

    /// The consumer's position in each slot, where everything it passed
    /// was delivered or is a record it never delivers (a transaction's
    /// commit marker); `None` where that is not known (a held slot, a
    /// bounded run's, a source without offsets).
    fn consumed_positions(&mut self, slots: &[usize]) -> Vec<Option<i64>> {
        vec![None; slots.len()]
    }

    /// Whether the consumer's position in each `(slot, offset)` has reached
    /// the offset (past records it skipped, such as transaction markers).
    fn reached(&mut self, ends: &[(usize, i64)]) -> Result<bool, Error> {
        let _ = ends;
        Err(Error::Internal("positions of a source without offsets".into()))
    }

    /// Delivers nothing of these slots until [`Source::release`], which
    /// goes back to the offsets given it: what arrives meanwhile is dropped,
    /// to be read again.
    fn hold(&mut self, slots: &[usize]) -> Result<(), Error> {
        let _ = slots;
        Err(Error::Internal("holding a source that cannot seek".into()))
    }

    /// Reads each held slot on from the offset given (where it was held).
    fn release(&mut self, at: &[(usize, i64)]) -> Result<(), Error> {
        let _ = at;
        Err(Error::Internal("releasing a source that cannot seek".into()))
    }
}
