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

/// A value as the column stores it.
#[derive(Clone, Copy)]
enum Cell<'p> {
    Int(i64),
    Float(f64),
    Bool(bool),
    Str(&'p str),
    /// An enum number the schema does not name (a newer writer's value):
    /// its number, as text.
    Number(i32),
    Decimal(i128),
}

/// `slot` (not [`Slot::Unset`]) as a value of type `into`; `name` names
/// the column for errors.
#[inline(always)]
fn convert<'p>(
    slot: Slot,
    into: DataType,
    payload: &'p [u8],
    enums: &'p [Vec<(i32, String)>],
    name: impl Fn() -> String,
) -> Result<Cell<'p>, String> {
    let text = |s: usize, e: usize| {
        std::str::from_utf8(&payload[s..e]).map_err(|_| format!("column `{}`: a string that is not UTF-8", name()))
    };
    Ok(match (slot, into) {
        (Slot::Text(s, e), DataType::Timestamp) => {
            let t = text(s, e)?;
            Cell::Int(parse_timestamp_ms(t).ok_or_else(|| format!("column `{}`: `{t}` is not a timestamp", name()))?)
        }
        (slot @ (Slot::Int(_) | Slot::Float(_) | Slot::Text(..)), DataType::Decimal(p, s)) => {
            let v = match slot {
                Slot::Int(x) => decimal::rescale(i128::from(x), 0, s, p),
                Slot::Float(x) => decimal::from_f64(x, p, s),
                Slot::Text(a, b) => decimal::parse(text(a, b)?, p, s),
                _ => None,
            };
            Cell::Decimal(v.ok_or_else(|| format!("column `{}`: a value that is no {into} value", name()))?)
        }
        #[allow(clippy::cast_precision_loss)]
        (Slot::Int(x), DataType::Double) => Cell::Float(x as f64),
        (Slot::Int(x), _) => Cell::Int(x),
        (Slot::Float(x), _) => Cell::Float(x),
        (Slot::Bool(x), _) => Cell::Bool(x),
        (Slot::Text(s, e), _) => Cell::Str(text(s, e)?),
        (Slot::Enum(e, number), _) => {
            let names = &enums[e];
            match names.binary_search_by_key(&number, |n| n.0) {
                Ok(i) => Cell::Str(&names[i].1),
                Err(_) => Cell::Number(number),
            }
        }
        (Slot::Unset | Slot::Seen, _) => return Err(format!("internal: column `{}` has no value to convert", name())),
    })
}

#[inline(always)]
fn put(column: &mut Column, cell: Cell<'_>) -> Result<(), String> {
    match cell {
        Cell::Int(x) => column.push_i64(x),
        Cell::Float(x) => column.push_f64(x),
        Cell::Bool(x) => column.push_bool(x),
        Cell::Str(x) => column.push_str(x),
        Cell::Number(x) => column.push_str(&x.to_string()),
        Cell::Decimal(x) => column.push_decimal(x),
    }
    .map_err(|e| e.to_string())
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
    let into = columns.types[col];
    if slot == Slot::Unset {
        return push_null(columns, batch, col);
    }
    // A column the query does not read is converted only where the
    // conversion can fail the record (a time out of range, a decimal
    // that does not fit), as it would if read.
    let checked = matches!(into, DataType::Timestamp | DataType::Decimal(..));
    if !columns.used[col] && !checked {
        return Ok(());
    }
    let mut cell = convert(slot, into, payload, enums, || name(columns, col))?;
    if into == DataType::Timestamp
        && let Cell::Int(x) = cell
    {
        cell = Cell::Int(time(columns, col, Some(x))?);
    }
    if !columns.used[col] {
        return Ok(());
    }
    put(&mut batch.columns[col], cell)
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
    if slot == Slot::Unset {
        column.push_null();
        return Ok(());
    }
    let cell = convert(slot, column.data_type, payload, enums, name)?;
    if let (Cell::Int(x), DataType::Timestamp) = (&cell, column.data_type)
        && !(-MAX_TIMESTAMP_MS..=MAX_TIMESTAMP_MS).contains(x)
    {
        return Err(format!("column `{}`: a time outside ±{MAX_TIMESTAMP_MS} ms from the epoch", name()));
    }
    put(column, cell)
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
