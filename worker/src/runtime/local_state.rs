//! A copy of a core's checkpoints on the worker's own volume, so that a
//! restarted worker restores its state from local disk instead of reading
//! it back from the state topic.
//!
//! The state topic stays the source of truth: the copy is taken only for
//! the very checkpoint the committed offsets point to, and the topic is read
//! whenever it is not there (a new pod, a wiped or foreign volume, a save
//! that reached the broker but not the disk). What is copied is what the
//! topic holds — each page in the same slot, each head with where it sits
//! in the topic — so one rule decides what a restore takes from either.
//!
//! Layout: one embedded LSM store (`fjall`) per engine core, in a directory
//! named after the core's engine slot, so no two cores share a store and a
//! restart with the same layout finds its own; one keyspace per source
//! partition. Keys:
//! - `h<slot>`: a head — the save's number, the topic offset its first
//!   chunk got, whether it is paged, and its bytes;
//! - `g<component><page, big-endian><slot>`: a page — the number of the save
//!   that wrote it, and its bytes.
//!
//! Saves are numbered per partition. A save writes its pages as they are
//! serialised and its head once the broker acknowledged everything, so a
//! head on disk means the save's pages are too (the store's journal keeps
//! writes in order, and recovers a prefix of them after a crash). A
//! restore for the committed head takes, per page, the version of the
//! newest save not after that head's; versions of later saves were never
//! committed and are deleted. Nothing here ever fails a checkpoint: a disk
//! error stops the copying of that partition (no later head is written, so
//! no later checkpoint can match it) until the next restore starts it anew.
//! Nor does a full volume: past its share of the volume the core's copy is
//! cleared and stops, before the kubelet would evict the pod for it.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use fjall::{Database, Keyspace, KeyspaceCreateOptions};

use super::state_pages::PageId;

/// Where a checkpoint's head sits in the state topic (its commit metadata):
/// a local head is the committed one only when all three match.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HeadMark {
    pub slot: u8,
    pub first: i64,
    pub paged: bool,
}

/// The state of a partition as the local copy holds it for a checkpoint.
#[derive(Debug, Default)]
pub struct LocalCopy {
    pub head: Vec<u8>,
    pub pages: Vec<(PageId, Vec<u8>)>,
    /// The slot of each page's committed version.
    pub slots: HashMap<PageId, u8>,
    pub bytes_read: usize,
}

impl LocalCopy {
    /// Takes a page's chosen version.
    fn take(&mut self, chosen: Option<(PageId, u8, u64, fjall::Slice)>) {
        if let Some((page, slot, _, value)) = chosen {
            self.slots.insert(page, slot);
            self.pages.push((page, value.get(8..).unwrap_or_default().to_vec()));
        }
    }
}

pub struct LocalState {
    db: Database,
    dir: PathBuf,
    /// The disk this core's copy may take (`None`: no bound).
    budget: Option<u64>,
    partitions: HashMap<i32, Copying>,
}

impl std::fmt::Debug for LocalState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LocalState").field("dir", &self.dir).finish_non_exhaustive()
    }
}

/// One partition's copy.
struct Copying {
    keyspace: Keyspace,
    /// The number the next save gets.
    next_save: u64,
    /// The save being written, if any.
    save: Option<u64>,
    /// Whether this partition is copied (stopped by a disk error).
    on: bool,
}

/// Memory the store may use: what it buffers before writing a table, and
/// what it caches of what it read. It is read only when a core restores.
const MEMTABLE: u64 = 8 << 20;
const CACHE: u64 = 8 << 20;
/// The journal kept before memtables are flushed to tables: an open after
/// a crash replays it, so a restore reads at most this much of it (the
/// store's least; its default is 512 MiB).
const JOURNAL: u64 = 64 << 20;

type Result<T> = std::result::Result<T, fjall::Error>;

impl LocalState {
    /// Opens (or creates) the store of one core in `dir`, to take at most
    /// `budget` bytes of disk.
    pub fn open(dir: &Path, budget: Option<u64>) -> Result<Self> {
        std::fs::create_dir_all(dir)?;
        let db = Database::builder(dir).worker_threads(1).cache_size(CACHE).max_journaling_size(JOURNAL).open()?;
        Ok(Self { db, dir: dir.to_owned(), budget, partitions: HashMap::new() })
    }

    /// After a save: past its budget, the copy is cleared and stops (each
    /// partition starts again at its next restore, from the topic).
    pub fn check_space(&mut self) {
        let Some(budget) = self.budget else { return };
        let used = match self.db.disk_space() {
            Ok(used) if used > budget => used,
            _ => return,
        };
        let mut stopped = 0;
        for c in self.partitions.values_mut().filter(|c| c.on) {
            c.on = false;
            c.save = None;
            let _ = c.keyspace.clear();
            stopped += 1;
        }
        if stopped > 0 {
            tracing::warn!(dir = %self.dir.display(), used, budget, "the local state copy outgrew its share of the volume (spec.engine.localState.size); it stops, and restores read the state topic");
        }
    }

