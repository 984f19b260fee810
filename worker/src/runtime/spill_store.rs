//! Where a core's operators spill state that outgrows memory: an embedded
//! LSM store (`fjall`) on the worker's volume, one per core (nothing shared
//! across cores), one keyspace per partition engine.
//!
//! What is spilled is a cache of the checkpoint, not a source of truth: a
//! restarted worker rebuilds its state from the state topic (or its local
//! copy) and spills again what does not fit. So the store is wiped when it
//! opens and when it is dropped, and nothing in it is ever synced to disk
//! for durability — only written through the page cache.
//!
//! Keys: `p` + page number (big-endian) → the page's bytes, as a
//! checkpoint writes them; `k` + group key → its page (little-endian u32).

use std::cell::{Cell, RefCell};
use std::path::{Path, PathBuf};

use fjall::compaction::Leveled;
use fjall::config::CompressionPolicy;
use fjall::{
    CompressionType, Database, Keyspace, KeyspaceCreateOptions, KvSeparationOptions, OwnedWriteBatch as WriteBatch,
};
use sluice_engine::{Error as EngineError, SpillStore};

use super::partition::PartitionPipeline;
use super::setup::CoreSetup;
use crate::Error;

/// The state the core's partition engines may keep in memory together
/// before they spill, as a share of `stateMemoryLimit`: the rest is room
/// for what a batch brings in before the next spill and for what the
/// gauge reads late.
const SPILL_SHARE: (usize, usize) = (3, 4);

/// The share of the core's memory budget each of `spilling` partition
/// engines whose state can spill keeps in memory. Only those count: a
/// core of a join on one core owns its source partitions too (their
/// engines project rows and keep nothing), and an even share over all of
/// them left half the budget unused while the join read its keys back
/// from disk.
fn spill_budget(state_limit: usize, spilling: usize) -> usize {
    state_limit / SPILL_SHARE.1 * SPILL_SHARE.0 / spilling.max(1)
}

/// The write buffer of each of a core's `spilling` stores: the core's
/// [`WRITE_BUFFER_SHARE`] of `stateMemoryLimit` (within
/// [`WRITE_BUFFER_CORE`]) shared by them, at least [`MEMTABLE`] each.
/// A store writes its buffer to disk when it is full, and each write is a
/// new table the store's thread compacts: a spilling q20 (30 M events,
/// 1 GiB) ran at 201 K records/s with 4 MiB buffers, 290–316 K with 16
/// MiB and 377 K with 32 MiB, the store's thread compacting less
/// (docs/benchmarks.md, "The store's write buffer"). The buffer, the
/// four that may wait for their flush and the writes held for the next
/// batch ([`DiskSpill::hold`], up to 4 MiB) stay within the quarter
/// of the limit that state does not take ([`SPILL_SHARE`]), past one
/// store per core at least [`MEMTABLE`] each, as before.
fn write_buffer(state_limit: usize, spilling: usize) -> u64 {
    let core = (state_limit as u64 / WRITE_BUFFER_SHARE).clamp(MEMTABLE, WRITE_BUFFER_CORE);
    (core / spilling.max(1) as u64).max(MEMTABLE)
}

