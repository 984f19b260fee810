//! Rows a core writes to an exchange partition it reads itself, handed
//! over in process instead of through the repartition topic.
//!
//! A query cut into stages repartitions through a Kafka topic so that any
//! core of any worker can own any partition of the next stage. But where a
//! core owns both an upstream partition and the downstream partition a row
//! goes to — every row, on a job of one core — the round trip through the
//! broker (produce, replicate, fetch, decode) buys nothing: the row stays in
//! the process. Through the broker, Nexmark q18 on one core spent more of
//! its two vCPUs writing and reading back its repartition topic than
//! running the query (docs/benchmarks.md).
//!
//! **Why it stays exact.** The frames handed over are the topic's, and the
//! downstream partition takes them with the same code (sequence numbers,
//! markers); the handover happens within the batch, on the core's thread,
//! so at a checkpoint everything handed over is in the downstream state
//! that this checkpoint saves beside the upstream offsets it came from (one
//! commit, or one transaction exactly once). A downstream partition fed this
//! way changes state without moving its topic offset, so its commit is made
//! whenever its state was saved (`to_commit`), or a restart would restore an
//! older state with newer upstream offsets.
//!
//! **Why the topic's backlog is read first.** A downstream partition drops a
//! row whose sequence number is not above the last it took from the same
//! upstream partition (a replay). After a rescale, the topic may still hold
//! rows an earlier owner of the upstream partition wrote, below the numbers
//! this core will hand over: taken after those, they would be dropped as
//! replays, and lost. So a core starts with its sources held
//! ([`crate::source::Source::hold`]) until it has read its exchange
//! partitions up to where they ended when it started; only then do its
//! sources go back to their committed offsets and the handover begin. A
//! core whose partitions have nothing unread (every restart of an
//! unchanged layout: nothing of its own went to the topic) starts at once.
//!
//! Only the exchange the first stage writes is handed over: its upstream
//! partitions are sources, which can be held. A later stage's upstream
//! partitions are themselves exchange partitions being caught up on, and
//! its rows go through the topic as before; so do the rows of a core whose
//! source two plans read (their slots are mapped by `shared_source`).

use std::ops::Range;

use super::topology::CoreInput;
use crate::Error;
use crate::sink::{DeadLetterSink, ExchangeOutput};
use crate::source::{Offsets, Record, Source};
use sluice_plan::{Stage, StageOutput};

use super::partition::PartitionPipeline;

/// A core's handover plan, and its catch-up while it lasts.
#[derive(Debug, PartialEq, Eq)]
pub struct Direct {
    /// For the exchange the first stage writes, per partition, the slots
    /// of this core reading it (empty: another core's).
    pub here: Vec<Vec<usize>>,
    /// Source slots: held while catching up.
    pub sources: Vec<usize>,
    /// While catching up: the exchange slots behind and the offset each
    /// must reach (their ends at the start).
    pub behind: Vec<(usize, i64)>,
    /// While catching up: the source slots held.
    pub held: Vec<usize>,
}

impl Direct {
    /// The handover of a core reading `inputs` (the slots of each in
    /// `input_slots`) to `stages`, whose exchanges have `partitions`
    /// partitions; `None` where it owns no pair of an upstream partition
    /// of the first stage and a partition of the exchange it writes.
    pub fn plan(inputs: &[CoreInput], input_slots: &[Range<usize>], stages: &[Stage], partitions: i32) -> Option<Self> {
        stages.first().filter(|s| s.output == StageOutput::Exchange)?;
        let upstream = inputs.iter().any(|i| i.stage == 0 && i.source.is_some() && !i.partitions.is_empty());
        let mut here = vec![Vec::new(); usize::try_from(partitions).unwrap_or(0)];
        let mut owned = false;
        for (input, slots) in inputs.iter().zip(input_slots).filter(|(i, _)| i.stage == 1 && i.reads_exchange()) {
            for (k, &p) in input.partitions.iter().enumerate() {
                if let Some(readers) = usize::try_from(p).ok().and_then(|p| here.get_mut(p)) {
                    readers.push(slots.start + k);
                    owned = true;
                }
            }
        }
        if !(upstream && owned) {
            return None;
        }
        let sources = inputs
            .iter()
            .zip(input_slots)
            .filter(|(i, _)| i.source.is_some())
            .flat_map(|(_, slots)| slots.clone())
            .collect();
        Some(Self { here, sources, behind: Vec::new(), held: Vec::new() })
    }

