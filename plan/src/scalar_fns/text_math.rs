//! Kernels of the common PostgreSQL and Flink built-ins beyond the first
//! set: math over doubles (NULL where PostgreSQL would raise an error),
//! string slicing by characters, JSON_QUERY, digests, INITCAP,
//! TIMESTAMPADD and TIMESTAMPDIFF, and time zones.

use super::rows::{MAX_PAD_CHARS, ints, map_rows_str, strings};
use crate::column::{Column, ColumnData, and_validity};
use crate::json_path::json_query;
use crate::time::{add_units, diff_units};
use crate::time_zone::{convert, time_zone};
use crate::{DataType, DigestKind, Error, ScalarFunc};

fn floats<'c>(c: &'c Column, what: &str) -> Result<&'c [f64], Error> {
    match &c.data {
        ColumnData::Float(v) => Ok(v),
        _ => Err(Error::Internal(format!("{what}: expected doubles, got {}", c.data_type))),
    }
}

/// A double column computed row by row from the columns `inputs`: NULL
/// where any input is NULL or where `f`'s result is not a finite number.
fn map_rows_f64(inputs: &[&Column], n: usize, f: impl Fn(usize) -> f64) -> Column {
    let mut validity =
        inputs.iter().fold(None, |v: Option<Vec<bool>>, c| and_validity(v.as_deref(), c.validity.as_deref(), n));
    let mut out = Vec::with_capacity(n);
    for i in 0..n {
        let y = f(i);
        if y.is_finite() {
            out.push(y);
        } else {
            out.push(0.0);
            validity.get_or_insert_with(|| vec![true; n])[i] = false;
        }
    }
    Column::new(DataType::Double, ColumnData::Float(out), validity)
}

/// A bigint or timestamp column computed row by row from the columns
/// `inputs`: NULL where any input is NULL or where `f` gives `None`.
fn map_rows_i64(inputs: &[&Column], n: usize, data_type: DataType, f: impl Fn(usize) -> Option<i64>) -> Column {
    let mut validity =
        inputs.iter().fold(None, |v: Option<Vec<bool>>, c| and_validity(v.as_deref(), c.validity.as_deref(), n));
    let v = (0..n)
        .map(|i| {
            f(i).unwrap_or_else(|| {
                validity.get_or_insert_with(|| vec![true; n])[i] = false;
                0
            })
        })
        .collect();
    Column::new(data_type, ColumnData::Int(v), validity)
}

/// PostgreSQL's INITCAP of `s`, appended to `buf`.
fn initcap(s: &str, buf: &mut String) {
    let mut in_word = false;
    for c in s.chars() {
        if c.is_alphanumeric() {
            if in_word {
                buf.extend(c.to_lowercase());
            } else {
                buf.extend(c.to_uppercase());
            }
            in_word = true;
        } else {
            buf.push(c);
            in_word = false;
        }
    }
}

/// The characters of `s` as byte offsets, with `s.len()` last: slicing by
/// characters without collecting them.
fn char_at(s: &str, k: usize) -> usize {
    s.char_indices().nth(k).map_or(s.len(), |(at, _)| at)
}

/// The digest of `bytes` as lower-case hex, appended to `buf`.
fn digest_hex(kind: DigestKind, bytes: &[u8], buf: &mut String) {
    use sha2::Digest;
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut hex = |digest: &[u8]| {
        for b in digest {
            buf.push(char::from(HEX[usize::from(b >> 4)]));
            buf.push(char::from(HEX[usize::from(b & 15)]));
        }
    };
    match kind {
        DigestKind::Md5 => hex(&md5::Md5::digest(bytes)),
        DigestKind::Sha1 => hex(&sha1::Sha1::digest(bytes)),
        DigestKind::Sha256 => hex(&sha2::Sha256::digest(bytes)),
        DigestKind::Sha224 => hex(&sha2::Sha224::digest(bytes)),
        DigestKind::Sha384 => hex(&sha2::Sha384::digest(bytes)),
        DigestKind::Sha512 => hex(&sha2::Sha512::digest(bytes)),
    }
}

