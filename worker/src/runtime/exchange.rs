//! Exchanges between stages (see `sluice_plan::Dataflow`).
//!
//! On a cluster an exchange is a Kafka repartition topic: the upstream
//! stage produces each row to the partition its key hashes to (Kafka's own
//! partitioner), and the downstream stage's partitions are owned by cores
//! like any source partition. A local run and the golden tests exchange in
//! process ([`LocalExchange`]) with the same routing and the same markers.
//!
//! # Records on a repartition topic
//!
//! Every record's value starts with a 13-byte frame header — kind (1 byte),
//! upstream partition (`u32`, big-endian), then an `i64` (big-endian):
//!
//! | kind | meaning | the `i64` | after the header |
//! |------|---------|-----------|------------------|
//! | 1 | a row | its sequence number in the upstream partition | the row (binary: `sluice_formats::encode::BinaryEncoder`) |
//! | 2 | a watermark marker | the upstream partition's watermark | — |
//! | 3 | the upstream partition is idle | 0 | — |
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
//! Markers are produced to every partition after the rows they follow, so
//! a downstream partition's watermark is the minimum over its upstream
//! partitions' ([`UpstreamWatermarks`]); an upstream partition that has had
//! no input for `spec.engine.idleTimeoutMillis` says so and stops holding
//! the minimum back until its next row, as Flink's `withIdleness` does.

use serde::{Deserialize, Serialize};
use sluice_crds::partition_for_key;
use sluice_formats::encode::EncodedRows;

/// One partition of an exchange: rows in arrival order, and the upstream
/// watermarks that arrived between them.
#[derive(Debug, Default)]
pub struct ExchangePartition {
    /// Row values (the keys have done their work: they chose the partition).
    pub rows: EncodedRows,
    /// The upstream partition of each row.
    pub upstreams: Vec<u32>,
    /// `(rows before it, upstream partition, watermark)`, in arrival order.
    pub marks: Vec<(usize, usize, i64)>,
}

#[derive(Debug)]
pub struct LocalExchange {
    partitions: Vec<ExchangePartition>,
}

impl LocalExchange {
    pub fn new(partitions: usize) -> Self {
        Self { partitions: (0..partitions.max(1)).map(|_| ExchangePartition::default()).collect() }
    }

    pub fn partitions(&self) -> usize {
        self.partitions.len()
    }

    /// Appends each row of upstream partition `from` to the partition its
    /// key hashes to.
    pub fn route(&mut self, from: u32, rows: &EncodedRows) {
        let n = i32::try_from(self.partitions.len()).unwrap_or(i32::MAX);
        for i in 0..rows.len() {
            let p = usize::try_from(partition_for_key(rows.key(i), n)).unwrap_or(0);
            let part = &mut self.partitions[p];
            part.rows.values.extend_from_slice(rows.value(i));
            part.rows.value_ends.push(part.rows.values.len());
            part.upstreams.push(from);
        }
    }

    /// Upstream partition `from` reached watermark `at`: a marker after the
    /// rows it sent so far, in every partition.
    pub fn watermark(&mut self, from: usize, at: i64) {
        for part in &mut self.partitions {
            part.marks.push((part.rows.len(), from, at));
        }
    }

    /// Partition `p`'s contents so far, leaving it empty.
    pub fn take(&mut self, p: usize) -> ExchangePartition {
        self.partitions.get_mut(p).map(std::mem::take).unwrap_or_default()
    }
}

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

    fn resize(&mut self, upstreams: usize) {
        self.marks.resize(upstreams, None);
        self.idle.resize(upstreams, false);
    }
}

/// The watermark an upstream partition reports when a bounded run reached
/// the end of its input: nothing at all can follow.
pub const END: i64 = i64::MAX;

/// Bytes before the payload of every record on a repartition topic.
pub const FRAME_HEADER: usize = 13;

const ROW: u8 = 1;
const WATERMARK: u8 = 2;
const IDLE: u8 = 3;

/// One record of a repartition topic, parsed (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Frame<'a> {
    Row { from: u32, seq: i64, row: &'a [u8] },
    Watermark { from: u32, at: i64 },
    Idle { from: u32 },
}

impl Frame<'_> {
    /// Appends the frame's bytes to `out`.
    pub fn write(&self, out: &mut Vec<u8>) {
        let (kind, from, n, row): (u8, u32, i64, &[u8]) = match *self {
            Frame::Row { from, seq, row } => (ROW, from, seq, row),
            Frame::Watermark { from, at } => (WATERMARK, from, at, &[]),
            Frame::Idle { from } => (IDLE, from, 0, &[]),
        };
        out.push(kind);
        out.extend_from_slice(&from.to_be_bytes());
        out.extend_from_slice(&n.to_be_bytes());
        out.extend_from_slice(row);
    }
}

