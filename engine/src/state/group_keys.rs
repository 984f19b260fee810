//! Group keys → dense group ids.
//!
//! A key (the GROUP BY values of a row, plus the window start when windowed)
//! is encoded into a reusable scratch buffer, hashed, and looked up in a
//! `hashbrown::HashTable` of group ids whose key bytes live in one arena.
//! Finding an existing group allocates nothing; a new group appends its key
//! to the arena. Freed ids are reused and the arena is compacted when more
//! than half of it is dead, so closing windows returns memory.

use std::hash::BuildHasher;

use hashbrown::HashTable;
use serde::{Deserialize, Serialize};

use crate::Error;
use sluice_plan::DataType;
use sluice_plan::{Column, ColumnData, StrData};

/// A fixed-seed hasher: hashing must not depend on process state, because
/// the table is rebuilt from snapshots (possibly in another process).
fn hasher() -> foldhash::fast::FixedState {
    foldhash::fast::FixedState::with_seed(0x51_1c_e0_0d)
}

pub fn hash_key(key: &[u8]) -> u64 {
    hasher().hash_one(key)
}

#[derive(Debug, Default)]
pub struct GroupTable {
    table: HashTable<u32>,
    arena: Vec<u8>,
    /// (offset, len) of each group's key in the arena; len u32::MAX = free.
    ranges: Vec<(u32, u32)>,
    hashes: Vec<u64>,
    free: Vec<u32>,
    dead_bytes: usize,
    /// Blocks of [`BLOCK`] ids whose groups were spilled to disk: none of
    /// their ids is keyed or on the free list until the block is taken
    /// again, for a page read back ([`GroupTable::take_block`]) or for new
    /// groups (when the free list runs dry).
    spare: Vec<u32>,
    /// Entries of `free` that name an id no longer free (its block was
    /// evicted or handed back): past half the list they are swept out,
    /// or a join handing back a block per page its watermark read back
    /// grew the list without end (15 MiB in a q9 run at 100 M events).
    stale: usize,
}

/// Ids per block: a spilled page's groups leave their block whole, and a
/// page read back takes a whole block (`crate::state`). A block holds a
/// page: `crate::state::pages` checks that the two sizes agree.
pub const BLOCK: usize = 8;

/// Serialisable form of a [`GroupTable`] (the hash table is rebuilt on restore).
#[derive(Debug, Serialize, Deserialize)]
pub struct GroupTableState {
    keys: Vec<Option<Vec<u8>>>,
}

const FREE: u32 = u32::MAX;
/// The length of an id of a spare block: neither keyed nor handed out.
/// (The free list may still name it: an id is taken from there only when
/// it is `FREE`, so such stale entries are passed over.)
const VACANT: u32 = u32::MAX - 1;

/// Whether a range's length is a key's.
#[inline]
fn keyed(len: u32) -> bool {
    len < VACANT
}

impl GroupTable {
    /// Number of ids handed out (live and free); accumulators size to this.
    pub fn capacity(&self) -> usize {
        self.ranges.len()
    }

    pub fn live(&self) -> usize {
        self.table.len()
    }

    /// Whether `gid` names a group (not a free id).
    pub fn is_live(&self, gid: u32) -> bool {
        self.ranges.get(gid as usize).is_some_and(|r| keyed(r.1))
    }

    pub fn key(&self, gid: u32) -> &[u8] {
        let (off, len) = self.ranges[gid as usize];
        if !keyed(len) { &[] } else { &self.arena[off as usize..(off + len) as usize] }
    }

    /// The id of `key`, if it has one.
    #[inline]
    pub fn find(&self, key: &[u8]) -> Option<u32> {
        let (arena, ranges) = (&self.arena, &self.ranges);
        self.table
            .find(hash_key(key), |&gid: &u32| {
                let (off, len) = ranges[gid as usize];
                keyed(len) && &arena[off as usize..(off + len) as usize] == key
            })
            .copied()
    }

