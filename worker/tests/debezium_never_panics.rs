//! The Debezium decoders (JSON and Avro) on hostile input: change events
//! cut, flipped and spliced, and arbitrary bytes. They must never panic,
//! and a record is either one whole row or none. (CI runs a fixed seed;
//! `bash bench/fuzz.sh` explores at volume, targets `debezium` and
//! `debezium-avro`.)

// Test code: failing loudly is its job.
#![allow(clippy::panic, clippy::expect_used, clippy::unwrap_used)]

use proptest::prelude::*;

#[path = "support/fixtures.rs"]
mod fixtures;
mod support;
use sluice_formats::decode::RecordMeta;

fn check(payload: &[u8]) {
    let mut d = fixtures::debezium_decoder();
    let mut batch = d.new_batch(4);
    if let Err(e) =
        fixtures::decode_whole_row_or_none(&mut batch, |b| d.decode_record(payload, &RecordMeta::default(), b))
    {
        panic!("{:?}: {e}", String::from_utf8_lossy(payload));
    }
}

fn check_avro(payload: &[u8]) {
    let mut d = fixtures::debezium_avro_decoder();
    let mut batch = d.new_batch(4);
    if let Err(e) =
        fixtures::decode_whole_row_or_none(&mut batch, |b| d.decode_record(payload, &RecordMeta::default(), b))
    {
        panic!("{payload:?}: {e}");
    }
}

#[test]
fn the_avro_seeds_decode() {
    let mut d = fixtures::debezium_avro_decoder();
    let mut batch = d.new_batch(4);
    for seed in fixtures::debezium_avro_seeds() {
        d.decode_record(&seed, &RecordMeta::default(), &mut batch).unwrap();
    }
    assert_eq!(batch.len, 3);
}

proptest! {
    #![proptest_config(support::deterministic(3_000))]

    #[test]
    fn mutated_avro_change_events_never_panic(
        seed in 0usize..3,
        edits in prop::collection::vec((any::<usize>(), any::<u8>(), 0u8..3), 1..6),
    ) {
        let mut payload = fixtures::debezium_avro_seeds()[seed].clone();
        for (at, byte, kind) in edits {
            // Past the header: the datum is what is mutated.
            let i = 5 + at % (payload.len() - 4);
            match kind {
                0 if i < payload.len() => payload[i] ^= byte,
                1 => payload.insert(i, byte),
                _ => payload.truncate(i),
            }
        }
        check_avro(&payload);
    }

    #[test]
    fn arbitrary_avro_datums_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..48)) {
        let mut payload = vec![0, 0, 0, 0, 7];
        payload.extend_from_slice(&bytes);
        check_avro(&payload);
    }

    #[test]
    fn mutated_change_events_never_panic(
        event in 0usize..4,
        edits in prop::collection::vec((any::<usize>(), any::<u8>(), 0u8..3), 1..6),
    ) {
        let mut payload = fixtures::DEBEZIUM_EVENTS[event].as_bytes().to_vec();
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
