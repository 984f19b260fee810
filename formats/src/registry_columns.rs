//! A source's columns derived from its registry subject's schema: Avro's
//! by `sluice_crds::avro_columns_with`, Protobuf's here, where the
//! `.proto` compiler is. The operator and every worker derive them with
//! this one function, so they agree on the columns.
//!
//! A Protobuf message's fields become columns as an Avro record's do: in
//! declaration order, a message field's fields by dotted path
//! (`meta.venue`), a `repeated` field an `array`, a `map` field a `map`,
//! messages inside those `row`s. Every column is nullable (a later version
//! may drop the field). What no column type holds derives no column — a
//! `bytes` field, a map with `bool` keys, a message that contains itself
//! (a tree) — so the rest of the subject is still read; declare the
//! source's columns to read such a field otherwise. Bounded whatever the
//! schema: columns, fields walked, depth and name length as for Avro.

use protox::prost_reflect::{FieldDescriptor, Kind, MessageDescriptor};
use sluice_crds::{
    ColumnSpec, ColumnType, MAX_TYPE_DEPTH, MAX_TYPE_TEXT, REGISTRY_MAX_COLUMN_NAME, REGISTRY_MAX_COLUMNS,
    REGISTRY_MAX_FIELDS_WALKED, SubjectSchema, avro_columns_with,
};

use crate::decode::parse_schema_with;

/// The columns of `found` (an `AVRO` or `PROTOBUF` schema); `message`
/// names a Protobuf file's message (its first by default).
pub fn registry_columns(found: &SubjectSchema, message: Option<&str>) -> Result<Vec<ColumnSpec>, String> {
    match found.kind.as_str() {
        "AVRO" => avro_columns_with(&found.text, &found.references),
        "PROTOBUF" => protobuf_columns(&found.text, &found.references, message),
        other => Err(format!("columns are derived from AVRO and PROTOBUF schemas, not {other}")),
    }
}

/// The columns of message `message` (its full name; the file's first
/// message by default) of Protobuf schema `text`, which imports
/// `references` (`(import name, text)`).
pub fn protobuf_columns(
    text: &str,
    references: &[(String, String)],
    message: Option<&str>,
) -> Result<Vec<ColumnSpec>, String> {
    let pool = parse_schema_with(text, references)?;
    let file = crate::decode::schema_file(&pool).ok_or("an empty schema")?;
    let m = match message {
        Some(name) => pool
            .get_message_by_name(name.trim_start_matches('.'))
            .ok_or_else(|| format!("the schema has no message `{name}`"))?,
        None => file.messages().next().ok_or("the schema's file defines no message")?,
    };
    let mut walk = Walk { columns: Vec::new(), walked: 0, open: vec![m.full_name().to_owned()] };
    walk.message(&m, "")?;
    if walk.columns.is_empty() {
        return Err(format!("message {} has no field a column can hold", m.full_name()));
    }
    Ok(walk.columns)
}

struct Walk {
    columns: Vec<ColumnSpec>,
    walked: usize,
    /// The messages being walked, outermost first: one of them again is a
    /// recursive field.
    open: Vec<String>,
}

impl Walk {
    fn count(&mut self) -> Result<(), String> {
        self.walked += 1;
        if self.walked > REGISTRY_MAX_FIELDS_WALKED {
            return Err(format!(
                "deriving the columns walks more than {REGISTRY_MAX_FIELDS_WALKED} fields (each message field \
                 walks its message's fields again)"
            ));
        }
        Ok(())
    }

    /// The fields of `m` as columns under `prefix`.
    fn message(&mut self, m: &MessageDescriptor, prefix: &str) -> Result<(), String> {
        for field in m.fields() {
            self.count()?;
            let path = format!("{prefix}{}", field.name());
            if path.len() > REGISTRY_MAX_COLUMN_NAME {
                return Err(format!(
                    "field `{}…` makes a column name longer than {REGISTRY_MAX_COLUMN_NAME} characters",
                    &path[..64.min(path.len())]
                ));
            }
            match field.kind() {
                Kind::Message(inner) if !field.is_list() && !field.is_map() && !is_timestamp(&inner) => {
                    if self.open.iter().any(|n| n == inner.full_name()) || self.open.len() > MAX_TYPE_DEPTH {
                        continue;
                    }
                    self.open.push(inner.full_name().to_owned());
                    self.message(&inner, &format!("{path}."))?;
                    self.open.pop();
                }
                _ => {
                    let Some(t) = self.type_of(&field, 0)? else { continue };
                    if t.name().len() > MAX_TYPE_TEXT {
                        return Err(format!(
                            "field `{path}`: its type is longer than {MAX_TYPE_TEXT} characters, the most a column \
                             type may be"
                        ));
                    }
                    if self.columns.len() >= REGISTRY_MAX_COLUMNS {
                        return Err(format!(
                            "the schema derives more than {REGISTRY_MAX_COLUMNS} columns, the most a source may have"
                        ));
                    }
                    self.columns.push(ColumnSpec::field(path, t, false));
                }
            }
        }
        Ok(())
    }

    /// The column type of `field` (`None`: none holds it).
    fn type_of(&mut self, field: &FieldDescriptor, depth: usize) -> Result<Option<ColumnType>, String> {
        if field.is_map() {
            let Kind::Message(entry) = field.kind() else { return Ok(None) };
            let key = match entry.map_entry_key_field().kind() {
                Kind::String => ColumnType::String,
                Kind::Bool => return Ok(None),
                _ => ColumnType::Bigint,
            };
            return Ok(self
                .single(&entry.map_entry_value_field(), depth + 1)?
                .map(|v| ColumnType::Map(Box::new(key), Box::new(v))));
        }
        let t = self.single(field, depth)?;
        Ok(if field.is_list() { t.map(|t| ColumnType::Array(Box::new(t))) } else { t })
    }

