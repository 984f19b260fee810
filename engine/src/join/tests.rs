//! The stream–stream join operator, checked on small batches.

use super::*;
use crate::operator::{OperatorTag, read_state, write_state};
use crate::state::FOLD_AT;
use crate::state::Paged;
use crate::state::group_keys::GroupTableState;
use crate::state::pages::{read_page_and_rest, write_page};
use crate::test_drivers::run_at_watermark;
use serde::{Deserialize, Serialize};
use sluice_plan::{JoinKind, PhysExpr, Scalar, Selection};

/// Layout: left (k, v), right (k, v), __right, __time.
const TYPES: [DataType; 6] =
    [DataType::Bigint, DataType::Bigint, DataType::Bigint, DataType::Bigint, DataType::Boolean, DataType::Timestamp];

fn plan(kind: JoinKind) -> JoinPlan {
    let col = |index| PhysExpr::Column { index, data_type: DataType::Bigint };
    JoinPlan {
        kind,
        left: (0, 2),
        right: (2, 4),
        side: 4,
        time: 5,
        left_keys: vec![col(0)],
        right_keys: vec![col(2)],
        lower: 0,
        upper: 10,
        until: None,
        residual: None,
    }
}

/// `(right, key, value, time)` rows.
fn batch(rows: &[(bool, i64, i64, i64)]) -> Batch {
    let mut b = Batch::empty(&TYPES);
    for &(right, k, v, t) in rows {
        let (own, other) = if right { (2, 0) } else { (0, 2) };
        b.columns[own].push_i64(k).unwrap();
        b.columns[own + 1].push_i64(v).unwrap();
        b.columns[other].push_null();
        b.columns[other + 1].push_null();
        b.columns[4].push_bool(right).unwrap();
        b.columns[5].push_i64(t).unwrap();
        b.len += 1;
    }
    b
}

/// Runs a batch whose rows all saw `watermark`; the joined rows as
/// `(left value, right value)` and the late rows.
fn run(op: &mut JoinOperator, rows: &[(bool, i64, i64, i64)], watermark: i64) -> (Vec<(Scalar, Scalar)>, Vec<u32>) {
    let b = batch(rows);
    let times: Vec<i64> = rows.iter().map(|r| r.3).collect();
    let (out, late) = run_at_watermark(op, &b, &times, watermark, &TYPES);
    (pairs(&out), late)
}

fn pairs(b: &Batch) -> Vec<(Scalar, Scalar)> {
    (0..b.len).map(|r| (b.columns[1].scalar(r), b.columns[3].scalar(r))).collect()
}

/// Incremental checkpoints: a FULL join restored every few batches
/// from a head and the pages kept so far (the latest write of each, as
/// a compacted topic keeps them) emits what one never restored does —
/// rows kept, matched flags, and rows let go included.
#[test]
fn a_join_restored_from_pages_emits_what_one_never_restored_does() {
    let mut seed = 0x5eed_u64;
    let mut next = |n: u64| {
        seed = seed.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
        i64::try_from((seed >> 33) % n).unwrap()
    };
    let mut whole = JoinOperator::new(&plan(JoinKind::Full), &TYPES);
    let mut paged = JoinOperator::new(&plan(JoinKind::Full), &TYPES);
    let mut pages: std::collections::BTreeMap<u32, Vec<u8>> = std::collections::BTreeMap::new();
    let (mut time, mut restores) = (1_000, 0);
    for round in 0..60 {
        let rows: Vec<(bool, i64, i64, i64)> = (0..40)
            .map(|i| {
                time += next(3);
                (next(2) == 1, next(300), round * 100 + i, time - next(5))
            })
            .collect();
        let watermark = time - 15;
        let (mut a, _) = run(&mut whole, &rows, watermark);
        let (mut b, _) = run(&mut paged, &rows, watermark);
        a.sort_by_key(|p| format!("{p:?}"));
        b.sort_by_key(|p| format!("{p:?}"));
        assert_eq!(a, b, "round {round}");
        let head = paged.snapshot_head(Vec::new()).unwrap();
        let mut dirty = Vec::new();
        paged.take_dirty_pages(false, &mut dirty);
        for page in dirty {
            pages.insert(page, paged.snapshot_page(page, Vec::new()).unwrap());
        }
        if round % 4 == 3 {
            paged = JoinOperator::new(&plan(JoinKind::Full), &TYPES);
            paged.restore_head(&head).unwrap();
            for (&page, bytes) in &pages {
                paged.restore_page(page, bytes).unwrap();
            }
            paged.pages_restored().unwrap();
            restores += 1;
        }
    }
    let (mut rest_a, mut rest_b) = (Batch::empty(&TYPES), Batch::empty(&TYPES));
    whole.finish(true, &mut Closed::new(&mut rest_a)).unwrap();
    paged.finish(true, &mut Closed::new(&mut rest_b)).unwrap();
    let (mut a, mut b) = (pairs(&rest_a), pairs(&rest_b));
    a.sort_by_key(|p| format!("{p:?}"));
    b.sort_by_key(|p| format!("{p:?}"));
    assert_eq!(a, b, "what the end lets go");
    assert!(restores >= 10 && !a.is_empty());
}

