//! The Grafana dashboard against real data: a real Prometheus scrapes a
//! running worker (Kafka in and out, event time, late and malformed records)
//! and the operator, and every panel's PromQL — taken from the dashboard
//! JSON — must return data. A panel over a metric that does not exist fails.

// Test code: failing loudly is its job.
#![allow(clippy::panic, clippy::expect_used, clippy::unwrap_used)]

use std::time::Duration;

use serde_json::Value;
use sluice_e2e::kube::{kubectl_ok, new_namespace};
use sluice_e2e::operator::start_operator;
use sluice_e2e::prometheus::Prometheus;
use sluice_e2e::worker::{Worker, write_temp};
use sluice_e2e::{harness, kafka, unique_name};

/// A panel target: its PromQL and the labels its legend shows.
struct Target {
    expr: String,
    legend_labels: Vec<String>,
}

/// Every panel with its title and targets, rows included.
fn panels(dashboard: &Value) -> Vec<(String, Vec<Target>)> {
    let mut out = Vec::new();
    let mut stack: Vec<&Value> = dashboard["panels"].as_array().map(|a| a.iter().collect()).unwrap_or_default();
    while let Some(p) = stack.pop() {
        if let Some(inner) = p["panels"].as_array() {
            stack.extend(inner);
        }
        if p["type"] == "row" {
            continue;
        }
        let targets = p["targets"]
            .as_array()
            .map(|t| {
                t.iter()
                    .filter_map(|t| {
                        let expr = t["expr"].as_str()?.to_owned();
                        let legend = t["legendFormat"].as_str().unwrap_or_default();
                        let legend_labels = legend
                            .split("{{")
                            .skip(1)
                            .filter_map(|s| s.split_once("}}").map(|(l, _)| l.trim().to_owned()))
                            .collect();
                        Some(Target { expr, legend_labels })
                    })
                    .collect()
            })
            .unwrap_or_default();
        out.push((p["title"].as_str().unwrap_or("(untitled)").to_owned(), targets));
    }
    out
}

/// Why a query result would show an empty or misleading panel, if it would:
/// no series, only NaN (a quantile over buckets nothing was observed in), or
/// a series without a label its legend names (an aggregation that lost it).
fn unusable(result: &[Value], legend_labels: &[String]) -> Option<String> {
    if result.is_empty() {
        return Some("returned no data".into());
    }
    let value = |r: &Value| r["value"][1].as_str().unwrap_or("NaN").to_owned();
    if result.iter().all(|r| value(r) == "NaN") {
        return Some("returned only NaN".into());
    }
    for r in result {
        for l in legend_labels {
            if r["metric"][l].as_str().is_none_or(str::is_empty) {
                return Some(format!("returned a series without the label `{l}` its legend shows: {}", r["metric"]));
            }
        }
    }
    None
}

/// Grafana's variables and macros, as the dashboard would be rendered.
fn render(expr: &str, namespace: &str, job: &str) -> String {
    expr.replace("${namespace}", namespace)
        .replace("$namespace", namespace)
        .replace("${streamjob}", job)
        .replace("$streamjob", job)
        .replace("$__rate_interval", "30s")
        .replace("${__rate_interval}", "30s")
        .replace("$__interval", "5s")
        .replace("$__range", "1m")
}

