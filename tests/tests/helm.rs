//! The Helm chart (`helm/sluice`) with the harness's real Helm and
//! kube-apiserver: it lints, renders what the API server accepts (cluster-wide
//! and namespaced), grants exactly the operator's permissions, installs,
//! upgrades the CRD on `helm upgrade`, keeps it on `helm uninstall`, and
//! rejects bad values naming the field. `manifests/install.yaml` and the
//! chart's copy of the CRD are kept equal to what they are generated from.

// Test code: failing loudly is its job.
#![allow(clippy::panic, clippy::expect_used, clippy::unwrap_used)]

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

use serde_json::Value;
use sluice_e2e::helm::{helm, helm_ok};
use sluice_e2e::kube::{kubectl, kubectl_ok, new_namespace, yaml_files};
use sluice_e2e::worker::write_temp;
use sluice_e2e::{copy_dir, harness, unique_name};

const CHART: &str = "helm/sluice";
const CRD: &str = "streamjobs.sluice.dev";
/// What `manifests/install.yaml` is rendered with.
const INSTALL_NAMESPACE: &str = "sluice-system";

fn read(path: &str) -> String {
    let p = harness().repo.join(path);
    std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("read {}: {e}", p.display()))
}

/// The documents of a multi-document YAML stream, parsed.
fn documents(yaml: &str) -> Vec<Value> {
    let mut docs = Vec::new();
    let mut current = String::new();
    for line in yaml.lines().chain(std::iter::once("---")) {
        if line == "---" {
            let is_empty = current.lines().all(|l| l.trim().is_empty() || l.trim_start().starts_with('#'));
            if !is_empty {
                let doc: Value = serde_saphyr::from_str(&current)
                    .unwrap_or_else(|e| panic!("rendered YAML does not parse: {e}\n{current}"));
                docs.push(doc);
            }
            current.clear();
        } else {
            current.push_str(line);
            current.push('\n');
        }
    }
    docs
}

fn of_kind<'a>(docs: &'a [Value], kind: &str) -> Vec<&'a Value> {
    docs.iter().filter(|d| d["kind"] == kind).collect()
}

fn strings(v: &Value) -> Vec<String> {
    v.as_array().map(|a| a.iter().filter_map(|s| s.as_str().map(str::to_owned)).collect()).unwrap_or_default()
}

/// `(apiGroup, resource) → verbs` of RBAC rules.
fn permissions(rules: &Value) -> BTreeMap<(String, String), BTreeSet<String>> {
    let mut out: BTreeMap<(String, String), BTreeSet<String>> = BTreeMap::new();
    for rule in rules.as_array().expect("rules") {
        assert!(rule.get("nonResourceURLs").is_none(), "no non-resource URLs: {rule}");
        for group in strings(&rule["apiGroups"]) {
            for resource in strings(&rule["resources"]) {
                assert_ne!(resource, "*", "no wildcard resources: {rule}");
                let verbs = strings(&rule["verbs"]);
                assert!(!verbs.contains(&"*".to_owned()), "no wildcard verbs: {rule}");
                out.entry((group.clone(), resource)).or_default().extend(verbs);
            }
        }
    }
    out
}

/// Exactly the API calls `sluice-operator` makes for StreamJobs. That they
/// are enough is proven by `operator_runs_with_only_the_charts_permissions`
/// (tests/operator.rs), which runs the operator as the chart's ServiceAccount.
fn job_permissions() -> BTreeMap<(String, String), BTreeSet<String>> {
    const CHILDREN: &[&str] = &["list", "watch", "create", "patch"];
    let table: &[(&str, &str, &[&str])] = &[
        ("sluice.dev", "streamjobs", &["list", "watch", "patch"]),
        ("sluice.dev", "streamjobs/status", &["patch"]),
        ("sluice.dev", "streamjobs/finalizers", &["update"]),
        ("apps", "statefulsets", &["get", "list", "watch", "create", "patch", "delete"]),
        ("", "configmaps", CHILDREN),
        ("", "services", CHILDREN),
        ("policy", "poddisruptionbudgets", CHILDREN),
        ("", "pods", &["list"]),
        ("", "secrets", &["get"]),
        ("events.k8s.io", "events", &["create", "patch"]),
    ];
    table
        .iter()
        .map(|(g, r, verbs)| (((*g).to_owned(), (*r).to_owned()), verbs.iter().map(|v| (*v).to_owned()).collect()))
        .collect()
}

