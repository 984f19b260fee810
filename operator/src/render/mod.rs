//! The children of a StreamJob, rendered by pure functions from the job and
//! its [`crate::desired::Desired`] state. Each carries the job's labels and
//! a controller owner reference, so deleting the job deletes them.

mod configmap;
mod meta;
mod pdb;
mod service;
mod statefulset;

pub use configmap::config_map;
pub use pdb::pod_disruption_budget;
pub use service::headless_service;
pub use statefulset::{statefulset, volume_claims};

#[cfg(test)]
pub(crate) mod fixtures {
    use sluice_crds::{SourcePartitions, StreamJob};

    use crate::desired::{Desired, OperatorSettings, desired};
    use crate::upgrade::{Upgrade, decide, query_state};
    use crate::validate::check_partitioning;

    pub fn job(file: &str) -> StreamJob {
        let text =
            std::fs::read_to_string(format!("{}/../manifests/examples/{file}", env!("CARGO_MANIFEST_DIR"))).unwrap();
        let mut j: StreamJob = serde_saphyr::from_str(&text).unwrap();
        j.metadata.namespace = Some("prod".into());
        j.metadata.uid = Some("1234-uid".into());
        j
    }

    pub fn desired_for(j: &StreamJob, partitions: i32) -> Desired {
        let source = j.spec.sources[0].name.clone();
        let settings =
            OperatorSettings { worker_image: "ghcr.io/sluice/sluice:test".into(), ..OperatorSettings::default() };
        let query = query_state(&check_partitioning(&j.spec, partitions).unwrap());
        let group = match decide(j, &query) {
            Upgrade::Continue { group } | Upgrade::Fresh { group, .. } => group,
            Upgrade::Refused { message } => panic!("{message}"),
        };
        desired(j, vec![SourcePartitions { source, partitions }], 1, &settings, query, group).unwrap()
    }
}
