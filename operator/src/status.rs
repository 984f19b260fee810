//! A job's status, computed from what the reconcile decided and what the
//! cluster shows. Ready is only True when every desired worker pod is ready —
//! and a worker pod is only ready when its /readyz says it is assigned and
//! consuming — so "objects created" is never mistaken for "running".

use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use sluice_crds::{ConditionStatus, StreamJob, StreamJobStatus, condition_types as ct, reasons, set_condition};

use crate::desired::Desired;
use crate::names;
use crate::validate::{Blocked, Invalid};
use crate::worker_health::WorkerFailure;

/// What the reconcile did.
#[derive(Debug, Clone)]
pub enum Outcome {
    /// The spec or SQL cannot run; nothing was launched or changed.
    Invalid(Invalid),
    /// Kafka could not tell the partitions; retried with backoff.
    Unavailable(Invalid),
    /// The edited query keeps different state (`upgradeMode: KeepState`):
    /// the running query's workers are left as they are.
    Refused(Invalid),
    /// Stopping the previous generation before partitions move.
    Draining { live_pods: usize },
    /// The desired children are written.
    Applied(Box<Desired>),
}

impl From<Blocked> for Outcome {
    fn from(blocked: Blocked) -> Self {
        match blocked {
            Blocked::Invalid(invalid) => Self::Invalid(invalid),
            Blocked::Unavailable(down) => Self::Unavailable(down),
        }
    }
}

/// What the cluster shows about the workers.
#[derive(Debug, Clone, Default)]
pub struct Observed {
    pub statefulset: Option<StatefulSet>,
    pub live_pods: usize,
    /// The job's worker pods.
    pub pods: Vec<Pod>,
    /// Workers that stopped on a fatal error, with the reason their /readyz gives.
    pub failures: Vec<WorkerFailure>,
    /// Workers whose bounded input is read to the end (pod, summary).
    pub finished: Vec<(String, String)>,
    /// Workers with a core that keeps failing and restarting, with the
    /// reason their /readyz gives.
    pub restarting: Vec<WorkerFailure>,
    /// The registry schemas the sources' columns were derived from, when
    /// this reconcile read them (`None`: the last ones stand).
    pub registry_schemas: Option<Vec<sluice_crds::RegistrySchemaStatus>>,
}

impl Observed {
    pub fn ready_workers(&self) -> i32 {
        self.statefulset.as_ref().and_then(|s| s.status.as_ref()).and_then(|s| s.ready_replicas).unwrap_or(0)
    }

    /// Ready replicas that also run the current template, at the current generation.
    pub fn converged(&self, replicas: i32) -> bool {
        let Some(sts) = &self.statefulset else { return replicas == 0 };
        let Some(st) = &sts.status else { return false };
        let current_generation = st.observed_generation.unwrap_or(0) >= sts.metadata.generation.unwrap_or(0);
        let updated = st.updated_replicas.unwrap_or(0) >= replicas || replicas == 0;
        current_generation && updated && st.ready_replicas.unwrap_or(0) == replicas && st.replicas == replicas
    }
}

