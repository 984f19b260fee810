//! A result column seen as a typed slice for the duration of one batch,
//! so that each encoder matches on the type once per batch and value, not
//! through the column's accessors.

use sluice_plan::{Column, ColumnData, DataType, Scalar, StrData, Value};

pub(super) enum Data<'a> {
    Int(&'a [i64]),
    /// Epoch milliseconds of a TIMESTAMP column.
    Ts(&'a [i64]),
    Float(&'a [f64]),
    /// Unscaled values of a DECIMAL column of up to 18 digits, and their
    /// scale.
    Dec(&'a [i64], u8),
    /// Unscaled values of a DECIMAL column of 19 to 38 digits, and their
    /// scale.
    WideDec(&'a [i128], u8),
    Bool(&'a [bool]),
    Str(&'a StrData),
    /// A column of NULLs only.
    Null,
    /// An `array`, `map` or `row` column, read a value at a time.
    Nested(&'a Column),
}

impl Data<'_> {
    /// Row `row` of a decimal column, either storage: its unscaled value
    /// and scale.
    #[inline]
    pub fn decimal(&self, row: usize) -> (i128, u8) {
        match self {
            Data::Dec(x, s) => (i128::from(x[row]), *s),
            Data::WideDec(x, s) => (x[row], *s),
            _ => (0, 0),
        }
    }
}

pub(super) struct ColumnView<'a> {
    pub data: Data<'a>,
    valid: Option<&'a [bool]>,
}

impl<'a> ColumnView<'a> {
    pub fn of(c: &'a Column) -> Self {
        let data = match (&c.data, c.data_type) {
            (ColumnData::Int(v), DataType::Timestamp) => Data::Ts(v),
            (ColumnData::Int(v), DataType::Decimal(_, s)) => Data::Dec(v, s),
            (ColumnData::Int(v), _) => Data::Int(v),
            (ColumnData::Wide(v), DataType::Decimal(_, s)) => Data::WideDec(v, s),
            (ColumnData::Wide(v), _) => Data::WideDec(v, 0),
            (ColumnData::Float(v), _) => Data::Float(v),
            (ColumnData::Bool(v), _) => Data::Bool(v),
            (ColumnData::Str(s), _) => Data::Str(s),
            (ColumnData::Null(_), _) => Data::Null,
            (ColumnData::List(_) | ColumnData::Struct(_), _) => Data::Nested(c),
        };
        Self { data, valid: c.validity.as_deref() }
    }

    #[inline]
    pub fn is_null(&self, row: usize) -> bool {
        matches!(self.data, Data::Null) || self.valid.is_some_and(|v| !v[row])
    }
}

/// How one encoding writes a value: each encoder is a [`Cells`], and
/// [`View`] does the rest the same way for all of them.
pub(super) trait Cells {
    fn null(out: &mut Vec<u8>);
    /// Row `row` of a column that is not NULL there.
    fn cell(data: &Data<'_>, row: usize, out: &mut Vec<u8>);
    /// A constant of type `t` (written once per batch).
    fn scalar(s: &Scalar, t: DataType, out: &mut Vec<u8>);
}

/// A result column for one batch, or a constant encoded once.
pub(super) enum View<'a> {
    Column(ColumnView<'a>),
    Const(Vec<u8>),
}

impl<'a> View<'a> {
    pub fn of<C: Cells>(v: &'a Value<'a>) -> Self {
        match v {
            Value::Column(c) => View::Column(ColumnView::of(c)),
            Value::Scalar(s, t) => {
                let mut bytes = Vec::new();
                C::scalar(s, *t, &mut bytes);
                View::Const(bytes)
            }
        }
    }

    #[inline]
    pub fn write<C: Cells>(&self, row: usize, out: &mut Vec<u8>) {
        match self {
            View::Const(bytes) => out.extend_from_slice(bytes),
            View::Column(c) if c.is_null(row) => C::null(out),
            View::Column(c) => C::cell(&c.data, row, out),
        }
    }
}

/// A decimal constant as the unscaled value of its column's type (the
/// scale the schema declares), or `None` if it does not fit it.
pub(super) fn decimal_constant(v: i128, scale: u8, t: DataType) -> Option<(i128, u8)> {
    match t {
        DataType::Decimal(p, s) => sluice_plan::decimal::rescale(v, scale, s, p).map(|v| (v, s)),
        _ => Some((v, scale)),
    }
}
