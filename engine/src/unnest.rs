//! `CROSS JOIN UNNEST(…)`: a batch of source rows into a batch of one row
//! per element ([`UnnestPlan`]). The elements already lie in one child
//! column of the batch, so the element columns are gathers from it (a
//! row element's fields from their own columns), and the source's
//! columns gathers of each row once per element.

use sluice_plan::{Batch, Column, ColumnData, DataType, EmittedRows, UnnestPlan, eval};

use crate::{Error, Output};

/// No element: a LEFT unnest's row for an empty or NULL array.
const NONE: u32 = u32::MAX;

/// The rows of `batch` unnested, and the source row of each.
pub(crate) fn unnest(plan: &UnnestPlan, batch: &Batch) -> Result<(Batch, Vec<u32>), Error> {
    let n = batch.len;
    let array = eval(&plan.array, batch)?.into_column(n);
    let ColumnData::List(list) = &array.data else {
        return Err(Error::Internal(format!("UNNEST of a {} value", array.data_type)));
    };
    // Which source row and which element each output row is.
    let mut rows: Vec<u32> = Vec::with_capacity(list.values.len());
    let mut elements: Vec<u32> = Vec::with_capacity(list.values.len());
    let mut positions: Vec<i64> = Vec::new();
    for i in 0..n {
        let range = if array.is_valid(i) { list.range(i) } else { 0..0 };
        if range.is_empty() && plan.left {
            rows.push(u32::try_from(i).unwrap_or(u32::MAX));
            elements.push(NONE);
            positions.push(0);
            continue;
        }
        for (k, j) in range.enumerate() {
            rows.push(u32::try_from(i).unwrap_or(u32::MAX));
            elements.push(u32::try_from(j).unwrap_or(NONE));
            if plan.ordinality {
                positions.push(i64::try_from(k + 1).unwrap_or(i64::MAX));
            }
        }
    }
    let mut columns = Vec::with_capacity(batch.columns.len() + 4);
    for (i, c) in batch.columns.iter().enumerate() {
        if plan.keep.get(i).copied().unwrap_or(true) {
            columns.push(gather(c, &rows)?);
        } else {
            columns.push(Column::new(c.data_type, ColumnData::Null(rows.len()), None));
        }
    }
    match (&list.values.data, plan.split_fields) {
        (ColumnData::Struct(fields), true) => {
            for f in &fields.fields {
                columns.push(gather(&with_row_nulls(f, &list.values), &elements)?);
            }
        }
        _ => columns.push(gather(&list.values, &elements)?),
    }
    if plan.ordinality {
        let valid: Vec<bool> = elements.iter().map(|e| *e != NONE).collect();
        let validity = if valid.iter().all(|v| *v) { None } else { Some(valid) };
        columns.push(Column::new(DataType::Bigint, ColumnData::Int(positions), validity));
    }
    let n = rows.len();
    Ok((Batch::new(columns, n), rows))
}

/// The output of a plan that unnests: late rows are the source records
/// they came from (each once), as the dead-letter output takes them.
pub(crate) struct ToRecords<'a> {
    pub(crate) out: &'a mut dyn Output,
    pub(crate) parents: &'a [u32],
    pub(crate) records: &'a Batch,
}

impl Output for ToRecords<'_> {
    fn rows(&mut self, rows: &EmittedRows<'_>) -> Result<(), Error> {
        self.out.rows(rows)
    }

    fn late(&mut self, _: &Batch, rows: &[u32]) -> Result<(), Error> {
        let mut records: Vec<u32> = rows.iter().filter_map(|&r| self.parents.get(r as usize).copied()).collect();
        records.dedup();
        self.out.late(self.records, &records)
    }
}

/// A row element's field, NULL where the element itself is.
fn with_row_nulls<'a>(field: &'a Column, row: &Column) -> std::borrow::Cow<'a, Column> {
    match &row.validity {
        None => std::borrow::Cow::Borrowed(field),
        Some(valid) => {
            let mut f = field.clone();
            let mut v = f.validity.take().unwrap_or_else(|| vec![true; f.len()]);
            v.iter_mut().zip(valid).for_each(|(a, b)| *a &= *b);
            f.validity = Some(v);
            std::borrow::Cow::Owned(f)
        }
    }
}

/// Rows `at` of `c` (NULL at [`NONE`]).
fn gather(c: &Column, at: &[u32]) -> Result<Column, Error> {
    let mut out = Column::with_capacity(c.data_type, at.len());
    if let ColumnData::Null(_) = c.data {
        out.data = ColumnData::Null(at.len());
        return Ok(out);
    }
    for &i in at {
        if i == NONE {
            out.push_null();
        } else {
            out.push_from(c, i as usize)?;
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_plan::{PhysExpr, Scalar};

    fn orders() -> Batch {
        let item = DataType::row(vec![("sku".into(), DataType::String), ("qty".into(), DataType::Bigint)]).unwrap();
        let t = DataType::array(item).unwrap();
        let mut items = Column::with_capacity(t, 3);
        let it = |s: &str, q| Scalar::Row(vec![Scalar::String(s.into()), Scalar::Bigint(q)]);
        items.push_scalar(&Scalar::List(vec![it("a", 1), it("b", 2)])).unwrap();
        items.push_scalar(&Scalar::List(vec![])).unwrap();
        items.push_null();
        items.push_scalar(&Scalar::List(vec![Scalar::Null])).unwrap();
        Batch::new(vec![Column::ints(DataType::Bigint, vec![10, 20, 30, 40]), items], 4)
    }

    fn plan(left: bool) -> UnnestPlan {
        let t = orders().columns[1].data_type;
        UnnestPlan {
            array: PhysExpr::Column { index: 1, data_type: t },
            left,
            split_fields: true,
            ordinality: true,
            names: vec!["sku".into(), "qty".into(), "n".into()],
            keep: Vec::new(),
        }
    }

    fn rows(b: &Batch) -> Vec<Vec<Scalar>> {
        (0..b.len).map(|r| [0, 2, 3, 4].iter().map(|&c| b.columns[c].scalar(r)).collect()).collect()
    }

    #[test]
    fn each_element_is_a_row_with_its_fields_and_position() {
        let (out, parents) = unnest(&plan(false), &orders()).unwrap();
        assert_eq!(parents, [0, 0, 3]);
        let s = |x: &str| Scalar::String(x.into());
        assert_eq!(
            rows(&out),
            vec![
                vec![Scalar::Bigint(10), s("a"), Scalar::Bigint(1), Scalar::Bigint(1)],
                vec![Scalar::Bigint(10), s("b"), Scalar::Bigint(2), Scalar::Bigint(2)],
                vec![Scalar::Bigint(40), Scalar::Null, Scalar::Null, Scalar::Bigint(1)],
            ]
        );
    }

    #[test]
    fn left_keeps_rows_whose_array_is_empty_or_null() {
        let (out, _) = unnest(&plan(true), &orders()).unwrap();
        let ids: Vec<Scalar> = (0..out.len).map(|r| out.columns[0].scalar(r)).collect();
        assert_eq!(ids, [10, 10, 20, 30, 40].map(Scalar::Bigint).to_vec());
        assert_eq!(out.columns[2].scalar(2), Scalar::Null);
        assert_eq!(out.columns[4].scalar(3), Scalar::Null, "no position without an element");
    }
}
