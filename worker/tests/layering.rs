//! The crate graph and the module graph, checked from the top of the stack.
//!
//! Cargo already refuses a crate cycle; this pins *which* arrows exist, so
//! that a new dependency against the data path (the engine reaching for a
//! codec, the operator for the engine, the contract for a Kubernetes
//! client) fails here instead of being noticed in review. Within every
//! crate, no two files may import each other.

// Test code: failing loudly is its job.
#![allow(clippy::panic, clippy::expect_used, clippy::unwrap_used)]

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf()
}

/// The `[dependencies]` table of a crate's manifest: name → the line.
fn dependencies(dir: &str) -> BTreeMap<String, String> {
    let text = std::fs::read_to_string(workspace().join(dir).join("Cargo.toml")).unwrap();
    let mut in_deps = false;
    let mut out = BTreeMap::new();
    for line in text.lines() {
        let line = line.trim();
        if line.starts_with('[') {
            in_deps = line == "[dependencies]";
            continue;
        }
        if in_deps && !line.is_empty() && !line.starts_with('#') {
            let name = line.split(['=', '.', ' ']).next().unwrap().to_owned();
            out.insert(name, line.to_owned());
        }
    }
    out
}

#[test]
fn crates_depend_only_on_those_below_them_on_the_data_path() {
    let allowed: &[(&str, &[&str])] = &[
        ("crds", &[]),
        ("plan", &["sluice-crds"]),
        ("sql", &["sluice-crds", "sluice-plan"]),
        ("engine", &["sluice-crds", "sluice-plan"]),
        ("formats", &["sluice-crds", "sluice-plan"]),
        ("worker", &["sluice-crds", "sluice-engine", "sluice-formats", "sluice-plan", "sluice-sql"]),
        // The operator derives a registry subject's columns with the
        // formats' schema compilers, the same function the workers use.
        ("operator", &["sluice-crds", "sluice-formats", "sluice-plan", "sluice-sql"]),
    ];
    for (dir, expected) in allowed {
        let deps = dependencies(dir);
        let sluice: Vec<&str> = deps.keys().map(String::as_str).filter(|d| d.starts_with("sluice-")).collect();
        assert_eq!(&sluice, expected, "{dir}/Cargo.toml: Sluice crates it depends on");
        // Kafka, async runtimes and HTTP belong to the runtime and the operator.
        if !matches!(*dir, "worker" | "operator") {
            for heavy in ["rdkafka", "tokio", "axum", "prometheus"] {
                assert!(!deps.contains_key(heavy), "{dir} depends on {heavy}");
            }
        }
    }
    // The contract uses kube for its derives only, so that every crate
    // above it does not compile a Kubernetes client.
    let kube = &dependencies("crds")["kube"];
    assert!(kube.contains(r#"features = ["derive"]"#), "crds: {kube}");
}

/// Every `.rs` file under `src`, by module path (`a::b` for `a/b.rs` or
/// `a/b/mod.rs`; "" for `lib.rs` / `main.rs`).
fn modules(src: &Path) -> BTreeMap<String, PathBuf> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        for e in std::fs::read_dir(dir).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                walk(&p, out);
            } else if p.extension().is_some_and(|x| x == "rs") {
                out.push(p);
            }
        }
    }
    let mut files = Vec::new();
    walk(src, &mut files);
    files
        .into_iter()
        .filter_map(|f| {
            let rel = f.strip_prefix(src).unwrap().with_extension("");
            let mut parts: Vec<String> = rel.iter().map(|c| c.to_string_lossy().into_owned()).collect();
            if matches!(parts.last().map(String::as_str), Some("mod" | "lib" | "main")) {
                parts.pop();
            }
            // Binaries' own trees (src/bin) are not the library's modules.
            (parts.first().map(String::as_str) != Some("bin")).then(|| (parts.join("::"), f))
        })
        .collect()
}

