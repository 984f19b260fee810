//! What every child of a StreamJob carries: its namespace, the job's labels
//! and a controller owner reference.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Resource;
use sluice_crds::StreamJob;

use crate::names;

/// Metadata of a child named `name`: namespace, labels, owner reference.
pub(super) fn child_meta(job: &StreamJob, name: String) -> ObjectMeta {
    let job_name = job.metadata.name.clone().unwrap_or_default();
    ObjectMeta {
        name: Some(name),
        namespace: job.metadata.namespace.clone(),
        labels: Some(names::labels(&job_name)),
        owner_references: job.controller_owner_ref(&()).map(|o| vec![o]),
        ..ObjectMeta::default()
    }
}
