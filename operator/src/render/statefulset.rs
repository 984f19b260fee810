use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::apps::v1::{
    StatefulSet, StatefulSetPersistentVolumeClaimRetentionPolicy, StatefulSetSpec, StatefulSetUpdateStrategy,
};
use k8s_openapi::api::core::v1::{
    Capabilities, ConfigMapVolumeSource, Container, ContainerPort, EmptyDirVolumeSource, EnvVar, EnvVarSource,
    HTTPGetAction, ObjectFieldSelector, PersistentVolumeClaim, PersistentVolumeClaimSpec, PodSecurityContext, PodSpec,
    PodTemplateSpec, Probe, ResourceRequirements, SeccompProfile, SecretVolumeSource, SecurityContext,
    TopologySpreadConstraint, Volume, VolumeMount, VolumeResourceRequirements,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use sluice_crds::{EXPECTED_CONFIG_HASH_ENV, KafkaTarget, LocalStateVolume, StreamJob};

use super::meta::child_meta;
use crate::desired::Desired;
use crate::names;

/// Every Secret a job's Kafka connections (`secretRef`, `authentication`,
/// `tls`) and its Schema Registry connection read, each mounted at
/// `<SECRETS_DIR>/<name>`.
fn secret_names(job: &StreamJob) -> BTreeSet<String> {
    let spec = &job.spec;
    let sources = spec.sources.iter().filter_map(|s| Some(s.kafka.as_ref()?.connection()));
    let sink = spec.sink.kafka.as_ref().map(KafkaTarget::connection);
    let dlq = spec.dead_letter.as_ref().and_then(|d| Some(d.kafka.as_ref()?.connection()));
    let kafka = sources.chain(sink).chain(dlq).flat_map(|c| c.secret_names());
    let registry = spec.schema_registry.iter().flat_map(|r| r.secret_names());
    kafka.chain(registry).map(str::to_owned).collect()
}

/// Resources when the job does not set them: one whole CPU per engine
/// thread, requests equal to limits (Guaranteed QoS, so a static CPU manager
/// can give the threads exclusive cores to pin to), and the memory the
/// state bound needs (`EngineSpec::worker_memory_bytes`).
fn default_resources(job: &StreamJob) -> ResourceRequirements {
    let cores = job.spec.cores_per_worker.max(1);
    // Validation refused an unreadable limit before anything renders.
    let memory =
        job.spec.engine.worker_memory_bytes(cores).unwrap_or(u64::from(512u32 + 512 * cores.unsigned_abs()) << 20);
    let memory_mib = memory.div_ceil(1 << 20);
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

/// `None` for an empty list, as an unset field renders.
fn some_vec<T: Clone>(v: &[T]) -> Option<Vec<T>> {
    (!v.is_empty()).then(|| v.to_vec())
}

/// The volume a worker keeps its copy of its checkpoints on
/// (`spec.engine.localState`), mounted at [`names::STATE_DIR`]: an
/// `emptyDir` in the pod, or a claim per pod. `None` without one.
enum StateVolume {
    Pod(Box<Volume>),
    Claim(Box<PersistentVolumeClaim>),
}

const STATE_VOLUME: &str = "state";

fn state_volume(job: &StreamJob) -> Option<StateVolume> {
    let engine = &job.spec.engine;
    // Validation refused an unreadable size before anything renders.
    let bytes = engine.local_state_bytes(job.spec.cores_per_worker).ok().flatten()?;
    let size = Quantity(format!("{}Mi", bytes.div_ceil(1 << 20)));
    Some(match engine.local_state.volume {
        LocalStateVolume::None => return None,
        LocalStateVolume::EmptyDir => StateVolume::Pod(Box::new(Volume {
            name: STATE_VOLUME.into(),
            empty_dir: Some(EmptyDirVolumeSource { size_limit: Some(size), ..EmptyDirVolumeSource::default() }),
            ..Volume::default()
        })),
        LocalStateVolume::Persistent => StateVolume::Claim(Box::new(PersistentVolumeClaim {
            metadata: ObjectMeta { name: Some(STATE_VOLUME.into()), ..ObjectMeta::default() },
            spec: Some(PersistentVolumeClaimSpec {
                access_modes: Some(vec!["ReadWriteOnce".into()]),
                storage_class_name: engine.local_state.storage_class_name.clone(),
                resources: Some(VolumeResourceRequirements {
                    requests: Some(BTreeMap::from([("storage".to_owned(), size)])),
                    ..VolumeResourceRequirements::default()
                }),
                ..PersistentVolumeClaimSpec::default()
            }),
            ..PersistentVolumeClaim::default()
        })),
    })
}

/// What [`names::VOLUME_CLAIMS`] records of a job's claim templates: empty
/// without any, so jobs without one never differ.
pub fn volume_claims(job: &StreamJob) -> String {
    match state_volume(job) {
        Some(StateVolume::Claim(claim)) => {
            let spec = claim.spec.unwrap_or_default();
            let size = spec.resources.and_then(|r| r.requests?.get("storage").cloned()).map(|q| q.0);
            format!("{}:{}", size.unwrap_or_default(), spec.storage_class_name.unwrap_or_default())
        }
        _ => String::new(),
    }
}

/// The workers: `replicas` pods with stable ordinals (each derives its
/// partitions from its ordinal), running `sluice-worker serve`.
pub fn statefulset(job: &StreamJob, desired: &Desired) -> StatefulSet {
    let name = job.metadata.name.clone().unwrap_or_default();
    let selector = names::selector(&name);
    let mut meta = child_meta(job, names::statefulset(&name));
    meta.annotations = Some(BTreeMap::from([
        (names::ASSIGNMENT_HASH.to_owned(), desired.assignment_hash.clone()),
        (names::VOLUME_CLAIMS.to_owned(), volume_claims(job)),
    ]));
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
    let state = state_volume(job);
    if state.is_some() {
        mounts.push(VolumeMount {
            name: STATE_VOLUME.into(),
            mount_path: names::STATE_DIR.into(),
            ..VolumeMount::default()
        });
    }
    let mut claims = None;
    match state {
        Some(StateVolume::Pod(volume)) => volumes.push(*volume),
        Some(StateVolume::Claim(claim)) => claims = Some(vec![*claim]),
        None => {}
    }
    let template = job.spec.pod_template.clone().unwrap_or_default();
    mounts.extend(template.volume_mounts.iter().cloned());
    volumes.extend(template.volumes.iter().cloned());
    // A template's SLUICE_LOG replaces the operator's log filter.
    let own_log_filter = desired.log_filter.clone().filter(|_| !template.env.iter().any(|e| e.name == "SLUICE_LOG"));
    let container = Container {
        name: "worker".into(),
        image: Some(desired.image.clone()),
        image_pull_policy: Some(template.image_pull_policy.clone().unwrap_or_else(|| "IfNotPresent".into())),
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
            .chain(own_log_filter.map(|f| EnvVar { name: "SLUICE_LOG".into(), value: Some(f), ..EnvVar::default() }))
            .chain(template.env.iter().filter(|e| !sluice_crds::reserved_env(&e.name)).cloned())
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
    // The template's labels and annotations first: the operator's (the
    // selector, the config hash that rolls the pods) win a collision.
    let mut template_annotations = template.annotations.clone();
    template_annotations.extend([
        (names::CONFIG_HASH.to_owned(), desired.config_hash.clone()),
        ("prometheus.io/scrape".to_owned(), "true".to_owned()),
        ("prometheus.io/port".to_owned(), names::WORKER_HTTP_PORT.to_string()),
        ("prometheus.io/path".to_owned(), "/metrics".to_owned()),
    ]);
    let mut pod_labels = template.labels.clone();
    pod_labels.extend(names::labels(&name));
    let spread = if template.topology_spread_constraints.is_empty() {
        vec![TopologySpreadConstraint {
            max_skew: 1,
            topology_key: "kubernetes.io/hostname".into(),
            when_unsatisfiable: "ScheduleAnyway".into(),
            label_selector: Some(LabelSelector { match_labels: Some(selector.clone()), ..LabelSelector::default() }),
            ..TopologySpreadConstraint::default()
        }]
    } else {
        template.topology_spread_constraints.clone()
    };
    let some_map = |m: &BTreeMap<String, String>| (!m.is_empty()).then(|| m.clone());

    StatefulSet {
        metadata: meta,
        spec: Some(StatefulSetSpec {
            replicas: Some(desired.replicas),
            service_name: Some(names::service(&name)),
            // Ownership does not depend on start order; the drain protocol
            // (not ordered startup) keeps partitions exclusive when it changes.
            pod_management_policy: Some("Parallel".into()),
            selector: LabelSelector { match_labels: Some(selector), ..LabelSelector::default() },
            update_strategy: Some(StatefulSetUpdateStrategy {
                type_: Some("RollingUpdate".into()),
                ..Default::default()
            }),
            // A claim holds a copy of checkpoints for the partitions of
            // its ordinal in this layout: of no use once the job or the
            // layout is gone.
            persistent_volume_claim_retention_policy: claims.as_ref().map(|_| {
                StatefulSetPersistentVolumeClaimRetentionPolicy {
                    when_deleted: Some("Delete".into()),
                    when_scaled: Some("Delete".into()),
                }
            }),
            volume_claim_templates: claims,
            template: PodTemplateSpec {
                metadata: Some(ObjectMeta {
                    labels: Some(pod_labels),
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
                        // The state volume is the worker's to write.
                        fs_group: Some(65532),
                        fs_group_change_policy: Some("OnRootMismatch".into()),
                        seccomp_profile: Some(SeccompProfile {
                            type_: "RuntimeDefault".into(),
                            ..SeccompProfile::default()
                        }),
                        ..PodSecurityContext::default()
                    }),
                    topology_spread_constraints: Some(spread),
                    node_selector: some_map(&template.node_selector),
                    tolerations: some_vec(&template.tolerations),
                    affinity: template.affinity.clone(),
                    priority_class_name: template.priority_class_name.clone(),
                    service_account_name: template.service_account_name.clone(),
                    image_pull_secrets: some_vec(&template.image_pull_secrets),
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
        assert_eq!(limits["memory"], Quantity("1536Mi".into()), "512Mi, and twice the state bound per core");
        assert_eq!(c.readiness_probe.as_ref().unwrap().http_get.as_ref().unwrap().path.as_deref(), Some("/readyz"));
        assert_eq!(c.security_context.as_ref().unwrap().read_only_root_filesystem, Some(true));
        let annotations = spec.template.metadata.unwrap().annotations.unwrap();
        assert_eq!(annotations[names::CONFIG_HASH], d.config_hash);
        let env = c.env.as_ref().unwrap();
        let expected = env.iter().find(|e| e.name == EXPECTED_CONFIG_HASH_ENV).unwrap();
        assert_eq!(expected.value.as_deref(), Some(sluice_crds::config_hash(&d.config_yaml).as_str()));
    }

    /// Every worker gets a volume for its copy of its checkpoints, at the
    /// directory its config names: an `emptyDir` sized from the state bound
    /// by default, a claim per pod (deleted with the job or a rescale) when
    /// `Persistent`, none when `None`.
    #[test]
    fn each_worker_gets_a_local_state_volume_as_the_spec_asks() {
        let mount = |sts: &StatefulSet| {
            let pod = sts.spec.as_ref().unwrap().template.spec.as_ref().unwrap();
            pod.containers[0].volume_mounts.as_ref().unwrap().iter().find(|m| m.name == "state").cloned()
        };
        let mut j = job("s2-group-by.yaml");
        let d = desired_for(&j, 4);
        assert!(d.config_yaml.contains("stateDir: /var/lib/sluice/state"), "{}", d.config_yaml);
        let sts = statefulset(&j, &d);
        assert_eq!(mount(&sts).unwrap().mount_path, names::STATE_DIR);
        let pod = sts.spec.as_ref().unwrap().template.spec.clone().unwrap();
        let volume = pod.volumes.unwrap().into_iter().find(|v| v.name == "state").unwrap();
        // 256Mi per core, 2 cores, four times: 2Gi.
        assert_eq!(volume.empty_dir.unwrap().size_limit, Some(Quantity("2048Mi".into())));
        assert_eq!(pod.security_context.unwrap().fs_group, Some(65532), "the worker may write its volume");
        assert!(sts.spec.as_ref().unwrap().volume_claim_templates.is_none());
        assert_eq!(sts.metadata.annotations.as_ref().unwrap()[names::VOLUME_CLAIMS], "");

        j.spec.engine.local_state =
            serde_saphyr::from_str("{ volume: Persistent, size: 20Gi, storageClassName: ssd }").unwrap();
        let sts = statefulset(&j, &desired_for(&j, 4));
        let spec = sts.spec.as_ref().unwrap();
        let claim = &spec.volume_claim_templates.as_ref().unwrap()[0];
        let claim_spec = claim.spec.as_ref().unwrap();
        assert_eq!(claim.metadata.name.as_deref(), Some("state"));
        assert_eq!(claim_spec.storage_class_name.as_deref(), Some("ssd"));
        assert_eq!(claim_spec.resources.as_ref().unwrap().requests.as_ref().unwrap()["storage"].0, "20480Mi");
        let retention = spec.persistent_volume_claim_retention_policy.as_ref().unwrap();
        assert_eq!(
            (retention.when_deleted.as_deref(), retention.when_scaled.as_deref()),
            (Some("Delete"), Some("Delete"))
        );
        assert!(mount(&sts).is_some());
        assert_eq!(sts.metadata.annotations.as_ref().unwrap()[names::VOLUME_CLAIMS], "20480Mi:ssd");

        j.spec.engine.local_state = serde_saphyr::from_str("{ volume: None }").unwrap();
        let d = desired_for(&j, 4);
        assert!(!d.config_yaml.contains("stateDir"), "{}", d.config_yaml);
        let sts = statefulset(&j, &d);
        assert!(mount(&sts).is_none());
        assert!(sts.spec.unwrap().volume_claim_templates.is_none());
    }

    /// What users put in `spec.podTemplate` reaches the pods; what the
    /// operator needs (selector labels, the config hash, its env) wins.
    #[test]
    fn the_pod_template_reaches_the_pods_without_taking_over_the_operators_parts() {
        let mut j = job("s2-group-by.yaml");
        let yaml = r#"
labels: { team: payments, app.kubernetes.io/name: not-sluice }
annotations: { sidecar.istio.io/inject: "false" }
nodeSelector: { pool: streaming }
tolerations: [ { key: dedicated, operator: Equal, value: streaming, effect: NoSchedule } ]
affinity: { nodeAffinity: { requiredDuringSchedulingIgnoredDuringExecution: { nodeSelectorTerms: [ { matchExpressions: [ { key: zone, operator: In, values: [a] } ] } ] } } }
topologySpreadConstraints: [ { maxSkew: 2, topologyKey: topology.kubernetes.io/zone, whenUnsatisfiable: DoNotSchedule } ]
priorityClassName: streaming-high
serviceAccountName: sluice-workers
imagePullSecrets: [ { name: registry } ]
imagePullPolicy: Always
env: [ { name: TZ, value: UTC }, { name: SLUICE_LOG, value: debug } ]
volumes: [ { name: scratch, emptyDir: {} } ]
volumeMounts: [ { name: scratch, mountPath: /scratch } ]
"#;
        j.spec.pod_template = Some(serde_saphyr::from_str(yaml).unwrap());
        assert!(j.spec.validate().is_ok(), "{:?}", j.spec.validate());
        let mut d = desired_for(&j, 8);
        d.log_filter = Some("info".into());
        let spec = statefulset(&j, &d).spec.unwrap();
        let meta = spec.template.metadata.unwrap();
        let labels = meta.labels.unwrap();
        assert_eq!(labels["team"], "payments");
        assert_eq!(labels["app.kubernetes.io/name"], "sluice-worker", "the selector label is the operator's");
        let annotations = meta.annotations.unwrap();
        assert_eq!(annotations["sidecar.istio.io/inject"], "false");
        assert_eq!(annotations[names::CONFIG_HASH], d.config_hash);
        let pod = spec.template.spec.unwrap();
        assert_eq!(pod.node_selector.unwrap()["pool"], "streaming");
        assert_eq!(pod.tolerations.unwrap()[0].key.as_deref(), Some("dedicated"));
        assert!(pod.affinity.unwrap().node_affinity.is_some());
        let spread = pod.topology_spread_constraints.unwrap();
        assert_eq!((spread.len(), spread[0].max_skew), (1, 2), "the template's spread replaces the default");
        assert_eq!(pod.priority_class_name.as_deref(), Some("streaming-high"));
        assert_eq!(pod.service_account_name.as_deref(), Some("sluice-workers"));
        assert_eq!(pod.image_pull_secrets.unwrap()[0].name, "registry");
        assert!(pod.volumes.unwrap().iter().any(|v| v.name == "scratch"));
        let c = &pod.containers[0];
        assert_eq!(c.image_pull_policy.as_deref(), Some("Always"));
        assert!(c.volume_mounts.as_ref().unwrap().iter().any(|m| m.mount_path == "/scratch"));
        let env = c.env.as_ref().unwrap();
        let names: Vec<&str> = env.iter().map(|e| e.name.as_str()).collect();
        assert_eq!(names, ["POD_NAME", EXPECTED_CONFIG_HASH_ENV, "TZ", "SLUICE_LOG"]);
        assert_eq!(env[3].value.as_deref(), Some("debug"), "the template's SLUICE_LOG replaces the operator's");
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
        j.spec.schema_registry = Some(sluice_crds::SchemaRegistrySpec {
            url: "https://registry:8443".into(),
            subject_name_strategy: sluice_crds::SubjectNameStrategy::default(),
            authentication: Some(sluice_crds::RegistryAuthentication {
                username: "api-key".into(),
                password_secret: sluice_crds::PasswordSecret {
                    secret_name: "registry-creds".into(),
                    key: Some("secret".into()),
                    password: None,
                },
            }),
            tls: Some(sluice_crds::KafkaTls {
                trusted_certificates: vec![sluice_crds::CertSecretSource {
                    secret_name: "registry-ca".into(),
                    certificate: "ca.crt".into(),
                }],
            }),
        });
        let d = desired_for(&j, 4);
        let pod = statefulset(&j, &d).spec.unwrap().template.spec.unwrap();
        let mounts = pod.containers[0].volume_mounts.clone().unwrap();
        for secret in ["kafka-creds", "registry-creds", "registry-ca"] {
            assert!(mounts.iter().any(|m| m.mount_path == format!("/etc/sluice/secrets/{secret}")), "{secret}");
        }
        // The config names Secrets (`passwordSecret`), never a value.
        assert!(!d.config_yaml.contains("password:") && !d.config_yaml.contains("sasl.password"));
    }
}
