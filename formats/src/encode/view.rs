//! A result column seen as a typed slice for the duration of one batch,
//! so that each encoder matches on the type once per batch and value, not
//! through the column's accessors.

use sluice_plan::{Column, ColumnData, DataType, StrData};

pub(super) enum Data<'a> {
    Int(&'a [i64]),
    /// Epoch milliseconds of a TIMESTAMP column.
    Ts(&'a [i64]),
    Float(&'a [f64]),
    Bool(&'a [bool]),
    Str(&'a StrData),
    /// A column of NULLs only.
    Null,
}

pub(super) struct ColumnView<'a> {
    pub data: Data<'a>,
    valid: Option<&'a [bool]>,
}

impl<'a> ColumnView<'a> {
    pub fn of(c: &'a Column) -> Self {
        let data = match (&c.data, c.data_type) {
            (ColumnData::Int(v), DataType::Timestamp) => Data::Ts(v),
            (ColumnData::Int(v), _) => Data::Int(v),
            (ColumnData::Float(v), _) => Data::Float(v),
            (ColumnData::Bool(v), _) => Data::Bool(v),
            (ColumnData::Str(s), _) => Data::Str(s),
            (ColumnData::Null(_), _) => Data::Null,
        };
        Self { data, valid: c.validity.as_deref() }
    }

    #[inline]
    pub fn is_null(&self, row: usize) -> bool {
        matches!(self.data, Data::Null) || self.valid.is_some_and(|v| !v[row])
    }
}
