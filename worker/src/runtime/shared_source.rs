//! One source read once for every plan that reads it.
//!
//! A query may read a source in two plans: a self-join (Nexmark q7 joins
//! the bids with a windowed aggregate of the bids), or a union of two
//! filters of one topic. A consumer cannot be assigned one partition
//! twice, and reading a topic twice would cost twice, so each partition is
//! read once and every record is handed to each plan's partition (a
//! Flink source feeding two operators does the same). The plans see the
//! same records in the same polls, so their offsets move together: the
//! partition's commit is one, and carries the state pointer of the one
//! plan that keeps state (the planner allows at most one, see
//! `sluice_sql::plan_dataflow`).
//!
//! Slots: the inner source numbers its partitions over the inputs it reads
//! (each source once, repartition topics as before); the core numbers its
//! pipelines over every input. This maps one to the other.

use std::time::Duration;

use crate::Error;
use crate::source::{Deliver, GroupOffsets, Offsets, PollEnd, Record, Source};

pub struct SharedSource {
    inner: Box<dyn Source>,
    /// Per inner slot, the pipeline slots its records go to.
    readers: Vec<Vec<usize>>,
    /// Per pipeline slot: its inner slot, and whether it is the one that
    /// commits that slot's offsets (and state pointer).
    inner_of: Vec<(usize, bool)>,
}

impl std::fmt::Debug for SharedSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SharedSource").field("readers", &self.readers).finish()
    }
}

impl SharedSource {
    /// `readers[s]`: the pipeline slots of inner slot `s`, the one that
    /// commits first.
    pub fn new(inner: Box<dyn Source>, readers: Vec<Vec<usize>>) -> Result<Self, Error> {
        let slots = readers.iter().map(Vec::len).sum();
        let mut inner_of = vec![(usize::MAX, false); slots];
        for (s, of) in readers.iter().enumerate() {
            for (k, &slot) in of.iter().enumerate() {
                let entry = inner_of
                    .get_mut(slot)
                    .filter(|e| e.0 == usize::MAX)
                    .ok_or_else(|| Error::Internal(format!("pipeline slot {slot} read twice or out of range")))?;
                *entry = (s, k == 0);
            }
        }
        Ok(Self { inner, readers, inner_of })
    }

    /// The positions the inner source commits: the committing reader's of
    /// each inner slot, as that slot.
    fn inner_positions(&self, positions: &[(usize, i64, String)]) -> Vec<(usize, i64, String)> {
        positions
            .iter()
            .filter_map(|(slot, offset, metadata)| {
                let &(inner, commits) = self.inner_of.get(*slot)?;
                commits.then(|| (inner, *offset, metadata.clone()))
            })
            .collect()
    }
}

impl Source for SharedSource {
    fn poll(&mut self, max: usize, timeout: Duration, f: &mut Deliver<'_>) -> Result<(usize, PollEnd), Error> {
        let readers = &self.readers;
        self.inner.poll(max, timeout, &mut |r: Record<'_>| {
            let mut weight = 0;
            for &slot in readers.get(r.slot).map_or(&[][..], |v| &v[..]) {
                weight += f(Record { slot, ..r });
            }
            weight.max(1)
        })
    }

    fn offsets(&self) -> Option<&dyn Offsets> {
        self.inner.offsets().is_some().then_some(self as &dyn Offsets)
    }

    fn offsets_mut(&mut self) -> Option<&mut dyn Offsets> {
        self.inner.offsets().is_some().then_some(self as &mut dyn Offsets)
    }
}

/// The inner source's offsets, its slots renamed; holding a slot is a
/// direct handover's, which a source read by two plans never takes.
impl Offsets for SharedSource {
    fn commit(&mut self, positions: &[(usize, i64, String)]) -> Result<(), Error> {
        let inner = self.inner_positions(positions);
        self.inner.offsets_mut().map_or(Ok(()), |o| o.commit(&inner))
    }

    fn transactional_offsets(&self, positions: &[(usize, i64, String)]) -> Option<Result<GroupOffsets, Error>> {
        self.inner.offsets()?.transactional_offsets(&self.inner_positions(positions))
    }

    fn lag(&self, slot: usize) -> Option<i64> {
        self.inner.offsets()?.lag(self.inner_of.get(slot)?.0)
    }

    fn end_offsets(&mut self, _slots: &[usize]) -> Result<Vec<i64>, Error> {
        Err(Error::Internal("end offsets of a source read by two plans".into()))
    }

    fn consumed_positions(&mut self, slots: &[usize]) -> Vec<Option<i64>> {
        vec![None; slots.len()]
    }

    fn reached(&mut self, _ends: &[(usize, i64)]) -> Result<bool, Error> {
        Err(Error::Internal("positions of a source read by two plans".into()))
    }

    fn hold(&mut self, _slots: &[usize]) -> Result<(), Error> {
        Err(Error::Internal("holding a source read by two plans".into()))
    }

    fn release(&mut self, _at: &[(usize, i64)]) -> Result<(), Error> {
        Err(Error::Internal("releasing a source read by two plans".into()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Three records over two inner slots.
    struct Fixed;

    impl Source for Fixed {
        fn poll(&mut self, _: usize, _: Duration, f: &mut Deliver<'_>) -> Result<(usize, PollEnd), Error> {
            let mut n = 0;
            for (slot, offset) in [(0, 7), (1, 3), (0, 8)] {
                n += f(Record { slot, offset, timestamp_ms: 0, payload: Some(b"x"), key: None, headers: None });
            }
            Ok((n, PollEnd::Exhausted))
        }
    }

    /// Inner slot 0 feeds pipelines 0 and 2 (one source, two plans), inner
    /// slot 1 only pipeline 1: each record reaches each of its readers,
    /// and the commit is the first reader's, as its inner slot.
    #[test]
    fn each_record_reaches_every_reader_and_the_first_commits() {
        let mut shared = SharedSource::new(Box::new(Fixed), vec![vec![0, 2], vec![1]]).unwrap();
        let mut seen = Vec::new();
        let (n, _) = shared
            .poll(10, Duration::ZERO, &mut |r| {
                seen.push((r.slot, r.offset));
                1
            })
            .unwrap();
        assert_eq!(seen, [(0, 7), (2, 7), (1, 3), (0, 8), (2, 8)]);
        assert_eq!(n, 5, "a record weighs what its readers added");
        let positions = [(0, 9, "state".to_owned()), (1, 4, String::new()), (2, 9, String::new())];
        shared.commit(&positions).unwrap();
        assert_eq!(shared.inner_positions(&positions), [(0, 9, "state".to_owned()), (1, 4, String::new())]);
        assert!(SharedSource::new(Box::new(Fixed), vec![vec![0, 1], vec![1]]).is_err());
    }
}
