//! State larger than memory: pages of groups spilled to disk.
//!
//! An operator that keeps its state per group id in pages of
//! [`PAGE_GROUPS`] groups (`crate::pages`) can move whole pages out of
//! memory once its state passes its share of the memory budget, and read
//! one back when a row's key belongs to it — hot keys stay in memory,
//! cold ones go to disk, as Kafka Streams and Flink do with RocksDB and
//! Feldera with its spilling storage.
//!
//! A spilled page is written exactly as a checkpoint writes it
//! ([`crate::Operator::snapshot_page`]): a checkpoint of a page changed
//! before it was spilled copies its bytes from disk, and a restore can put
//! a page straight onto disk. What the store holds is a cache of the
//! checkpoint, never read across restarts (the runtime clears it when it
//! opens it): a restore rebuilds it from the state topic or the worker's
//! copy.
//!
//! The page a group lives in stays its identity in checkpoints; in memory
//! it sits in some *block* of [`BLOCK`] ids of the group table. [`PageMap`]
//! maps the two once anything was spilled: a block freed by a spill takes
//! another page read back, or new groups (which get a new page, or one no
//! longer used). An operator that never spilled has no map: block `b`
//! holds page `b`, as before spilling existed, and its checkpoints are
//! written exactly as they were.

use std::ops::Range;

use serde::{Deserialize, Serialize};

use crate::Error;
use crate::group_keys::{BLOCK, GroupTable, hash_key};
use crate::key_filter::KeyFilter;
use crate::pages::{
    KeyedPageIn, PAGE_GROUPS, TableHead, check_complete, page_groups, read_page_and_rest, restore_page_keys,
};

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

/// Entries past twice those of keys in memory beyond which an index by
/// time (a join's expiry heap, session windows' ends) moves the entries
/// of keys on disk to their pages' times (`crate::page_due`): such an
/// index keeps a key's entries when the key goes to disk (a heap cannot
/// take one out), and past a few million keys on disk it held more
/// memory than the keys in memory. In tests, soon.
pub(crate) const FOLD_AT: usize = if cfg!(test) { 64 } else { 1 << 16 };

/// Blocks in memory at or under which the clock evicts none in use
/// ([`PageMap::victims`]).
const FEW_BLOCKS: usize = 16;

/// A block without a page (spare), or a page a restore has not yet read.
const NONE: u32 = u32::MAX;
/// A page on disk.
const SPILLED: u32 = u32::MAX - 1;
/// A page no group uses (its groups were all freed before it was spilled).
const UNUSED: u32 = u32::MAX - 2;

/// Pages against blocks, once an operator has spilled.
#[derive(Debug, Default)]
pub struct PageMap {
    /// The page each block of the group table holds (`NONE`: spare).
    page_of_block: Vec<u32>,
    /// The block holding each page, `SPILLED`, or `UNUSED` for a page no
    /// group uses (all its groups freed before it was spilled): its number
    /// is handed out again before a new one.
    block_of_page: Vec<u32>,
    unused: Vec<u32>,
    /// Whether a group of each block was used since the clock last passed
    /// it (second-chance eviction).
    used: Vec<bool>,
    hand: usize,
    spilled: usize,
}

/// Where a page is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PageIs {
    InBlock(u32),
    Spilled,
    Unused,
    /// Not read back yet by a restore (or past the pages handed out).
    Missing,
}

impl PageMap {
    /// The map of a table of `blocks` blocks that never spilled: block
    /// `b` holds page `b`.
    pub fn identity(blocks: usize) -> Self {
        let ids = (0..u32::try_from(blocks).unwrap_or(u32::MAX)).collect::<Vec<_>>();
        Self { page_of_block: ids.clone(), block_of_page: ids, used: vec![true; blocks], ..Self::default() }
    }

    /// A map with no block, for a restore of `pages` pages of which
    /// `unused` hold no group: each other page is then placed in a block
    /// ([`PageMap::place`]) or left on disk ([`PageMap::restored_to_disk`]).
    pub fn for_restore(pages: u32, unused: Vec<u32>) -> Self {
        let mut block_of_page = vec![NONE; pages as usize];
        for &p in &unused {
            if let Some(b) = block_of_page.get_mut(p as usize) {
                *b = UNUSED;
            }
        }
        Self { block_of_page, unused, ..Self::default() }
    }

    /// Whether every page a restore's head listed came back (or is unused).
    pub fn complete(&self) -> bool {
        self.block_of_page.iter().all(|&b| b != NONE)
            && self.unused.iter().all(|&p| self.block_of_page.get(p as usize) == Some(&UNUSED))
    }

    /// Page numbers handed out.
    pub fn pages(&self) -> u32 {
        u32::try_from(self.block_of_page.len()).unwrap_or(u32::MAX)
    }

    /// Pages no group uses, in the order they are handed out again.
    pub fn unused(&self) -> &[u32] {
        &self.unused
    }

    pub fn spilled(&self) -> usize {
        self.spilled
    }

    pub fn where_is(&self, page: u32) -> PageIs {
        match self.block_of_page.get(page as usize).copied() {
            Some(SPILLED) => PageIs::Spilled,
            Some(UNUSED) => PageIs::Unused,
            Some(NONE) | None => PageIs::Missing,
            Some(b) => PageIs::InBlock(b),
        }
    }

    /// The id group `slot` of the table has in checkpoints (its page's
    /// number times [`PAGE_GROUPS`], plus its place in the page).
    #[inline]
    pub fn stable(&self, slot: u32) -> u32 {
        let block = slot as usize / BLOCK;
        self.page_of_block[block] * PAGE_GROUPS + slot % PAGE_GROUPS
    }

    /// The slot of group `id` (a [`PageMap::stable`] id) when its page is
    /// in memory.
    pub fn slot(&self, id: u32) -> Option<u32> {
        match self.where_is(id / PAGE_GROUPS) {
            PageIs::InBlock(b) => Some(b * PAGE_GROUPS + id % PAGE_GROUPS),
            _ => None,
        }
    }

    /// Marks the block of `slot` as used, giving it a page if it has none
    /// (a block newly made, or a spare one taken for new groups).
    #[inline]
    pub fn touch(&mut self, slot: u32) {
        let block = slot as usize / BLOCK;
        if block >= self.page_of_block.len() {
            self.page_of_block.resize(block + 1, NONE);
            self.used.resize(block + 1, false);
        }
        if self.page_of_block[block] == NONE {
            let page = self.unused.pop().unwrap_or_else(|| {
                self.block_of_page.push(UNUSED);
                u32::try_from(self.block_of_page.len() - 1).unwrap_or(u32::MAX)
            });
            self.place(page, u32::try_from(block).unwrap_or(u32::MAX));
        }
        self.used[block] = true;
    }

    /// Page `page` now sits in block `block`.
    pub fn place(&mut self, page: u32, block: u32) {
        let b = block as usize;
        if b >= self.page_of_block.len() {
            self.page_of_block.resize(b + 1, NONE);
            self.used.resize(b + 1, false);
        }
        if self.block_of_page.len() <= page as usize {
            self.block_of_page.resize(page as usize + 1, NONE);
        }
        if self.block_of_page[page as usize] == SPILLED {
            self.spilled -= 1;
        }
        self.page_of_block[b] = page;
        self.block_of_page[page as usize] = block;
        self.used[b] = true;
    }

