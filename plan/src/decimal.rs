//! Exact decimals: `DECIMAL(p, s)` for `p` up to [`MAX_PRECISION`] (38,
//! as in Flink, Spark, SQL Server and Avro's usual bound).
//!
//! A value is its unscaled integer (`12.34` in `DECIMAL(9, 2)` is `1234`).
//! Up to [`NARROW_PRECISION`] (18) digits it lives in the `Int` storage
//! bigints and timestamps use, so columns, group keys, exchange rows and
//! saved state carry it without a storage type of its own and comparing
//! two values of one scale is comparing integers (Spark and Arrow's
//! `Decimal64` make the same cut). Wider decimals are stored as `i128`
//! (`ColumnData::Wide`): 38 digits always fit one. This module computes on
//! `i128` values for both; where an intermediate can pass 38 digits (a
//! product of two 38-digit values has 76, a quotient is computed from a
//! dividend shifted by up to 76 places) it computes in 256 bits, so
//! nothing wraps and every result that fits is exact.
//!
//! Rounding is PostgreSQL's for `numeric`: half away from zero, when a cast
//! or `ROUND` drops digits and when a quotient is cut to its scale. A
//! result that does not fit its precision is NULL (PostgreSQL raises
//! "numeric field overflow"; a streaming job cannot stop for one record,
//! and Sluice's other failed computations, such as a division by zero,
//! are NULL too).

use ethnum::I256;

/// The most digits a `DECIMAL` holds here.
pub const MAX_PRECISION: u8 = 38;

/// The most digits a decimal stored as an `i64` holds; wider ones are
/// stored as `i128`.
pub const NARROW_PRECISION: u8 = 18;

/// Whether a `DECIMAL(precision, _)` is stored as an `i64`.
#[inline]
pub const fn is_narrow(precision: u8) -> bool {
    precision <= NARROW_PRECISION
}

/// `10^k` for `k` ≤ 38.
#[inline]
pub fn pow10(k: u8) -> i128 {
    10i128.pow(u32::from(k.min(38)))
}

/// `10^k` in 256 bits, for `k` ≤ 76.
#[inline]
fn pow10_wide(k: u32) -> I256 {
    I256::new(10).pow(k.min(76))
}

/// `v` if it has at most `precision` digits.
#[inline]
pub fn fit(v: i128, precision: u8) -> Option<i128> {
    (v.unsigned_abs() < pow10(precision).unsigned_abs()).then_some(v)
}

/// A 256-bit `v` if it has at most `precision` digits.
#[inline]
fn fit_wide(v: I256, precision: u8) -> Option<i128> {
    fit(i128::try_from(v).ok()?, precision)
}

/// `v` as the `i64` a narrow column stores (a value that [`fit`] at most
/// 18 digits always converts).
#[inline]
pub fn narrow(v: i128) -> i64 {
    i64::try_from(v).unwrap_or_default()
}

/// Adds `x` to a running total kept as an `i128` that wraps and the times
/// it wrapped (each ±2^128): exact in any order of additions and
/// subtractions (a SUM takes values back), where a plain `i128` could
/// overflow on the way to a total that fits. A total is
/// [`total_of`]`(sum, wraps)`.
#[inline]
pub fn add_wrapping(sum: &mut i128, wraps: &mut i64, x: i128) {
    let (r, wrapped) = sum.overflowing_add(x);
    *sum = r;
    if wrapped {
        *wraps += if x < 0 { -1 } else { 1 };
    }
}

/// The total [`add_wrapping`] kept, if it fits an `i128` (a total that
/// wrapped is past 38 digits).
#[inline]
pub fn total_of(sum: i128, wraps: i64) -> Option<i128> {
    (wraps == 0).then_some(sum)
}

/// `n / d` rounded half away from zero (`d` ≠ 0).
#[inline]
pub fn div_round(n: i128, d: i128) -> i128 {
    let (q, r) = (n / d, n % d);
    if r.unsigned_abs() * 2 >= d.unsigned_abs() { q + if (n < 0) == (d < 0) { 1 } else { -1 } } else { q }
}

/// [`div_round`] in 256 bits.
#[inline]
fn div_round_wide(n: I256, d: I256) -> I256 {
    let (q, r) = (n / d, n % d);
    if r.unsigned_abs() * 2 >= d.unsigned_abs() { q + if (n < 0) == (d < 0) { 1 } else { -1 } } else { q }
}

/// `v` at scale `from` as a value at scale `to` (rounded half away from
/// zero when `to` is smaller), if it has at most `precision` digits.
#[inline]
pub fn rescale(v: i128, from: u8, to: u8, precision: u8) -> Option<i128> {
    // Past 38 digits a value fits no precision, so an overflow is a value
    // too large.
    let r = if to >= from { v.checked_mul(pow10(to - from))? } else { div_round(v, pow10(from - to)) };
    fit(r, precision)
}