    /// The id of `key`, creating the group if needed; `true` when new.
    #[inline]
    pub fn find_or_insert(&mut self, key: &[u8]) -> (u32, bool) {
        let hash = hash_key(key);
        let (arena, ranges) = (&self.arena, &self.ranges);
        let eq = |&gid: &u32| {
            let (off, len) = ranges[gid as usize];
            keyed(len) && &arena[off as usize..(off + len) as usize] == key
        };
        if let Some(&gid) = self.table.find(hash, eq) {
            return (gid, false);
        }
        let off = u32::try_from(self.arena.len()).unwrap_or(u32::MAX);
        self.arena.extend_from_slice(key);
        let range = (off, u32::try_from(key.len()).unwrap_or(0));
        let gid = match self.pop_free() {
            Some(gid) => {
                self.ranges[gid as usize] = range;
                self.hashes[gid as usize] = hash;
                gid
            }
            None => {
                self.ranges.push(range);
                self.hashes.push(hash);
                u32::try_from(self.ranges.len() - 1).unwrap_or(u32::MAX)
            }
        };
        let hashes = &self.hashes;
        self.table.insert_unique(hash, gid, |&g| hashes[g as usize]);
        (gid, true)
    }

    /// Frees `gid`; its id may be handed out again.
    pub fn remove(&mut self, gid: u32) {
        let (_, len) = self.ranges[gid as usize];
        if !keyed(len) {
            return;
        }
        let hash = self.hashes[gid as usize];
        if let Ok(entry) = self.table.find_entry(hash, |&g| g == gid) {
            entry.remove();
        }
        self.ranges[gid as usize].1 = FREE;
        self.free.push(gid);
        self.dead_bytes += len as usize;
        if self.dead_bytes > 4096 && self.dead_bytes * 2 > self.arena.len() {
            self.compact();
        }
    }

    /// A free id: from the free list (passing over stale entries of
    /// spare blocks), else from a spare block.
    fn pop_free(&mut self) -> Option<u32> {
        loop {
            match self.free.pop() {
                Some(gid) if self.ranges[gid as usize].1 == FREE => return Some(gid),
                Some(_) => self.stale = self.stale.saturating_sub(1),
                None => {
                    let block = self.spare.pop()?;
                    self.release_block(block);
                }
            }
        }
    }

    /// Puts every id of `block` on the free list, lowest handed out first.
    fn release_block(&mut self, block: u32) {
        let start = block as usize * BLOCK;
        for r in &mut self.ranges[start..start + BLOCK] {
            r.1 = FREE;
        }
        self.free.extend((start..start + BLOCK).rev().map(|g| u32::try_from(g).unwrap_or(u32::MAX)));
    }

    /// Fills the last block with free ids, so that the table ends on a
    /// block's edge.
    fn pad_to_block(&mut self) {
        while !self.ranges.len().is_multiple_of(BLOCK) {
            self.ranges.push((0, FREE));
            self.hashes.push(0);
            self.free.push(u32::try_from(self.ranges.len() - 1).unwrap_or(u32::MAX));
        }
    }

    /// A block with no key and no free id, for a page read back from disk
    /// ([`GroupTable::set_key`] gives its groups their keys, then
    /// [`GroupTable::release`] its free ids): a spare one, or a new one at
    /// the end.
    pub fn take_block(&mut self) -> u32 {
        if let Some(block) = self.spare.pop() {
            return block;
        }
        self.pad_to_block();
        let block = u32::try_from(self.ranges.len() / BLOCK).unwrap_or(u32::MAX);
        self.ranges.resize(self.ranges.len() + BLOCK, (0, VACANT));
        self.hashes.resize(self.hashes.len() + BLOCK, 0);
        block
    }

    /// Hands out `gid`, an id of a block from [`GroupTable::take_block`]
    /// that got no key, to new groups.
    pub fn release(&mut self, gid: u32) {
        self.ranges[gid as usize].1 = FREE;
        self.free.push(gid);
    }

