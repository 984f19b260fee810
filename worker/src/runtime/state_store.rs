//! Engine state checkpoints in a compacted Kafka topic.
//!
//! The state of source partition `p` is written to partition `p` of the
//! state topic — by the one core that owns `p`, with an idempotent producer,
//! so a snapshot's chunks sit at consecutive offsets — as chunks of at most
//! 512 KiB keyed `<topic>/<p>/<slot>/<chunk>`. The offset commit of `p` then
//! carries `sluice:v2:<slot>:<first offset>+<chunks>` as metadata, so offsets
//! and the state they belong to are committed atomically together.
//!
//! Two key slots alternate, and a save always writes the slot the committed
//! checkpoint does *not* use. Compaction only removes a record once a newer
//! one has the same key, so the snapshot the committed offsets point to can
//! never be compacted away — even when a save succeeded and the commit after
//! it did not (a crash in between). Loading checks that every chunk is at
//! the exact offset and key the metadata names, and fails loudly otherwise:
//! restoring any other snapshot would replay input into the wrong state.
//!
//! A paged engine's checkpoint is incremental (`sluice:v3:`): the snapshot
//! above is only its head, and the pages that changed are written before
//! it under keys of their own ([`super::state_pages`]). A checkpoint of
//! the earlier format restores whole, and the first save after it writes
//! every page.
//!
//! Where the worker has a volume for local state, every save is also
//! copied there ([`super::local_state`]), and a restore takes the copy when
//! it holds the committed checkpoint, reading only what the topic holds
//! past that checkpoint's head (to tombstone what a save that never
//! committed left there).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::KafkaError;
use rdkafka::message::Message;
use rdkafka::producer::BaseRecord;
use rdkafka::{ClientConfig, Offset, TopicPartitionList};

use super::local_state::{HeadMark, LocalState};
use super::setup::CoreCpus;
use super::state_pages::{self, PageId, PageKey, Scan};
use crate::Error;
use crate::sink::{CoreProducer, DrainDeadline};
use crate::source::QuietContext;

const CHUNK: usize = state_pages::PART;
const PREFIX: &str = "sluice:v2:";
/// An incremental checkpoint: the snapshot is a head, with pages beside it.
const PAGED_PREFIX: &str = "sluice:v3:";
/// Metadata of any Sluice checkpoint format, this one or another.
const ANY_PREFIX: &str = "sluice:";

pub struct StateStore {
    producer: Arc<CoreProducer>,
    reader_config: ClientConfig,
    topic: String,
    source_topic: String,
    /// How long one attempt to read a snapshot may take before it counts as
    /// a broker outage (retried by the core's supervisor with backoff); a
    /// scan of a partition's pages, how long it may go without a record.
    read_timeout: Duration,
    /// Per partition with incremental checkpoints: the slot of each page's
    /// committed version, and keys to tombstone at the next save.
    books: HashMap<i32, PageBook>,
    /// The copy of the checkpoints on the worker's volume, if it has one.
    local: Option<LocalState>,
}

#[derive(Debug, Default)]
struct PageBook {
    slots: HashMap<PageId, u8>,
    tombstones: Vec<PageKey>,
}

/// One partition's state to save ([`StateStore::save`]).
#[derive(Debug)]
pub struct Snapshot {
    pub partition: i32,
    /// The whole state, or an incremental checkpoint's head.
    pub head: Vec<u8>,
    /// From [`StateStore::next_slot`].
    pub slot: u8,
    /// An incremental checkpoint's changed pages (`None`: a whole
    /// snapshot), serialised one at a time as they are sent
    /// ([`StateStore::save`]'s `page`), so a save never holds them all.
    pub pages: Option<Vec<PageId>>,
}

/// What [`StateStore::load`] read for a partition.
#[derive(Debug)]
pub struct Loaded {
    /// The whole state, or (with pages) an incremental checkpoint's head.
    pub head: Vec<u8>,
    pub pages: Option<Vec<(PageId, Vec<u8>)>>,
    /// Bytes read (from the volume or the topic).
    pub bytes_read: usize,
    /// Whether the state came from the worker's volume.
    pub from_volume: bool,
}

