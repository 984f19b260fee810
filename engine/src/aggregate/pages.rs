//! An aggregate's state as checkpoints and the spill store hold it:
//! whole (as every release before incremental checkpoints wrote it, and
//! the merge of a two-phase aggregate still does), as a head and pages,
//! and the aggregate's part of the paged-state contract (`crate::state`).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::AggregateOperator;
use crate::Error;
use crate::accumulators::Accumulator;
use crate::operator::{OperatorTag, read_state_and_rest, write_state};
use crate::state::group_keys::{BLOCK, GroupTable, GroupTableState};
use crate::state::pages::{
    PageKeys, TableHead, page_groups, page_keys, read_page_and_rest, restore_page_keys, write_page,
};
use crate::state::{PagedGroups, PagedState, SpilledHead, place_keys};

/// An incremental checkpoint's head: the table's ids and the open windows
/// by end. The keys and accumulators are in the pages.
#[derive(Debug, Serialize)]
struct AggregateHeadRef<'a> {
    table: TableHead,
    open_by_end: &'a BTreeMap<i64, Vec<u32>>,
}

#[derive(Debug, Deserialize)]
struct AggregateHead {
    table: TableHead,
    open_by_end: BTreeMap<i64, Vec<u32>>,
}

/// The groups of one page: each one's key (`None` when free), window and
/// accumulators...
#[derive(Debug, Serialize)]
struct AggregatePage<'a> {
    keys: PageKeys<'a>,
    bounds: Vec<(i64, i64)>,
    accs: Vec<Accumulator>,
}

/// ...read back with the keys borrowed from the page's bytes.
#[derive(Debug, Deserialize)]
struct AggregatePageIn<'a> {
    #[serde(borrow)]
    keys: Vec<Option<&'a [u8]>>,
    bounds: Vec<(i64, i64)>,
    accs: Vec<Accumulator>,
}

/// Checkpoint of an [`AggregateOperator`], written by reference...
#[derive(Debug, Serialize)]
pub struct AggregateStateRef<'a> {
    table: GroupTableState,
    pub(crate) accs: &'a [Accumulator],
    bounds: &'a [(i64, i64)],
    open_by_end: &'a BTreeMap<i64, Vec<u32>>,
}

/// ...and read back owned (the two encode identically).
#[derive(Debug, Deserialize)]
pub struct AggregateState {
    table: GroupTableState,
    pub(crate) accs: Vec<Accumulator>,
    bounds: Vec<(i64, i64)>,
    open_by_end: BTreeMap<i64, Vec<u32>>,
}

impl AggregateOperator {
    /// A whole checkpoint under `tag`: the state `wrap` makes of this
    /// aggregate's, then HAVING's bits.
    pub(crate) fn snapshot_as<'a, S: Serialize>(
        &'a self,
        tag: OperatorTag,
        wrap: impl FnOnce(AggregateStateRef<'a>) -> S,
        out: Vec<u8>,
    ) -> Result<Vec<u8>, Error> {
        if self.paged.spilling.spilled_any() {
            // Only a paged operator spills, and its checkpoints are heads
            // and pages.
            return Err(Error::Internal("a whole checkpoint of an aggregate that spilled".into()));
        }
        self.write_shown(write_state(tag, &wrap(self.to_state()), out)?)
    }

    pub(crate) fn to_state(&self) -> AggregateStateRef<'_> {
        AggregateStateRef {
            table: self.paged.table.to_state(),
            accs: &self.accs,
            bounds: &self.bounds,
            open_by_end: &self.open_by_end,
        }
    }

    /// Appends HAVING's bits after a whole checkpoint of this operator's
    /// state (see [`Shown`]).
    pub(crate) fn write_shown(&self, out: Vec<u8>) -> Result<Vec<u8>, Error> {
        self.shown.write(0..self.paged.table.capacity(), out)
    }

    /// Reads what [`AggregateOperator::write_shown`] appended, after
    /// [`AggregateOperator::restore_state`].
    pub(crate) fn read_shown(&mut self, rest: &[u8]) -> Result<(), Error> {
        let table = &self.paged.table;
        let live = (0..table.capacity()).filter(|&g| table.is_live(u32::try_from(g).unwrap_or(u32::MAX)));
        self.shown.read(0, rest, live)
    }

    pub(crate) fn restore_state(&mut self, state: AggregateState) -> Result<(), Error> {
        self.paged.dirty.clear();
        self.shown.clear();
        self.paged.spilling.forget()?;
        self.paged.table = GroupTable::from_state(state.table);
        self.accs = state.accs;
        self.bounds = state.bounds;
        self.open_by_end = state.open_by_end;
        Ok(())
    }

    /// Reads page `page` of this aggregate, and the bytes after it.
    fn read_page<'b>(&self, page: u32, bytes: &'b [u8]) -> Result<(AggregatePageIn<'b>, &'b [u8]), Error> {
        let (p, rest): (AggregatePageIn<'_>, _) = read_page_and_rest(page, bytes)?;
        if p.accs.len() != self.accs.len() {
            return Err(Error::Checkpoint(format!(
                "state page {page} holds {} aggregates, this query has {}",
                p.accs.len(),
                self.accs.len()
            )));
        }
        Ok((p, rest))
    }
}

impl PagedGroups for AggregateOperator {
    fn groups(&self) -> &PagedState {
        &self.paged
    }

