//! State larger than memory: pages of groups spilled to disk.
//!
//! An operator that keeps its state per group id in pages of
//! [`PAGE_GROUPS`] groups (`crate::state::pages`) can move whole pages out of
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
use crate::state::group_keys::{BLOCK, GroupTable};
use crate::state::page_map::{PageIs, PageMap};
use crate::state::pages::DirtyPages;
use crate::state::pages::{
    KeyedPageIn, PAGE_GROUPS, TableHead, check_complete, page_groups, read_page_and_rest, restore_page_keys,
};
use crate::state::store::Spill;

/// What every paged operator keeps alike: its group table, its pages
/// changed since the last checkpoint and what it needs to spill.
#[derive(Debug, Default)]
pub(crate) struct PagedState {
    pub table: GroupTable,
    pub dirty: DirtyPages,
    pub spilling: Spilling,
}

/// An operator whose state is kept per group of a [`GroupTable`], in
/// pages of [`PAGE_GROUPS`] groups whose bytes start with their keys (as
/// [`crate::state::pages::page_keys`] lists them): what [`Spilling`] needs of it
/// to move pages to disk and back. Each method is called while the
/// operator's own [`Spilling`] is lent out ([`PagedGroups::with_spilling`]),
/// so none may use it.
pub(crate) trait PagedGroups: Sized {
    /// The operator's group table, dirty pages and [`Spilling`].
    fn groups(&self) -> &PagedState;
    fn groups_mut(&mut self) -> &mut PagedState;

    /// The head of a checkpoint ([`crate::state::Paged::snapshot_head`]).
    fn head_bytes(&self, out: Vec<u8>) -> Result<Vec<u8>, Error>;
    /// Restores a head ([`crate::state::Paged::restore_head`]).
    fn restore_from_head(&mut self, bytes: &[u8]) -> Result<(), Error>;
    /// Restores a page ([`crate::state::Paged::restore_page`]).
    fn restore_from_page(&mut self, page: u32, bytes: &[u8]) -> Result<(), Error>;
    /// Every page is restored ([`crate::state::Paged::pages_restored`]):
    /// by default, checks that none is missing.
    fn check_restored(&mut self) -> Result<(), Error> {
        let PagedState { table, spilling, .. } = self.groups_mut();
        spilling.pages_restored(table)
    }
    /// Between batches ([`crate::state::Paged::spill`]): by default,
    /// moves the coldest pages out while past the budget.
    fn spill_cold(&mut self) -> Result<(), Error> {
        self.with_spilling(|s, op| s.spill_cold(op))
    }

    fn table(&self) -> &GroupTable {
        &self.groups().table
    }
    fn table_mut(&mut self) -> &mut GroupTable {
        &mut self.groups_mut().table
    }
    fn spilling_mut(&mut self) -> &mut Spilling {
        &mut self.groups_mut().spilling
    }
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
