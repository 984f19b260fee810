//! Where a job's records come from and what they look like.

use std::collections::BTreeMap;

use kube::KubeSchema;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::{ColumnType, KafkaAuthentication, KafkaConnection, KafkaTls, SecretRef};

/// One input of the job. `name` is the table name the SQL `FROM` clause uses.
/// Exactly one of `kafka`, `file` or `datagen` is set.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, KubeSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[x_kube(
    validation = Rule::new("[has(self.kafka), has(self.file), has(self.datagen)].filter(x, x).size() == 1").message("exactly one of kafka, file or datagen must be set"),
    validation = Rule::new("!has(self.partitionKey) || has(self.schema.registry) || self.partitionKey.all(k, self.schema.columns.exists(c, c.name == k))").message("every partitionKey column must be declared in schema.columns"),
    validation = Rule::new("!has(self.eventTime) || has(self.schema.registry) || self.schema.columns.exists(c, c.name == self.eventTime.column)").message("eventTime.column must be declared in schema.columns"),
    validation = Rule::new("!has(self.table) || has(self.schema.registry) || self.table.primaryKey.all(k, self.schema.columns.exists(c, c.name == k))").message("every table.primaryKey column must be declared in schema.columns"),
    validation = Rule::new("!has(self.keyFormat) || has(self.schema.registry) || has(self.table) || self.schema.columns.exists(c, has(c.metadata) && c.metadata == 'key')").message("keyFormat is set but no column reads the key: declare the key's fields as columns with metadata: key")
)]
pub struct SourceSpec {
    /// Table name used in the SQL FROM clause.
    #[schemars(length(min = 1, max = 63), regex(pattern = r"^[A-Za-z_][A-Za-z0-9_]*$"))]
    pub name: String,
    /// Read from a Kafka topic (the production source).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kafka: Option<KafkaSource>,
    /// Read JSON lines from a local file (`sluice-worker run` only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub file: Option<FileSource>,
    /// Generate the records of a built-in scenario (no broker needed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub datagen: Option<DatagenSource>,
    /// Encoding of each record's value.
    #[serde(default)]
    pub format: SourceFormat,
    /// Encoding of each record's key, which the `metadata: key` columns
    /// read. Unset, a key column reads the key's bytes as text (a `string`
    /// column) or as a JSON scalar (any other). Set, the key is decoded in
    /// that format — Avro and Protobuf in the Confluent wire format, their
    /// schemas fetched from `spec.schemaRegistry` by id — and each key
    /// column reads the key's field of its own name; a key that is not a
    /// record (an Avro `string` or `long`, a JSON scalar) is read whole by
    /// the one key column there is. As Flink's `key.format`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key_format: Option<KeyFormat>,
    /// With a `keyFormat`: a key column named `<prefix><field>` reads the
    /// key's field `<field>`, so that key fields may share names with the
    /// value's (`key_id` reads the key's `id` under `key_`), as Flink's
    /// `key.fields-prefix`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 32))]
    pub key_fields_prefix: Option<String>,
    /// Columns and their types. Fields not declared here are ignored.
    pub schema: SchemaSpec,
    /// Event-time column and watermark. Time windows need it; queries that use
    /// a time window on a source without one are rejected at validation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub event_time: Option<EventTimeSpec>,
    /// Columns the topic is keyed (partitioned) by. Stateful queries run one
    /// engine per partition, so their GROUP BY / PARTITION BY columns must
    /// include these columns for results to be complete.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 16), inner(length(max = 63)))]
    pub partition_key: Vec<String>,
    /// Read the source as a table, not a stream: each record is the latest
    /// version of the row with its primary key (an upsert), and a deletion
    /// removes it — as a ksqlDB TABLE or a Flink upsert-kafka source over a
    /// compacted topic. A table can only be the right side of a join
    /// (`FROM stream JOIN table ON …`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub table: Option<TableSpec>,
}

