//! Pages of state held per group id, for incremental checkpoints.
//!
//! Operators that keep their state per dense id of a [`GroupTable`]
//! (aggregates, top-N, stream–stream joins) cut it into pages of
//! [`PAGE_GROUPS`] consecutive ids. Each flags the pages it changes as it
//! goes ([`DirtyPages`], one bit each); a checkpoint writes those pages
//! and a head ([`TableHead`], the ids handed out and the free ones).

use std::ops::Range;

use serde::{Deserialize, Serialize};

use crate::Error;
use crate::state::group_keys::GroupTable;

/// Groups per page. Small, so that updates spread over many keys dirty
/// few bytes: 20,000 keys updated between two checkpoints rewrite at most
/// 20,000 pages of 8 groups, whether the state holds a hundred thousand
/// groups or a hundred million — checkpoint bytes follow the keys that
/// changed, not the state held. A page is one record of the state topic,
/// so much smaller pages would spend more on record keys than on state.
pub const PAGE_GROUPS: u32 = 8;
const _: () =
    assert!(PAGE_GROUPS as usize == crate::state::group_keys::BLOCK, "a block of the group table holds a page");

/// The ids of page `page` among `groups` ids (empty past the end).
pub fn page_groups(page: u32, groups: usize) -> Range<usize> {
    let start = (page as usize).saturating_mul(PAGE_GROUPS as usize).min(groups);
    start..(start + PAGE_GROUPS as usize).min(groups)
}

/// The pages changed since the last checkpoint, a bit each.
#[derive(Debug, Default)]
pub struct DirtyPages {
    bits: Vec<u64>,
}

impl DirtyPages {
    /// Flags the page of group `gid` as changed.
    #[inline]
    pub fn mark(&mut self, gid: u32) {
        let page = (gid / PAGE_GROUPS) as usize;
        let word = page / 64;
        if word >= self.bits.len() {
            self.bits.resize(word + 1, 0);
        }
        self.bits[word] |= 1 << (page % 64);
    }

    pub fn clear(&mut self) {
        self.bits.clear();
    }

    /// Appends the flagged pages (every page of `groups` ids when `all`),
    /// in increasing order, and clears the flags.
    pub fn take(&mut self, all: bool, groups: usize, out: &mut Vec<u32>) {
        if all {
            out.extend(0..u32::try_from(groups).unwrap_or(u32::MAX).div_ceil(PAGE_GROUPS));
        } else {
            for (w, &bits) in self.bits.iter().enumerate() {
                let mut bits = bits;
                while bits != 0 {
                    out.push(u32::try_from(w * 64).unwrap_or(u32::MAX) + bits.trailing_zeros());
                    bits &= bits - 1;
                }
            }
        }
        self.bits.clear();
    }
}

/// What a paged checkpoint of a [`GroupTable`] keeps outside its pages:
/// the ids handed out and the free ones, in the order they are reused.
#[derive(Debug, Serialize, Deserialize)]
pub struct TableHead {
    pub groups: u32,
    pub free: Vec<u32>,
}

impl TableHead {
    pub fn of(table: &GroupTable) -> Self {
        let (groups, free) = table.head();
        Self { groups, free }
    }

    /// A table of this head's ids, each without its key until its page
    /// is restored ([`restore_page_keys`]).
    pub fn table(self) -> GroupTable {
        GroupTable::from_head(self.groups, self.free)
    }
}

/// The keys of the groups of `range` (`None` for a free id), as a page
/// writes them: read from the group table while the page is serialised,
/// not copied into a list first (a checkpoint writes every changed page,
/// and copying each key took a tenth of Nexmark q18's checkpoints).
pub fn page_keys(table: &GroupTable, range: Range<usize>) -> PageKeys<'_> {
    PageKeys { table, range }
}

/// The keys of a page's groups, serialised as a list of `Option<Vec<u8>>`
/// was (postcard writes a byte string as its length and its bytes, as it
/// writes a list of `u8`), so pages written either way read back alike.
#[derive(Clone, Debug)]
pub struct PageKeys<'a> {
    table: &'a GroupTable,
    range: Range<usize>,
}

/// A borrowed key, written as bytes.
struct KeyBytes<'a>(&'a [u8]);

impl Serialize for KeyBytes<'_> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_bytes(self.0)
    }
}

impl Serialize for PageKeys<'_> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeSeq;
        let mut seq = serializer.serialize_seq(Some(self.range.len()))?;
        for g in self.range.clone() {
            seq.serialize_element(&self.table.key_of(u32::try_from(g).unwrap_or(u32::MAX)).map(KeyBytes))?;
        }
        seq.end()
    }
}

/// Gives the groups of page `page` the keys [`page_keys`] read.
/// The keys may be borrowed from the page's bytes (a key written as a
/// `Vec<u8>` reads back as a `&[u8]`: the same length-prefixed bytes), so
/// a restore allocates nothing per key.
pub fn restore_page_keys<K: AsRef<[u8]>>(table: &mut GroupTable, page: u32, keys: &[Option<K>]) -> Result<(), Error> {
    let start = page as usize * PAGE_GROUPS as usize;
    for (i, key) in keys.iter().enumerate() {
        if let Some(key) = key {
            table.set_key(u32::try_from(start + i).unwrap_or(u32::MAX), key.as_ref())?;
        }
    }
    Ok(())
}

