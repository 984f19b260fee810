//! Checkpoints are a format: state written by an earlier build restores
//! into this one. For every kind of stateful operator a query can plan
//! to, `tests/fixtures/checkpoints/` holds the checkpoints an earlier
//! build wrote — whole, as a head and pages, and as a head and pages once
//! it had spilled — and the rows that build emitted after each restore.
//! This build restores each and must emit the same rows.
//!
//! The fixtures are written by the same test with
//! `SLUICE_WRITE_CHECKPOINT_FIXTURES=1`; write them with the build whose
//! format they pin (the first set came from the commit before the state
//! code moved under `engine/src/state/`), never to make a failing run
//! pass.

#![allow(clippy::panic, clippy::expect_used, clippy::unwrap_used)]

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

use sluice_crds::{ColumnType, EventTimeSpec, SourceSpec, TableSpec};
use sluice_engine::{Engine, EngineOptions, Error, Output, SpillStore};
use sluice_plan::{Batch, Column, ColumnData, DataType, EmittedRows, Plan, StrData, Value};

/// Each stateful operator, by the query that plans to it.
const CASES: &[(&str, &str)] = &[
    ("group-by", "SELECT k, COUNT(*) AS n, SUM(v) AS s FROM t GROUP BY k"),
    ("group-by-having", "SELECT k, SUM(v) AS s FROM t GROUP BY k HAVING SUM(v) > 20"),
    ("count-distinct", "SELECT k, COUNT(DISTINCT v) AS d FROM t GROUP BY k"),
    (
        "tumbling",
        "SELECT k, TUMBLE_START(ts, INTERVAL '1' SECOND) AS w, COUNT(*) AS n FROM t \
         GROUP BY k, TUMBLE(ts, INTERVAL '1' SECOND)",
    ),
    (
        "hopping-final",
        "SELECT k, HOP_START(ts, INTERVAL '1' SECOND, INTERVAL '3' SECOND) AS w, SUM(v) AS s FROM t \
         GROUP BY k, HOP(ts, INTERVAL '1' SECOND, INTERVAL '3' SECOND)",
    ),
    (
        "session",
        "SELECT k, SESSION_START(ts, INTERVAL '500' MILLISECOND) AS w, COUNT(*) AS n FROM t \
         GROUP BY k, SESSION(ts, INTERVAL '500' MILLISECOND)",
    ),
    (
        "rows-window",
        "SELECT k, v, SUM(v) OVER (PARTITION BY k ORDER BY ts ROWS BETWEEN 3 PRECEDING AND CURRENT ROW) AS s FROM t",
    ),
    (
        "top-n",
        "SELECT k, v, ts FROM (SELECT k, v, ts, ROW_NUMBER() OVER (PARTITION BY k ORDER BY v DESC) AS r FROM t) \
         WHERE r <= 2",
    ),
    (
        "deduplicate",
        "SELECT k, v, ts FROM (SELECT k, v, ts, ROW_NUMBER() OVER (PARTITION BY k ORDER BY ts) AS r FROM t) \
         WHERE r = 1",
    ),
    ("table-aggregate", "SELECT v, COUNT(*) AS n, SUM(k) AS s FROM tab GROUP BY v"),
    ("table-changelog", "SELECT k, v FROM tab WHERE v > 2"),
    (
        "interval-join",
        "SELECT t.k, t.v, u.v AS w FROM t JOIN u ON t.k = u.k \
         AND u.ts BETWEEN t.ts - INTERVAL '1' SECOND AND t.ts + INTERVAL '1' SECOND",
    ),
    ("table-join", "SELECT t.k, t.v, tab.v AS w FROM t LEFT JOIN tab ON t.k = tab.k"),
    (
        "aggregate-of-aggregate",
        "SELECT k, SUM(n) AS total, COUNT(*) AS c FROM (SELECT k, v, COUNT(*) AS n FROM t GROUP BY k, v) GROUP BY k",
    ),
    (
        "over-a-top-one",
        "SELECT Q.k, Q.v, SUM(Q.v) OVER (PARTITION BY Q.k ORDER BY Q.ts ROWS BETWEEN 2 PRECEDING AND CURRENT ROW) \
         AS s FROM (SELECT * FROM (SELECT k, v, ts, ROW_NUMBER() OVER (PARTITION BY k, v ORDER BY ts DESC) AS rn \
         FROM t) WHERE rn <= 1) AS Q",
    ),
    // Over several partitions, in two phases: partial aggregates, merged.
    ("two-phase@3", "SELECT COUNT(*) AS n, SUM(v) AS s FROM t"),
    ("two-phase-windowed@3", "SELECT window_start, COUNT(*) AS n FROM t GROUP BY TUMBLE(ts, INTERVAL '1' SECOND)"),
];