/// See [`StateStore::read_timeout`].
const READ_TIMEOUT: Duration = Duration::from_secs(60);

impl std::fmt::Debug for StateStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StateStore").field("topic", &self.topic).finish()
    }
}

impl StateStore {
    /// Opens the state topic, creating it with one partition per source
    /// partition. A state topic with another count means the source topic's
    /// partition count changed since the state was written (see
    /// [`Error::SourcePartitionsChanged`]): nothing is consumed then.
    pub fn open(
        config: &ClientConfig,
        producer: Option<Arc<CoreProducer>>,
        topic: &str,
        source_topic: &str,
        partitions: i32,
        drain: DrainDeadline,
        local: Option<(&std::path::Path, Option<u64>, CoreCpus)>,
    ) -> Result<Self, Error> {
        let laid_out = crate::kafka::create_topic(
            config,
            topic,
            partitions,
            // Segments of 64 MiB, not the default GiB: compaction only
            // cleans closed segments, and restoring an incremental
            // checkpoint reads the whole partition.
            &[
                ("cleanup.policy", "compact"),
                ("max.message.bytes", "1048576"),
                ("min.compaction.lag.ms", "60000"),
                ("segment.bytes", "67108864"),
            ],
        )?;
        if laid_out != partitions {
            return Err(Error::SourcePartitionsChanged {
                topic: source_topic.to_owned(),
                now: partitions,
                state_topic: topic.to_owned(),
                was: laid_out,
            });
        }
        let mut store = Self::with_clients(config, producer, topic, source_topic, READ_TIMEOUT, drain)?;
        store.local = local.and_then(|(dir, budget, cpus)| match cpus.open_store(|| LocalState::open(dir, budget)) {
            Ok(local) => Some(local),
            Err(e) => {
                tracing::warn!(dir = %dir.display(), error = %e, "cannot open the local state copy; restores read the state topic");
                None
            }
        });
        Ok(store)
    }

    /// Writes through `producer` (the core's transactional one, exactly
    /// once), or a producer of its own.
    fn with_clients(
        config: &ClientConfig,
        producer: Option<Arc<CoreProducer>>,
        topic: &str,
        source_topic: &str,
        read_timeout: Duration,
        drain: DrainDeadline,
    ) -> Result<Self, Error> {
        let producer = match producer {
            Some(p) => p,
            None => {
                let mut producer_config = config.clone();
                // A bounded queue (librdkafka's default holds up to 1 GiB):
                // a save larger than it waits for acknowledgements as it
                // goes instead of holding a second copy of the state.
                producer_config
                    .set("acks", "all")
                    .set("linger.ms", "5")
                    .set("batch.size", "1000000")
                    .set("queue.buffering.max.messages", "32768")
                    .set("queue.buffering.max.kbytes", "65536")
                    .set("enable.idempotence", "true");
                CoreProducer::new(&producer_config, topic, None, drain)?
            }
        };
        let mut reader_config = config.clone();
        // Exactly once, state is written in transactions; what an offset
        // commit points to is always committed. The reader assigns
        // partitions and never commits, but librdkafka assigns only within
        // a group: one named after the state topic stays inside the job's
        // `sluice.<namespace>.<name>.` prefix, which its group ACL covers.
        reader_config
            .set("group.id", topic)
            .set("enable.auto.commit", "false")
            .set("isolation.level", "read_committed");
        Ok(Self {
            producer,
            reader_config,
            topic: topic.to_owned(),
            source_topic: source_topic.to_owned(),
            read_timeout,
            books: HashMap::new(),
            local: None,
        })
    }

    fn key(&self, partition: i32, slot: u8, chunk: usize) -> String {
        format!("{}/{partition}/{slot}/{chunk}", self.source_topic)
    }

    /// The slot a new snapshot goes to: the one `committed` (a partition's
    /// committed metadata) does not point to.
    pub fn next_slot(committed: &str) -> u8 {
        match parse(committed) {
            Ok(Some(c)) => 1 - c.slot,
            _ => 0,
        }
    }