    fn groups_mut(&mut self) -> &mut PagedState {
        &mut self.paged
    }

    fn head_bytes(&self, out: Vec<u8>) -> Result<Vec<u8>, Error> {
        if let Some(head) = self.paged.spilling.head(&self.paged.table, &self.open_by_end) {
            return write_state(OperatorTag::AggregateSpilledHead, &head, out);
        }
        let head = AggregateHeadRef { table: TableHead::of(&self.paged.table), open_by_end: &self.open_by_end };
        write_state(OperatorTag::AggregateHead, &head, out)
    }

    fn restore_from_head(&mut self, bytes: &[u8]) -> Result<(), Error> {
        self.paged.dirty.clear();
        self.shown.clear();
        self.paged.spilling.forget()?;
        self.accs = self.plan.aggregates.iter().map(Accumulator::new).collect();
        let spilled = postcard::take_from_bytes::<u32>(bytes)
            .is_ok_and(|(tag, _)| tag == OperatorTag::AggregateSpilledHead as u32);
        if spilled {
            let (head, _): (SpilledHead<_>, _) = read_state_and_rest(OperatorTag::AggregateSpilledHead, bytes)?;
            self.paged.table = GroupTable::default();
            self.bounds = Vec::new();
            self.open_by_end = self.paged.spilling.restore_head(head)?;
            return Ok(());
        }
        let (head, _): (AggregateHead, _) = read_state_and_rest(OperatorTag::AggregateHead, bytes)?;
        let groups = head.table.groups as usize;
        self.paged.table = head.table.table();
        for acc in &mut self.accs {
            acc.ensure(groups);
        }
        self.bounds = if self.plan.window.is_some() { vec![(0, 0); groups] } else { Vec::new() };
        self.open_by_end = head.open_by_end;
        Ok(())
    }

    fn restore_from_page(&mut self, page: u32, bytes: &[u8]) -> Result<(), Error> {
        if self.with_spilling(|s, op| s.restore_page(op, page, bytes))? {
            return Ok(());
        }
        let (p, rest) = self.read_page(page, bytes)?;
        restore_page_keys(&mut self.paged.table, page, &p.keys)?;
        let start = page_groups(page, usize::MAX).start;
        for (i, b) in p.bounds.into_iter().enumerate() {
            if let Some(slot) = self.bounds.get_mut(start + i) {
                *slot = b;
            }
        }
        let live = p.keys.iter().enumerate().filter(|(_, k)| k.is_some()).map(|(i, _)| start + i);
        self.shown.read(start, rest, live)?;
        for (acc, from) in self.accs.iter_mut().zip(p.accs) {
            acc.set_page(start, from)?;
        }
        Ok(())
    }

    fn check_restored(&mut self) -> Result<(), Error> {
        self.paged.spilling.pages_restored(&self.paged.table)?;
        for acc in &mut self.accs {
            acc.ensure(self.paged.table.capacity());
        }
        Ok(())
    }

    fn spill_cold(&mut self) -> Result<(), Error> {
        let groups = self.paged.table.capacity();
        for acc in &mut self.accs {
            acc.ensure(groups);
        }
        self.with_spilling(|s, op| s.spill_cold(op))
    }

    fn page_bytes(&self, groups: std::ops::Range<usize>, out: Vec<u8>) -> Result<Vec<u8>, Error> {
        let windowed = self.plan.window.is_some();
        let page = AggregatePage {
            keys: page_keys(&self.paged.table, groups.clone()),
            bounds: if windowed {
                groups.clone().map(|g| self.bounds.get(g).copied().unwrap_or((0, 0))).collect()
            } else {
                Vec::new()
            },
            accs: self.accs.iter().map(|a| a.page(groups.clone())).collect::<Result<_, _>>()?,
        };
        self.shown.write(groups, write_page(&page, out)?)
    }

    fn load_page(&mut self, page: u32, bytes: &[u8], block: u32) -> Result<(), Error> {
        let (p, rest) = self.read_page(page, bytes)?;
        place_keys(&mut self.paged.table, block, &p.keys)?;
        let start = block as usize * BLOCK;
        if self.plan.window.is_some() {
            if self.bounds.len() < start + BLOCK {
                self.bounds.resize(start + BLOCK, (0, 0));
            }
            for (i, b) in p.bounds.iter().enumerate().take(BLOCK) {
                self.bounds[start + i] = *b;
            }
        }
        let live = p.keys.iter().enumerate().filter(|(_, k)| k.is_some()).map(|(i, _)| start + i);
        self.shown.read(start, rest, live)?;
        let groups = self.paged.table.capacity();
        for (acc, from) in self.accs.iter_mut().zip(p.accs) {
            acc.ensure(groups);
            acc.set_page(start, from)?;
        }
        Ok(())
    }

    fn drop_groups(&mut self, groups: std::ops::Range<usize>) {
        for g in groups {
            for acc in &mut self.accs {
                acc.reset(g);
            }
            self.shown.reset(g);
        }
    }

    fn own_bytes(&self) -> usize {
        AggregateOperator::own_bytes(self)
    }

    fn page_keys<'b>(&self, page: u32, bytes: &'b [u8]) -> Result<Vec<Option<&'b [u8]>>, Error> {
        self.read_page(page, bytes).map(|(p, _)| p.keys)
    }
}
