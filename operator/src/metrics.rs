//! The operator's own metrics.

use prometheus::{HistogramOpts, HistogramVec, IntCounterVec, IntGauge, Opts, Registry};

use crate::Error;

#[derive(Debug, Clone)]
pub struct Metrics {
    pub registry: Registry,
    pub reconciles: IntCounterVec,
    pub reconcile_seconds: HistogramVec,
    pub reconcile_errors: IntCounterVec,
    pub leader: IntGauge,
}

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
        registry.register(Box::new(reconciles.clone())).map_err(e)?;
        registry.register(Box::new(reconcile_seconds.clone())).map_err(e)?;
        registry.register(Box::new(reconcile_errors.clone())).map_err(e)?;
        registry.register(Box::new(leader.clone())).map_err(e)?;
        Ok(Self { registry, reconciles, reconcile_seconds, reconcile_errors, leader })
    }

    pub fn render(&self) -> String {
        prometheus::TextEncoder::new().encode_to_string(&self.registry.gather()).unwrap_or_default()
    }
}
