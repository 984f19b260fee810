//! The JSON decoder's fast path: one pass over a flat object of scalars.
//!
//! Nearly every record on a streaming topic is a flat JSON object whose
//! strings hold no escapes. For those, this scanner does what the serde
//! visitor does (`json.rs`) with none of its generic machinery: it walks the
//! bytes once, matches keys to columns with the same prediction, parses each
//! value straight into its column, and type-checks declared columns the
//! query does not read. Under `bench/e2e.sh` decoding was half of a core's
//! time, so this is where a core's time goes first
//! (`cargo bench -p sluice-worker --bench decoders` compares the two).
//!
//! It accepts only what it can decode exactly as the visitor would. Anything
//! else — an escape, a nested value, a number a column type does not take
//! as is, a duplicate or missing field, malformed JSON — makes it give up;
//! the caller then rolls the row back and runs the visitor, which decodes
//! the record or explains why it cannot. So both paths always agree, which
//! `tests/decode_paths.rs` checks on random records.

use sluice_plan::Batch;
use sluice_plan::DataType;
use sluice_plan::time::{MAX_TIMESTAMP_MS, parse_timestamp_ms};

use super::{JsonDecoder, Target, same_key};

impl JsonDecoder {
    /// Appends `p` as one row of `batch` if it is a flat object this path
    /// decodes exactly; `false` leaves a partial row for the caller to roll
    /// back.
    pub(super) fn decode_flat(&mut self, p: &[u8], batch: &mut Batch) -> bool {
        object(self, p, batch).is_some()
    }
}

fn object(dec: &mut JsonDecoder, p: &[u8], batch: &mut Batch) -> Option<()> {
    let mut i = ws(p, 0);
    if p.get(i) != Some(&b'{') {
        return None;
    }
    i = ws(p, i + 1);
    let mut previous = dec.start(0); // "start of record"
    if p.get(i) == Some(&b'}') {
        i += 1;
    } else {
        loop {
            if p.get(i) != Some(&b'"') {
                return None;
            }
            // Records of a topic list their fields in one order, mostly:
            // the key that came next last time is compared in place,
            // without a scan for the key's end or a search of the names.
            let in_place = dec.predicted(0, previous).filter(|(_, name)| {
                p.get(i + 1..i + 1 + name.len()).is_some_and(|k| same_key(name, k))
                    && p.get(i + 1 + name.len()) == Some(&b'"')
            });
            let (entry, after) = match in_place {
                Some((entry, name)) => (Some(entry), i + 2 + name.len()),
                None => {
                    let (key, after, key_ascii) = plain_string(p, i + 1)?;
                    let entry = dec.lookup(0, key, previous);
                    // An undeclared field: skipped below, if it is valid.
                    if entry.is_none() && !key_ascii {
                        std::str::from_utf8(key).ok()?;
                    }
                    (entry, after)
                }
            };
            i = ws(p, after);
            if p.get(i) != Some(&b':') {
                return None;
            }
            i = ws(p, i + 1);
            // The caller takes this path only when no column is nested:
            // every entry of the record's level is a column.
            i = match entry {
                Some(entry) => {
                    previous = entry;
                    let Target::Column(col) = dec.target(0, entry) else { return None };
                    if std::mem::replace(&mut dec.columns.seen[col], true) {
                        return None; // duplicate: the visitor names it
                    }
                    value(dec, col, p, i, batch)?
                }
                None => skip_scalar(p, i)?,
            };
            i = ws(p, i);
            match p.get(i)? {
                b',' => i = ws(p, i + 1),
                b'}' => {
                    i += 1;
                    break;
                }
                _ => return None,
            }
        }
    }
    (ws(p, i) == p.len()).then_some(())
}

