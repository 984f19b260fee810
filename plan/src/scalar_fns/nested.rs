//! Kernels of the functions over arrays, maps and rows. Each works on the
//! column layout ([`crate::nested_column`]): a row's field is its child
//! column, an array's length the difference of two offsets, an element a
//! gather from the one child column of the batch.

use crate::column::{Column, ColumnData, StrData, and_validity};
use crate::{DataType, Error, ListData, ScalarFunc, ScalarRef, StructData};

/// Whether `func` is one of this file's.
pub(super) fn takes(func: &ScalarFunc) -> bool {
    matches!(
        func,
        ScalarFunc::RowField(_)
            | ScalarFunc::ElementAt
            | ScalarFunc::Cardinality
            | ScalarFunc::ArrayContains
            | ScalarFunc::ArrayPosition
            | ScalarFunc::ArrayJoin
            | ScalarFunc::MapKeys
            | ScalarFunc::MapValues
            | ScalarFunc::MakeArray
            | ScalarFunc::MakeMap
            | ScalarFunc::MakeRow
    )
}

pub(super) fn eval(func: &ScalarFunc, args: &[&Column], data_type: DataType) -> Result<Column, Error> {
    let arg = |i: usize| args.get(i).copied().ok_or_else(|| Error::Internal(format!("{func:?}: missing argument {i}")));
    let a = arg(0)?;
    match func {
        ScalarFunc::RowField(f) => row_field(a, *f),
        ScalarFunc::ElementAt => element_at(a, arg(1)?, data_type),
        ScalarFunc::Cardinality => {
            let list = list(a)?;
            let v = (0..a.len()).map(|i| i64::try_from(list.range(i).len()).unwrap_or(i64::MAX)).collect();
            Ok(Column::new(DataType::Bigint, ColumnData::Int(v), a.validity.clone()))
        }
        ScalarFunc::ArrayContains | ScalarFunc::ArrayPosition => search(func, a, arg(1)?),
        ScalarFunc::ArrayJoin => array_join(a, arg(1)?, args.get(2).copied()),
        ScalarFunc::MapKeys | ScalarFunc::MapValues => {
            let l = list(a)?;
            let entries = entries(l)?;
            let values = entries.fields[usize::from(matches!(func, ScalarFunc::MapValues))].clone();
            let data = ColumnData::List(ListData { offsets: l.offsets.clone(), values: Box::new(values) });
            Ok(Column::new(data_type, data, a.validity.clone()))
        }
        ScalarFunc::MakeArray | ScalarFunc::MakeMap => make_list(func, args, data_type),
        ScalarFunc::MakeRow => {
            let len = a.len();
            let fields = args.iter().map(|c| (*c).clone()).collect();
            Ok(Column::new(data_type, ColumnData::Struct(StructData { len, fields }), None))
        }
        other => Err(Error::Internal(format!("{other:?} is not a nested function"))),
    }
}

/// CAST between nested types of the same shape: each element, entry or
/// field cast as its own type is (by `cast_column`: values that do not
/// convert become NULL). A different shape is an error, refused when
/// planned.
pub(super) fn cast(
    c: &Column,
    to: DataType,
    cast_column: fn(&Column, DataType) -> Result<Column, Error>,
) -> Result<Column, Error> {
    let data = match (&c.data, to) {
        (ColumnData::List(l), DataType::Array(_) | DataType::Map(_))
            if matches!(
                (c.data_type, to),
                (DataType::Array(_), DataType::Array(_)) | (DataType::Map(_), DataType::Map(_))
            ) =>
        {
            let element = to.element().unwrap_or(DataType::Null);
            ColumnData::List(ListData {
                offsets: l.offsets.clone(),
                values: Box::new(cast_column(&l.values, element)?),
            })
        }
        (ColumnData::Struct(r), DataType::Row(_)) if r.fields.len() == to.fields().len() => {
            let fields =
                r.fields.iter().zip(to.fields()).map(|(f, (_, t))| cast_column(f, *t)).collect::<Result<_, _>>()?;
            ColumnData::Struct(StructData { len: r.len, fields })
        }
        _ => return Err(Error::Internal(format!("CAST of {} to {to}", c.data_type))),
    };
    Ok(Column::new(to, data, c.validity.clone()))
}