#[test]
fn rows_in_range_join_and_late_rows_are_reported_not_joined() {
    let mut op = JoinOperator::new(&plan(JoinKind::Inner), &TYPES);
    let (joined, late) = run(&mut op, &[(false, 1, 100, 1_000), (true, 1, 200, 1_005), (true, 1, 201, 1_011)], 0);
    assert_eq!(joined, [(Scalar::Bigint(100), Scalar::Bigint(200))], "1_011 is past the upper bound");
    assert!(late.is_empty());
    // The watermark is at 1_003: a right row at 1_002 is late, though
    // it is in the left row's range.
    let (joined, late) = run(&mut op, &[(true, 1, 202, 1_002)], 1_003);
    assert!(joined.is_empty());
    assert_eq!(late, [0]);
}

#[test]
fn an_unmatched_outer_row_comes_out_once_the_watermark_passes_its_range_and_survives_a_restore() {
    let mut op = JoinOperator::new(&plan(JoinKind::Full), &TYPES);
    let (joined, _) = run(&mut op, &[(false, 1, 100, 1_000), (true, 2, 200, 1_000)], 0);
    assert!(joined.is_empty(), "neither can be emitted while a partner may still come");
    let saved = op.snapshot(Vec::new()).unwrap();
    let mut op = JoinOperator::new(&plan(JoinKind::Full), &TYPES);
    op.restore(&saved).unwrap();
    assert_eq!(op.state_size().entries, 2);
    // The right row may still meet a left row from 990 on: it goes once
    // the watermark passes 1_000 (its time minus the lower bound).
    let (joined, _) = run(&mut op, &[], 1_001);
    assert_eq!(joined, [(Scalar::Null, Scalar::Bigint(200))]);
    let (joined, _) = run(&mut op, &[], 1_010);
    assert!(joined.is_empty(), "the left row may still meet a right row at 1_010");
    let (joined, _) = run(&mut op, &[], 1_011);
    assert_eq!(joined, [(Scalar::Bigint(100), Scalar::Null)]);
    assert_eq!(op.state_size().entries, 0, "nothing kept once both ranges passed");
}

#[test]
fn state_stays_bounded_and_rows_keep_their_partners_through_compactions() {
    let mut op = JoinOperator::new(&plan(JoinKind::Inner), &TYPES);
    let mut joined = 0;
    for i in 0..5_000i64 {
        let (pairs, late) = run(&mut op, &[(false, i % 7, i, i * 10), (true, i % 7, -i, i * 10 + 5)], i * 10 - 100);
        assert!(late.is_empty());
        assert_eq!(pairs, [(Scalar::Bigint(i), Scalar::Bigint(-i))], "row {i}");
        joined += pairs.len();
    }
    assert_eq!(joined, 5_000);
    assert!(op.state_size().entries < 50, "{:?}", op.state_size());
    assert!(op.stores.iter().all(|s| s.time.len() < 2_100), "let-go slots are compacted away");
}

/// Compaction visits every key, so it waits until the let-go slots are
/// a quarter as many as the keys: 10,000 long-lived left keys and
/// right rows let go one by one compact every 2,500 right rows, not
/// every 1,024 (each paying for 10,000 keys), and every pair still
/// joins through the compactions.
#[test]
fn compactions_beside_many_keys_wait_for_a_quarter_as_many_let_go_rows() {
    let long = JoinPlan { upper: 1_000_000, ..plan(JoinKind::Inner) };
    let mut op = JoinOperator::new(&long, &TYPES);
    let left: Vec<(bool, i64, i64, i64)> = (0..10_000).map(|k| (false, k, k, 0)).collect();
    run(&mut op, &left, 0);
    let mut most = 0;
    for i in 1..=6_000i64 {
        let (pairs, late) = run(&mut op, &[(true, i % 10_000, -i, i)], i);
        assert!(late.is_empty());
        assert_eq!(pairs, [(Scalar::Bigint(i % 10_000), Scalar::Bigint(-i))], "right row {i}");
        most = most.max(op.stores[1].time.len());
    }
    assert!((2_500..=2_502).contains(&most), "right slots kept at most: {most}");
    assert_eq!(op.stores[0].live, 10_000);
}

