//! Result rows' record keys, whatever the values' format: a JSON object of
//! the key columns (the default, as Kafka Connect's JSON converter reads
//! it), or an Avro record or Protobuf message of them in the Confluent
//! wire format (`sink.keyFormat: avro` or `protobuf`, for Connect's
//! AvroConverter or ProtobufConverter as key converter).
//! Each sink encoder holds one; [`super::RowEncoder::encode`] writes the
//! keys after the encoder wrote the values.

use sluice_plan::DataType;

#[derive(Debug, Clone)]
pub struct KeyWriter(pub(super) Kind);

#[derive(Debug, Clone)]
pub(super) enum Kind {
    /// Each key column's `{"name":` (`,"name":` after the first).
    Json(Vec<Vec<u8>>),
    /// The wire format's header (a zero byte, the key schema's id), and
    /// which fields are of type `null` (no union, no bytes).
    Avro { header: [u8; 5], bare_null: Vec<bool> },
    /// A Protobuf message of the key columns (`sink.keyFormat: protobuf`):
    /// the wire format's header, message index `[0]` last.
    Protobuf([u8; 6]),
}

/// The Confluent wire format's header for schema `schema_id`: a zero
/// byte, the id (4 bytes, big-endian), then `N - 5` zero bytes (Protobuf's
/// message index `[0]` is one). Values and keys start with it.
pub(super) fn wire_header<const N: usize>(schema_id: u32) -> [u8; N] {
    let mut header = [0; N];
    header[1..5].copy_from_slice(&schema_id.to_be_bytes());
    header
}

impl KeyWriter {
    /// JSON objects of the key columns, each column's prefix given.
    pub(super) fn json_prefixes(prefixes: Vec<Vec<u8>>) -> Self {
        Self(Kind::Json(prefixes))
    }

    /// Avro records of key schema `schema_id`, of fields of `types`.
    pub fn avro(schema_id: u32, types: &[DataType]) -> Self {
        let header = wire_header(schema_id);
        Self(Kind::Avro { header, bare_null: types.iter().map(|t| *t == DataType::Null).collect() })
    }

    /// Protobuf messages of key schema `schema_id`.
    pub fn protobuf(schema_id: u32) -> Self {
        Self(Kind::Protobuf(wire_header(schema_id)))
    }
}

#[cfg(test)]
mod tests {
    use std::borrow::Cow;

    use sluice_crds::{ColumnType, SourceSpec};
    use sluice_plan::EmittedRows;
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
