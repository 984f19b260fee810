//! Record keys in a declared `keyFormat` → the `metadata: key` columns.
//!
//! The key is decoded by the value decoder of its format (JSON, Avro or
//! Protobuf, with the same registry lookups and schema resolution) over a
//! plan of the key columns alone, each reading the key's field of its own
//! name; the value decoder then copies each cell of that one-row batch
//! into its column. A key that is not a record — an Avro `string` or
//! `long`, a JSON scalar — is read whole by the one key column there is.
//! A key that cannot be read makes the record a dead letter, the reason
//! saying it was the key.

use sluice_crds::{KeyFormat, RecordMetadata};
use sluice_plan::{Batch, Column, ColumnOrigin, Plan, Schema};

use super::error::DecodeError;
use super::key_cells::KeyCells;
use super::{AvroDecoder, ProtobufDecoder, RowDecoder};

#[derive(Debug, Clone)]
pub struct KeyDecoder {
    decoder: Box<RowDecoder>,
    /// The last key decoded: one row.
    batch: Batch,
    /// The source column each key column fills.
    targets: Vec<usize>,
    state: State,
    /// The key is JSON: a scalar key (not an object) is read whole.
    json: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// The key decoded into `batch`.
    Row,
    /// No key, or a JSON scalar key: the column reads it as an unset
    /// `keyFormat` would.
    Bytes,
}

impl KeyDecoder {
    /// The key decoder of `plan`'s source in `format`, each key column
    /// reading the key field its name names after `prefix`; `None` when no
    /// column reads the key.
    pub fn new(plan: &Plan, format: KeyFormat, prefix: &str) -> Option<Self> {
        let source = &plan.source;
        let mut key = plan.clone();
        key.source.schema = Schema::default();
        key.source.required.clear();
        key.source.origins.clear();
        key.source.event_time = None;
        key.used_columns.clear();
        let mut targets = Vec::new();
        for (i, field) in source.schema.fields.iter().enumerate() {
            if let ColumnOrigin::Metadata { what: RecordMetadata::Key, .. } = source.origin(i) {
                key.source.schema.push(field.name.clone(), field.data_type);
                key.source.required.push(source.required[i]);
                let name = field.name.strip_prefix(prefix).filter(|n| !n.is_empty()).unwrap_or(&field.name);
                key.source.origins.push(ColumnOrigin::field(name));
                key.used_columns.push(plan.used_columns.get(i).copied().unwrap_or(true));
                targets.push(i);
            }
        }
        if targets.is_empty() {
            return None;
        }
        let decoder = match format {
            KeyFormat::Json => RowDecoder::json(&key),
            KeyFormat::Avro => {
                let mut d = AvroDecoder::new(&key);
                d.whole_primitive = targets.len() == 1;
                RowDecoder::encoded(d)
            }
            KeyFormat::Protobuf => RowDecoder::encoded(ProtobufDecoder::new(&key)),
        };
        let json = format == KeyFormat::Json;
        Some(Self { batch: decoder.new_batch(1), decoder: Box::new(decoder), targets, state: State::Bytes, json })
    }
}

impl KeyCells for KeyDecoder {
    fn decode(&mut self, key: Option<&[u8]>) -> Result<(), DecodeError> {
        self.batch.clear();
        self.state = State::Bytes;
        let Some(key) = key else { return Ok(()) };
        if self.json && self.targets.len() == 1 && key.iter().find(|b| !b.is_ascii_whitespace()) != Some(&b'{') {
            return Ok(());
        }
        self.decoder.decode(key, &mut self.batch).map_err(|e| DecodeError(format!("the record's key: {}", e.0)))?;
        self.state = State::Row;
        Ok(())
    }

    fn cell(&self, col: usize) -> Option<&Column> {
        if self.state != State::Row {
            return None;
        }
        let j = self.targets.iter().position(|&t| t == col)?;
        self.batch.columns.get(j)
    }

    fn needs_schema(&self, key: &[u8]) -> Option<u32> {
        self.decoder.needs_schema(key)
    }

    /// See [`RowDecoder::add_schema`].
    fn add_schema(&mut self, id: u32, schema: Result<(&str, &str), String>, references: &[(String, String)]) {
        self.decoder.add_schema_with(id, schema, references);
    }

    fn forget_unknown(&mut self) {
        self.decoder.forget_unknown();
    }

    fn cache_bytes(&mut self) -> usize {
        self.decoder.cache_bytes()
    }

    fn boxed_clone(&self) -> Box<dyn KeyCells> {
        Box::new(self.clone())
    }
}

impl RowDecoder {
    /// Reads record keys in `format` (a source's `keyFormat`, key fields
    /// named after its `keyFieldsPrefix`).
    pub fn read_keys(&mut self, plan: &Plan, format: KeyFormat, prefix: &str) {
        if let Some(columns) = self.columns_mut() {
            columns.key = KeyDecoder::new(plan, format, prefix).map(|k| Box::new(k) as Box<dyn KeyCells>);
        }
    }

    /// The registry id of the schema `key` names, when its decoder does
    /// not have it yet (a `keyFormat` of avro or protobuf).
    pub fn key_needs_schema(&mut self, key: &[u8]) -> Option<u32> {
        self.columns_mut()?.key.as_deref()?.needs_schema(key)
    }

    /// Hands over what the registry said of key schema `id`.
    pub fn add_key_schema(&mut self, id: u32, schema: Result<(&str, &str), String>) {
        self.add_key_schema_with(id, schema, &[]);
    }

    /// [`RowDecoder::add_key_schema`] with the schema's references.
    pub fn add_key_schema_with(
        &mut self,
        id: u32,
        schema: Result<(&str, &str), String>,
        references: &[(String, String)],
    ) {
        if let Some(key) = self.columns_mut().and_then(|c| c.key.as_deref_mut()) {
            key.add_schema(id, schema, references);
        }
    }
}

