//! Which groups of an updating aggregate are on show: whether each group's
//! last emitted row passed HAVING.
//!
//! An aggregate that emits changes (`EMIT CHANGES`, a GROUP BY without a
//! window, an aggregate over a table) writes each group's latest row to an
//! upsert sink, which keeps the last row per key. A group that passed
//! HAVING and then fails it (`HAVING SUM(x) > 10` after a negative `x`, a
//! deleted order under a CDC total) must be taken out there, or the
//! compacted topic keeps a row the query no longer returns. Flink gets this
//! from its retractions: the old row's `-U` passes the filter that passed
//! it. Sluice's aggregates emit no old rows, so each group keeps one bit —
//! whether its last row was shown — and a group that was shown and now
//! fails is emitted as a deletion. One that was never shown emits nothing:
//! `HAVING COUNT(*) > 100` writes no tombstone for each of the many groups
//! still under 100.
//!
//! The bits are checkpointed after the operator's state (and after each
//! page of a paged one), so a checkpoint written before them still reads:
//! its groups count as shown, and a group that fails HAVING after such a
//! restore may get one tombstone for a row that was never there, which an
//! upsert sink takes as a no-op.

use crate::Error;

#[derive(Debug, Default)]
pub struct Shown {
    /// The plan has HAVING and emits updates: anything else keeps nothing.
    on: bool,
    /// By group id.
    bits: Vec<bool>,
    /// The group of each row the operator emitted since HAVING last
    /// judged them, in row order.
    emitted: Vec<u32>,
    /// Groups gone since then (a window the watermark closed in the same
    /// batch that emitted its last change): HAVING judges their rows with
    /// the bits they had, then the bits go.
    gone: Vec<u32>,
}

impl Shown {
    pub fn track(&mut self) {
        self.on = true;
    }

    /// Whether bits are kept.
    pub fn tracking(&self) -> bool {
        self.on
    }

    /// Group `g` was emitted as the next row.
    #[inline]
    pub fn emitted(&mut self, g: u32) {
        if self.on {
            self.emitted.push(g);
        }
    }

    /// HAVING judged the rows emitted since the last call: `passed` (rows,
    /// increasing) passed it, `deleted` (increasing) delete their group
    /// whatever it held. Appends to `retracted`, in increasing order, the
    /// rows whose group was shown and now fails: they go out as deletions.
    pub fn settle(
        &mut self,
        rows: usize,
        passed: &[u32],
        deleted: &[u32],
        retracted: &mut Vec<u32>,
    ) -> Result<(), Error> {
        if !self.on {
            return Ok(());
        }
        let bits = &mut self.bits;
        judge(&mut self.emitted, rows, passed, deleted, retracted, |&g, now| {
            let g = g as usize;
            if bits.len() <= g {
                bits.resize(g + 1, false);
            }
            std::mem::replace(&mut bits[g], now.unwrap_or(false))
        })?;
        for g in self.gone.drain(..) {
            if let Some(bit) = self.bits.get_mut(g as usize) {
                *bit = false;
            }
        }
        Ok(())
    }

    /// Group `g` is gone (its window closed, its last row was deleted): its
    /// id may be handed out again, to a group never shown. The bit goes
    /// once HAVING has judged the rows emitted before (see [`Shown::settle`]).
    pub fn forget(&mut self, g: u32) {
        if self.on {
            self.gone.push(g);
        }
    }

    /// Appends the bits of `groups` to a checkpoint (nothing when off).
    pub fn write(&self, groups: std::ops::Range<usize>, out: Vec<u8>) -> Result<Vec<u8>, Error> {
        if !self.on {
            return Ok(out);
        }
        let bits: Vec<bool> = groups.map(|g| self.bits.get(g).copied().unwrap_or(false)).collect();
        postcard::to_extend(&bits, out).map_err(|e| Error::Checkpoint(format!("cannot serialise HAVING's bits: {e}")))
    }

    /// Reads the bits [`Shown::write`] put after a checkpoint of the groups
    /// from `start` on. `rest` is empty for one written before the bits
    /// were: then every group in `live` counts as shown.
    pub fn read(&mut self, start: usize, rest: &[u8], live: impl Iterator<Item = usize>) -> Result<(), Error> {
        if !self.on {
            return Ok(());
        }
        if rest.is_empty() {
            for g in live {
                self.set(g, true);
            }
            return Ok(());
        }
        let bits: Vec<bool> =
            postcard::from_bytes(rest).map_err(|e| Error::Checkpoint(format!("cannot read HAVING's bits: {e}")))?;
        for (i, bit) in bits.into_iter().enumerate() {
            self.set(start + i, bit);
        }
        Ok(())
    }

    /// Group `g` left memory (spilled with its page): its slot starts
    /// unshown. Called between batches, when HAVING has judged every row.
    pub fn reset(&mut self, g: usize) {
        if let Some(bit) = self.bits.get_mut(g) {
            *bit = false;
        }
    }

    /// Forgets every bit (a restore starts here).
    pub fn clear(&mut self) {
        self.bits.clear();
        self.emitted.clear();
        self.gone.clear();
    }

