//! The Protobuf decoder on hostile bytes: arbitrary messages after a
//! valid header, and valid messages cut short, flipped and extended,
//! under a schema with nested and recursive messages, an enum, a
//! well-known Timestamp, repeated fields (packed, unpacked, of messages
//! read as rows), a map and every wire type. It must
//! never panic or loop, and a record is either one whole row or none.
//! (CI runs a fixed seed; `bash bench/fuzz.sh protobuf` explores at volume.)

// Test code: failing loudly is its job.
#![allow(clippy::panic, clippy::expect_used, clippy::unwrap_used)]

use proptest::prelude::*;

#[path = "support/fixtures.rs"]
mod fixtures;
mod support;
use fixtures::protobuf_decoder as decoder;

fn check(payload: &[u8]) {
    let mut d = decoder();
    let mut batch = d.new_batch(4);
    if let Err(e) = fixtures::decode_whole_row_or_none(&mut batch, |b| d.decode(payload, b)) {
        panic!("{payload:?}: {e}");
    }
    paths_agree(payload);
}

/// The one-pass path for records in field-number order and the general
/// one give the same row, or the same reason, for any bytes.
fn paths_agree(payload: &[u8]) {
    let (mut flat, mut general) =
        (fixtures::protobuf_flat_decoder(), fixtures::protobuf_flat_decoder().without_flat_path());
    let (mut a, mut b) = (flat.new_batch(4), general.new_batch(4));
    let mut last = None;
    // Twice: the second record goes through the program kept from the first.
    for _ in 0..2 {
        let got = (flat.decode(payload, &mut a), general.decode(payload, &mut b));
        assert_eq!(got.0, got.1, "{payload:?}");
        last = Some(got.0);
    }
    assert_eq!(rows(&a), rows(&b), "{payload:?}: {last:?}");
    if let Err(e) = fixtures::decode_whole_row_or_none(&mut a, |batch| flat.decode(payload, batch)) {
        panic!("{payload:?}: {e}");
    }
}

/// Field keys of every wire type, lengths, varints and the bytes of the
/// schema's values.
fn chunk() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        (1u8..16, 0u8..8).prop_map(|(n, w)| vec![n << 3 | w]),
        (0u8..40).prop_map(|n| vec![n]),
        Just(vec![0x80, 0x01]),
        Just(vec![0xff; 10]),
        Just(vec![0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01]),
        Just(vec![0x32, 0x02, 0x08, 0x01]),
        Just(vec![0x32, 0x04, 0x1a, 0x02, 0x1a, 0x00]),
        Just(vec![0x22, 0x02, 0x08, 0x01]),
        Just(vec![0x0a, 0x01, b'A']),
        prop::collection::vec(any::<u8>(), 0..9),
    ]
}

proptest! {
    #![proptest_config(support::deterministic(3_000))]

    #[test]
    fn arbitrary_messages_never_panic(id in 1u32..4, indexes in prop_oneof![Just(vec![0u8]), Just(vec![2, 2]), Just(vec![2, 4]), Just(vec![4, 2, 0])], parts in prop::collection::vec(chunk(), 0..24)) {
        let mut payload = vec![0];
        payload.extend_from_slice(&id.to_be_bytes());
        payload.extend_from_slice(&indexes);
        payload.extend(parts.concat());
        check(&payload);
    }

    #[test]
    fn mutated_valid_messages_never_panic(seed in 0usize..3, flips in prop::collection::vec((any::<usize>(), any::<u8>()), 1..6), cut in any::<usize>()) {
        let mut payload = fixtures::protobuf_seeds()[seed].clone();
        for (at, bits) in flips {
            let i = 5 + at % (payload.len() - 5);
            payload[i] ^= bits;
        }
        payload.truncate(5 + cut % (payload.len() - 4));
        check(&payload);
    }
}

/// A batch's values, row by row (a rolled-back column may keep an empty
/// validity where one never pushed a NULL has none: the same values).
fn rows(batch: &sluice_plan::Batch) -> Vec<Vec<sluice_plan::Scalar>> {
    (0..batch.len).map(|r| batch.columns.iter().map(|c| c.scalar(r)).collect()).collect()
}

