//! Plan fingerprints are pinned: a checkpoint is restored only into a plan
//! with the same fingerprint, so a build that fingerprints the same query
//! differently makes every stateful job unrestorable after an upgrade.
//! If this test fails, the plan's serialised form changed: either keep it
//! as it was, or make the change deliberately (a new fingerprint scheme
//! and a note in the release's upgrade instructions that state resets).

// Test code: failing loudly is its job.
#![allow(clippy::expect_used, clippy::unwrap_used)]

use sluice_crds::{ColumnType, EventTimeSpec, SourceSpec};
use sluice_plan::plan_fingerprint;
use sluice_sql::plan_query;

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
