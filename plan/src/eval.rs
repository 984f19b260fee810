//! Vectorized evaluation of compiled expressions over a batch.
//!
//! Each node evaluates to a whole column (or a constant), with kernels that
//! loop over plain slices: no per-row dispatch, allocation or name lookup.
//! A column reference borrows the batch's column instead of copying it.
//! SQL NULL semantics: arithmetic and comparisons with NULL give NULL; AND/OR
//! follow three-valued logic; division or modulo by zero gives NULL.

use std::borrow::Cow;

use super::batch::Batch;
use super::column::{Column, ColumnData, StrData, and_validity, broadcast};
use super::scalar_fns::{cast_column, concat_rows, eval_function, like_column};
use crate::Error;
use crate::{ArithOp, CmpOp, DataType, PhysExpr, Scalar};

/// The result of evaluating an expression: a column, or one value for all rows.
#[derive(Clone, Debug)]
pub enum Value<'a> {
    Column(Cow<'a, Column>),
    Scalar(Scalar, DataType),
}

impl<'a> Value<'a> {
    /// As a column of `len` rows (constants are broadcast).
    pub fn into_column(self, len: usize) -> Cow<'a, Column> {
        match self {
            Value::Column(c) => c,
            Value::Scalar(s, t) => Cow::Owned(broadcast(&s, t, len)),
        }
    }
}

