//! Spilling as a whole engine sees it: every operator that pages gives,
//! past its budget, what it gives in memory, through checkpoints and
//! restores.

use std::collections::BTreeMap;
use std::ops::Range;
use std::sync::Arc;

use sluice_crds::{ColumnType, EventTimeSpec, SourceSpec};
use sluice_plan::{Batch, Column, ColumnData, DataType, Value};

use crate::state::MemorySpill;
use crate::{Engine, EngineOptions, Error, Output};
use sluice_plan::EmittedRows;

/// Every row emitted, as text, in order.
#[derive(Default)]
struct Rows(Vec<(bool, String)>);
impl Output for Rows {
    fn rows(&mut self, rows: &EmittedRows<'_>) -> Result<(), Error> {
        rows.selection.for_each(|r| {
            let text = rows
                .columns
                .iter()
                .map(|v| match v {
                    Value::Column(c) => format!("{:?}", c.scalar(r)),
                    Value::Scalar(s, _) => format!("{s:?}"),
                })
                .collect::<Vec<_>>()
                .join(",");
            self.0.push((rows.delete, text));
        });
        Ok(())
    }
    fn late(&mut self, _: &Batch, _: &[u32]) -> Result<(), Error> {
        Ok(())
    }
}

impl Rows {
    /// The last row of each key (the first column) and whether it was
    /// a deletion: what an upsert sink ends up holding.
    fn last_per_key(&self) -> BTreeMap<String, (bool, String)> {
        let mut out = BTreeMap::new();
        for (delete, row) in &self.0 {
            let key = row.split(',').next().unwrap_or_default().to_owned();
            out.insert(key, (*delete, row.clone()));
        }
        out
    }
}

fn plan(sql: &str) -> Arc<sluice_plan::Plan> {
    plan_late(sql, 0)
}

/// [`plan`] with rows up to `delay` ms out of order.
fn plan_late(sql: &str, delay: i64) -> Arc<sluice_plan::Plan> {
    let source = SourceSpec {
        partition_key: vec!["k".into()],
        event_time: Some(EventTimeSpec { column: "ts".into(), watermark_delay_millis: delay }),
        ..SourceSpec::table(
            "t",
            &[("k", ColumnType::Bigint, true), ("v", ColumnType::Bigint, true), ("ts", ColumnType::Timestamp, true)],
        )
    };
    Arc::new(sluice_sql::plan_dataflow(sql, &[source], 1).unwrap().stages[0].plan.clone())
}

/// Batch `b` of 500 rows: keys spread over 40,000 by a fixed LCG (a
/// third of the rows on 600 hot ones), values that go negative now and then, event
/// times 20 s a batch.
fn batch(b: u64) -> Batch {
    let mut x = b.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let (mut k, mut v, mut ts) = (Vec::new(), Vec::new(), Vec::new());
    for i in 0..500u64 {
        x = x.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
        let r = x >> 33;
        k.push(i64::try_from(if r.is_multiple_of(3) { r % 600 } else { r % 40_000 }).unwrap());
        v.push(i64::try_from(r % 17).unwrap() - 5);
        ts.push(i64::try_from(b * 20_000 + i).unwrap());
    }
    let col = |t, v| Column::new(t, ColumnData::Int(v), None);
    Batch::new(vec![col(DataType::Bigint, k), col(DataType::Bigint, v), col(DataType::Timestamp, ts)], 500)
}

/// What a state topic keeps of an engine's incremental checkpoints:
/// the last head and each page's last version.
#[derive(Default)]
struct Topic {
    head: Vec<u8>,
    pages: BTreeMap<u32, Vec<u8>>,
    page_bytes: usize,
}

impl Topic {
    fn save(&mut self, engine: &mut Engine) {
        for page in engine.take_dirty_pages() {
            let bytes = engine.snapshot_page(page).unwrap();
            self.page_bytes += bytes.len();
            self.pages.insert(page, bytes);
        }
        self.head = engine.snapshot_head().unwrap();
    }