/// Parses the value at `p[i..]` into column `col` (or only checks it, when
/// the query does not read the column); returns the index after it.
fn value(dec: &JsonDecoder, col: usize, p: &[u8], i: usize, batch: &mut Batch) -> Option<usize> {
    let data_type = dec.columns.types[col];
    let column = if dec.columns.used[col] { Some(&mut batch.columns[col]) } else { None };
    match *p.get(i)? {
        b'"' => {
            let (bytes, after, ascii) = plain_string(p, i + 1)?;
            match (data_type, column) {
                // Only checked, and ASCII is UTF-8: the text of a column the
                // query does not read (most of a wide record's bytes) is
                // not walked a second time.
                (DataType::String, None) if ascii => {}
                (DataType::String, column) => {
                    let text = std::str::from_utf8(bytes).ok()?;
                    if let Some(c) = column {
                        c.push_str(text).ok()?;
                    }
                }
                (DataType::Timestamp, column) => {
                    let ms = parse_timestamp_ms(std::str::from_utf8(bytes).ok()?)?;
                    push_i64(column, dec.columns.time_bounded[col], ms)?;
                }
                (DataType::Decimal(precision, scale), column) => {
                    let v = sluice_plan::decimal::parse(std::str::from_utf8(bytes).ok()?, precision, scale)?;
                    push_decimal(column, v)?;
                }
                _ => return None,
            }
            Some(after)
        }
        b'-' | b'0'..=b'9' => {
            if matches!(data_type, DataType::Bigint | DataType::Timestamp)
                && let Some((x, end)) = short_int(p, i)
            {
                push_i64(column, dec.columns.time_bounded[col], x)?;
                return Some(end);
            }
            let (end, integer) = number(p, i)?;
            match data_type {
                DataType::Bigint | DataType::Timestamp if integer => {
                    push_i64(column, dec.columns.time_bounded[col], int(&p[i..end])?)?;
                }
                // Correctly rounded, as serde_json (with float_roundtrip)
                // converts any number for the visitor, `-0` included.
                DataType::Double => {
                    let x = match exact_double(&p[i..end]) {
                        Some(x) => x,
                        // Out of range (`2e400`) parses to infinity here
                        // but is an error to serde_json: the visitor's call.
                        None => std::str::from_utf8(&p[i..end]).ok()?.parse::<f64>().ok().filter(|x| x.is_finite())?,
                    };
                    if let Some(c) = column {
                        c.push_f64(x).ok()?;
                    }
                }
                // Every digit of the text, not a double's 15 or 17.
                DataType::Decimal(precision, scale) => {
                    let v = sluice_plan::decimal::parse(std::str::from_utf8(&p[i..end]).ok()?, precision, scale)?;
                    push_decimal(column, v)?;
                }
                _ => return None,
            }
            Some(end)
        }
        b't' | b'f' => {
            let (x, after) =
                if p[i..].starts_with(b"true") { (true, i + 4) } else { (false, literal(p, i, b"false")?) };
            if data_type != DataType::Boolean {
                return None;
            }
            if let Some(c) = column {
                c.push_bool(x).ok()?;
            }
            Some(after)
        }
        b'n' => {
            let after = literal(p, i, b"null")?;
            if dec.columns.required[col] {
                return None;
            }
            if let Some(c) = column {
                c.push_null();
            }
            Some(after)
        }
        _ => None, // objects and arrays: the visitor's job
    }
}

/// Pushes an integer into a bigint or timestamp column; times outside the
/// supported range (timestamps, and a bigint event time) are the visitor's
/// to reject.
fn push_i64(column: Option<&mut sluice_plan::Column>, time_bounded: bool, x: i64) -> Option<()> {
    if time_bounded && !(-MAX_TIMESTAMP_MS..=MAX_TIMESTAMP_MS).contains(&x) {
        return None;
    }
    if let Some(c) = column {
        c.push_i64(x).ok()?;
    }
    Some(())
}

fn push_decimal(column: Option<&mut sluice_plan::Column>, v: i128) -> Option<()> {
    if let Some(c) = column {
        c.push_decimal(v).ok()?;
    }
    Some(())
}

/// The value of an integer the grammar accepted (`-?digits`); `None` when it
/// does not fit in an i64 (the visitor then decides what it is).
#[inline]
fn int(text: &[u8]) -> Option<i64> {
    let (negative, digits) = match text.split_first()? {
        (b'-', rest) => (true, rest),
        _ => (false, text),
    };
    if digits.len() <= 18 {
        // At most 10^18 - 1: no overflow is possible, so no checks.
        let v = digits.iter().fold(0i64, |v, d| v * 10 + i64::from(d - b'0'));
        return Some(if negative { -v } else { v });
    }
    let mut v: i64 = 0;
    for &d in digits {
        let d = i64::from(d - b'0');
        v = v.checked_mul(10)?;
        v = if negative { v.checked_sub(d)? } else { v.checked_add(d)? };
    }
    Some(v)
}

