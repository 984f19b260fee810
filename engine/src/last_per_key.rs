//! Which rows of a batch count when each row is the latest version of its
//! key: the last of each key, in arrival order. The versions before it in
//! the same batch are superseded there, so whatever the batching, a batch
//! is one change per key. Shared by the operators that read a changelog
//! (the aggregate over an updating aggregate, a table's changelog).

use std::borrow::Cow;

use crate::Error;
use crate::state::group_keys::KeyEncoder;
use sluice_plan::{Batch, Column, PhysExpr, Selection, eval};

/// Scratch reused batch to batch: the batch's keys back to back, where
/// each ends, and the rows by key.
#[derive(Debug, Default)]
pub(crate) struct LastPerKey {
    keys: Vec<u8>,
    ends: Vec<usize>,
    order: Vec<u32>,
    /// Positions (in the selection) of the rows that count, increasing.
    pub keep: Vec<u32>,
    /// The batch row at each position of the selection.
    pub rows: Vec<u32>,
}

impl LastPerKey {
    /// Finds the rows of `selection` that count: afterwards [`Self::keep`]
    /// holds their positions and [`Self::key`] reads any position's key.
    pub fn select(&mut self, key_exprs: &[PhysExpr], batch: &Batch, selection: &Selection<'_>) -> Result<(), Error> {
        let n = batch.len;
        let columns: Vec<Cow<'_, Column>> =
            key_exprs.iter().map(|e| Ok(eval(e, batch)?.into_column(n))).collect::<Result<_, Error>>()?;
        let refs: Vec<&Column> = columns.iter().map(AsRef::as_ref).collect();
        let encoder = KeyEncoder::new(&refs);
        self.keys.clear();
        self.ends.clear();
        self.rows.clear();
        selection.for_each(|r| {
            encoder.encode(r, &mut self.keys);
            self.ends.push(self.keys.len());
            self.rows.push(u32::try_from(r).unwrap_or(u32::MAX));
        });
        // By key, then arrival: the last of each run of one key counts.
        self.order.clear();
        self.order.extend(0..u32::try_from(self.rows.len()).unwrap_or(u32::MAX));
        let mut order = std::mem::take(&mut self.order);
        order.sort_by(|&a, &b| self.key(a as usize).cmp(self.key(b as usize)).then(a.cmp(&b)));
        self.keep.clear();
        for (i, &at) in order.iter().enumerate() {
            let next = order.get(i + 1).map(|&b| self.key(b as usize));
            if next != Some(self.key(at as usize)) {
                self.keep.push(at);
            }
        }
        self.order = order;
        self.keep.sort_unstable();
        Ok(())
    }

    /// The key of the row at position `i` of the selection.
    pub fn key(&self, i: usize) -> &[u8] {
        let start = if i == 0 { 0 } else { self.ends[i - 1] };
        &self.keys[start..self.ends[i]]
    }
}