/// Batches before the checkpoint, and after it.
const BEFORE: u64 = 16;
const AFTER: u64 = 8;
/// Rows a batch, over this many keys.
const ROWS: u64 = 64;
const KEYS: u64 = 60;

fn sources() -> Vec<SourceSpec> {
    let columns =
        [("k", ColumnType::Bigint, true), ("v", ColumnType::Bigint, true), ("ts", ColumnType::Timestamp, true)];
    let stream = |name: &str| SourceSpec {
        partition_key: vec!["k".into()],
        event_time: Some(EventTimeSpec { column: "ts".into(), watermark_delay_millis: 200 }),
        ..SourceSpec::table(name, &columns)
    };
    let table = SourceSpec { table: Some(TableSpec { primary_key: vec!["k".into()] }), ..stream("tab") };
    vec![stream("t"), stream("u"), table]
}

/// Batch `b` of the input of a stage reading `plan`: every column made
/// from its type by a fixed generator (keys collide, times grow by a
/// second a batch, a little out of order), so one generator feeds a
/// source and the exchange of a join alike.
fn batch(plan: &Plan, b: u64) -> Batch {
    let mut x = b.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut next = move || {
        x = x.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
        x >> 33
    };
    let n = ROWS as usize;
    let columns = plan
        .source
        .schema
        .fields
        .iter()
        .map(|field| {
            let data = match field.data_type {
                DataType::Timestamp => ColumnData::Int(
                    (0..ROWS).map(|i| i64::try_from(b * 1_000 + i * 6 + next() % 150).unwrap_or(0)).collect(),
                ),
                DataType::Bigint => {
                    ColumnData::Int((0..ROWS).map(|_| i64::try_from(next() % KEYS).unwrap_or(0) - 3).collect())
                }
                DataType::Double => ColumnData::Float((0..ROWS).map(|_| (next() % 1_000) as f64 / 8.0).collect()),
                DataType::Boolean => ColumnData::Bool((0..ROWS).map(|_| next() % 3 == 0).collect()),
                DataType::String => {
                    let mut s = StrData::default();
                    (0..ROWS).for_each(|_| s.push(&format!("s{}", next() % 40)));
                    ColumnData::Str(s)
                }
                other => panic!("no generator for {other:?}"),
            };
            Column::new(field.data_type, data, None)
        })
        .collect();
    Batch::new(columns, n)
}

/// Every row emitted, as text.
#[derive(Default)]
struct Rows(Vec<String>);

impl Output for Rows {
    fn rows(&mut self, rows: &EmittedRows<'_>) -> Result<(), Error> {
        rows.selection.for_each(|r| {
            let cells: Vec<String> = rows
                .columns
                .iter()
                .map(|v| match v {
                    Value::Column(c) => format!("{:?}", c.scalar(r)),
                    Value::Scalar(s, _) => format!("{s:?}"),
                })
                .collect();
            self.0.push(format!("{}{}", if rows.delete { "-" } else { "+" }, cells.join(",")));
        });
        Ok(())
    }

    fn late(&mut self, _: &Batch, _: &[u32]) -> Result<(), Error> {
        Ok(())
    }
}

/// A spill store in memory (the worker's is on disk; the format is the
/// operator's, not the store's).
#[derive(Debug, Default)]
struct MemoryStore {
    pages: BTreeMap<u32, Vec<u8>>,
    keys: BTreeMap<Vec<u8>, u32>,
}

impl SpillStore for MemoryStore {
    fn put_page(&mut self, page: u32, bytes: &[u8], keys: &mut dyn Iterator<Item = &[u8]>) -> Result<(), Error> {
        self.pages.insert(page, bytes.to_vec());
        keys.for_each(|k| {
            self.keys.insert(k.to_vec(), page);
        });
        Ok(())
    }
    fn page(&self, page: u32) -> Result<Option<Vec<u8>>, Error> {
        Ok(self.pages.get(&page).cloned())
    }
    fn remove_page(&mut self, page: u32, keys: &mut dyn Iterator<Item = &[u8]>) -> Result<(), Error> {
        self.pages.remove(&page);
        keys.for_each(|k| {
            self.keys.remove(k);
        });
        Ok(())
    }
    fn key_page(&self, key: &[u8]) -> Result<Option<u32>, Error> {
        Ok(self.keys.get(key).copied())
    }
    fn clear(&mut self) -> Result<(), Error> {
        self.pages.clear();
        self.keys.clear();
        Ok(())
    }
    fn for_each_key(&self, f: &mut dyn FnMut(&[u8])) -> Result<(), Error> {
        self.keys.keys().for_each(|k| f(k));
        Ok(())
    }
    fn disk_bytes(&self) -> u64 {
        self.pages.values().map(|p| p.len() as u64).sum()
    }
}

