//! A row's values as one run of bytes, for operators that keep whole rows
//! in state (top-N and deduplication, a table's last row per key).
//!
//! A row kept as `Vec<Scalar>` costs an allocation for the vector and one
//! per string, and 32 bytes per value however small: Nexmark q18 kept
//! about 400 bytes and five allocations per bid row. As bytes it is one
//! allocation of about the row's encoded size, and its size is exactly
//! what the state gauge counts.
//!
//! Each value is a tag (its [`ScalarRef`] variant) and its payload: 8
//! bytes little-endian for bigint, timestamp and double (bits, so -0.0
//! and NaN payloads read back as written, unlike a group key's encoding),
//! 1 for boolean, 16 and a scale byte for a decimal, a `u32` length and
//! the UTF-8 for a string, nothing for NULL. Values read back in order
//! ([`values`]) without allocating.

use serde::ser::{Error as _, SerializeSeq};
use serde::{Serialize, Serializer};

use crate::{Column, Error, NestedRef, ScalarRef};

const NULL: u8 = 0;
const BIGINT: u8 = 1;
const DOUBLE: u8 = 2;
const STRING: u8 = 3;
const BOOLEAN: u8 = 4;
const TIMESTAMP: u8 = 5;
const DECIMAL: u8 = 6;
/// An array, map or row: a `u32` length and the value as postcard writes
/// its [`crate::Scalar`].
const NESTED: u8 = 7;

/// Appends a value.
#[inline]
pub fn push(value: ScalarRef<'_>, out: &mut Vec<u8>) {
    match value {
        ScalarRef::Null => out.push(NULL),
        ScalarRef::Bigint(x) => {
            out.push(BIGINT);
            out.extend_from_slice(&x.to_le_bytes());
        }
        ScalarRef::Double(x) => {
            out.push(DOUBLE);
            out.extend_from_slice(&x.to_bits().to_le_bytes());
        }
        ScalarRef::String(x) => {
            out.push(STRING);
            // A string longer than 4 GiB cannot have come from one record.
            out.extend_from_slice(&u32::try_from(x.len()).unwrap_or(u32::MAX).to_le_bytes());
            out.extend_from_slice(x.as_bytes());
        }
        ScalarRef::Boolean(x) => out.extend_from_slice(&[BOOLEAN, u8::from(x)]),
        ScalarRef::Timestamp(x) => {
            out.push(TIMESTAMP);
            out.extend_from_slice(&x.to_le_bytes());
        }
        ScalarRef::Decimal(x, scale) => {
            out.push(DECIMAL);
            out.extend_from_slice(&x.to_le_bytes());
            out.push(scale);
        }
        ScalarRef::List(_) | ScalarRef::Map(_) | ScalarRef::Row(_) => {
            // Serialising a nested value into memory does not fail; were it
            // to, the value is kept as NULL rather than the row lost.
            let Ok(bytes) = postcard::to_allocvec(&value) else {
                out.push(NULL);
                return;
            };
            out.push(NESTED);
            out.extend_from_slice(&u32::try_from(bytes.len()).unwrap_or(u32::MAX).to_le_bytes());
            out.extend_from_slice(&bytes);
        }
    }
}

/// Appends each of `values`.
pub fn push_scalars<'a>(values: impl IntoIterator<Item = &'a crate::Scalar>, out: &mut Vec<u8>) {
    for value in values {
        push(value.borrowed(), out);
    }
}

/// Appends row `r` of `column`.
#[inline]
pub fn push_cell(column: &Column, r: usize, out: &mut Vec<u8>) {
    push(column.value(r), out);
}

/// The values of `bytes`, in order; an error (never a panic) for bytes
/// [`push`] did not write.
pub fn values(bytes: &[u8]) -> Values<'_> {
    Values { bytes }
}

/// The iterator of [`values`].
#[derive(Debug)]
pub struct Values<'a> {
    bytes: &'a [u8],
}

impl<'a> Values<'a> {
    fn take<const N: usize>(&mut self) -> Result<[u8; N], Error> {
        let (head, rest) = self.bytes.split_first_chunk::<N>().ok_or_else(corrupt)?;
        self.bytes = rest;
        Ok(*head)
    }

