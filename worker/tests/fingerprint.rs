//! Plan and state fingerprints are pinned: a checkpoint is restored only
//! into a plan that keeps the same state (the same state fingerprint), so a
//! build that fingerprints the same query differently makes every stateful
//! job unrestorable after an upgrade. And the state fingerprint tells
//! compatible query edits (filters, outputs, layout) from incompatible ones
//! (keys, aggregates, windows).
//! If this test fails, the plan's serialised form changed: either keep it
//! as it was, or make the change deliberately (a new fingerprint scheme
//! and a note in the release's upgrade instructions that state resets).

// Test code: failing loudly is its job.
#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::sync::Arc;

use sluice_crds::{ColumnType, EventTimeSpec, SourceSpec};
use sluice_engine::{Engine, EngineOptions};
use sluice_plan::{plan_fingerprint, state_difference, state_fingerprint, state_layout};
use sluice_sql::{plan_dataflow, plan_query};

fn trades() -> SourceSpec {
    SourceSpec {
        event_time: Some(EventTimeSpec { column: "trade_time".into(), watermark_delay_millis: 5_000 }),
        partition_key: vec!["trader_id".into()],
        ..SourceSpec::table(
            "trades",
            &[
                ("trader_id", ColumnType::String, true),
                ("symbol", ColumnType::String, false),
                ("price", ColumnType::Double, false),
                ("quantity", ColumnType::Bigint, false),
                ("trade_time", ColumnType::Timestamp, true),
            ],
        )
    }
}

const PINNED: &[(&str, u64)] = &[
    ("SELECT trader_id, price * quantity AS value FROM trades WHERE quantity > 10", 0x5021_aa79_fddd_802d),
    ("SELECT trader_id, COUNT(*) AS n, SUM(price) AS total FROM trades GROUP BY trader_id", 0xdadd_ed9b_4066_8ed4),
    (
        "SELECT trader_id, window_start, AVG(price) AS p FROM trades GROUP BY trader_id \
         WINDOW TUMBLING (trade_time, INTERVAL '1' MINUTE)",
        0x82ba_aa7b_ee6c_4fa3,
    ),
    (
        "SELECT trader_id, AVG(price) OVER (PARTITION BY trader_id ORDER BY trade_time \
         ROWS BETWEEN 9 PRECEDING AND CURRENT ROW) AS avg10 FROM trades",
        0x5c21_cd6c_f998_2e7b,
    ),
];

#[test]
fn fingerprints_of_known_plans_are_pinned() {
    let got: Vec<(&str, u64)> =
        PINNED.iter().map(|(sql, _)| (*sql, plan_fingerprint(&plan_query(sql, &[trades()]).unwrap()))).collect();
    assert_eq!(got, PINNED, "plan fingerprints changed (see this file's header)");
}

#[test]
fn the_fingerprint_tells_plans_apart() {
    let a = plan_fingerprint(&plan_query(PINNED[1].0, &[trades()]).unwrap());
    let b = plan_fingerprint(&plan_query(&PINNED[1].0.replace("SUM", "MAX"), &[trades()]).unwrap());
    assert_ne!(a, b);
}

/// The state fingerprints of the same plans (the stateless one keeps none).
const PINNED_STATE: &[u64] =
    &[0xf6cf_a25d_86d8_4057, 0x551a_ad44_3f07_af1e, 0xac02_79d4_f802_e30b, 0x82d2_839e_f297_3750];

#[test]
fn state_fingerprints_of_known_plans_are_pinned() {
    let got: Vec<u64> =
        PINNED.iter().map(|(sql, _)| state_fingerprint(&plan_query(sql, &[trades()]).unwrap())).collect();
    let hex: Vec<String> = got.iter().map(|f| format!("0x{f:016x}")).collect();
    assert_eq!(got, PINNED_STATE, "state fingerprints changed (see this file's header): {hex:?}");
}

fn state(sql: &str, source: &SourceSpec) -> u64 {
    state_fingerprint(&plan_query(sql, std::slice::from_ref(source)).unwrap())
}

const GROUP_BY: &str = "SELECT trader_id, COUNT(*) AS n, SUM(price) AS total FROM trades GROUP BY trader_id";

