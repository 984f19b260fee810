//! Column vectors: the unit the engine computes on.
//!
//! A column is one typed `Vec` plus an optional validity mask. Timestamps are
//! stored as epoch milliseconds in the same `Int` storage as bigints. Strings
//! are one contiguous `String` with offsets, so a batch of N strings costs two
//! allocations (reused across batches by the decoder), not N.

use crate::Error;
use std::ops::Range;

use crate::{DataType, NestedRef, Scalar, ScalarRef};

#[derive(Clone, Debug, PartialEq)]
pub enum ColumnData {
    /// `Bigint`, `Timestamp` and `DECIMAL` values of up to 18 digits.
    Int(Vec<i64>),
    /// `DECIMAL` values of 19 to 38 digits.
    Wide(Vec<i128>),
    Float(Vec<f64>),
    Bool(Vec<bool>),
    Str(StrData),
    /// A column of the `Null` type: only nulls, of this length.
    Null(usize),
    /// `array` and `map` values ([`crate::nested_column`]).
    List(ListData),
    /// `row` values.
    Struct(StructData),
}

/// Strings of a column: row `i` is `bytes[offsets[i]..offsets[i + 1]]`.
#[derive(Clone, Debug, PartialEq)]
pub struct StrData {
    offsets: Vec<u32>,
    bytes: String,
}

impl Default for StrData {
    fn default() -> Self {
        Self { offsets: vec![0], bytes: String::new() }
    }
}

impl StrData {
    pub fn with_capacity(rows: usize, bytes: usize) -> Self {
        let mut offsets = Vec::with_capacity(rows + 1);
        offsets.push(0);
        Self { offsets, bytes: String::with_capacity(bytes) }
    }

    pub fn len(&self) -> usize {
        self.offsets.len() - 1
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    #[inline]
    pub fn get(&self, i: usize) -> &str {
        let (start, end) = (self.offsets[i] as usize, self.offsets[i + 1] as usize);
        self.bytes.get(start..end).unwrap_or_default()
    }

    #[inline]
    pub fn push(&mut self, s: &str) {
        self.bytes.push_str(s);
        self.offsets.push(u32::try_from(self.bytes.len()).unwrap_or(u32::MAX));
    }

    /// Appends a string produced piecewise (e.g. a transformed value).
    #[inline]
    pub fn push_with(&mut self, f: impl FnOnce(&mut String)) {
        f(&mut self.bytes);
        self.offsets.push(u32::try_from(self.bytes.len()).unwrap_or(u32::MAX));
    }

    pub fn truncate(&mut self, rows: usize) {
        if rows < self.len() {
            self.offsets.truncate(rows + 1);
            let end = self.offsets[rows] as usize;
            self.bytes.truncate(end);
        }
    }

    pub fn clear(&mut self) {
        self.truncate(0);
    }

    /// Keeps only rows `rows` (ascending), in place (see
    /// [`Column::retain_rows`]).
    pub fn retain_rows(&mut self, rows: &[u32]) {
        let mut bytes = std::mem::take(&mut self.bytes).into_bytes();
        let mut end = 0;
        for (to, &row) in rows.iter().enumerate() {
            // Row `row`'s bounds are read before slot `to + 1` is written:
            // a later row's are past it, or (every row before it kept)
            // unchanged by the write.
            let (start, stop) = (self.offsets[row as usize] as usize, self.offsets[row as usize + 1] as usize);
            bytes.copy_within(start..stop, end);
            end += stop - start;
            self.offsets[to + 1] = u32::try_from(end).unwrap_or(u32::MAX);
        }
        bytes.truncate(end);
        bytes.shrink_to_fit();
        self.offsets.truncate(rows.len() + 1);
        self.offsets.shrink_to_fit();
        // Whole strings moved whole: still UTF-8.
        self.bytes = String::from_utf8(bytes).unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned());
    }

    pub fn iter(&self) -> impl Iterator<Item = &str> + '_ {
        (0..self.len()).map(|i| self.get(i))
    }

    pub fn heap_bytes(&self) -> usize {
        self.offsets.capacity() * 4 + self.bytes.capacity()
    }

    /// The bytes its rows take: [`StrData::heap_bytes`] less the room kept
    /// ahead of them (see [`Column::written_bytes`]).
    pub fn written_bytes(&self) -> usize {
        self.offsets.len() * 4 + self.bytes.len()
    }
}

