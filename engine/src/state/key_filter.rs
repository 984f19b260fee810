//! Which keys of a spilling operator may be on disk (`crate::state`).

use crate::Error;
use crate::state::group_keys::hash_key;

/// Which keys may be on disk: a Bloom filter of the spilled groups' keys,
/// so that a key never seen before — most keys, for a GROUP BY whose keys
/// keep coming — is made a new group without a lookup in the store (one
/// cost half the time of such a run before it was there). One 64-bit word
/// per key's probe (a cache line read), four bits set in it; about eight
/// bits per key. Keys read back leave their bits (a Bloom filter cannot
/// take one out): they only cost a lookup that finds nothing. The filter
/// is built anew from the store's keys once as many keys were added as it
/// was sized for, at twice the keys then on disk — so it follows the
/// state on disk, and stale bits go.
#[derive(Debug, Default)]
pub(crate) struct KeyFilter {
    words: Vec<u64>,
    /// Keys it was sized for, and keys added since it was built.
    capacity: usize,
    added: usize,
}

const FILTER_BITS_PER_KEY: usize = 8;
const FILTER_MIN_KEYS: usize = 1 << 13;

impl KeyFilter {
    /// The word and the bits of a key's hash.
    #[inline]
    fn probe(&self, hash: u64) -> (usize, u64) {
        // The high bits pick the word (a multiply-shift into range), the
        // bits of a second mix pick four bits in it.
        let word = ((u128::from(hash) * self.words.len() as u128) >> 64) as usize;
        let mut h = hash.wrapping_mul(0x9E37_79B9_7F4A_7C15);
        let mut bits = 0u64;
        for _ in 0..4 {
            bits |= 1 << (h >> 58);
            h = h.wrapping_shl(6);
        }
        (word, bits)
    }

    /// Whether a key of `hash` may be on disk (never false for one that is).
    #[inline]
    pub(crate) fn may_contain(&self, hash: u64) -> bool {
        if self.words.is_empty() {
            return false;
        }
        let (word, bits) = self.probe(hash);
        self.words[word] & bits == bits
    }

    /// Files a key going to disk. False when the filter is full: it must
    /// be rebuilt ([`KeyFilter::rebuild`]) before it is asked again.
    pub(crate) fn insert(&mut self, hash: u64) -> bool {
        if self.words.is_empty() {
            self.size_for(0);
        }
        let (word, bits) = self.probe(hash);
        self.words[word] |= bits;
        self.added += 1;
        self.added <= self.capacity
    }

    fn size_for(&mut self, keys: usize) {
        self.capacity = (keys * 2).max(FILTER_MIN_KEYS);
        self.words = vec![0; (self.capacity * FILTER_BITS_PER_KEY).div_ceil(64)];
        self.added = 0;
    }

    /// Builds the filter anew for `keys` keys, which `for_each_key` calls
    /// its argument with (a store's `SpillStore::for_each_key`).
    pub(crate) fn rebuild(
        &mut self,
        keys: usize,
        for_each_key: impl FnOnce(&mut dyn FnMut(&[u8])) -> Result<(), Error>,
    ) -> Result<(), Error> {
        self.size_for(keys);
        for_each_key(&mut |key| {
            self.insert(hash_key(key));
        })
    }

    pub(crate) fn clear(&mut self) {
        *self = Self::default();
    }

    pub(crate) fn heap_bytes(&self) -> usize {
        self.words.capacity() * 8
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::group_keys::hash_key;
    use crate::state::store::{MemorySpill, SpillStore};

    #[test]
    fn the_key_filter_never_forgets_a_key_and_rarely_takes_another_for_one() {
        let mut store = MemorySpill::default();
        let mut filter = KeyFilter::default();
        let key = |i: u32| format!("key-{i}").into_bytes();
        let mut full_at = None;
        for i in 0..200_000u32 {
            store.keys.insert(key(i), 0);
            if !filter.insert(hash_key(&key(i))) {
                full_at.get_or_insert(i);
                filter.rebuild(store.keys.len(), |f| store.for_each_key(f)).unwrap();
            }
        }
        assert_eq!(full_at, Some(1 << 13), "full once as many keys came as it was sized for");
        assert!((0..200_000).all(|i| filter.may_contain(hash_key(&key(i)))));
        let false_positives = (200_000..300_000).filter(|&i| filter.may_contain(hash_key(&key(i)))).count();
        assert!(false_positives < 5_000, "{false_positives} of 100,000 keys never filed");
    }
}