/// A page of keyed state as it is written: the keys of its groups
/// ([`page_keys`]), then what the operator keeps per group...
#[derive(Serialize)]
pub struct KeyedPage<'a, R> {
    pub keys: PageKeys<'a>,
    pub groups: R,
}

/// ...read back with the keys borrowed from the page's bytes.
#[derive(Deserialize)]
pub struct KeyedPageIn<'a, R> {
    #[serde(borrow)]
    pub keys: Vec<Option<&'a [u8]>>,
    pub groups: R,
}

/// Appends a page's state to `out`.
pub fn write_page<T: Serialize>(state: &T, out: Vec<u8>) -> Result<Vec<u8>, Error> {
    postcard::to_extend(state, out).map_err(|e| Error::Checkpoint(format!("cannot serialise state page: {e}")))
}

/// Reads page `page`'s state written by [`write_page`], and the bytes
/// written after it (HAVING's bits, `crate::shown`).
pub fn read_page_and_rest<'a, T: Deserialize<'a>>(page: u32, bytes: &'a [u8]) -> Result<(T, &'a [u8]), Error> {
    postcard::take_from_bytes(bytes).map_err(|e| Error::Checkpoint(format!("cannot read state page {page}: {e}")))
}

/// Fails unless every group the head listed got its key back from a page.
pub fn check_complete(table: &GroupTable) -> Result<(), Error> {
    if table.complete() {
        return Ok(());
    }
    Err(Error::Checkpoint(
        "the checkpoint's pages do not hold every group its head lists: the state topic was changed outside \
         Sluice"
            .into(),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pages_flagged_come_back_once_in_order() {
        let mut d = DirtyPages::default();
        for gid in [900, 3, 7, 8, 4000, 5] {
            d.mark(gid);
        }
        let mut out = Vec::new();
        d.take(false, 5000, &mut out);
        assert_eq!(out, vec![0, 1, 112, 500]);
        out.clear();
        d.take(false, 5000, &mut out);
        assert!(out.is_empty(), "taken pages are clean");
        d.take(true, 17, &mut out);
        assert_eq!(out, vec![0, 1, 2], "all pages of 17 groups");
        assert_eq!(page_groups(2, 17), 16..17);
        assert_eq!(page_groups(9, 17), 17..17);
    }

    #[test]
    fn a_table_comes_back_from_its_head_and_pages_and_a_missing_page_is_an_error() {
        let mut t = GroupTable::default();
        for i in 0..20 {
            t.find_or_insert(format!("k{i}").as_bytes());
        }
        t.remove(3);
        t.remove(11);
        // Each page's keys as written, read back borrowed.
        let written: Vec<Vec<u8>> =
            (0..3).map(|p| postcard::to_allocvec(&page_keys(&t, page_groups(p, t.capacity()))).unwrap()).collect();
        let pages: Vec<Vec<Option<&[u8]>>> = written.iter().map(|b| postcard::from_bytes(b).unwrap()).collect();
        let mut back = TableHead::of(&t).table();
        for (p, keys) in pages.iter().enumerate() {
            restore_page_keys(&mut back, u32::try_from(p).unwrap(), keys).unwrap();
        }
        check_complete(&back).unwrap();
        assert_eq!(back.find(b"k12"), Some(12));
        assert_eq!(back.find(b"k3"), None);
        assert_eq!(back.find_or_insert(b"new").0, 11, "free ids are reused in the same order");
        let mut partial = TableHead::of(&t).table();
        restore_page_keys(&mut partial, 0, &pages[0]).unwrap();
        assert!(check_complete(&partial).is_err());
    }
}

#[cfg(test)]
mod borrow_tests {
    #[test]
    fn keys_written_owned_read_borrowed() {
        let keys: Vec<Option<Vec<u8>>> = vec![Some(b"abc".to_vec()), None, Some(vec![])];
        let bytes = postcard::to_allocvec(&keys).unwrap();
        let back: Vec<Option<&[u8]>> = postcard::from_bytes(&bytes).unwrap();
        assert_eq!(back, vec![Some(&b"abc"[..]), None, Some(&[][..])]);
    }

    /// Pages once held their keys as a list of `Option<Vec<u8>>`; the keys
    /// written from the group table must be the same bytes, or pages in
    /// state topics would not read back.
    #[test]
    fn keys_written_from_the_table_are_the_bytes_owned_keys_were() {
        let mut t = crate::state::group_keys::GroupTable::default();
        for i in 0..12 {
            t.find_or_insert(format!("key-{i}-{}", "x".repeat(i * 30)).as_bytes());
        }
        t.remove(2);
        let owned: Vec<Option<Vec<u8>>> = (0..12u32).map(|g| t.key_of(g).map(<[u8]>::to_vec)).collect();
        assert_eq!(
            postcard::to_allocvec(&super::page_keys(&t, 0..12)).unwrap(),
            postcard::to_allocvec(&owned).unwrap()
        );
    }
}
