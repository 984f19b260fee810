//! JSON_VALUE: its path language (the `$.a.b[0]` subset of SQL/JSON paths)
//! and the walk that finds one value in a JSON text.
//!
//! The walk reads the text once with serde_json's streaming deserializer
//! and builds nothing: the members and elements off the path are skipped
//! (`IgnoredAny`), keys are compared where they lie, and the scalar found is
//! written straight into the output column's buffer. A `serde_json::Value`
//! per row would allocate the whole document for every record.

use std::fmt;

use serde::de::{self, DeserializeSeed, IgnoredAny, MapAccess, SeqAccess, Visitor};

use crate::JsonStep;

/// Parses a JSON_VALUE path: `$`, then steps `.name`, `."quoted name"`,
/// `['name']` and `[n]`. An optional leading `lax` (SQL/JSON's default
/// mode) is accepted; `strict`, wildcards, filters and `last` are not.
pub fn parse_json_path(path: &str) -> Result<Vec<JsonStep>, String> {
    let p = path.trim();
    let p = p.strip_prefix("lax").filter(|r| r.starts_with([' ', '$'])).map_or(p, str::trim_start);
    if p.starts_with("strict") {
        return Err("strict mode is not supported (paths are lax)".into());
    }
    let mut rest = p.strip_prefix('$').ok_or("a path starts with $")?;
    let mut steps = Vec::new();
    while !rest.is_empty() {
        if let Some(r) = rest.strip_prefix('.') {
            if let Some(q) = r.strip_prefix('"') {
                let end = q.find('"').ok_or("unterminated quoted name")?;
                steps.push(JsonStep::Field(q[..end].to_owned()));
                rest = &q[end + 1..];
            } else {
                let end = r.find(['.', '[']).unwrap_or(r.len());
                let name = &r[..end];
                if name.is_empty() || name.contains(['*', ' ', '(', '?']) {
                    return Err(format!("expected a member name after '.', got {:?}", &r[..end]));
                }
                steps.push(JsonStep::Field(name.to_owned()));
                rest = &r[end..];
            }
        } else if let Some(r) = rest.strip_prefix('[') {
            let end = r.find(']').ok_or("unterminated [")?;
            let inner = r[..end].trim();
            let quoted = ['\'', '"'].iter().find_map(|q| inner.strip_prefix(*q)?.strip_suffix(*q));
            steps.push(match quoted {
                Some(name) => JsonStep::Field(name.to_owned()),
                None => JsonStep::Index(
                    inner.parse().map_err(|_| format!("expected [n] with n a number from 0, got [{inner}]"))?,
                ),
            });
            rest = &r[end + 1..];
        } else {
            return Err(format!("expected '.' or '[' at {rest:?}"));
        }
    }
    Ok(steps)
}

/// JSON_QUERY: the object or array at `path` in `doc`, written to `out`
/// as compact JSON (its text as written, whitespace outside strings
/// dropped); false (NULL) where `doc` is not JSON, the path leads nowhere
/// or to a scalar. Each step reads only the value it enters, keeping the
/// others as raw text.
pub(crate) fn json_query(doc: &str, path: &[JsonStep], out: &mut String) -> bool {
    use serde_json::value::RawValue;
    let Ok(mut at) = serde_json::from_str::<&RawValue>(doc) else { return false };
    for step in path {
        let next = match step {
            JsonStep::Field(name) => serde_json::from_str::<std::collections::HashMap<String, &RawValue>>(at.get())
                .ok()
                .and_then(|members| members.get(name).copied()),
            JsonStep::Index(i) => serde_json::from_str::<Vec<&RawValue>>(at.get())
                .ok()
                .and_then(|items| usize::try_from(*i).ok().and_then(|i| items.get(i).copied())),
        };
        match next {
            Some(v) => at = v,
            None => return false,
        }
    }
    let text = at.get().trim_start();
    if !text.starts_with(['{', '[']) {
        return false;
    }
    let (mut in_string, mut escaped) = (false, false);
    for c in text.chars() {
        match c {
            _ if escaped => escaped = false,
            '\\' if in_string => escaped = true,
            '"' => in_string = !in_string,
            ' ' | '\n' | '\r' | '\t' if !in_string => continue,
            _ => {}
        }
        out.push(c);
    }
    true
}

/// Writes the scalar at `path` in the JSON text `doc` to `out` (strings
/// unquoted, numbers and booleans as JSON writes them) and returns true;
/// false where there is none (see [`crate::ScalarFunc::JsonValue`]), having
/// perhaps written part of one: the caller takes that back.
pub(crate) fn json_value(doc: &str, path: &[JsonStep], out: &mut String) -> bool {
    let mut de = serde_json::Deserializer::from_str(doc);
    matches!(Walk { path, out }.deserialize(&mut de), Ok(true)) && de.end().is_ok()
}

/// Follows `path` down the value being read; every value is read to its end
/// (the deserializer checks the text's syntax as it goes).
struct Walk<'p, 'o> {
    path: &'p [JsonStep],
    out: &'o mut String,
}

impl Walk<'_, '_> {
    fn scalar(self, text: &str) -> bool {
        let at_end = self.path.is_empty();
        if at_end {
            self.out.push_str(text);
        }
        at_end
    }
}

