//! Columns from the Schema Registry: a source that names a subject
//! (`schema.registry`) instead of listing its columns gets one column per
//! field of the subject's Avro schema, as `validate`, the operator and the
//! worker all derive them — the same pure function, so the three agree.
//!
//! Nested records become the dotted columns Sluice reads (`bid.price`), a
//! `["null", T]` union a nullable column, logical types their column type
//! (`timestamp-millis`/`-micros` and `date` a timestamp, `decimal` the
//! exact `decimal(p,s)` up to 38 digits and a double beyond, `uuid` a
//! string), an enum a string. What no column type holds —
//! an array, a map, a union of several types, a recursive record — is
//! refused with the field's path.

use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use serde_json::Value;

use crate::{ColumnSpec, ColumnType, StreamJobSpec};

/// The column an Avro `decimal` becomes: `decimal(precision, scale)` when
/// the precision fits a Sluice decimal (38 digits), else a double (the
/// schema's digits beyond 38 cannot be held exactly; declare the column
/// `string` to keep them as text).
fn decimal_column(o: &serde_json::Map<String, Value>) -> ColumnType {
    let int = |k: &str| o.get(k).and_then(Value::as_u64).and_then(|v| u8::try_from(v).ok());
    match (int("precision"), int("scale").unwrap_or(0)) {
        (Some(precision), scale) if (1..=crate::DECIMAL_MAX_PRECISION).contains(&precision) && scale <= precision => {
            ColumnType::Decimal { precision, scale }
        }
        _ => ColumnType::Double,
    }
}

/// The version of a subject a source reads: a number, or `latest`.
pub fn requested_version(v: Option<&IntOrString>) -> Result<Option<u32>, String> {
    match v {
        None => Ok(None),
        Some(IntOrString::String(s)) if s == "latest" => Ok(None),
        Some(IntOrString::Int(n)) if *n > 0 => Ok(Some(n.unsigned_abs())),
        Some(other) => Err(format!("version {other:?}: a positive number or `latest`")),
    }
}

/// What the registry holds under a subject's version.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SubjectSchema {
    pub id: u32,
    pub version: u32,
    /// `AVRO` when the registry names no type.
    pub kind: String,
    pub text: String,
}

/// Which schema a source's columns came from (for `status`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ResolvedSchema {
    pub source: String,
    pub subject: String,
    pub version: u32,
    pub id: u32,
}

impl StreamJobSpec {
    /// The spec with every `schema.registry` source's field columns
    /// derived from its subject's schema (`lookup(subject, version)`,
    /// `None` for the latest), its declared (metadata) columns after them,
    /// and `registry` cleared — the columns are declared now, as the
    /// operator writes them into the workers' config — and which schema
    /// each came from.
    pub fn with_registry_columns(
        &self,
        mut lookup: impl FnMut(&str, Option<u32>) -> Result<SubjectSchema, String>,
    ) -> Result<(StreamJobSpec, Vec<ResolvedSchema>), String> {
        let mut spec = self.clone();
        let mut resolved = Vec::new();
        for (i, source) in spec.sources.iter_mut().enumerate() {
            let Some(registry) = source.schema.registry.take() else { continue };
            let at = format!("spec.sources[{i}].schema.registry");
            if let Some(c) = source.schema.columns.iter().find(|c| c.metadata.is_none()) {
                return Err(format!(
                    "{at}: the value's columns come from the subject's schema: declare only metadata columns beside \
                     it (`{}` is a field column)",
                    c.name
                ));
            }
            if source.format != crate::SourceFormat::Avro {
                return Err(format!("{at}: columns are derived from Avro schemas: the source needs format avro"));
            }
            let version = requested_version(registry.version.as_ref()).map_err(|e| format!("{at}: {e}"))?;
            let found =
                lookup(&registry.subject, version).map_err(|e| format!("{at}: subject {}: {e}", registry.subject))?;
            if found.kind != "AVRO" {
                return Err(format!(
                    "{at}: subject {} holds a {} schema; columns are derived from Avro schemas only (declare this \
                     source's columns)",
                    registry.subject, found.kind
                ));
            }
            let mut columns = avro_columns(&found.text)
                .map_err(|e| format!("{at}: subject {} version {}: {e}", registry.subject, found.version))?;
            if let Some(clash) = columns.iter().find(|c| source.schema.columns.iter().any(|d| d.name == c.name)) {
                return Err(format!("{at}: column `{}` is both a field of the schema and declared", clash.name));
            }
            columns.append(&mut source.schema.columns);
            source.schema.columns = columns;
            resolved.push(ResolvedSchema {
                source: source.name.clone(),
                subject: registry.subject.clone(),
                version: found.version,
                id: found.id,
            });
        }
        Ok((spec, resolved))
    }
}

