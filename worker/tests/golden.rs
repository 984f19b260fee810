//! Golden SQL cases: `tests/golden/cases/*.yaml` hold a query, its source
//! schema and input records; `tests/golden/expected/*.json` hold the results
//! computed independently of Sluice by `tests/golden/oracle.py` (DuckDB runs
//! an equivalent "oracle" query over the same input).
//!
//! Every case runs at several batch sizes — results must not depend on where
//! batches split — and once more with each engine snapshotted and restored
//! between batches, which must not change anything either.
//!
//! A case is planned for as many partitions as its input has
//! (`sluice_sql::plan_dataflow`): when its state is keyed differently from
//! the source, the first stage's output crosses an in-process exchange
//! (Kafka's partitioner over the record keys) to the second stage's
//! engines, as it crosses a repartition topic on a cluster.

// Test support code: failing loudly is its job.
#![allow(clippy::panic, clippy::expect_used, clippy::unwrap_used)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::Deserialize;
use serde_json::Value as Json;
use sluice_crds::{ColumnSpec, EmitChangesMode, EventTimeSpec, LateRecordPolicy, SchemaSpec, SourceSpec, TableSpec};
use sluice_engine::{Engine, EngineOptions, Output};
use sluice_formats::decode::{BinaryDecoder, RowDecoder};
use sluice_formats::encode::{BinaryEncoder, EncodedRows, JsonEncoder, RowEncoder};
use sluice_plan::EmittedRows;
use sluice_plan::{Batch, Plan, StageOutput};
use sluice_sql::plan_dataflow;
use sluice_worker::runtime::exchange::UpstreamWatermarks;
use sluice_worker::runtime::topology::Topology;

#[path = "support/local_exchange.rs"]
mod local_exchange;
use local_exchange::{ExchangePartition, LocalExchange};

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Case {
    description: String,
    sql: String,
    #[serde(default)]
    oracle: Option<String>,
    #[serde(default)]
    oracle_late: Option<String>,
    #[serde(default)]
    compare: Compare,
    #[serde(default)]
    key: Vec<String>,
    source: Source,
    /// A second source (UNION ALL, joins), table `input2` to the oracle.
    #[serde(default)]
    second_source: Option<Source>,
    /// A third source (a join of a join), table `input3` to the oracle.
    #[serde(default)]
    third_source: Option<Source>,
    #[serde(default)]
    engine: EngineSettings,
    #[serde(default)]
    input: String,
    #[serde(default)]
    second_input: String,
    #[serde(default)]
    third_input: String,
    /// Long generated inputs (the Nexmark events) live in files beside the
    /// cases: `input_file: nexmark/bid.txt` is `input:` with that text.
    #[serde(default)]
    input_file: Option<String>,
    #[serde(default)]
    second_input_file: Option<String>,
    #[serde(default)]
    third_input_file: Option<String>,
    #[serde(default)]
    expect_error: Option<ExpectError>,
    /// The result must not depend on which source's rows the exchange
    /// delivers first (an event-time join): the case runs both ways.
    #[serde(default)]
    order_independent: bool,
    /// Every row emitted, interim ones included, has at least this value
    /// in each of these columns (a group is never shown empty).
    #[serde(default)]
    at_least: BTreeMap<String, i64>,
}

#[derive(Debug, Default, Deserialize, PartialEq, Eq, Clone, Copy)]
#[serde(rename_all = "snake_case")]
enum Compare {
    /// The output rows, as a multiset.
    #[default]
    Rows,
    /// The last row emitted for each `key` (coalesced EMIT CHANGES, whose
    /// intermediate rows depend on batching by design).
    FinalPerKey,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct Source {
    name: String,
    columns: Vec<ColumnSpec>,
    #[serde(default)]
    event_time: Option<EventTimeSpec>,
    #[serde(default)]
    partition_key: Vec<String>,
    /// Read as a table (`spec.sources[].table`).
    #[serde(default)]
    table: Option<TableSpec>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct EngineSettings {
    #[serde(default)]
    emit_changes: EmitChangesMode,
    #[serde(default)]
    late_records: LateRecordPolicy,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ExpectError {
    message: String,
    #[serde(default)]
    line: Option<u64>,
    #[serde(default)]
    column: Option<u64>,
}

#[derive(Debug, Deserialize)]
struct Expected {
    rows: Vec<Json>,
    dead_letter: usize,
    late: usize,
}

/// What one run of a case produced.
#[derive(Debug, Default)]
struct Outcome {
    rows: Vec<Json>,
    dead_letter: usize,
    late: usize,
    /// Rows under the case's `at_least`, as found.
    below_least: Vec<String>,
}

struct Collect<'a> {
    encoder: &'a RowEncoder,
    encoded: EncodedRows,
    late: usize,
}

impl Output for Collect<'_> {
    fn rows(&mut self, rows: &EmittedRows<'_>) -> Result<(), sluice_engine::Error> {
        self.encoder.encode(rows, &mut self.encoded);
        Ok(())
    }
    fn late(&mut self, _batch: &Batch, rows: &[u32]) -> Result<(), sluice_engine::Error> {
        self.late += rows.len();
        Ok(())
    }
}

fn golden_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/golden")
}

