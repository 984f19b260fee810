//! The `StreamJob` custom resource.

use k8s_openapi::api::core::v1::ResourceRequirements;
use kube::{CustomResource, KubeSchema};
use serde::{Deserialize, Serialize};

use crate::{AutoscalingSpec, DeadLetterSpec, EngineSpec, PodTemplateSpec, SinkSpec, SourceSpec, StreamJobStatus};

/// A continuously running streaming SQL query over Kafka.
///
/// The operator validates `sql` against the declared source schemas, looks up
/// the source partitions, and runs `workers` pods with `coresPerWorker` pinned
/// engine threads each; every Kafka partition is owned by exactly one thread.
// Each printcolumn(...) repeats keys such as `type_ = "integer"`, which
// clippy's duplicated_attributes lint mistakes for duplicates.
#[allow(clippy::duplicated_attributes)]
#[derive(CustomResource, KubeSchema, Clone, Debug, PartialEq, Serialize, Deserialize)]
#[kube(
    group = "sluice.dev",
    version = "v1alpha1",
    kind = "StreamJob",
    plural = "streamjobs",
    shortname = "sj",
    category = "sluice",
    namespaced,
    status = "StreamJobStatus",
    derive = "PartialEq",
    doc = "A streaming SQL query over Kafka, run by Sluice workers",
    scale(
        spec_replicas_path = ".spec.workers",
        status_replicas_path = ".status.readyWorkers",
        label_selector_path = ".status.selector"
    ),
    printcolumn(name = "Ready", type_ = "string", json_path = ".status.conditions[?(@.type==\"Ready\")].status"),
    printcolumn(name = "Reason", type_ = "string", json_path = ".status.conditions[?(@.type==\"Ready\")].reason"),
    printcolumn(name = "Workers", type_ = "integer", json_path = ".spec.workers"),
    printcolumn(name = "Ready-Workers", type_ = "integer", json_path = ".status.readyWorkers"),
    printcolumn(name = "Partitions", type_ = "integer", json_path = ".status.partitions"),
    printcolumn(name = "Lag", type_ = "integer", json_path = ".status.lag"),
    printcolumn(name = "Suspended", type_ = "boolean", json_path = ".spec.suspend", priority = 1),
    printcolumn(name = "Age", type_ = "date", json_path = ".metadata.creationTimestamp")
)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[x_kube(validation = Rule::new("!has(self.delivery) || self.delivery != 'ExactlyOnce' || (has(self.sink.kafka) && self.sources.all(s, has(s.kafka) && s.kafka.bootstrapServers == self.sink.kafka.bootstrapServers) && (!has(self.deadLetter) || (has(self.deadLetter.kafka) && self.deadLetter.kafka.bootstrapServers == self.sink.kafka.bootstrapServers)))").message("delivery ExactlyOnce needs Kafka sources, a Kafka sink and a Kafka dead-letter topic (if any) with the same bootstrapServers: one transaction per core holds the results, the dead letters and the input offsets"))]
#[x_kube(validation = Rule::new("!has(self.delivery) || self.delivery != 'ExactlyOnce' || !has(self.engine) || !has(self.engine.checkpointIntervalMillis) || self.engine.checkpointIntervalMillis < 900000").message("delivery ExactlyOnce needs engine.checkpointIntervalMillis below 900000: a checkpoint's transaction must commit within the broker's transaction.max.timeout.ms (15 minutes by default)"))]
#[x_kube(validation = Rule::new("!has(self.delivery) || self.delivery != 'ExactlyOnce' || !has(self.sink.kafka) || !has(self.sink.kafka.properties) || !('transaction.timeout.ms' in self.sink.kafka.properties) || int(self.sink.kafka.properties['transaction.timeout.ms']) > (has(self.engine) && has(self.engine.checkpointIntervalMillis) ? self.engine.checkpointIntervalMillis : 1000)").message("sink.kafka.properties transaction.timeout.ms must be longer than engine.checkpointIntervalMillis: a transaction lasts a checkpoint interval"))]
#[x_kube(validation = Rule::new("self.sources.all(s, !has(s.file)) && !has(self.sink.file) && (!has(self.deadLetter) || !has(self.deadLetter.file))").message(LOCAL_ONLY))]
#[x_kube(validation = Rule::new("self.sources.all(s, !has(s.format) || s.format != 'avro' || (has(s.kafka) && has(self.schemaRegistry)))").message("a source with format avro reads a Kafka topic and needs spec.schemaRegistry (its records name their writer schema by registry id)"))]
#[x_kube(validation = Rule::new("self.sources.all(s, !has(s.schema.registry) || (has(s.format) && (s.format == 'avro' || s.format == 'protobuf') && has(self.schemaRegistry)))").message("columns are derived from a schema.registry subject's Avro or Protobuf schema: the source needs format avro or protobuf and the job spec.schemaRegistry"))]
#[x_kube(validation = Rule::new("self.sources.all(s, !has(s.format) || s.format != 'protobuf' || (has(s.kafka) && has(self.schemaRegistry)))").message("a source with format protobuf reads a Kafka topic and needs spec.schemaRegistry (its records name their schema by registry id)"))]
#[x_kube(validation = Rule::new("self.sources.all(s, !has(s.format) || s.format != 'debezium-avro' || (has(s.kafka) && has(self.schemaRegistry)))").message("a source with format debezium-avro reads a Kafka topic and needs spec.schemaRegistry (its records name their writer schema by registry id)"))]
#[x_kube(validation = Rule::new("self.sources.all(s, !has(s.keyFormat) || s.keyFormat == 'json' || (has(s.kafka) && has(self.schemaRegistry)))").message("a source with keyFormat avro or protobuf reads a Kafka topic and needs spec.schemaRegistry (its keys name their schema by registry id)"))]
#[x_kube(validation = Rule::new("!has(self.sink.keyFormat) || self.sink.keyFormat == 'json' || (has(self.sink.kafka) && has(self.schemaRegistry))").message("sink.keyFormat avro or protobuf writes a Kafka topic and needs spec.schemaRegistry (the key schema is registered there)"))]
#[x_kube(validation = Rule::new("self.sources.all(s, !has(s.format) || !s.format.startsWith('debezium-') || has(s.table))").message("a source with format debezium-json or debezium-avro is a table of the database's rows: declare table.primaryKey"))]
#[x_kube(validation = Rule::new("!has(self.sink.format) || !(self.sink.format in ['avro', 'protobuf']) || (has(self.sink.kafka) && has(self.schemaRegistry))").message("a sink with format avro or protobuf writes a Kafka topic and needs spec.schemaRegistry (its writer schema is registered there)"))]
pub struct StreamJobSpec {
    /// The query: one SELECT over one of `sources`, with the streaming clauses
    /// described in docs/sql.md (windows, EMIT CHANGES / EMIT FINAL).
    #[schemars(length(min = 1, max = 65536))]
    pub sql: String,
    /// Inputs, referenced by name in the query's FROM clause.
    #[schemars(length(min = 1, max = 16))]
    #[x_kube(validation = Rule::new("self.all(s, self.exists_one(t, t.name.lowerAscii() == s.name.lowerAscii()))").message("source names must be unique (ignoring case: SQL names are case-insensitive)"))]
    pub sources: Vec<SourceSpec>,
    /// Where results go.
    pub sink: SinkSpec,
    /// Where records that cannot be processed go (original bytes and reason).
    /// Without it they are logged and counted, then dropped.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dead_letter: Option<DeadLetterSpec>,
    /// Number of worker pods (the scale subresource: `kubectl scale sj/x
    /// --replicas=N`). With `autoscaling`, only the count the job starts with.
    #[serde(default = "one")]
    #[schemars(range(min = 1, max = 1024))]
    pub workers: i32,
    /// Engine threads per worker, each pinned to its own core.
    #[serde(default = "one")]
    #[schemars(range(min = 1, max = 256))]
    pub cores_per_worker: i32,
    /// Worker image; defaults to the image the operator was installed with.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<String>,
    /// Resources of each worker pod. When unset, the CPU request and limit are
    /// `coresPerWorker` so each engine thread gets a whole core.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources: Option<ResourceRequirements>,
    /// Placement, identity, pulls, extra env and volumes of the worker pods.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_template: Option<PodTemplateSpec>,
    /// Stop all workers, keeping committed offsets and state; resuming continues.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub suspend: bool,
    /// Batching, state bound, checkpointing and emission tuning.
    #[serde(default)]
    pub engine: EngineSpec,
    /// What a consumer of the sink sees after a crash (docs/operations.md).
    #[serde(default, skip_serializing_if = "Delivery::is_default")]
    pub delivery: Delivery,
    /// Let the operator choose the worker count from lag and busy time.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub autoscaling: Option<AutoscalingSpec>,
    /// What happens to the job's offsets and state when its query changes
    /// (docs/operations.md, "Changing a running query").
    #[serde(default, skip_serializing_if = "UpgradeMode::is_default")]
    pub upgrade_mode: UpgradeMode,
    /// The Schema Registry of the sources and the sink whose `format`
    /// needs one (`avro`, `protobuf`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schema_registry: Option<crate::SchemaRegistrySpec>,
    /// What happens to the job's consumer group and internal topics (state
    /// and repartition) in Kafka when the StreamJob is deleted
    /// (docs/operations.md, "Deleting a job").
    #[serde(default, skip_serializing_if = "ReclaimPolicy::is_default")]
    pub reclaim_policy: ReclaimPolicy,
}

