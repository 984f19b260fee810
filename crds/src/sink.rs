//! Where results (and records that could not be processed) go.

use std::collections::BTreeMap;

use kube::KubeSchema;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::{KafkaAuthentication, KafkaConnection, KafkaTls, SecretRef};

/// The job's output. Exactly one of `kafka`, `file` or `stdout` is set.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, KubeSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[x_kube(validation = Rule::new("[has(self.kafka), has(self.file), has(self.stdout) && self.stdout].filter(x, x).size() == 1").message("exactly one of kafka, file or stdout: true must be set"))]
pub struct SinkSpec {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kafka: Option<KafkaTarget>,
    /// JSON lines appended to a local file (`sluice-worker run` only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub file: Option<FileTarget>,
    /// JSON lines on standard output (`sluice-worker run` only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stdout: Option<bool>,
    #[serde(default)]
    pub format: SinkFormat,
    /// Encoding of each result's record key (the key columns: GROUP BY
    /// keys, window bounds, …): `json` (the default), an object of them;
    /// `avro`, a record of them in the Confluent wire format, its schema
    /// derived from the key columns and registered under `<topic>-key` (or
    /// as `spec.schemaRegistry.subjectNameStrategy` names it), for Kafka
    /// Connect's AvroConverter as key converter and consumers that
    /// deserialize keys through the registry; `protobuf`, a message of
    /// them, likewise, for Connect's ProtobufConverter.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key_format: Option<crate::KeyFormat>,
}

/// Records that could not be processed (malformed, missing required fields,
/// wrong types, late when so configured), with the original bytes, where they
/// came from and why. Exactly one of `kafka` or `file` is set.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, KubeSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[x_kube(validation = Rule::new("[has(self.kafka), has(self.file)].filter(x, x).size() == 1").message("exactly one of kafka or file must be set"))]
pub struct DeadLetterSpec {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kafka: Option<KafkaTarget>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub file: Option<FileTarget>,
}

/// A Kafka topic to produce to. Its producer is idempotent and waits for
/// every in-sync replica (`acks=all`): without that a retried batch can land
/// after a newer one, and a compacted sink would end on an older value. User
/// `properties` may tune the producer but not weaken either setting.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, KubeSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[x_kube(validation = Rule::new("!has(self.properties) || ((!('acks' in self.properties) || self.properties['acks'] in ['all', '-1']) && (!('enable.idempotence' in self.properties) || self.properties['enable.idempotence'] == 'true'))").message("properties may not weaken delivery: acks must be all (or -1) and enable.idempotence true"))]
pub struct KafkaTarget {
    #[schemars(length(min = 1))]
    pub bootstrap_servers: String,
    #[schemars(length(min = 1, max = 249))]
    pub topic: String,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub properties: BTreeMap<String, String>,
    /// A Secret whose keys are librdkafka properties; mounted into the
    /// workers, never copied into config.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret_ref: Option<SecretRef>,
    /// SASL (SCRAM-SHA-512/256, PLAIN) or mutual-TLS authentication, from
    /// Secret keys, as Strimzi's `authentication`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub authentication: Option<KafkaAuthentication>,
    /// TLS to the brokers, as Strimzi's `tls`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls: Option<KafkaTls>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct FileTarget {
    #[schemars(length(min = 1))]
    pub path: String,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum SinkFormat {
    /// One JSON object per result; the Kafka key is the GROUP BY key, if
    /// any. A deleted group (an aggregate over a table) is a tombstone: its
    /// key and no value, as a compacted topic and upsert consumers expect.
    #[default]
    Json,
    /// Avro in the Confluent wire format: the writer schema (a record of
    /// the result columns, each nullable) is registered in
    /// `spec.schemaRegistry` under `<topic>-value` when the job starts; the
    /// key stays a JSON object of the key columns. Kafka sinks only.
    Avro,
    /// Protobuf in the Confluent wire format: the writer schema (a proto3
    /// message of the result columns, each `optional`, so that a NULL is
    /// an absent field and a 0 a present one; timestamps as
    /// `google.protobuf.Timestamp`) is registered in `spec.schemaRegistry`
    /// under `<topic>-value` when the job starts. Kafka sinks only.
    Protobuf,
    /// Debezium change events in JSON, for consumers that want a
    /// changelog: `{"before": …, "after": …, "op": …}`. A row of a query
    /// without a key is an insert (`c`, `after` the row); an update of a
    /// keyed result (a group, a window, a rank) is `u` with `after` the
    /// row and `before` null (the previous row is not kept, as Debezium
    /// writes Postgres updates without REPLICA IDENTITY FULL); a deleted
    /// group is `d` with `before` its key columns and `after` null.
    #[serde(rename = "debezium-json")]
    DebeziumJson,
}

impl SinkSpec {
    /// Why the query's results cannot be written as this sink encodes them:
    /// an output column (`outputs`), or a key column (`keys`) when keys are
    /// Avro or Protobuf, that the format cannot name. The message starts
    /// with the field that chose the format. Checked by `validate` and the
    /// operator before anything runs.
    pub fn results_problem<'a>(
        &self,
        outputs: impl IntoIterator<Item = &'a str>,
        keys: impl IntoIterator<Item = &'a str>,
    ) -> Option<String> {
        if let Some(problem) = self.format.outputs_problem(outputs) {
            return Some(format!("spec.sink.format {}: {problem}", self.format.name()));
        }
        let key_format = match self.key_format? {
            crate::KeyFormat::Json => return None,
            crate::KeyFormat::Avro => SinkFormat::Avro,
            crate::KeyFormat::Protobuf => SinkFormat::Protobuf,
        };
        let problem = key_format.outputs_problem(keys)?;
        Some(format!("spec.sink.keyFormat {}: key {problem}", key_format.name()))
    }
}

