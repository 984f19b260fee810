//! Measuring a running job — its lag from Kafka, its workers' busy time
//! from their metrics — and, with `spec.autoscaling`, running the
//! autoscaler's decision ([`crate::autoscale`]) on what was measured. The
//! decision only changes `status.autoscaling.desiredWorkers`; the next
//! reconcile turns that into the usual drain-and-restart rescale.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::Client;
use sluice_crds::{AutoscalingStatus, SourcePartitions, StreamJob, reasons};

use crate::Error;
use crate::autoscale::{Action, Decision, Memory, Policy, Sample, Scale, decide};
use crate::desired::Desired;
use crate::metrics::Metrics;
use crate::{lag, worker_health};

/// The autoscaler's memory of every job (lost on restart: it measures
/// afresh), and the clock its measurements are taken on.
#[derive(Debug)]
pub struct Autoscaler {
    memories: Mutex<HashMap<String, Memory>>,
    /// The count each job was last scaled to, by this process: the
    /// reconcile right after a decision may still see the status from
    /// before it (the watch cache lags the write), and must not undo it.
    decided: Mutex<HashMap<String, i32>>,
    /// When each job's lag was last read from Kafka.
    lag_read: Mutex<HashMap<String, f64>>,
    clock: Instant,
}

impl Default for Autoscaler {
    fn default() -> Self {
        Self {
            memories: Mutex::new(HashMap::new()),
            decided: Mutex::new(HashMap::new()),
            lag_read: Mutex::new(HashMap::new()),
            clock: Instant::now(),
        }
    }
}

impl Autoscaler {
    /// The worker count the job is to run at: the one this process decided
    /// last until the status (`in_status`) shows it, then the status's.
    pub fn decided(&self, key: &str, in_status: Option<i32>) -> Option<i32> {
        let mut decided = self.decided.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        match decided.get(key).copied() {
            Some(d) if Some(d) == in_status => {
                decided.remove(key);
                in_status
            }
            Some(d) => Some(d),
            None => in_status,
        }
    }

    /// Records a change of the job's count: the measurements of the old
    /// count are forgotten, and the new count holds until the status shows it.
    fn scaled_to(&self, key: &str, workers: i32) {
        self.forget(key);
        self.decided.lock().unwrap_or_else(std::sync::PoisonError::into_inner).insert(key.to_owned(), workers);
    }

    /// A decision of this process the status may not show yet.
    pub fn pending(&self, key: &str) -> Option<i32> {
        self.decided.lock().unwrap_or_else(std::sync::PoisonError::into_inner).get(key).copied()
    }

    /// Whether the job's lag is due to be read again (at most once per
    /// `every`): writing a changed lag into the status triggers another
    /// reconcile, which must not read and write it again at once.
    fn lag_due(&self, key: &str, every: f64) -> bool {
        let now = self.clock.elapsed().as_secs_f64();
        let mut read = self.lag_read.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        match read.get(key) {
            Some(at) if now - at < every * 0.9 => false,
            _ => {
                read.insert(key.to_owned(), now);
                true
            }
        }
    }

    /// Forgets a job's measurements and decisions (no longer autoscaled).
    pub fn forget_decisions(&self, key: &str) {
        self.forget(key);
        self.decided.lock().unwrap_or_else(std::sync::PoisonError::into_inner).remove(key);
    }

    /// Forgets everything about a job (deleted).
    pub fn forget_job(&self, key: &str) {
        self.forget_decisions(key);
        self.lag_read.lock().unwrap_or_else(std::sync::PoisonError::into_inner).remove(key);
    }

    fn with<R>(&self, key: &str, f: impl FnOnce(&mut Memory) -> R) -> R {
        let mut memories = self.memories.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        f(memories.entry(key.to_owned()).or_default())
    }

    /// Forgets a job's measurements (its scale changes, or it is gone).
    pub fn forget(&self, key: &str) {
        self.memories.lock().unwrap_or_else(std::sync::PoisonError::into_inner).remove(key);
    }
}

/// What the job's status and the events should say.
#[derive(Debug, Clone, Default)]
pub struct Measured {
    /// `status.lag`, when Kafka told it.
    pub lag: Option<i64>,
    /// `status.autoscaling` (None without `spec.autoscaling`).
    pub autoscaling: Option<AutoscalingStatus>,
    /// A change of worker count: (event reason, new count, message).
    pub scaled: Option<(&'static str, i32, String)>,
}

/// The most workers that each own a partition of the topic with the most
/// partitions (a worker beyond that would own none).
pub fn useful_workers(job: &StreamJob, partitions: &[SourcePartitions]) -> i32 {
    let most =
        partitions.iter().map(|p| p.partitions).chain(job.spec.engine.repartition_partitions).max().unwrap_or(1).max(1);
    let cores = job.spec.cores_per_worker.max(1);
    (most + cores - 1) / cores
}

/// Everything a measurement needs from the reconcile.
#[allow(missing_debug_implementations)] // `kube::Client` is not `Debug`.
pub struct Running<'a> {
    pub client: &'a Client,
    pub metrics: &'a Metrics,
    pub kafka_timeout: Duration,
    /// `namespace/name`.
    pub key: &'a str,
    pub job: &'a StreamJob,
    pub desired: &'a Desired,
    /// Every worker of the current scale is ready and none failed.
    pub steady: bool,
    pub pods: &'a [Pod],
    pub ready_workers: i32,
    pub now: &'a Time,
    /// How often the lag of a job without autoscaling is read.
    pub lag_every: Duration,
}

