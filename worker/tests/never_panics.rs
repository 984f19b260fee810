//! "Never a panic on any input string": the planner is fed random token
//! soup built from the SQL surface (keywords, functions, the schema's
//! columns, operators, extreme literals), and every query that plans is run
//! over records holding extreme values. Each must end in `Ok` or a clean
//! error. The operator plans every StreamJob's SQL, so a panic here would
//! take the operator down with one bad manifest.

// Test support code: failing loudly is its job.
#![allow(clippy::panic, clippy::expect_used, clippy::unwrap_used)]

use std::sync::Arc;

use proptest::prelude::*;

#[path = "support/fixtures.rs"]
mod fixtures;
mod support;
use sluice_crds::ColumnType;
use sluice_engine::{Engine, EngineOptions, Output};
use sluice_formats::decode::JsonDecoder;
use sluice_plan::DataType;
use sluice_plan::EmittedRows;
use sluice_plan::{Batch, Column};
use sluice_sql::plan_query;

const TOKENS: &[&str] = &[
    "SELECT",
    "FROM",
    "t",
    "WHERE",
    "GROUP",
    "BY",
    "HAVING",
    "AS",
    "x",
    ",",
    "(",
    ")",
    "*",
    "+",
    "-",
    "/",
    "%",
    "=",
    "<>",
    "<",
    ">=",
    "AND",
    "OR",
    "NOT",
    "IS",
    "NULL",
    "CASE",
    "WHEN",
    "THEN",
    "ELSE",
    "END",
    "CAST",
    "BIGINT",
    "DOUBLE",
    "VARCHAR",
    "TIMESTAMP",
    "BOOLEAN",
    "LIKE",
    "'%a_'",
    "IN",
    "BETWEEN",
    "COALESCE",
    "UPPER",
    "LOWER",
    "CONCAT",
    "SUBSTRING",
    "LENGTH",
    "TRIM",
    "ABS",
    "ROUND",
    "FLOOR",
    "CEIL",
    "EXTRACT",
    "YEAR",
    "HOUR",
    "COUNT",
    "SUM",
    "MIN",
    "MAX",
    "AVG",
    "STDDEV",
    "DISTINCT",
    "OVER",
    "PARTITION",
    "ORDER",
    "ROWS",
    "BETWEEN",
    "PRECEDING",
    "CURRENT",
    "ROW",
    "UNBOUNDED",
    "FOLLOWING",
    "WINDOW",
    "TUMBLING",
    "HOPPING",
    "SESSION",
    "INTERVAL",
    "'1'",
    "MINUTE",
    "SECOND",
    "EMIT",
    "CHANGES",
    "FINAL",
    "BUFFER",
    "window_start",
    "window_end",
    "TUMBLE",
    "HOP",
    "s",
    "d",
    "n",
    "b",
    "ts",
    "0",
    "1",
    "-1",
    "99",
    "9223372036854775807",
    "-9223372036854775808",
    "1e308",
    "0.5",
    "''",
    "'abc'",
    "TRUE",
    "FALSE",
    ";",
    ".",
    "t.n",
    "\"n\"",
    "->",
    "[",
    "]",
    "::",
];

/// A query that starts like one and then goes anywhere.
fn soup() -> impl Strategy<Value = String> {
    let prefix = prop::sample::select(vec![
        "",
        "SELECT ",
        "SELECT n, ",
        "SELECT s, COUNT(*) FROM t GROUP BY s ",
        "SELECT s, SUM(n) OVER (PARTITION BY s ORDER BY ts ROWS BETWEEN ",
        "SELECT s, window_start, COUNT(*) FROM t GROUP BY s WINDOW ",
    ]);
    let body = prop::collection::vec(prop::sample::select(TOKENS.to_vec()), 0..24);
    (prefix, body).prop_map(|(p, b)| format!("{p}{}", b.join(" ")))
}

