//! Timestamps as epoch milliseconds (UTC): parsing, formatting, and the
//! calendar arithmetic EXTRACT needs. Hand-written because it sits on the
//! decode and encode hot paths: no allocation, no time-zone database.

use crate::TimePart;

const MS_PER_DAY: i64 = 86_400_000;

/// The largest timestamp magnitude a record may carry: ±100,000,000 days
/// from the epoch (ECMAScript's `Date` range, about ±273,790 years). Event
/// times outside it are dead-lettered at decode, so window arithmetic
/// (start, end, hops; window sizes are bounded to 10^15 ms) cannot
/// overflow.
pub const MAX_TIMESTAMP_MS: i64 = 100_000_000 * MS_PER_DAY;

/// Days since 1970-01-01 of a proleptic Gregorian date (H. Hinnant's algorithm).
pub fn days_from_civil(y: i64, m: u32, d: u32) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = i64::from((m + 9) % 12);
    let doy = (153 * mp + 2) / 5 + i64::from(d) - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// (year, month, day) of a day number since 1970-01-01.
pub fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = u32::try_from(doy - (153 * mp + 2) / 5 + 1).unwrap_or(1);
    let m = u32::try_from(if mp < 10 { mp + 3 } else { mp - 9 }).unwrap_or(1);
    (if m <= 2 { y + 1 } else { y }, m, d)
}

/// Appends `ms` as RFC 3339 with milliseconds: `2024-01-15T09:30:00.000Z`.
pub fn format_timestamp(ms: i64, out: &mut Vec<u8>) {
    let days = ms.div_euclid(MS_PER_DAY);
    let in_day = ms.rem_euclid(MS_PER_DAY);
    let (y, m, d) = civil_from_days(days);
    let (h, rest) = (in_day / 3_600_000, in_day % 3_600_000);
    let (mi, rest) = (rest / 60_000, rest % 60_000);
    let (s, milli) = (rest / 1000, rest % 1000);
    if (0..=9999).contains(&y) {
        push_digits(out, y, 4);
    } else {
        let mut buf = itoa::Buffer::new();
        out.extend_from_slice(buf.format(y).as_bytes());
    }
    out.push(b'-');
    push_digits(out, i64::from(m), 2);
    out.push(b'-');
    push_digits(out, i64::from(d), 2);
    out.push(b'T');
    push_digits(out, h, 2);
    out.push(b':');
    push_digits(out, mi, 2);
    out.push(b':');
    push_digits(out, s, 2);
    out.push(b'.');
    push_digits(out, milli, 3);
    out.push(b'Z');
}

fn push_digits(out: &mut Vec<u8>, mut v: i64, width: usize) {
    let start = out.len();
    for _ in 0..width {
        out.push(b'0');
    }
    let mut i = out.len();
    while v > 0 && i > start {
        i -= 1;
        // v % 10 is in 0..10, so the cast is lossless.
        out[i] = b'0' + u8::try_from(v % 10).unwrap_or(0);
        v /= 10;
    }
}

/// Parses `YYYY-MM-DD`, `YYYY-MM-DD[T ]HH:MM[:SS[.fff…]]` with an optional
/// `Z` or `±HH[:MM]` offset (UTC when absent).
pub fn parse_timestamp_ms(s: &str) -> Option<i64> {
    let b = s.trim().as_bytes();
    let num = |r: std::ops::Range<usize>| -> Option<i64> {
        let part = b.get(r)?;
        if part.is_empty() || !part.iter().all(u8::is_ascii_digit) {
            return None;
        }
        part.iter().try_fold(0i64, |acc, &c| acc.checked_mul(10)?.checked_add(i64::from(c - b'0')))
    };
    if b.len() < 10 || b[4] != b'-' || b[7] != b'-' {
        return None;
    }
    let mut ms = date_ms(num(0..4)?, num(5..7)?, num(8..10)?)?;
    let mut i = 10;
    if i == b.len() {
        return Some(ms);
    }
    if b[i] != b'T' && b[i] != b't' && b[i] != b' ' {
        return None;
    }
    i += 1;
    let (h, mi) = (num(i..i + 2)?, num(i + 3..i + 5)?);
    if b.get(i + 2) != Some(&b':') || h > 23 || mi > 59 {
        return None;
    }
    ms += h * 3_600_000 + mi * 60_000;
    i += 5;
    if b.get(i) == Some(&b':') {
        let sec = num(i + 1..i + 3)?;
        if sec > 60 {
            return None;
        }
        ms += sec * 1000;
        i += 3;
        if b.get(i) == Some(&b'.') {
            i += 1;
            let start = i;
            while i < b.len() && b[i].is_ascii_digit() {
                i += 1;
            }
            if i == start {
                return None;
            }
            // Milliseconds from the first three fractional digits.
            let digits = &b[start..i];
            ms += (0..3).fold(0, |acc, k| acc * 10 + digits.get(k).map_or(0, |c| i64::from(c - b'0')));
        }
    }
    match b.get(i) {
        None => Some(ms),
        Some(b'Z' | b'z') if i + 1 == b.len() => Some(ms),
        Some(&sign @ (b'+' | b'-')) => {
            let oh = num(i + 1..i + 3)?;
            let om = match b.get(i + 3) {
                None => 0,
                Some(b':') => num(i + 4..i + 6)?,
                Some(_) => num(i + 3..i + 5)?,
            };
            let offset = (oh * 60 + om) * 60_000;
            Some(if sign == b'+' { ms - offset } else { ms + offset })
        }
        _ => None,
    }
}