/// In field-number order, out of it, repeated, with fields left out and
/// with fields of another wire type: the two paths read the same.
#[test]
fn the_one_pass_path_reads_what_the_general_one_does() {
    let header = [0u8, 0, 0, 0, 1, 2, 2];
    let id = [0x08, 0x05];
    let price = [0x11, 0, 0, 0, 0, 0, 0, 0x04, 0x40];
    let flag = [0x38, 0x01];
    let amount = [0x52, 0x03, b'1', b'.', b'5'];
    let bodies: [&[&[u8]]; 7] = [
        &[&id, &price, &flag, &amount],
        &[&id, &amount],
        &[&flag, &id],
        &[&id, &id, &price],
        &[&price],
        &[&id, &[0x10, 0x01]],
        &[&id, &[0x58, 0x01], &flag],
    ];
    for body in bodies {
        let payload = [&header[..], &body.concat()].concat();
        paths_agree(&payload);
    }
    let mut d = fixtures::protobuf_flat_decoder();
    let mut batch = d.new_batch(1);
    d.decode(&[&header[..], &id, &price, &flag].concat(), &mut batch).unwrap();
    let row: Vec<String> = batch.columns.iter().map(|c| format!("{:?}", c.scalar(0))).collect();
    assert_eq!(row[..3], ["Bigint(5)".to_owned(), "Double(2.5)".into(), "String(\"A\")".into()], "{row:?}");
}

/// The seeds decode: `R` whole and sparse; `Other` (no `id`) is refused
/// naming the required column.
#[test]
fn the_seeds_read_as_written() {
    let mut d = decoder();
    let mut batch = d.new_batch(4);
    let seeds = fixtures::protobuf_seeds();
    d.decode(&seeds[0], &mut batch).unwrap();
    d.decode(&seeds[1], &mut batch).unwrap();
    let err = d.decode(&seeds[2], &mut batch).unwrap_err().0;
    assert!(err.contains("required column `id`"), "{err}");
    let rows: Vec<Vec<String>> =
        (0..2).map(|r| batch.columns.iter().map(|c| format!("{:?}", c.scalar(r))).collect()).collect();
    assert_eq!(
        rows[0].join(" "),
        "Bigint(5) Double(2.5) String(\"B\") Timestamp(1700000000000) String(\"1.5\") Timestamp(-3) Boolean(true) \
         List([String(\"a\")]) List([Row([Bigint(-3), String(\"x\"), Row([Timestamp(1), Null])]), Row([Bigint(1), \
         String(\"y\"), Null])]) Map([(String(\"k\"), Bigint(-2)), (String(\"\"), Bigint(2))]) List([Bigint(1), \
         Bigint(150), Bigint(127), Bigint(5)])"
    );
    assert_eq!(
        rows[1].join(" "),
        "Bigint(127) Double(0.0) String(\"A\") Null Null Null Boolean(false) List([]) List([]) Map([]) List([])"
    );
}

/// A fuzzer finding (seed 5150, input 1332): a length-delimited field read
/// where its message had already ended. Its error message subtracted the
/// position from the end, which panicked debug builds; it is a dead
/// letter with a reason.
#[test]
fn a_field_past_its_message_end_is_a_reason_not_a_panic() {
    let payload = [
        0, 0, 0, 0, 1, 2, 2, 8, 5, 17, 0, 0, 0, 0, 0, 0, 4, 64, 24, 1, 34, 8, 8, 128, 226, 5, 18, 1, 120, 26, 5, 8, 2,
        18, 1, 121, 56, 1, 65, 7, 0, 0, 0, 0, 0, 0, 0, 77, 0, 0, 192, 63, 82, 3,
    ];
    check(&payload);
    let mut d = decoder();
    let mut batch = d.new_batch(1);
    assert!(d.decode(&payload, &mut batch).is_err());
}
