//! A join's state as checkpoints and the spill store hold it: per key,
//! the rows kept on each side, written straight from the stores'
//! columns and read back with strings borrowed from the bytes; and the
//! join's part of the paged-state contract (`crate::state`).

use serde::ser::{SerializeSeq, SerializeStruct};
use serde::{Deserialize, Serialize, Serializer};

use super::{JoinOperator, Store};
use crate::Error;
use crate::operator::{OperatorTag, read_state, write_head, write_state};
use crate::state::group_keys::{GroupTable, GroupTableState};
use crate::state::pages::{KeyedPage, KeyedPageIn, TableHead, page_keys, read_page_and_rest, write_page};
use crate::state::{FOLD_AT, PagedGroups, PagedState, SpilledHead, load_keyed_page, restore_keyed_page};
use sluice_plan::row_bytes::RowCells;
use sluice_plan::{ScalarRef, StateValue};

/// A kept row as a checkpoint holds it: its time, whether it matched,
/// and its side's cells as a list of scalars — read back with its
/// strings borrowed from the checkpoint's bytes. It is written straight
/// from the store's columns ([`KeptOut`]), in the same bytes, so pages
/// written by earlier releases (which made a `Vec<Scalar>` of each row,
/// an allocation per row and per string) read as these do.
#[derive(Debug, Clone, Deserialize)]
pub(super) struct Kept<'a> {
    pub(super) time: i64,
    pub(super) matched: bool,
    #[serde(borrow)]
    pub(super) row: Vec<StateValue<'a>>,
}

/// The kept rows of one key, left side and right side, as a checkpoint
/// holds them.
#[derive(Debug, Default, Deserialize)]
pub(super) struct KeyRows<'a> {
    #[serde(borrow)]
    pub(super) sides: [Vec<Kept<'a>>; 2],
}

#[derive(Serialize)]
pub(super) struct JoinState<'a> {
    pub(super) table: GroupTableState,
    pub(super) keys: KeysOut<'a>,
}

#[derive(Deserialize)]
pub(super) struct JoinStateIn<'a> {
    pub(super) table: GroupTableState,
    #[serde(borrow)]
    pub(super) keys: Vec<KeyRows<'a>>,
}

/// The keys of one page of an incremental checkpoint and their kept
/// rows, read back with keys and strings borrowed from the page's bytes
/// ([`KeysOut`] writes the rows).
type JoinPageIn<'a> = KeyedPageIn<'a, Vec<KeyRows<'a>>>;

/// The kept rows of keys `groups`, written as a list of [`KeyRows`].
pub(super) struct KeysOut<'a> {
    pub(super) op: &'a JoinOperator,
    pub(super) groups: std::ops::Range<usize>,
}

impl Serialize for KeysOut<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut seq = serializer.serialize_seq(Some(self.groups.len()))?;
        for g in self.groups.clone() {
            seq.serialize_element(&KeyRowsOut { stores: &self.op.stores, entry: self.op.keys.get(g) })?;
        }
        seq.end()
    }
}

/// A key's kept rows written as [`KeyRows`] is: a struct of one field,
/// the pair of its sides' lists.
struct KeyRowsOut<'a> {
    stores: &'a [Store; 2],
    entry: Option<&'a [Vec<u32>; 2]>,
}

impl Serialize for KeyRowsOut<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let side = |right: usize| SideOut {
            store: &self.stores[right],
            slots: self.entry.map_or(&[][..], |e| e[right].as_slice()),
        };
        let mut rows = serializer.serialize_struct("KeyRows", 1)?;
        rows.serialize_field("sides", &[side(0), side(1)])?;
        rows.end()
    }
}

/// One side's kept rows of a key, written as a list of [`Kept`].
struct SideOut<'a> {
    store: &'a Store,
    slots: &'a [u32],
}

impl Serialize for SideOut<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut seq = serializer.serialize_seq(Some(self.slots.len()))?;
        for &slot in self.slots {
            let s = slot as usize;
            seq.serialize_element(&KeptOut {
                time: self.store.time[s],
                matched: self.store.matched[s],
                row: RowCells { columns: &self.store.columns, row: s },
            })?;
        }
        seq.end()
    }
}

/// A kept row written as [`Kept`] is, from the store's columns.
#[derive(Serialize)]
#[serde(rename = "Kept")]
struct KeptOut<'a> {
    time: i64,
    matched: bool,
    row: RowCells<'a>,
}

impl PagedGroups for JoinOperator {
    fn groups(&self) -> &PagedState {
        &self.paged
    }

    fn groups_mut(&mut self) -> &mut PagedState {
        &mut self.paged
    }

    fn head_bytes(&self, out: Vec<u8>) -> Result<Vec<u8>, Error> {
        write_head(&self.paged, [OperatorTag::JoinSpilledHead, OperatorTag::JoinHead], out)
    }

    fn restore_from_head(&mut self, bytes: &[u8]) -> Result<(), Error> {
        let spilled =
            postcard::take_from_bytes::<u32>(bytes).is_ok_and(|(tag, _)| tag == OperatorTag::JoinSpilledHead as u32);
        if spilled {
            let head: SpilledHead<()> = read_state(OperatorTag::JoinSpilledHead, bytes)?;
            self.clear(GroupTable::default())?;
            return self.paged.spilling.restore_head(head);
        }
        let head: TableHead = read_state(OperatorTag::JoinHead, bytes)?;
        self.clear(head.table())
    }

