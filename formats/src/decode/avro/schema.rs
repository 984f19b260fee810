//! Avro schemas (the JSON form a Schema Registry serves) parsed into an
//! arena of types: a named type is defined once and referred to by index,
//! so recursive types (a linked list's `next`) need no special case.
//!
//! Written here rather than taken from `apache-avro`: schemas are parsed
//! once per writer schema, off the hot path, and the decoder needs only
//! the shape of each type — what the crate's `Schema` holds besides
//! (defaults, docs, fingerprints) and its dependencies are not worth their
//! build time on this path. Parsing follows the specification
//! (<https://avro.apache.org/docs/1.11.1/specification/>): primitive names,
//! records, enums, arrays, maps, unions, fixed, and the logical types
//! Sluice maps to columns; a logical type it does not know falls back to
//! its underlying type, as the specification says.

use std::collections::HashMap;

use serde_json::Value as Json;

/// Index of a type in [`Schema::types`].
pub type TypeId = usize;

/// A parsed schema: its types, and which is the root (after the types of
/// the schemas it references, which come first).
#[derive(Debug, Clone, PartialEq)]
pub struct Schema {
    pub types: Vec<Type>,
    root: TypeId,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Type {
    Null,
    Boolean,
    Int(Logical),
    Long(Logical),
    Float,
    Double,
    Bytes(Logical),
    String(Logical),
    Record { name: String, fields: Vec<Field> },
    Enum { name: String, symbols: Vec<String> },
    Array(TypeId),
    Map(TypeId),
    Union(Vec<TypeId>),
    Fixed { name: String, size: usize, logical: Logical },
}

#[derive(Debug, Clone, PartialEq)]
pub struct Field {
    pub name: String,
    pub ty: TypeId,
}

/// The logical types columns read differently from their underlying type.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Logical {
    #[default]
    None,
    /// `int` days since the epoch.
    Date,
    /// `long` milliseconds since the epoch (`timestamp-millis`,
    /// `local-timestamp-millis`).
    TimestampMillis,
    /// `long` microseconds since the epoch.
    TimestampMicros,
    /// `bytes` or `fixed`: a two's-complement big-endian unscaled integer.
    Decimal { scale: u32 },
    /// `string`.
    Uuid,
}

impl Type {
    /// The type's name as messages give it (`long`, `record Bid`, …).
    pub fn describe(&self) -> String {
        match self {
            Self::Null => "null".into(),
            Self::Boolean => "boolean".into(),
            Self::Int(Logical::Date) => "int (date)".into(),
            Self::Int(_) => "int".into(),
            Self::Long(Logical::TimestampMillis) => "long (timestamp-millis)".into(),
            Self::Long(Logical::TimestampMicros) => "long (timestamp-micros)".into(),
            Self::Long(_) => "long".into(),
            Self::Float => "float".into(),
            Self::Double => "double".into(),
            Self::Bytes(Logical::Decimal { .. }) => "bytes (decimal)".into(),
            Self::Bytes(_) => "bytes".into(),
            Self::String(_) => "string".into(),
            Self::Record { name, .. } => format!("record {name}"),
            Self::Enum { name, .. } => format!("enum {name}"),
            Self::Array(_) => "array".into(),
            Self::Map(_) => "map".into(),
            Self::Union(_) => "union".into(),
            Self::Fixed { name, .. } => format!("fixed {name}"),
        }
    }
}

/// Schemas nested deeper than this are refused: a schema comes from a
/// registry anyone with write access fills, and parsing recurses.
const MAX_DEPTH: usize = 64;

impl Schema {
    /// Parses a schema's JSON text.
    #[cfg(test)]
    pub fn parse(text: &str) -> Result<Self, String> {
        Self::parse_with(text, &[])
    }

    /// Parses a schema's JSON text whose named types may be defined in
    /// `references` (the registry's schema references: each `(name,
    /// text)`, every one after those it refers to), as Confluent's
    /// serializers resolve them.
    pub fn parse_with(text: &str, references: &[(String, String)]) -> Result<Self, String> {
        let mut parser = Parser { types: Vec::new(), named: HashMap::new() };
        for (name, reference) in references {
            let json: Json = serde_json::from_str(reference)
                .map_err(|e| format!("referenced schema `{name}` is not a JSON schema: {e}"))?;
            parser.parse(&json, None, 0).map_err(|e| format!("referenced schema `{name}`: {e}"))?;
        }
        let json: Json = serde_json::from_str(text).map_err(|e| format!("not a JSON schema: {e}"))?;
        let root = parser.parse(&json, None, 0)?;
        Ok(Self { types: parser.types, root })
    }

