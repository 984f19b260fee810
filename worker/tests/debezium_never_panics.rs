//! The Debezium decoder on hostile input: change events cut, flipped and
//! spliced, and arbitrary bytes. It must never panic, and a record is
//! either one whole row or none. (CI runs a fixed seed.)

// Test code: failing loudly is its job.
#![allow(clippy::panic, clippy::expect_used, clippy::unwrap_used)]

use proptest::prelude::*;

mod support;
use sluice_crds::{ColumnType, SourceSpec};
use sluice_formats::decode::{DebeziumDecoder, RecordMeta};
use sluice_plan::Column;

fn decoder() -> DebeziumDecoder {
    let source = SourceSpec::table(
        "customers",
        &[
            ("id", ColumnType::Bigint, true),
            ("name", ColumnType::String, false),
            ("__deleted", ColumnType::Boolean, false),
            ("op", ColumnType::String, false),
            ("source.table", ColumnType::String, false),
            ("ts_ms", ColumnType::Timestamp, false),
        ],
    );
    let sql = r#"SELECT id, name, __deleted, op, "source.table", ts_ms FROM customers"#;
    DebeziumDecoder::new(&sluice_sql::plan_query(sql, &[source]).unwrap())
}

const EVENTS: &[&str] = &[
    r#"{"before":null,"after":{"id":1,"name":"Ann"},"source":{"table":"customers","ts_ms":5},"op":"c","ts_ms":1000}"#,
    r#"{"schema":{"type":"struct"},"payload":{"before":{"id":2},"after":null,"source":{"table":"c"},"op":"d","ts_ms":7}}"#,
    r#"{"op":"u","after":{ "id" : 3 , "name" : "a\"b" },"before":{"id":3}}"#,
    r#"{"op":"r","after":{}}"#,
];

fn check(payload: &[u8]) {
    let mut d = decoder();
    let mut batch = d.new_batch(4);
    let before: Vec<usize> = batch.columns.iter().map(Column::len).collect();
    match d.decode_record(payload, &RecordMeta::default(), &mut batch) {
        Ok(()) => {
            assert_eq!(batch.len, 1);
            assert!(batch.columns.iter().all(|c| c.len() == 1), "{payload:?}: one value per column");
        }
        Err(e) => {
            assert!(!e.0.is_empty());
            assert_eq!(batch.len, 0);
            let after: Vec<usize> = batch.columns.iter().map(Column::len).collect();
            assert_eq!(after, before, "{:?}: rolled back ({e})", String::from_utf8_lossy(payload));
        }
    }
}

proptest! {
    #![proptest_config(support::deterministic(3_000))]

    #[test]
    fn mutated_change_events_never_panic(
        event in 0usize..4,
        edits in prop::collection::vec((any::<usize>(), any::<u8>(), 0u8..3), 1..6),
    ) {
        let mut payload = EVENTS[event].as_bytes().to_vec();
        for (at, byte, kind) in edits {
            let i = at % (payload.len() + 1);
            match kind {
                0 if i < payload.len() => payload[i] = byte,
                1 => payload.insert(i, byte),
                _ => payload.truncate(i),
            }
        }
        check(&payload);
    }

    #[test]
    fn arbitrary_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..64)) {
        check(&bytes);
    }
}