    fn restore(&self, engine: &mut Engine) {
        engine.restore_head(&self.head).unwrap();
        for (&page, bytes) in &self.pages {
            engine.restore_page(page, bytes).unwrap();
        }
        engine.pages_restored().unwrap();
    }
}

fn spilling(plan: &Arc<sluice_plan::Plan>, budget: usize) -> Engine {
    let mut engine = Engine::new(Arc::clone(plan), EngineOptions::default());
    assert!(engine.attach_spill(Box::new(MemorySpill::default()), budget));
    engine
}

/// Runs 60 batches through an engine in memory and through one that
/// spills past a budget of a few KiB, checkpointing it every 7 batches
/// and restoring it into a new engine every 14 (each with a new, empty
/// store): both emit the same rows.
fn spills_and_agrees(sql: &str) -> (Rows, Rows) {
    let plan = plan(sql);
    let mut memory = Engine::new(Arc::clone(&plan), EngineOptions::default());
    let mut spill = spilling(&plan, 16 << 10);
    let (mut expected, mut got) = (Rows::default(), Rows::default());
    let mut topic = Topic::default();
    let (mut most_spilled, mut most_state, mut in_memory) = (0, 0, 0);
    for b in 0..60 {
        memory.process(&mut batch(b), &mut expected).unwrap();
        spill.process(&mut batch(b), &mut got).unwrap();
        most_spilled = most_spilled.max(spill.stats().spilled_pages);
        most_state = most_state.max(spill.stats().state_bytes);
        in_memory = in_memory.max(memory.stats().state_bytes);
        if b % 7 == 6 {
            topic.save(&mut spill);
        }
        if b % 14 == 13 {
            spill = spilling(&plan, 16 << 10);
            topic.restore(&mut spill);
        }
    }
    memory.finish(&mut expected).unwrap();
    spill.finish(&mut got).unwrap();
    assert!(most_spilled > 100, "{sql}: it spilled ({most_spilled} pages at most)");
    assert!(
        most_state * 2 < in_memory,
        "{sql}: the spilling engine held at most {most_state} bytes, the other {in_memory}"
    );
    (expected, got)
}

#[test]
fn an_aggregate_that_spills_emits_what_it_emits_in_memory_through_checkpoints_and_restores() {
    let (expected, got) = spills_and_agrees(
        "SELECT k, COUNT(*) AS n, SUM(v) AS s, MAX(v) AS m, AVG(v) AS a, COUNT(DISTINCT v) AS d FROM t GROUP BY k",
    );
    assert_eq!(got.last_per_key(), expected.last_per_key());
    assert!(expected.last_per_key().len() > 10_000);
}

#[test]
fn a_windowed_aggregate_that_spills_closes_every_window_it_closes_in_memory() {
    let sql = "SELECT k, COUNT(*) AS n, SUM(v) AS s, COUNT(DISTINCT v) AS d, window_start FROM t GROUP BY k, TUMBLE(ts, INTERVAL '10' MINUTE)";
    let (expected, got) = spills_and_agrees(sql);
    let sorted = |r: &Rows| {
        let mut rows: Vec<_> = r.0.clone();
        rows.sort();
        rows
    };
    assert!(expected.0.len() > 10_000, "{} windows closed", expected.0.len());
    assert_eq!(sorted(&got), sorted(&expected));
}

#[test]
fn a_having_that_spills_retracts_what_it_retracts_in_memory() {
    let (expected, got) = spills_and_agrees("SELECT k, SUM(v) AS s FROM t GROUP BY k HAVING SUM(v) > 12");
    let last = expected.last_per_key();
    assert!(last.values().any(|(deleted, _)| *deleted), "some groups were retracted");
    assert_eq!(got.last_per_key(), last);
}