    pub fn root(&self) -> TypeId {
        self.root
    }
}

struct Parser {
    types: Vec<Type>,
    /// Full name → the type defined under it.
    named: HashMap<String, TypeId>,
}

impl Parser {
    fn add(&mut self, ty: Type) -> TypeId {
        self.types.push(ty);
        self.types.len() - 1
    }

    /// Parses `json` into a new type (or finds the named type it refers
    /// to); `namespace` is the enclosing one, for unqualified names.
    fn parse(&mut self, json: &Json, namespace: Option<&str>, depth: usize) -> Result<TypeId, String> {
        if depth > MAX_DEPTH {
            return Err(format!("the schema nests more than {MAX_DEPTH} levels"));
        }
        match json {
            Json::String(name) => self.named_or_primitive(name, namespace),
            Json::Array(branches) => {
                let at = self.add(Type::Null);
                let mut ids = Vec::with_capacity(branches.len());
                for b in branches {
                    let id = self.parse(b, namespace, depth + 1)?;
                    if matches!(self.types[id], Type::Union(_)) {
                        return Err("a union directly inside a union".into());
                    }
                    ids.push(id);
                }
                self.types[at] = Type::Union(ids);
                Ok(at)
            }
            Json::Object(o) => {
                let kind = o.get("type").ok_or("a schema object without `type`")?;
                let Json::String(kind) = kind else {
                    // {"type": {...}} or {"type": [...]}: the type itself.
                    return self.parse(kind, namespace, depth + 1);
                };
                let logical = o.get("logicalType").and_then(Json::as_str);
                match kind.as_str() {
                    "record" | "error" | "enum" | "fixed" => self.named_type(kind, o, namespace, depth),
                    "array" => {
                        let at = self.add(Type::Null);
                        let items =
                            self.parse(o.get("items").ok_or("an array without `items`")?, namespace, depth + 1)?;
                        self.types[at] = Type::Array(items);
                        Ok(at)
                    }
                    "map" => {
                        let at = self.add(Type::Null);
                        let values =
                            self.parse(o.get("values").ok_or("a map without `values`")?, namespace, depth + 1)?;
                        self.types[at] = Type::Map(values);
                        Ok(at)
                    }
                    primitive => {
                        let id = self.named_or_primitive(primitive, namespace)?;
                        let ty = match (&self.types[id], logical) {
                            (Type::Int(_), Some("date")) => Type::Int(Logical::Date),
                            (Type::Long(_), Some("timestamp-millis" | "local-timestamp-millis")) => {
                                Type::Long(Logical::TimestampMillis)
                            }
                            (Type::Long(_), Some("timestamp-micros" | "local-timestamp-micros")) => {
                                Type::Long(Logical::TimestampMicros)
                            }
                            (Type::Bytes(_), Some("decimal")) => Type::Bytes(decimal(o)?),
                            (Type::String(_), Some("uuid")) => Type::String(Logical::Uuid),
                            _ => return Ok(id),
                        };
                        Ok(self.add(ty))
                    }
                }
            }
            other => Err(format!("`{other}` is not a schema")),
        }
    }

    fn named_or_primitive(&mut self, name: &str, namespace: Option<&str>) -> Result<TypeId, String> {
        let ty = match name {
            "null" => Type::Null,
            "boolean" => Type::Boolean,
            "int" => Type::Int(Logical::None),
            "long" => Type::Long(Logical::None),
            "float" => Type::Float,
            "double" => Type::Double,
            "bytes" => Type::Bytes(Logical::None),
            "string" => Type::String(Logical::None),
            _ => {
                let full = full_name(name, namespace);
                return self
                    .named
                    .get(&full)
                    .or_else(|| self.named.get(name))
                    .copied()
                    .ok_or_else(|| format!("unknown type `{name}`"));
            }
        };
        Ok(self.add(ty))
    }

