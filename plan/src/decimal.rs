//! Exact decimals: `DECIMAL(p, s)` for `p` up to [`MAX_PRECISION`].
//!
//! A value is its unscaled integer in the `Int` storage bigints and
//! timestamps use (`12.34` in `DECIMAL(9, 2)` is `1234`), so columns,
//! group keys, exchange rows and saved state carry decimals without a
//! storage type of their own, and comparing two values of one scale is
//! comparing integers. Eighteen digits fit an `i64` whatever the value
//! (Spark and Arrow's `Decimal64` make the same cut); intermediate results
//! are computed in `i128`, so nothing wraps.
//!
//! Rounding is PostgreSQL's for `numeric`: half away from zero, when a cast
//! or `ROUND` drops digits and when a quotient is cut to its scale. A
//! result that does not fit its precision is NULL (PostgreSQL raises
//! "numeric field overflow"; a streaming job cannot stop for one record,
//! and Sluice's other failed computations, such as a division by zero,
//! are NULL too).

/// The most digits a `DECIMAL` holds here.
pub const MAX_PRECISION: u8 = 18;

/// `10^k` for `k` ≤ 38.
#[inline]
pub fn pow10(k: u8) -> i128 {
    10i128.pow(u32::from(k.min(38)))
}

/// `v` if it has at most `precision` digits.
#[inline]
pub fn fit(v: i128, precision: u8) -> Option<i64> {
    if v.unsigned_abs() < pow10(precision).unsigned_abs() { i64::try_from(v).ok() } else { None }
}

/// `n / d` rounded half away from zero (`d` ≠ 0).
#[inline]
pub fn div_round(n: i128, d: i128) -> i128 {
    let (q, r) = (n / d, n % d);
    if r.unsigned_abs() * 2 >= d.unsigned_abs() { q + if (n < 0) == (d < 0) { 1 } else { -1 } } else { q }
}

/// `v` at scale `from` as a value at scale `to` (rounded half away from
/// zero when `to` is smaller), if it has at most `precision` digits.
#[inline]
pub fn rescale(v: i64, from: u8, to: u8, precision: u8) -> Option<i64> {
    let v = i128::from(v);
    let r = if to >= from { v.checked_mul(pow10(to - from))? } else { div_round(v, pow10(from - to)) };
    fit(r, precision)
}

/// `v` at scale `from` as an `i128` at the larger scale `to`.
#[inline]
pub fn widen(v: i64, from: u8, to: u8) -> i128 {
    i128::from(v) * pow10(to.saturating_sub(from))
}

/// Reads decimal text — `-12.5`, `+3`, `.5`, `1.25e3`, surrounding spaces —
/// as a value of `DECIMAL(precision, scale)`, rounding half away from zero
/// digits past the scale. `None` for anything else, or a value too large.
pub fn parse(text: &str, precision: u8, scale: u8) -> Option<i64> {
    let t = text.trim().as_bytes();
    let (neg, t) = match t.first() {
        Some(b'-') => (true, &t[1..]),
        Some(b'+') => (false, &t[1..]),
        _ => (false, t),
    };
    let (mantissa, exponent) = match t.iter().position(|b| *b == b'e' || *b == b'E') {
        Some(i) => (&t[..i], std::str::from_utf8(&t[i + 1..]).ok()?.parse::<i32>().ok()?),
        None => (t, 0),
    };
    let (int, frac) = match mantissa.iter().position(|b| *b == b'.') {
        Some(i) => (&mantissa[..i], &mantissa[i + 1..]),
        None => (mantissa, &mantissa[..0]),
    };
    if int.is_empty() && frac.is_empty() || !int.iter().chain(frac).all(u8::is_ascii_digit) {
        return None;
    }
    // The digits as an integer with `frac.len() - exponent` places after
    // the point; leading zeros cost nothing, and more than 38 significant
    // digits can only overflow.
    let mut digits: i128 = 0;
    let mut significant = 0usize;
    for &b in int.iter().chain(frac) {
        if digits != 0 || b != b'0' {
            significant += 1;
            if significant > 38 {
                return None;
            }
        }
        digits = digits * 10 + i128::from(b - b'0');
    }
    if digits == 0 {
        return Some(0);
    }
    let places = i32::try_from(frac.len()).ok()?.checked_sub(exponent)?;
    let target = i32::from(scale);
    let v = if places <= target {
        let k = u8::try_from(target - places).ok().filter(|k| *k <= 38)?;
        digits.checked_mul(pow10(k))?
    } else {
        match u8::try_from(places - target) {
            Ok(k) if k <= 38 => div_round(digits, pow10(k)),
            _ => 0,
        }
    };
    fit(if neg { -v } else { v }, precision)
}