    /// Page `page` of a restore went straight to disk.
    pub fn restored_to_disk(&mut self, page: u32) {
        if let Some(b) = self.block_of_page.get_mut(page as usize)
            && *b == NONE
        {
            *b = SPILLED;
            self.spilled += 1;
        }
    }

    /// Up to `n` blocks the clock finds unused since it last passed them
    /// (it clears the flags it passes), never one of `keep`; a second turn
    /// takes blocks used since then, unless at most [`FEW_BLOCKS`] are in
    /// memory: a few groups then hold the state (a COUNT(DISTINCT) per
    /// day), and evicting them would read them back at the next row and
    /// write them out again at every spill — the whole state each time.
    /// They stay, and the state grows to its limit and stops there with
    /// the limit's message.
    pub fn victims(&mut self, n: usize, keep: impl Fn(u32) -> bool) -> Vec<u32> {
        let blocks = self.page_of_block.len();
        let mut out = Vec::with_capacity(n);
        let mut taken = vec![false; blocks];
        let turns = if self.page_of_block.iter().filter(|&&p| p != NONE).count() > FEW_BLOCKS { 2 } else { 1 };
        // Two turns at most: the first clears every flag.
        for _ in 0..blocks.saturating_mul(turns) {
            if out.len() >= n {
                break;
            }
            let b = self.hand;
            self.hand = (self.hand + 1) % blocks.max(1);
            let block = u32::try_from(b).unwrap_or(u32::MAX);
            if self.page_of_block[b] == NONE || taken[b] || keep(block) {
                continue;
            }
            if std::mem::take(&mut self.used[b]) {
                continue;
            }
            taken[b] = true;
            out.push(block);
        }
        out
    }

    /// Block `block`'s page went to disk (`spilled`), or held no group
    /// and is handed out again; the block is spare.
    pub fn evicted(&mut self, block: u32, spilled: bool) {
        let page = std::mem::replace(&mut self.page_of_block[block as usize], NONE);
        if spilled {
            self.block_of_page[page as usize] = SPILLED;
            self.spilled += 1;
        } else {
            self.block_of_page[page as usize] = UNUSED;
            self.unused.push(page);
        }
    }

    /// The page block `block` holds.
    pub fn page_of(&self, block: u32) -> u32 {
        self.page_of_block[block as usize]
    }

    pub fn heap_bytes(&self) -> usize {
        (self.page_of_block.capacity() + self.block_of_page.capacity() + self.unused.capacity()) * 4
            + self.used.capacity()
    }
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

/// An operator whose state is kept per group of a [`GroupTable`], in
/// pages of [`PAGE_GROUPS`] groups whose bytes start with their keys (as
/// [`crate::pages::page_keys`] lists them): what [`Spilling`] needs of it
/// to move pages to disk and back. Each method is called while the
/// operator's own [`Spilling`] is lent out ([`PagedGroups::with_spilling`]),
/// so none may use it.
pub(crate) trait PagedGroups: Sized {
    fn table(&self) -> &GroupTable;
    fn table_mut(&mut self) -> &mut GroupTable;
    fn spilling_mut(&mut self) -> &mut Spilling;
    /// The bytes of the groups `range` of the table, as the operator's
    /// `snapshot_page` writes a page.
    fn page_bytes(&self, range: Range<usize>, out: Vec<u8>) -> Result<Vec<u8>, Error>;
    /// Puts the groups of page `page` (its bytes as [`PagedGroups::page_bytes`]
    /// writes them) into block `block` of the table: their keys
    /// ([`place_keys`]) and their values.
    fn load_page(&mut self, page: u32, bytes: &[u8], block: u32) -> Result<(), Error>;
    /// Drops what the groups `range` hold beside their keys (their page
    /// went to disk; the table takes the keys out).
    fn drop_groups(&mut self, range: Range<usize>);
    /// The state's bytes in memory, [`Spilling`]'s own not counted.
    fn own_bytes(&self) -> usize;
    /// What the groups keep beside their places in the table, and which
    /// grows without new groups (a join's kept rows): none by default.
    fn row_bytes(&self) -> usize {
        0
    }
    /// Page `page` of a restore went straight to disk (its bytes): what
    /// the operator keeps in memory about a group on disk — when the
    /// watermark must visit it — it files here.
    fn restored_to_disk(&mut self, _page: u32, _bytes: &[u8]) -> Result<(), Error> {
        Ok(())
    }

    /// Checks page `page`'s bytes and reads the keys they start with.
    fn page_keys<'b>(&self, page: u32, bytes: &'b [u8]) -> Result<Vec<Option<&'b [u8]>>, Error> {
        read_page_and_rest(page, bytes).map(|(keys, _)| keys)
    }

    /// Runs `f` with the operator's [`Spilling`] lent out beside it.
    fn with_spilling<R>(&mut self, f: impl FnOnce(&mut Spilling, &mut Self) -> R) -> R {
        let mut spilling = std::mem::take(self.spilling_mut());
        let out = f(&mut spilling, self);
        *self.spilling_mut() = spilling;
        out
    }
}

/// The [`PagedGroups`] accessors of an operator whose group table is its
/// field `table` and whose [`Spilling`] is its field `spilling`.
macro_rules! paged_groups_fields {
    () => {
        fn table(&self) -> &crate::group_keys::GroupTable {
            &self.table
        }

        fn table_mut(&mut self) -> &mut crate::group_keys::GroupTable {
            &mut self.table
        }

        fn spilling_mut(&mut self) -> &mut crate::spill::Spilling {
            &mut self.spilling
        }
    };
}
pub(crate) use paged_groups_fields;

/// The [`crate::Operator`] methods every paged operator that spills
/// implements alike: its pages flagged in its field `dirty`, its group
/// table in `table`, its [`Spilling`] in `spilling`.
macro_rules! spilling_operator_methods {
    () => {
        fn take_dirty_pages(&mut self, all: bool, out: &mut Vec<u32>) {
            self.dirty.take(all, self.spilling.ids(&self.table), out);
        }

        fn snapshot_page(&self, page: u32, out: Vec<u8>) -> Result<Vec<u8>, crate::Error> {
            self.spilling.snapshot_page(self, page, out)
        }

        fn attach_spill(
            &mut self,
            store: Box<dyn crate::spill::SpillStore>,
            budget: usize,
        ) -> Result<(), Box<dyn crate::spill::SpillStore>> {
            self.spilling.spill = Some(crate::spill::Spill::new(store, budget));
            Ok(())
        }

        fn spilled(&self) -> (usize, u64) {
            self.spilling.spilled()
        }

        fn spills(&self) -> bool {
            true
        }
    };
    // An operator with nothing of its own to do once its pages are
    // restored, nor beside spilling between batches.
    (plain) => {
        crate::spill::spilling_operator_methods!();

        fn pages_restored(&mut self) -> Result<(), crate::Error> {
            self.spilling.pages_restored(&self.table)
        }

        fn spill(&mut self) -> Result<(), crate::Error> {
            self.with_spilling(|s, op| s.spill_cold(op))
        }
    };
}
pub(crate) use spilling_operator_methods;

