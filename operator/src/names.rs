//! Names and labels of the objects the operator creates for a job.

use std::collections::BTreeMap;

use sluice_crds::JOB_LABEL;

pub use sluice_crds::contract::{
    ASSIGNMENT_HASH_ANNOTATION as ASSIGNMENT_HASH, CONFIG_DIR, CONFIG_FILE, CONFIG_HASH_ANNOTATION as CONFIG_HASH,
    FINALIZER, SECRETS_DIR, STATE_DIR,
};

/// Annotation on the StatefulSet: the volume claims its pods get (a claim
/// template cannot change on a StatefulSet; a new one replaces it).
pub const VOLUME_CLAIMS: &str = "sluice.dev/volume-claims";

/// Port of every worker's /metrics, /healthz, /readyz (a container port is an i32).
pub const WORKER_HTTP_PORT: i32 = sluice_crds::contract::WORKER_HTTP_PORT as i32;

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
