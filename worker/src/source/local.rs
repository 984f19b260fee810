//! Sources that are not Kafka topics (a file, the generator), and several
//! of them read as one: a run without a broker.

use std::time::Duration;

use sluice_crds::SourceSpec;

use super::{Datagen, FileSource, PollEnd, Source};
use crate::Error;

/// A source that is not a Kafka topic (a file, the generator), for its
/// partitions on this core.
pub(crate) fn local_source(spec: &SourceSpec, partitions: &[i32]) -> Result<Box<dyn Source>, Error> {
    match (&spec.file, &spec.datagen) {
        (Some(f), _) => Ok(Box::new(FileSource::open(&f.path)?)),
        (None, Some(d)) => Ok(Box::new(Datagen::new(
            d.scenario,
            spec.partition_key.clone(),
            u32::try_from(d.partitions).unwrap_or(1),
            partitions,
            d.records,
            d.rate_per_second,
        ))),
        _ => Err(Error::Config(format!("source {} has no kafka, file or datagen", spec.name))),
    }
}

/// Several local sources read as one (UNION ALL, or a join's sides): each
/// delivers its records as the slots from its offset on, and the whole is
/// exhausted when every one is.
///
/// Each poll starts at the next source in turn: a generator always has a
/// full poll's worth, so a fixed order would read nothing else until it
/// ended — never, unbounded — and a table beside it would stay empty. A
/// poll first takes what is ready without waiting, and waits (on one
/// source) only when nothing was: a rate-limited generator's wait for its
/// next record must not hold up a source with records ready.
pub(crate) struct LocalSources {
    sources: Vec<(Box<dyn Source>, usize)>,
    /// The sources that delivered everything they will: not polled again.
    done: Vec<bool>,
    /// The source the next poll starts at.
    next: usize,
}

impl LocalSources {
    pub fn new(sources: Vec<(Box<dyn Source>, usize)>) -> Self {
        Self { done: vec![false; sources.len()], sources, next: 0 }
    }
}

impl Source for LocalSources {
    fn poll(
        &mut self,
        max: usize,
        timeout: Duration,
        f: &mut crate::source::Deliver<'_>,
    ) -> Result<(usize, PollEnd), Error> {
        let count = self.sources.len();
        let first = self.next;
        self.next = (first + 1) % count.max(1);
        let mut n = 0;
        for wait in [Duration::ZERO, timeout] {
            let mut waited = false;
            for i in 0..count {
                let k = (first + i) % count;
                if self.done[k] {
                    continue;
                }
                let t = if n == 0 && !waited { wait } else { Duration::ZERO };
                waited |= !t.is_zero();
                let (source, offset) = &mut self.sources[k];
                let (got, end) =
                    source.poll(max - n, t, &mut |r| f(crate::source::Record { slot: r.slot + *offset, ..r }))?;
                n += got;
                self.done[k] = end == PollEnd::Exhausted;
                if n >= max {
                    return Ok((n, PollEnd::Open));
                }
            }
            if n > 0 || timeout.is_zero() {
                break;
            }
        }
        let open = self.done.iter().any(|done| !done);
        Ok((n, if open { PollEnd::Open } else { PollEnd::Exhausted }))
    }
}

#[cfg(test)]
mod tests {
    use super::LocalSources;
    use crate::error::Error;
    use crate::source::{Deliver, PollEnd, Record, Source};
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Duration;

    /// A source with `left` records (`None`: without end), delivered as
    /// fast as asked for.
    struct Counted {
        left: Option<usize>,
        offset: i64,
    }

    impl Source for Counted {
        fn poll(&mut self, max: usize, _: Duration, f: &mut Deliver<'_>) -> Result<(usize, PollEnd), Error> {
            let n = self.left.map_or(max, |left| left.min(max));
            for _ in 0..n {
                f(Record {
                    slot: 0,
                    offset: self.offset,
                    timestamp_ms: 0,
                    payload: Some(b"{}"),
                    key: None,
                    headers: None,
                });
                self.offset += 1;
            }
            self.left = self.left.map(|left| left - n);
            Ok((n, if self.left == Some(0) { PollEnd::Exhausted } else { PollEnd::Open }))
        }
    }

    /// Counts the polls that would wait, and every poll; has no records.
    struct Waiting {
        waits: Arc<AtomicUsize>,
    }

    impl Source for Waiting {
        fn poll(&mut self, _: usize, timeout: Duration, _: &mut Deliver<'_>) -> Result<(usize, PollEnd), Error> {
            if !timeout.is_zero() {
                self.waits.fetch_add(1, Ordering::Relaxed);
            }
            Ok((0, PollEnd::Open))
        }
    }

    /// A source that would wait (a rate-limited generator) does not when
    /// another has records ready; once that one is exhausted it is not
    /// polled again, and the poll waits, on one source.
    #[test]
    fn local_sources_wait_only_when_nothing_is_ready_and_skip_exhausted_ones() {
        let waits = Arc::new(AtomicUsize::new(0));
        let waiting = Box::new(Waiting { waits: Arc::clone(&waits) }) as Box<dyn Source>;
        let ready = Box::new(Counted { left: Some(10), offset: 0 }) as Box<dyn Source>;
        let mut sources = LocalSources::new(vec![(waiting, 0), (ready, 1)]);
        let mut got = 0;
        let (n, end) = sources
            .poll(100, Duration::from_millis(5), &mut |_| {
                got += 1;
                1
            })
            .unwrap();
        assert_eq!((n, end, waits.load(Ordering::Relaxed)), (10, PollEnd::Open, 0), "records were ready: no wait");
        for poll in 1..=3 {
            let (n, end) = sources.poll(100, Duration::from_millis(5), &mut |_| 1).unwrap();
            assert_eq!((n, end), (0, PollEnd::Open));
            assert_eq!(waits.load(Ordering::Relaxed), poll, "one wait per empty poll");
        }
        assert_eq!(got, 10);
        assert_eq!(sources.done, [false, true]);
    }

    /// A generator without end beside a small table: the table's records
    /// come in the second poll, not after the generator (never).
    #[test]
    fn local_sources_take_turns_so_an_endless_one_starves_none() {
        let endless = Box::new(Counted { left: None, offset: 0 }) as Box<dyn Source>;
        let table = Box::new(Counted { left: Some(10), offset: 0 }) as Box<dyn Source>;
        let mut sources = LocalSources::new(vec![(endless, 0), (table, 4)]);
        let mut slots = Vec::new();
        for _ in 0..3 {
            let (n, end) = sources
                .poll(100, Duration::ZERO, &mut |r| {
                    slots.push(r.slot);
                    1
                })
                .unwrap();
            assert_eq!((n, end), (100, PollEnd::Open));
        }
        assert_eq!(slots.iter().filter(|&&s| s == 4).count(), 10, "every table record, in slot 4");
        assert_eq!(slots[100..110], [4; 10], "the second poll starts at the table");
    }
}