    /// The slots of the exchange partitions handed over to, each once.
    pub fn exchange_slots(&self) -> Vec<usize> {
        let mut slots: Vec<usize> = self.here.iter().flatten().copied().collect();
        slots.sort_unstable();
        slots.dedup();
        slots
    }

    /// Where the handover starts: whether it can at once (the consumer of
    /// `parts` has read every exchange partition handed over to up to its
    /// end now); if not, the sources are held until [`Direct::catch_up`]
    /// says so.
    pub fn start(&mut self, core: usize, source: &mut dyn Source, parts: &[PartitionPipeline]) -> Result<bool, Error> {
        let source = offsets(source)?;
        let slots = self.exchange_slots();
        let ends = source.end_offsets(&slots)?;
        self.behind = slots
            .into_iter()
            .zip(ends)
            .filter(|(slot, end)| parts[*slot].next_offset().is_some_and(|next| next < *end))
            .collect();
        if self.behind.is_empty() {
            return Ok(true);
        }
        tracing::info!(
            core, behind = ?self.behind,
            "reading the exchange partitions this core owns up to their ends before its sources: rows it writes \
             to them then skip the broker"
        );
        self.held.clone_from(&self.sources);
        source.hold(&self.held)?;
        Ok(false)
    }

    /// While catching up: whether it is over now — the consumer reached
    /// every end, and the held sources go back to where they were held.
    pub fn catch_up(
        &mut self,
        core: usize,
        source: &mut dyn Source,
        parts: &[PartitionPipeline],
    ) -> Result<bool, Error> {
        if self.behind.is_empty() {
            return Ok(false);
        }
        let source = offsets(source)?;
        if !source.reached(&self.behind)? {
            return Ok(false);
        }
        let at: Vec<(usize, i64)> =
            self.held.iter().filter_map(|&slot| parts[slot].next_offset().map(|o| (slot, o))).collect();
        source.release(&at)?;
        tracing::info!(core, "exchange partitions read up to their ends: sources read again");
        self.behind.clear();
        self.held.clear();
        Ok(true)
    }
}

/// The partitions an exchange's output keeps for this core (those with a
/// slot reading them).
pub fn partitions(here: &[Vec<usize>]) -> Vec<usize> {
    here.iter().enumerate().filter(|(_, slots)| !slots.is_empty()).map(|(p, _)| p).collect()
}

/// Gives each frame `out` kept for this core's partitions to the slots
/// reading that partition (`here`).
pub fn hand_over(
    out: &mut dyn ExchangeOutput,
    here: &[Vec<usize>],
    parts: &mut [PartitionPipeline],
    dead_letter: &mut dyn DeadLetterSink,
) -> Result<(), Error> {
    out.take_local(&mut |partition, timestamp_ms, frame| {
        for &slot in here.get(partition).map_or(&[][..], Vec::as_slice) {
            let record = Record { slot, offset: -1, timestamp_ms, payload: Some(frame), key: None, headers: None };
            parts[slot].push_direct(&record, dead_letter)?;
        }
        Ok(())
    })
}

/// The offsets of the source a direct handover holds and seeks: a Kafka
/// consumer's.
fn offsets(source: &mut dyn Source) -> Result<&mut dyn Offsets, Error> {
    source.offsets_mut().ok_or_else(|| Error::Internal("a direct handover over a source without offsets".into()))
}
