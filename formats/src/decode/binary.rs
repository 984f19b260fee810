//! Binary rows of an exchange → columns (the format is described in
//! `encode::BinaryEncoder`).
//!
//! The writer is another stage of the same query, so the values have the
//! types its plan gave them; what is checked is what a record of some
//! other writer (something else producing to an internal topic) would get
//! wrong — a short record, an unknown tag, a value of the wrong kind — and
//! it is reported like a malformed source record, never a panic.

use sluice_plan::{Batch, DataType, Plan};

use super::columns::empty_batch;
use super::error::DecodeError;
use crate::encode::{BOOL, FLOAT, INT, NESTED, NULL, STR, WIDE};

#[derive(Debug, Clone)]
pub struct BinaryDecoder {
    /// For each value of a row, in order: the column it fills, when the
    /// plan reads that column.
    targets: Vec<Option<usize>>,
    names: Vec<String>,
    used: Vec<bool>,
    types: Vec<DataType>,
    /// Used columns no value of a row fills: NULL in every row.
    unsent: Vec<usize>,
}

impl BinaryDecoder {
    /// A decoder of rows written by a plan whose outputs are `writer`, in
    /// order, for `plan`, which reads them as its source's columns of the
    /// same names.
    pub fn new(plan: &Plan, writer: &[String]) -> Self {
        let schema = &plan.source.schema;
        let targets: Vec<Option<usize>> = writer
            .iter()
            .map(|name| schema.index_of(name).filter(|&i| plan.used_columns.get(i).copied().unwrap_or(false)))
            .collect();
        let unsent = (0..schema.fields.len())
            .filter(|&i| plan.used_columns.get(i).copied().unwrap_or(false) && !targets.contains(&Some(i)))
            .collect();
        Self {
            targets,
            names: writer.to_vec(),
            used: plan.used_columns.clone(),
            types: schema.fields.iter().map(|f| f.data_type).collect(),
            unsent,
        }
    }

    /// An empty batch with a builder for each used column.
    pub fn new_batch(&self, capacity: usize) -> Batch {
        empty_batch(&self.types, &self.used, capacity)
    }

    /// Appends `payload` as one row of `batch`, or explains why it cannot.
    pub fn decode(&mut self, payload: &[u8], batch: &mut Batch) -> Result<(), DecodeError> {
        let rows = batch.len;
        match self.fill(payload, batch) {
            Ok(()) => {
                batch.len = rows + 1;
                Ok(())
            }
            Err(e) => {
                for (c, used) in batch.columns.iter_mut().zip(&self.used) {
                    if *used {
                        c.truncate(rows);
                    }
                }
                Err(e)
            }
        }
    }

