//! Row helpers the scalar kernels share: typed views of argument columns
//! and building a string column row by row.

use crate::column::{Column, ColumnData, StrData};
use crate::{DataType, Error};

/// The most characters LPAD and RPAD return: a longer `len` is NULL, so that
/// one record cannot make the worker allocate without bound (Flink would
/// try, up to 2^31 characters).
pub(crate) const MAX_PAD_CHARS: i64 = 1 << 20;

pub(super) fn strings(c: &Column) -> Result<&StrData, Error> {
    c.str_data().ok_or_else(|| Error::Internal(format!("expected strings, got {}", c.data_type)))
}

/// The values of a bigint or timestamp column (`what` names it in the error).
pub(super) fn ints<'c>(c: &'c Column, what: &str) -> Result<&'c [i64], Error> {
    match &c.data {
        ColumnData::Int(v) => Ok(v),
        _ => Err(Error::Internal(format!("{what}: expected integers, got {}", c.data_type))),
    }
}

/// A string column computed row by row from the columns `inputs`: NULL
/// where any input is NULL (`f` is not called) or where `f` returns false
/// (what it wrote is taken back). `f` writes row `i`'s value straight into
/// the column's buffer.
pub(super) fn map_rows_str(inputs: &[&Column], n: usize, mut f: impl FnMut(usize, &mut String) -> bool) -> Column {
    let mut out = StrData::with_capacity(n, n * 8);
    let mut validity = vec![true; n];
    for (i, valid) in validity.iter_mut().enumerate() {
        let inputs_valid = inputs.iter().all(|c| c.is_valid(i));
        out.push_with(|buf| {
            let start = buf.len();
            *valid = inputs_valid && f(i, buf);
            if !*valid {
                buf.truncate(start);
            }
        });
    }
    let validity = if validity.iter().all(|v| *v) { None } else { Some(validity) };
    Column::new(DataType::String, ColumnData::Str(out), validity)
}

/// Rounds half away from zero to `digits` decimal places.
pub(super) fn round_to(x: f64, digits: i64) -> f64 {
    let d = i32::try_from(digits.clamp(-300, 300)).unwrap_or(0);
    let p = 10f64.powi(d);
    let y = (x * p).round() / p;
    if y.is_finite() { y } else { x }
}