/// The columns of an Avro schema (a record), in field order.
pub fn avro_columns(text: &str) -> Result<Vec<ColumnSpec>, String> {
    let schema: Value = serde_json::from_str(text).map_err(|e| format!("not an Avro schema (not JSON: {e})"))?;
    let mut walk = Walk { named: Vec::new(), open: Vec::new(), columns: Vec::new() };
    match &schema {
        Value::Object(o) if o.get("type").and_then(Value::as_str) == Some("record") => {
            walk.record(&schema, "", None)?;
        }
        _ => return Err("the schema is not a record".into()),
    }
    if walk.columns.is_empty() {
        return Err("the record has no field a column can read".into());
    }
    Ok(walk.columns)
}

struct Walk {
    /// Named types seen so far: full name → definition.
    named: Vec<(String, Value)>,
    /// The records being walked (a reference to one of them is recursion).
    open: Vec<String>,
    columns: Vec<ColumnSpec>,
}

fn full_name(def: &Value, namespace: Option<&str>) -> Option<String> {
    let name = def.get("name")?.as_str()?;
    if name.contains('.') {
        return Some(name.to_owned());
    }
    let ns = def.get("namespace").and_then(Value::as_str).or(namespace);
    Some(match ns {
        Some(ns) if !ns.is_empty() => format!("{ns}.{name}"),
        _ => name.to_owned(),
    })
}

impl Walk {
    fn record(&mut self, def: &Value, prefix: &str, namespace: Option<&str>) -> Result<(), String> {
        let name = full_name(def, namespace).ok_or_else(|| format!("a record without a name at `{prefix}`"))?;
        let ns = name.rsplit_once('.').map(|(ns, _)| ns.to_owned());
        self.named.push((name.clone(), def.clone()));
        self.open.push(name);
        let fields = def.get("fields").and_then(Value::as_array).ok_or("a record without fields")?;
        for field in fields {
            let fname = field.get("name").and_then(Value::as_str).ok_or("a field without a name")?;
            let path = if prefix.is_empty() { fname.to_owned() } else { format!("{prefix}.{fname}") };
            let ty = field.get("type").ok_or_else(|| format!("field `{path}` has no type"))?;
            self.field(ty, &path, ns.as_deref())?;
        }
        self.open.pop();
        Ok(())
    }

    /// A field of type `ty` at `path`. Every column is nullable: a later
    /// version of the schema may drop the field (with a default).
    fn field(&mut self, ty: &Value, path: &str, ns: Option<&str>) -> Result<(), String> {
        let column = |t| ColumnSpec::field(path, t, false);
        match ty {
            Value::String(name) => match primitive(name) {
                Some(Some(t)) => self.columns.push(column(t)),
                Some(None) => {}
                None => {
                    let full = if name.contains('.') || ns.is_none() {
                        name.clone()
                    } else {
                        format!("{}.{name}", ns.unwrap_or(""))
                    };
                    if self.open.iter().any(|o| *o == full || o.ends_with(&format!(".{name}")) || *o == *name) {
                        return Err(format!("field `{path}` is a recursive record, which no column list can hold"));
                    }
                    let def = self
                        .named
                        .iter()
                        .find(|(n, _)| *n == full || *n == *name)
                        .map(|(_, d)| d.clone())
                        .ok_or_else(|| format!("field `{path}`: unknown type `{name}`"))?;
                    self.field(&def, path, ns)?;
                }
            },
            Value::Array(branches) => {
                let others: Vec<&Value> = branches.iter().filter(|b| b.as_str() != Some("null")).collect();
                match others.as_slice() {
                    [one] => self.field(one, path, ns)?,
                    [] => {}
                    _ => {
                        return Err(format!(
                            "field `{path}` is a union of {} types, which no one column type holds",
                            others.len()
                        ));
                    }
                }
            }
            Value::Object(o) => {
                let kind = o.get("type").and_then(Value::as_str).unwrap_or("");
                let logical = o.get("logicalType").and_then(Value::as_str).unwrap_or("");
                match (kind, logical) {
                    ("record", _) => self.record(ty, path, ns)?,
                    ("enum", _) => {
                        if let Some(n) = full_name(ty, ns) {
                            self.named.push((n, ty.clone()));
                        }
                        self.columns.push(column(ColumnType::String));
                    }
                    ("fixed", "decimal") | ("bytes", "decimal") => self.columns.push(column(decimal_column(o))),
                    ("fixed", _) => {
                        if let Some(n) = full_name(ty, ns) {
                            self.named.push((n, ty.clone()));
                        }
                        self.columns.push(column(ColumnType::String));
                    }
                    (
                        "long",
                        "timestamp-millis" | "timestamp-micros" | "local-timestamp-millis" | "local-timestamp-micros",
                    )
                    | ("int", "date") => self.columns.push(column(ColumnType::Timestamp)),
                    ("array", _) | ("map", _) => {
                        return Err(format!(
                            "field `{path}` is {} {kind}, which no column type holds yet",
                            if kind == "array" { "an" } else { "a" }
                        ));
                    }
                    (primitive_name, _) => self.field(&Value::String(primitive_name.to_owned()), path, ns)?,
                }
            }
            _ => return Err(format!("field `{path}`: a type that is not an Avro type")),
        }
        Ok(())
    }
}

