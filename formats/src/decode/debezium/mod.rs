//! Debezium change events (JSON) → the rows of a table source.
//!
//! Debezium writes one event per change of a database row: `op` is `c`
//! (insert), `r` (snapshot read), `u` (update) or `d` (delete), `after`
//! the row as it is now, `before` as it was (for a delete, at least its
//! primary key), `source` where it came from (`db`, `table`, `ts_ms`, …)
//! and `ts_ms` when Debezium processed it; with the JSON converter's
//! schemas on, all of it is under `payload`, beside a `schema`. A table
//! source reads an insert, a snapshot read or an update as the row's new
//! version (an upsert) and a delete as the row's deletion — as Flink's
//! `debezium-json` format and ksqlDB over a Debezium topic do.
//!
//! The envelope is not parsed into a tree: its parts are located as raw
//! JSON, and the row's object is handed to the JSON decoder as it is,
//! with the deletion marker (and, when the source declares them, the
//! envelope's `op`, `source` and `ts_ms`) spliced in before its closing
//! brace, in a buffer reused from record to record.

mod avro;

pub use avro::DebeziumAvroDecoder;

use serde::Deserialize;
use serde_json::value::RawValue;

use sluice_plan::{Batch, ColumnOrigin, Plan};

use super::cells::DELETED;
use super::columns::SourceColumns;
use super::encoding::Encoding;
use super::{DecodeError, JsonDecoder, RecordMeta};

#[derive(Debug, Clone)]
pub struct DebeziumDecoder {
    pub(super) rows: JsonDecoder,
    /// Which envelope fields the source's columns read.
    op: bool,
    source: bool,
    ts_ms: bool,
    buf: Vec<u8>,
}

/// A change event's parts, as raw JSON.
#[derive(Deserialize)]
struct Envelope<'a> {
    #[serde(borrow, default)]
    before: Option<&'a RawValue>,
    #[serde(borrow, default)]
    after: Option<&'a RawValue>,
    #[serde(borrow, default)]
    op: Option<&'a RawValue>,
    #[serde(borrow, default)]
    source: Option<&'a RawValue>,
    #[serde(borrow, default)]
    ts_ms: Option<&'a RawValue>,
    /// With the JSON converter's `schemas.enable`: the event itself.
    #[serde(borrow, default)]
    payload: Option<&'a RawValue>,
}

impl DebeziumDecoder {
    pub fn new(plan: &Plan) -> Self {
        let reads = |name: &str| {
            (0..plan.source.schema.fields.len()).any(
                |i| matches!(plan.source.origin(i), ColumnOrigin::Field(p) if p.first().is_some_and(|f| f == name)),
            )
        };
        Self {
            rows: JsonDecoder::new(plan),
            op: reads("op"),
            source: reads("source"),
            ts_ms: reads("ts_ms"),
            buf: Vec::new(),
        }
    }

    pub fn new_batch(&self, capacity: usize) -> Batch {
        self.rows.new_batch(capacity)
    }

    /// Appends the change `payload` describes as one row of `batch` (a new
    /// version, or a deletion), or explains why it cannot.
    pub fn decode_record(
        &mut self,
        payload: &[u8],
        meta: &RecordMeta<'_>,
        batch: &mut Batch,
    ) -> Result<(), DecodeError> {
        self.row(payload)?;
        let buf = std::mem::take(&mut self.buf);
        let decoded = self.rows.decode_record(&buf, meta, batch);
        self.buf = buf;
        decoded
    }

    /// Builds in `buf` the row the change event stands for.
    fn row(&mut self, payload: &[u8]) -> Result<(), DecodeError> {
        let bad = |why: String| DecodeError(format!("debezium: {why}"));
        let mut event: Envelope<'_> = serde_json::from_slice(payload)
            .map_err(|e| bad(format!("not a Debezium change event: {}", super::json::describe(&e))))?;
        if let Some(inner) = event.payload
            && event.op.is_none()
        {
            event = serde_json::from_str(inner.get())
                .map_err(|e| bad(format!("`payload` is not a change event: {}", super::json::describe(&e))))?;
        }
        let op = event.op.map(RawValue::get).ok_or_else(|| bad("no `op` (not a Debezium change event)".into()))?;
        let (image, deleted, which) = match op {
            r#""c""# | r#""r""# | r#""u""# => (event.after, false, "after"),
            r#""d""# => (event.before, true, "before"),
            r#""t""# => return Err(bad("a truncate event: not supported (it would delete every row)".into())),
            other => return Err(bad(format!("unknown op {other}"))),
        };
        let image = image.map(RawValue::get).map(str::trim).filter(|i| *i != "null");
        let Some(object) = image.filter(|i| i.starts_with('{') && i.ends_with('}')) else {
            return Err(bad(format!(
                "op {op} without the row's `{which}` object{}",
                if deleted { " (a delete needs at least the primary key in `before`)" } else { "" }
            )));
        };
        let body = object[1..object.len() - 1].trim();
        let buf = &mut self.buf;
        buf.clear();
        buf.push(b'{');
        buf.extend_from_slice(body.as_bytes());
        let mut field = |name: &str, value: &str| {
            if buf.len() > 1 {
                buf.push(b',');
            }
            buf.push(b'"');
            buf.extend_from_slice(name.as_bytes());
            buf.extend_from_slice(b"\":");
            buf.extend_from_slice(value.as_bytes());
        };
        field(DELETED, if deleted { "true" } else { "false" });
        if self.op {
            field("op", op);
        }
        if self.source
            && let Some(source) = event.source
        {
            field("source", source.get());
        }
        if self.ts_ms
            && let Some(ts) = event.ts_ms
        {
            field("ts_ms", ts.get());
        }
        buf.push(b'}');
        Ok(())
    }
}