/// Appends `v` at `scale` as text: `-12.50`, `0.05`, `7` (scale 0).
pub fn write(v: i64, scale: u8, out: &mut Vec<u8>) {
    let mut buf = itoa::Buffer::new();
    let digits = buf.format(v.unsigned_abs()).as_bytes();
    if v < 0 {
        out.push(b'-');
    }
    let scale = usize::from(scale);
    if scale == 0 {
        out.extend_from_slice(digits);
    } else if digits.len() > scale {
        let (int, frac) = digits.split_at(digits.len() - scale);
        out.extend_from_slice(int);
        out.push(b'.');
        out.extend_from_slice(frac);
    } else {
        out.extend_from_slice(b"0.");
        out.extend(std::iter::repeat_n(b'0', scale - digits.len()));
        out.extend_from_slice(digits);
    }
}

/// The length of [`write`]'s text, so that a length-prefixed encoding can
/// write its prefix first.
pub fn text_len(v: i64, scale: u8) -> usize {
    let digits = itoa::Buffer::new().format(v.unsigned_abs()).len();
    let scale = usize::from(scale);
    let body = if scale == 0 { digits } else { digits.max(scale + 1) + 1 };
    body + usize::from(v < 0)
}

/// [`write`] into a new string.
pub fn to_text(v: i64, scale: u8) -> String {
    let mut out = Vec::with_capacity(24);
    write(v, scale, &mut out);
    String::from_utf8(out).unwrap_or_default()
}

/// The nearest double to `v` at `scale`.
pub fn to_f64(v: i64, scale: u8) -> f64 {
    // Both operands exact, so the one division is correctly rounded.
    if v.unsigned_abs() < 1 << 53 {
        #[allow(clippy::cast_precision_loss)]
        return v as f64 / 10f64.powi(i32::from(scale));
    }
    to_text(v, scale).parse().unwrap_or(f64::NAN)
}

/// A double as a `DECIMAL(precision, scale)`: its shortest decimal text (the
/// digits a double prints as, so `0.1` is `0.1`), rounded to the scale.
/// `None` for NaN, infinities and values too large.
pub fn from_f64(x: f64, precision: u8, scale: u8) -> Option<i64> {
    if !x.is_finite() {
        return None;
    }
    parse(ryu::Buffer::new().format_finite(x), precision, scale)
}

/// A double constant written beside a decimal (`amount * 1.1`) as the exact
/// decimal its text reads (PostgreSQL reads `1.1` as `numeric`): its
/// unscaled value, digits and scale, or `None` when it has no short exact
/// form (`1e300`, NaN).
pub fn literal(x: f64) -> Option<(i64, u8, u8)> {
    (0..=MAX_PRECISION).find_map(|s| {
        let v = from_f64(x, MAX_PRECISION, s)?;
        #[allow(clippy::float_cmp)]
        (to_f64(v, s) == x).then(|| {
            let digits = u8::try_from(itoa::Buffer::new().format(v.unsigned_abs()).len()).unwrap_or(MAX_PRECISION);
            (v, digits.max(s).max(1), s)
        })
    })
}

/// `a op b` for `a` at scale `sa` and `b` at `sb`, as a value of
/// `DECIMAL(p, s)`; `None` on overflow or a zero divisor.
#[inline]
pub fn arith(op: crate::ArithOp, a: i64, sa: u8, b: i64, sb: u8, p: u8, s: u8) -> Option<i64> {
    use crate::ArithOp::*;
    let top = sa.max(sb);
    let v = match op {
        Add => widen(a, sa, top) + widen(b, sb, top),
        Sub => widen(a, sa, top) - widen(b, sb, top),
        Mod => {
            let d = widen(b, sb, top);
            if d == 0 {
                return None;
            }
            widen(a, sa, top) % d
        }
        Mul => {
            // Exact at scale sa + sb, then to the result's scale.
            let v = i128::from(a) * i128::from(b);
            let at = sa + sb;
            return if s >= at { fit(v.checked_mul(pow10(s - at))?, p) } else { fit(div_round(v, pow10(at - s)), p) };
        }
        Div => {
            if b == 0 {
                return None;
            }
            // a / b at scale s: (a · 10^(s - sa + sb)) / b, rounded.
            let shift = i32::from(s) - i32::from(sa) + i32::from(sb);
            let (n, d) = if shift >= 0 {
                (i128::from(a).checked_mul(pow10(u8::try_from(shift).ok()?))?, i128::from(b))
            } else {
                (i128::from(a), i128::from(b).checked_mul(pow10(u8::try_from(-shift).ok()?))?)
            };
            return fit(div_round(n, d), p);
        }
    };
    if s >= top { fit(v.checked_mul(pow10(s - top))?, p) } else { fit(div_round(v, pow10(top - s)), p) }
}

