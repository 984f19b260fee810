//! Avro's binary values: the cursor that reads a datum's bytes, and each
//! writer value converted into a column value ([`Conv`]), pushed into a
//! top-level column or into the child column of a nested one alike.

use sluice_plan::time::{MAX_TIMESTAMP_MS, parse_timestamp_ms};
use sluice_plan::{Batch, Column, DataType};

use super::super::SourceColumns;
use super::super::cells::{name, push_null};
use super::schema::{Logical, Type, TypeId};

const MS_PER_DAY: i64 = 86_400_000;
/// Nesting a datum may reach (a recursive type's values nest as deep as
/// the writer made them; decoding recurses).
const MAX_NESTING: usize = 64;
/// Array and map items a value may hold beyond one per byte (items of
/// no bytes: nulls).
const ITEMS_BEYOND_BYTES: u64 = 65_536;

/// How deep, and over how many array and map items, one record's value
/// has gone: bounded, so hostile bytes can neither recurse nor loop past
/// what a record of their size can hold.
#[derive(Debug, Default)]
pub(super) struct Budget {
    depth: usize,
    items: u64,
}

impl Budget {
    pub(super) fn enter(&mut self) -> Result<(), String> {
        self.depth += 1;
        if self.depth > MAX_NESTING {
            return Err(format!("a value nested more than {MAX_NESTING} levels"));
        }
        Ok(())
    }

    pub(super) fn leave(&mut self) {
        self.depth = self.depth.saturating_sub(1);
    }

    /// `n` more items in a value of `cur`'s bytes. An item takes a byte at
    /// least, unless it is a null (or a record of nothing): items beyond
    /// the value's bytes, past a margin for those, cannot be honest — and
    /// would loop for ever over a few bytes of counts.
    pub(super) fn items(&mut self, n: u64, cur: &Cursor<'_>) -> Result<(), String> {
        self.items = self.items.saturating_add(n);
        if self.items > cur.buf.len() as u64 + ITEMS_BEYOND_BYTES {
            return Err(format!("{} array or map items in a value of {} bytes", self.items, cur.buf.len()));
        }
        Ok(())
    }
}

/// Skips a value of writer type `ty`.
pub(super) fn skip(types: &[Type], ty: TypeId, cur: &mut Cursor<'_>, budget: &mut Budget) -> Result<(), String> {
    budget.enter()?;
    let skipped = match &types[ty] {
        Type::Null => Ok(()),
        Type::Boolean => cur.take(1).map(drop),
        Type::Int(_) | Type::Long(_) | Type::Enum { .. } => cur.long().map(drop),
        Type::Float => cur.take(4).map(drop),
        Type::Double => cur.take(8).map(drop),
        Type::Bytes(_) | Type::String(_) => cur.bytes().map(drop),
        Type::Fixed { size, .. } => cur.take(*size).map(drop),
        Type::Record { fields, .. } => fields.iter().try_for_each(|f| skip(types, f.ty, cur, budget)),
        Type::Union(branches) => {
            let b = cur.long()?;
            let branch = usize::try_from(b).ok().and_then(|b| branches.get(b)).copied();
            let branch = branch.ok_or_else(|| format!("union branch {b} of {}", branches.len()))?;
            skip(types, branch, cur, budget)
        }
        Type::Array(item) => blocks(budget, cur, |budget, cur| skip(types, *item, cur, budget)),
        Type::Map(value) => blocks(budget, cur, |budget, cur| {
            cur.bytes()?;
            skip(types, *value, cur, budget)
        }),
    };
    budget.leave();
    skipped
}

/// What reads an array's or a map's items, and counts them.
pub(super) trait Counted {
    fn budget(&mut self) -> &mut Budget;
}

impl Counted for Budget {
    fn budget(&mut self) -> &mut Budget {
        self
    }
}

