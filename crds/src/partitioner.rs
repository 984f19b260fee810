//! Which partition a keyed record goes to: Kafka's default partitioner
//! (murmur2 of the key bytes, made positive, modulo the partition count).
//!
//! Sluice writes repartition topics with explicit partitions computed here,
//! so ownership of an internal topic is as deterministic as of a source
//! topic — and identical to what any Kafka producer would choose for the
//! same key, so the topics read as ordinary keyed topics to other tools.

/// Kafka's `Utils.murmur2` (32-bit, seed 0x9747b28c), bit for bit.
pub fn murmur2(data: &[u8]) -> i32 {
    const M: u32 = 0x5bd1_e995;
    const R: u32 = 24;
    let len = data.len();
    // Kafka's length is an int: keys are far below 2^31 bytes.
    let mut h: u32 = 0x9747_b28c ^ (len as u32);
    let mut chunks = data.chunks_exact(4);
    for c in &mut chunks {
        let mut k = u32::from_le_bytes([c[0], c[1], c[2], c[3]]);
        k = k.wrapping_mul(M);
        k ^= k >> R;
        k = k.wrapping_mul(M);
        h = h.wrapping_mul(M);
        h ^= k;
    }
    let rest = chunks.remainder();
    if !rest.is_empty() {
        if rest.len() == 3 {
            h ^= u32::from(rest[2]) << 16;
        }
        if rest.len() >= 2 {
            h ^= u32::from(rest[1]) << 8;
        }
        h ^= u32::from(rest[0]);
        h = h.wrapping_mul(M);
    }
    h ^= h >> 13;
    h = h.wrapping_mul(M);
    h ^= h >> 15;
    h as i32
}

/// The partition of `partitions` a record with `key` belongs to, as Kafka's
/// default partitioner picks it. A record without a key (a global
/// aggregate's input: one group) goes to partition 0.
pub fn partition_for_key(key: Option<&[u8]>, partitions: i32) -> i32 {
    match key {
        Some(k) if partitions > 1 => (murmur2(k) & 0x7fff_ffff) % partitions,
        _ => 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn murmur2_matches_kafkas_own_test_vectors() {
        // apache/kafka clients/src/test/java/org/apache/kafka/common/utils/UtilsTest.java
        let cases: [(&[u8], i32); 6] = [
            (b"21", -973_932_308),
            (b"foobar", -790_332_482),
            (b"a-little-bit-long-string", -985_981_536),
            (b"a-little-bit-longer-string", -1_486_304_829),
            (b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8", -58_897_971),
            (b"abc", 479_470_107),
        ];
        for (data, expected) in cases {
            assert_eq!(murmur2(data), expected, "{}", String::from_utf8_lossy(data));
        }
    }

    #[test]
    fn partitions_are_in_range_and_keyless_records_go_to_zero() {
        assert_eq!(partition_for_key(Some(b"21"), 4), (-973_932_308i32 & 0x7fff_ffff) % 4);
        assert_eq!(partition_for_key(None, 8), 0);
        assert_eq!(partition_for_key(Some(b"x"), 1), 0);
        for i in 0..1000u32 {
            let p = partition_for_key(Some(&i.to_le_bytes()), 7);
            assert!((0..7).contains(&p));
        }
    }
}
