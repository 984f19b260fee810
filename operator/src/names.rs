//! Names and labels of the objects the operator creates for a job.

use std::collections::BTreeMap;

use sluice_crds::JOB_LABEL;

/// Port of every worker's /metrics, /healthz, /readyz.
pub const WORKER_HTTP_PORT: i32 = 9400;
/// Where the worker config is mounted in a pod.
pub const CONFIG_DIR: &str = "/etc/sluice/config";
pub const CONFIG_FILE: &str = "worker.yaml";
/// Where referenced Secrets are mounted, one directory each.
pub const SECRETS_DIR: &str = "/etc/sluice/secrets";
/// Annotation on the pod template: hash of the worker config.
pub const CONFIG_HASH: &str = "sluice.dev/config-hash";
/// Annotation on the StatefulSet: hash of what decides partition ownership.
pub const ASSIGNMENT_HASH: &str = "sluice.dev/assignment-hash";
pub const FINALIZER: &str = "sluice.dev/drain";

pub fn statefulset(job: &str) -> String {
    job.to_owned()
}
pub fn config_map(job: &str) -> String {
    format!("{job}-config")
}
pub fn service(job: &str) -> String {
    format!("{job}-workers")
}
pub fn pdb(job: &str) -> String {
    format!("{job}-workers")
}

/// Labels selecting a job's worker pods.
pub fn selector(job: &str) -> BTreeMap<String, String> {
    BTreeMap::from([
        ("app.kubernetes.io/name".to_owned(), "sluice-worker".to_owned()),
        (JOB_LABEL.to_owned(), job.to_owned()),
    ])
}

/// Labels on every object of a job.
pub fn labels(job: &str) -> BTreeMap<String, String> {
    let mut l = selector(job);
    l.insert("app.kubernetes.io/managed-by".into(), "sluice-operator".into());
    l.insert("app.kubernetes.io/part-of".into(), "sluice".into());
    l
}

/// `a=b,c=d`, as `status.selector` and label selectors are written.
pub fn selector_string(job: &str) -> String {
    selector(job).iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join(",")
}