/// Evaluates `expr` over every row of `batch`.
pub fn eval<'a>(expr: &PhysExpr, batch: &'a Batch) -> Result<Value<'a>, Error> {
    let n = batch.len;
    Ok(match expr {
        PhysExpr::Column { index, .. } => Value::Column(Cow::Borrowed(
            batch.columns.get(*index).ok_or_else(|| Error::Internal(format!("column {index} missing from batch")))?,
        )),
        PhysExpr::Literal { value, data_type } => Value::Scalar(value.clone(), *data_type),
        PhysExpr::Cast { expr, to } => match eval(expr, batch)? {
            Value::Scalar(s, _) => {
                let c = cast_column(&broadcast(&s, expr.data_type(), 1), *to)?;
                Value::Scalar(c.scalar(0), *to)
            }
            Value::Column(c) => Value::Column(Cow::Owned(cast_column(&c, *to)?)),
        },
        PhysExpr::Arith { op, left, right, data_type } => {
            let l = eval(left, batch)?;
            let r = eval(right, batch)?;
            Value::Column(Cow::Owned(arith(*op, *data_type, &l, &r, n)?))
        }
        PhysExpr::Compare { op, left, right } => {
            let l = eval(left, batch)?;
            let r = eval(right, batch)?;
            Value::Column(Cow::Owned(compare(*op, &l, &r, n)?))
        }
        PhysExpr::And(l, r) | PhysExpr::Or(l, r) => {
            let is_and = matches!(expr, PhysExpr::And(..));
            let l = eval(l, batch)?.into_column(n);
            let r = eval(r, batch)?.into_column(n);
            Value::Column(Cow::Owned(kleene(is_and, &l, &r)?))
        }
        PhysExpr::Not(e) => {
            let c = eval(e, batch)?.into_column(n);
            let ColumnData::Bool(v) = &c.data else {
                return Err(Error::Internal("NOT of a non-boolean".into()));
            };
            Value::Column(Cow::Owned(Column::new(
                DataType::Boolean,
                ColumnData::Bool(v.iter().map(|b| !b).collect()),
                c.validity.clone(),
            )))
        }
        PhysExpr::Negate(e) => {
            let c = eval(e, batch)?.into_column(n);
            let data = match &c.data {
                ColumnData::Int(v) => ColumnData::Int(v.iter().map(|x| x.wrapping_neg()).collect()),
                // 38 digits and their negation fit an i128.
                ColumnData::Wide(v) => ColumnData::Wide(v.iter().map(|x| -x).collect()),
                ColumnData::Float(v) => ColumnData::Float(v.iter().map(|x| -x).collect()),
                ColumnData::Null(k) => ColumnData::Null(*k),
                _ => return Err(Error::Internal("negation of a non-number".into())),
            };
            Value::Column(Cow::Owned(Column::new(c.data_type, data, c.validity.clone())))
        }
        PhysExpr::IsNull { expr, negated } => {
            let c = eval(expr, batch)?.into_column(n);
            let v = (0..n).map(|i| c.is_valid(i) == *negated).collect();
            Value::Column(Cow::Owned(Column::bools(v)))
        }
        PhysExpr::Case { whens, otherwise, data_type } => {
            let mut conds = Vec::with_capacity(whens.len());
            let mut thens = Vec::with_capacity(whens.len());
            for (c, t) in whens {
                conds.push(eval(c, batch)?.into_column(n));
                thens.push(eval(t, batch)?.into_column(n));
            }
            let otherwise = eval(otherwise, batch)?.into_column(n);
            let mut out = Column::with_capacity(*data_type, n);
            for row in 0..n {
                let branch = conds.iter().position(|c| is_true(c, row));
                let src = branch.map_or(otherwise.as_ref(), |b| thens[b].as_ref());
                out.push_from(src, row)?;
            }
            Value::Column(Cow::Owned(out))
        }
        PhysExpr::Like { expr, pattern, negated, case_insensitive } => {
            let c = eval(expr, batch)?.into_column(n);
            Value::Column(Cow::Owned(like_column(&c, pattern, *negated, *case_insensitive)?))
        }
        PhysExpr::InList { expr, list, negated } => {
            let c = eval(expr, batch)?.into_column(n);
            Value::Column(Cow::Owned(in_list(&c, list, *negated)))
        }
        PhysExpr::Coalesce { args, data_type } => {
            let cols: Vec<_> =
                args.iter().map(|a| eval(a, batch).map(|v| v.into_column(n))).collect::<Result<_, _>>()?;
            let mut out = Column::with_capacity(*data_type, n);
            for row in 0..n {
                match cols.iter().find(|c| c.is_valid(row)) {
                    Some(c) => out.push_from(c, row)?,
                    None => out.push_null(),
                }
            }
            Value::Column(Cow::Owned(out))
        }
        PhysExpr::Concat(args) => {
            let cols: Vec<_> =
                args.iter().map(|a| eval(a, batch).map(|v| v.into_column(n))).collect::<Result<_, _>>()?;
            let parts: Vec<&Column> = cols.iter().map(AsRef::as_ref).collect();
            Value::Column(Cow::Owned(concat_rows(&parts, None, n)?))
        }
        PhysExpr::ConcatOp(l, r) => {
            let l = eval(l, batch)?.into_column(n);
            let r = eval(r, batch)?.into_column(n);
            let (Some(ls), Some(rs)) = (l.str_data(), r.str_data()) else {
                return Ok(Value::Column(Cow::Owned(broadcast(&Scalar::Null, DataType::String, n))));
            };
            let mut out = StrData::with_capacity(n, n * 16);
            for row in 0..n {
                out.push_with(|buf| {
                    buf.push_str(ls.get(row));
                    buf.push_str(rs.get(row));
                });
            }
            let validity = and_validity(l.validity.as_deref(), r.validity.as_deref(), n);
            Value::Column(Cow::Owned(Column::new(DataType::String, ColumnData::Str(out), validity)))
        }
        PhysExpr::Func { func, args, data_type } => {
            let cols: Vec<_> =
                args.iter().map(|a| eval(a, batch).map(|v| v.into_column(n))).collect::<Result<_, _>>()?;
            Value::Column(Cow::Owned(eval_function(func, &cols, *data_type, n)?))
        }
    })
}

/// Evaluates a column-free expression to its value (constant folding).
pub fn fold_constant(expr: &PhysExpr) -> Option<Scalar> {
    let one_row = Batch::new(Vec::new(), 1);
    match eval(expr, &one_row).ok()? {
        Value::Scalar(s, _) => Some(s),
        Value::Column(c) => (c.len() == 1).then(|| c.scalar(0)),
    }
}