fn source_spec(s: &Source) -> SourceSpec {
    SourceSpec {
        schema: SchemaSpec { columns: s.columns.clone(), registry: None },
        event_time: s.event_time.clone(),
        partition_key: s.partition_key.clone(),
        table: s.table.clone(),
        ..SourceSpec::table(&s.name, &[])
    }
}

/// Input lines `<partition> <payload>`, grouped by partition in order.
fn partitions(input: &str) -> Vec<Vec<&str>> {
    let mut parts: Vec<Vec<&str>> = Vec::new();
    for line in input.lines().filter(|l| !l.trim().is_empty()) {
        let (p, payload) = line.split_once(' ').unwrap_or((line, ""));
        let p: usize = p.parse().unwrap_or_else(|_| panic!("input line must start with a partition number: {line}"));
        if parts.len() <= p {
            parts.resize_with(p + 1, Vec::new);
        }
        parts[p].push(payload);
    }
    parts
}

/// What one partition's engine emitted for one batch, and its watermark after it.
struct BatchResult {
    rows: EncodedRows,
    watermark: Option<i64>,
}

/// Runs one stage: an engine per input partition, over batches of at most
/// `batch_size` rows. A stage fed by an exchange advances its engines'
/// watermark to the minimum over the `upstreams` partitions once each has
/// reported one, at the rows where the markers arrived — within batches,
/// as on a cluster. Rows to and from an exchange are binary rows, as on a
/// cluster; `writer` names the values of the rows it reads.
#[allow(clippy::too_many_arguments)]
fn run_stage(
    case: &Case,
    plan: &Plan,
    output: StageOutput,
    writer: Option<&[String]>,
    inputs: &[ExchangePartition],
    upstreams: usize,
    batch_size: usize,
    snapshot_between_batches: bool,
    outcome: &mut Outcome,
) -> Vec<Vec<BatchResult>> {
    let plan = Arc::new(plan.clone());
    let names: Vec<String> = plan.outputs.iter().map(|o| o.name.clone()).collect();
    let keys: Vec<String> = plan.keys.iter().map(|o| o.name.clone()).collect();
    let encoder = match output {
        StageOutput::Sink => RowEncoder::Json(JsonEncoder::new(&names, &keys)),
        StageOutput::Exchange => RowEncoder::Binary(BinaryEncoder),
    };
    let options = EngineOptions {
        emit_changes: case.engine.emit_changes,
        late_records: case.engine.late_records,
        ..EngineOptions::default()
    };
    let mut results = Vec::new();
    for (p, input) in inputs.iter().enumerate() {
        let new_engine = || Engine::new(Arc::clone(&plan), EngineOptions { partition: p as i32, ..options.clone() });
        let mut engine = new_engine();
        let mut decoder = match writer {
            None => RowDecoder::json(&plan),
            Some(names) => RowDecoder::Binary(BinaryDecoder::new(&plan, names)),
        };
        let mut batch = decoder.new_batch(batch_size);
        let mut out = Collect { encoder: &encoder, encoded: EncodedRows::default(), late: 0 };
        let mut watermarks = UpstreamWatermarks::new(upstreams);
        let mut batches = Vec::new();
        let (mut row, mut mark) = (0, 0);
        let len = input.rows.len();
        let mut in_batch = Vec::new();
        while row < len || mark < input.marks.len() {
            let end = len.min(row + batch_size);
            // Markers that arrived before one of this batch's rows (or at
            // the end of the input), where the combined watermark moved.
            in_batch.clear();
            while let Some(&(at, from, w)) = input.marks.get(mark).filter(|m| m.0 < end || end == len) {
                if let Some(c) = watermarks.update(from, w) {
                    in_batch.push((at.saturating_sub(row), c));
                }
                mark += 1;
            }
            for i in row..end {
                if decoder.decode(input.rows.value(i), &mut batch).is_err() {
                    outcome.dead_letter += 1;
                }
            }
            let upstreams = input.upstreams.get(row..end).unwrap_or_default();
            row = end;
            engine
                .process_exchanged(&mut batch, &in_batch, upstreams, &mut out)
                .unwrap_or_else(|e| panic!("process: {e}"));
            batch.clear();
            if snapshot_between_batches {
                let state = engine.snapshot().expect("snapshot");
                engine = new_engine();
                engine.restore(&state).expect("restore");
            }
            let rows = std::mem::take(&mut out.encoded);
            batches.push(BatchResult { rows, watermark: engine.output_watermark() });
        }
        engine.finish(&mut out).expect("finish");
        outcome.late += out.late;
        batches.push(BatchResult { rows: out.encoded, watermark: None });
        results.push(batches);
    }
    results
}