/// Well-formed queries over every column, with random expressions in them.
fn shaped() -> impl Strategy<Value = String> {
    let operand = prop::sample::select(vec![
        "n",
        "d",
        "s",
        "ts",
        "b",
        "m",
        "w",
        "0",
        "-1",
        "0.001",
        "123456789012345678901234567890",
        "9223372036854775807",
        "-9223372036854775808",
        "1e308",
        "'x'",
        "NULL",
    ]);
    let func = prop::sample::select(vec![
        "ABS({})",
        "ROUND({}, -2)",
        "ROUND({}, 2)",
        "FLOOR({})",
        "CEIL({})",
        "-{}",
        "{} * {}",
        "{} + {}",
        "{} - {}",
        "{} / {}",
        "{} % {}",
        "SUBSTRING(s, {}, {})",
        "SUBSTRING(s FROM {} FOR {})",
        "UPPER(CAST({} AS VARCHAR))",
        "CAST({} AS BIGINT)",
        "CAST({} AS TIMESTAMP)",
        "EXTRACT(YEAR FROM {})",
        "COALESCE({}, {})",
        "LENGTH(CAST({} AS VARCHAR))",
        "POWER({}, {})",
        "SQRT({})",
        "EXP({})",
        "LN({})",
        "LOG10({})",
        "SIGN({})",
        "LEFT(s, {})",
        "RIGHT(s, {})",
        "REPEAT(s, {})",
        "SPLIT_PART(s, CAST({} AS VARCHAR), {})",
        "REVERSE(CAST({} AS VARCHAR))",
        "STRPOS(s, CAST({} AS VARCHAR))",
        "JSON_QUERY(CAST({} AS VARCHAR), '$.a[0]')",
        "REGEXP_REPLACE(CAST({} AS VARCHAR), '(.)(.*)', '$2$1${9}')",
        "MD5(CAST({} AS VARCHAR))",
        "SHA256(CAST({} AS VARCHAR))",
        "SHA2(CAST({} AS VARCHAR), 512)",
        "SHA2(CAST({} AS VARCHAR), {})",
        "TIMESTAMPADD(MONTH, {}, {})",
        "TIMESTAMPADD(YEAR, {}, ts)",
        "TIMESTAMPADD(MILLISECOND, {}, {})",
        "TIMESTAMPADD(WEEK, {}, {})",
        "TIMESTAMPDIFF(MONTH, {}, {})",
        "TIMESTAMPDIFF(YEAR, {}, ts)",
        "TIMESTAMPDIFF(MILLISECOND, {}, {})",
        "CAST({} AS TIMESTAMP) AT TIME ZONE 'Europe/Paris'",
        "TO_UTC_TIMESTAMP(CAST({} AS TIMESTAMP), 'America/New_York')",
        "CONVERT_TZ(CAST({} AS TIMESTAMP), '+05:30', 'Asia/Tokyo')",
        "INITCAP(CAST({} AS VARCHAR))",
        "CAST({} AS DECIMAL(18, 4)) * CAST({} AS DECIMAL(3, 3))",
        "CAST({} AS DECIMAL(18, 0)) / CAST({} AS DECIMAL(18, 18))",
        "ROUND(CAST({} AS DECIMAL(9, 2)), {})",
        "GREATEST(m, {}, {})",
        "CAST({} AS DECIMAL(38, 10)) * CAST({} AS DECIMAL(38, 10))",
        "CAST({} AS DECIMAL(38, 0)) / CAST({} AS DECIMAL(38, 38))",
        "w % {}",
        "GREATEST(w, {}, {})",
    ]);
    (func, operand.clone(), operand).prop_map(|(f, a, b)| {
        let e = f.replacen("{}", a, 1).replacen("{}", b, 1);
        format!("SELECT {e} AS v FROM t")
    })
}

/// Aggregations and windows with random arguments, frame bounds and
/// intervals in every slot a user can fill.
fn clauses() -> impl Strategy<Value = String> {
    let operand = prop::sample::select(vec![
        "n",
        "d",
        "s",
        "ts",
        "b",
        "0",
        "-1",
        "99",
        "1000001",
        "9223372036854775807",
        "1.5",
        "'x'",
        "NULL",
        "n + 1",
        "m",
        "m * m",
        "w",
        "w * w",
    ]);
    let agg = prop::sample::select(vec!["SUM", "AVG", "MIN", "MAX", "COUNT", "STDDEV"]);
    let interval = prop::sample::select(vec![
        "INTERVAL '1' SECOND",
        "INTERVAL '0' SECOND",
        "INTERVAL '-1' MINUTE",
        "INTERVAL '1000000000000' DAY",
        "INTERVAL 'x' HOUR",
        "INTERVAL '1' YEAR",
        "n",
    ]);
    let shape = prop::sample::select(vec![
        "SELECT s, {agg}({a}) OVER (PARTITION BY s ORDER BY ts ROWS BETWEEN {b} PRECEDING AND CURRENT ROW) AS v FROM t",
        "SELECT s, {agg}({a}) OVER (ROWS WINDOW BUFFER {b} ROWS PARTITION BY s ORDER BY ts) AS v FROM t",
        "SELECT s, {agg}({a}) AS v FROM t GROUP BY s HAVING {agg}({b}) > 0",
        "SELECT s, window_start, {agg}({a}) AS v FROM t GROUP BY s WINDOW TUMBLING (ts, {i})",
        "SELECT s, window_start, {agg}({a}) AS v FROM t GROUP BY s, TUMBLE(ts AT TIME ZONE 'Australia/Lord_Howe', {i})",
        "SELECT s, window_start, {agg}({a}) AS v FROM t GROUP BY s WINDOW HOPPING (ts, {i}, {j})",
        "SELECT s, window_start, {agg}({a}) AS v FROM t GROUP BY s, HOP(ts AT TIME ZONE 'Australia/Lord_Howe', {i}, {j})",
        "SELECT s, window_end, {agg}({a}) AS v FROM t GROUP BY s WINDOW SESSION (ts, {i}) EMIT CHANGES",
        "SELECT {a}, COUNT(DISTINCT {b}) AS v FROM t GROUP BY {a}",
    ]);
    (shape, agg, operand.clone(), operand, interval.clone(), interval).prop_map(|(shape, agg, a, b, i, j)| {
        shape.replace("{agg}", agg).replace("{a}", a).replace("{b}", b).replace("{i}", i).replace("{j}", j)
    })
}

