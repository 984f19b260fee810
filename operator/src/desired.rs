//! What a job's workers should look like: the worker config document and the
//! hashes that decide when pods restart and when partitions move.

use sha2::{Digest, Sha256};
use sluice_crds::{Assignment, JobIdentity, SourcePartitions, StreamJob, WorkerConfig, WorkerSettings, assign};

use crate::Error;
use crate::names;
use crate::upgrade::QueryState;
use crate::validate::hex8;

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
    /// The state the query keeps (recorded in the status: what the next
    /// edit of the query is compared with).
    pub query: QueryState,
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

/// How many earlier scales a job remembers.
const EARLIER_SLOTS: usize = 16;

/// The engine slot counts the job ran at before: what its status
/// remembers, plus the scale of the assignment it last published when
/// that differs from the one it asks for now.
fn earlier_slots(job: &StreamJob) -> Vec<i32> {
    let status = job.status.clone().unwrap_or_default();
    let mut earlier = status.earlier_slots;
    let now = job.spec.workers.max(1) * job.spec.cores_per_worker.max(1);
    if let Some(a) = &status.assignment {
        let last = i32::try_from(a.workers.iter().map(|w| w.cores.len()).sum::<usize>()).unwrap_or(0);
        if last > 0 {
            earlier.retain(|s| *s != last);
            earlier.push(last);
        }
    }
    earlier.retain(|s| *s != now);
    let excess = earlier.len().saturating_sub(EARLIER_SLOTS);
    earlier.drain(..excess);
    earlier
}

/// The workers of `job` running its query in consumer `group` (see
/// [`crate::upgrade`]).
pub fn desired(
    job: &StreamJob,
    partitions: Vec<SourcePartitions>,
    epoch: i64,
    settings: &OperatorSettings,
    query: QueryState,
    group: String,
) -> Result<Desired, Error> {
    let name = job.metadata.name.clone().unwrap_or_default();
    let namespace = job.metadata.namespace.clone().unwrap_or_else(|| "default".into());
    let spec = &job.spec;
    let config = WorkerConfig {
        job: JobIdentity { name, namespace },
        spec: spec.clone(),
        partitions,
        assignment_epoch: epoch,
        earlier_slots: earlier_slots(job),
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
            state_dir: spec
                .engine
                .local_state_bytes(spec.cores_per_worker)
                .ok()
                .flatten()
                .map(|_| sluice_crds::contract::STATE_DIR.into()),
            state_dir_bytes: spec.engine.local_state_bytes(spec.cores_per_worker).ok().flatten(),
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
        query,
    })
}

#[cfg(test)]
mod tests {
    use sluice_crds::{SourcePartitions, StreamJobStatus, assign};

    use crate::render::fixtures::{desired_for, job};

    /// A rescale hands the workers the scale they leave, so (exactly once)
    /// they fence its transactional ids even where it never committed.
    #[test]
    fn a_rescale_remembers_the_scales_the_job_ran_at() {
        let mut j = job("s2-group-by.yaml");
        let (workers, cores) = (j.spec.workers, j.spec.cores_per_worker);
        let parts = [SourcePartitions { source: "trades".into(), partitions: 8 }];
        assert!(desired_for(&j, 8).config.earlier_slots.is_empty(), "a new job ran nowhere before");
        j.status = Some(StreamJobStatus { assignment: Some(assign(&parts, workers, cores)), ..Default::default() });
        assert!(desired_for(&j, 8).config.earlier_slots.is_empty(), "the same scale again is no earlier scale");
        j.spec.workers = workers + 1;
        let earlier = desired_for(&j, 8).config.earlier_slots;
        assert_eq!(earlier, [workers * cores], "the scale it leaves");
        // Back to the first scale, after a third one: the scale it returns
        // to is current, not earlier; the others are remembered.
        j.status = Some(StreamJobStatus {
            assignment: Some(assign(&parts, workers + 2, cores)),
            earlier_slots: vec![workers * cores, (workers + 1) * cores],
            ..Default::default()
        });
        j.spec.workers = workers;
        assert_eq!(desired_for(&j, 8).config.earlier_slots, [(workers + 1) * cores, (workers + 2) * cores]);
        j.status = Some(StreamJobStatus { earlier_slots: (1..=40).collect(), ..Default::default() });
        assert_eq!(desired_for(&j, 8).config.earlier_slots.len(), 16, "bounded");
    }
}