/// A typed column with an optional validity mask (`false` = NULL).
#[derive(Clone, Debug, PartialEq)]
pub struct Column {
    pub data_type: DataType,
    pub data: ColumnData,
    pub validity: Option<Vec<bool>>,
}

impl Column {
    /// The strings of a string column; `None` for any other type.
    pub fn str_data(&self) -> Option<&StrData> {
        match &self.data {
            ColumnData::Str(s) => Some(s),
            _ => None,
        }
    }
    pub fn new(data_type: DataType, data: ColumnData, validity: Option<Vec<bool>>) -> Self {
        Self { data_type, data, validity }
    }

    pub fn with_capacity(data_type: DataType, rows: usize) -> Self {
        let data = match data_type {
            t if t.is_wide() => ColumnData::Wide(Vec::with_capacity(rows)),
            DataType::Bigint | DataType::Timestamp | DataType::Decimal(..) => ColumnData::Int(Vec::with_capacity(rows)),
            DataType::Double => ColumnData::Float(Vec::with_capacity(rows)),
            DataType::Boolean => ColumnData::Bool(Vec::with_capacity(rows)),
            DataType::String => ColumnData::Str(StrData::with_capacity(rows, rows * 8)),
            DataType::Null => ColumnData::Null(0),
            DataType::Array(_) | DataType::Map(_) => {
                ColumnData::List(ListData::with_capacity(data_type.element().unwrap_or(DataType::Null), rows))
            }
            DataType::Row(_) => ColumnData::Struct(StructData::with_capacity(data_type, rows)),
        };
        Self { data_type, data, validity: None }
    }

    pub fn ints(data_type: DataType, values: Vec<i64>) -> Self {
        Self::new(data_type, ColumnData::Int(values), None)
    }

    /// A decimal column of `data_type` from per-row values that fit it
    /// (`None` = NULL), ANDed with `validity`, in the storage its precision
    /// takes.
    pub fn decimals(data_type: DataType, rows: Vec<Option<i128>>, validity: Option<Vec<bool>>) -> Self {
        let n = rows.len();
        let valid = if rows.iter().all(Option::is_some) {
            validity
        } else {
            let mut v = validity.unwrap_or_else(|| vec![true; n]);
            v.iter_mut().zip(&rows).for_each(|(ok, x)| *ok &= x.is_some());
            Some(v)
        };
        let data = if data_type.is_wide() {
            ColumnData::Wide(rows.into_iter().map(Option::unwrap_or_default).collect())
        } else {
            ColumnData::Int(rows.into_iter().map(|x| crate::decimal::narrow(x.unwrap_or_default())).collect())
        };
        Self::new(data_type, data, valid)
    }

    /// The unscaled value at row `i` of a decimal (or bigint) column, 0
    /// for another storage.
    #[inline]
    pub fn decimal(&self, i: usize) -> i128 {
        match &self.data {
            ColumnData::Int(v) => i128::from(v[i]),
            ColumnData::Wide(v) => v[i],
            _ => 0,
        }
    }

    pub fn floats(values: Vec<f64>) -> Self {
        Self::new(DataType::Double, ColumnData::Float(values), None)
    }

    pub fn bools(values: Vec<bool>) -> Self {
        Self::new(DataType::Boolean, ColumnData::Bool(values), None)
    }