/// `v` at scale `from` rounded half away from zero to `digits` places
/// (tens, hundreds… when negative), as a value at scale `to` with at most
/// `precision` digits: `ROUND`.
pub fn round(v: i64, from: u8, digits: i64, to: u8, precision: u8) -> Option<i64> {
    let drop = i64::from(from).saturating_sub(digits);
    if drop <= 0 {
        return rescale(v, from, to, precision);
    }
    // Rounding to more digits than any i64 has leaves nothing.
    let Some(k) = u8::try_from(drop).ok().filter(|k| *k <= 38) else { return Some(0) };
    // The rounded value in units of 10^k at scale `from`.
    let units = div_round(i128::from(v), pow10(k));
    let at_from = units.checked_mul(pow10(k))?;
    let r = if to >= from { at_from.checked_mul(pow10(to - from))? } else { at_from / pow10(from - to) };
    fit(r, precision)
}

/// `FLOOR` (`up` false) or `CEIL` of `v` at scale `from`, as a value at
/// scale 0.
pub fn floor_or_ceil(v: i64, from: u8, up: bool) -> i64 {
    let d = i64::try_from(pow10(from)).unwrap_or(i64::MAX);
    let q = v.div_euclid(d);
    if up && v.rem_euclid(d) != 0 { q + 1 } else { q }
}

