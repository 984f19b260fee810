//! Result rows → Avro values in the Confluent wire format, for a sink with
//! `format: avro`: a zero byte, the writer schema's registry id, then the
//! datum. The writer schema is derived from the query's output columns
//! ([`writer_schema`]): one record, each field a union of `null` and the
//! column's type, since any result column may be NULL. Keys are JSON
//! objects of the key columns, as the JSON sink writes them (Kafka
//! Connect reads them with its JSON or String converter), or Avro records
//! of them ([`key_schema`], `sink.keyFormat: avro`).

use sluice_crds::SinkFormat;
use sluice_plan::EmittedRows;
use sluice_plan::{DataType, Scalar};

use super::avro_binary::{avro_type, decimal_bytes, nested_schema, text, write_nested, zigzag};
use super::json::{EncodedRows, prefixes};
use super::key::{KeyWriter, wire_header};
use super::view::{Cells, Data, View};

/// The writer schema of a query's results: record `name` (an Avro name
/// made of the job's: other characters become `_`) with one nullable
/// field per output column, in order. An output column whose name is not
/// an Avro name is an error naming it (alias it with `AS`).
pub fn writer_schema(name: &str, outputs: &[(String, DataType)]) -> Result<String, String> {
    record_schema(&record_name(name), outputs)
}

/// The schema of a query's record keys (`sink.keyFormat: avro`): record
/// `<name>Key` of the key columns, nullable as the values' are.
pub fn key_schema(name: &str, keys: &[(String, DataType)]) -> Result<String, String> {
    record_schema(&format!("{}Key", record_name(name)), keys)
}

/// The full name of the record [`key_schema`] derives for job `name`.
pub fn key_record_full_name(name: &str) -> String {
    format!("{}Key", record_full_name(name))
}

fn record_schema(record: &str, outputs: &[(String, DataType)]) -> Result<String, String> {
    if let Some(problem) = SinkFormat::Avro.outputs_problem(outputs.iter().map(|c| c.0.as_str())) {
        return Err(problem);
    }
    let mut rows = 0;
    let mut fields = Vec::with_capacity(outputs.len());
    for (column, t) in outputs {
        let ty = match t {
            DataType::Null => serde_json::json!("null"),
            t if t.is_nested() => serde_json::json!(["null", nested_schema(*t, record, column, &mut rows)?]),
            t => serde_json::json!(["null", avro_type(*t)]),
        };
        fields.push(serde_json::json!({ "name": column, "type": ty, "default": null }));
    }
    Ok(serde_json::json!({ "type": "record", "name": record, "namespace": NAMESPACE, "fields": fields }).to_string())
}

/// The record name of job `name`'s results: an Avro name made of it
/// (other characters become `_`).
pub(super) fn record_name(name: &str) -> String {
    let mut record: String = name.chars().map(|c| if c.is_ascii_alphanumeric() { c } else { '_' }).collect();
    if !record.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_') {
        record.insert(0, '_');
    }
    record
}

/// The full name of the record [`writer_schema`] derives for job `name`
/// (what RecordNameStrategy names its subject after), and of the message
/// `proto_schema` derives.
pub fn record_full_name(name: &str) -> String {
    format!("{NAMESPACE}.{}", record_name(name))
}

pub(super) const NAMESPACE: &str = "dev.sluice";

/// Writes [`EmittedRows`] as Avro values of the schema registered as `id`.
#[derive(Debug, Clone)]
pub struct AvroEncoder {
    header: [u8; 5],
    /// Which output columns are of type `null` (a bare `null` field, no union).
    bare_null: Vec<bool>,
    pub(super) keys: KeyWriter,
}

/// One value as a `["null", T]` union: its branch, then the value.
pub(super) struct Avro;

impl Cells for Avro {
    fn null(out: &mut Vec<u8>) {
        out.push(0);
    }

    #[inline]
    fn cell(data: &Data<'_>, row: usize, out: &mut Vec<u8>) {
        match data {
            Data::Int(x) | Data::Ts(x) => {
                out.push(2);
                zigzag(x[row], out);
            }
            Data::Float(x) => {
                out.push(2);
                out.extend_from_slice(&x[row].to_le_bytes());
            }
            Data::Dec(..) | Data::WideDec(..) => {
                out.push(2);
                decimal_bytes(data.decimal(row).0, out);
            }
            Data::Bool(x) => out.extend_from_slice(&[2, u8::from(x[row])]),
            Data::Str(s) => {
                out.push(2);
                text(s.get(row), out);
            }
            Data::Null => out.push(0),
            Data::Nested(c) => {
                out.push(2);
                write_nested(c.value(row), c.data_type, out);
            }
        }
    }

    fn scalar(s: &Scalar, t: DataType, out: &mut Vec<u8>) {
        match s {
            Scalar::Null => out.push(0),
            Scalar::List(_) | Scalar::Map(_) | Scalar::Row(_) => {
                out.push(2);
                write_nested(s.borrowed(), t, out);
            }
            Scalar::Decimal(x, scale) => match super::view::decimal_constant(*x, *scale, t) {
                Some((x, _)) => {
                    out.push(2);
                    decimal_bytes(x, out);
                }
                None => out.push(0),
            },
            Scalar::Bigint(x) | Scalar::Timestamp(x) => {
                out.push(2);
                zigzag(*x, out);
            }
            Scalar::Double(x) => {
                out.push(2);
                out.extend_from_slice(&x.to_le_bytes());
            }
            Scalar::Boolean(x) => out.extend_from_slice(&[2, u8::from(*x)]),
            Scalar::String(x) => {
                out.push(2);
                text(x, out);
            }
        }
    }
}

