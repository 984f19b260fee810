//! Kernels of scalar functions, CAST and LIKE.

use std::cmp::Ordering;

use super::column::{Column, ColumnData, StrData, and_validity, broadcast};
use super::json_path::json_value;
use super::literal_pattern::LiteralPattern;
use crate::Error;
use crate::time::{civil_from_days, date_ms, extract, extract_epoch, format_timestamp, parse_timestamp_ms, truncate};
use crate::{DataType, LikePattern, LikeToken, Scalar, ScalarFunc, TimePart, TrimSide};
pub(crate) use rows::MAX_PAD_CHARS;
use rows::{ints, map_rows_str, round_to, strings};

/// Applies `f` to each valid string row, building a string column.
fn map_str(c: &Column, f: impl Fn(&str, &mut String)) -> Result<Column, Error> {
    let s = strings(c)?;
    let mut out = StrData::with_capacity(s.len(), s.len() * 8);
    for i in 0..s.len() {
        out.push_with(|buf| f(s.get(i), buf));
    }
    Ok(Column::new(DataType::String, ColumnData::Str(out), c.validity.clone()))
}

pub(super) fn eval_function(
    func: &ScalarFunc,
    args: &[std::borrow::Cow<'_, Column>],
    data_type: DataType,
    n: usize,
) -> Result<Column, Error> {
    let arg = |i: usize| {
        args.get(i).map(AsRef::as_ref).ok_or_else(|| Error::Internal(format!("{func:?}: missing argument {i}")))
    };
    let a = arg(0)?;
    match func {
        ScalarFunc::Upper => map_str(a, |s, buf| {
            if s.is_ascii() {
                buf.extend(s.chars().map(|c| c.to_ascii_uppercase()));
            } else {
                buf.push_str(&s.to_uppercase());
            }
        }),
        ScalarFunc::Lower => map_str(a, |s, buf| {
            if s.is_ascii() {
                buf.extend(s.chars().map(|c| c.to_ascii_lowercase()));
            } else {
                buf.push_str(&s.to_lowercase());
            }
        }),
        ScalarFunc::Trim(side) => map_str(a, |s, buf| {
            buf.push_str(match side {
                TrimSide::Both => s.trim_matches(' '),
                TrimSide::Leading => s.trim_start_matches(' '),
                TrimSide::Trailing => s.trim_end_matches(' '),
            });
        }),
        ScalarFunc::Length => {
            let s = strings(a)?;
            let v = s.iter().map(|x| i64::try_from(x.chars().count()).unwrap_or(i64::MAX)).collect();
            Ok(Column::new(DataType::Bigint, ColumnData::Int(v), a.validity.clone()))
        }
        ScalarFunc::Substring => {
            let s = strings(a)?;
            let start = arg(1)?;
            let len = args.get(2).map(AsRef::as_ref);
            let starts = ints(start, "SUBSTRING start")?;
            let lens = len.map(|l| ints(l, "SUBSTRING length")).transpose()?;
            let mut inputs = vec![a, start];
            inputs.extend(len);
            Ok(map_rows_str(&inputs, n, |i, buf| {
                // SQL semantics: 1-based; a start before 1 eats into the length.
                let from = starts[i];
                let end = lens.map(|l| from.saturating_add(l[i].max(0)));
                let skip = usize::try_from(from.max(1) - 1).unwrap_or(usize::MAX);
                let take = end.map(|e| usize::try_from(e.saturating_sub(from.max(1)).max(0)).unwrap_or(usize::MAX));
                let chars = s.get(i).chars().skip(skip);
                match take {
                    Some(t) => buf.extend(chars.take(t)),
                    None => buf.extend(chars),
                }
                true
            }))
        }
        ScalarFunc::Abs | ScalarFunc::Floor | ScalarFunc::Ceil | ScalarFunc::Round => {
            let digits = match (func, args.get(1)) {
                (ScalarFunc::Round, Some(d)) => Some(d.as_ref()),
                _ => None,
            };
            numeric(func, a, digits, data_type)
        }
        ScalarFunc::Extract(part) => {
            let ts = ints(a, "EXTRACT")?;
            let data = if *part == TimePart::Epoch {
                ColumnData::Float(ts.iter().map(|&t| extract_epoch(t)).collect())
            } else {
                ColumnData::Int(ts.iter().map(|&t| extract(*part, t)).collect())
            };
            Ok(Column::new(data_type, data, a.validity.clone()))
        }
        ScalarFunc::SplitIndex { sep, index } => {
            let index = usize::try_from(*index).ok();
            // A one-character separator (q22's `/`) splits with memchr; a
            // longer one needs the substring searcher.
            let mut chars = sep.chars();
            let single = match (chars.next(), chars.next()) {
                (Some(c), None) => Some(c),
                _ => None,
            };
            map_str_opt(a, |s, buf| {
                let piece = match (index, single) {
                    (None, _) => None,
                    _ if sep.is_empty() => None,
                    (Some(i), Some(c)) => s.split(c).nth(i),
                    (Some(i), None) => s.split(sep.as_str()).nth(i),
                };
                piece.map(|p| buf.push_str(p)).is_some()
            })
        }
        ScalarFunc::RegexpExtract { pattern, group } => match compiled(pattern, true)? {
            Matcher::Literal(p) => map_str_opt(a, |s, buf| p.extract(s, *group).map(|m| buf.push_str(m)).is_some()),
            Matcher::Regex(re) => {
                let mut locs = re.capture_locations();
                map_str_opt(a, |s, buf| {
                    let found = re.captures_read(&mut locs, s).is_some();
                    match locs.get(*group).filter(|_| found) {
                        Some((start, end)) => {
                            buf.push_str(&s[start..end]);
                            true
                        }
                        None => false,
                    }
                })
            }
        },
        ScalarFunc::CountChar(c) => {
            let s = strings(a)?;
            let v = s.iter().map(|x| i64::try_from(x.matches(*c).count()).unwrap_or(i64::MAX)).collect();
            Ok(Column::new(DataType::Bigint, ColumnData::Int(v), a.validity.clone()))
        }
        ScalarFunc::DateFormat(pattern) => {
            let ts = ints(a, "DATE_FORMAT")?;
            let tokens = date_format_tokens(pattern);
            let mut out = StrData::with_capacity(n, n * pattern.len());
            for &t in ts.iter().take(n) {
                out.push_with(|buf| format_date(t, &tokens, buf));
            }
            Ok(Column::new(DataType::String, ColumnData::Str(out), a.validity.clone()))
        }
        ScalarFunc::Replace => {
            let (s, from, to) = (strings(a)?, strings(arg(1)?)?, strings(arg(2)?)?);
            // The searcher is rebuilt only where `from` differs from the
            // row before: once a batch for the usual constant.
            let mut finder: Option<memchr::memmem::Finder<'_>> = None;
            Ok(map_rows_str(&[a, arg(1)?, arg(2)?], n, |i, buf| {
                let (text, needle) = (s.get(i), from.get(i));
                if needle.is_empty() {
                    buf.push_str(text);
                    return true;
                }
                let f = match finder.take() {
                    Some(f) if f.needle() == needle.as_bytes() => f,
                    _ => memchr::memmem::Finder::new(needle),
                };
                // A match of valid UTF-8 in valid UTF-8 starts and ends on
                // character boundaries, so the byte slices below are too.
                let mut last = 0;
                for at in f.find_iter(text.as_bytes()) {
                    buf.push_str(&text[last..at]);
                    buf.push_str(to.get(i));
                    last = at + needle.len();
                }
                buf.push_str(&text[last..]);
                finder = Some(f);
                true
            }))
        }
        ScalarFunc::ConcatWs => {
            let parts: Vec<&Column> = args[1..].iter().map(AsRef::as_ref).collect();
            concat_rows(&parts, Some(a), n)
        }
        ScalarFunc::Lpad | ScalarFunc::Rpad => {
            let (s, fill) = (strings(a)?, strings(arg(2)?)?);
            let lens = ints(arg(1)?, "LPAD/RPAD length")?;
            let left = *func == ScalarFunc::Lpad;
            Ok(map_rows_str(&[a, arg(1)?, arg(2)?], n, |i, buf| pad(s.get(i), lens[i], fill.get(i), left, buf)))
        }
        ScalarFunc::Greatest | ScalarFunc::Least => {
            let wanted = if *func == ScalarFunc::Greatest { Ordering::Greater } else { Ordering::Less };
            let cols: Vec<&Column> = args.iter().map(AsRef::as_ref).collect();
            extreme(&cols, wanted, data_type, n)
        }
        ScalarFunc::DateTrunc(unit) => {
            let ts = ints(a, "DATE_TRUNC")?;
            let v = ts.iter().map(|&t| truncate(*unit, t)).collect();
            Ok(Column::new(DataType::Timestamp, ColumnData::Int(v), a.validity.clone()))
        }
        ScalarFunc::ToTimestamp(format) => {
            let s = strings(a)?;
            let tokens = date_format_tokens(format);
            let mut validity = vec![true; n];
            let v = (0..n)
                .map(|i| match parse_date(s.get(i), &tokens).filter(|_| a.is_valid(i)) {
                    Some(t) => t,
                    None => {
                        validity[i] = false;
                        0
                    }
                })
                .collect();
            let validity = if validity.iter().all(|v| *v) { None } else { Some(validity) };
            Ok(Column::new(DataType::Timestamp, ColumnData::Int(v), validity))
        }
        ScalarFunc::JsonValue(path) => map_str_opt(a, |s, buf| json_value(s, path, buf)),
        ScalarFunc::RegexpReplace { pattern, replacement } => {
            let Matcher::Regex(re) = compiled(pattern, false)? else {
                return Err(Error::Internal("REGEXP_REPLACE's pattern compiled as a literal".into()));
            };
            map_str(a, |s, buf| buf.push_str(&re.replace_all(s, replacement.as_str())))
        }
        f if nested::takes(f) => nested::eval(func, &args.iter().map(AsRef::as_ref).collect::<Vec<_>>(), data_type),
        other => {
            let columns: Vec<&Column> = args.iter().map(AsRef::as_ref).collect();
            text_math::eval(other, &columns, data_type, n)?
                .ok_or_else(|| Error::Internal(format!("no kernel for {other:?}")))
        }
    }
}

/// LPAD (`left`) / RPAD of one value: `s` and `fill` repeated to `len`
/// characters, or the first `len` characters of `s` when it is as long;
/// false (NULL) for a negative or too large `len` or an empty `fill`, as
/// Flink (which checks those first, so `LPAD('abc', 1, '')` is NULL too).
fn pad(s: &str, len: i64, fill: &str, left: bool, buf: &mut String) -> bool {
    let Some(len) = usize::try_from(len).ok().filter(|_| len <= MAX_PAD_CHARS && !fill.is_empty()) else {
        return false;
    };
    let count = s.chars().count();
    let kept = if count > len { s.char_indices().nth(len).map_or(s, |(at, _)| &s[..at]) } else { s };
    if !left {
        buf.push_str(kept);
    }
    buf.extend(fill.chars().cycle().take(len.saturating_sub(count)));
    if left {
        buf.push_str(kept);
    }
    true
}

/// GREATEST (`wanted` = `Greater`) or LEAST over arguments of one type:
/// NULL where any argument is, as Flink. Doubles are ordered by
/// `total_cmp`: NaN above every number (PostgreSQL's order), -0 below 0.
fn extreme(args: &[&Column], wanted: Ordering, data_type: DataType, n: usize) -> Result<Column, Error> {
    let mut validity = None;
    for c in args {
        if matches!(c.data, ColumnData::Null(_)) {
            return Ok(broadcast(&Scalar::Null, data_type, n));
        }
        validity = and_validity(validity.as_deref(), c.validity.as_deref(), n);
    }
    let (first, rest) = args.split_first().ok_or_else(|| Error::Internal("GREATEST/LEAST of nothing".into()))?;
    let data = match &first.data {
        ColumnData::Int(_) => {
            let mut best = ints(first, "GREATEST/LEAST")?.to_vec();
            for c in rest {
                for (b, &x) in best.iter_mut().zip(ints(c, "GREATEST/LEAST")?) {
                    if x.cmp(b) == wanted {
                        *b = x;
                    }
                }
            }
            ColumnData::Int(best)
        }
        // Decimals cast to one type when planned: one scale, so comparing
        // unscaled values is comparing values.
        ColumnData::Wide(_) => ColumnData::Wide(
            (0..n)
                .map(|i| {
                    args.iter()
                        .map(|c| c.decimal(i))
                        .reduce(|b, x| if x.cmp(&b) == wanted { x } else { b })
                        .unwrap_or_default()
                })
                .collect(),
        ),
        ColumnData::Float(v) => {
            let mut best = v.clone();
            for c in rest {
                let ColumnData::Float(v) = &c.data else {
                    return Err(Error::Internal(format!("GREATEST/LEAST: expected doubles, got {}", c.data_type)));
                };
                for (b, &x) in best.iter_mut().zip(v) {
                    if x.total_cmp(b) == wanted {
                        *b = x;
                    }
                }
            }
            ColumnData::Float(best)
        }
        ColumnData::Str(first) => {
            let rest = rest.iter().map(|c| strings(c)).collect::<Result<Vec<_>, _>>()?;
            let mut out = StrData::with_capacity(n, n * 8);
            for i in 0..n {
                let mut best = first.get(i);
                for s in &rest {
                    let x = s.get(i);
                    if x.cmp(best) == wanted {
                        best = x;
                    }
                }
                out.push(best);
            }
            ColumnData::Str(out)
        }
        _ => return Err(Error::Internal(format!("GREATEST/LEAST of {}", first.data_type))),
    };
    Ok(Column::new(data_type, data, validity))
}

/// CONCAT (no `sep`) and CONCAT_WS: each row's non-NULL `parts` in order,
/// with `sep` between them; NULL where `sep` is given and NULL. Parts of
/// the NULL type are NULL throughout.
pub(super) fn concat_rows(parts: &[&Column], sep: Option<&Column>, n: usize) -> Result<Column, Error> {
    let strs: Vec<Option<&StrData>> = parts.iter().map(|c| c.str_data()).collect();
    let seps = sep.map(strings).transpose()?;
    let mut out = StrData::with_capacity(n, n * 16);
    for row in 0..n {
        let sep_here = seps.map(|s| s.get(row)).unwrap_or_default();
        out.push_with(|buf| {
            if sep.is_some_and(|c| !c.is_valid(row)) {
                return;
            }
            let mut first = true;
            for (c, s) in parts.iter().zip(&strs) {
                if let (true, Some(s)) = (c.is_valid(row), s) {
                    if !first {
                        buf.push_str(sep_here);
                    }
                    first = false;
                    buf.push_str(s.get(row));
                }
            }
        });
    }
    Ok(Column::new(DataType::String, ColumnData::Str(out), sep.and_then(|c| c.validity.clone())))
}

/// A compiled REGEXP_EXTRACT pattern: the direct matcher where the
/// pattern is literal-anchored (`literal_pattern.rs`), else the regex crate.
#[derive(Clone)]
enum Matcher {
    Literal(std::rc::Rc<LiteralPattern>),
    Regex(regex::Regex),
}

/// The compiled form of a REGEXP_EXTRACT pattern (`literal`: a literal
/// matcher where one serves) or of a REGEXP_REPLACE one (always the regex
/// crate's, whose replacement expands `$1`), compiled once per thread.
///
/// The pattern is a constant of the query, but compiling it is tens of
/// microseconds (its prefilter, DFAs and one-pass matcher): once per batch,
/// that was a tenth of q21's time. Each core is one thread, so the cache
/// needs no lock. A plan names a handful of patterns, so the cache is only
/// bounded against a process that plans many queries (tests, `validate`).
fn compiled(pattern: &str, literal: bool) -> Result<Matcher, Error> {
    use std::cell::RefCell;
    use std::collections::HashMap;
    const MAX_PATTERNS: usize = 64;
    thread_local! {
        static COMPILED: RefCell<HashMap<(bool, String), Matcher>> = RefCell::new(HashMap::new());
    }
    COMPILED.with(|cache| {
        let key = (literal, pattern.to_owned());
        if let Some(m) = cache.borrow().get(&key) {
            return Ok(m.clone());
        }
        let m = match LiteralPattern::new(pattern).filter(|_| literal) {
            Some(p) => Matcher::Literal(std::rc::Rc::new(p)),
            None => Matcher::Regex(regex::Regex::new(pattern).map_err(|e| Error::Internal(format!("pattern: {e}")))?),
        };
        let mut cache = cache.borrow_mut();
        if cache.len() >= MAX_PATTERNS {
            cache.clear();
        }
        cache.insert(key, m.clone());
        Ok(m)
    })
}

/// [`map_str`] for a function that may be NULL: `f` returns false for
/// NULL.
fn map_str_opt(c: &Column, mut f: impl FnMut(&str, &mut String) -> bool) -> Result<Column, Error> {
    let s = strings(c)?;
    Ok(map_rows_str(&[c], s.len(), |i, buf| f(s.get(i), buf)))
}

/// A piece of a DATE_FORMAT pattern.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum DateToken<'a> {
    Year,
    Month,
    Day,
    Hour,
    Minute,
    Second,
    Millis,
    Literal(&'a str),
}

/// The fields DATE_FORMAT knows, longest first; anything else is literal
/// text, as are quoted runs (`'T'`).
fn date_format_tokens(pattern: &str) -> Vec<DateToken<'_>> {
    const FIELDS: [(&str, DateToken<'static>); 7] = [
        ("yyyy", DateToken::Year),
        ("SSS", DateToken::Millis),
        ("MM", DateToken::Month),
        ("dd", DateToken::Day),
        ("HH", DateToken::Hour),
        ("mm", DateToken::Minute),
        ("ss", DateToken::Second),
    ];
    let mut out = Vec::new();
    let mut rest = pattern;
    'outer: while !rest.is_empty() {
        if let Some(quoted) = rest.strip_prefix('\'') {
            let end = quoted.find('\'').unwrap_or(quoted.len());
            out.push(DateToken::Literal(&quoted[..end]));
            rest = quoted.get(end + 1..).unwrap_or("");
            continue;
        }
        for (text, token) in &FIELDS {
            if let Some(after) = rest.strip_prefix(text) {
                out.push(*token);
                rest = after;
                continue 'outer;
            }
        }
        let len = rest.chars().next().map_or(1, char::len_utf8);
        out.push(DateToken::Literal(&rest[..len]));
        rest = &rest[len..];
    }
    out
}