/// `-1`, `0` or `1` as `a` (scale `sa`) is below, equal to or above `b`.
#[inline]
pub fn cmp(a: i64, sa: u8, b: i64, sb: u8) -> std::cmp::Ordering {
    if sa == sb {
        return a.cmp(&b);
    }
    let top = sa.max(sb);
    widen(a, sa, top).cmp(&widen(b, sb, top))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ArithOp;

    #[test]
    fn text_is_read_exactly_and_rounded_half_away_from_zero() {
        assert_eq!(parse("12.34", 9, 2), Some(1234));
        assert_eq!(parse(" -0.005 ", 9, 2), Some(-1));
        assert_eq!(parse("0.004", 9, 2), Some(0));
        assert_eq!(parse("2.5", 9, 0), Some(3));
        assert_eq!(parse("-2.5", 9, 0), Some(-3));
        assert_eq!(parse("1.25e3", 9, 2), Some(125_000));
        assert_eq!(parse("125E-2", 9, 2), Some(125));
        assert_eq!(parse(".5", 3, 1), Some(5));
        assert_eq!(parse("+7", 3, 1), Some(70));
        assert_eq!(parse("1e-400", 9, 2), Some(0));
        assert_eq!(parse("0e400", 9, 2), Some(0));
        assert_eq!(parse("1e400", 9, 2), None);
        assert_eq!(parse("1000", 5, 2), None, "1000.00 needs 6 digits");
        assert_eq!(parse("999.995", 5, 2), None, "rounds up to 1000.00");
        assert_eq!(parse("999.994", 5, 2), Some(99_999));
        assert_eq!(parse("999999999999999999", 18, 0), Some(999_999_999_999_999_999));
        assert_eq!(parse("1000000000000000000", 18, 0), None);
        assert_eq!(parse("00000000000000000000000000000000000000000012.5", 4, 1), Some(125));
        for bad in ["", "-", ".", "1.2.3", "1e", "e5", "1,5", "abc", "١٢", "NaN", "inf", "--1", "1e+"] {
            assert_eq!(parse(bad, 18, 2), None, "{bad:?}");
        }
    }

    #[test]
    fn values_print_with_their_scale() {
        assert_eq!(to_text(1234, 2), "12.34");
        assert_eq!(to_text(-5, 2), "-0.05");
        assert_eq!(to_text(0, 3), "0.000");
        assert_eq!(to_text(7, 0), "7");
        assert_eq!(to_text(i64::MIN, 4), "-922337203685477.5808");
        for (v, scale) in [(1234, 2), (-5, 2), (0, 3), (7, 0), (i64::MIN, 4), (-120, 1), (99, 2), (100, 2)] {
            assert_eq!(text_len(v, scale), to_text(v, scale).len(), "{v} at scale {scale}");
        }
        assert_eq!(to_f64(1234, 2), 12.34);
        assert_eq!(to_f64(999_999_999_999_999_999, 2), 9_999_999_999_999_999.99);
        assert_eq!(from_f64(0.1, 5, 3), Some(100));
        assert_eq!(from_f64(2.675, 5, 2), Some(268), "the double's shortest text, 2.675, rounds up");
        assert_eq!(from_f64(f64::NAN, 5, 2), None);
        assert_eq!(from_f64(1e300, 18, 2), None);
    }

    #[test]
    fn arithmetic_is_exact_and_overflow_is_none() {
        // 0.1 + 0.2 = 0.3 exactly.
        assert_eq!(arith(ArithOp::Add, 1, 1, 2, 1, 3, 1), Some(3));
        assert_eq!(arith(ArithOp::Sub, 100, 2, 5, 3, 11, 3), Some(995));
        assert_eq!(arith(ArithOp::Mul, 150, 2, 150, 2, 14, 4), Some(22_500));
        // 1 / 3 at scale 6, 2 / 3 rounds up, -2 / 3 rounds down.
        assert_eq!(arith(ArithOp::Div, 100, 2, 300, 2, 15, 6), Some(333_333));
        assert_eq!(arith(ArithOp::Div, 2, 0, 3, 0, 15, 6), Some(666_667));
        assert_eq!(arith(ArithOp::Div, -2, 0, 3, 0, 15, 6), Some(-666_667));
        assert_eq!(arith(ArithOp::Div, 1, 0, 0, 0, 15, 6), None);
        assert_eq!(arith(ArithOp::Mod, 725, 2, 2, 0, 3, 2), Some(125), "7.25 % 2 = 1.25");
        assert_eq!(arith(ArithOp::Mod, -725, 2, 2, 0, 3, 2), Some(-125), "the sign of the dividend");
        assert_eq!(arith(ArithOp::Mod, 1, 0, 0, 0, 3, 2), None);
        assert_eq!(arith(ArithOp::Add, i64::MAX, 0, i64::MAX, 0, 18, 0), None);
        assert_eq!(arith(ArithOp::Mul, i64::MIN, 0, i64::MIN, 0, 18, 0), None);
        assert_eq!(arith(ArithOp::Div, i64::MIN, 0, 1, 18, 18, 6), None);
        assert_eq!(cmp(150, 2, 15, 1), std::cmp::Ordering::Equal);
        assert_eq!(cmp(i64::MAX, 0, i64::MAX, 18), std::cmp::Ordering::Greater);
        assert_eq!(round(1255, 2, 1, 1, 18), Some(126));
        assert_eq!(round(1255, 2, i64::MIN, 0, 18), Some(0), "rounded to nothing");
        assert_eq!(round(1255, 2, i64::MAX, 18, 18), None, "18 places leave no integer digit");
        assert_eq!(round(-1255, 2, 1, 1, 18), Some(-126));
        assert_eq!(round(1255, 2, 3, 3, 18), Some(12_550));
        assert_eq!(round(1255, 2, -1, 0, 18), Some(10));
        assert_eq!(round(1500, 2, -1, 0, 18), Some(20));
        assert_eq!(round(99_995, 3, 2, 2, 3), None, "100.00 needs more than 3 digits... of DECIMAL(3,2)");
        assert_eq!(floor_or_ceil(-1250, 3, false), -2);
        assert_eq!(floor_or_ceil(-1250, 3, true), -1);
        assert_eq!(floor_or_ceil(2000, 3, true), 2);
        assert_eq!(literal(1.1), Some((11, 2, 1)));
        assert_eq!(literal(0.05), Some((5, 2, 2)));
        assert_eq!(literal(-250.0), Some((-250, 3, 0)));
        assert_eq!(literal(1e300), None);
        assert_eq!(rescale(125, 2, 1, 18), Some(13));
        assert_eq!(rescale(-125, 2, 1, 18), Some(-13));
        assert_eq!(rescale(i64::MAX, 0, 2, 18), None);
    }
}
