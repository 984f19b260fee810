use super::*;
use crate::operator::OperatorTag;
use crate::state::Paged;
use crate::test_drivers::{checkpoint_pages as checkpoint, restore_pages as restored, run_at_watermark};
use sluice_plan::Scalar;
use sluice_plan::{CmpOp, PhysExpr};

/// Layout: stream (k, v), table (k, v), __right, __time, __deleted.
const TYPES: [DataType; 7] = [
    DataType::Bigint,
    DataType::Bigint,
    DataType::Bigint,
    DataType::Bigint,
    DataType::Boolean,
    DataType::Timestamp,
    DataType::Boolean,
];

fn plan(kind: JoinKind, version: TableVersion) -> TableJoinPlan {
    let col = |index| PhysExpr::Column { index, data_type: DataType::Bigint };
    TableJoinPlan {
        kind,
        left: (0, 2),
        right: (2, 4),
        side: 4,
        time: 5,
        deleted: 6,
        left_keys: vec![col(0)],
        right_keys: vec![col(2)],
        residual: None,
        version,
    }
}

#[derive(Clone, Copy)]
enum In {
    /// A stream row: key, value, time.
    S(i64, i64, i64),
    /// A table version: key, value, time.
    T(i64, i64, i64),
    /// A table deletion: key, time.
    D(i64, i64),
}

fn batch(rows: &[In]) -> Batch {
    let mut b = Batch::empty(&TYPES);
    for &row in rows {
        let (right, k, v, t, deleted) = match row {
            In::S(k, v, t) => (false, k, Some(v), t, false),
            In::T(k, v, t) => (true, k, Some(v), t, false),
            In::D(k, t) => (true, k, None, t, true),
        };
        let (own, other) = if right { (2, 0) } else { (0, 2) };
        b.columns[own].push_i64(k).unwrap();
        match v {
            Some(v) => b.columns[own + 1].push_i64(v).unwrap(),
            None => b.columns[own + 1].push_null(),
        }
        b.columns[other].push_null();
        b.columns[other + 1].push_null();
        b.columns[4].push_bool(right).unwrap();
        b.columns[5].push_i64(t).unwrap();
        b.columns[6].push_bool(deleted).unwrap();
        b.len += 1;
    }
    b
}

/// Runs a batch whose rows all saw `watermark`, then the watermark;
/// the joined rows as `(stream value, table value)` and the late rows.
fn run(op: &mut TableJoinOperator, rows: &[In], watermark: i64) -> (Vec<(Scalar, Scalar)>, Vec<u32>) {
    let b = batch(rows);
    let times: Vec<i64> = (0..b.len).map(|r| int_values(&b.columns[5]).unwrap()[r]).collect();
    let (out, late) = run_at_watermark(op, &b, &times, watermark, &TYPES);
    assert!(out.columns.iter().all(|c| c.len() == out.len), "every column has a cell per row");
    let mut pairs: Vec<(Scalar, Scalar)> =
        (0..out.len).map(|r| (out.columns[1].scalar(r), out.columns[3].scalar(r))).collect();
    pairs.sort_by_key(|p| format!("{p:?}"));
    (pairs, late)
}

fn joined(pairs: &[(i64, Option<i64>)]) -> Vec<(Scalar, Scalar)> {
    let mut v: Vec<_> =
        pairs.iter().map(|&(s, t)| (Scalar::Bigint(s), t.map_or(Scalar::Null, Scalar::Bigint))).collect();
    v.sort_by_key(|p| format!("{p:?}"));
    v
}

#[test]
fn joining_the_latest_sees_each_update_and_deletion_in_processing_order() {
    let mut op = TableJoinOperator::new(&plan(JoinKind::Left, TableVersion::Latest), &TYPES);
    // Event times play no part: processing order decides.
    let rows = [In::S(1, 100, 9), In::T(1, 10, 5), In::S(1, 101, 1), In::T(1, 11, 1), In::S(1, 102, 0)];
    let (out, late) = run(&mut op, &rows, 50);
    assert_eq!(out, joined(&[(100, None), (101, Some(10)), (102, Some(11))]));
    assert!(late.is_empty(), "joining the latest judges no row late");
    let (out, _) = run(&mut op, &[In::D(1, 0), In::S(1, 103, 0), In::S(2, 104, 0)], 50);
    assert_eq!(out, joined(&[(103, None), (104, None)]));
    assert_eq!(op.state_size().entries, 0, "a deleted key holds nothing");
    let mut inner = TableJoinOperator::new(&plan(JoinKind::Inner, TableVersion::Latest), &TYPES);
    let (out, _) = run(&mut inner, &rows, 50);
    assert_eq!(out, joined(&[(101, Some(10)), (102, Some(11))]));
}

