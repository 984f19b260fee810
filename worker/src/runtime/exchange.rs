//! Exchanges between stages (see `sluice_plan::Dataflow`).
//!
//! On a cluster an exchange is a Kafka repartition topic: the upstream
//! stage produces each row to the partition its key hashes to (Kafka's own
//! partitioner), and the downstream stage's partitions are owned by cores
//! like any source partition. A local run exchanges in process
//! (`local_exchange.rs`) with the same routing and the same markers. Each
//! record is a frame ([`crate::frame`]).
//!
//! A row's sequence number is the source offset it came from (stages that
//! read a source) or its position in the upstream partition's output
//! (stages that read an exchange, counted in the upstream's checkpoint).
//! A row is produced again only when its upstream replays after a crash,
//! with the same number; the downstream partition keeps the highest number
//! seen per upstream partition in its checkpoint and drops what is not
//! higher. That is what keeps aggregates exact across a shuffle with
//! at-least-once delivery: the sink may see a result twice, the state never
//! counts a row twice.
//!
//! That holds where a replay emits the same rows in the same order: a
//! stateless stage, which emits per input row. A stage that keeps state
//! emits per batch (one coalesced change per group, windows closed at the
//! batch's end), and a replay cuts its backlog into other batches, so its
//! rows could not be numbered as before: counted, a replay's fewer rows got
//! numbers the next stage had seen, and it dropped real updates. Such a
//! job writes its exchanges in one transaction per checkpoint, read
//! committed downstream, at least once too
//! (`Dataflow::has_stateful_exchange_writer`): a replay is then the only
//! version the next stage ever sees.
//!
//! Markers are produced to every partition after the rows they follow, so
//! a downstream partition's watermark is the minimum over its upstream
//! partitions' ([`UpstreamWatermarks`]); an upstream partition that has had
//! no input for `spec.engine.idleTimeoutMillis` says so and stops holding
//! the minimum back until its next row, as Flink's `withIdleness` does.

use serde::{Deserialize, Serialize};

use crate::frame::{END, Frame};

/// The watermark of a partition fed by an exchange: the minimum over its
/// upstream partitions' latest watermarks, once each has reported one (so
/// no window closes before the slowest upstream partition passed it).
/// Upstream partitions that declared themselves idle do not count until
/// they report again.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct UpstreamWatermarks {
    marks: Vec<Option<i64>>,
    idle: Vec<bool>,
}

impl UpstreamWatermarks {
    pub fn new(upstreams: usize) -> Self {
        Self { marks: vec![None; upstreams], idle: vec![false; upstreams] }
    }

    /// Records `from`'s watermark (it never moves back); the combined one,
    /// when every upstream partition that is not idle has reported.
    pub fn update(&mut self, from: usize, at: i64) -> Option<i64> {
        if let Some(m) = self.marks.get_mut(from) {
            *m = Some(m.map_or(at, |w| w.max(at)));
            self.idle[from] = false;
        }
        self.combined()
    }

    /// `from` had no input for the idleness timeout; the combined watermark
    /// without it.
    pub fn set_idle(&mut self, from: usize) -> Option<i64> {
        if let Some(i) = self.idle.get_mut(from) {
            *i = true;
        }
        self.combined()
    }

    /// A row from `from`: an idle partition is active again (its watermark
    /// counts once it reports one more).
    pub fn active(&mut self, from: usize) {
        if let Some(i) = self.idle.get_mut(from) {
            *i = false;
        }
    }

    /// The minimum over the active upstream partitions; none while one of
    /// them has not reported, or when all are idle (nothing to go by).
    pub fn combined(&self) -> Option<i64> {
        let mut active = self.marks.iter().zip(&self.idle).filter(|(_, idle)| !**idle).map(|(m, _)| *m).peekable();
        active.peek()?;
        active.try_fold(i64::MAX, |min, w| w.map(|w| min.min(w)))
    }

    /// Whether every upstream partition reported the end of its input.
    pub fn ended(&self) -> bool {
        self.marks.iter().all(|m| *m == Some(END))
    }

    /// Upstream partitions that reported the end of their input have not
    /// reported in this run yet.
    fn forget_ends(&mut self) {
        for m in &mut self.marks {
            if *m == Some(END) {
                *m = None;
            }
        }
    }

    fn resize(&mut self, upstreams: usize) {
        self.marks.resize(upstreams, None);
        self.idle.resize(upstreams, false);
    }
}

/// What a downstream partition keeps about its upstream partitions: the
/// highest row sequence number seen from each (to drop replayed rows) and
/// their watermarks. Saved with the partition's state, so both survive a
/// restart together with the offset they belong to.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ExchangeInput {
    seen: Vec<Option<i64>>,
    watermarks: UpstreamWatermarks,
}

impl ExchangeInput {
    pub fn new(upstreams: usize) -> Self {
        Self { seen: vec![None; upstreams], watermarks: UpstreamWatermarks::new(upstreams) }
    }

