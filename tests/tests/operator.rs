//! The operator against the real kube-apiserver, etcd and
//! kube-controller-manager, with the harness's kubelet running the workers it
//! asks for against the real broker: the whole control path, end to end.

// Test code: failing loudly is its job.
#![allow(clippy::panic, clippy::expect_used, clippy::unwrap_used)]

use std::time::{Duration, Instant};

use serde_json::Value;
use sluice_crds::{SourcePartitions, WorkerConfig, assign};
use sluice_e2e::helm::helm_ok;
use sluice_e2e::jobs::*;
use sluice_e2e::kafka;
use sluice_e2e::kube::{kubectl_ok, new_namespace};
use sluice_e2e::kubelet::kubelet;
use sluice_e2e::operator::{start_operator, start_operator_with};
use sluice_e2e::unique_name;
use sluice_e2e::worker::{metric_values, write_temp};

#[test]
fn applying_an_example_creates_owned_children_and_the_job_runs_to_ready() {
    let ns = new_namespace("op-apply");
    let _kubelet = kubelet().manage(&ns);
    let _operator = start_operator(&ns, "op-a");
    let t = topics(4);
    let file = example("s2-group-by.yaml", &t, |s| s);
    kubectl_ok(["apply", "-n", &ns, "-f", file.to_str().unwrap()]);
    let name = "s2-group-by";

    // Children, rendered from the spec, owned by the job.
    let sts = wait_until("StatefulSet", Duration::from_secs(60), || get("statefulset", name, &ns));
    for (kind, child) in
        [("configmap", "s2-group-by-config"), ("service", "s2-group-by-workers"), ("pdb", "s2-group-by-workers")]
    {
        let obj = wait_until(kind, Duration::from_secs(30), || get(kind, child, &ns));
        let owner = &obj["metadata"]["ownerReferences"][0];
        assert_eq!((owner["kind"].as_str(), owner["controller"].as_bool()), (Some("StreamJob"), Some(true)), "{kind}");
    }
    assert_eq!(sts["metadata"]["ownerReferences"][0]["name"], name);
    assert_eq!(sts["spec"]["replicas"], 2);
    let container = &sts["spec"]["template"]["spec"]["containers"][0];
    assert_eq!(container["args"], serde_json::json!(["serve", "--config", "/etc/sluice/config/worker.yaml"]));
    assert_eq!(get("service", "s2-group-by-workers", &ns).unwrap()["spec"]["clusterIP"], "None");
    let cm = get("configmap", "s2-group-by-config", &ns).unwrap();
    let config = WorkerConfig::from_yaml(cm["data"]["worker.yaml"].as_str().unwrap()).unwrap();
    assert_eq!(config.partitions, vec![SourcePartitions { source: "market_data".into(), partitions: 4 }]);

    // Running: status and printer columns tell the truth.
    let job = wait_ready(name, &ns, 2);
    assert_eq!(job["status"]["partitions"], 4);
    assert_eq!(job["status"]["observedGeneration"], job["metadata"]["generation"]);
    let expected = serde_json::to_value(assign(&config.partitions, 2, 2)).unwrap();
    assert_eq!(job["status"]["assignment"], expected, "status.assignment is assign()");
    let table = kubectl_ok(["get", "sj", name, "-n", &ns]);
    let row: Vec<&str> = table.lines().nth(1).unwrap().split_whitespace().collect();
    assert_eq!(&row[..6], [name, "True", "Running", "2", "2", "4"], "{table}");

    // And it computes: results of the data produced now reach the sink.
    produce_trades(&t.trades, 0..4_000, 4);
    wait_for_counts(&t.out, &expected_counts(0..4_000), Duration::from_secs(90));
    kubectl_ok(["delete", "namespace", &ns, "--wait=false"]);
}

#[test]
fn invalid_sql_is_reported_launches_nothing_and_recovers_when_fixed() {
    let ns = new_namespace("op-sql");
    let _kubelet = kubelet().manage(&ns);
    let _operator = start_operator(&ns, "op-a");
    let t = topics(2);
    let bad = example("s2-group-by.yaml", &t, |s| {
        s.replace("SUM(quantity) AS total_quantity", "SUM(quantty) AS total_quantity")
    });
    kubectl_ok(["apply", "-n", &ns, "-f", bad.to_str().unwrap()]);
    let name = "s2-group-by";
    let (status, reason, message) = wait_until("InvalidSql", Duration::from_secs(60), || {
        condition(&get("sj", name, &ns)?, "Ready").filter(|c| c.1 == "InvalidSql")
    });
    assert_eq!(status, "False");
    assert!(message.contains("line 4, column") && message.contains("did you mean `quantity`"), "{message}");
    assert_eq!(reason, "InvalidSql");
    let events = wait_for_warning(&ns, "InvalidSql");
    assert!(
        events["items"]
            .as_array()
            .unwrap()
            .iter()
            .any(|e| e["regarding"]["name"] == name || e["involvedObject"]["name"] == name)
    );
    // The reconcile that reported InvalidSql is the one that would have
    // launched the workers: nothing may exist now.
    for (kind, child) in [("statefulset", name.to_owned()), ("configmap", format!("{name}-config"))] {
        assert!(get(kind, &child, &ns).is_none(), "{kind} {child} launched for invalid SQL");
    }

    let fixed = example("s2-group-by.yaml", &t, |s| s);
    kubectl_ok(["apply", "-n", &ns, "-f", fixed.to_str().unwrap()]);
    wait_ready(name, &ns, 2);
    kubectl_ok(["delete", "namespace", &ns, "--wait=false"]);
}

/// A topic of 1,000 trades (2 partitions) written by confluent-kafka's
/// AvroSerializer under the registry subject `<topic>-value`, and an
/// empty output topic.
fn avro_trades(prefix: &str) -> (String, String) {
    let h = sluice_e2e::harness();
    let (topic, out) = (unique_name(&format!("{prefix}-trades")), unique_name(&format!("{prefix}-out")));
    kafka::create_topic(&topic, 2);
    kafka::create_topic(&out, 1);
    let produced = std::process::Command::new(&h.clients_python)
        .arg(h.repo.join("tests/clients/avro_produce.py"))
        .args([&h.bootstrap, &h.registry_url, &topic, "v1", "0", "1000"])
        .output()
        .unwrap();
    assert!(produced.status.success(), "{}", String::from_utf8_lossy(&produced.stderr));
    (topic, out)
}

/// Waits until `out`'s last count per symbol adds up to the 1,000 trades
/// of [`avro_trades`], over its 5 symbols.
fn every_trade_counted(out: &str) {
    let counts = wait_until("every trade counted", Duration::from_secs(90), || {
        let mut last = std::collections::BTreeMap::new();
        for r in kafka::consume_all(out, Duration::from_secs(10)) {
            let v: Value = serde_json::from_slice(&r.value).ok()?;
            last.insert(v["symbol"].as_str()?.to_owned(), v["n"].as_i64()?);
        }
        (last.values().sum::<i64>() == 1_000).then_some(last)
    });
    assert_eq!(counts.len(), 5, "{counts:?}");
}