#[test]
fn joining_as_of_event_time_waits_for_the_watermark_and_takes_the_version_valid_then() {
    let mut op = TableJoinOperator::new(&plan(JoinKind::Left, TableVersion::AsOfEventTime), &TYPES);
    // Stream rows first, versions after, out of order: order must not matter.
    let (out, _) = run(&mut op, &[In::S(1, 350, 350), In::S(1, 150, 150), In::S(1, 50, 50)], 0);
    assert!(out.is_empty(), "rows wait until the watermark passes them");
    let (out, _) = run(&mut op, &[In::T(1, 2, 200), In::S(1, 250, 250), In::T(1, 1, 100), In::D(1, 300)], 0);
    assert!(out.is_empty());
    let saved = op.snapshot(Vec::new()).unwrap();
    let mut op = TableJoinOperator::new(&plan(JoinKind::Left, TableVersion::AsOfEventTime), &TYPES);
    op.restore(&saved).unwrap();
    let (out, _) = run(&mut op, &[], 200);
    assert_eq!(out, joined(&[(50, None), (150, Some(1))]), "only rows below the watermark");
    let (out, late) = run(&mut op, &[In::S(1, 199, 199)], 1_000);
    assert_eq!(late, [0], "a row below the watermark is late");
    assert_eq!(out, joined(&[(250, Some(2)), (350, None)]), "the deletion at 300 holds at 350");
    assert_eq!(op.state_size().entries, 0, "a key deleted below the watermark holds nothing");
}

#[test]
fn a_version_below_the_watermark_still_counts_for_rows_to_come() {
    let mut op = TableJoinOperator::new(&plan(JoinKind::Left, TableVersion::AsOfEventTime), &TYPES);
    run(&mut op, &[In::T(1, 1, 100)], 500);
    // Late for any row before 500, but the current version from 400 on.
    let (out, late) = run(&mut op, &[In::T(1, 2, 400), In::S(1, 600, 600)], 500);
    assert!(late.is_empty() && out.is_empty());
    let (out, _) = run(&mut op, &[], 700);
    assert_eq!(out, joined(&[(600, Some(2))]));
}

#[test]
fn versions_no_row_can_see_are_let_go() {
    let mut op = TableJoinOperator::new(&plan(JoinKind::Inner, TableVersion::AsOfEventTime), &TYPES);
    for i in 0..5_000i64 {
        let (out, late) = run(&mut op, &[In::T(i % 3, i, i * 10), In::S(i % 3, i, i * 10 + 5)], i * 10 - 20);
        assert!(late.is_empty());
        // The watermark passed the stream row of three rounds ago.
        if i >= 3 {
            assert_eq!(out, joined(&[(i - 3, Some(i - 3))]), "row {i}: the version of its own time");
        }
    }
    let size = op.state_size();
    assert!(size.entries < 20, "{size:?}");
    assert!(op.rows.time.len() < 2_100 && op.stream.time.len() < 2_100, "let-go slots are compacted away");
}

/// The table is the state: what `stateMemoryLimit` checks and
/// `sluice_state_bytes` reports grows with its rows, and a deletion
/// gives a row's share back.
#[test]
fn state_size_counts_every_table_row() {
    let mut op = TableJoinOperator::new(&plan(JoinKind::Left, TableVersion::Latest), &TYPES);
    let rows: Vec<In> = (0..1_000).map(|k| In::T(k, k, 0)).collect();
    run(&mut op, &rows, 0);
    let size = op.state_size();
    assert_eq!(size.entries, 1_000);
    assert!(size.bytes >= 1_000 * (2 * 8 + 8), "two cells and a time per row at least: {size:?}");
    let deletions: Vec<In> = (0..500).map(|k| In::D(k, 0)).collect();
    run(&mut op, &deletions, 0);
    assert_eq!(op.state_size().entries, 500);
}

