//! Result rows' record keys, whatever the values' format: a JSON object of
//! the key columns (the default, as Kafka Connect's JSON converter reads
//! it), or an Avro record of them in the Confluent wire format
//! (`sink.keyFormat: avro`, for Connect's AvroConverter as key converter).

use sluice_engine::EmittedRows;
use sluice_plan::DataType;

use super::avro::AvroRecord;
use super::json::{EncodedRows, Json, prefixes, write_object};
use super::view::View;

#[derive(Debug, Clone)]
pub struct KeyWriter(Kind);

#[derive(Debug, Clone)]
enum Kind {
    /// Each key column's `{"name":` (`,"name":` after the first).
    Json(Vec<Vec<u8>>),
    Avro(AvroRecord),
}

impl KeyWriter {
    /// JSON objects of the columns `key_names`.
    pub fn json(key_names: &[String]) -> Self {
        Self(Kind::Json(prefixes(key_names)))
    }

    /// Avro records of key schema `schema_id`, of fields of `types`.
    pub fn avro(schema_id: u32, types: &[DataType]) -> Self {
        Self(Kind::Avro(AvroRecord::new(schema_id, types)))
    }

    /// Appends each selected row's key to `out` (nothing for a query
    /// without a key).
    pub fn encode(&self, rows: &EmittedRows<'_>, out: &mut EncodedRows) {
        if rows.keys.is_empty() {
            return;
        }
        match &self.0 {
            Kind::Json(prefixes) => {
                let keys: Vec<View<'_>> = rows.keys.iter().map(View::of::<Json>).collect();
                rows.selection.for_each(|row| {
                    write_object(prefixes, &keys, row, &mut out.keys);
                    out.key_ends.push(out.keys.len());
                });
            }
            Kind::Avro(record) => {
                let keys = AvroRecord::views(rows.keys);
                rows.selection.for_each(|row| {
                    record.write(&keys, row, &mut out.keys);
                    out.key_ends.push(out.keys.len());
                });
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::borrow::Cow;

    use sluice_crds::{ColumnType, SourceSpec};
    use sluice_engine::EmittedRows;
    use sluice_plan::{Column, DataType, Scalar, Selection, Value};

    use super::KeyWriter;
    use crate::decode::AvroDecoder;
    use crate::encode::{EncodedRows, JsonEncoder, RowEncoder, key_schema};

    /// Avro keys, whatever the values' format, read back under the key
    /// schema derived for them; a tombstone keeps its Avro key.
    #[test]
    fn avro_keys_beside_json_values_read_back_under_the_key_schema() {
        let mut symbol = Column::with_capacity(DataType::String, 2);
        symbol.push_str("AAPL").unwrap();
        symbol.push_null();
        let keys = [Value::Column(Cow::Owned(symbol)), Value::Scalar(Scalar::Bigint(7), DataType::Bigint)];
        let columns = [Value::Scalar(Scalar::Bigint(1), DataType::Bigint)];
        let names = ["symbol".to_owned(), "venue".to_owned()];
        let encoder = RowEncoder::Json(JsonEncoder::new(&["n".to_owned()], &names))
            .with_keys(KeyWriter::avro(9, &[DataType::String, DataType::Bigint]));
        let mut out = EncodedRows::default();
        for delete in [false, true] {
            let rows =
                EmittedRows { columns: &columns, keys: &keys, selection: Selection::All(2), from_input: false, delete };
            encoder.encode(&rows, &mut out);
        }
        assert_eq!(out.value(0), br#"{"n":1}"#);
        assert!(out.is_tombstone(2));
        let schema =
            key_schema("job", &[("symbol".to_owned(), DataType::String), ("venue".to_owned(), DataType::Bigint)])
                .unwrap();
        assert!(schema.contains(r#""name":"jobKey""#), "{schema}");
        let source =
            SourceSpec::table("k", &[("symbol", ColumnType::String, false), ("venue", ColumnType::Bigint, false)]);
        let plan = sluice_sql::plan_query("SELECT symbol, venue FROM k", &[source]).unwrap();
        let mut decoder = AvroDecoder::new(&plan);
        decoder.add_schema(9, &schema);
        let mut batch = decoder.new_batch(4);
        for i in 0..4 {
            decoder.decode(out.key(i).unwrap(), &mut batch).unwrap();
        }
        let got: Vec<(Scalar, Scalar)> =
            (0..4).map(|r| (batch.columns[0].scalar(r), batch.columns[1].scalar(r))).collect();
        let row = |s: Option<&str>| (s.map_or(Scalar::Null, |s| Scalar::String(s.into())), Scalar::Bigint(7));
        assert_eq!(got, [row(Some("AAPL")), row(None), row(Some("AAPL")), row(None)]);
    }
}
