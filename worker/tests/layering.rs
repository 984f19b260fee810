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
        ("formats", &["sluice-crds", "sluice-engine", "sluice-plan"]),
        ("worker", &["sluice-crds", "sluice-engine", "sluice-formats", "sluice-plan", "sluice-sql"]),
        ("operator", &["sluice-crds", "sluice-plan", "sluice-sql"]),
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

/// The module a path written in `from` refers to: the longest known module
/// that prefixes it, after resolving `crate::`, `super::` and child names.
fn target(from: &str, path: &str, known: &BTreeMap<String, PathBuf>) -> Option<String> {
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
        _ => {}
    }
    let full: Vec<&str> = base.iter().chain(segments.iter()).copied().collect();
    (0..=full.len()).rev().map(|n| full[..n].join("::")).find(|m| known.contains_key(m))
}

#[test]
fn no_two_files_of_a_crate_import_each_other() {
    for dir in ["plan", "sql", "engine", "formats", "worker", "operator", "crds"] {
        let src = workspace().join(dir).join("src");
        let known = modules(&src);
        let mut edges: BTreeSet<(String, String)> = BTreeSet::new();
        for (module, file) in &known {
            let text = std::fs::read_to_string(file).unwrap();
            // Unindented `use` lines only: an indented one belongs to an
            // inline module (`mod tests { use super::*; }`) or a function.
            for line in text.lines() {
                let Some(rest) = line.strip_prefix("use ").or_else(|| line.strip_prefix("pub use ")) else {
                    continue;
                };
                let path = rest.split(['{', ';', ' ']).next().unwrap_or_default().trim_end_matches("::");
                let relative = path.starts_with("crate::") || path.starts_with("super::") || path.starts_with("self::");
                // `use child::X` names a module declared in this file.
                let first = path.split("::").next().unwrap_or_default();
                let child_module = if module.is_empty() { first.to_owned() } else { format!("{module}::{first}") };
                let path = if !relative && known.contains_key(&child_module) {
                    format!("self::{path}")
                } else if relative {
                    path.to_owned()
                } else {
                    continue;
                };
                // The crate root only re-exports; references to it are not
                // imports of a file.
                if let Some(t) = target(module, &path, &known).filter(|t| !t.is_empty() && t != module) {
                    edges.insert((module.clone(), t));
                }
            }
        }
        let mutual: Vec<_> = edges.iter().filter(|(a, b)| a < b && edges.contains(&(b.clone(), a.clone()))).collect();
        assert!(mutual.is_empty(), "{dir}: files importing each other: {mutual:?}");
    }
}

#[test]
fn the_module_path_resolution_sees_imports() {
    // The check above is only as good as its resolution of paths.
    let known: BTreeMap<String, PathBuf> =
        ["", "a", "a::b", "c"].into_iter().map(|m| (m.to_owned(), PathBuf::new())).collect();
    assert_eq!(target("a::b", "super::super::c", &known).as_deref(), Some("c"));
    assert_eq!(target("a::b", "crate::a::X", &known).as_deref(), Some("a"));
    assert_eq!(target("a", "super::c::Y", &known).as_deref(), Some("c"));
    assert_eq!(target("c", "crate::Error", &known).as_deref(), Some(""));
}