/// An integer of at most 18 digits at `p[i..]` (`-?(0|[1-9][0-9]*)`, then
/// neither a digit, a fraction nor an exponent), parsed as it is scanned:
/// its value and the index after it. `None` for any other number, which
/// [`number`] and [`int`] then take (most numbers on a topic are ids,
/// prices and epoch times, one pass instead of two).
#[inline]
fn short_int(p: &[u8], mut i: usize) -> Option<(i64, usize)> {
    let negative = p.get(i) == Some(&b'-');
    i += usize::from(negative);
    let start = i;
    let mut v: i64 = 0;
    while let Some(&d) = p.get(i) {
        let d = d.wrapping_sub(b'0');
        if d > 9 {
            break;
        }
        if i - start == 18 {
            return None; // a 19th digit: past what cannot overflow
        }
        v = v * 10 + i64::from(d);
        i += 1;
    }
    let digits = i - start;
    // No digit, a leading zero, or more of the number to come.
    if digits == 0 || (digits > 1 && p[start] == b'0') || matches!(p.get(i), Some(b'.' | b'e' | b'E')) {
        return None;
    }
    Some((if negative { -v } else { v }, i))
}

/// Powers of ten a double holds exactly.
const EXACT_POWERS: [f64; 23] = [
    1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11, 1e12, 1e13, 1e14, 1e15, 1e16, 1e17, 1e18, 1e19, 1e20,
    1e21, 1e22,
];

/// A decimal number with at most 15 significant digits and a small
/// exponent (`123.45`, `150.0`, `-2.5e-3`): its digits make an integer below
/// 2^53 and the power of ten is exact, so one multiplication or division
/// is correctly rounded (Clinger's fast path) and gives the same bits as a
/// full parse. `None` for anything else, which the full parser then takes.
#[inline]
fn exact_double(text: &[u8]) -> Option<f64> {
    let (negative, rest) = match text.split_first()? {
        (b'-', rest) => (true, rest),
        _ => (false, text),
    };
    let mut mantissa: u64 = 0;
    let (mut digits, mut scale, mut i) = (0u32, 0i32, 0usize);
    let mut fraction = false;
    while let Some(&b) = rest.get(i) {
        match b {
            b'0'..=b'9' => {
                if mantissa != 0 || b != b'0' {
                    digits += 1;
                }
                if digits > 15 {
                    return None;
                }
                mantissa = mantissa * 10 + u64::from(b - b'0');
                if fraction {
                    scale -= 1;
                }
            }
            b'.' => fraction = true,
            _ => break,
        }
        i += 1;
    }
    if let Some(&(b'e' | b'E')) = rest.get(i) {
        let exp = std::str::from_utf8(&rest[i + 1..]).ok()?.parse::<i32>().ok()?;
        scale = scale.checked_add(exp)?;
    } else if i != rest.len() {
        return None;
    }
    #[allow(clippy::cast_precision_loss)] // below 2^53: exact
    let m = mantissa as f64;
    let x = match usize::try_from(scale.unsigned_abs()).ok().and_then(|e| EXACT_POWERS.get(e)) {
        Some(p) if scale >= 0 => m * p,
        Some(p) => m / p,
        None => return None,
    };
    Some(if negative { -x } else { x })
}

/// Skips a scalar value (string, number, literal); `None` for anything else.
fn skip_scalar(p: &[u8], i: usize) -> Option<usize> {
    match *p.get(i)? {
        b'"' => {
            let (bytes, after, ascii) = plain_string(p, i + 1)?;
            if !ascii {
                std::str::from_utf8(bytes).ok()?;
            }
            Some(after)
        }
        b'-' | b'0'..=b'9' => number(p, i).map(|(end, _)| end),
        b't' => literal(p, i, b"true"),
        b'f' => literal(p, i, b"false"),
        b'n' => literal(p, i, b"null"),
        _ => None,
    }
}

/// A string that starts at `p[start]` (after its opening quote) and needs
/// no unescaping: its bytes, the index after its closing quote, and whether
/// every byte is ASCII (then it is valid UTF-8 without a further pass).
#[inline]
fn plain_string(p: &[u8], start: usize) -> Option<(&[u8], usize, bool)> {
    let rest = p.get(start..)?;
    let (skip, ascii) = plain_run(rest);
    let end = skip + rest[skip..].iter().position(|&b| b == b'"' || b == b'\\' || b < 0x20)?;
    (rest[end] == b'"').then(|| (&rest[..end], start + end + 1, ascii && rest[skip..end].is_ascii()))
}

