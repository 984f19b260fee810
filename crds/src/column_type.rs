//! The column types a manifest spells: the scalars, and the nested
//! `array<T>`, `map<K, V>` and `row<name T, …>` (Flink's `ARRAY`, `MAP` and
//! `ROW`), nesting to any depth the limits below allow.
//!
//! A manifest is written by a tenant and read by the shared operator, so
//! the grammar is bounded: [`MAX_TYPE_TEXT`] bytes of text and
//! [`MAX_TYPE_DEPTH`] levels of nesting, refused with the reason beyond
//! them, never a stack overflow.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// SQL column types. `timestamp` accepts epoch milliseconds or RFC 3339
/// strings; `decimal(p,s)` is exact, with `p` (1–38) digits of which `s`
/// after the point.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum ColumnType {
    Bigint,
    Double,
    String,
    Boolean,
    Timestamp,
    Decimal {
        precision: u8,
        scale: u8,
    },
    /// `array<T>`: a list of values of one type (JSON array, Avro
    /// `array`, Protobuf `repeated`).
    Array(Box<ColumnType>),
    /// `map<K, V>`, `K` a `string` or `bigint` (JSON object, Avro `map`,
    /// Protobuf `map`).
    Map(Box<ColumnType>, Box<ColumnType>),
    /// `row<name T, …>`: named fields (JSON object, Avro `record`,
    /// Protobuf message).
    Row(Vec<(String, ColumnType)>),
}

/// The most digits a `decimal` column holds.
pub const DECIMAL_MAX_PRECISION: u8 = 38;

/// The longest type text a manifest may give.
pub const MAX_TYPE_TEXT: usize = 4096;

/// The most levels of `array`/`map`/`row` one type nests.
pub const MAX_TYPE_DEPTH: usize = 32;

const SCALARS: &str = "bigint, double, string, boolean, timestamp, decimal(p,s), array<T>, map<K, V> or row<name T, …>";

impl ColumnType {
    /// The name manifests spell: `bigint`, `decimal(12,2)`,
    /// `array<row<sku string, qty bigint>>`.
    pub fn name(&self) -> std::borrow::Cow<'static, str> {
        std::borrow::Cow::Borrowed(match self {
            Self::Bigint => "bigint",
            Self::Double => "double",
            Self::String => "string",
            Self::Boolean => "boolean",
            Self::Timestamp => "timestamp",
            Self::Decimal { precision, scale } => return format!("decimal({precision},{scale})").into(),
            Self::Array(t) => return format!("array<{}>", t.name()).into(),
            Self::Map(k, v) => return format!("map<{}, {}>", k.name(), v.name()).into(),
            Self::Row(fields) => {
                let fields: Vec<String> =
                    fields.iter().map(|(n, t)| format!("{} {}", field_name(n), t.name())).collect();
                return format!("row<{}>", fields.join(", ")).into();
            }
        })
    }

    /// Whether this is an `array`, `map` or `row`.
    pub fn is_nested(&self) -> bool {
        matches!(self, Self::Array(_) | Self::Map(..) | Self::Row(_))
    }

    /// Reads a manifest's type name (lower case, as the CRD's pattern has it;
    /// spaces allowed between the parts), saying what is wrong otherwise.
    pub fn parse(text: &str) -> Result<Self, String> {
        if text.len() > MAX_TYPE_TEXT {
            return Err(format!("a column type of {} bytes: at most {MAX_TYPE_TEXT}", text.len()));
        }
        let mut p = Parser { text, at: 0 };
        let t = p.parse(0).map_err(|e| format!("column type `{text}`: {e}"))?;
        p.skip_space();
        if p.at < text.len() {
            return Err(format!("column type `{text}`: unexpected `{}` after the type", &text[p.at..]));
        }
        Ok(t)
    }
}

/// A row field's name as a type's text gives it: bare when it is an
/// identifier, double-quoted otherwise.
pub fn field_name(name: &str) -> String {
    let bare = name.chars().next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
    if bare { name.to_owned() } else { format!("\"{}\"", name.replace('"', "\"\"")) }
}

