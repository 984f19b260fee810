//! Properties of the engine over random inputs and random batch splits:
//!
//! * windowed results (with out-of-order and late records) do not depend on
//!   where batches split, nor on snapshot/restore between batches;
//! * coalesced EMIT CHANGES ends in the same final state per key as
//!   per-record EMIT CHANGES;
//! * an incremental checkpoint (a head and the pages changed since the
//!   last one, kept as a compacted topic keeps them) restores the state a
//!   whole checkpoint does.

// Test support code: failing loudly is its job.
#![allow(clippy::panic, clippy::expect_used, clippy::unwrap_used)]

use std::collections::BTreeMap;
use std::sync::Arc;

use proptest::prelude::*;

mod support;
use sluice_crds::{ColumnType, EmitChangesMode, EventTimeSpec, SourceSpec};
use sluice_engine::{Engine, EngineOptions, Output};
use sluice_formats::decode::JsonDecoder;
use sluice_formats::encode::{EncodedRows, JsonEncoder};
use sluice_plan::Batch;
use sluice_plan::EmittedRows;
use sluice_sql::plan_query;

fn source() -> SourceSpec {
    SourceSpec {
        event_time: Some(EventTimeSpec { column: "ts".into(), watermark_delay_millis: 2_000 }),
        partition_key: vec!["trader".into()],
        ..SourceSpec::table(
            "trades",
            &[
                ("trader", ColumnType::String, false),
                ("price", ColumnType::Double, false),
                ("qty", ColumnType::Bigint, false),
                ("ts", ColumnType::Timestamp, false),
            ],
        )
    }
}

struct Collect<'a> {
    encoder: &'a JsonEncoder,
    out: EncodedRows,
    late: usize,
}

impl Output for Collect<'_> {
    fn rows(&mut self, rows: &EmittedRows<'_>) -> Result<(), sluice_engine::Error> {
        self.encoder.encode(rows, &mut self.out);
        Ok(())
    }
    fn late(&mut self, _: &Batch, rows: &[u32]) -> Result<(), sluice_engine::Error> {
        self.late += rows.len();
        Ok(())
    }
}

/// Runs `records` through one engine, cutting batches at `cuts`, optionally
/// snapshotting and restoring after every batch. Returns the output rows in
/// emission order and the number of late records.
fn run(sql: &str, emit: EmitChangesMode, records: &[String], cuts: &[usize], snapshot: bool) -> (Vec<String>, usize) {
    let plan = Arc::new(plan_query(sql, &[source()]).unwrap());
    let names: Vec<String> = plan.outputs.iter().map(|o| o.name.clone()).collect();
    // Deletions (HAVING's) name their key.
    let keys: Vec<String> = plan.keys.iter().map(|o| o.name.clone()).collect();
    let encoder = JsonEncoder::new(&names, &keys);
    let options = EngineOptions { emit_changes: emit, ..EngineOptions::default() };
    let mut engine = Engine::new(Arc::clone(&plan), options.clone());
    let mut decoder = JsonDecoder::new(&plan);
    let mut batch = decoder.new_batch(64);
    let mut out = Collect { encoder: &encoder, out: EncodedRows::default(), late: 0 };
    let mut start = 0;
    let mut bounds: Vec<usize> = cuts.iter().copied().filter(|c| *c > 0 && *c < records.len()).collect();
    bounds.sort_unstable();
    bounds.dedup();
    bounds.push(records.len());
    for end in bounds {
        for r in &records[start..end] {
            decoder.decode(r.as_bytes(), &mut batch).unwrap();
        }
        engine.process(&mut batch, &mut out).unwrap();
        batch.clear();
        if snapshot {
            let state = engine.snapshot().unwrap();
            engine = Engine::new(Arc::clone(&plan), options.clone());
            engine.restore(&state).unwrap();
        }
        start = end;
    }
    engine.finish(&mut out).unwrap();
    let rows = (0..out.out.len()).map(|i| String::from_utf8(out.out.value(i).to_vec()).unwrap()).collect();
    (rows, out.late)
}