/// A source's input lines as exchange partitions (payloads back to back).
fn source_input(text: &str) -> Vec<ExchangePartition> {
    partitions(text)
        .iter()
        .map(|lines| {
            let mut part = ExchangePartition::default();
            for line in lines {
                part.rows.values.extend_from_slice(line.as_bytes());
                part.rows.value_ends.push(part.rows.values.len());
            }
            part
        })
        .collect()
}

/// The case's sources, in order.
fn case_sources(case: &Case) -> Vec<SourceSpec> {
    let mut sources = vec![source_spec(&case.source)];
    sources.extend(case.second_source.as_ref().map(source_spec));
    sources.extend(case.third_source.as_ref().map(source_spec));
    sources
}

/// Runs a case. Through an exchange, the rows of the branches beside a
/// stage (a join's right side) arrive after the stage's own, unless
/// `branches_first`.
fn run(case: &Case, batch_size: usize, snapshot_between_batches: bool, branches_first: bool) -> Outcome {
    let sources = case_sources(case);
    let texts = [&case.input, &case.second_input, &case.third_input];
    let input_of = |name: &str| {
        let i =
            sources.iter().position(|s| s.name.eq_ignore_ascii_case(name)).unwrap_or_else(|| panic!("source {name}"));
        source_input(texts[i])
    };
    // The exchange has as many partitions as the largest source, as a
    // repartition topic gets by default.
    let n = texts.iter().map(|t| source_input(t).len()).max().unwrap_or(1).max(1);
    // Planned as the workers plan it: for the most partitions a source has.
    let dataflow =
        plan_dataflow(&case.sql, &sources, i32::try_from(n).unwrap()).unwrap_or_else(|e| panic!("plan: {e}"));
    // Wired as the worker wires it: each stage's inputs, its own first.
    let sizes: Vec<(String, i32)> = sources
        .iter()
        .zip(texts)
        .map(|(s, t)| (s.name.clone(), i32::try_from(source_input(t).len()).unwrap()))
        .collect();
    let partitions_of = |name: &str| sizes.iter().find(|(s, _)| s.eq_ignore_ascii_case(name)).map(|(_, n)| *n);
    let topology = Topology::new(&dataflow, &sources, partitions_of, None, |s| format!("exchange-{s}"))
        .unwrap_or_else(|e| panic!("topology: {e}"));
    assert_eq!(topology.exchange_partitions, i32::try_from(n).unwrap());
    let mut outcome = Outcome::default();
    let mut exchanged = Vec::new();
    for (index, stage) in dataflow.stages.iter().enumerate() {
        let mut stage_outcome = Outcome::default();
        let mut results = Vec::new();
        // The branches' partitions follow the stage's own as upstreams of
        // the same output; a branch over the stage's exchange reads the
        // stage's input.
        let mut own = None;
        for input in topology.stage(index) {
            let (writer, rows) = match input.reads_exchange() {
                true => (Some(input.writer.as_slice()), None),
                false => (None, Some(input_of(&input.plan.source.name))),
            };
            results.extend(run_stage(
                case,
                &input.plan,
                stage.output,
                writer,
                rows.as_deref().unwrap_or(&exchanged),
                input.upstreams.unwrap_or(0),
                batch_size,
                snapshot_between_batches,
                &mut stage_outcome,
            ));
            own.get_or_insert(results.len());
        }
        let own = own.unwrap_or(0);
        if index > 0 && own == results.len() {
            assert_eq!(stage_outcome.dead_letter, 0, "records from an exchange never fail to decode");
        }
        outcome.dead_letter += stage_outcome.dead_letter;
        outcome.late += stage_outcome.late;
        exchanged = Vec::new();
        match stage.output {
            StageOutput::Exchange => {
                let mut exchange = LocalExchange::new(n);
                let mut order: Vec<(usize, &Vec<BatchResult>)> = results.iter().enumerate().collect();
                if branches_first {
                    order.rotate_left(own);
                }
                for (from, batches) in order {
                    for b in batches {
                        exchange.route(u32::try_from(from).unwrap_or(u32::MAX), &b.rows);
                        if let Some(at) = b.watermark {
                            exchange.watermark(from, at);
                        }
                    }
                    // The end of a bounded input: nothing older can follow.
                    exchange.watermark(from, i64::MAX);
                }
                exchanged = (0..n).map(|p| exchange.take(p)).collect();
            }
            StageOutput::Sink => {
                for b in results.iter().flatten() {
                    for i in 0..b.rows.len() {
                        let row: Json = serde_json::from_slice(b.rows.value(i)).expect("valid JSON output");
                        for (column, least) in &case.at_least {
                            let value = row.get(column).and_then(Json::as_i64);
                            if value.is_none_or(|v| v < *least) && row.get("__deleted").is_none() {
                                outcome.below_least.push(format!("{column} below {least} in {row}"));
                            }
                        }
                        outcome.rows.push(row);
                    }
                }
            }
        }
    }
    if case.compare == Compare::FinalPerKey {
        let mut last: BTreeMap<String, Json> = BTreeMap::new();
        for row in outcome.rows {
            let k: Vec<String> = case.key.iter().map(|k| row.get(k).map(Json::to_string).unwrap_or_default()).collect();
            // A deletion (`{"__deleted":true, <key>}`) takes its key out.
            if row.get("__deleted") == Some(&Json::Bool(true)) {
                last.remove(&k.join("|"));
            } else {
                last.insert(k.join("|"), row);
            }
        }
        outcome.rows = last.into_values().collect();
    }
    outcome
}

