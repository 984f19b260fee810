//! Time zones for `AT TIME ZONE`, `CONVERT_TZ`, `FROM_UTC_TIMESTAMP` and
//! `TO_UTC_TIMESTAMP`.
//!
//! A TIMESTAMP is an instant, epoch milliseconds, shown in UTC. Its wall
//! clock in a zone is the same kind of value: the local date and time
//! read as if it were UTC — what PostgreSQL's `timestamptz AT TIME ZONE`
//! returns (a `timestamp` without zone). Every other time function then
//! works in the zone by composition: `EXTRACT(HOUR FROM ts AT TIME ZONE
//! 'Asia/Tokyo')`, `DATE_TRUNC('day', ts AT TIME ZONE 'Europe/Paris')`,
//! `DATE_FORMAT(…)`. The zone rules are the IANA database bundled into the
//! build, so a job computes the same on every machine, whatever zoneinfo
//! its image has.

use std::sync::OnceLock;

use jiff::Timestamp;
pub use jiff::tz::TimeZone;
use jiff::tz::{Offset, TimeZoneDatabase};

fn database() -> &'static TimeZoneDatabase {
    static DB: OnceLock<TimeZoneDatabase> = OnceLock::new();
    DB.get_or_init(TimeZoneDatabase::bundled)
}

/// The zone `name` names: an IANA name (`Europe/Paris`, any case), `UTC`,
/// `Z` or `GMT`, or a fixed offset (`+05:30`, `-08`, `+0530`); `None` for
/// anything else.
pub fn time_zone(name: &str) -> Option<TimeZone> {
    let name = name.trim();
    if is_utc(name) {
        return Some(TimeZone::UTC);
    }
    if let Some(offset) = fixed_offset(name) {
        return Some(TimeZone::fixed(offset));
    }
    database().get(name).ok()
}

/// Whether `name` is UTC by one of its names (`UTC`, `Z`, `GMT`).
pub fn is_utc(name: &str) -> bool {
    ["UTC", "Z", "GMT"].iter().any(|u| name.trim().eq_ignore_ascii_case(u))
}

/// `+HH`, `+HH:MM` or `+HHMM` (or `-`), up to ±18 hours.
fn fixed_offset(s: &str) -> Option<Offset> {
    let sign = match s.as_bytes().first()? {
        b'+' => 1,
        b'-' => -1,
        _ => return None,
    };
    let digits: String = s[1..].chars().filter(|c| *c != ':').collect();
    if !digits.bytes().all(|b| b.is_ascii_digit()) || ![2, 4].contains(&digits.len()) {
        return None;
    }
    if s[1..].contains(':') && s.len() != 6 {
        return None;
    }
    let hours: i32 = digits[..2].parse().ok()?;
    let minutes: i32 = if digits.len() == 4 { digits[2..].parse().ok()? } else { 0 };
    if hours > 18 || minutes > 59 {
        return None;
    }
    Offset::from_seconds(sign * (hours * 3600 + minutes * 60)).ok()
}

/// Every IANA name the bundled database holds (for "did you mean").
pub fn zone_names() -> Vec<String> {
    database().available().map(|n| n.as_str().to_owned()).collect()
}

/// The wall clock in `zone` at instant `ms`; `None` past the years
/// -9999 to 9999.
pub fn wall_clock(ms: i64, zone: &TimeZone) -> Option<i64> {
    let offset = zone.to_offset(Timestamp::from_millisecond(ms).ok()?);
    ms.checked_add(i64::from(offset.seconds()) * 1000)
}

/// The instant at which `zone`'s wall clock reads `ms` (a wall-clock
/// value, as [`wall_clock`] gives). A time a clock change skips (02:30 on
/// a spring-forward night) is read with the offset before the change, so
/// it lands after it (as PostgreSQL, DuckDB and `java.time`); a time a
/// clock change repeats is its first occurrence, as `java.time` reads it
/// — PostgreSQL and DuckDB take the second.
pub fn instant(ms: i64, zone: &TimeZone) -> Option<i64> {
    let civil = TimeZone::UTC.to_datetime(Timestamp::from_millisecond(ms).ok()?);
    Some(zone.to_ambiguous_timestamp(civil).compatible().ok()?.as_millisecond())
}

