//! What the operator reports about a job.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::{Assignment, AutoscalingStatus};

/// Observed state of a StreamJob. `Ready` is only True when every worker of
/// the current generation reports that it is assigned and consuming.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct StreamJobStatus {
    /// `Ready`, `Progressing` and `Degraded`, with CamelCase reasons.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    pub conditions: Vec<Condition>,
    /// The `metadata.generation` this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// Total partitions across all sources.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub partitions: Option<i32>,
    /// Worker pods that are ready (assigned and consuming).
    #[serde(default)]
    pub ready_workers: i32,
    /// Label selector of the worker pods (for the scale subresource).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub selector: Option<String>,
    /// Which worker and core own which partitions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub assignment: Option<Assignment>,
    /// Increases each time the assignment changes; workers of an older epoch
    /// are stopped before workers of a newer one start (see docs/operations.md).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub assignment_epoch: Option<i64>,
    /// Engine slot counts (`workers × coresPerWorker`) of earlier
    /// assignments, most recent last (at most 16): the workers fence the
    /// transactional ids of those scales before they read (exactly once).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub earlier_slots: Vec<i32>,
    /// The Kafka consumer group the job's workers commit their source
    /// offsets to (what a lag-based autoscaler such as KEDA watches).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub consumer_group: Option<String>,
    /// The compacted topic the job's state checkpoints go to (a
    /// multi-stage query adds `<stateTopic>-<n>` per further stage and
    /// `<stateTopic>-branch-<n>` per stateful branch).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state_topic: Option<String>,
    /// Records in the sources' partitions that the job has not committed
    /// yet (end offsets minus committed offsets, summed), as the operator
    /// last read them from Kafka.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lag: Option<i64>,
    /// Identity of the state the running query keeps (a hash of
    /// `stateLayout`): a query edit with the same identity continues from
    /// the job's offsets and state.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub query_identity: Option<String>,
    /// The state the running query keeps, one line per stateful operator
    /// (`stage <n>: …`): its keys, aggregates, windows and input columns.
    /// What an upgrade is compared with (`spec.upgradeMode`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub state_layout: Vec<String>,
    /// What the autoscaler measured and decided (with `spec.autoscaling`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub autoscaling: Option<AutoscalingStatus>,
    /// For each source whose columns come from a registry subject
    /// (`schema.registry`): the subject, version and schema id the job
    /// runs with, as the operator resolved them at its last reconcile.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub registry_schemas: Vec<RegistrySchemaStatus>,
}

/// The registry schema a source's columns were derived from.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RegistrySchemaStatus {
    pub source: String,
    pub subject: String,
    pub version: u32,
    pub id: u32,
}

/// Condition types used in `status.conditions`.
pub mod condition_types {
    pub const READY: &str = "Ready";
    pub const PROGRESSING: &str = "Progressing";
    pub const DEGRADED: &str = "Degraded";
    /// True when some engine threads own no partition (partitions < workers × cores).
    pub const CORES_IDLE: &str = "CoresIdle";
}

/// Stable CamelCase reasons for conditions and events.
pub mod reasons {
    pub const INVALID_SQL: &str = "InvalidSql";
    pub const INVALID_SPEC: &str = "InvalidSpec";
    pub const PARTITION_KEY_MISMATCH: &str = "PartitionKeyMismatch";
    pub const TOPIC_NOT_FOUND: &str = "TopicNotFound";
    pub const BROKER_UNREACHABLE: &str = "BrokerUnreachable";
    /// The Schema Registry a source's columns come from did not answer.
    pub const REGISTRY_UNREACHABLE: &str = "RegistryUnreachable";
    pub const STARTING: &str = "WorkersStarting";
    pub const RUNNING: &str = "Running";
    pub const RESCALING: &str = "Rescaling";
    pub const SUSPENDED: &str = "Suspended";
    pub const IDLE_CORES: &str = "IdleCores";
    pub const ALL_CORES_BUSY: &str = "AllCoresBusy";
    pub const DRAINING: &str = "Draining";
    pub const WORKERS_NOT_READY: &str = "WorkersNotReady";
    /// A worker stopped on a fatal error (state limit, a checkpoint that
    /// does not fit the query, a bug); its /readyz reason is in the message.
    pub const WORKER_FAILED: &str = "WorkerFailed";
    /// A core of a worker failed and restarted several times in a row
    /// (`Degraded` only: it keeps retrying, as the failure looks transient);
    /// its last error is in the message.
    pub const WORKER_RESTARTING: &str = "WorkerRestarting";
    /// Every worker read its bounded input (datagen with `records`, a file)
    /// to the end; the workers stay up, idle, instead of restarting.
    pub const FINISHED: &str = "Finished";
    pub const RECONCILED: &str = "Reconciled";
    pub const AS_EXPECTED: &str = "AsExpected";
    /// The autoscaler raised the worker count (event).
    pub const SCALED_UP: &str = "ScaledUp";
    /// The autoscaler lowered the worker count (event).
    pub const SCALED_DOWN: &str = "ScaledDown";
    /// The edited query keeps different state and `upgradeMode` is
    /// `KeepState`: the running query goes on (condition and event).
    pub const INCOMPATIBLE_UPGRADE: &str = "IncompatibleUpgrade";
    /// The edited query keeps different state and `upgradeMode` is
    /// `Fresh`: it starts over in a new consumer group (event).
    pub const STARTED_FRESH: &str = "StartedFresh";
    /// `reclaimPolicy: Delete`: the deleted job's consumer group and
    /// internal topics were deleted (event).
    pub const RECLAIMED: &str = "Reclaimed";
    /// `reclaimPolicy: Delete`: Kafka did not let them be deleted in time;
    /// the job went anyway, and the event names what is left (event).
    pub const RECLAIM_FAILED: &str = "ReclaimFailed";
}