/// Midnight (UTC) of day `d` of month `m` of year `y`, in epoch
/// milliseconds; `None` for a date that does not exist (2024-02-30).
pub(crate) fn date_ms(y: i64, m: i64, d: i64) -> Option<i64> {
    let (m, d) = (u32::try_from(m).ok()?, u32::try_from(d).ok()?);
    if !(1..=12).contains(&m) || d < 1 || d > days_in_month(y, m) {
        return None;
    }
    days_from_civil(y, m, d).checked_mul(MS_PER_DAY)
}

fn is_leap(y: i64) -> bool {
    (y % 4 == 0 && y % 100 != 0) || y % 400 == 0
}

fn days_in_month(y: i64, m: u32) -> u32 {
    match m {
        1 | 3 | 5 | 7 | 8 | 10 | 12 => 31,
        4 | 6 | 9 | 11 => 30,
        _ if is_leap(y) => 29,
        _ => 28,
    }
}

/// EXTRACT(part FROM ts) as bigint (EPOCH is handled by [`extract_epoch`]).
pub fn extract(part: TimePart, ms: i64) -> i64 {
    let days = ms.div_euclid(MS_PER_DAY);
    let in_day = ms.rem_euclid(MS_PER_DAY);
    match part {
        TimePart::Hour => in_day / 3_600_000,
        TimePart::Minute => in_day % 3_600_000 / 60_000,
        TimePart::Second => in_day % 60_000 / 1000,
        TimePart::Millisecond => in_day % 60_000,
        // 1970-01-01 was a Thursday; 0 = Sunday as in PostgreSQL and DuckDB.
        TimePart::DayOfWeek => (days + 4).rem_euclid(7),
        TimePart::Epoch => ms.div_euclid(1000),
        TimePart::Year | TimePart::Quarter | TimePart::Month | TimePart::Day | TimePart::DayOfYear | TimePart::Week => {
            let (y, m, d) = civil_from_days(days);
            match part {
                TimePart::Year => y,
                TimePart::Quarter => i64::from((m - 1) / 3 + 1),
                TimePart::Month => i64::from(m),
                TimePart::Day => i64::from(d),
                TimePart::DayOfYear => days - days_from_civil(y, 1, 1) + 1,
                _ => iso_week(days),
            }
        }
    }
}

/// DATE_TRUNC(unit, ts): the start (UTC) of the `unit` that holds `ms`.
/// Units up to a day are whole multiples of their length since the epoch;
/// a week starts on Monday (ISO), a quarter in January, April, July or
/// October. Parts that are not units (day of week, epoch...) leave `ms` as
/// it is: the planner does not let them through. Saturates at the ends of
/// the `i64` range rather than wrapping.
pub fn truncate(unit: TimePart, ms: i64) -> i64 {
    let floor = |len: i64| ms.saturating_sub(ms.rem_euclid(len));
    let days = ms.div_euclid(MS_PER_DAY);
    match unit {
        TimePart::Second => floor(1000),
        TimePart::Minute => floor(60_000),
        TimePart::Hour => floor(3_600_000),
        TimePart::Day => floor(MS_PER_DAY),
        TimePart::Week => (days - (days + 3).rem_euclid(7)).saturating_mul(MS_PER_DAY),
        TimePart::Month | TimePart::Quarter | TimePart::Year => {
            let (y, m, _) = civil_from_days(days);
            let first = match unit {
                TimePart::Month => m,
                TimePart::Quarter => (m - 1) / 3 * 3 + 1,
                _ => 1,
            };
            days_from_civil(y, first, 1).saturating_mul(MS_PER_DAY)
        }
        TimePart::Millisecond | TimePart::DayOfWeek | TimePart::DayOfYear | TimePart::Epoch => ms,
    }
}

