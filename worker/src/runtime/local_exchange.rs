//! The exchange of a local run (`sluice-worker run` over a file or the
//! generator, no broker): where a cluster has a repartition topic, each
//! exchange partition is a channel read by the one core that owns it.
//!
//! Records are the repartition topic's frames ([`super::exchange`]), so the
//! reading side is the same code as on a cluster: rows are decoded, markers
//! move the watermark, end markers finish bounded runs (and packed rows
//! are unpacked by the same code too). A writer collects a batch's frames
//! per destination partition and sends each partition one message per batch
//! (length-prefixed frames back to back), so the channel costs one
//! allocation per batch and partition, not one per record.
//!
//! Channels are unbounded, so a writer never blocks (two cores each
//! waiting for room in the other's partition would wedge); instead, while
//! more than [`BACKLOG_LIMIT`] bytes are in flight over all exchanges, no
//! core takes more from the source — every core keeps draining its
//! exchange partitions, so the backlog always shrinks. The limit is in
//! bytes, not chunks: wide rows (a join's, every column of both sides)
//! make chunks of megabytes, and a thousand of them were most of a join's
//! memory. Below it the backlog lets later stages take large batches.
//!
//! A local run is not restartable (its sources replay from the start), so
//! offsets here only count records; nothing is committed.

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{Receiver, Sender, TryRecvError};
use std::time::{Duration, Instant};

use crate::Error;
use crate::frame::{Frame, Packer};
use crate::sink::{DeadLetterSink, ExchangeOutput};
use crate::source::{Deliver, PollEnd, Record, Source};
use sluice_formats::encode::EncodedRows;

/// Frames for one partition, each preceded by its length (`u32`, little-endian).
pub type Chunk = Vec<u8>;

/// Creates the channels of one exchange of `partitions` partitions: the
/// senders (every writing core gets a clone of all) and the receivers (each
/// goes to the core that owns its partition).
pub fn channels(partitions: usize) -> (Vec<Sender<Chunk>>, Vec<Receiver<Chunk>>) {
    (0..partitions).map(|_| std::sync::mpsc::channel()).unzip()
}

/// Bytes of chunks (a batch's frames for one partition) in flight over all
/// of a run's exchanges above which the source is not read. Small: what is
/// in flight is memory beside the state (chunks are allocated a batch's
/// worth at a time, so the real total runs past the count), and a batch
/// of a join's wide rows is megabytes on its own. At 64 MiB Nexmark q9's
/// peak RSS was 411–416 MiB for 160 MiB of state; at 8 MiB it is 320 MiB,
/// q20's 520 → 450 MiB, at the same rates (docs/benchmarks.md, "The local
/// exchange's backlog").
pub const BACKLOG_LIMIT: usize = 8 << 20;

/// Bytes of chunks sent and not yet read, over all of a run's exchanges.
pub type Backlog = Arc<AtomicUsize>;

/// A stage's output to an in-process exchange.
#[derive(Debug)]
pub struct LocalExchangeWriter {
    to: Vec<Sender<Chunk>>,
    pending: Vec<Chunk>,
    packer: Packer,
    frame: Vec<u8>,
    backlog: Backlog,
}

impl LocalExchangeWriter {
    pub fn new(to: Vec<Sender<Chunk>>, backlog: Backlog) -> Self {
        let pending = to.iter().map(|_| Vec::new()).collect();
        let packer = Packer::new(to.len());
        Self { to, pending, packer, frame: Vec::new(), backlog }
    }

    fn push(&mut self, partition: usize, frame: Frame<'_>) {
        self.frame.clear();
        frame.write(&mut self.frame);
        push_frame(&mut self.pending[partition], &self.frame);
    }
}

/// Appends a frame to a chunk, after its length.
fn push_frame(chunk: &mut Chunk, frame: &[u8]) {
    chunk.extend_from_slice(&u32::try_from(frame.len()).unwrap_or(u32::MAX).to_le_bytes());
    chunk.extend_from_slice(frame);
}

impl ExchangeOutput for LocalExchangeWriter {
    /// A channel takes a row of any size: none is dead-lettered.
    fn send(
        &mut self,
        from: u32,
        rows: &EncodedRows,
        seqs: &[i64],
        timestamps: &[i64],
        _dead: &mut dyn DeadLetterSink,
    ) -> Result<u64, Error> {
        let pending = &mut self.pending;
        self.packer.pack(from, rows, seqs, timestamps, &mut |p, pack, _, _| {
            push_frame(&mut pending[p], pack);
            Ok(())
        })?;
        Ok(0)
    }