/// A regular join: rows far apart in time join, a row below the
/// watermark is not late (nothing it could meet was let go), nothing
/// is ever let go, and its output has no watermark.
#[test]
fn a_regular_join_keeps_every_row_and_joins_whatever_arrives_late() {
    let (lower, upper) = JoinPlan::UNBOUNDED;
    let regular = JoinPlan { lower, upper, ..plan(JoinKind::Inner) };
    let mut op = JoinOperator::new(&regular, &TYPES);
    let (joined, late) = run(&mut op, &[(false, 1, 100, 1_000), (true, 1, 200, 9_000_000)], 0);
    assert_eq!(joined, [(Scalar::Bigint(100), Scalar::Bigint(200))]);
    assert!(late.is_empty());
    let (joined, _) = run(&mut op, &[], i64::MAX - 1);
    assert!(joined.is_empty());
    assert_eq!(op.state_size().entries, 2, "the watermark lets nothing go");
    let (mut joined, late) = run(&mut op, &[(true, 1, 201, 5), (false, 1, 101, 7)], i64::MAX - 1);
    assert!(late.is_empty(), "far below the watermark, and not late");
    joined.sort_by_key(|p| format!("{p:?}"));
    assert_eq!(
        joined,
        [
            (Scalar::Bigint(100), Scalar::Bigint(201)),
            (Scalar::Bigint(101), Scalar::Bigint(200)),
            (Scalar::Bigint(101), Scalar::Bigint(201))
        ]
    );
    assert_eq!(op.output_watermark(i64::MAX - 1), i64::MIN);
    let saved = op.snapshot(Vec::new()).unwrap();
    let mut op = JoinOperator::new(&regular, &TYPES);
    op.restore(&saved).unwrap();
    assert_eq!(op.state_size().entries, 4);
    assert!(op.expiry.is_empty(), "no expiry to track for rows kept for good");
}

/// Bounded above by a left column (`b.ts BETWEEN a.ts AND a.until`,
/// here the left value column): a right row is let go once the
/// watermark passes its time, a left row once it passes its column —
/// not its time plus an upper bound, which is unbounded.
#[test]
fn a_left_row_bounded_by_its_column_is_kept_until_the_watermark_passes_that_column() {
    let col = |index| PhysExpr::Column { index, data_type: DataType::Bigint };
    let bounded = JoinPlan {
        upper: i64::MAX,
        until: Some(1),
        residual: Some(PhysExpr::Compare {
            op: sluice_plan::CmpOp::LtEq,
            left: Box::new(col(3)),
            right: Box::new(col(1)),
        }),
        ..plan(JoinKind::Inner)
    };
    let mut op = JoinOperator::new(&bounded, &TYPES);
    let (joined, _) = run(&mut op, &[(false, 1, 2_000, 1_000), (true, 1, 1_500, 1_500)], 0);
    assert_eq!(joined, [(Scalar::Bigint(2_000), Scalar::Bigint(1_500))]);
    run(&mut op, &[], 1_600);
    assert_eq!(op.state_size().entries, 1, "the right row is let go; the left one is open until 2_000");
    let (joined, late) = run(&mut op, &[(true, 1, 1_700, 1_700), (true, 1, 2_100, 2_100)], 1_600);
    assert!(late.is_empty());
    assert_eq!(joined, [(Scalar::Bigint(2_000), Scalar::Bigint(1_700))], "2_100 is past the left row's column");
    let saved = op.snapshot(Vec::new()).unwrap();
    let mut op = JoinOperator::new(&bounded, &TYPES);
    op.restore(&saved).unwrap();
    run(&mut op, &[], 2_001);
    assert_eq!(op.state_size().entries, 1, "the left row is let go at 2_000, the right one at 2_100");
    run(&mut op, &[], 2_101);
    assert_eq!(op.state_size().entries, 0);
}