/// TIMESTAMPADD(unit, n, ts): `ms` moved by `n` units (the units from
/// `Millisecond` to `Year`). Months, quarters and years keep the time of
/// day and the day of the month, or take the month's last day where it
/// has fewer. `None` where the result leaves what a record's timestamp may
/// hold ([`MAX_TIMESTAMP_MS`]), and for parts that are not units.
pub fn add_units(unit: TimePart, n: i64, ms: i64) -> Option<i64> {
    // Past ±MAX_TIMESTAMP_MS anyway; keeps the calendar arithmetic small.
    const MAX_YEAR: i64 = 300_000;
    let fixed = |len: i64| n.checked_mul(len).and_then(|d| ms.checked_add(d));
    let moved = match unit {
        TimePart::Millisecond => fixed(1)?,
        TimePart::Second => fixed(1000)?,
        TimePart::Minute => fixed(60_000)?,
        TimePart::Hour => fixed(3_600_000)?,
        TimePart::Day => fixed(MS_PER_DAY)?,
        TimePart::Week => fixed(7 * MS_PER_DAY)?,
        TimePart::Month | TimePart::Quarter | TimePart::Year => {
            let per = match unit {
                TimePart::Month => 1,
                TimePart::Quarter => 3,
                _ => 12,
            };
            let (days, in_day) = (ms.div_euclid(MS_PER_DAY), ms.rem_euclid(MS_PER_DAY));
            let (y, m, d) = civil_from_days(days);
            let month = y.checked_mul(12)?.checked_add(i64::from(m) - 1)?.checked_add(n.checked_mul(per)?)?;
            let year = month.div_euclid(12);
            if year.abs() > MAX_YEAR {
                return None;
            }
            let m = u32::try_from(month.rem_euclid(12)).ok()? + 1;
            days_from_civil(year, m, d.min(days_in_month(year, m))).checked_mul(MS_PER_DAY)?.checked_add(in_day)?
        }
        TimePart::DayOfWeek | TimePart::DayOfYear | TimePart::Epoch => return None,
    };
    (-MAX_TIMESTAMP_MS..=MAX_TIMESTAMP_MS).contains(&moved).then_some(moved)
}

/// Whole `unit`s from `from` to `to`, toward zero (TIMESTAMPDIFF). A
/// month, quarter or year counts as [`add_units`] moves: the largest `n`
/// with `add_units(unit, n, from) <= to`, so Jan 31 to Feb 29 is one
/// month and 10:00 on Jan 31 to 09:00 on Feb 29 none (DuckDB's `date_sub`
/// counts so). `None` for a unit without a length, or a timestamp past
/// ±[`MAX_TIMESTAMP_MS`].
pub fn diff_units(unit: TimePart, from: i64, to: i64) -> Option<i64> {
    let range = -MAX_TIMESTAMP_MS..=MAX_TIMESTAMP_MS;
    if !range.contains(&from) || !range.contains(&to) {
        return None;
    }
    let fixed = |len: i64| Some((to - from) / len);
    match unit {
        TimePart::Millisecond => fixed(1),
        TimePart::Second => fixed(1000),
        TimePart::Minute => fixed(60_000),
        TimePart::Hour => fixed(3_600_000),
        TimePart::Day => fixed(MS_PER_DAY),
        TimePart::Week => fixed(7 * MS_PER_DAY),
        TimePart::Month | TimePart::Quarter | TimePart::Year if to < from => diff_units(unit, to, from).map(|n| -n),
        TimePart::Month | TimePart::Quarter | TimePart::Year => {
            let per = match unit {
                TimePart::Month => 1,
                TimePart::Quarter => 3,
                _ => 12,
            };
            let month = |ms: i64| {
                let (y, m, _) = civil_from_days(ms.div_euclid(MS_PER_DAY));
                y * 12 + i64::from(m)
            };
            // At most one too many: back off while the move overshoots.
            let mut n = (month(to) - month(from)) / per;
            while n > 0 && add_units(unit, n, from).is_none_or(|moved| moved > to) {
                n -= 1;
            }
            Some(n)
        }
        TimePart::DayOfWeek | TimePart::DayOfYear | TimePart::Epoch => None,
    }
}

/// Seconds since the epoch, with the fraction.
pub fn extract_epoch(ms: i64) -> f64 {
    #[allow(clippy::cast_precision_loss)]
    let v = ms as f64 / 1000.0;
    v
}