/// How a source's records make a table.
///
/// A deletion is a Kafka tombstone (a record with a key and no value: the
/// key is a JSON object of the primary-key columns, or, for a one-column
/// key, the bare value; its event time is the record's timestamp), or a
/// record whose `__deleted` field is `true` — which is how a file source
/// deletes.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct TableSpec {
    /// The columns that identify a row: the topic's record key. A join with
    /// the table must equate each of them with a column of the stream.
    #[schemars(length(min = 1, max = 16), inner(length(min = 1, max = 63)))]
    pub primary_key: Vec<String>,
}

/// A Kafka topic to consume.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, KubeSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[x_kube(
    // The pattern admits only well-formed times; CEL's own parser then
    // refuses a date that does not exist (2026-02-30), which the operator's
    // typed watch could not read: one such object would stall every job.
    validation = Rule::new("self.startFrom in ['Earliest', 'Latest'] || timestamp(self.startFrom) >= timestamp('1970-01-01T00:00:00Z')").message("startFrom is Earliest, Latest or an RFC 3339 time from 1970 on, such as 2026-11-28T09:00:00Z")
)]
pub struct KafkaSource {
    /// Comma-separated `host:port` list.
    #[schemars(length(min = 1))]
    pub bootstrap_servers: String,
    #[schemars(length(min = 1, max = 249))]
    pub topic: String,
    /// Where to start when the job's consumer group has no committed
    /// offset: Earliest, Latest, or an RFC 3339 time with its offset
    /// (`2026-11-28T09:00:00Z`), read from each partition's first record
    /// whose timestamp is at or after it.
    #[serde(default)]
    pub start_from: StartFrom,
    /// Extra librdkafka client properties (never credentials: use `secretRef`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub properties: BTreeMap<String, String>,
    /// A Secret whose keys are librdkafka properties (e.g. `sasl.username`,
    /// `sasl.password`); mounted into the workers, never copied into config.
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

impl KafkaSource {
    pub fn connection(&self) -> KafkaConnection<'_> {
        KafkaConnection {
            bootstrap_servers: &self.bootstrap_servers,
            properties: &self.properties,
            secret_ref: self.secret_ref.as_ref(),
            authentication: self.authentication.as_ref(),
            tls: self.tls.as_ref(),
        }
    }
}

/// Where a job that has never committed on a topic starts reading it:
/// `Earliest`, `Latest`, or an RFC 3339 time (`2026-11-28T09:00:00Z`,
/// `2026-11-28T10:00:00+01:00`) — the first record whose Kafka timestamp is
/// at or after it, found with Kafka's offsets-for-times (Flink's
/// `scan.startup.mode: timestamp`). One string, not an object, so the
/// field stays what it was for `Earliest` and `Latest`: a Kubernetes
/// structural schema cannot take a string or an object in one field.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum StartFrom {
    #[default]
    Earliest,
    Latest,
    /// Epoch milliseconds.
    Timestamp(i64),
}

/// The pattern `startFrom` must match (the CRD's schema checks it at the
/// API server; [`StartFrom`]'s parser then checks the date exists).
pub const START_FROM_PATTERN: &str = r"^(Earliest|Latest|[0-9]{4}-(0[1-9]|1[0-2])-(0[1-9]|[12][0-9]|3[01])[Tt]([01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](\.[0-9]{1,9})?([Zz]|[+-]([01][0-9]|2[0-3]):[0-5][0-9]))$";

impl std::str::FromStr for StartFrom {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "Earliest" => Ok(Self::Earliest),
            "Latest" => Ok(Self::Latest),
            time => time.parse::<jiff::Timestamp>().map(|t| Self::Timestamp(t.as_millisecond())).map_err(|e| {
                format!(
                    "startFrom {time:?} is not Earliest, Latest or an RFC 3339 time with its offset such as \
                         2026-11-28T09:00:00Z ({e})"
                )
            }),
        }
    }
}

impl std::fmt::Display for StartFrom {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Earliest => f.write_str("Earliest"),
            Self::Latest => f.write_str("Latest"),
            Self::Timestamp(ms) => match jiff::Timestamp::from_millisecond(*ms) {
                Ok(t) => write!(f, "{t}"),
                Err(_) => write!(f, "{ms} ms"),
            },
        }
    }
}