impl SinkFormat {
    /// Why a result column cannot be written under `name` in this format:
    /// an Avro or Protobuf field name is `[A-Za-z_][A-Za-z0-9_]*` (JSON
    /// takes any).
    fn column_name_problem(self, name: &str) -> Option<String> {
        let mut bytes = name.bytes();
        let identifier = bytes.next().is_some_and(|b| b.is_ascii_alphabetic() || b == b'_')
            && bytes.all(|b| b.is_ascii_alphanumeric() || b == b'_');
        let format = match self {
            Self::Avro => "an Avro",
            Self::Protobuf => "a Protobuf",
            Self::Json | Self::DebeziumJson => return None,
        };
        (!identifier).then(|| {
            format!(
                "output column `{name}` is not {format} field name (letters, digits and `_`, not starting with a \
                 digit): give it one with AS"
            )
        })
    }

    /// Why the result columns `names` cannot be written in this format: a
    /// name that is not a field
    /// name ([`SinkFormat::column_name_problem`]), or two that Protobuf's
    /// JSON mapping makes one (`a_b` and `aB`), which proto3 refuses.
    /// Checked by `validate`, the operator and the encoders.
    pub fn outputs_problem<'a>(self, names: impl IntoIterator<Item = &'a str>) -> Option<String> {
        let mut json_names: Vec<(String, &str)> = Vec::new();
        for name in names {
            if let Some(problem) = self.column_name_problem(name) {
                return Some(problem);
            }
            if self != Self::Protobuf {
                continue;
            }
            let json = camel_case(name);
            if let Some((_, other)) = json_names.iter().find(|(j, _)| *j == json) {
                return Some(format!(
                    "output columns `{other}` and `{name}` have one Protobuf JSON name \
                     (`{json}`), which proto3 refuses: rename one with AS"
                ));
            }
            json_names.push((json, name));
        }
        None
    }

    /// Whether the sink registers a writer schema (`avro`, `protobuf`).
    pub fn needs_registry(self) -> bool {
        matches!(self, Self::Avro | Self::Protobuf)
    }

    /// The format as a manifest names it.
    pub fn name(self) -> &'static str {
        match self {
            Self::Json => "json",
            Self::Avro => "avro",
            Self::Protobuf => "protobuf",
            Self::DebeziumJson => "debezium-json",
        }
    }
}

/// `s` with each `_` dropped and the letter after it upper-cased: protoc's
/// default JSON name of a field, and a field's name from an environment
/// variable's (`http_port` → `httpPort`).
pub fn camel_case(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut upper = false;
    for c in s.chars() {
        if c == '_' {
            upper = true;
        } else if upper {
            out.push(c.to_ascii_uppercase());
            upper = false;
        } else {
            out.push(c);
        }
    }
    out
}

impl KafkaTarget {
    pub fn connection(&self) -> KafkaConnection<'_> {
        KafkaConnection {
            bootstrap_servers: &self.bootstrap_servers,
            properties: &self.properties,
            secret_ref: self.secret_ref.as_ref(),
            authentication: self.authentication.as_ref(),
            tls: self.tls.as_ref(),
        }
    }

    /// The CEL rule above, for documents that never meet an API server.
    pub fn delivery_problem(&self) -> Option<String> {
        let weak_acks = self.properties.get("acks").is_some_and(|a| a != "all" && a != "-1");
        let weak_idempotence = self.properties.get("enable.idempotence").is_some_and(|v| v != "true");
        (weak_acks || weak_idempotence).then(|| {
            "properties may not weaken delivery: acks must be all (or -1) and enable.idempotence true".to_owned()
        })
    }
}