    pub fn len(&self) -> usize {
        match &self.data {
            ColumnData::Int(v) => v.len(),
            ColumnData::Wide(v) => v.len(),
            ColumnData::Float(v) => v.len(),
            ColumnData::Bool(v) => v.len(),
            ColumnData::Str(s) => s.len(),
            ColumnData::Null(n) => *n,
            ColumnData::List(l) => l.len(),
            ColumnData::Struct(r) => r.len,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    #[inline]
    pub fn is_valid(&self, i: usize) -> bool {
        match (&self.validity, &self.data) {
            (_, ColumnData::Null(_)) => false,
            (Some(v), _) => v[i],
            (None, _) => true,
        }
    }

    pub fn null_count(&self) -> usize {
        match (&self.validity, &self.data) {
            (_, ColumnData::Null(n)) => *n,
            (Some(v), _) => v.iter().filter(|x| !**x).count(),
            (None, _) => 0,
        }
    }

    /// Marks the next pushed row as null (call before pushing a placeholder).
    #[inline]
    fn mark(&mut self, valid: bool) {
        match &mut self.validity {
            Some(v) => v.push(valid),
            None if valid => {}
            None => {
                let mut v = vec![true; self.len()];
                v.push(false);
                self.validity = Some(v);
            }
        }
    }

    /// Appends a NULL.
    pub fn push_null(&mut self) {
        self.mark(false);
        match &mut self.data {
            ColumnData::Int(v) => v.push(0),
            ColumnData::Wide(v) => v.push(0),
            ColumnData::Float(v) => v.push(0.0),
            ColumnData::Bool(v) => v.push(false),
            ColumnData::Str(s) => s.push(""),
            ColumnData::Null(n) => *n += 1,
            ColumnData::List(l) => {
                let end = l.offsets.last().copied().unwrap_or(0);
                l.offsets.push(end);
            }
            ColumnData::Struct(r) => r.push_null(),
        }
    }

    /// Marks `n` values just pushed as valid: rows of a `row` column (or
    /// entries of a map) whose fields a decoder pushed one by one.
    pub fn mark_valid(&mut self, n: usize) {
        if let Some(v) = &mut self.validity {
            v.extend(std::iter::repeat_n(true, n));
        }
    }

    #[inline]
    pub fn push_i64(&mut self, x: i64) -> Result<(), Error> {
        match &mut self.data {
            ColumnData::Int(v) => v.push(x),
            _ => return Err(self.wrong("push_i64")),
        }
        self.mark(true);
        Ok(())
    }

    #[inline]
    pub fn push_i128(&mut self, x: i128) -> Result<(), Error> {
        match &mut self.data {
            ColumnData::Wide(v) => v.push(x),
            _ => return Err(self.wrong("push_i128")),
        }
        self.mark(true);
        Ok(())
    }

    /// Appends a decimal's unscaled value, which fits the column's
    /// precision, in its storage.
    #[inline]
    pub fn push_decimal(&mut self, x: i128) -> Result<(), Error> {
        match &self.data {
            ColumnData::Wide(_) => self.push_i128(x),
            _ => self.push_i64(crate::decimal::narrow(x)),
        }
    }

    #[inline]
    pub fn push_f64(&mut self, x: f64) -> Result<(), Error> {
        match &mut self.data {
            ColumnData::Float(v) => v.push(x),
            _ => return Err(self.wrong("push_f64")),
        }
        self.mark(true);
        Ok(())
    }

    #[inline]
    pub fn push_bool(&mut self, x: bool) -> Result<(), Error> {
        match &mut self.data {
            ColumnData::Bool(v) => v.push(x),
            _ => return Err(self.wrong("push_bool")),
        }
        self.mark(true);
        Ok(())
    }

    #[inline]
    pub fn push_str(&mut self, x: &str) -> Result<(), Error> {
        match &mut self.data {
            ColumnData::Str(s) => s.push(x),
            _ => return Err(self.wrong("push_str")),
        }
        self.mark(true);
        Ok(())
    }

    /// Appends a scalar of this column's type (or NULL).
    pub fn push_scalar(&mut self, value: &Scalar) -> Result<(), Error> {
        match value {
            Scalar::List(_) | Scalar::Map(_) | Scalar::Row(_) => self.push_nested_scalar(value),
            _ => self.push_value(value.borrowed()),
        }
    }

    /// Appends a value of this column's type (or NULL); a decimal is
    /// rescaled to the column's scale (NULL where it does not fit).
    pub fn push_value(&mut self, value: ScalarRef<'_>) -> Result<(), Error> {
        match value {
            ScalarRef::Null => {
                self.push_null();
                Ok(())
            }
            ScalarRef::Bigint(x) | ScalarRef::Timestamp(x) => self.push_i64(x),
            ScalarRef::Decimal(x, scale) => match self.data_type {
                DataType::Decimal(p, s) => match crate::decimal::rescale(x, scale, s, p) {
                    Some(v) => self.push_decimal(v),
                    None => {
                        self.push_null();
                        Ok(())
                    }
                },
                _ => Err(self.wrong("a decimal")),
            },
            ScalarRef::Double(x) => self.push_f64(x),
            ScalarRef::Boolean(x) => self.push_bool(x),
            ScalarRef::String(x) => self.push_str(x),
            ScalarRef::List(n) | ScalarRef::Map(n) | ScalarRef::Row(n) => match n {
                NestedRef::Cell(c, i) => match c.as_any().downcast_ref::<Column>() {
                    Some(c) => self.push_from(c, i),
                    None => self.push_nested_scalar(&n.to_scalar()),
                },
                NestedRef::Scalar(s) => self.push_nested_scalar(s),
                NestedRef::Encoded(_) => self.push_nested_scalar(&n.to_scalar()),
            },
        }
    }

    /// Appends row `i` of `other`, which must have the same storage.
    pub fn push_from(&mut self, other: &Column, i: usize) -> Result<(), Error> {
        if !other.is_valid(i) {
            self.push_null();
            return Ok(());
        }
        match &other.data {
            ColumnData::Int(v) => self.push_i64(v[i]),
            ColumnData::Wide(v) => self.push_i128(v[i]),
            ColumnData::Float(v) => self.push_f64(v[i]),
            ColumnData::Bool(v) => self.push_bool(v[i]),
            ColumnData::Str(s) => self.push_str(s.get(i)),
            ColumnData::Null(_) => {
                self.push_null();
                Ok(())
            }
            ColumnData::List(from) => {
                let ColumnData::List(to) = &mut self.data else { return Err(self.wrong("an array")) };
                to.push_from(from, i)?;
                self.mark(true);
                Ok(())
            }
            ColumnData::Struct(from) => {
                let ColumnData::Struct(to) = &mut self.data else { return Err(self.wrong("a row")) };
                to.push_from(from, i)?;
                self.mark(true);
                Ok(())
            }
        }
    }

    /// Row `i` as a scalar (slow path: state snapshots, tests, constants).
    pub fn scalar(&self, i: usize) -> Scalar {
        self.value(i).to_scalar()
    }

    /// Row `i`'s value, its string borrowed.
    pub fn value(&self, i: usize) -> ScalarRef<'_> {
        if !self.is_valid(i) {
            return ScalarRef::Null;
        }
        match (&self.data, self.data_type) {
            (ColumnData::Int(v), DataType::Timestamp) => ScalarRef::Timestamp(v[i]),
            (ColumnData::Int(v), DataType::Decimal(_, s)) => ScalarRef::Decimal(i128::from(v[i]), s),
            (ColumnData::Wide(v), DataType::Decimal(_, s)) => ScalarRef::Decimal(v[i], s),
            (ColumnData::Wide(v), _) => ScalarRef::Decimal(v[i], 0),
            (ColumnData::Int(v), _) => ScalarRef::Bigint(v[i]),
            (ColumnData::Float(v), _) => ScalarRef::Double(v[i]),
            (ColumnData::Bool(v), _) => ScalarRef::Boolean(v[i]),
            (ColumnData::Str(s), _) => ScalarRef::String(s.get(i)),
            (ColumnData::Null(_), _) => ScalarRef::Null,
            (ColumnData::List(_), DataType::Map(_)) => ScalarRef::Map(NestedRef::Cell(self, i)),
            (ColumnData::List(_), _) => ScalarRef::List(NestedRef::Cell(self, i)),
            (ColumnData::Struct(_), _) => ScalarRef::Row(NestedRef::Cell(self, i)),
        }
    }

    /// Keeps the first `rows` rows.
    pub fn truncate(&mut self, rows: usize) {
        match &mut self.data {
            ColumnData::Int(v) => v.truncate(rows),
            ColumnData::Wide(v) => v.truncate(rows),
            ColumnData::Float(v) => v.truncate(rows),
            ColumnData::Bool(v) => v.truncate(rows),
            ColumnData::Str(s) => s.truncate(rows),
            ColumnData::Null(n) => *n = (*n).min(rows),
            ColumnData::List(l) => l.truncate(rows),
            ColumnData::Struct(r) => r.truncate(rows),
        }
        if let Some(v) = &mut self.validity {
            v.truncate(rows);
        }
    }

    /// Empties the column, keeping its allocations for the next batch.
    pub fn clear(&mut self) {
        self.truncate(0);
        self.validity = None;
    }

    /// Keeps only the rows listed in `rows` (ascending), in place, and
    /// gives back the room the rest took: a join's store compacts columns
    /// of hundreds of MiB, and building the kept rows as a new column held
    /// both copies at once (85 MiB of Nexmark q9's heap peak of 517 MiB at
    /// 5 M events, `heaptrack`).
    pub fn retain_rows(&mut self, rows: &[u32]) {
        if let Some(v) = &mut self.validity {
            retain_rows(v, rows);
        }
        match &mut self.data {
            ColumnData::Int(v) => retain_rows(v, rows),
            ColumnData::Wide(v) => retain_rows(v, rows),
            ColumnData::Float(v) => retain_rows(v, rows),
            ColumnData::Bool(v) => retain_rows(v, rows),
            ColumnData::Str(s) => s.retain_rows(rows),
            ColumnData::Null(n) => *n = rows.len(),
            ColumnData::List(l) => l.retain_rows(rows),
            ColumnData::Struct(r) => r.retain_rows(rows),
        }
    }

    /// Approximate heap size, for state accounting.
    pub fn heap_bytes(&self) -> usize {
        self.bytes(false)
    }

    /// The bytes its rows take: [`Column::heap_bytes`] less the room its
    /// vectors keep ahead of them. That room is never written until rows
    /// fill it, and the kernel gives a page memory when it is first
    /// written, so for a column kept for good (a join's rows), which
    /// doubles as it grows, this is what it holds in RSS: counting the room
    /// read Nexmark q20's state at 1.47× its process's RSS (docs/benchmarks.md,
    /// "The state gauge at 10 M events").
    pub fn written_bytes(&self) -> usize {
        self.bytes(true)
    }

    fn bytes(&self, written: bool) -> usize {
        let of = |elements: usize, room: usize, size: usize| size * if written { elements } else { room };
        let data = match &self.data {
            ColumnData::Int(v) => of(v.len(), v.capacity(), 8),
            ColumnData::Wide(v) => of(v.len(), v.capacity(), 16),
            ColumnData::Float(v) => of(v.len(), v.capacity(), 8),
            ColumnData::Bool(v) => of(v.len(), v.capacity(), 1),
            ColumnData::Str(s) if written => s.written_bytes(),
            ColumnData::Str(s) => s.heap_bytes(),
            ColumnData::Null(_) => 0,
            ColumnData::List(l) => l.bytes(written),
            ColumnData::Struct(r) => r.bytes(written),
        };
        data + self.validity.as_ref().map_or(0, |v| of(v.len(), v.capacity(), 1))
    }

    fn wrong(&self, op: &str) -> Error {
        Error::Internal(format!("{op} on a {} column", self.data_type))
    }
}

/// The values of an `array` or `map` column: row `i` holds
/// `values[offsets[i]..offsets[i + 1]]`.
#[derive(Clone, Debug, PartialEq)]
pub struct ListData {
    pub offsets: Vec<u32>,
    pub values: Box<Column>,
}

/// The fields of a `row` column, each as long as the column.
#[derive(Clone, Debug, PartialEq)]
pub struct StructData {
    pub len: usize,
    pub fields: Vec<Column>,
}

impl ListData {
    pub fn with_capacity(element: DataType, rows: usize) -> Self {
        let mut offsets = Vec::with_capacity(rows + 1);
        offsets.push(0);
        Self { offsets, values: Box::new(Column::with_capacity(element, rows)) }
    }

