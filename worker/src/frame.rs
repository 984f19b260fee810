//! The records of a repartition topic: frames.
//!
//! Every record's value starts with a 13-byte frame header — kind (1 byte),
//! upstream partition (`u32`, big-endian), then an `i64` (big-endian):
//!
//! | kind | meaning | the `i64` | after the header |
//! |------|---------|-----------|------------------|
//! | 1 | a row | its sequence number in the upstream partition | the row (binary: `sluice_formats::encode::BinaryEncoder`) |
//! | 2 | a watermark marker | the upstream partition's watermark | — |
//! | 3 | the upstream partition is idle | 0 | — |
//! | 4 | rows, packed | the first row's sequence number | per row: its sequence number minus the previous row's (zigzag LEB128), its length (LEB128), the row |
//!
//! Writers pack: a batch's rows for one partition travel as one record of
//! kind 4 ([`Packer`], at most [`PACK_MAX_ROWS`] rows or
//! [`PACK_MAX_BYTES`]), so the per-record costs of producing, storing and
//! consuming (librdkafka bookkeeping, delivery reports, record headers) are
//! paid once per pack instead of once per row — the difference between a
//! shuffle that costs most of a job's throughput and one that does not
//! (docs/benchmarks.md). Kind 1 is still read, so records written by an
//! older worker in a repartition topic survive an upgrade. The record's
//! timestamp is the pack's oldest row's, so latency measured at the sink
//! never looks better than it was.

use sluice_crds::partition_for_key;
use sluice_formats::encode::EncodedRows;

use crate::Error;

/// The watermark an upstream partition reports when a bounded run reached
/// the end of its input: nothing at all can follow.
pub const END: i64 = i64::MAX;

/// Bytes before the payload of every record on a repartition topic.
pub const FRAME_HEADER: usize = 13;

const ROW: u8 = 1;
const WATERMARK: u8 = 2;
const IDLE: u8 = 3;
const ROWS: u8 = 4;

/// Rows in one packed record at most: a reader's batch is counted in rows,
/// and one poll may bring a pack per record before the count is checked,
/// so a pack must stay small next to a batch; 64 rows already pay the
/// per-record costs 64 times less often.
pub const PACK_MAX_ROWS: usize = 64;
/// Bytes of rows in one packed record at most (wide rows): far below the
/// broker's default `message.max.bytes` (1 MiB).
pub const PACK_MAX_BYTES: usize = 64 * 1024;

/// One record of a repartition topic, parsed (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Frame<'a> {
    Row {
        from: u32,
        seq: i64,
        row: &'a [u8],
    },
    /// Rows packed by a [`Packer`]: read them with [`Frame::rows`].
    Rows {
        from: u32,
        first: i64,
        body: &'a [u8],
    },
    Watermark {
        from: u32,
        at: i64,
    },
    Idle {
        from: u32,
    },
}

impl<'a> Frame<'a> {
    /// Appends the frame's bytes to `out`.
    pub fn write(&self, out: &mut Vec<u8>) {
        let (kind, from, n, row): (u8, u32, i64, &[u8]) = match *self {
            Frame::Row { from, seq, row } => (ROW, from, seq, row),
            Frame::Rows { from, first, body } => (ROWS, from, first, body),
            Frame::Watermark { from, at } => (WATERMARK, from, at, &[]),
            Frame::Idle { from } => (IDLE, from, 0, &[]),
        };
        write_header(out, kind, from, n);
        out.extend_from_slice(row);
    }

    /// The upstream partition the frame came from.
    pub fn from(&self) -> u32 {
        match *self {
            Frame::Row { from, .. }
            | Frame::Rows { from, .. }
            | Frame::Watermark { from, .. }
            | Frame::Idle { from } => from,
        }
    }

    /// The rows of a row frame, one or packed, with their sequence numbers
    /// (none for a marker). A pack that ends inside a row yields an error
    /// naming the row, after the rows before it.
    pub fn rows(&self) -> PackedRows<'a> {
        match *self {
            Frame::Row { seq, row, .. } => PackedRows { single: Some((seq, row)), body: &[], seq: 0, index: 0 },
            Frame::Rows { first, body, .. } => PackedRows { single: None, body, seq: first, index: 0 },
            Frame::Watermark { .. } | Frame::Idle { .. } => PackedRows { single: None, body: &[], seq: 0, index: 0 },
        }
    }
}