/// A source whose columns come from a registry subject: the operator
/// reads the subject's schema, plans the job with the columns derived
/// from it, writes them into the workers' config and reports the subject,
/// version and schema id in `status.registrySchemas`; the workers read the
/// topic with them. A subject the registry does not have is reported,
/// naming it, and launches nothing.
#[test]
fn columns_from_a_registry_subject_are_derived_planned_and_reported() {
    let ns = new_namespace("op-registry");
    let _kubelet = kubelet().manage(&ns);
    let _operator = start_operator(&ns, "op-a");
    let h = sluice_e2e::harness();
    let (topic, out) = avro_trades("reg");
    let manifest = |name: &str, subject: &str| {
        format!(
            r#"apiVersion: sluice.dev/v1alpha1
kind: StreamJob
metadata:
  name: {name}
spec:
  sql: SELECT symbol, COUNT(*) AS n FROM trades GROUP BY symbol
  schemaRegistry: {{ url: "{registry}" }}
  sources:
    - name: trades
      kafka: {{ bootstrapServers: "{bootstrap}", topic: {topic} }}
      format: avro
      schema:
        registry: {{ subject: {subject} }}
      partitionKey: [symbol]
  sink:
    kafka: {{ bootstrapServers: "{bootstrap}", topic: {out} }}
  workers: 1
  coresPerWorker: 1
"#,
            registry = h.registry_url,
            bootstrap = h.bootstrap,
        )
    };
    let missing = write_temp("registry-missing.yaml", &manifest("registry-missing", "no-such-value"));
    kubectl_ok(["apply", "-n", &ns, "-f", missing.to_str().unwrap()]);
    let (_, reason, message) = wait_until("InvalidSpec", Duration::from_secs(60), || {
        condition(&get("sj", "registry-missing", &ns)?, "Ready").filter(|c| c.1 == "InvalidSpec")
    });
    assert!(message.contains("subject no-such-value"), "{reason}: {message}");
    assert!(get("statefulset", "registry-missing", &ns).is_none(), "launched without its columns");
    let good = write_temp("registry-good.yaml", &manifest("registry-good", &format!("{topic}-value")));
    kubectl_ok(["apply", "-n", &ns, "-f", good.to_str().unwrap()]);
    let job = wait_ready("registry-good", &ns, 1);
    let reported = &job["status"]["registrySchemas"][0];
    assert_eq!((reported["source"].as_str(), reported["version"].as_i64()), (Some("trades"), Some(1)), "{job}");
    assert_eq!(reported["subject"].as_str(), Some(format!("{topic}-value").as_str()));
    assert!(reported["id"].as_i64().is_some_and(|id| id > 0), "{reported}");
    let cm = get("configmap", "registry-good-config", &ns).unwrap();
    let config = WorkerConfig::from_yaml(cm["data"]["worker.yaml"].as_str().unwrap()).unwrap();
    let columns: Vec<&str> = config.spec.sources[0].schema.columns.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(columns, ["trader_id", "symbol", "price", "quantity", "trade_time"]);
    assert!(config.spec.sources[0].schema.registry.is_none(), "the workers read the derived columns");
    every_trade_counted(&out);
    kubectl_ok(["delete", "namespace", &ns, "--wait=false"]);
}

/// The same through a registry behind TLS and HTTP basic authentication
/// (nginx in front of Apicurio, as behind an ingress): the operator reads
/// the password and the CA from the job's Secrets through the API and
/// derives the columns; the workers, with the same Secrets mounted, read
/// and count every record. A Secret that does not exist is the job's
/// fault (InvalidSpec, naming it); credentials the registry refuses are
/// retried as an unreachable registry (a rotated password heals by
/// itself), the message saying so and never showing the password.
#[test]
fn columns_from_a_registry_behind_tls_and_basic_auth_are_read_with_the_jobs_secrets() {
    let ns = new_namespace("op-registry-tls");
    let _kubelet = kubelet().manage(&ns);
    let _operator = start_operator(&ns, "op-a");
    let h = sluice_e2e::harness();
    let (topic, out) = avro_trades("reg-tls");
    let password = std::fs::read_to_string(h.registry_tls_dir.join("password")).unwrap();
    let ca = h.registry_tls_dir.join("ca.crt");
    kubectl_ok([
        "create",
        "secret",
        "generic",
        "registry-user",
        "-n",
        &ns,
        &format!("--from-literal=password={}", password.trim()),
    ]);
    kubectl_ok([
        "create",
        "secret",
        "generic",
        "registry-ca",
        "-n",
        &ns,
        &format!("--from-file=ca.crt={}", ca.display()),
    ]);
    kubectl_ok(["create", "secret", "generic", "wrong-user", "-n", &ns, "--from-literal=password=not-the-password"]);
    let manifest = |name: &str, password_secret: &str| {
        format!(
            r#"apiVersion: sluice.dev/v1alpha1
kind: StreamJob
metadata:
  name: {name}
spec:
  sql: SELECT symbol, COUNT(*) AS n FROM trades GROUP BY symbol
  schemaRegistry:
    url: "{registry}"
    authentication: {{ username: sluice, passwordSecret: {{ secretName: {password_secret}, key: password }} }}
    tls: {{ trustedCertificates: [ {{ secretName: registry-ca, certificate: ca.crt }} ] }}
  sources:
    - name: trades
      kafka: {{ bootstrapServers: "{bootstrap}", topic: {topic} }}
      format: avro
      schema:
        registry: {{ subject: {topic}-value }}
      partitionKey: [symbol]
  sink:
    kafka: {{ bootstrapServers: "{bootstrap}", topic: {out} }}
  workers: 1
  coresPerWorker: 1
"#,
            registry = h.registry_secure_url,
            bootstrap = h.bootstrap,
        )
    };
    let apply = |file: &str, text: &str| {
        let m = write_temp(file, text);
        kubectl_ok(["apply", "-n", &ns, "-f", m.to_str().unwrap()]);
    };
    apply("registry-no-secret.yaml", &manifest("registry-no-secret", "no-such-secret"));
    let (_, _, message) = wait_until("InvalidSpec", Duration::from_secs(60), || {
        condition(&get("sj", "registry-no-secret", &ns)?, "Ready").filter(|c| c.1 == "InvalidSpec")
    });
    assert!(message.contains("Secret no-such-secret not found"), "{message}");
    apply("registry-refused.yaml", &manifest("registry-refused", "wrong-user"));
    let (_, _, message) = wait_until("RegistryUnreachable", Duration::from_secs(60), || {
        condition(&get("sj", "registry-refused", &ns)?, "Ready").filter(|c| c.1 == "RegistryUnreachable")
    });
    assert!(message.contains("refused the credentials"), "{message}");
    let job = get("sj", "registry-refused", &ns).unwrap().to_string();
    assert!(!job.contains("not-the-password") && !job.contains(password.trim()), "a password is never shown: {job}");
    for name in ["registry-no-secret", "registry-refused"] {
        assert!(get("statefulset", name, &ns).is_none(), "{name} launched without its columns");
    }
    apply("registry-tls.yaml", &manifest("registry-tls", "registry-user"));
    let job = wait_ready("registry-tls", &ns, 1);
    let reported = &job["status"]["registrySchemas"][0];
    assert_eq!(reported["subject"].as_str(), Some(format!("{topic}-value").as_str()), "{job}");
    assert!(reported["id"].as_i64().is_some_and(|id| id > 0), "{reported}");
    every_trade_counted(&out);
    kubectl_ok(["delete", "namespace", &ns, "--wait=false"]);
}