    fn keyspace(&self, partition: i32) -> Result<Keyspace> {
        self.db.keyspace(&format!("p{partition}"), || KeyspaceCreateOptions::default().max_memtable_size(MEMTABLE))
    }

    /// The copy of the checkpoint `mark` names, if this volume holds it
    /// whole; versions of later saves are deleted. `None` (the topic is
    /// read) when it does not, or when the disk fails.
    pub fn restore(&mut self, partition: i32, mark: HeadMark) -> Option<LocalCopy> {
        self.partitions.remove(&partition);
        match self.try_restore(partition, mark) {
            Ok(copy) => copy,
            Err(e) => {
                tracing::warn!(partition, dir = %self.dir.display(), error = %e, "cannot read the local state copy; reading the state topic");
                None
            }
        }
    }

    fn try_restore(&mut self, partition: i32, mark: HeadMark) -> Result<Option<LocalCopy>> {
        let keyspace = self.keyspace(partition)?;
        let Some(head) = keyspace.get(head_key(mark.slot))? else { return Ok(None) };
        let Some((save, first, paged, bytes)) = parse_head(&head) else { return Ok(None) };
        if first != mark.first || paged != mark.paged {
            return Ok(None);
        }
        let mut copy = LocalCopy { head: bytes.to_vec(), bytes_read: head.len(), ..LocalCopy::default() };
        let mut newest = save;
        let mut later = Vec::new();
        if let Some(other) = keyspace.get(head_key(1 - mark.slot))?
            && parse_head(&other).is_some_and(|(s, ..)| s > save)
        {
            later.push(head_key(1 - mark.slot).to_vec());
        }
        // Keys come in order, a page's two slots side by side: per page,
        // the version of the newest save not after `save` is kept (copied
        // out once, the other never).
        let mut chosen: Option<(PageId, u8, u64, fjall::Slice)> = None;
        for item in keyspace.prefix(b"g") {
            let (key, value) = item.into_inner()?;
            let (Some((page, slot)), Some((written, _))) = (parse_page_key(&key), parse_page(&value)) else {
                continue;
            };
            newest = newest.max(written);
            if written > save {
                later.push(key.to_vec());
                continue;
            }
            copy.bytes_read += value.len();
            match &chosen {
                Some((p, _, w, _)) if *p == page && *w >= written => {}
                Some((p, ..)) if *p == page => chosen = Some((page, slot, written, value)),
                _ => {
                    let done = chosen.replace((page, slot, written, value));
                    copy.take(done);
                }
            }
        }
        copy.take(chosen);
        for key in later {
            keyspace.remove(key)?;
        }
        self.partitions.insert(partition, Copying { keyspace, next_save: newest + 1, save: None, on: true });
        Ok(Some(copy))
    }

    /// Starts the copy of a partition from nothing (it has no checkpoint).
    pub fn reset(&mut self, partition: i32) {
        self.partitions.remove(&partition);
        let reset = self.keyspace(partition).and_then(|keyspace| {
            keyspace.clear()?;
            Ok(keyspace)
        });
        self.started(partition, reset, 1);
    }

    /// Starts the copy of a partition from the checkpoint `mark` read from
    /// the topic: its head, and its pages in their slots.
    pub fn rebase(
        &mut self,
        partition: i32,
        mark: HeadMark,
        head: &[u8],
        pages: &[(PageId, Vec<u8>)],
        slots: &HashMap<PageId, u8>,
    ) {
        self.partitions.remove(&partition);
        let rebased = self.keyspace(partition).and_then(|keyspace| {
            // Cleared first, the head written last: a crash in between
            // leaves no head, so nothing a restore would take.
            keyspace.clear()?;
            // Through the journal, in order after the clear. (Not as
            // tables written at once: an open after a crash replays the
            // journal's clear over them.)
            for (page, bytes) in pages {
                let slot = slots.get(page).copied().unwrap_or(0);
                keyspace.insert(page_key(*page, slot), page_value(1, bytes))?;
            }
            keyspace.insert(head_key(mark.slot), head_value(1, mark, head))?;
            Ok(keyspace)
        });
        self.started(partition, rebased, 2);
    }

    fn started(&mut self, partition: i32, keyspace: Result<Keyspace>, next_save: u64) {
        match keyspace {
            Ok(keyspace) => {
                self.partitions.insert(partition, Copying { keyspace, next_save, save: None, on: true });
            }
            Err(e) => {
                tracing::warn!(partition, dir = %self.dir.display(), error = %e, "cannot write the local state copy; restores read the state topic");
            }
        }
    }