/// What a deleted job leaves in Kafka, as a PersistentVolume's reclaim
/// policy says what a released volume keeps: kept by default, since a
/// job re-created under the same name and query resumes from it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub enum ReclaimPolicy {
    /// The consumer group and the internal topics stay: a job re-created
    /// with the same namespace, name and query resumes from its offsets
    /// and state; removing them is by hand.
    #[default]
    Retain,
    /// Once the workers drained, the operator deletes the job's consumer
    /// group and its state and repartition topics (those of the group it
    /// ran last) before the StreamJob goes. The job's sources, sink and
    /// dead-letter topic are never touched.
    Delete,
}

impl ReclaimPolicy {
    fn is_default(&self) -> bool {
        *self == Self::default()
    }
}

/// How a changed query takes over from the running one. Either way, an
/// edit that keeps the state's meaning — whitespace and comments, filters,
/// the SELECT list, HAVING, sources the query does not read — continues
/// from the job's committed offsets and state.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub enum UpgradeMode {
    /// A query whose state differs (other GROUP BY keys, aggregates,
    /// windows, join sides) is refused: `Degraded=True`, reason
    /// `IncompatibleUpgrade`, saying what differs, while the workers of the
    /// running query keep running.
    #[default]
    KeepState,
    /// A query whose state differs starts over: a new consumer group and
    /// state topics, reading from each source's `startFrom`, announced by a
    /// `StartedFresh` event. The old group and topics are left in Kafka.
    Fresh,
}