/// With a state directory (the worker's volume, `--state-dir`), gives
/// each partition engine whose operator can spill an even share of the
/// core's memory budget ([`spill_budget`]) and a store on the volume:
/// past its share, cold state goes to disk instead of stopping the job
/// at the limit. Without one, state stays in memory and the limit stops
/// the job.
pub(super) fn attach(
    setup: &CoreSetup,
    parts: &mut [PartitionPipeline],
    state_limit: usize,
) -> Result<Option<SpillDb>, Error> {
    let Some(dir) = setup.config.worker.state_dir.as_ref() else { return Ok(None) };
    let spilling = parts.iter().filter(|p| p.engine().spills()).count();
    if spilling == 0 {
        return Ok(None);
    }
    let (slot, slots) = setup.slot();
    let dir = Path::new(dir).join("spill").join(format!("engine-{slot}-of-{slots}"));
    // Half the volume is the checkpoint copy's; the other half is split
    // across the worker's cores.
    let cores = u64::from(setup.config.spec.cores_per_worker.max(1).unsigned_abs());
    let disk_budget = setup.config.worker.state_dir_bytes.map(|b| b / 2 / cores);
    let db = setup
        .cpus
        .open_store(|| SpillDb::open(&dir, disk_budget, write_buffer(state_limit, 1)))
        .map_err(|e| Error::Config(format!("cannot open the spill store in {}: {e}", dir.display())))?;
    let budget = spill_budget(state_limit, spilling);
    let buffer = write_buffer(state_limit, spilling);
    for (i, part) in parts.iter_mut().enumerate().filter(|(_, p)| p.engine().spills()) {
        let store = db.store(i, buffer).map_err(|e| Error::Config(format!("cannot open the spill store: {e}")))?;
        if !part.engine_mut().attach_spill(Box::new(store), budget) {
            return Err(Error::Internal(format!(
                "partition {}'s engine says it spills but took no store",
                part.partition()
            )));
        }
    }
    Ok(Some(db))
}

/// Memory the store may use besides the state the engines account for:
/// each keyspace's write buffer (at least this; see [`write_buffer`])
/// and the block cache shared by the core's keyspaces
/// (docs/operations.md, "State larger than memory").
pub const MEMTABLE: u64 = 4 << 20;
pub const CACHE: u64 = 8 << 20;
/// A core's write buffers take 1/32 of its `stateMemoryLimit`, up to
/// [`WRITE_BUFFER_CORE`]: with the four that may wait for their flush
/// and the writes held for the next batch (4 MiB, at most a buffer), at
/// most 6/32 of the limit, inside the quarter state does not take.
const WRITE_BUFFER_SHARE: u64 = 32;
const WRITE_BUFFER_CORE: u64 = 32 << 20;
/// Tables of at most this size: compaction holds a table's keys' hashes
/// in memory while it writes its filter (8 bytes a key), which at the
/// store's default 64 MiB took 33 MB at the peak of a 10 M-event run.
const TABLE: u64 = 8 << 20;
/// The write buffer size at which the store would seal it itself: never
/// reached while [`DiskSpill::written`] seals it at its size (see there
/// for why).
const MEMTABLE_FALLBACK: u64 = 2 * WRITE_BUFFER_CORE;
/// The journal kept before write buffers are flushed: at least the
/// store's least, and room for a full buffer and the four waiting
/// (past it the store flushes early, to shorten the journal).
fn journal(buffer: u64) -> u64 {
    (64 << 20).max(6 * buffer)
}
/// Pages of at least this size go to the store's blob files, written once
/// at flush, and compaction moves only a pointer to them: a join's pages
/// (a key with every row it keeps, often many KiB) were rewritten at each
/// level. Smaller pages (an aggregate's, a top-N's) stay in the tables.
const SEPARATE: u32 = 4 << 10;

/// One core's spill store.
pub struct SpillDb {
    db: Database,
    dir: PathBuf,
    /// The disk the core's spilled state may take (`None`: no bound).
    pub budget: Option<u64>,
}

impl std::fmt::Debug for SpillDb {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SpillDb").field("dir", &self.dir).finish_non_exhaustive()
    }
}

impl SpillDb {
    /// Opens an empty store in `dir` (what an earlier run left there is
    /// removed first).
    /// `buffer`: the largest write buffer of its stores.
    pub fn open(dir: &Path, budget: Option<u64>, buffer: u64) -> fjall::Result<Self> {
        if dir.exists() {
            std::fs::remove_dir_all(dir)?;
        }
        std::fs::create_dir_all(dir)?;
        let db = Database::builder(dir)
            .worker_threads(1)
            .cache_size(CACHE)
            .max_journaling_size(journal(buffer))
            .manual_journal_persist(true)
            .temporary(true)
            // The journal is never read (the store is wiped when it
            // opens): compressing what goes to it cost the core's thread
            // 6 % of a spilling join's run.
            .journal_compression(CompressionType::None)
            .open()?;
        Ok(Self { db, dir: dir.to_owned(), budget })
    }