    /// Writes snapshots and returns each one's commit metadata once every
    /// record is acknowledged. An incremental one writes its tombstones and
    /// pages first, then its head: the head's offset tells a restore which
    /// page versions are committed ([`state_pages`]).
    /// `page(i, page)` serialises page `page` of `snapshots[i]`.
    pub fn save(
        &mut self,
        snapshots: &[Snapshot],
        page: &mut dyn FnMut(usize, PageId) -> Result<Vec<u8>, Error>,
    ) -> Result<(Vec<(i32, String)>, usize), Error> {
        // Acknowledgements of an earlier save that failed midway.
        let _ = self.producer.take_chunks();
        let mut expected = Vec::with_capacity(snapshots.len());
        let mut written_slots: Vec<(i32, Vec<(PageId, u8)>)> = Vec::new();
        let mut bytes_written = 0;
        for (i, snapshot) in snapshots.iter().enumerate() {
            let partition = snapshot.partition;
            if let Some(local) = &mut self.local {
                local.begin(partition);
            }
            if let Some(pages) = &snapshot.pages {
                let prefix = state_pages::prefix(&self.source_topic, partition);
                let book = self.books.entry(partition).or_default();
                for key in &book.tombstones {
                    let key = key.to_key(&prefix);
                    let record = BaseRecord::with_opaque_to(&self.topic, 0).partition(partition).key(key.as_bytes());
                    self.producer.send(record)?;
                }
                let mut slots = Vec::with_capacity(pages.len());
                for id in pages {
                    let bytes = page(i, *id)?;
                    let slot = book.slots.get(id).map_or(0, |s| 1 - s);
                    if let Some(local) = &mut self.local {
                        local.page(partition, *id, slot, &bytes);
                    }
                    for (part, value) in state_pages::parts(&bytes).iter().enumerate() {
                        let part = u32::try_from(part).unwrap_or(u32::MAX);
                        let key = PageKey { page: *id, slot, part }.to_key(&prefix);
                        let record = BaseRecord::with_opaque_to(&self.topic, 0)
                            .partition(partition)
                            .key(key.as_bytes())
                            .payload(value.as_slice());
                        self.producer.send(record)?;
                        bytes_written += key.len() + value.len();
                    }
                    slots.push((*id, slot));
                }
                written_slots.push((partition, slots));
            }
            let bytes = &snapshot.head;
            let chunks: Vec<&[u8]> = if bytes.is_empty() { vec![&[][..]] } else { bytes.chunks(CHUNK).collect() };
            for (i, chunk) in chunks.iter().enumerate() {
                let key = self.key(partition, snapshot.slot, i);
                let record = BaseRecord::with_opaque_to(&self.topic, CoreProducer::chunk_opaque(i))
                    .partition(partition)
                    .key(key.as_bytes())
                    .payload(*chunk);
                self.producer.send(record)?;
                bytes_written += key.len() + chunk.len();
            }
            expected.push((partition, snapshot.slot, chunks.len(), snapshot.pages.is_some()));
        }
        // A failed delivery is the broker's trouble (the core retries from
        // its last checkpoint), not a broken checkpoint.
        self.producer.flush()?;
        let written = self.producer.take_chunks();
        let mut metadata = Vec::with_capacity(expected.len());
        for (snapshot, (partition, slot, chunks, paged)) in snapshots.iter().zip(expected) {
            let first =
                written.iter().filter(|(p, c, _)| *p == partition && *c == 0).map(|(_, _, o)| *o).max().ok_or_else(
                    || Error::Checkpoint(format!("no acknowledgement for state of partition {partition}")),
                )?;
            if let Some(local) = &mut self.local {
                local.head(partition, HeadMark { slot, first, paged }, &snapshot.head);
            }
            metadata.push((partition, Checkpoint { slot, first, chunks, paged }.to_string()));
        }
        if let Some(local) = &mut self.local {
            local.check_space();
        }
        // Every record is acknowledged: the pages' new versions are the
        // ones the metadata (once committed) points to.
        for (partition, slots) in written_slots {
            let book = self.books.entry(partition).or_default();
            book.tombstones.clear();
            book.slots.extend(slots);
        }
        Ok((metadata, bytes_written))
    }