    fn upstream(&self, from: u32) -> Result<usize, String> {
        let i = from as usize;
        if i >= self.seen.len() {
            return Err(format!("a record from upstream partition {from}, but there are {}", self.seen.len()));
        }
        Ok(i)
    }

    /// A row numbered `seq` from upstream partition `from`: whether it is
    /// new (`false`: its upstream replayed it, it was processed already).
    pub fn accept_row(&mut self, from: u32, seq: i64) -> Result<bool, String> {
        let from = self.upstream(from)?;
        if self.seen[from].is_some_and(|s| seq <= s) {
            return Ok(false);
        }
        self.seen[from] = Some(seq);
        self.watermarks.active(from);
        Ok(true)
    }

    /// A marker; the combined watermark now, if there is one. A row frame
    /// is not a marker (an error: see [`ExchangeInput::accept_row`]).
    pub fn accept_marker(&mut self, frame: Frame<'_>) -> Result<Option<i64>, String> {
        let from = self.upstream(frame.from())?;
        match frame {
            Frame::Watermark { at, .. } => Ok(self.watermarks.update(from, at)),
            Frame::Idle { .. } => Ok(self.watermarks.set_idle(from)),
            Frame::Row { .. } | Frame::Rows { .. } => Err("a row where a marker was expected".into()),
        }
    }

    pub fn upstreams(&self) -> usize {
        self.seen.len()
    }

    /// This position, restored from a checkpoint, for `upstreams` upstream
    /// partitions: more than it was saved with (a source topic given more
    /// partitions) start unreported. An upstream that had reported the end
    /// of a bounded run's input reports again in this run (which reads
    /// what came since): its end is forgotten, or this run would end at
    /// once with the new rows unread.
    pub fn restored(mut self, upstreams: usize) -> Self {
        self.seen.resize(upstreams, None);
        self.watermarks.resize(upstreams);
        self.watermarks.forget_ends();
        self
    }

    /// Whether every upstream partition's input ended (bounded runs).
    pub fn ended(&self) -> bool {
        self.watermarks.ended()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_watermark_is_the_slowest_upstream_once_all_reported() {
        let mut w = UpstreamWatermarks::new(2);
        assert_eq!(w.update(0, 50), None, "partition 1 has not reported");
        assert_eq!(w.update(1, 30), Some(30));
        assert_eq!(w.update(1, 80), Some(50));
        assert_eq!(w.update(0, 10), Some(50), "a watermark never moves back");
    }

    #[test]
    fn idle_upstreams_do_not_hold_the_watermark_until_they_report_again() {
        let mut w = UpstreamWatermarks::new(3);
        assert_eq!(w.update(0, 50), None);
        assert_eq!(w.set_idle(2), None, "1 has not reported");
        assert_eq!(w.update(1, 70), Some(50), "2 is idle: it does not count");
        assert_eq!(w.update(2, 20), Some(20), "2 reported again: it counts again");
        assert_eq!(w.set_idle(0), Some(20));
        assert_eq!(w.set_idle(1), Some(20));
        assert_eq!(w.set_idle(2), None, "all idle: nothing to go by");
    }

    #[test]
    fn replayed_rows_are_dropped_and_the_position_survives_a_snapshot() {
        let mut x = ExchangeInput::new(2);
        assert_eq!(x.accept_row(0, 10), Ok(true));
        assert_eq!(x.accept_row(1, 3), Ok(true));
        assert_eq!(x.accept_marker(Frame::Watermark { from: 0, at: 100 }), Ok(None));
        let saved = postcard::to_allocvec(&x).unwrap();
        // The upstream of partition 0 crashed and replays from offset 9.
        let mut x = postcard::from_bytes::<ExchangeInput>(&saved).unwrap().restored(2);
        assert_eq!(x.accept_row(0, 9), Ok(false));
        assert_eq!(x.accept_row(0, 10), Ok(false));
        assert_eq!(x.accept_row(0, 11), Ok(true));
        assert_eq!(x.accept_marker(Frame::Watermark { from: 1, at: 80 }), Ok(Some(80)));
        assert!(
            x.accept_marker(Frame::Idle { from: 2 }).unwrap_err().contains("upstream partition 2, but there are 2")
        );
        assert!(x.accept_row(2, 1).unwrap_err().contains("upstream partition 2"));
        assert!(!x.ended());
        x.accept_marker(Frame::Watermark { from: 0, at: END }).unwrap();
        x.accept_marker(Frame::Watermark { from: 1, at: END }).unwrap();
        assert!(x.ended());
        let saved = postcard::to_allocvec(&x).unwrap();
        let grown = x.restored(3);
        assert!(!grown.ended(), "a new upstream partition has not ended");
        // The next bounded run from this checkpoint reads what came since:
        // it has not ended until its upstreams say so again.
        let mut next = postcard::from_bytes::<ExchangeInput>(&saved).unwrap().restored(2);
        assert!(!next.ended());
        next.accept_marker(Frame::Watermark { from: 0, at: END }).unwrap();
        next.accept_marker(Frame::Watermark { from: 1, at: END }).unwrap();
        assert!(next.ended());
    }
}
