//! Tuning of the per-core engines: batching, state bound, checkpoints, emission.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::{CrdsError, parse_quantity_bytes};

/// How each engine batches, bounds its state and emits results. Every field
/// has a default that suits most jobs.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct EngineSpec {
    /// A batch is processed when it holds this many records...
    #[serde(default = "default_batch_max_records")]
    #[schemars(range(min = 1, max = 1_000_000))]
    pub batch_max_records: i32,
    /// ...or when its first record has waited this long, whichever comes first.
    #[serde(default = "default_batch_linger_millis")]
    #[schemars(range(min = 0, max = 60_000))]
    pub batch_linger_millis: i32,
    /// Upper bound on the state (groups, windows, row buffers) one core
    /// holds, all its partitions together. Worker pods get memory for it
    /// (twice it per core, plus 512Mi); exceeding it stops the job with a
    /// clear condition instead of an OOM kill.
    #[serde(default = "default_state_memory_limit")]
    pub state_memory_limit: String,
    /// How often state is checkpointed and source offsets are committed.
    #[serde(default = "default_checkpoint_interval_millis")]
    #[schemars(range(min = 50, max = 3_600_000))]
    pub checkpoint_interval_millis: i32,
    /// How `EMIT CHANGES` results are emitted.
    #[serde(default)]
    pub emit_changes: EmitChangesMode,
    /// What happens to records that arrive after their window closed.
    #[serde(default)]
    pub late_records: LateRecordPolicy,
    /// After a shuffle (a repartition topic), each partition's watermark is
    /// the minimum over the source partitions feeding it. A source
    /// partition with no records for this long stops holding that minimum
    /// back until its next record, as Flink's `withIdleness` does; records
    /// it then sends behind the watermark are late. 0 waits forever.
    #[serde(default = "default_idle_timeout_millis")]
    #[schemars(range(min = 0, max = 86_400_000))]
    pub idle_timeout_millis: i32,
    /// Partitions of each repartition topic (default: the largest source
    /// partition count). More lets later stages use more cores than the
    /// sources have partitions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 10_000))]
    pub repartition_partitions: Option<i32>,
    /// A copy of each worker's checkpoints on a volume of its own, so a
    /// restarted worker restores its state from disk instead of reading it
    /// back from the state topic.
    #[serde(default)]
    pub local_state: LocalStateSpec,
}

/// The volume a worker keeps its copy of its checkpoints on. The state
/// topic stays the source of truth: the copy is used only when it holds
/// the checkpoint the committed offsets point to.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct LocalStateSpec {
    #[serde(default)]
    pub volume: LocalStateVolume,
    /// The volume's size (the claim's request, or the `emptyDir` size
    /// limit). Default: four times the state the worker's cores may hold
    /// (`stateMemoryLimit` × `coresPerWorker` × 4), at least 1Gi. The copy
    /// stops (restores read the topic) before it takes half of it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub size: Option<String>,
    /// The StorageClass of a `Persistent` volume (default: the cluster's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub storage_class_name: Option<String>,
}

/// Where the copy lives.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum LocalStateVolume {
    /// An `emptyDir`: kept across restarts of the worker's container (a
    /// crash, an OOM kill), not when the pod is replaced.
    #[default]
    EmptyDir,
    /// A PersistentVolumeClaim per worker (the StatefulSet's
    /// `volumeClaimTemplates`), kept when a pod is rescheduled; deleted
    /// with the job or when the workers are rescaled.
    Persistent,
    /// No copy: every restore reads the state topic.
    None,
}

/// Granularity of `EMIT CHANGES` output.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum EmitChangesMode {
    /// One update per changed group (or top-N rank) per batch, the latest value: far less output.
    #[default]
    Coalesced,
    /// One update for every input record, as ksqlDB does.
    PerRecord,
}

/// Fate of records whose window was already closed by the watermark.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum LateRecordPolicy {
    /// Dropped and counted in `sluice_late_records_total`.
    #[default]
    Drop,
    /// Sent to the dead-letter output with reason `late`.
    DeadLetter,
}