/// An array's or map's blocks: a count (negative: followed by the block's
/// size in bytes), its items, until a count of 0.
pub(super) fn blocks<C: Counted>(
    ctx: &mut C,
    cur: &mut Cursor<'_>,
    mut item: impl FnMut(&mut C, &mut Cursor<'_>) -> Result<(), String>,
) -> Result<(), String> {
    loop {
        let count = cur.long()?;
        if count == 0 {
            return Ok(());
        }
        if count < 0 {
            cur.long()?;
        }
        ctx.budget().items(count.unsigned_abs(), cur)?;
        for _ in 0..count.unsigned_abs() {
            item(ctx, cur)?;
        }
    }
}

/// How a writer value becomes a column value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Conv {
    Null,
    Boolean,
    IntToBigint,
    LongToBigint,
    IntToDouble,
    LongToDouble,
    FloatToDouble,
    DoubleToDouble,
    /// A `long` of milliseconds (`timestamp-millis`, or no logical type).
    MillisToTimestamp,
    MicrosToTimestamp,
    DaysToTimestamp,
    StringToTimestamp,
    StringToString,
    BytesToString,
    FixedToString(usize),
    /// An enum's symbol, by index into [`Program::symbols`].
    EnumToString(usize),
    /// A decimal (`bytes` when `fixed` is `None`).
    DecimalToDouble {
        scale: u32,
        fixed: Option<usize>,
    },
    DecimalToString {
        scale: u32,
        fixed: Option<usize>,
    },
    /// A decimal into a `decimal(precision, to)` column, rescaled exactly
    /// (rounded half away from zero when the column keeps fewer places).
    DecimalToDecimal {
        scale: u32,
        fixed: Option<usize>,
        precision: u8,
        to: u8,
    },
    /// An `int` (`long` when `wide`) into a decimal column.
    IntegerToDecimal {
        wide: bool,
        precision: u8,
        to: u8,
    },
    /// Decimal text into a decimal column.
    StringToDecimal {
        precision: u8,
        to: u8,
    },
}

/// How a writer value of type `ty` goes into a column of type `to`.
pub(super) fn conv(ty: &Type, to: DataType, symbols_out: &mut Vec<Vec<String>>) -> Option<Conv> {
    use DataType as D;
    Some(match (ty, to) {
        (Type::Boolean, D::Boolean) => Conv::Boolean,
        (Type::Int(Logical::Date), D::Timestamp) => Conv::DaysToTimestamp,
        (Type::Int(_), D::Bigint) => Conv::IntToBigint,
        (Type::Int(_), D::Double) => Conv::IntToDouble,
        (Type::Long(Logical::TimestampMicros), D::Timestamp) => Conv::MicrosToTimestamp,
        (Type::Long(_), D::Timestamp) => Conv::MillisToTimestamp,
        (Type::Long(_), D::Bigint) => Conv::LongToBigint,
        (Type::Long(_), D::Double) => Conv::LongToDouble,
        (Type::Float, D::Double) => Conv::FloatToDouble,
        (Type::Double, D::Double) => Conv::DoubleToDouble,
        (Type::String(_), D::String) => Conv::StringToString,
        (Type::String(_), D::Timestamp) => Conv::StringToTimestamp,
        (Type::Bytes(Logical::Decimal { scale }), D::Double) => Conv::DecimalToDouble { scale: *scale, fixed: None },
        (Type::Bytes(Logical::Decimal { scale }), D::String) => Conv::DecimalToString { scale: *scale, fixed: None },
        (Type::Bytes(Logical::Decimal { scale }), D::Decimal(precision, to)) => {
            Conv::DecimalToDecimal { scale: *scale, fixed: None, precision, to }
        }
        (Type::Fixed { size, logical: Logical::Decimal { scale }, .. }, D::Decimal(precision, to)) => {
            Conv::DecimalToDecimal { scale: *scale, fixed: Some(*size), precision, to }
        }
        (Type::Int(Logical::None), D::Decimal(precision, to)) => Conv::IntegerToDecimal { wide: false, precision, to },
        (Type::Long(Logical::None), D::Decimal(precision, to)) => Conv::IntegerToDecimal { wide: true, precision, to },
        (Type::String(_), D::Decimal(precision, to)) => Conv::StringToDecimal { precision, to },
        (Type::Bytes(_), D::String) => Conv::BytesToString,
        (Type::Fixed { size, logical: Logical::Decimal { scale }, .. }, D::Double) => {
            Conv::DecimalToDouble { scale: *scale, fixed: Some(*size) }
        }
        (Type::Fixed { size, logical: Logical::Decimal { scale }, .. }, D::String) => {
            Conv::DecimalToString { scale: *scale, fixed: Some(*size) }
        }
        (Type::Fixed { size, .. }, D::String) => Conv::FixedToString(*size),
        (Type::Enum { symbols, .. }, D::String) => {
            symbols_out.push(symbols.clone());
            Conv::EnumToString(symbols_out.len() - 1)
        }
        (Type::Null, _) => Conv::Null,
        _ => return None,
    })
}