impl Serialize for StartFrom {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for StartFrom {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

impl JsonSchema for StartFrom {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "StartFrom".into()
    }

    fn inline_schema() -> bool {
        true
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({
            "type": "string",
            "pattern": START_FROM_PATTERN,
            "maxLength": 40,
            "description": "Earliest, Latest, or an RFC 3339 time with its offset (2026-11-28T09:00:00Z): the first record at or after it."
        })
    }
}

/// A local JSON-lines file, one record per line.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct FileSource {
    #[schemars(length(min = 1))]
    pub path: String,
}

/// Records of one of the seed benchmark scenarios, generated in process.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct DatagenSource {
    pub scenario: DatagenScenario,
    /// Total records to generate; 0 means unbounded.
    #[serde(default)]
    #[schemars(range(min = 0))]
    pub records: i64,
    /// Generation rate across all partitions; 0 means as fast as possible.
    #[serde(default)]
    #[schemars(range(min = 0))]
    pub rate_per_second: i64,
    /// Simulated partitions; records are spread by the source's partitionKey
    /// (round-robin when it has none, or names a column unique to each
    /// record, such as a Nexmark person's id).
    #[serde(default = "default_datagen_partitions")]
    #[schemars(range(min = 1, max = 1024))]
    pub partitions: i32,
}

fn default_datagen_partitions() -> i32 {
    4
}

/// The record shapes of the seed scenarios and of Nexmark's three event
/// kinds (one source each; together they are the reference's interleaved
/// stream).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum DatagenScenario {
    /// `order_id`, `customer_id`, `order_date`, `total_amount` (scenario 0).
    Orders,
    /// `symbol`, `price`, `timestamp` (scenario 1).
    MarketData,
    /// `trader_id`, `symbol`, `price`, `quantity`, `trade_time` (scenarios 2, 3a, 3b).
    Trades,
    /// Nexmark people: `id`, `name`, `emailAddress`, `creditCard`, `city`,
    /// `state`, `dateTime`, `extra` (docs/benchmarks.md, Nexmark).
    NexmarkPerson,
    /// Nexmark auctions: `id`, `itemName`, `description`, `initialBid`,
    /// `reserve`, `dateTime`, `expires`, `seller`, `category`, `extra`.
    NexmarkAuction,
    /// Nexmark bids: `auction`, `bidder`, `price`, `channel`, `url`,
    /// `dateTime`, `extra`.
    NexmarkBid,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum SourceFormat {
    /// One JSON object per record.
    #[default]
    Json,
    /// Avro in the Confluent wire format (a zero byte, the writer schema's
    /// registry id, the datum), as Confluent's and Apicurio's serializers
    /// write it: each writer schema is fetched from `spec.schemaRegistry`
    /// by id and its fields matched to the columns by name (docs/formats.md,
    /// "Avro sources"). Kafka sources only.
    Avro,
    /// Protobuf in the Confluent wire format (a zero byte, the schema's
    /// registry id, the message indexes, the message), as Confluent's and
    /// Apicurio's serializers write it: each schema (`.proto` text, or a
    /// serialized `FileDescriptorProto` in base64) is fetched from
    /// `spec.schemaRegistry` by id, and the message's fields matched to
    /// the columns by name (docs/formats.md, "Protobuf sources"). Kafka
    /// sources only.
    Protobuf,
    /// Debezium change events in JSON (with the JSON converter's schemas
    /// on or off): the source is a table (declare `table.primaryKey`),
    /// whose rows an insert, snapshot read or update replaces and a delete
    /// removes; Debezium's tombstone after a delete is skipped. The
    /// envelope's `op`, `ts_ms` and `source.*` (`source.db`,
    /// `source.table`, `source.ts_ms`, …) are readable as columns.
    #[serde(rename = "debezium-json")]
    DebeziumJson,
    /// Debezium change events in Avro (Debezium with Confluent's
    /// `AvroConverter`): Debezium's `Envelope` record in the Confluent wire
    /// format, its writer schema fetched from `spec.schemaRegistry` by id.
    /// Read as `debezium-json` is: the row's columns from `after` (`before`
    /// for a delete), `op`, `ts_ms` and `source.*` readable as columns,
    /// the tombstone after a delete skipped.
    #[serde(rename = "debezium-avro")]
    DebeziumAvro,
    /// The whole value as text, in the source's one field column (of type
    /// `string`): log lines, CSV rows, plain ids. Metadata columns read the
    /// key, headers, timestamp and offset as for JSON. A value that is not
    /// UTF-8 is a dead letter.
    Raw,
    /// CSV (RFC 4180), one record per value: the field columns are its
    /// fields in the order they are declared (ksqlDB's `DELIMITED`),
    /// comma-separated, a quoted field holding commas, line breaks and
    /// `""`; an empty field is NULL. Another number of fields, or a field
    /// not of its column's type, makes the record a dead letter.
    Csv,
}