/// Restores page `page` of a checkpoint of a [`KeyedPageIn`] whose groups
/// are `G`s: through the operator's spill store when its head spilled
/// ([`Spilling::restore_page`]), else into the table's ids of that page —
/// their keys set, and each group's entry handed to `entry` with its id.
pub(crate) fn restore_keyed_page<'b, T: PagedGroups, G: Deserialize<'b>>(
    op: &mut T,
    page: u32,
    bytes: &'b [u8],
    mut entry: impl FnMut(&mut T, usize, G) -> Result<(), Error>,
) -> Result<(), Error> {
    if op.with_spilling(|s, op| s.restore_page(op, page, bytes))? {
        return Ok(());
    }
    let (p, _): (KeyedPageIn<'b, Vec<G>>, _) = read_page_and_rest(page, bytes)?;
    restore_page_keys(op.table_mut(), page, &p.keys)?;
    let start = page_groups(page, usize::MAX).start;
    for (i, group) in p.groups.into_iter().enumerate() {
        entry(op, start + i, group)?;
    }
    Ok(())
}

/// Loads page `page` (a [`KeyedPageIn`] whose groups are `G`s) into block
/// `block` of the table ([`PagedGroups::load_page`]): its keys placed, and
/// each group's entry handed to `entry` with its slot and its id in
/// checkpoints.
pub(crate) fn load_keyed_page<'b, T: PagedGroups, G: Deserialize<'b>>(
    op: &mut T,
    page: u32,
    bytes: &'b [u8],
    block: u32,
    mut entry: impl FnMut(&mut T, usize, u32, G) -> Result<(), Error>,
) -> Result<(), Error> {
    let (p, _): (KeyedPageIn<'b, Vec<G>>, _) = read_page_and_rest(page, bytes)?;
    place_keys(op.table_mut(), block, &p.keys)?;
    let start = block as usize * BLOCK;
    for (i, group) in p.groups.into_iter().enumerate().take(BLOCK) {
        let id = (page * PAGE_GROUPS).saturating_add(u32::try_from(i).unwrap_or(u32::MAX));
        entry(op, start + i, id, group)?;
    }
    Ok(())
}

/// Gives the groups of block `block` (taken with
/// [`GroupTable::take_block`]) the keys of a page read back; an id with
/// none is handed to new groups.
pub(crate) fn place_keys(table: &mut GroupTable, block: u32, keys: &[Option<&[u8]>]) -> Result<(), Error> {
    let start = block as usize * BLOCK;
    for i in (0..BLOCK).rev() {
        let gid = u32::try_from(start + i).unwrap_or(u32::MAX);
        match keys.get(i) {
            Some(Some(key)) => table.set_key(gid, key)?,
            _ => table.release(gid),
        }
    }
    Ok(())
}

/// The room for new groups a spilling operator keeps: a few batches'
/// worth (a hopping window makes several groups of a row).
const SPILL_ROOM: usize = 16_384;

/// The head of a checkpoint of an operator that spilled: how many pages
/// it handed out, those no group uses, how many groups it holds, and what
/// else the operator keeps (`rest`, serialised after them).
#[derive(Debug, Serialize)]
pub(crate) struct SpilledHeadRef<'a, X> {
    pub pages: u32,
    pub unused: &'a [u32],
    pub groups: u64,
    pub rest: X,
}

#[derive(Debug, Deserialize)]
pub(crate) struct SpilledHead<X> {
    pub pages: u32,
    pub unused: Vec<u32>,
    pub groups: u64,
    pub rest: X,
}

/// What a [`PagedGroups`] operator keeps to spill: its store (once
/// attached), the map of pages to blocks (once it spilled) and, during a
/// restore of a head that spilled, the groups it listed.
#[derive(Debug, Default)]
pub(crate) struct Spilling {
    pub pages: Option<Box<PageMap>>,
    pub spill: Option<Spill>,
    restore_groups: Option<u64>,
    /// The key id of each row of the batch [`Spilling::find_keys`] last
    /// found (`u32::MAX`: a row with no key).
    pub gids: Vec<u32>,
    /// Rows whose key was not in memory: their place in `gids` and their
    /// key's bytes in `pending_keys` (scratch).
    pending: Vec<(usize, Range<usize>)>,
    pending_keys: Vec<u8>,
    key: Vec<u8>,
}

impl Spilling {
    /// Whether pages moved (a key not in memory may be on disk).
    #[inline]
    pub fn spilled_any(&self) -> bool {
        self.pages.is_some()
    }

    /// The id group `slot` has in checkpoints: `slot` itself until the
    /// operator spilled.
    #[inline]
    pub fn stable(&self, slot: u32) -> u32 {
        self.pages.as_ref().map_or(slot, |m| m.stable(slot))
    }

    /// Marks the block of `slot` as used (once the operator spilled).
    #[inline]
    pub fn touch(&mut self, slot: u32) {
        if let Some(pages) = &mut self.pages {
            pages.touch(slot);
        }
    }

    /// Takes group `gid` out of `table` (it holds nothing). A block whose
    /// groups are all gone is handed back at once for the next page read
    /// back: where the watermark or deletions read pages back to let
    /// their keys go, blocks kept until the clock evicted them grew the
    /// table a block per page read (at q9's 100 M events, 2 M ids for
    /// 64 K keys).
    pub fn remove_group(&mut self, table: &mut GroupTable, gid: u32) {
        table.remove(gid);
        let block = gid / PAGE_GROUPS;
        if table.block_is_free(block)
            && let Some(pages) = &mut self.pages
        {
            pages.evicted(block, false);
            table.evict_blocks(&[block]);
        }
    }

    /// Ids a checkpoint of every page covers.
    pub fn ids(&self, table: &GroupTable) -> usize {
        self.pages.as_ref().map_or(table.capacity(), |m| m.pages() as usize * PAGE_GROUPS as usize)
    }

    /// Groups held, in memory and on disk.
    pub fn groups(&self, table: &GroupTable) -> usize {
        table.live() + self.spill.as_ref().map_or(0, Spill::groups)
    }

    pub fn heap_bytes(&self) -> usize {
        self.pages.as_ref().map_or(0, |m| m.heap_bytes())
            + self.spill.as_ref().map_or(0, Spill::heap_bytes)
            + self.gids.capacity() * 4
            + self.pending.capacity() * size_of::<(usize, Range<usize>)>()
            + self.pending_keys.capacity()
            + self.key.capacity()
    }

    /// Finds (or makes) the key id of each of `rows`, into
    /// [`Spilling::gids`]: `encode` writes a row's key, or says it has none.
    /// Once the operator spilled, a key not in memory waits until the
    /// others are found (a batch's hot keys are not evicted by its cold
    /// ones); then its page is read back from disk, or it is made new —
    /// in the rows' order, so a key's rows see one group.
    pub fn find_keys<T: PagedGroups>(
        &mut self,
        op: &mut T,
        rows: &[usize],
        mut encode: impl FnMut(usize, &mut Vec<u8>) -> bool,
    ) -> Result<(), Error> {
        self.gids.clear();
        self.pending.clear();
        self.pending_keys.clear();
        let spilled = self.spilled_any();
        for &r in rows {
            self.key.clear();
            if !encode(r, &mut self.key) {
                self.gids.push(u32::MAX);
                continue;
            }
            let gid = if spilled {
                op.table().find(&self.key).unwrap_or_else(|| {
                    let at = self.pending_keys.len();
                    self.pending_keys.extend_from_slice(&self.key);
                    self.pending.push((self.gids.len(), at..self.pending_keys.len()));
                    u32::MAX
                })
            } else {
                op.table_mut().find_or_insert(&self.key).0
            };
            self.gids.push(gid);
        }
        let (pending, keys) = (std::mem::take(&mut self.pending), std::mem::take(&mut self.pending_keys));
        for (at, key) in &pending {
            let key = &keys[key.clone()];
            self.gids[*at] = match self.find(op, key)? {
                Some(gid) => gid,
                None => op.table_mut().find_or_insert(key).0,
            };
        }
        (self.pending, self.pending_keys) = (pending, keys);
        if let Some(pages) = &mut self.pages {
            for &gid in self.gids.iter().filter(|&&g| g != u32::MAX) {
                pages.touch(gid);
            }
        }
        Ok(())
    }

    /// Pages on disk and the bytes they take.
    pub fn spilled(&self) -> (usize, u64) {
        match (&self.pages, &self.spill) {
            (Some(pages), Some(spill)) => (pages.spilled(), spill.disk_bytes()),
            _ => (0, 0),
        }
    }

    /// Drops what was spilled (a restore starts over).
    pub fn forget(&mut self) -> Result<(), Error> {
        self.pages = None;
        self.restore_groups = None;
        if let Some(spill) = &mut self.spill {
            spill.clear()?;
        }
        Ok(())
    }

    /// The head of a checkpoint once the operator spilled (else `None`:
    /// its pages are in the table's order, and its own head says so).
    pub fn head<'a, X>(&'a self, table: &GroupTable, rest: X) -> Option<SpilledHeadRef<'a, X>> {
        let pages = self.pages.as_ref()?;
        Some(SpilledHeadRef {
            pages: pages.pages(),
            unused: pages.unused(),
            groups: u64::try_from(self.groups(table)).unwrap_or(u64::MAX),
            rest,
        })
    }

    /// A restore of a head written by [`Spilling::head`] begins: pages
    /// come next.
    pub fn restore_head<X>(&mut self, head: SpilledHead<X>) -> Result<X, Error> {
        self.forget()?;
        self.pages = Some(Box::new(PageMap::for_restore(head.pages, head.unused)));
        self.restore_groups = Some(head.groups);
        Ok(head.rest)
    }

    /// Restores an operator's head, as `crate::operator::write_state`
    /// wrote it: one written once it spilled (tag `spilled`; its pages
    /// follow, [`Spilling::restore_page`]), or else the head of its table
    /// (tag `table`), returned for the operator to size its state by.
    pub fn restore_either_head(&mut self, bytes: &[u8], spilled: u32, table: u32) -> Result<Option<TableHead>, Error> {
        fn read<'a, S: Deserialize<'a>>(tag: u32, bytes: &'a [u8]) -> Result<S, Error> {
            let ((found, state), _): ((u32, S), _) =
                postcard::take_from_bytes(bytes).map_err(|e| Error::Checkpoint(format!("cannot read state: {e}")))?;
            if found != tag {
                return Err(Error::Checkpoint("checkpoint operator does not match the query".into()));
            }
            Ok(state)
        }
        self.forget()?;
        if postcard::take_from_bytes::<u32>(bytes).is_ok_and(|(tag, _)| tag == spilled) {
            self.restore_head(read::<SpilledHead<()>>(spilled, bytes)?)?;
            return Ok(None);
        }
        read(table, bytes).map(Some)
    }

    /// The group of `key`: in memory, or in a page read back from disk.
    pub fn find<T: PagedGroups>(&mut self, op: &mut T, key: &[u8]) -> Result<Option<u32>, Error> {
        if let Some(gid) = op.table().find(key) {
            return Ok(Some(gid));
        }
        let Some(page) = self.spill.as_ref().map(|s| s.page_of(key)).transpose()?.flatten() else {
            return Ok(None);
        };
        // The store may still file the key under a page read back since
        // (`SpillStore::key_page`): its group is not on disk.
        if self.pages.as_ref().is_none_or(|m| m.where_is(page) != PageIs::Spilled) {
            return Ok(None);
        }
        self.read_back(op, page)?;
        Ok(op.table().find(key))
    }

    /// Reads spilled page `page` back into memory.
    pub fn read_back<T: PagedGroups>(&mut self, op: &mut T, page: u32) -> Result<(), Error> {
        let (Some(pages), Some(spill)) = (&mut self.pages, &mut self.spill) else {
            return Err(Error::Internal(format!("page {page} read back with nothing spilled")));
        };
        if pages.where_is(page) != PageIs::Spilled {
            return Err(Error::Internal(format!("page {page} of an operator's state is not on disk")));
        }
        let bytes = spill.page(page)?;
        let block = op.table_mut().take_block();
        op.load_page(page, &bytes, block)?;
        let start = block as usize * BLOCK;
        let table = op.table();
        let keys = (start..start + BLOCK).filter_map(|g| table.key_of(u32::try_from(g).unwrap_or(u32::MAX)));
        spill.remove(page, keys)?;
        pages.place(page, block);
        Ok(())
    }

    /// The slot of group `id` (as pages number it), its page read back
    /// from disk first if it is there.
    pub fn slot_of<T: PagedGroups>(&mut self, op: &mut T, id: u32) -> Result<u32, Error> {
        let page = id / PAGE_GROUPS;
        if self.pages.as_ref().is_some_and(|m| m.where_is(page) == PageIs::Spilled) {
            self.read_back(op, page)?;
        }
        self.pages.as_ref().and_then(|m| m.slot(id)).ok_or_else(|| Error::Internal(format!("group {id} has no page")))
    }

    /// Keeps the state within its budget by spilling rather than growing.
    /// The table's allocations grow by doubling: while doubling them stays
    /// within the budget they may, but once the state holds more than half
    /// of it and the table has room for fewer than [`SPILL_ROOM`] new
    /// groups, an eighth of its blocks (at least room for twice that many)
    /// go to disk instead — those the clock finds unused since it last
    /// passed them. New groups and pages read back then take the room
    /// freed, and memory holds still.
    ///
    /// It spills too, whatever room the table has, once what the groups
    /// keep beside the table ([`PagedGroups::row_bytes`]) passes half the
    /// budget: a join's rows grow on keys it already holds (a watermark
    /// held back keeps every row), and with its table roomy from keys let
    /// go it spilled nothing until the state limit stopped it. (Not the
    /// whole state: the table's own room, sized by its capacity, does not
    /// shrink, and past the budget alone it would spill at every batch.)
    pub fn spill_cold<T: PagedGroups>(&mut self, op: &mut T) -> Result<(), Error> {
        let Some(budget) = self.spill.as_ref().map(|s| s.budget) else { return Ok(()) };
        let table = op.table();
        let blocks = table.capacity().div_ceil(BLOCK);
        let roomy = table.headroom() >= SPILL_ROOM && op.row_bytes() <= budget / 2;
        if blocks == 0 || roomy || op.own_bytes() + self.heap_bytes() <= budget / 2 {
            return Ok(());
        }
        let mut pages = self.pages.take().unwrap_or_else(|| Box::new(PageMap::identity(blocks)));
        let victims = pages.victims((blocks / 8).max(2 * SPILL_ROOM / BLOCK), |_| false);
        let groups = table.capacity();
        let mut bytes = Vec::new();
        for &block in &victims {
            let start = block as usize * BLOCK;
            let range = start..(start + BLOCK).min(groups);
            let spilled = !op.table().block_is_free(block);
            if spilled {
                bytes.clear();
                bytes = op.page_bytes(range.clone(), bytes)?;
                let table = op.table();
                let keys = range.clone().filter_map(|g| table.key_of(u32::try_from(g).unwrap_or(u32::MAX)));
                if let Some(spill) = &mut self.spill {
                    spill.put(pages.page_of(block), &bytes, keys)?;
                }
            }
            pages.evicted(block, spilled);
            op.drop_groups(range);
        }
        op.table_mut().evict_blocks(&victims);
        self.pages = Some(pages);
        Ok(())
    }

    /// Page `page`'s bytes for a checkpoint once the operator spilled:
    /// from its block, or copied from disk (`None` before it spilled: the
    /// page is the table's groups of that number).
    pub fn snapshot_page<T: PagedGroups>(&self, op: &T, page: u32, out: Vec<u8>) -> Result<Vec<u8>, Error> {
        let groups = op.table().capacity();
        let Some(pages) = &self.pages else {
            return op.page_bytes(page_groups(page, groups), out);
        };
        match pages.where_is(page) {
            PageIs::InBlock(block) => {
                let start = block as usize * BLOCK;
                op.page_bytes(start..(start + BLOCK).min(groups), out)
            }
            PageIs::Spilled => {
                let Some(spill) = &self.spill else {
                    return Err(Error::Internal(format!("spilled page {page} with no store")));
                };
                let mut out = out;
                out.extend_from_slice(&spill.page(page)?);
                Ok(out)
            }
            // No group: a page of none.
            PageIs::Unused | PageIs::Missing => op.page_bytes(0..0, out),
        }
    }

    /// Restores page `page` of a head that spilled ([`Spilling::restore_head`]):
    /// into a block of the table, or — past half the budget — straight to
    /// disk, so a state larger than memory restores without filling it.
    /// False when the head was not one that spilled (the operator restores
    /// the page in the table's order).
    pub fn restore_page<T: PagedGroups>(&mut self, op: &mut T, page: u32, bytes: &[u8]) -> Result<bool, Error> {
        let Some(pages) = &mut self.pages else { return Ok(false) };
        match pages.where_is(page) {
            PageIs::Missing if page < pages.pages() => {}
            // A page the head lists as unused holds no group.
            PageIs::Unused => return Ok(true),
            _ => {
                return Err(Error::Checkpoint(format!("state page {page} is not one the head lists, or came twice")));
            }
        }
        let keys = op.page_keys(page, bytes)?;
        let held = op.own_bytes() + pages.heap_bytes();
        if let Some(spill) = self.spill.as_mut().filter(|s| held + s.heap_bytes() > s.budget / 2) {
            spill.put(page, bytes, keys.iter().flatten().copied())?;
            pages.restored_to_disk(page);
            op.restored_to_disk(page, bytes)?;
        } else {
            let block = op.table_mut().take_block();
            op.load_page(page, bytes, block)?;
            pages.place(page, block);
        }
        Ok(true)
    }

    /// Every page is restored: checks that every group the head listed
    /// came back.
    pub fn pages_restored(&mut self, table: &GroupTable) -> Result<(), Error> {
        match (&self.pages, self.restore_groups.take()) {
            (Some(pages), Some(groups)) => {
                if !pages.complete() || u64::try_from(self.groups(table)).unwrap_or(u64::MAX) != groups {
                    return Err(Error::Checkpoint(
                        "the checkpoint's pages do not hold every group its head lists: the state topic was \
                         changed outside Sluice"
                            .into(),
                    ));
                }
                Ok(())
            }
            _ => check_complete(table),
        }
    }
}