/// Measures the job and, if it autoscales, decides.
pub async fn measure(autoscaler: &Autoscaler, r: &Running<'_>) -> Result<Measured, Error> {
    let (namespace, name) = r.key.split_once('/').unwrap_or(("", r.key));
    let job = r.job;
    r.metrics.desired_workers.with_label_values(&[namespace, name]).set(i64::from(r.desired.replicas));
    r.metrics.ready_workers.with_label_values(&[namespace, name]).set(i64::from(r.ready_workers));
    let previous_lag = job.status.as_ref().and_then(|s| s.lag);
    let period = job.spec.autoscaling.as_ref().map(|a| f64::from(a.period_seconds.max(1)));
    let at = autoscaler.clock.elapsed().as_secs_f64();
    // One measurement per period (or per resync without autoscaling),
    // however often the job is reconciled.
    let sample_due =
        autoscaler.with(r.key, |m| m.last_sample_at().is_none_or(|last| at - last >= period.unwrap_or(0.0) * 0.9));
    let offsets = if autoscaler.lag_due(r.key, period.unwrap_or(r.lag_every.as_secs_f64()))
        || (r.steady && period.is_some() && sample_due)
    {
        let group = r.desired.config.consumer_group();
        Some(lag::read(r.client, namespace, &job.spec, &r.desired.config.partitions, &group, r.kafka_timeout).await?)
    } else {
        None
    };
    let lag = match &offsets {
        Some(Ok(o)) => {
            r.metrics.lag.with_label_values(&[namespace, name]).set(o.lag);
            Some(o.lag)
        }
        Some(Err(why)) => {
            tracing::debug!(job = %r.key, %why, "lag not read");
            previous_lag
        }
        None => previous_lag,
    };
    let Some(spec) = &job.spec.autoscaling else {
        autoscaler.forget_decisions(r.key);
        return Ok(Measured { lag, autoscaling: None, scaled: None });
    };
    let policy = Policy::from(spec);
    let previous = job.status.as_ref().and_then(|s| s.autoscaling.clone()).unwrap_or_default();
    // The count in force (while suspended too: resuming goes back to it).
    let current = job.spec.workers;
    let mut status = AutoscalingStatus { desired_workers: Some(current), ..previous.clone() };
    if !r.steady {
        autoscaler.forget(r.key);
        status.last_decision = Some(Action::Collecting.as_str().into());
        status.message = Some(if job.spec.suspend {
            "suspended: nothing to measure".to_owned()
        } else {
            format!("waiting for {current} worker(s) to be ready before measuring ({} ready)", r.ready_workers)
        });
        return Ok(Measured { lag, autoscaling: Some(status), scaled: None });
    }
    if !sample_due {
        return Ok(Measured { lag, autoscaling: Some(previous), scaled: None });
    }
    let (Some(Ok(offsets)), Some(work)) = (offsets, worker_health::work_totals(r.pods).await) else {
        status.last_decision = Some(Action::Hold.as_str().into());
        status.message = Some("could not read the lag from Kafka or the metrics of every worker: holding".into());
        return Ok(Measured { lag, autoscaling: Some(status), scaled: None });
    };
    let sample = Sample {
        at,
        end_offsets: offsets.end,
        lag: offsets.lag,
        records_in: work.records_in,
        busy_seconds: work.busy_seconds,
    };
    let scale = Scale {
        workers: current,
        cores_per_worker: job.spec.cores_per_worker.max(1),
        useful_workers: useful_workers(job, &r.desired.config.partitions),
        checkpoint_interval_seconds: f64::from(job.spec.engine.checkpoint_interval_millis.max(0)) / 1000.0,
    };
    let decision = autoscaler.with(r.key, |m| decide(&policy, &scale, m, sample));
    apply_decision(&mut status, &decision, r.now);
    let scaled = match decision.action {
        Action::ScaleUp | Action::ScaleDown => {
            autoscaler.scaled_to(r.key, decision.workers);
            r.metrics.autoscaler_decisions.with_label_values(&[namespace, name, decision.action.as_str()]).inc();
            let reason = if decision.action == Action::ScaleUp { reasons::SCALED_UP } else { reasons::SCALED_DOWN };
            Some((
                reason,
                decision.workers,
                format!("{current} → {} worker(s): {}", decision.workers, decision.message),
            ))
        }
        Action::Collecting | Action::Hold => None,
    };
    Ok(Measured { lag, autoscaling: Some(status), scaled })
}

fn apply_decision(status: &mut AutoscalingStatus, d: &Decision, now: &Time) {
    if matches!(d.action, Action::ScaleUp | Action::ScaleDown) {
        status.desired_workers = Some(d.workers);
        status.last_scale_time = Some(now.clone());
    }
    status.last_decision = Some(d.action.as_str().into());
    status.message = Some(d.message.clone());
    if let Some(r) = d.rates {
        #[allow(clippy::cast_possible_truncation)]
        {
            status.input_rate = Some(r.input.round() as i64);
            status.processing_rate_per_core = r.per_core.map(|mu| mu.round() as i64);
            status.utilization_percent = Some((r.utilization * 100.0).round() as i32);
        }
    }
}
