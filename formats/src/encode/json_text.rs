//! JSON's scalar values as text: numbers, strings, timestamps — what
//! every JSON writer here (rows, keys, nested values) writes them with.

use sluice_plan::time::format_timestamp;

/// A timestamp as Sluice writes it: quoted RFC 3339, UTC, milliseconds.
pub(super) fn write_timestamp(ms: i64, out: &mut Vec<u8>) {
    out.push(b'"');
    format_timestamp(ms, out);
    out.push(b'"');
}

/// JSON has no NaN or infinities: they are written as null.
///
/// Whole numbers below 10^15 (prices, quantities, sums of them) are written
/// with `itoa` and `.0`, byte for byte what `ryu` writes, at a fraction of
/// its cost; everything else goes through `ryu`.
pub fn write_float(x: f64, out: &mut Vec<u8>) {
    #[allow(clippy::cast_possible_truncation, clippy::float_cmp)]
    if x != 0.0 && x.abs() < 1e15 && x.trunc() == x {
        out.extend_from_slice(itoa::Buffer::new().format(x as i64).as_bytes());
        out.extend_from_slice(b".0");
    } else if x.is_finite() {
        out.extend_from_slice(ryu::Buffer::new().format_finite(x).as_bytes());
    } else {
        out.extend_from_slice(b"null");
    }
}

/// Bytes that must be escaped inside a JSON string.
static ESCAPE: [bool; 256] = {
    let mut t = [false; 256];
    let mut i = 0;
    while i < 0x20 {
        t[i] = true;
        i += 1;
    }
    t[b'"' as usize] = true;
    t[b'\\' as usize] = true;
    t
};

/// Writes `s` as a quoted JSON string.
pub fn write_str(s: &str, out: &mut Vec<u8>) {
    out.push(b'"');
    let bytes = s.as_bytes();
    let mut start = 0;
    for (i, &b) in bytes.iter().enumerate() {
        if !ESCAPE[b as usize] {
            continue;
        }
        out.extend_from_slice(&bytes[start..i]);
        match b {
            b'"' => out.extend_from_slice(b"\\\""),
            b'\\' => out.extend_from_slice(b"\\\\"),
            b'\n' => out.extend_from_slice(b"\\n"),
            b'\r' => out.extend_from_slice(b"\\r"),
            b'\t' => out.extend_from_slice(b"\\t"),
            _ => {
                const HEX: &[u8; 16] = b"0123456789abcdef";
                out.extend_from_slice(b"\\u00");
                out.push(HEX[(b >> 4) as usize]);
                out.push(HEX[(b & 0xf) as usize]);
            }
        }
        start = i + 1;
    }
    out.extend_from_slice(&bytes[start..]);
    out.push(b'"');
}