fn lease_permissions() -> BTreeMap<(String, String), BTreeSet<String>> {
    BTreeMap::from([(
        ("coordination.k8s.io".to_owned(), "leases".to_owned()),
        ["create", "get", "update"].iter().map(|v| (*v).to_owned()).collect(),
    )])
}

/// The env value `name` of the operator container, if set.
fn operator_env(deployment: &Value, name: &str) -> Option<String> {
    deployment["spec"]["template"]["spec"]["containers"][0]["env"]
        .as_array()?
        .iter()
        .find(|e| e["name"] == name)
        .and_then(|e| e["value"].as_str().map(str::to_owned))
}

fn operator_args(deployment: &Value) -> Vec<String> {
    strings(&deployment["spec"]["template"]["spec"]["containers"][0]["args"])
}

/// Renders the chart into `namespace` and dry-runs it on the API server.
fn render_and_dry_run(namespace: &str, extra: &[&str]) -> Vec<Value> {
    let mut args = vec!["template", "sluice", CHART, "--namespace", namespace];
    args.extend_from_slice(extra);
    let rendered = helm_ok(&args);
    let file = write_temp("chart.yaml", &rendered);
    let out = kubectl_ok(["apply", "--dry-run=server", "-f", file.to_str().unwrap()]);
    for object in ["deployment.apps/sluice-operator", "serviceaccount/sluice-operator", "service/sluice-operator"] {
        assert!(out.contains(&format!("{object} created (server dry run)")), "{object} not accepted:\n{out}");
    }
    assert!(out.contains(&format!("customresourcedefinition.apiextensions.k8s.io/{CRD}")), "{out}");
    documents(&rendered)
}

#[test]
fn chart_lints_strictly_with_defaults_and_every_option() {
    let cases: [&[&str]; 6] = [
        &[],
        &["--set", "watchNamespaces={a,b}"],
        &[
            "--set",
            "serviceMonitor.enabled=true",
            "--set",
            "podMonitor.enabled=true",
            "--set",
            "prometheusRule.enabled=true",
        ],
        &["--set", "watchNamespaces={a,b}", "--set", "serviceMonitor.enabled=true", "--set", "podMonitor.enabled=true"],
        &["--set", "crds.install=false", "--set", "dashboards.enabled=false", "--set", "metrics.service.enabled=false"],
        &[
            "--set",
            "replicaCount=1",
            "--set",
            "leaderElection.enabled=false",
            "--set",
            "workerOtlpEndpoint=http://otel:4318",
        ],
    ];
    for extra in cases {
        let mut args = vec!["lint", "--strict", CHART];
        args.extend_from_slice(extra);
        let out = helm_ok(&args);
        assert!(out.contains("1 chart(s) linted, 0 chart(s) failed"), "{extra:?}:\n{out}");
    }
}

#[test]
fn install_yaml_is_the_chart_rendered_with_defaults() {
    let file = read("manifests/install.yaml");
    let mut body = String::new();
    for line in file.lines().skip_while(|l| l.starts_with('#')) {
        body.push_str(line);
        body.push('\n');
    }
    assert!(file.lines().next().is_some_and(|l| l.starts_with('#')), "install.yaml starts with how it was generated");
    let rendered = helm_ok(&["template", "sluice", CHART, "--namespace", INSTALL_NAMESPACE]);
    if body != rendered {
        let first_difference = body.lines().zip(rendered.lines()).enumerate().find(|(_, (a, b))| a != b).map_or_else(
            || "(one is a prefix of the other)".to_owned(),
            |(i, (a, b))| format!("line {i}: {a:?} != {b:?}"),
        );
        panic!(
            "manifests/install.yaml is out of date ({first_difference}); regenerate it:\n  \
             {{ sed '/^---/,$d' manifests/install.yaml; helm template sluice helm/sluice --namespace sluice-system; }} \
             > /tmp/install.yaml && mv /tmp/install.yaml manifests/install.yaml"
        );
    }
}