/// A checkpoint as the state topic keeps it.
#[derive(Debug, Default, PartialEq)]
struct Checkpoint {
    /// A whole checkpoint ([`Engine::snapshot`]), or a head.
    head: Vec<u8>,
    pages: BTreeMap<u32, Vec<u8>>,
}

/// How a fixture was written.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Kind {
    Whole,
    Paged,
    Spilled,
}

const KINDS: [Kind; 3] = [Kind::Whole, Kind::Paged, Kind::Spilled];

fn new_engine(plan: &Arc<Plan>, kind: Kind) -> Engine {
    let mut engine = Engine::new(Arc::clone(plan), EngineOptions::default());
    if kind == Kind::Spilled {
        engine.attach_spill(Box::<MemoryStore>::default(), 4 << 10);
    }
    engine
}

fn run(engine: &mut Engine, plan: &Plan, batches: std::ops::Range<u64>, out: &mut Rows) {
    for b in batches {
        engine.process(&mut batch(plan, b), out).unwrap_or_else(|e| panic!("batch {b}: {e}"));
        // A stage fed by an exchange learns the watermark from it.
        let watermark = i64::try_from(b * 1_000).unwrap_or(0);
        engine.advance_watermark(watermark, out).unwrap_or_else(|e| panic!("watermark {b}: {e}"));
    }
}

/// Runs the input before the checkpoint and takes it.
fn checkpoint(plan: &Arc<Plan>, kind: Kind) -> Checkpoint {
    let mut engine = new_engine(plan, kind);
    let mut out = Rows::default();
    run(&mut engine, plan, 0..BEFORE, &mut out);
    if kind == Kind::Whole || !engine.paged() {
        return Checkpoint { head: engine.snapshot().unwrap(), pages: BTreeMap::new() };
    }
    let pages = engine.take_dirty_pages().into_iter().map(|p| (p, engine.snapshot_page(p).unwrap())).collect();
    Checkpoint { head: engine.snapshot_head().unwrap(), pages }
}

/// A new engine with `checkpoint` restored.
fn restored(plan: &Arc<Plan>, kind: Kind, checkpoint: &Checkpoint) -> Engine {
    let mut engine = new_engine(plan, kind);
    if kind == Kind::Whole || !engine.paged() {
        engine.restore(&checkpoint.head).unwrap_or_else(|e| panic!("restore: {e}"));
    } else {
        engine.restore_head(&checkpoint.head).unwrap_or_else(|e| panic!("head: {e}"));
        for (&page, bytes) in &checkpoint.pages {
            engine.restore_page(page, bytes).unwrap_or_else(|e| panic!("page {page}: {e}"));
        }
        engine.pages_restored().unwrap_or_else(|e| panic!("pages: {e}"));
    }
    engine
}

/// Restores `checkpoint` into a new engine and runs the input after it
/// to the end: the rows it emits.
fn after(plan: &Arc<Plan>, kind: Kind, checkpoint: &Checkpoint) -> Vec<String> {
    let mut engine = restored(plan, kind, checkpoint);
    let mut out = Rows::default();
    run(&mut engine, plan, BEFORE..BEFORE + AFTER, &mut out);
    engine.finish(&mut out).unwrap_or_else(|e| panic!("finish: {e}"));
    out.0
}

/// The stateful stages of each case: (name, plan).
fn stages() -> Vec<(String, Arc<Plan>)> {
    let sources = sources();
    let mut stages = Vec::new();
    for (case, sql) in CASES {
        // `name@n`: planned over n partitions.
        let (name, partitions) = case.split_once('@').map_or((*case, 1), |(n, p)| (n, p.parse().unwrap()));
        let flow = sluice_sql::plan_dataflow(sql, &sources, partitions).unwrap_or_else(|e| panic!("{name}: {e}"));
        for (i, stage) in flow.stages.iter().enumerate() {
            if format!("{:?}", stage.plan.operator).starts_with("Stateless") {
                continue;
            }
            if std::env::var_os("SLUICE_WRITE_CHECKPOINT_FIXTURES").is_some() {
                let kind = format!("{:?}", stage.plan.operator);
                eprintln!("{name}.{i}: {}", kind.split(['(', ' ', '{']).next().unwrap_or_default());
            }
            stages.push((format!("{name}.{i}"), Arc::new(stage.plan.clone())));
        }
    }
    stages
}

fn dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/checkpoints")
}

