//! The pages of incremental checkpoints in the state topic: their keys,
//! and which version of each page a committed checkpoint holds.
//!
//! A paged engine's checkpoint writes the pages that changed since the
//! last one, each under its own key, then the head (`state_store`). Kafka
//! compaction keeps the latest record per key, so the topic stays near the
//! live state while a checkpoint costs what changed.
//!
//! Each page has two key slots. A save writes a page to the slot its
//! committed version does *not* use, so compaction can never remove the
//! version the committed offsets point to, even when the save succeeded
//! and the commit after it did not. A restore reads the whole partition
//! and, per page, takes the latest version written before the committed
//! head (pages are written before their head). Versions written after it
//! belong to a save whose commit never happened (at least once; exactly
//! once, a transaction that aborted is never read): their keys get a
//! tombstone at the next save, before any later head can point past them.
//!
//! A page larger than a record may be is written in parts, consecutive
//! records of one save; each part says how many the page has.

use std::collections::HashMap;

use crate::Error;

/// The largest part of a page (as the head's chunks).
pub const PART: usize = 512 * 1024;

/// A page of one of a partition's pipelines: (the pipeline's place among
/// those saved with the partition, 0 for its own; the page).
pub type PageId = (u8, u32);

/// Where a key of the state topic sits among a page's records.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct PageKey {
    pub page: PageId,
    pub slot: u8,
    pub part: u32,
}

/// The prefix of every page key of `partition` of `source_topic`'s state.
pub fn prefix(source_topic: &str, partition: i32) -> String {
    format!("{source_topic}/{partition}/page/")
}

impl PageKey {
    pub fn to_key(self, prefix: &str) -> String {
        let ((component, page), slot, part) = (self.page, self.slot, self.part);
        format!("{prefix}{component}/{page}/{slot}/{part}")
    }

    /// The page key `key` names, if it is one under `prefix`.
    pub fn parse(key: &[u8], prefix: &str) -> Option<Self> {
        let rest = std::str::from_utf8(key).ok()?.strip_prefix(prefix)?;
        let mut it = rest.split('/');
        let component = it.next()?.parse().ok()?;
        let page = it.next()?.parse().ok()?;
        let slot = it.next()?.parse().ok().filter(|s| *s < 2)?;
        let part = it.next()?.parse().ok()?;
        it.next().is_none().then_some(Self { page: (component, page), slot, part })
    }
}

/// A page's bytes cut into the records that carry them: each part's value
/// is the number of parts (u32, little-endian) and then its bytes.
pub fn parts(bytes: &[u8]) -> Vec<Vec<u8>> {
    let pieces: Vec<&[u8]> = if bytes.is_empty() { vec![&[][..]] } else { bytes.chunks(PART).collect() };
    let n = u32::try_from(pieces.len()).unwrap_or(u32::MAX).to_le_bytes();
    pieces
        .into_iter()
        .map(|piece| {
            let mut value = Vec::with_capacity(4 + piece.len());
            value.extend_from_slice(&n);
            value.extend_from_slice(piece);
            value
        })
        .collect()
}

/// The latest record of each page key read from the state topic: its
/// offset and value (`None`, a tombstone).
#[derive(Debug, Default)]
pub struct Scan {
    latest: HashMap<PageKey, (i64, Option<Vec<u8>>)>,
}

/// What a restore takes from a scan: each page's committed bytes, the
/// slot they are in, and the keys to tombstone at the next save.
#[derive(Debug, Default)]
pub struct Chosen {
    pub pages: Vec<(PageId, Vec<u8>)>,
    pub slots: HashMap<PageId, u8>,
    pub tombstones: Vec<PageKey>,
}

impl Scan {
    /// Takes a record read in offset order (a later one of the same key
    /// replaces the earlier, as compaction would).
    pub fn add(&mut self, key: PageKey, offset: i64, value: Option<&[u8]>) {
        self.latest.insert(key, (offset, value.map(<[u8]>::to_vec)));
    }