    /// A save of `partition` begins.
    pub fn begin(&mut self, partition: i32) {
        if let Some(c) = self.partitions.get_mut(&partition).filter(|c| c.on) {
            c.save = Some(c.next_save);
            c.next_save += 1;
        }
    }

    /// The save of `partition` wrote `page` to `slot`.
    pub fn page(&mut self, partition: i32, page: PageId, slot: u8, bytes: &[u8]) {
        let dir = &self.dir;
        if let Some(c) = self.partitions.get_mut(&partition).filter(|c| c.on)
            && let Some(save) = c.save
            && let Err(e) = c.keyspace.insert(page_key(page, slot), page_value(save, bytes))
        {
            stop(c, partition, dir, &e);
        }
    }

    /// The save of `partition` is acknowledged: its head sits at `mark`.
    pub fn head(&mut self, partition: i32, mark: HeadMark, bytes: &[u8]) {
        let dir = &self.dir;
        if let Some(c) = self.partitions.get_mut(&partition).filter(|c| c.on)
            && let Some(save) = c.save.take()
            && let Err(e) = c.keyspace.insert(head_key(mark.slot), head_value(save, mark, bytes))
        {
            stop(c, partition, dir, &e);
        }
    }
}

fn stop(c: &mut Copying, partition: i32, dir: &Path, e: &fjall::Error) {
    c.on = false;
    c.save = None;
    tracing::warn!(partition, dir = %dir.display(), error = %e, "cannot write the local state copy; it stops until the next restore, which reads the state topic");
}

fn head_key(slot: u8) -> [u8; 2] {
    [b'h', slot]
}

fn head_value(save: u64, mark: HeadMark, bytes: &[u8]) -> Vec<u8> {
    let mut v = Vec::with_capacity(17 + bytes.len());
    v.extend_from_slice(&save.to_le_bytes());
    v.extend_from_slice(&mark.first.to_le_bytes());
    v.push(u8::from(mark.paged));
    v.extend_from_slice(bytes);
    v
}

fn parse_head(v: &[u8]) -> Option<(u64, i64, bool, &[u8])> {
    let save = u64::from_le_bytes(v.get(..8)?.try_into().ok()?);
    let first = i64::from_le_bytes(v.get(8..16)?.try_into().ok()?);
    let paged = *v.get(16)? == 1;
    Some((save, first, paged, v.get(17..)?))
}

fn page_key((component, page): PageId, slot: u8) -> [u8; 7] {
    let p = page.to_be_bytes();
    [b'g', component, p[0], p[1], p[2], p[3], slot]
}

fn parse_page_key(k: &[u8]) -> Option<(PageId, u8)> {
    match *k {
        [b'g', component, a, b, c, d, slot] if slot < 2 => Some(((component, u32::from_be_bytes([a, b, c, d])), slot)),
        _ => None,
    }
}

fn page_value(save: u64, bytes: &[u8]) -> Vec<u8> {
    let mut v = Vec::with_capacity(8 + bytes.len());
    v.extend_from_slice(&save.to_le_bytes());
    v.extend_from_slice(bytes);
    v
}

