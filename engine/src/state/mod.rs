//! State: what an operator keeps between batches, beyond memory and
//! across restarts.
//!
//! An operator whose state is many keys keeps it per group of a
//! [`group_keys::GroupTable`], cut into pages of a fixed range of group
//! ids ([`pages`]). That one layout serves two ends: a checkpoint writes
//! only the pages that changed ([`pages::DirtyPages`]), each under its
//! own key of the compacted state topic, and past its memory budget the
//! operator moves cold pages to a [`SpillStore`] ([`spilling`]) — a page
//! on disk is written exactly as a checkpoint writes it.
//!
//! The engine reaches all of it through one narrow contract, [`Paged`],
//! which [`crate::Operator::paged`] hands out. An operator provides its
//! part through [`PagedGroups`] (how its groups' values are written and
//! read back); everything else — dirty pages, the page map, the store —
//! is the same for every operator and implemented once, here.
//!
//! Files: [`group_keys`] (the key → group id table), [`pages`] (page
//! layout, heads, dirty pages), [`page_map`] (pages against blocks once
//! spilled), [`store`] (the store and its budget), [`key_filter`] (keys
//! on disk, probably), [`page_due`] (when the watermark must visit a page
//! on disk), [`spilling`] (moving pages out and back).

pub(crate) mod group_keys;
pub(crate) mod key_filter;
pub(crate) mod page_due;
pub(crate) mod page_map;
pub(crate) mod pages;
pub(crate) mod spilling;
pub(crate) mod store;
#[cfg(test)]
mod tests;

use crate::Error;

pub(crate) use page_map::{FOLD_AT, PageIs};
pub(crate) use spilling::{PagedGroups, PagedState, SpilledHead, load_keyed_page, place_keys, restore_keyed_page};
#[cfg(test)]
pub(crate) use store::MemorySpill;
pub(crate) use store::Spill;
pub use store::SpillStore;

/// The state of an operator kept in pages: what the engine asks of it to
/// checkpoint incrementally and to spill. Reached through
/// [`crate::Operator::paged`]; an operator whose state is not paged
/// checkpoints whole ([`crate::Operator::snapshot`]) and never spills.
pub trait Paged {
    /// The head of a checkpoint: what the operator keeps outside its
    /// pages (the page layout, indexes), after `out`.
    fn snapshot_head(&self, out: Vec<u8>) -> Result<Vec<u8>, Error>;
    /// Restores a head written by [`Paged::snapshot_head`]; the pages
    /// follow ([`Paged::restore_page`]), then [`Paged::pages_restored`].
    fn restore_head(&mut self, bytes: &[u8]) -> Result<(), Error>;
    /// Appends the pages changed since the last call — every page when
    /// `all` — and starts counting afresh.
    fn take_dirty_pages(&mut self, all: bool, out: &mut Vec<u32>);
    /// Appends page `page` of the state to `out`.
    fn snapshot_page(&self, page: u32, out: Vec<u8>) -> Result<Vec<u8>, Error>;
    /// Restores a page written by [`Paged::snapshot_page`].
    fn restore_page(&mut self, page: u32, bytes: &[u8]) -> Result<(), Error>;
    /// Every page of a checkpoint is restored: checks that none is missing.
    fn pages_restored(&mut self) -> Result<(), Error>;
    /// State larger than memory: past `budget` bytes of state the
    /// operator moves cold pages to `store`.
    fn attach_spill(&mut self, store: Box<dyn SpillStore>, budget: usize);
    /// Between batches: moves cold pages to disk if past the budget.
    fn spill(&mut self) -> Result<(), Error>;
    /// What the operator keeps on disk: pages and bytes.
    fn spilled(&self) -> (usize, u64);
}

impl<T: PagedGroups> Paged for T {
    fn snapshot_head(&self, out: Vec<u8>) -> Result<Vec<u8>, Error> {
        self.head_bytes(out)
    }

    fn restore_head(&mut self, bytes: &[u8]) -> Result<(), Error> {
        self.restore_from_head(bytes)
    }

    fn take_dirty_pages(&mut self, all: bool, out: &mut Vec<u32>) {
        let PagedState { table, dirty, spilling } = self.groups_mut();
        dirty.take(all, spilling.ids(table), out);
    }

    fn snapshot_page(&self, page: u32, out: Vec<u8>) -> Result<Vec<u8>, Error> {
        self.groups().spilling.snapshot_page(self, page, out)
    }

    fn restore_page(&mut self, page: u32, bytes: &[u8]) -> Result<(), Error> {
        self.restore_from_page(page, bytes)
    }

    fn pages_restored(&mut self) -> Result<(), Error> {
        self.check_restored()
    }

    fn attach_spill(&mut self, store: Box<dyn SpillStore>, budget: usize) {
        self.groups_mut().spilling.spill = Some(Spill::new(store, budget));
    }

    fn spill(&mut self) -> Result<(), Error> {
        self.spill_cold()
    }

    fn spilled(&self) -> (usize, u64) {
        self.groups().spilling.spilled()
    }
}
