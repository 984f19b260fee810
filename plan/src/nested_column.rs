//! Nested values laid out column-wise, as Arrow lays out lists and
//! structs: an `array` (and a `map`, an array of `row<key, value>`) is
//! offsets into one child column holding every element of the batch; a
//! `row` is one column per field. A batch of orders with ten line items
//! each is three vectors of the line items' fields, not a vector per order.
//!
//! [`NestedRef`] is one such value where it lies, for code that reads a
//! value at a time (state, constants, tests).

use crate::{Column, ColumnData, DataType, Error, NestedCells, Scalar};

impl Column {
    /// Ends a row of an `array` or `map` column whose elements were pushed
    /// into its child column since the last.
    pub fn end_nested_row(&mut self) -> Result<(), Error> {
        let ColumnData::List(list) = &mut self.data else {
            return Err(Error::Internal(format!("ending a list row of a {} column", self.data_type)));
        };
        list.close_row()?;
        self.mark_valid(1);
        Ok(())
    }

    /// Appends a nested value given as a [`Scalar`] (a constant, a value
    /// read back from state).
    pub(crate) fn push_nested_scalar(&mut self, value: &Scalar) -> Result<(), Error> {
        let element = self.data_type.element();
        let wrong = |c: &Column| Error::Internal(format!("a nested value into a {} column", c.data_type));
        match (value, &mut self.data) {
            (Scalar::List(items), ColumnData::List(list)) => {
                for item in items {
                    list.values.push_scalar(item)?;
                }
                list.close_row()?;
            }
            (Scalar::Map(entries), ColumnData::List(list)) if element.is_some() => {
                let ColumnData::Struct(entry) = &mut list.values.data else { return Err(wrong(self)) };
                for (k, v) in entries {
                    let [key, value] = &mut entry.fields[..] else { return Err(wrong(self)) };
                    key.push_scalar(k)?;
                    value.push_scalar(v)?;
                    entry.len += 1;
                }
                list.values.mark_valid(entries.len());
                list.close_row()?;
            }
            (Scalar::Row(values), ColumnData::Struct(row)) if values.len() == row.fields.len() => {
                for (f, v) in row.fields.iter_mut().zip(values) {
                    f.push_scalar(v)?;
                }
                row.len += 1;
            }
            _ => return Err(wrong(self)),
        }
        self.mark_valid(1);
        Ok(())
    }
}

impl NestedCells for Column {
    fn nested_scalar(&self, i: usize) -> Scalar {
        if !self.is_valid(i) {
            return Scalar::Null;
        }
        match &self.data {
            ColumnData::List(list) => match self.data_type {
                DataType::Map(_) => Scalar::Map(
                    list.range(i)
                        .map(|j| match &list.values.data {
                            ColumnData::Struct(e) if e.fields.len() == 2 => {
                                (e.fields[0].scalar(j), e.fields[1].scalar(j))
                            }
                            _ => (Scalar::Null, Scalar::Null),
                        })
                        .collect(),
                ),
                _ => Scalar::List(list.range(i).map(|j| list.values.scalar(j)).collect()),
            },
            ColumnData::Struct(row) => Scalar::Row(row.fields.iter().map(|f| f.scalar(i)).collect()),
            _ => self.scalar(i),
        }
    }

    fn as_any(&self) -> &dyn std::any::Any {
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn order_items() -> DataType {
        let item = DataType::row(vec![("sku".into(), DataType::String), ("qty".into(), DataType::Bigint)]).unwrap();
        DataType::array(item).unwrap()
    }

    #[test]
    fn a_batch_of_arrays_is_one_child_column_and_reads_back_per_row() {
        let t = order_items();
        let mut c = Column::with_capacity(t, 4);
        let item = |sku: &str, qty| Scalar::Row(vec![Scalar::String(sku.into()), Scalar::Bigint(qty)]);
        c.push_scalar(&Scalar::List(vec![item("a", 1), item("b", 2)])).unwrap();
        c.push_null();
        c.push_scalar(&Scalar::List(vec![])).unwrap();
        c.push_scalar(&Scalar::List(vec![item("c", 3)])).unwrap();
        assert_eq!(c.len(), 4);
        let ColumnData::List(list) = &c.data else { panic!() };
        assert_eq!(list.values.len(), 3, "every element of the batch in one child column");
        assert_eq!(c.scalar(1), Scalar::Null);
        assert_eq!(c.scalar(2), Scalar::List(vec![]));
        let mut kept = c.clone();
        kept.retain_rows(&[0, 3]);
        assert_eq!(kept.scalar(1), Scalar::List(vec![item("c", 3)]));
        assert_eq!(kept.scalar(0), c.scalar(0));
        let mut copy = Column::with_capacity(t, 0);
        for i in 0..4 {
            copy.push_from(&c, i).unwrap();
        }
        assert_eq!(copy.scalar(0), c.scalar(0));
        assert_eq!(copy.scalar(1), Scalar::Null);
        copy.truncate(1);
        let ColumnData::List(list) = &copy.data else { panic!() };
        assert_eq!(list.values.len(), 2);
    }

    #[test]
    fn a_nested_cell_serialises_as_the_scalar_it_stands_for() {
        let m = DataType::map(DataType::String, DataType::Bigint).unwrap();
        let mut c = Column::with_capacity(m, 1);
        let v = Scalar::Map(vec![(Scalar::String("k".into()), Scalar::Bigint(7))]);
        c.push_scalar(&v).unwrap();
        let from_cell = postcard::to_allocvec(&c.value(0)).unwrap();
        assert_eq!(from_cell, postcard::to_allocvec(&v).unwrap());
        assert_eq!(postcard::from_bytes::<Scalar>(&from_cell).unwrap(), v);
    }
}
