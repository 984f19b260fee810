use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::apps::v1::{StatefulSet, StatefulSetSpec, StatefulSetUpdateStrategy};
use k8s_openapi::api::core::v1::{
    Capabilities, ConfigMapVolumeSource, Container, ContainerPort, EnvVar, EnvVarSource, HTTPGetAction,
    ObjectFieldSelector, PodSecurityContext, PodSpec, PodTemplateSpec, Probe, ResourceRequirements, SeccompProfile,
    SecretVolumeSource, SecurityContext, TopologySpreadConstraint, Volume, VolumeMount,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use sluice_crds::{EXPECTED_CONFIG_HASH_ENV, StreamJob};

use super::meta::child_meta;
use crate::desired::Desired;
use crate::names;

/// Every Secret a job references, each mounted at `<SECRETS_DIR>/<name>`.
fn secret_names(job: &StreamJob) -> BTreeSet<String> {
    let spec = &job.spec;
    let sources = spec.sources.iter().filter_map(|s| s.kafka.as_ref()?.secret_ref.as_ref());
    let sink = spec.sink.kafka.as_ref().and_then(|k| k.secret_ref.as_ref());
    let dlq = spec.dead_letter.as_ref().and_then(|d| d.kafka.as_ref()?.secret_ref.as_ref());
    sources.chain(sink).chain(dlq).map(|s| s.name.clone()).collect()
}

/// Resources when the job does not set them: one whole CPU per engine
/// thread, requests equal to limits (Guaranteed QoS, so a static CPU manager
/// can give the threads exclusive cores to pin to).
fn default_resources(job: &StreamJob) -> ResourceRequirements {
    let cores = job.spec.cores_per_worker.max(1);
    let memory_mib = 512 + 256 * i64::from(cores);
    let q = BTreeMap::from([
        ("cpu".to_owned(), Quantity(cores.to_string())),
        ("memory".to_owned(), Quantity(format!("{memory_mib}Mi"))),
    ]);
    ResourceRequirements { requests: Some(q.clone()), limits: Some(q), ..ResourceRequirements::default() }
}

fn probe(path: &str, period: i32, failures: i32) -> Probe {
    Probe {
        http_get: Some(HTTPGetAction {
            path: Some(path.into()),
            port: IntOrString::String("http".into()),
            ..HTTPGetAction::default()
        }),
        period_seconds: Some(period),
        failure_threshold: Some(failures),
        timeout_seconds: Some(2),
        ..Probe::default()
    }
}

/// The workers: `replicas` pods with stable ordinals (each derives its
/// partitions from its ordinal), running `sluice-worker serve`.
pub fn statefulset(job: &StreamJob, desired: &Desired) -> StatefulSet {
    let name = job.metadata.name.clone().unwrap_or_default();
    let selector = names::selector(&name);
    let mut meta = child_meta(job, names::statefulset(&name));
    meta.annotations = Some(BTreeMap::from([(names::ASSIGNMENT_HASH.to_owned(), desired.assignment_hash.clone())]));
    let secrets = secret_names(job);
    let mut volumes = vec![Volume {
        name: "config".into(),
        config_map: Some(ConfigMapVolumeSource { name: names::config_map(&name), ..ConfigMapVolumeSource::default() }),
        ..Volume::default()
    }];
    let mut mounts = vec![VolumeMount {
        name: "config".into(),
        mount_path: names::CONFIG_DIR.into(),
        read_only: Some(true),
        ..VolumeMount::default()
    }];
    for (i, secret) in secrets.iter().enumerate() {
        let volume = format!("secret-{i}");
        volumes.push(Volume {
            name: volume.clone(),
            secret: Some(SecretVolumeSource { secret_name: Some(secret.clone()), ..SecretVolumeSource::default() }),
            ..Volume::default()
        });
        mounts.push(VolumeMount {
            name: volume,
            mount_path: format!("{}/{secret}", names::SECRETS_DIR),
            read_only: Some(true),
            ..VolumeMount::default()
        });
    }
    let container = Container {
        name: "worker".into(),
        image: Some(desired.image.clone()),
        image_pull_policy: Some("IfNotPresent".into()),
        command: Some(vec!["sluice-worker".into()]),
        args: Some(vec!["serve".into(), "--config".into(), format!("{}/{}", names::CONFIG_DIR, names::CONFIG_FILE)]),
        env: Some(
            std::iter::once(EnvVar {
                name: "POD_NAME".into(),
                value_from: Some(EnvVarSource {
                    field_ref: Some(ObjectFieldSelector {
                        field_path: "metadata.name".into(),
                        ..ObjectFieldSelector::default()
                    }),
                    ..EnvVarSource::default()
                }),
                ..EnvVar::default()
            })
            .chain(std::iter::once(EnvVar {
                name: EXPECTED_CONFIG_HASH_ENV.into(),
                value: Some(desired.config_hash.clone()),
                ..EnvVar::default()
            }))
            .chain(desired.log_filter.clone().map(|f| EnvVar {
                name: "SLUICE_LOG".into(),
                value: Some(f),
                ..EnvVar::default()
            }))
            .collect(),
        ),
        ports: Some(vec![ContainerPort {
            name: Some("http".into()),
            container_port: names::WORKER_HTTP_PORT,
            ..ContainerPort::default()
        }]),
        // Ready = assigned and consuming (the worker's /readyz).
        readiness_probe: Some(probe("/readyz", 2, 3)),
        liveness_probe: Some(Probe { initial_delay_seconds: Some(10), ..probe("/healthz", 10, 3) }),
        resources: Some(job.spec.resources.clone().unwrap_or_else(|| default_resources(job))),
        volume_mounts: Some(mounts),
        security_context: Some(SecurityContext {
            allow_privilege_escalation: Some(false),
            read_only_root_filesystem: Some(true),
            run_as_non_root: Some(true),
            capabilities: Some(Capabilities { drop: Some(vec!["ALL".into()]), ..Capabilities::default() }),
            ..SecurityContext::default()
        }),
        ..Container::default()
    };
    let template_annotations = BTreeMap::from([
        (names::CONFIG_HASH.to_owned(), desired.config_hash.clone()),
        ("prometheus.io/scrape".to_owned(), "true".to_owned()),
        ("prometheus.io/port".to_owned(), names::WORKER_HTTP_PORT.to_string()),
        ("prometheus.io/path".to_owned(), "/metrics".to_owned()),
    ]);
    StatefulSet {
        metadata: meta,
        spec: Some(StatefulSetSpec {
            replicas: Some(desired.replicas),
            service_name: Some(names::service(&name)),
            // Ownership does not depend on start order; the drain protocol
            // (not ordered startup) keeps partitions exclusive when it changes.
            pod_management_policy: Some("Parallel".into()),
            selector: LabelSelector { match_labels: Some(selector.clone()), ..LabelSelector::default() },
            update_strategy: Some(StatefulSetUpdateStrategy {
                type_: Some("RollingUpdate".into()),
                ..Default::default()
            }),
            template: PodTemplateSpec {
                metadata: Some(ObjectMeta {
                    labels: Some(names::labels(&name)),
                    annotations: Some(template_annotations),
                    ..ObjectMeta::default()
                }),
                spec: Some(PodSpec {
                    containers: vec![container],
                    volumes: Some(volumes),
                    automount_service_account_token: Some(false),
                    enable_service_links: Some(false),
                    termination_grace_period_seconds: Some(30),
                    security_context: Some(PodSecurityContext {
                        run_as_non_root: Some(true),
                        run_as_user: Some(65532),
                        run_as_group: Some(65532),
                        seccomp_profile: Some(SeccompProfile {
                            type_: "RuntimeDefault".into(),
                            ..SeccompProfile::default()
                        }),
                        ..PodSecurityContext::default()
                    }),
                    topology_spread_constraints: Some(vec![TopologySpreadConstraint {
                        max_skew: 1,
                        topology_key: "kubernetes.io/hostname".into(),
                        when_unsatisfiable: "ScheduleAnyway".into(),
                        label_selector: Some(LabelSelector {
                            match_labels: Some(selector),
                            ..LabelSelector::default()
                        }),
                        ..TopologySpreadConstraint::default()
                    }]),
                    ..PodSpec::default()
                }),
            },
            ..StatefulSetSpec::default()
        }),
        ..StatefulSet::default()
    }
}

#[cfg(test)]
mod tests {
    use super::super::fixtures::{desired_for, job};
    use super::*;

    #[test]
    fn runs_serve_with_the_mounted_config_and_a_pod_name_for_the_ordinal() {
        let j = job("s0-pure-select.yaml");
        let d = desired_for(&j, 8);
        let sts = statefulset(&j, &d);
        let spec = sts.spec.unwrap();
        assert_eq!(spec.replicas, Some(2));
        let pod = spec.template.spec.unwrap();
        let c = &pod.containers[0];
        assert_eq!(c.args.as_deref().unwrap(), ["serve", "--config", "/etc/sluice/config/worker.yaml"]);
        assert_eq!(c.env.as_ref().unwrap()[0].name, "POD_NAME");
        assert_eq!(c.image.as_deref(), Some("ghcr.io/sluice/sluice:test"));
        let limits = c.resources.as_ref().unwrap().limits.as_ref().unwrap();
        assert_eq!(limits["cpu"], Quantity("2".into()), "one CPU per engine thread");
        assert_eq!(c.readiness_probe.as_ref().unwrap().http_get.as_ref().unwrap().path.as_deref(), Some("/readyz"));
        assert_eq!(c.security_context.as_ref().unwrap().read_only_root_filesystem, Some(true));
        let annotations = spec.template.metadata.unwrap().annotations.unwrap();
        assert_eq!(annotations[names::CONFIG_HASH], d.config_hash);
        let env = c.env.as_ref().unwrap();
        let expected = env.iter().find(|e| e.name == EXPECTED_CONFIG_HASH_ENV).unwrap();
        assert_eq!(expected.value.as_deref(), Some(sluice_crds::config_hash(&d.config_yaml).as_str()));
    }

    #[test]
    fn config_changes_roll_pods_and_scale_changes_move_partitions() {
        let j = job("s2-group-by.yaml");
        let base = desired_for(&j, 8);
        let mut tuned = j.clone();
        tuned.spec.engine.batch_linger_millis = 9;
        let d = desired_for(&tuned, 8);
        assert_ne!(d.config_hash, base.config_hash, "a config change rolls the pods");
        assert_eq!(d.assignment_hash, base.assignment_hash, "but moves no partition");
        let mut scaled = j.clone();
        scaled.spec.workers = 3;
        assert_ne!(desired_for(&scaled, 8).assignment_hash, base.assignment_hash);
        assert_ne!(desired_for(&j, 12).assignment_hash, base.assignment_hash, "new partitions move ownership");
        let mut suspended = j;
        suspended.spec.suspend = true;
        assert_eq!(desired_for(&suspended, 8).replicas, 0);
    }

    #[test]
    fn referenced_secrets_are_mounted_never_inlined() {
        let mut j = job("s0-pure-select.yaml");
        if let Some(k) = j.spec.sources[0].kafka.as_mut() {
            k.secret_ref = Some(sluice_crds::SecretRef { name: "kafka-creds".into() });
        }
        let d = desired_for(&j, 4);
        let pod = statefulset(&j, &d).spec.unwrap().template.spec.unwrap();
        let mounts = pod.containers[0].volume_mounts.clone().unwrap();
        assert!(mounts.iter().any(|m| m.mount_path == "/etc/sluice/secrets/kafka-creds"));
        assert!(!d.config_yaml.contains("password"));
    }
}