/// The text of a file as the compiler reads its paths: comments and string
/// and character literals blanked, and `#[cfg(test)]` modules removed (their
/// `super` is the file itself, and tests may reach anywhere).
fn code(text: &str) -> String {
    let chars: Vec<char> = text.chars().collect();
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        let next = chars.get(i + 1).copied();
        if c == '/' && next == Some('/') {
            while i < chars.len() && chars[i] != '\n' {
                i += 1;
            }
        } else if c == '/' && next == Some('*') {
            let mut depth = 0;
            while i < chars.len() {
                if chars[i] == '/' && chars.get(i + 1) == Some(&'*') {
                    depth += 1;
                    i += 2;
                } else if chars[i] == '*' && chars.get(i + 1) == Some(&'/') {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    i += 1;
                }
            }
            out.push(' ');
        } else if c == 'r' && (next == Some('"') || next == Some('#')) && !ident_char(out.chars().last()) {
            // A raw string: r"…", r#"…"#.
            let mut j = i + 1;
            let mut hashes = 0;
            while chars.get(j) == Some(&'#') {
                hashes += 1;
                j += 1;
            }
            if chars.get(j) != Some(&'"') {
                out.push(c);
                i += 1;
                continue;
            }
            j += 1;
            while j < chars.len() && !(chars[j] == '"' && (0..hashes).all(|h| chars.get(j + 1 + h) == Some(&'#'))) {
                j += 1;
            }
            i = j + 1 + hashes;
            out.push_str("\"\"");
        } else if c == '"' {
            i += 1;
            while i < chars.len() && chars[i] != '"' {
                i += if chars[i] == '\\' { 2 } else { 1 };
            }
            i += 1;
            out.push_str("\"\"");
        } else if c == '\'' && (next == Some('\\') || chars.get(i + 2) == Some(&'\'')) {
            // A character literal, not a lifetime.
            i += 1;
            while i < chars.len() && chars[i] != '\'' {
                i += if chars[i] == '\\' { 2 } else { 1 };
            }
            i += 1;
            out.push_str("' '");
        } else {
            out.push(c);
            i += 1;
        }
    }
    // Drop `#[cfg(test)] mod name { … }` (strings and comments are gone, so
    // braces balance).
    let mut kept = String::with_capacity(out.len());
    let mut rest = out.as_str();
    while let Some(at) = rest.find("#[cfg(test)]") {
        kept.push_str(&rest[..at]);
        let after = rest[at + "#[cfg(test)]".len()..].trim_start();
        // Whatever its visibility: `pub(crate)`, `pub(in crate::x)`.
        let after = match after.strip_prefix("pub") {
            Some(v) if v.trim_start().starts_with('(') => {
                let v = v.trim_start();
                v[v.find(')').map_or(0, |e| e + 1)..].trim_start()
            }
            Some(v) => v.trim_start(),
            None => after,
        };
        if let Some(m) = after.strip_prefix("mod ")
            && let Some(open) = m.find(['{', ';'])
            && m[..open].trim().chars().all(|c| c.is_alphanumeric() || c == '_')
        {
            let body = &m[open..];
            if let Some(after) = body.strip_prefix(';') {
                rest = after;
                continue;
            }
            let mut depth = 0;
            let mut end = body.len();
            for (k, ch) in body.char_indices() {
                match ch {
                    '{' => depth += 1,
                    '}' => {
                        depth -= 1;
                        if depth == 0 {
                            end = k + 1;
                            break;
                        }
                    }
                    _ => {}
                }
            }
            rest = &body[end..];
        } else {
            rest = &rest[at + 1..];
        }
    }
    kept.push_str(rest);
    kept
}

fn ident_char(c: Option<char>) -> bool {
    c.is_some_and(|c| c.is_alphanumeric() || c == '_')
}

/// Expands a use tree (`a::{b, c::{d, e as f}, self}`) into its paths, each
/// with the name it binds.
fn expand(tree: &str, prefix: &str, out: &mut Vec<(String, String)>) {
    let tree = tree.trim();
    if let Some(open) = tree.find('{') {
        let head = tree[..open].trim().trim_end_matches("::");
        let inner = &tree[open + 1..tree.rfind('}').unwrap_or(tree.len())];
        let prefix = join(prefix, head);
        let mut depth = 0;
        let mut start = 0;
        for (k, ch) in inner.char_indices() {
            match ch {
                '{' => depth += 1,
                '}' => depth -= 1,
                ',' if depth == 0 => {
                    expand(&inner[start..k], &prefix, out);
                    start = k + 1;
                }
                _ => {}
            }
        }
        expand(&inner[start..], &prefix, out);
    } else if !tree.is_empty() {
        let (path, alias) = match tree.split_once(" as ") {
            Some((p, a)) => (p.trim(), Some(a.trim())),
            None => (tree, None),
        };
        let full = join(prefix, path);
        let full = full.strip_suffix("::self").unwrap_or(&full).to_owned();
        let name = alias.unwrap_or_else(|| full.rsplit("::").next().unwrap_or_default()).to_owned();
        out.push((full, name));
    }
}

fn join(prefix: &str, path: &str) -> String {
    match (prefix.is_empty(), path.is_empty()) {
        (true, _) => path.to_owned(),
        (_, true) => prefix.to_owned(),
        _ => format!("{prefix}::{path}"),
    }
}