/// Random trades: a few traders, event times moving forward with jitter
/// (some records far enough behind to be late).
fn trades() -> impl Strategy<Value = Vec<String>> {
    prop::collection::vec((0u8..4, 1u32..500, 0u32..100, -5_000i64..1_000), 1..300).prop_map(|v| {
        let mut t = 0i64;
        v.into_iter()
            .map(|(trader, price, qty, step)| {
                t = (t + step.max(-3_000)).max(0);
                let ts = if step < -4_000 { t - 20_000 } else { t };
                format!(r#"{{"trader":"T{trader}","price":{price}.5,"qty":{qty},"ts":{}}}"#, ts.max(0))
            })
            .collect()
    })
}

fn sorted(mut v: Vec<String>) -> Vec<String> {
    v.sort();
    v
}

/// The last row emitted per key (the group columns are the first fields).
fn final_per_key(rows: &[String], key_fields: &[&str]) -> BTreeMap<String, String> {
    rows.iter()
        .map(|r| {
            let v: serde_json::Value = serde_json::from_str(r).unwrap();
            let key: Vec<String> = key_fields.iter().map(|k| v[k].to_string()).collect();
            (key.join("|"), r.clone())
        })
        .collect()
}

const TUMBLING: &str = "SELECT trader, window_start, COUNT(*) AS n, SUM(qty) AS qty, MIN(price) AS lo, MAX(price) AS hi \
     FROM trades GROUP BY trader WINDOW TUMBLING (ts, INTERVAL '5' SECOND)";
const HOPPING: &str = "SELECT trader, window_start, COUNT(*) AS n, AVG(price) AS avg_price \
     FROM trades GROUP BY trader WINDOW HOPPING (ts, INTERVAL '6' SECOND, INTERVAL '2' SECOND)";
const SESSION: &str = "SELECT trader, window_start, window_end, COUNT(*) AS n, SUM(qty) AS qty \
     FROM trades GROUP BY trader WINDOW SESSION (ts, INTERVAL '3' SECOND)";

proptest! {
    #![proptest_config(support::deterministic(48))]

    #[test]
    fn windows_do_not_depend_on_batch_boundaries(records in trades(), cuts in prop::collection::vec(0usize..300, 0..20)) {
        for sql in [TUMBLING, HOPPING, SESSION] {
            let (whole, late_whole) = run(sql, EmitChangesMode::Coalesced, &records, &[], false);
            let (split, late_split) = run(sql, EmitChangesMode::Coalesced, &records, &cuts, false);
            let (restored, late_restored) = run(sql, EmitChangesMode::Coalesced, &records, &cuts, true);
            prop_assert_eq!(sorted(whole.clone()), sorted(split), "{}", sql);
            prop_assert_eq!(sorted(whole), sorted(restored), "{} with snapshot/restore", sql);
            prop_assert_eq!(late_whole, late_split);
            prop_assert_eq!(late_whole, late_restored);
        }
    }

    #[test]
    fn coalesced_changes_end_where_per_record_changes_end(records in trades(), cuts in prop::collection::vec(0usize..300, 0..20)) {
        let queries = [
            ("SELECT trader, COUNT(*) AS n, SUM(qty) AS qty, AVG(price) AS p FROM trades GROUP BY trader", vec!["trader"]),
            (
                "SELECT trader, window_start, COUNT(*) AS n, SUM(qty) AS qty FROM trades GROUP BY trader \
                 WINDOW TUMBLING (ts, INTERVAL '5' SECOND) EMIT CHANGES",
                vec!["trader", "window_start"],
            ),
            (PAGED_TOP_N, vec!["trader", "rn"]),
            (
                "SELECT trader, price, ts, rn FROM (SELECT trader, price, ts, \
                 ROW_NUMBER() OVER (PARTITION BY trader ORDER BY ts) AS rn FROM trades) AS first WHERE rn = 1",
                vec!["trader", "rn"],
            ),
        ];
        for (sql, key) in queries {
            let (per_record, _) = run(sql, EmitChangesMode::PerRecord, &records, &cuts, false);
            let (coalesced, _) = run(sql, EmitChangesMode::Coalesced, &records, &cuts, false);
            prop_assert!(coalesced.len() <= per_record.len());
            prop_assert_eq!(final_per_key(&per_record, &key), final_per_key(&coalesced, &key), "{}", sql);
        }
    }

    #[test]
    fn incremental_checkpoints_restore_what_whole_ones_do(
        records in many_traders(),
        cuts in prop::collection::vec(0usize..400, 0..20),
        restores in prop::collection::vec(0u8..3, 20),
    ) {
        for sql in [PAGED_GROUPS, PAGED_TUMBLING, PAGED_HOPPING_CHANGES, PAGED_TOP_N, PAGED_HAVING] {
            let (whole, late_whole) = run(sql, EmitChangesMode::Coalesced, &records, &cuts, false);
            let (paged, late_paged) = run_paged(sql, &records, &cuts, &restores);
            prop_assert_eq!(sorted(whole), sorted(paged), "{}", sql);
            prop_assert_eq!(late_whole, late_paged);
        }
    }
}

const PAGED_GROUPS: &str = "SELECT trader, COUNT(*) AS n, SUM(qty) AS qty, MAX(price) AS hi, MIN(trader) AS t \
     FROM trades GROUP BY trader";
const PAGED_TUMBLING: &str = "SELECT trader, window_start, COUNT(*) AS n, AVG(price) AS p, STDDEV_POP(qty) AS sd \
     FROM trades GROUP BY trader WINDOW TUMBLING (ts, INTERVAL '5' SECOND)";
const PAGED_HOPPING_CHANGES: &str = "SELECT trader, window_start, COUNT(*) AS n, SUM(price) AS s FROM trades \
     GROUP BY trader WINDOW HOPPING (ts, INTERVAL '6' SECOND, INTERVAL '2' SECOND) EMIT CHANGES";

/// Groups that pass HAVING and fail it by turns: which were shown (and
/// so are deleted when they fail) rides in the pages.
const PAGED_HAVING: &str = "SELECT trader, COUNT(*) AS n, SUM(qty) AS qty FROM trades GROUP BY trader \
     HAVING SUM(qty) % 3 = 0";

const PAGED_TOP_N: &str = "SELECT trader, price, qty, rn FROM (SELECT trader, price, qty, \
     ROW_NUMBER() OVER (PARTITION BY trader ORDER BY price DESC) AS rn FROM trades) AS best WHERE rn <= 2";

/// Random trades of up to 3,000 traders: groups over many pages, windows
/// that close and free their ids for reuse.
fn many_traders() -> impl Strategy<Value = Vec<String>> {
    prop::collection::vec((0u16..3000, 1u32..500, 0u32..100, -1_000i64..2_000), 1..400).prop_map(|v| {
        let mut t = 0i64;
        v.into_iter()
            .map(|(trader, price, qty, step)| {
                t = (t + step.max(-3_000)).max(0);
                format!(r#"{{"trader":"T{trader}","price":{price}.5,"qty":{qty},"ts":{t}}}"#)
            })
            .collect()
    })
}

/// As [`run`], checkpointing incrementally after every batch into pages
/// kept by number (the latest write of each wins, as in a compacted topic)
/// and a head. After a batch `restores` marks 1, the engine is rebuilt
/// from the head and every page kept; after one it marks 2, from a whole
/// snapshot, with no page kept (a checkpoint of the format before pages,
/// restored by a worker that writes them): its next checkpoint must write
/// every page.
fn run_paged(sql: &str, records: &[String], cuts: &[usize], restores: &[u8]) -> (Vec<String>, usize) {
    let plan = Arc::new(plan_query(sql, &[source()]).unwrap());
    let names: Vec<String> = plan.outputs.iter().map(|o| o.name.clone()).collect();
    // Deletions (HAVING's) name their key.
    let keys: Vec<String> = plan.keys.iter().map(|o| o.name.clone()).collect();
    let encoder = JsonEncoder::new(&names, &keys);
    let options = EngineOptions::default();
    let mut engine = Engine::new(Arc::clone(&plan), options.clone());
    assert!(engine.paged(), "{sql} is checkpointed in pages");
    let mut decoder = JsonDecoder::new(&plan);
    let mut batch = decoder.new_batch(64);
    let mut out = Collect { encoder: &encoder, out: EncodedRows::default(), late: 0 };
    let mut pages: BTreeMap<u32, Vec<u8>> = BTreeMap::new();
    let mut start = 0;
    let mut bounds: Vec<usize> = cuts.iter().copied().filter(|c| *c > 0 && *c < records.len()).collect();
    bounds.sort_unstable();
    bounds.dedup();
    bounds.push(records.len());
    for (i, end) in bounds.into_iter().enumerate() {
        for r in &records[start..end] {
            decoder.decode(r.as_bytes(), &mut batch).unwrap();
        }
        engine.process(&mut batch, &mut out).unwrap();
        batch.clear();
        let head = engine.snapshot_head().unwrap();
        for page in engine.take_dirty_pages() {
            pages.insert(page, engine.snapshot_page(page).unwrap());
        }
        match restores.get(i) {
            Some(1) => {
                engine = Engine::new(Arc::clone(&plan), options.clone());
                engine.restore_head(&head).unwrap();
                for (&page, bytes) in &pages {
                    engine.restore_page(page, bytes).unwrap();
                }
                engine.pages_restored().unwrap();
            }
            Some(2) => {
                let whole = engine.snapshot().unwrap();
                engine = Engine::new(Arc::clone(&plan), options.clone());
                engine.restore(&whole).unwrap();
                pages.clear();
            }
            _ => {}
        }
        start = end;
    }
    engine.finish(&mut out).unwrap();
    let rows = (0..out.out.len()).map(|i| String::from_utf8(out.out.value(i).to_vec()).unwrap()).collect();
    (rows, out.late)
}