#[test]
fn chart_crd_is_an_exact_copy_of_the_generated_crd() {
    assert!(
        read("helm/sluice/files/streamjob.yaml") == read("crds/streamjob.yaml"),
        "helm/sluice/files/streamjob.yaml differs from crds/streamjob.yaml: \
         cp crds/streamjob.yaml helm/sluice/files/streamjob.yaml"
    );
    // And the chart renders it, with its keep policy.
    let docs = documents(&helm_ok(&["template", "sluice", CHART]));
    let crds = of_kind(&docs, "CustomResourceDefinition");
    assert_eq!(crds.len(), 1);
    assert_eq!(crds[0]["metadata"]["name"], CRD);
    assert_eq!(crds[0]["metadata"]["annotations"]["helm.sh/resource-policy"], "keep");
    let generated: Value = serde_saphyr::from_str(&read("crds/streamjob.yaml")).unwrap();
    assert_eq!(crds[0]["spec"], generated["spec"], "the rendered CRD's spec is the generated one");
    let without_keep = documents(&helm_ok(&["template", "sluice", CHART, "--set", "crds.keep=false"]));
    assert!(of_kind(&without_keep, "CustomResourceDefinition")[0]["metadata"]["annotations"].is_null());
    let without_crd = documents(&helm_ok(&["template", "sluice", CHART, "--set", "crds.install=false"]));
    assert!(of_kind(&without_crd, "CustomResourceDefinition").is_empty());
}

#[test]
fn rendered_chart_is_accepted_by_the_api_server_cluster_wide() {
    let ns = new_namespace("helm-dry");
    let docs = render_and_dry_run(&ns, &[]);
    // Least privilege: the operator's calls, nothing more.
    let cluster_roles = of_kind(&docs, "ClusterRole");
    assert_eq!(cluster_roles.len(), 1);
    assert_eq!(permissions(&cluster_roles[0]["rules"]), job_permissions());
    let roles = of_kind(&docs, "Role");
    assert_eq!(roles.len(), 1, "only the leader-election Role");
    assert_eq!(roles[0]["metadata"]["namespace"], ns.as_str(), "leases in the release namespace only");
    assert_eq!(permissions(&roles[0]["rules"]), lease_permissions());
    let binding = of_kind(&docs, "ClusterRoleBinding")[0];
    assert_eq!(binding["subjects"][0]["name"], "sluice-operator");
    assert_eq!(binding["subjects"][0]["namespace"], ns.as_str());
    let deployment = of_kind(&docs, "Deployment")[0];
    let container = &deployment["spec"]["template"]["spec"]["containers"][0];
    assert_eq!(strings(&container["command"]), ["sluice-operator"]);
    let args = operator_args(deployment);
    for flag in [
        "--worker-image=ghcr.io/sluice-dev/sluice:0.1.0",
        "--http-port=8080",
        "--leader-election=true",
        "--kafka-timeout-seconds=10",
        "--worker-log-format=json",
        "--log-format=json",
    ] {
        assert!(args.iter().any(|a| a == flag), "missing {flag} in {args:?}");
    }
    assert_eq!(operator_env(deployment, "SLUICE_WATCH_NAMESPACES"), None, "cluster-wide: no namespace list");
    assert_eq!(operator_env(deployment, "SLUICE_WORKER_OTLP_ENDPOINT"), None);
    assert_eq!(deployment["spec"]["replicas"], 2);
    assert_eq!(container["securityContext"]["readOnlyRootFilesystem"], true);
    assert_eq!(container["securityContext"]["allowPrivilegeEscalation"], false);
    assert_eq!(strings(&container["securityContext"]["capabilities"]["drop"]), ["ALL"]);
    assert_eq!(deployment["spec"]["template"]["spec"]["securityContext"]["runAsUser"], 65532);
    assert_eq!(deployment["spec"]["template"]["spec"]["securityContext"]["seccompProfile"]["type"], "RuntimeDefault");
    kubectl_ok(["delete", "namespace", &ns, "--wait=false"]);
}