    fn set(&mut self, g: usize, bit: bool) {
        if self.bits.len() <= g {
            self.bits.resize(g + 1, false);
        }
        self.bits[g] = bit;
    }

    pub fn heap_bytes(&self) -> usize {
        self.bits.capacity() + (self.emitted.capacity() + self.gone.capacity()) * 4
    }
}

/// HAVING's verdict on the `rows` rows of `emitted` (one group per row, in
/// row order), which it then empties: `passed` and `deleted` are rows,
/// increasing. `flip(group, now)` sets the group's bit — `None` for a
/// deletion, which leaves it unshown — and returns the bit before. The
/// rows whose group was shown and now fails go to `retracted`,
/// increasing. What [`Shown`] does with its bits by group id, and the
/// merge of a two-phase aggregate with its set of group keys.
pub fn judge<K>(
    emitted: &mut Vec<K>,
    rows: usize,
    passed: &[u32],
    deleted: &[u32],
    retracted: &mut Vec<u32>,
    mut flip: impl FnMut(&K, Option<bool>) -> bool,
) -> Result<(), Error> {
    if emitted.len() != rows {
        let n = emitted.len();
        emitted.clear();
        return Err(Error::Internal(format!("HAVING judged {rows} rows of an operator that emitted {n}")));
    }
    let (mut p, mut d) = (passed.iter().peekable(), deleted.iter().peekable());
    for (row, g) in emitted.iter().enumerate() {
        let row = u32::try_from(row).unwrap_or(u32::MAX);
        if d.next_if_eq(&&row).is_some() {
            flip(g, None);
            continue;
        }
        let now = p.next_if_eq(&&row).is_some();
        if flip(g, Some(now)) && !now {
            retracted.push(row);
        }
    }
    emitted.clear();
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::Shown;

    fn tracking() -> Shown {
        let mut s = Shown::default();
        s.track();
        s
    }

    /// Shown, then failing: one deletion; failing again: nothing more;
    /// never shown and failing: nothing.
    #[test]
    fn a_group_that_was_shown_and_fails_is_retracted_once() {
        let mut s = tracking();
        let mut retracted = Vec::new();
        for g in [0, 1] {
            s.emitted(g);
        }
        s.settle(2, &[0], &[], &mut retracted).unwrap();
        assert!(retracted.is_empty(), "group 1 was never shown");
        for g in [0, 1, 0] {
            s.emitted(g);
        }
        // Per record: group 0 fails (row 0), group 1 fails (row 1), group 0 fails again (row 2).
        s.settle(3, &[], &[], &mut retracted).unwrap();
        assert_eq!(retracted, [0], "only group 0 was shown, and only its first failure takes it out");
    }

    /// A deleted group's bit goes, so a later group given its id starts unshown.
    #[test]
    fn a_deleted_or_forgotten_group_starts_again_unshown() {
        let mut s = tracking();
        let mut retracted = Vec::new();
        s.emitted(3);
        s.settle(1, &[0], &[], &mut retracted).unwrap();
        s.emitted(3);
        s.settle(1, &[], &[0], &mut retracted).unwrap();
        s.emitted(3);
        s.settle(1, &[], &[], &mut retracted).unwrap();
        assert!(retracted.is_empty());
        s.emitted(4);
        s.settle(1, &[0], &[], &mut retracted).unwrap();
        s.forget(4);
        s.settle(0, &[], &[], &mut retracted).unwrap();
        s.emitted(4);
        s.settle(1, &[], &[], &mut retracted).unwrap();
        assert!(retracted.is_empty());
    }

    /// A window that closes in the batch that emitted its failing change
    /// is still judged as shown: its id goes after HAVING judged it.
    #[test]
    fn a_group_gone_before_its_rows_are_judged_is_judged_as_it_was() {
        let mut s = tracking();
        let mut retracted = Vec::new();
        s.emitted(2);
        s.settle(1, &[0], &[], &mut retracted).unwrap();
        s.emitted(2);
        s.forget(2);
        s.settle(1, &[], &[], &mut retracted).unwrap();
        assert_eq!(retracted, [0]);
        s.emitted(2);
        s.settle(1, &[], &[], &mut retracted).unwrap();
        assert_eq!(retracted, [0], "the id, handed out again, starts unshown");
    }

    /// Bits round-trip after a checkpoint; a checkpoint without them
    /// counts its live groups as shown; off writes and reads nothing.
    #[test]
    fn bits_ride_after_a_checkpoint_and_an_older_one_counts_as_shown() {
        let mut s = tracking();
        let mut retracted = Vec::new();
        for g in 0..3 {
            s.emitted(g);
        }
        s.settle(3, &[0, 2], &[], &mut retracted).unwrap();
        let bytes = s.write(0..3, Vec::new()).unwrap();
        let mut back = tracking();
        back.read(0, &bytes, std::iter::empty()).unwrap();
        assert_eq!(back.bits, [true, false, true]);
        let mut old = tracking();
        old.read(0, &[], [1usize].into_iter()).unwrap();
        assert_eq!(old.bits, [false, true]);
        let off = Shown::default();
        assert!(off.write(0..3, vec![9]).unwrap() == [9]);
        assert!(s.settle(2, &[], &[], &mut retracted).is_err(), "rows that were never emitted");
    }
}
