//! The contract between the Sluice operator and its workers.
//!
//! * [`StreamJob`] — the custom resource users apply (`sluice.dev/v1alpha1`).
//! * [`WorkerConfig`] — the document the operator writes into a ConfigMap and
//!   every worker reads at start; `sluice-worker run -f` builds the same
//!   document from a StreamJob manifest, so local and cluster runs share one path.
//! * [`assign`] — the single, pure partition → worker → core ownership function.
//!   The operator reports its result in `status.assignment`; each worker
//!   computes its own slice with the same call, so the two can never disagree.
//!
//! `crdgen` writes `crds/streamjob.yaml` from these types; a test fails when the
//! committed file differs.

mod assignment;
mod autoscaling;
mod client_properties;
mod column_type;
mod condition;
pub mod contract;
mod crd;
mod engine;
mod error;
mod kafka_security;
mod partitioner;
mod pod_template;
mod quantity;
mod registry;
mod registry_columns;
mod schema_references;
mod sink;
mod source;
mod status;
mod stream_job;
mod validate;
mod worker_config;

pub use assignment::{Assignment, CoreAssignment, PartitionSet, SourcePartitions, WorkerAssignment, assign};
pub use autoscaling::{AutoscalingSpec, AutoscalingStatus};
pub use client_properties::{OPERATOR_CLIENT_PROPERTIES, PropertyOrigin, operator_applies, rejected_property};
pub use column_type::{ColumnType, DECIMAL_MAX_PRECISION, MAX_TYPE_DEPTH, MAX_TYPE_TEXT, field_name};
pub use condition::{ConditionStatus, set_condition};
pub use crd::{CRD_FILE, crd_yaml};
pub use engine::{EmitChangesMode, EngineSpec, LateRecordPolicy, LocalStateSpec, LocalStateVolume};
pub use error::CrdsError;
pub use kafka_security::{
    AuthenticationType, CertSecretSource, CertificateAndKey, KafkaAuthentication, KafkaConnection, KafkaTls,
    PasswordSecret, SecretRef, SecurityProperty,
};
pub use partitioner::{murmur2, partition_for_key};
pub use pod_template::{PodTemplateSpec, reserved_env};
pub use quantity::parse_quantity_bytes;
pub use registry::{
    REGISTRY_MAX_ANSWER_BYTES, RegistryAccess, RegistryAuthentication, RegistryTls, SchemaRegistrySpec,
    SubjectNameStrategy, error_with_causes, registry_not_found_code, subject_path_segment,
};
pub use registry_columns::{
    REGISTRY_MAX_COLUMN_NAME, REGISTRY_MAX_COLUMNS, REGISTRY_MAX_DEPTH, REGISTRY_MAX_FIELDS_WALKED, ResolvedSchema,
    SubjectSchema, avro_columns, avro_columns_with, requested_version,
};
pub use schema_references::{MAX_REFERENCE_DEPTH, MAX_REFERENCES, ReferenceWalk, SchemaReference, schema_references};
pub use sink::{DeadLetterSpec, FileTarget, KafkaTarget, SinkFormat, SinkSpec, camel_case};
pub use source::{
    ColumnSpec, DatagenScenario, DatagenSource, EventTimeSpec, FileSource, KafkaSource, KeyFormat, RecordMetadata,
    RegistrySubject, SchemaSpec, SourceFormat, SourceSpec, StartFrom, TableSpec,
};
pub use status::{RegistrySchemaStatus, StreamJobStatus, condition_types, reasons};
pub use stream_job::{Delivery, ReclaimPolicy, StreamJob, StreamJobSpec, UpgradeMode};
pub use worker_config::{EXPECTED_CONFIG_HASH_ENV, JobIdentity, WorkerConfig, WorkerSettings, config_hash};

/// API group of every Sluice resource.
pub const GROUP: &str = "sluice.dev";
/// Label put on every object the operator creates for a job; its value is the job name.
pub const JOB_LABEL: &str = "sluice.dev/job";
/// Field manager used for server-side apply.
pub const FIELD_MANAGER: &str = "sluice-operator";