#[test]
fn rendered_chart_is_accepted_by_the_api_server_namespaced() {
    let ns = new_namespace("helm-dry");
    let (a, b) = (new_namespace("helm-team"), new_namespace("helm-team"));
    let docs = render_and_dry_run(
        &ns,
        &["--set", &format!("watchNamespaces={{{a},{b}}}"), "--set", "workerOtlpEndpoint=http://otel-collector:4318"],
    );
    assert!(of_kind(&docs, "ClusterRole").is_empty(), "namespaced mode has no cluster-wide access");
    assert!(of_kind(&docs, "ClusterRoleBinding").is_empty());
    let roles = of_kind(&docs, "Role");
    for watched in [&a, &b] {
        let role = roles
            .iter()
            .find(|r| r["metadata"]["namespace"] == watched.as_str() && r["metadata"]["name"] == "sluice-operator")
            .unwrap_or_else(|| panic!("no Role in {watched}"));
        assert_eq!(permissions(&role["rules"]), job_permissions());
        let binding = of_kind(&docs, "RoleBinding")
            .into_iter()
            .find(|r| r["metadata"]["namespace"] == watched.as_str())
            .unwrap_or_else(|| panic!("no RoleBinding in {watched}"));
        assert_eq!(binding["subjects"][0]["namespace"], ns.as_str());
    }
    let lease_role = roles.iter().find(|r| r["metadata"]["namespace"] == ns.as_str()).expect("leader-election Role");
    assert_eq!(permissions(&lease_role["rules"]), lease_permissions());
    let deployment = of_kind(&docs, "Deployment")[0];
    assert_eq!(operator_env(deployment, "SLUICE_WATCH_NAMESPACES"), Some(format!("{a},{b}")));
    assert_eq!(operator_env(deployment, "SLUICE_WORKER_OTLP_ENDPOINT").as_deref(), Some("http://otel-collector:4318"));
    for namespace in [&ns, &a, &b] {
        kubectl_ok(["delete", "namespace", namespace, "--wait=false"]);
    }
}

#[test]
fn monitors_select_the_operator_and_the_worker_pods() {
    let docs = documents(&helm_ok(&[
        "template",
        "sluice",
        CHART,
        "--set",
        "serviceMonitor.enabled=true",
        "--set",
        "podMonitor.enabled=true",
        "--set",
        "podMonitor.labels.release=prom",
        "--set",
        "prometheusRule.enabled=true",
    ]));
    // The PrometheusRule carries exactly the rule groups of
    // files/alerts.yaml, which the dashboard test evaluates.
    let rule = of_kind(&docs, "PrometheusRule")[0];
    let alerts: Value = serde_saphyr::from_str(&read("helm/sluice/files/alerts.yaml")).unwrap();
    assert_eq!(rule["spec"]["groups"], alerts["groups"]);
    let pod_monitor = of_kind(&docs, "PodMonitor")[0];
    assert_eq!(pod_monitor["spec"]["selector"]["matchLabels"]["app.kubernetes.io/name"], "sluice-worker");
    assert_eq!(pod_monitor["spec"]["podMetricsEndpoints"][0]["port"], "http");
    assert_eq!(pod_monitor["spec"]["podMetricsEndpoints"][0]["path"], "/metrics");
    assert_eq!(pod_monitor["spec"]["namespaceSelector"]["any"], true);
    assert_eq!(pod_monitor["metadata"]["labels"]["release"], "prom");
    let service_monitor = of_kind(&docs, "ServiceMonitor")[0];
    let service = of_kind(&docs, "Service")[0];
    for (k, v) in service_monitor["spec"]["selector"]["matchLabels"].as_object().unwrap() {
        assert_eq!(&service["metadata"]["labels"][k], v, "the ServiceMonitor selects the metrics Service");
    }
    assert_eq!(service_monitor["spec"]["endpoints"][0]["port"], service["spec"]["ports"][0]["name"]);
    // The worker pods the PodMonitor selects must not include the operator's.
    let deployment = of_kind(&docs, "Deployment")[0];
    assert_ne!(deployment["spec"]["template"]["metadata"]["labels"]["app.kubernetes.io/name"], "sluice-worker");
}

/// Puts the harness's CRD back as `tests/infra/up.sh` applied it, whatever
/// the test did to it (also when it fails half-way).
struct RestoreCrd {
    release: String,
    namespace: String,
}