/// `ARRAY[…]` and `MAP {…}`: per row, each argument (each key and value
/// pair) an element.
fn make_list(func: &ScalarFunc, args: &[&Column], data_type: DataType) -> Result<Column, Error> {
    let n = args.first().map_or(0, |c| c.len());
    let mut out = Column::with_capacity(data_type, n);
    let ColumnData::List(list) = &mut out.data else {
        return Err(Error::Internal(format!("{func:?} into {data_type}")));
    };
    for row in 0..n {
        if matches!(func, ScalarFunc::MakeMap) {
            let ColumnData::Struct(entries) = &mut list.values.data else {
                return Err(Error::Internal("a map column without its entries".into()));
            };
            for pair in args.chunks(2) {
                let [k, v] = pair else { continue };
                entries.fields[0].push_from(k, row)?;
                entries.fields[1].push_from(v, row)?;
                entries.len += 1;
            }
            list.values.mark_valid(args.len() / 2);
        } else {
            for a in args {
                list.values.push_from(a, row)?;
            }
        }
        list.close_row()?;
    }
    Ok(out)
}

fn list(c: &Column) -> Result<&ListData, Error> {
    match &c.data {
        ColumnData::List(l) => Ok(l),
        _ => Err(Error::Internal(format!("an array function over a {} column", c.data_type))),
    }
}

fn entries(l: &ListData) -> Result<&StructData, Error> {
    match &l.values.data {
        ColumnData::Struct(s) if s.fields.len() == 2 => Ok(s),
        _ => Err(Error::Internal("a map column without its entries".into())),
    }
}

/// Field `f` of each row: the field's column, NULL where the row is.
fn row_field(c: &Column, f: usize) -> Result<Column, Error> {
    let ColumnData::Struct(row) = &c.data else {
        return Err(Error::Internal(format!("a field of a {} column", c.data_type)));
    };
    let mut field =
        row.fields.get(f).cloned().ok_or_else(|| Error::Internal(format!("field {f} of a {}", c.data_type)))?;
    if c.validity.is_some() {
        field.validity = and_validity(c.validity.as_deref(), field.validity.as_deref(), c.len());
    }
    Ok(field)
}

/// `arr[i]` / `m[k]`, gathered from the child column.
fn element_at(c: &Column, at: &Column, data_type: DataType) -> Result<Column, Error> {
    let l = list(c)?;
    let n = c.len();
    let mut out = Column::with_capacity(data_type, n);
    let is_map = matches!(c.data_type, DataType::Map(_));
    for i in 0..n {
        let r = l.range(i);
        let found = if !c.is_valid(i) || !at.is_valid(i) {
            None
        } else if is_map {
            let keys = &entries(l)?.fields[0];
            let key = at.value(i);
            // The last entry of a key wins, as a JSON object's last
            // duplicate does.
            r.rev().find(|&j| keys.value(j) == key)
        } else {
            match at.value(i) {
                ScalarRef::Bigint(k) if k >= 1 => {
                    usize::try_from(k - 1).ok().filter(|k| *k < r.len()).map(|k| r.start + k)
                }
                _ => None,
            }
        };
        match found {
            Some(j) if is_map => out.push_from(&entries(l)?.fields[1], j)?,
            Some(j) => out.push_from(&l.values, j)?,
            None => out.push_null(),
        }
    }
    Ok(out)
}

/// ARRAY_CONTAINS / ARRAY_POSITION: the first element equal to the
/// needle (NULL elements equal nothing).
fn search(func: &ScalarFunc, c: &Column, needle: &Column) -> Result<Column, Error> {
    let l = list(c)?;
    let n = c.len();
    let contains = matches!(func, ScalarFunc::ArrayContains);
    let (mut values, mut valid) = (Vec::with_capacity(n), Vec::with_capacity(n));
    let mut bools = Vec::with_capacity(if contains { n } else { 0 });
    for i in 0..n {
        let found = if c.is_valid(i) && needle.is_valid(i) {
            let x = needle.value(i);
            Some(l.range(i).position(|j| l.values.is_valid(j) && l.values.value(j) == x))
        } else {
            None
        };
        match (found, contains) {
            (Some(p), true) => {
                bools.push(p.is_some());
                valid.push(true);
            }
            (None, true) => {
                bools.push(false);
                valid.push(false);
            }
            (p, false) => {
                let p = p.flatten();
                values.push(p.map_or(0, |p| i64::try_from(p + 1).unwrap_or(i64::MAX)));
                valid.push(p.is_some());
            }
        }
    }
    let validity = if valid.iter().all(|v| *v) { None } else { Some(valid) };
    Ok(if contains {
        Column::new(DataType::Boolean, ColumnData::Bool(bools), validity)
    } else {
        Column::new(DataType::Bigint, ColumnData::Int(values), validity)
    })
}