fn format_date(ms: i64, tokens: &[DateToken<'_>], buf: &mut String) {
    let days = ms.div_euclid(86_400_000);
    let in_day = ms.rem_euclid(86_400_000);
    let (y, m, d) = civil_from_days(days);
    for t in tokens {
        let (v, width) = match t {
            DateToken::Year => (y, 4),
            DateToken::Month => (i64::from(m), 2),
            DateToken::Day => (i64::from(d), 2),
            DateToken::Hour => (in_day / 3_600_000, 2),
            DateToken::Minute => (in_day / 60_000 % 60, 2),
            DateToken::Second => (in_day / 1000 % 60, 2),
            DateToken::Millis => (in_day % 1000, 3),
            DateToken::Literal(l) => {
                buf.push_str(l);
                continue;
            }
        };
        if v < 0 {
            buf.push('-');
        }
        let mut digits = itoa::Buffer::new();
        let digits = digits.format(v.unsigned_abs());
        for _ in digits.len()..width {
            buf.push('0');
        }
        buf.push_str(digits);
    }
}

/// TO_TIMESTAMP(s, format): `s` read with DATE_FORMAT's `tokens`, each
/// field its fixed number of digits (`yyyy` four, `SSS` three, the others
/// two), literal text as written, and nothing left over. Fields the format
/// lacks are those of 1970-01-01 00:00:00.000. `None` where `s` does not
/// match or names no real date or time.
fn parse_date(s: &str, tokens: &[DateToken<'_>]) -> Option<i64> {
    let mut rest = s.as_bytes();
    // year, month, day, hour, minute, second, millisecond
    let mut fields = [1970, 1, 1, 0, 0, 0, 0];
    for t in tokens {
        let (slot, width) = match t {
            DateToken::Year => (0, 4),
            DateToken::Month => (1, 2),
            DateToken::Day => (2, 2),
            DateToken::Hour => (3, 2),
            DateToken::Minute => (4, 2),
            DateToken::Second => (5, 2),
            DateToken::Millis => (6, 3),
            DateToken::Literal(l) => {
                rest = rest.strip_prefix(l.as_bytes())?;
                continue;
            }
        };
        let (digits, after) = rest.split_at_checked(width)?;
        if !digits.iter().all(u8::is_ascii_digit) {
            return None;
        }
        fields[slot] = digits.iter().fold(0, |acc, c| acc * 10 + i64::from(c - b'0'));
        rest = after;
    }
    let [y, month, d, h, mi, sec, ms] = fields;
    if !rest.is_empty() || h > 23 || mi > 59 || sec > 59 {
        return None;
    }
    Some(date_ms(y, month, d)? + h * 3_600_000 + mi * 60_000 + sec * 1000 + ms)
}

fn numeric(func: &ScalarFunc, a: &Column, digits: Option<&Column>, data_type: DataType) -> Result<Column, Error> {
    // Rows whose result is not a bigint: NULL, as an overflowing SUM is.
    let mut overflowed = Vec::new();
    let data = match &a.data {
        ColumnData::Int(_) | ColumnData::Wide(_) if matches!(a.data_type, DataType::Decimal(..)) => {
            let (DataType::Decimal(_, from), DataType::Decimal(p, to)) = (a.data_type, data_type) else {
                return Err(Error::Internal(format!("{func:?} of {} as {data_type}", a.data_type)));
            };
            let ds = digits.map(|d| ints(d, "ROUND digits")).transpose()?;
            let rows = (0..a.len())
                .map(|i| {
                    let x = a.decimal(i);
                    match func {
                        ScalarFunc::Abs => Some(x.abs()),
                        ScalarFunc::Floor => Some(crate::decimal::floor_or_ceil(x, from, false)),
                        ScalarFunc::Ceil => Some(crate::decimal::floor_or_ceil(x, from, true)),
                        _ => crate::decimal::round(x, from, ds.map_or(0, |d| d[i]), to, p),
                    }
                })
                .collect();
            return Ok(Column::decimals(data_type, rows, a.validity.clone()));
        }
        ColumnData::Int(v) => match (func, digits) {
            (ScalarFunc::Abs, _) => ColumnData::Int(
                v.iter()
                    .enumerate()
                    .map(|(i, x)| {
                        x.checked_abs().unwrap_or_else(|| {
                            // |i64::MIN| = i64::MAX + 1.
                            overflowed.push(i);
                            0
                        })
                    })
                    .collect(),
            ),
            (ScalarFunc::Round, Some(d)) => {
                // ROUND(int, -k) rounds to tens, hundreds...
                let ds = ints(d, "ROUND digits")?;
                ColumnData::Int(
                    v.iter()
                        .zip(ds)
                        .map(|(x, d)| {
                            if *d >= 0 {
                                *x
                            } else {
                                // Half away from zero, on the magnitude.
                                let p = 10i128.pow(u32::try_from(d.unsigned_abs()).unwrap_or(18).min(18));
                                let a = i128::from(*x).abs();
                                let rounded = (a + p / 2) / p * p;
                                let signed = if *x < 0 { -rounded } else { rounded };
                                i64::try_from(signed).unwrap_or(if *x < 0 { i64::MIN } else { i64::MAX })
                            }
                        })
                        .collect(),
                )
            }
            _ => ColumnData::Int(v.clone()),
        },
        ColumnData::Float(v) => ColumnData::Float(match (func, digits) {
            (ScalarFunc::Abs, _) => v.iter().map(|x| x.abs()).collect(),
            (ScalarFunc::Floor, _) => v.iter().map(|x| x.floor()).collect(),
            (ScalarFunc::Ceil, _) => v.iter().map(|x| x.ceil()).collect(),
            (ScalarFunc::Round, None) => v.iter().map(|x| x.round()).collect(),
            (ScalarFunc::Round, Some(d)) => {
                let ds = ints(d, "ROUND digits")?;
                v.iter().zip(ds).map(|(x, d)| round_to(*x, *d)).collect()
            }
            _ => v.clone(),
        }),
        ColumnData::Null(n) => ColumnData::Null(*n),
        _ => return Err(Error::Internal(format!("{func:?} of {}", a.data_type))),
    };
    let mut validity = match digits {
        Some(d) => and_validity(a.validity.as_deref(), d.validity.as_deref(), a.len()),
        None => a.validity.clone(),
    };
    if !overflowed.is_empty() {
        let valid = validity.get_or_insert_with(|| vec![true; a.len()]);
        for i in overflowed {
            valid[i] = false;
        }
    }
    Ok(Column::new(data_type, data, validity))
}

/// CAST of a whole column. Values that do not convert (e.g. 'abc' to bigint)
/// become NULL rather than failing the record.
pub(super) fn cast_column(c: &Column, to: DataType) -> Result<Column, Error> {
    let n = c.len();
    if c.data_type == to {
        return Ok(c.clone());
    }
    if c.data_type.is_nested() || to.is_nested() {
        return nested::cast(c, to, cast_column);
    }
    if matches!(c.data_type, DataType::Decimal(..)) || matches!(to, DataType::Decimal(..)) {
        return cast_decimal(c, to);
    }
    let mut validity = c.validity.clone();
    let invalid = |i: usize, validity: &mut Option<Vec<bool>>| {
        validity.get_or_insert_with(|| vec![true; n])[i] = false;
    };
    let data = match (&c.data, to) {
        (ColumnData::Null(_), _) => return Ok(broadcast(&Scalar::Null, to, n)),
        // Bigint ↔ timestamp share storage (epoch milliseconds).
        (ColumnData::Int(v), DataType::Bigint | DataType::Timestamp) => ColumnData::Int(v.clone()),
        #[allow(clippy::cast_precision_loss)]
        (ColumnData::Int(v), DataType::Double) => ColumnData::Float(v.iter().map(|x| *x as f64).collect()),
        (ColumnData::Int(v), DataType::Boolean) => ColumnData::Bool(v.iter().map(|x| *x != 0).collect()),
        (ColumnData::Float(v), DataType::Bigint | DataType::Timestamp) => {
            let mut out = Vec::with_capacity(n);
            for (i, x) in v.iter().enumerate() {
                // Ties to even, as PostgreSQL and DuckDB cast (2.5 → 2).
                let r = x.round_ties_even();
                #[allow(clippy::cast_precision_loss, clippy::cast_possible_truncation)]
                if r.is_finite() && r >= i64::MIN as f64 && r < i64::MAX as f64 {
                    out.push(r as i64);
                } else {
                    out.push(0);
                    invalid(i, &mut validity);
                }
            }
            ColumnData::Int(out)
        }
        (ColumnData::Float(v), DataType::Boolean) => ColumnData::Bool(v.iter().map(|x| *x != 0.0).collect()),
        (ColumnData::Bool(v), DataType::Bigint) => ColumnData::Int(v.iter().map(|x| i64::from(*x)).collect()),
        (ColumnData::Bool(v), DataType::Double) => {
            ColumnData::Float(v.iter().map(|x| f64::from(u8::from(*x))).collect())
        }
        (ColumnData::Str(s), DataType::Bigint) => {
            let mut out = Vec::with_capacity(n);
            for i in 0..n {
                match s.get(i).trim().parse::<i64>() {
                    Ok(x) => out.push(x),
                    Err(_) => {
                        out.push(0);
                        invalid(i, &mut validity);
                    }
                }
            }
            ColumnData::Int(out)
        }
        (ColumnData::Str(s), DataType::Double) => {
            let mut out = Vec::with_capacity(n);
            for i in 0..n {
                match s.get(i).trim().parse::<f64>() {
                    Ok(x) => out.push(x),
                    Err(_) => {
                        out.push(0.0);
                        invalid(i, &mut validity);
                    }
                }
            }
            ColumnData::Float(out)
        }
        (ColumnData::Str(s), DataType::Boolean) => {
            let mut out = Vec::with_capacity(n);
            for i in 0..n {
                match s.get(i).trim().to_ascii_lowercase().as_str() {
                    "true" | "t" | "yes" | "1" => out.push(true),
                    "false" | "f" | "no" | "0" => out.push(false),
                    _ => {
                        out.push(false);
                        invalid(i, &mut validity);
                    }
                }
            }
            ColumnData::Bool(out)
        }
        (ColumnData::Str(s), DataType::Timestamp) => {
            let mut out = Vec::with_capacity(n);
            for i in 0..n {
                match parse_timestamp_ms(s.get(i)) {
                    Some(x) => out.push(x),
                    None => {
                        out.push(0);
                        invalid(i, &mut validity);
                    }
                }
            }
            ColumnData::Int(out)
        }
        (_, DataType::String) => {
            let mut out = StrData::with_capacity(n, n * 12);
            let mut scratch = Vec::with_capacity(32);
            for i in 0..n {
                scratch.clear();
                match &c.data {
                    ColumnData::Int(v) if c.data_type == DataType::Timestamp => format_timestamp(v[i], &mut scratch),
                    ColumnData::Int(v) => scratch.extend_from_slice(itoa::Buffer::new().format(v[i]).as_bytes()),
                    ColumnData::Float(v) if v[i].is_finite() => {
                        scratch.extend_from_slice(ryu::Buffer::new().format_finite(v[i]).as_bytes())
                    }
                    ColumnData::Float(v) => scratch.extend_from_slice(if v[i].is_nan() {
                        b"NaN"
                    } else if v[i] > 0.0 {
                        b"Infinity"
                    } else {
                        b"-Infinity"
                    }),
                    ColumnData::Bool(v) => scratch.extend_from_slice(if v[i] { b"true" } else { b"false" }),
                    _ => {}
                }
                out.push(std::str::from_utf8(&scratch).unwrap_or_default());
            }
            ColumnData::Str(out)
        }
        (_, to) => return Err(Error::Internal(format!("no cast from {} to {to}", c.data_type))),
    };
    Ok(Column::new(to, data, validity))
}

/// CAST to or from a decimal. Digits dropped are rounded half away from
/// zero; a value that does not fit (or text that is no number) is NULL.
fn cast_decimal(c: &Column, to: DataType) -> Result<Column, Error> {
    use crate::decimal;
    let n = c.len();
    // A decimal source's unscaled values, whichever its storage.
    let unscaled = || (0..n).map(|i| c.decimal(i));
    let rows: Vec<Option<i128>> = match (&c.data, c.data_type, to) {
        (ColumnData::Null(_), _, _) => return Ok(broadcast(&Scalar::Null, to, n)),
        (ColumnData::Int(_) | ColumnData::Wide(_), DataType::Decimal(_, from), DataType::Decimal(p, s)) => {
            unscaled().map(|x| decimal::rescale(x, from, s, p)).collect()
        }
        (ColumnData::Int(v), DataType::Bigint, DataType::Decimal(p, s)) => {
            v.iter().map(|x| decimal::rescale(i128::from(*x), 0, s, p)).collect()
        }
        (ColumnData::Float(v), _, DataType::Decimal(p, s)) => v.iter().map(|x| decimal::from_f64(*x, p, s)).collect(),
        (ColumnData::Str(t), _, DataType::Decimal(p, s)) => t.iter().map(|x| decimal::parse(x, p, s)).collect(),
        (ColumnData::Bool(v), _, DataType::Decimal(p, s)) => {
            v.iter().map(|x| decimal::rescale(i128::from(*x), 0, s, p)).collect()
        }
        // PostgreSQL's numeric → integer rounds half away from zero.
        (_, DataType::Decimal(_, from), DataType::Bigint) => {
            let rows: Vec<Option<i64>> =
                unscaled().map(|x| decimal::rescale(x, from, 0, 19).and_then(|v| i64::try_from(v).ok())).collect();
            let mut validity = c.validity.clone();
            let values = rows
                .into_iter()
                .enumerate()
                .map(|(i, r)| {
                    r.unwrap_or_else(|| {
                        validity.get_or_insert_with(|| vec![true; n])[i] = false;
                        0
                    })
                })
                .collect();
            return Ok(Column::new(to, ColumnData::Int(values), validity));
        }
        (_, DataType::Decimal(_, from), DataType::Double) => {
            return Ok(Column::new(
                to,
                ColumnData::Float(unscaled().map(|x| decimal::to_f64(x, from)).collect()),
                c.validity.clone(),
            ));
        }
        (_, DataType::Decimal(..), DataType::Boolean) => {
            return Ok(Column::new(to, ColumnData::Bool(unscaled().map(|x| x != 0).collect()), c.validity.clone()));
        }
        (_, DataType::Decimal(_, from), DataType::String) => {
            let mut out = StrData::with_capacity(n, n * 12);
            let mut scratch = Vec::with_capacity(24);
            for x in unscaled() {
                scratch.clear();
                decimal::write(x, from, &mut scratch);
                out.push(std::str::from_utf8(&scratch).unwrap_or_default());
            }
            return Ok(Column::new(to, ColumnData::Str(out), c.validity.clone()));
        }
        (_, from, to) => return Err(Error::Internal(format!("no cast from {from} to {to}"))),
    };
    Ok(Column::decimals(to, rows, c.validity.clone()))
}

/// LIKE / ILIKE over a string column (ILIKE patterns are lower-cased at plan time).
pub(super) fn like_column(
    c: &Column,
    pattern: &LikePattern,
    negated: bool,
    case_insensitive: bool,
) -> Result<Column, Error> {
    let s = match &c.data {
        ColumnData::Null(n) => return Ok(broadcast(&Scalar::Null, DataType::Boolean, *n)),
        _ => strings(c)?,
    };
    let mut lowered = String::new();
    let values = s
        .iter()
        .map(|text| {
            let text = if case_insensitive {
                lowered.clear();
                lowered.push_str(&text.to_lowercase());
                lowered.as_str()
            } else {
                text
            };
            like(text, pattern) != negated
        })
        .collect();
    Ok(Column::new(DataType::Boolean, ColumnData::Bool(values), c.validity.clone()))
}

fn like(text: &str, pattern: &LikePattern) -> bool {
    match pattern {
        LikePattern::Exact(p) => text == p,
        LikePattern::Prefix(p) => text.starts_with(p.as_str()),
        LikePattern::Suffix(p) => text.ends_with(p.as_str()),
        LikePattern::Contains(p) => text.contains(p.as_str()),
        LikePattern::General(tokens) => like_general(text, tokens),
    }
}

/// Backtracking matcher over characters; `%` runs are collapsed at plan
/// time, so it backtracks only to the latest `%`.
fn like_general(text: &str, tokens: &[LikeToken]) -> bool {
    let mut t = 0usize; // byte position in text
    let mut k = 0usize; // token index
    let mut star: Option<(usize, usize)> = None; // (token after %, text position)
    loop {
        if k < tokens.len() {
            match &tokens[k] {
                LikeToken::AnyRun => {
                    star = Some((k + 1, t));
                    k += 1;
                    continue;
                }
                LikeToken::AnyOne => {
                    if let Some(c) = text[t..].chars().next() {
                        t += c.len_utf8();
                        k += 1;
                        continue;
                    }
                }
                LikeToken::Literal(lit) => {
                    if text[t..].starts_with(lit.as_str()) {
                        t += lit.len();
                        k += 1;
                        continue;
                    }
                }
            }
        } else if t == text.len() {
            return true;
        }
        // Mismatch: let the last % absorb one more character.
        match star {
            Some((after, pos)) => match text[pos..].chars().next() {
                Some(c) => {
                    let next = pos + c.len_utf8();
                    star = Some((after, next));
                    k = after;
                    t = next;
                }
                None => return false,
            },
            None => return false,
        }
    }
}

mod nested;
mod rows;
mod text_math;

#[cfg(test)]
mod tests;