    fn mark(&mut self, marker: Frame<'_>) -> Result<(), Error> {
        for p in 0..self.to.len() {
            self.push(p, marker);
        }
        Ok(())
    }

    /// Hands each partition what this batch wrote to it.
    fn poll(&mut self) -> Result<(), Error> {
        for (chunk, to) in self.pending.iter_mut().zip(&self.to) {
            if !chunk.is_empty() {
                self.backlog.fetch_add(chunk.len(), Ordering::Relaxed);
                // The reader is gone only when its core stopped, which
                // stops the job anyway: nothing to deliver to.
                // The next batch's chunk starts at this one's size: grown
                // from empty, it was reallocated (and copied) a dozen times.
                let next = Vec::with_capacity(chunk.len());
                let _ = to.send(std::mem::replace(chunk, next));
            }
        }
        Ok(())
    }

    fn flush(&mut self) -> Result<(), Error> {
        self.poll()
    }
}

/// One exchange partition as a core reads it.
#[derive(Debug)]
pub struct ExchangeInputChannel {
    /// The partition's slots in the core's partition list: one per plan
    /// that reads the exchange (`sluice_plan::Branch::reads_exchange`).
    pub slots: Vec<usize>,
    pub from: Receiver<Chunk>,
}

/// A core's ends of a local run's exchanges.
#[derive(Debug, Default)]
pub struct LocalEnds {
    /// Per stage after the first: the channels of the exchange partitions
    /// this core owns, in the order of its partition list.
    pub inputs: Vec<Vec<Receiver<Chunk>>>,
    /// Per stage that writes an exchange: a sender to every partition of it.
    pub outputs: Vec<Option<Vec<Sender<Chunk>>>>,
    /// Shared by every core of the run.
    pub backlog: Backlog,
}

/// A core's records in a local run: its share of the source, then what
/// the exchanges deliver to its partitions.
pub struct LocalStagedSource {
    source: Box<dyn Source>,
    source_done: bool,
    backlog: Backlog,
    inputs: Vec<(ExchangeInputChannel, VecDeque<Chunk>, usize, i64)>,
}

impl std::fmt::Debug for LocalStagedSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LocalStagedSource").field("exchange_partitions", &self.inputs.len()).finish()
    }
}

impl LocalStagedSource {
    pub fn new(source: Box<dyn Source>, inputs: Vec<ExchangeInputChannel>, backlog: Backlog) -> Self {
        let inputs = inputs.into_iter().map(|i| (i, VecDeque::new(), 0, 0)).collect();
        Self { source, source_done: false, backlog, inputs }
    }

    /// Delivers exchange records that have arrived, up to a weight of `max`.
    fn deliver(&mut self, max: usize, f: &mut Deliver<'_>) -> usize {
        let now = crate::clock::now_ms();
        let mut n = 0;
        for (input, chunks, read, offset) in &mut self.inputs {
            loop {
                if chunks.is_empty() {
                    match input.from.try_recv() {
                        Ok(c) => chunks.push_back(c),
                        Err(TryRecvError::Empty | TryRecvError::Disconnected) => break,
                    }
                }
                let Some(chunk) = chunks.front() else { break };
                while n < max && *read + 4 <= chunk.len() {
                    let mut len = [0u8; 4];
                    len.copy_from_slice(&chunk[*read..*read + 4]);
                    let len = usize::try_from(u32::from_le_bytes(len)).unwrap_or(usize::MAX);
                    let start = *read + 4;
                    let end = start.saturating_add(len).min(chunk.len());
                    let mut weight = 0;
                    for &slot in &input.slots {
                        weight += f(Record {
                            slot,
                            offset: *offset,
                            timestamp_ms: now,
                            payload: Some(&chunk[start..end]),
                            key: None,
                            headers: None,
                        });
                    }
                    n += weight.max(1);
                    *offset += 1;
                    *read = end;
                }
                if *read >= chunk.len() {
                    let done = chunk.len();
                    chunks.pop_front();
                    *read = 0;
                    self.backlog.fetch_sub(done, Ordering::Relaxed);
                }
                if n >= max {
                    return n;
                }
            }
        }
        n
    }
}