    /// The store of partition engine `slot` of the core, writing to disk
    /// `buffer` bytes at a time.
    pub fn store(&self, slot: usize, buffer: u64) -> fjall::Result<DiskSpill> {
        let keyspace = self.db.keyspace(&format!("s{slot}"), || {
            KeyspaceCreateOptions::default()
                .max_memtable_size(MEMTABLE_FALLBACK)
                .manual_journal_persist(true)
                .compaction_strategy(std::sync::Arc::new(Leveled::default().with_table_target_size(TABLE)))
                .with_kv_separation(Some(KvSeparationOptions::default().separation_threshold(SEPARATE)))
                // Tables not compressed: compaction rewrites them level
                // after level, and LZ4 there cost a spilling q18 a sixth of
                // its rate for a fifth less disk. Blob files (a join's
                // pages, written once) keep it: a join's rows compress to
                // about 60 % (docs/benchmarks.md, "State larger than
                // memory: the store off the engine's CPU").
                .data_block_compression_policy(CompressionPolicy::all(CompressionType::None))
        })?;
        Ok(DiskSpill {
            keyspace,
            db: self.db.clone(),
            held: RefCell::new(None),
            held_bytes: Cell::new(0),
            held_puts: Cell::new(false),
            scratch: RefCell::new(Vec::with_capacity(64)),
            unrotated: Cell::new(0),
            buffer,
        })
    }
}

/// One partition engine's spilled pages.
pub struct DiskSpill {
    keyspace: Keyspace,
    db: Database,
    /// Writes not applied yet, and their bytes: a spill round's pages (a
    /// few thousand, each with its groups' keys) go to the store as one
    /// batch — one journal write and one check of the write buffer, where
    /// each write alone took the journal's lock and made its checks —
    /// applied before anything is read, and at `buffer` bytes.
    held: RefCell<Option<WriteBatch>>,
    held_bytes: Cell<u64>,
    /// Whether the writes held include a page or key written (not only
    /// removals): reads apply the writes held first only then. A page read
    /// back is removed from the store, and nothing reads it or its keys
    /// again until it is spilled anew — a write — so a read may find an
    /// index entry whose removal is held: it names a page the engine no
    /// longer has on disk, and the engine ignores it
    /// (`sluice_engine`'s `state::spilling`, `Spilling::find`). Without this, every
    /// page a watermark reads back to let rows go applied a batch of the
    /// one before's removals: a commit per read.
    held_puts: Cell<bool>,
    /// A key with its prefix, built for a lookup (no allocation per row).
    scratch: RefCell<Vec<u8>>,
    /// Bytes written to the active write buffer since this store last
    /// sealed it ([`DiskSpill::written`]).
    unrotated: Cell<u64>,
    /// The write buffer's size ([`write_buffer`]).
    buffer: u64,
}

impl std::fmt::Debug for DiskSpill {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DiskSpill").finish_non_exhaustive()
    }
}

/// A disk error while spilling: the core stops and is restarted, from its
/// checkpoint, like any other failure of its own machine.
fn disk(e: &fjall::Error) -> EngineError {
    EngineError::Spill(format!("the store on the worker's volume failed: {e}"))
}

fn page_key(page: u32) -> [u8; 5] {
    let mut k = [b'p', 0, 0, 0, 0];
    k[1..].copy_from_slice(&page.to_be_bytes());
    k
}

fn group_key(key: &[u8]) -> Vec<u8> {
    let mut k = Vec::with_capacity(key.len() + 1);
    k.push(b'k');
    k.extend_from_slice(key);
    k
}