    /// Takes every group of `blocks` out of the table (spilled to disk):
    /// their keys go, their ids are neither keyed nor free, and each block
    /// is spare for a later [`GroupTable::take_block`].
    pub fn evict_blocks(&mut self, blocks: &[u32]) {
        // A spare block is whole: the ids past the end of the last one
        // are made first.
        self.pad_to_block();
        let mut keys_gone = false;
        for &b in blocks {
            let start = b as usize * BLOCK;
            for r in &mut self.ranges[start..start + BLOCK] {
                if keyed(r.1) {
                    self.dead_bytes += r.1 as usize;
                    keys_gone = true;
                } else if r.1 == FREE {
                    self.stale += 1;
                }
                r.1 = VACANT;
            }
        }
        self.spare.extend_from_slice(blocks);
        if self.stale > 4096 && self.stale * 2 > self.free.len() {
            let ranges = &self.ranges;
            self.free.retain(|&g| ranges[g as usize].1 == FREE);
            self.free.shrink_to(self.free.len() * 2);
            self.stale = 0;
        }
        if self.dead_bytes > 4096 && self.dead_bytes * 2 > self.arena.len() {
            self.compact();
        }
        // A block of free ids only (a closed window's, handed back one at
        // a time) has nothing in the index.
        if keys_gone {
            self.rebuild_index();
        }
    }

    /// Builds the hash index anew at its capacity: removing entries one
    /// by one leaves tombstones that count against it, and the table
    /// would grow (double) at its next insert instead of taking the room
    /// the spill made.
    fn rebuild_index(&mut self) {
        let mut table = HashTable::with_capacity(self.table.capacity());
        let hashes = &self.hashes;
        for (gid, r) in self.ranges.iter().enumerate() {
            if keyed(r.1) {
                let gid = u32::try_from(gid).unwrap_or(u32::MAX);
                table.insert_unique(hashes[gid as usize], gid, |&g| hashes[g as usize]);
            }
        }
        self.table = table;
    }

    /// How many new groups the table takes before its index or its ids
    /// must grow (each grows by doubling): what is left of the hash index
    /// and of the ids (free, spare and the vector's spare capacity). The
    /// key arena is not counted: it also doubles, but holds a fraction of
    /// a group's bytes, and its dead keys are reclaimed as it compacts.
    pub fn headroom(&self) -> usize {
        let index = self.table.capacity() - self.table.len();
        let ids = self.ranges.capacity() - self.ranges.len() + self.free.len() + self.spare.len() * BLOCK;
        index.min(ids)
    }

    /// Whether no id of `block` is keyed.
    pub fn block_is_free(&self, block: u32) -> bool {
        let start = block as usize * BLOCK;
        self.ranges.get(start..(start + BLOCK).min(self.ranges.len())).is_none_or(|r| r.iter().all(|r| !keyed(r.1)))
    }

    fn compact(&mut self) {
        let mut arena = Vec::with_capacity(self.arena.len() - self.dead_bytes);
        for r in &mut self.ranges {
            if keyed(r.1) {
                let off = u32::try_from(arena.len()).unwrap_or(u32::MAX);
                arena.extend_from_slice(&self.arena[r.0 as usize..(r.0 + r.1) as usize]);
                r.0 = off;
            }
        }
        self.arena = arena;
        self.dead_bytes = 0;
    }

    pub fn heap_bytes(&self) -> usize {
        self.arena.capacity()
            + self.ranges.capacity() * 8
            + self.hashes.capacity() * 8
            + self.table.capacity() * 5
            + (self.free.capacity() + self.spare.capacity()) * 4
    }

    pub fn to_state(&self) -> GroupTableState {
        GroupTableState {
            keys: (0..self.ranges.len())
                .map(|g| keyed(self.ranges[g].1).then(|| self.key(u32::try_from(g).unwrap_or(0)).to_vec()))
                .collect(),
        }
    }

    /// The ids handed out and those free: with the keys of every page
    /// ([`GroupTable::set_key`]), the table ([`GroupTable::from_head`]).
    pub fn head(&self) -> (u32, Vec<u32>) {
        (u32::try_from(self.ranges.len()).unwrap_or(u32::MAX), self.free.clone())
    }

    /// A table of `capacity` ids, all without a key until
    /// [`GroupTable::set_key`] gives them theirs; `free` in the order they
    /// will be reused.
    pub fn from_head(capacity: u32, free: Vec<u32>) -> Self {
        let n = capacity as usize;
        let table = HashTable::with_capacity(n.saturating_sub(free.len()));
        Self { table, ranges: vec![(0, FREE); n], hashes: vec![0; n], free, ..Self::default() }
    }