/// Sort key: the row with floats rounded, so tiny differences sort alike.
fn sort_key(v: &Json) -> String {
    match v {
        Json::Number(n) if n.is_f64() => format!("{:.6e}", n.as_f64().unwrap_or(0.0)),
        Json::Object(m) => {
            let mut parts: Vec<String> = m.iter().map(|(k, v)| format!("{k}={}", sort_key(v))).collect();
            parts.sort();
            parts.join(",")
        }
        // Arrays keep their order; their numbers round as a row's do.
        Json::Array(v) => format!("[{}]", v.iter().map(sort_key).collect::<Vec<_>>().join(",")),
        other => other.to_string(),
    }
}

fn approx_equal(a: &Json, b: &Json) -> bool {
    match (a, b) {
        (Json::Number(x), Json::Number(y)) => {
            let (x, y) = (x.as_f64().unwrap_or(f64::NAN), y.as_f64().unwrap_or(f64::NAN));
            x == y || (x - y).abs() <= 1e-9 * x.abs().max(y.abs()).max(1.0)
        }
        (Json::Object(x), Json::Object(y)) => {
            x.len() == y.len() && x.iter().all(|(k, v)| y.get(k).is_some_and(|w| approx_equal(v, w)))
        }
        (Json::Array(x), Json::Array(y)) => x.len() == y.len() && x.iter().zip(y).all(|(a, b)| approx_equal(a, b)),
        _ => a == b,
    }
}