/// Evaluates a boolean predicate and returns the rows where it is TRUE
/// (not FALSE, not NULL), or `None` when every row passes.
pub fn filter_rows(predicate: &PhysExpr, batch: &Batch, out: &mut Vec<u32>) -> Result<bool, Error> {
    out.clear();
    let v = eval(predicate, batch)?;
    let c = match v {
        Value::Scalar(Scalar::Boolean(true), _) => return Ok(false),
        Value::Scalar(..) => return Ok(true),
        Value::Column(c) => c,
    };
    let ColumnData::Bool(values) = &c.data else {
        return Err(Error::Internal("filter predicate is not boolean".into()));
    };
    match &c.validity {
        None => out.extend(values.iter().enumerate().filter(|(_, b)| **b).map(|(i, _)| i as u32)),
        Some(valid) => {
            out.extend(values.iter().zip(valid).enumerate().filter(|(_, (b, v))| **b && **v).map(|(i, _)| i as u32))
        }
    }
    Ok(out.len() != batch.len)
}

#[inline]
fn is_true(c: &Column, row: usize) -> bool {
    match &c.data {
        ColumnData::Bool(v) => v[row] && c.is_valid(row),
        _ => false,
    }
}

/// One side of a binary kernel: a slice with its validity, or a constant.
enum Side<'a, T> {
    Slice(&'a [T], Option<&'a [bool]>),
    Const(Option<T>),
}

fn int_side<'a>(v: &'a Value<'_>) -> Result<Side<'a, i64>, Error> {
    Ok(match v {
        Value::Column(c) => match &c.data {
            ColumnData::Int(x) => Side::Slice(x, c.validity.as_deref()),
            ColumnData::Null(_) => Side::Const(None),
            _ => return Err(Error::Internal(format!("expected an integer column, got {}", c.data_type))),
        },
        Value::Scalar(Scalar::Bigint(x) | Scalar::Timestamp(x), _) => Side::Const(Some(*x)),
        Value::Scalar(Scalar::Decimal(x, _), _) => Side::Const(Some(crate::decimal::narrow(*x))),
        Value::Scalar(Scalar::Null, _) => Side::Const(None),
        Value::Scalar(s, _) => return Err(Error::Internal(format!("expected an integer, got {s:?}"))),
    })
}

/// A decimal (or bigint) operand: either storage, or a constant.
enum DecSide<'a> {
    Narrow(&'a [i64], Option<&'a [bool]>),
    Wide(&'a [i128], Option<&'a [bool]>),
    Const(Option<i128>),
}

impl DecSide<'_> {
    #[inline]
    fn get(&self, i: usize) -> i128 {
        match self {
            Self::Narrow(v, _) => i128::from(v[i]),
            Self::Wide(v, _) => v[i],
            Self::Const(x) => x.unwrap_or_default(),
        }
    }

    fn validity(&self) -> Option<&[bool]> {
        match self {
            Self::Narrow(_, v) | Self::Wide(_, v) => *v,
            Self::Const(_) => None,
        }
    }
}

/// A decimal (or bigint) side and its scale.
fn dec_side<'a>(v: &'a Value<'_>) -> Result<(DecSide<'a>, u8), Error> {
    let scale = |t: DataType| if let DataType::Decimal(_, s) = t { s } else { 0 };
    Ok(match v {
        Value::Column(c) => {
            let side = match &c.data {
                ColumnData::Int(x) => DecSide::Narrow(x, c.validity.as_deref()),
                ColumnData::Wide(x) => DecSide::Wide(x, c.validity.as_deref()),
                ColumnData::Null(_) => DecSide::Const(None),
                _ => return Err(Error::Internal(format!("expected a decimal column, got {}", c.data_type))),
            };
            (side, scale(c.data_type))
        }
        Value::Scalar(Scalar::Decimal(x, s), _) => (DecSide::Const(Some(*x)), *s),
        Value::Scalar(Scalar::Bigint(x), t) => (DecSide::Const(Some(i128::from(*x))), scale(*t)),
        Value::Scalar(Scalar::Null, t) => (DecSide::Const(None), scale(*t)),
        Value::Scalar(s, _) => return Err(Error::Internal(format!("expected a decimal, got {s:?}"))),
    })
}

