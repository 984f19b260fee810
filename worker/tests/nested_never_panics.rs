//! The JSON decoder's nested columns on hostile records: random trees of
//! arrays, objects and scalars where arrays, maps and rows are declared,
//! nesting far deeper than any column, huge arrays, mismatched element
//! types. It must never panic or loop, and a record is one whole row
//! (every nested child column grown with it) or nothing. (CI runs a fixed
//! seed; `bash bench/fuzz.sh` explores at volume.)

// Test code: failing loudly is its job.
#![allow(clippy::panic, clippy::expect_used, clippy::unwrap_used)]

use proptest::prelude::*;

#[path = "support/fixtures.rs"]
mod fixtures;
mod support;
use sluice_formats::decode::JsonDecoder;
use sluice_plan::{Batch, Column, ColumnData};

/// Every child column's length, depth first: a record that fails must
/// leave all of them as they were.
fn lengths(c: &Column, out: &mut Vec<usize>) {
    out.push(c.len());
    match &c.data {
        ColumnData::List(l) => lengths(&l.values, out),
        ColumnData::Struct(s) => s.fields.iter().for_each(|f| lengths(f, out)),
        _ => {}
    }
}

fn all_lengths(b: &Batch) -> Vec<usize> {
    let mut out = Vec::new();
    b.columns.iter().for_each(|c| lengths(c, &mut out));
    out
}

fn check(d: &mut JsonDecoder, b: &mut Batch, record: &str) {
    let before = all_lengths(b);
    if let Err(e) = fixtures::decode_whole_row_or_none(b, |b| d.decode(record.as_bytes(), b)) {
        panic!("{record}: {e}");
    }
    if b.columns[0].len() == before[0] {
        assert_eq!(all_lengths(b), before, "{record}: a failed record left elements behind");
    }
    // A row that went in reads back whole.
    for c in &b.columns {
        if !c.is_empty() {
            let _ = c.scalar(c.len() - 1);
        }
    }
}

/// A JSON value of any shape, nested a few levels.
fn tree() -> impl Strategy<Value = String> {
    let leaf = prop_oneof![
        any::<i64>().prop_map(|v| v.to_string()),
        (-1e6f64..1e6).prop_map(|v| format!("{v}")),
        prop::sample::select(vec![
            "null",
            "true",
            "false",
            "\"\"",
            "\"a\"",
            "\"7\"",
            "\"-3\"",
            "\"1.50\"",
            "\"x\\\"y\"",
            "1e400",
            "\"2024-01-01T00:00:00Z\"",
            "9223372036854775808",
            "-0",
        ])
        .prop_map(str::to_owned),
    ];
    leaf.prop_recursive(5, 48, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(|v| format!("[{}]", v.join(","))),
            prop::collection::vec(
                (prop::sample::select(vec!["sku", "qty", "price", "tags", "k", "7", "a", "b", "c", "SKU", "t"]), inner),
                0..6
            )
            .prop_map(|v| {
                let fields: Vec<String> = v.into_iter().map(|(k, v)| format!("\"{k}\":{v}")).collect();
                format!("{{{}}}", fields.join(","))
            }),
        ]
    })
}

proptest! {
    #![proptest_config(support::deterministic(2_000))]

    #[test]
    fn random_trees_in_nested_columns_never_panic(
        items in tree(), attrs in tree(), codes in tree(), deep in tree(), r in tree(),
    ) {
        let mut d = fixtures::nested_json_decoder();
        let mut b = d.new_batch(4);
        for seed in fixtures::NESTED_JSON_SEEDS {
            check(&mut d, &mut b, seed);
        }
        let record = format!(r#"{{"id":1,"items":{items},"attrs":{attrs},"codes":{codes},"deep":{deep},"r":{r}}}"#);
        check(&mut d, &mut b, &record);
    }

    #[test]
    fn seeds_cut_and_flipped_never_panic(seed in 0usize..4, cut in any::<usize>(), flips in prop::collection::vec((any::<usize>(), any::<u8>()), 0..4)) {
        let mut bytes = fixtures::NESTED_JSON_SEEDS[seed].as_bytes().to_vec();
        for (at, b) in flips {
            let n = bytes.len();
            bytes[at % n] = b;
        }
        bytes.truncate(cut % (bytes.len() + 1));
        let mut d = fixtures::nested_json_decoder();
        let mut b = d.new_batch(4);
        let before = all_lengths(&b);
        if fixtures::decode_whole_row_or_none(&mut b, |b| d.decode(&bytes, b)).is_err() || (b.len == 0 && all_lengths(&b) != before) {
            panic!("{:?}", String::from_utf8_lossy(&bytes));
        }
    }
}

#[test]
fn every_seed_decodes() {
    let mut d = fixtures::nested_json_decoder();
    let mut b = d.new_batch(4);
    for seed in fixtures::NESTED_JSON_SEEDS {
        d.decode(seed.as_bytes(), &mut b).unwrap_or_else(|e| panic!("{seed}: {e}"));
    }
}

#[test]
fn nesting_past_any_column_and_huge_arrays_are_dead_letters_or_rows_never_crashes() {
    let mut d = fixtures::nested_json_decoder();
    let mut b = d.new_batch(4);
    // 100 000 levels of arrays: past serde_json's recursion limit.
    let deep = format!(r#"{{"id":1,"deep":{}1{}}}"#, "[".repeat(100_000), "]".repeat(100_000));
    assert!(d.decode(deep.as_bytes(), &mut b).is_err());
    // Arrays nested deeper than the column's three levels.
    let deeper = r#"{"id":1,"deep":[[[[1]]]]}"#;
    assert!(d.decode(deeper.as_bytes(), &mut b).unwrap_err().0.contains("deep[1][1][1]"));
    // A million elements: one row, bounded by the record's own bytes.
    let huge = format!(r#"{{"id":2,"deep":[[[{}]]]}}"#, vec!["0.5"; 1_000_000].join(","));
    d.decode(huge.as_bytes(), &mut b).unwrap();
    assert_eq!(b.len, 1);
    let ColumnData::List(outer) = &b.columns[4].data else { panic!() };
    let ColumnData::List(middle) = &outer.values.data else { panic!() };
    assert_eq!(middle.values.len(), 1);
    let ColumnData::List(inner) = &middle.values.data else { panic!() };
    assert_eq!(inner.values.len(), 1_000_000);
}