impl SourceFormat {
    /// Whether records carry a schema id to look up in the registry.
    pub fn needs_registry(self) -> bool {
        matches!(self, Self::Avro | Self::Protobuf | Self::DebeziumAvro)
    }

    /// Whether records are Debezium change events (the source is a table).
    pub fn is_debezium(self) -> bool {
        matches!(self, Self::DebeziumJson | Self::DebeziumAvro)
    }

    /// The format as a manifest names it.
    pub fn name(self) -> &'static str {
        match self {
            Self::Json => "json",
            Self::Avro => "avro",
            Self::Protobuf => "protobuf",
            Self::DebeziumJson => "debezium-json",
            Self::DebeziumAvro => "debezium-avro",
            Self::Raw => "raw",
            Self::Csv => "csv",
        }
    }
}

/// How a source's record keys are encoded (`keyFormat`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum KeyFormat {
    /// A JSON object (its fields by name), or a JSON scalar.
    Json,
    /// Avro in the Confluent wire format (Confluent's `KafkaAvroSerializer`
    /// as key serializer, Debezium's `AvroConverter` as key converter).
    Avro,
    /// Protobuf in the Confluent wire format.
    Protobuf,
}

impl KeyFormat {
    /// The format as a manifest names it.
    pub fn name(self) -> &'static str {
        match self {
            Self::Json => "json",
            Self::Avro => "avro",
            Self::Protobuf => "protobuf",
        }
    }

    /// Whether keys carry a schema id to look up in the registry.
    pub fn needs_registry(self) -> bool {
        matches!(self, Self::Avro | Self::Protobuf)
    }
}

/// The columns of a source: declared, or derived from a subject of the
/// Schema Registry (`registry`), beside which only metadata columns are
/// declared.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, KubeSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[x_kube(validation = Rule::new("size(self.columns) > 0 || has(self.registry)").message("declare schema.columns, or name a schema.registry subject to derive them from"))]
#[x_kube(validation = Rule::new("!has(self.registry) || self.columns.all(c, has(c.metadata))").message("with schema.registry the value's columns come from the subject's schema: declare only metadata columns beside it"))]
pub struct SchemaSpec {
    #[serde(default)]
    #[schemars(length(max = 100))]
    #[x_kube(validation = Rule::new("self.all(c, self.exists_one(d, d.name == c.name))").message("column names must be unique"))]
    pub columns: Vec<ColumnSpec>,
    /// Derive the value's columns from this subject's Avro or Protobuf
    /// schema (docs/formats.md, "Columns from the registry").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub registry: Option<RegistrySubject>,
}