/// ARRAY_JOIN over an array of strings (the planner casts other elements
/// to text first).
fn text(col: &Column, i: usize) -> Option<&str> {
    match &col.data {
        ColumnData::Str(s) if col.is_valid(i) => Some(s.get(i)),
        _ => None,
    }
}

fn array_join(c: &Column, sep: &Column, null_text: Option<&Column>) -> Result<Column, Error> {
    let l = list(c)?;
    let n = c.len();
    let ColumnData::Str(texts) = &l.values.data else {
        return Err(Error::Internal(format!("ARRAY_JOIN over {}", c.data_type)));
    };
    let mut out = StrData::with_capacity(n, n * 16);
    let mut valid = Vec::with_capacity(n);
    for i in 0..n {
        let sep = text(sep, i);
        let ok = c.is_valid(i) && sep.is_some();
        valid.push(ok);
        out.push_with(|buf| {
            if !ok {
                return;
            }
            let mut first = true;
            for j in l.range(i) {
                let item = if l.values.is_valid(j) { Some(texts.get(j)) } else { null_text.and_then(|t| text(t, i)) };
                let Some(item) = item else { continue };
                if !first {
                    buf.push_str(sep.unwrap_or_default());
                }
                first = false;
                buf.push_str(item);
            }
        });
    }
    let validity = if valid.iter().all(|v| *v) { None } else { Some(valid) };
    Ok(Column::new(DataType::String, ColumnData::Str(out), validity))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Scalar;

    fn ints(values: &[&[i64]]) -> Column {
        let mut c = Column::with_capacity(DataType::array(DataType::Bigint).unwrap(), values.len());
        for v in values {
            c.push_scalar(&Scalar::List(v.iter().map(|x| Scalar::Bigint(*x)).collect())).unwrap();
        }
        c.push_null();
        c
    }

    fn bigints(values: &[i64]) -> Column {
        Column::ints(DataType::Bigint, values.to_vec())
    }

    #[test]
    fn elements_are_one_based_and_null_out_of_range() {
        let a = ints(&[&[10, 20, 30], &[], &[5]]);
        let got = eval(&ScalarFunc::ElementAt, &[&a, &bigints(&[3, 1, 0, 1])], DataType::Bigint).unwrap();
        assert_eq!(
            (0..4).map(|i| got.scalar(i)).collect::<Vec<_>>(),
            vec![Scalar::Bigint(30), Scalar::Null, Scalar::Null, Scalar::Null]
        );
        let n = eval(&ScalarFunc::Cardinality, &[&a], DataType::Bigint).unwrap();
        assert_eq!(
            (0..4).map(|i| n.scalar(i)).collect::<Vec<_>>(),
            vec![Scalar::Bigint(3), Scalar::Bigint(0), Scalar::Bigint(1), Scalar::Null]
        );
        let p = eval(&ScalarFunc::ArrayPosition, &[&a, &bigints(&[20, 1, 5, 5])], DataType::Bigint).unwrap();
        assert_eq!(
            (0..4).map(|i| p.scalar(i)).collect::<Vec<_>>(),
            vec![Scalar::Bigint(2), Scalar::Null, Scalar::Bigint(1), Scalar::Null]
        );
    }

    #[test]
    fn map_lookups_take_the_key_and_keys_and_values_keep_entry_order() {
        let t = DataType::map(DataType::String, DataType::Bigint).unwrap();
        let mut m = Column::with_capacity(t, 2);
        let e = |k: &str, v| (Scalar::String(k.into()), Scalar::Bigint(v));
        m.push_scalar(&Scalar::Map(vec![e("a", 1), e("b", 2)])).unwrap();
        m.push_scalar(&Scalar::Map(vec![])).unwrap();
        let key = Column::new(DataType::String, ColumnData::Str(StrData::default()), None);
        let mut key = key;
        key.push_str("b").unwrap();
        key.push_str("b").unwrap();
        let got = eval(&ScalarFunc::ElementAt, &[&m, &key], DataType::Bigint).unwrap();
        assert_eq!((got.scalar(0), got.scalar(1)), (Scalar::Bigint(2), Scalar::Null));
        let keys = eval(&ScalarFunc::MapKeys, &[&m], DataType::array(DataType::String).unwrap()).unwrap();
        assert_eq!(keys.scalar(0), Scalar::List(vec![Scalar::String("a".into()), Scalar::String("b".into())]));
    }
}