    /// Gives `gid` (of a table from [`GroupTable::from_head`]) its key.
    pub fn set_key(&mut self, gid: u32, key: &[u8]) -> Result<(), Error> {
        let Some(&(_, len)) = self.ranges.get(gid as usize) else {
            return Err(Error::Checkpoint(format!("checkpoint page names group {gid}, past the table's end")));
        };
        if keyed(len) {
            return Err(Error::Checkpoint(format!("checkpoint pages give group {gid} two keys")));
        }
        let off = u32::try_from(self.arena.len()).unwrap_or(u32::MAX);
        self.arena.extend_from_slice(key);
        let hash = hash_key(key);
        self.ranges[gid as usize] = (off, u32::try_from(key.len()).unwrap_or(0));
        self.hashes[gid as usize] = hash;
        let hashes = &self.hashes;
        self.table.insert_unique(hash, gid, |&g| hashes[g as usize]);
        Ok(())
    }

    /// Whether every id is either free or has a key, and no free id has
    /// one: a table rebuilt from pages that missed none.
    pub fn complete(&self) -> bool {
        let live = self.ranges.iter().filter(|r| keyed(r.1)).count();
        live + self.free.len() == self.ranges.len() && self.free.iter().all(|&g| self.key_len(g) == FREE)
    }

    fn key_len(&self, gid: u32) -> u32 {
        self.ranges.get(gid as usize).map_or(0, |r| r.1)
    }

    /// `gid`'s key, or `None` when it is free (or past the end).
    pub fn key_of(&self, gid: u32) -> Option<&[u8]> {
        let &(off, len) = self.ranges.get(gid as usize).filter(|r| keyed(r.1))?;
        Some(&self.arena[off as usize..(off + len) as usize])
    }

    pub fn from_state(state: GroupTableState) -> Self {
        let mut t = GroupTable::default();
        for key in state.keys {
            match key {
                Some(k) => {
                    let off = u32::try_from(t.arena.len()).unwrap_or(u32::MAX);
                    t.arena.extend_from_slice(&k);
                    let hash = hash_key(&k);
                    t.ranges.push((off, u32::try_from(k.len()).unwrap_or(0)));
                    t.hashes.push(hash);
                    let gid = u32::try_from(t.ranges.len() - 1).unwrap_or(0);
                    let hashes = &t.hashes;
                    t.table.insert_unique(hash, gid, |&g| hashes[g as usize]);
                }
                None => {
                    t.ranges.push((0, FREE));
                    t.hashes.push(0);
                    t.free.push(u32::try_from(t.ranges.len() - 1).unwrap_or(0));
                }
            }
        }
        t
    }
}

/// Typed view of one key column, extracted once per batch.
enum KeyCol<'a> {
    Int(&'a [i64], Option<&'a [bool]>),
    Wide(&'a [i128], Option<&'a [bool]>),
    Float(&'a [f64], Option<&'a [bool]>),
    Bool(&'a [bool], Option<&'a [bool]>),
    Str(&'a StrData, Option<&'a [bool]>),
    /// An array, map or row: its value as postcard writes its `Scalar`,
    /// which equal values write alike.
    Nested(&'a Column),
    Null,
}

/// Encodes the key columns of rows into bytes: per column a null marker and
/// then the value (8 bytes for numbers, 16 for a decimal of more than 18
/// digits, length-prefixed UTF-8 for strings).
pub struct KeyEncoder<'a> {
    cols: Vec<KeyCol<'a>>,
}

