use k8s_openapi::api::policy::v1::{PodDisruptionBudget, PodDisruptionBudgetSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use sluice_crds::StreamJob;

use super::meta::child_meta;
use crate::names;

/// At most one worker voluntarily evicted at a time: each worker owns
/// partitions nobody else reads, so node drains proceed one pod at a time.
pub fn pod_disruption_budget(job: &StreamJob) -> PodDisruptionBudget {
    let name = job.metadata.name.clone().unwrap_or_default();
    PodDisruptionBudget {
        metadata: child_meta(job, names::pdb(&name)),
        spec: Some(PodDisruptionBudgetSpec {
            max_unavailable: Some(IntOrString::Int(1)),
            selector: Some(LabelSelector { match_labels: Some(names::selector(&name)), ..LabelSelector::default() }),
            ..PodDisruptionBudgetSpec::default()
        }),
        ..PodDisruptionBudget::default()
    }
}