    pub fn len(&self) -> usize {
        self.offsets.len() - 1
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Row `i`'s elements in [`ListData::values`].
    #[inline]
    pub fn range(&self, i: usize) -> Range<usize> {
        self.offsets[i] as usize..self.offsets[i + 1] as usize
    }

    /// Ends the row whose elements were pushed to `values` since the last.
    #[inline]
    pub fn close_row(&mut self) -> Result<(), Error> {
        let end = u32::try_from(self.values.len())
            .map_err(|_| Error::Internal("more than 4 Gi elements in one batch's column".into()))?;
        self.offsets.push(end);
        Ok(())
    }

    /// Keeps the first `rows` rows, and drops elements pushed for a row
    /// not yet ended (a record that failed halfway).
    pub(crate) fn truncate(&mut self, rows: usize) {
        if rows <= self.len() {
            self.offsets.truncate(rows + 1);
            self.values.truncate(self.offsets[rows] as usize);
        }
    }

    pub(crate) fn push_from(&mut self, other: &ListData, i: usize) -> Result<(), Error> {
        for j in other.range(i) {
            self.values.push_from(&other.values, j)?;
        }
        self.close_row()
    }

    pub(crate) fn retain_rows(&mut self, rows: &[u32]) {
        let mut elements = Vec::new();
        let mut end = 0u32;
        for (to, &row) in rows.iter().enumerate() {
            let r = self.range(row as usize);
            end += (r.end - r.start) as u32;
            elements.extend(r.start as u32..r.end as u32);
            self.offsets[to + 1] = end;
        }
        self.offsets.truncate(rows.len() + 1);
        self.offsets.shrink_to_fit();
        self.values.retain_rows(&elements);
    }

    pub(crate) fn bytes(&self, written: bool) -> usize {
        4 * if written { self.offsets.len() } else { self.offsets.capacity() }
            + if written { self.values.written_bytes() } else { self.values.heap_bytes() }
    }
}

impl StructData {
    pub fn with_capacity(row: DataType, rows: usize) -> Self {
        Self { len: 0, fields: row.fields().iter().map(|(_, t)| Column::with_capacity(*t, rows)).collect() }
    }