/// When the right side runs ahead, a left row bounded by its column
/// probes the kept right rows from its time up to its column and no
/// further: past it nothing can match. The plan here has no residual,
/// so a right row past the column would come out as a pair if the probe
/// went on (with one, it would be evaluated and rejected: the quadratic
/// cost of issue 37, 30 s for 40 k rows a side).
#[test]
fn a_left_row_bounded_by_its_column_probes_the_right_rows_up_to_it_only() {
    let bounded = JoinPlan { upper: i64::MAX, until: Some(1), ..plan(JoinKind::Inner) };
    let mut op = JoinOperator::new(&bounded, &TYPES);
    let rights: Vec<_> = (0..4_000).map(|t| (true, 1, t, t)).collect();
    let (joined, _) = run(&mut op, &rights, 0);
    assert!(joined.is_empty());
    // Left rows at 0, 10, 20, …, each open for 5 ms: 6 partners each.
    let lefts: Vec<_> = (0..400).map(|i| (false, 1, i * 10 + 5, i * 10)).collect();
    let (joined, _) = run(&mut op, &lefts, 0);
    assert_eq!(joined.len(), 400 * 6, "each left row meets the right rows from its time to its column");
    assert!(joined.iter().all(|(l, r)| {
        let (Scalar::Bigint(until), Scalar::Bigint(t)) = (l, r) else { return false };
        (until - 5..=*until).contains(t)
    }));
}

/// A key has one expiry entry, whatever rows it keeps (every row of a
/// window, in a window join, and a row let go later): the watermark
/// schedules the key again at its next row's time once it let the first
/// ones go. Each unmatched row of an outer side still comes out exactly
/// once when the watermark passes it — across batches, a restore, and
/// key ids freed and reused.
#[test]
fn rows_let_go_together_share_an_expiry_entry_and_each_comes_out_once() {
    let mut op = JoinOperator::new(&plan(JoinKind::Left), &TYPES);
    for round in 0..3i64 {
        let (key, t) = (1 + round, 1_000 * (round + 1));
        for part in 0..4 {
            let mut rows: Vec<_> = (0..250).map(|i| (false, key, part * 250 + i, t)).collect();
            if part == 3 {
                rows.push((false, key, -1, t + 5));
            }
            let (joined, late) = run(&mut op, &rows, t - 500);
            assert!(joined.is_empty() && late.is_empty());
        }
        assert_eq!(op.expiry.len(), 1, "round {round}: one entry for 1,001 rows at two times");
        if round == 1 {
            let saved = op.snapshot(Vec::new()).unwrap();
            op = JoinOperator::new(&plan(JoinKind::Left), &TYPES);
            op.restore(&saved).unwrap();
            assert_eq!(op.expiry.len(), 1, "a restore files them the same way");
        }
        assert!(run(&mut op, &[], t + 10).0.is_empty(), "round {round}: in range until {}", t + 10);
        let (joined, _) = run(&mut op, &[], t + 11);
        let mut values: Vec<Scalar> = joined.into_iter().map(|p| p.0).collect();
        values.sort_by_key(|v| if let Scalar::Bigint(x) = v { *x } else { i64::MIN });
        assert_eq!(values, (0..1_000).map(Scalar::Bigint).collect::<Vec<_>>(), "round {round}");
        let (joined, _) = run(&mut op, &[], t + 16);
        assert_eq!(joined, [(Scalar::Bigint(-1), Scalar::Null)], "round {round}");
        assert_eq!(op.state_size().entries, 0);
        assert!(op.expiry.is_empty());
    }
}

/// A left row whose bounding column the watermark already passed is
/// let go at the next watermark, even when an entry at that time was
/// already taken from the heap for its key id.
#[test]
fn a_row_filed_at_a_time_whose_entry_was_taken_is_still_let_go() {
    let bounded = JoinPlan { upper: i64::MAX, until: Some(1), ..plan(JoinKind::Inner) };
    let mut op = JoinOperator::new(&bounded, &TYPES);
    run(&mut op, &[(false, 1, 2_000, 1_000)], 0);
    run(&mut op, &[], 2_001);
    assert_eq!(op.state_size().entries, 0);
    // The key's id is free and reused; the row's column is 2_000 again.
    run(&mut op, &[(false, 1, 2_000, 2_100)], 2_001);
    run(&mut op, &[], 2_002);
    assert_eq!(op.state_size().entries, 0, "the second row is let go too");
    // A NULL column bounds nothing: the row goes at once (its time to go
    // is the lowest there is, which is no reason to skip its entry).
    let mut b = batch(&[(false, 1, 0, 2_100)]);
    b.columns[1] = {
        let mut c = Column::with_capacity(DataType::Bigint, 1);
        c.push_null();
        c
    };
    run_at_watermark(&mut op, &b, &[2_100], 2_002, &TYPES);
    assert_eq!(op.state_size().entries, 0, "a row with a NULL bound is let go too");
}