/// A subject of the job's Schema Registry, at a version.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, KubeSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RegistrySubject {
    /// `<topic>-value` under Confluent's default TopicNameStrategy.
    #[schemars(length(min = 1, max = 255))]
    pub subject: String,
    /// A version number, or `latest` (the default): resolved by the
    /// operator when it reconciles the job (docs/formats.md).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = Rule::new("type(self) == int ? self > 0 : self == 'latest'").message("a positive version number, or latest"))]
    pub version: Option<k8s_openapi::apimachinery::pkg::util::intstr::IntOrString>,
    /// For a Protobuf subject: the full name of the message the records
    /// hold (`shop.Order`); the file's first message by default, the one
    /// Confluent's message index `[0]` names.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 255))]
    pub message: Option<String>,
}

/// One column: a field of the record's JSON value (`bid.price` names the
/// field `price` of the object in field `bid`, as Flink's `ROW` columns are
/// addressed), or, with `metadata`, something Kafka records about the record.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, KubeSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[x_kube(
    validation = Rule::new("has(self.header) == (has(self.metadata) && self.metadata == 'header')").message("header names the header a `metadata: header` column reads, and only such a column"),
    validation = Rule::new("!has(self.metadata) || !self.name.contains('.')").message("a metadata column's name cannot hold a dot (a dot addresses a nested field of the value)")
)]
pub struct ColumnSpec {
    /// Field name in the JSON object and column name in SQL. Dots address
    /// nested objects: `bid.price` is `{"bid": {"price": …}}`, and SQL reads
    /// it as `bid.price`.
    #[schemars(length(min = 1, max = 63), regex(pattern = r"^[^.]+(\.[^.]+)*$"))]
    pub name: String,
    #[serde(rename = "type")]
    pub type_: ColumnType,
    /// A record missing this field (or holding null) goes to the dead-letter
    /// output instead of being processed with a NULL.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub required: bool,
    /// Read the column from the Kafka record rather than its value, as
    /// Flink's `METADATA FROM` and ksqlDB's `ROWTIME`/`ROWPARTITION`/
    /// `ROWOFFSET` do.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<RecordMetadata>,
    /// The header a `metadata: header` column reads (its last value, when
    /// the record repeats it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 249))]
    pub header: Option<String>,
    /// Avro sources: the names (paths, as `name`) this field had in
    /// earlier versions of the writer's schema — Avro's field aliases. A
    /// record written without a field of the column's name fills it from
    /// the first alias its schema has, as Avro's schema resolution does.
    /// Columns derived from a registry subject carry the schema's own.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 64))]
    pub aliases: Vec<String>,
    /// Avro sources: the value a record written without this field (nor
    /// any alias of it) reads, as text of the column's type (`0`, `XNAS`,
    /// `true`, `2024-01-01T00:00:00Z`) — Avro's field default, so a field
    /// added with a default reads that default, not NULL, from records
    /// written before it. Columns derived from a registry subject carry
    /// the schema's own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 4096))]
    pub default: Option<String>,
}

impl ColumnSpec {
    /// A column read from the record's value.
    pub fn field(name: impl Into<String>, type_: ColumnType, required: bool) -> Self {
        Self { name: name.into(), type_, required, metadata: None, header: None, aliases: Vec::new(), default: None }
    }
}

/// What a metadata column reads from the Kafka record.
///
/// `key` and `header` are the raw bytes as UTF-8 for a `string` column, and
/// a JSON scalar of the column's type otherwise; `timestamp` is the
/// record's CreateTime or LogAppendTime (`timestamp` or `bigint` column);
/// `partition` and `offset` are `bigint`; `headers` is every header as a
/// JSON object of strings (`string` column); `processingTime` is when the
/// worker read the record. A file source has offsets
/// (line numbers) and partition 0, a datagen source its simulated
/// partition and sequence; neither has keys or headers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum RecordMetadata {
    Key,
    Timestamp,
    Partition,
    Offset,
    Headers,
    Header,
    /// When the worker read the record (Flink's `PROCTIME()`): a
    /// `timestamp` or `bigint` column. As the event-time column it makes
    /// windows processing-time windows.
    #[serde(rename = "processingTime")]
    ProcessingTime,
}

