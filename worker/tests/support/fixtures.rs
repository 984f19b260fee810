//! Sources, records and checks shared by the never-panics properties, the decoder-path checks
//! and the fuzzer (`examples/fuzz.rs`), so the three exercise the same
//! schemas. Included with `#[path]`; each user needs only some of it.
#![allow(dead_code)]

use std::sync::Arc;

use sluice_crds::{ColumnType, EventTimeSpec, SourceSpec};
use sluice_engine::{EmittedRows, Engine, EngineOptions, Output};
use sluice_formats::decode::JsonDecoder;
use sluice_plan::{Batch, Plan};

/// Every type once; the event time `ts` a timestamp or a bigint (epoch
/// ms): a bigint takes any i64 from JSON, so both must be exercised.
pub fn all_types_source(ts: ColumnType) -> SourceSpec {
    SourceSpec {
        event_time: Some(EventTimeSpec { column: "ts".into(), watermark_delay_millis: 1_000 }),
        ..SourceSpec::table(
            "t",
            &[
                ("s", ColumnType::String, false),
                ("d", ColumnType::Double, false),
                ("n", ColumnType::Bigint, false),
                ("b", ColumnType::Boolean, false),
                ("ts", ts, false),
            ],
        )
    }
}

/// The decoders' source: a required column, every type, and a declared
/// column the query does not read (type-checked only).
pub fn decoder_source() -> SourceSpec {
    SourceSpec::table(
        "t",
        &[
            ("id", ColumnType::Bigint, true),
            ("price", ColumnType::Double, false),
            ("name", ColumnType::String, false),
            ("ts", ColumnType::Timestamp, false),
            ("flag", ColumnType::Boolean, false),
            ("unread", ColumnType::Bigint, false),
            ("note", ColumnType::String, false),
            // A text column the query does not read: checked, not kept.
            ("memo", ColumnType::String, false),
        ],
    )
}

/// The query the decoders run over [`decoder_source`].
pub const DECODER_SQL: &str = "SELECT id, price, name, ts, flag, note FROM t";

/// Records at the edges of every type over [`all_types_source`], and some
/// the decoder must reject.
pub const EXTREME_RECORDS: &[&str] = &[
    r#"{"s":"abc","d":1.5,"n":1,"b":true,"ts":0}"#,
    r#"{"s":"","d":-1e308,"n":-9223372036854775808,"b":false,"ts":-8640000000000000}"#,
    r#"{"s":"ÄÖü ß","d":1e308,"n":9223372036854775807,"b":null,"ts":8640000000000000}"#,
    r#"{"s":null,"d":null,"n":0,"ts":-9223372036854775808}"#,
    r#"{"s":"x","d":0.0,"n":-1,"ts":9223372036854775807}"#,
    r#"{"s":"x","d":0.0,"n":-1,"ts":-9223372036854770000}"#,
    r#"{"s":"x","d":0.0,"n":-1,"ts":9223372036854770000}"#,
    r#"{"n":"not a number"}"#,
    r#"not json"#,
];

struct Discard;
impl Output for Discard {
    fn rows(&mut self, _: &EmittedRows<'_>) -> Result<(), sluice_engine::Error> {
        Ok(())
    }
    fn late(&mut self, _: &Batch, _: &[u32]) -> Result<(), sluice_engine::Error> {
        Ok(())
    }
}

/// Runs `plan` over [`EXTREME_RECORDS`] to the end of input. What it
/// returns does not matter; that it returns (no panic, no hang) does.
/// Records the decoder rejects are dead letters, not panics.
pub fn run_on_extreme_records(plan: Plan) {
    let plan = Arc::new(plan);
    let mut engine = Engine::new(Arc::clone(&plan), EngineOptions::default());
    let mut decoder = JsonDecoder::new(&plan);
    let mut batch = decoder.new_batch(16);
    for r in EXTREME_RECORDS {
        let _ = decoder.decode(r.as_bytes(), &mut batch);
    }
    let _ = engine.process(&mut batch, &mut Discard);
    let _ = engine.finish(&mut Discard);
}

/// Every cell of `batch`, as text precise to the bit (so -0.0 ≠ 0.0).
pub fn cells(batch: &Batch) -> Vec<String> {
    let mut out = Vec::new();
    for row in 0..batch.len {
        for c in &batch.columns {
            if c.len() > row {
                out.push(format!("{:?}", c.scalar(row)));
            }
        }
    }
    out
}