/// Applies `f` to two decimal sides row by row.
fn apply_dec<U: Default + Clone>(
    l: &DecSide<'_>,
    r: &DecSide<'_>,
    n: usize,
    f: impl Fn(i128, i128) -> U,
) -> (Vec<U>, Option<Vec<bool>>) {
    if matches!(l, DecSide::Const(None)) || matches!(r, DecSide::Const(None)) {
        return (vec![U::default(); n], Some(vec![false; n]));
    }
    ((0..n).map(|i| f(l.get(i), r.get(i))).collect(), and_validity(l.validity(), r.validity(), n))
}

fn float_side<'a>(v: &'a Value<'_>) -> Result<Side<'a, f64>, Error> {
    Ok(match v {
        Value::Column(c) => match &c.data {
            ColumnData::Float(x) => Side::Slice(x, c.validity.as_deref()),
            ColumnData::Null(_) => Side::Const(None),
            _ => return Err(Error::Internal(format!("expected a double column, got {}", c.data_type))),
        },
        Value::Scalar(Scalar::Double(x), _) => Side::Const(Some(*x)),
        Value::Scalar(Scalar::Null, _) => Side::Const(None),
        Value::Scalar(s, _) => return Err(Error::Internal(format!("expected a double, got {s:?}"))),
    })
}

fn bool_side<'a>(v: &'a Value<'_>) -> Result<Side<'a, bool>, Error> {
    Ok(match v {
        Value::Column(c) => match &c.data {
            ColumnData::Bool(x) => Side::Slice(x, c.validity.as_deref()),
            ColumnData::Null(_) => Side::Const(None),
            _ => return Err(Error::Internal(format!("expected a boolean column, got {}", c.data_type))),
        },
        Value::Scalar(Scalar::Boolean(x), _) => Side::Const(Some(*x)),
        Value::Scalar(Scalar::Null, _) => Side::Const(None),
        Value::Scalar(s, _) => return Err(Error::Internal(format!("expected a boolean, got {s:?}"))),
    })
}

/// Applies `f` row by row; monomorphised per operator so each case is a
/// tight loop over slices.
fn apply<T: Copy + Default, U: Default + Clone>(
    l: Side<'_, T>,
    r: Side<'_, T>,
    n: usize,
    f: impl Fn(T, T) -> U,
) -> (Vec<U>, Option<Vec<bool>>) {
    match (l, r) {
        (Side::Slice(a, va), Side::Slice(b, vb)) => {
            (a.iter().zip(b).map(|(x, y)| f(*x, *y)).collect(), and_validity(va, vb, n))
        }
        (Side::Slice(a, va), Side::Const(Some(y))) => (a.iter().map(|x| f(*x, y)).collect(), va.map(<[bool]>::to_vec)),
        (Side::Const(Some(x)), Side::Slice(b, vb)) => (b.iter().map(|y| f(x, *y)).collect(), vb.map(<[bool]>::to_vec)),
        (Side::Const(Some(x)), Side::Const(Some(y))) => (vec![f(x, y); n], None),
        _ => (vec![U::default(); n], Some(vec![false; n])),
    }
}

/// Marks rows NULL where `zero[i]` (a zero divisor).
fn null_where(validity: Option<Vec<bool>>, zero: impl Iterator<Item = bool>, n: usize) -> Option<Vec<bool>> {
    let mut v = validity.unwrap_or_else(|| vec![true; n]);
    let mut any = false;
    for (slot, z) in v.iter_mut().zip(zero) {
        if z {
            *slot = false;
            any = true;
        }
    }
    if any || v.iter().any(|x| !x) { Some(v) } else { None }
}

fn divisors_zero<T: Copy + PartialEq + Default>(r: &Side<'_, T>, n: usize) -> Vec<bool> {
    match r {
        Side::Slice(b, _) => b.iter().map(|y| *y == T::default()).collect(),
        Side::Const(Some(y)) => vec![*y == T::default(); n],
        Side::Const(None) => vec![false; n],
    }
}

