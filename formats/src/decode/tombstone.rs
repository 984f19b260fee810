//! Kafka tombstones of a table source → deletions.
//!
//! In a compacted topic a record with a key and no value (a tombstone)
//! deletes the row with that key. There is no value to hand the source's
//! decoder — whatever its format, Avro and Protobuf included — so the
//! deletion is built from the key alone, by a decoder of its own: the
//! primary key's columns from the key, `__deleted` true, and, for an
//! event-time join that files the deletion at a time, the record's
//! timestamp as the event time (a tombstone carries no other). The row
//! goes into the same batch as the source's decoded records (the layout
//! is the plan's either way).
//!
//! The key is read in the source's `keyFormat`: Avro or Protobuf keys by
//! the key decoder (with the same registry lookups), each primary-key
//! column reading the key field of its name (a primitive key whole, when
//! the key is one column); JSON or undeclared keys as a JSON object of the
//! key's fields, a JSON scalar, or the key's text for a one-column key.
//! Tombstones are rare next to upserts, so building one may allocate.

use serde_json::{Map, Value};
use sluice_crds::{ColumnType, KeyFormat, RecordMetadata, SourceSpec};
use sluice_plan::{Batch, ColumnOrigin, Plan};

use super::RowDecoder;
use super::error::DecodeError;
use super::record::RecordMeta;

/// How one table source's tombstones become deletions.
#[derive(Debug, Clone)]
pub struct TombstoneDecoder {
    /// A JSON decoder of the plan, reading the primary key from the record
    /// key when the key is Avro or Protobuf.
    rows: RowDecoder,
    /// The primary key's columns, read from a JSON or text key (empty when
    /// the key decoder reads them).
    key: Vec<(String, ColumnType)>,
    /// The primary key's names, for messages.
    names: String,
    event_time: Option<String>,
    buf: Vec<u8>,
}

impl TombstoneDecoder {
    /// `None` unless `source` (which `plan` reads) is a table.
    pub fn new(plan: &Plan, source: &SourceSpec) -> Option<Self> {
        let table = source.table.as_ref()?;
        let primary: Vec<(String, ColumnType)> = table
            .primary_key
            .iter()
            .filter_map(|k| source.schema.columns.iter().find(|c| &c.name == k))
            .map(|c| (c.name.clone(), c.type_.clone()))
            .collect();
        let names = primary.iter().map(|(n, _)| format!("`{n}`")).collect::<Vec<_>>().join(", ");
        let prefix = source.key_fields_prefix.as_deref().unwrap_or_default();
        let (rows, key) = match source.key_format {
            Some(format @ (KeyFormat::Avro | KeyFormat::Protobuf)) => {
                // The primary key's columns read the key, as `metadata:
                // key` columns do, whatever they are in the value.
                let mut keyed = plan.clone();
                let fields = &plan.source.schema.fields;
                keyed.source.origins = (0..fields.len())
                    .map(|i| match plan.source.origin(i) {
                        ColumnOrigin::Field(_) if primary.iter().any(|(n, _)| *n == fields[i].name) => {
                            ColumnOrigin::Metadata { what: RecordMetadata::Key, header: None }
                        }
                        origin => origin,
                    })
                    .collect();
                let mut rows = RowDecoder::json(&keyed);
                rows.read_keys(&keyed, format, prefix);
                (rows, Vec::new())
            }
            format => {
                let mut rows = RowDecoder::json(plan);
                if let Some(format) = format {
                    rows.read_keys(plan, format, prefix);
                }
                (rows, primary)
            }
        };
        Some(Self {
            rows,
            key,
            names,
            event_time: source.event_time.as_ref().map(|e| e.column.clone()),
            buf: Vec::new(),
        })
    }

    /// The registry id of the schema `key` names, when the key decoder
    /// does not have it yet.
    pub fn key_needs_schema(&mut self, key: &[u8]) -> Option<u32> {
        self.rows.key_needs_schema(key)
    }

    /// Hands over what the registry said of key schema `id`.
    pub fn add_key_schema(&mut self, id: u32, schema: Result<(&str, &str), String>) {
        self.rows.add_key_schema(id, schema);
    }

    /// [`TombstoneDecoder::add_key_schema`] with the schema's references.
    pub fn add_key_schema_with(
        &mut self,
        id: u32,
        schema: Result<(&str, &str), String>,
        references: &[(String, String)],
    ) {
        self.rows.add_key_schema_with(id, schema, references);
    }

