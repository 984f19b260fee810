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
//! refused with the field's path. So is a schema past the limits below:
//! the operator derives every tenant's columns in its one process, so no
//! schema may cost it more than a bounded walk.

use std::collections::HashMap;

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
    /// The schemas it references, `(name, text)`, each after those it
    /// references ([`crate::ReferenceWalk`]).
    pub references: Vec<(String, String)>,
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
    /// `None` for the latest) by `derive` (the subject's schema, and the
    /// Protobuf message the source names), its declared (metadata) columns
    /// after them, and `registry` cleared — the columns are declared now,
    /// as the operator writes them into the workers' config — and which
    /// schema each came from. [`avro_columns_with`] derives Avro's here;
    /// the formats crate's `registry_columns` derives Protobuf's too.
    pub fn with_registry_columns(
        &self,
        mut lookup: impl FnMut(&str, Option<u32>) -> Result<SubjectSchema, String>,
        derive: impl Fn(&SubjectSchema, Option<&str>) -> Result<Vec<ColumnSpec>, String>,
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
            let kind = match source.format {
                crate::SourceFormat::Avro => "AVRO",
                crate::SourceFormat::Protobuf => "PROTOBUF",
                _ => {
                    return Err(format!(
                        "{at}: columns are derived from Avro and Protobuf schemas: the source needs format avro or \
                         protobuf"
                    ));
                }
            };
            if registry.message.is_some() && kind != "PROTOBUF" {
                return Err(format!("{at}.message names a Protobuf message: the source's format is not protobuf"));
            }
            let version = requested_version(registry.version.as_ref()).map_err(|e| format!("{at}: {e}"))?;
            let found =
                lookup(&registry.subject, version).map_err(|e| format!("{at}: subject {}: {e}", registry.subject))?;
            if found.kind != kind {
                return Err(format!(
                    "{at}: subject {} holds a {} schema, and the source's format reads {kind} (declare this \
                     source's columns, or name a subject of its format)",
                    registry.subject, found.kind
                ));
            }
            let mut columns = derive(&found, registry.message.as_deref())
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

/// The most columns one subject's schema may derive. Each reference to a
/// named record derives its columns again under the referring field's
/// path, so a small schema can name exponentially many (24 records each
/// holding two fields of the one before: 2^24 columns from 3 KB): past
/// this the schema is refused, not expanded.
pub const REGISTRY_MAX_COLUMNS: usize = 10_000;

/// The most fields the derivation walks, counting each field of a named
/// type once per reference to it: bounds the work a schema whose
/// references derive no column (`null` fields, empty records) can cause.
pub const REGISTRY_MAX_FIELDS_WALKED: usize = 100_000;

/// How deep records may nest, through references or inline: the walk
/// recurses per level, so a chain of thousands of records referring to
/// each other would otherwise overflow the stack, which aborts the process.
pub const REGISTRY_MAX_DEPTH: usize = 64;

/// The longest column name (a dotted field path) derived.
pub const REGISTRY_MAX_COLUMN_NAME: usize = 1_024;

/// The columns of an Avro schema (a record), in field order. Bounded in
/// time and memory whatever the schema ([`REGISTRY_MAX_COLUMNS`],
/// [`REGISTRY_MAX_FIELDS_WALKED`], [`REGISTRY_MAX_DEPTH`],
/// [`REGISTRY_MAX_COLUMN_NAME`]): the operator derives every tenant's
/// columns in one process.
pub fn avro_columns(text: &str) -> Result<Vec<ColumnSpec>, String> {
    avro_columns_with(text, &[])
}

/// [`avro_columns`] of a schema whose named types may be defined in the
/// schemas it references (`(name, text)`, as [`SubjectSchema::references`]).
pub fn avro_columns_with(text: &str, references: &[(String, String)]) -> Result<Vec<ColumnSpec>, String> {
    let referenced = references
        .iter()
        .map(|(name, text)| {
            serde_json::from_str::<Value>(text)
                .map_err(|e| format!("referenced schema `{}` is not an Avro schema (not JSON: {e})", shown(name)))
        })
        .collect::<Result<Vec<Value>, String>>()?;
    let schema: Value = serde_json::from_str(text).map_err(|e| format!("not an Avro schema (not JSON: {e})"))?;
    let mut walk =
        Walk { named: HashMap::new(), open: Vec::new(), columns: Vec::new(), walked: 0, leaf: Leaf::default() };
    for def in &referenced {
        walk.define(def, None, 0)?;
    }
    match &schema {
        Value::Object(o) if o.get("type").and_then(Value::as_str) == Some("record") => {
            walk.field(&schema, "", None)?;
        }
        _ => return Err("the schema is not a record".into()),
    }
    if walk.columns.is_empty() {
        return Err("the record has no field a column can read".into());
    }
    Ok(walk.columns)
}

/// One pass over a parsed schema. Named types are kept by reference into
/// the parsed document, each once: a reference is one hash lookup, never a
/// copy of the definition.
struct Walk<'a> {
    /// Named types defined so far: full name → definition.
    named: HashMap<String, &'a Value>,
    /// The full names of the records being walked (a reference to one of
    /// them is recursion).
    open: Vec<String>,
    columns: Vec<ColumnSpec>,
    /// Fields walked so far.
    walked: usize,
    /// The field being walked's aliases (as column paths) and default, for
    /// the column it becomes if it is one.
    leaf: Leaf,
}

