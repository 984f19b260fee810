//! The worker's configuration document.
//!
//! The operator renders one into the job's ConfigMap; `sluice-worker serve`
//! reads it (layered: defaults → file → `SLUICE_`-prefixed environment), and
//! `sluice-worker run -f job.yaml` builds the same document from a StreamJob
//! manifest. Credentials never appear here: sources name a Secret, which the
//! operator mounts under `worker.secretsDir`.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::{SourcePartitions, StreamJobSpec};

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct WorkerConfig {
    /// Which StreamJob this worker belongs to.
    pub job: JobIdentity,
    /// The job's spec as applied.
    pub spec: StreamJobSpec,
    /// Partition count of every source, as looked up by the operator. The
    /// worker derives its own partitions from this with [`crate::assign`].
    pub partitions: Vec<SourcePartitions>,
    /// The assignment generation this config belongs to (see docs/operations.md).
    #[serde(default)]
    pub assignment_epoch: i64,
    /// Engine slot counts (`workers × coresPerWorker`) the job ran at
    /// before this assignment, most recent last. Exactly once, a core
    /// fences the transactional ids those scales used for its partitions
    /// before it reads them (docs/operations.md, *Exactly once*).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub earlier_slots: Vec<i32>,
    /// Process-level settings of the worker.
    #[serde(default)]
    pub worker: WorkerSettings,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct JobIdentity {
    pub name: String,
    #[serde(default = "default_namespace")]
    pub namespace: String,
}

/// Settings of the worker process, independent of the query.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct WorkerSettings {
    /// This worker's index among the job's workers. When unset it is taken
    /// from the pod name (`<job>-<ordinal>`, the StatefulSet convention).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ordinal: Option<i32>,
    /// Address of the HTTP endpoint serving /metrics, /healthz and /readyz.
    #[serde(default = "default_http_address")]
    pub http_address: String,
    /// Port of that endpoint; 0 picks a free port (local runs and tests).
    #[serde(default = "default_http_port")]
    pub http_port: u16,
    /// Where referenced Secrets are mounted, one directory per Secret, one
    /// file per key.
    #[serde(default = "default_secrets_dir")]
    pub secrets_dir: String,
    /// Kafka consumer group for offset commits; default `sluice.<namespace>.<job>`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub consumer_group: Option<String>,
    /// Compacted topic holding engine state checkpoints; default `<consumerGroup>.state`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state_topic: Option<String>,
    /// Directory for the copy of each core's checkpoints kept beside the
    /// state topic (the volume the operator mounts), so a restart restores
    /// from disk what the topic would otherwise have to send; none when
    /// unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state_dir: Option<String>,
    /// The size of the volume at `stateDir`: the copy stops before it takes
    /// half of it (its store needs room to compact), so the kubelet never
    /// evicts the pod for it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state_dir_bytes: Option<u64>,
    /// Pin each engine thread to one CPU core.
    #[serde(default = "yes")]
    pub pin_cores: bool,
    /// OTLP/HTTP endpoint for traces (e.g. `http://otel-collector:4318`); off when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub otlp_endpoint: Option<String>,
    /// `text` or `json` log lines.
    #[serde(default = "default_log_format")]
    pub log_format: String,
    /// Time allowed to drain, flush and commit after SIGTERM.
    #[serde(default = "default_shutdown_grace_millis")]
    pub shutdown_grace_millis: u32,
    /// How often every owned partition's checkpoint is committed again, even
    /// when its offset has not moved. Kafka deletes a standalone group's
    /// committed offsets `offsets.retention.minutes` (7 days by default)
    /// after their last commit — and with them the pointer to the
    /// partition's state — so this must stay well below that retention.
    #[serde(default = "default_offset_refresh_millis")]
    pub offset_refresh_millis: u64,
}

fn default_namespace() -> String {
    "default".to_owned()
}
fn default_http_address() -> String {
    "0.0.0.0".to_owned()
}
fn default_http_port() -> u16 {
    crate::contract::WORKER_HTTP_PORT
}
fn default_secrets_dir() -> String {
    crate::contract::SECRETS_DIR.to_owned()
}
fn default_log_format() -> String {
    "text".to_owned()
}
fn default_shutdown_grace_millis() -> u32 {
    20_000
}
fn default_offset_refresh_millis() -> u64 {
    3_600_000
}
fn yes() -> bool {
    true
}

impl Default for WorkerSettings {
    fn default() -> Self {
        Self {
            ordinal: None,
            http_address: default_http_address(),
            http_port: default_http_port(),
            secrets_dir: default_secrets_dir(),
            consumer_group: None,
            state_topic: None,
            state_dir: None,
            state_dir_bytes: None,
            pin_cores: true,
            otlp_endpoint: None,
            log_format: default_log_format(),
            shutdown_grace_millis: default_shutdown_grace_millis(),
            offset_refresh_millis: default_offset_refresh_millis(),
        }
    }
}

/// Environment variable through which the pod template tells a worker the
/// hash of the config it was rendered with (see [`config_hash`]).
pub const EXPECTED_CONFIG_HASH_ENV: &str = "SLUICE_EXPECTED_CONFIG_HASH";

/// The hash of a rendered worker config document: the operator puts it on
/// the pod template (rolling the pods when it changes) and in the
/// container's environment. A mounted ConfigMap is updated by the kubelet
/// some time after the pod template, so a new worker may still read the
/// previous generation's document; the worker compares this hash with the
/// file it read and does not consume until they match — it never runs the
/// old assignment next to the new one.
pub fn config_hash(document: &str) -> String {
    use sha2::{Digest, Sha256};
    Sha256::digest(document.as_bytes()).iter().take(4).map(|b| format!("{b:02x}")).collect()
}

impl WorkerConfig {
    /// The consumer group offsets are committed to.
    pub fn consumer_group(&self) -> String {
        self.worker
            .consumer_group
            .clone()
            .unwrap_or_else(|| crate::contract::consumer_group(&self.job.namespace, &self.job.name, None))
    }

    /// The compacted topic holding state checkpoints.
    pub fn state_topic(&self) -> String {
        self.worker.state_topic.clone().unwrap_or_else(|| format!("{}.state", self.consumer_group()))
    }

    /// The repartition topic stage `stage` (1-based) of a multi-stage
    /// query reads: named from the consumer group, like the state topic.
    pub fn repartition_topic(&self, stage: usize) -> String {
        format!("{}.repartition-{stage}", self.consumer_group())
    }

    /// The state topic of stage `stage`: the job's state topic for the
    /// first, one per later stage that keeps state.
    pub fn stage_state_topic(&self, stage: usize) -> String {
        match stage {
            0 => self.state_topic(),
            s => format!("{}-{s}", self.state_topic()),
        }
    }

    /// Total partitions over all sources.
    pub fn total_partitions(&self) -> i32 {
        self.partitions.iter().map(|p| p.partitions).sum()
    }

    /// Reads a config document (YAML or JSON).
    pub fn from_yaml(text: &str) -> Result<Self, crate::CrdsError> {
        serde_saphyr::from_str(text)
            .map_err(|e| crate::CrdsError::Parse { what: "worker config".into(), message: e.to_string() })
    }

    /// Writes the document as YAML, as the operator puts it in the ConfigMap.
    pub fn to_yaml(&self) -> Result<String, crate::CrdsError> {
        serde_saphyr::to_string(self)
            .map_err(|e| crate::CrdsError::Serialize { what: "worker config", message: e.to_string() })
    }
}
