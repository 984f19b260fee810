//! Pages against blocks once an operator has spilled: the page a group
//! lives in stays its identity in checkpoints; in memory it sits in some
//! block of the group table, and a second-chance clock picks the blocks
//! to move out.

use crate::state::group_keys::BLOCK;
use crate::state::pages::PAGE_GROUPS;

/// Entries past twice those of keys in memory beyond which an index by
/// time (a join's expiry heap, session windows' ends) moves the entries
/// of keys on disk to their pages' times (`crate::state::page_due`): such an
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
}
