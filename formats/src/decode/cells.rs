//! Pushing decoded values into a batch's columns the way every binary
//! decoder does (Avro, Protobuf): NULLs refused for `required` columns,
//! times kept within the range every timestamp keeps to, errors naming
//! the column.

use sluice_plan::Batch;
use sluice_plan::time::MAX_TIMESTAMP_MS;

use super::SourceColumns;

/// The field a table source's rows carry to say they are deletions.
pub(super) const DELETED: &str = "__deleted";

/// A NULL into column `col` (when the query uses it); refused for a
/// `required` one.
pub(super) fn push_null(columns: &SourceColumns, batch: &mut Batch, col: usize) -> Result<(), String> {
    if columns.required[col] {
        return Err(format!("required column `{}` is null", name(columns, col)));
    }
    if columns.used[col] {
        batch.columns[col].push_null();
    }
    Ok(())
}

/// Column `col`'s name, for messages.
pub(super) fn name(columns: &SourceColumns, col: usize) -> String {
    String::from_utf8_lossy(&columns.names[col]).into_owned()
}

/// A time in milliseconds, within the range every timestamp keeps to.
pub(super) fn time(columns: &SourceColumns, col: usize, ms: Option<i64>) -> Result<i64, String> {
    ms.filter(|ms| !columns.time_bounded[col] || (-MAX_TIMESTAMP_MS..=MAX_TIMESTAMP_MS).contains(ms))
        .ok_or_else(|| format!("column `{}`: a time outside ±{MAX_TIMESTAMP_MS} ms from the epoch", name(columns, col)))
}