impl DiskSpill {
    /// Counts `bytes` written, and seals the write buffer once they reach
    /// its size. Left to itself, the store asks its one background
    /// thread to seal a full buffer with a message on every write past
    /// the size (dropped when its queue of 1,000 is full); that thread
    /// then queues the flush with a blocking send to its own queue — which
    /// the writes' requests keep full, so it waits on itself for good,
    /// and the buffer grows without end: 1.4 GiB of RSS holding 8 MiB of
    /// state in a 10 M-event run of Nexmark q20 that spilled
    /// (docs/benchmarks.md, "State larger than memory"). Sealed here, with
    /// the store's own size set past reach ([`MEMTABLE_FALLBACK`]), the
    /// queue holds a flush per sealed buffer and no requests; the store's
    /// bound on sealed buffers waiting for their flush (four) makes the
    /// core wait instead of memory growing.
    fn written(&self, bytes: u64) -> Result<(), EngineError> {
        self.unrotated.set(self.unrotated.get() + bytes);
        if self.unrotated.get() >= self.buffer {
            self.unrotated.set(0);
            self.keyspace.rotate_memtable().map_err(|e| disk(&e))?;
        }
        Ok(())
    }

    /// Applies the writes held before a read, unless they only remove
    /// (see [`DiskSpill::held_puts`]).
    fn before_read(&self) -> Result<(), EngineError> {
        if self.held_puts.get() { self.apply() } else { Ok(()) }
    }

    /// Holds a write of `bytes` bytes for the next [`DiskSpill::apply`],
    /// applying what is held once it reaches [`MEMTABLE`]: the held writes
    /// are a copy beside the write buffer they go to, and a larger batch
    /// saves nothing measurable (a commit per 4 MiB), where holding up to a
    /// 32 MiB buffer's worth took 28 MiB more per spilling engine.
    fn hold(&self, bytes: usize, write: impl FnOnce(&mut WriteBatch, &Keyspace)) -> Result<(), EngineError> {
        write(self.held.borrow_mut().get_or_insert_with(|| self.db.batch()), &self.keyspace);
        self.held_bytes.set(self.held_bytes.get() + bytes as u64);
        if self.held_bytes.get() >= MEMTABLE {
            self.apply()?;
        }
        Ok(())
    }

    /// Applies the writes held.
    fn apply(&self) -> Result<(), EngineError> {
        self.held_puts.set(false);
        let Some(batch) = self.held.borrow_mut().take() else { return Ok(()) };
        batch.commit().map_err(|e| disk(&e))?;
        self.written(self.held_bytes.replace(0))
    }
}

impl SpillStore for DiskSpill {
    fn put_page(&mut self, page: u32, bytes: &[u8], keys: &mut dyn Iterator<Item = &[u8]>) -> Result<(), EngineError> {
        self.held_puts.set(true);
        self.hold(bytes.len() + 5, |b, k| b.insert(k, page_key(page), bytes))?;
        let at = page.to_le_bytes();
        for key in keys {
            self.hold(key.len() + 5, |b, k| b.insert(k, group_key(key), at))?;
        }
        Ok(())
    }

    fn page(&self, page: u32) -> Result<Option<Vec<u8>>, EngineError> {
        self.before_read()?;
        Ok(self.keyspace.get(page_key(page)).map_err(|e| disk(&e))?.map(|v| v.to_vec()))
    }

    fn remove_page(&mut self, page: u32, keys: &mut dyn Iterator<Item = &[u8]>) -> Result<(), EngineError> {
        self.hold(5, |b, k| b.remove(k, page_key(page)))?;
        for key in keys {
            self.hold(key.len() + 1, |b, k| b.remove(k, group_key(key)))?;
        }
        Ok(())
    }

    fn key_page(&self, key: &[u8]) -> Result<Option<u32>, EngineError> {
        self.before_read()?;
        let mut scratch = self.scratch.borrow_mut();
        scratch.clear();
        scratch.push(b'k');
        scratch.extend_from_slice(key);
        let found = self.keyspace.get(&*scratch).map_err(|e| disk(&e))?;
        Ok(found.and_then(|v| <[u8; 4]>::try_from(&*v).ok()).map(u32::from_le_bytes))
    }

