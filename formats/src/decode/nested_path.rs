//! Where a binary decoder is inside a nested value, for the reason a
//! record is dead-lettered with (`items[3].price`). Kept by the decoder
//! and reused, so reading a record allocates nothing for it; rendered
//! only when a value fails.

use std::fmt::Write as _;

use sluice_plan::DataType;

/// One step into a nested value.
#[derive(Debug, Clone, Copy)]
pub(super) enum Step {
    /// An array's element (from 0).
    Index(usize),
    /// A row's field (by position in its row type).
    Field(usize),
    /// A map's entry (from 0).
    Entry(usize),
}

/// The steps to the value being read, each with its parent's type (a
/// field's name is its row's).
pub(super) type Path = Vec<(Step, DataType)>;

/// Column `name` then `path`: `items[3].price`, `attrs[entry 2]`.
pub(super) fn render(name: &[u8], path: &[(Step, DataType)]) -> String {
    let mut text = String::from_utf8_lossy(name).into_owned();
    for (step, parent) in path {
        let _ = match *step {
            Step::Index(i) => write!(text, "[{}]", i + 1),
            Step::Entry(i) => write!(text, "[entry {}]", i + 1),
            Step::Field(f) => write!(text, ".{}", parent.fields().get(f).map_or("?", |(n, _)| n.as_str())),
        };
    }
    text
}