fn parse_page(v: &[u8]) -> Option<(u64, &[u8])> {
    Some((u64::from_le_bytes(v.get(..8)?.try_into().ok()?), v.get(8..)?))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn temp_dir(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("sluice-local-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        dir
    }

    fn mark(slot: u8, first: i64) -> HeadMark {
        HeadMark { slot, first, paged: true }
    }

    /// One save as `StateStore::save` makes it: pages, then the head once
    /// the broker acknowledged it at `first`.
    fn save(local: &mut LocalState, partition: i32, pages: &[(PageId, u8, &[u8])], head: HeadMark, bytes: &[u8]) {
        local.begin(partition);
        for (page, slot, b) in pages {
            local.page(partition, *page, *slot, b);
        }
        local.head(partition, head, bytes);
    }

    fn pages(copy: &LocalCopy) -> Vec<(PageId, u8, &[u8])> {
        copy.pages.iter().map(|(p, b)| (*p, copy.slots[p], b.as_slice())).collect()
    }

    #[test]
    fn a_restart_restores_the_committed_checkpoint_from_the_volume() {
        let dir = temp_dir("restart");
        {
            let mut local = LocalState::open(&dir, None).unwrap();
            local.reset(3);
            save(&mut local, 3, &[((0, 0), 0, b"a1"), ((0, 1), 0, b"b1")], mark(0, 10), b"head1");
            save(&mut local, 3, &[((0, 0), 1, b"a2")], mark(1, 20), b"head2");
        }
        // Reopened, as a restarted worker does.
        let mut local = LocalState::open(&dir, None).unwrap();
        let copy = local.restore(3, mark(1, 20)).unwrap();
        assert_eq!(copy.head, b"head2");
        assert_eq!(pages(&copy), vec![((0, 0), 1, &b"a2"[..]), ((0, 1), 0, &b"b1"[..])]);
        assert!(local.restore(3, mark(1, 21)).is_none(), "another checkpoint (the topic moved on): not this copy");
        assert!(local.restore(4, mark(0, 10)).is_none(), "a partition never copied");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_save_that_never_committed_is_not_taken_and_is_deleted() {
        let dir = temp_dir("uncommitted");
        let mut local = LocalState::open(&dir, None).unwrap();
        local.rebase(0, mark(0, 10), b"head1", &[((0, 0), b"a1".to_vec())], &HashMap::from([((0, 0), 1)]));
        // A save acknowledged whose offsets never committed (the commit
        // failed: the core restores)...
        save(&mut local, 0, &[((0, 0), 0, b"a2"), ((0, 7), 0, b"new")], mark(1, 20), b"head2");
        let copy = local.restore(0, mark(0, 10)).unwrap();
        assert_eq!(copy.head, b"head1");
        assert_eq!(pages(&copy), vec![((0, 0), 1, &b"a1"[..])]);
        assert!(local.restore(0, mark(1, 20)).is_none(), "the later head was deleted with its pages");
        // ...and one cut short before its head (a crash mid-save).
        let _ = local.restore(0, mark(0, 10)).unwrap();
        local.begin(0);
        local.page(0, (0, 0), 0, b"a3");
        let copy = local.restore(0, mark(0, 10)).unwrap();
        assert_eq!(pages(&copy), vec![((0, 0), 1, &b"a1"[..])]);
        // Saves go on from the committed checkpoint, numbered past the
        // deleted ones.
        save(&mut local, 0, &[((0, 0), 0, b"a4")], mark(1, 30), b"head3");
        let copy = local.restore(0, mark(1, 30)).unwrap();
        assert_eq!(pages(&copy), vec![((0, 0), 0, &b"a4"[..])]);
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// A copy started from what a restore read from the topic restores the
    /// same after a reopen (the store's bulk load, tried first, lost it:
    /// the journal's clear was replayed over it).
    #[test]
    fn a_copy_rebased_from_the_topic_restores_what_was_read() {
        let dir = temp_dir("rebase");
        let read: Vec<(PageId, Vec<u8>)> = vec![
            ((0, 0), b"p0".to_vec()),
            ((0, 1), b"p1".to_vec()),
            ((0, 300), b"p300".to_vec()),
            ((1, 0), b"q".to_vec()),
        ];
        let slots = HashMap::from([((0, 0), 1), ((0, 1), 0), ((0, 300), 1), ((1, 0), 0)]);
        {
            let mut local = LocalState::open(&dir, None).unwrap();
            local.rebase(2, mark(1, 77), b"head", &read, &slots);
        }
        let mut local = LocalState::open(&dir, None).unwrap();
        let copy = local.restore(2, mark(1, 77)).unwrap();
        assert_eq!((copy.head.as_slice(), &copy.pages, &copy.slots), (&b"head"[..], &read, &slots));
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_fresh_start_clears_the_copy_and_whole_snapshots_are_copied_too() {
        let dir = temp_dir("fresh");
        let mut local = LocalState::open(&dir, None).unwrap();
        local.rebase(1, mark(0, 5), b"old", &[((0, 0), b"x".to_vec())], &HashMap::new());
        local.reset(1);
        assert!(local.restore(1, mark(0, 5)).is_none(), "a partition with no checkpoint starts its copy anew");
        local.reset(1);
        let whole = HeadMark { slot: 1, first: 8, paged: false };
        save(&mut local, 1, &[], whole, b"whole state");
        assert!(local.restore(1, HeadMark { paged: true, ..whole }).is_none(), "the format must match");
        let copy = local.restore(1, whole).unwrap();
        assert_eq!((copy.head.as_slice(), copy.pages.len()), (&b"whole state"[..], 0));
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_copy_past_its_budget_is_cleared_and_stops() {
        let dir = temp_dir("budget");
        let mut local = LocalState::open(&dir, Some(4096)).unwrap();
        local.reset(0);
        let big = vec![7u8; 64 << 10];
        save(&mut local, 0, &[((0, 0), 0, &big)], mark(0, 10), b"head");
        local.check_space();
        assert!(local.restore(0, mark(0, 10)).is_none(), "cleared");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn keys_round_trip() {
        assert_eq!(parse_page_key(&page_key((2, 70_000), 1)), Some(((2, 70_000), 1)));
        assert_eq!(parse_page_key(b"h0"), None);
        let m = mark(1, -1);
        let v = head_value(9, m, b"xy");
        assert_eq!(parse_head(&v), Some((9, -1, true, &b"xy"[..])));
        assert_eq!(parse_head(&v[..10]), None);
    }
}