fn write_header(out: &mut Vec<u8>, kind: u8, from: u32, n: i64) {
    out.push(kind);
    out.extend_from_slice(&from.to_be_bytes());
    out.extend_from_slice(&n.to_be_bytes());
}

/// The rows of a frame: `(sequence number, row)`.
#[derive(Debug, Clone)]
pub struct PackedRows<'a> {
    single: Option<(i64, &'a [u8])>,
    body: &'a [u8],
    seq: i64,
    index: usize,
}

impl<'a> Iterator for PackedRows<'a> {
    type Item = Result<(i64, &'a [u8]), String>;

    fn next(&mut self) -> Option<Self::Item> {
        if let Some(row) = self.single.take() {
            return Some(Ok(row));
        }
        if self.body.is_empty() {
            return None;
        }
        let index = self.index;
        self.index += 1;
        let parsed = (|| {
            let (delta, used) = read_varint(self.body)?;
            let (len, more) = read_varint(&self.body[used..])?;
            let start = used + more;
            let end = usize::try_from(len).ok().and_then(|l| start.checked_add(l)).filter(|e| *e <= self.body.len())?;
            Some((unzigzag(delta), start, end))
        })();
        let Some((delta, start, end)) = parsed else {
            self.body = &[];
            return Some(Err(format!("packed row {index} is cut short")));
        };
        self.seq = self.seq.wrapping_add(delta);
        let row = &self.body[start..end];
        self.body = &self.body[end..];
        Some(Ok((self.seq, row)))
    }
}

fn write_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// A LEB128 value and the bytes it took; `None` when cut short or longer
/// than a `u64`.
fn read_varint(bytes: &[u8]) -> Option<(u64, usize)> {
    let mut v = 0u64;
    for (i, &b) in bytes.iter().enumerate().take(10) {
        v |= u64::from(b & 0x7f) << (7 * i);
        if b & 0x80 == 0 {
            return Some((v, i + 1));
        }
    }
    None
}

fn zigzag(v: i64) -> u64 {
    ((v << 1) ^ (v >> 63)) as u64
}

fn unzigzag(v: u64) -> i64 {
    ((v >> 1) as i64) ^ -((v & 1) as i64)
}

/// Takes a finished pack: `(partition, record, timestamp, its row)`, the
/// last `Some` when the pack holds one row only — a row too large for its
/// record can then be set aside alone (see [`Packer::pack`]).
pub type EmitPack<'a> = dyn FnMut(usize, &[u8], i64, Option<&[u8]>) -> Result<(), Error> + 'a;

/// Packs the rows of an upstream partition's batch by destination
/// partition into records of kind 4 (see the module docs), reusing its
/// buffers from batch to batch.
#[derive(Debug)]
pub struct Packer {
    packs: Vec<Pack>,
}

#[derive(Debug, Default)]
struct Pack {
    bytes: Vec<u8>,
    rows: usize,
    last_seq: i64,
    /// The oldest row's timestamp (0: none known).
    timestamp: i64,
    /// Where the first row's bytes start.
    first_row: usize,
}

impl Pack {
    /// The pack's one row, when it holds one only.
    fn single(&self) -> Option<&[u8]> {
        (self.rows == 1).then(|| self.bytes.get(self.first_row..)).flatten()
    }
}

impl Packer {
    pub fn new(partitions: usize) -> Self {
        Self { packs: (0..partitions.max(1)).map(|_| Pack::default()).collect() }
    }

