//! CSV values (RFC 4180, one record per Kafka value): the source's field
//! columns are the record's fields, in the order the columns are declared
//! — ksqlDB's `DELIMITED` format and Flink's `csv` format read them so.
//! Fields are separated by commas; a field in double quotes may hold
//! commas, line breaks and `""` for a quote. An empty field is NULL. A
//! record with another number of fields than the source has field
//! columns, or a field that is not of its column's type, is a dead letter
//! naming the field.

use sluice_plan::decimal;
use sluice_plan::time::{MAX_TIMESTAMP_MS, parse_timestamp_ms};
use sluice_plan::{Batch, ColumnOrigin, DataType, Plan};

use super::columns::SourceColumns;
use super::encoding::Encoding;
use super::error::DecodeError;

#[derive(Debug, Clone)]
pub struct CsvDecoder {
    columns: SourceColumns,
    /// The field columns, in the order of the record's fields.
    fields: Vec<usize>,
    /// A quoted field with its `""` undone (reused record to record).
    unquoted: Vec<u8>,
}

impl CsvDecoder {
    /// The decoder of `plan`'s source; an error names a column that is not
    /// one of the record's fields (CSV has no nesting).
    pub fn new(plan: &Plan) -> Result<Self, String> {
        let mut fields = Vec::new();
        for i in 0..plan.source.schema.fields.len() {
            if let ColumnOrigin::Field(path) = plan.source.origin(i) {
                if path.len() != 1 {
                    return Err(format!(
                        "a source with format csv reads its columns from the record's fields in order: `{}` is \
                         not one (CSV has no nested fields)",
                        path.join(".")
                    ));
                }
                let t = plan.source.schema.fields[i].data_type;
                if t.is_nested() {
                    return Err(format!(
                        "a source with format csv has text fields: column `{}` of type {t} cannot be read from one \
                         (declare it string and read it with JSON_VALUE / JSON_QUERY)",
                        path.join(".")
                    ));
                }
                fields.push(i);
            }
        }
        Ok(Self { columns: SourceColumns::new(plan), fields, unquoted: Vec::new() })
    }

    /// Fills field `k`'s column from `cell` (unquoted).
    fn push_cell(&self, k: usize, cell: &[u8], batch: &mut Batch) -> Result<(), String> {
        let col = self.fields[k];
        let c = &self.columns;
        let name = || String::from_utf8_lossy(&c.names[col]).into_owned();
        let column = if c.used[col] { Some(&mut batch.columns[col]) } else { None };
        if cell.is_empty() {
            if c.required[col] {
                return Err(format!("required field `{}` (field {}) is empty", name(), k + 1));
            }
            column.into_iter().for_each(|c| c.push_null());
            return Ok(());
        }
        let text = std::str::from_utf8(cell).map_err(|_| format!("field `{}` is not UTF-8 text", name()))?;
        let data_type = c.types[col];
        let bad = || format!("field `{}`: expected {data_type}, got {:?}", name(), shorten(text));
        let pushed = match data_type {
            DataType::String => column.map(|c| c.push_str(text)),
            DataType::Bigint | DataType::Timestamp => {
                let v = match text.trim().parse::<i64>() {
                    Ok(v) => v,
                    Err(_) if data_type == DataType::Timestamp => parse_timestamp_ms(text).ok_or_else(bad)?,
                    Err(_) => return Err(bad()),
                };
                if c.time_bounded[col] && !(-MAX_TIMESTAMP_MS..=MAX_TIMESTAMP_MS).contains(&v) {
                    return Err(format!("field `{}`: {v} is outside ±{MAX_TIMESTAMP_MS} ms from the epoch", name()));
                }
                column.map(|c| c.push_i64(v))
            }
            DataType::Double => {
                let v = text.trim().parse::<f64>().map_err(|_| bad())?;
                column.map(|c| c.push_f64(v))
            }
            DataType::Boolean => {
                let v = match text.trim() {
                    t if t.eq_ignore_ascii_case("true") => true,
                    t if t.eq_ignore_ascii_case("false") => false,
                    _ => return Err(bad()),
                };
                column.map(|c| c.push_bool(v))
            }
            DataType::Decimal(p, s) => {
                let v = decimal::parse(text.trim(), p, s).ok_or_else(bad)?;
                column.map(|c| c.push_decimal(v))
            }
            DataType::Null => column.map(|c| {
                c.push_null();
                Ok(())
            }),
            // Refused when the decoder is built.
            DataType::Array(_) | DataType::Map(_) | DataType::Row(_) => return Err(bad()),
        };
        pushed.transpose().map(|_| ()).map_err(|e| format!("field `{}`: {e}", name()))
    }

    /// Splits the record into fields and fills their columns.
    fn fill(&mut self, payload: &[u8], batch: &mut Batch) -> Result<(), String> {
        let mut record = payload;
        while let [rest @ .., b'\n' | b'\r'] = record {
            record = rest;
        }
        let mut unquoted = std::mem::take(&mut self.unquoted);
        let (mut k, mut at) = (0, 0);
        let filled = loop {
            if k == self.fields.len() {
                break Err(format!("more than the {} fields the source declares", self.fields.len()));
            }
            let (cell, next) = if record.get(at) == Some(&b'"') {
                match unquote(record, at + 1, &mut unquoted) {
                    Some(next) => (unquoted.as_slice(), next),
                    None => break Err(format!("field {}: a quote opened and never closed", k + 1)),
                }
            } else {
                let end = record[at..].iter().position(|&b| b == b',').map_or(record.len(), |e| at + e);
                if record[at..end].contains(&b'"') {
                    break Err(format!("field {}: a quote inside a field that is not quoted", k + 1));
                }
                (&record[at..end], end)
            };
            if let Err(e) = self.push_cell(k, cell, batch) {
                break Err(e);
            }
            k += 1;
            match record.get(next) {
                None => {
                    break if k == self.fields.len() {
                        Ok(())
                    } else {
                        Err(format!("{k} fields, the source declares {}", self.fields.len()))
                    };
                }
                Some(b',') => at = next + 1,
                Some(_) => break Err(format!("field {k}: text after its closing quote")),
            }
        };
        self.unquoted = unquoted;
        filled
    }
}