/// Wall clock `ms` in zone `from` as a wall clock in zone `to` (`None`:
/// UTC, whose wall clock is the instant).
pub fn convert(ms: i64, from: Option<&TimeZone>, to: Option<&TimeZone>) -> Option<i64> {
    let at = match from {
        Some(zone) => instant(ms, zone)?,
        None => ms,
    };
    match to {
        Some(zone) => wall_clock(at, zone),
        None => Some(at),
    }
}

/// The `[start, end)` instants of the tumbling window of `size_ms` of
/// `zone`'s wall clock that holds instant `ms`: windows start where the
/// zone's clock reads a multiple of `size_ms` (local midnight for a day),
/// so they are longer or shorter than `size_ms` across a clock change.
/// `None` past the years ±9999.
pub fn zoned_tumble(ms: i64, size_ms: i64, zone: &TimeZone) -> Option<(i64, i64)> {
    let wall = wall_clock(ms, zone)?;
    let start = wall.checked_sub(wall.rem_euclid(size_ms))?;
    Some((instant(start, zone)?, instant(start.checked_add(size_ms)?, zone)?))
}

/// The hopping windows of `zone`'s clock that hold the instant `ms`: each
/// starts where the clock reads a multiple of `advance_ms` and ends
/// `size_ms` of clock later, as instants, latest start first. A start the
/// clock skips (02:00 on a spring-forward night) is no window: the clock
/// never reads it, and its instant would be the next start's. Empty when
/// the clock or a bound cannot be represented (the row is then late).
pub fn zoned_hops(ms: i64, size_ms: i64, advance_ms: i64, zone: &TimeZone) -> impl Iterator<Item = (i64, i64)> + '_ {
    let wall = wall_clock(ms, zone);
    let lowest = wall.map(|w| w.saturating_sub(size_ms));
    let first = wall.and_then(|w| w.checked_sub(w.rem_euclid(advance_ms)));
    std::iter::successors(first, move |s| s.checked_sub(advance_ms))
        .take_while(move |s| lowest.is_some_and(|low| *s > low))
        .filter_map(move |s| {
            let start = instant(s, zone).filter(|i| wall_clock(*i, zone) == Some(s))?;
            Some((start, instant(s.checked_add(size_ms)?, zone)?))
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS_PER_HOUR: i64 = 3_600_000;

    /// 2024-03-31 00:30 UTC is 01:30 in Paris (winter time); 01:30 UTC is
    /// 03:30 (summer time): the clock skipped 02:00–03:00.
    /// Two-hour windows every hour of Paris's clock around the spring
    /// change (2024-03-31, 02:00 → 03:00): the window from 01:00 ends at
    /// 03:00 local, one real hour later; the next starts at 03:00.
    #[test]
    fn hops_follow_the_zones_clock() {
        let paris = time_zone("Europe/Paris").unwrap();
        let utc_0030 = 1_711_845_000_000; // 01:30 in Paris
        let hops: Vec<_> = zoned_hops(utc_0030, 2 * MS_PER_HOUR, MS_PER_HOUR, &paris).collect();
        let midnight_paris = utc_0030 - 90 * 60_000; // 23:00 UTC
        assert_eq!(
            hops,
            [
                (midnight_paris + MS_PER_HOUR, midnight_paris + 2 * MS_PER_HOUR),
                (midnight_paris, midnight_paris + 2 * MS_PER_HOUR),
            ],
            "[01:00, 03:00) is one real hour; [00:00, 02:00) ends where 02:00 would be, at 03:00"
        );
        // 03:30: the window from 03:00 only; 02:00 was skipped.
        let utc_0130 = utc_0030 + MS_PER_HOUR;
        let hops: Vec<_> = zoned_hops(utc_0130, 2 * MS_PER_HOUR, MS_PER_HOUR, &paris).collect();
        let resumed = utc_0130 - 30 * 60_000;
        assert_eq!(hops, [(resumed, resumed + 2 * MS_PER_HOUR)]);
        assert_eq!(zoned_hops(i64::MAX, 2 * MS_PER_HOUR, MS_PER_HOUR, &paris).count(), 0);
    }

    #[test]
    fn paris_keeps_its_clock_changes() {
        let paris = time_zone("europe/paris").unwrap();
        let utc_0030 = 1_711_845_000_000;
        assert_eq!(wall_clock(utc_0030, &paris), Some(utc_0030 + MS_PER_HOUR));
        assert_eq!(wall_clock(utc_0030 + MS_PER_HOUR, &paris), Some(utc_0030 + 3 * MS_PER_HOUR));
        // Wall clock 02:30 does not exist that night: it is read as 01:30 UTC.
        let wall_0230 = utc_0030 + 2 * MS_PER_HOUR;
        assert_eq!(instant(wall_0230, &paris), Some(utc_0030 + MS_PER_HOUR));
        // 2024-10-27 02:30 happens twice: the first is 00:30 UTC.
        assert_eq!(instant(1_729_996_200_000, &paris), Some(1_729_996_200_000 - 2 * MS_PER_HOUR));
    }

    #[test]
    fn offsets_and_names_are_read_and_nonsense_is_not() {
        let kolkata = time_zone("+05:30").unwrap();
        assert_eq!(wall_clock(0, &kolkata), Some(5 * MS_PER_HOUR + 30 * 60_000));
        assert_eq!(wall_clock(0, &time_zone("-08").unwrap()), Some(-8 * MS_PER_HOUR));
        assert_eq!(wall_clock(0, &time_zone("+0100").unwrap()), Some(MS_PER_HOUR));
        for bad in ["Mars/Olympus", "+5:30", "+19:00", "+05:60", "", "05:30", "+05:30:00"] {
            assert!(time_zone(bad).is_none(), "{bad}");
        }
        assert!(zone_names().iter().any(|n| n == "America/New_York"));
    }

    /// Paris's days: 23 hours on 2024-03-31, 25 on 2024-10-27, each from
    /// local midnight; an hour window in the repeated hour spans both.
    #[test]
    fn zoned_windows_follow_the_local_clock() {
        const DAY: i64 = 24 * MS_PER_HOUR;
        let paris = time_zone("Europe/Paris").unwrap();
        let utc = |s: &str| crate::time::parse_timestamp_ms(s).unwrap();
        let (start, end) = zoned_tumble(utc("2024-03-31T12:00:00Z"), DAY, &paris).unwrap();
        assert_eq!((start, end), (utc("2024-03-30T23:00:00Z"), utc("2024-03-31T22:00:00Z")));
        let (start, end) = zoned_tumble(utc("2024-10-27T12:00:00Z"), DAY, &paris).unwrap();
        assert_eq!((start, end), (utc("2024-10-26T22:00:00Z"), utc("2024-10-27T23:00:00Z")));
        // 02:30 the second time (01:30 UTC) is in the hour from 02:00 the first time.
        let (start, end) = zoned_tumble(utc("2024-10-27T01:30:00Z"), MS_PER_HOUR, &paris).unwrap();
        assert_eq!((start, end), (utc("2024-10-27T00:00:00Z"), utc("2024-10-27T02:00:00Z")));
        assert_eq!(zoned_tumble(i64::MAX, DAY, &paris), None);
    }

    /// Out of jiff's range (years ±9999), and the extremes: `None`, no
    /// panic.
    #[test]
    fn extreme_instants_are_none() {
        let tokyo = time_zone("Asia/Tokyo").unwrap();
        for ms in [i64::MIN, i64::MAX, -400_000_000_000_000, 400_000_000_000_000] {
            assert_eq!(wall_clock(ms, &tokyo), None);
            assert_eq!(instant(ms, &tokyo), None);
            assert_eq!(convert(ms, Some(&tokyo), None), None);
        }
        assert_eq!(convert(5, None, None), Some(5));
    }
}