/// The bytes of one datum, read front to back.
pub(super) struct Cursor<'a> {
    pub(super) buf: &'a [u8],
    pub(super) at: usize,
}

impl<'a> Cursor<'a> {
    /// A zig-zag varint of at most 10 bytes.
    pub(super) fn long(&mut self) -> Result<i64, String> {
        let mut value: u64 = 0;
        for shift in (0..70).step_by(7) {
            let Some(&b) = self.buf.get(self.at) else { return Err(self.ended("a number")) };
            self.at += 1;
            if shift == 63 && b > 1 {
                return Err(format!("a number longer than 64 bits at byte {}", self.at));
            }
            value |= u64::from(b & 0x7f) << shift;
            if b & 0x80 == 0 {
                return Ok(((value >> 1) as i64) ^ -((value & 1) as i64));
            }
        }
        Err(format!("a number longer than 10 bytes at byte {}", self.at))
    }

    pub(super) fn int(&mut self) -> Result<i32, String> {
        let v = self.long()?;
        i32::try_from(v).map_err(|_| format!("{v} is out of range for an Avro int"))
    }

    pub(super) fn take(&mut self, n: usize) -> Result<&'a [u8], String> {
        let end = self.at.checked_add(n).filter(|e| *e <= self.buf.len()).ok_or_else(|| self.ended("bytes"))?;
        let bytes = &self.buf[self.at..end];
        self.at = end;
        Ok(bytes)
    }

    /// Length-prefixed bytes (`bytes`, `string`).
    pub(super) fn bytes(&mut self) -> Result<&'a [u8], String> {
        let n = self.long()?;
        let n = usize::try_from(n).map_err(|_| format!("a negative length {n}"))?;
        self.take(n)
    }

    pub(super) fn text(&mut self) -> Result<&'a str, String> {
        std::str::from_utf8(self.bytes()?).map_err(|_| "a string that is not UTF-8".to_owned())
    }

    pub(super) fn ended(&self, what: &str) -> String {
        format!("the value ends at byte {} in the middle of {what}", self.buf.len())
    }
}

/// Reads one value and pushes it into column `col` (when the query uses
/// it); a `null` is refused for a `required` column.
#[inline]
pub(super) fn read_value(
    columns: &SourceColumns,
    batch: &mut Batch,
    col: usize,
    conv: Conv,
    cur: &mut Cursor<'_>,
    symbols: &[Vec<String>],
) -> Result<(), String> {
    if matches!(conv, Conv::Null) {
        return push_null(columns, batch, col);
    }
    let target = Target {
        column: if columns.used[col] { Some(&mut batch.columns[col]) } else { None },
        time_bounded: columns.time_bounded[col],
        name: &|| name(columns, col),
    };
    read_into(conv, cur, symbols, target)
}

/// Where a value goes: its column (`None` when the query does not read
/// it: the value is still checked), whether its times are bounded, and
/// what an error calls it.
pub(super) struct Target<'a> {
    pub(super) column: Option<&'a mut Column>,
    pub(super) time_bounded: bool,
    pub(super) name: &'a dyn Fn() -> String,
}