/// Reads a quoted field from `at` (after its opening quote) into `out`,
/// `""` as one quote: the index after its closing quote, or `None` when
/// it never closes.
fn unquote(record: &[u8], mut at: usize, out: &mut Vec<u8>) -> Option<usize> {
    out.clear();
    loop {
        let quote = record[at..].iter().position(|&b| b == b'"')? + at;
        out.extend_from_slice(&record[at..quote]);
        if record.get(quote + 1) == Some(&b'"') {
            out.push(b'"');
            at = quote + 2;
        } else {
            return Some(quote + 1);
        }
    }
}

fn shorten(text: &str) -> &str {
    text.char_indices().nth(40).map_or(text, |(i, _)| &text[..i])
}

impl Encoding for CsvDecoder {
    fn columns(&self) -> &SourceColumns {
        &self.columns
    }

    fn columns_mut(&mut self) -> &mut SourceColumns {
        &mut self.columns
    }

    fn decode(&mut self, payload: &[u8], batch: &mut Batch) -> Result<(), DecodeError> {
        let rows = batch.len;
        match self.fill(payload, batch) {
            Ok(()) => {
                batch.len = rows + 1;
                Ok(())
            }
            Err(why) => {
                self.columns.rollback(batch, rows);
                Err(DecodeError(format!("csv: {why}")))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use sluice_crds::{ColumnSpec, ColumnType, RecordMetadata, SourceSpec};
    use sluice_plan::Scalar;

    use super::CsvDecoder;
    use crate::decode::{Encoding, RecordMeta};

    fn decoder() -> CsvDecoder {
        let mut source = SourceSpec::table(
            "orders",
            &[
                ("id", ColumnType::Bigint, true),
                ("item", ColumnType::String, false),
                ("price", ColumnType::Double, false),
                ("ts", ColumnType::Timestamp, false),
            ],
        );
        source.schema.columns.push(ColumnSpec {
            metadata: Some(RecordMetadata::Key),
            ..ColumnSpec::field("k", ColumnType::String, false)
        });
        let plan = sluice_sql::plan_query("SELECT * FROM orders", &[source]).unwrap();
        CsvDecoder::new(&plan).unwrap()
    }

    fn row(d: &mut CsvDecoder, record: &str) -> Result<Vec<Scalar>, String> {
        let mut batch = d.columns().new_batch(2);
        let meta = RecordMeta { key: Some(b"k1"), ..RecordMeta::default() };
        d.decode_record(record.as_bytes(), &meta, &mut batch).map_err(|e| e.0)?;
        assert_eq!(batch.len, 1);
        Ok(batch.columns.iter().map(|c| c.scalar(0)).collect())
    }

    #[test]
    fn fields_fill_the_columns_in_order_quotes_and_empties_included() {
        let mut d = decoder();
        assert_eq!(
            row(&mut d, "7,\"bolt, \"\"M6\"\"\",0.25,2023-11-14T22:13:20Z\r\n").unwrap(),
            [
                Scalar::Bigint(7),
                Scalar::String("bolt, \"M6\"".into()),
                Scalar::Double(0.25),
                Scalar::Timestamp(1_700_000_000_000),
                Scalar::String("k1".into())
            ]
        );
        assert_eq!(
            row(&mut d, "8,,,1700000000000").unwrap(),
            [
                Scalar::Bigint(8),
                Scalar::Null,
                Scalar::Null,
                Scalar::Timestamp(1_700_000_000_000),
                Scalar::String("k1".into())
            ]
        );
        assert_eq!(row(&mut d, "9,\"a\nb\",1,2").unwrap()[1], Scalar::String("a\nb".into()));
    }

    #[test]
    fn a_nested_column_is_refused_naming_it() {
        let source =
            SourceSpec::table("orders", &[("id", ColumnType::Bigint, true), ("item.name", ColumnType::String, false)]);
        let plan = sluice_sql::plan_query("SELECT * FROM orders", &[source]).unwrap();
        let e = CsvDecoder::new(&plan).unwrap_err();
        assert!(e.contains("`item.name` is not one (CSV has no nested fields)"), "{e}");
    }

    #[test]
    fn a_bad_record_is_a_dead_letter_naming_its_field_and_leaves_the_batch_as_it_was() {
        let mut d = decoder();
        for (record, reason) in [
            ("1,a,2", "csv: 3 fields, the source declares 4"),
            ("1,a,2,3,4", "csv: more than the 4 fields the source declares"),
            (",a,2,3", "csv: required field `id` (field 1) is empty"),
            ("1,a,cheap,3", "csv: field `price`: expected double, got \"cheap\""),
            ("1,\"a,2,3", "csv: field 2: a quote opened and never closed"),
            ("1,\"a\"x,2,3", "csv: field 2: text after its closing quote"),
            ("1,a\"b,2,3", "csv: field 2: a quote inside a field that is not quoted"),
            ("1,a,2,99999999999999999", "csv: field `ts`: 99999999999999999 is outside"),
        ] {
            let mut batch = d.columns().new_batch(2);
            let got = d.decode(record.as_bytes(), &mut batch).unwrap_err().0;
            assert!(got.starts_with(reason), "{record}: {got}");
            assert!(batch.len == 0 && batch.columns.iter().all(sluice_plan::Column::is_empty), "{record}: rolled back");
        }
    }
}