impl Encoding for DebeziumDecoder {
    fn columns(&self) -> &SourceColumns {
        &self.rows.columns
    }

    fn columns_mut(&mut self) -> &mut SourceColumns {
        &mut self.rows.columns
    }

    fn decode(&mut self, payload: &[u8], batch: &mut Batch) -> Result<(), DecodeError> {
        DebeziumDecoder::decode_record(self, payload, &RecordMeta::default(), batch)
    }

    fn decode_record(&mut self, payload: &[u8], meta: &RecordMeta<'_>, batch: &mut Batch) -> Result<(), DecodeError> {
        DebeziumDecoder::decode_record(self, payload, meta, batch)
    }
}

#[cfg(test)]
pub(in crate::decode) mod tests {
    use sluice_crds::{ColumnType, SourceSpec};
    use sluice_plan::{Batch, Scalar};

    use super::DebeziumDecoder;
    use crate::decode::RecordMeta;

    /// A table source's columns as its join side reads them (with the
    /// deletion marker), and the envelope's `op`, `source.table`, `ts_ms`:
    /// the plan both Debezium decoders' tests read with.
    pub(in crate::decode) fn customers_plan() -> sluice_plan::Plan {
        let source = SourceSpec::table(
            "customers",
            &[
                ("id", ColumnType::Bigint, true),
                ("name", ColumnType::String, false),
                ("__deleted", ColumnType::Boolean, false),
                ("op", ColumnType::String, false),
                ("source.table", ColumnType::String, false),
                ("ts_ms", ColumnType::Timestamp, false),
            ],
        );
        let sql = r#"SELECT id, name, __deleted, op, "source.table", ts_ms FROM customers"#;
        sluice_sql::plan_query(sql, &[source]).unwrap()
    }

    fn decoder() -> DebeziumDecoder {
        DebeziumDecoder::new(&customers_plan())
    }

    fn row(batch: &Batch, r: usize) -> Vec<Scalar> {
        batch.columns.iter().map(|c| c.scalar(r)).collect()
    }

    const SOURCE: &str = r#"{"version":"2.7.0","connector":"postgresql","db":"shop","schema":"public","table":"customers","ts_ms":1700000000000}"#;

