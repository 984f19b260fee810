//! The reader's side of Avro's schema resolution: a column's aliases
//! (the names its field had in earlier versions of the writer's schema)
//! and its default (what a record written without the field reads). The
//! program compiler tries the aliases; the decoder pushes the defaults
//! (`AvroDecoder::resolve_with` reads both from the source's columns).

use sluice_plan::time::parse_timestamp_ms;
use sluice_plan::{Batch, Scalar};

use super::super::SourceColumns;
use super::super::cells::{name, push_null};

/// A column the writer has no field for: its default, or NULL.
pub(super) fn absent(
    columns: &SourceColumns,
    defaults: &[Option<Scalar>],
    batch: &mut Batch,
    col: usize,
) -> Result<(), String> {
    match defaults.get(col) {
        Some(Some(value)) if columns.used[col] => {
            batch.columns[col].push_scalar(value).map_err(|e| format!("column `{}`: {e}", name(columns, col)))
        }
        Some(Some(_)) => Ok(()),
        _ => push_null(columns, batch, col),
    }
}

/// A column's default (its text) as a value of its type.
pub(super) fn default_value(text: &str, to: sluice_plan::DataType) -> Option<Scalar> {
    use sluice_plan::DataType as D;
    Some(match to {
        D::Bigint => Scalar::Bigint(text.trim().parse().ok()?),
        D::Double => Scalar::Double(text.trim().parse().ok()?),
        D::Boolean => Scalar::Boolean(text.trim().parse().ok()?),
        D::String => Scalar::String(text.to_owned()),
        D::Timestamp => Scalar::Timestamp(text.trim().parse().ok().or_else(|| parse_timestamp_ms(text.trim()))?),
        D::Decimal(p, s) => Scalar::Decimal(sluice_plan::decimal::parse(text.trim(), p, s)?, s),
        _ => return None,
    })
}