/// Kept rows are found by time, however they arrived: rows of a key
/// out of order, and one side far ahead of the other.
#[test]
fn a_probe_finds_exactly_the_rows_in_range_among_many_kept_out_of_order() {
    let mut op = JoinOperator::new(&plan(JoinKind::Inner), &TYPES);
    // 20,000 left rows of key 1, times 0, 10, 20, … shuffled in blocks.
    let mut times: Vec<i64> = (0..20_000).map(|i| i * 10).collect();
    for block in times.chunks_mut(7) {
        block.reverse();
    }
    let lefts: Vec<(bool, i64, i64, i64)> = times.iter().map(|&t| (false, 1, t, t)).collect();
    let (joined, _) = run(&mut op, &lefts, 0);
    assert!(joined.is_empty());
    // A right row at 100_005 is in range of left rows at 99_995‥100_005.
    let (mut joined, _) = run(&mut op, &[(true, 1, -1, 100_005)], 0);
    joined.sort_by_key(|p| format!("{p:?}"));
    assert_eq!(joined, [(Scalar::Bigint(100_000), Scalar::Bigint(-1))]);
    let (joined, _) = run(&mut op, &[(true, 1, -2, 100_000)], 0);
    let mut got: Vec<Scalar> = joined.into_iter().map(|p| p.0).collect();
    got.sort_by_key(|s| format!("{s:?}"));
    assert_eq!(got, [Scalar::Bigint(100_000), Scalar::Bigint(99_990)], "the left rows at 99_990 and 100_000");
}

/// The size the engine checks against `stateMemoryLimit` and reports as
/// `sluice_state_bytes` grows with the rows kept.
#[test]
fn state_size_counts_every_kept_row() {
    let mut op = JoinOperator::new(&plan(JoinKind::Inner), &TYPES);
    let rows: Vec<(bool, i64, i64, i64)> = (0..1_000).map(|i| (false, i, i, 1_000)).collect();
    run(&mut op, &rows, 0);
    let size = op.state_size();
    assert_eq!(size.entries, 1_000);
    assert!(size.bytes >= 1_000 * (2 * 8 + 8), "two cells and a time per row at least: {size:?}");
}

#[test]
fn a_null_key_never_matches_and_an_outer_side_emits_it_at_once() {
    let mut op = JoinOperator::new(&plan(JoinKind::Left), &TYPES);
    let mut b = batch(&[(false, 0, 100, 1_000), (true, 0, 200, 1_000)]);
    b.columns[0] = {
        let mut c = Column::with_capacity(DataType::Bigint, 2);
        c.push_null();
        c.push_null();
        c
    };
    b.columns[2] = {
        let mut c = Column::with_capacity(DataType::Bigint, 2);
        c.push_null();
        c.push_null();
        c
    };
    let input = BatchInput {
        batch: &b,
        selection: Selection::All(2),
        event_times: &[1_000, 1_000],
        watermark_before: &[0, 0],
        per_record: false,
        emit_changes: false,
        upstreams: &[],
    };
    let mut out = Batch::empty(&TYPES);
    let (mut columns, mut late) = (Vec::new(), Vec::new());
    op.process(&input, &mut OperatorOutput::new(&mut out, &mut columns, &mut late)).unwrap();
    assert_eq!(pairs(&out), [(Scalar::Bigint(100), Scalar::Null)], "LEFT keeps the left row; the right is dropped");
    assert_eq!(op.state_size().entries, 0);
}