/// ISO 8601 week number (weeks start on Monday; week 1 holds January 4th).
fn iso_week(days: i64) -> i64 {
    let weekday = (days + 3).rem_euclid(7); // 0 = Monday
    let thursday = days - weekday + 3;
    let (y, _, _) = civil_from_days(thursday);
    (thursday - days_from_civil(y, 1, 1)) / 7 + 1
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fmt(ms: i64) -> String {
        let mut v = Vec::new();
        format_timestamp(ms, &mut v);
        String::from_utf8(v).unwrap()
    }

    /// Calendar units keep the day or take the month's last; fixed ones
    /// add their length; anything past a record's range, or a count that
    /// overflows, is `None` (NULL), never a wrap or a panic.
    #[test]
    fn timestampadd_keeps_the_day_or_takes_the_months_last_and_never_overflows() {
        let at = |s: &str| parse_timestamp_ms(s).unwrap();
        let add = |unit, n, s: &str| add_units(unit, n, at(s)).map(fmt);
        assert_eq!(add(TimePart::Month, 1, "2024-01-31T10:00:00Z").unwrap(), "2024-02-29T10:00:00.000Z");
        assert_eq!(add(TimePart::Month, 1, "2023-01-31T10:00:00Z").unwrap(), "2023-02-28T10:00:00.000Z");
        assert_eq!(add(TimePart::Month, -2, "2024-03-31T00:00:00Z").unwrap(), "2024-01-31T00:00:00.000Z");
        assert_eq!(add(TimePart::Quarter, -1, "2024-01-15T00:00:00Z").unwrap(), "2023-10-15T00:00:00.000Z");
        assert_eq!(add(TimePart::Year, 1, "2024-02-29T23:59:59.999Z").unwrap(), "2025-02-28T23:59:59.999Z");
        assert_eq!(add(TimePart::Week, -1, "1970-01-03T00:00:00Z").unwrap(), "1969-12-27T00:00:00.000Z");
        assert_eq!(add(TimePart::Millisecond, 1, "1999-12-31T23:59:59.999Z").unwrap(), "2000-01-01T00:00:00.000Z");
        for unit in [TimePart::Millisecond, TimePart::Day, TimePart::Month, TimePart::Year] {
            for n in [i64::MAX, i64::MIN, 1 << 60] {
                assert_eq!(add_units(unit, n, 0), None, "{unit:?} {n}");
            }
            assert_eq!(add_units(unit, 1, i64::MIN), None, "{unit:?} from the least i64");
            assert_eq!(add_units(unit, -1, i64::MAX), None, "{unit:?} from the greatest i64");
        }
        assert_eq!(add_units(TimePart::Day, 1, MAX_TIMESTAMP_MS), None, "past a record's range");
        assert_eq!(add_units(TimePart::Epoch, 1, 0), None, "not a unit");
    }

    /// Whole units toward zero; months as TIMESTAMPADD moves; the
    /// extremes are `None` or a count, at once, never a long loop.
    #[test]
    fn timestampdiff_counts_whole_units_as_timestampadd_moves() {
        let at = |s: &str| parse_timestamp_ms(s).unwrap();
        let diff = |unit, a: &str, b: &str| diff_units(unit, at(a), at(b));
        assert_eq!(diff(TimePart::Month, "2024-01-31T00:00:00Z", "2024-02-29T00:00:00Z"), Some(1));
        assert_eq!(diff(TimePart::Month, "2024-01-31T10:00:00Z", "2024-02-29T09:59:59.999Z"), Some(0));
        assert_eq!(diff(TimePart::Month, "2024-02-29T00:00:00Z", "2024-01-31T00:00:00Z"), Some(-1));
        assert_eq!(diff(TimePart::Year, "2024-02-29T00:00:00Z", "2025-02-28T00:00:00Z"), Some(1));
        assert_eq!(diff(TimePart::Quarter, "2024-03-15T00:00:00Z", "2024-01-16T00:00:00Z"), Some(0));
        assert_eq!(diff(TimePart::Hour, "2024-01-01T10:30:00Z", "2024-01-01T08:00:00Z"), Some(-2));
        assert_eq!(diff(TimePart::Week, "2024-01-01T00:00:00Z", "2024-01-15T00:00:00Z"), Some(2));
        let (lo, hi) = (-MAX_TIMESTAMP_MS, MAX_TIMESTAMP_MS);
        assert_eq!(diff_units(TimePart::Millisecond, lo, hi), Some(2 * MAX_TIMESTAMP_MS));
        let years = diff_units(TimePart::Year, lo, hi).unwrap();
        assert!(years > 540_000 && years < 550_000, "{years}");
        assert_eq!(diff_units(TimePart::Month, hi, lo), diff_units(TimePart::Month, lo, hi).map(|m| -m));
        assert_eq!(diff_units(TimePart::Day, i64::MIN, 0), None);
        assert_eq!(diff_units(TimePart::Month, 0, i64::MAX), None);
        assert_eq!(diff_units(TimePart::DayOfWeek, 0, 1), None);
    }

    #[test]
    fn round_trips_and_known_values() {
        assert_eq!(fmt(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(fmt(1_700_000_000_000), "2023-11-14T22:13:20.000Z");
        assert_eq!(fmt(-1), "1969-12-31T23:59:59.999Z");
        for ms in [0, 1_700_000_000_123, -86_400_001, 951_782_400_000 /* 2000-02-29 */] {
            assert_eq!(parse_timestamp_ms(&fmt(ms)), Some(ms), "{}", fmt(ms));
        }
        assert_eq!(parse_timestamp_ms("2024-01-15"), Some(1_705_276_800_000));
        assert_eq!(parse_timestamp_ms("2024-01-15 01:00:00+01:00"), Some(1_705_276_800_000));
        assert_eq!(parse_timestamp_ms("2024-01-15T00:00:00.5Z"), Some(1_705_276_800_500));
        for bad in ["", "2024-13-01", "2024-02-30", "2024-01-15X", "2024-01-15T25:00", "hello", "2024-1-5"] {
            assert_eq!(parse_timestamp_ms(bad), None, "{bad}");
        }
    }

    #[test]
    fn extracts_calendar_parts() {
        let ms = parse_timestamp_ms("2024-12-30T13:45:07.250Z").unwrap();
        assert_eq!(extract(TimePart::Year, ms), 2024);
        assert_eq!(extract(TimePart::Quarter, ms), 4);
        assert_eq!(extract(TimePart::Month, ms), 12);
        assert_eq!(extract(TimePart::Day, ms), 30);
        assert_eq!(extract(TimePart::Hour, ms), 13);
        assert_eq!(extract(TimePart::Minute, ms), 45);
        assert_eq!(extract(TimePart::Second, ms), 7);
        assert_eq!(extract(TimePart::Millisecond, ms), 7250);
        assert_eq!(extract(TimePart::DayOfWeek, ms), 1, "a Monday");
        assert_eq!(extract(TimePart::DayOfYear, ms), 365);
        assert_eq!(extract(TimePart::Week, ms), 1, "ISO week 1 of 2025");
    }

    #[test]
    fn truncates_to_the_start_of_each_unit() {
        let ts = |s: &str| parse_timestamp_ms(s).unwrap();
        let ms = ts("2024-08-14T13:45:07.250Z"); // a Wednesday
        let cases = [
            (TimePart::Second, "2024-08-14T13:45:07Z"),
            (TimePart::Minute, "2024-08-14T13:45:00Z"),
            (TimePart::Hour, "2024-08-14T13:00:00Z"),
            (TimePart::Day, "2024-08-14"),
            (TimePart::Week, "2024-08-12"),
            (TimePart::Month, "2024-08-01"),
            (TimePart::Quarter, "2024-07-01"),
            (TimePart::Year, "2024-01-01"),
        ];
        for (unit, start) in cases {
            assert_eq!(fmt(truncate(unit, ms)), fmt(ts(start)), "{unit:?}");
        }
        // Before the epoch, truncation still goes back in time.
        assert_eq!(fmt(truncate(TimePart::Second, -1)), "1969-12-31T23:59:59.000Z");
        assert_eq!(fmt(truncate(TimePart::Day, -1)), "1969-12-31T00:00:00.000Z");
        assert_eq!(fmt(truncate(TimePart::Week, 0)), "1969-12-29T00:00:00.000Z", "1970-01-01 was a Thursday");
        // A Monday is its own week's start; a Sunday belongs to the week before.
        assert_eq!(truncate(TimePart::Week, ts("2024-08-12T00:00:00Z")), ts("2024-08-12"));
        assert_eq!(truncate(TimePart::Week, ts("2024-08-18T23:59:59Z")), ts("2024-08-12"));
        assert_eq!(truncate(TimePart::Quarter, ts("2024-12-31T23:59:59Z")), ts("2024-10-01"));
        assert_eq!(truncate(TimePart::Second, i64::MIN), i64::MIN, "saturates");
    }
}