    /// Reads the snapshot a commit's metadata points to, if it points to
    /// one, and for an incremental checkpoint its pages.
    pub fn load(&mut self, partition: i32, metadata: &str) -> Result<Option<Loaded>, Error> {
        self.books.remove(&partition);
        let Some(checkpoint) = parse(metadata)? else {
            if let Some(local) = &mut self.local {
                local.reset(partition);
            }
            return Ok(None);
        };
        let Checkpoint { slot, first, paged, .. } = checkpoint;
        let mark = HeadMark { slot, first, paged };
        if let Some(copy) = self.local.as_mut().and_then(|local| local.restore(partition, mark)) {
            if !paged {
                return Ok(Some(Loaded {
                    head: copy.head,
                    pages: None,
                    bytes_read: copy.bytes_read,
                    from_volume: true,
                }));
            }
            // What the topic holds past the head is a save that never
            // committed: tombstoned at the next save, as a read of the
            // whole partition would.
            let (tail, _) = self.scan_pages(partition, Offset::Offset(first))?;
            let tombstones = tail.choose(first)?.tombstones;
            self.books.insert(partition, PageBook { slots: copy.slots, tombstones });
            return Ok(Some(Loaded {
                head: copy.head,
                pages: Some(copy.pages),
                bytes_read: copy.bytes_read,
                from_volume: true,
            }));
        }
        let head = self.load_head(partition, checkpoint, metadata)?;
        if !paged {
            if let Some(local) = &mut self.local {
                local.rebase(partition, mark, &head, &[], &HashMap::new());
            }
            let bytes_read = head.len();
            return Ok(Some(Loaded { head, pages: None, bytes_read, from_volume: false }));
        }
        let (scan, scanned) = self.scan_pages(partition, Offset::Beginning)?;
        let chosen = scan.choose(first)?;
        if let Some(local) = &mut self.local {
            local.rebase(partition, mark, &head, &chosen.pages, &chosen.slots);
        }
        self.books.insert(partition, PageBook { slots: chosen.slots, tombstones: chosen.tombstones });
        Ok(Some(Loaded { bytes_read: head.len() + scanned, head, pages: Some(chosen.pages), from_volume: false }))
    }

    /// Clears the volume's copy of `partition` (it did not restore).
    pub fn forget_local(&mut self, partition: i32) {
        if let Some(local) = &mut self.local {
            local.reset(partition);
        }
    }

    /// Reads every page record of `partition` from `from` to its end.
    fn scan_pages(&self, partition: i32, from: Offset) -> Result<(Scan, usize), Error> {
        let mut config = self.reader_config.clone();
        // Large fetches: a restore reads the whole partition, and 1 MiB
        // per request (the default) leaves it waiting on round trips.
        config
            .set("enable.partition.eof", "true")
            .set("max.partition.fetch.bytes", "16777216")
            .set("fetch.max.bytes", "67108864")
            .set("queued.max.messages.kbytes", "131072");
        let consumer: BaseConsumer<QuietContext> =
            config.create_with_context(QuietContext).map_err(|e| Error::kafka("create state reader", e))?;
        let mut tpl = TopicPartitionList::new();
        tpl.add_partition_offset(&self.topic, partition, from).map_err(|e| Error::kafka("state reader", e))?;
        consumer.assign(&tpl).map_err(|e| Error::kafka("assign state reader", e))?;
        let prefix = state_pages::prefix(&self.source_topic, partition);
        let (mut scan, mut bytes) = (Scan::default(), 0);
        let mut deadline = Instant::now() + self.read_timeout;
        loop {
            if Instant::now() > deadline {
                return Err(Error::kafka(
                    format!("read the state pages of partition {partition} from {}", self.topic),
                    format_args!("no record within {:?}", self.read_timeout),
                ));
            }
            match consumer.poll(Duration::from_millis(200)) {
                None => {}
                Some(Err(KafkaError::PartitionEOF(_))) => return Ok((scan, bytes)),
                Some(Err(e)) => return Err(Error::kafka("read state pages", e)),
                Some(Ok(m)) => {
                    deadline = Instant::now() + self.read_timeout;
                    if let Some(key) = m.key().and_then(|k| PageKey::parse(k, &prefix)) {
                        bytes += m.payload().map_or(0, <[u8]>::len);
                        scan.add(key, m.offset(), m.payload());
                    }
                }
            }
        }
    }