fn same_rows(actual: &[Json], expected: &[Json]) -> Result<(), String> {
    let mut a: Vec<&Json> = actual.iter().collect();
    let mut e: Vec<&Json> = expected.iter().collect();
    a.sort_by_key(|v| sort_key(v));
    e.sort_by_key(|v| sort_key(v));
    if a.len() != e.len() {
        return Err(format!("{} rows, expected {}", a.len(), e.len()));
    }
    for (x, y) in a.iter().zip(&e) {
        if !approx_equal(x, y) {
            return Err(format!("row {x} differs from expected {y}"));
        }
    }
    Ok(())
}

#[test]
fn golden_cases() {
    let mut files: Vec<PathBuf> = std::fs::read_dir(golden_dir().join("cases"))
        .expect("tests/golden/cases")
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "yaml"))
        .collect();
    files.sort();
    assert!(files.len() >= 10, "expected a full set of golden cases, found {}", files.len());
    let mut failures = Vec::new();
    for file in &files {
        let name = file.file_stem().and_then(|s| s.to_str()).unwrap_or_default().to_owned();
        let text = std::fs::read_to_string(file).expect("read case");
        let mut case: Case = serde_saphyr::from_str(&text).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert!(!case.description.is_empty(), "{name}: description");
        let read = |file: &Option<String>, inline: &mut String| {
            if let Some(f) = file {
                *inline = std::fs::read_to_string(golden_dir().join(f)).unwrap_or_else(|e| panic!("{name}: {f}: {e}"));
            }
        };
        read(&case.input_file, &mut case.input);
        read(&case.second_input_file, &mut case.second_input);
        read(&case.third_input_file, &mut case.third_input);
        if let Some(err) = &case.expect_error {
            // Planned as the workers and the operator plan it.
            match plan_dataflow(&case.sql, &case_sources(&case), 1) {
                Ok(_) => failures.push(format!("{name}: planned, but expected error {:?}", err.message)),
                Err(e) => {
                    let position_ok = err.line.is_none_or(|l| l == e.line) && err.column.is_none_or(|c| c == e.column);
                    if !e.message.contains(&err.message) || !position_ok {
                        failures.push(format!("{name}: got error `{e}`, expected {err:?}"));
                    }
                }
            }
            continue;
        }
        assert!(case.oracle.is_some(), "{name}: a case with input needs an oracle query");
        let _ = &case.oracle_late;
        let expected_file = golden_dir().join("expected").join(format!("{name}.json"));
        let expected: Expected = match std::fs::read_to_string(&expected_file) {
            Ok(t) => serde_json::from_str(&t).unwrap_or_else(|e| panic!("{name}: {e}")),
            Err(_) => {
                failures.push(format!("{name}: no expected output; run tests/golden/oracle.py"));
                continue;
            }
        };
        // A table's rows are delivered before the stream's, as when its
        // topic was filled before the job started.
        let table_first =
            [&case.second_source, &case.third_source].iter().any(|s| s.as_ref().is_some_and(|s| s.table.is_some()));
        let mut runs =
            vec![(1, false, table_first), (3, false, table_first), (1000, false, table_first), (3, true, table_first)];
        if case.order_independent {
            runs.extend([(1, false, !table_first), (3, true, !table_first)]);
        }
        for (batch_size, snapshot, second_first) in runs {
            let got = run(&case, batch_size, snapshot, second_first);
            let label = format!(
                "{name} (batch {batch_size}{}{})",
                if snapshot { ", snapshot/restore" } else { "" },
                if second_first { ", joined sources first" } else { "" }
            );
            if let Err(e) = same_rows(&got.rows, &expected.rows) {
                failures.push(format!("{label}: {e}"));
            }
            if let Some(first) = got.below_least.first() {
                failures.push(format!("{label}: {} emitted row(s) with {first}", got.below_least.len()));
            }
            if got.dead_letter != expected.dead_letter {
                failures.push(format!("{label}: {} dead-lettered, expected {}", got.dead_letter, expected.dead_letter));
            }
            if got.late != expected.late {
                failures.push(format!("{label}: {} late, expected {}", got.late, expected.late));
            }
        }
    }
    assert!(failures.is_empty(), "{} golden failure(s):\n{}", failures.len(), failures.join("\n"));
}

