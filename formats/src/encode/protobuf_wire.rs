//! Protobuf's wire encoding of Sluice's values: varints, text,
//! decimals as text, `google.protobuf.Timestamp`s, and length-delimited
//! messages written in place.

/// Wire types.
pub(super) const VARINT: u32 = 0;
pub(super) const FIXED64: u32 = 1;
pub(super) const LENGTH: u32 = 2;

#[inline]
pub(super) fn varint(mut v: u64, out: &mut Vec<u8>) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

#[inline]
pub(super) fn text(key: u32, s: &str, out: &mut Vec<u8>) {
    varint(u64::from(key | LENGTH), out);
    varint(s.len() as u64, out);
    out.extend_from_slice(s.as_bytes());
}

/// A decimal as a `string` field of its text (`-12.50`).
#[inline]
pub(super) fn decimal(key: u32, v: i128, scale: u8, out: &mut Vec<u8>) {
    varint(u64::from(key | LENGTH), out);
    varint(sluice_plan::decimal::text_len(v, scale) as u64, out);
    sluice_plan::decimal::write(v, scale, out);
}

/// A `google.protobuf.Timestamp` of `ms` epoch milliseconds: `seconds`
/// (floored) and `nanos` (0 to 999,999,999), each left out when 0 as
/// proto3 writes them.
#[inline]
pub(super) fn timestamp(key: u32, ms: i64, out: &mut Vec<u8>) {
    varint(u64::from(key | LENGTH), out);
    let (seconds, nanos) = (ms.div_euclid(1000), ms.rem_euclid(1000) * 1_000_000);
    // At most 1 + 10 + 1 + 4 bytes: the length is one byte.
    let at = out.len();
    out.push(0);
    if seconds != 0 {
        out.push(0x08);
        varint(seconds as u64, out);
    }
    if nanos != 0 {
        out.push(0x10);
        varint(nanos as u64, out);
    }
    out[at] = (out.len() - at - 1) as u8;
}

/// Field `key >> 3` as a length-delimited value that `write` appends: the
/// length is written in front once known (one byte, moved along in the
/// rare value of 128 bytes or more).
#[inline]
pub(super) fn delimited(key: u32, out: &mut Vec<u8>, write: impl FnOnce(&mut Vec<u8>)) {
    varint(u64::from(key | LENGTH), out);
    let at = out.len();
    out.push(0);
    write(out);
    let len = out.len() - at - 1;
    if len < 0x80 {
        out[at] = len as u8;
    } else {
        let mut prefix = Vec::with_capacity(10);
        varint(len as u64, &mut prefix);
        out.splice(at..=at, prefix);
    }
}
