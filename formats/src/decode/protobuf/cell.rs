//! A field's value, read into a [`Slot`], pushed into a column: the
//! conversions a column type allows (a number into a decimal, an enum
//! number into its name, text into a timestamp), the same for a
//! top-level column and a column nested in one.

use sluice_plan::time::{MAX_TIMESTAMP_MS, parse_timestamp_ms};
use sluice_plan::{Batch, Column, DataType, decimal};

use super::super::SourceColumns;
use super::super::cells::{name, push_null, time};
use super::program::Default;
use super::wire::Slot;

/// `slot` into `column` (of type `into`), converted as the column type
/// asks; `name` names the column for errors, `time` checks a time's
/// range. A column the query does not read (`used` false) is converted
/// only where the conversion can fail the record (a time out of range, a
/// decimal that does not fit), as it would if read, and nothing is pushed.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
fn put(
    column: &mut Column,
    used: bool,
    slot: Slot,
    into: DataType,
    payload: &[u8],
    enums: &[Vec<(i32, String)>],
    name: impl Fn() -> String,
    time: impl Fn(i64) -> Result<i64, String>,
) -> Result<(), String> {
    let text = |s: usize, e: usize| {
        std::str::from_utf8(&payload[s..e]).map_err(|_| format!("column `{}`: a string that is not UTF-8", name()))
    };
    let pushed = match (slot, into) {
        (Slot::Unset | Slot::Seen, _) => {
            return Err(format!("internal: column `{}` has no value to convert", name()));
        }
        (Slot::Int(x), DataType::Timestamp) => {
            let x = time(x)?;
            if !used {
                return Ok(());
            }
            column.push_i64(x)
        }
        (Slot::Text(s, e), DataType::Timestamp) => {
            let t = text(s, e)?;
            let ms = parse_timestamp_ms(t).ok_or_else(|| format!("column `{}`: `{t}` is not a timestamp", name()))?;
            let x = time(ms)?;
            if !used {
                return Ok(());
            }
            column.push_i64(x)
        }
        (slot @ (Slot::Int(_) | Slot::Float(_) | Slot::Text(..)), DataType::Decimal(p, s)) => {
            let v = match slot {
                Slot::Int(x) => decimal::rescale(i128::from(x), 0, s, p),
                Slot::Float(x) => decimal::from_f64(x, p, s),
                Slot::Text(a, b) => decimal::parse(text(a, b)?, p, s),
                _ => None,
            };
            let v = v.ok_or_else(|| format!("column `{}`: a value that is no {into} value", name()))?;
            if !used {
                return Ok(());
            }
            column.push_decimal(v)
        }
        _ if !used => return Ok(()),
        #[allow(clippy::cast_precision_loss)]
        (Slot::Int(x), DataType::Double) => column.push_f64(x as f64),
        (Slot::Int(x), _) => column.push_i64(x),
        (Slot::Float(x), _) => column.push_f64(x),
        (Slot::Bool(x), _) => column.push_bool(x),
        (Slot::Text(s, e), _) => column.push_str(text(s, e)?),
        (Slot::Enum(e, number), _) => {
            let names = &enums[e];
            match names.binary_search_by_key(&number, |n| n.0) {
                Ok(i) => column.push_str(&names[i].1),
                // An unknown number (a newer writer's value): its number.
                Err(_) => column.push_str(&number.to_string()),
            }
        }
    };
    pushed.map_err(|e| e.to_string())
}

/// The value the record set, into column `col`.
#[inline(always)]
pub(super) fn push(
    columns: &SourceColumns,
    batch: &mut Batch,
    col: usize,
    slot: Slot,
    payload: &[u8],
    enums: &[Vec<(i32, String)>],
) -> Result<(), String> {
    if let Slot::Unset = slot {
        return push_null(columns, batch, col);
    }
    put(
        &mut batch.columns[col],
        columns.used[col],
        slot,
        columns.types[col],
        payload,
        enums,
        || name(columns, col),
        |x| time(columns, col, Some(x)),
    )
}

/// The value of a field inside a nested column, into that column's
/// child `column`; `name` renders the path to it for errors.
pub(super) fn push_into(
    column: &mut Column,
    slot: Slot,
    payload: &[u8],
    enums: &[Vec<(i32, String)>],
    name: &dyn Fn() -> String,
) -> Result<(), String> {
    if let Slot::Unset = slot {
        column.push_null();
        return Ok(());
    }
    let bounded = |x: i64| {
        if (-MAX_TIMESTAMP_MS..=MAX_TIMESTAMP_MS).contains(&x) {
            Ok(x)
        } else {
            Err(format!("column `{}`: a time outside ±{MAX_TIMESTAMP_MS} ms from the epoch", name()))
        }
    };
    let into = column.data_type;
    put(column, true, slot, into, payload, enums, name, bounded)
}

/// A column's default, for a field the record leaves out.
pub(super) fn push_default(
    columns: &SourceColumns,
    batch: &mut Batch,
    col: usize,
    value: &Default,
) -> Result<(), String> {
    if !columns.used[col] {
        return Ok(());
    }
    let column = &mut batch.columns[col];
    let x = if column.data_type == DataType::Timestamp { Some(time(columns, col, default_int(value))?) } else { None };
    default_into(column, value, x)
}

/// A field's default into a nested column's child.
pub(super) fn push_default_into(column: &mut Column, value: &Default) -> Result<(), String> {
    default_into(column, value, None)
}

fn default_int(value: &Default) -> Option<i64> {
    match value {
        Default::Int(x) => Some(*x),
        _ => None,
    }
}

fn default_into(column: &mut Column, value: &Default, time: Option<i64>) -> Result<(), String> {
    let pushed = match value {
        // A decimal's default is zero, in its storage.
        Default::Int(x) if matches!(column.data_type, DataType::Decimal(..)) => column.push_decimal(i128::from(*x)),
        Default::Int(x) => column.push_i64(time.unwrap_or(*x)),
        Default::Float(x) => column.push_f64(*x),
        Default::Bool(x) => column.push_bool(*x),
        Default::Text(x) => column.push_str(x),
    };
    pushed.map_err(|e| e.to_string())
}
