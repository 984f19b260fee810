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
mod offsets;

pub use batch_queue::{BatchConsumer, Fetched};
pub use client_log::{QuietContext, log_client_error};
pub use datagen::{Datagen, nexmark_kind, partition_of, scenario_key, write_record};
pub use file::FileSource;
pub use kafka::{CONSUMER_DEFAULTS, CommittedPosition, KafkaSource, TopicInput};
pub(crate) use local::{LocalSources, local_source};
pub use offsets::{GroupOffsets, Offsets};

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

    /// The source's offsets, for one that has them (Kafka's): commits,
    /// lag, positions. `None` for files, the generator and in-process
    /// exchanges, whose progress is the checkpoint's alone.
    fn offsets(&self) -> Option<&dyn Offsets> {
        None
    }

    /// [`Source::offsets`], to change.
    fn offsets_mut(&mut self) -> Option<&mut dyn Offsets> {
        None
    }
}