    /// See [`RowDecoder::cache_bytes`].
    pub fn cache_bytes(&mut self) -> usize {
        self.rows.cache_bytes()
    }

    /// See [`RowDecoder::forget_unknown`].
    pub fn forget_unknown(&mut self) {
        self.rows.forget_unknown();
    }

    /// Appends the deletion a tombstone with `meta`'s key and timestamp
    /// stands for to `batch`, or says why its key names no row.
    pub fn decode(&mut self, meta: &RecordMeta<'_>, batch: &mut Batch) -> Result<(), DecodeError> {
        let key = meta.key.filter(|k| !k.is_empty()).ok_or_else(|| {
            DecodeError(format!(
                "a record without a value deletes the row of its key, but it has no key (the table's primary key \
                 is {})",
                self.names
            ))
        })?;
        let mut row = self.key_fields(key)?;
        row.insert(super::cells::DELETED.into(), Value::Bool(true));
        if let Some(column) = &self.event_time {
            row.entry(column.clone()).or_insert(Value::from(meta.timestamp_ms.unwrap_or_default()));
        }
        self.buf.clear();
        serde_json::to_writer(&mut self.buf, &row)
            .map_err(|e| DecodeError(format!("cannot build the tombstone's row: {e}")))?;
        self.rows.decode_record(&self.buf, meta, batch)
    }

    /// The primary key's fields of a JSON or text key (none when the key
    /// decoder reads the key).
    fn key_fields(&self, key: &[u8]) -> Result<Map<String, Value>, DecodeError> {
        if self.key.is_empty() {
            return Ok(Map::new());
        }
        match (serde_json::from_slice::<Value>(key), self.key.as_slice()) {
            (Ok(Value::Object(fields)), _) => Ok(fields),
            (parsed, [(name, _)]) => {
                let text = std::str::from_utf8(key)
                    .map_err(|_| DecodeError("the key of a tombstone is not UTF-8 (declare its keyFormat)".into()))?;
                let value = match parsed {
                    // A JSON scalar key (`42`, `"abc"`) is the value itself.
                    Ok(v @ (Value::Number(_) | Value::String(_) | Value::Bool(_))) => v,
                    // Otherwise the key's bytes are the value's text.
                    _ => Value::String(text.to_owned()),
                };
                let mut fields = Map::new();
                fields.insert(name.clone(), value);
                Ok(fields)
            }
            _ => Err(DecodeError(format!(
                "the key of a tombstone must be a JSON object holding the table's primary key ({})",
                self.names
            ))),
        }
    }
}

#[cfg(test)]
mod tests {
    use sluice_crds::{ColumnType, EventTimeSpec, KeyFormat, SourceSpec, TableSpec};
    use sluice_plan::{Batch, Scalar};

    use super::TombstoneDecoder;
    use crate::decode::RecordMeta;
    use crate::decode::avro::tests::Datum;

    fn table(key: &[&str]) -> SourceSpec {
        SourceSpec {
            table: Some(TableSpec { primary_key: key.iter().map(|k| (*k).to_owned()).collect() }),
            event_time: Some(EventTimeSpec { column: "ts".into(), watermark_delay_millis: 0 }),
            ..SourceSpec::table(
                "t",
                &[
                    ("id", ColumnType::Bigint, true),
                    ("region", ColumnType::String, true),
                    ("ts", ColumnType::Timestamp, true),
                    ("v", ColumnType::Bigint, false),
                ],
            )
        }
    }

    /// The decoder of `source`'s tombstones, over a plan reading every
    /// column and whether a row is a deletion.
    fn decoder(source: &SourceSpec) -> (TombstoneDecoder, Batch) {
        let on = if source.table.as_ref().unwrap().primary_key.len() == 2 { " AND s.r = t.region" } else { "" };
        let stream = SourceSpec::table("s", &[("k", ColumnType::Bigint, true), ("r", ColumnType::String, true)]);
        let sql = format!("SELECT s.k, t.id, t.region, t.ts, t.v FROM s LEFT JOIN t ON s.k = t.id{on}");
        let flow = sluice_sql::plan_dataflow(&sql, &[stream, source.clone()], 1).unwrap();
        let plan = flow
            .branches
            .iter()
            .map(|b| &b.plan)
            .chain(flow.stages.iter().map(|s| &s.plan))
            .find(|p| p.source.schema.index_of("__deleted").is_some())
            .unwrap()
            .clone();
        let d = TombstoneDecoder::new(&plan, source).unwrap();
        let batch = d.rows.new_batch(4);
        (d, batch)
    }