#[cfg(test)]
mod tests {
    use sluice_crds::{ColumnSpec, ColumnType, KeyFormat, RecordMetadata, SourceSpec};
    use sluice_plan::{Batch, Scalar};

    use crate::decode::avro::tests::Datum;
    use crate::decode::{KeyDecoder, RecordMeta, RowDecoder};

    /// A JSON-valued source whose key columns `id` (required when
    /// `required`) and `region` read the key in `format`.
    fn decoder(format: KeyFormat, keys: &[(&str, ColumnType)], required: bool) -> RowDecoder {
        let mut source = SourceSpec::table("t", &[("amount", ColumnType::Bigint, false)]);
        for (i, (name, ty)) in keys.iter().enumerate() {
            source.schema.columns.push(ColumnSpec {
                metadata: Some(RecordMetadata::Key),
                ..ColumnSpec::field(*name, ty.clone(), required && i == 0)
            });
        }
        let names: Vec<&str> = std::iter::once("amount").chain(keys.iter().map(|k| k.0)).collect();
        let plan = sluice_sql::plan_query(&format!("SELECT {} FROM t", names.join(", ")), &[source]).unwrap();
        let mut d = RowDecoder::json(&plan);
        d.read_keys(&plan, format, "key_");
        d
    }

    fn decode(d: &mut RowDecoder, key: Option<&[u8]>, batch: &mut Batch) -> Result<Vec<Scalar>, String> {
        let meta = RecordMeta { key, ..RecordMeta::default() };
        d.decode_record(br#"{"amount":7}"#, &meta, batch).map_err(|e| e.0)?;
        Ok(batch.columns.iter().map(|c| c.scalar(batch.len - 1)).collect())
    }

    #[test]
    fn json_keys_are_read_by_field_or_whole_and_a_bad_key_is_a_dead_letter() {
        // `key_region` reads the key's `region` (the prefix is `key_`).
        let two = [("id", ColumnType::Bigint), ("key_region", ColumnType::String)];
        let mut d = decoder(KeyFormat::Json, &two, false);
        let mut batch = d.new_batch(4);
        let got = decode(&mut d, Some(br#"{"region":"eu","id":5,"other":[1]}"#), &mut batch).unwrap();
        assert_eq!(got, [Scalar::Bigint(7), Scalar::Bigint(5), Scalar::String("eu".into())]);
        let got = decode(&mut d, None, &mut batch).unwrap();
        assert_eq!(got, [Scalar::Bigint(7), Scalar::Null, Scalar::Null], "no key: NULLs");
        let e = decode(&mut d, Some(br#"{"id":"five"}"#), &mut batch).unwrap_err();
        assert!(e.contains("the record's key") && e.contains("`id`"), "{e}");
        assert_eq!(batch.len, 2, "the bad record left nothing");
        assert!(batch.columns.iter().all(|c| c.len() == 2));

        let mut d = decoder(KeyFormat::Json, &two[..1], true);
        let mut batch = d.new_batch(4);
        assert_eq!(decode(&mut d, Some(b" 42"), &mut batch).unwrap(), [Scalar::Bigint(7), Scalar::Bigint(42)]);
        assert_eq!(decode(&mut d, Some(br#"{"id":43}"#), &mut batch).unwrap()[1], Scalar::Bigint(43));
        let e = decode(&mut d, None, &mut batch).unwrap_err();
        assert!(e.contains("required column `id`") && e.contains("no key"), "{e}");
    }

    #[test]
    fn avro_keys_name_their_schema_and_a_primitive_key_is_read_whole() {
        let mut d = decoder(KeyFormat::Avro, &[("id", ColumnType::Bigint), ("region", ColumnType::String)], false);
        let mut batch = d.new_batch(4);
        let key = Datum::framed(3).long(9).string("us").0;
        assert_eq!(d.key_needs_schema(&key), Some(3));
        let schema = r#"{"type":"record","name":"Key","fields":[{"name":"id","type":"long"},{"name":"region","type":"string"}]}"#;
        d.add_key_schema(3, Ok(("AVRO", schema)));
        assert_eq!(d.key_needs_schema(&key), None);
        let got = decode(&mut d, Some(&key), &mut batch).unwrap();
        assert_eq!(got, [Scalar::Bigint(7), Scalar::Bigint(9), Scalar::String("us".into())]);
        let e = decode(&mut d, Some(&key[..6]), &mut batch).unwrap_err();
        assert!(e.starts_with("the record's key: avro:"), "{e}");
        d.add_key_schema(4, Ok(("PROTOBUF", "syntax = \"proto3\";")));
        let e = decode(&mut d, Some(&Datum::framed(4).long(1).0), &mut batch).unwrap_err();
        assert!(e.contains("PROTOBUF schema"), "{e}");

        let mut d = decoder(KeyFormat::Avro, &[("symbol", ColumnType::String)], false);
        let mut batch = d.new_batch(4);
        d.add_key_schema(5, Ok(("AVRO", r#""string""#)));
        let got = decode(&mut d, Some(&Datum::framed(5).string("AAPL").0), &mut batch).unwrap();
        assert_eq!(got, [Scalar::Bigint(7), Scalar::String("AAPL".into())], "a string key, whole");
        assert!(
            KeyDecoder::new(
                &sluice_sql::plan_query(
                    "SELECT x FROM t",
                    &[SourceSpec::table("t", &[("x", ColumnType::Bigint, false)])]
                )
                .unwrap(),
                KeyFormat::Json,
                ""
            )
            .is_none()
        );
    }
}