    fn next_value(&mut self) -> Result<ScalarRef<'a>, Error> {
        let [tag] = self.take::<1>()?;
        Ok(match tag {
            NULL => ScalarRef::Null,
            BIGINT => ScalarRef::Bigint(i64::from_le_bytes(self.take()?)),
            DOUBLE => ScalarRef::Double(f64::from_bits(u64::from_le_bytes(self.take()?))),
            STRING => {
                let len = u32::from_le_bytes(self.take()?) as usize;
                if len > self.bytes.len() {
                    return Err(corrupt());
                }
                let (text, rest) = self.bytes.split_at(len);
                self.bytes = rest;
                ScalarRef::String(simdutf8::basic::from_utf8(text).map_err(|_| corrupt())?)
            }
            BOOLEAN => ScalarRef::Boolean(self.take::<1>()?[0] != 0),
            TIMESTAMP => ScalarRef::Timestamp(i64::from_le_bytes(self.take()?)),
            DECIMAL => {
                let v = i128::from_le_bytes(self.take()?);
                let [scale] = self.take::<1>()?;
                ScalarRef::Decimal(v, scale)
            }
            NESTED => {
                let len = u32::from_le_bytes(self.take()?) as usize;
                if len > self.bytes.len() {
                    return Err(corrupt());
                }
                let (value, rest) = self.bytes.split_at(len);
                self.bytes = rest;
                if postcard::from_bytes::<crate::Scalar>(value).is_err() {
                    return Err(corrupt());
                }
                // The variant tag postcard wrote first says which kind.
                match value.first() {
                    Some(7) => ScalarRef::List(NestedRef::Encoded(value)),
                    Some(8) => ScalarRef::Map(NestedRef::Encoded(value)),
                    Some(9) => ScalarRef::Row(NestedRef::Encoded(value)),
                    _ => return Err(corrupt()),
                }
            }
            _ => return Err(corrupt()),
        })
    }
}

/// Row bytes serialised as the list of scalars they hold: state kept as
/// bytes writes what state kept as `Vec<Scalar>` wrote, so checkpoints of
/// either read as the other.
#[derive(Debug, Clone, Copy)]
pub struct AsScalars<'a>(pub &'a [u8]);

impl AsScalars<'_> {
    /// How many values the bytes hold.
    pub fn len(&self) -> usize {
        values(self.0).count()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Writes the values as elements of a list being serialised (which
    /// may hold more after them).
    pub fn serialize_elements<S: SerializeSeq>(&self, seq: &mut S) -> Result<(), S::Error> {
        for value in values(self.0) {
            seq.serialize_element(&value.map_err(S::Error::custom)?)?;
        }
        Ok(())
    }
}

impl Serialize for AsScalars<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut seq = serializer.serialize_seq(Some(self.len()))?;
        self.serialize_elements(&mut seq)?;
        seq.end()
    }
}

/// Row `row` of `columns` serialised as the list of scalars it holds, as
/// a `Vec<Scalar>` of its cells would be — without making that vector or
/// copying a string (a join writes its kept rows so).
#[derive(Debug, Clone, Copy)]
pub struct RowCells<'a> {
    pub columns: &'a [Column],
    pub row: usize,
}

impl Serialize for RowCells<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut seq = serializer.serialize_seq(Some(self.columns.len()))?;
        for column in self.columns {
            seq.serialize_element(&column.value(self.row))?;
        }
        seq.end()
    }
}

fn corrupt() -> Error {
    Error::Internal("a kept row's bytes are corrupt".into())
}