impl UpgradeMode {
    fn is_default(&self) -> bool {
        *self == Self::default()
    }
}

/// The CRD rule's message for what only `sluice-worker run` may use,
/// repeated by [`StreamJobSpec::local_only_problems`].
pub const LOCAL_ONLY: &str = "file sources, a file sink and a file deadLetter run only on one machine (sluice-worker \
                              run -f): on the cluster a file source would read any file of its worker pod, Secrets \
                              mounted there included, and send what is not JSON to the dead-letter output";

/// The delivery guarantee of the sink's results.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub enum Delivery {
    /// Every result at least once: after a crash, the results since the
    /// last checkpoint are written again. Results are visible as soon as
    /// they are written (latency: milliseconds).
    #[default]
    AtLeastOnce,
    /// Every result exactly once to a consumer reading with
    /// `isolation.level=read_committed`: each core writes in one Kafka
    /// transaction per checkpoint, with its input offsets. Results become
    /// visible at each checkpoint's commit (latency: at least
    /// `engine.checkpointIntervalMillis`). Needs the sources, the sink and
    /// a Kafka dead-letter topic on one cluster.
    ExactlyOnce,
}

impl Delivery {
    fn is_default(&self) -> bool {
        *self == Self::default()
    }
}

fn one() -> i32 {
    1
}

impl StreamJobSpec {
    /// The source named `name`, if declared.
    pub fn source(&self, name: &str) -> Option<&SourceSpec> {
        self.sources.iter().find(|s| s.name.eq_ignore_ascii_case(name))
    }
}
