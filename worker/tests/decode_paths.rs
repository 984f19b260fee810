//! The JSON decoder's fast path (flat objects, `decode/json/flat.rs`) and
//! its serde visitor must agree on every input: the same rows, the same
//! values to the bit, the same dead-letter reasons. Random records mix what
//! the fast path takes (plain flat objects) with everything it must hand
//! over (escapes, nesting, odd numbers, type mismatches, duplicates, missing
//! required fields, nulls, broken JSON).

// Test code: failing loudly is its job.
#![allow(clippy::panic, clippy::expect_used, clippy::unwrap_used)]

use proptest::prelude::*;

#[path = "support/fixtures.rs"]
mod fixtures;
mod support;
use sluice_formats::decode::JsonDecoder;
use sluice_plan::Plan;
use sluice_sql::plan_query;

fn plan() -> Plan {
    plan_query(fixtures::DECODER_SQL, &[fixtures::decoder_source()]).unwrap()
}

/// A JSON value: the kinds a field of any type might hold.
fn json_value() -> impl Strategy<Value = String> {
    prop_oneof![
        any::<i64>().prop_map(|v| v.to_string()),
        (-1000i64..1000).prop_map(|v| v.to_string()),
        any::<u64>().prop_map(|v| v.to_string()),
        any::<f64>().prop_filter("finite", |v| v.is_finite()).prop_map(|v| format!("{v:?}")),
        (-1e6f64..1e6).prop_map(|v| format!("{v}")),
        prop::sample::select(vec![
            "-0",
            "0",
            "1e3",
            "1.0",
            "150.0",
            "-1.5E-3",
            "2e400",
            "01",
            "1.",
            ".5",
            "-",
            "1e",
            "9223372036854775808",
            "-9223372036854775809",
            "8640000000000000",
            "8640000000000001",
            "true",
            "false",
            "null",
            "tru",
            "nul",
            "\"\"",
            "\"plain\"",
            "\"with \\\"escape\\\"\"",
            "\"\\u00e9t\\u00e9\"",
            "\"été ✓\"",
            // Invalid UTF-8 (see `invalid_utf8`): alone, inside a whole
            // word, past whole words, and at a string's end.
            "\"¤\"",
            "\"ab¤cdefghijk\"",
            "\"0123456789abcdef¦\"",
            "\"plain text§ more\"",
            "\"tab\tinside\"",
            "\"2024-01-15T09:30:00Z\"",
            "\"2024-01-15\"",
            "\"2024-13-40\"",
            "[]",
            "[1,2]",
            "{}",
            "{\"x\":{\"y\":1}}",
        ])
        .prop_map(str::to_owned),
        "[a-zA-Z0-9 ]{0,12}".prop_map(|s| format!("\"{s}\"")),
    ]
}

fn key() -> impl Strategy<Value = String> {
    prop::sample::select(vec![
        "id",
        "price",
        "name",
        "ts",
        "flag",
        "unread",
        "note",
        "amount",
        "big",
        "memo",
        "memo",
        "other",
        "ïd",
        "n\\u0061me",
        "ID",
        "",
    ])
    .prop_map(|k| format!("\"{k}\""))
}

fn space() -> impl Strategy<Value = &'static str> {
    prop::sample::select(vec!["", "", "", " ", "\n", "\t ", "\r\n"])
}

/// The digits of `v` as decimal text with a point `places` digits from
/// the right (`-0.05`, `123.4`).
fn with_places(v: u128, negative: bool, places: u32) -> String {
    let text = v.to_string();
    let cut = text.len().saturating_sub(places as usize);
    let sign = if negative { "-" } else { "" };
    format!("{sign}{}.{}", &text[..cut].trim_start_matches('0').to_owned().max("0".into()), &text[cut..])
}

