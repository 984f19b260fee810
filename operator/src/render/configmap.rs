use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::ConfigMap;
use sluice_crds::StreamJob;

use super::meta::child_meta;
use crate::desired::Desired;
use crate::names;

/// The worker config, mounted into every worker pod as `worker.yaml`.
pub fn config_map(job: &StreamJob, desired: &Desired) -> ConfigMap {
    let name = job.metadata.name.clone().unwrap_or_default();
    ConfigMap {
        metadata: child_meta(job, names::config_map(&name)),
        data: Some(BTreeMap::from([(names::CONFIG_FILE.to_owned(), desired.config_yaml.clone())])),
        ..ConfigMap::default()
    }
}

#[cfg(test)]
mod tests {
    use super::super::fixtures::{desired_for, job};
    use super::*;

    #[test]
    fn holds_the_worker_config_the_worker_reads() {
        let j = job("s2-group-by.yaml");
        let d = desired_for(&j, 8);
        let cm = config_map(&j, &d);
        assert_eq!(cm.metadata.name.as_deref(), Some("s2-group-by-config"));
        let text = &cm.data.unwrap()["worker.yaml"];
        let parsed = sluice_crds::WorkerConfig::from_yaml(text).unwrap();
        assert_eq!(parsed, d.config);
        assert_eq!(parsed.partitions[0].partitions, 8);
        assert!(parsed.worker.consumer_group.unwrap().starts_with("sluice.prod.s2-group-by."));
        let owner = &cm.metadata.owner_references.unwrap()[0];
        assert_eq!((owner.kind.as_str(), owner.controller), ("StreamJob", Some(true)));
    }
}