/// A store in memory, for the engine's own tests of spilling. As the
/// worker's store may, it applies a page's removal only at its next
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_and_pages_map_both_ways_and_the_clock_gives_a_second_chance() {
        let mut m = PageMap::identity(4);
        assert_eq!(m.stable(13), 13);
        assert_eq!(
            m.victims(2, |_| false),
            Vec::<u32>::new(),
            "few blocks, every one used: the turn clears, takes none"
        );
        let first = m.victims(2, |_| false);
        assert_eq!(first, vec![0, 1], "unused since the clock passed: taken");
        let mut many = PageMap::identity(FEW_BLOCKS + 4);
        assert_eq!(many.victims(2, |_| false), vec![0, 1], "many blocks: the first turn clears, the second takes");
        m.evicted(0, true);
        m.evicted(1, false);
        assert_eq!((m.where_is(0), m.where_is(1)), (PageIs::Spilled, PageIs::Unused));
        assert_eq!(m.spilled(), 1);
        // New groups in block 1 (spare) reuse the unused page 1.
        m.touch(9);
        assert_eq!((m.page_of(1), m.stable(9)), (1, 9));
        // Page 0 read back into block 4, a new one.
        m.place(0, 4);
        assert_eq!((m.spilled(), m.slot(3), m.stable(35)), (0, Some(35), 3));
        // A new block gets a new page.
        m.touch(5 * 8);
        assert_eq!(m.page_of(5), 4);
        assert_eq!(m.pages(), 5);
        assert_eq!(m.victims(8, |b| b != 2), vec![2], "kept blocks are passed over");
    }

    use std::collections::BTreeMap;

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
    use std::sync::Arc;

    use sluice_crds::{ColumnType, EventTimeSpec, SourceSpec};
    use sluice_plan::{Batch, Column, ColumnData, DataType, Value};

    use crate::{Engine, EngineOptions, Output};
    use sluice_plan::EmittedRows;

    /// Every row emitted, as text, in order.
    #[derive(Default)]
    struct Rows(Vec<(bool, String)>);
    impl Output for Rows {
        fn rows(&mut self, rows: &EmittedRows<'_>) -> Result<(), Error> {
            rows.selection.for_each(|r| {
                let text = rows
                    .columns
                    .iter()
                    .map(|v| match v {
                        Value::Column(c) => format!("{:?}", c.scalar(r)),
                        Value::Scalar(s, _) => format!("{s:?}"),
                    })
                    .collect::<Vec<_>>()
                    .join(",");
                self.0.push((rows.delete, text));
            });
            Ok(())
        }
        fn late(&mut self, _: &Batch, _: &[u32]) -> Result<(), Error> {
            Ok(())
        }
    }

    impl Rows {
        /// The last row of each key (the first column) and whether it was
        /// a deletion: what an upsert sink ends up holding.
        fn last_per_key(&self) -> BTreeMap<String, (bool, String)> {
            let mut out = BTreeMap::new();
            for (delete, row) in &self.0 {
                let key = row.split(',').next().unwrap_or_default().to_owned();
                out.insert(key, (*delete, row.clone()));
            }
            out
        }
    }

    fn plan(sql: &str) -> Arc<sluice_plan::Plan> {
        plan_late(sql, 0)
    }

    /// [`plan`] with rows up to `delay` ms out of order.
    fn plan_late(sql: &str, delay: i64) -> Arc<sluice_plan::Plan> {
        let source = SourceSpec {
            partition_key: vec!["k".into()],
            event_time: Some(EventTimeSpec { column: "ts".into(), watermark_delay_millis: delay }),
            ..SourceSpec::table(
                "t",
                &[
                    ("k", ColumnType::Bigint, true),
                    ("v", ColumnType::Bigint, true),
                    ("ts", ColumnType::Timestamp, true),
                ],
            )
        };
        Arc::new(sluice_sql::plan_dataflow(sql, &[source], 1).unwrap().stages[0].plan.clone())
    }

    /// Batch `b` of 500 rows: keys spread over 40,000 by a fixed LCG (a
    /// third of the rows on 600 hot ones), values that go negative now and then, event
    /// times 20 s a batch.
    fn batch(b: u64) -> Batch {
        let mut x = b.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
        let (mut k, mut v, mut ts) = (Vec::new(), Vec::new(), Vec::new());
        for i in 0..500u64 {
            x = x.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
            let r = x >> 33;
            k.push(i64::try_from(if r.is_multiple_of(3) { r % 600 } else { r % 40_000 }).unwrap());
            v.push(i64::try_from(r % 17).unwrap() - 5);
            ts.push(i64::try_from(b * 20_000 + i).unwrap());
        }
        let col = |t, v| Column::new(t, ColumnData::Int(v), None);
        Batch::new(vec![col(DataType::Bigint, k), col(DataType::Bigint, v), col(DataType::Timestamp, ts)], 500)
    }

    /// What a state topic keeps of an engine's incremental checkpoints:
    /// the last head and each page's last version.
    #[derive(Default)]
    struct Topic {
        head: Vec<u8>,
        pages: BTreeMap<u32, Vec<u8>>,
        page_bytes: usize,
    }

    impl Topic {
        fn save(&mut self, engine: &mut Engine) {
            for page in engine.take_dirty_pages() {
                let bytes = engine.snapshot_page(page).unwrap();
                self.page_bytes += bytes.len();
                self.pages.insert(page, bytes);
            }
            self.head = engine.snapshot_head().unwrap();
        }

        fn restore(&self, engine: &mut Engine) {
            engine.restore_head(&self.head).unwrap();
            for (&page, bytes) in &self.pages {
                engine.restore_page(page, bytes).unwrap();
            }
            engine.pages_restored().unwrap();
        }
    }

    fn spilling(plan: &Arc<sluice_plan::Plan>, budget: usize) -> Engine {
        let mut engine = Engine::new(Arc::clone(plan), EngineOptions::default());
        assert!(engine.attach_spill(Box::new(MemorySpill::default()), budget));
        engine
    }

    /// Runs 60 batches through an engine in memory and through one that
    /// spills past a budget of a few KiB, checkpointing it every 7 batches
    /// and restoring it into a new engine every 14 (each with a new, empty
    /// store): both emit the same rows.
    fn spills_and_agrees(sql: &str) -> (Rows, Rows) {
        let plan = plan(sql);
        let mut memory = Engine::new(Arc::clone(&plan), EngineOptions::default());
        let mut spill = spilling(&plan, 16 << 10);
        let (mut expected, mut got) = (Rows::default(), Rows::default());
        let mut topic = Topic::default();
        let (mut most_spilled, mut most_state, mut in_memory) = (0, 0, 0);
        for b in 0..60 {
            memory.process(&mut batch(b), &mut expected).unwrap();
            spill.process(&mut batch(b), &mut got).unwrap();
            most_spilled = most_spilled.max(spill.stats().spilled_pages);
            most_state = most_state.max(spill.stats().state_bytes);
            in_memory = in_memory.max(memory.stats().state_bytes);
            if b % 7 == 6 {
                topic.save(&mut spill);
            }
            if b % 14 == 13 {
                spill = spilling(&plan, 16 << 10);
                topic.restore(&mut spill);
            }
        }
        memory.finish(&mut expected).unwrap();
        spill.finish(&mut got).unwrap();
        assert!(most_spilled > 100, "{sql}: it spilled ({most_spilled} pages at most)");
        assert!(
            most_state * 2 < in_memory,
            "{sql}: the spilling engine held at most {most_state} bytes, the other {in_memory}"
        );
        (expected, got)
    }

    #[test]
    fn an_aggregate_that_spills_emits_what_it_emits_in_memory_through_checkpoints_and_restores() {
        let (expected, got) = spills_and_agrees(
            "SELECT k, COUNT(*) AS n, SUM(v) AS s, MAX(v) AS m, AVG(v) AS a, COUNT(DISTINCT v) AS d FROM t GROUP BY k",
        );
        assert_eq!(got.last_per_key(), expected.last_per_key());
        assert!(expected.last_per_key().len() > 10_000);
    }

    #[test]
    fn a_windowed_aggregate_that_spills_closes_every_window_it_closes_in_memory() {
        let sql = "SELECT k, COUNT(*) AS n, SUM(v) AS s, COUNT(DISTINCT v) AS d, window_start FROM t GROUP BY k, TUMBLE(ts, INTERVAL '10' MINUTE)";
        let (expected, got) = spills_and_agrees(sql);
        let sorted = |r: &Rows| {
            let mut rows: Vec<_> = r.0.clone();
            rows.sort();
            rows
        };
        assert!(expected.0.len() > 10_000, "{} windows closed", expected.0.len());
        assert_eq!(sorted(&got), sorted(&expected));
    }

    #[test]
    fn a_having_that_spills_retracts_what_it_retracts_in_memory() {
        let (expected, got) = spills_and_agrees("SELECT k, SUM(v) AS s FROM t GROUP BY k HAVING SUM(v) > 12");
        let last = expected.last_per_key();
        assert!(last.values().any(|(deleted, _)| *deleted), "some groups were retracted");
        assert_eq!(got.last_per_key(), last);
    }

    /// A top N and a deduplication (N = 1, the latest row per key) that
    /// spill emit the very rows, in the very order, they emit in memory.
    #[test]
    fn a_top_n_and_a_deduplication_that_spill_emit_what_they_emit_in_memory() {
        for (sql, n) in [
            (
                "SELECT k, rn, v, ts FROM (SELECT k, v, ts, ROW_NUMBER() OVER (PARTITION BY k ORDER BY v DESC) AS rn \
              FROM t) WHERE rn <= 3",
                3,
            ),
            (
                "SELECT k, v, ts FROM (SELECT k, v, ts, ROW_NUMBER() OVER (PARTITION BY k ORDER BY ts DESC) AS rn \
              FROM t) WHERE rn <= 1",
                1,
            ),
        ] {
            let (expected, got) = spills_and_agrees(sql);
            assert!(expected.0.len() > 20_000, "{n}: {} rows", expected.0.len());
            assert!(got.0 == expected.0, "top {n}: the spilling engine emitted other rows");
        }
    }

    /// OVER windows of ROWS frames — one spec, and two whose keys share
    /// the operator's table — that spill give every row the values they
    /// give it in memory, through checkpoints and restores.
    #[test]
    fn rows_windows_that_spill_give_every_row_what_they_give_it_in_memory() {
        for sql in [
            "SELECT k, v, SUM(v) OVER (PARTITION BY k ORDER BY ts ROWS BETWEEN 3 PRECEDING AND CURRENT ROW) AS s, \
             MAX(v) OVER (PARTITION BY k ORDER BY ts ROWS BETWEEN 3 PRECEDING AND CURRENT ROW) AS m FROM t",
            "SELECT k, v, AVG(v) OVER (PARTITION BY k ORDER BY ts ROWS BETWEEN 5 PRECEDING AND CURRENT ROW) AS a, \
             MIN(k) OVER (PARTITION BY v ORDER BY ts ROWS BETWEEN 2 PRECEDING AND CURRENT ROW) AS lo FROM t",
        ] {
            let (expected, got) = spills_and_agrees(sql);
            assert_eq!(expected.0.len(), 60 * 500, "{sql}: a row out per row in");
            assert!(got.0 == expected.0, "{sql}: the spilling engine gave rows other values");
        }
    }

    /// Session windows that spill close every session they close in
    /// memory, with the same bounds and values, through checkpoints and
    /// restores: sessions on disk are closed by the watermark (their
    /// pages read back), and sessions of hot keys grow and merge in
    /// memory.
    #[test]
    fn session_windows_that_spill_close_every_session_they_close_in_memory() {
        let sql = "SELECT k, COUNT(*) AS n, SUM(v) AS s, MAX(v) AS m, COUNT(DISTINCT v) AS d, window_start, window_end \
                   FROM t GROUP BY k, SESSION(ts, INTERVAL '10' MINUTE)";
        let (expected, got) = spills_and_agrees(sql);
        let sorted = |r: &Rows| {
            let mut rows: Vec<_> = r.0.clone();
            rows.sort();
            rows
        };
        assert!(expected.0.len() > 10_000, "{} sessions closed", expected.0.len());
        assert_eq!(sorted(&got), sorted(&expected));
    }

    /// Sessions of keys on disk merge: each of 6,000 keys opens two
    /// sessions 15 minutes apart (rows up to an hour out of order are on
    /// time), other keys push them to disk, then a row 7 minutes in
    /// bridges each key's two — read back from disk, they merge into one
    /// session, as in memory.
    #[test]
    fn sessions_on_disk_merge_when_a_row_bridges_them() {
        let plan = plan_late(
            "SELECT k, COUNT(*) AS n, SUM(v) AS s, window_start, window_end FROM t \
             GROUP BY k, SESSION(ts, INTERVAL '10' MINUTE)",
            3_600_000,
        );
        let rows = |keys: Range<i64>, ts: i64| {
            let n = keys.end - keys.start;
            let col = |t, v: Vec<i64>| Column::new(t, ColumnData::Int(v), None);
            Batch::new(
                vec![
                    col(DataType::Bigint, keys.clone().collect()),
                    col(DataType::Bigint, keys.map(|k| k % 7).collect()),
                    col(DataType::Timestamp, vec![ts; usize::try_from(n).unwrap()]),
                ],
                usize::try_from(n).unwrap(),
            )
        };
        let mut memory = Engine::new(Arc::clone(&plan), EngineOptions::default());
        let mut spill = spilling(&plan, 16 << 10);
        let (mut expected, mut got) = (Rows::default(), Rows::default());
        let mut feed = |batch: Batch, memory: &mut Engine, spill: &mut Engine| {
            memory.process(&mut batch.clone(), &mut expected).unwrap();
            spill.process(&mut { batch }, &mut got).unwrap();
        };
        feed(rows(0..6_000, 0), &mut memory, &mut spill);
        feed(rows(0..6_000, 900_000), &mut memory, &mut spill);
        for b in 0..20 {
            feed(rows(100_000 + b * 1_000..100_000 + (b + 1) * 1_000, 900_000), &mut memory, &mut spill);
        }
        let on_disk = spill.stats().spilled_pages;
        assert!(on_disk > 300, "the keys' pages went to disk: {on_disk}");
        // What stays in memory of a session on disk is its page's
        // earliest end (1.7 MB here; 2.9 MB with an entry per session in
        // the index by end, against 5.7 MB in memory).
        let (held, all) = (spill.stats().state_bytes, memory.stats().state_bytes);
        assert!(held * 5 < all * 2, "the spilling engine holds {held} bytes, the other {all}");
        feed(rows(0..6_000, 420_000), &mut memory, &mut spill);
        memory.finish(&mut expected).unwrap();
        spill.finish(&mut got).unwrap();
        let (mut a, mut b) = (expected.0, got.0);
        a.sort();
        b.sort();
        assert_eq!(a.len(), 6_000 + 20_000, "one session per key: {}", a.len());
        assert!(a == b, "the spilling engine closed other sessions");
    }

    /// What stays in memory of sessions on disk is a few bytes a key: each
    /// page's earliest end (8 bytes per 8 keys) and the store's filter of
    /// keys, not an entry per page in an ordered index (40 bytes per 8
    /// keys), which grew with the keys on disk past any budget.
    #[test]
    fn sessions_on_disk_cost_a_few_bytes_a_key() {
        let plan = plan_late("SELECT k, COUNT(*) AS n FROM t GROUP BY k, SESSION(ts, INTERVAL '10' MINUTE)", 3_600_000);
        let rows = |keys: Range<i64>| {
            let n = usize::try_from(keys.end - keys.start).unwrap();
            let col = |t, v: Vec<i64>| Column::new(t, ColumnData::Int(v), None);
            Batch::new(
                vec![
                    col(DataType::Bigint, keys.collect()),
                    col(DataType::Bigint, vec![1; n]),
                    col(DataType::Timestamp, vec![0; n]),
                ],
                n,
            )
        };
        let mut spill = spilling(&plan, 16 << 10);
        let mut got = Rows::default();
        let keys = 200_000;
        for b in 0..keys / 1_000 {
            spill.process(&mut rows(b * 1_000..(b + 1) * 1_000), &mut got).unwrap();
        }
        let (held, pages) = (spill.stats().state_bytes, spill.stats().spilled_pages);
        assert!(pages * 8 > keys as usize * 9 / 10, "nearly every key went to disk: {pages} pages");
        // 0.80 MB; 1.52 MB with an entry per page in the index by end.
        assert!(held < 5 * keys as usize, "{held} bytes held for {keys} keys, {pages} pages on disk");
        spill.finish(&mut got).unwrap();
        assert_eq!(got.0.len(), keys as usize, "every session closed once");
    }

    /// A row emitted: whether it deletes, and its values.
    type Emitted = (bool, String);

    /// A whole checkpoint of `sql`'s operator — the only kind it wrote
    /// before its state was paged — restores, is written again byte for
    /// byte, and the operator then checkpoints in pages that restore too,
    /// spilling: what an engine never restored emits after it, and what
    /// the restored one does, each sorted.
    fn restores_whole_then_in_pages(sql: &str) -> (Vec<Emitted>, Vec<Emitted>) {
        let plan = plan(sql);
        let mut memory = Engine::new(Arc::clone(&plan), EngineOptions::default());
        for b in 0..10 {
            memory.process(&mut batch(b), &mut Rows::default()).unwrap();
        }
        let whole = memory.snapshot().unwrap();
        let mut again = Engine::new(Arc::clone(&plan), EngineOptions::default());
        again.restore(&whole).unwrap();
        assert_eq!(again.snapshot().unwrap(), whole, "{sql}: written again as it was read");
        let mut restored = spilling(&plan, 16 << 10);
        restored.restore(&whole).unwrap();
        let mut topic = Topic::default();
        let mut tail = (Rows::default(), Rows::default());
        for b in 10..30 {
            memory.process(&mut batch(b), &mut tail.0).unwrap();
            restored.process(&mut batch(b), &mut tail.1).unwrap();
            if b == 19 {
                topic.save(&mut restored);
                assert!(
                    topic.pages.len() > 30,
                    "{sql}: every page written after a whole restore: {}",
                    topic.pages.len()
                );
                restored = spilling(&plan, 16 << 10);
                topic.restore(&mut restored);
            }
        }
        assert!(restored.stats().spilled_pages > 0, "{sql}: it spilled");
        memory.finish(&mut tail.0).unwrap();
        restored.finish(&mut tail.1).unwrap();
        let (mut a, mut b) = (tail.0.0, tail.1.0);
        a.sort();
        b.sort();
        (a, b)
    }

    /// An OVER window's whole checkpoint restores (two specs, so their
    /// keys move into one table) and it then checkpoints in pages.
    #[test]
    fn a_whole_checkpoint_of_a_rows_window_restores_and_then_checkpoints_in_pages() {
        let (expected, got) = restores_whole_then_in_pages(
            "SELECT k, SUM(v) OVER (PARTITION BY k ORDER BY ts ROWS BETWEEN 3 PRECEDING AND CURRENT ROW) AS s, \
             MAX(k) OVER (PARTITION BY v ORDER BY ts ROWS BETWEEN 4 PRECEDING AND CURRENT ROW) AS m FROM t",
        );
        assert_eq!(expected.len(), 20 * 500);
        assert!(got == expected, "the restored engine gave rows other values");
    }

    /// Session windows' whole checkpoint restores and they then
    /// checkpoint in pages.
    #[test]
    fn a_whole_checkpoint_of_session_windows_restores_and_then_checkpoints_in_pages() {
        let (expected, got) = restores_whole_then_in_pages(
            "SELECT k, COUNT(*) AS n, SUM(v) AS s FROM t GROUP BY k, SESSION(ts, INTERVAL '10' MINUTE)",
        );
        assert!(expected.len() > 5_000, "{} sessions closed", expected.len());
        assert!(got == expected, "the restored engine closed other sessions");
    }

    /// A restore into an engine whose budget is smaller than the state
    /// leaves the pages past half the budget on disk, and reads each back
    /// when its key comes.
    #[test]
    fn a_restore_larger_than_the_budget_stays_on_disk_until_read() {
        let plan = plan("SELECT k, COUNT(*) AS n, SUM(v) AS s FROM t GROUP BY k");
        let mut spill = spilling(&plan, 16 << 10);
        let mut memory = Engine::new(Arc::clone(&plan), EngineOptions::default());
        let (mut expected, mut got) = (Rows::default(), Rows::default());
        for b in 0..20 {
            memory.process(&mut batch(b), &mut expected).unwrap();
            spill.process(&mut batch(b), &mut got).unwrap();
        }
        let mut topic = Topic::default();
        topic.save(&mut spill);
        let mut restored = spilling(&plan, 16 << 10);
        topic.restore(&mut restored);
        let pages = restored.stats().spilled_pages;
        assert!(pages > 500, "most pages stayed on disk: {pages}");
        assert!(restored.stats().state_bytes < 64 << 10, "{}", restored.stats().state_bytes);
        for b in 20..30 {
            memory.process(&mut batch(b), &mut expected).unwrap();
            restored.process(&mut batch(b), &mut got).unwrap();
        }
        assert_eq!(got.last_per_key(), expected.last_per_key());
        // The restored engine checkpoints again: pages on disk are copied
        // from it when dirty, and a second restore agrees.
        let mut again = Topic { pages: topic.pages.clone(), ..Topic::default() };
        again.save(&mut restored);
        let mut third = spilling(&plan, 16 << 10);
        again.restore(&mut third);
        let mut tail = (Rows::default(), Rows::default());
        memory.process(&mut batch(30), &mut tail.0).unwrap();
        third.process(&mut batch(30), &mut tail.1).unwrap();
        assert_eq!(tail.1.last_per_key(), tail.0.last_per_key());
    }

    /// Two groups holding every distinct key, past the budget: their one
    /// block is hot at every batch and is never evicted (evicting it
    /// would read the whole state back at the next row and write it out
    /// again at every spill); the aggregate agrees with one in memory.
    #[test]
    fn a_few_hot_groups_past_the_budget_stay_in_memory() {
        let plan = plan("SELECT k % 2 AS parity, COUNT(DISTINCT k) AS keys FROM t GROUP BY k % 2");
        let mut memory = Engine::new(Arc::clone(&plan), EngineOptions::default());
        let mut spill = spilling(&plan, 16 << 10);
        let (mut expected, mut got) = (Rows::default(), Rows::default());
        let mut most_spilled = 0;
        for b in 0..20 {
            memory.process(&mut batch(b), &mut expected).unwrap();
            spill.process(&mut batch(b), &mut got).unwrap();
            most_spilled = most_spilled.max(spill.stats().spilled_pages);
        }
        assert!(spill.stats().state_bytes > 64 << 10, "past the budget: {}", spill.stats().state_bytes);
        assert_eq!(most_spilled, 0);
        assert_eq!(got.0, expected.0);
    }

    /// A COUNT(DISTINCT) aggregate's whole checkpoint — the only kind it
    /// wrote before each group kept its own values — restores, and the
    /// engine then checkpoints in pages that restore too.
    #[test]
    fn a_whole_checkpoint_of_a_count_distinct_restores_and_then_checkpoints_in_pages() {
        let plan = plan("SELECT k, COUNT(DISTINCT v) AS d, COUNT(*) AS n FROM t GROUP BY k");
        let mut memory = Engine::new(Arc::clone(&plan), EngineOptions::default());
        let (mut expected, mut got) = (Rows::default(), Rows::default());
        for b in 0..10 {
            memory.process(&mut batch(b), &mut expected).unwrap();
        }
        let whole = memory.snapshot().unwrap();
        let mut restored = spilling(&plan, 16 << 10);
        restored.restore(&whole).unwrap();
        let mut topic = Topic::default();
        for b in 10..30 {
            memory.process(&mut batch(b), &mut expected).unwrap();
            restored.process(&mut batch(b), &mut got).unwrap();
            if b == 19 {
                topic.save(&mut restored);
                assert!(topic.pages.len() > 30, "every page written after a whole restore: {}", topic.pages.len());
                restored = spilling(&plan, 16 << 10);
                topic.restore(&mut restored);
            }
        }
        assert!(restored.stats().spilled_pages > 0, "it spilled");
        // Every key the restored engine emitted ends as it ends in memory.
        let got = got.last_per_key();
        let expected = expected.last_per_key();
        assert!(got.len() > 5_000, "{} keys", got.len());
        for (key, row) in &got {
            assert_eq!(Some(row), expected.get(key), "key {key}");
        }
    }

    /// A checkpoint of an aggregate that never spilled is the one written
    /// before spilling existed, byte for byte, store attached or not.
    #[test]
    fn an_aggregate_under_its_budget_checkpoints_as_before() {
        let plan = plan("SELECT k, COUNT(*) AS n FROM t GROUP BY k");
        let mut plain = Engine::new(Arc::clone(&plan), EngineOptions::default());
        let mut roomy = spilling(&plan, 1 << 30);
        for b in 0..5 {
            plain.process(&mut batch(b), &mut Rows::default()).unwrap();
            roomy.process(&mut batch(b), &mut Rows::default()).unwrap();
        }
        let (mut a, mut b) = (Topic::default(), Topic::default());
        a.save(&mut plain);
        b.save(&mut roomy);
        assert_eq!((a.head, a.pages), (b.head, b.pages));
        assert_eq!(roomy.stats().spilled_pages, 0);
    }
}