pub fn compute(job: &StreamJob, outcome: &Outcome, observed: &Observed, now: &Time) -> StreamJobStatus {
    let previous = job.status.clone().unwrap_or_default();
    let generation = job.metadata.generation;
    let name = job.metadata.name.clone().unwrap_or_default();
    let mut status = StreamJobStatus {
        conditions: previous.conditions.clone(),
        observed_generation: generation,
        partitions: previous.partitions,
        ready_workers: observed.ready_workers(),
        selector: Some(names::selector_string(&name)),
        assignment: previous.assignment.clone(),
        assignment_epoch: previous.assignment_epoch,
        earlier_slots: previous.earlier_slots,
        consumer_group: previous.consumer_group,
        state_topic: previous.state_topic,
        lag: previous.lag,
        query_identity: previous.query_identity,
        state_layout: previous.state_layout,
        autoscaling: previous.autoscaling,
        registry_schemas: observed.registry_schemas.clone().unwrap_or(previous.registry_schemas),
    };
    let mut set = |t: &str, s: ConditionStatus, reason: &str, message: &str| {
        set_condition(&mut status.conditions, t, s, reason, message, generation, now.clone());
    };
    use ConditionStatus::{False, True};
    match outcome {
        Outcome::Invalid(i) => {
            set(ct::READY, False, i.reason, &i.message);
            set(ct::PROGRESSING, False, i.reason, "fix the spec to proceed; nothing was launched or changed");
            set(ct::DEGRADED, True, i.reason, &i.message);
        }
        Outcome::Unavailable(i) => {
            set(ct::READY, False, i.reason, &i.message);
            set(ct::PROGRESSING, True, i.reason, "retrying with backoff");
            set(ct::DEGRADED, True, i.reason, &i.message);
        }
        Outcome::Refused(i) => {
            // Ready stays as the running query's workers make it.
            set(ct::PROGRESSING, False, i.reason, "revert the query or set spec.upgradeMode: Fresh to proceed");
            set(ct::DEGRADED, True, i.reason, &i.message);
        }
        Outcome::Draining { live_pods } => {
            let m = format!(
                "partition ownership changes: stopping {live_pods} worker(s) of the previous assignment (they drain, \
                 checkpoint and commit) before the new assignment starts"
            );
            set(ct::READY, False, reasons::RESCALING, &m);
            set(ct::PROGRESSING, True, reasons::RESCALING, &m);
            set(ct::DEGRADED, False, reasons::AS_EXPECTED, "");
        }
        Outcome::Applied(d) => {
            status.partitions = Some(d.total_partitions);
            status.consumer_group = Some(d.config.consumer_group());
            status.state_topic = Some(d.config.state_topic());
            status.query_identity = Some(d.query.identity.clone());
            status.state_layout.clone_from(&d.query.layout);
            status.assignment = Some(d.assignment.clone());
            status.assignment_epoch = Some(d.config.assignment_epoch);
            status.earlier_slots.clone_from(&d.config.earlier_slots);
            let spec = &job.spec;
            let ready = observed.ready_workers();
            if spec.suspend {
                let m = format!(
                    "suspended: workers stopped, offsets and state kept ({} pod(s) still stopping)",
                    observed.live_pods
                );
                set(
                    ct::READY,
                    False,
                    reasons::SUSPENDED,
                    if observed.live_pods > 0 { &m } else { "suspended: workers stopped, offsets and state kept" },
                );
                set(ct::PROGRESSING, if observed.live_pods > 0 { True } else { False }, reasons::SUSPENDED, "");
            } else if let Some(first) = observed.failures.first() {
                let others = observed.failures.len() - 1;
                let m = format!(
                    "worker {} stopped: {}{}; fix the cause and restart the worker (delete its pod)",
                    first.pod,
                    first.reason,
                    if others > 0 { format!(" (and {others} other worker(s))") } else { String::new() }
                );
                set(ct::READY, False, reasons::WORKER_FAILED, &m);
                set(ct::PROGRESSING, False, reasons::WORKER_FAILED, "a worker stopped; restarting it cannot help");
            } else if observed.converged(d.replicas)
                && d.replicas > 0
                && observed.finished.len() == usize::try_from(d.replicas).unwrap_or(usize::MAX)
            {
                let (pod, summary) = &observed.finished[0];
                let m = format!(
                    "every worker read its bounded input to the end and stays up, idle, until the job is deleted \
                     ({pod}: {summary})"
                );
                set(ct::READY, True, reasons::FINISHED, &m);
                set(ct::PROGRESSING, False, reasons::FINISHED, "the input is read to its end");
            } else if observed.converged(d.replicas) {
                let m = format!(
                    "{} worker(s) × {} core(s) consuming {} partition(s)",
                    spec.workers, spec.cores_per_worker, d.total_partitions
                );
                set(ct::READY, True, reasons::RUNNING, &m);
                set(ct::PROGRESSING, False, reasons::RECONCILED, "workers match the spec");
            } else {
                let m = format!("{ready}/{} worker(s) ready (assigned and consuming)", d.replicas);
                set(ct::READY, False, reasons::STARTING, &m);
                set(ct::PROGRESSING, True, reasons::STARTING, &m);
            }
            match (observed.failures.first(), observed.restarting.first()) {
                (Some(f), _) => {
                    set(ct::DEGRADED, True, reasons::WORKER_FAILED, &format!("worker {}: {}", f.pod, f.reason));
                }
                (None, Some(r)) => {
                    let m = format!("worker {}: {} (it keeps retrying)", r.pod, r.reason);
                    set(ct::DEGRADED, True, reasons::WORKER_RESTARTING, &m);
                }
                (None, None) => set(ct::DEGRADED, False, reasons::AS_EXPECTED, ""),
            }
            let idle = d.assignment.idle_cores();
            if idle > 0 {
                let m = format!(
                    "{} partition(s) for {} worker(s) × {} core(s): {idle} engine thread(s) own no partition; add partitions or lower coresPerWorker/workers",
                    d.total_partitions, spec.workers, spec.cores_per_worker
                );
                set(ct::CORES_IDLE, True, reasons::IDLE_CORES, &m);
            } else {
                set(ct::CORES_IDLE, False, reasons::ALL_CORES_BUSY, "every engine thread owns at least one partition");
            }
        }
    }
    status
}