    fn clear(&mut self) -> Result<(), EngineError> {
        self.held.borrow_mut().take();
        self.held_bytes.set(0);
        self.held_puts.set(false);
        self.keyspace.clear().map_err(|e| disk(&e))
    }

    fn disk_bytes(&self) -> u64 {
        self.keyspace.disk_space()
    }

    fn for_each_key(&self, f: &mut dyn FnMut(&[u8])) -> Result<(), EngineError> {
        self.apply()?;
        for item in self.keyspace.prefix(b"k") {
            let key = item.key().map_err(|e| disk(&e))?;
            f(&key[1..]);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A join's first stage projects its sources' rows and keeps nothing:
    /// its engines take no share of the budget, the join's take it all.
    #[test]
    fn the_budget_is_shared_by_the_engines_whose_state_spills_only() {
        use sluice_crds::{ColumnType, FileSource, SourceSpec};
        use sluice_engine::{Engine, EngineOptions};
        use std::sync::Arc;
        let source = |name: &str| SourceSpec {
            file: Some(FileSource { path: format!("/data/{name}.jsonl") }),
            ..SourceSpec::table(name, &[("k", ColumnType::Bigint, true), ("v", ColumnType::Bigint, true)])
        };
        let sql = "SELECT a.v, b.v AS w FROM a JOIN b ON a.k = b.k";
        let flow = sluice_sql::plan_dataflow(sql, &[source("a"), source("b")], 4).unwrap();
        let spills = |p: &sluice_plan::Plan| Engine::new(Arc::new(p.clone()), EngineOptions::default()).spills();
        let stages: Vec<bool> = flow.stages.iter().map(|s| spills(&s.plan)).collect();
        let branches: Vec<bool> = flow.branches.iter().map(|b| spills(&b.plan)).collect();
        assert_eq!((stages, branches), (vec![false, true], vec![false]), "the sources' projections, then the join");
        // One core owning 16 partitions of each source and 16 of the join:
        // the join's 16 engines share three quarters of the budget.
        assert_eq!(spill_budget(1 << 30, 16), 48 << 20);
    }

    /// A core's write buffers: 1/32 of its limit, up to 32 MiB, shared by
    /// its spilling engines, at least 4 MiB each.
    #[test]
    fn a_cores_write_buffers_take_a_32nd_of_its_limit_shared_by_its_stores() {
        const MIB: usize = 1 << 20;
        assert_eq!(write_buffer(1 << 30, 1), 32 << 20, "q20 under 1 GiB");
        assert_eq!(write_buffer(4 << 30, 1), 32 << 20, "no more than 32 MiB");
        assert_eq!(write_buffer(256 * MIB, 1), 8 << 20, "the default limit");
        assert_eq!(write_buffer(1 << 30, 2), 16 << 20);
        assert_eq!(write_buffer(1 << 30, 16), 4 << 20, "never under 4 MiB");
        assert_eq!(write_buffer(MIB, 1), 4 << 20);
        // With the four waiting and the writes held: within the quarter
        // state does not take.
        assert!(6 * write_buffer(1 << 30, 1) <= (1 << 30) / 4);
    }

    #[test]
    fn pages_and_keys_go_to_disk_and_come_back_and_a_new_store_starts_empty() {
        let dir = std::env::temp_dir().join(format!("sluice-spill-test-{}", std::process::id()));
        let db = SpillDb::open(&dir, None, MEMTABLE).unwrap();
        let mut a = db.store(0, MEMTABLE).unwrap();
        let mut b = db.store(1, MEMTABLE).unwrap();
        let keys: [&[u8]; 2] = [b"alpha", b"beta"];
        a.put_page(7, b"page seven", &mut keys.iter().copied()).unwrap();
        b.put_page(7, b"another seven", &mut std::iter::empty()).unwrap();
        assert_eq!(a.page(7).unwrap().as_deref(), Some(&b"page seven"[..]));
        assert_eq!(b.page(7).unwrap().as_deref(), Some(&b"another seven"[..]), "one keyspace per engine");
        assert_eq!((a.key_page(b"beta").unwrap(), a.key_page(b"gamma").unwrap()), (Some(7), None));
        let mut filed = Vec::new();
        a.for_each_key(&mut |k| filed.push(k.to_vec())).unwrap();
        assert_eq!(filed, vec![b"alpha".to_vec(), b"beta".to_vec()]);
        assert_eq!(b.key_page(b"beta").unwrap(), None);
        a.remove_page(7, &mut keys.iter().copied()).unwrap();
        // A removal may be seen late, a write at once; the next write
        // applies the removal before it.
        a.put_page(8, b"page eight", &mut [&b"alpha"[..]].into_iter()).unwrap();
        assert_eq!((a.page(7).unwrap(), a.key_page(b"beta").unwrap()), (None, None));
        assert_eq!((a.page(8).unwrap().as_deref(), a.key_page(b"alpha").unwrap()), (Some(&b"page eight"[..]), Some(8)));
        a.remove_page(8, &mut [&b"alpha"[..]].into_iter()).unwrap();
        b.clear().unwrap();
        assert_eq!(b.page(7).unwrap(), None);
        a.put_page(1, b"left behind", &mut std::iter::empty()).unwrap();
        drop((a, b, db));
        let db = SpillDb::open(&dir, None, MEMTABLE).unwrap();
        assert_eq!(db.store(0, MEMTABLE).unwrap().page(1).unwrap(), None, "a store opens empty");
        drop(db);
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// Pages written as fast as a core spills them: the write buffer
    /// stays within its bound (the active one and four sealed), and the
    /// writes end — where the store's own sealing filled its queue, waited
    /// on itself, and let the buffer grow without end.
    #[test]
    fn writes_faster_than_the_store_flushes_keep_its_write_buffer_bounded() {
        let dir = std::env::temp_dir().join(format!("sluice-spill-burst-{}", std::process::id()));
        let db = SpillDb::open(&dir, None, MEMTABLE).unwrap();
        let mut store = db.store(0, MEMTABLE).unwrap();
        let page = vec![7u8; 16 << 10];
        let mut most = 0;
        for p in 0..6_000u32 {
            let keys: Vec<Vec<u8>> = (0..8).map(|k| format!("key-{p}-{k}").into_bytes()).collect();
            store.put_page(p, &page, &mut keys.iter().map(Vec::as_slice)).unwrap();
            most = most.max(db.db.write_buffer_size());
        }
        assert!(most <= 6 * MEMTABLE, "the write buffer held {most} bytes");
        assert_eq!(store.page(5_999).unwrap().as_deref(), Some(&page[..]));
        drop((store, db));
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// The writes held for the next batch are applied at 4 MiB, whatever
    /// the store's write buffer: a copy beside the buffer, it need not
    /// grow with it (with 32 MiB it once held up to 32 MiB).
    #[test]
    fn the_writes_held_are_applied_at_four_mib_whatever_the_buffer() {
        let dir = std::env::temp_dir().join(format!("sluice-spill-held-{}", std::process::id()));
        let buffer = WRITE_BUFFER_CORE;
        let db = SpillDb::open(&dir, None, buffer).unwrap();
        let mut store = db.store(0, buffer).unwrap();
        let page = vec![3u8; 64 << 10];
        let mut most = 0;
        for p in 0..200u32 {
            store.put_page(p, &page, &mut std::iter::empty()).unwrap();
            most = most.max(store.held_bytes.get());
        }
        assert!(most < MEMTABLE, "held {most} bytes before applying them");
        assert!(most > MEMTABLE / 2, "held {most} bytes: writes are still handed over in batches");
        assert_eq!(store.page(199).unwrap().as_deref(), Some(&page[..]));
        drop((store, db));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
