//! A batch: the rows one engine processes at a time, as columns.

use super::column::Column;
use super::types::DataType;

/// Columns of equal length. Column `i` is column `i` of the schema the
/// producer of the batch was planned against.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Batch {
    pub columns: Vec<Column>,
    pub len: usize,
}

impl Batch {
    pub fn new(columns: Vec<Column>, len: usize) -> Self {
        Self { columns, len }
    }

    /// No rows, in empty columns of the given types: where an operator
    /// collects what it emits.
    pub fn empty(types: &[DataType]) -> Self {
        Self::new(types.iter().map(|t| Column::with_capacity(*t, 64)).collect(), 0)
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn column(&self, i: usize) -> Option<&Column> {
        self.columns.get(i)
    }

    /// Empties every column, keeping allocations.
    pub fn clear(&mut self) {
        for c in &mut self.columns {
            c.clear();
        }
        self.len = 0;
    }
}

/// The rows of a batch an operator should look at: all, or a sorted subset.
#[derive(Clone, Copy, Debug)]
pub enum Selection<'a> {
    All(usize),
    Rows(&'a [u32]),
}

impl Selection<'_> {
    pub fn len(&self) -> usize {
        match self {
            Self::All(n) => *n,
            Self::Rows(r) => r.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Calls `f(row)` for each selected row, in order.
    #[inline]
    pub fn for_each(&self, mut f: impl FnMut(usize)) {
        match self {
            Self::All(n) => (0..*n).for_each(f),
            Self::Rows(r) => r.iter().for_each(|&i| f(i as usize)),
        }
    }
}