/// One key with 600 rows a side in a single batch pairs 360,000 times:
/// the pairs go on in chunks of at most `OUTPUT_CHUNK_ROWS`, every one
/// of them, instead of the whole batch's being held at once (20,000 a
/// side once took 6 GB). With a residual condition too.
#[test]
fn a_hot_key_pairs_in_bounded_chunks_every_pair_once() {
    let rows: Vec<(bool, i64, i64, i64)> = (0..1_200).map(|i| (i % 2 == 1, 7, i, 1_000 + i % 5)).collect();
    let b = batch(&rows);
    let times: Vec<i64> = rows.iter().map(|r| r.3).collect();
    let before = vec![0; b.len];
    for residual in [None, Some(PhysExpr::Literal { value: Scalar::Boolean(true), data_type: DataType::Boolean })] {
        let mut op =
            JoinOperator::new(&JoinPlan { residual: residual.clone(), lower: -10, ..plan(JoinKind::Inner) }, &TYPES);
        let input = BatchInput {
            batch: &b,
            selection: Selection::All(b.len),
            event_times: &times,
            watermark_before: &before,
            per_record: false,
            emit_changes: false,
            upstreams: &[],
        };
        let (mut chunks, mut total, mut sum) = (Vec::new(), 0usize, 0i64);
        let mut take = |rows: &Batch| {
            chunks.push(rows.len);
            total += rows.len;
            Ok(())
        };
        let mut out = Batch::empty(&TYPES);
        let (mut columns, mut late) = (Vec::new(), Vec::new());
        let mut output =
            OperatorOutput { drain: Some(&mut take), ..OperatorOutput::new(&mut out, &mut columns, &mut late) };
        op.process(&input, &mut output).unwrap();
        let rest = out.len;
        for (l, r) in pairs(&out) {
            if let (Scalar::Bigint(l), Scalar::Bigint(r)) = (l, r) {
                sum += l + r;
            }
        }
        assert!(chunks.len() >= 40, "{residual:?}: {} chunks", chunks.len());
        assert!(
            chunks.iter().chain([&rest]).all(|&n| n <= OUTPUT_CHUNK_ROWS),
            "{residual:?}: every chunk within the bound: {chunks:?} then {rest}"
        );
        assert_eq!(total + rest, 600 * 600, "{residual:?}: every pair once");
        assert!(op.pairs.capacity() <= OUTPUT_CHUNK_ROWS * 2, "{residual:?}: {}", op.pairs.capacity());
        assert!(sum > 0);
    }
}

/// A join that spills past a budget of a few KiB (every key goes to disk
/// between batches, and comes back when a row probes it or the watermark
/// lets its rows go) emits what one in memory emits — through
/// checkpoints of its pages and restores into a new operator with an
/// empty store every 10 batches: a FULL join in range (rows let go,
/// unmatched rows NULL-extended, at the watermark and at the end) and a
/// regular one (every row kept for good).
#[test]
fn a_join_that_spills_emits_what_one_in_memory_does() {
    use crate::state::MemorySpill;
    let (lower, upper) = JoinPlan::UNBOUNDED;
    for plan in [JoinPlan { upper: 400, ..plan(JoinKind::Full) }, JoinPlan { lower, upper, ..plan(JoinKind::Inner) }] {
        let mut seed = 0x5011_u64;
        let mut next = |n: u64| {
            seed = seed.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
            i64::try_from((seed >> 33) % n).unwrap()
        };
        let spilling = || {
            let mut op = JoinOperator::new(&plan, &TYPES);
            op.attach_spill(Box::new(MemorySpill::default()), 16 << 10);
            op
        };
        let mut memory = JoinOperator::new(&plan, &TYPES);
        let mut spill = spilling();
        let mut pages: std::collections::BTreeMap<u32, Vec<u8>> = std::collections::BTreeMap::new();
        let (mut time, mut most_spilled, mut joined) = (1_000, 0, 0);
        let (mut most_state, mut in_memory) = (0, 0);
        for round in 0..80 {
            let rows: Vec<(bool, i64, i64, i64)> = (0..200)
                .map(|i| {
                    time += next(2);
                    let key = if next(3) == 0 { next(50) } else { next(5_000) };
                    (next(2) == 1, key, round * 1_000 + i, time - next(20))
                })
                .collect();
            let watermark = time - 50;
            let (mut a, _) = run(&mut memory, &rows, watermark);
            let (mut b, _) = run(&mut spill, &rows, watermark);
            a.sort_by_key(|p| format!("{p:?}"));
            b.sort_by_key(|p| format!("{p:?}"));
            assert_eq!(a, b, "round {round}");
            joined += a.len();
            spill.spill().unwrap();
            assert!(
                spill.expiry.len() <= 2 * spill.paged.table.live() + FOLD_AT,
                "round {round}: the expiry heap holds {} entries for {} keys in memory",
                spill.expiry.len(),
                spill.paged.table.live()
            );
            most_spilled = most_spilled.max(spill.spilled().0);
            most_state = most_state.max(spill.state_size().bytes);
            in_memory = in_memory.max(memory.state_size().bytes);
            let head = spill.snapshot_head(Vec::new()).unwrap();
            let mut dirty = Vec::new();
            spill.take_dirty_pages(false, &mut dirty);
            for page in dirty {
                pages.insert(page, spill.snapshot_page(page, Vec::new()).unwrap());
            }
            if round % 10 == 9 {
                spill = spilling();
                spill.restore_head(&head).unwrap();
                for (&page, bytes) in &pages {
                    spill.restore_page(page, bytes).unwrap();
                }
                spill.pages_restored().unwrap();
            }
        }
        let (mut rest_a, mut rest_b) = (Batch::empty(&TYPES), Batch::empty(&TYPES));
        memory.finish(true, &mut Closed::new(&mut rest_a)).unwrap();
        spill.finish(true, &mut Closed::new(&mut rest_b)).unwrap();
        let (mut a, mut b) = (pairs(&rest_a), pairs(&rest_b));
        a.sort_by_key(|p| format!("{p:?}"));
        b.sort_by_key(|p| format!("{p:?}"));
        assert_eq!(a, b, "what the end lets go");
        assert!(joined > 1_000, "{joined} rows joined");
        // A FULL join in range keeps a few hundred keys at a time.
        let least = if plan.unbounded() { 100 } else { 20 };
        assert!(most_spilled > least, "{most_spilled} pages on disk at most");
        if plan.unbounded() {
            assert!(most_state * 4 < in_memory, "it held at most {most_state} bytes, in memory {in_memory}");
        }
        assert!(plan.unbounded() || !a.is_empty(), "a FULL join's end emits the rows that never matched");
    }
}