/// A sink topic that does not exist (the harness broker creates none):
/// `TopicNotFound` naming the sink before anything is launched, instead of
/// workers that start, fail every delivery and stop; once the topic is
/// created the job runs.
#[test]
fn a_missing_sink_topic_is_reported_launches_nothing_and_recovers_once_created() {
    let ns = new_namespace("op-sink");
    let _kubelet = kubelet().manage(&ns);
    let _operator = start_operator(&ns, "op-a");
    let t = topics(2);
    let missing = unique_name("not-yet");
    let job =
        example("s2-group-by.yaml", &t, |s| s.replace(&format!("topic: {}", t.out), &format!("topic: {missing}")));
    kubectl_ok(["apply", "-n", &ns, "-f", job.to_str().unwrap()]);
    let name = "s2-group-by";
    let (status, _, message) = wait_until("TopicNotFound", Duration::from_secs(60), || {
        condition(&get("sj", name, &ns)?, "Ready").filter(|c| c.1 == "TopicNotFound")
    });
    assert_eq!(status, "False");
    assert!(message.starts_with("sink: topic") && message.contains(&missing), "{message}");
    assert!(get("statefulset", name, &ns).is_none(), "workers launched for a sink that does not exist");
    kafka::create_topic(&missing, 2);
    wait_ready(name, &ns, 2);
    kubectl_ok(["delete", "namespace", &ns, "--wait=false"]);
}

#[test]
fn scaling_one_three_two_moves_partitions_without_overlap_or_loss() {
    let ns = new_namespace("op-scale");
    let _kubelet = kubelet().manage(&ns);
    let _operator = start_operator(&ns, "op-a");
    let t = topics(6);
    let file = example("s2-group-by.yaml", &t, |s| s.replace("workers: 2", "workers: 1"));
    kubectl_ok(["apply", "-n", &ns, "-f", file.to_str().unwrap()]);
    let name = "s2-group-by";
    wait_ready(name, &ns, 1);
    let producer = {
        let topic = t.trades.clone();
        std::thread::spawn(move || {
            for chunk in 0..30u64 {
                produce_trades(&topic, chunk * 500..(chunk + 1) * 500, 6);
                std::thread::sleep(Duration::from_millis(300));
            }
        })
    };
    let mut pauses = Vec::new();
    for workers in [3i64, 2] {
        let before = Instant::now();
        kubectl_ok(["scale", "sj", name, "-n", &ns, &format!("--replicas={workers}")]);
        let job = wait_ready(name, &ns, workers);
        assert_eq!(job["status"]["assignment"]["workers"].as_array().unwrap().len(), usize::try_from(workers).unwrap());
        pauses.push((workers, before.elapsed()));
    }
    producer.join().unwrap();
    wait_for_counts(&t.out, &expected_counts(0..15_000), Duration::from_secs(120));

    let history = kubelet().history(&ns);
    assert!(history.len() >= 6, "1, then 3, then 2 workers ran: {history:?}");
    assert_no_overlap_and_clean_drains(&ns);
    // The pause each rescale caused, from the last old worker's exit to the last new worker's readiness.
    for (workers, took) in pauses {
        println!("rescale to {workers} worker(s): Ready again after {took:?}");
    }
    kubectl_ok(["delete", "namespace", &ns, "--wait=false"]);
}