/// A top N and a deduplication (N = 1, the latest row per key) that
/// spill emit the very rows, in the very order, they emit in memory.
#[test]
fn a_top_n_and_a_deduplication_that_spill_emit_what_they_emit_in_memory() {
    for (sql, n) in [
        (
            "SELECT k, rn, v, ts FROM (SELECT k, v, ts, ROW_NUMBER() OVER (PARTITION BY k ORDER BY v DESC) AS rn \
          FROM t) WHERE rn <= 3",
            3,
        ),
        (
            "SELECT k, v, ts FROM (SELECT k, v, ts, ROW_NUMBER() OVER (PARTITION BY k ORDER BY ts DESC) AS rn \
          FROM t) WHERE rn <= 1",
            1,
        ),
    ] {
        let (expected, got) = spills_and_agrees(sql);
        assert!(expected.0.len() > 20_000, "{n}: {} rows", expected.0.len());
        assert!(got.0 == expected.0, "top {n}: the spilling engine emitted other rows");
    }
}

/// OVER windows of ROWS frames — one spec, and two whose keys share
/// the operator's table — that spill give every row the values they
/// give it in memory, through checkpoints and restores.
#[test]
fn rows_windows_that_spill_give_every_row_what_they_give_it_in_memory() {
    for sql in [
        "SELECT k, v, SUM(v) OVER (PARTITION BY k ORDER BY ts ROWS BETWEEN 3 PRECEDING AND CURRENT ROW) AS s, \
         MAX(v) OVER (PARTITION BY k ORDER BY ts ROWS BETWEEN 3 PRECEDING AND CURRENT ROW) AS m FROM t",
        "SELECT k, v, AVG(v) OVER (PARTITION BY k ORDER BY ts ROWS BETWEEN 5 PRECEDING AND CURRENT ROW) AS a, \
         MIN(k) OVER (PARTITION BY v ORDER BY ts ROWS BETWEEN 2 PRECEDING AND CURRENT ROW) AS lo FROM t",
    ] {
        let (expected, got) = spills_and_agrees(sql);
        assert_eq!(expected.0.len(), 60 * 500, "{sql}: a row out per row in");
        assert!(got.0 == expected.0, "{sql}: the spilling engine gave rows other values");
    }
}

/// Session windows that spill close every session they close in
/// memory, with the same bounds and values, through checkpoints and
/// restores: sessions on disk are closed by the watermark (their
/// pages read back), and sessions of hot keys grow and merge in
/// memory.
#[test]
fn session_windows_that_spill_close_every_session_they_close_in_memory() {
    let sql = "SELECT k, COUNT(*) AS n, SUM(v) AS s, MAX(v) AS m, COUNT(DISTINCT v) AS d, window_start, window_end \
               FROM t GROUP BY k, SESSION(ts, INTERVAL '10' MINUTE)";
    let (expected, got) = spills_and_agrees(sql);
    let sorted = |r: &Rows| {
        let mut rows: Vec<_> = r.0.clone();
        rows.sort();
        rows
    };
    assert!(expected.0.len() > 10_000, "{} sessions closed", expected.0.len());
    assert_eq!(sorted(&got), sorted(&expected));
}