/// How many bytes at the start of `s` are, eight at a time, none of `"`,
/// `\` or a control character (long text fields are most of a record's
/// bytes), and whether those bytes are all ASCII. Each test flags a byte
/// that is; the lowest flag is exact (a borrow only runs upwards), so the
/// first such byte is in the word where this stops.
fn plain_run(s: &[u8]) -> (usize, bool) {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGH: u64 = 0x8080_8080_8080_8080;
    let zero = |v: u64| v.wrapping_sub(ONES) & !v & HIGH;
    let (mut i, mut high) = (0, 0);
    while let Some(word) = s.get(i..i + 8) {
        let mut bytes = [0; 8];
        bytes.copy_from_slice(word);
        let x = u64::from_le_bytes(bytes);
        let hit = zero(x ^ (ONES * u64::from(b'"')))
            | zero(x ^ (ONES * u64::from(b'\\')))
            | (x.wrapping_sub(ONES * 0x20) & !x & HIGH);
        if hit != 0 {
            let stop = hit.trailing_zeros() / 8;
            // The word's bytes before the stop are the string's too.
            let before = if stop == 0 { 0 } else { x & (u64::MAX >> (64 - 8 * stop)) };
            return (i + stop as usize, (high | before) & HIGH == 0);
        }
        high |= x;
        i += 8;
    }
    (i, high & HIGH == 0)
}

/// A JSON number at `p[i..]`: the index after it, and whether it is an
/// integer (no fraction, no exponent). `None` if it breaks JSON's grammar.
#[inline]
fn number(p: &[u8], mut i: usize) -> Option<(usize, bool)> {
    let digits = |p: &[u8], mut i: usize| {
        let start = i;
        while p.get(i).is_some_and(u8::is_ascii_digit) {
            i += 1;
        }
        (i > start).then_some(i)
    };
    if p.get(i) == Some(&b'-') {
        i += 1;
    }
    match p.get(i)? {
        b'0' => i += 1, // no leading zeros
        b'1'..=b'9' => i = digits(p, i)?,
        _ => return None,
    }
    let mut integer = true;
    if p.get(i) == Some(&b'.') {
        integer = false;
        i = digits(p, i + 1)?;
    }
    if matches!(p.get(i), Some(b'e' | b'E')) {
        integer = false;
        i += 1;
        if matches!(p.get(i), Some(b'+' | b'-')) {
            i += 1;
        }
        i = digits(p, i)?;
    }
    Some((i, integer))
}

fn literal(p: &[u8], i: usize, word: &[u8]) -> Option<usize> {
    p[i..].starts_with(word).then_some(i + word.len())
}

