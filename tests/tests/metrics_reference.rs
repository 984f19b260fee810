//! `docs/observability.md` is the metrics reference users build alerts and
//! dashboards on: every metric the worker and the operator export must be
//! listed there with its type and labels, and nothing listed may be missing
//! from the code.

// Test code: failing loudly is its job.
#![allow(clippy::panic, clippy::expect_used, clippy::unwrap_used)]

use std::collections::{BTreeMap, BTreeSet};

fn doc() -> String {
    let repo = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    std::fs::read_to_string(repo.join("docs/observability.md")).unwrap()
}

/// name → (type, sorted label names), from Prometheus text exposition.
fn exported(text: &str) -> BTreeMap<String, (String, Vec<String>)> {
    let mut out: BTreeMap<String, (String, Vec<String>)> = BTreeMap::new();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.split_once(' ').unwrap();
            out.entry(name.to_owned()).or_default().0 = kind.to_owned();
        } else if !line.starts_with('#') && !line.is_empty() {
            let series = line.split(' ').next().unwrap();
            let (metric, labels) = series.split_once('{').unwrap_or((series, ""));
            let family = ["_bucket", "_sum", "_count"]
                .iter()
                .find_map(|s| metric.strip_suffix(s).filter(|f| out.contains_key(*f)))
                .unwrap_or(metric);
            let mut names: Vec<String> = labels
                .trim_end_matches('}')
                .split(',')
                .filter_map(|kv| kv.split_once('=').map(|(k, _)| k.to_owned()))
                .filter(|k| k != "le")
                .collect();
            names.sort();
            let entry = out.get_mut(family).unwrap_or_else(|| panic!("series {series} before its # TYPE"));
            if entry.1.is_empty() {
                entry.1 = names;
            }
        }
    }
    out
}

/// name → (type, sorted label names), from the doc's table under `heading`;
/// plus, for labels documented with their values (`` `outcome` (`ok`, `error`) ``),
/// (name, label) → the values.
#[allow(clippy::type_complexity)]
fn documented(
    doc: &str,
    heading: &str,
) -> (BTreeMap<String, (String, Vec<String>)>, BTreeMap<(String, String), BTreeSet<String>>) {
    let section = doc.split(heading).nth(1).unwrap_or_else(|| panic!("no section {heading:?}"));
    let section = section.split("\n## ").next().unwrap();
    let (mut out, mut values) = (BTreeMap::new(), BTreeMap::new());
    for row in section.lines().filter(|l| l.starts_with("| `sluice_")) {
        let cells: Vec<&str> = row.split('|').map(str::trim).collect();
        let name = cells[1].trim_matches('`').to_owned();
        let kind = cells[2].to_owned();
        // Backticked words: outside parentheses a label, inside its values.
        let (mut labels, mut depth, mut current) = (Vec::new(), 0, String::new());
        for (i, part) in cells[3].split('`').enumerate() {
            if i % 2 == 0 {
                depth += part.matches('(').count();
                depth -= part.matches(')').count();
            } else if depth == 0 {
                current = part.to_owned();
                labels.push(current.clone());
            } else {
                values.entry((name.clone(), current.clone())).or_insert_with(BTreeSet::new).insert(part.to_owned());
            }
        }
        labels.sort();
        out.insert(name, (kind, labels));
    }
    assert!(!out.is_empty(), "no metrics listed under {heading:?}");
    (out, values)
}

/// Every value the exposition shows for `label` of metric family `name`.
fn label_values(text: &str, name: &str, label: &str) -> BTreeSet<String> {
    let key = format!("{label}=\"");
    text.lines()
        .filter(|l| l.starts_with(name) && !l.starts_with('#'))
        .filter_map(|l| l.split_once(&key).map(|(_, rest)| rest.split('"').next().unwrap().to_owned()))
        .collect()
}

fn compare(what: &str, code: &BTreeMap<String, (String, Vec<String>)>, doc: &BTreeMap<String, (String, Vec<String>)>) {
    let mut problems = Vec::new();
    for (name, c) in code {
        match doc.get(name) {
            None => problems.push(format!("{name} is exported but not documented")),
            Some(d) if d != c => problems.push(format!("{name}: code says {c:?}, the doc says {d:?}")),
            Some(_) => {}
        }
    }
    for name in doc.keys().filter(|n| !code.contains_key(*n)) {
        problems.push(format!("{name} is documented but not exported"));
    }
    assert!(problems.is_empty(), "{what} metrics vs docs/observability.md:\n{}", problems.join("\n"));
}

/// Documented label values are exactly the ones exported.
fn check_values(text: &str, values: &BTreeMap<(String, String), BTreeSet<String>>) {
    for ((name, label), documented) in values {
        let exported = label_values(text, name, label);
        assert_eq!(&exported, documented, "values of `{label}` of {name}: exported vs documented");
    }
}

#[test]
fn every_worker_metric_is_documented_with_its_type_and_labels() {
    let doc = doc();
    let metrics = sluice_worker::metrics::Metrics::new("demo", 0).unwrap();
    let core = metrics.core(0, &[("trades", 0), ("trades", 1)]);
    core.latency.observe_millis(1);
    metrics.ready.set(1);
    let text = metrics.render();
    let (documented, values) = documented(&doc, "## Worker metrics");
    compare("worker", &exported(&text), &documented);
    check_values(&text, &values);
}

#[test]
fn every_operator_metric_is_documented_with_its_type_and_labels() {
    let doc = doc();
    let metrics = sluice_operator::metrics::Metrics::new().unwrap();
    // The per-job series exist once the operator sees a job.
    metrics.job("prod", "demo");
    let text = metrics.render();
    let (documented, values) = documented(&doc, "## Operator metrics");
    compare("operator", &exported(&text), &documented);
    assert!(values.contains_key(&("sluice_operator_reconcile_errors_total".into(), "reason".into())));
    check_values(&text, &values);
}
