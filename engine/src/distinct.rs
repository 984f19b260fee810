//! COUNT(DISTINCT …) state: the distinct values of each group, kept with
//! the group.
//!
//! Each group has its own set, so the values of a range of groups can be
//! cut out into a checkpoint page and dropped when those groups go to
//! disk — as every other accumulator's state can. (The values of all
//! groups once lived in one table; a page of groups then meant a pass over
//! every value of every group, so COUNT(DISTINCT) aggregates wrote their
//! whole state at every checkpoint and could not spill: one core reached
//! 3.2 GiB before its limit fired.)
//!
//! A set keeps its values end to end in one buffer — no allocation per
//! value — and looks a value up by scanning while it holds a few, by a
//! hash table of their indexes past that.

use hashbrown::HashTable;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::Error;
use crate::state::group_keys::hash_key;

/// Values a set scans rather than indexes.
const SCAN: usize = 8;

/// Value `i` of values stored end to end in `bytes`, ending at `ends`.
fn nth<'a>(bytes: &'a [u8], ends: &[u32], i: usize) -> &'a [u8] {
    let start = if i == 0 { 0 } else { ends[i - 1] as usize };
    &bytes[start..ends[i] as usize]
}

/// The distinct values of one group.
#[derive(Clone, Debug, Default)]
struct ValueSet {
    /// The values, end to end, and where each ends.
    bytes: Vec<u8>,
    ends: Vec<u32>,
    /// Past [`SCAN`] values: their indexes, by the hash of their bytes.
    index: HashTable<u32>,
}

impl ValueSet {
    fn len(&self) -> usize {
        self.ends.len()
    }

    fn value(&self, i: usize) -> &[u8] {
        nth(&self.bytes, &self.ends, i)
    }

    fn heap_bytes(&self) -> usize {
        size_of::<Self>() + self.bytes.capacity() + self.ends.capacity() * 4 + self.index.capacity() * 5
    }

    fn index_all(&mut self) {
        let mut index = HashTable::with_capacity(self.len() * 2);
        for i in 0..self.len() {
            let hash = hash_key(self.value(i));
            index.insert_unique(hash, u32::try_from(i).unwrap_or(u32::MAX), |&j| hash_key(self.value(j as usize)));
        }
        self.index = index;
    }

    /// Adds `value`; false if the set holds it already.
    fn insert(&mut self, value: &[u8]) -> Result<bool, Error> {
        // Indexed once it holds more than SCAN values.
        let hash = (self.len() > SCAN).then(|| hash_key(value));
        match hash {
            Some(hash) => {
                if self.index.find(hash, |&i| self.value(i as usize) == value).is_some() {
                    return Ok(false);
                }
            }
            None => {
                if (0..self.len()).any(|i| self.value(i) == value) {
                    return Ok(false);
                }
            }
        }
        let end = u32::try_from(self.bytes.len() + value.len()).map_err(|_| {
            Error::GroupLimit(
                "one group's COUNT(DISTINCT) values passed 4 GiB, the most a group holds; group the query by \
                 more columns so each group holds fewer values"
                    .into(),
            )
        })?;
        self.bytes.extend_from_slice(value);
        self.ends.push(end);
        let at = u32::try_from(self.len() - 1).unwrap_or(u32::MAX);
        match hash {
            Some(hash) => {
                let Self { bytes, ends, index } = self;
                index.insert_unique(hash, at, |&j| hash_key(nth(bytes, ends, j as usize)));
            }
            None if self.len() > SCAN => self.index_all(),
            None => {}
        }
        Ok(true)
    }
}

/// The distinct values of each group, and how many each holds.
#[derive(Debug, Default)]
pub struct DistinctState {
    counts: Vec<i64>,
    sets: Vec<Option<Box<ValueSet>>>,
    /// What the sets hold on the heap, kept as they change: the engine
    /// reads its state's size after every batch, and summing the sets then
    /// cost a pass over all of them per batch (Nexmark q15: a third of its
    /// time).
    set_bytes: usize,
}