/// The kernels of this file's functions; `None` for any other.
pub(super) fn eval(
    func: &ScalarFunc,
    args: &[&Column],
    data_type: DataType,
    n: usize,
) -> Result<Option<Column>, Error> {
    let arg = |i: usize| args.get(i).copied().ok_or_else(|| Error::Internal(format!("{func:?}: missing argument {i}")));
    let a = arg(0)?;
    Ok(Some(match func {
        ScalarFunc::Power => {
            let (x, y) = (floats(a, "POWER")?, floats(arg(1)?, "POWER")?);
            map_rows_f64(&[a, arg(1)?], n, |i| x[i].powf(y[i]))
        }
        ScalarFunc::Sqrt | ScalarFunc::Exp | ScalarFunc::Ln | ScalarFunc::Log10 => {
            let x = floats(a, "SQRT/EXP/LN/LOG10")?;
            let f: fn(f64) -> f64 = match func {
                ScalarFunc::Sqrt => |x| if x < 0.0 { f64::NAN } else { x.sqrt() },
                ScalarFunc::Exp => f64::exp,
                ScalarFunc::Ln => |x| if x <= 0.0 { f64::NAN } else { x.ln() },
                _ => |x| if x <= 0.0 { f64::NAN } else { x.log10() },
            };
            map_rows_f64(&[a], n, |i| f(x[i]))
        }
        ScalarFunc::Sign => {
            // A decimal's sign is -1, 0 or 1 at its scale (NULL where its
            // type has no integer digit).
            if let DataType::Decimal(p, s) = a.data_type {
                let one = crate::decimal::pow10(s);
                let rows = (0..n).map(|i| crate::decimal::fit(a.decimal(i).signum() * one, p)).collect();
                return Ok(Some(Column::decimals(a.data_type, rows, a.validity.clone())));
            }
            let data = match &a.data {
                ColumnData::Int(v) => ColumnData::Int(v.iter().map(|x| x.signum()).collect()),
                ColumnData::Float(v) => {
                    ColumnData::Float(v.iter().map(|x| if *x == 0.0 || x.is_nan() { *x } else { x.signum() }).collect())
                }
                ColumnData::Null(k) => ColumnData::Null(*k),
                _ => return Err(Error::Internal(format!("SIGN of {}", a.data_type))),
            };
            Column::new(data_type, data, a.validity.clone())
        }
        ScalarFunc::Left | ScalarFunc::Right => {
            let (s, counts) = (strings(a)?, ints(arg(1)?, "LEFT/RIGHT count")?);
            let left = *func == ScalarFunc::Left;
            map_rows_str(&[a, arg(1)?], n, |i, buf| {
                let text = s.get(i);
                let chars = text.chars().count();
                let k = counts[i];
                let magnitude = usize::try_from(k.unsigned_abs()).unwrap_or(usize::MAX).min(chars);
                // LEFT keeps `k` from the start (all but `-k` from the end);
                // RIGHT keeps `k` from the end (all but `-k` from the start).
                let (from, to) = match (left, k >= 0) {
                    (true, true) => (0, magnitude),
                    (true, false) => (0, chars - magnitude),
                    (false, true) => (chars - magnitude, chars),
                    (false, false) => (magnitude, chars),
                };
                buf.push_str(&text[char_at(text, from)..char_at(text, to)]);
                true
            })
        }
        ScalarFunc::Reverse => {
            let s = strings(a)?;
            map_rows_str(&[a], n, |i, buf| {
                buf.extend(s.get(i).chars().rev());
                true
            })
        }
        ScalarFunc::Repeat => {
            let (s, times) = (strings(a)?, ints(arg(1)?, "REPEAT count")?);
            map_rows_str(&[a, arg(1)?], n, |i, buf| {
                let (text, k) = (s.get(i), times[i].max(0));
                let chars = i64::try_from(text.chars().count()).unwrap_or(i64::MAX);
                if chars.saturating_mul(k) > MAX_PAD_CHARS {
                    return false;
                }
                // An empty string repeated is empty, however many times:
                // no loop over a count near i64::MAX.
                if !text.is_empty() {
                    buf.push_str(&text.repeat(usize::try_from(k).unwrap_or(0)));
                }
                true
            })
        }
        ScalarFunc::SplitPart => {
            let (s, sep, index) = (strings(a)?, strings(arg(1)?)?, ints(arg(2)?, "SPLIT_PART index")?);
            map_rows_str(&[a, arg(1)?, arg(2)?], n, |i, buf| {
                let (text, sep, k) = (s.get(i), sep.get(i), index[i]);
                if k == 0 {
                    return false;
                }
                // An empty separator does not split (PostgreSQL): the
                // string is the one piece.
                let piece = match (sep.is_empty(), k > 0) {
                    (true, _) => (k.unsigned_abs() == 1).then_some(text),
                    (false, true) => text.split(sep).nth(usize::try_from(k - 1).unwrap_or(usize::MAX)),
                    (false, false) => text.rsplit(sep).nth(usize::try_from(-(k + 1)).unwrap_or(usize::MAX)),
                };
                buf.push_str(piece.unwrap_or(""));
                true
            })
        }
        ScalarFunc::StartsWith => {
            let (s, prefix) = (strings(a)?, strings(arg(1)?)?);
            let v = (0..n).map(|i| s.get(i).starts_with(prefix.get(i))).collect();
            let validity = and_validity(a.validity.as_deref(), arg(1)?.validity.as_deref(), n);
            Column::new(DataType::Boolean, ColumnData::Bool(v), validity)
        }
        ScalarFunc::Strpos => {
            let (s, sub) = (strings(a)?, strings(arg(1)?)?);
            let v = (0..n)
                .map(|i| {
                    let text = s.get(i);
                    text.find(sub.get(i))
                        .map_or(0, |at| i64::try_from(text[..at].chars().count()).unwrap_or(i64::MAX - 1) + 1)
                })
                .collect();
            let validity = and_validity(a.validity.as_deref(), arg(1)?.validity.as_deref(), n);
            Column::new(DataType::Bigint, ColumnData::Int(v), validity)
        }
        ScalarFunc::JsonQuery(path) => {
            let s = strings(a)?;
            map_rows_str(&[a], n, |i, buf| json_query(s.get(i), path, buf))
        }
        ScalarFunc::Digest(kind) => {
            let s = strings(a)?;
            map_rows_str(&[a], n, |i, buf| {
                digest_hex(*kind, s.get(i).as_bytes(), buf);
                true
            })
        }
        ScalarFunc::TimestampAdd(unit) => {
            let (counts, times) = (ints(a, "TIMESTAMPADD count")?, ints(arg(1)?, "TIMESTAMPADD timestamp")?);
            map_rows_i64(&[a, arg(1)?], n, DataType::Timestamp, |i| add_units(*unit, counts[i], times[i]))
        }
        ScalarFunc::TimestampDiff(unit) => {
            let (from, to) = (ints(a, "TIMESTAMPDIFF from")?, ints(arg(1)?, "TIMESTAMPDIFF to")?);
            map_rows_i64(&[a, arg(1)?], n, DataType::Bigint, |i| diff_units(*unit, from[i], to[i]))
        }
        ScalarFunc::ConvertTz { from, to } => {
            // Names were checked when the query was planned.
            let zone = |name: &Option<String>| match name {
                Some(name) => time_zone(name)
                    .map(Some)
                    .ok_or_else(|| Error::Internal(format!("unknown time zone {name:?} after planning"))),
                None => Ok(None),
            };
            let (from, to) = (zone(from)?, zone(to)?);
            let times = ints(a, "time zone conversion")?;
            map_rows_i64(&[a], n, DataType::Timestamp, |i| convert(times[i], from.as_ref(), to.as_ref()))
        }
        ScalarFunc::Initcap => {
            let s = strings(a)?;
            map_rows_str(&[a], n, |i, buf| {
                initcap(s.get(i), buf);
                true
            })
        }
        _ => return Ok(None),
    }))
}
