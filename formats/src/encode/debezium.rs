//! Result rows → Debezium change events in JSON, for a sink with `format:
//! debezium-json`, so that consumers that read a changelog (Debezium's
//! JDBC sink, Flink's `debezium-json` format, Sluice's own) read results:
//!
//! - a row of a query without a key (filters, projections, joins) is an
//!   insert: `{"before":null,"after":{…},"op":"c"}`;
//! - a row of a keyed result (a group, a window, a rank) replaces the
//!   key's last one: `op` `u`, `before` null — the previous row is not
//!   kept, as Debezium writes a Postgres update without REPLICA IDENTITY
//!   FULL — and `after` the row;
//! - a deleted group is `{"before":{<key columns>},"after":null,"op":"d"}`,
//!   the key alone, as Debezium writes a delete under the default replica
//!   identity.
//!
//! The record key is the key columns' JSON object, as the JSON sink's (or
//! an Avro record of them: `sink.keyFormat`).

use sluice_plan::EmittedRows;

use super::json::{EncodedRows, Json, prefixes, write_object};
use super::key::KeyWriter;
use super::view::View;

#[derive(Debug, Clone)]
pub struct DebeziumJsonEncoder {
    value_prefixes: Vec<Vec<u8>>,
    key_prefixes: Vec<Vec<u8>>,
    pub(super) keys: KeyWriter,
    /// What follows `after` for an update: `c` where the query has no key.
    op: &'static [u8],
}

impl DebeziumJsonEncoder {
    pub fn new(output_names: &[String], key_names: &[String]) -> Self {
        Self {
            value_prefixes: prefixes(output_names),
            key_prefixes: prefixes(key_names),
            keys: KeyWriter::json_prefixes(prefixes(key_names)),
            op: if key_names.is_empty() { br#","op":"c"}"# } else { br#","op":"u"}"# },
        }
    }

    /// Appends the emitted rows to `out`.
    pub fn encode(&self, rows: &EmittedRows<'_>, out: &mut EncodedRows) {
        let values: Vec<View<'_>> = rows.columns.iter().map(View::of::<Json>).collect();
        let keys: Vec<View<'_>> = rows.keys.iter().map(View::of::<Json>).collect();
        out.values.reserve(rows.selection.len() * (40 + 16 * values.len().max(1)));
        rows.selection.for_each(|row| {
            if rows.delete {
                out.values.extend_from_slice(br#"{"before":"#);
                write_object(&self.key_prefixes, &keys, row, &mut out.values);
                out.values.extend_from_slice(br#","after":null,"op":"d"}"#);
            } else {
                out.values.extend_from_slice(br#"{"before":null,"after":"#);
                write_object(&self.value_prefixes, &values, row, &mut out.values);
                out.values.extend_from_slice(self.op);
            }
            out.value_ends.push(out.values.len());
        });
    }
}

#[cfg(test)]
mod tests {
    use std::borrow::Cow;

    use sluice_crds::{ColumnType, SourceSpec};
    use sluice_plan::EmittedRows;
    use sluice_plan::{Column, DataType, Scalar, Selection, Value};

    use super::DebeziumJsonEncoder;
    use crate::decode::{DebeziumDecoder, RecordMeta};
    use crate::encode::{EncodedRows, JsonEncoder, RowEncoder};

    /// Updates and deletions of a keyed result as Debezium events, read
    /// back by Sluice's own `debezium-json` decoder as the table they say;
    /// JSON writes the deletion as a tombstone instead.
    #[test]
    fn updates_and_deletions_are_debezium_events_a_cdc_reader_reads_back() {
        let k = Column::ints(DataType::Bigint, vec![1, 2]);
        let mut name = Column::with_capacity(DataType::String, 2);
        name.push_str("a\"b").unwrap();
        name.push_null();
        let columns = vec![Value::Column(Cow::Borrowed(&k)), Value::Column(Cow::Borrowed(&name))];
        let keys = vec![Value::Column(Cow::Borrowed(&k))];
        let names = ["id".to_owned(), "name".to_owned()];
        let debezium = RowEncoder::DebeziumJson(DebeziumJsonEncoder::new(&names, &names[..1]));
        let json = RowEncoder::Json(JsonEncoder::new(&names, &names[..1]));
        let rows =
            |delete, selection| EmittedRows { columns: &columns, keys: &keys, selection, from_input: false, delete };
        let mut events = EncodedRows::default();
        let mut plain = EncodedRows::default();
        for encoder_out in [(&debezium, &mut events), (&json, &mut plain)] {
            let (encoder, out) = encoder_out;
            encoder.encode(&rows(false, Selection::All(2)), out);
            encoder.encode(&rows(true, Selection::Rows(&[0])), out);
        }
        let text = |i| String::from_utf8(events.value(i).to_vec()).unwrap();
        assert_eq!(text(0), r#"{"before":null,"after":{"id":1,"name":"a\"b"},"op":"u"}"#);
        assert_eq!(text(2), r#"{"before":{"id":1},"after":null,"op":"d"}"#);
        assert!((0..3).all(|i| !events.is_tombstone(i)), "a Debezium delete is an event, not a tombstone");
        assert_eq!(events.key(2), Some(&br#"{"id":1}"#[..]));
        assert!(!plain.is_tombstone(1) && plain.is_tombstone(2));
        assert_eq!(plain.value(2), br#"{"__deleted":true,"id":1}"#, "where there are no tombstones");
        // Sluice's debezium-json source reads the events back: 1 deleted, 2 kept.
        let source = SourceSpec::table(
            "t",
            &[
                ("id", ColumnType::Bigint, true),
                ("name", ColumnType::String, false),
                ("__deleted", ColumnType::Boolean, false),
            ],
        );
        let plan = sluice_sql::plan_query("SELECT id, name, __deleted FROM t", &[source]).unwrap();
        let mut decoder = DebeziumDecoder::new(&plan);
        let mut batch = decoder.new_batch(3);
        for i in 0..3 {
            decoder.decode_record(events.value(i), &RecordMeta::default(), &mut batch).unwrap();
        }
        let read: Vec<Vec<Scalar>> = (0..3).map(|r| batch.columns.iter().map(|c| c.scalar(r)).collect()).collect();
        let s = |x: &str| Scalar::String(x.into());
        assert_eq!(
            read,
            [
                vec![Scalar::Bigint(1), s("a\"b"), Scalar::Boolean(false)],
                vec![Scalar::Bigint(2), Scalar::Null, Scalar::Boolean(false)],
                vec![Scalar::Bigint(1), Scalar::Null, Scalar::Boolean(true)],
            ]
        );
    }
}