    fn load_head(&self, partition: i32, checkpoint: Checkpoint, metadata: &str) -> Result<Vec<u8>, Error> {
        let Checkpoint { slot, first, chunks, .. } = checkpoint;
        let consumer: BaseConsumer<QuietContext> =
            self.reader_config.create_with_context(QuietContext).map_err(|e| Error::kafka("create state reader", e))?;
        let mut tpl = TopicPartitionList::new();
        tpl.add_partition_offset(&self.topic, partition, Offset::Offset(first))
            .map_err(|e| Error::kafka("state reader", e))?;
        consumer.assign(&tpl).map_err(|e| Error::kafka("assign state reader", e))?;
        let mut bytes = Vec::new();
        let mut next = 0usize;
        let deadline = Instant::now() + self.read_timeout;
        while next < chunks {
            // An unreachable or paused broker: transient, so the core retries
            // the restore with backoff. Only state that is there but does
            // not match the checkpoint (below) is fatal.
            if Instant::now() > deadline {
                return Err(Error::kafka(
                    format!("read state of partition {partition} from {} at offset {first}", self.topic),
                    format_args!("no answer within {:?}", self.read_timeout),
                ));
            }
            let Some(m) = consumer.poll(Duration::from_millis(200)) else { continue };
            let m = m.map_err(|e| Error::kafka("read state", e))?;
            let want_offset = first + i64::try_from(next).unwrap_or(i64::MAX);
            let want_key = self.key(partition, slot, next);
            if m.offset() != want_offset || m.key() != Some(want_key.as_bytes()) {
                return Err(Error::Checkpoint(format!(
                    "the checkpoint of {}/{partition} ({metadata}) expects state chunk {want_key:?} at offset \
                     {want_offset} of {}, found {:?} at offset {}: the state topic was changed or truncated \
                     outside Sluice, so the committed offsets no longer match any saved state",
                    self.source_topic,
                    self.topic,
                    m.key().map(String::from_utf8_lossy),
                    m.offset()
                )));
            }
            bytes.extend_from_slice(m.payload().unwrap_or_default());
            next += 1;
        }
        Ok(bytes)
    }
}

/// Where a committed checkpoint's state lives in the state topic.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Checkpoint {
    slot: u8,
    first: i64,
    chunks: usize,
    /// The snapshot is a head, with pages beside it.
    paged: bool,
}

impl std::fmt::Display for Checkpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let prefix = if self.paged { PAGED_PREFIX } else { PREFIX };
        write!(f, "{prefix}{}:{}+{}", self.slot, self.first, self.chunks)
    }
}

/// What follows a commit's state pointer (if any) when exactly once:
/// `;owner=<slots>.<slot>`, the engine slot (of a generation of `slots`)
/// whose transaction committed it. A later generation fences that slot's
/// transactional id before it reads the partition.
const OWNER: &str = ";owner=";

impl StateStore {
    /// `metadata` (a commit's state pointer, or "") marked as committed by
    /// engine slot `slot` of `slots`.
    pub fn with_owner(metadata: &str, slots: u32, slot: u32) -> String {
        format!("{}{OWNER}{slots}.{slot}", state_part(metadata))
    }
}

/// The engine slot (and its generation's slot count) that committed
/// `metadata`, if it says.
pub fn owner(metadata: &str) -> Option<(u32, u32)> {
    let (_, owner) = metadata.split_once(OWNER)?;
    let (slots, slot) = owner.split_once('.')?;
    Some((slots.parse().ok()?, slot.parse().ok()?))
}

/// A commit's metadata without its owner.
fn state_part(metadata: &str) -> &str {
    metadata.split_once(OWNER).map_or(metadata, |(state, _)| state)
}

