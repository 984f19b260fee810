//! Where a partition stands, for the core that runs it: its place in the
//! stages (which upstream partition it is downstream), its offsets
//! against its checkpoints (read, saved, committed), and what it has told
//! the partitions downstream (watermarks, idleness). The core asks these
//! questions; the fields behind them are the pipeline's own.

use std::time::{Duration, Instant};

use super::{BatchCounters, PartitionPipeline};
use crate::runtime::commit_position;
use crate::source::CommittedPosition;
use sluice_engine::Engine;

impl PartitionPipeline {
    /// Its place in the query: this partition as an upstream partition of
    /// the exchange its stage writes, whether its checkpoints carry more
    /// than the engine's state (a query cut into stages), and whether
    /// another plan's pipeline counts its records as the job's input.
    pub fn place(&mut self, upstream: u32, framed: bool, counted_elsewhere: bool) {
        self.upstream = upstream;
        self.framed = framed;
        self.input_counted_elsewhere = counted_elsewhere;
    }

    /// The Kafka partition it reads.
    pub fn partition(&self) -> i32 {
        self.partition
    }

    /// This partition as an upstream partition of the exchange it writes.
    pub fn upstream(&self) -> u32 {
        self.upstream
    }

    pub fn engine(&self) -> &Engine {
        &self.engine
    }

    pub fn engine_mut(&mut self) -> &mut Engine {
        &mut self.engine
    }

    /// Resumes from `position`: its committed offset and state pointer. A
    /// partition with no commit gets its resolved start committed by the
    /// first checkpoint (see `source::kafka::start_offset`).
    pub fn resume(&mut self, position: &CommittedPosition) {
        self.committed_offset = position.offset;
        self.next_offset = Some(position.start);
        self.metadata.clone_from(&position.metadata);
    }

    /// The next offset to read: everything before it was processed.
    pub fn next_offset(&self) -> Option<i64> {
        self.next_offset
    }

    /// The consumer passed `position` with nothing left to deliver before
    /// it (transaction markers): the partition's next offset moves there.
    pub fn passed(&mut self, position: i64) {
        if self.next_offset.is_some_and(|next| position > next) {
            self.next_offset = Some(position);
        }
    }

    /// The offset last committed.
    pub fn committed_offset(&self) -> Option<i64> {
        self.committed_offset
    }

    /// The checkpoint metadata of the last commit (where its state is).
    pub fn metadata(&self) -> &str {
        &self.metadata
    }

    /// Its state changed since the last checkpoint.
    pub fn needs_saving(&self) -> bool {
        self.dirty
    }

    /// Its state was saved where `metadata` points: the next commit
    /// carries it, even if the offset did not move.
    pub fn saved(&mut self, metadata: &str) {
        self.metadata.clear();
        self.metadata.push_str(metadata);
        self.dirty = false;
        self.saved_uncommitted = true;
    }

    /// What the next commit carries for it — the offset and the state
    /// pointer — if anything (see [`commit_position::to_commit`]).
    pub fn to_commit(&self, refresh: bool) -> Option<(i64, String)> {
        let next =
            commit_position::to_commit(self.next_offset, self.committed_offset, refresh || self.saved_uncommitted)?;
        Some((next, self.metadata.clone()))
    }

    /// `offset` was committed.
    pub fn committed(&mut self, offset: i64) {
        self.committed_offset = Some(offset);
        self.saved_uncommitted = false;
    }

    /// The batch's tallies, taken; a batch with records makes the
    /// partition active (not idle) as of `started`.
    pub fn take_counters(&mut self, started: Instant) -> BatchCounters {
        let c = std::mem::take(&mut self.counters);
        if c.records > 0 {
            self.last_input = started;
            self.idle_sent = false;
        }
        c
    }

    /// Whether its records count as the job's input (a source's, read by
    /// no other plan first).
    pub fn counts_input(&self) -> bool {
        self.exchange.is_none() && !self.input_counted_elsewhere
    }

    /// It reads an exchange (a later stage), not a source.
    pub fn reads_exchange(&self) -> bool {
        self.exchange.is_some()
    }

    /// Its input ended: a source's once the source is exhausted
    /// (`source_done`), an exchange's once every upstream partition said so.
    pub fn input_ended(&self, source_done: bool) -> bool {
        self.exchange.as_ref().map_or(source_done, |x| x.ended())
    }

    /// The engine was finished (its input ended).
    pub fn ended(&self) -> bool {
        self.ended
    }

    /// Whether it has had no input for `after` and not said so yet; once
    /// this says so, it has (until its next input).
    pub fn goes_idle(&mut self, after: Duration) -> bool {
        if self.idle_sent || self.ended || self.last_input.elapsed() < after {
            return false;
        }
        self.idle_sent = true;
        true
    }

    /// Its output's watermark, if it moved since it was last marked
    /// downstream (and is now taken as marked).
    pub fn watermark_to_mark(&mut self) -> Option<i64> {
        let w = self.engine.output_watermark()?;
        if self.marked.is_some_and(|m| w <= m) {
            return None;
        }
        self.marked = Some(w);
        Some(w)
    }
}