impl DistinctState {
    /// Makes room for `groups` groups.
    pub fn ensure(&mut self, groups: usize) {
        if self.counts.len() < groups {
            self.counts.resize(groups, 0);
            self.sets.resize_with(groups, || None);
        }
    }

    pub fn count(&self, g: usize) -> i64 {
        self.counts[g]
    }

    /// Adds `value` to group `g`'s values; false if it held it already.
    pub fn insert(&mut self, g: usize, value: &[u8]) -> Result<bool, Error> {
        let before = self.sets[g].as_ref().map_or(0, |s| s.heap_bytes());
        let set = self.sets[g].get_or_insert_with(Box::default);
        let new = set.insert(value)?;
        if new {
            self.counts[g] += 1;
        }
        self.set_bytes = self.set_bytes + set.heap_bytes() - before;
        Ok(new)
    }

    /// Forgets group `g`'s values (its id is about to be reused, or the
    /// group went to disk).
    pub fn reset(&mut self, g: usize) {
        self.counts[g] = 0;
        if let Some(set) = self.sets[g].take() {
            self.set_bytes -= set.heap_bytes();
        }
    }

    /// Adds group `src`'s values to group `dst`'s (sessions merged).
    pub fn merge(&mut self, dst: usize, src: usize) -> Result<(), Error> {
        let Some(from) = self.sets[src].take() else { return Ok(()) };
        let merged = (0..from.len()).try_for_each(|i| self.insert(dst, from.value(i)).map(drop));
        self.sets[src] = Some(from);
        merged
    }

    /// Groups `groups` alone, numbered from 0 (a checkpoint page).
    pub fn page(&self, groups: impl Iterator<Item = usize> + Clone) -> Self {
        let mut page = Self::default();
        page.ensure(groups.clone().count());
        for (i, g) in groups.enumerate() {
            if let (Some(&count), Some(set)) = (self.counts.get(g), self.sets.get(g)) {
                page.counts[i] = count;
                page.sets[i].clone_from(set);
                page.set_bytes += page.sets[i].as_ref().map_or(0, |s| s.heap_bytes());
            }
        }
        page
    }

    /// Puts a page cut by [`DistinctState::page`] back, from group `start`.
    #[cfg(test)]
    pub fn set_page(&mut self, start: usize, page: Self) {
        let len = page.counts.len();
        self.scatter(start..start + len, page);
    }

    /// Puts a page cut by [`DistinctState::page`] back into groups
    /// `groups`, in that order.
    pub fn scatter(&mut self, groups: impl Iterator<Item = usize> + Clone, page: Self) {
        self.ensure(groups.clone().max().map_or(0, |g| g + 1));
        for (g, (count, set)) in groups.zip(page.counts.into_iter().zip(page.sets)) {
            self.reset(g);
            self.set_bytes += set.as_ref().map_or(0, |s| s.heap_bytes());
            self.counts[g] = count;
            self.sets[g] = set;
        }
    }

    pub fn groups(&self) -> usize {
        self.counts.len()
    }

    pub fn heap_bytes(&self) -> usize {
        self.counts.capacity() * 8 + self.sets.capacity() * 8 + self.set_bytes
    }
}

/// How the state is written in checkpoints: each group's count, and every
/// (group, value) pair — the form state was saved in before each group
/// kept its own values, so checkpoints of either restore.
#[derive(Serialize)]
struct WireRef<'a> {
    counts: &'a [i64],
    entries: Vec<(u32, &'a [u8])>,
}

#[derive(Deserialize)]
struct Wire {
    counts: Vec<i64>,
    entries: Vec<(u32, Vec<u8>)>,
}

impl Serialize for DistinctState {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut entries = Vec::new();
        for (g, set) in self.sets.iter().enumerate() {
            if let Some(set) = set {
                let g = u32::try_from(g).unwrap_or(u32::MAX);
                entries.extend((0..set.len()).map(|i| (g, set.value(i))));
            }
        }
        WireRef { counts: &self.counts, entries }.serialize(s)
    }
}