impl<'de> DeserializeSeed<'de> for Walk<'_, '_> {
    type Value = bool;

    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<bool, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Walk<'_, '_> {
    type Value = bool;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_bool<E: de::Error>(self, v: bool) -> Result<bool, E> {
        Ok(self.scalar(if v { "true" } else { "false" }))
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<bool, E> {
        Ok(self.scalar(itoa::Buffer::new().format(v)))
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<bool, E> {
        Ok(self.scalar(itoa::Buffer::new().format(v)))
    }

    fn visit_f64<E: de::Error>(self, v: f64) -> Result<bool, E> {
        Ok(self.scalar(ryu::Buffer::new().format(v)))
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<bool, E> {
        Ok(self.scalar(v))
    }

    /// A JSON null is SQL NULL.
    fn visit_unit<E: de::Error>(self) -> Result<bool, E> {
        Ok(false)
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<bool, A::Error> {
        let Walk { path, out } = self;
        let mut found = None;
        match path.split_first() {
            Some((JsonStep::Field(name), rest)) => {
                while let Some(is_name) = map.next_key_seed(KeyIs(name))? {
                    // A repeated name: the first one counts.
                    if is_name && found.is_none() {
                        found = Some(map.next_value_seed(Walk { path: rest, out: &mut *out })?);
                    } else {
                        map.next_value::<IgnoredAny>()?;
                    }
                }
            }
            _ => while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {},
        }
        Ok(found == Some(true))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<bool, A::Error> {
        let Walk { path, out } = self;
        let mut found = false;
        if let Some((&JsonStep::Index(wanted), rest)) = path.split_first() {
            let mut index = 0u64;
            while index < wanted {
                if seq.next_element::<IgnoredAny>()?.is_none() {
                    return Ok(false);
                }
                index += 1;
            }
            found = seq.next_element_seed(Walk { path: rest, out })? == Some(true);
        }
        while seq.next_element::<IgnoredAny>()?.is_some() {}
        Ok(found)
    }
}

/// Reads an object's key and says whether it is `self.0`, without keeping it.
struct KeyIs<'k>(&'k str);

impl<'de> DeserializeSeed<'de> for KeyIs<'_> {
    type Value = bool;

    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<bool, D::Error> {
        d.deserialize_str(self)
    }
}

impl<'de> Visitor<'de> for KeyIs<'_> {
    type Value = bool;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an object key")
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<bool, E> {
        Ok(v == self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use JsonStep::{Field, Index};

    fn value(doc: &str, path: &str) -> Option<String> {
        let steps = parse_json_path(path).unwrap();
        let mut out = String::new();
        json_value(doc, &steps, &mut out).then_some(out)
    }

    #[test]
    fn paths_parse_to_steps() {
        assert_eq!(parse_json_path("$"), Ok(vec![]));
        assert_eq!(parse_json_path("$.a.b"), Ok(vec![Field("a".into()), Field("b".into())]));
        assert_eq!(parse_json_path("lax $.a[0]"), Ok(vec![Field("a".into()), Index(0)]));
        assert_eq!(
            parse_json_path("$['x y'].\"z.w\"[12]"),
            Ok(vec![Field("x y".into()), Field("z.w".into()), Index(12)])
        );
        for bad in ["", "a.b", "$.", "$.a[", "$.a[-1]", "$.a[*]", "$.*", "strict $.a", "$a", "$.a[last]"] {
            assert!(parse_json_path(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn finds_scalars_and_nothing_else() {
        let doc =
            r#"{"a": {"b": "x\"y", "n": 12, "f": 1.5, "t": true, "z": null, "o": {}}, "l": [10, {"k": "é"}, [1]]}"#;
        assert_eq!(value(doc, "$.a.b"), Some("x\"y".into()));
        assert_eq!(value(doc, "$.a.n"), Some("12".into()));
        assert_eq!(value(doc, "$.a.f"), Some("1.5".into()));
        assert_eq!(value(doc, "$.a.t"), Some("true".into()));
        assert_eq!(value(doc, "$.l[0]"), Some("10".into()));
        assert_eq!(value(doc, "$.l[1].k"), Some("é".into()));
        assert_eq!(value(doc, "$['l'][2][0]"), Some("1".into()));
        // Not scalars, JSON null, absent, or the wrong kind of step.
        for path in ["$", "$.a", "$.a.o", "$.l", "$.a.z", "$.a.missing", "$.l[3]", "$.a[0]", "$.l.k", "$.a.b.c"] {
            assert_eq!(value(doc, path), None, "{path}");
        }
        assert_eq!(value("\"top\"", "$"), Some("top".into()));
        assert_eq!(value(r#"{"a": 1, "a": 2}"#, "$.a"), Some("1".into()), "the first of repeated names");
        assert_eq!(value(r#"{"k\u00e9": 3}"#, "$.ké"), Some("3".into()), "escaped keys compare unescaped");
    }

    #[test]
    fn text_that_is_not_json_is_null() {
        for doc in ["", "{", r#"{"a": 1"#, r#"{"a": 1} x"#, "nope", r#"{"a": 1, "b": }"#] {
            assert_eq!(value(doc, "$.a"), None, "{doc}");
        }
    }
}