/// Skips JSON whitespace.
#[inline]
fn ws(p: &[u8], mut i: usize) -> usize {
    while matches!(p.get(i), Some(b' ' | b'\n' | b'\r' | b'\t')) {
        i += 1;
    }
    i
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The word-at-a-time scan stops in the word of the first quote,
    /// backslash or control character, wherever it is and whatever comes
    /// after it (multi-byte UTF-8 and DEL are plain text).
    #[test]
    fn a_plain_run_ends_before_the_first_byte_a_string_must_stop_at() {
        let text = "héllo wörld ~\u{7f} plain text, long enough for several words".as_bytes();
        for stop in [b'"', b'\\', 0x00, 0x1f, b'\n'] {
            for at in 0..text.len() {
                let mut s = text.to_vec();
                s[at] = stop;
                s.push(b'"');
                let first = s.iter().position(|&b| b == b'"' || b == b'\\' || b < 0x20).unwrap();
                let (run, ascii) = plain_run(&s);
                assert_eq!(ascii, s[..run].is_ascii(), "stop {stop:#x} at {at}");
                assert!(run <= first && first < run + 8, "stop {stop:#x} at {at}: run {run}, first {first}");
                assert_eq!(plain_string(&s, 0).map(|(b, _, _)| b.len()), (s[first] == b'"').then_some(first));
            }
        }
        assert_eq!(plain_run(text), (text.len() / 8 * 8, false), "no stop: every whole word");
    }

    #[test]
    fn numbers_follow_the_json_grammar() {
        for (text, end) in [("0", 1), ("-0", 2), ("12", 2), ("1.5", 3), ("-1e9", 4), ("2E+3,", 4), ("7.25e-2}", 7)] {
            assert_eq!(number(text.as_bytes(), 0).map(|(e, _)| e), Some(end), "{text}");
        }
        for bad in ["-", "01", "1.", ".5", "1e", "1e+", "-x"] {
            // `01` is two numbers to JSON: the first ends after the 0.
            let r = number(bad.as_bytes(), 0);
            assert!(r.is_none() || r == Some((1, true)), "{bad}: {r:?}");
        }
        assert_eq!(number(b"42", 0), Some((2, true)));
        assert_eq!(number(b"4.2", 0), Some((3, false)));
    }

    #[test]
    fn short_decimals_take_the_exact_fast_path() {
        for text in [
            "0",
            "-0",
            "150.0",
            "123.45",
            "-2.5e-3",
            "1E22",
            "0.000001",
            "999999999999999",
            "3.14159265358979",
            "1e-22",
            "7.5E+10",
            "0.1",
            "0.30000000000000004",
        ] {
            let want: f64 = text.parse().unwrap();
            match exact_double(text.as_bytes()) {
                Some(x) => assert_eq!(x.to_bits(), want.to_bits(), "{text}"),
                None => assert!(text.len() > 16, "{text} should take the fast path"),
            }
        }
        // Too many digits or too large an exponent: left to the full parser.
        for text in ["1234567890123456", "1e23", "1e-23", "0.12345678901234567"] {
            assert_eq!(exact_double(text.as_bytes()), None, "{text}");
        }
    }

    #[test]
    fn short_integers_parse_in_one_pass_as_the_two_pass_path_would() {
        let cases: &[&[u8]] = &[
            b"0",
            b"-0",
            b"7",
            b"-7",
            b"1436918400000,",
            b"123456789012345678}",
            b"-123456789012345678 ",
            b"1234567890123456789",
            b"01",
            b"-",
            b"-a",
            b"1.5",
            b"1e3",
            b"2E3",
            b"10]",
            b"0.",
            b"00",
        ];
        for &text in cases {
            let two_pass = number(text, 0).filter(|(_, integer)| *integer).and_then(|(end, _)| {
                let digits = end - usize::from(text[0] == b'-');
                (digits <= 18).then(|| int(&text[..end]).map(|v| (v, end))).flatten()
            });
            // Where it takes a number, it reads it as the two passes do;
            // the rest it leaves to them.
            if let Some(got) = short_int(text, 0) {
                assert_eq!(Some(got), two_pass, "{}", String::from_utf8_lossy(text));
            }
        }
        for (text, v) in [(&b"0"[..], 0), (b"-0", 0), (b"-7", -7), (b"123456789012345678}", 123_456_789_012_345_678)] {
            assert_eq!(short_int(text, 0).map(|(x, _)| x), Some(v), "{}", String::from_utf8_lossy(text));
        }
        for text in [&b"01"[..], b"-", b"1.5", b"1e3", b"2E3", b"0."] {
            assert_eq!(short_int(text, 0), None, "{}", String::from_utf8_lossy(text));
        }
        assert_eq!(short_int(b"1436918400000,", 0), Some((1_436_918_400_000, 13)));
        assert_eq!(short_int(b"1234567890123456789", 0), None, "19 digits: the two-pass path's, with its checks");
    }

    #[test]
    fn integers_parse_to_the_edges_of_i64() {
        assert_eq!(int(b"0"), Some(0));
        assert_eq!(int(b"-0"), Some(0));
        assert_eq!(int(b"9223372036854775807"), Some(i64::MAX));
        assert_eq!(int(b"-9223372036854775808"), Some(i64::MIN));
        assert_eq!(int(b"9223372036854775808"), None);
        assert_eq!(int(b"-9223372036854775809"), None);
    }

    #[test]
    fn strings_with_escapes_or_control_characters_are_not_plain() {
        assert_eq!(plain_string(br#"abc" tail"#, 0), Some((&b"abc"[..], 4, true)));
        assert_eq!(plain_string("aé\"".as_bytes(), 0), Some(("aé".as_bytes(), 4, false)));
        assert_eq!(plain_string(b"0123456789\xff\"", 0), Some((&b"0123456789\xff"[..], 12, false)), "past a word");
        assert_eq!(plain_string(br#"a\"b""#, 0), None);
        assert_eq!(plain_string(b"a\nb\"", 0), None);
        assert_eq!(plain_string(b"unterminated", 0), None);
    }
}