    fn fill(&mut self, payload: &[u8], batch: &mut Batch) -> Result<(), DecodeError> {
        let mut at = 0;
        for (field, target) in self.targets.iter().enumerate() {
            let Some(&tag) = payload.get(at) else {
                return Err(self.error(field, "the row ends before it"));
            };
            at += 1;
            let width = match tag {
                NULL => 0,
                INT | FLOAT => 8,
                WIDE => 16,
                BOOL => 1,
                STR | NESTED => {
                    4 + payload.get(at..at + 4).map_or(0, |n| {
                        usize::try_from(u32::from_le_bytes([n[0], n[1], n[2], n[3]])).unwrap_or(usize::MAX)
                    })
                }
                other => return Err(self.error(field, &format!("unknown value tag {other}"))),
            };
            let Some(bytes) = payload.get(at..at.saturating_add(width)) else {
                return Err(self.error(field, "the row ends inside it"));
            };
            at += width;
            let Some(column) = *target else { continue };
            let c = &mut batch.columns[column];
            let eight = || {
                let mut b = [0u8; 8];
                b.copy_from_slice(&bytes[..8]);
                b
            };
            let pushed = match (tag, c.data_type) {
                (NULL, _) => {
                    c.push_null();
                    Ok(())
                }
                (INT, DataType::Double) => {
                    #[allow(clippy::cast_precision_loss)]
                    let x = i64::from_le_bytes(eight()) as f64;
                    c.push_f64(x)
                }
                // A decimal's storage follows its precision, which both
                // stages plan alike; a narrow value into a wide column
                // widens (a reader planned before the writer's change).
                (INT, DataType::Decimal(..)) => c.push_decimal(i128::from(i64::from_le_bytes(eight()))),
                (WIDE, DataType::Decimal(p, _)) => {
                    let mut b = [0u8; 16];
                    b.copy_from_slice(&bytes[..16]);
                    match sluice_plan::decimal::fit(i128::from_le_bytes(b), p) {
                        Some(v) => c.push_decimal(v),
                        None => return Err(self.error(field, &format!("a decimal too wide for {}", c.data_type))),
                    }
                }
                (INT, DataType::Bigint | DataType::Timestamp) => c.push_i64(i64::from_le_bytes(eight())),
                (FLOAT, DataType::Double) => c.push_f64(f64::from_le_bytes(eight())),
                (BOOL, DataType::Boolean) => c.push_bool(bytes[0] != 0),
                (STR, DataType::String) => match std::str::from_utf8(&bytes[4..]) {
                    Ok(s) => c.push_str(s),
                    Err(_) => return Err(self.error(field, "a string that is not UTF-8")),
                },
                (NESTED, t) if t.is_nested() => match postcard::from_bytes::<sluice_plan::Scalar>(&bytes[4..]) {
                    Ok(v) => c.push_scalar(&v),
                    Err(_) => return Err(self.error(field, "a nested value that does not read back")),
                },
                (_, t) => return Err(self.error(field, &format!("{} for a {t} column", kind(tag)))),
            };
            pushed.map_err(|e| self.error(field, &e.to_string()))?;
        }
        if at != payload.len() {
            return Err(DecodeError(format!(
                "exchange row: {} bytes after the {} values of the row",
                payload.len() - at,
                self.targets.len()
            )));
        }
        // Columns the writer does not send are NULL (nothing on an
        // exchange is required: the first stage checked the records).
        for &i in &self.unsent {
            batch.columns[i].push_null();
        }
        Ok(())
    }

    fn error(&self, field: usize, what: &str) -> DecodeError {
        let name = self.names.get(field).map_or("?", String::as_str);
        DecodeError(format!("exchange row, value {} (`{name}`): {what}", field + 1))
    }
}

fn kind(tag: u8) -> &'static str {
    match tag {
        INT => "an integer",
        FLOAT => "a double",
        BOOL => "a boolean",
        STR => "a string",
        WIDE => "a wide decimal",
        NESTED => "an array, map or row",
        _ => "NULL",
    }
}

#[cfg(test)]
mod tests {
    use std::borrow::Cow;

    use sluice_plan::EmittedRows;
    use sluice_plan::{Column, DataType, Scalar, Selection, Value};

    use super::BinaryDecoder;
    use crate::decode::test_plan as plan;
    use crate::encode::{BinaryEncoder, EncodedRows};

    fn encode(columns: &[Value<'_>], rows: usize) -> EncodedRows {
        let mut out = EncodedRows::default();
        let emitted =
            EmittedRows { columns, keys: &[], selection: Selection::All(rows), from_input: false, delete: false };
        BinaryEncoder.encode(&emitted, &mut out);
        out
    }

    fn column(data_type: DataType, values: &[Scalar]) -> Value<'static> {
        let mut c = Column::with_capacity(data_type, values.len());
        for v in values {
            c.push_scalar(v).unwrap();
        }
        Value::Column(Cow::Owned(c))
    }