struct Parser<'a> {
    text: &'a str,
    at: usize,
}

impl Parser<'_> {
    fn rest(&self) -> &str {
        &self.text[self.at..]
    }

    fn skip_space(&mut self) {
        let rest = self.rest();
        self.at += rest.len() - rest.trim_start().len();
    }

    fn eat(&mut self, token: &str) -> bool {
        self.skip_space();
        if self.rest().starts_with(token) {
            self.at += token.len();
            true
        } else {
            false
        }
    }

    fn expect(&mut self, token: &str, what: &str) -> Result<(), String> {
        if self.eat(token) {
            return Ok(());
        }
        let found = self.rest().chars().next().map_or("the end".to_owned(), |c| format!("`{c}`"));
        Err(format!("expected `{token}` {what}, found {found}"))
    }

    /// An identifier: a type keyword or a bare field name.
    fn word(&mut self) -> &str {
        self.skip_space();
        let rest = self.rest();
        let len = rest.find(|c: char| !(c.is_ascii_alphanumeric() || c == '_')).unwrap_or(rest.len());
        let start = self.at;
        self.at += len;
        &self.text[start..self.at]
    }

    fn parse(&mut self, depth: usize) -> Result<ColumnType, String> {
        if depth > MAX_TYPE_DEPTH {
            return Err(format!("nests more than {MAX_TYPE_DEPTH} levels"));
        }
        let word = self.word().to_owned();
        Ok(match word.as_str() {
            "bigint" => ColumnType::Bigint,
            "double" => ColumnType::Double,
            "string" => ColumnType::String,
            "boolean" => ColumnType::Boolean,
            "timestamp" => ColumnType::Timestamp,
            "decimal" => self.decimal()?,
            "array" => {
                self.expect("<", "after array")?;
                let t = self.parse(depth + 1)?;
                self.expect(">", "closing array<…>")?;
                ColumnType::Array(Box::new(t))
            }
            "map" => {
                self.expect("<", "after map")?;
                let k = self.parse(depth + 1)?;
                if !matches!(k, ColumnType::String | ColumnType::Bigint) {
                    return Err(format!("a map's keys are string or bigint, not {}", k.name()));
                }
                self.expect(",", "between a map's key and value types")?;
                let v = self.parse(depth + 1)?;
                self.expect(">", "closing map<…>")?;
                ColumnType::Map(Box::new(k), Box::new(v))
            }
            "row" => self.row(depth)?,
            "" => {
                let found = self.rest().chars().next().map_or("nothing".to_owned(), |c| format!("`{c}`"));
                return Err(format!("expected a type ({SCALARS}), found {found}"));
            }
            other => return Err(format!("unknown type `{other}`: expected {SCALARS}")),
        })
    }

    fn decimal(&mut self) -> Result<ColumnType, String> {
        const RULE: &str = "a decimal's precision is 1 to 38 digits and its scale 0 to the precision, as in \
                            decimal(12,2) (wider decimals: use double or string)";
        self.expect("(", "after decimal")?;
        let digits = |p: &mut Self| -> Result<u8, String> {
            let w = p.word();
            w.parse::<u8>().map_err(|_| RULE.to_owned())
        };
        let precision = digits(self)?;
        let scale = if self.eat(",") { digits(self)? } else { 0 };
        self.expect(")", "closing decimal(…)")?;
        if !(1..=DECIMAL_MAX_PRECISION).contains(&precision) || scale > precision {
            return Err(RULE.to_owned());
        }
        Ok(ColumnType::Decimal { precision, scale })
    }

    fn row(&mut self, depth: usize) -> Result<ColumnType, String> {
        self.expect("<", "after row")?;
        let mut fields: Vec<(String, ColumnType)> = Vec::new();
        loop {
            let name = self.field_name()?;
            if fields.iter().any(|(n, _)| n.eq_ignore_ascii_case(&name)) {
                return Err(format!("row field `{name}` is declared twice"));
            }
            let t = self.parse(depth + 1)?;
            fields.push((name, t));
            if !self.eat(",") {
                break;
            }
        }
        self.expect(">", "closing row<…>")?;
        Ok(ColumnType::Row(fields))
    }

    fn field_name(&mut self) -> Result<String, String> {
        self.skip_space();
        if self.eat("\"") {
            let mut name = String::new();
            loop {
                let Some(c) = self.rest().chars().next() else {
                    return Err("a quoted field name is not closed".to_owned());
                };
                self.at += c.len_utf8();
                if c == '"' {
                    if self.rest().starts_with('"') {
                        self.at += 1;
                    } else {
                        break;
                    }
                }
                name.push(c);
            }
            if name.is_empty() {
                return Err("an empty field name".to_owned());
            }
            return Ok(name);
        }
        let w = self.word();
        if w.is_empty() || w.starts_with(|c: char| c.is_ascii_digit()) {
            let found = self.rest().chars().next().map_or("the end".to_owned(), |c| format!("`{c}`"));
            return Err(format!("expected a row field's name (`row<name type, …>`), found {found}"));
        }
        Ok(w.to_owned())
    }
}

