//! The Avro decoder on hostile bytes: arbitrary datums after a valid
//! header, and valid datums cut short, flipped and extended, under
//! writer schemas with every construct (unions, nested and recursive
//! records, arrays, maps, enums, fixed, decimals, logical types). It must
//! never panic or loop, and a record is either one whole row or none.
//! (CI runs a fixed seed; `bash bench/fuzz.sh avro` explores at volume.)

// Test code: failing loudly is its job.
#![allow(clippy::panic, clippy::expect_used, clippy::unwrap_used)]

use proptest::prelude::*;

#[path = "support/fixtures.rs"]
mod fixtures;
mod support;
use fixtures::avro_decoder as decoder;
use sluice_formats::decode::AvroDecoder;
use sluice_plan::Batch;

fn framed(id: u32, body: &[u8]) -> Vec<u8> {
    let mut v = vec![0];
    v.extend_from_slice(&id.to_be_bytes());
    v.extend_from_slice(body);
    v
}

/// Decodes, checking the batch took a whole row or nothing.
fn check(d: &mut AvroDecoder, batch: &mut Batch, payload: &[u8]) {
    if let Err(e) = fixtures::decode_whole_row_or_none(batch, |b| d.decode(payload, b)) {
        panic!("{payload:?}: {e}");
    }
}

/// Small zig-zag varints and the bytes Avro values are made of.
fn chunk() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        (-3i64..70).prop_map(|v| vec![((v << 1) ^ (v >> 63)) as u8]),
        Just(vec![0x80, 0x01]),
        Just(vec![0xff; 10]),
        Just(vec![0x81, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x01]),
        Just(vec![2, b'A']),
        Just(vec![6, b'x', b'y', b'z']),
        Just(vec![1]),
        Just(vec![0]),
        prop::collection::vec(any::<u8>(), 0..9),
    ]
}

proptest! {
    #![proptest_config(support::deterministic(3_000))]

    #[test]
    fn arbitrary_datums_never_panic(id in 1u32..5, parts in prop::collection::vec(chunk(), 0..24)) {
        let mut d = decoder();
        let mut batch = d.new_batch(4);
        check(&mut d, &mut batch, &framed(id, &parts.concat()));
    }

    #[test]
    fn mutated_valid_datums_never_panic(seed in 0usize..3, flips in prop::collection::vec((any::<usize>(), any::<u8>()), 1..6), cut in any::<usize>()) {
        let mut payload = fixtures::avro_seeds()[seed].clone();
        for (at, bits) in flips {
            let i = 5 + at % (payload.len() - 5);
            payload[i] ^= bits;
        }
        payload.truncate(5 + cut % (payload.len() - 4));
        let mut d = decoder();
        let mut batch = d.new_batch(4);
        check(&mut d, &mut batch, &payload);
    }

    /// The flat path (a record of values and nullable values) and the
    /// program's tree give the same rows, values and reasons.
    #[test]
    fn the_flat_path_and_the_tree_agree(parts in prop::collection::vec(chunk(), 0..12)) {
        let (mut flat, mut tree) = (decoder(), decoder());
        flat.add_schema(4, fixtures::AVRO_FLAT_SCHEMA);
        tree.add_schema(4, fixtures::AVRO_FLAT_SCHEMA);
        let (mut a, mut b) = (flat.new_batch(4), tree.new_batch(4));
        let payload = framed(4, &parts.concat());
        let (got, want) = (flat.decode(&payload, &mut a), tree.decode_by_tree(&payload, &mut b));
        prop_assert_eq!(&got, &want);
        prop_assert_eq!(a.len, b.len);
        for (x, y) in a.columns.iter().zip(&b.columns) {
            prop_assert_eq!((0..a.len).map(|r| x.scalar(r)).collect::<Vec<_>>(), (0..b.len).map(|r| y.scalar(r)).collect::<Vec<_>>());
        }
    }

    #[test]
    fn arbitrary_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..64)) {
        let mut d = decoder();
        let mut batch = d.new_batch(4);
        check(&mut d, &mut batch, &bytes);
    }
}