/// The Nexmark golden cases read generated events from
/// `tests/golden/nexmark/*.txt` (the oracle cannot run the generator):
/// 1000 events of the interleaved stream — 20 people, 60 auctions and 920
/// bids — on two partitions, people and auctions keyed by id, bids spread
/// round-robin. The files must be exactly what the generator makes, so a
/// change to the generator shows here first;
/// `SLUICE_BLESS=1 cargo test -p sluice-worker --test golden nexmark` writes
/// them (then rerun the oracle).
#[test]
fn nexmark_event_files_are_the_generators() {
    use sluice_crds::DatagenScenario;
    use sluice_worker::source::{partition_of, write_record};
    let kinds = [
        ("person", DatagenScenario::NexmarkPerson, 20, vec!["id".to_owned()]),
        ("auction", DatagenScenario::NexmarkAuction, 60, vec!["id".to_owned()]),
        ("bid", DatagenScenario::NexmarkBid, 920, vec![]),
    ];
    let bless = std::env::var_os("SLUICE_BLESS").is_some();
    for (name, scenario, count, key) in kinds {
        let (mut buf, mut scratch, mut k) = (Vec::new(), Vec::new(), Vec::new());
        let mut text = String::new();
        for i in 0..count {
            let p = partition_of(scenario, &key, 2, i, &mut scratch, &mut k);
            write_record(scenario, i, &mut buf);
            text.push_str(&format!("{p} {}\n", String::from_utf8(buf.clone()).unwrap()));
        }
        let file = golden_dir().join("nexmark").join(format!("{name}.txt"));
        if bless {
            std::fs::create_dir_all(file.parent().unwrap()).unwrap();
            std::fs::write(&file, &text).unwrap();
        }
        let committed = std::fs::read_to_string(&file).unwrap_or_default();
        assert!(committed == text, "{} is not what the generator makes: rerun with SLUICE_BLESS=1", file.display());
    }
}

/// `manifests/nexmark/q0.yaml` … `q22.yaml`: every query plans, or says
/// why not in its `sluice.dev/nexmark-unsupported` annotation and fails to
/// plan with exactly that reason (so the list in docs/benchmarks.md stays
/// true: a query that starts working fails here until it is moved). A
/// query with a golden case `nexmark_qN` runs there with the manifest's
/// SQL, checked against the DuckDB oracle.
#[test]
fn nexmark_manifests_plan_or_say_why_not() {
    let dir = golden_dir().join("../../../manifests/nexmark");
    let mut seen = 0;
    for q in 0..=22 {
        let file = dir.join(format!("q{q}.yaml"));
        let text = std::fs::read_to_string(&file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
        let job: sluice_crds::StreamJob = serde_saphyr::from_str(&text).unwrap_or_else(|e| panic!("q{q}: {e}"));
        job.spec.validate().unwrap_or_else(|e| panic!("q{q}: {e}"));
        let unsupported = job.metadata.annotations.as_ref().and_then(|a| a.get("sluice.dev/nexmark-unsupported"));
        let planned = plan_dataflow(&job.spec.sql, &job.spec.sources, 2);
        match (unsupported, planned) {
            (None, Ok(_)) => {}
            (None, Err(e)) => panic!("q{q} does not plan: {e}"),
            (Some(why), Ok(_)) => panic!("q{q} plans now: remove its annotation ({why}) and list it as supported"),
            (Some(why), Err(e)) => assert!(e.message.contains(why.as_str()), "q{q}: `{e}` is not `{why}`"),
        }
        let case = golden_dir().join("cases").join(format!("nexmark_q{q}.yaml"));
        if let Ok(case_text) = std::fs::read_to_string(&case) {
            let case: Case = serde_saphyr::from_str(&case_text).unwrap();
            let words = |s: &str| s.split_whitespace().collect::<Vec<_>>().join(" ");
            // q2's, q5's, q7's and q18's cases narrow the query to what small
            // inputs can check (their descriptions say how).
            if ![2, 5, 7, 18].contains(&q) {
                assert_eq!(words(&case.sql), words(&job.spec.sql), "q{q}: the golden case runs the manifest's query");
            }
            assert!(unsupported.is_none(), "q{q}: a golden case for an unsupported query");
        }
        seen += 1;
    }
    assert_eq!(seen, 23);
}