#[test]
fn suspend_stops_the_workers_and_resume_continues_from_committed_offsets() {
    let ns = new_namespace("op-suspend");
    let _kubelet = kubelet().manage(&ns);
    let _operator = start_operator(&ns, "op-a");
    let t = group_by_job(&ns, 2, 2_000);
    let name = "s2-group-by";
    kubectl_ok(["patch", "sj", name, "-n", &ns, "--type=merge", "-p", r#"{"spec":{"suspend":true}}"#]);
    wait_until("Suspended with no pods", Duration::from_secs(60), || {
        let job = get("sj", name, &ns)?;
        let pods = kubectl_ok(["get", "pods", "-n", &ns, "-o", "name"]);
        (condition(&job, "Ready")?.1 == "Suspended" && pods.trim().is_empty()).then_some(())
    });
    // Suspended: every record read so far is committed, with its state.
    let cm = get("configmap", &format!("{name}-config"), &ns).unwrap();
    let group = WorkerConfig::from_yaml(cm["data"]["worker.yaml"].as_str().unwrap()).unwrap().consumer_group();
    let committed = kafka::committed_positions(&group, &t.trades, 2);
    assert_eq!(
        committed.values().map(|(o, _)| o).sum::<i64>(),
        2_000,
        "all input committed at suspension: {committed:?}"
    );
    assert!(
        committed.values().all(|(_, m)| m.starts_with("sluice:v2:") || m.starts_with("sluice:v3:")),
        "offsets point at saved state: {committed:?}"
    );
    produce_trades(&t.trades, 2_000..3_000, 2);
    kubectl_ok(["patch", "sj", name, "-n", &ns, "--type=merge", "-p", r#"{"spec":{"suspend":false}}"#]);
    wait_ready(name, &ns, 1);
    // Resumed from those offsets and that state: a replay from the start on
    // top of the restored state would count the first 2,000 twice.
    wait_for_counts(&t.out, &expected_counts(0..3_000), Duration::from_secs(60));
    kubectl_ok(["delete", "namespace", &ns, "--wait=false"]);
}

/// Every worker keeps a copy of its checkpoints on a volume: an
/// `emptyDir` by default. Asking for a persistent one changes the
/// StatefulSet's claim templates, which Kubernetes never lets change: the
/// workers are stopped (their state committed), the StatefulSet is
/// replaced with one claim per pod, deleted with the job, and the job
/// resumes with every count exact. Nothing wedges on the refused update.
#[test]
fn a_new_local_state_volume_replaces_the_statefulset_and_the_counts_stay_exact() {
    let ns = new_namespace("op-volume");
    let _kubelet = kubelet().manage(&ns);
    let _operator = start_operator(&ns, "op-a");
    let t = group_by_job(&ns, 2, 2_000);
    let name = "s2-group-by";
    let sts = get("statefulset", name, &ns).unwrap();
    let volumes = &sts["spec"]["template"]["spec"]["volumes"];
    let state = volumes.as_array().unwrap().iter().find(|v| v["name"] == "state").expect("a state volume");
    assert!(state["emptyDir"]["sizeLimit"].is_string(), "{state}");
    let patch = r#"{"spec":{"engine":{"localState":{"volume":"Persistent","size":"1Gi"}}}}"#;
    kubectl_ok(["patch", "sj", name, "-n", &ns, "--type=merge", "-p", patch]);
    let sts = wait_until("a StatefulSet with claim templates", Duration::from_secs(120), || {
        let sts = get("statefulset", name, &ns)?;
        sts["spec"]["volumeClaimTemplates"].is_array().then_some(sts)
    });
    let claim = &sts["spec"]["volumeClaimTemplates"][0];
    assert_eq!(
        (claim["metadata"]["name"].as_str(), claim["spec"]["resources"]["requests"]["storage"].as_str()),
        (Some("state"), Some("1Gi"))
    );
    assert_eq!(sts["spec"]["persistentVolumeClaimRetentionPolicy"]["whenDeleted"], "Delete");
    wait_ready(name, &ns, 1);
    let pvc = wait_until("the worker's claim", Duration::from_secs(60), || get("pvc", &format!("state-{name}-0"), &ns));
    assert_eq!(pvc["spec"]["resources"]["requests"]["storage"], "1Gi");
    produce_trades(&t.trades, 2_000..3_000, 2);
    wait_for_counts(&t.out, &expected_counts(0..3_000), Duration::from_secs(90));
    assert!(kubelet().logs(&ns).contains("restored state"), "the new workers restored the committed state");
    kubectl_ok(["delete", "namespace", &ns, "--wait=false"]);
}

#[test]
fn deleting_the_job_drains_and_garbage_collects_its_children() {
    let ns = new_namespace("op-delete");
    let _kubelet = kubelet().manage(&ns);
    let _operator = start_operator(&ns, "op-a");
    let t = topics(2);
    // Its sink and dead-letter topics are the test's (the operator checks
    // they exist), then its source.
    let file = example("s0-pure-select.yaml", &t, |s| {
        s.replace("workers: 2", "workers: 1")
            .replace("topic: orders-over-100", &format!("topic: {}", t.out))
            .replace("topic: orders-dlq", &format!("topic: {}", t.dlq))
            .replace("topic: orders", &format!("topic: {}", t.trades))
    });
    kubectl_ok(["apply", "-n", &ns, "-f", file.to_str().unwrap()]);
    let name = "s0-pure-select";
    wait_ready(name, &ns, 1);
    kubectl_ok(["delete", "sj", name, "-n", &ns, "--wait=false"]);
    wait_until("job and children gone", Duration::from_secs(90), || {
        let gone = ["sj", "statefulset", "configmap", "service", "pdb"].iter().all(|kind| {
            let n = match *kind {
                "configmap" => format!("{name}-config"),
                "service" | "pdb" => format!("{name}-workers"),
                _ => name.to_owned(),
            };
            get(kind, &n, &ns).is_none()
        });
        gone.then_some(())
    });
    let history = kubelet().history(&ns);
    assert!(history.iter().all(|r| r.exit_ok == Some(true)), "workers drained before deletion: {history:?}");
    kubectl_ok(["delete", "namespace", &ns, "--wait=false"]);
}

/// `reclaimPolicy: Delete`: once the workers drained, the operator deletes
/// the job's consumer group and its state topic, and says so in an event;
/// the job's source and sink topics stay.
#[test]
fn a_job_deleted_with_reclaim_policy_delete_leaves_no_group_or_internal_topic() {
    let ns = new_namespace("op-reclaim");
    let _kubelet = kubelet().manage(&ns);
    let _operator = start_operator(&ns, "op-a");
    let t = topics(2);
    let file = example("s2-group-by.yaml", &t, |s| {
        s.replace("workers: 2", "workers: 1").replace("  sources:", "  reclaimPolicy: Delete\n  sources:")
    });
    kubectl_ok(["apply", "-n", &ns, "-f", file.to_str().unwrap()]);
    let name = "s2-group-by";
    let job = wait_ready(name, &ns, 1);
    let group = job["status"]["consumerGroup"].as_str().expect("status.consumerGroup").to_owned();
    produce_trades(&t.trades, 0..1_000, 2);
    wait_for_counts(&t.out, &expected_counts(0..1_000), Duration::from_secs(90));
    wait_until("state topic and committed group", Duration::from_secs(60), || {
        let state = kafka::topics_starting_with(&group).contains(&format!("{group}.state"));
        (state && kafka::group_exists(&group)).then_some(())
    });
    kubectl_ok(["delete", "sj", name, "-n", &ns, "--wait=false"]);
    wait_until("job gone", Duration::from_secs(120), || get("sj", name, &ns).is_none().then_some(()));
    assert_eq!(kafka::topics_starting_with(&group), Vec::<String>::new(), "internal topics deleted");
    assert!(!kafka::group_exists(&group), "consumer group {group} deleted");
    for topic in [&t.trades, &t.out] {
        assert_eq!(kafka::topics_starting_with(topic).first(), Some(topic), "{topic} stays");
    }
    let events = kubectl_ok(["get", "events", "-n", &ns, "-o", "json"]);
    assert!(
        events.contains("Reclaimed") && events.contains(&format!("deleted consumer group {group}")),
        "an event says what was deleted: {events}"
    );
    kubectl_ok(["delete", "namespace", &ns, "--wait=false"]);
}

/// An operator's `sluice_operator_leader` gauge (1 while it leads).
fn leader_gauge(operator: &sluice_e2e::worker::Worker) -> Option<f64> {
    operator.get("/metrics").and_then(|(_, m)| metric_values(&m, "sluice_operator_leader").first().map(|(_, v)| *v))
}

#[test]
fn a_killed_leader_is_replaced_and_the_standby_converges() {
    let ns = new_namespace("op-leader");
    let _kubelet = kubelet().manage(&ns);
    let mut a = start_operator(&ns, "op-a");
    wait_until("a leads", Duration::from_secs(60), || (leader_gauge(&a) == Some(1.0)).then_some(()));
    let mut b = start_operator(&ns, "op-b");
    wait_until("b up", Duration::from_secs(60), || b.get("/healthz").map(|_| ()));
    assert_eq!((leader_gauge(&a), leader_gauge(&b)), (Some(1.0), Some(0.0)), "exactly one leader");
    let t = topics(2);
    let file = example("s2-group-by.yaml", &t, |s| s.replace("workers: 2", "workers: 1"));
    kubectl_ok(["apply", "-n", &ns, "-f", file.to_str().unwrap()]);
    // Kill the leader in the middle of its work; the standby takes the lease
    // when it expires and converges to the same state.
    std::thread::sleep(Duration::from_millis(300));
    a.signal("KILL");
    let _ = a.wait(Duration::from_secs(10));
    let job = wait_ready("s2-group-by", &ns, 1);
    assert_eq!(leader_gauge(&b), Some(1.0), "the standby leads now");
    assert_eq!(job["status"]["partitions"], 2);
    b.signal("TERM");
    assert!(b.wait(Duration::from_secs(30)).success(), "{}", b.log());
    kubectl_ok(["delete", "namespace", &ns, "--wait=false"]);
}

/// The chart's RBAC is enough: the operator, running with nothing but the
/// token of the ServiceAccount the chart installs (namespaced mode), reports
/// invalid SQL with an event, launches a valid job's children and brings it
/// to Ready — and is never refused by the API server.
#[test]
fn operator_runs_with_only_the_charts_permissions() {
    let release = unique_name("rbac");
    let (home, watched) = (unique_name("rbac-home"), new_namespace("rbac-jobs"));
    let _kubelet = kubelet().manage(&watched);
    helm_ok(&[
        "install",
        &release,
        "helm/sluice",
        "--namespace",
        &home,
        "--create-namespace",
        "--set",
        "crds.install=false",
        "--set",
        &format!("watchNamespaces={{{watched}}}"),
        "--set",
        "replicaCount=0",
    ]);
    let account = format!("{release}-sluice-operator");
    let token = kubectl_ok(["create", "token", &account, "-n", &home, "--duration=1h"]);
    let server = kubectl_ok(["config", "view", "--raw", "--minify", "-o", "jsonpath={.clusters[0].cluster.server}"]);
    let ca = kubectl_ok([
        "config",
        "view",
        "--raw",
        "--minify",
        "-o",
        "jsonpath={.clusters[0].cluster.certificate-authority-data}",
    ]);
    let ca = if ca.trim().is_empty() {
        let file = kubectl_ok([
            "config",
            "view",
            "--raw",
            "--minify",
            "-o",
            "jsonpath={.clusters[0].cluster.certificate-authority}",
        ]);
        format!("certificate-authority: {}", file.trim())
    } else {
        format!("certificate-authority-data: {}", ca.trim())
    };
    let kubeconfig = write_temp(
        "rbac-kubeconfig",
        &format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: h\n  cluster:\n    server: {}\n    {ca}\n\
             users:\n- name: sa\n  user:\n    token: {}\ncontexts:\n- name: sa\n  context: {{cluster: h, user: sa}}\n\
             current-context: sa\n",
            server.trim(),
            token.trim()
        ),
    );
    let mut operator = start_operator_with(&kubeconfig, &watched, &home, &account, "op-rbac");

    let t = topics(2);
    let name = "s2-group-by";
    let bad = example("s2-group-by.yaml", &t, |s| {
        s.replace("workers: 2", "workers: 1")
            .replace("SUM(quantity) AS total_quantity", "SUM(quantty) AS total_quantity")
    });
    kubectl_ok(["apply", "-n", &watched, "-f", bad.to_str().unwrap()]);
    wait_until("InvalidSql", Duration::from_secs(60), || {
        condition(&get("sj", name, &watched)?, "Ready").filter(|c| c.1 == "InvalidSql")
    });
    wait_until("the Warning event", Duration::from_secs(30), || {
        let v: Value = serde_json::from_str(&kubectl_ok(["get", "events", "-n", &watched, "-o", "json"])).unwrap();
        v["items"].as_array().unwrap().iter().any(|e| e["reason"] == "InvalidSql").then_some(())
    });
    let good = example("s2-group-by.yaml", &t, |s| s.replace("workers: 2", "workers: 1"));
    kubectl_ok(["apply", "-n", &watched, "-f", good.to_str().unwrap()]);
    wait_ready(name, &watched, 1);
    for (kind, child) in [
        ("statefulset", name.to_owned()),
        ("configmap", format!("{name}-config")),
        ("service", format!("{name}-workers")),
        ("pdb", format!("{name}-workers")),
    ] {
        assert!(get(kind, &child, &watched).is_some(), "{kind} {child} not created with the chart's permissions");
    }
    // New volume claims replace the StatefulSet (a delete the chart grants).
    let patch = r#"{"spec":{"engine":{"localState":{"volume":"Persistent"}}}}"#;
    kubectl_ok(["patch", "sj", name, "-n", &watched, "--type=merge", "-p", patch]);
    wait_until("the StatefulSet replaced with the chart's permissions", Duration::from_secs(120), || {
        get("statefulset", name, &watched)?["spec"]["volumeClaimTemplates"].is_array().then_some(())
    });
    wait_ready(name, &watched, 1);
    let log = operator.log();
    assert!(!log.contains("forbidden") && !log.contains("Forbidden"), "the API server refused the operator:\n{log}");
    operator.signal("TERM");
    let _ = operator.wait(Duration::from_secs(30));
    let _ = sluice_e2e::helm::helm(&["uninstall", &release, "--namespace", &home]);
    for namespace in [&home, &watched] {
        kubectl_ok(["delete", "namespace", namespace, "--wait=false"]);
    }
}

/// A worker stopped by a fatal error (here: its state outgrew
/// `stateMemoryLimit`) keeps its pod up and not ready; the operator reads
/// the reason from the worker's /readyz and reports it — Degraded=True,
/// reason WorkerFailed, the pod named — with a Warning event. It once
/// showed `WorkersStarting` and `Degraded=False` forever.
#[test]
fn a_failed_worker_is_reported_on_the_job_with_its_reason() {
    let ns = new_namespace("op-fail");
    let _kubelet = kubelet().manage(&ns);
    let _operator = start_operator(&ns, "op-a");
    let t = topics(2);
    let file = example("s2-group-by.yaml", &t, |s| {
        s.replace("  workers: 2\n", "  workers: 1\n  engine: { stateMemoryLimit: 1Ki }\n")
    });
    kubectl_ok(["apply", "-n", &ns, "-f", file.to_str().unwrap()]);
    let name = "s2-group-by";
    wait_ready(name, &ns, 1);
    produce_trades(&t.trades, 0..2_000, 2);
    let (status, _, message) = wait_until("Degraded=True WorkerFailed", Duration::from_secs(120), || {
        condition(&get("sj", name, &ns)?, "Degraded").filter(|c| c.1 == "WorkerFailed")
    });
    assert_eq!(status, "True");
    assert!(message.contains("worker s2-group-by-0") && message.contains("stateMemoryLimit"), "{message}");
    let ready = condition(&get("sj", name, &ns).unwrap(), "Ready").unwrap();
    assert_eq!((ready.0.as_str(), ready.1.as_str()), ("False", "WorkerFailed"), "{ready:?}");
    wait_for_warning(&ns, "WorkerFailed");
    kubectl_ok(["delete", "namespace", &ns, "--wait=false"]);
}

/// Fault suite: the leader is killed with `kill -9` in the middle of a
/// rescale (old workers draining). The standby takes the Lease over and
/// finishes the rescale: no two workers ever own a partition at once, and
/// the totals of everything produced meanwhile are exact.
#[test]
fn a_leader_killed_mid_rescale_is_replaced_and_the_rescale_completes_without_overlap_or_loss() {
    let ns = new_namespace("op-leader-rescale");
    let _kubelet = kubelet().manage(&ns);
    let mut a = start_operator(&ns, "op-a");
    wait_until("a leads", Duration::from_secs(60), || (leader_gauge(&a) == Some(1.0)).then_some(()));
    let b = start_operator(&ns, "op-b");
    let t = topics(4);
    let file = example("s2-group-by.yaml", &t, |s| s.replace("workers: 2", "workers: 1"));
    kubectl_ok(["apply", "-n", &ns, "-f", file.to_str().unwrap()]);
    let name = "s2-group-by";
    wait_ready(name, &ns, 1);
    let producer = {
        let topic = t.trades.clone();
        std::thread::spawn(move || {
            for chunk in 0..20u64 {
                produce_trades(&topic, chunk * 500..(chunk + 1) * 500, 4);
                std::thread::sleep(Duration::from_millis(300));
            }
        })
    };
    kubectl_ok(["scale", "sj", name, "-n", &ns, "--replicas=2"]);
    // The leader announces the rescale (a Normal event, which stays) when it
    // starts draining the old workers; the Ready condition says Rescaling
    // only while they drain, which a poll can miss on a busy machine.
    wait_for_event(&ns, "Normal", "Rescaling", Duration::from_secs(60));
    a.signal("KILL");
    let _ = a.wait(Duration::from_secs(10));
    let job = wait_ready(name, &ns, 2);
    assert_eq!(job["status"]["assignment"]["workers"].as_array().unwrap().len(), 2);
    assert_eq!(leader_gauge(&b), Some(1.0), "the standby leads now");
    producer.join().unwrap();
    wait_for_counts(&t.out, &expected_counts(0..10_000), Duration::from_secs(120));
    assert_no_overlap_and_clean_drains(&ns);
    kubectl_ok(["delete", "namespace", &ns, "--wait=false"]);
}

/// Fault suite: partitions added to a running keyed job's source. The
/// operator notices (within `--resync-seconds`), rescales, and the new
/// workers stop before consuming: `Degraded=True`, `WorkerFailed`, the
/// message naming both counts and what to do. The totals already emitted
/// stay as they were — nothing is split between engines.
#[test]
fn partitions_added_to_a_keyed_source_stop_the_job_with_a_clear_condition() {
    let ns = new_namespace("op-grow");
    let _kubelet = kubelet().manage(&ns);
    let _operator = start_operator(&ns, "op-a");
    let t = group_by_job(&ns, 2, 2_000);
    let name = "s2-group-by";
    let before = expected_counts(0..2_000);

    kafka::add_partitions(&t.trades, 4);
    produce_trades(&t.trades, 2_000..3_000, 4);
    let (status, _, message) = wait_until("Degraded=True WorkerFailed", Duration::from_secs(120), || {
        condition(&get("sj", name, &ns)?, "Degraded").filter(|c| c.1 == "WorkerFailed")
    });
    assert_eq!(status, "True");
    assert!(message.contains("has 4 partitions") && message.contains("laid out for 2"), "{message}");
    assert!(message.contains("rename the job"), "says what to do: {message}");
    wait_for_warning(&ns, "WorkerFailed");
    assert_eq!(get("sj", name, &ns).unwrap()["status"]["partitions"], 4);
    // Until the operator noticed, the old generation went on with its own
    // partitions (0 and 1, where trader mod 4 is 0 or 1 still lands). The
    // traders that moved to the new partitions were never counted by a
    // second engine: their totals are exactly those from before the change.
    let emitted = kafka::consume_all(&t.out, Duration::from_secs(60));
    let last = final_counts(&emitted);
    for ((trader, symbol), n) in &before {
        let moved = trader.trim_start_matches("TRADER").parse::<u64>().unwrap() % 4 >= 2;
        let got = last[&(trader.clone(), symbol.clone())];
        if moved {
            assert_eq!(got, *n, "{trader}/{symbol} moved to a new partition: no partial total");
        } else {
            assert!(got >= *n, "{trader}/{symbol}");
        }
    }
    std::thread::sleep(Duration::from_secs(3));
    let later = kafka::consume_all(&t.out, Duration::from_secs(60));
    assert_eq!(later.len(), emitted.len(), "nothing emitted once the job stopped");
    kubectl_ok(["delete", "namespace", &ns, "--wait=false"]);
}

/// The query of a running job is edited three times. An edit that keeps the
/// state's meaning (a comment, a filter, a new output) continues from the
/// job's offsets and state: the totals of everything produced before and
/// after are exact. An edit that changes an aggregate is refused, saying
/// what differs, and the running query goes on. With `upgradeMode: Fresh`
/// the same edit starts over in a new consumer group, from `startFrom`,
/// and says so in an event.
#[test]
fn query_edits_keep_their_state_are_refused_or_start_fresh() {
    let ns = new_namespace("op-upgrade");
    let _kubelet = kubelet().manage(&ns);
    let _operator = start_operator(&ns, "op-a");
    let t = group_by_job(&ns, 2, 2_000);
    let name = "s2-group-by";
    let group = |job: &Value| job["status"]["consumerGroup"].as_str().unwrap().to_owned();
    let first = get("sj", name, &ns).unwrap();
    let first_group = group(&first);
    assert!(first["status"]["stateLayout"][0].as_str().unwrap().starts_with("stage 0: "), "{first}");
    let config_sql = || {
        let cm = get("configmap", &format!("{name}-config"), &ns).unwrap();
        WorkerConfig::from_yaml(cm["data"]["worker.yaml"].as_str().unwrap()).unwrap().spec.sql
    };
    let apply = |edit: &dyn Fn(String) -> String| {
        let file = example("s2-group-by.yaml", &t, |s| edit(s.replace("workers: 2", "workers: 1")));
        kubectl_ok(["apply", "-n", &ns, "-f", file.to_str().unwrap()]);
    };
    let compatible = |s: String| {
        s.replace(
            "    FROM market_data\n",
            "           , COUNT(*) * 2 AS doubled -- a new output\n    FROM market_data WHERE quantity > 0\n",
        )
    };

    // 1. Compatible: the new query's workers take over the group and state.
    apply(&compatible);
    wait_until("the edited query's workers", Duration::from_secs(120), || {
        let job = get("sj", name, &ns)?;
        let rolled =
            config_sql().contains("doubled") && job["status"]["observedGeneration"] == job["metadata"]["generation"];
        (rolled && condition(&job, "Ready")?.0 == "True").then_some(())
    });
    produce_trades(&t.trades, 2_000..4_000, 2);
    wait_for_counts(&t.out, &expected_counts(0..4_000), Duration::from_secs(120));
    let after = get("sj", name, &ns).unwrap();
    assert_eq!(group(&after), first_group, "a compatible edit keeps the consumer group");
    assert_eq!(after["status"]["queryIdentity"], first["status"]["queryIdentity"]);
    let latest = kafka::consume_all(&t.out, Duration::from_secs(60));
    let last: Value = serde_json::from_slice(&latest.last().unwrap().value).unwrap();
    assert_eq!(last["doubled"].as_i64(), last["trade_count"].as_i64().map(|n| n * 2), "the new query runs: {last}");

    // 2. Incompatible under KeepState: refused; the running query goes on.
    let incompatible =
        |s: String| compatible(s).replace("SUM(quantity) AS total_quantity", "MAX(quantity) AS max_quantity");
    apply(&incompatible);
    let (status, _, message) = wait_until("Degraded=True IncompatibleUpgrade", Duration::from_secs(60), || {
        condition(&get("sj", name, &ns)?, "Degraded").filter(|c| c.1 == "IncompatibleUpgrade")
    });
    assert_eq!(status, "True");
    assert!(message.contains("stage 0 (aggregate): aggregates") && message.contains("Max"), "{message}");
    assert!(message.contains(&first_group) && message.contains("upgradeMode: Fresh"), "{message}");
    wait_for_warning(&ns, "IncompatibleUpgrade");
    assert!(config_sql().contains("SUM(quantity)"), "the running query's config is untouched");
    let job = get("sj", name, &ns).unwrap();
    assert_eq!(condition(&job, "Ready").unwrap().0, "True", "the running query keeps running");
    produce_trades(&t.trades, 4_000..5_000, 2);
    wait_for_counts(&t.out, &expected_counts(0..5_000), Duration::from_secs(90));

    // 3. The same edit with upgradeMode Fresh: a new group, from the start.
    apply(&|s: String| incompatible(s).replace("  workers: 1\n", "  workers: 1\n  upgradeMode: Fresh\n"));
    let events = wait_for_event(&ns, "Normal", "StartedFresh", Duration::from_secs(60));
    let note = events["items"].as_array().unwrap().iter().find(|e| e["reason"] == "StartedFresh").unwrap()["message"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(note.contains(&first_group) && note.contains("startFrom"), "{note}");
    let fresh = wait_until("the fresh query's workers", Duration::from_secs(120), || {
        let job = get("sj", name, &ns)?;
        (config_sql().contains("MAX(quantity)")
            && group(&job) != first_group
            && condition(&job, "Degraded")?.0 == "False"
            && condition(&job, "Ready")?.0 == "True")
            .then_some(job)
    });
    let fresh_group = group(&fresh);
    // Starting over from `startFrom: Earliest`, the new query counts every
    // trade from the first: totals exact, under its own group.
    wait_until("the new query's totals", Duration::from_secs(120), || {
        let records = kafka::consume(&t.out, usize::MAX, Duration::from_secs(2));
        let new: Vec<_> = records
            .into_iter()
            .filter(|r| serde_json::from_slice::<Value>(&r.value).unwrap().get("max_quantity").is_some())
            .collect();
        (final_counts(&new) == expected_counts(0..5_000)).then_some(())
    });
    // Offsets commit at the checkpoint after the rows went out: polled.
    wait_until("the new group's offsets at 5,000", Duration::from_secs(60), || {
        let committed = kafka::committed_positions(&fresh_group, &t.trades, 2);
        (committed.values().map(|(o, _)| o).sum::<i64>() == 5_000).then_some(())
    });
    kubectl_ok(["delete", "namespace", &ns, "--wait=false"]);
}

/// Runs Kafka's AclCommand against the harness broker.
fn kafka_acl(args: &[&str]) {
    let status = std::process::Command::new("bash")
        .arg(sluice_e2e::harness().repo.join("tests/infra/kafka.sh"))
        .arg("acl")
        .args(["--add", "--force"])
        .args(args)
        .stdout(std::process::Stdio::null())
        .status()
        .unwrap();
    assert!(status.success(), "kafka.sh acl {args:?}");
}

/// Jobs reach a secured cluster the way Strimzi users have it: one reads
/// and writes through SASL/SCRAM over TLS (the source SCRAM-SHA-512 with
/// Strimzi's `passwordSecret.password`, the sink and dead letters
/// SCRAM-SHA-256 with `key`), another through mutual TLS, each with
/// Strimzi-shaped Secrets (a KafkaUser's, the cluster CA's) and only the
/// ACLs docs/operations.md lists — the broker authorizes nothing else. No
/// secret value appears in any status, event, ConfigMap, log line or
/// metric.
#[test]
fn jobs_read_and_write_a_secured_cluster_with_strimzi_shaped_secrets() {
    let env = |name: &str| std::env::var(name).unwrap_or_else(|_| panic!("{name}: source target/harness/env"));
    let (sasl, mtls, tls_dir) =
        (env("SLUICE_KAFKA_SASL_BOOTSTRAP"), env("SLUICE_KAFKA_MTLS_BOOTSTRAP"), env("SLUICE_KAFKA_TLS_DIR"));
    let read = |file: &str| std::fs::read_to_string(format!("{tls_dir}/{file}")).unwrap();
    let password = read("scram.password").trim().to_owned();
    let client_key = read("user.key");
    let key_line = client_key.lines().nth(1).unwrap().to_owned();
    let ns = new_namespace("op-secured");
    let _kubelet = kubelet().manage(&ns);
    let operator = start_operator(&ns, "op-a");
    let t = topics(2);
    let copy = unique_name("copy");
    kafka::create_topic(&copy, 1);

    // Strimzi's Secrets: a KafkaUser's (SCRAM: password and the JAAS line;
    // TLS: user.crt, user.key, ca.crt) and the cluster CA's ca.crt.
    let ca = format!("{tls_dir}/ca.crt");
    kubectl_ok([
        "create",
        "secret",
        "generic",
        "harness-cluster-ca-cert",
        "-n",
        &ns,
        &format!("--from-file=ca.crt={ca}"),
    ]);
    let jaas = format!(
        "org.apache.kafka.common.security.scram.ScramLoginModule required username=\"sluice-scram\" password=\"{password}\";"
    );
    kubectl_ok([
        "create",
        "secret",
        "generic",
        "sluice-scram",
        "-n",
        &ns,
        &format!("--from-literal=password={password}"),
        &format!("--from-literal=sasl.jaas.config={jaas}"),
    ]);
    kubectl_ok([
        "create",
        "secret",
        "generic",
        "sluice-mtls",
        "-n",
        &ns,
        &format!("--from-file=user.crt={tls_dir}/user.crt"),
        &format!("--from-file=user.key={tls_dir}/user.key"),
        &format!("--from-file=ca.crt={ca}"),
    ]);

    // The ACLs of docs/operations.md, for both principals, and no more.
    let (secured, mirror) = ("secured", "mtls-copy");
    let users = ["--allow-principal", "User:sluice-scram", "--allow-principal", "User:sluice-mtls"];
    kafka_acl(&[&users[..], &["--operation", "Read", "--operation", "Describe", "--topic", &t.trades]].concat());
    let outputs = ["--topic", &t.out, "--topic", &t.dlq, "--topic", &copy];
    kafka_acl(&[&users[..], &["--operation", "Write", "--operation", "Describe"], &outputs[..]].concat());
    let (p1, p2) = (format!("sluice.{ns}.{secured}."), format!("sluice.{ns}.{mirror}."));
    let internal = ["Create", "Describe", "DescribeConfigs", "Read", "Write", "Delete"].map(|o| ["--operation", o]);
    let prefixed = ["--resource-pattern-type", "prefixed"];
    kafka_acl(&[&users[..], &prefixed, &internal.concat(), &["--topic", &p1, "--topic", &p2]].concat());
    let groups = ["--operation", "Read", "--operation", "Describe", "--group", &p1, "--group", &p2];
    kafka_acl(&[&users[..], &prefixed, &groups[..]].concat());

    let tls = "tls: { trustedCertificates: [ { secretName: harness-cluster-ca-cert, certificate: ca.crt } ] }";
    let sink_auth = "authentication: { type: scram-sha-256, username: sluice-scram, \
                     passwordSecret: { secretName: sluice-scram, key: password } }";
    let columns = "columns:
          - { name: trader_id, type: string, required: true }
          - { name: symbol, type: string, required: true }
          - { name: price, type: double, required: true }
          - { name: quantity, type: bigint, required: true }
          - { name: trade_time, type: timestamp, required: true }";
    let manifest = format!(
        "apiVersion: sluice.dev/v1alpha1
kind: StreamJob
metadata: {{ name: {secured} }}
spec:
  sql: |
    SELECT trader_id, symbol, COUNT(*) AS trade_count, SUM(quantity) AS total_quantity
    FROM market_data GROUP BY trader_id, symbol
  sources:
    - name: market_data
      kafka:
        bootstrapServers: \"{sasl}\"
        topic: {trades}
        {tls}
        authentication:
          type: scram-sha-512
          username: sluice-scram
          passwordSecret: {{ secretName: sluice-scram, password: password }}
      schema:
        {columns}
      partitionKey: [trader_id]
  sink:
    kafka: {{ bootstrapServers: \"{sasl}\", topic: {out}, {tls}, {sink_auth} }}
  deadLetter:
    kafka: {{ bootstrapServers: \"{sasl}\", topic: {dlq}, {tls}, {sink_auth} }}
  workers: 1
  coresPerWorker: 2
---
apiVersion: sluice.dev/v1alpha1
kind: StreamJob
metadata: {{ name: {mirror} }}
spec:
  sql: SELECT trader_id, quantity FROM market_data WHERE quantity >= 0
  sources:
    - name: market_data
      kafka:
        bootstrapServers: \"{mtls}\"
        topic: {trades}
        tls: {{ trustedCertificates: [ {{ secretName: sluice-mtls, certificate: ca.crt }} ] }}
        authentication:
          type: tls
          certificateAndKey: {{ secretName: sluice-mtls, certificate: user.crt, key: user.key }}
      schema:
        {columns}
  sink:
    kafka:
      bootstrapServers: \"{mtls}\"
      topic: {copy}
      tls: {{ trustedCertificates: [ {{ secretName: sluice-mtls, certificate: ca.crt }} ] }}
      authentication:
        type: tls
        certificateAndKey: {{ secretName: sluice-mtls, certificate: user.crt, key: user.key }}
  workers: 1
  coresPerWorker: 1
",
        trades = t.trades,
        out = t.out,
        dlq = t.dlq,
    );
    let file = write_temp("secured.yaml", &manifest);
    kubectl_ok(["apply", "-n", &ns, "-f", file.to_str().unwrap()]);
    wait_ready(secured, &ns, 1);
    wait_ready(mirror, &ns, 1);
    produce_trades(&t.trades, 0..2_000, 2);
    kafka::produce(&t.trades, &[(Some(b"TRADER1".as_slice()), b"{not json".as_slice(), Some(1))]);
    wait_for_counts(&t.out, &expected_counts(0..2_000), Duration::from_secs(120));
    assert!(kafka::consume(&copy, 2_000, Duration::from_secs(60)).len() >= 2_000, "the mTLS job copies every trade");
    let dead = kafka::consume(&t.dlq, 1, Duration::from_secs(60));
    assert_eq!(dead.len(), 1, "the malformed record is dead-lettered through SCRAM-SHA-256");
    let job = get("sj", secured, &ns).unwrap();
    let group = job["status"]["consumerGroup"].as_str().unwrap().to_owned();
    assert!(group.starts_with(&p1), "{group}");
    wait_until("every trade's offset committed", Duration::from_secs(60), || {
        (kafka::committed_offsets(&group, &t.trades, 2).values().sum::<i64>() == 2_001).then_some(())
    });
    // A restarted worker restores its state through the same credentials
    // and ACLs: the totals go on from where they were.
    let runs = |ready: bool| {
        kubelet().history(&ns).iter().filter(|r| r.pod == "secured-0" && (!ready || r.ready.is_some())).count()
    };
    let before = runs(false);
    kubectl_ok(["delete", "pod", "secured-0", "-n", &ns, "--wait=false"]);
    wait_until("secured-0 restarted and ready", Duration::from_secs(120), || (runs(true) > before).then_some(()));
    produce_trades(&t.trades, 2_000..3_000, 2);
    wait_for_counts(&t.out, &expected_counts(0..3_000), Duration::from_secs(120));

    // Everything a user or a scraper can see, and where a value could leak.
    let mut seen = String::new();
    for kind in ["sj", "events", "configmaps", "statefulsets", "pods"] {
        seen.push_str(&kubectl_ok(["get", kind, "-n", &ns, "-o", "json"]));
    }
    seen.push_str(&operator.log());
    seen.push_str(&operator.get("/metrics").unwrap().1);
    seen.push_str(&kubelet().logs(&ns));
    let metrics = kubelet().metrics(&ns);
    assert!(metrics.contains("sluice_records_in_total"), "{metrics}");
    seen.push_str(&metrics);
    assert!(!seen.contains(&password), "the SCRAM password leaked");
    assert!(!seen.contains(&key_line), "the client's private key leaked");
    kubectl_ok(["delete", "namespace", &ns, "--wait=false"]);
}
