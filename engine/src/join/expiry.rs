//! When a join's kept rows may go: one entry per key in a heap by time
//! (`JoinOperator::expiry`), and for keys on disk their page's earliest
//! (`JoinOperator::on_disk`).

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use super::JoinOperator;
use crate::state::PageIs;
use crate::state::pages::PAGE_GROUPS;

impl JoinOperator {
    /// Moves the heap's entries for keys on disk to `on_disk` (their
    /// page's earliest time, 8 bytes a page), drops entries no key needs
    /// (one per key in memory is kept: the one `scheduled` names), and
    /// gives the heap's room back. A key keeps its entry when it goes to
    /// disk (the heap cannot take one out), so without this the heap held
    /// an entry per key on disk — at q9's 100 M events, 5.5 M entries and
    /// 128 MiB, more than the join's rows in memory.
    pub(super) fn fold_expiry(&mut self) {
        let Some(pages) = &self.paged.spilling.pages else { return };
        let mut entries = std::mem::take(&mut self.expiry).into_vec();
        let on_disk = &mut self.on_disk;
        entries.retain(|&Reverse((at, id))| match pages.where_is(id / PAGE_GROUPS) {
            PageIs::Spilled => {
                on_disk.file(id / PAGE_GROUPS, at);
                false
            }
            PageIs::InBlock(_) => {
                pages.slot(id).and_then(|g| self.scheduled.get(g as usize)).is_some_and(|due| *due == Some(at))
            }
            PageIs::Unused | PageIs::Missing => false,
        });
        // Per key, its earliest entry.
        entries.sort_unstable_by_key(|Reverse((at, id))| (*id, *at));
        entries.dedup_by_key(|Reverse((_, id))| *id);
        entries.shrink_to_fit();
        self.expiry = BinaryHeap::from(entries);
    }

    /// Makes sure key `g` (`id` in checkpoints) has an entry in the heap
    /// at or before `at`.
    pub(super) fn schedule(&mut self, g: usize, id: u32, at: i64) {
        if self.scheduled.len() <= g {
            self.scheduled.resize(g + 1, None);
        }
        if self.scheduled[g].is_none_or(|due| at < due) {
            self.scheduled[g] = Some(at);
            self.expiry.push(Reverse((at, id)));
        }
    }

    /// When key `g`'s next kept row may be let go: its first row's time
    /// on a side kept in time order, its earliest `until` on a left side
    /// let go by that column.
    pub(super) fn next_expiry(&self, g: usize) -> Option<i64> {
        let sides = self.keys.get(g)?;
        [false, true]
            .into_iter()
            .filter_map(|right| {
                let list = &sides[usize::from(right)];
                if !right && self.plan.until.is_some() {
                    list.iter().filter_map(|&slot| self.until(false, slot)).min()
                } else {
                    let store = &self.stores[usize::from(right)];
                    list.first().map(|&slot| Self::expires(&self.plan, right, store.time[slot as usize]))
                }
            })
            .min()
    }
}