/// Parses a repartition record; what is not a frame Sluice wrote is an
/// error naming why (something else wrote to an internal topic).
pub fn parse_frame(bytes: &[u8]) -> Result<Frame<'_>, String> {
    let (Some(&kind), Some(from), Some(n)) = (bytes.first(), bytes.get(1..5), bytes.get(5..FRAME_HEADER)) else {
        return Err(format!("{} bytes: shorter than a repartition frame header ({FRAME_HEADER})", bytes.len()));
    };
    let from = u32::from_be_bytes(from.try_into().map_err(|_| "frame header".to_owned())?);
    let n = i64::from_be_bytes(n.try_into().map_err(|_| "frame header".to_owned())?);
    match kind {
        ROW => Ok(Frame::Row { from, seq: n, row: &bytes[FRAME_HEADER..] }),
        WATERMARK => Ok(Frame::Watermark { from, at: n }),
        IDLE => Ok(Frame::Idle { from }),
        other => Err(format!("unknown repartition frame kind {other}")),
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

/// What an exchange record means to the partition that reads it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Accepted<'a> {
    /// A row to process, from upstream partition `from`.
    Row { row: &'a [u8], from: u32 },
    /// A row already processed (its upstream replayed it).
    Duplicate,
    /// A marker; the combined watermark now, if there is one.
    Watermark(Option<i64>),
}

impl ExchangeInput {
    pub fn new(upstreams: usize) -> Self {
        Self { seen: vec![None; upstreams], watermarks: UpstreamWatermarks::new(upstreams) }
    }

    pub fn accept<'a>(&mut self, frame: Frame<'a>) -> Result<Accepted<'a>, String> {
        let from = match frame {
            Frame::Row { from, .. } | Frame::Watermark { from, .. } | Frame::Idle { from } => from as usize,
        };
        if from >= self.seen.len() {
            return Err(format!("a record from upstream partition {from}, but there are {}", self.seen.len()));
        }
        Ok(match frame {
            Frame::Row { seq, row, .. } => {
                if self.seen[from].is_some_and(|s| seq <= s) {
                    return Ok(Accepted::Duplicate);
                }
                self.seen[from] = Some(seq);
                self.watermarks.active(from);
                Accepted::Row { row, from: from as u32 }
            }
            Frame::Watermark { at, .. } => Accepted::Watermark(self.watermarks.update(from, at)),
            Frame::Idle { .. } => Accepted::Watermark(self.watermarks.set_idle(from)),
        })
    }

    pub fn upstreams(&self) -> usize {
        self.seen.len()
    }

    /// This position for `upstreams` upstream partitions: more than it was
    /// saved with (a source topic given more partitions) start unreported.
    pub fn resized(mut self, upstreams: usize) -> Self {
        self.seen.resize(upstreams, None);
        self.watermarks.resize(upstreams);
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
    use sluice_crds::partition_for_key;
    use sluice_formats::encode::EncodedRows;

    fn rows(items: &[(&str, &str)]) -> EncodedRows {
        let mut r = EncodedRows::default();
        for (k, v) in items {
            r.keys.extend_from_slice(k.as_bytes());
            r.key_ends.push(r.keys.len());
            r.values.extend_from_slice(v.as_bytes());
            r.value_ends.push(r.values.len());
        }
        r
    }

    #[test]
    fn rows_go_where_kafka_would_put_their_keys_with_markers_after_them() {
        let mut x = LocalExchange::new(3);
        x.route(0, &rows(&[("a", "1"), ("b", "2"), ("a", "3")]));
        x.watermark(0, 100);
        x.route(0, &rows(&[("c", "4")]));
        let where_a = usize::try_from(partition_for_key(Some(b"a"), 3)).unwrap();
        let p = x.take(where_a);
        assert_eq!(p.rows.value(0), b"1");
        assert_eq!(p.rows.value(1), b"3", "order is kept");
        assert_eq!(p.marks[0], (p.marks[0].0, 0, 100));
        let total: usize = (0..3).map(|q| if q == where_a { p.rows.len() } else { x.take(q).rows.len() }).sum();
        assert_eq!(total, 4);
        assert!(x.take(where_a).rows.is_empty(), "take empties the partition");
    }

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
    fn frames_round_trip_and_garbage_is_named() {
        for frame in [
            Frame::Row { from: 7, seq: 1 << 40, row: br#"{"a":1}"# },
            Frame::Row { from: 0, seq: -1, row: b"" },
            Frame::Watermark { from: u32::MAX, at: END },
            Frame::Idle { from: 3 },
        ] {
            let mut bytes = Vec::new();
            frame.write(&mut bytes);
            assert_eq!(parse_frame(&bytes), Ok(frame));
        }
        assert!(parse_frame(b"{}").unwrap_err().contains("shorter than a repartition frame header"));
        assert!(parse_frame(&[9; 13]).unwrap_err().contains("unknown repartition frame kind 9"));
    }

    #[test]
    fn replayed_rows_are_dropped_and_the_position_survives_a_snapshot() {
        let mut x = ExchangeInput::new(2);
        assert_eq!(x.accept(Frame::Row { from: 0, seq: 10, row: b"a" }), Ok(Accepted::Row { row: b"a", from: 0 }));
        assert_eq!(x.accept(Frame::Row { from: 1, seq: 3, row: b"b" }), Ok(Accepted::Row { row: b"b", from: 1 }));
        assert_eq!(x.accept(Frame::Watermark { from: 0, at: 100 }), Ok(Accepted::Watermark(None)));
        let saved = postcard::to_allocvec(&x).unwrap();
        // The upstream of partition 0 crashed and replays from offset 9.
        let mut x = postcard::from_bytes::<ExchangeInput>(&saved).unwrap().resized(2);
        assert_eq!(x.accept(Frame::Row { from: 0, seq: 9, row: b"z" }), Ok(Accepted::Duplicate));
        assert_eq!(x.accept(Frame::Row { from: 0, seq: 10, row: b"a" }), Ok(Accepted::Duplicate));
        assert_eq!(x.accept(Frame::Row { from: 0, seq: 11, row: b"c" }), Ok(Accepted::Row { row: b"c", from: 0 }));
        assert_eq!(x.accept(Frame::Watermark { from: 1, at: 80 }), Ok(Accepted::Watermark(Some(80))));
        assert!(x.accept(Frame::Idle { from: 2 }).unwrap_err().contains("upstream partition 2, but there are 2"));
        assert!(!x.ended());
        x.accept(Frame::Watermark { from: 0, at: END }).unwrap();
        x.accept(Frame::Watermark { from: 1, at: END }).unwrap();
        assert!(x.ended());
        let grown = x.resized(3);
        assert!(!grown.ended(), "a new upstream partition has not ended");
    }
}