    fn named_type(
        &mut self,
        kind: &str,
        o: &serde_json::Map<String, Json>,
        namespace: Option<&str>,
        depth: usize,
    ) -> Result<TypeId, String> {
        let name = o.get("name").and_then(Json::as_str).ok_or_else(|| format!("a {kind} without `name`"))?;
        let namespace = o.get("namespace").and_then(Json::as_str).or(namespace);
        let full = full_name(name, namespace);
        // The name's own namespace for what it encloses (`a.b.C` → `a.b`).
        let inner = full.rsplit_once('.').map(|(ns, _)| ns.to_owned());
        let at = self.add(Type::Null);
        // Defined before its fields are parsed: a field may refer to it.
        if self.named.insert(full.clone(), at).is_some() {
            return Err(format!("type `{full}` is defined twice"));
        }
        self.types[at] = match kind {
            "enum" => {
                let symbols = o.get("symbols").and_then(Json::as_array).ok_or("an enum without `symbols`")?;
                let symbols = symbols
                    .iter()
                    .map(|s| s.as_str().map(str::to_owned).ok_or_else(|| "an enum symbol that is not a string".into()))
                    .collect::<Result<Vec<String>, String>>()?;
                Type::Enum { name: full, symbols }
            }
            "fixed" => {
                let size = o.get("size").and_then(Json::as_u64).ok_or("a fixed without `size`")?;
                let size = usize::try_from(size).map_err(|_| "a fixed size too large")?;
                let logical = match o.get("logicalType").and_then(Json::as_str) {
                    Some("decimal") => decimal(o)?,
                    _ => Logical::None,
                };
                Type::Fixed { name: full, size, logical }
            }
            _ => {
                let list = o.get("fields").and_then(Json::as_array).ok_or("a record without `fields`")?;
                let mut fields = Vec::with_capacity(list.len());
                for f in list {
                    let name = f.get("name").and_then(Json::as_str).ok_or("a record field without `name`")?;
                    let ty = f.get("type").ok_or_else(|| format!("field `{name}` without `type`"))?;
                    let ty = self.parse(ty, inner.as_deref(), depth + 1).map_err(|e| format!("field `{name}`: {e}"))?;
                    fields.push(Field { name: name.to_owned(), ty });
                }
                Type::Record { name: full, fields }
            }
        };
        Ok(at)
    }
}

fn full_name(name: &str, namespace: Option<&str>) -> String {
    match namespace {
        Some(ns) if !name.contains('.') && !ns.is_empty() => format!("{ns}.{name}"),
        _ => name.to_owned(),
    }
}

fn decimal(o: &serde_json::Map<String, Json>) -> Result<Logical, String> {
    let scale = o.get("scale").and_then(Json::as_u64).unwrap_or(0);
    let scale = u32::try_from(scale).ok().filter(|s| *s <= 38).ok_or("a decimal scale above 38")?;
    Ok(Logical::Decimal { scale })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_unions_named_references_and_logical_types_parse() {
        let s = Schema::parse(
            r#"{"type":"record","name":"Bid","namespace":"nexmark","fields":[
                {"name":"auction","type":"long"},
                {"name":"price","type":["null","double"]},
                {"name":"at","type":{"type":"long","logicalType":"timestamp-millis"}},
                {"name":"who","type":{"type":"record","name":"Person","fields":[{"name":"name","type":"string"}]}},
                {"name":"seller","type":"nexmark.Person"},
                {"name":"next","type":["null","Bid"]},
                {"name":"side","type":{"type":"enum","name":"Side","symbols":["BUY","SELL"]}}
            ]}"#,
        )
        .unwrap();
        let Type::Record { name, fields } = &s.types[s.root()] else { panic!("{s:?}") };
        assert_eq!(name, "nexmark.Bid");
        let names: Vec<&str> = fields.iter().map(|f| f.name.as_str()).collect();
        assert_eq!(names, ["auction", "price", "at", "who", "seller", "next", "side"]);
        assert_eq!(s.types[fields[2].ty], Type::Long(Logical::TimestampMillis));
        assert_eq!(fields[3].ty, fields[4].ty, "a named type is referred to, not copied");
        let Type::Union(next) = &s.types[fields[5].ty] else { panic!() };
        assert_eq!(next[1], s.root(), "a record may refer to itself");
    }

    #[test]
    fn malformed_schemas_say_what_is_wrong() {
        for (text, why) in [
            ("{", "not a JSON schema"),
            (r#"{"type":"record","name":"R"}"#, "without `fields`"),
            (r#"{"type":"record","name":"R","fields":[{"name":"a","type":"Nope"}]}"#, "field `a`: unknown type `Nope`"),
            (r#"[["int"]]"#, "union directly inside a union"),
            (r#"{"type":"enum","name":"E","symbols":[1]}"#, "not a string"),
            (&format!("{}\"int\"{}", "[".repeat(100), "]".repeat(100)), "more than 64 levels"),
            (
                &format!("{}\"int\"{}", r#"{"type":"array","items":"#.repeat(100), "}".repeat(100)),
                "more than 64 levels",
            ),
        ] {
            let e = Schema::parse(text).unwrap_err();
            assert!(e.contains(why), "{text}: {e}");
        }
    }
}