/// A fixture: the checkpoint and the rows emitted after its restore, as
/// length-prefixed sections — `head`, then `page <n>` for each page,
/// then `rows` (one per line).
fn write_fixture(path: &PathBuf, checkpoint: &Checkpoint, rows: &[String]) {
    let mut bytes = Vec::new();
    let mut section = |name: String, body: &[u8]| {
        bytes.extend_from_slice(&u32::try_from(name.len()).unwrap().to_le_bytes());
        bytes.extend_from_slice(name.as_bytes());
        bytes.extend_from_slice(&u32::try_from(body.len()).unwrap().to_le_bytes());
        bytes.extend_from_slice(body);
    };
    section("head".into(), &checkpoint.head);
    for (page, body) in &checkpoint.pages {
        section(format!("page {page}"), body);
    }
    section("rows".into(), rows.join("\n").as_bytes());
    std::fs::write(path, bytes).unwrap();
}

fn read_fixture(path: &PathBuf) -> (Checkpoint, Vec<String>) {
    let bytes = std::fs::read(path).unwrap_or_else(|e| {
        panic!("{}: {e} (write the fixtures with SLUICE_WRITE_CHECKPOINT_FIXTURES=1)", path.display())
    });
    let (mut checkpoint, mut rows, mut at) = (Checkpoint::default(), Vec::new(), 0);
    let take = |at: &mut usize, n: usize| {
        let s = bytes.get(*at..*at + n).unwrap_or_else(|| panic!("{}: cut short", path.display()));
        *at += n;
        s
    };
    let len = |at: &mut usize| u32::from_le_bytes(take(at, 4).try_into().unwrap()) as usize;
    while at < bytes.len() {
        let n = len(&mut at);
        let name = String::from_utf8(take(&mut at, n).to_vec()).unwrap();
        let n = len(&mut at);
        let body = take(&mut at, n).to_vec();
        match name.split_once(' ') {
            _ if name == "head" => checkpoint.head = body,
            _ if name == "rows" => {
                rows = String::from_utf8(body).unwrap().lines().map(str::to_owned).collect();
            }
            Some(("page", page)) => {
                checkpoint.pages.insert(page.parse().unwrap(), body);
            }
            _ => panic!("{}: unknown section {name}", path.display()),
        }
    }
    (checkpoint, rows)
}

#[test]
fn checkpoints_written_by_an_earlier_build_restore_and_go_on_as_they_did() {
    let write = std::env::var_os("SLUICE_WRITE_CHECKPOINT_FIXTURES").is_some();
    let stages = stages();
    assert!(stages.len() >= CASES.len(), "every case plans a stateful stage: {}", stages.len());
    let mut problems = Vec::new();
    let mut restored = 0;
    for (name, plan) in &stages {
        for kind in KINDS {
            let path = dir().join(format!("{name}.{kind:?}.bin").to_lowercase());
            if write {
                let checkpoint = checkpoint(plan, kind);
                let rows = after(plan, kind, &checkpoint);
                std::fs::create_dir_all(dir()).unwrap();
                write_fixture(&path, &checkpoint, &rows);
                continue;
            }
            let (checkpoint, expected) = read_fixture(&path);
            let got = after(plan, kind, &checkpoint);
            restored += 1;
            if got != expected {
                let first =
                    got.iter().zip(&expected).position(|(a, b)| a != b).unwrap_or(got.len().min(expected.len()));
                problems.push(format!(
                    "{name} ({kind:?}): {} rows, the earlier build emitted {}; first difference at row {first}: \
                     {:?} vs {:?}",
                    got.len(),
                    expected.len(),
                    got.get(first),
                    expected.get(first)
                ));
            }
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
    assert!(write || restored == stages.len() * KINDS.len());
}

/// The fixtures are not stale: the checkpoint this build takes from the
/// same input holds what the committed one holds — the head this build
/// writes again once it restored the committed one (an earlier build may
/// have ordered a map differently), and the same pages byte for byte. A
/// format change must come with a new tag and fresh fixtures, never
/// silently.
#[test]
fn this_build_writes_the_checkpoints_the_fixtures_hold() {
    if std::env::var_os("SLUICE_WRITE_CHECKPOINT_FIXTURES").is_some() {
        return;
    }
    let mut differ = Vec::new();
    for (name, plan) in stages() {
        for kind in [Kind::Whole, Kind::Paged] {
            let (committed, _) = read_fixture(&dir().join(format!("{name}.{kind:?}.bin").to_lowercase()));
            let fresh = checkpoint(&plan, kind);
            let engine = restored(&plan, kind, &committed);
            let again = if kind == Kind::Whole || !engine.paged() { engine.snapshot() } else { engine.snapshot_head() };
            if again.unwrap() != fresh.head || fresh.pages != committed.pages {
                differ.push(format!("{name} ({kind:?})"));
            }
        }
    }
    assert!(differ.is_empty(), "checkpoints now written differently: {}", differ.join(", "));
}