    /// The pages of the checkpoint whose head starts at offset `head`.
    pub fn choose(mut self, head: i64) -> Result<Chosen, Error> {
        let mut chosen = Chosen::default();
        // Per page: the slot and offset of its newest whole version before the head.
        let mut best: HashMap<PageId, (u8, i64)> = HashMap::with_capacity(self.latest.len() / 2);
        for (key, (offset, value)) in &self.latest {
            if *offset >= head {
                if value.is_some() {
                    chosen.tombstones.push(*key);
                }
                continue;
            }
            if key.part != 0 {
                continue;
            }
            let Some(n) = value.as_deref().and_then(part_count) else { continue };
            let whole = (1..n).all(|i| {
                let k = PageKey { part: i, ..*key };
                matches!(self.latest.get(&k), Some((o, Some(_))) if *o == offset + i64::from(i))
            });
            if whole && best.get(&key.page).is_none_or(|(_, o)| o < offset) {
                best.insert(key.page, (key.slot, *offset));
            }
        }
        chosen.tombstones.sort_unstable();
        chosen.pages.reserve(best.len());
        chosen.slots.reserve(best.len());
        for (page, (slot, _)) in best {
            let first = PageKey { page, slot, part: 0 };
            let n = self.latest.get(&first).and_then(|(_, v)| v.as_deref()).and_then(part_count).unwrap_or(0);
            let mut bytes = Vec::new();
            for part in 0..n {
                let value = self.latest.remove(&PageKey { part, ..first }).and_then(|(_, v)| v);
                let mut value = value.ok_or_else(|| Error::Internal(format!("page {page:?} lost part {part}")))?;
                if n == 1 {
                    // One part (nearly every page): its bytes, not a copy.
                    value.drain(..4);
                    bytes = value;
                } else {
                    bytes.extend_from_slice(&value[4..]);
                }
            }
            chosen.pages.push((page, bytes));
            chosen.slots.insert(page, slot);
        }
        chosen.pages.sort_unstable_by_key(|(page, _)| *page);
        Ok(chosen)
    }
}

/// The number of parts a page part's value says its page has.
fn part_count(value: &[u8]) -> Option<u32> {
    let n = u32::from_le_bytes(value.get(..4)?.try_into().ok()?);
    (n > 0).then_some(n)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(component: u8, page: u32, slot: u8, part: u32) -> PageKey {
        PageKey { page: (component, page), slot, part }
    }

    #[test]
    fn keys_round_trip_and_foreign_keys_are_not_pages() {
        let p = prefix("bids", 3);
        let k = key(1, 4096, 1, 2);
        assert_eq!(k.to_key(&p), "bids/3/page/1/4096/1/2");
        assert_eq!(PageKey::parse(k.to_key(&p).as_bytes(), &p), Some(k));
        assert_eq!(PageKey::parse(b"bids/3/0/0", &p), None, "a head chunk");
        assert_eq!(PageKey::parse(b"bids/31/page/0/1/0/0", &p), None, "another partition");
        assert_eq!(PageKey::parse(b"bids/3/page/0/1/2/0", &p), None, "slot out of range");
        assert_eq!(PageKey::parse(b"bids/3/page/0/1/0/0/9", &p), None);
    }

    #[test]
    fn a_page_is_cut_into_parts_that_say_how_many() {
        let bytes = vec![7u8; PART * 2 + 1];
        let cut = parts(&bytes);
        assert_eq!(cut.len(), 3);
        assert!(cut.iter().all(|p| part_count(p) == Some(3)));
        assert_eq!(parts(&[]).len(), 1, "an empty page is one record");
    }

    fn add_page(scan: &mut Scan, k: PageKey, offset: i64, bytes: &[u8]) -> i64 {
        let mut o = offset;
        for (i, value) in parts(bytes).iter().enumerate() {
            scan.add(PageKey { part: u32::try_from(i).unwrap(), ..k }, o, Some(value));
            o += 1;
        }
        o
    }

    #[test]
    fn the_newest_version_before_the_head_wins_and_later_ones_are_tombstoned() {
        let mut scan = Scan::default();
        add_page(&mut scan, key(0, 0, 0, 0), 10, b"old");
        add_page(&mut scan, key(0, 0, 1, 0), 20, b"committed");
        add_page(&mut scan, key(0, 1, 0, 0), 21, b"other page");
        // The head is at 30; a save after it never committed.
        add_page(&mut scan, key(0, 0, 0, 0), 40, b"uncommitted");
        add_page(&mut scan, key(0, 2, 0, 0), 41, b"new page, uncommitted");
        let chosen = scan.choose(30).unwrap();
        assert_eq!(chosen.pages, vec![((0, 0), b"committed".to_vec()), ((0, 1), b"other page".to_vec())]);
        assert_eq!(chosen.slots[&(0, 0)], 1);
        assert_eq!(chosen.tombstones, vec![key(0, 0, 0, 0), key(0, 2, 0, 0)]);
    }

    #[test]
    fn a_tombstoned_slot_holds_nothing_and_a_page_missing_a_part_is_not_taken() {
        let mut scan = Scan::default();
        add_page(&mut scan, key(0, 0, 0, 0), 10, b"kept");
        scan.add(key(0, 0, 1, 0), 12, None);
        let big = vec![1u8; PART + 10];
        add_page(&mut scan, key(0, 5, 0, 0), 13, &big);
        // A newer version of part 0 only: its page is not whole.
        scan.add(key(0, 6, 0, 0), 15, Some(&parts(&big)[0]));
        let chosen = scan.choose(100).unwrap();
        assert_eq!(chosen.pages.len(), 2);
        assert_eq!(chosen.pages[0], ((0, 0), b"kept".to_vec()));
        assert_eq!(chosen.pages[1], ((0, 5), big));
        assert!(chosen.tombstones.is_empty());
    }
}