/// Sessions of keys on disk merge: each of 6,000 keys opens two
/// sessions 15 minutes apart (rows up to an hour out of order are on
/// time), other keys push them to disk, then a row 7 minutes in
/// bridges each key's two — read back from disk, they merge into one
/// session, as in memory.
#[test]
fn sessions_on_disk_merge_when_a_row_bridges_them() {
    let plan = plan_late(
        "SELECT k, COUNT(*) AS n, SUM(v) AS s, window_start, window_end FROM t \
         GROUP BY k, SESSION(ts, INTERVAL '10' MINUTE)",
        3_600_000,
    );
    let rows = |keys: Range<i64>, ts: i64| {
        let n = keys.end - keys.start;
        let col = |t, v: Vec<i64>| Column::new(t, ColumnData::Int(v), None);
        Batch::new(
            vec![
                col(DataType::Bigint, keys.clone().collect()),
                col(DataType::Bigint, keys.map(|k| k % 7).collect()),
                col(DataType::Timestamp, vec![ts; usize::try_from(n).unwrap()]),
            ],
            usize::try_from(n).unwrap(),
        )
    };
    let mut memory = Engine::new(Arc::clone(&plan), EngineOptions::default());
    let mut spill = spilling(&plan, 16 << 10);
    let (mut expected, mut got) = (Rows::default(), Rows::default());
    let mut feed = |batch: Batch, memory: &mut Engine, spill: &mut Engine| {
        memory.process(&mut batch.clone(), &mut expected).unwrap();
        spill.process(&mut { batch }, &mut got).unwrap();
    };
    feed(rows(0..6_000, 0), &mut memory, &mut spill);
    feed(rows(0..6_000, 900_000), &mut memory, &mut spill);
    for b in 0..20 {
        feed(rows(100_000 + b * 1_000..100_000 + (b + 1) * 1_000, 900_000), &mut memory, &mut spill);
    }
    let on_disk = spill.stats().spilled_pages;
    assert!(on_disk > 300, "the keys' pages went to disk: {on_disk}");
    // What stays in memory of a session on disk is its page's
    // earliest end (1.7 MB here; 2.9 MB with an entry per session in
    // the index by end, against 5.7 MB in memory).
    let (held, all) = (spill.stats().state_bytes, memory.stats().state_bytes);
    assert!(held * 5 < all * 2, "the spilling engine holds {held} bytes, the other {all}");
    feed(rows(0..6_000, 420_000), &mut memory, &mut spill);
    memory.finish(&mut expected).unwrap();
    spill.finish(&mut got).unwrap();
    let (mut a, mut b) = (expected.0, got.0);
    a.sort();
    b.sort();
    assert_eq!(a.len(), 6_000 + 20_000, "one session per key: {}", a.len());
    assert!(a == b, "the spilling engine closed other sessions");
}

/// What stays in memory of sessions on disk is a few bytes a key: each
/// page's earliest end (8 bytes per 8 keys) and the store's filter of
/// keys, not an entry per page in an ordered index (40 bytes per 8
/// keys), which grew with the keys on disk past any budget.
#[test]
fn sessions_on_disk_cost_a_few_bytes_a_key() {
    let plan = plan_late("SELECT k, COUNT(*) AS n FROM t GROUP BY k, SESSION(ts, INTERVAL '10' MINUTE)", 3_600_000);
    let rows = |keys: Range<i64>| {
        let n = usize::try_from(keys.end - keys.start).unwrap();
        let col = |t, v: Vec<i64>| Column::new(t, ColumnData::Int(v), None);
        Batch::new(
            vec![
                col(DataType::Bigint, keys.collect()),
                col(DataType::Bigint, vec![1; n]),
                col(DataType::Timestamp, vec![0; n]),
            ],
            n,
        )
    };
    let mut spill = spilling(&plan, 16 << 10);
    let mut got = Rows::default();
    let keys = 200_000;
    for b in 0..keys / 1_000 {
        spill.process(&mut rows(b * 1_000..(b + 1) * 1_000), &mut got).unwrap();
    }
    let (held, pages) = (spill.stats().state_bytes, spill.stats().spilled_pages);
    assert!(pages * 8 > keys as usize * 9 / 10, "nearly every key went to disk: {pages} pages");
    // 0.80 MB; 1.52 MB with an entry per page in the index by end.
    assert!(held < 5 * keys as usize, "{held} bytes held for {keys} keys, {pages} pages on disk");
    spill.finish(&mut got).unwrap();
    assert_eq!(got.0.len(), keys as usize, "every session closed once");
}

/// A row emitted: whether it deletes, and its values.
type Emitted = (bool, String);