/// Plans `sql` over both event-time types; where it plans, runs it over the
/// extreme records.
fn exercise(sql: &str) {
    exercise_with(sql, ColumnType::Timestamp);
    exercise_with(sql, ColumnType::Bigint);
}

fn exercise_with(sql: &str, ts: ColumnType) {
    if let Ok(plan) = plan_query(sql, &[fixtures::all_types_source(ts)]) {
        fixtures::run_on_extreme_records(plan);
    }
}

proptest! {
    #![proptest_config(support::deterministic(2_000))]

    #[test]
    fn token_soup_never_panics(sql in soup()) {
        exercise(&sql);
    }

    #[test]
    fn expressions_over_extreme_values_never_panic(sql in shaped()) {
        exercise(&sql);
    }

    #[test]
    fn clauses_with_odd_arguments_never_panic(sql in clauses()) {
        exercise(&sql);
    }

    #[test]
    fn arbitrary_strings_never_panic(sql in "\\PC{0,80}") {
        exercise(&sql);
    }
}

/// The case that once panicked the planner: a column as a ROWS frame bound.
#[test]
fn column_as_frame_bound_is_an_error() {
    let sql = "SELECT s, SUM(n) OVER (PARTITION BY s ORDER BY ts ROWS BETWEEN n PRECEDING AND CURRENT ROW) AS x FROM t";
    let e = plan_query(sql, &[fixtures::all_types_source(ColumnType::Timestamp)]).unwrap_err().to_string();
    assert!(e.contains("ROWS n PRECEDING needs a whole number"), "{e}");
    assert!(e.contains("line 1, column"), "the error names its position: {e}");
}

/// The record that once wedged a core: a bigint event time near `i64::MIN`
/// under a hopping window. The decoder makes it a dead letter; and the
/// engine, handed such a time directly, makes the row late instead of
/// overflowing window arithmetic.
#[test]
fn event_time_near_i64_min_under_a_hopping_window() {
    let sql = "SELECT s, window_start, COUNT(*) AS c FROM t GROUP BY s \
               WINDOW HOPPING (ts, INTERVAL '10' SECOND, INTERVAL '1' SECOND)";
    let plan = Arc::new(plan_query(sql, &[fixtures::all_types_source(ColumnType::Bigint)]).unwrap());
    let mut decoder = JsonDecoder::new(&plan);
    let mut batch = decoder.new_batch(4);
    let e = decoder.decode(br#"{"s":"x","ts":-9223372036854770000}"#, &mut batch).unwrap_err();
    assert!(e.0.contains("field `ts`") && e.0.contains("ms from the epoch"), "{e}");
    for ts in [i64::MIN, i64::MIN + 1, -9_223_372_036_854_770_000, i64::MAX] {
        let mut engine = Engine::new(Arc::clone(&plan), EngineOptions::default());
        let mut batch = decoder.new_batch(4);
        decoder.decode(br#"{"s":"x","ts":0}"#, &mut batch).unwrap();
        batch.columns[4] = Column::ints(DataType::Bigint, vec![ts]);
        let mut out = Counting::default();
        engine.process(&mut batch, &mut out).unwrap();
        engine.finish(&mut out).unwrap();
        assert!(out.rows > 0 || out.late == 1, "ts {ts}: counted in a window or late, not lost");
    }
}

#[derive(Default)]
struct Counting {
    rows: usize,
    late: usize,
}
impl Output for Counting {
    fn rows(&mut self, rows: &EmittedRows<'_>) -> Result<(), sluice_engine::Error> {
        self.rows += rows.selection.len();
        Ok(())
    }
    fn late(&mut self, _: &Batch, late: &[u32]) -> Result<(), sluice_engine::Error> {
        self.late += late.len();
        Ok(())
    }
}