/// Every path a module's code names: those of its `use` declarations (with
/// the names they bind) and those written inline (`super::x::f(…)`).
struct Paths {
    uses: Vec<(String, String)>,
    /// Which of `uses` are re-exports (`pub use`, `pub(crate) use`).
    exported: Vec<bool>,
    inline: Vec<String>,
    /// Every identifier the code names outside its `use` declarations.
    names: BTreeSet<String>,
}

fn paths(code: &str) -> Paths {
    let mut uses = Vec::new();
    let mut exported = Vec::new();
    let mut inline = Vec::new();
    let mut names = BTreeSet::new();
    let bytes = code.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        let boundary =
            i == 0 || !(bytes[i - 1].is_ascii_alphanumeric() || bytes[i - 1] == b'_' || bytes[i - 1] == b':');
        if boundary && code[i..].starts_with("use ") {
            let end = code[i..].find(';').map_or(code.len(), |e| i + e);
            expand(&code[i + 4..end].split_whitespace().collect::<Vec<_>>().join(" "), "", &mut uses);
            let head = code[..i].rsplit(['\n', ';', '}', '{']).next().unwrap_or_default();
            exported.resize(uses.len(), head.trim_start().starts_with("pub"));
            i = end;
            continue;
        }
        if boundary && (bytes[i].is_ascii_alphabetic() || bytes[i] == b'_') {
            let mut j = i;
            while j < bytes.len() && (bytes[j].is_ascii_alphanumeric() || bytes[j] == b'_' || bytes[j] == b':') {
                j += 1;
            }
            let path = code[i..j].trim_end_matches(':');
            // `pub(in crate::x)` names where an item is seen, not what it
            // uses.
            let visibility = code[..i].trim_end().ends_with("pub(in");
            if path.contains("::") && !visibility {
                inline.push(path.to_owned());
            }
            names.insert(path.split("::").next().unwrap_or_default().to_owned());
            i = j;
            continue;
        }
        i += 1;
    }
    Paths { uses, exported, inline, names }
}

/// The module a path written in `from` refers to, and the segments after
/// it: the longest known module that prefixes it, after resolving
/// `crate::`, `super::`, `self::` and child names. `None` for a path that
/// leaves the crate (`std::…`, another crate, a type's `Self::…`).
fn target<'p>(from: &str, path: &'p str, known: &BTreeMap<String, PathBuf>) -> Option<(String, Vec<&'p str>)> {
    let mut segments: Vec<&str> = path.split("::").collect();
    let mut base: Vec<&str> = if from.is_empty() { Vec::new() } else { from.split("::").collect() };
    match segments.first().copied() {
        Some("crate") => {
            base.clear();
            segments.remove(0);
        }
        Some("super") => {
            while segments.first() == Some(&"super") {
                base.pop();
                segments.remove(0);
            }
        }
        Some("self") => {
            segments.remove(0);
        }
        Some(first) if known.contains_key(&join(from, first)) => {}
        _ => return None,
    }
    let full: Vec<&str> = base.iter().chain(segments.iter()).copied().collect();
    let n = (0..=full.len()).rev().find(|&n| known.contains_key(&full[..n].join("::")))?;
    Some((full[..n].join("::"), segments[segments.len().saturating_sub(full.len() - n)..].to_vec()))
}

/// The file that defines what `path`, written in `from`, names: through the
/// re-exports of the modules on the way (`super::JsonDecoder` names the
/// file that defines it, not the `mod.rs` that re-exports it).
fn defining(
    from: &str,
    path: &str,
    known: &BTreeMap<String, PathBuf>,
    bound: &BTreeMap<String, BTreeMap<String, String>>,
    depth: usize,
) -> Option<String> {
    let (module, rest) = target(from, path, known)?;
    let via = rest.first().and_then(|item| bound.get(&module)?.get(*item));
    match via {
        Some(inner) if depth < 8 && module != from => {
            let inner = [inner.as_str()].into_iter().chain(rest[1..].iter().copied()).collect::<Vec<_>>().join("::");
            defining(&module, &inner, known, bound, depth + 1).or(Some(module))
        }
        _ => Some(module),
    }
}