/// A time in milliseconds, within the range every timestamp keeps to.
#[inline]
fn time(t: &Target<'_>, ms: Option<i64>) -> Result<i64, String> {
    ms.filter(|ms| !t.time_bounded || (-MAX_TIMESTAMP_MS..=MAX_TIMESTAMP_MS).contains(ms))
        .ok_or_else(|| format!("column `{}`: a time outside ±{MAX_TIMESTAMP_MS} ms from the epoch", (t.name)()))
}

/// Reads one value of `conv` into `target`, inlined into each caller:
/// the flat path reads every value of a record through it.
#[inline(always)]
pub(super) fn read_into(
    conv: Conv,
    cur: &mut Cursor<'_>,
    symbols: &[Vec<String>],
    target: Target<'_>,
) -> Result<(), String> {
    let pushed = match conv {
        Conv::Null => {
            if let Some(c) = target.column {
                c.push_null();
            }
            return Ok(());
        }
        Conv::Boolean => {
            let b = match cur.take(1)?[0] {
                0 => false,
                1 => true,
                b => return Err(format!("column `{}`: boolean byte {b}", (target.name)())),
            };
            let Some(column) = target.column else { return Ok(()) };
            column.push_bool(b)
        }
        Conv::IntToBigint | Conv::LongToBigint | Conv::MillisToTimestamp => {
            let x = if conv == Conv::IntToBigint { i64::from(cur.int()?) } else { cur.long()? };
            let x = if conv == Conv::MillisToTimestamp { time(&target, Some(x))? } else { x };
            let Some(column) = target.column else { return Ok(()) };
            column.push_i64(x)
        }
        Conv::MicrosToTimestamp | Conv::DaysToTimestamp => {
            let ms = if conv == Conv::MicrosToTimestamp {
                Some(cur.long()?.div_euclid(1000))
            } else {
                i64::from(cur.int()?).checked_mul(MS_PER_DAY)
            };
            let x = time(&target, ms)?;
            let Some(column) = target.column else { return Ok(()) };
            column.push_i64(x)
        }
        Conv::IntToDouble | Conv::LongToDouble | Conv::FloatToDouble | Conv::DoubleToDouble => {
            #[allow(clippy::cast_precision_loss)]
            let x = match conv {
                Conv::IntToDouble => f64::from(cur.int()?),
                Conv::LongToDouble => cur.long()? as f64,
                Conv::FloatToDouble => {
                    let b = cur.take(4)?;
                    f64::from(f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
                }
                _ => {
                    let mut w = [0; 8];
                    w.copy_from_slice(cur.take(8)?);
                    f64::from_le_bytes(w)
                }
            };
            let Some(column) = target.column else { return Ok(()) };
            column.push_f64(x)
        }
        Conv::StringToTimestamp => {
            let text = cur.text()?;
            let ms = parse_timestamp_ms(text)
                .ok_or_else(|| format!("column `{}`: `{text}` is not a timestamp", (target.name)()))?;
            let x = time(&target, Some(ms))?;
            let Some(column) = target.column else { return Ok(()) };
            column.push_i64(x)
        }
        Conv::StringToString | Conv::BytesToString | Conv::FixedToString(_) => {
            let bytes = match conv {
                Conv::FixedToString(n) => cur.take(n)?,
                _ => cur.bytes()?,
            };
            let text = std::str::from_utf8(bytes)
                .map_err(|_| format!("column `{}`: a string that is not UTF-8", (target.name)()))?;
            let Some(column) = target.column else { return Ok(()) };
            column.push_str(text)
        }
        Conv::EnumToString(e) => {
            let i = cur.long()?;
            let symbols = symbols.get(e).map_or(&[][..], Vec::as_slice);
            let symbol = usize::try_from(i).ok().and_then(|i| symbols.get(i));
            let symbol = symbol.ok_or_else(|| format!("enum symbol {i} of {}", symbols.len()))?;
            let Some(column) = target.column else { return Ok(()) };
            column.push_str(symbol)
        }
        Conv::DecimalToDouble { scale, fixed } | Conv::DecimalToString { scale, fixed } => {
            let bytes = match fixed {
                Some(n) => cur.take(n)?,
                None => cur.bytes()?,
            };
            let unscaled = unscaled(bytes)
                .ok_or_else(|| format!("column `{}`: a decimal of {} bytes", (target.name)(), bytes.len()))?;
            let Some(column) = target.column else { return Ok(()) };
            if matches!(conv, Conv::DecimalToDouble { .. }) {
                #[allow(clippy::cast_precision_loss)]
                column.push_f64(unscaled as f64 / 10f64.powi(i32::try_from(scale).unwrap_or(0)))
            } else {
                column.push_str(&decimal_text(unscaled, scale))
            }
        }
        Conv::DecimalToDecimal { scale, fixed, precision, to } => {
            let bytes = match fixed {
                Some(n) => cur.take(n)?,
                None => cur.bytes()?,
            };
            let v = unscaled(bytes).and_then(|v| {
                use sluice_plan::decimal::{div_round, fit, pow10};
                let from = u8::try_from(scale).ok()?;
                let v = if to >= from { v.checked_mul(pow10(to - from))? } else { div_round(v, pow10(from - to)) };
                fit(v, precision)
            });
            let v = v.ok_or_else(|| {
                format!("column `{}`: a decimal that does not fit decimal({precision},{to})", (target.name)())
            })?;
            let Some(column) = target.column else { return Ok(()) };
            column.push_decimal(v)
        }
        Conv::IntegerToDecimal { wide, precision, to } => {
            let x = if wide { cur.long()? } else { i64::from(cur.int()?) };
            let v = sluice_plan::decimal::rescale(i128::from(x), 0, to, precision)
                .ok_or_else(|| format!("column `{}`: {x} does not fit decimal({precision},{to})", (target.name)()))?;
            let Some(column) = target.column else { return Ok(()) };
            column.push_decimal(v)
        }
        Conv::StringToDecimal { precision, to } => {
            let text = cur.text()?;
            let v = sluice_plan::decimal::parse(text, precision, to).ok_or_else(|| {
                let shown: String = text.chars().take(40).collect();
                format!("column `{}`: {shown:?} is no decimal({precision},{to}) value", (target.name)())
            })?;
            let Some(column) = target.column else { return Ok(()) };
            column.push_decimal(v)
        }
    };
    pushed.map_err(|e| e.to_string())
}

/// A big-endian two's-complement integer that fits 16 bytes (a longer
/// `fixed` whose leading bytes only extend the sign, as a `fixed(20)` of a
/// small value has, reads too).
pub(super) fn unscaled(mut bytes: &[u8]) -> Option<i128> {
    let fill = if bytes.first().is_some_and(|b| b & 0x80 != 0) { 0xff } else { 0 };
    while bytes.len() > 16 {
        // A dropped byte must be fill, and the byte after it keep the sign.
        if bytes[0] != fill || (bytes[1] & 0x80 != 0) != (fill != 0) {
            return None;
        }
        bytes = &bytes[1..];
    }
    let mut word = [fill; 16];
    word[16 - bytes.len()..].copy_from_slice(bytes);
    Some(i128::from_be_bytes(word))
}

/// `unscaled × 10^-scale`, exactly (`-12345`, scale 2 → `-123.45`).
fn decimal_text(unscaled: i128, scale: u32) -> String {
    let digits = unscaled.unsigned_abs().to_string();
    let sign = if unscaled < 0 { "-" } else { "" };
    let scale = scale as usize;
    if scale == 0 {
        return format!("{sign}{digits}");
    }
    let padded = format!("{digits:0>width$}", width = scale + 1);
    let (whole, frac) = padded.split_at(padded.len() - scale);
    format!("{sign}{whole}.{frac}")
}