    /// The column type of one value of `field` (an element, for a
    /// repeated one).
    fn single(&mut self, field: &FieldDescriptor, depth: usize) -> Result<Option<ColumnType>, String> {
        self.count()?;
        Ok(Some(match field.kind() {
            Kind::Double | Kind::Float => ColumnType::Double,
            Kind::Bool => ColumnType::Boolean,
            Kind::String | Kind::Enum(_) => ColumnType::String,
            Kind::Bytes => return Ok(None),
            Kind::Message(m) if is_timestamp(&m) => ColumnType::Timestamp,
            Kind::Message(m) => {
                if depth >= MAX_TYPE_DEPTH || self.open.iter().any(|n| n == m.full_name()) {
                    return Ok(None);
                }
                self.open.push(m.full_name().to_owned());
                let mut fields = Vec::new();
                for f in m.fields() {
                    if let Some(t) = self.type_of(&f, depth + 1)? {
                        fields.push((f.name().to_owned(), t));
                    }
                }
                self.open.pop();
                if fields.is_empty() {
                    return Ok(None);
                }
                ColumnType::Row(fields)
            }
            _ => ColumnType::Bigint,
        }))
    }
}

fn is_timestamp(m: &MessageDescriptor) -> bool {
    m.full_name() == "google.protobuf.Timestamp"
}

#[cfg(test)]
mod tests {
    use super::*;

    const SHOP: &str = r#"
syntax = "proto3";
package shop;
import "google/protobuf/timestamp.proto";
message Order {
  message LineItem { string sku = 1; int32 qty = 2; string price = 3; optional string note = 4; bytes blob = 5; }
  message Meta { string channel = 1; google.protobuf.Timestamp at = 2; Meta parent = 3; }
  int64 id = 1;
  repeated LineItem items = 2;
  map<string, string> attrs = 3;
  repeated string tags = 4;
  Meta meta = 5;
  map<int32, LineItem> by_line = 6;
  map<bool, string> flags = 7;
  bytes raw = 8;
  Node tree = 9;
}
message Node { string name = 1; repeated Node children = 2; }
"#;

    fn columns(message: Option<&str>) -> Vec<(String, String)> {
        protobuf_columns(SHOP, &[], message)
            .unwrap()
            .into_iter()
            .map(|c| (c.name, c.type_.name().into_owned()))
            .collect()
    }

    /// Fields become columns as the decoder reads them: messages by dotted
    /// path, repeated fields arrays, maps maps, messages inside them rows;
    /// what no column holds (bytes, bool keys, a message inside itself) is
    /// left out, and the rest derived.
    #[test]
    fn a_messages_fields_become_columns_nested_where_protobuf_nests() {
        let got = columns(None);
        let want = [
            ("id", "bigint"),
            ("items", "array<row<sku string, qty bigint, price string, note string>>"),
            ("attrs", "map<string, string>"),
            ("tags", "array<string>"),
            ("meta.channel", "string"),
            ("meta.at", "timestamp"),
            ("by_line", "map<bigint, row<sku string, qty bigint, price string, note string>>"),
            ("tree.name", "string"),
        ];
        let want: Vec<(String, String)> = want.iter().map(|(n, t)| ((*n).into(), (*t).into())).collect();
        assert_eq!(got, want);
        assert_eq!(columns(Some("shop.Node")), [("name".to_owned(), "string".to_owned())]);
        let e = protobuf_columns(SHOP, &[], Some("shop.Nope")).unwrap_err();
        assert!(e.contains("no message `shop.Nope`"), "{e}");
    }

    /// Message fields referring to one message twice at every level double
    /// the dotted columns per level: past the limit the schema is refused,
    /// quickly.
    #[test]
    fn a_schema_whose_message_fields_double_is_refused_at_the_column_limit() {
        let mut text = String::from("syntax = \"proto3\";\nmessage M0 { int64 a = 1; int64 b = 2; }\n");
        for i in 1..24 {
            text.push_str(&format!("message M{i} {{ M{} x = 1; M{} y = 2; }}\n", i - 1, i - 1));
        }
        let started = std::time::Instant::now();
        let e = protobuf_columns(&text, &[], Some("M23")).unwrap_err();
        assert!(e.contains("10000 columns") || e.contains("fields"), "{e}");
        assert!(started.elapsed() < std::time::Duration::from_secs(5));
    }

    #[test]
    fn the_kind_chooses_the_derivation() {
        let found = |kind: &str, text: &str| SubjectSchema {
            id: 1,
            version: 1,
            kind: kind.into(),
            text: text.into(),
            references: Vec::new(),
        };
        let avro = r#"{"type":"record","name":"R","fields":[{"name":"a","type":"long"}]}"#;
        assert_eq!(registry_columns(&found("AVRO", avro), None).unwrap()[0].name, "a");
        assert_eq!(registry_columns(&found("PROTOBUF", SHOP), None).unwrap()[0].name, "id");
        assert!(registry_columns(&found("JSON", "{}"), None).unwrap_err().contains("not JSON"));
        assert!(registry_columns(&found("PROTOBUF", "message {"), None).is_err());
    }
}