impl Serialize for ColumnType {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.name())
    }
}

impl<'de> Deserialize<'de> for ColumnType {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        Self::parse(&text).map_err(serde::de::Error::custom)
    }
}

impl JsonSchema for ColumnType {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "ColumnType".into()
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({
            "description": "bigint, double, string, boolean, timestamp, decimal(p,s) with p from 1 to 38 and s from 0 to p, or a nested array<T>, map<K, V> (K string or bigint) or row<name T, …>.",
            "type": "string",
            "maxLength": MAX_TYPE_TEXT,
            "pattern": r"^(bigint|double|string|boolean|timestamp|decimal\( *([1-9]|[12][0-9]|3[0-8]) *(, *([0-9]|[12][0-9]|3[0-8]) *)?\)|(array|map|row) *<.*>)$",
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nested_types_read_and_print_back() {
        for (text, printed) in [
            ("array<bigint>", "array<bigint>"),
            ("map< string ,double>", "map<string, double>"),
            (
                "array<row<sku string, qty bigint, price decimal(9, 2)>>",
                "array<row<sku string, qty bigint, price decimal(9,2)>>",
            ),
            (
                "row<\"line item\" row<a array<map<bigint, string>>>>",
                "row<\"line item\" row<a array<map<bigint, string>>>>",
            ),
        ] {
            let t = ColumnType::parse(text).unwrap();
            assert_eq!(t.name(), printed);
            assert_eq!(ColumnType::parse(&t.name()).unwrap(), t);
        }
    }

    #[test]
    fn wrong_types_say_what_is_wrong() {
        for (text, says) in [
            ("array<>", "expected a type"),
            ("array<bigint", "expected `>` closing array"),
            ("map<double, string>", "a map's keys are string or bigint"),
            ("row<a bigint, A string>", "declared twice"),
            ("row<>", "expected a row field's name"),
            ("list<bigint>", "unknown type `list`"),
            ("decimal(40,2)", "precision is 1 to 38"),
            ("array<bigint> x", "unexpected `x`"),
            ("row<\"a bigint>", "not closed"),
        ] {
            let e = ColumnType::parse(text).unwrap_err();
            assert!(e.contains(says), "{text}: {e}");
        }
    }

    #[test]
    fn hostile_depth_and_length_are_refused_without_recursing_past_the_limit() {
        let deep = format!("{}bigint{}", "array<".repeat(10_000), ">".repeat(10_000));
        assert!(ColumnType::parse(&deep).unwrap_err().contains("at most 4096"));
        let deep = format!("{}bigint{}", "array<".repeat(40), ">".repeat(40));
        assert!(ColumnType::parse(&deep).unwrap_err().contains("more than 32 levels"));
        let ok = format!("{}bigint{}", "array<".repeat(32), ">".repeat(32));
        assert!(ColumnType::parse(&ok).is_ok());
    }
}