fn arith(op: ArithOp, data_type: DataType, l: &Value<'_>, r: &Value<'_>, n: usize) -> Result<Column, Error> {
    match data_type {
        DataType::Bigint | DataType::Timestamp => {
            let (a, b) = (int_side(l)?, int_side(r)?);
            let zero = if matches!(op, ArithOp::Div | ArithOp::Mod) { Some(divisors_zero(&b, n)) } else { None };
            let (values, validity) = match op {
                ArithOp::Add => apply(a, b, n, i64::wrapping_add),
                ArithOp::Sub => apply(a, b, n, i64::wrapping_sub),
                ArithOp::Mul => apply(a, b, n, i64::wrapping_mul),
                ArithOp::Div => apply(a, b, n, |x, y| if y == 0 { 0 } else { x.wrapping_div(y) }),
                ArithOp::Mod => apply(a, b, n, |x, y| if y == 0 { 0 } else { x.wrapping_rem(y) }),
            };
            let validity = match zero {
                Some(z) => null_where(validity, z.into_iter(), n),
                None => validity,
            };
            Ok(Column::new(data_type, ColumnData::Int(values), validity))
        }
        DataType::Double => {
            let (a, b) = (float_side(l)?, float_side(r)?);
            let zero = if matches!(op, ArithOp::Div | ArithOp::Mod) { Some(divisors_zero(&b, n)) } else { None };
            let (values, validity) = match op {
                ArithOp::Add => apply(a, b, n, |x, y| x + y),
                ArithOp::Sub => apply(a, b, n, |x, y| x - y),
                ArithOp::Mul => apply(a, b, n, |x, y| x * y),
                ArithOp::Div => apply(a, b, n, |x, y| x / y),
                ArithOp::Mod => apply(a, b, n, |x, y| x % y),
            };
            let validity = match zero {
                Some(z) => null_where(validity, z.into_iter(), n),
                None => validity,
            };
            Ok(Column::new(DataType::Double, ColumnData::Float(values), validity))
        }
        DataType::Decimal(p, s) => {
            let ((a, sa), (b, sb)) = (dec_side(l)?, dec_side(r)?);
            let op = match op {
                ArithOp::Add => crate::decimal::Op::Add,
                ArithOp::Sub => crate::decimal::Op::Sub,
                ArithOp::Mul => crate::decimal::Op::Mul,
                ArithOp::Div => crate::decimal::Op::Div,
                ArithOp::Mod => crate::decimal::Op::Mod,
            };
            let (rows, validity) = apply_dec(&a, &b, n, |x, y| crate::decimal::arith(op, x, sa, y, sb, p, s));
            Ok(Column::decimals(data_type, rows, validity))
        }
        DataType::Null => Ok(broadcast(&Scalar::Null, DataType::Double, n)),
        t => Err(Error::Internal(format!("arithmetic on {t}"))),
    }
}

fn cmp_fn<T: PartialOrd>(op: CmpOp) -> impl Fn(T, T) -> bool {
    move |x, y| match op {
        CmpOp::Eq => x == y,
        CmpOp::NotEq => x != y,
        CmpOp::Lt => x < y,
        CmpOp::LtEq => x <= y,
        CmpOp::Gt => x > y,
        CmpOp::GtEq => x >= y,
    }
}