/// A record: mostly objects of fields, sometimes broken.
fn record() -> impl Strategy<Value = String> {
    let field =
        (space(), key(), space(), json_value(), space()).prop_map(|(a, k, b, v, c)| format!("{a}{k}{b}:{b}{v}{c}"));
    let object = prop::collection::vec(field, 0..9).prop_map(|fs| format!("{{{}}}", fs.join(",")));
    // Plain records the fast path takes, with numbers in every spelling a
    // double column accepts.
    let price = prop_oneof![
        (-1e9f64..1e9).prop_map(|v| format!("{v}")),
        any::<i64>().prop_map(|v| v.to_string()),
        prop::sample::select(vec!["-0", "0", "-0.0", "1e3", "-2.5E-7", "123456789012345678901234567890"])
            .prop_map(str::to_owned),
    ];
    // An unread text column: plain, UTF-8, or not (`invalid_utf8`).
    let memo = prop::sample::select(vec![
        "",
        "a memo of some length, past a few words",
        "été",
        "¤",
        "ab¤cdefghijk",
        "0123456789abcdef¦",
        "plain text§ more",
    ]);
    // Undeclared fields, skipped: names and texts that are UTF-8 or not.
    let undeclared = prop::sample::select(vec!["", r#","other":1"#, r#","x¤":2"#, r#","other":"ab¤cdefghijk""#]);
    // `memo` before `note`: the end of an invalid memo falls anywhere in a
    // word, before the quote that stops the word scan.
    // A decimal(12,2) column: every digit read on both paths (16-digit
    // numbers a double cannot hold), rounded, or too large.
    let amount = prop_oneof![
        (-1e10f64..1e10).prop_map(|v| format!("{v}")),
        (any::<i64>(), 0u32..6).prop_map(|(v, places)| with_places(u128::from(v.unsigned_abs()), v < 0, places)),
        // 21 digits: a double reads 1234567890.125 and would round up.
        prop::sample::select(vec![
            "9999999999.994",
            "9999999999.995",
            "-0.005",
            "1234567890.12499999999",
            "\"12.5\"",
            "1e400",
            "null",
        ])
        .prop_map(str::to_owned),
    ];
    // A decimal(38,10) column: up to 38 digits (and 39, too many), places
    // past the scale rounded.
    let big = prop_oneof![
        (any::<i128>(), 0u32..14).prop_map(|(v, places)| with_places((v / 10).unsigned_abs(), v < 0, places)),
        prop::sample::select(vec![
            "9999999999999999999999999999.99999999995",
            "\"-9999999999999999999999999999.9999999999\"",
            "99999999999999999999999999999",
            "1e27",
            "1e28",
            "null",
        ])
        .prop_map(str::to_owned),
    ];
    let good = (
        (any::<i64>(), price, "[a-z]{0,8}", 0i64..2_000_000_000_000, any::<bool>()),
        (memo, undeclared, amount, big),
    )
        .prop_map(|((id, price, name, ts, flag), (memo, undeclared, amount, big))| {
            format!(
                r#"{{"id":{id},"price":{price},"name":"{name}","ts":{ts},"flag":{flag},"memo":"{memo}","note":null,"amount":{amount},"big":{big}{undeclared}}}"#
            )
        });
    prop_oneof![
        3 => good,
        4 => object,
        1 => (record_prefix(), space()).prop_map(|(p, s)| format!("{s}{p}{s}")),
    ]
}

/// Truncations and garbage around otherwise fine objects.
fn record_prefix() -> impl Strategy<Value = String> {
    prop::sample::select(vec![
        r#"{"id":1"#,
        r#"{"id":1,}"#,
        r#"{"id":1} x"#,
        r#"{"id" 1}"#,
        r#"{id:1}"#,
        r#"[{"id":1}]"#,
        r#""id""#,
        "",
        r#"{"id":1,"id":2}"#,
        r#"{"id":1}{"id":2}"#,
    ])
    .prop_map(str::to_owned)
}

/// The record's bytes, with each stand-in for invalid UTF-8 (the
/// strategies make `String`s, which cannot hold it) replaced: `¤` by a
/// byte no UTF-8 has, `¦` by a lead byte with nothing after it, `§` by an
/// encoded surrogate.
fn invalid_utf8(record: &str) -> Vec<u8> {
    let mut out = Vec::with_capacity(record.len());
    for c in record.chars() {
        match c {
            '¤' => out.push(0xff),
            '¦' => out.push(0xc3),
            '§' => out.extend_from_slice(&[0xed, 0xa0, 0x80]),
            c => out.extend_from_slice(c.encode_utf8(&mut [0; 4]).as_bytes()),
        }
    }
    out
}

proptest! {
    #![proptest_config(support::deterministic(3_000))]

    #[test]
    fn fast_path_and_visitor_agree(records in prop::collection::vec(record(), 1..12)) {
        let plan = plan();
        let (mut fast, mut reference) = (JsonDecoder::new(&plan), JsonDecoder::new(&plan));
        let (mut a, mut b) = (fast.new_batch(16), reference.new_batch(16));
        for r in &records {
            let bytes = invalid_utf8(r);
            let got = fast.decode(&bytes, &mut a);
            let want = reference.decode_with_serde(&bytes, &mut b);
            prop_assert_eq!(&got, &want, "record {}", r);
            prop_assert_eq!(a.len, b.len);
        }
        prop_assert_eq!(fixtures::cells(&a), fixtures::cells(&b));
    }
}

/// Edge cases of plain records, which the fast path decodes itself (no
/// escapes, no nesting): they must come out exactly as the visitor has them.
#[test]
fn plain_records_decode_identically() {
    let plan = plan();
    let (mut fast, mut reference) = (JsonDecoder::new(&plan), JsonDecoder::new(&plan));
    let (mut a, mut b) = (fast.new_batch(4), reference.new_batch(4));
    for r in [
        r#"{"id":-0,"price":-0,"name":"x","ts":"2024-01-15T00:00:00Z","flag":true,"unread":5,"other":"y"}"#,
        r#" { "id" : 7 , "price" : 2.5e-3 , "name" : "été" , "ts" : 1700000000000 , "flag" : false } "#,
        r#"{"id":1,"price":123456789012345678901234567890,"note":"n"}"#,
        r#"{"id":2,"amount":1234567890.12499999999}"#,
        r#"{"id":3,"amount":"-1234567890.125","price":1}"#,
    ] {
        fast.decode(r.as_bytes(), &mut a).unwrap();
        reference.decode_with_serde(r.as_bytes(), &mut b).unwrap();
    }
    assert_eq!(fixtures::cells(&a), fixtures::cells(&b));
}
