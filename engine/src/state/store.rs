//! Where a spilling operator's pages go: the store the runtime hands it
//! (one per operator, of the core that owns it) and [`Spill`], which
//! keeps the store, the operator's budget and the filter of keys filed
//! there in step.

use crate::Error;
use crate::state::group_keys::hash_key;
use crate::state::key_filter::KeyFilter;

/// Where an operator's spilled pages go: one store per operator, of the
/// engine core that owns it (nothing shared across cores). Pages are kept
/// by number; the index maps each spilled group's key to its page, so a
/// row whose key is not in memory finds its group on disk.
pub trait SpillStore: Send + std::fmt::Debug {
    /// Writes page `page`'s bytes, replacing any earlier version, and
    /// files each key of `keys` as being in it.
    fn put_page(&mut self, page: u32, bytes: &[u8], keys: &mut dyn Iterator<Item = &[u8]>) -> Result<(), Error>;
    /// The bytes of page `page`, if spilled.
    fn page(&self, page: u32) -> Result<Option<Vec<u8>>, Error>;
    /// Removes page `page` and its keys (read back into memory).
    fn remove_page(&mut self, page: u32, keys: &mut dyn Iterator<Item = &[u8]>) -> Result<(), Error>;
    /// The page a spilled group of key `key` is in. Removals may be
    /// seen late (a store may hold them until its next write): a page
    /// read back since, and its keys, may still be found, so the caller
    /// checks the page it names is on disk. Pages and keys written are
    /// seen at once.
    fn key_page(&self, key: &[u8]) -> Result<Option<u32>, Error>;
    /// Forgets everything (a restore starts over).
    fn clear(&mut self) -> Result<(), Error>;
    /// Calls `f` with every key filed (to rebuild a [`KeyFilter`]).
    fn for_each_key(&self, f: &mut dyn FnMut(&[u8])) -> Result<(), Error>;
    /// Bytes the store takes on disk (for `sluice_state_spilled_bytes`).
    fn disk_bytes(&self) -> u64;
}

/// What an operator keeps on disk: its store, the state (bytes) past
/// which it spills, how many groups it filed there and a filter of their
/// keys. Writing and removing a page goes through here, so that the count
/// and the filter follow the store.
#[derive(Debug)]
pub struct Spill {
    store: Box<dyn SpillStore>,
    pub budget: usize,
    groups: usize,
    keys: KeyFilter,
}

impl Spill {
    pub fn new(store: Box<dyn SpillStore>, budget: usize) -> Self {
        Self { store, budget, groups: 0, keys: KeyFilter::default() }
    }

    /// Writes page `page` and files its groups' `keys`.
    pub fn put<'k>(
        &mut self,
        page: u32,
        bytes: &[u8],
        keys: impl Iterator<Item = &'k [u8]> + Clone,
    ) -> Result<(), Error> {
        let mut full = false;
        for key in keys.clone() {
            full |= !self.keys.insert(hash_key(key));
            self.groups += 1;
        }
        self.store.put_page(page, bytes, &mut { keys })?;
        if full {
            let store = &self.store;
            self.keys.rebuild(self.groups, |f| store.for_each_key(f))?;
        }
        Ok(())
    }

    /// The bytes of spilled page `page`.
    pub fn page(&self, page: u32) -> Result<Vec<u8>, Error> {
        self.store.page(page)?.ok_or_else(|| Error::Internal(format!("spilled page {page} is missing")))
    }

    /// Removes page `page`, read back with its groups' `keys`.
    pub fn remove<'k>(&mut self, page: u32, keys: impl Iterator<Item = &'k [u8]> + Clone) -> Result<(), Error> {
        self.groups = self.groups.saturating_sub(keys.clone().count());
        self.store.remove_page(page, &mut { keys })
    }

    /// The page a group of `key` was spilled in, if it was: the store is
    /// asked only when the filter says it may hold the key.
    pub fn page_of(&self, key: &[u8]) -> Result<Option<u32>, Error> {
        if self.groups == 0 || !self.keys.may_contain(hash_key(key)) {
            return Ok(None);
        }
        self.store.key_page(key)
    }

    /// Groups on disk.
    pub fn groups(&self) -> usize {
        self.groups
    }

    pub fn disk_bytes(&self) -> u64 {
        self.store.disk_bytes()
    }

    /// Forgets everything (a restore starts over).
    pub fn clear(&mut self) -> Result<(), Error> {
        self.groups = 0;
        self.keys.clear();
        self.store.clear()
    }

    pub fn heap_bytes(&self) -> usize {
        self.keys.heap_bytes()
    }
}

/// write: reads before then still find the page and its keys.
#[cfg(test)]
#[derive(Debug, Default)]
pub struct MemorySpill {
    pub pages: std::collections::HashMap<u32, Vec<u8>>,
    pub keys: std::collections::HashMap<Vec<u8>, u32>,
    pub writes: usize,
    /// Removals not applied yet: pages and keys.
    late: Vec<(u32, Vec<Vec<u8>>)>,
}

#[cfg(test)]
impl SpillStore for MemorySpill {
    fn put_page(&mut self, page: u32, bytes: &[u8], keys: &mut dyn Iterator<Item = &[u8]>) -> Result<(), Error> {
        for (page, keys) in std::mem::take(&mut self.late) {
            self.pages.remove(&page);
            for k in keys {
                self.keys.remove(&k);
            }
        }
        self.writes += 1;
        self.pages.insert(page, bytes.to_vec());
        for k in keys {
            self.keys.insert(k.to_vec(), page);
        }
        Ok(())
    }
    fn page(&self, page: u32) -> Result<Option<Vec<u8>>, Error> {
        Ok(self.pages.get(&page).cloned())
    }
    fn remove_page(&mut self, page: u32, keys: &mut dyn Iterator<Item = &[u8]>) -> Result<(), Error> {
        self.late.push((page, keys.map(<[u8]>::to_vec).collect()));
        Ok(())
    }
    fn key_page(&self, key: &[u8]) -> Result<Option<u32>, Error> {
        Ok(self.keys.get(key).copied())
    }
    fn clear(&mut self) -> Result<(), Error> {
        self.pages.clear();
        self.keys.clear();
        self.late.clear();
        Ok(())
    }
    fn disk_bytes(&self) -> u64 {
        self.pages.values().map(|p| p.len() as u64).sum()
    }
    fn for_each_key(&self, f: &mut dyn FnMut(&[u8])) -> Result<(), Error> {
        let late: std::collections::HashSet<&[u8]> = self.late.iter().flat_map(|(_, k)| k).map(Vec::as_slice).collect();
        for k in self.keys.keys().filter(|k| !late.contains(k.as_slice())) {
            f(k);
        }
        Ok(())
    }
}
