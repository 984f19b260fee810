//! What a job's workers should look like: the worker config document and the
//! hashes that decide when pods restart and when partitions move.

use sha2::{Digest, Sha256};
use sluice_crds::{Assignment, JobIdentity, SourcePartitions, StreamJob, WorkerConfig, WorkerSettings, assign};

use crate::Error;
use crate::names;
use crate::validate::{hex8, query_identity};

/// Operator-wide settings that flow into workers.
#[derive(Debug, Clone, Default)]
pub struct OperatorSettings {
    /// Worker image when the job does not name one.
    pub worker_image: String,
    pub worker_log_format: String,
    /// `SLUICE_LOG` filter of the workers (e.g. `info,rdkafka=debug`).
    pub worker_log_filter: Option<String>,
    pub otlp_endpoint: Option<String>,
}

/// The desired state of a job's workers.
#[derive(Debug, Clone)]
pub struct Desired {
    pub config: WorkerConfig,
    /// `SLUICE_LOG` of the worker pods, when set.
    pub log_filter: Option<String>,
    pub config_yaml: String,
    /// Changes whenever the worker config does (rolls the pods).
    pub config_hash: String,
    /// Changes whenever partition ownership does (drain before restart).
    pub assignment_hash: String,
    pub assignment: Assignment,
    /// Worker pods to run: `spec.workers`, or 0 when suspended.
    pub replicas: i32,
    pub image: String,
    pub total_partitions: i32,
}

/// Hash of everything [`assign`] depends on.
pub fn assignment_hash(partitions: &[SourcePartitions], workers: i32, cores: i32) -> String {
    let mut h = Sha256::new();
    h.update(workers.to_le_bytes());
    h.update(cores.to_le_bytes());
    for p in partitions {
        h.update(p.source.as_bytes());
        h.update(p.partitions.to_le_bytes());
    }
    hex8(&h.finalize())
}

pub fn desired(
    job: &StreamJob,
    partitions: Vec<SourcePartitions>,
    epoch: i64,
    settings: &OperatorSettings,
) -> Result<Desired, Error> {
    let name = job.metadata.name.clone().unwrap_or_default();
    let namespace = job.metadata.namespace.clone().unwrap_or_else(|| "default".into());
    let spec = &job.spec;
    let group = sluice_crds::contract::consumer_group(&namespace, &name, Some(&query_identity(spec)));
    let config = WorkerConfig {
        job: JobIdentity { name, namespace },
        spec: spec.clone(),
        partitions,
        assignment_epoch: epoch,
        worker: WorkerSettings {
            ordinal: None,
            http_address: "0.0.0.0".into(),
            http_port: sluice_crds::contract::WORKER_HTTP_PORT,
            secrets_dir: names::SECRETS_DIR.into(),
            consumer_group: Some(group),
            state_topic: None,
            pin_cores: true,
            otlp_endpoint: settings.otlp_endpoint.clone(),
            log_format: if settings.worker_log_format.is_empty() {
                "json".into()
            } else {
                settings.worker_log_format.clone()
            },
            shutdown_grace_millis: 25_000,
            ..WorkerSettings::default()
        },
    };
    let config_yaml = config.to_yaml().map_err(|e| Error::Serialize(e.to_string()))?;
    let config_hash = sluice_crds::config_hash(&config_yaml);
    Ok(Desired {
        log_filter: settings.worker_log_filter.clone(),
        assignment_hash: assignment_hash(&config.partitions, spec.workers, spec.cores_per_worker),
        assignment: assign(&config.partitions, spec.workers, spec.cores_per_worker),
        total_partitions: config.total_partitions(),
        replicas: if spec.suspend { 0 } else { spec.workers },
        image: spec.image.clone().unwrap_or_else(|| settings.worker_image.clone()),
        config,
        config_yaml,
        config_hash,
    })
}