#[test]
fn a_left_join_null_extends_a_row_whose_version_fails_the_residual() {
    let mut p = plan(JoinKind::Left, TableVersion::Latest);
    // ON s.k = t.k AND t.v > 5
    p.residual = Some(PhysExpr::Compare {
        op: CmpOp::Gt,
        left: Box::new(PhysExpr::Column { index: 3, data_type: DataType::Bigint }),
        right: Box::new(PhysExpr::literal(Scalar::Bigint(5))),
    });
    let mut op = TableJoinOperator::new(&p, &TYPES);
    let (out, _) = run(&mut op, &[In::T(1, 3, 0), In::T(2, 9, 0), In::S(1, 100, 0), In::S(2, 200, 0)], 0);
    assert_eq!(out, joined(&[(100, None), (200, Some(9))]));
}

/// A seeded generator of rounds of rows: stream rows, table versions and
/// deletions over `keys` keys (a third of the rows on 20 hot keys), in
/// times that mostly rise.
struct Rounds {
    seed: u64,
    time: i64,
    keys: i64,
}

impl Rounds {
    fn new(seed: u64, keys: i64) -> Self {
        Self { seed, time: 1_000, keys }
    }

    fn next(&mut self, n: u64) -> i64 {
        self.seed = self.seed.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
        i64::try_from((self.seed >> 33) % n).unwrap()
    }

    /// A round of `n` rows, and the watermark after it.
    fn round(&mut self, round: i64, n: i64) -> (Vec<In>, i64) {
        let rows = (0..n)
            .map(|i| {
                self.time += self.next(3);
                let keys = u64::try_from(self.keys).unwrap();
                let key = if self.next(3) == 0 { self.next(20) } else { self.next(keys) };
                let t = self.time - self.next(10);
                match self.next(10) {
                    0 => In::D(key, t),
                    1..=4 => In::T(key, round * 10_000 + i, t),
                    _ => In::S(key, round * 10_000 + i, t),
                }
            })
            .collect();
        (rows, self.time - 15)
    }
}

const MODES: [TableVersion; 2] = [TableVersion::Latest, TableVersion::AsOfEventTime];

/// Incremental checkpoints: a join restored every few batches from a
/// head and the pages written so far emits what one never restored does
/// — versions, deletions, rows waiting for the watermark included — and
/// a checkpoint writes the pages of the keys that changed, not all.
#[test]
fn a_table_join_restored_from_pages_emits_what_one_never_restored_does() {
    for version in MODES {
        let p = plan(JoinKind::Left, version);
        let (mut whole, mut paged) = (TableJoinOperator::new(&p, &TYPES), TableJoinOperator::new(&p, &TYPES));
        let mut pages = std::collections::BTreeMap::new();
        let mut rounds = Rounds::new(0x7ab1e, 300);
        let (mut joined, mut fewest_dirty) = (0, usize::MAX);
        for round in 0..60 {
            let (rows, watermark) = rounds.round(round, 30);
            let a = run(&mut whole, &rows, watermark);
            let b = run(&mut paged, &rows, watermark);
            assert_eq!(a, b, "{version:?} round {round}");
            joined += a.0.iter().filter(|(_, t)| *t != Scalar::Null).count();
            let before = pages.len();
            let mut dirty = Vec::new();
            let head = paged.snapshot_head(Vec::new()).unwrap();
            paged.take_dirty_pages(false, &mut dirty);
            fewest_dirty = fewest_dirty.min(dirty.len());
            for page in dirty {
                pages.insert(page, paged.snapshot_page(page, Vec::new()).unwrap());
            }
            assert!(pages.len() >= before);
            if round % 4 == 3 {
                paged = restored(TableJoinOperator::new(&p, &TYPES), &head, &pages);
            }
        }
        let (mut rest_a, mut rest_b) = (Batch::empty(&TYPES), Batch::empty(&TYPES));
        whole.finish(true, &mut Closed::new(&mut rest_a)).unwrap();
        paged.finish(true, &mut Closed::new(&mut rest_b)).unwrap();
        assert_eq!(rest_a.len, rest_b.len, "{version:?}: what the end joins");
        assert!(joined > 100, "{version:?}: {joined} rows found a version");
        assert!(fewest_dirty < pages.len() / 2, "{version:?}: {fewest_dirty} of {} pages written", pages.len());
    }
}