/// `v` at scale `from` in 256 bits at the larger scale `to`.
#[inline]
fn widen(v: i128, from: u8, to: u8) -> I256 {
    I256::from(v) * pow10_wide(u32::from(to.saturating_sub(from)))
}

/// Whether `a` and `b` can be aligned and combined in `i128`: both under
/// 19 digits and both scales at most 18, so an aligned value has at most
/// 36 digits and a product at most 36.
#[inline]
fn small(a: i128, sa: u8, b: i128, sb: u8) -> bool {
    const LIMIT: u128 = 1_000_000_000_000_000_000;
    a.unsigned_abs() < LIMIT && b.unsigned_abs() < LIMIT && sa <= NARROW_PRECISION && sb <= NARROW_PRECISION
}

/// Reads decimal text — `-12.5`, `+3`, `.5`, `1.25e3`, surrounding spaces —
/// as a value of `DECIMAL(precision, scale)`, rounding half away from zero
/// digits past the scale. `None` for anything else, or a value too large.
pub fn parse(text: &str, precision: u8, scale: u8) -> Option<i128> {
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
/// Appends `v` at `scale` as text: `-12.50`, `0.05`, `7` (scale 0).
pub fn write(v: i128, scale: u8, out: &mut Vec<u8>) {
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
pub fn text_len(v: i128, scale: u8) -> usize {
    let digits = itoa::Buffer::new().format(v.unsigned_abs()).len();
    let scale = usize::from(scale);
    let body = if scale == 0 { digits } else { digits.max(scale + 1) + 1 };
    body + usize::from(v < 0)
}

/// [`write`] into a new string.
pub fn to_text(v: i128, scale: u8) -> String {
    let mut out = Vec::with_capacity(24);
    write(v, scale, &mut out);
    String::from_utf8(out).unwrap_or_default()
}

/// The nearest double to `v` at `scale`.
pub fn to_f64(v: i128, scale: u8) -> f64 {
    // Both operands exact, so the one division is correctly rounded.
    if v.unsigned_abs() < 1 << 53 && scale <= 22 {
        #[allow(clippy::cast_precision_loss)]
        return v as f64 / 10f64.powi(i32::from(scale));
    }
    to_text(v, scale).parse().unwrap_or(f64::NAN)
}

/// A double as a `DECIMAL(precision, scale)`: its shortest decimal text (the
/// digits a double prints as, so `0.1` is `0.1`), rounded to the scale.
/// `None` for NaN, infinities and values too large.
pub fn from_f64(x: f64, precision: u8, scale: u8) -> Option<i128> {
    if !x.is_finite() {
        return None;
    }
    parse(ryu::Buffer::new().format_finite(x), precision, scale)
}

/// A double constant written beside a decimal (`amount * 1.1`) as the exact
/// decimal its text reads (PostgreSQL reads `1.1` as `numeric`): its
/// unscaled value, digits and scale, or `None` when it has no short exact
/// form (`1e300`, NaN).
pub fn literal(x: f64) -> Option<(i128, u8, u8)> {
    (0..=MAX_PRECISION).find_map(|s| {
        let v = from_f64(x, MAX_PRECISION, s)?;
        #[allow(clippy::float_cmp)]
        (to_f64(v, s) == x).then(|| {
            let digits = u8::try_from(itoa::Buffer::new().format(v.unsigned_abs()).len()).unwrap_or(MAX_PRECISION);
            (v, digits.max(s).max(1), s)
        })
    })
}

/// The arithmetic [`arith`] does: the IR's `ArithOp`, which this module,
/// below the IR (types use it), does not name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    Add,
    Sub,
    Mul,
    Div,
    Mod,
}

/// `a op b` for `a` at scale `sa` and `b` at `sb`, as a value of
/// `DECIMAL(p, s)`; `None` on overflow or a zero divisor.
#[inline]
pub fn arith(op: Op, a: i128, sa: u8, b: i128, sb: u8, p: u8, s: u8) -> Option<i128> {
    use Op::*;
    if !small(a, sa, b, sb) {
        return arith_wide(op, a, sa, b, sb, p, s);
    }
    // Both operands under 19 digits at scales up to 18: every aligned
    // value and product fits an i128.
    let top = sa.max(sb);
    let aligned = |v: i128, from: u8| v * pow10(top - from);
    let v = match op {
        Add => aligned(a, sa) + aligned(b, sb),
        Sub => aligned(a, sa) - aligned(b, sb),
        Mod => {
            let d = aligned(b, sb);
            if d == 0 {
                return None;
            }
            aligned(a, sa) % d
        }
        Mul => return rescale(a * b, sa + sb, s, p),
        // A quotient's dividend is shifted by up to 36 places here: past
        // an i128, whatever the operands.
        Div => return arith_wide(op, a, sa, b, sb, p, s),
    };
    rescale(v, top, s, p)
}

/// [`arith`] in 256 bits: operands of up to 38 digits at scales up to 38.
fn arith_wide(op: Op, a: i128, sa: u8, b: i128, sb: u8, p: u8, s: u8) -> Option<i128> {
    use Op::*;
    let to_scale = |v: I256, at: u8| {
        if s >= at {
            fit_wide(v.checked_mul(pow10_wide(u32::from(s - at)))?, p)
        } else {
            fit_wide(div_round_wide(v, pow10_wide(u32::from(at - s))), p)
        }
    };
    let top = sa.max(sb);
    match op {
        Add => to_scale(widen(a, sa, top) + widen(b, sb, top), top),
        Sub => to_scale(widen(a, sa, top) - widen(b, sb, top), top),
        Mod => {
            let d = widen(b, sb, top);
            if d == 0 {
                return None;
            }
            to_scale(widen(a, sa, top) % d, top)
        }
        // Exact at scale sa + sb (76 digits at most), then to the result's.
        Mul => to_scale(I256::from(a) * I256::from(b), sa + sb),
        Div => {
            if b == 0 {
                return None;
            }
            // a / b at scale s: (a · 10^(s - sa + sb)) / b, rounded. A
            // dividend past 256 bits has a quotient past 38 digits.
            let shift = i32::from(s) - i32::from(sa) + i32::from(sb);
            let k = pow10_wide(shift.unsigned_abs());
            let (n, d) = if shift >= 0 {
                (I256::from(a).checked_mul(k)?, I256::from(b))
            } else {
                (I256::from(a), I256::from(b).checked_mul(k)?)
            };
            fit_wide(div_round_wide(n, d), p)
        }
    }
}

/// `v` at scale `from` rounded half away from zero to `digits` places
/// (tens, hundreds… when negative), as a value at scale `to` with at most
/// `precision` digits: `ROUND`.
pub fn round(v: i128, from: u8, digits: i64, to: u8, precision: u8) -> Option<i128> {
    let drop = i64::from(from).saturating_sub(digits);
    if drop <= 0 {
        return rescale(v, from, to, precision);
    }
    // Rounding to more digits than any value has leaves nothing.
    let Some(k) = u8::try_from(drop).ok().filter(|k| *k <= 38) else { return Some(0) };
    // The rounded value in units of 10^k at scale `from`.
    let units = div_round(v, pow10(k));
    let at_from = units.checked_mul(pow10(k))?;
    let r = if to >= from { at_from.checked_mul(pow10(to - from))? } else { at_from / pow10(from - to) };
    fit(r, precision)
}

/// `FLOOR` (`up` false) or `CEIL` of `v` at scale `from`, as a value at
/// scale 0.
pub fn floor_or_ceil(v: i128, from: u8, up: bool) -> i128 {
    let d = pow10(from);
    let q = v.div_euclid(d);
    if up && v.rem_euclid(d) != 0 { q + 1 } else { q }
}

/// How `a` (scale `sa`) compares with `b` (scale `sb`), exactly.
#[inline]
pub fn cmp(a: i128, sa: u8, b: i128, sb: u8) -> std::cmp::Ordering {
    if sa == sb {
        return a.cmp(&b);
    }
    if small(a, sa, b, sb) {
        let top = sa.max(sb);
        return (a * pow10(top - sa)).cmp(&(b * pow10(top - sb)));
    }
    let top = sa.max(sb);
    widen(a, sa, top).cmp(&widen(b, sb, top))
}

#[cfg(test)]
mod tests {
    use super::*;
    use Op as ArithOp;

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
        assert_eq!(to_text(i128::from(i64::MIN), 4), "-922337203685477.5808");
        for (v, scale) in [(1234, 2), (-5, 2), (0, 3), (7, 0), (i128::from(i64::MIN), 4), (-120, 1), (99, 2), (100, 2)]
        {
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
        assert_eq!(arith(ArithOp::Add, i128::from(i64::MAX), 0, i128::from(i64::MAX), 0, 18, 0), None);
        assert_eq!(arith(ArithOp::Mul, i128::from(i64::MIN), 0, i128::from(i64::MIN), 0, 18, 0), None);
        assert_eq!(arith(ArithOp::Div, i128::from(i64::MIN), 0, 1, 18, 18, 6), None);
        // A quotient whose dividend shifts past 38 digits is still exact.
        assert_eq!(arith(ArithOp::Div, 999_999_999_999_999_999, 0, 1, 18, 18, 6), None, "10^36: too large for 18");
        assert_eq!(arith(ArithOp::Div, 5, 0, 1, 18, 38, 6), Some(5 * pow10(24)));
        assert_eq!(cmp(150, 2, 15, 1), std::cmp::Ordering::Equal);
        assert_eq!(cmp(i128::from(i64::MAX), 0, i128::from(i64::MAX), 18), std::cmp::Ordering::Greater);
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
        assert_eq!(rescale(i128::from(i64::MAX), 0, 2, 18), None);
    }

    #[test]
    fn thirty_eight_digits_are_exact() {
        let max = pow10(38) - 1;
        let max_text = "99999999999999999999999999999999999999";
        assert_eq!(parse(max_text, 38, 0), Some(max));
        assert_eq!(parse("-9999999999999999999999999999.9999999999", 38, 10), Some(-max));
        assert_eq!(parse("100000000000000000000000000000000000000", 38, 0), None, "39 digits");
        assert_eq!(parse("12345678901234567890.125", 22, 2), Some(1_234_567_890_123_456_789_013));
        assert_eq!(to_text(-max, 10), "-9999999999999999999999999999.9999999999");
        assert_eq!(text_len(-max, 10), 40);
        assert_eq!(to_text(i128::from(i64::MAX) * 100, 2), "9223372036854775807.00");
        // Sums and differences across scales: aligned in 256 bits.
        assert_eq!(arith(ArithOp::Add, max, 0, 1, 0, 38, 0), None, "10^38 needs 39 digits");
        assert_eq!(arith(ArithOp::Sub, max, 0, max, 0, 38, 0), Some(0));
        assert_eq!(arith(ArithOp::Add, max, 10, 1, 38, 38, 10), Some(max), "1e-38 rounds away at scale 10");
        assert_eq!(
            arith(ArithOp::Add, 5, 0, 5, 38, 38, 37),
            Some(5 * pow10(37) + 1),
            "5 + 5e-38 at 37 places rounds up"
        );
        // A product of two 38-digit values has 76 digits before it is cut
        // to the result's scale.
        let third = parse("333333333.3333333333333333333", 38, 19).unwrap();
        assert_eq!(
            arith(ArithOp::Mul, third, 19, third, 19, 38, 6),
            parse("111111111111111111.111111", 38, 6),
            "(10^9 / 3)² to six places, from a 56-digit product"
        );
        let big = parse("3333333333333333333.3333333333333333333", 38, 19).unwrap();
        assert_eq!(
            arith(ArithOp::Mul, big, 19, big, 19, 38, 6),
            None,
            "38 integer digits leave no room for six places"
        );
        assert_eq!(arith(ArithOp::Mul, max, 0, max, 0, 38, 0), None);
        assert_eq!(arith(ArithOp::Mul, -max, 0, 1, 0, 38, 0), Some(-max));
        // Quotients: the dividend shifted by up to 76 places.
        assert_eq!(arith(ArithOp::Div, max, 0, 3, 0, 38, 0), Some(max / 3));
        assert_eq!(arith(ArithOp::Div, 1, 0, 3, 0, 38, 37), Some(pow10(37) / 3));
        assert_eq!(arith(ArithOp::Div, 2, 0, 3, 0, 38, 37), Some(2 * pow10(37) / 3 + 1));
        assert_eq!(arith(ArithOp::Div, 1, 0, max, 38, 38, 6), Some(1_000_000), "1 / 0.99… = 1.000000");
        assert_eq!(arith(ArithOp::Mod, max, 0, 7, 0, 38, 0), Some(max % 7));
        assert_eq!(cmp(max, 0, max, 38), std::cmp::Ordering::Greater);
        assert_eq!(cmp(-max, 0, 1, 38), std::cmp::Ordering::Less);
        assert_eq!(cmp(10, 1, pow10(37), 37), std::cmp::Ordering::Equal);
        assert_eq!(rescale(max, 0, 1, 38), None);
        assert_eq!(rescale(max, 10, 0, 38), Some(pow10(28)), "rounds up to 10^28");
        assert_eq!(round(max, 10, 2, 2, 38), Some(pow10(30)));
        assert_eq!(floor_or_ceil(-max, 10, false), -pow10(28));
        assert_eq!(floor_or_ceil(-max, 10, true), -pow10(28) + 1);
        assert_eq!(to_f64(pow10(37), 37), 1.0);
        assert_eq!(from_f64(1e37, 38, 0), Some(pow10(37)));
        assert_eq!(literal(1e20), Some((pow10(20), 21, 0)));
    }
}