    fn restore_from_page(&mut self, page: u32, bytes: &[u8]) -> Result<(), Error> {
        restore_keyed_page(self, page, bytes, |op, g, rows: KeyRows<'_>| {
            op.restore_key_rows(g, u32::try_from(g).unwrap_or(u32::MAX), rows)
        })
    }

    fn check_restored(&mut self) -> Result<(), Error> {
        self.paged.spilling.pages_restored(&self.paged.table)?;
        self.paged.dirty.clear();
        Ok(())
    }

    /// Spills, then compacts the stores (the rows of keys that went to
    /// disk leave their slots behind).
    fn spill_cold(&mut self) -> Result<(), Error> {
        self.with_spilling(|s, op| s.spill_cold(op))?;
        self.compact(false);
        self.compact(true);
        if self.expiry.len() > 2 * self.paged.table.live() + FOLD_AT {
            self.fold_expiry();
        }
        Ok(())
    }

    fn page_bytes(&self, groups: std::ops::Range<usize>, out: Vec<u8>) -> Result<Vec<u8>, Error> {
        let page =
            KeyedPage { keys: page_keys(&self.paged.table, groups.clone()), groups: KeysOut { op: self, groups } };
        write_page(&page, out)
    }

    fn load_page(&mut self, page: u32, bytes: &[u8], block: u32) -> Result<(), Error> {
        self.on_disk.forget(page);
        load_keyed_page(self, page, bytes, block, |op, g, id, rows: KeyRows<'_>| op.restore_key_rows(g, id, rows))
    }

    /// A key on disk is visited by the watermark when its first row may
    /// be let go: it is read back then, and its rows file the rest.
    fn restored_to_disk(&mut self, page: u32, bytes: &[u8]) -> Result<(), Error> {
        if self.plan.unbounded() {
            return Ok(());
        }
        let (p, _): (JoinPageIn<'_>, _) = read_page_and_rest(page, bytes)?;
        let this = &*self;
        let firsts: Vec<Option<i64>> = p
            .groups
            .iter()
            .map(|rows| {
                [false, true]
                    .into_iter()
                    .zip(&rows.sides)
                    .flat_map(|(right, kept)| kept.iter().map(move |k| this.kept_expires(right, k)))
                    .min()
            })
            .collect();
        // The page's time: the watermark reads it back when its first
        // row may go, and its keys schedule themselves then.
        if let Some(at) = firsts.into_iter().flatten().min() {
            self.on_disk.file(page, at);
        }
        Ok(())
    }

    fn drop_groups(&mut self, groups: std::ops::Range<usize>) {
        for g in groups {
            if let Some(sides) = self.keys.get_mut(g) {
                for (store, list) in self.stores.iter_mut().zip(sides) {
                    store.live -= list.len();
                    *list = Vec::new();
                }
            }
            if let Some(at) = self.scheduled.get_mut(g) {
                *at = None;
            }
        }
    }

    fn own_bytes(&self) -> usize {
        JoinOperator::own_bytes(self)
    }

    /// The rows kept, at the bytes a slot of their store takes: slots let
    /// go (or spilled) not counted, though their room stays until the
    /// store compacts — counting it, a store waiting for its compaction
    /// would spill at every batch.
    fn row_bytes(&self) -> usize {
        self.stores.iter().map(|s| s.bytes() / s.time.len().max(1) * s.live).sum()
    }
}

impl JoinOperator {
    /// When a kept row of a checkpoint may be let go, as [`JoinOperator::file`]
    /// schedules it.
    fn kept_expires(&self, right: bool, k: &Kept<'_>) -> i64 {
        let until = self.plan.until.and_then(|c| c.checked_sub(self.plan.left.0)).filter(|_| !right);
        match until.map(|c| k.row.get(c).map(StateValue::as_ref)) {
            Some(Some(ScalarRef::Timestamp(v) | ScalarRef::Bigint(v))) => v,
            Some(_) => i64::MIN,
            None => Self::expires(&self.plan, right, k.time),
        }
    }

    /// Keeps key `g`'s rows (`id` in checkpoints) from a checkpoint again.
    pub(super) fn restore_key_rows(&mut self, g: usize, id: u32, entry: KeyRows<'_>) -> Result<(), Error> {
        let gid = u32::try_from(g).unwrap_or(u32::MAX);
        if self.keys.len() <= g {
            self.keys.resize_with(g + 1, Default::default);
        }
        for (right, kept) in [false, true].into_iter().zip(entry.sides) {
            for k in kept {
                let store = &mut self.stores[usize::from(right)];
                let slot = store.push_values(k.row.iter().map(StateValue::as_ref), k.time)?;
                store.matched[slot as usize] = k.matched;
                self.file(gid, id, right, slot, k.time);
            }
        }
        Ok(())
    }

    /// Drops every kept row, for `table`'s keys to be restored.
    pub(super) fn clear(&mut self, table: GroupTable) -> Result<(), Error> {
        self.paged.table = table;
        self.stores.iter_mut().for_each(Store::clear);
        self.keys.clear();
        self.expiry.clear();
        self.scheduled.clear();
        self.on_disk.clear();
        self.paged.dirty.clear();
        self.paged.spilling.forget()
    }

    /// A whole checkpoint (one that never spilled).
    pub(super) fn write_whole(&self, out: Vec<u8>) -> Result<Vec<u8>, Error> {
        let keys = KeysOut { op: self, groups: 0..self.keys.len() };
        write_state(OperatorTag::Join, &JoinState { table: self.paged.table.to_state(), keys }, out)
    }

    /// Restores a whole checkpoint.
    pub(super) fn read_whole(&mut self, bytes: &[u8]) -> Result<(), Error> {
        let state: JoinStateIn<'_> = read_state(OperatorTag::Join, bytes)?;
        self.clear(GroupTable::from_state(state.table))?;
        for (g, entry) in state.keys.into_iter().enumerate() {
            self.restore_key_rows(g, u32::try_from(g).unwrap_or(u32::MAX), entry)?;
        }
        Ok(())
    }
}