impl RecordMetadata {
    /// The name a manifest gives it.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Key => "key",
            Self::Timestamp => "timestamp",
            Self::Partition => "partition",
            Self::Offset => "offset",
            Self::Headers => "headers",
            Self::Header => "header",
            Self::ProcessingTime => "processingTime",
        }
    }
}

/// Event time and how far behind the newest event the watermark trails.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct EventTimeSpec {
    /// A `timestamp` or `bigint` (epoch milliseconds) column.
    #[schemars(length(min = 1, max = 63))]
    pub column: String,
    /// Records up to this much older than the newest seen are still on time.
    #[serde(default)]
    #[schemars(range(min = 0, max = 604_800_000))]
    pub watermark_delay_millis: i64,
}

impl SourceSpec {
    /// A source that is only a table: a name and `(name, type, required)`
    /// columns, without a connector, event time or key — what planning a
    /// query needs. Tests and benchmarks build their sources with it (adding
    /// `event_time` or `partition_key` by struct update); on its own it is
    /// not a valid StreamJob source, which needs exactly one connector.
    pub fn table(name: &str, columns: &[(&str, ColumnType, bool)]) -> Self {
        Self {
            name: name.to_owned(),
            kafka: None,
            file: None,
            datagen: None,
            format: SourceFormat::default(),
            key_format: None,
            key_fields_prefix: None,
            schema: SchemaSpec {
                columns: columns
                    .iter()
                    .map(|(name, type_, required)| ColumnSpec::field(*name, type_.clone(), *required))
                    .collect(),
                registry: None,
            },
            event_time: None,
            partition_key: Vec::new(),
            table: None,
        }
    }

    /// The Kafka topic, or a stable pseudo-topic name for local sources.
    pub fn topic(&self) -> &str {
        match (&self.kafka, &self.file) {
            (Some(k), _) => &k.topic,
            (None, Some(f)) => &f.path,
            (None, None) => &self.name,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn start_from_reads_earliest_latest_or_a_time_and_writes_them_back() {
        assert_eq!("Earliest".parse::<StartFrom>(), Ok(StartFrom::Earliest));
        assert_eq!("Latest".parse::<StartFrom>(), Ok(StartFrom::Latest));
        let at: StartFrom = "2026-11-28T10:00:00+01:00".parse().unwrap();
        assert_eq!(at, StartFrom::Timestamp(1_795_856_400_000));
        assert_eq!(at.to_string(), "2026-11-28T09:00:00Z");
        assert_eq!(serde_json::to_value(at).unwrap(), serde_json::json!("2026-11-28T09:00:00Z"));
        let back: StartFrom = serde_json::from_value(serde_json::json!("2026-11-28T09:00:00.250Z")).unwrap();
        assert_eq!(back, StartFrom::Timestamp(1_795_856_400_250));
        for bad in ["yesterday", "2026-11-28", "2026-11-28T09:00:00", "2026-02-30T00:00:00Z", "earliest"] {
            let e = bad.parse::<StartFrom>().unwrap_err();
            assert!(e.contains(bad) && e.contains("RFC 3339"), "{bad}: {e}");
        }
        // The schema's pattern (checked by the API server) lets through
        // what the parser reads, and stops the shapes it refuses.
        let pattern = regex::Regex::new(START_FROM_PATTERN).unwrap();
        for good in
            ["Earliest", "Latest", "2026-11-28T09:00:00Z", "2026-11-28T10:00:00+01:00", "2026-11-28T09:00:00.5Z"]
        {
            assert!(pattern.is_match(good), "{good}");
            assert!(good.parse::<StartFrom>().is_ok(), "{good}");
        }
        for bad in [
            "yesterday",
            "2026-11-28",
            "2026-11-28T09:00:00",
            "2026-11-28T09:00Z",
            "earliest",
            "2026-11-28T09:00:00Z ",
            "2026-11-28T24:00:00Z",
            "2026-11-28T09:00:60Z",
            "2026-11-28T09:00:00+01:60",
            "2026-13-01T00:00:00Z",
        ] {
            assert!(!pattern.is_match(bad), "{bad}");
        }
    }
}