impl AvroEncoder {
    /// `types`: the output columns' types, as [`writer_schema`] was given them.
    pub fn new(schema_id: u32, types: &[DataType], key_names: &[String]) -> Self {
        Self {
            header: wire_header(schema_id),
            bare_null: types.iter().map(|t| *t == DataType::Null).collect(),
            keys: KeyWriter::json_prefixes(prefixes(key_names)),
        }
    }

    /// Appends the emitted rows to `out`.
    pub fn encode(&self, rows: &EmittedRows<'_>, out: &mut EncodedRows) {
        let values: Vec<View<'_>> = rows.columns.iter().map(View::of::<Avro>).collect();
        out.values.reserve(rows.selection.len() * (5 + 9 * values.len().max(1)));
        rows.selection.for_each(|row| {
            // A deletion is a tombstone: no value at all.
            if !rows.delete {
                write_record(&self.header, &self.bare_null, &values, row, &mut out.values);
            }
            out.value_ends.push(out.values.len());
        });
    }
}

/// Appends row `row` of `views` (made with [`Avro`] cells) as a record of
/// nullable fields in the Confluent wire format: how a value, and an Avro
/// key (`sink.keyFormat: avro`), is written.
#[inline]
pub(super) fn write_record(header: &[u8; 5], bare_null: &[bool], views: &[View<'_>], row: usize, out: &mut Vec<u8>) {
    out.extend_from_slice(header);
    for (v, bare) in views.iter().zip(bare_null) {
        // A bare `null` field takes no bytes.
        if !bare {
            v.write::<Avro>(row, out);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::borrow::Cow;

    use sluice_crds::{ColumnType, SourceSpec};
    use sluice_plan::EmittedRows;
    use sluice_plan::{Column, DataType, Scalar, Selection, Value};

    use super::{AvroEncoder, writer_schema};
    use crate::decode::AvroDecoder;
    use crate::encode::EncodedRows;

    fn column(t: DataType, values: &[Scalar]) -> Value<'static> {
        let mut c = Column::with_capacity(t, values.len());
        values.iter().for_each(|v| c.push_scalar(v).unwrap());
        Value::Column(Cow::Owned(c))
    }

    /// What the encoder writes, the decoder reads back: every type, NULLs
    /// and a constant column, under the schema derived for them.
    #[test]
    fn results_written_as_avro_read_back_as_they_were() {
        let outputs: Vec<(String, DataType)> = [
            ("k", DataType::Bigint),
            ("p", DataType::Double),
            ("s", DataType::String),
            ("b", DataType::Boolean),
            ("t", DataType::Timestamp),
            ("c", DataType::String),
        ]
        .iter()
        .map(|(n, t)| ((*n).to_owned(), *t))
        .collect();
        let schema = writer_schema("my-job", &outputs).unwrap();
        assert!(schema.contains(r#""name":"my_job""#), "{schema}");
        let rows = [
            [
                Scalar::Bigint(-3),
                Scalar::Double(1.5),
                Scalar::String("é✓".into()),
                Scalar::Boolean(true),
                Scalar::Timestamp(1_700_000_000_000),
            ],
            [Scalar::Null, Scalar::Null, Scalar::Null, Scalar::Null, Scalar::Null],
            [
                Scalar::Bigint(i64::MIN),
                Scalar::Double(-0.0),
                Scalar::String(String::new()),
                Scalar::Boolean(false),
                Scalar::Timestamp(-1),
            ],
        ];
        let mut columns: Vec<Value<'_>> =
            (0..5).map(|c| column(outputs[c].1, &rows.iter().map(|r| r[c].clone()).collect::<Vec<_>>())).collect();
        columns.push(Value::Scalar(Scalar::String("const".into()), DataType::String));
        let types: Vec<DataType> = outputs.iter().map(|o| o.1).collect();
        let mut out = EncodedRows::default();
        AvroEncoder::new(42, &types, &[]).encode(
            &EmittedRows {
                columns: &columns,
                keys: &[],
                selection: Selection::All(3),
                from_input: false,
                delete: false,
            },
            &mut out,
        );
        let source = SourceSpec::table(
            "r",
            &[
                ("k", ColumnType::Bigint, false),
                ("p", ColumnType::Double, false),
                ("s", ColumnType::String, false),
                ("b", ColumnType::Boolean, false),
                ("t", ColumnType::Timestamp, false),
                ("c", ColumnType::String, false),
            ],
        );
        let plan = sluice_sql::plan_query("SELECT k, p, s, b, t, c FROM r", &[source]).unwrap();
        let mut decoder = AvroDecoder::new(&plan);
        assert_eq!(crate::decode::Encoding::needs_schema(&decoder, out.value(0)), Some(42));
        decoder.add_schema(42, &schema);
        let mut batch = decoder.new_batch(3);
        for i in 0..3 {
            decoder.decode(out.value(i), &mut batch).unwrap();
        }
        for (r, want) in rows.iter().enumerate() {
            let got: Vec<Scalar> = batch.columns.iter().map(|c| c.scalar(r)).collect();
            assert_eq!(got[..5], want[..], "row {r}");
            assert_eq!(got[5], Scalar::String("const".into()));
        }
    }

    #[test]
    fn an_output_name_avro_cannot_hold_is_refused_naming_it() {
        let e = writer_schema("j", &[("count(*)".into(), DataType::Bigint)]).unwrap_err();
        assert!(e.contains("`count(*)`") && e.contains("AS"), "{e}");
    }
}