fn compare(op: CmpOp, l: &Value<'_>, r: &Value<'_>, n: usize) -> Result<Column, Error> {
    let data_type = match (l, r) {
        (Value::Column(c), _) => c.data_type,
        (_, Value::Column(c)) => c.data_type,
        (Value::Scalar(_, t), _) => *t,
    };
    let is_decimal = |v: &Value<'_>| match v {
        Value::Column(c) => matches!(c.data_type, DataType::Decimal(..)),
        Value::Scalar(s, t) => matches!(s, Scalar::Decimal(..)) || matches!(t, DataType::Decimal(..)),
    };
    let data_type = if is_decimal(l) || is_decimal(r) { DataType::Decimal(0, 0) } else { data_type };
    let (values, validity) = match data_type {
        DataType::Decimal(..) => {
            // Scales may differ: compared exactly, never rescaled into i64.
            let ((a, sa), (b, sb)) = (dec_side(l)?, dec_side(r)?);
            let f = cmp_fn(op);
            apply_dec(&a, &b, n, |x, y| f(crate::decimal::cmp(x, sa, y, sb), std::cmp::Ordering::Equal))
        }
        DataType::Bigint | DataType::Timestamp => apply(int_side(l)?, int_side(r)?, n, cmp_fn(op)),
        DataType::Double => apply(float_side(l)?, float_side(r)?, n, cmp_fn(op)),
        DataType::Boolean => apply(bool_side(l)?, bool_side(r)?, n, cmp_fn(op)),
        DataType::String => compare_strings(op, l, r, n)?,
        DataType::Null => (vec![false; n], Some(vec![false; n])),
        DataType::Array(_) | DataType::Map(_) | DataType::Row(_) => compare_nested(op, l, r, n)?,
    };
    Ok(Column::new(DataType::Boolean, ColumnData::Bool(values), validity))
}

/// `=` and `<>` of arrays, maps or rows: equal when every element,
/// entry or field is (the planner refuses an order).
fn compare_nested(op: CmpOp, l: &Value<'_>, r: &Value<'_>, n: usize) -> Result<(Vec<bool>, Option<Vec<bool>>), Error> {
    let at = |v: &'_ Value<'_>, i: usize| match v {
        Value::Column(c) => c.value(i).to_scalar(),
        Value::Scalar(s, _) => s.clone(),
    };
    let (mut values, mut valid) = (Vec::with_capacity(n), Vec::with_capacity(n));
    for i in 0..n {
        let (a, b) = (at(l, i), at(r, i));
        let known = !a.is_null() && !b.is_null();
        valid.push(known);
        values.push(
            known
                && match op {
                    CmpOp::Eq => a == b,
                    CmpOp::NotEq => a != b,
                    _ => return Err(Error::Internal(format!("ordering nested values ({op:?})"))),
                },
        );
    }
    let validity = if valid.iter().all(|v| *v) { None } else { Some(valid) };
    Ok((values, validity))
}

fn cmp_str(op: CmpOp, x: &str, y: &str) -> bool {
    match op {
        CmpOp::Eq => x == y,
        CmpOp::NotEq => x != y,
        CmpOp::Lt => x < y,
        CmpOp::LtEq => x <= y,
        CmpOp::Gt => x > y,
        CmpOp::GtEq => x >= y,
    }
}

fn compare_strings(op: CmpOp, l: &Value<'_>, r: &Value<'_>, n: usize) -> Result<(Vec<bool>, Option<Vec<bool>>), Error> {
    let as_str = |v: &Value<'_>| -> Result<Option<String>, Error> {
        match v {
            Value::Scalar(Scalar::String(s), _) => Ok(Some(s.clone())),
            Value::Scalar(Scalar::Null, _) => Ok(None),
            _ => Err(Error::Internal("expected a string".into())),
        }
    };
    let all_null = || (vec![false; n], Some(vec![false; n]));
    Ok(match (l, r) {
        (Value::Column(a), Value::Column(b)) => {
            let (Some(sa), Some(sb)) = (a.str_data(), b.str_data()) else {
                return Ok(all_null());
            };
            (
                (0..n).map(|i| cmp_str(op, sa.get(i), sb.get(i))).collect(),
                and_validity(a.validity.as_deref(), b.validity.as_deref(), n),
            )
        }
        (Value::Column(a), s) | (s, Value::Column(a)) => {
            let flipped = matches!(l, Value::Scalar(..));
            let (Some(sa), Some(k)) = (a.str_data(), as_str(s)?) else {
                return Ok(all_null());
            };
            let v = if flipped {
                (0..n).map(|i| cmp_str(op, &k, sa.get(i))).collect()
            } else {
                (0..n).map(|i| cmp_str(op, sa.get(i), &k)).collect()
            };
            (v, a.validity.clone())
        }
        (a, b) => match (as_str(a)?, as_str(b)?) {
            (Some(x), Some(y)) => (vec![cmp_str(op, &x, &y); n], None),
            _ => all_null(),
        },
    })
}