    #[test]
    fn inserts_snapshot_reads_updates_and_deletes_become_versions_and_deletions() {
        let mut d = decoder();
        let mut batch = d.new_batch(4);
        let meta = RecordMeta::default();
        let events = [
            format!(r#"{{"before":null,"after":{{"id":1,"name":"Ann"}},"source":{SOURCE},"op":"c","ts_ms":1000}}"#),
            format!(r#"{{"before":null,"after":{{"id":2,"name":"Bob"}},"source":{SOURCE},"op":"r","ts_ms":1001}}"#),
            format!(
                r#"{{"before":{{"id":1,"name":"Ann"}},"after":{{"id":1,"name":"Anne"}},"source":{SOURCE},"op":"u","ts_ms":5000}}"#
            ),
            // schemas.enable=true: the event under `payload`; a delete's
            // `before` holds the key only (REPLICA IDENTITY DEFAULT).
            format!(
                r#"{{"schema":{{"type":"struct"}},"payload":{{"before":{{"id":2,"name":null}},"after":null,"source":{SOURCE},"op":"d","ts_ms":7000}}}}"#
            ),
        ];
        for e in &events {
            d.decode_record(e.as_bytes(), &meta, &mut batch).unwrap_or_else(|err| panic!("{e}: {err}"));
        }
        let s = |x: &str| Scalar::String(x.into());
        assert_eq!(
            row(&batch, 0),
            [Scalar::Bigint(1), s("Ann"), Scalar::Boolean(false), s("c"), s("customers"), Scalar::Timestamp(1000)]
        );
        assert_eq!(row(&batch, 1)[3], s("r"));
        assert_eq!(row(&batch, 2)[..3], [Scalar::Bigint(1), s("Anne"), Scalar::Boolean(false)]);
        assert_eq!(row(&batch, 3)[..4], [Scalar::Bigint(2), Scalar::Null, Scalar::Boolean(true), s("d")]);
    }

    /// A row with a JSON column Debezium sends as an object and an array
    /// column (PostgreSQL's `text[]`, `jsonb` decoded by the connector):
    /// nested columns of the change's row, NULL in a delete's key-only
    /// `before`.
    #[test]
    fn nested_values_in_a_changed_row_fill_nested_columns() {
        let t = |s: &str| ColumnType::parse(s).unwrap();
        let source = SourceSpec::table(
            "orders",
            &[
                ("id", ColumnType::Bigint, true),
                ("tags", t("array<string>"), false),
                ("address", t("row<city string, zip string>"), false),
                ("__deleted", ColumnType::Boolean, false),
            ],
        );
        let plan = sluice_sql::plan_query("SELECT id, tags, address, __deleted FROM orders", &[source]).unwrap();
        let mut d = DebeziumDecoder::new(&plan);
        let mut batch = d.new_batch(2);
        let meta = RecordMeta::default();
        let insert = format!(
            r#"{{"before":null,"after":{{"id":1,"tags":["a","b"],"address":{{"city":"Oslo","zip":"0150"}}}},"source":{SOURCE},"op":"c","ts_ms":1}}"#
        );
        let delete = format!(r#"{{"before":{{"id":1}},"after":null,"source":{SOURCE},"op":"d","ts_ms":2}}"#);
        d.decode_record(insert.as_bytes(), &meta, &mut batch).unwrap();
        d.decode_record(delete.as_bytes(), &meta, &mut batch).unwrap();
        let s = |x: &str| Scalar::String(x.into());
        assert_eq!(
            row(&batch, 0),
            [
                Scalar::Bigint(1),
                Scalar::List(vec![s("a"), s("b")]),
                Scalar::Row(vec![s("Oslo"), s("0150")]),
                Scalar::Boolean(false)
            ]
        );
        assert_eq!(row(&batch, 1), [Scalar::Bigint(1), Scalar::Null, Scalar::Null, Scalar::Boolean(true)]);
        let bad =
            format!(r#"{{"before":null,"after":{{"id":2,"tags":["a",3]}},"source":{SOURCE},"op":"c","ts_ms":3}}"#);
        let e = d.decode_record(bad.as_bytes(), &meta, &mut batch).unwrap_err().0;
        assert!(e.contains("tags[2]"), "{e}");
        assert_eq!(batch.len, 2);
    }

    #[test]
    fn what_is_not_a_change_event_is_rejected_with_a_reason_and_leaves_the_batch_as_it_was() {
        let mut d = decoder();
        let mut batch = d.new_batch(4);
        let meta = RecordMeta::default();
        for (event, why) in [
            ("{\"id\":1}", "no `op`"),
            ("[1]", "not a Debezium change event"),
            ("{\"op\":\"c\",\"after\":null}", "without the row's `after` object"),
            ("{\"op\":\"d\",\"before\":null}", "a delete needs at least the primary key"),
            ("{\"op\":\"t\"}", "truncate event"),
            ("{\"op\":\"x\",\"after\":{}}", "unknown op \"x\""),
            ("{\"op\":\"c\",\"after\":{\"name\":\"no key\"}}", "missing required field `id`"),
            ("{\"op\":\"c\",\"after\":{\"id\":\"one\"}}", "`id`"),
            ("{\"op\":\"c\",\"after\":{\"id\":1,\"__deleted\":true}}", "__deleted"),
            ("{\"payload\":7}", "`payload` is not a change event"),
        ] {
            let e = d.decode_record(event.as_bytes(), &meta, &mut batch).unwrap_err();
            assert!(e.0.contains(why), "{event}: {e}");
            assert_eq!(batch.len, 0);
        }
    }

    /// A `balance decimal(10,2)` table, as both Debezium decoders' decimal
    /// tests read it.
    pub(in crate::decode) fn accounts_plan() -> sluice_plan::Plan {
        let decimal = ColumnType::Decimal { precision: 10, scale: 2 };
        let source = SourceSpec::table("accounts", &[("id", ColumnType::Bigint, true), ("balance", decimal, false)]);
        sluice_sql::plan_query("SELECT id, balance FROM accounts", &[source]).unwrap()
    }

    /// `decimal.handling.mode: string` (exact) and `double` both read into
    /// a decimal column, rounded to its scale.
    #[test]
    fn decimals_read_from_string_and_double_modes() {
        let mut d = DebeziumDecoder::new(&accounts_plan());
        let mut batch = d.new_batch(2);
        for balance in [r#""1234.50""#, "1234.505"] {
            let e = format!(r#"{{"before":null,"after":{{"id":1,"balance":{balance}}},"op":"c","ts_ms":1}}"#);
            d.decode_record(e.as_bytes(), &RecordMeta::default(), &mut batch).unwrap();
        }
        assert_eq!(row(&batch, 0), [Scalar::Bigint(1), Scalar::Decimal(123_450, 2)]);
        assert_eq!(row(&batch, 1), [Scalar::Bigint(1), Scalar::Decimal(123_451, 2)]);
    }
}
