//! What a plan's saved state depends on — the part of a query an upgrade
//! must keep for the state to stay valid.
//!
//! A checkpoint holds the operator's state: groups and accumulators, a
//! window's open panes, a join's buffered rows. That state fits any plan
//! whose operator keeps the same keys and computes the same aggregates
//! over the same columns; the WHERE before it and the SELECT list, HAVING
//! and sink keys after it only decide which rows reach it and how its
//! results are shown. So the state's identity is the operator alone, with
//! its column references by name (not position: declaring another source
//! column shifts positions, not meaning), plus what else the state was
//! built from:
//!
//! * the input columns themselves, for operators whose state holds whole
//!   input rows or refers to columns by position (ROWS windows, top-N, the
//!   two-phase merge, joins): a different input layout means different rows;
//! * the event-time column, for windows (it assigns rows to panes).
//!
//! The signature is canonical JSON, readable enough to say what differs
//! between two queries ([`state_difference`]), and hashed into the
//! fingerprint every checkpoint carries ([`state_fingerprint`]).

use serde_json::{Map, Value, json};

use crate::{Dataflow, OperatorPlan, Plan};

/// Names the state-fingerprint scheme; part of what is hashed.
const STATE_SCHEME: &[u8] = b"sluice.state.v1\0";

/// The state the plan keeps, as canonical JSON; `None` for a stateless
/// plan (filters and projections keep nothing).
pub fn state_signature(plan: &Plan) -> Option<String> {
    let (kind, rows_by_position) = match &plan.operator {
        OperatorPlan::Stateless => return None,
        OperatorPlan::Aggregate(_) => ("aggregate", false),
        OperatorPlan::Rows(_) => ("rows", true),
        OperatorPlan::TopN(_) => ("top_n", true),
        OperatorPlan::Merge(_) => ("merge", true),
        OperatorPlan::Join(_) => ("join", true),
        OperatorPlan::TableJoin(_) => ("table_join", true),
        OperatorPlan::Changelog(_) => ("changelog", true),
    };
    let names: Vec<&str> = plan.source.schema.fields.iter().map(|f| f.name.as_str()).collect();
    let mut operator = serde_json::to_value(&plan.operator).unwrap_or(Value::Null);
    name_columns(&mut operator, &names);
    // The enum's tag is `kind`; what is inside it is the operator's state.
    let operator = match operator {
        Value::Object(mut m) if m.len() == 1 => m.values_mut().next().map(Value::take).unwrap_or(Value::Null),
        other => other,
    };
    let mut sig = Map::new();
    sig.insert("operator".into(), Value::String(kind.into()));
    sig.insert("state".into(), operator);
    if rows_by_position {
        let input: Vec<Value> =
            plan.source.schema.fields.iter().map(|f| json!([f.name, f.data_type.to_string()])).collect();
        sig.insert("input".into(), Value::Array(input));
    }
    if plan.is_windowed()
        && let Some(t) = &plan.source.event_time
    {
        sig.insert("event_time".into(), json!(names.get(t.column)));
    }
    Some(Value::Object(sig).to_string())
}

/// The state's identity: a checkpoint is restored into any plan with the
/// same one. SHA-256 of [`state_signature`] under a named scheme, so it is
/// the same in every build.
pub fn state_fingerprint(plan: &Plan) -> u64 {
    use sha2::{Digest, Sha256};
    let signature = state_signature(plan).unwrap_or_default();
    let digest = Sha256::new().chain_update(STATE_SCHEME).chain_update(signature.as_bytes()).finalize();
    let mut first = [0u8; 8];
    first.copy_from_slice(&digest[..8]);
    u64::from_le_bytes(first)
}

/// The state a whole query keeps: one `"<where>: <signature>"` line per
/// stateful plan, named as its state topic is (`stage <n>` for the stages,
/// `branch <n>` for the plans beside them).
pub fn state_layout(dataflow: &Dataflow) -> Vec<String> {
    let stages = dataflow.stages.iter().enumerate().map(|(i, s)| (format!("stage {i}"), &s.plan));
    let branches = dataflow.branches.iter().enumerate().map(|(i, b)| (format!("branch {i}"), &b.plan));
    stages.chain(branches).filter_map(|(at, plan)| Some(format!("{at}: {}", state_signature(plan)?))).collect()
}