impl Drop for RestoreCrd {
    fn drop(&mut self) {
        let _ = helm(&["uninstall", &self.release, "--namespace", &self.namespace]);
        let _ = kubectl(["apply", "--server-side", "--force-conflicts", "-f", "crds/streamjob.yaml"]);
        let crd = format!("crd/{CRD}");
        let _ = kubectl([
            "label",
            &crd,
            "app.kubernetes.io/managed-by-",
            "app.kubernetes.io/instance-",
            "app.kubernetes.io/name-",
            "app.kubernetes.io/part-of-",
            "app.kubernetes.io/version-",
            "helm.sh/chart-",
        ]);
        let _ = kubectl([
            "annotate",
            &crd,
            "meta.helm.sh/release-name-",
            "meta.helm.sh/release-namespace-",
            "helm.sh/resource-policy-",
        ]);
        let _ = kubectl(["delete", "namespace", &self.namespace, "--wait=false"]);
    }
}

fn printer_columns() -> Vec<String> {
    let out = kubectl_ok(["get", "crd", CRD, "-o", "jsonpath={.spec.versions[0].additionalPrinterColumns[*].name}"]);
    out.split_whitespace().map(str::to_owned).collect()
}

fn exists(kind: &str, name: &str, namespace: Option<&str>) -> bool {
    let mut args = vec!["get", kind, name, "-o", "name"];
    if let Some(ns) = namespace {
        args.extend(["-n", ns]);
    }
    kubectl(args).success
}

#[test]
fn install_upgrade_uninstall_manages_the_crd_and_keeps_it() {
    let release = unique_name("sl");
    let ns = unique_name("helm-install");
    let restore = RestoreCrd { release: release.clone(), namespace: ns.clone() };
    let fullname = format!("{release}-sluice");
    let operator = format!("{fullname}-operator");
    let original_columns = printer_columns();

    // The harness applied the CRD without Helm's ownership metadata: adopt it.
    helm_ok(&["install", &release, CHART, "--namespace", &ns, "--create-namespace", "--take-ownership"]);
    let leader_election = format!("{operator}-leader-election");
    let dashboards_name = format!("{fullname}-dashboards");
    for (kind, name) in [
        ("deployment", operator.as_str()),
        ("serviceaccount", operator.as_str()),
        ("service", operator.as_str()),
        ("role", leader_election.as_str()),
        ("rolebinding", leader_election.as_str()),
        ("configmap", dashboards_name.as_str()),
    ] {
        assert!(exists(kind, name, Some(ns.as_str())), "{kind}/{name} not created in {ns}");
    }
    for kind in ["clusterrole", "clusterrolebinding"] {
        assert!(exists(kind, &operator, None), "{kind}/{operator} not created");
    }
    let deployment: Value =
        serde_json::from_str(&kubectl_ok(["get", "deployment", &operator, "-n", &ns, "-o", "json"])).unwrap();
    assert_eq!(strings(&deployment["spec"]["template"]["spec"]["containers"][0]["command"]), ["sluice-operator"]);
    assert!(operator_args(&deployment).contains(&format!("--lease-name={operator}")));
    let dashboards: Value =
        serde_json::from_str(&kubectl_ok(["get", "configmap", &dashboards_name, "-n", &ns, "-o", "json"])).unwrap();
    assert_eq!(dashboards["metadata"]["labels"]["grafana_dashboard"], "1", "the Grafana sidecar's label");
    let dashboard: Value = serde_json::from_str(dashboards["data"]["sluice.json"].as_str().unwrap()).unwrap();
    assert_eq!(dashboard["uid"], "sluice-overview");
    let crd: Value = serde_json::from_str(&kubectl_ok(["get", "crd", CRD, "-o", "json"])).unwrap();
    assert_eq!(crd["metadata"]["annotations"]["meta.helm.sh/release-name"], release.as_str(), "managed by the release");
    assert_eq!(crd["metadata"]["annotations"]["helm.sh/resource-policy"], "keep");

    // A chart whose CRD changed: `helm upgrade` must change the cluster's CRD.
    let chart = harness().run_dir.join("tests").join(unique_name("chart"));
    copy_dir(&harness().repo.join(CHART), &chart);
    let crd_file: PathBuf = chart.join("files/streamjob.yaml");
    let text = std::fs::read_to_string(&crd_file).unwrap();
    let age = "    - jsonPath: .metadata.creationTimestamp\n      name: Age\n      type: date\n";
    assert!(text.contains(age));
    let upgraded = text.replacen(
        age,
        &format!("{age}    - jsonPath: .spec.coresPerWorker\n      name: Helm-Upgraded\n      priority: 1\n      type: integer\n"),
        1,
    );
    std::fs::write(&crd_file, upgraded).unwrap();
    helm_ok(&["upgrade", &release, chart.to_str().unwrap(), "--namespace", &ns]);
    let columns = printer_columns();
    assert!(columns.contains(&"Helm-Upgraded".to_owned()), "helm upgrade did not upgrade the CRD: {columns:?}");

    // Uninstall: the operator goes, the CRD (and so every StreamJob) stays.
    let out = helm_ok(&["uninstall", &release, "--namespace", &ns]);
    assert!(out.contains(CRD), "helm reports the kept CRD:\n{out}");
    assert!(!exists("deployment", &operator, Some(ns.as_str())), "the Deployment is removed");
    assert!(!exists("clusterrole", &operator, None), "the ClusterRole is removed");
    assert!(exists("crd", CRD, None), "the CRD is kept");
    assert!(printer_columns().contains(&"Helm-Upgraded".to_owned()));

    // Leave the harness's CRD as it was for every other test.
    drop(restore);
    assert_eq!(printer_columns(), original_columns, "the original CRD is restored");
    let crd: Value = serde_json::from_str(&kubectl_ok(["get", "crd", CRD, "-o", "json"])).unwrap();
    assert!(crd["metadata"]["annotations"].get("meta.helm.sh/release-name").is_none());
    let _ = std::fs::remove_dir_all(&chart);
}