impl<'de> Deserialize<'de> for DistinctState {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        use serde::de::Error as _;
        let wire = Wire::deserialize(d)?;
        let mut state = Self::default();
        state.ensure(wire.counts.len());
        for (g, value) in &wire.entries {
            let g = *g as usize;
            if g >= state.counts.len() {
                return Err(D::Error::custom(format!("a COUNT(DISTINCT) value of group {g}, past the state's groups")));
            }
            state.insert(g, value).map_err(D::Error::custom)?;
        }
        if state.counts != wire.counts {
            return Err(D::Error::custom("COUNT(DISTINCT) counts that do not match their values"));
        }
        Ok(state)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn counted(d: &DistinctState) -> usize {
        d.sets.iter().flatten().map(|s| s.heap_bytes()).sum()
    }

    /// The sets' size is kept as they change (read after every batch, it
    /// must not cost a pass over them): it is what a pass would count,
    /// after inserts past the scanned few, resets, merges, pages and a
    /// restore; and a value is never counted twice, scanned or indexed.
    #[test]
    fn distinct_values_are_counted_once_and_their_size_is_kept_not_recounted() {
        let mut d = DistinctState::default();
        d.ensure(3);
        for round in 0..3 {
            for v in 0..40u32 {
                let new = d.insert(0, format!("value-{v}").as_bytes()).unwrap();
                assert_eq!(new, round == 0, "value {v} in round {round}");
            }
        }
        for v in ["a", "bb", "a"] {
            d.insert(1, v.as_bytes()).unwrap();
        }
        d.insert(2, b"cccc").unwrap();
        assert_eq!((d.count(0), d.count(1), d.count(2), d.set_bytes), (40, 2, 1, counted(&d)));
        d.merge(1, 0).unwrap();
        assert_eq!((d.count(1), d.set_bytes), (42, counted(&d)));
        d.reset(0);
        assert_eq!((d.count(0), d.set_bytes), (0, counted(&d)));

        let page = d.page(1..3);
        assert_eq!((page.groups(), page.count(0), page.count(1), page.set_bytes), (2, 42, 1, counted(&page)));
        let mut other = DistinctState::default();
        other.ensure(8);
        other.insert(6, b"replaced").unwrap();
        other.set_page(5, page);
        assert_eq!((other.count(5), other.count(6), other.set_bytes), (42, 1, counted(&other)));
        assert!(!other.insert(5, b"value-39").unwrap() && !other.insert(6, b"cccc").unwrap());
        assert!(other.insert(6, b"replaced").unwrap(), "the page replaced the group's values");

        let mut restored: DistinctState = postcard::from_bytes(&postcard::to_allocvec(&d).unwrap()).unwrap();
        assert_eq!((restored.counts.clone(), restored.set_bytes), (d.counts.clone(), counted(&restored)));
        assert!(!restored.insert(1, b"value-17").unwrap(), "the index is rebuilt too");
    }

    /// State saved when all groups' values lived in one list restores.
    #[test]
    fn distinct_state_saved_as_one_list_of_values_restores() {
        #[derive(Serialize)]
        struct Old {
            counts: Vec<i64>,
            entries: Vec<(u32, Vec<u8>)>,
        }
        let old =
            Old { counts: vec![2, 0, 1], entries: vec![(0, b"a".to_vec()), (2, b"x".to_vec()), (0, b"b".to_vec())] };
        let mut d: DistinctState = postcard::from_bytes(&postcard::to_allocvec(&old).unwrap()).unwrap();
        assert_eq!((d.count(0), d.count(1), d.count(2)), (2, 0, 1));
        assert!(!d.insert(0, b"b").unwrap() && d.insert(2, b"a").unwrap());
        let bad = Old { counts: vec![1], entries: vec![(3, b"a".to_vec())] };
        assert!(postcard::from_bytes::<DistinctState>(&postcard::to_allocvec(&bad).unwrap()).is_err());
    }
}