    /// The last row's (id, region, ts, __deleted), by name.
    fn row(batch: &Batch, d: &TombstoneDecoder) -> Vec<Scalar> {
        let crate::decode::RowDecoder::Encoded(rows) = &d.rows else { unreachable!("tombstones are decoded as JSON") };
        let columns = rows.columns();
        ["id", "region", "ts", "__deleted"]
            .iter()
            .map(|n| {
                let i = columns.names.iter().position(|m| **m == *n.as_bytes()).unwrap();
                batch.columns[i].scalar(batch.len - 1)
            })
            .collect()
    }

    fn meta(key: Option<&[u8]>) -> RecordMeta<'_> {
        RecordMeta { key, timestamp_ms: Some(1_700), ..RecordMeta::default() }
    }

    #[test]
    fn a_json_or_text_key_is_its_row_marked_deleted_at_its_timestamp() {
        let (mut one, mut batch) = decoder(&table(&["id"]));
        let deleted = |id| vec![Scalar::Bigint(id), Scalar::Null, Scalar::Timestamp(1_700), Scalar::Boolean(true)];
        one.decode(&meta(Some(b"42")), &mut batch).unwrap();
        assert_eq!(row(&batch, &one), deleted(42), "a bare key");
        one.decode(&meta(Some(br#"{"id":43}"#)), &mut batch).unwrap();
        assert_eq!(row(&batch, &one), deleted(43), "a JSON object key");
        let (mut two, mut batch) = decoder(&table(&["id", "region"]));
        two.decode(&meta(Some(br#"{"id":1,"region":"eu","ts":5}"#)), &mut batch).unwrap();
        assert_eq!(
            row(&batch, &two),
            [Scalar::Bigint(1), Scalar::String("eu".into()), Scalar::Timestamp(5), Scalar::Boolean(true)],
            "a time in the key is kept"
        );
        let err = two.decode(&meta(Some(b"1")), &mut batch).unwrap_err().0;
        assert!(err.contains("JSON object") && err.contains("`id`, `region`"), "{err}");
        let err = one.decode(&meta(None), &mut batch).unwrap_err().0;
        assert!(err.contains("has no key"), "{err}");
        let stream = SourceSpec::table("s", &[("x", ColumnType::Bigint, false)]);
        let plan = sluice_sql::plan_query("SELECT x FROM s", std::slice::from_ref(&stream)).unwrap();
        assert!(TombstoneDecoder::new(&plan, &stream).is_none(), "a stream has no tombstones");
    }

    /// An Avro key (a record of the primary key, or a primitive for a
    /// one-column key) is read by the key's schema, whatever the value's
    /// format: no value decoder sees the tombstone.
    #[test]
    fn an_avro_key_is_read_with_its_schema() {
        let mut source = table(&["id", "region"]);
        source.key_format = Some(KeyFormat::Avro);
        let (mut d, mut batch) = decoder(&source);
        let key = Datum::framed(3).long(9).string("us").0;
        assert_eq!(d.key_needs_schema(&key), Some(3));
        let schema = r#"{"type":"record","name":"Key","fields":[{"name":"id","type":"long"},{"name":"region","type":"string"}]}"#;
        d.add_key_schema(3, Ok(("AVRO", schema)));
        d.decode(&meta(Some(&key)), &mut batch).unwrap();
        assert_eq!(
            row(&batch, &d),
            [Scalar::Bigint(9), Scalar::String("us".into()), Scalar::Timestamp(1_700), Scalar::Boolean(true)]
        );
        let err = d.decode(&meta(Some(&key[..6])), &mut batch).unwrap_err().0;
        assert!(err.starts_with("the record's key"), "{err}");

        let mut source = table(&["id"]);
        source.key_format = Some(KeyFormat::Avro);
        let (mut d, mut batch) = decoder(&source);
        d.add_key_schema(5, Ok(("AVRO", r#""long""#)));
        d.decode(&meta(Some(&Datum::framed(5).long(77).0)), &mut batch).unwrap();
        assert_eq!(row(&batch, &d)[0], Scalar::Bigint(77), "a primitive key, whole");
        assert_eq!(row(&batch, &d)[3], Scalar::Boolean(true));
    }
}