impl<'a> KeyEncoder<'a> {
    pub fn new(columns: &[&'a Column]) -> Self {
        let cols = columns
            .iter()
            .map(|c| {
                let v = c.validity.as_deref();
                match &c.data {
                    ColumnData::Int(x) => KeyCol::Int(x, v),
                    ColumnData::Wide(x) => KeyCol::Wide(x, v),
                    ColumnData::Float(x) => KeyCol::Float(x, v),
                    ColumnData::Bool(x) => KeyCol::Bool(x, v),
                    ColumnData::Str(s) => KeyCol::Str(s, v),
                    ColumnData::Null(_) => KeyCol::Null,
                    ColumnData::List(_) | ColumnData::Struct(_) => KeyCol::Nested(c),
                }
            })
            .collect();
        Self { cols }
    }

    /// Appends the key of `row` to `out`.
    #[inline]
    pub fn encode(&self, row: usize, out: &mut Vec<u8>) {
        for c in &self.cols {
            let valid = |v: Option<&[bool]>| v.is_none_or(|v| v[row]);
            match c {
                KeyCol::Int(x, v) if valid(*v) => {
                    out.push(1);
                    out.extend_from_slice(&x[row].to_le_bytes());
                }
                KeyCol::Wide(x, v) if valid(*v) => {
                    out.push(1);
                    out.extend_from_slice(&x[row].to_le_bytes());
                }
                KeyCol::Float(x, v) if valid(*v) => {
                    out.push(1);
                    // -0.0 and 0.0 are one group, as are all NaNs.
                    let f = if x[row] == 0.0 {
                        0.0
                    } else if x[row].is_nan() {
                        f64::NAN
                    } else {
                        x[row]
                    };
                    out.extend_from_slice(&f.to_bits().to_le_bytes());
                }
                KeyCol::Bool(x, v) if valid(*v) => {
                    out.push(1);
                    out.push(u8::from(x[row]));
                }
                KeyCol::Str(s, v) if valid(*v) => {
                    out.push(1);
                    let text = s.get(row);
                    out.extend_from_slice(&u32::try_from(text.len()).unwrap_or(u32::MAX).to_le_bytes());
                    out.extend_from_slice(text.as_bytes());
                }
                KeyCol::Nested(c) if c.is_valid(row) => {
                    out.push(1);
                    let at = out.len();
                    out.extend_from_slice(&[0; 4]);
                    // Writing into memory cannot fail for a column's value.
                    let _ = postcard::to_io(&c.value(row), &mut *out);
                    let len = u32::try_from(out.len() - at - 4).unwrap_or(u32::MAX);
                    out[at..at + 4].copy_from_slice(&len.to_le_bytes());
                }
                _ => out.push(0),
            }
        }
    }
}

/// Decodes keys written by [`KeyEncoder`] back into columns of `types`,
/// skipping `skip` leading bytes (a window start prefix).
pub fn decode_key_into(key: &[u8], skip: usize, types: &[DataType], out: &mut [Column]) -> Result<(), Error> {
    let mut pos = skip;
    let bad = || Error::Internal("corrupt group key".into());
    let take8 = |pos: &mut usize| -> Result<[u8; 8], Error> {
        let b: [u8; 8] = key.get(*pos..*pos + 8).and_then(|s| s.try_into().ok()).ok_or_else(bad)?;
        *pos += 8;
        Ok(b)
    };
    for (t, col) in types.iter().zip(out.iter_mut()) {
        let marker = *key.get(pos).ok_or_else(bad)?;
        pos += 1;
        if marker == 0 {
            col.push_null();
            continue;
        }
        match t {
            t if t.is_wide() => {
                let b: [u8; 16] = key.get(pos..pos + 16).and_then(|s| s.try_into().ok()).ok_or_else(bad)?;
                pos += 16;
                col.push_i128(i128::from_le_bytes(b))?
            }
            DataType::Bigint | DataType::Timestamp | DataType::Decimal(..) => {
                col.push_i64(i64::from_le_bytes(take8(&mut pos)?))?
            }
            DataType::Double => col.push_f64(f64::from_bits(u64::from_le_bytes(take8(&mut pos)?)))?,
            DataType::Boolean => {
                col.push_bool(*key.get(pos).ok_or_else(bad)? != 0)?;
                pos += 1;
            }
            DataType::String => {
                let len: [u8; 4] = key.get(pos..pos + 4).and_then(|s| s.try_into().ok()).ok_or_else(bad)?;
                pos += 4;
                let len = u32::from_le_bytes(len) as usize;
                let text = key.get(pos..pos + len).and_then(|b| std::str::from_utf8(b).ok()).ok_or_else(bad)?;
                col.push_str(text)?;
                pos += len;
            }
            DataType::Null => col.push_null(),
            DataType::Array(_) | DataType::Map(_) | DataType::Row(_) => {
                let len: [u8; 4] = key.get(pos..pos + 4).and_then(|s| s.try_into().ok()).ok_or_else(bad)?;
                pos += 4;
                let len = u32::from_le_bytes(len) as usize;
                let bytes = key.get(pos..pos + len).ok_or_else(bad)?;
                let value: sluice_plan::Scalar = postcard::from_bytes(bytes).map_err(|_| bad())?;
                col.push_scalar(&value)?;
                pos += len;
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_dense_reused_and_survive_snapshots() {
        let mut t = GroupTable::default();
        let (a, new_a) = t.find_or_insert(b"alpha");
        let (b, _) = t.find_or_insert(b"beta");
        assert!(new_a);
        assert_eq!(t.find_or_insert(b"alpha"), (a, false));
        t.remove(a);
        assert_eq!(t.live(), 1);
        let (c, new_c) = t.find_or_insert(b"gamma");
        assert!(new_c);
        assert_eq!(c, a, "freed ids are reused");
        let restored = GroupTable::from_state(t.to_state());
        assert_eq!(restored.key(b), b"beta");
        let mut restored = restored;
        assert_eq!(restored.find_or_insert(b"gamma"), (c, false));
        assert!(restored.find_or_insert(b"alpha").1, "removed keys stay removed");
    }

    /// A block read back, its keys let go one by one and the block handed
    /// back, over and over (a join's watermark reading pages back to let
    /// their rows go): the free list's entries for it are swept once
    /// stale, so it stays bounded, and every id it hands out is free.
    #[test]
    fn blocks_handed_back_leave_no_growing_free_list() {
        let mut t = GroupTable::default();
        for round in 0..10_000u32 {
            let block = t.take_block();
            let start = block * BLOCK as u32;
            for i in 0..BLOCK as u32 {
                t.set_key(start + i, format!("k{round}-{i}").as_bytes()).unwrap();
            }
            for i in 0..BLOCK as u32 {
                t.remove(start + i);
            }
            assert!(t.block_is_free(block));
            t.evict_blocks(&[block]);
            assert!(t.free.len() < 3 * 4096, "round {round}: {} entries on the free list", t.free.len());
        }
        let (a, _) = t.find_or_insert(b"new");
        let (b, _) = t.find_or_insert(b"other");
        assert_ne!(a, b);
        assert_eq!(t.live(), 2);
    }

    #[test]
    fn compaction_keeps_keys_intact() {
        let mut t = GroupTable::default();
        let ids: Vec<u32> = (0..2000).map(|i| t.find_or_insert(format!("key-{i}").as_bytes()).0).collect();
        for id in &ids[..1500] {
            t.remove(*id);
        }
        for (i, id) in ids.iter().enumerate().skip(1500) {
            assert_eq!(t.key(*id), format!("key-{i}").as_bytes());
            assert_eq!(t.find_or_insert(format!("key-{i}").as_bytes()), (*id, false));
        }
    }

    #[test]
    fn keys_round_trip_through_columns() {
        let mut s = Column::with_capacity(DataType::String, 2);
        s.push_str("TRADER1").unwrap();
        s.push_null();
        let n = Column::floats(vec![-0.0, 2.5]);
        let enc = KeyEncoder::new(&[&s, &n]);
        let mut k0 = Vec::new();
        enc.encode(0, &mut k0);
        let mut k1 = Vec::new();
        enc.encode(1, &mut k1);
        let mut out = vec![Column::with_capacity(DataType::String, 2), Column::with_capacity(DataType::Double, 2)];
        decode_key_into(&k0, 0, &[DataType::String, DataType::Double], &mut out).unwrap();
        decode_key_into(&k1, 0, &[DataType::String, DataType::Double], &mut out).unwrap();
        assert_eq!(out[0].scalar(0), sluice_plan::Scalar::String("TRADER1".into()));
        assert_eq!(out[0].scalar(1), sluice_plan::Scalar::Null);
        assert_eq!(out[1].scalar(0), sluice_plan::Scalar::Double(0.0));
    }
}
