//! `spec.podTemplate`: what users set on the worker pods — placement,
//! identity, pulls, extra env and volumes — in Kubernetes' own types, as
//! Strimzi's `template.pod` and the Flink operator's `podTemplate` allow.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    Affinity, EnvVar, LocalObjectReference, Toleration, TopologySpreadConstraint, Volume, VolumeMount,
};
use kube::KubeSchema;
use serde::{Deserialize, Serialize};

/// Additions to the worker pods. What the operator needs to run the job
/// (its labels, config volume, probes, the config hash) always wins over
/// these; a collision with it is refused by validation.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, KubeSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[x_kube(validation = Rule::new("!has(self.env) || self.env.all(e, e.name.startsWith('SLUICE_') ? e.name == 'SLUICE_LOG' : e.name != 'POD_NAME')").message("podTemplate.env: POD_NAME and SLUICE_* (but SLUICE_LOG) are set by the operator"))]
#[x_kube(validation = Rule::new("!has(self.volumes) || self.volumes.all(v, v.name != 'config' && !v.name.startsWith('secret-'))").message("podTemplate.volumes: the names `config` and `secret-*` are the operator's"))]
#[x_kube(validation = Rule::new("!has(self.volumeMounts) || self.volumeMounts.all(m, !m.mountPath.startsWith('/etc/sluice'))").message("podTemplate.volumeMounts: /etc/sluice is where the operator mounts the worker config and Secrets"))]
pub struct PodTemplateSpec {
    /// Labels added to the worker pods.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
    /// Annotations added to the worker pods.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub node_selector: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tolerations: Vec<Toleration>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub affinity: Option<Affinity>,
    /// Replaces the default spread (one per host, best effort).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub topology_spread_constraints: Vec<TopologySpreadConstraint>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority_class_name: Option<String>,
    /// The workers need no Kubernetes API access; a service account is for
    /// the platform's identity (a cloud IAM binding, a mesh).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service_account_name: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub image_pull_secrets: Vec<LocalObjectReference>,
    /// `Always`, `IfNotPresent` (the default) or `Never`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^(Always|IfNotPresent|Never)$"))]
    pub image_pull_policy: Option<String>,
    /// Extra environment of the worker container (`SLUICE_LOG` replaces
    /// the operator's log filter).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 256))]
    pub env: Vec<EnvVar>,
    /// Extra volumes of the pod...
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 64))]
    pub volumes: Vec<Volume>,
    /// ...and where the worker container mounts them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 64))]
    pub volume_mounts: Vec<VolumeMount>,
}

/// Whether a template may set environment variable `name`: not
/// `POD_NAME` (the worker's ordinal), and no `SLUICE_*` but `SLUICE_LOG` —
/// the worker reads `SLUICE_<SECTION>__<FIELD>` as overrides of its config,
/// which would let a pod template change what the operator assigned (its
/// partitions, its group).
pub fn reserved_env(name: &str) -> bool {
    name == "POD_NAME" || (name.starts_with("SLUICE_") && name != "SLUICE_LOG")
}

impl PodTemplateSpec {
    /// What collides with the operator's own pod parts.
    pub fn problems(&self) -> Vec<String> {
        let mut problems = Vec::new();
        let at = "spec.podTemplate";
        if let Some(e) = self.env.iter().find(|e| reserved_env(&e.name)) {
            problems.push(format!(
                "{at}.env: podTemplate.env: POD_NAME and SLUICE_* (but SLUICE_LOG) are set by the operator (`{}` \
                 given)",
                e.name
            ));
        }
        if let Some(v) = self.volumes.iter().find(|v| v.name == "config" || v.name.starts_with("secret-")) {
            problems.push(format!(
                "{at}.volumes: podTemplate.volumes: the names `config` and `secret-*` are the operator's (`{}` given)",
                v.name
            ));
        }
        if let Some(m) = self.volume_mounts.iter().find(|m| m.mount_path.starts_with("/etc/sluice")) {
            problems.push(format!(
                "{at}.volumeMounts: podTemplate.volumeMounts: /etc/sluice is where the operator mounts the worker \
                 config and Secrets (`{}` given)",
                m.mount_path
            ));
        }
        // Not a CEL rule too: comparing every mount with every volume is
        // over the API server's cost budget for the CRD.
        if let Some(m) = self.volume_mounts.iter().find(|m| !self.volumes.iter().any(|v| v.name == m.name)) {
            problems.push(format!(
                "{at}.volumeMounts: podTemplate.volumeMounts: every mount needs its volume in podTemplate.volumes \
                 (`{}` mounts `{}`)",
                m.mount_path, m.name
            ));
        }
        problems
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_template_cannot_take_over_the_operators_env_volumes_or_mounts() {
        let t: PodTemplateSpec = serde_saphyr::from_str(
            "env: [ { name: SLUICE_LOG, value: debug }, { name: TZ, value: UTC } ]\n\
             volumes: [ { name: scratch, emptyDir: {} } ]\n\
             volumeMounts: [ { name: scratch, mountPath: /scratch }, { name: nowhere, mountPath: /data } ]\n",
        )
        .unwrap();
        let problems = t.problems();
        assert_eq!(problems.len(), 1, "{problems:?}");
        assert!(problems[0].contains("every mount needs its volume") && problems[0].contains("`nowhere`"));
        for name in ["POD_NAME", "SLUICE_EXPECTED_CONFIG_HASH", "SLUICE_SPEC__WORKERS", "SLUICE_WORKER__CONSUMER_GROUP"]
        {
            assert!(reserved_env(name), "{name}");
        }
        assert!(!reserved_env("SLUICE_LOG") && !reserved_env("TZ"));
    }
}