/// What users change in a running query without meaning to change its
/// state: whitespace and comments, filters, the SELECT list, HAVING, and
/// the declared columns it does not aggregate.
#[test]
fn filters_outputs_and_layout_keep_the_state() {
    let base = state(GROUP_BY, &trades());
    let same = [
        "-- per trader\nSELECT  trader_id,\n COUNT(*) AS n,   SUM(price) AS total\nFROM trades /* all */ GROUP BY trader_id",
        "SELECT trader_id, COUNT(*) AS n, SUM(price) AS total FROM trades WHERE quantity > 0 GROUP BY trader_id",
        "SELECT trader_id, COUNT(*) AS trades, SUM(price) AS total, COUNT(*) * 2 AS twice FROM trades GROUP BY trader_id",
        "SELECT trader_id, COUNT(*) AS n FROM trades GROUP BY trader_id HAVING SUM(price) > 1",
        "SELECT UPPER(trader_id) AS t, COUNT(*) AS n FROM trades GROUP BY trader_id HAVING SUM(price) > 1",
    ];
    for sql in same {
        assert_eq!(state(sql, &trades()), base, "{sql}");
    }
    // A column declared before the ones the query reads moves their
    // positions, not their meaning.
    let mut wider = trades();
    wider.schema.columns.insert(0, sluice_crds::ColumnSpec::field("venue", ColumnType::String, false));
    assert_eq!(state(GROUP_BY, &wider), base, "a new column elsewhere in the schema");
}

#[test]
fn keys_aggregates_and_windows_change_the_state() {
    let base = state(GROUP_BY, &trades());
    let different = [
        GROUP_BY.replace("SUM(price)", "MAX(price)"),
        GROUP_BY.replace("SUM(price)", "SUM(quantity)"),
        GROUP_BY.replace("GROUP BY trader_id", "GROUP BY trader_id, symbol"),
        // The accumulators are kept in the order the query computes them.
        "SELECT trader_id, SUM(price) AS total, COUNT(*) AS n FROM trades GROUP BY trader_id".into(),
        "SELECT trader_id, COUNT(*) AS n FROM trades GROUP BY trader_id".into(),
        format!("{GROUP_BY} WINDOW TUMBLING (trade_time, INTERVAL '1' MINUTE)"),
    ];
    for sql in &different {
        assert_ne!(state(sql, &trades()), base, "{sql}");
    }
    let minute = format!("{GROUP_BY} WINDOW TUMBLING (trade_time, INTERVAL '1' MINUTE)");
    let hour = minute.replace("MINUTE", "HOUR");
    assert_ne!(state(&minute, &trades()), state(&hour, &trades()));
}

/// Why an upgrade is refused, in words a user can act on.
#[test]
fn the_difference_names_the_operator_and_the_parts_that_differ() {
    let layout = |sql: &str| state_layout(&plan_dataflow(sql, &[trades()], 1).unwrap());
    let before = layout(GROUP_BY);
    let after = layout(&GROUP_BY.replace("SUM(price)", "MAX(price)"));
    let why = state_difference(&before, &after);
    assert!(why.starts_with("stage 0 (aggregate): aggregates"), "{why}");
    assert!(why.contains("Sum") && why.contains("Max") && why.contains("price"), "{why}");
    assert!(!why.contains("group_exprs"), "the keys did not change: {why}");
    let keys =
        state_difference(&before, &layout(&GROUP_BY.replace("GROUP BY trader_id", "GROUP BY trader_id, symbol")));
    assert!(keys.contains("group_exprs [trader_id] → [trader_id,symbol]"), "{keys}");
    let gone = state_difference(&before, &layout("SELECT trader_id FROM trades"));
    assert_eq!(gone, "stage 0 kept aggregate state, the new query keeps none there");
    assert_eq!(state_difference(&before, &before), "the state is the same");
}

/// The engine restores a checkpoint into a compatible query, and refuses
/// one whose state differs, saying how to start over.
#[test]
fn an_engine_restores_state_into_a_compatible_query_only() {
    let engine = |sql: &str| Engine::new(Arc::new(plan_query(sql, &[trades()]).unwrap()), EngineOptions::default());
    let snapshot = engine(GROUP_BY).snapshot().unwrap();
    let filtered = GROUP_BY.replace("FROM trades", "FROM trades WHERE quantity > 0");
    engine(&filtered).restore(&snapshot).unwrap();
    let e = engine(&GROUP_BY.replace("SUM(price)", "MAX(price)")).restore(&snapshot).unwrap_err().to_string();
    assert!(e.contains("keeps different state") && e.contains("spec.upgradeMode to Fresh"), "{e}");
}
