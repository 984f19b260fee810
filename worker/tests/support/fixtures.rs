//! Sources shared by the never-panics properties, the decoder-path checks
//! and the fuzzer (`examples/fuzz.rs`), so the three exercise the same
//! schemas. Included with `#[path]`; each user needs only some of it.
#![allow(dead_code)]

use sluice_crds::{ColumnType, EventTimeSpec, SourceSpec};

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
        ],
    )
}

/// The query the decoders run over [`decoder_source`].
pub const DECODER_SQL: &str = "SELECT id, price, name, ts, flag, note FROM t";
