//! Starting a worker's share of a job and waiting for it.
//!
//! This worker's partitions come from [`sluice_crds::assign`] — the function
//! the operator uses for `status.assignment` — applied to its ordinal. Each
//! core with partitions gets a thread pinned to one CPU. A core that hits a
//! transient failure (broker unreachable) restarts itself from its last
//! checkpoint with backoff, without taking the process down; anything else
//! (bad SQL, state limit, incompatible checkpoint) stops the job with a
//! reason /readyz and the logs report.

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use sluice_crds::WorkerConfig;

use super::core_loop::run_core;
use super::health::{CoreStatus, Health};
use super::local_exchange::{LocalEnds, channels};
use super::setup::{CoreCpus, CoreSetup};
use super::summary::CoreSummary;
use super::topology::Topology;
use crate::Error;
use crate::metrics::Metrics;
use sluice_sql::plan_dataflow;

#[derive(Debug, Clone)]
pub struct RunOptions {
    /// Process to the end offsets captured at start, close all windows, exit.
    pub bounded: bool,
    pub ordinal: i32,
    /// A preview (`sluice-worker preview`): results to standard output
    /// within this budget of rows; stages exchange in process; nothing is
    /// written to Kafka — no offsets, state, repartition records or sink.
    pub preview: Option<Arc<crate::sink::RowBudget>>,
}

/// The one-line account of a run.
#[derive(Debug, Clone, Copy, Default)]
pub struct JobSummary {
    pub records_in: u64,
    pub records_out: u64,
    pub dead_lettered: u64,
    pub late: u64,
    pub elapsed: Duration,
    /// The cores' peak engine state, summed (approximate, as the
    /// `sluice_state_bytes` gauge).
    pub peak_state_bytes: u64,
    /// The most state the cores had spilled to disk at once, summed.
    pub peak_spilled_bytes: u64,
}

impl fmt::Display for JobSummary {
    #[allow(clippy::cast_precision_loss)]
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let secs = self.elapsed.as_secs_f64();
        #[allow(clippy::cast_precision_loss)]
        let rate = if secs > 0.0 { self.records_in as f64 / secs } else { 0.0 };
        write!(
            f,
            "records in: {}, out: {}, dead-lettered: {}, late: {}, elapsed: {:.3}s, {:.0} records/s, peak state: {:.1} MiB",
            self.records_in,
            self.records_out,
            self.dead_lettered,
            self.late,
            secs,
            rate,
            self.peak_state_bytes as f64 / (1024.0 * 1024.0)
        )?;
        if self.peak_spilled_bytes > 0 {
            write!(f, ", spilled: {:.1} MiB", self.peak_spilled_bytes as f64 / (1024.0 * 1024.0))?;
        }
        Ok(())
    }
}

