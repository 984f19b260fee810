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
    /// The CPUs of the core's engine thread and of its stores' threads.
    pub cpus: CoreCpus,
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

/// The CPU a core's engine thread is pinned to, and the one the
/// background threads of its on-disk stores (the spill store's and the
/// local checkpoint copy's flushes and compactions) run on. A thread
/// inherits the CPUs of the thread that starts it, so a store opened on a
/// pinned engine thread compacts on the engine's own CPU and
/// takes its time from the engine: a spilling Nexmark q18 lost 11 s of its
/// 41 s to its store's compactions (docs/benchmarks.md, "State larger than
/// memory: the store off the engine's CPU"). Where the worker has CPUs no
/// engine is pinned to (a pod given more CPUs than `coresPerWorker`), the
/// stores' threads go there, spread over them by core; where it has none,
/// they stay on the core's own CPU, so one core's compactions never take
/// time from another core's engine.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CoreCpus {
    /// The engine thread's (`None`: not pinned).
    pub engine: Option<core_affinity::CoreId>,
    /// The stores' threads' (`None`: wherever the thread that opens the
    /// store may run).
    pub stores: Option<core_affinity::CoreId>,
}

impl CoreCpus {
    /// Where core `core` of `cores` pins its engine, and where its stores'
    /// threads go, among the worker's `cpus` (empty: nothing is pinned).
    pub fn place(core: usize, cores: usize, cpus: &[core_affinity::CoreId]) -> Self {
        let engine = (!cpus.is_empty()).then(|| cpus[core % cpus.len()]);
        let spare = cpus.get(cores..).unwrap_or_default();
        let stores = if spare.is_empty() { engine } else { Some(spare[core % spare.len()]) };
        Self { engine, stores }
    }

    /// Runs `open`, which starts a store's background threads, on the
    /// stores' CPU, then returns the calling engine thread to its own.
    pub fn open_store<R>(self, open: impl FnOnce() -> R) -> R {
        let Some(cpu) = self.stores.filter(|&cpu| Some(cpu) != self.engine) else { return open() };
        let moved = core_affinity::set_for_current(cpu);
        let out = open();
        if moved
            && let Some(engine) = self.engine
            && !core_affinity::set_for_current(engine)
        {
            tracing::warn!(cpu = engine.id, "could not pin the engine thread back to its CPU");
        }
        out
    }
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

#[cfg(test)]
mod tests {
    use core_affinity::CoreId;

    use super::CoreCpus;
    use crate::runtime::spill_store::{MEMTABLE, SpillDb};

    fn ids(n: usize) -> Vec<CoreId> {
        (0..n).map(|id| CoreId { id }).collect()
    }

    #[test]
    fn stores_compact_on_the_cpus_no_engine_holds_else_on_their_own_core() {
        let at = |core, cores, cpus: usize| {
            let t = CoreCpus::place(core, cores, &ids(cpus));
            (t.engine.map(|c| c.id), t.stores.map(|c| c.id))
        };
        // One engine on two CPUs: its store works on the other.
        assert_eq!(at(0, 1, 2), (Some(0), Some(1)));
        // Every CPU holds an engine: each store stays on its own core's.
        assert_eq!(at(0, 2, 2), (Some(0), Some(0)));
        assert_eq!(at(1, 2, 2), (Some(1), Some(1)));
        // Four engines on six CPUs: the stores share the two spare ones.
        assert_eq!(
            (0..4).map(|c| at(c, 4, 6)).collect::<Vec<_>>(),
            [(Some(0), Some(4)), (Some(1), Some(5)), (Some(2), Some(4)), (Some(3), Some(5))]
        );
        // More engines than CPUs: they wrap, and so do their stores.
        assert_eq!(at(3, 3, 2), (Some(1), Some(1)));
        // Nothing pinned (`pinCores: false`, or no CPU list).
        assert_eq!(at(0, 1, 0), (None, None));
    }

    /// The CPUs a thread of this process may run on (`task`: its
    /// directory under /proc).
    fn allowed(task: &str) -> String {
        let status = std::fs::read_to_string(format!("{task}/status")).unwrap_or_default();
        status.lines().find_map(|l| l.strip_prefix("Cpus_allowed_list:")).unwrap_or_default().trim().to_owned()
    }

    /// This process's threads (their directories under /proc).
    fn tasks() -> std::collections::BTreeSet<String> {
        std::fs::read_dir("/proc/self/task")
            .map(|d| d.filter_map(|t| Some(t.ok()?.path().to_str()?.to_owned())).collect())
            .unwrap_or_default()
    }

    #[test]
    fn a_store_opened_by_a_pinned_engine_starts_its_threads_on_the_store_cpu() {
        let cpus = core_affinity::get_core_ids().unwrap_or_default();
        if cpus.len() < 2 {
            eprintln!("one CPU: nothing to place elsewhere");
            return;
        }
        let (engine, store) = (cpus[0], cpus[1]);
        let dir = std::env::temp_dir().join(format!("sluice-store-threads-{}", std::process::id()));
        std::thread::spawn(move || {
            assert!(core_affinity::set_for_current(engine));
            let cpus = CoreCpus { engine: Some(engine), stores: Some(store) };
            let before = tasks();
            let db = cpus.open_store(|| SpillDb::open(&dir, None, MEMTABLE)).unwrap();
            assert_eq!(allowed("/proc/thread-self"), engine.id.to_string(), "the engine thread is back on its CPU");
            // A thread's CPUs are its creator's from the moment it exists,
            // but it names itself only once it first runs (on a busy machine,
            // later): wait for the name, not for the CPUs.
            let started: Vec<String> = tasks().difference(&before).cloned().collect();
            let on_store = |t: &String| {
                std::fs::read_to_string(format!("{t}/comm")).unwrap_or_default().trim() == "fjall:worker"
                    && allowed(t) == store.id.to_string()
            };
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
            while !started.iter().any(on_store) && std::time::Instant::now() < deadline {
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
            assert!(started.iter().any(on_store), "the store's worker thread runs on CPU {}", store.id);
            drop(db);
        })
        .join()
        .unwrap();
    }
}