/// Kept rows are checkpointed straight from the store's columns, in the
/// bytes a `Vec<Scalar>` per row made (earlier releases): a whole state
/// and a page read as that form and, written again in it, are the same
/// bytes — so a checkpoint of either release restores in the other — and
/// read back (strings borrowed) they checkpoint the same again.
#[test]
fn kept_rows_checkpoint_in_the_bytes_a_list_of_scalars_per_row_made() {
    #[derive(Serialize, Deserialize)]
    struct OldKept {
        time: i64,
        matched: bool,
        row: Vec<Scalar>,
    }
    #[derive(Serialize, Deserialize)]
    struct OldKeyRows {
        sides: [Vec<OldKept>; 2],
    }
    #[derive(Serialize, Deserialize)]
    struct OldState {
        table: GroupTableState,
        keys: Vec<OldKeyRows>,
    }
    #[derive(Serialize, Deserialize)]
    struct OldPage {
        keys: Vec<Option<Vec<u8>>>,
        rows: Vec<OldKeyRows>,
    }
    let types = [
        DataType::Bigint,
        DataType::String,
        DataType::Bigint,
        DataType::Decimal(20, 2),
        DataType::Boolean,
        DataType::Timestamp,
    ];
    // (right, key, left's string or right's decimal, time)
    let rows: [(bool, i64, Scalar, i64); 5] = [
        (false, 1, Scalar::String("é ✓".into()), 1_000),
        (false, 2, Scalar::Null, 1_001),
        (true, 1, Scalar::Decimal(1_234, 2), 1_002),
        (true, 3, Scalar::Decimal(-50, 2), 1_003),
        (false, 1, Scalar::String(String::new()), 995),
    ];
    let mut b = Batch::empty(&types);
    for (right, k, v, t) in &rows {
        let (own, other) = if *right { (2, 0) } else { (0, 2) };
        b.columns[own].push_i64(*k).unwrap();
        b.columns[own + 1].push_scalar(v).unwrap();
        b.columns[other].push_null();
        b.columns[other + 1].push_null();
        b.columns[4].push_bool(*right).unwrap();
        b.columns[5].push_i64(*t).unwrap();
        b.len += 1;
    }
    let mut op = JoinOperator::new(&plan(JoinKind::Full), &types);
    let times: Vec<i64> = rows.iter().map(|r| r.3).collect();
    let (out, _) = run_at_watermark(&mut op, &b, &times, 0, &types);
    assert_eq!(out.len, 2, "key 1's two left rows join its right row");

    let whole = op.snapshot(Vec::new()).unwrap();
    let old: OldState = read_state(OperatorTag::Join, &whole).unwrap();
    let kept: Vec<(i64, bool, Vec<Scalar>)> =
        old.keys.iter().flat_map(|k| k.sides.iter().flatten()).map(|k| (k.time, k.matched, k.row.clone())).collect();
    assert_eq!(kept.len(), 5, "{kept:?}");
    assert!(kept.contains(&(1_000, true, vec![Scalar::Bigint(1), Scalar::String("é ✓".into())])), "{kept:?}");
    assert!(kept.contains(&(1_001, false, vec![Scalar::Bigint(2), Scalar::Null])), "{kept:?}");
    assert!(kept.contains(&(1_003, false, vec![Scalar::Bigint(3), Scalar::Decimal(-50, 2)])), "{kept:?}");
    assert_eq!(write_state(OperatorTag::Join, &old, Vec::new()).unwrap(), whole, "the same bytes as the old form");
    let mut back = JoinOperator::new(&plan(JoinKind::Full), &types);
    back.restore(&whole).unwrap();
    assert_eq!(back.snapshot(Vec::new()).unwrap(), whole);

    let page = op.snapshot_page(0, Vec::new()).unwrap();
    let (old, rest): (OldPage, _) = read_page_and_rest(0, &page).unwrap();
    assert!(rest.is_empty());
    assert_eq!(old.rows.iter().map(|k| k.sides[0].len() + k.sides[1].len()).sum::<usize>(), 5);
    assert_eq!(write_page(&old, Vec::new()).unwrap(), page, "a page in the same bytes as the old form");
    let mut paged = JoinOperator::new(&plan(JoinKind::Full), &types);
    paged.restore_head(&op.snapshot_head(Vec::new()).unwrap()).unwrap();
    paged.restore_page(0, &page).unwrap();
    paged.pages_restored().unwrap();
    assert_eq!(paged.snapshot_page(0, Vec::new()).unwrap(), page);
}

