//! Result rows → the binary rows of an exchange.
//!
//! A row that crosses a repartition topic is written by one Sluice stage
//! and read by another, never by a user, so it need not be JSON: no field
//! names, no number or timestamp text to format and parse again. A row is
//! its values in the writing plan's output order, each a tag byte and then
//!
//! | tag | value |
//! |-----|-------|
//! | [`NULL`] | — |
//! | [`INT`] | `i64`, little-endian (BIGINT; TIMESTAMP, epoch ms; DECIMAL, unscaled at its column's scale) |
//! | [`FLOAT`] | `f64` bits, little-endian |
//! | [`BOOL`] | one byte, 0 or 1 |
//! | [`STR`] | `u32` byte length, little-endian, then UTF-8 |
//! | [`WIDE`] | `i128`, little-endian (DECIMAL of 19 to 38 digits, unscaled) |
//! | [`NESTED`] | `u32` byte length, little-endian, then the value as postcard writes its `Scalar` (ARRAY, MAP, ROW) |
//!
//! The reader maps positions to its own columns by the writer's output
//! names (`decode::BinaryDecoder`). Keys are written the same way: on an
//! exchange they only choose the partition.

use sluice_plan::EmittedRows;
use sluice_plan::{DataType, Scalar};

use super::json::EncodedRows;
use super::view::{Cells, Data, View};

pub const NULL: u8 = 0;
pub const INT: u8 = 1;
pub const FLOAT: u8 = 2;
pub const BOOL: u8 = 3;
pub const STR: u8 = 4;
pub const WIDE: u8 = 5;
pub const NESTED: u8 = 6;

/// Writes [`EmittedRows`] as binary rows (see the module docs).
#[derive(Debug, Clone, Copy, Default)]
pub struct BinaryEncoder;

/// An array, map or row value as [`NESTED`].
fn nested(value: sluice_plan::ScalarRef<'_>, out: &mut Vec<u8>) {
    out.push(NESTED);
    let at = out.len();
    out.extend_from_slice(&[0; 4]);
    // Writing a value into memory does not fail.
    let _ = postcard::to_io(&value, &mut *out);
    let len = u32::try_from(out.len() - at - 4).unwrap_or(u32::MAX);
    out[at..at + 4].copy_from_slice(&len.to_le_bytes());
}

/// The binary encoding of one value.
struct Binary;

impl Cells for Binary {
    fn null(out: &mut Vec<u8>) {
        out.push(NULL);
    }

    #[inline]
    fn cell(data: &Data<'_>, row: usize, out: &mut Vec<u8>) {
        match data {
            Data::Int(x) | Data::Ts(x) | Data::Dec(x, _) => {
                out.push(INT);
                out.extend_from_slice(&x[row].to_le_bytes());
            }
            Data::Float(x) => {
                out.push(FLOAT);
                out.extend_from_slice(&x[row].to_le_bytes());
            }
            Data::WideDec(x, _) => {
                out.push(WIDE);
                out.extend_from_slice(&x[row].to_le_bytes());
            }
            Data::Bool(x) => out.extend_from_slice(&[BOOL, u8::from(x[row])]),
            Data::Str(s) => write_str(s.get(row), out),
            Data::Null => out.push(NULL),
            Data::Nested(c) => nested(c.value(row), out),
        }
    }

    fn scalar(s: &Scalar, t: DataType, out: &mut Vec<u8>) {
        match s {
            Scalar::Null => out.push(NULL),
            Scalar::Decimal(x, scale) => match super::view::decimal_constant(*x, *scale, t) {
                Some((x, _)) if t.is_wide() => {
                    out.push(WIDE);
                    out.extend_from_slice(&x.to_le_bytes());
                }
                Some((x, _)) => {
                    out.push(INT);
                    out.extend_from_slice(&sluice_plan::decimal::narrow(x).to_le_bytes());
                }
                None => out.push(NULL),
            },
            Scalar::Bigint(x) | Scalar::Timestamp(x) => {
                out.push(INT);
                out.extend_from_slice(&x.to_le_bytes());
            }
            Scalar::Double(x) => {
                out.push(FLOAT);
                out.extend_from_slice(&x.to_le_bytes());
            }
            Scalar::Boolean(x) => out.extend_from_slice(&[BOOL, u8::from(*x)]),
            Scalar::String(x) => write_str(x, out),
            Scalar::List(_) | Scalar::Map(_) | Scalar::Row(_) => nested(s.borrowed(), out),
        }
    }
}

fn write_str(s: &str, out: &mut Vec<u8>) {
    // A string over 4 GiB cannot be in a batch: records are far smaller.
    out.push(STR);
    out.extend_from_slice(&u32::try_from(s.len()).unwrap_or(u32::MAX).to_le_bytes());
    out.extend_from_slice(s.as_bytes());
}

impl BinaryEncoder {
    /// Appends the emitted rows to `out`.
    pub fn encode(self, rows: &EmittedRows<'_>, out: &mut EncodedRows) {
        let values: Vec<View<'_>> = rows.columns.iter().map(View::of::<Binary>).collect();
        let keys: Vec<View<'_>> = rows.keys.iter().map(View::of::<Binary>).collect();
        out.values.reserve(rows.selection.len() * 10 * values.len().max(1));
        rows.selection.for_each(|row| {
            for v in &values {
                v.write::<Binary>(row, &mut out.values);
            }
            out.value_ends.push(out.values.len());
            if !keys.is_empty() {
                for k in &keys {
                    k.write::<Binary>(row, &mut out.keys);
                }
                out.key_ends.push(out.keys.len());
            }
        });
    }
}
