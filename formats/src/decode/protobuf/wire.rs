//! Protobuf's wire encoding: varints, zig-zag, length-delimited spans,
//! skipping a field, and reading one field's value into a [`Slot`] that
//! points back into the record (no copy, no allocation).

use super::program::Read;

/// A column's value in the record being read.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) enum Slot {
    Unset,
    /// A nested column's field is in the record: read when the record
    /// ends, from every occurrence ([`super::nested`]).
    Seen,
    Int(i64),
    Float(f64),
    Bool(bool),
    /// `payload[start..end]`, UTF-8.
    Text(usize, usize),
    /// Value `number` of enum `enum_index`.
    Enum(usize, i32),
}

/// A varint of at most 10 bytes at `payload[*at..]`. Field keys and most
/// lengths are one byte: those return at once.
#[inline]
pub(super) fn varint(payload: &[u8], at: &mut usize) -> Result<u64, String> {
    if let Some(&b) = payload.get(*at)
        && b < 0x80
    {
        *at += 1;
        return Ok(u64::from(b));
    }
    varint_long(payload, at)
}

#[inline(never)]
fn varint_long(payload: &[u8], at: &mut usize) -> Result<u64, String> {
    let mut value: u64 = 0;
    let mut shift = 0;
    loop {
        let Some(&b) = payload.get(*at) else {
            return Err(format!("the value ends at byte {} in a number", payload.len()));
        };
        *at += 1;
        if shift == 63 && b > 1 {
            return Err(format!("a number longer than 64 bits at byte {at}"));
        }
        value |= u64::from(b & 0x7f) << shift;
        if b < 0x80 {
            return Ok(value);
        }
        shift += 7;
        if shift > 63 {
            return Err(format!("a number longer than 10 bytes at byte {at}"));
        }
    }
}

#[inline]
pub(super) fn zigzag(v: u64) -> i64 {
    ((v >> 1) as i64) ^ -((v & 1) as i64)
}

/// `n` bytes at `payload[*at..end]`, or an error if fewer are left.
#[inline]
pub(super) fn take(at: &mut usize, n: u64, end: usize) -> Result<(usize, usize), String> {
    let start = *at;
    let stop = usize::try_from(n).ok().and_then(|n| start.checked_add(n)).filter(|&s| s <= end);
    let stop = stop.ok_or_else(|| format!("a field of {n} bytes where {} are left", end.saturating_sub(start)))?;
    *at = stop;
    Ok((start, stop))
}

/// The value of a field read as `read`, at `payload[*at..end]`.
#[inline(always)]
pub(super) fn value(payload: &[u8], read: Read, at: &mut usize, end: usize) -> Result<Slot, String> {
    let bytes = &payload[..end];
    let fixed = |at: &mut usize, n: u64| take(at, n, end).map(|(s, e)| &bytes[s..e]);
    Ok(match read {
        Read::Varint => Slot::Int(varint(bytes, at)? as i64),
        Read::Unsigned => {
            let v = varint(bytes, at)?;
            Slot::Int(i64::try_from(v).map_err(|_| format!("uint64 {v} is larger than a bigint"))?)
        }
        Read::ZigZag => Slot::Int(zigzag(varint(bytes, at)?)),
        Read::Bool => Slot::Bool(varint(bytes, at)? != 0),
        Read::EnumName(e) => Slot::Enum(e, varint(bytes, at)? as i32),
        Read::Fixed32Unsigned | Read::Fixed32Signed | Read::Float => {
            let b = fixed(at, 4)?;
            let w = [b[0], b[1], b[2], b[3]];
            match read {
                Read::Fixed32Unsigned => Slot::Int(i64::from(u32::from_le_bytes(w))),
                Read::Fixed32Signed => Slot::Int(i64::from(i32::from_le_bytes(w))),
                _ => Slot::Float(f64::from(f32::from_le_bytes(w))),
            }
        }
        Read::Fixed64Unsigned | Read::Fixed64Signed | Read::Double => {
            let mut w = [0; 8];
            w.copy_from_slice(fixed(at, 8)?);
            match read {
                Read::Fixed64Unsigned => {
                    let v = u64::from_le_bytes(w);
                    Slot::Int(i64::try_from(v).map_err(|_| format!("fixed64 {v} is larger than a bigint"))?)
                }
                Read::Fixed64Signed => Slot::Int(i64::from_le_bytes(w)),
                _ => Slot::Float(f64::from_le_bytes(w)),
            }
        }
        // Checked for UTF-8 when pushed (once, and only the value
        // that counts).
        Read::Text => {
            let n = varint(bytes, at)?;
            let (start, stop) = take(at, n, end)?;
            Slot::Text(start, stop)
        }
        Read::Timestamp => {
            let n = varint(bytes, at)?;
            let (start, stop) = take(at, n, end)?;
            let (mut seconds, mut nanos, mut i) = (0i64, 0i64, start);
            while i < stop {
                let key = varint(bytes, &mut i)?;
                match (key >> 3, key & 7) {
                    (1, 0) => seconds = varint(bytes, &mut i)? as i64,
                    (2, 0) => nanos = i64::from(varint(bytes, &mut i)? as i32),
                    (_, wire) => skip(bytes, &mut i, (wire & 7) as u8, stop)?,
                }
            }
            let ms = seconds.checked_mul(1000).and_then(|s| s.checked_add(nanos.div_euclid(1_000_000)));
            Slot::Int(ms.ok_or_else(|| format!("a Timestamp of {seconds} s out of range"))?)
        }
    })
}

/// Skips a field of wire type `wire`.
pub(super) fn skip(bytes: &[u8], at: &mut usize, wire: u8, end: usize) -> Result<(), String> {
    match wire {
        0 => varint(bytes, at).map(drop),
        1 => take(at, 8, end).map(drop),
        2 => {
            let n = varint(bytes, at)?;
            take(at, n, end).map(drop)
        }
        5 => take(at, 4, end).map(drop),
        3 | 4 => Err("a group (deprecated wire types 3 and 4) is not supported".into()),
        w => Err(format!("wire type {w} at byte {at}")),
    }
}