/// A key whose page the watermark read back from disk to let its rows go,
/// freed, and seen again before the store applied the page's removal (the
/// worker's store holds removals until its next write, so its index may
/// still name the page) is a new key — not a read of a page no longer on
/// disk, which failed the core.
#[test]
fn a_key_freed_after_its_page_came_back_is_new_while_the_removal_waits() {
    use crate::state::MemorySpill;
    let plan = JoinPlan { upper: 10, ..plan(JoinKind::Inner) };
    let mut memory = JoinOperator::new(&plan, &TYPES);
    let mut spill = JoinOperator::new(&plan, &TYPES);
    spill.attach_spill(Box::new(MemorySpill::default()), 1 << 10);
    // Keys 0..1000 are let go at the watermark below, the rest stay on
    // disk (so the store is still asked about keys not in memory).
    let first: Vec<(bool, i64, i64, i64)> =
        (0..2_000).map(|k| (false, k, k, if k < 1_000 { 1_000 } else { 5_000 })).collect();
    assert_eq!(run(&mut memory, &first, 0), run(&mut spill, &first, 0));
    spill.spill().unwrap();
    assert!(spill.spilled().0 > 100, "{:?} pages spilled", spill.spilled());
    // The first half's rows are let go: their pages come back, their
    // keys are freed.
    assert_eq!(run(&mut memory, &[], 2_000), run(&mut spill, &[], 2_000));
    assert_eq!(spill.state_size().entries, 0, "the rest are on disk");
    let again: Vec<(bool, i64, i64, i64)> =
        (0..1_000).flat_map(|k| [(false, k, -k, 3_000), (true, k, k, 3_001)]).collect();
    let (mut a, late) = run(&mut memory, &again, 2_000);
    let (mut b, _) = run(&mut spill, &again, 2_000);
    a.sort_by_key(|p| format!("{p:?}"));
    b.sort_by_key(|p| format!("{p:?}"));
    assert_eq!((a.len(), late.len()), (1_000, 0));
    assert_eq!(a, b);
}

/// A join whose rows grow on keys it holds — the watermark held back, so
/// none is let go — spills past its budget even when its table has room
/// for many new keys (keys let go before left it roomy): that room decides
/// when an aggregate spills, but a join's rows grow without new keys.
#[test]
fn rows_growing_on_held_keys_spill_past_the_budget_with_room_in_the_table() {
    use crate::state::MemorySpill;
    let plan = JoinPlan { upper: 10, ..plan(JoinKind::Inner) };
    let budget = 64 << 10;
    let mut op = JoinOperator::new(&plan, &TYPES);
    op.attach_spill(Box::new(MemorySpill::default()), budget);
    let many: Vec<(bool, i64, i64, i64)> = (0..40_000).map(|k| (false, k, k, 1_000)).collect();
    run(&mut op, &many, 0);
    run(&mut op, &[], 5_000);
    assert_eq!(op.state_size().entries, 0, "every key let go: the table keeps its room");
    let mut most = 0;
    for round in 0..50 {
        let rows: Vec<(bool, i64, i64, i64)> = (0..1_000).map(|i| (false, (round * 7 + i) % 2_000, i, 6_000)).collect();
        run(&mut op, &rows, 5_000);
        op.spill().unwrap();
        most = most.max(op.row_bytes());
    }
    assert!(op.spilled().0 > 0, "nothing spilled");
    assert!(most <= 2 * budget, "its rows held {most} bytes past a budget of {budget}");
}