/// Which files import which, within the crate whose sources are in `src`.
fn imports(src: &Path) -> BTreeSet<(String, String)> {
    let known = modules(src);
    let code: BTreeMap<&String, Paths> =
        known.iter().map(|(m, f)| (m, paths(&code(&std::fs::read_to_string(f).unwrap())))).collect();
    // What each module's `use` declarations bind, by name: a child reaches
    // them as `super::name`.
    let bound: BTreeMap<String, BTreeMap<String, String>> = code
        .iter()
        .map(|(m, p)| {
            let names =
                p.uses.iter().filter(|(path, _)| !path.ends_with('*')).map(|(path, name)| (name.clone(), path.clone()));
            ((*m).clone(), names.collect())
        })
        .collect();
    let mut edges = BTreeSet::new();
    for (module, p) in &code {
        // A re-export is not an import: the file's own code names what it
        // re-exports only if it also uses it.
        let used = p.uses.iter().zip(&p.exported).filter(|((_, name), exported)| !**exported || p.names.contains(name));
        for path in used.map(|((path, _), _)| path).chain(&p.inline) {
            // The crate root only declares and re-exports; an item it
            // defines itself is no file's import.
            if let Some(t) = defining(module, path, &known, &bound, 0).filter(|t| !t.is_empty() && t != *module) {
                edges.insert(((*module).clone(), t));
            }
        }
    }
    edges
}

/// The import loops among `edges`: each strongly connected set of more
/// than one file (Tarjan's algorithm), its members in order.
fn loops(edges: &BTreeSet<(String, String)>) -> Vec<Vec<String>> {
    struct Tarjan<'e> {
        next: BTreeMap<&'e str, Vec<&'e str>>,
        index: BTreeMap<&'e str, usize>,
        low: BTreeMap<&'e str, usize>,
        stack: Vec<&'e str>,
        on_stack: BTreeSet<&'e str>,
        found: Vec<Vec<String>>,
    }
    impl<'e> Tarjan<'e> {
        fn visit(&mut self, v: &'e str) {
            let i = self.index.len();
            self.index.insert(v, i);
            self.low.insert(v, i);
            self.stack.push(v);
            self.on_stack.insert(v);
            for w in self.next.get(v).cloned().unwrap_or_default() {
                if !self.index.contains_key(w) {
                    self.visit(w);
                    let low = self.low[v].min(self.low[w]);
                    self.low.insert(v, low);
                } else if self.on_stack.contains(w) {
                    let low = self.low[v].min(self.index[w]);
                    self.low.insert(v, low);
                }
            }
            if self.low[v] == self.index[v] {
                let mut members = Vec::new();
                while let Some(w) = self.stack.pop() {
                    self.on_stack.remove(w);
                    members.push(w.to_owned());
                    if w == v {
                        break;
                    }
                }
                if members.len() > 1 {
                    members.sort();
                    self.found.push(members);
                }
            }
        }
    }
    let mut next: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for (a, b) in edges {
        next.entry(a.as_str()).or_default().push(b.as_str());
        next.entry(b.as_str()).or_default();
    }
    let nodes: Vec<&str> = next.keys().copied().collect();
    let mut t = Tarjan {
        next,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        found: Vec::new(),
    };
    for v in nodes {
        if !t.index.contains_key(v) {
            t.visit(v);
        }
    }
    t.found
}

/// No loop of imports among a crate's files, of any length: a loop is
/// two (or more) files that are one idea, or an idea split the wrong way.
#[test]
fn no_files_of_a_crate_import_each_other_in_a_loop_of_any_length() {
    let mut found = Vec::new();
    for dir in ["plan", "sql", "engine", "formats", "worker", "operator", "crds"] {
        for members in loops(&imports(&workspace().join(dir).join("src"))) {
            found.push(format!("{dir}: {}", members.join(" -> ")));
        }
    }
    assert!(found.is_empty(), "files importing each other in a loop:\n{}", found.join("\n"));
}

/// Production files over [`MAX_LINES`] today, each at most as long as
/// listed: the list only shrinks (a file split leaves it; a listed file
/// may not grow).
const LONG_FILES: &[(&str, usize)] = &[("plan/src/scalar_fns/mod.rs", 878)];
/// One idea per file: a file of production code (its test module aside)
/// past this holds several, and is split.
const MAX_LINES: usize = 800;

#[test]
fn no_file_of_production_code_is_over_its_limit() {
    let mut long = Vec::new();
    for dir in ["plan", "sql", "engine", "formats", "worker", "operator", "crds"] {
        for (module, file) in modules(&workspace().join(dir).join("src")) {
            if module == "tests" || module.ends_with("::tests") {
                continue;
            }
            let text = std::fs::read_to_string(&file).unwrap();
            // Every line before the test module (which ends a file).
            let lines = text[..text.find("#[cfg(test)]\nmod tests {").unwrap_or(text.len())].lines().count();
            let name = file.strip_prefix(workspace()).unwrap_or(&file).display().to_string();
            let limit = LONG_FILES.iter().find(|(f, _)| *f == name).map_or(MAX_LINES, |(_, n)| *n);
            if lines > limit.min(1_000) {
                long.push(format!("{name}: {lines} lines (limit {})", limit.min(1_000)));
            }
        }
    }
    assert!(long.is_empty(), "split these:\n{}", long.join("\n"));
}