/// Runs this worker's cores until the sources are exhausted (bounded) or
/// shutdown is requested; returns what was done.
pub fn run_job(
    config: WorkerConfig,
    options: &RunOptions,
    metrics: &Metrics,
    health: &Arc<Health>,
) -> Result<JobSummary, Error> {
    let started = Instant::now();
    // Cut where the query's state is keyed differently from its source:
    // later stages read repartition topics. Planned for the most
    // partitions any source has (as the operator plans it), so no source
    // of several partitions is taken to be complete per partition.
    let most_partitions = config.partitions.iter().map(|p| p.partitions).max().unwrap_or(1);
    let dataflow = Arc::new(plan_dataflow(&config.spec.sql, &config.spec.sources, most_partitions)?);
    let partitions_of =
        |name: &str| config.partitions.iter().find(|p| p.source.eq_ignore_ascii_case(name)).map(|p| p.partitions);
    let topology = Topology::new(
        &dataflow,
        &config.spec.sources,
        partitions_of,
        config.spec.engine.repartition_partitions,
        |s| config.repartition_topic(s),
    )?;
    let exchange_partitions = topology.exchange_partitions;
    // Per core, its inputs with the partitions it owns.
    let per_core = topology.for_worker(config.spec.workers, config.spec.cores_per_worker, options.ordinal)?;
    // A local run (no broker) exchanges between stages in process.
    let mut local_ends: Vec<Option<LocalEnds>> = per_core.iter().map(|_| None).collect();
    if dataflow.has_exchange() && (topology.local() || options.preview.is_some()) {
        let backlog = super::local_exchange::Backlog::default();
        local_ends = per_core
            .iter()
            .map(|_| Some(LocalEnds { backlog: Arc::clone(&backlog), ..LocalEnds::default() }))
            .collect();
        for (s, stage) in dataflow.stages.iter().enumerate() {
            let exchange = s + 1;
            if stage.output != sluice_plan::StageOutput::Exchange {
                continue;
            }
            let (senders, receivers) = channels(usize::try_from(exchange_partitions).unwrap_or(1));
            let mut receivers: Vec<Option<_>> = receivers.into_iter().map(Some).collect();
            let Some(input) = topology.inputs.iter().position(|i| i.stage == exchange && i.reads_exchange()) else {
                return Err(Error::Internal(format!("no input reads exchange {exchange}")));
            };
            for (core, ends) in local_ends.iter_mut().enumerate() {
                let Some(ends) = ends else { continue };
                ends.outputs.resize_with(exchange, || None);
                ends.outputs[s] = Some(senders.clone());
                ends.inputs.resize_with(exchange, Vec::new);
                for &p in per_core[core].get(input).map_or(&[][..], |i| &i.partitions[..]) {
                    let receiver =
                        receivers
                            .get_mut(usize::try_from(p).unwrap_or(usize::MAX))
                            .and_then(Option::take)
                            .ok_or_else(|| Error::Internal(format!("exchange {exchange} partition {p} owned twice")))?;
                    ends.inputs[s].push(receiver);
                }
            }
        }
    }
    health.set_cores(per_core.len());
    let cpus = if config.worker.pin_cores { core_affinity::get_core_ids().unwrap_or_default() } else { Vec::new() };
    let config = Arc::new(config);
    // One registry client and schema cache for the worker's cores.
    let registry = match &config.spec.schema_registry {
        Some(r) => Some(crate::registry::Registry::connect(r, &config.worker.secrets_dir)?),
        None => None,
    };
    let mut threads = Vec::new();
    let cores = per_core.len();
    for (core, core_inputs) in per_core.into_iter().enumerate() {
        if core_inputs.iter().all(|i| i.partitions.is_empty()) {
            // An idle core is trivially "assigned and consuming".
            health.set(core, CoreStatus::Running);
            tracing::warn!(core, "no partitions for this core: it stays idle (more cores than partitions)");
            continue;
        }
        let labels: Vec<(&str, i32)> =
            core_inputs.iter().flat_map(|i| i.partitions.iter().map(move |&p| (i.topic.as_str(), p))).collect();
        let setup = CoreSetup {
            core,
            ordinal: options.ordinal,
            cpus: CoreCpus::place(core, cores, &cpus),
            dataflow: Arc::clone(&dataflow),
            config: Arc::clone(&config),
            metrics: metrics.core(core, &labels),
            inputs: core_inputs,
            exchange_partitions,
            bounded: options.bounded,
            health: Arc::clone(health),
            local_exchange: std::sync::Mutex::new(local_ends[core].take()),
            registry: registry.clone(),
            preview: options.preview.clone(),
        };
        let thread = std::thread::Builder::new()
            .name(format!("sluice-core-{core}"))
            .spawn(move || supervise(&setup))
            .map_err(|e| Error::io("spawn core thread", e))?;
        threads.push(thread);
    }
    let mut summary = CoreSummary::default();
    let mut first_error = None;
    for t in threads {
        match t.join() {
            Ok(Ok(s)) => summary.add(&s),
            Ok(Err(e)) => {
                health.abort(e.to_string());
                // A fence decides how the process ends (it exits): it wins
                // over what the other cores stopped with after it.
                if matches!(e, Error::Fenced(_)) {
                    first_error = Some(e);
                } else {
                    first_error.get_or_insert(e);
                }
            }
            // `supervise` catches panics; this is only a panic in the catching.
            Err(_) => {
                let e = Error::Internal("a core thread panicked".into());
                health.abort(e.to_string());
                first_error.get_or_insert(e);
            }
        }
    }
    if let Some(e) = first_error {
        metrics.failed.set(1);
        return Err(e);
    }
    Ok(JobSummary {
        records_in: summary.records_in,
        records_out: summary.records_out,
        dead_lettered: summary.dead_lettered,
        late: summary.late,
        elapsed: started.elapsed(),
        peak_state_bytes: summary.peak_state_bytes,
        peak_spilled_bytes: summary.peak_spilled_bytes,
    })
}