/// A primitive type's column type (`Some(None)`: `null`, no column).
fn primitive(name: &str) -> Option<Option<ColumnType>> {
    Some(Some(match name {
        "null" => return Some(None),
        "boolean" => ColumnType::Boolean,
        "int" | "long" => ColumnType::Bigint,
        "float" | "double" => ColumnType::Double,
        "string" | "bytes" => ColumnType::String,
        _ => return None,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_become_columns_nested_by_path_with_their_logical_types() {
        let schema = r#"{"type":"record","name":"Bid","namespace":"nx","fields":[
            {"name":"auction","type":"long"},
            {"name":"price","type":["null","double"],"default":null},
            {"name":"bidder","type":{"type":"record","name":"Person","fields":[
                {"name":"id","type":"int"},{"name":"name","type":"string"}]}},
            {"name":"seller","type":["null","Person"]},
            {"name":"ts","type":{"type":"long","logicalType":"timestamp-micros"}},
            {"name":"day","type":{"type":"int","logicalType":"date"}},
            {"name":"amount","type":{"type":"bytes","logicalType":"decimal","precision":9,"scale":2}},
            {"name":"wide","type":{"type":"fixed","name":"W","size":16,"logicalType":"decimal","precision":38,"scale":10}},
            {"name":"wider","type":{"type":"bytes","logicalType":"decimal","precision":39,"scale":2}},
            {"name":"id","type":{"type":"string","logicalType":"uuid"}},
            {"name":"side","type":{"type":"enum","name":"Side","symbols":["BUY","SELL"]}},
            {"name":"other_side","type":"Side"},
            {"name":"ok","type":"boolean"}
        ]}"#;
        let columns: Vec<(String, ColumnType)> =
            avro_columns(schema).unwrap().into_iter().map(|c| (c.name, c.type_)).collect();
        let want = [
            ("auction", ColumnType::Bigint),
            ("price", ColumnType::Double),
            ("bidder.id", ColumnType::Bigint),
            ("bidder.name", ColumnType::String),
            ("seller.id", ColumnType::Bigint),
            ("seller.name", ColumnType::String),
            ("ts", ColumnType::Timestamp),
            ("day", ColumnType::Timestamp),
            ("amount", ColumnType::Decimal { precision: 9, scale: 2 }),
            ("wide", ColumnType::Decimal { precision: 38, scale: 10 }),
            ("wider", ColumnType::Double),
            ("id", ColumnType::String),
            ("side", ColumnType::String),
            ("other_side", ColumnType::String),
            ("ok", ColumnType::Boolean),
        ];
        assert_eq!(columns, want.map(|(n, t)| (n.to_owned(), t)));
    }

    #[test]
    fn what_no_column_holds_is_refused_with_the_fields_path() {
        for (ty, reason) in [
            (r#"{"type":"array","items":"long"}"#, "field `r.x` is an array"),
            (r#"{"type":"map","values":"long"}"#, "field `r.x` is a map"),
            (r#"["null","long","string"]"#, "field `r.x` is a union of 2 types"),
            (r#"["null","R"]"#, "field `r.x` is a recursive record"),
            (r#""Nope""#, "unknown type `Nope`"),
        ] {
            let schema = format!(
                r#"{{"type":"record","name":"R","fields":[{{"name":"r","type":{{"type":"record","name":"In","fields":[{{"name":"x","type":{ty}}}]}}}}]}}"#
            );
            let err = avro_columns(&schema).unwrap_err();
            assert!(err.contains(reason), "{ty}: {err}");
        }
        assert!(avro_columns(r#""long""#).unwrap_err().contains("not a record"));
        assert!(avro_columns("{").unwrap_err().contains("not JSON"));
    }
}