/// A whole checkpoint of `sql`'s operator — the only kind it wrote
/// before its state was paged — restores, is written again byte for
/// byte, and the operator then checkpoints in pages that restore too,
/// spilling: what an engine never restored emits after it, and what
/// the restored one does, each sorted.
fn restores_whole_then_in_pages(sql: &str) -> (Vec<Emitted>, Vec<Emitted>) {
    let plan = plan(sql);
    let mut memory = Engine::new(Arc::clone(&plan), EngineOptions::default());
    for b in 0..10 {
        memory.process(&mut batch(b), &mut Rows::default()).unwrap();
    }
    let whole = memory.snapshot().unwrap();
    let mut again = Engine::new(Arc::clone(&plan), EngineOptions::default());
    again.restore(&whole).unwrap();
    assert_eq!(again.snapshot().unwrap(), whole, "{sql}: written again as it was read");
    let mut restored = spilling(&plan, 16 << 10);
    restored.restore(&whole).unwrap();
    let mut topic = Topic::default();
    let mut tail = (Rows::default(), Rows::default());
    for b in 10..30 {
        memory.process(&mut batch(b), &mut tail.0).unwrap();
        restored.process(&mut batch(b), &mut tail.1).unwrap();
        if b == 19 {
            topic.save(&mut restored);
            assert!(topic.pages.len() > 30, "{sql}: every page written after a whole restore: {}", topic.pages.len());
            restored = spilling(&plan, 16 << 10);
            topic.restore(&mut restored);
        }
    }
    assert!(restored.stats().spilled_pages > 0, "{sql}: it spilled");
    memory.finish(&mut tail.0).unwrap();
    restored.finish(&mut tail.1).unwrap();
    let (mut a, mut b) = (tail.0.0, tail.1.0);
    a.sort();
    b.sort();
    (a, b)
}

/// An OVER window's whole checkpoint restores (two specs, so their
/// keys move into one table) and it then checkpoints in pages.
#[test]
fn a_whole_checkpoint_of_a_rows_window_restores_and_then_checkpoints_in_pages() {
    let (expected, got) = restores_whole_then_in_pages(
        "SELECT k, SUM(v) OVER (PARTITION BY k ORDER BY ts ROWS BETWEEN 3 PRECEDING AND CURRENT ROW) AS s, \
         MAX(k) OVER (PARTITION BY v ORDER BY ts ROWS BETWEEN 4 PRECEDING AND CURRENT ROW) AS m FROM t",
    );
    assert_eq!(expected.len(), 20 * 500);
    assert!(got == expected, "the restored engine gave rows other values");
}

/// Session windows' whole checkpoint restores and they then
/// checkpoint in pages.
#[test]
fn a_whole_checkpoint_of_session_windows_restores_and_then_checkpoints_in_pages() {
    let (expected, got) = restores_whole_then_in_pages(
        "SELECT k, COUNT(*) AS n, SUM(v) AS s FROM t GROUP BY k, SESSION(ts, INTERVAL '10' MINUTE)",
    );
    assert!(expected.len() > 5_000, "{} sessions closed", expected.len());
    assert!(got == expected, "the restored engine closed other sessions");
}

/// A restore into an engine whose budget is smaller than the state
/// leaves the pages past half the budget on disk, and reads each back
/// when its key comes.
#[test]
fn a_restore_larger_than_the_budget_stays_on_disk_until_read() {
    let plan = plan("SELECT k, COUNT(*) AS n, SUM(v) AS s FROM t GROUP BY k");
    let mut spill = spilling(&plan, 16 << 10);
    let mut memory = Engine::new(Arc::clone(&plan), EngineOptions::default());
    let (mut expected, mut got) = (Rows::default(), Rows::default());
    for b in 0..20 {
        memory.process(&mut batch(b), &mut expected).unwrap();
        spill.process(&mut batch(b), &mut got).unwrap();
    }
    let mut topic = Topic::default();
    topic.save(&mut spill);
    let mut restored = spilling(&plan, 16 << 10);
    topic.restore(&mut restored);
    let pages = restored.stats().spilled_pages;
    assert!(pages > 500, "most pages stayed on disk: {pages}");
    assert!(restored.stats().state_bytes < 64 << 10, "{}", restored.stats().state_bytes);
    for b in 20..30 {
        memory.process(&mut batch(b), &mut expected).unwrap();
        restored.process(&mut batch(b), &mut got).unwrap();
    }
    assert_eq!(got.last_per_key(), expected.last_per_key());
    // The restored engine checkpoints again: pages on disk are copied
    // from it when dirty, and a second restore agrees.
    let mut again = Topic { pages: topic.pages.clone(), ..Topic::default() };
    again.save(&mut restored);
    let mut third = spilling(&plan, 16 << 10);
    again.restore(&mut third);
    let mut tail = (Rows::default(), Rows::default());
    memory.process(&mut batch(30), &mut tail.0).unwrap();
    third.process(&mut batch(30), &mut tail.1).unwrap();
    assert_eq!(tail.1.last_per_key(), tail.0.last_per_key());
}