/// A whole checkpoint, as every release wrote before checkpoints were
/// incremental, restores; the next checkpoint writes every page, and a
/// join restored from those goes on as the one never restored.
#[test]
fn a_whole_checkpoint_of_an_earlier_release_restores_into_pages() {
    for version in MODES {
        let p = plan(JoinKind::Left, version);
        let mut first = TableJoinOperator::new(&p, &TYPES);
        let mut rounds = Rounds::new(0x01d, 200);
        for round in 0..20 {
            let (rows, watermark) = rounds.round(round, 30);
            run(&mut first, &rows, watermark);
        }
        let whole = first.snapshot(Vec::new()).unwrap();
        assert_eq!(postcard::take_from_bytes::<u32>(&whole).unwrap().0, OperatorTag::TableJoin as u32);
        let mut from_whole = TableJoinOperator::new(&p, &TYPES);
        from_whole.restore(&whole).unwrap();
        let mut pages = std::collections::BTreeMap::new();
        // What the engine asks after a whole restore: every page.
        let head = checkpoint(&mut from_whole, &mut pages, true);
        let mut second = restored(TableJoinOperator::new(&p, &TYPES), &head, &pages);
        for round in 20..40 {
            let (rows, watermark) = rounds.round(round, 30);
            let a = run(&mut first, &rows, watermark);
            assert_eq!(a, run(&mut second, &rows, watermark), "{version:?} round {round}");
        }
    }
}

/// State larger than memory: under a budget far below its state, a join
/// moves cold keys to disk and reads each back when a row of it comes —
/// emitting what one in memory does, through checkpoints of its pages
/// and restores into a new operator with an empty store.
#[test]
fn a_table_join_that_spills_emits_what_one_in_memory_does() {
    use crate::state::MemorySpill;
    for version in MODES {
        let p = plan(JoinKind::Left, version);
        let spilling = || {
            let mut op = TableJoinOperator::new(&p, &TYPES);
            op.attach_spill(Box::new(MemorySpill::default()), 16 << 10);
            op
        };
        let (mut memory, mut spill) = (TableJoinOperator::new(&p, &TYPES), spilling());
        let mut pages = std::collections::BTreeMap::new();
        let mut rounds = Rounds::new(0x5b111, 5_000);
        let (mut most_spilled, mut most_state, mut in_memory, mut joined) = (0, 0, 0, 0);
        for round in 0..80 {
            let (rows, watermark) = rounds.round(round, 200);
            let a = run(&mut memory, &rows, watermark);
            assert_eq!(a, run(&mut spill, &rows, watermark), "{version:?} round {round}");
            joined += a.0.iter().filter(|(_, t)| *t != Scalar::Null).count();
            spill.spill().unwrap();
            most_spilled = most_spilled.max(spill.spilled().0);
            most_state = most_state.max(spill.state_size().bytes);
            in_memory = in_memory.max(memory.state_size().bytes);
            let head = checkpoint(&mut spill, &mut pages, false);
            if round % 10 == 9 {
                spill = restored(spilling(), &head, &pages);
            }
        }
        let (mut rest_a, mut rest_b) = (Batch::empty(&TYPES), Batch::empty(&TYPES));
        memory.finish(true, &mut Closed::new(&mut rest_a)).unwrap();
        spill.finish(true, &mut Closed::new(&mut rest_b)).unwrap();
        assert_eq!(rest_a.len, rest_b.len, "{version:?}: what the end joins");
        assert!(joined > 200, "{version:?}: {joined} rows found a version");
        assert!(most_spilled > 100, "{version:?}: {most_spilled} pages on disk at most");
        assert!(most_state * 3 < in_memory, "{version:?}: it held at most {most_state} bytes, in memory {in_memory}");
    }
}

/// A key with stream rows waiting keeps its id through a checkpoint, its
/// rows' count in its page: once one of them is joined, the key stays for
/// the others, and a version that arrives later is the one they join —
/// not a version of whatever key took the id.
#[test]
fn a_key_with_rows_waiting_keeps_its_id_through_a_restore() {
    let p = plan(JoinKind::Left, TableVersion::AsOfEventTime);
    let mut op = TableJoinOperator::new(&p, &TYPES);
    run(&mut op, &[In::S(7, 1, 100), In::S(7, 2, 300)], 50);
    let mut pages = std::collections::BTreeMap::new();
    let head = checkpoint(&mut op, &mut pages, false);
    let mut op = restored(TableJoinOperator::new(&p, &TYPES), &head, &pages);
    let (out, _) = run(&mut op, &[], 150);
    assert_eq!(out, joined(&[(1, None)]), "no version of key 7 at 100");
    // Key 8 first: it would take an id key 7 gave up.
    let (out, _) = run(&mut op, &[In::T(8, 80, 200), In::T(7, 70, 200)], 400);
    assert_eq!(out, joined(&[(2, Some(70))]), "the row at 300 joins key 7's version of 200");
}