    pub(crate) fn push_null(&mut self) {
        self.fields.iter_mut().for_each(Column::push_null);
        self.len += 1;
    }

    pub(crate) fn truncate(&mut self, rows: usize) {
        self.fields.iter_mut().for_each(|f| f.truncate(rows));
        self.len = self.len.min(rows);
    }

    pub(crate) fn push_from(&mut self, other: &StructData, i: usize) -> Result<(), Error> {
        for (to, from) in self.fields.iter_mut().zip(&other.fields) {
            to.push_from(from, i)?;
        }
        self.len += 1;
        Ok(())
    }

    pub(crate) fn retain_rows(&mut self, rows: &[u32]) {
        self.fields.iter_mut().for_each(|f| f.retain_rows(rows));
        self.len = rows.len();
    }

    pub(crate) fn bytes(&self, written: bool) -> usize {
        self.fields.iter().map(|f| if written { f.written_bytes() } else { f.heap_bytes() }).sum()
    }
}

/// Keeps only the values at `rows` (ascending) of `v`, in place, and gives
/// back the room of the rest (see [`Column::retain_rows`]).
pub fn retain_rows<T: Copy>(v: &mut Vec<T>, rows: &[u32]) {
    debug_assert!(rows.windows(2).all(|w| w[0] < w[1]), "rows ascending");
    for (to, &row) in rows.iter().enumerate() {
        v[to] = v[row as usize];
    }
    v.truncate(rows.len());
    v.shrink_to_fit();
}

/// A column with `len` copies of `value`.
pub fn broadcast(value: &Scalar, data_type: DataType, len: usize) -> Column {
    if data_type.is_nested() {
        let mut c = Column::with_capacity(data_type, len);
        for _ in 0..len {
            if c.push_scalar(value).is_err() {
                c.push_null();
            }
        }
        return c;
    }
    let valid = !value.is_null();
    let data = match (value, data_type) {
        (Scalar::Decimal(x, scale), DataType::Decimal(p, s)) => match crate::decimal::rescale(*x, *scale, s, p) {
            Some(v) if data_type.is_wide() => ColumnData::Wide(vec![v; len]),
            Some(v) => ColumnData::Int(vec![crate::decimal::narrow(v); len]),
            None => return broadcast(&Scalar::Null, data_type, len),
        },
        (Scalar::Decimal(x, _), _) => ColumnData::Int(vec![crate::decimal::narrow(*x); len]),
        (Scalar::Bigint(x) | Scalar::Timestamp(x), _) => ColumnData::Int(vec![*x; len]),
        (Scalar::Double(x), _) => ColumnData::Float(vec![*x; len]),
        (Scalar::Boolean(x), _) => ColumnData::Bool(vec![*x; len]),
        (Scalar::String(x), _) => {
            let mut s = StrData::with_capacity(len, x.len() * len);
            for _ in 0..len {
                s.push(x);
            }
            ColumnData::Str(s)
        }
        (Scalar::Null, t) if t.is_wide() => ColumnData::Wide(vec![0; len]),
        (Scalar::Null, DataType::Bigint | DataType::Timestamp | DataType::Decimal(..)) => ColumnData::Int(vec![0; len]),
        (Scalar::Null, DataType::Double) => ColumnData::Float(vec![0.0; len]),
        (Scalar::Null, DataType::Boolean) => ColumnData::Bool(vec![false; len]),
        (Scalar::Null, DataType::String) => {
            let mut s = StrData::with_capacity(len, 0);
            for _ in 0..len {
                s.push("");
            }
            ColumnData::Str(s)
        }
        (Scalar::Null, DataType::Null) => ColumnData::Null(len),
        // Nested types were built above; a nested value of a flat type is
        // not one.
        (Scalar::Null, DataType::Array(_) | DataType::Map(_) | DataType::Row(_))
        | (Scalar::List(_) | Scalar::Map(_) | Scalar::Row(_), _) => ColumnData::Null(len),
    };
    let validity = if valid { None } else { Some(vec![false; len]) };
    Column { data_type, data, validity }
}

/// Row-wise AND of two optional validity masks.
pub(crate) fn and_validity(a: Option<&[bool]>, b: Option<&[bool]>, n: usize) -> Option<Vec<bool>> {
    match (a, b) {
        (None, None) => None,
        (Some(a), None) | (None, Some(a)) => Some(a[..n].to_vec()),
        (Some(a), Some(b)) => Some(a.iter().zip(b).map(|(x, y)| *x && *y).collect()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn validity_is_created_lazily_and_kept_aligned() {
        let mut c = Column::with_capacity(DataType::Bigint, 4);
        c.push_i64(1).unwrap();
        c.push_i64(2).unwrap();
        assert!(c.validity.is_none());
        c.push_null();
        c.push_i64(4).unwrap();
        assert_eq!(c.len(), 4);
        assert_eq!(c.validity.as_deref(), Some(&[true, true, false, true][..]));
        assert_eq!(c.scalar(2), Scalar::Null);
        assert_eq!(c.scalar(3), Scalar::Bigint(4));
        c.truncate(2);
        assert_eq!(c.len(), 2);
        assert_eq!(c.validity.as_ref().map(Vec::len), Some(2));
    }

    #[test]
    fn strings_share_one_buffer() {
        let mut c = Column::with_capacity(DataType::String, 2);
        c.push_str("héllo").unwrap();
        c.push_null();
        c.push_str("").unwrap();
        c.push_str("x").unwrap();
        let ColumnData::Str(s) = &c.data else { panic!() };
        assert_eq!(s.iter().collect::<Vec<_>>(), vec!["héllo", "", "", "x"]);
        assert!(c.push_i64(1).is_err(), "wrong-typed pushes are errors, not panics");
        c.retain_rows(&[0, 3]);
        assert_eq!((c.scalar(0), c.scalar(1)), (Scalar::String("héllo".into()), Scalar::String("x".into())));
        assert_eq!(c.written_bytes(), c.heap_bytes(), "the room of the rows let go is given back");
    }

    #[test]
    fn retained_rows_are_the_rows_asked_for_in_order() {
        let mut strings = Column::with_capacity(DataType::String, 0);
        let mut ints = Column::with_capacity(DataType::Bigint, 0);
        for i in 0..100i64 {
            if i % 7 == 0 {
                strings.push_null();
            } else {
                strings.push_str(&"é".repeat(usize::try_from(i % 5).unwrap())).unwrap();
            }
            ints.push_i64(i).unwrap();
        }
        let before: Vec<(Scalar, Scalar)> = (0..100).map(|r| (strings.scalar(r), ints.scalar(r))).collect();
        let rows: Vec<u32> = (0..100).filter(|r| r % 3 != 1).collect();
        strings.retain_rows(&rows);
        ints.retain_rows(&rows);
        let after: Vec<(Scalar, Scalar)> = (0..rows.len()).map(|r| (strings.scalar(r), ints.scalar(r))).collect();
        let wanted: Vec<(Scalar, Scalar)> = rows.iter().map(|&r| before[r as usize].clone()).collect();
        assert_eq!(after, wanted);
        assert_eq!((strings.len(), ints.len()), (rows.len(), rows.len()));
        strings.retain_rows(&[]);
        assert_eq!(strings.len(), 0);
    }
}
