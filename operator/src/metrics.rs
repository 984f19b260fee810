//! The operator's own metrics.

use prometheus::{HistogramOpts, HistogramVec, IntCounterVec, IntGauge, IntGaugeVec, Opts, Registry};

use crate::Error;

#[derive(Debug, Clone)]
pub struct Metrics {
    pub registry: Registry,
    pub reconciles: IntCounterVec,
    pub reconcile_seconds: HistogramVec,
    pub reconcile_errors: IntCounterVec,
    pub leader: IntGauge,
    /// Per job (`namespace`, `streamjob`): the worker count it should run.
    pub desired_workers: IntGaugeVec,
    /// Per job: worker pods ready.
    pub ready_workers: IntGaugeVec,
    /// Per job: records behind in its sources, as read from Kafka.
    pub lag: IntGaugeVec,
    /// Per job: 1 while `spec.suspend` is set (not ready on purpose).
    pub suspended: IntGaugeVec,
    /// Per job and condition (`Ready`, `Degraded`): 1 when True.
    pub condition: IntGaugeVec,
    /// Per job and decision (`ScaleUp`, `ScaleDown`): the autoscaler's changes.
    pub autoscaler_decisions: IntCounterVec,
    /// Per job: rescales started (partition ownership changed: workers,
    /// cores or source partitions), each a stop-then-start of every worker.
    pub rescales: IntCounterVec,
}

/// The conditions exported per job.
pub const CONDITIONS: [&str; 2] = ["Ready", "Degraded"];

/// The autoscaler decisions counted (the others change nothing).
pub const DECISIONS: [&str; 2] = ["ScaleUp", "ScaleDown"];

impl Metrics {
    pub fn new() -> Result<Self, Error> {
        let e = |e: prometheus::Error| Error::Internal(format!("metrics: {e}"));
        let registry = Registry::new();
        let reconciles =
            IntCounterVec::new(Opts::new("sluice_operator_reconciles_total", "Reconciles of StreamJobs"), &["outcome"])
                .map_err(e)?;
        let reconcile_seconds = HistogramVec::new(
            HistogramOpts::new("sluice_operator_reconcile_duration_seconds", "Time to reconcile one StreamJob")
                .buckets(vec![0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0]),
            &["outcome"],
        )
        .map_err(e)?;
        let reconcile_errors = IntCounterVec::new(
            Opts::new("sluice_operator_reconcile_errors_total", "Failed reconciles, by reason"),
            &["reason"],
        )
        .map_err(e)?;
        for r in crate::error::REASONS {
            reconcile_errors.with_label_values(&[r]);
        }
        // Every series exists from the start, so dashboards and alerts see 0, not nothing.
        for o in ["ok", "error"] {
            reconciles.with_label_values(&[o]);
            reconcile_seconds.with_label_values(&[o]);
        }
        let leader =
            IntGauge::new("sluice_operator_leader", "1 while this replica holds the leader lease").map_err(e)?;
        let job = ["namespace", "streamjob"];
        let desired_workers = IntGaugeVec::new(
            Opts::new(
                "sluice_operator_job_desired_workers",
                "Worker pods the job should run (autoscaler's choice or spec.workers)",
            ),
            &job,
        )
        .map_err(e)?;
        let ready_workers = IntGaugeVec::new(
            Opts::new("sluice_operator_job_ready_workers", "Worker pods of the job that are ready"),
            &job,
        )
        .map_err(e)?;
        let lag = IntGaugeVec::new(
            Opts::new("sluice_operator_job_lag_records", "Records in the job's sources not yet committed by it"),
            &job,
        )
        .map_err(e)?;
        let autoscaler_decisions = IntCounterVec::new(
            Opts::new("sluice_operator_autoscaler_decisions_total", "Worker count changes the autoscaler made"),
            &["namespace", "streamjob", "decision"],
        )
        .map_err(e)?;
        let rescales = IntCounterVec::new(
            Opts::new(
                "sluice_operator_job_rescales_total",
                "Rescales of the job started: partition ownership changed, every worker stopped and restarted",
            ),
            &job,
        )
        .map_err(e)?;
        let condition = IntGaugeVec::new(
            Opts::new("sluice_operator_job_condition", "1 when the job's condition is True, else 0"),
            &["namespace", "streamjob", "condition"],
        )
        .map_err(e)?;
        let suspended = IntGaugeVec::new(
            Opts::new("sluice_operator_job_suspended", "1 while the job is suspended (spec.suspend)"),
            &job,
        )
        .map_err(e)?;
        for c in [&desired_workers, &ready_workers, &lag, &suspended, &condition] {
            registry.register(Box::new(c.clone())).map_err(e)?;
        }
        registry.register(Box::new(autoscaler_decisions.clone())).map_err(e)?;
        registry.register(Box::new(rescales.clone())).map_err(e)?;
        registry.register(Box::new(reconciles.clone())).map_err(e)?;
        registry.register(Box::new(reconcile_seconds.clone())).map_err(e)?;
        registry.register(Box::new(reconcile_errors.clone())).map_err(e)?;
        registry.register(Box::new(leader.clone())).map_err(e)?;
        Ok(Self {
            registry,
            reconciles,
            reconcile_seconds,
            reconcile_errors,
            leader,
            desired_workers,
            ready_workers,
            lag,
            suspended,
            condition,
            autoscaler_decisions,
            rescales,
        })
    }

    /// A job's series, created at 0 so dashboards and alerts see them
    /// before the first change.
    pub fn job(&self, namespace: &str, name: &str) {
        for g in [&self.desired_workers, &self.ready_workers, &self.lag, &self.suspended] {
            g.with_label_values(&[namespace, name]);
        }
        for d in DECISIONS {
            self.autoscaler_decisions.with_label_values(&[namespace, name, d]);
        }
        self.rescales.with_label_values(&[namespace, name]);
        for c in CONDITIONS {
            self.condition.with_label_values(&[namespace, name, c]);
        }
    }

    /// Drops every job's series: a replica that stops leading must not
    /// go on exporting what it last saw (alerts would fire on it forever).
    pub fn forget_jobs(&self) {
        for g in [&self.desired_workers, &self.ready_workers, &self.lag, &self.suspended] {
            g.reset();
        }
        self.condition.reset();
        self.autoscaler_decisions.reset();
        self.rescales.reset();
    }

    /// Drops a deleted job's series.
    pub fn forget_job(&self, namespace: &str, name: &str) {
        for g in [&self.desired_workers, &self.ready_workers, &self.lag, &self.suspended] {
            let _ = g.remove_label_values(&[namespace, name]);
        }
        for d in DECISIONS {
            let _ = self.autoscaler_decisions.remove_label_values(&[namespace, name, d]);
        }
        for c in CONDITIONS {
            let _ = self.condition.remove_label_values(&[namespace, name, c]);
        }
        let _ = self.rescales.remove_label_values(&[namespace, name]);
    }

    pub fn render(&self) -> String {
        prometheus::TextEncoder::new().encode_to_string(&self.registry.gather()).unwrap_or_default()
    }
}