/// What differs between the state of two queries (two [`state_layout`]s),
/// in words: which stateful operator, and which of its parts, before → after.
pub fn state_difference(before: &[String], after: &[String]) -> String {
    let split = |line: &String| -> (String, Value) {
        let (at, sig) = line.split_once(": ").unwrap_or((line.as_str(), ""));
        (at.to_owned(), serde_json::from_str(sig).unwrap_or(Value::Null))
    };
    let before: Vec<(String, Value)> = before.iter().map(split).collect();
    let after: Vec<(String, Value)> = after.iter().map(split).collect();
    let mut parts = Vec::new();
    for (at, old) in &before {
        match after.iter().find(|(a, _)| a == at) {
            None => parts.push(format!("{at} kept {} state, the new query keeps none there", operator_of(old))),
            Some((_, new)) if new == old => {}
            Some((_, new)) if operator_of(new) != operator_of(old) => {
                parts.push(format!(
                    "{at} kept {} state, the new query keeps {} state",
                    operator_of(old),
                    operator_of(new)
                ));
            }
            Some((_, new)) => parts.push(format!("{at} ({}): {}", operator_of(old), fields_changed(old, new))),
        }
    }
    for (at, new) in &after {
        if !before.iter().any(|(a, _)| a == at) {
            parts.push(format!("{at} keeps {} state the running query does not have", operator_of(new)));
        }
    }
    if parts.is_empty() { "the state is the same".into() } else { parts.join("; ") }
}

fn operator_of(sig: &Value) -> &str {
    sig["operator"].as_str().unwrap_or("unknown")
}

/// `field: old → new` for each part of two signatures of one operator.
fn fields_changed(old: &Value, new: &Value) -> String {
    let mut changed = Vec::new();
    let mut compare = |name: &str, a: &Value, b: &Value| {
        if a != b {
            changed.push(format!("{name} {} → {}", brief(a), brief(b)));
        }
    };
    match (&old["state"], &new["state"]) {
        (Value::Object(a), Value::Object(b)) => {
            for (k, v) in a {
                compare(k, v, b.get(k).unwrap_or(&Value::Null));
            }
        }
        (a, b) => compare("state", a, b),
    }
    compare("input columns", &old["input"], &new["input"]);
    compare("event time", &old["event_time"], &new["event_time"]);
    changed.join(", ")
}

/// A part of a signature as a person reads it: a column as its name, no
/// types or defaults.
fn brief(v: &Value) -> String {
    fn strip(v: &Value) -> Value {
        match v {
            Value::Object(m) => {
                if let Some(name) = m.get("Column").and_then(|c| c.get("name")) {
                    return name.clone();
                }
                Value::Object(
                    m.iter()
                        .filter(|(k, v)| k.as_str() != "data_type" && **v != Value::Bool(false) && !v.is_null())
                        .map(|(k, v)| (k.clone(), strip(v)))
                        .collect(),
                )
            }
            Value::Array(a) => Value::Array(a.iter().map(strip).collect()),
            other => other.clone(),
        }
    }
    match strip(v) {
        Value::Null => "none".into(),
        other => other.to_string().replace('"', ""),
    }
}

/// Replaces every `{"Column": {"index": i, ..}}` with the column's name.
fn name_columns(v: &mut Value, names: &[&str]) {
    match v {
        Value::Object(m) => {
            if let Some(Value::Object(c)) = m.get_mut("Column")
                && let Some(i) = c.get("index").and_then(Value::as_u64)
            {
                let name = usize::try_from(i).ok().and_then(|i| names.get(i)).copied().unwrap_or("?");
                c.remove("index");
                c.insert("name".into(), Value::String(name.into()));
                return;
            }
            m.values_mut().for_each(|v| name_columns(v, names));
        }
        Value::Array(a) => a.iter_mut().for_each(|v| name_columns(v, names)),
        _ => {}
    }
}
