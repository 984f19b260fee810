//! A stream–table join's state as checkpoints and the spill store hold
//! it: per key its versions and how many stream rows wait under it, the
//! head with the rows waiting for the watermark, the whole checkpoint
//! earlier releases wrote; and the join's part of the paged-state
//! contract (`crate::state`).

use std::cmp::Reverse;

use serde::ser::{SerializeSeq, SerializeStruct};
use serde::{Deserialize, Serialize, Serializer};

use super::{TableJoinOperator, Version, Waiting};
use crate::Error;
use crate::join::Store;
use crate::operator::{OperatorTag, read_state, write_state};
use crate::state::group_keys::{GroupTable, GroupTableState};
use crate::state::pages::{KeyedPage, KeyedPageIn, PAGE_GROUPS, TableHead, page_keys, read_page_and_rest, write_page};
use crate::state::{PagedGroups, PagedState, SpilledHead, load_keyed_page, restore_keyed_page};
use sluice_plan::row_bytes::RowCells;
use sluice_plan::{Scalar, StateValue};

/// A key's versions, as a whole checkpoint holds them.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
struct KeyVersions {
    versions: Vec<(i64, Option<Vec<Scalar>>)>,
}

/// A whole checkpoint (before checkpoints were incremental; still read,
/// and written by an operator that never spilled when asked for one).
#[derive(Serialize, Deserialize)]
struct TableJoinState {
    keys: GroupTableState,
    versions: Vec<KeyVersions>,
    /// `(time, key id, stream cells)`, in arrival order.
    waiting: Vec<(i64, u32, Vec<Scalar>)>,
}

/// The head of an incremental checkpoint that never spilled: the key
/// table's ids and the stream rows waiting (written by [`WaitingOut`]).
#[derive(Serialize)]
struct HeadOut<'a> {
    table: TableHead,
    waiting: WaitingOut<'a>,
}

#[derive(Deserialize)]
struct HeadIn<'a> {
    table: TableHead,
    #[serde(borrow)]
    waiting: Vec<WaitingIn<'a>>,
}

/// A waiting stream row as a head holds it: its time, its key's id and
/// its cells (strings borrowed from the head's bytes when read back).
#[derive(Deserialize)]
struct WaitingIn<'a> {
    time: i64,
    id: u32,
    #[serde(borrow)]
    row: Vec<StateValue<'a>>,
}

/// The waiting stream rows, in arrival order, written as [`WaitingIn`]s
/// straight from the stream store.
#[derive(Clone, Copy)]
struct WaitingOut<'a> {
    op: &'a TableJoinOperator,
}

impl Serialize for WaitingOut<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut waiting: Vec<Waiting> = self.op.waiting.iter().map(|Reverse(w)| *w).collect();
        waiting.sort_unstable_by_key(|w| w.seq);
        let mut seq = serializer.serialize_seq(Some(waiting.len()))?;
        for w in &waiting {
            let row = RowCells { columns: &self.op.stream.columns, row: w.slot as usize };
            seq.serialize_element(&(w.time, w.id, row))?;
        }
        seq.end()
    }
}

/// A page (of a checkpoint, or of the spill store) read back: per key,
/// its versions and its waiting rows' count ([`EntriesOut`] writes them),
/// strings borrowed from its bytes.
type PageIn<'a> = KeyedPageIn<'a, Vec<EntryIn<'a>>>;

#[derive(Deserialize)]
struct EntryIn<'a> {
    waiting: u32,
    #[serde(borrow)]
    versions: Vec<(i64, Option<Vec<StateValue<'a>>>)>,
}

/// The entries of keys `groups`, written as [`EntryIn`]s from the stores.
struct EntriesOut<'a> {
    op: &'a TableJoinOperator,
    groups: std::ops::Range<usize>,
}

impl Serialize for EntriesOut<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut seq = serializer.serialize_seq(Some(self.groups.len()))?;
        for g in self.groups.clone() {
            seq.serialize_element(&EntryOut { op: self.op, g })?;
        }
        seq.end()
    }
}

struct EntryOut<'a> {
    op: &'a TableJoinOperator,
    g: usize,
}

impl Serialize for EntryOut<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let waiting = self.op.waiting_per_key.get(self.g).copied().unwrap_or(0);
        let mut entry = serializer.serialize_struct("EntryIn", 2)?;
        entry.serialize_field("waiting", &waiting)?;
        entry.serialize_field("versions", &VersionsOut { op: self.op, g: self.g })?;
        entry.end()
    }
}