/// The Ready condition's (status, reason, message), if present.
pub fn ready_condition(status: Option<&StreamJobStatus>) -> Option<(String, String, String)> {
    status?
        .conditions
        .iter()
        .find(|c| c.type_ == ct::READY)
        .map(|c| (c.status.clone(), c.reason.clone(), c.message.clone()))
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::apps::v1::StatefulSetStatus;

    use super::*;
    use crate::render::fixtures::{desired_for, job};

    fn now() -> Time {
        Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH)
    }

    fn ready(status: &StreamJobStatus) -> (String, String) {
        let c = status.conditions.iter().find(|c| c.type_ == ct::READY).unwrap();
        (c.status.clone(), c.reason.clone())
    }

    fn sts(ready: i32, replicas: i32) -> Observed {
        let mut s = StatefulSet::default();
        s.metadata.generation = Some(2);
        s.status = Some(StatefulSetStatus {
            replicas,
            ready_replicas: Some(ready),
            updated_replicas: Some(replicas),
            observed_generation: Some(2),
            ..StatefulSetStatus::default()
        });
        Observed {
            statefulset: Some(s),
            live_pods: usize::try_from(replicas).unwrap(),
            pods: Vec::new(),
            failures: Vec::new(),
            finished: Vec::new(),
            restarting: Vec::new(),
            registry_schemas: None,
        }
    }

    /// A worker stopped by a fatal error once left the job at
    /// `WorkersStarting`, `Degraded=False` forever.
    #[test]
    fn a_failed_worker_degrades_the_job_naming_it_and_why() {
        let j = job("s2-group-by.yaml");
        let d = Box::new(desired_for(&j, 8));
        let mut observed = sts(1, 2);
        observed.failures =
            vec![WorkerFailure { pod: "s2-group-by-1".into(), reason: "core 0: state of partition 3 is over".into() }];
        let s = compute(&j, &Outcome::Applied(d), &observed, &now());
        assert_eq!(ready(&s), ("False".into(), reasons::WORKER_FAILED.into()));
        let degraded = s.conditions.iter().find(|c| c.type_ == ct::DEGRADED).unwrap();
        assert_eq!((degraded.status.as_str(), degraded.reason.as_str()), ("True", reasons::WORKER_FAILED));
        assert!(degraded.message.contains("s2-group-by-1") && degraded.message.contains("state of partition 3"));
    }

    /// A core that failed and restarted again and again left the job at
    /// `WorkersStarting`, `Degraded=False`, its error in no status.
    #[test]
    fn a_worker_restarting_again_and_again_degrades_the_job_with_its_last_error() {
        let j = job("s2-group-by.yaml");
        let d = Box::new(desired_for(&j, 8));
        let mut observed = sts(1, 2);
        observed.restarting = vec![WorkerFailure {
            pod: "s2-group-by-0".into(),
            reason: "core 0 restarted 4 times in a row; last error: kafka: deliver to out: refused".into(),
        }];
        let s = compute(&j, &Outcome::Applied(d), &observed, &now());
        let degraded = s.conditions.iter().find(|c| c.type_ == ct::DEGRADED).unwrap();
        assert_eq!((degraded.status.as_str(), degraded.reason.as_str()), ("True", reasons::WORKER_RESTARTING));
        assert!(degraded.message.contains("s2-group-by-0") && degraded.message.contains("restarted 4 times"));
        assert_eq!(ready(&s).0, "False");
    }

    /// A bounded job that has read everything is `Finished`, not `Running`,
    /// once every worker says so.
    #[test]
    fn a_job_whose_workers_all_finished_is_finished() {
        let j = job("s2-group-by.yaml");
        let d = Box::new(desired_for(&j, 8));
        let mut observed = sts(2, 2);
        observed.finished = vec![("s2-group-by-0".into(), "records in: 10".into())];
        let one = compute(&j, &Outcome::Applied(d.clone()), &observed, &now());
        assert_eq!(ready(&one), ("True".into(), reasons::RUNNING.into()), "one of two is still reading");
        observed.finished.push(("s2-group-by-1".into(), "records in: 12".into()));
        let both = compute(&j, &Outcome::Applied(d), &observed, &now());
        assert_eq!(ready(&both), ("True".into(), reasons::FINISHED.into()));
    }

    #[test]
    fn ready_only_when_every_worker_is_ready() {
        let j = job("s2-group-by.yaml");
        let d = Box::new(desired_for(&j, 8));
        let starting = compute(&j, &Outcome::Applied(d.clone()), &sts(1, 2), &now());
        assert_eq!(ready(&starting), ("False".into(), reasons::STARTING.into()));
        assert_eq!(starting.ready_workers, 1);
        let running = compute(&j, &Outcome::Applied(d), &sts(2, 2), &now());
        assert_eq!(ready(&running), ("True".into(), reasons::RUNNING.into()));
        assert_eq!(running.partitions, Some(8));
        let group = running.consumer_group.clone().unwrap();
        assert!(group.starts_with("sluice.prod.s2-group-by."), "{group}");
        assert_eq!(running.state_topic, Some(format!("{group}.state")));
        assert!(running.assignment.is_some());
    }

    #[test]
    fn invalid_sql_is_reported_and_idle_cores_warned() {
        let j = job("s2-group-by.yaml");
        let inv = Invalid { reason: reasons::INVALID_SQL, message: "line 1, column 8: unknown column".into() };
        let s = compute(&j, &Outcome::Invalid(inv), &Observed::default(), &now());
        assert_eq!(ready(&s), ("False".into(), reasons::INVALID_SQL.into()));
        let degraded = s.conditions.iter().find(|c| c.type_ == ct::DEGRADED).unwrap();
        assert!(degraded.message.contains("line 1, column 8"));
        let few = compute(&j, &Outcome::Applied(Box::new(desired_for(&j, 3))), &sts(2, 2), &now());
        let idle = few.conditions.iter().find(|c| c.type_ == ct::CORES_IDLE).unwrap();
        assert_eq!((idle.status.as_str(), idle.reason.as_str()), ("True", reasons::IDLE_CORES));
    }
}