/// Commit metadata → checkpoint; `None` when the commit carries no state
/// (a stateless query, or a group committed by something else).
fn parse(metadata: &str) -> Result<Option<Checkpoint>, Error> {
    let metadata = state_part(metadata);
    let (paged, rest) = match (metadata.strip_prefix(PREFIX), metadata.strip_prefix(PAGED_PREFIX)) {
        (Some(rest), _) => (false, Some(rest)),
        (None, rest) => (true, rest),
    };
    let Some(rest) = rest else {
        if metadata.starts_with(ANY_PREFIX) {
            return Err(Error::Checkpoint(format!(
                "checkpoint metadata {metadata:?} is in a format this worker does not read (expected {PREFIX}… or {PAGED_PREFIX}…)"
            )));
        }
        return Ok(None);
    };
    let parsed = rest.split_once(':').and_then(|(slot, at)| {
        let (first, chunks) = at.split_once('+')?;
        let slot = slot.parse::<u8>().ok().filter(|s| *s < 2)?;
        Some(Checkpoint { slot, first: first.parse().ok()?, chunks: chunks.parse().ok()?, paged })
    });
    parsed.map(Some).ok_or_else(|| Error::Checkpoint(format!("unreadable checkpoint metadata {metadata:?}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A restore from a broker that accepts connections but never answers
    /// (a paused broker, as under SIGSTOP) is retried by the core's
    /// supervisor (transient); it once failed with a fatal checkpoint error
    /// and stopped the job for good.
    #[test]
    fn a_restore_from_a_silent_broker_is_transient() {
        // The kernel completes connections into the backlog; nobody answers.
        let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let mut config = ClientConfig::new();
        config.set("bootstrap.servers", silent.local_addr().unwrap().to_string());
        let mut store =
            StateStore::with_clients(&config, None, "s", "src", Duration::from_millis(500), DrainDeadline::default())
                .unwrap();
        let e = store.load(0, "sluice:v2:0:10+2").unwrap_err();
        assert!(e.is_transient(), "{e}");
        assert!(e.to_string().contains("no answer within"), "{e}");
    }

    #[test]
    fn metadata_round_trips() {
        let c = Checkpoint { slot: 1, first: 42, chunks: 3, paged: false };
        assert_eq!(c.to_string(), "sluice:v2:1:42+3");
        assert_eq!(parse(&c.to_string()).ok().flatten(), Some(c));
        let paged = Checkpoint { paged: true, ..c };
        assert_eq!(paged.to_string(), "sluice:v3:1:42+3");
        assert_eq!(parse(&paged.to_string()).ok().flatten(), Some(paged));
        assert_eq!(StateStore::next_slot("sluice:v3:1:42+3"), 0);
    }

    #[test]
    fn saves_alternate_slots_so_the_committed_snapshot_is_never_overwritten() {
        assert_eq!(StateStore::next_slot(""), 0, "first save");
        assert_eq!(StateStore::next_slot("sluice:v2:0:10+1"), 1);
        assert_eq!(StateStore::next_slot("sluice:v2:1:20+1"), 0);
    }

    #[test]
    fn the_owner_rides_along_with_the_state_pointer() {
        let m = StateStore::with_owner("sluice:v2:1:42+3", 4, 2);
        assert_eq!(m, "sluice:v2:1:42+3;owner=4.2");
        assert_eq!(owner(&m), Some((4, 2)));
        assert_eq!(parse(&m).ok().flatten(), Some(Checkpoint { slot: 1, first: 42, chunks: 3, paged: false }));
        assert_eq!(StateStore::next_slot(&m), 0);
        assert_eq!(StateStore::with_owner(&m, 6, 5), "sluice:v2:1:42+3;owner=6.5", "a new owner replaces the old");
        assert_eq!(owner(&StateStore::with_owner("", 2, 1)), Some((2, 1)), "a stateless partition's commit");
        assert_eq!(parse(";owner=2.1").ok().flatten(), None);
        assert_eq!(owner("sluice:v2:1:42+3"), None, "at least once: no owner");
    }

    #[test]
    fn foreign_or_broken_metadata() {
        assert_eq!(parse("").ok().flatten(), None);
        assert_eq!(parse("written by another tool").ok().flatten(), None);
        assert!(parse("sluice:v1:10+1").is_err(), "an old format is an error, not silently no state");
        assert!(parse("sluice:v2:2:10+1").is_err(), "slot out of range");
        assert!(parse("sluice:v2:0:ten+1").is_err());
    }
}
