//! What a core is given to run its share of a job: its inputs (from the
//! topology), the job's config, and the handles it shares with the other
//! cores of the worker (health, metrics, the registry client).

use std::sync::Arc;

use sluice_crds::WorkerConfig;
use sluice_plan::Dataflow;

use super::health::Health;
use super::local_exchange::LocalEnds;
use super::topology::CoreInput;
use crate::metrics::CoreMetrics;

/// Everything a core needs to run its share of the job.
pub struct CoreSetup {
    pub core: usize,
    /// The worker's ordinal (its StatefulSet index).
    pub ordinal: i32,
    pub pin_to: Option<core_affinity::CoreId>,
    pub dataflow: Arc<Dataflow>,
    pub config: Arc<WorkerConfig>,
    /// What this core reads, in stage order: per stage, stage 0's source
    /// or the stage's repartition topic, then the sources of the branches
    /// beside it (`sluice_plan::Branch`).
    pub inputs: Vec<CoreInput>,
    /// How many partitions each repartition topic has.
    pub exchange_partitions: i32,
    pub bounded: bool,
    pub metrics: CoreMetrics,
    pub health: Arc<Health>,
    /// A local run of a query cut into stages: this core's ends of the
    /// in-process exchanges (taken by the one start; local runs do not
    /// restart).
    pub local_exchange: std::sync::Mutex<Option<LocalEnds>>,
    /// The job's Schema Registry (`spec.schemaRegistry`), shared by the
    /// worker's cores.
    pub registry: Option<Arc<crate::registry::Registry>>,
    /// A preview's budget of printed rows (see `RunOptions::preview`).
    pub preview: Option<Arc<crate::sink::RowBudget>>,
}

impl CoreSetup {
    /// Whether the job commits offsets (its sources are Kafka topics).
    pub fn commits(&self) -> bool {
        self.preview.is_none() && self.inputs.iter().any(|i| i.source.as_ref().is_some_and(|s| s.kafka.is_some()))
    }

    /// This core's engine slot among the job's `workers × coresPerWorker`
    /// (see `sluice_crds::assign`), and how many there are.
    pub(crate) fn slot(&self) -> (u32, u32) {
        let spec = &self.config.spec;
        let (workers, cores) = (spec.workers.max(1), spec.cores_per_worker.max(1));
        let slot = i32::try_from(self.core).unwrap_or(0) * workers + self.ordinal;
        (u32::try_from(slot).unwrap_or(0), u32::try_from(workers * cores).unwrap_or(1))
    }

    /// The transactional id (exactly once, or at least once with a
    /// stateful stage before a repartition topic) of engine slot `slot` of a
    /// generation of `slots` slots. A fixed set per job and scale: a restart
    /// reuses its id (and so fences what it left running), and ids never
    /// accumulate.
    pub(super) fn transactional_id(&self, slot: u32, slots: u32) -> String {
        format!("{}.tx-{slots}-{slot}", self.config.consumer_group())
    }

    /// Where input `i`'s state is checkpointed: the job's state topic for
    /// stage 0's source, one per later stage's repartition topic, one per
    /// branch source that keeps state (a windowed side of a join).
    pub(super) fn state_topic(&self, i: usize) -> String {
        super::topology::state_topic(&self.inputs, i, &self.config)
    }
}