/// How long a core must have run before a failure counts as the first in a
/// row again (and the backoff starts over).
const RUN_RESETS_RESTARTS: Duration = Duration::from_secs(120);

/// Runs a core; after a transient failure, starts it again from its last
/// checkpoint with exponential backoff (Kafka sources only: local sources
/// would replay from the start).
fn supervise(setup: &CoreSetup) -> Result<CoreSummary, Error> {
    let restartable = setup.commits();
    let mut backoff = Duration::from_secs(1);
    let mut attempts = 0;
    // Failures in a row: a run that lasted a while before failing starts
    // the count over (a broker outage now and then is not a loop).
    let mut in_a_row = 0u32;
    loop {
        let started = Instant::now();
        match catch_panic(|| run_core(setup)) {
            Ok(s) => return Ok(s),
            Err(e)
                if restartable && e.is_transient() && !setup.health.stopping() && (!setup.bounded || attempts < 5) =>
            {
                attempts += 1;
                if started.elapsed() >= RUN_RESETS_RESTARTS {
                    in_a_row = 0;
                    backoff = Duration::from_secs(1);
                }
                in_a_row += 1;
                setup.health.restarting(setup.core, in_a_row, &e.to_string());
                setup.health.set(setup.core, CoreStatus::Starting);
                tracing::warn!(core = setup.core, error = %e, retry_in = ?backoff, "core failed; restarting from its last checkpoint");
                let until = Instant::now() + backoff;
                while Instant::now() < until && !setup.health.stopping() {
                    std::thread::sleep(Duration::from_millis(100));
                }
                backoff = (backoff * 2).min(Duration::from_secs(30));
            }
            Err(e) => {
                setup.health.set(setup.core, CoreStatus::Failed);
                tracing::error!(core = setup.core, error = %e, "core stopped");
                // Stop the other cores now, not when the join reaches this
                // thread: the job cannot go on without this core's partitions.
                setup.health.abort(format!("core {}: {e}", setup.core));
                return Err(e);
            }
        }
    }
}

/// Runs `f`, turning a panic into an internal error. A panic is a bug, but
/// left alone it would end the core's thread silently: its partitions
/// would stall while the other cores (and /readyz) carried on. Caught, it
/// takes the path of every fatal error: the worker stops, not ready, with
/// the panic's message as the reason in /readyz and the job's status.
fn catch_panic<T>(f: impl FnOnce() -> Result<T, Error>) -> Result<T, Error> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).unwrap_or_else(|payload| {
        let message = payload
            .downcast_ref::<&str>()
            .map(|s| (*s).to_owned())
            .or_else(|| payload.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "(no message)".into());
        Err(Error::Internal(format!("panicked: {message}")))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_panic_is_a_fatal_internal_error_with_its_message() {
        let e = catch_panic::<()>(|| panic!("attempt to subtract with overflow")).unwrap_err();
        assert!(!e.is_transient(), "a bug is not retried");
        assert_eq!(e.to_string(), "internal error (please report): panicked: attempt to subtract with overflow");
        let e = catch_panic::<()>(|| panic!("window {}", 7)).unwrap_err();
        assert!(e.to_string().ends_with("panicked: window 7"), "{e}");
        assert_eq!(catch_panic(|| Ok(3)).ok(), Some(3));
    }
}