impl Source for LocalStagedSource {
    fn poll(&mut self, max: usize, timeout: Duration, f: &mut Deliver<'_>) -> Result<(usize, PollEnd), Error> {
        let deadline = Instant::now() + timeout;
        let mut n = 0;
        loop {
            if !self.source_done && n < max && self.backlog.load(Ordering::Relaxed) < BACKLOG_LIMIT {
                let (got, end) = self.source.poll(max - n, Duration::ZERO, f)?;
                n += got;
                self.source_done = end == PollEnd::Exhausted;
            }
            n += self.deliver(max - n, f);
            if n > 0 || Instant::now() >= deadline {
                break;
            }
            // Nothing arrived: the source and several channels cannot be
            // waited on together, so look again shortly (local runs only;
            // a cluster's consumer blocks on its one queue).
            std::thread::sleep(Duration::from_millis(1));
        }
        Ok((n, if self.source_done { PollEnd::Exhausted } else { PollEnd::Open }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A source with nothing (left to) read.
    struct Exhausted;

    impl Source for Exhausted {
        fn poll(&mut self, _: usize, _: Duration, _: &mut Deliver<'_>) -> Result<(usize, PollEnd), Error> {
            Ok((0, PollEnd::Exhausted))
        }
    }

    /// A poll stops at `max` rows, not records: ten packed records of 64
    /// rows each are taken four at a time when 256 rows are asked for (by
    /// records, 256 of them would have been 16,384 rows), and the backlog
    /// falls by the chunk's bytes once all of it is read.
    #[test]
    fn a_poll_is_bounded_by_the_rows_its_records_pack() {
        let (senders, mut receivers) = channels(1);
        let backlog = Backlog::default();
        let mut chunk = Chunk::new();
        for i in 0..10u8 {
            push_frame(&mut chunk, &[i; 8]);
        }
        backlog.fetch_add(chunk.len(), Ordering::Relaxed);
        senders[0].send(chunk).unwrap();
        let from = receivers.pop().unwrap();
        let input = ExchangeInputChannel { slots: vec![3], from };
        let mut source = LocalStagedSource::new(Box::new(Exhausted), vec![input], Arc::clone(&backlog));
        let mut seen = Vec::new();
        let mut take = |max| {
            source
                .poll(max, Duration::ZERO, &mut |r| {
                    assert_eq!(r.slot, 3);
                    seen.push(r.payload.unwrap()[0]);
                    64
                })
                .unwrap()
        };
        assert_eq!(take(256), (256, PollEnd::Exhausted));
        assert_eq!(take(256), (256, PollEnd::Exhausted));
        assert_eq!(backlog.load(Ordering::Relaxed), 120, "the chunk (ten frames of 12 bytes) is not all read");
        assert_eq!(take(256), (128, PollEnd::Exhausted));
        assert_eq!(seen, (0..10).collect::<Vec<u8>>());
        assert_eq!(backlog.load(Ordering::Relaxed), 0);
    }

    /// Two plans reading one exchange (a stage and a branch beside it) each
    /// get every record, and the poll counts both deliveries' rows.
    #[test]
    fn an_exchange_two_plans_read_hands_each_record_to_both() {
        let (senders, mut receivers) = channels(1);
        let backlog = Backlog::default();
        let mut chunk = Chunk::new();
        for i in 0..3u8 {
            push_frame(&mut chunk, &[i; 4]);
        }
        backlog.fetch_add(chunk.len(), Ordering::Relaxed);
        senders[0].send(chunk).unwrap();
        let input = ExchangeInputChannel { slots: vec![1, 4], from: receivers.pop().unwrap() };
        let mut source = LocalStagedSource::new(Box::new(Exhausted), vec![input], Arc::clone(&backlog));
        let mut seen = Vec::new();
        let (rows, _) = source
            .poll(100, Duration::ZERO, &mut |r| {
                seen.push((r.slot, r.payload.unwrap()[0], r.offset));
                1
            })
            .unwrap();
        assert_eq!(rows, 6);
        assert_eq!(seen, vec![(1, 0, 0), (4, 0, 0), (1, 1, 1), (4, 1, 1), (1, 2, 2), (4, 2, 2)]);
        assert_eq!(backlog.load(Ordering::Relaxed), 0);
    }
}