/// Why the chart's alerting rules (helm/sluice/files/alerts.yaml) would not
/// work, if they would not: every rule loads and evaluates without error;
/// every metric a rule reads exists for the job; and the rules this run
/// provokes — malformed and late records (dead letters), a job whose pods
/// never start (not ready) — find it.
fn alert_problems(prometheus: &Prometheus, ns: &str, job: &str) -> Vec<String> {
    let mut problems = Vec::new();
    let rules = prometheus.rules();
    if rules.len() < 9 {
        problems.push(format!("only {} alerting rules loaded:\n{}", rules.len(), prometheus.log()));
    }
    for rule in &rules {
        let name = rule["name"].as_str().unwrap_or_default();
        if rule["health"] != "ok" || rule["lastError"].as_str().is_some_and(|e| !e.is_empty()) {
            problems.push(format!("alert {name}: health {} ({})", rule["health"], rule["lastError"]));
        }
        let expr = rule["query"].as_str().unwrap_or_default();
        for metric in
            expr.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_')).filter(|w| w.starts_with("sluice_"))
        {
            let selector = if metric.starts_with("sluice_operator_") {
                format!("{metric}{{namespace=\"{ns}\", streamjob=\"{job}\"}}")
            } else {
                format!("{metric}{{streamjob=\"{job}\"}}")
            };
            match prometheus.query(&selector) {
                Ok(r) if !r.is_empty() => {}
                Ok(_) => problems.push(format!("alert {name}: `{selector}` has no data")),
                Err(e) => problems.push(format!("alert {name}: `{selector}` failed: {e}")),
            }
        }
    }
    // Provoked here: each expression (the condition before `for:`) finds the job.
    for (name, label) in [("SluiceDeadLettersRising", "streamjob"), ("SluiceJobNotReady", "streamjob")] {
        let Some(rule) = rules.iter().find(|r| r["name"] == name) else {
            problems.push(format!("no alert {name}"));
            continue;
        };
        let expr = rule["query"].as_str().unwrap_or_default();
        match prometheus.query(expr) {
            Ok(r) if r.iter().any(|s| s["metric"][label] == job) => {}
            Ok(r) => problems.push(format!("alert {name}: `{expr}` does not find {job}: {r:?}")),
            Err(e) => problems.push(format!("alert {name}: `{expr}` failed: {e}")),
        }
        if !matches!(rule["state"].as_str(), Some("pending" | "firing")) {
            problems.push(format!("alert {name} is {} with its condition true", rule["state"]));
        }
    }
    // The operator is scraped as the chart's ServiceMonitor names it: the
    // selector of SluiceOperatorDown finds it, and the rule stays quiet.
    match rules.iter().find(|r| r["name"] == "SluiceOperatorDown") {
        None => problems.push("no alert SluiceOperatorDown".into()),
        Some(rule) => {
            let query = rule["query"].as_str().unwrap_or_default();
            let inner = query.strip_prefix("absent(").and_then(|q| q.strip_suffix(')')).unwrap_or(query);
            match prometheus.query(inner) {
                Ok(r) if !r.is_empty() => {}
                other => problems.push(format!("alert SluiceOperatorDown: `{inner}` finds no operator: {other:?}")),
            }
            if rule["state"] != "inactive" {
                problems.push(format!("alert SluiceOperatorDown is {} with the operator up", rule["state"]));
            }
        }
    }
    problems
}