impl<'a> Iterator for Values<'a> {
    type Item = Result<ScalarRef<'a>, Error>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.bytes.is_empty() {
            return None;
        }
        let value = self.next_value();
        if value.is_err() {
            // Nothing after a corrupt value can be read.
            self.bytes = &[];
        }
        Some(value)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{DataType, Scalar};

    fn every_kind() -> Vec<Scalar> {
        vec![
            Scalar::Null,
            Scalar::Bigint(i64::MIN),
            Scalar::Double(-0.0),
            Scalar::Double(f64::NAN),
            Scalar::String(String::new()),
            Scalar::String("é ✓".into()),
            Scalar::Boolean(true),
            Scalar::Timestamp(1_700_000_000_000),
            Scalar::Decimal(-(10_i128.pow(38) - 1), 10),
        ]
    }

    #[test]
    fn values_read_back_as_written_bit_for_bit() {
        let mut bytes = Vec::new();
        for v in every_kind() {
            push(v.borrowed(), &mut bytes);
        }
        let back: Vec<Scalar> = values(&bytes).map(|v| v.unwrap().to_scalar()).collect();
        assert_eq!(back.len(), every_kind().len());
        for (a, b) in back.iter().zip(every_kind()) {
            match (a, &b) {
                // NaN != NaN and -0.0 == 0.0: compare the bits.
                (Scalar::Double(x), Scalar::Double(y)) => assert_eq!(x.to_bits(), y.to_bits()),
                _ => assert_eq!(a, &b),
            }
        }
    }

    #[test]
    fn a_borrowed_value_serialises_as_its_scalar() {
        for v in every_kind() {
            assert_eq!(postcard::to_allocvec(&v.borrowed()).unwrap(), postcard::to_allocvec(&v).unwrap(), "{v:?}");
        }
    }

    #[test]
    fn a_row_of_columns_serialises_as_the_list_of_its_scalars_and_reads_back_borrowed() {
        let types =
            [DataType::Bigint, DataType::String, DataType::Double, DataType::Decimal(38, 10), DataType::Boolean];
        let mut columns: Vec<Column> = types.iter().map(|t| Column::with_capacity(*t, 2)).collect();
        let rows = [
            vec![
                Scalar::Bigint(-7),
                Scalar::String("é ✓".into()),
                Scalar::Double(-0.0),
                Scalar::Decimal(-(10_i128.pow(37)), 10),
                Scalar::Boolean(true),
            ],
            vec![Scalar::Null, Scalar::Null, Scalar::Double(f64::NAN), Scalar::Null, Scalar::Null],
        ];
        for row in &rows {
            for (c, v) in columns.iter_mut().zip(row) {
                c.push_scalar(v).unwrap();
            }
        }
        for (r, row) in rows.iter().enumerate() {
            let cells = postcard::to_allocvec(&RowCells { columns: &columns, row: r }).unwrap();
            assert_eq!(cells, postcard::to_allocvec(row).unwrap(), "row {r}");
            let back: Vec<ScalarRef<'_>> = postcard::from_bytes(&cells).unwrap();
            let again: Vec<u8> = postcard::to_allocvec(&back).unwrap();
            assert_eq!(again, cells, "row {r} reads back borrowed as it was written");
        }
    }

    #[test]
    fn row_bytes_serialise_as_the_list_of_scalars_they_hold() {
        let mut bytes = Vec::new();
        for v in every_kind() {
            push(v.borrowed(), &mut bytes);
        }
        assert_eq!(postcard::to_allocvec(&AsScalars(&bytes)).unwrap(), postcard::to_allocvec(&every_kind()).unwrap());
    }

    #[test]
    fn cells_of_a_column_round_trip_through_bytes() {
        let mut c = Column::with_capacity(DataType::Decimal(9, 2), 2);
        c.push_decimal(-125).unwrap();
        c.push_null();
        let mut bytes = Vec::new();
        push_cell(&c, 0, &mut bytes);
        push_cell(&c, 1, &mut bytes);
        let mut back = Column::with_capacity(DataType::Decimal(9, 2), 2);
        for v in values(&bytes) {
            back.push_value(v.unwrap()).unwrap();
        }
        assert_eq!(back.scalar(0), Scalar::Decimal(-125, 2));
        assert_eq!(back.scalar(1), Scalar::Null);
    }

    #[test]
    fn truncated_or_unknown_bytes_are_an_error_not_a_panic() {
        let mut bytes = Vec::new();
        push(ScalarRef::String("abcdef"), &mut bytes);
        push(ScalarRef::Bigint(7), &mut bytes);
        let first = 1 + 4 + 6;
        for cut in 1..bytes.len() {
            let read: Vec<_> = values(&bytes[..cut]).collect();
            if cut == first {
                assert_eq!(read, vec![Ok(ScalarRef::String("abcdef"))]);
            } else {
                assert!(read.last().unwrap().is_err(), "cut at {cut}: {read:?}");
            }
        }
        assert!(values(&[9]).next().unwrap().is_err());
        assert!(values(&[STRING, 255, 255, 255, 255, b'a']).next().unwrap().is_err());
    }
}