#[test]
fn the_module_path_resolution_sees_imports() {
    // The check above is only as good as its resolution of paths.
    let known: BTreeMap<String, PathBuf> =
        ["", "a", "a::b", "c"].into_iter().map(|m| (m.to_owned(), PathBuf::new())).collect();
    let module = |from: &str, path: &str| target(from, path, &known).map(|(m, _)| m);
    assert_eq!(module("a::b", "super::super::c").as_deref(), Some("c"));
    assert_eq!(module("a::b", "crate::a::X").as_deref(), Some("a"));
    assert_eq!(module("a", "super::c::Y").as_deref(), Some("c"));
    assert_eq!(module("a", "b::f").as_deref(), Some("a::b"));
    assert_eq!(module("c", "crate::Error").as_deref(), Some(""));
    assert_eq!(module("c", "std::mem::take"), None);
    // A name re-exported by `a` from `a::b` is `a::b`'s.
    let bound = BTreeMap::from([("a".to_owned(), BTreeMap::from([("X".to_owned(), "b::X".to_owned())]))]);
    assert_eq!(defining("c", "crate::a::X", &known, &bound, 0).as_deref(), Some("a::b"));
    assert_eq!(defining("a::b", "super::Y", &known, &bound, 0).as_deref(), Some("a"));
}

#[test]
fn paths_written_inline_count_and_comments_strings_and_tests_do_not() {
    let text = r##"
use super::{x::{A, B as C}, y};
pub(crate) use crate::z::D;
// super::commented::f()
/* crate::block::g() */
fn f() { let s = "crate::quoted::h()"; let r = r#"super::raw::i"#; let c = '"'; super::w::call(c, s, r) }
pub(in crate::seen_from) fn g() {}
#[cfg(test)]
mod tests {
    use super::*;
    fn t() { crate::only_in_tests::k() }
}
#[cfg(test)]
pub(in crate::seen_from) mod fixtures {
    fn t() { crate::only_in_fixtures::k() }
}
"##;
    let p = paths(&code(text));
    let uses: Vec<&str> = p.uses.iter().map(|(path, _)| path.as_str()).collect();
    assert_eq!(uses, ["super::x::A", "super::x::B", "super::y", "crate::z::D"]);
    assert_eq!(p.uses[1].1, "C");
    assert_eq!(p.inline, ["super::w::call"]);
}

#[test]
fn a_loop_through_an_inline_path_is_found() {
    // Two files of a crate in a scratch directory: `b` imports `a` with a
    // `use`, `a` reaches back into `b` inline only.
    let dir = std::env::temp_dir().join(format!("sluice-layering-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("lib.rs"), "mod a;\nmod b;\n").unwrap();
    std::fs::write(dir.join("a.rs"), "pub fn f() -> u8 { super::b::g() }\n").unwrap();
    std::fs::write(dir.join("b.rs"), "use crate::a::f;\npub fn g() -> u8 { 1 }\n").unwrap();
    let edges = imports(&dir);
    std::fs::remove_dir_all(&dir).unwrap();
    assert!(edges.contains(&("a".to_owned(), "b".to_owned())), "{edges:?}");
    assert!(edges.contains(&("b".to_owned(), "a".to_owned())), "{edges:?}");
}

#[test]
fn a_loop_of_three_files_is_found() {
    // a -> b -> c -> a, each by a `use`: no two of them import each other.
    let dir = std::env::temp_dir().join(format!("sluice-layering-three-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("lib.rs"), "mod a;\nmod b;\nmod c;\nmod d;\n").unwrap();
    std::fs::write(dir.join("a.rs"), "use crate::b::g;\npub fn f() -> u8 { g() }\n").unwrap();
    std::fs::write(dir.join("b.rs"), "use crate::c::h;\npub fn g() -> u8 { h() }\n").unwrap();
    std::fs::write(dir.join("c.rs"), "use crate::a::f;\npub fn h() -> u8 { 1 }\npub fn i() -> u8 { f() }\n").unwrap();
    std::fs::write(dir.join("d.rs"), "use crate::a::f;\npub fn j() -> u8 { f() }\n").unwrap();
    let edges = imports(&dir);
    std::fs::remove_dir_all(&dir).unwrap();
    assert!(edges.iter().all(|(a, b)| !edges.contains(&(b.clone(), a.clone()))), "no pair: {edges:?}");
    assert_eq!(loops(&edges), [["a", "b", "c"]], "{edges:?}");
}
