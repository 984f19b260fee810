//! When pages on disk are next due: the earliest time (a session's end,
//! a join's row's time to go) of each page a spilling operator sent to
//! disk, kept so the watermark reads a page back when something in it
//! closes.
//!
//! An entry per page in an ordered index (a `BTreeSet` of (time, page))
//! cost about 40 bytes a page — 5 bytes a key on disk — and grew with the
//! keys on disk, not with memory: 2.9 M session keys, most on disk, took
//! 21 MB of a 48 MiB budget in entries alone, and the state limit stopped
//! the job. Here a page costs 8 bytes (its time in a vector), and the
//! index holds one entry per run of [`RUN`] pages, at the run's earliest
//! time. The watermark takes a run's due pages together: at most `RUN`
//! pages read back at once.

use std::collections::BTreeSet;

/// Pages per entry of the index.
pub(crate) const RUN: usize = 64;

/// Nothing due.
const NEVER: i64 = i64::MAX;

#[derive(Debug, Default)]
pub(crate) struct PageDue {
    /// Per page: its earliest time, or [`NEVER`].
    due: Vec<i64>,
    /// Per run of pages: the time its entry in `by_due` has, or [`NEVER`]
    /// (no entry). At or before its pages' earliest: a page read back
    /// leaves it as it was, and a run taken early finds nothing due.
    run_due: Vec<i64>,
    /// (time, run) for each run with a time.
    by_due: BTreeSet<(i64, u32)>,
}

impl PageDue {
    /// Page `page` is on disk with something due at `at`: due then at the
    /// latest.
    pub fn file(&mut self, page: u32, at: i64) {
        let p = page as usize;
        if self.due.len() <= p {
            self.due.resize(p + 1, NEVER);
            self.run_due.resize(p / RUN + 1, NEVER);
        }
        if at >= self.due[p] {
            return;
        }
        self.due[p] = at;
        let run = p / RUN;
        let was = self.run_due[run];
        if at < was {
            let r = u32::try_from(run).unwrap_or(u32::MAX);
            if was != NEVER {
                self.by_due.remove(&(was, r));
            }
            self.by_due.insert((at, r));
            self.run_due[run] = at;
        }
    }

    /// Page `page` came back for another reason (a row of one of its
    /// keys): what it holds is filed elsewhere now.
    pub fn forget(&mut self, page: u32) {
        if let Some(due) = self.due.get_mut(page as usize) {
            *due = NEVER;
        }
    }

    /// The earliest time of a run (perhaps earlier than its pages').
    pub fn first(&self) -> Option<i64> {
        self.by_due.first().map(|&(at, _)| at)
    }

    /// Takes the earliest run out of the index and appends to `pages` its
    /// pages due at or before `watermark` (none, when it was filed
    /// earlier than they are); the run is filed again at its pages' next
    /// time.
    pub fn take_run(&mut self, watermark: i64, pages: &mut Vec<u32>) {
        let Some((_, run)) = self.by_due.pop_first() else { return };
        let r = run as usize;
        let (start, end) = (r * RUN, (r * RUN + RUN).min(self.due.len()));
        let mut next = NEVER;
        for (p, due) in self.due[start..end].iter_mut().enumerate() {
            if *due <= watermark {
                pages.push(u32::try_from(start + p).unwrap_or(u32::MAX));
                *due = NEVER;
            } else {
                next = next.min(*due);
            }
        }
        self.run_due[r] = next;
        if next != NEVER {
            self.by_due.insert((next, run));
        }
    }

    pub fn clear(&mut self) {
        *self = Self::default();
    }

    pub fn heap_bytes(&self) -> usize {
        (self.due.capacity() + self.run_due.capacity()) * 8 + self.by_due.len() * 40
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every page filed comes out once the watermark passes its earliest
    /// time, never before, and a page forgotten does not.
    #[test]
    fn pages_come_due_at_their_earliest_time_only() {
        let mut d = PageDue::default();
        let mut x: u64 = 7;
        let mut expected = std::collections::BTreeMap::new();
        for _ in 0..5_000 {
            x = x.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
            let page = u32::try_from((x >> 33) % 1_000).unwrap();
            let at = i64::try_from((x >> 20) % 10_000).unwrap();
            d.file(page, at);
            let e = expected.entry(page).or_insert(at);
            *e = (*e).min(at);
        }
        for page in (0..1_000).step_by(7) {
            d.forget(page);
            expected.remove(&page);
        }
        assert!(d.by_due.len() <= 1_000usize.div_ceil(RUN), "{} entries", d.by_due.len());
        let mut got = std::collections::BTreeMap::new();
        for watermark in (0..=10_000).step_by(250) {
            let mut pages = Vec::new();
            while d.first().is_some_and(|t| t <= watermark) {
                d.take_run(watermark, &mut pages);
            }
            for p in pages {
                assert!(expected[&p] <= watermark, "page {p} due at {} out at {watermark}", expected[&p]);
                assert!(expected[&p] > watermark - 250, "page {p} due at {} late at {watermark}", expected[&p]);
                assert!(got.insert(p, watermark).is_none(), "page {p} out twice");
            }
        }
        let mut pages = Vec::new();
        while d.first().is_some() {
            d.take_run(NEVER - 1, &mut pages);
        }
        assert!(pages.is_empty(), "{pages:?}");
        assert_eq!(got.len(), expected.len());
    }
}