#[derive(Debug, Default)]
struct Leaf {
    aliases: Vec<String>,
    default: Option<String>,
}

/// An Avro field default as a column default's text: a scalar's, none for
/// `null` (the column's NULL already) or anything else.
fn default_text(value: &Value) -> Option<String> {
    match value {
        Value::String(s) if s.len() <= 4096 => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        Value::Bool(b) => Some(b.to_string()),
        _ => None,
    }
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

/// A name from the schema, cut short for a message (a schema's names have
/// no length limit; a message goes into the job's status).
fn shown(name: &str) -> String {
    const MAX: usize = 80;
    match name.char_indices().nth(MAX) {
        Some((at, _)) => format!("{}…", &name[..at]),
        None => name.to_owned(),
    }
}

impl<'a> Walk<'a> {
    /// Registers the named types `def` defines (a referenced schema's),
    /// without deriving columns from it.
    fn define(&mut self, def: &'a Value, namespace: Option<&str>, depth: usize) -> Result<(), String> {
        if depth > REGISTRY_MAX_DEPTH {
            return Err(format!("a referenced schema nests more than {REGISTRY_MAX_DEPTH} levels"));
        }
        match def {
            Value::Array(branches) => branches.iter().try_for_each(|b| self.define(b, namespace, depth + 1)),
            Value::Object(o) => {
                let kind = o.get("type");
                match kind.and_then(Value::as_str) {
                    Some("record" | "error" | "enum" | "fixed") => {
                        let Some(name) = full_name(def, namespace) else { return Ok(()) };
                        let ns = name.rsplit_once('.').map(|(ns, _)| ns.to_owned());
                        self.named.entry(name).or_insert(def);
                        for field in o.get("fields").and_then(Value::as_array).into_iter().flatten() {
                            if let Some(ty) = field.get("type") {
                                self.define(ty, ns.as_deref(), depth + 1)?;
                            }
                        }
                        Ok(())
                    }
                    Some("array") => o.get("items").map_or(Ok(()), |t| self.define(t, namespace, depth + 1)),
                    Some("map") => o.get("values").map_or(Ok(()), |t| self.define(t, namespace, depth + 1)),
                    Some(_) => Ok(()),
                    None => kind.map_or(Ok(()), |t| self.define(t, namespace, depth + 1)),
                }
            }
            _ => Ok(()),
        }
    }

    fn record(&mut self, def: &'a Value, name: String, prefix: &str) -> Result<(), String> {
        if self.open.len() >= REGISTRY_MAX_DEPTH {
            return Err(format!(
                "field `{}` nests records more than {REGISTRY_MAX_DEPTH} levels deep, the most a derived column may",
                shown(prefix)
            ));
        }
        let ns = name.rsplit_once('.').map(|(ns, _)| ns.to_owned());
        self.named.entry(name.clone()).or_insert(def);
        self.open.push(name);
        let fields = def.get("fields").and_then(Value::as_array).ok_or("a record without fields")?;
        for field in fields {
            let fname = field.get("name").and_then(Value::as_str).ok_or("a field without a name")?;
            let path = if prefix.is_empty() { fname.to_owned() } else { format!("{prefix}.{fname}") };
            if path.len() > REGISTRY_MAX_COLUMN_NAME {
                return Err(format!(
                    "field `{}` has a path longer than {REGISTRY_MAX_COLUMN_NAME} bytes, the longest column name",
                    shown(&path)
                ));
            }
            let ty = field.get("type").ok_or_else(|| format!("field `{}` has no type", shown(&path)))?;
            // Avro's resolution: the reader's aliases of the field (its
            // names in earlier versions), and its default.
            let parent = if prefix.is_empty() { String::new() } else { format!("{prefix}.") };
            self.leaf = Leaf {
                aliases: field
                    .get("aliases")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                    .filter_map(Value::as_str)
                    .take(64)
                    .map(|a| format!("{parent}{a}"))
                    .filter(|a| a.len() <= REGISTRY_MAX_COLUMN_NAME)
                    .collect(),
                default: field.get("default").and_then(default_text),
            };
            self.field(ty, &path, ns.as_deref())?;
        }
        self.open.pop();
        Ok(())
    }

    fn push(&mut self, path: &str, t: ColumnType) -> Result<(), String> {
        if self.columns.len() >= REGISTRY_MAX_COLUMNS {
            return Err(format!(
                "the schema derives more than {REGISTRY_MAX_COLUMNS} columns, the most a source may have (each \
                 reference to a named record repeats its columns)"
            ));
        }
        // Every column is nullable: a later version of the schema may drop
        // the field (with a default).
        let Leaf { aliases, default } = std::mem::take(&mut self.leaf);
        self.columns.push(ColumnSpec { aliases, default, ..ColumnSpec::field(path, t, false) });
        Ok(())
    }

    /// A field of type `ty` at `path`.
    fn field(&mut self, ty: &'a Value, path: &str, ns: Option<&str>) -> Result<(), String> {
        self.walked += 1;
        if self.walked > REGISTRY_MAX_FIELDS_WALKED {
            return Err(format!(
                "deriving the columns walks more than {REGISTRY_MAX_FIELDS_WALKED} fields (each reference to a \
                 named record walks its fields again)"
            ));
        }
        match ty {
            Value::String(name) => self.named_type(name, path, ns),
            Value::Array(branches) => {
                let others: Vec<&'a Value> = branches.iter().filter(|b| b.as_str() != Some("null")).collect();
                match others.as_slice() {
                    [one] => self.field(one, path, ns),
                    [] => Ok(()),
                    _ => Err(format!(
                        "field `{}` is a union of {} types, which no one column type holds",
                        shown(path),
                        others.len()
                    )),
                }
            }
            Value::Object(o) => {
                let kind = o.get("type").and_then(Value::as_str).unwrap_or("");
                let logical = o.get("logicalType").and_then(Value::as_str).unwrap_or("");
                match (kind, logical) {
                    ("record", _) => {
                        let name =
                            full_name(ty, ns).ok_or_else(|| format!("a record without a name at `{}`", shown(path)))?;
                        if self.open.contains(&name) {
                            return Err(format!(
                                "field `{}` is a recursive record, which no column list can hold",
                                shown(path)
                            ));
                        }
                        self.record(ty, name, path)
                    }
                    ("fixed", "decimal") | ("bytes", "decimal") => self.push(path, decimal_column(o)),
                    ("enum" | "fixed", _) => {
                        if let Some(n) = full_name(ty, ns) {
                            self.named.entry(n).or_insert(ty);
                        }
                        self.push(path, ColumnType::String)
                    }
                    (
                        "long",
                        "timestamp-millis" | "timestamp-micros" | "local-timestamp-millis" | "local-timestamp-micros",
                    )
                    | ("int", "date") => self.push(path, ColumnType::Timestamp),
                    // An array or a map is one column of a nested type,
                    // records in it `row`s: its items are values, not
                    // columns of their own.
                    ("array", _) | ("map", _) => match self.type_of(ty, path, ns, 0)? {
                        Some(t) if t.name().len() <= crate::MAX_TYPE_TEXT => self.push(path, t),
                        Some(_) => Err(format!(
                            "field `{}`: its type is longer than {} characters, the most a column type may be",
                            shown(path),
                            crate::MAX_TYPE_TEXT
                        )),
                        None => Ok(()),
                    },
                    (name, _) => self.named_type(name, path, ns),
                }
            }
            _ => Err(format!("field `{}`: a type that is not an Avro type", shown(path))),
        }
    }

    /// A type by name: a primitive, or a named type defined earlier in
    /// the schema (looked up by its full name in `ns`, then as written).
    fn named_type(&mut self, name: &str, path: &str, ns: Option<&str>) -> Result<(), String> {
        match primitive(name) {
            Some(Some(t)) => return self.push(path, t),
            Some(None) => return Ok(()),
            None => {}
        }
        let full = match ns {
            Some(ns) if !name.contains('.') && !ns.is_empty() => format!("{ns}.{name}"),
            _ => name.to_owned(),
        };
        let found = self.named.get_key_value(&full).or_else(|| self.named.get_key_value(name));
        let Some((key, &def)) = found else {
            return Err(format!("field `{}`: unknown type `{}`", shown(path), shown(name)));
        };
        if self.open.contains(key) {
            return Err(format!("field `{}` is a recursive record, which no column list can hold", shown(path)));
        }
        // The definition is walked in its own namespace, where its full
        // name puts it.
        let def_ns = key.rsplit_once('.').map(|(ns, _)| ns.to_owned());
        self.field(def, path, def_ns.as_deref())
    }
}

impl<'a> Walk<'a> {
    /// The column type of a value of Avro type `ty` inside an array or a
    /// map (`None`: only `null`): arrays and maps nest, records are rows.
    fn type_of(
        &mut self,
        ty: &'a Value,
        path: &str,
        ns: Option<&str>,
        depth: usize,
    ) -> Result<Option<ColumnType>, String> {
        self.walked += 1;
        if self.walked > REGISTRY_MAX_FIELDS_WALKED {
            return Err(format!(
                "deriving the columns walks more than {REGISTRY_MAX_FIELDS_WALKED} fields (each reference to a \
                 named record walks its fields again)"
            ));
        }
        if depth > crate::MAX_TYPE_DEPTH {
            return Err(format!(
                "field `{}` nests arrays, maps and records more than {} levels, the most a column type may",
                shown(path),
                crate::MAX_TYPE_DEPTH
            ));
        }
        match ty {
            Value::String(name) => {
                if let Some(t) = primitive(name) {
                    return Ok(t);
                }
                let full = match ns {
                    Some(ns) if !name.contains('.') && !ns.is_empty() => format!("{ns}.{name}"),
                    _ => name.clone(),
                };
                let found = self.named.get_key_value(&full).or_else(|| self.named.get_key_value(name.as_str()));
                let Some((key, &def)) = found else {
                    return Err(format!("field `{}`: unknown type `{}`", shown(path), shown(name)));
                };
                let def_ns = key.rsplit_once('.').map(|(ns, _)| ns.to_owned());
                self.type_of(def, path, def_ns.as_deref(), depth)
            }
            Value::Array(branches) => {
                let others: Vec<&'a Value> = branches.iter().filter(|b| b.as_str() != Some("null")).collect();
                match others.as_slice() {
                    [one] => self.type_of(one, path, ns, depth),
                    [] => Ok(None),
                    _ => Err(format!(
                        "field `{}` holds a union of {} types, which no one column type holds",
                        shown(path),
                        others.len()
                    )),
                }
            }
            Value::Object(o) => {
                let kind = o.get("type").and_then(Value::as_str).unwrap_or("");
                let logical = o.get("logicalType").and_then(Value::as_str).unwrap_or("");
                let inner =
                    |key: &str| o.get(key).ok_or_else(|| format!("field `{}`: an {kind} without {key}", shown(path)));
                Ok(Some(match (kind, logical) {
                    ("array", _) => {
                        let item = self.type_of(inner("items")?, &format!("{path}[]"), ns, depth + 1)?;
                        ColumnType::Array(Box::new(item.unwrap_or(ColumnType::String)))
                    }
                    ("map", _) => {
                        let value = self.type_of(inner("values")?, &format!("{path}[]"), ns, depth + 1)?;
                        ColumnType::Map(Box::new(ColumnType::String), Box::new(value.unwrap_or(ColumnType::String)))
                    }
                    ("record" | "error", _) => {
                        let name =
                            full_name(ty, ns).ok_or_else(|| format!("a record without a name at `{}`", shown(path)))?;
                        if self.open.contains(&name) {
                            return Err(format!(
                                "field `{}` is a recursive record, which no column type can hold",
                                shown(path)
                            ));
                        }
                        let record_ns = name.rsplit_once('.').map(|(ns, _)| ns.to_owned());
                        self.named.entry(name.clone()).or_insert(ty);
                        self.open.push(name);
                        let mut fields = Vec::new();
                        for f in o.get("fields").and_then(Value::as_array).ok_or("a record without fields")? {
                            let fname = f.get("name").and_then(Value::as_str).ok_or("a field without a name")?;
                            let fty = f.get("type").ok_or_else(|| format!("field `{}` has no type", shown(fname)))?;
                            let child = format!("{path}.{fname}");
                            if let Some(t) = self.type_of(fty, &child, record_ns.as_deref(), depth + 1)? {
                                fields.push((fname.to_owned(), t));
                            }
                        }
                        self.open.pop();
                        if fields.is_empty() {
                            return Ok(None);
                        }
                        ColumnType::Row(fields)
                    }
                    ("fixed", "decimal") | ("bytes", "decimal") => decimal_column(o),
                    ("enum" | "fixed", _) => {
                        if let Some(n) = full_name(ty, ns) {
                            self.named.entry(n).or_insert(ty);
                        }
                        ColumnType::String
                    }
                    (
                        "long",
                        "timestamp-millis" | "timestamp-micros" | "local-timestamp-millis" | "local-timestamp-micros",
                    )
                    | ("int", "date") => ColumnType::Timestamp,
                    (name, _) => match (primitive(name), o.get("type")) {
                        (Some(t), _) => return Ok(t),
                        (None, Some(inner)) => {
                            return self.type_of(inner, path, ns, depth + 1);
                        }
                        _ => return Err(format!("field `{}`: a type without a `type`", shown(path))),
                    },
                }))
            }
            _ => Err(format!("field `{}`: a type that is not an Avro type", shown(path))),
        }
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

    /// The reader's aliases and defaults travel with the columns (Avro's
    /// schema resolution reads older records by them), and a type defined
    /// in a referenced schema derives its fields.
    #[test]
    fn columns_carry_aliases_and_defaults_and_referenced_types_are_read() {
        let money = r#"{"type":"record","name":"Money","namespace":"shared","fields":[
            {"name":"units","type":"long"},{"name":"currency","type":"string","default":"EUR"}]}"#;
        let order = r#"{"type":"record","name":"Order","namespace":"shop","fields":[
            {"name":"quantity","type":"long","aliases":["units","qty"]},
            {"name":"venue","type":["string","null"],"default":"XNAS"},
            {"name":"note","type":["null","string"],"default":null},
            {"name":"total","type":"shared.Money"}]}"#;
        let columns = avro_columns_with(order, &[("shared.Money".into(), money.into())]).unwrap();
        let got: Vec<(&str, Vec<&str>, Option<&str>)> = columns
            .iter()
            .map(|c| (c.name.as_str(), c.aliases.iter().map(String::as_str).collect(), c.default.as_deref()))
            .collect();
        assert_eq!(
            got,
            [
                ("quantity", vec!["units", "qty"], None),
                ("venue", vec![], Some("XNAS")),
                ("note", vec![], None),
                ("total.units", vec![], None),
                ("total.currency", vec![], Some("EUR")),
            ]
        );
        let e = avro_columns(order).unwrap_err();
        assert!(e.contains("unknown type `shared.Money`"), "{e}");
    }

    #[test]
    fn what_no_column_holds_is_refused_with_the_fields_path() {
        for (ty, reason) in [
            (r#"{"type":"array","items":["long","string"]}"#, "field `r.x[]` holds a union of 2 types"),
            (r#"{"type":"map","values":"In"}"#, "field `r.x[]` is a recursive record"),
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

    #[test]
    fn arrays_and_maps_are_nested_columns_their_records_rows() {
        let schema = r#"{"type":"record","name":"Order","namespace":"shop","fields":[
            {"name":"id","type":"long"},
            {"name":"items","type":{"type":"array","items":{"type":"record","name":"Item","fields":[
                {"name":"sku","type":"string"},
                {"name":"qty","type":["null","int"]},
                {"name":"price","type":{"type":"bytes","logicalType":"decimal","precision":9,"scale":2}},
                {"name":"tags","type":{"type":"array","items":"string"}}]}}},
            {"name":"attrs","type":["null",{"type":"map","values":"string"}],"default":null},
            {"name":"returns","type":{"type":"array","items":"Item"}},
            {"name":"at","type":{"type":"map","values":{"type":"long","logicalType":"timestamp-millis"}}}
        ]}"#;
        let columns = avro_columns(schema).unwrap();
        let got: Vec<(String, String)> =
            columns.iter().map(|c| (c.name.clone(), c.type_.name().into_owned())).collect();
        let item = "row<sku string, qty bigint, price decimal(9,2), tags array<string>>";
        assert_eq!(
            got,
            [
                ("id".to_owned(), "bigint".to_owned()),
                ("items".to_owned(), format!("array<{item}>")),
                ("attrs".to_owned(), "map<string, string>".to_owned()),
                ("returns".to_owned(), format!("array<{item}>")),
                ("at".to_owned(), "map<string, timestamp>".to_owned()),
            ]
        );
    }

    /// `levels` records, each holding two fields of the one before (the
    /// first holds `leaf`): 2^levels columns from a few KB of text.
    fn doubling(levels: usize, leaf: &str) -> String {
        let mut fields = format!(r#"{{"name":"a","type":"{leaf}"}},{{"name":"b","type":"{leaf}"}}"#);
        let mut schema = String::new();
        for i in 0..levels {
            let record = format!(r#"{{"type":"record","name":"R{i}","fields":[{fields}]}}"#);
            fields = format!(r#"{{"name":"x","type":{record}}},{{"name":"y","type":"R{i}"}}"#);
            schema = format!(r#"{{"type":"record","name":"Top","fields":[{fields}]}}"#);
        }
        schema
    }

    /// The issue's shape: 24 levels, 3 KB; it took 1.6 GB and more than 3 s
    /// before. Now refused at the column limit, quickly.
    #[test]
    fn a_schema_whose_references_double_is_refused_at_the_column_limit() {
        let schema = doubling(24, "long");
        assert!(schema.len() < 4_000, "{}", schema.len());
        let started = std::time::Instant::now();
        let err = avro_columns(&schema).unwrap_err();
        assert!(err.contains("more than 10000 columns"), "{err}");
        assert!(started.elapsed() < std::time::Duration::from_secs(5), "{:?}", started.elapsed());
        // With fields that derive no column, the walk itself is bounded.
        let started = std::time::Instant::now();
        let err = avro_columns(&doubling(40, "null")).unwrap_err();
        assert!(err.contains("walks more than 100000 fields"), "{err}");
        assert!(started.elapsed() < std::time::Duration::from_secs(5), "{:?}", started.elapsed());
        // Below the limits the same shape derives every column.
        assert_eq!(avro_columns(&doubling(10, "long")).unwrap().len(), 1 << 11);
    }

    /// `n` records defined one after another, each holding the one before
    /// by name: a chain as deep as it is long.
    fn chain(n: usize) -> String {
        let mut fields = Vec::new();
        for i in 0..n {
            let inner = if i == 0 { r#""long""#.to_owned() } else { format!(r#""C{}""#, i - 1) };
            fields.push(format!(
                r#"{{"name":"f{i}","type":{{"type":"record","name":"C{i}","fields":[{{"name":"v","type":"long"}},{{"name":"next","type":{inner}}}]}}}}"#
            ));
        }
        format!(r#"{{"type":"record","name":"Top","fields":[{}]}}"#, fields.join(","))
    }

    /// A chain of 800 definitions ran past 60 s (every reference searched
    /// and copied a list that grew at each): now refused at the depth
    /// limit, where it would otherwise have recursed 800 levels deep.
    #[test]
    fn a_chain_of_definitions_is_refused_at_the_depth_limit_quickly() {
        let started = std::time::Instant::now();
        let err = avro_columns(&chain(800)).unwrap_err();
        assert!(err.contains("more than 64 levels deep"), "{err}");
        assert!(started.elapsed() < std::time::Duration::from_secs(5), "{:?}", started.elapsed());
        // One within the limit derives every column: f<i> holds i + 1
        // records, a `v` each, and the innermost `next` (a long).
        let columns = avro_columns(&chain(60)).unwrap();
        assert_eq!(columns.len(), (0..60).map(|i| i + 2).sum::<usize>());
        assert_eq!(columns[0].name, "f0.v");
        assert_eq!(columns[2].name, "f1.v");
        assert_eq!(columns[3].name, "f1.next.v");
        assert_eq!(columns[4].name, "f1.next.next");
    }

    /// Thousands of distinct definitions, each referred to again: every
    /// reference is one lookup, so this is fast however many there are.
    #[test]
    fn many_definitions_referred_to_are_derived_quickly() {
        let n = 3_000;
        let defined = (0..n).map(|i| {
            format!(
                r#"{{"name":"d{i}","type":{{"type":"record","name":"D{i}","fields":[{{"name":"v","type":"int"}}]}}}}"#
            )
        });
        let referred = (0..n).map(|i| format!(r#"{{"name":"r{i}","type":["null","D{}"]}}"#, n - 1 - i));
        let fields: Vec<String> = defined.chain(referred).collect();
        let schema = format!(r#"{{"type":"record","name":"Top","namespace":"ns","fields":[{}]}}"#, fields.join(","));
        let started = std::time::Instant::now();
        let columns = avro_columns(&schema).unwrap();
        assert!(started.elapsed() < std::time::Duration::from_secs(5), "{:?}", started.elapsed());
        assert_eq!(columns.len(), 2 * n);
        assert_eq!(columns[n].name, format!("r0.v"));
        assert!(columns.iter().all(|c| c.type_ == ColumnType::Bigint));
    }

    #[test]
    fn a_column_name_past_the_limit_is_refused_with_the_start_of_its_path() {
        let long = "n".repeat(600);
        let schema = format!(
            r#"{{"type":"record","name":"R","fields":[{{"name":"{long}","type":{{"type":"record","name":"In","fields":[{{"name":"{long}","type":"long"}}]}}}}]}}"#
        );
        let err = avro_columns(&schema).unwrap_err();
        assert!(err.contains("longer than 1024 bytes"), "{err}");
        assert!(err.len() < 300, "the message quotes only the path's start: {err}");
    }

    /// The limit is reported against the source and subject that hit it.
    #[test]
    fn a_refused_schema_names_the_source_and_subject() {
        let job: crate::StreamJob = serde_saphyr::from_str(
            r"
apiVersion: sluice.dev/v1alpha1
kind: StreamJob
metadata: { name: j }
spec:
  sql: SELECT * FROM orders
  schemaRegistry: { url: 'http://registry:8081' }
  sources:
    - name: orders
      format: avro
      kafka: { bootstrapServers: 'kafka:9092', topic: orders }
      schema: { registry: { subject: orders-value } }
  sink: { kafka: { bootstrapServers: 'kafka:9092', topic: out } }
",
        )
        .unwrap();
        let text = doubling(24, "long");
        let err = job
            .spec
            .with_registry_columns(
                |_, _| {
                    Ok(SubjectSchema {
                        id: 7,
                        version: 3,
                        kind: "AVRO".into(),
                        text: text.clone(),
                        references: Vec::new(),
                    })
                },
                |found, _| avro_columns_with(&found.text, &found.references),
            )
            .unwrap_err();
        assert!(err.starts_with("spec.sources[0].schema.registry: subject orders-value version 3: "), "{err}");
        assert!(err.contains("10000 columns"), "{err}");
    }

    /// A small deterministic generator (xorshift; no dependency) of nested
    /// Avro records with references, unions, enums and logical types,
    /// which computes the columns it expects on its own.
    struct Gen {
        state: u64,
        /// Named records defined so far: name → the columns they derive,
        /// as (path under the record, type).
        records: Vec<(String, Vec<(String, ColumnType)>)>,
        enums: Vec<String>,
        next_name: usize,
    }

    impl Gen {
        fn below(&mut self, n: u64) -> u64 {
            self.state ^= self.state << 13;
            self.state ^= self.state >> 7;
            self.state ^= self.state << 17;
            self.state % n
        }

        /// A type for a field at nesting `depth`: its JSON, and the columns
        /// it derives relative to the field (`""` for the field itself).
        fn ty(&mut self, depth: usize) -> (String, Vec<(String, ColumnType)>) {
            let leaf = |t: ColumnType| vec![(String::new(), t)];
            match self.below(if depth >= 5 { 6 } else { 9 }) {
                0 => (r#""long""#.into(), leaf(ColumnType::Bigint)),
                1 => (r#"["null","string"]"#.into(), leaf(ColumnType::String)),
                2 => (r#"{"type":"long","logicalType":"timestamp-millis"}"#.into(), leaf(ColumnType::Timestamp)),
                3 => (r#""null""#.into(), Vec::new()),
                4 if !self.enums.is_empty() => {
                    let i = self.below(self.enums.len() as u64) as usize;
                    (format!(r#""{}""#, self.enums[i]), leaf(ColumnType::String))
                }
                4 => {
                    let name = format!("E{}", self.next_name);
                    self.next_name += 1;
                    self.enums.push(name.clone());
                    (format!(r#"{{"type":"enum","name":"{name}","symbols":["A"]}}"#), leaf(ColumnType::String))
                }
                5 if !self.records.is_empty() => {
                    let i = self.below(self.records.len() as u64) as usize;
                    let (name, columns) = self.records[i].clone();
                    (format!(r#"["null","{name}"]"#), columns)
                }
                _ => self.record(depth + 1),
            }
        }

        fn record(&mut self, depth: usize) -> (String, Vec<(String, ColumnType)>) {
            let name = format!("R{}", self.next_name);
            self.next_name += 1;
            let mut fields = Vec::new();
            let mut columns = Vec::new();
            for f in 0..=self.below(4) {
                let (ty, derived) = self.ty(depth);
                fields.push(format!(r#"{{"name":"f{f}","type":{ty}}}"#));
                for (path, t) in derived {
                    let path = if path.is_empty() { format!("f{f}") } else { format!("f{f}.{path}") };
                    columns.push((path, t));
                }
            }
            // Defined once its fields are: later fields may refer to it.
            self.records.push((name.clone(), columns.clone()));
            (format!(r#"{{"type":"record","name":"{name}","fields":[{}]}}"#, fields.join(",")), columns)
        }
    }

    /// Random nested schemas (a fixed seed, so a failure reproduces):
    /// each derives exactly the columns the generator expects, or is
    /// refused with a reason when it has none or passes a limit; a
    /// mutated copy of each (a byte flipped, cut or repeated), and every
    /// 64th case one of the hostile shapes at a random size, derive or are
    /// refused — never a panic, never past the limits. `SLUICE_SCHEMA_CASES`
    /// runs more (docs/reliability.md has a run's figures).
    #[test]
    fn random_nested_schemas_derive_the_columns_they_define() {
        let cases: u64 = std::env::var("SLUICE_SCHEMA_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(2_000);
        let mut g = Gen { state: 0x9E37_79B9_7F4A_7C15, records: Vec::new(), enums: Vec::new(), next_name: 0 };
        let (mut derived, mut refused, mut slowest) = (0u64, 0u64, std::time::Duration::ZERO);
        let mut timed = |text: &str| {
            let started = std::time::Instant::now();
            let columns = avro_columns(text);
            slowest = slowest.max(started.elapsed());
            if let Ok(c) = &columns {
                assert!(c.len() <= REGISTRY_MAX_COLUMNS && c.iter().all(|c| c.name.len() <= REGISTRY_MAX_COLUMN_NAME));
            }
            columns
        };
        for case in 0..cases {
            g.records.clear();
            g.enums.clear();
            let (schema, want) = g.record(0);
            match timed(&schema) {
                Ok(columns) => {
                    let got: Vec<(String, ColumnType)> = columns.into_iter().map(|c| (c.name, c.type_)).collect();
                    assert_eq!(got, want, "{schema}");
                    derived += 1;
                }
                Err(e) if want.is_empty() => assert!(e.contains("no field a column can read"), "{e}"),
                Err(e) => {
                    assert!(want.len() > REGISTRY_MAX_COLUMNS || e.contains("more than"), "{e}: {schema}");
                    refused += 1;
                }
            }
            let mut bytes = schema.into_bytes();
            let at = g.below(bytes.len() as u64) as usize;
            match g.below(3) {
                0 => bytes[at] = b"{}[]\",:\"0n"[g.below(10) as usize],
                1 => drop(bytes.drain(at..(at + 1 + g.below(8) as usize).min(bytes.len()))),
                _ => {
                    let end = (at + 1 + g.below(64) as usize).min(bytes.len());
                    let repeated = bytes[at..end].to_vec();
                    bytes.splice(at..at, repeated);
                }
            }
            let _ = timed(&String::from_utf8_lossy(&bytes));
            if case % 64 == 0 {
                let hostile = match g.below(3) {
                    0 => doubling(8 + g.below(40) as usize, ["long", "null"][g.below(2) as usize]),
                    1 => chain(1 + g.below(2_000) as usize),
                    _ => {
                        // The deepest chain allowed, its deepest record referred to again and again.
                        let deep = chain(REGISTRY_MAX_DEPTH - 1);
                        let refs: Vec<String> = (0..=g.below(400))
                            .map(|i| format!(r#"{{"name":"again{i}","type":"C{}"}}"#, REGISTRY_MAX_DEPTH - 2))
                            .collect();
                        format!("{},{}]}}", deep.strip_suffix("]}").unwrap_or(&deep), refs.join(","))
                    }
                };
                let _ = timed(&hostile);
            }
        }
        if cases > 2_000 {
            eprintln!("{cases} schemas: {derived} derived, {refused} refused at a limit; slowest {slowest:?}");
        }
        assert!(derived > cases / 2, "{derived}");
        assert!(slowest < std::time::Duration::from_secs(5), "{slowest:?}");
    }
}