/// Three-valued AND / OR.
fn kleene(is_and: bool, l: &Column, r: &Column) -> Result<Column, Error> {
    let (ColumnData::Bool(a), ColumnData::Bool(b)) = (&l.data, &r.data) else {
        return Err(Error::Internal("AND/OR of non-booleans".into()));
    };
    if l.validity.is_none() && r.validity.is_none() {
        let v = if is_and {
            a.iter().zip(b).map(|(x, y)| *x && *y).collect()
        } else {
            a.iter().zip(b).map(|(x, y)| *x || *y).collect()
        };
        return Ok(Column::bools(v));
    }
    let n = a.len();
    let mut values = Vec::with_capacity(n);
    let mut valid = Vec::with_capacity(n);
    for i in 0..n {
        let (x, y) = ((l.is_valid(i)).then_some(a[i]), (r.is_valid(i)).then_some(b[i]));
        let out = if is_and {
            match (x, y) {
                (Some(false), _) | (_, Some(false)) => Some(false),
                (Some(true), Some(true)) => Some(true),
                _ => None,
            }
        } else {
            match (x, y) {
                (Some(true), _) | (_, Some(true)) => Some(true),
                (Some(false), Some(false)) => Some(false),
                _ => None,
            }
        };
        values.push(out.unwrap_or(false));
        valid.push(out.is_some());
    }
    Ok(Column::new(DataType::Boolean, ColumnData::Bool(values), Some(valid)))
}

fn in_list(c: &Column, list: &[Scalar], negated: bool) -> Column {
    let n = c.len();
    let has_null = list.iter().any(Scalar::is_null);
    let values: Vec<bool> = match &c.data {
        ColumnData::Int(v) => {
            let set: Vec<i64> = list
                .iter()
                .filter_map(|s| match s {
                    Scalar::Bigint(x) | Scalar::Timestamp(x) => Some(*x),
                    // Cast to the column's type when planned: the same scale.
                    Scalar::Decimal(x, _) => Some(crate::decimal::narrow(*x)),
                    _ => None,
                })
                .collect();
            v.iter().map(|x| set.contains(x)).collect()
        }
        ColumnData::Wide(v) => {
            let set: Vec<i128> =
                list.iter().filter_map(|s| if let Scalar::Decimal(x, _) = s { Some(*x) } else { None }).collect();
            v.iter().map(|x| set.contains(x)).collect()
        }
        ColumnData::Float(v) => {
            let set: Vec<f64> =
                list.iter().filter_map(|s| if let Scalar::Double(x) = s { Some(*x) } else { None }).collect();
            v.iter().map(|x| set.contains(x)).collect()
        }
        ColumnData::Bool(v) => {
            let set: Vec<bool> =
                list.iter().filter_map(|s| if let Scalar::Boolean(x) = s { Some(*x) } else { None }).collect();
            v.iter().map(|x| set.contains(x)).collect()
        }
        ColumnData::Str(s) => {
            let set: std::collections::HashSet<&str> =
                list.iter().filter_map(|x| if let Scalar::String(x) = x { Some(x.as_str()) } else { None }).collect();
            s.iter().map(|x| set.contains(x)).collect()
        }
        // Refused when planned: IN compares flat values.
        ColumnData::Null(_) | ColumnData::List(_) | ColumnData::Struct(_) => vec![false; n],
    };
    // x IN (…, NULL) is NULL (not FALSE) when x matches nothing.
    let mut validity = c.validity.clone().unwrap_or_else(|| vec![!matches!(c.data, ColumnData::Null(_)); n]);
    if has_null {
        for (v, found) in validity.iter_mut().zip(&values) {
            *v = *v && *found;
        }
    }
    let values = values.into_iter().map(|f| f != negated).collect();
    let validity = if validity.iter().all(|v| *v) { None } else { Some(validity) };
    Column::new(DataType::Boolean, ColumnData::Bool(values), validity)
}