struct VersionsOut<'a> {
    op: &'a TableJoinOperator,
    g: usize,
}

impl Serialize for VersionsOut<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let versions = self.op.versions.get(self.g).map_or(&[][..], Vec::as_slice);
        let mut seq = serializer.serialize_seq(Some(versions.len()))?;
        for v in versions {
            let row = v.slot.map(|s| RowCells { columns: &self.op.rows.columns, row: s as usize });
            seq.serialize_element(&(v.time, row))?;
        }
        seq.end()
    }
}

impl PagedGroups for TableJoinOperator {
    fn groups(&self) -> &PagedState {
        &self.paged
    }

    fn groups_mut(&mut self) -> &mut PagedState {
        &mut self.paged
    }

    fn head_bytes(&self, out: Vec<u8>) -> Result<Vec<u8>, Error> {
        let waiting = WaitingOut { op: self };
        if let Some(head) = self.paged.spilling.head(&self.paged.table, waiting) {
            return write_state(OperatorTag::TableJoinSpilledHead, &head, out);
        }
        write_state(OperatorTag::TableJoinHead, &HeadOut { table: TableHead::of(&self.paged.table), waiting }, out)
    }

    fn restore_from_head(&mut self, bytes: &[u8]) -> Result<(), Error> {
        self.clear()?;
        let spilled = postcard::take_from_bytes::<u32>(bytes)
            .is_ok_and(|(tag, _)| tag == OperatorTag::TableJoinSpilledHead as u32);
        let waiting = if spilled {
            let head: SpilledHead<Vec<WaitingIn<'_>>> = read_state(OperatorTag::TableJoinSpilledHead, bytes)?;
            self.paged.spilling.restore_head(head)?
        } else {
            let head: HeadIn<'_> = read_state(OperatorTag::TableJoinHead, bytes)?;
            self.paged.table = head.table.table();
            head.waiting
        };
        for w in waiting {
            let slot = self.stream.push_values(w.row.iter().map(StateValue::as_ref), w.time)?;
            self.seq += 1;
            self.waiting.push(Reverse(Waiting { time: w.time, seq: self.seq, slot, id: w.id }));
        }
        self.restoring = true;
        Ok(())
    }