    /// Packs upstream partition `from`'s rows and hands every finished
    /// pack to `emit(partition, record, timestamp, row)`; all of them are
    /// handed over before it returns (a batch's rows are never held back
    /// for the next one: they would wait a whole batch). A row that would
    /// take a pack past [`PACK_MAX_BYTES`] starts a pack of its own, so a
    /// row too large for any record fails alone.
    pub fn pack(
        &mut self,
        from: u32,
        rows: &EncodedRows,
        seqs: &[i64],
        timestamps: &[i64],
        emit: &mut EmitPack<'_>,
    ) -> Result<(), Error> {
        let n = i32::try_from(self.packs.len()).unwrap_or(i32::MAX);
        for i in 0..rows.len() {
            let p = usize::try_from(partition_for_key(rows.key(i), n)).unwrap_or(0);
            let seq = seqs.get(i).copied().unwrap_or_default();
            let ts = timestamps.get(i).copied().unwrap_or(0);
            let pack = &mut self.packs[p];
            let row = rows.value(i);
            if pack.rows > 0 && pack.bytes.len() + row.len() > PACK_MAX_BYTES {
                let emitted = emit(p, &pack.bytes, pack.timestamp, pack.single());
                pack.rows = 0;
                emitted?;
            }
            if pack.rows == 0 {
                pack.bytes.clear();
                write_header(&mut pack.bytes, ROWS, from, seq);
                pack.last_seq = seq;
                pack.timestamp = 0;
            }
            write_varint(&mut pack.bytes, zigzag(seq.wrapping_sub(pack.last_seq)));
            write_varint(&mut pack.bytes, row.len() as u64);
            if pack.rows == 0 {
                pack.first_row = pack.bytes.len();
            }
            pack.bytes.extend_from_slice(row);
            pack.last_seq = seq;
            pack.rows += 1;
            if ts > 0 && (pack.timestamp == 0 || ts < pack.timestamp) {
                pack.timestamp = ts;
            }
            if pack.rows >= PACK_MAX_ROWS || pack.bytes.len() >= PACK_MAX_BYTES {
                let emitted = emit(p, &pack.bytes, pack.timestamp, pack.single());
                pack.rows = 0;
                emitted?;
            }
        }
        for (p, pack) in self.packs.iter_mut().enumerate() {
            if pack.rows > 0 {
                let emitted = emit(p, &pack.bytes, pack.timestamp, pack.single());
                pack.rows = 0;
                emitted?;
            }
        }
        Ok(())
    }
}

/// Parses a repartition record; what is not a frame Sluice wrote is an
/// error naming why (something else wrote to an internal topic).
pub fn parse_frame(bytes: &[u8]) -> Result<Frame<'_>, String> {
    let (Some(&kind), Some(from), Some(n)) = (bytes.first(), bytes.get(1..5), bytes.get(5..FRAME_HEADER)) else {
        return Err(format!("{} bytes: shorter than a repartition frame header ({FRAME_HEADER})", bytes.len()));
    };
    let from = u32::from_be_bytes(from.try_into().map_err(|_| "frame header".to_owned())?);
    let n = i64::from_be_bytes(n.try_into().map_err(|_| "frame header".to_owned())?);
    match kind {
        ROW => Ok(Frame::Row { from, seq: n, row: &bytes[FRAME_HEADER..] }),
        ROWS => Ok(Frame::Rows { from, first: n, body: &bytes[FRAME_HEADER..] }),
        WATERMARK => Ok(Frame::Watermark { from, at: n }),
        IDLE => Ok(Frame::Idle { from }),
        other => Err(format!("unknown repartition frame kind {other}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rows(items: &[(&str, &str)]) -> EncodedRows {
        let mut r = EncodedRows::default();
        for (k, v) in items {
            r.keys.extend_from_slice(k.as_bytes());
            r.key_ends.push(r.keys.len());
            r.values.extend_from_slice(v.as_bytes());
            r.value_ends.push(r.values.len());
        }
        r
    }

    #[test]
    fn frames_round_trip_and_garbage_is_named() {
        for frame in [
            Frame::Row { from: 7, seq: 1 << 40, row: br#"{"a":1}"# },
            Frame::Row { from: 0, seq: -1, row: b"" },
            Frame::Watermark { from: u32::MAX, at: END },
            Frame::Idle { from: 3 },
        ] {
            let mut bytes = Vec::new();
            frame.write(&mut bytes);
            assert_eq!(parse_frame(&bytes), Ok(frame));
        }
        assert!(parse_frame(b"{}").unwrap_err().contains("shorter than a repartition frame header"));
        assert!(parse_frame(&[9; 13]).unwrap_err().contains("unknown repartition frame kind 9"));
    }

    fn packed(rows: &EncodedRows, seqs: &[i64], ts: &[i64], partitions: usize) -> Vec<(usize, Vec<u8>, i64)> {
        let mut out = Vec::new();
        Packer::new(partitions)
            .pack(7, rows, seqs, ts, &mut |p, bytes, t, _| {
                out.push((p, bytes.to_vec(), t));
                Ok(())
            })
            .unwrap();
        out
    }

    /// A row that would take its pack past `PACK_MAX_BYTES` goes alone,
    /// and is handed over as the pack's one row; packs of several rows
    /// are not.
    #[test]
    fn a_row_too_wide_to_share_a_pack_is_packed_alone() {
        let wide = "w".repeat(PACK_MAX_BYTES);
        let r = rows(&[("k", "a"), ("k", "b"), ("k", &wide), ("k", "c")]);
        let mut packs = Vec::new();
        Packer::new(1)
            .pack(7, &r, &[1, 2, 3, 4], &[0; 4], &mut |_, bytes, _, single| {
                let got: Vec<Vec<u8>> = parse_frame(bytes).unwrap().rows().map(|x| x.unwrap().1.to_vec()).collect();
                packs.push((got, single.map(<[u8]>::to_vec)));
                Ok(())
            })
            .unwrap();
        let wide = wide.into_bytes();
        assert_eq!(
            packs,
            [
                (vec![b"a".to_vec(), b"b".to_vec()], None),
                (vec![wide.clone()], Some(wide)),
                (vec![b"c".to_vec()], Some(b"c".to_vec())),
            ]
        );
    }

    #[test]
    fn packed_rows_keep_their_partition_order_sequence_numbers_and_oldest_timestamp() {
        let items: Vec<(String, String)> = (0..10).map(|i| (format!("k{}", i % 3), format!("row{i}"))).collect();
        let refs: Vec<(&str, &str)> = items.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        let r = rows(&refs);
        // Sequence numbers need not be contiguous, nor even rise.
        let seqs: Vec<i64> = (0..10).map(|i| if i == 4 { -5 } else { 1_000 + i * 7 }).collect();
        let ts: Vec<i64> = (0..10).map(|i| if i == 0 { 0 } else { 500 - i }).collect();
        let packs = packed(&r, &seqs, &ts, 4);
        let mut seen = 0;
        for (p, bytes, t) in &packs {
            let frame = parse_frame(bytes).unwrap();
            assert_eq!(frame.from(), 7);
            let got: Vec<(i64, &[u8])> = frame.rows().map(Result::unwrap).collect();
            let want: Vec<(i64, &[u8])> = (0..10)
                .filter(|&i| usize::try_from(partition_for_key(r.key(i), 4)).unwrap() == *p)
                .map(|i| (seqs[i], r.value(i)))
                .collect();
            assert_eq!(got, want, "partition {p}");
            let oldest = (0..10)
                .filter(|&i| usize::try_from(partition_for_key(r.key(i), 4)).unwrap() == *p && ts[i] > 0)
                .map(|i| ts[i])
                .min()
                .unwrap_or(0);
            assert_eq!(*t, oldest);
            seen += got.len();
        }
        assert_eq!(seen, 10);
    }

    #[test]
    fn a_pack_holds_at_most_its_row_limit_and_a_cut_pack_is_named() {
        let items: Vec<(String, String)> = (0..PACK_MAX_ROWS * 2 + 1).map(|i| ("same".into(), i.to_string())).collect();
        let refs: Vec<(&str, &str)> = items.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        let seqs: Vec<i64> = (0..refs.len() as i64).collect();
        let packs = packed(&rows(&refs), &seqs, &[], 2);
        assert_eq!(
            packs.iter().map(|(_, b, _)| parse_frame(b).unwrap().rows().count()).collect::<Vec<_>>(),
            [PACK_MAX_ROWS, PACK_MAX_ROWS, 1]
        );
        let all: Vec<i64> = packs
            .iter()
            .flat_map(|(_, b, _)| parse_frame(b).unwrap().rows().map(|r| r.unwrap().0).collect::<Vec<_>>())
            .collect();
        assert_eq!(all, seqs, "sequence numbers run on across packs");
        let bytes = &packs[0].1;
        let cut = parse_frame(&bytes[..bytes.len() - 1]).unwrap();
        let rows: Vec<_> = cut.rows().collect();
        assert_eq!(rows.len(), PACK_MAX_ROWS);
        assert_eq!(
            rows.last().unwrap().as_ref().unwrap_err(),
            &format!("packed row {} is cut short", PACK_MAX_ROWS - 1)
        );
    }

    #[test]
    fn varints_round_trip_at_the_extremes() {
        for v in [0, 1, -1, 63, -64, 64, i64::MAX, i64::MIN] {
            let mut out = Vec::new();
            write_varint(&mut out, zigzag(v));
            assert_eq!(read_varint(&out).map(|(u, n)| (unzigzag(u), n)), Some((v, out.len())));
        }
        assert_eq!(read_varint(&[0x80; 11]), None, "longer than a u64");
    }
}
