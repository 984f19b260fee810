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
use sluice_e2e::prometheus::{Prometheus, Target};
use sluice_e2e::worker::{Worker, write_temp};
use sluice_e2e::{harness, kafka, unique_name};

/// Every panel with its title and PromQL expressions, rows included.
fn panels(dashboard: &Value) -> Vec<(String, Vec<String>)> {
    let mut out = Vec::new();
    let mut stack: Vec<&Value> = dashboard["panels"].as_array().map(|a| a.iter().collect()).unwrap_or_default();
    while let Some(p) = stack.pop() {
        if let Some(inner) = p["panels"].as_array() {
            stack.extend(inner);
        }
        if p["type"] == "row" {
            continue;
        }
        let exprs: Vec<String> = p["targets"]
            .as_array()
            .map(|t| t.iter().filter_map(|t| t["expr"].as_str().map(str::to_owned)).collect())
            .unwrap_or_default();
        out.push((p["title"].as_str().unwrap_or("(untitled)").to_owned(), exprs));
    }
    out
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
    let prometheus = Prometheus::start(&[
        Target { job: "sluice-worker".into(), port: worker.http_port, labels: vec![("namespace".into(), ns.clone())] },
        Target {
            job: "sluice-operator".into(),
            port: operator.http_port,
            labels: vec![("namespace".into(), ns.clone())],
        },
    ]);
    let now = sluice_e2e::now_ms();
    for round in 0..8i64 {
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
    }
    // librdkafka reports consumer lag every 5 s; let Prometheus catch it.
    std::thread::sleep(Duration::from_secs(6));

    let mut failures = Vec::new();
    let mut checked = 0;
    for f in files {
        let dashboard: Value = serde_json::from_str(&std::fs::read_to_string(&f).unwrap()).unwrap();
        let variables: Vec<&str> =
            dashboard["templating"]["list"].as_array().unwrap().iter().filter_map(|v| v["name"].as_str()).collect();
        for v in ["namespace", "streamjob"] {
            assert!(variables.contains(&v), "{}: no `{v}` variable", f.display());
        }
        for (title, exprs) in panels(&dashboard) {
            if exprs.is_empty() {
                failures.push(format!("panel {title:?} has no PromQL target"));
            }
            for expr in exprs {
                let q = render(&expr, &ns, &job);
                checked += 1;
                match prometheus.query(&q) {
                    Ok(r) if !r.is_empty() => {}
                    Ok(_) => failures.push(format!("panel {title:?}: `{q}` returned no data")),
                    Err(e) => failures.push(format!("panel {title:?}: `{q}` failed: {e}")),
                }
            }
        }
    }
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
    worker.signal("TERM");
    assert!(worker.wait(Duration::from_secs(30)).success());
}