    fn restore_from_page(&mut self, page: u32, bytes: &[u8]) -> Result<(), Error> {
        restore_keyed_page(self, page, bytes, |op, g, entry: EntryIn<'_>| {
            op.restore_entry(g, u32::try_from(g).unwrap_or(u32::MAX), entry)
        })
    }

    fn check_restored(&mut self) -> Result<(), Error> {
        self.restoring = false;
        self.paged.spilling.pages_restored(&self.paged.table)?;
        self.paged.dirty.clear();
        Ok(())
    }

    /// Spills, then compacts the table store (the versions of keys that
    /// went to disk leave their slots behind).
    fn spill_cold(&mut self) -> Result<(), Error> {
        self.with_spilling(|s, op| s.spill_cold(op))?;
        self.compact();
        Ok(())
    }

    fn page_bytes(&self, groups: std::ops::Range<usize>, out: Vec<u8>) -> Result<Vec<u8>, Error> {
        let page =
            KeyedPage { keys: page_keys(&self.paged.table, groups.clone()), groups: EntriesOut { op: self, groups } };
        write_page(&page, out)
    }

    fn load_page(&mut self, page: u32, bytes: &[u8], block: u32) -> Result<(), Error> {
        load_keyed_page(self, page, bytes, block, |op, g, id, entry: EntryIn<'_>| op.restore_entry(g, id, entry))
    }

    /// A key on disk whose versions the watermark will let go is visited
    /// then (read back).
    fn restored_to_disk(&mut self, page: u32, bytes: &[u8]) -> Result<(), Error> {
        if !self.as_of() {
            return Ok(());
        }
        let (p, _): (PageIn<'_>, _) = read_page_and_rest(page, bytes)?;
        for (i, entry) in p.groups.iter().enumerate() {
            let versions = &entry.versions;
            let to_go = versions.len() > 1 || versions.first().is_some_and(|(_, row)| row.is_none());
            if let (true, Some((last, _))) = (to_go, versions.last()) {
                let id = (page * PAGE_GROUPS).saturating_add(u32::try_from(i).unwrap_or(u32::MAX));
                self.superseded.push(Reverse((*last, id)));
            }
        }
        Ok(())
    }

    fn drop_groups(&mut self, groups: std::ops::Range<usize>) {
        for g in groups {
            if let Some(versions) = self.versions.get_mut(g) {
                self.held -= versions.len();
                self.rows.live -= versions.iter().filter(|v| v.slot.is_some()).count();
                *versions = Vec::new();
            }
            if let Some(count) = self.waiting_per_key.get_mut(g) {
                *count = 0;
            }
        }
    }

    fn own_bytes(&self) -> usize {
        TableJoinOperator::own_bytes(self)
    }

    /// The table rows held, at the bytes a slot of their store takes (let
    /// go or spilled slots not counted: see the stream–stream join's).
    fn row_bytes(&self) -> usize {
        let rows = &self.rows;
        rows.bytes() / rows.time.len().max(1) * rows.live
    }
}

impl TableJoinOperator {
    /// Files key `g`'s entry (`id` in checkpoints) from a checkpoint or
    /// a page read back.
    fn restore_entry(&mut self, g: usize, id: u32, entry: EntryIn<'_>) -> Result<(), Error> {
        let gid = u32::try_from(g).unwrap_or(u32::MAX);
        self.grow(gid);
        for (time, row) in entry.versions {
            let slot =
                row.map(|cells| self.rows.push_values(cells.iter().map(StateValue::as_ref), time)).transpose()?;
            self.versions[g].push(Version { time, slot });
            self.held += 1;
        }
        self.waiting_per_key[g] = entry.waiting;
        self.schedule_restored(g, id);
        Ok(())
    }

    /// A key restored with versions the watermark will let go schedules
    /// them (once: a page read back at run time is already scheduled).
    fn schedule_restored(&mut self, g: usize, id: u32) {
        let versions = &self.versions[g];
        if self.restoring && self.as_of() && Self::has_versions_to_go(versions) {
            let last = versions.last().map_or(i64::MIN, |v| v.time);
            self.superseded.push(Reverse((last, id)));
        }
    }

    /// Drops every key and row, for a checkpoint to be restored.
    pub(super) fn clear(&mut self) -> Result<(), Error> {
        self.paged.table = GroupTable::default();
        self.rows.clear();
        self.stream.clear();
        self.versions.clear();
        self.held = 0;
        self.waiting.clear();
        self.waiting_per_key.clear();
        self.superseded.clear();
        self.deleted.clear();
        self.paged.dirty.clear();
        self.paged.spilling.forget()
    }

    /// A whole checkpoint (one that never spilled).
    pub(super) fn write_whole(&self, out: Vec<u8>) -> Result<Vec<u8>, Error> {
        let cells = |store: &Store, slot: u32| store.columns.iter().map(|c| c.scalar(slot as usize)).collect();
        let versions = self
            .versions
            .iter()
            .map(|vs| KeyVersions {
                versions: vs.iter().map(|v| (v.time, v.slot.map(|s| cells(&self.rows, s)))).collect(),
            })
            .collect();
        let mut waiting: Vec<Waiting> = self.waiting.iter().map(|Reverse(w)| *w).collect();
        waiting.sort_unstable_by_key(|w| w.seq);
        let waiting = waiting.iter().map(|w| (w.time, w.id, cells(&self.stream, w.slot))).collect();
        write_state(
            OperatorTag::TableJoin,
            &TableJoinState { keys: self.paged.table.to_state(), versions, waiting },
            out,
        )
    }

    /// Restores a whole checkpoint.
    pub(super) fn read_whole(&mut self, bytes: &[u8]) -> Result<(), Error> {
        let state: TableJoinState = read_state(OperatorTag::TableJoin, bytes)?;
        self.clear()?;
        self.paged.table = GroupTable::from_state(state.keys);
        let n = state.versions.len().max(self.paged.table.capacity());
        self.versions.resize_with(n, Vec::new);
        self.waiting_per_key.resize(n, 0);
        self.restoring = true;
        for (g, key) in state.versions.into_iter().enumerate() {
            for (time, row) in key.versions {
                let slot =
                    row.map(|cells| self.rows.push_values(cells.iter().map(Scalar::borrowed), time)).transpose()?;
                self.versions[g].push(Version { time, slot });
                self.held += 1;
            }
            self.schedule_restored(g, u32::try_from(g).unwrap_or(u32::MAX));
        }
        self.restoring = false;
        for (time, id, cells) in state.waiting {
            let slot = self.stream.push_values(cells.iter().map(Scalar::borrowed), time)?;
            if let Some(count) = self.waiting_per_key.get_mut(id as usize) {
                *count += 1;
            }
            self.seq += 1;
            self.waiting.push(Reverse(Waiting { time, seq: self.seq, slot, id }));
        }
        Ok(())
    }
}
