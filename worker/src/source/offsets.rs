//! What a Kafka consumer has beside its records: offsets to commit (or
//! to hand a transactional producer), lag, positions, partitions held
//! and sought. Split off [`super::Source`], which every source is, so that
//! files, the generator and in-process exchanges implement none of it.

use rdkafka::TopicPartitionList;
use rdkafka::consumer::ConsumerGroupMetadata;

use crate::Error;

/// Offsets a producer commits in its transaction (exactly once): the
/// consumer group's, as the consumer would commit them.
pub struct GroupOffsets {
    pub offsets: TopicPartitionList,
    pub group: ConsumerGroupMetadata,
}

impl std::fmt::Debug for GroupOffsets {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GroupOffsets").field("offsets", &self.offsets).finish_non_exhaustive()
    }
}

/// A source's offsets in its partitions (`slot`s): what a Kafka consumer
/// has beside its records.
pub trait Offsets: Send {
    /// Records the next offset to read of each slot (and checkpoint
    /// metadata) as committed.
    fn commit(&mut self, positions: &[(usize, i64, String)]) -> Result<(), Error>;

    /// Exactly once: the offsets [`Offsets::commit`] would commit, and the
    /// consumer group they belong to, for a producer to commit in its
    /// transaction instead (`None` without a group).
    fn transactional_offsets(&self, positions: &[(usize, i64, String)]) -> Option<Result<GroupOffsets, Error>>;

    /// Consumer lag per slot, when known.
    fn lag(&self, slot: usize) -> Option<i64>;

    /// The offset past the last record of each slot now (Kafka's high
    /// watermark).
    fn end_offsets(&mut self, slots: &[usize]) -> Result<Vec<i64>, Error>;

    /// The consumer's position in each slot, where everything it passed
    /// was delivered or is a record it never delivers (a transaction's
    /// commit marker); `None` where that is not known (a held slot, a
    /// bounded run's).
    fn consumed_positions(&mut self, slots: &[usize]) -> Vec<Option<i64>>;

    /// Whether the consumer's position in each `(slot, offset)` has reached
    /// the offset (past records it skipped, such as transaction markers).
    fn reached(&mut self, ends: &[(usize, i64)]) -> Result<bool, Error>;

    /// Delivers nothing of these slots until [`Offsets::release`], which
    /// goes back to the offsets given it: what arrives meanwhile is
    /// dropped, to be read again.
    fn hold(&mut self, slots: &[usize]) -> Result<(), Error>;

    /// Reads each held slot on from the offset given (where it was held).
    fn release(&mut self, at: &[(usize, i64)]) -> Result<(), Error>;
}
