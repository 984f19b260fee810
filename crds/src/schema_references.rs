//! Schema references: a registry schema may name types defined under
//! other subjects (Confluent's `references`: `[{name, subject, version}]`
//! — a shared Avro record, a Protobuf `import`). Reading such a schema
//! takes the referenced schemas, and theirs in turn, each fetched by
//! subject and version.
//!
//! [`ReferenceWalk`] is the order and the bounds of those fetches, apart
//! from how they are made: the workers fetch with a blocking client, the
//! operator with an async one, and both walk the same way. A registry
//! anyone with write access fills decides how many references there are,
//! so the walk stops at [`MAX_REFERENCES`] schemas, [`MAX_REFERENCE_DEPTH`]
//! deep, and refuses a cycle.

/// The most schemas one schema's references may reach, all levels
/// together.
pub const MAX_REFERENCES: usize = 64;
/// How deep references may chain.
pub const MAX_REFERENCE_DEPTH: usize = 8;

/// One reference of a registry answer: the name the schema uses for it,
/// and where it is registered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SchemaReference {
    pub name: String,
    pub subject: String,
    pub version: u32,
}

impl SchemaReference {
    /// Where the reference is, for messages.
    pub fn describe(&self) -> String {
        format!("reference `{}` (subject {} version {})", self.name, self.subject, self.version)
    }
}

/// The `references` of a registry answer (JSON); entries without all of
/// name, subject and version are left out.
pub fn schema_references(answer: &serde_json::Value) -> Vec<SchemaReference> {
    let Some(list) = answer.get("references").and_then(serde_json::Value::as_array) else { return Vec::new() };
    list.iter()
        .filter_map(|r| {
            Some(SchemaReference {
                name: r.get("name")?.as_str()?.to_owned(),
                subject: r.get("subject")?.as_str()?.to_owned(),
                version: u32::try_from(r.get("version")?.as_u64()?).ok()?,
            })
        })
        .collect()
}

/// The fetches a schema's references take, in order: ask [`ReferenceWalk::next_fetch`]
/// for a reference to fetch, hand its text and its own references to
/// [`ReferenceWalk::fetched`], until `next_fetch` has none; then
/// [`ReferenceWalk::resolved`] is every referenced schema, `(name, text)`,
/// each after those it references.
#[derive(Debug, Default)]
pub struct ReferenceWalk {
    /// To visit: a reference, its depth, and its text once fetched (its
    /// own references then above it).
    stack: Vec<(SchemaReference, usize, Option<String>)>,
    /// Fetched, not yet resolved: a reference back to one is a cycle.
    open: Vec<String>,
    resolved: Vec<(String, String)>,
    /// The reference `next_fetch` gave out, and its depth.
    pending: Option<(SchemaReference, usize)>,
    fetched: usize,
}

impl ReferenceWalk {
    /// A walk of `top`, a schema's own references.
    pub fn new(top: Vec<SchemaReference>) -> Self {
        Self { stack: top.into_iter().rev().map(|r| (r, 1, None)).collect(), ..Self::default() }
    }

    /// The next reference to fetch; `None` when every one is resolved; an
    /// error naming the reference past a bound or in a cycle.
    pub fn next_fetch(&mut self) -> Result<Option<SchemaReference>, String> {
        while let Some((reference, depth, text)) = self.stack.pop() {
            if let Some(text) = text {
                self.open.retain(|n| *n != reference.name);
                self.resolved.push((reference.name, text));
                continue;
            }
            if self.resolved.iter().any(|(n, _)| *n == reference.name) {
                continue;
            }
            if self.open.contains(&reference.name) {
                return Err(format!("{}: the references form a cycle", reference.describe()));
            }
            if depth > MAX_REFERENCE_DEPTH {
                return Err(format!("{}: references chain more than {MAX_REFERENCE_DEPTH} deep", reference.describe()));
            }
            if self.fetched >= MAX_REFERENCES {
                return Err(format!("more than {MAX_REFERENCES} schema references"));
            }
            self.pending = Some((reference.clone(), depth));
            return Ok(Some(reference));
        }
        Ok(None)
    }

    /// What the registry holds for the reference `next_fetch` gave out: its
    /// text and its own references.
    pub fn fetched(&mut self, text: String, references: Vec<SchemaReference>) {
        let Some((reference, depth)) = self.pending.take() else { return };
        self.fetched += 1;
        self.open.push(reference.name.clone());
        self.stack.push((reference, depth, Some(text)));
        self.stack.extend(references.into_iter().rev().map(|r| (r, depth + 1, None)));
    }

    /// Every referenced schema, `(name, text)`, dependencies first.
    pub fn resolved(self) -> Vec<(String, String)> {
        self.resolved
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn r(name: &str) -> SchemaReference {
        SchemaReference { name: name.into(), subject: format!("{name}-value"), version: 1 }
    }

    /// Drives a walk over a registry of `(name → (text, its references))`.
    fn walk(top: Vec<SchemaReference>, registry: &dyn Fn(&str) -> Vec<SchemaReference>) -> Result<Vec<String>, String> {
        let mut walk = ReferenceWalk::new(top);
        let mut fetches = 0;
        while let Some(next) = walk.next_fetch()? {
            fetches += 1;
            assert!(fetches <= MAX_REFERENCES, "bounded");
            walk.fetched(format!("text of {}", next.name), registry(&next.name));
        }
        Ok(walk.resolved().into_iter().map(|(n, _)| n).collect())
    }

    #[test]
    fn references_resolve_dependencies_first_each_once() {
        // a → b, c; b → c; c → nothing
        let registry = |name: &str| match name {
            "a" => vec![r("b"), r("c")],
            "b" => vec![r("c")],
            _ => Vec::new(),
        };
        assert_eq!(walk(vec![r("a")], &registry).unwrap(), ["c", "b", "a"]);
        let json = serde_json::json!({"references": [{"name": "x", "subject": "s", "version": 3}, {"name": "bad"}]});
        assert_eq!(schema_references(&json), [SchemaReference { name: "x".into(), subject: "s".into(), version: 3 }]);
    }

    #[test]
    fn cycles_long_chains_and_floods_of_references_are_refused() {
        let cycle = |name: &str| if name == "a" { vec![r("b")] } else { vec![r("a")] };
        assert!(walk(vec![r("a")], &cycle).unwrap_err().contains("cycle"));
        let chain = |name: &str| vec![r(&format!("{name}x"))];
        assert!(walk(vec![r("a")], &chain).unwrap_err().contains("more than 8 deep"));
        let flood =
            |name: &str| if name == "root" { (0..100).map(|i| r(&format!("n{i}"))).collect() } else { Vec::new() };
        assert!(walk(vec![r("root")], &flood).unwrap_err().contains("more than 64 schema references"));
    }
}
