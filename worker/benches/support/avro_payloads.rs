//! Seed records as Avro in the Confluent wire format, for the benches:
//! the JSON records decoded into the plan's columns, then written with the
//! Avro sink's encoder under the schema it derives (every field a
//! `["null", T]` union, as Sluice's own results are), schema id 1.

use std::borrow::Cow;

use sluice_formats::decode::JsonDecoder;
use sluice_formats::encode::{AvroEncoder, EncodedRows, writer_schema};
use sluice_plan::EmittedRows;
use sluice_plan::{DataType, Plan, Selection, Value};

/// The writer schema of the plan's source columns, and `json` as Avro.
pub fn to_avro<'a>(plan: &Plan, json: impl Iterator<Item = &'a [u8]>) -> (String, Vec<Vec<u8>>) {
    let fields: Vec<(String, DataType)> =
        plan.source.schema.fields.iter().map(|f| (f.name.clone(), f.data_type)).collect();
    let types: Vec<DataType> = fields.iter().map(|f| f.1).collect();
    let schema = writer_schema("bench", &fields).unwrap_or_else(|e| panic!("writer schema: {e}"));
    let encoder = AvroEncoder::new(1, &types, &[]);
    // Every column read, used by the query or not: the Avro records hold
    // all the JSON records hold (a required column the query does not use
    // would otherwise be written as null).
    let mut every_column = plan.clone();
    every_column.used_columns.iter_mut().for_each(|u| *u = true);
    let mut decoder = JsonDecoder::new(&every_column);
    let mut batch = decoder.new_batch(4096);
    let mut avro = Vec::new();
    let flush = |batch: &mut sluice_plan::Batch, avro: &mut Vec<Vec<u8>>| {
        let columns: Vec<Value<'_>> = batch.columns.iter().map(|c| Value::Column(Cow::Borrowed(c))).collect();
        let mut out = EncodedRows::default();
        let rows = EmittedRows {
            columns: &columns,
            keys: &[],
            selection: Selection::All(batch.len),
            from_input: false,
            delete: false,
        };
        encoder.encode(&rows, &mut out);
        avro.extend((0..out.len()).map(|i| out.value(i).to_vec()));
        batch.clear();
    };
    for payload in json {
        decoder.decode(payload, &mut batch).unwrap_or_else(|e| panic!("seed record: {e}"));
        if batch.len == 4096 {
            flush(&mut batch, &mut avro);
        }
    }
    flush(&mut batch, &mut avro);
    (schema, avro)
}