#[test]
fn every_dashboard_panel_returns_data_from_a_real_prometheus() {
    let dir = harness().repo.join("helm/sluice/dashboards");
    let files: Vec<_> = std::fs::read_dir(&dir).expect("dashboards").filter_map(Result::ok).map(|e| e.path()).collect();
    assert!(!files.is_empty(), "no dashboard JSON in {}", dir.display());

    // A worker with everything a panel can show: Kafka in and out, event
    // time, windows, late records, malformed records, checkpoints.
    let (topic, out, dlq) = (unique_name("dash-in"), unique_name("dash-out"), unique_name("dash-dlq"));
    kafka::create_topic(&topic, 2);
    kafka::create_topic(&out, 1);
    kafka::create_topic(&dlq, 1);
    let job = unique_name("dash");
    let bootstrap = &harness().bootstrap;
    let manifest = format!(
        r#"apiVersion: sluice.dev/v1alpha1
kind: StreamJob
metadata: {{ name: {job} }}
spec:
  sql: SELECT symbol, COUNT(*) AS n FROM quotes GROUP BY symbol WINDOW TUMBLING (ts, INTERVAL '1' SECOND)
  sources:
    - name: quotes
      kafka: {{ bootstrapServers: "{bootstrap}", topic: {topic} }}
      schema:
        columns:
          - {{ name: symbol, type: string, required: true }}
          - {{ name: ts, type: timestamp, required: true }}
      eventTime: {{ column: ts, watermarkDelayMillis: 100 }}
      partitionKey: [symbol]
  sink: {{ kafka: {{ bootstrapServers: "{bootstrap}", topic: {out} }} }}
  deadLetter: {{ kafka: {{ bootstrapServers: "{bootstrap}", topic: {dlq} }} }}
  engine: {{ lateRecords: DeadLetter, checkpointIntervalMillis: 200 }}
"#
    );
    let file = write_temp("dash.yaml", &manifest);
    let mut worker = Worker::run(&file, &["--cores", "2", "--group", &unique_name("g")]);
    worker.wait_ready(Duration::from_secs(60));
    let ns = new_namespace("dash");
    let mut operator = start_operator(&ns, "op-dash");
    // The same job, applied to the API server, gives the operator real
    // reconciles to measure (its pods never start: nothing plays the kubelet).
    kubectl_ok(["apply", "-n", &ns, "-f", &file.display().to_string()]);
    // The target labels prometheus-operator's Pod/ServiceMonitors attach.
    let rules = harness().repo.join("helm/sluice/files/alerts.yaml");
    let prometheus = Prometheus::start_with_rules(
        &[
            sluice_e2e::prometheus::Target {
                job: "sluice-worker".into(),
                port: worker.http_port,
                labels: vec![("namespace".into(), ns.clone())],
            },
            sluice_e2e::prometheus::Target {
                job: "sluice-operator".into(),
                port: operator.http_port,
                labels: vec![("namespace".into(), ns.clone()), ("pod".into(), "sluice-operator-0".into())],
            },
        ],
        Some(&rules),
    );
    let now = sluice_e2e::now_ms();
    let produce_round = |round: i64| {
        let mut records: Vec<String> =
            (0..500i64).map(|i| format!(r#"{{"symbol":"S{}","ts":{}}}"#, i % 4, now + round * 1000 + i)).collect();
        records.push("not json".into());
        records.push(format!(r#"{{"symbol":"S1","ts":{}}}"#, now - 60_000)); // late
        let refs: Vec<_> = records
            .iter()
            .enumerate()
            .map(|(i, r)| (None, r.as_bytes(), Some(i32::try_from(i % 2).unwrap())))
            .collect();
        kafka::produce(&topic, &refs);
        std::thread::sleep(Duration::from_millis(1_000));
    };
    for round in 0..8i64 {
        produce_round(round);
    }
    // librdkafka reports consumer lag every 5 s; let Prometheus catch it.
    std::thread::sleep(Duration::from_secs(6));

    // Every panel and alert, checked again until all have data (or a
    // minute passed): on a loaded machine a scrape or a rule evaluation
    // can come later than the waits above.
    let check = || {
        let mut failures = Vec::new();
        let mut checked = 0;
        for f in &files {
            let dashboard: Value = serde_json::from_str(&std::fs::read_to_string(f).unwrap()).unwrap();
            let variables: Vec<&str> =
                dashboard["templating"]["list"].as_array().unwrap().iter().filter_map(|v| v["name"].as_str()).collect();
            for v in ["namespace", "streamjob"] {
                assert!(variables.contains(&v), "{}: no `{v}` variable", f.display());
            }
            for (title, targets) in panels(&dashboard) {
                if targets.is_empty() {
                    failures.push(format!("panel {title:?} has no PromQL target"));
                }
                for target in targets {
                    let q = render(&target.expr, &ns, &job);
                    checked += 1;
                    match prometheus.query(&q) {
                        Ok(r) => {
                            if let Some(why) = unusable(&r, &target.legend_labels) {
                                failures.push(format!("panel {title:?}: `{q}` {why}"));
                            }
                        }
                        Err(e) => failures.push(format!("panel {title:?}: `{q}` failed: {e}")),
                    }
                }
            }
        }
        failures.extend(alert_problems(&prometheus, &ns, &job));
        (failures, checked)
    };
    // Records keep coming between checks, so rates and latency quantiles
    // over the last 30 s stay defined while a check is repeated.
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    let mut round = 8;
    let (failures, checked) = loop {
        let (failures, checked) = check();
        if failures.is_empty() || std::time::Instant::now() > deadline {
            break (failures, checked);
        }
        produce_round(round);
        round += 1;
    };
    assert!(checked >= 15, "only {checked} expressions in the dashboards");
    assert!(
        failures.is_empty(),
        "{} panel queries without data:\n{}\nworker log:\n{}",
        failures.len(),
        failures.join("\n"),
        worker.log()
    );
    operator.signal("TERM");
    let _ = operator.wait(Duration::from_secs(20));
    // With the operator gone, SluiceOperatorDown's condition holds (it
    // fires after its `for:`).
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let down = loop {
        let state =
            prometheus.rules().into_iter().find(|r| r["name"] == "SluiceOperatorDown").map(|r| r["state"].clone());
        if state.as_ref().is_some_and(|s| s == "pending" || s == "firing") || std::time::Instant::now() > deadline {
            break state;
        }
        std::thread::sleep(Duration::from_millis(500));
    };
    assert!(
        down.as_ref().is_some_and(|s| s == "pending" || s == "firing"),
        "SluiceOperatorDown is {down:?} with the operator stopped"
    );
    worker.signal("TERM");
    assert!(worker.wait(Duration::from_secs(30)).success());
}
