//! Kafka tombstones of a table source, as rows.
//!
//! In a compacted topic a record with a key and no value (a tombstone)
//! deletes the row with that key. A table source's rows are decoded from
//! record values, so a tombstone becomes the value that says the same:
//! its key's columns, `"__deleted": true`, and — for an event-time join,
//! which files the deletion at a time — the record's timestamp as the
//! event time (a tombstone carries no other). Tombstones are rare next to
//! upserts, so building one is allowed to allocate.

use serde_json::{Map, Value};
use sluice_crds::{ColumnType, SourceSpec};

/// How one table source's tombstones are read.
#[derive(Debug, Clone)]
pub struct Tombstones {
    key: Vec<(String, ColumnType)>,
    event_time: Option<String>,
    buf: Vec<u8>,
}

impl Tombstones {
    /// `None` unless the source is a table.
    pub fn of(source: &SourceSpec) -> Option<Self> {
        let table = source.table.as_ref()?;
        let key = table
            .primary_key
            .iter()
            .filter_map(|k| source.schema.columns.iter().find(|c| &c.name == k))
            .map(|c| (c.name.clone(), c.type_))
            .collect();
        Some(Self { key, event_time: source.event_time.as_ref().map(|e| e.column.clone()), buf: Vec::new() })
    }

    /// The value a tombstone with `key`, written at `timestamp_ms`, stands
    /// for; or why the key names no row.
    pub fn value(&mut self, key: Option<&[u8]>, timestamp_ms: i64) -> Result<&[u8], String> {
        let names = || self.key.iter().map(|(n, _)| format!("`{n}`")).collect::<Vec<_>>().join(", ");
        let Some(key) = key.filter(|k| !k.is_empty()) else {
            return Err(format!(
                "a record without a value deletes the row of its key, but it has no key (the table's primary key is {})",
                names()
            ));
        };
        let mut row = match (serde_json::from_slice::<Value>(key), self.key.as_slice()) {
            (Ok(Value::Object(fields)), _) => fields,
            (parsed, [(name, type_)]) => {
                let text = std::str::from_utf8(key).map_err(|_| "the key of a tombstone is not UTF-8".to_owned())?;
                let value = match (parsed, type_) {
                    // A JSON scalar key (`42`, `"abc"`) is the value itself.
                    (Ok(v @ (Value::Number(_) | Value::String(_) | Value::Bool(_))), _) => v,
                    // Otherwise the key's bytes are the value's text.
                    (_, _) => Value::String(text.to_owned()),
                };
                let mut fields = Map::new();
                fields.insert(name.clone(), value);
                fields
            }
            _ => {
                return Err(format!(
                    "the key of a tombstone must be a JSON object holding the table's primary key ({})",
                    names()
                ));
            }
        };
        row.insert("__deleted".into(), Value::Bool(true));
        if let Some(column) = &self.event_time {
            row.entry(column.clone()).or_insert(Value::from(timestamp_ms));
        }
        self.buf.clear();
        serde_json::to_writer(&mut self.buf, &row).map_err(|e| format!("cannot build the tombstone's row: {e}"))?;
        Ok(&self.buf)
    }
}

#[cfg(test)]
mod tests {
    use sluice_crds::{ColumnType, EventTimeSpec, SourceSpec, TableSpec};

    use super::Tombstones;

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
                ],
            )
        }
    }

    fn value(t: &mut Tombstones, key: &[u8]) -> Result<serde_json::Value, String> {
        t.value(Some(key), 1_700).map(|v| serde_json::from_slice(v).unwrap())
    }

    #[test]
    fn a_tombstone_is_its_key_marked_deleted_at_its_timestamp() {
        let mut one = Tombstones::of(&table(&["id"])).unwrap();
        let expected = serde_json::json!({"id": 42, "__deleted": true, "ts": 1_700});
        assert_eq!(value(&mut one, b"42").unwrap(), expected, "a bare key");
        assert_eq!(value(&mut one, br#"{"id":42}"#).unwrap(), expected, "a JSON object key");
        let mut two = Tombstones::of(&table(&["id", "region"])).unwrap();
        assert_eq!(
            value(&mut two, br#"{"id":1,"region":"eu","ts":5}"#).unwrap(),
            serde_json::json!({"id": 1, "region": "eu", "__deleted": true, "ts": 5}),
            "a time in the key is kept"
        );
        let err = value(&mut two, b"1").unwrap_err();
        assert!(err.contains("JSON object") && err.contains("`id`, `region`"), "{err}");
        let err = one.value(None, 0).unwrap_err();
        assert!(err.contains("has no key"), "{err}");
        assert!(Tombstones::of(&SourceSpec::table("s", &[])).is_none(), "a stream has no tombstones");
    }
}