    #[test]
    fn rows_round_trip_by_name_with_nulls_constants_and_columns_not_sent() {
        let p = plan("SELECT id, name, price, ts, flag FROM t");
        // The writer sends `price` as a constant, `name` before `id`,
        // `extra` (which this plan does not read) and no `flag`.
        let rows = encode(
            &[
                column(DataType::String, &[Scalar::String("é\"x".into()), Scalar::Null]),
                column(DataType::Bigint, &[Scalar::Bigint(i64::MIN), Scalar::Bigint(7)]),
                column(DataType::Bigint, &[Scalar::Bigint(1), Scalar::Bigint(2)]),
                Value::Scalar(Scalar::Double(-0.5), DataType::Double),
                column(DataType::Timestamp, &[Scalar::Timestamp(1_700_000_000_123), Scalar::Null]),
            ],
            2,
        );
        let writer: Vec<String> = ["name", "id", "extra", "price", "ts"].map(String::from).to_vec();
        let mut d = BinaryDecoder::new(&p, &writer);
        let mut b = d.new_batch(2);
        for i in 0..rows.len() {
            d.decode(rows.value(i), &mut b).unwrap();
        }
        assert_eq!(b.len, 2);
        let row = |r: usize| (0..5).map(|c| b.columns[c].scalar(r)).collect::<Vec<_>>();
        assert_eq!(
            row(0),
            [
                Scalar::Bigint(i64::MIN),
                Scalar::String("é\"x".into()),
                Scalar::Double(-0.5),
                Scalar::Timestamp(1_700_000_000_123),
                Scalar::Null
            ]
        );
        assert_eq!(row(1), [Scalar::Bigint(7), Scalar::Null, Scalar::Double(-0.5), Scalar::Null, Scalar::Null]);
    }

    #[test]
    fn a_bigint_is_read_into_a_double_column() {
        let p = plan("SELECT price FROM t");
        let rows = encode(&[column(DataType::Bigint, &[Scalar::Bigint(3)])], 1);
        let mut d = BinaryDecoder::new(&p, &["price".to_owned()]);
        let mut b = d.new_batch(1);
        d.decode(rows.value(0), &mut b).unwrap();
        assert_eq!(b.columns[2].scalar(0), Scalar::Double(3.0));
    }

    #[test]
    fn a_record_no_stage_wrote_is_an_error_naming_the_value_and_leaves_the_batch_as_it_was() {
        let p = plan("SELECT id, name FROM t");
        let writer = ["id".to_owned(), "name".to_owned()];
        let good = encode(
            &[column(DataType::Bigint, &[Scalar::Bigint(1)]), column(DataType::String, &[Scalar::String("a".into())])],
            1,
        );
        let mut d = BinaryDecoder::new(&p, &writer);
        let mut b = d.new_batch(4);
        d.decode(good.value(0), &mut b).unwrap();
        let row = good.value(0).to_vec();
        let mut not_utf8 = row.clone();
        let last = not_utf8.len() - 1;
        not_utf8[last] = 0xff;
        let cases: [(&[u8], &str); 6] = [
            (&[], "value 1 (`id`): the row ends before it"),
            (&row[..5], "value 1 (`id`): the row ends inside it"),
            (&row[..row.len() - 1], "value 2 (`name`): the row ends inside it"),
            (&[9], "value 1 (`id`): unknown value tag 9"),
            (&[4, 1, 0, 0, 0, b'x'], "value 1 (`id`): a string for a bigint column"),
            (&not_utf8, "value 2 (`name`): a string that is not UTF-8"),
        ];
        for (bytes, want) in cases {
            let err = d.decode(bytes, &mut b).unwrap_err();
            assert!(err.0.contains(want), "{bytes:?}: {err}");
        }
        let mut trailing = row.clone();
        trailing.push(0);
        assert!(d.decode(&trailing, &mut b).unwrap_err().0.contains("1 bytes after the 2 values"));
        assert_eq!(b.len, 1, "a bad record adds no row");
        assert!(b.columns.iter().take(2).all(|c| c.len() == 1), "and leaves no partial row behind");
    }
}
