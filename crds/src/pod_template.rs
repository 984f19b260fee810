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
#[x_kube(validation = Rule::new("!has(self.env) || self.env.all(e, e.name != 'POD_NAME' && e.name != 'SLUICE_EXPECTED_CONFIG_HASH')").message("podTemplate.env: POD_NAME and SLUICE_EXPECTED_CONFIG_HASH are set by the operator"))]
#[x_kube(validation = Rule::new("!has(self.volumes) || self.volumes.all(v, v.name != 'config' && !v.name.startsWith('secret-'))").message("podTemplate.volumes: the names `config` and `secret-*` are the operator's"))]
#[x_kube(validation = Rule::new("!has(self.volumeMounts) || self.volumeMounts.all(m, !m.mountPath.startsWith('/etc/sluice/config') && !m.mountPath.startsWith('/etc/sluice/secrets'))").message("podTemplate.volumeMounts: /etc/sluice/config and /etc/sluice/secrets are where the operator mounts the worker config and Secrets"))]
#[x_kube(validation = Rule::new("!has(self.volumeMounts) || self.volumeMounts.all(m, has(self.volumes) && self.volumes.exists(v, v.name == m.name))").message("podTemplate.volumeMounts: every mount needs its volume in podTemplate.volumes"))]
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

/// Environment variables the operator sets and a template may not.
pub const RESERVED_ENV: [&str; 2] = ["POD_NAME", crate::EXPECTED_CONFIG_HASH_ENV];

impl PodTemplateSpec {
    /// What collides with the operator's own pod parts.
    pub fn problems(&self) -> Vec<String> {
        let mut problems = Vec::new();
        let at = "spec.podTemplate";
        if let Some(e) = self.env.iter().find(|e| RESERVED_ENV.contains(&e.name.as_str())) {
            problems.push(format!(
                "{at}.env: podTemplate.env: POD_NAME and SLUICE_EXPECTED_CONFIG_HASH are set by the operator (`{}` \
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
        let reserved = [crate::contract::CONFIG_DIR, crate::contract::SECRETS_DIR];
        if let Some(m) = self.volume_mounts.iter().find(|m| reserved.iter().any(|r| m.mount_path.starts_with(r))) {
            problems.push(format!(
                "{at}.volumeMounts: podTemplate.volumeMounts: /etc/sluice/config and /etc/sluice/secrets are where \
                 the operator mounts the worker config and Secrets (`{}` given)",
                m.mount_path
            ));
        }
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