fn default_batch_max_records() -> i32 {
    4096
}
fn default_batch_linger_millis() -> i32 {
    2
}
fn default_state_memory_limit() -> String {
    "256Mi".to_owned()
}
fn default_checkpoint_interval_millis() -> i32 {
    1000
}
fn default_idle_timeout_millis() -> i32 {
    30_000
}

impl Default for EngineSpec {
    fn default() -> Self {
        Self {
            batch_max_records: default_batch_max_records(),
            batch_linger_millis: default_batch_linger_millis(),
            state_memory_limit: default_state_memory_limit(),
            checkpoint_interval_millis: default_checkpoint_interval_millis(),
            emit_changes: EmitChangesMode::default(),
            late_records: LateRecordPolicy::default(),
            idle_timeout_millis: default_idle_timeout_millis(),
            repartition_partitions: None,
            local_state: LocalStateSpec::default(),
        }
    }
}

/// What a worker needs besides its state: the Kafka clients' queues and
/// prefetch, batches in flight, the runtime (measured: about 45 MB for one
/// core and 15–25 MB per further core, docs/operations.md).
pub const WORKER_BASE_MEMORY: u64 = 512 << 20;

/// Memory per byte of state bound: the state gauge counts what the state
/// holds, the allocator's free lists, growth headroom of tables and a
/// checkpoint's serialised pages take up to about as much again (RSS was
/// 1.7 times the gauge on a `COUNT(DISTINCT)`).
pub const MEMORY_PER_STATE_BYTE: u64 = 2;

impl EngineSpec {
    /// The state bound in bytes.
    pub fn state_memory_limit_bytes(&self) -> Result<u64, CrdsError> {
        parse_quantity_bytes("spec.engine.stateMemoryLimit", &self.state_memory_limit)
    }

    /// The memory a worker of `cores` cores needs: [`WORKER_BASE_MEMORY`]
    /// and, per core, [`MEMORY_PER_STATE_BYTE`] times the state bound.
    pub fn worker_memory_bytes(&self, cores: i32) -> Result<u64, CrdsError> {
        let per_core = self.state_memory_limit_bytes()?.saturating_mul(MEMORY_PER_STATE_BYTE);
        Ok(WORKER_BASE_MEMORY.saturating_add(per_core.saturating_mul(u64::try_from(cores.max(1)).unwrap_or(1))))
    }

    /// The size of a worker's local state volume (`localState.size`, or its
    /// default); `None` without one.
    pub fn local_state_bytes(&self, cores: i32) -> Result<Option<u64>, CrdsError> {
        if self.local_state.volume == LocalStateVolume::None {
            return Ok(None);
        }
        if let Some(size) = &self.local_state.size {
            return parse_quantity_bytes("spec.engine.localState.size", size).map(Some);
        }
        let state = self.state_memory_limit_bytes()?.saturating_mul(u64::try_from(cores.max(1)).unwrap_or(1));
        Ok(Some(state.saturating_mul(4).max(1 << 30)))
    }

    /// What is wrong with `localState`, if anything.
    pub(crate) fn local_state_problems(&self) -> Vec<String> {
        let mut problems = Vec::new();
        let local = &self.local_state;
        if let Some(size) = &local.size {
            match parse_quantity_bytes("spec.engine.localState.size", size) {
                Ok(bytes) if bytes < 64 << 20 => problems.push(format!(
                    "spec.engine.localState.size: {size} is too small for a copy of the state (at least 64Mi)"
                )),
                Ok(_) => {}
                Err(e) => problems.push(e.to_string()),
            }
        }
        if local.storage_class_name.is_some() && local.volume != LocalStateVolume::Persistent {
            problems.push(format!(
                "spec.engine.localState.storageClassName applies to volume: Persistent (this one is {:?})",
                local.volume
            ));
        }
        if local.volume == LocalStateVolume::None && local.size.is_some() {
            problems.push("spec.engine.localState.size: volume None keeps no copy, so it has no size".into());
        }
        problems
    }
}