#[test]
fn every_example_passes_a_server_dry_run() {
    let ns = new_namespace("helm-examples");
    let files = yaml_files("manifests/examples");
    assert!(!files.is_empty());
    for f in &files {
        let out = kubectl_ok(["apply", "--dry-run=server", "-n", &ns, "-f", f.to_str().unwrap()]);
        assert!(out.contains("(server dry run)"), "{}: {out}", f.display());
    }
    kubectl_ok(["delete", "namespace", &ns, "--wait=false"]);
}

#[test]
fn bad_values_are_rejected_naming_the_field() {
    for (values, expected) in [
        ("replicaCount: abc\n", "/replicaCount"),
        ("watchNamespace: [team-a]\n", "'watchNamespace' not allowed"),
        ("image:\n  repository: x\n  tagg: latest\n", "'tagg' not allowed"),
        ("logFormat: xml\n", "/logFormat"),
        ("watchNamespaces: [Team_A]\n", "/watchNamespaces/0"),
        ("resources:\n  limits:\n    cpu: lots\n", "/resources/limits/cpu"),
        ("serviceMonitor:\n  enabled: true\n  interval: often\n", "/serviceMonitor/interval"),
        ("securityContext:\n  runAsRoot: true\n", "'runAsRoot' not allowed"),
        ("metrics:\n  service:\n    port: 70000\n", "/metrics/service/port"),
        ("crds:\n  keep: \"yes\"\n", "/crds/keep"),
        ("replicaCount: 3\nleaderElection:\n  enabled: false\n", "/leaderElection/enabled"),
        ("serviceMonitor:\n  enabled: true\nmetrics:\n  service:\n    enabled: false\n", "/metrics/service/enabled"),
    ] {
        let file = write_temp("values.yaml", values);
        for command in ["template", "lint"] {
            let mut args = vec![command];
            if command == "template" {
                args.push("sluice");
            }
            args.extend([CHART, "-f", file.to_str().unwrap()]);
            let r = helm(&args);
            assert!(!r.success, "helm {command} accepted {values:?}:\n{}", r.stdout);
            let output = format!("{}{}", r.stdout, r.stderr);
            assert!(output.contains(expected), "helm {command} with {values:?} does not name {expected:?}:\n{output}");
        }
    }
}