/// Two groups holding every distinct key, past the budget: their one
/// block is hot at every batch and is never evicted (evicting it
/// would read the whole state back at the next row and write it out
/// again at every spill); the aggregate agrees with one in memory.
#[test]
fn a_few_hot_groups_past_the_budget_stay_in_memory() {
    let plan = plan("SELECT k % 2 AS parity, COUNT(DISTINCT k) AS keys FROM t GROUP BY k % 2");
    let mut memory = Engine::new(Arc::clone(&plan), EngineOptions::default());
    let mut spill = spilling(&plan, 16 << 10);
    let (mut expected, mut got) = (Rows::default(), Rows::default());
    let mut most_spilled = 0;
    for b in 0..20 {
        memory.process(&mut batch(b), &mut expected).unwrap();
        spill.process(&mut batch(b), &mut got).unwrap();
        most_spilled = most_spilled.max(spill.stats().spilled_pages);
    }
    assert!(spill.stats().state_bytes > 64 << 10, "past the budget: {}", spill.stats().state_bytes);
    assert_eq!(most_spilled, 0);
    assert_eq!(got.0, expected.0);
}

/// A COUNT(DISTINCT) aggregate's whole checkpoint — the only kind it
/// wrote before each group kept its own values — restores, and the
/// engine then checkpoints in pages that restore too.
#[test]
fn a_whole_checkpoint_of_a_count_distinct_restores_and_then_checkpoints_in_pages() {
    let plan = plan("SELECT k, COUNT(DISTINCT v) AS d, COUNT(*) AS n FROM t GROUP BY k");
    let mut memory = Engine::new(Arc::clone(&plan), EngineOptions::default());
    let (mut expected, mut got) = (Rows::default(), Rows::default());
    for b in 0..10 {
        memory.process(&mut batch(b), &mut expected).unwrap();
    }
    let whole = memory.snapshot().unwrap();
    let mut restored = spilling(&plan, 16 << 10);
    restored.restore(&whole).unwrap();
    let mut topic = Topic::default();
    for b in 10..30 {
        memory.process(&mut batch(b), &mut expected).unwrap();
        restored.process(&mut batch(b), &mut got).unwrap();
        if b == 19 {
            topic.save(&mut restored);
            assert!(topic.pages.len() > 30, "every page written after a whole restore: {}", topic.pages.len());
            restored = spilling(&plan, 16 << 10);
            topic.restore(&mut restored);
        }
    }
    assert!(restored.stats().spilled_pages > 0, "it spilled");
    // Every key the restored engine emitted ends as it ends in memory.
    let got = got.last_per_key();
    let expected = expected.last_per_key();
    assert!(got.len() > 5_000, "{} keys", got.len());
    for (key, row) in &got {
        assert_eq!(Some(row), expected.get(key), "key {key}");
    }
}

/// A checkpoint of an aggregate that never spilled is the one written
/// before spilling existed, byte for byte, store attached or not.
#[test]
fn an_aggregate_under_its_budget_checkpoints_as_before() {
    let plan = plan("SELECT k, COUNT(*) AS n FROM t GROUP BY k");
    let mut plain = Engine::new(Arc::clone(&plan), EngineOptions::default());
    let mut roomy = spilling(&plan, 1 << 30);
    for b in 0..5 {
        plain.process(&mut batch(b), &mut Rows::default()).unwrap();
        roomy.process(&mut batch(b), &mut Rows::default()).unwrap();
    }
    let (mut a, mut b) = (Topic::default(), Topic::default());
    a.save(&mut plain);
    b.save(&mut roomy);
    assert_eq!((a.head, a.pages), (b.head, b.pages));
    assert_eq!(roomy.stats().spilled_pages, 0);
}
