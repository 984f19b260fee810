//! The CRD's validation rules, for documents that never pass through an API
//! server (`sluice-worker run -f job.yaml`). The API server enforces the same
//! rules from the generated schema; a test runs the repository's invalid
//! fixtures through both.

use std::collections::HashSet;

use crate::{CrdsError, StreamJobSpec};

impl StreamJobSpec {
    /// Checks what the CRD's schema and CEL rules check, naming the field.
    pub fn validate(&self) -> Result<(), CrdsError> {
        let mut problems = Vec::new();
        if self.sql.trim().is_empty() {
            problems.push("spec.sql: must not be empty".to_owned());
        }
        if self.workers < 1 {
            problems.push(format!("spec.workers: must be at least 1, got {}", self.workers));
        }
        if self.cores_per_worker < 1 {
            problems.push(format!("spec.coresPerWorker: must be at least 1, got {}", self.cores_per_worker));
        }
        if self.sources.is_empty() {
            problems.push("spec.sources: at least one source is required".to_owned());
        }
        let registered = self.sink.kafka.is_some() && self.schema_registry.is_some();
        if self.sink.format.needs_registry() && !registered {
            problems.push(
                "spec.sink.format: a sink with format avro or protobuf writes a Kafka topic and needs \
                 spec.schemaRegistry (its writer schema is registered there)"
                    .to_owned(),
            );
        }
        if self.sink.key_format.is_some_and(crate::KeyFormat::needs_registry) && !registered {
            problems.push(
                "spec.sink.keyFormat: sink.keyFormat avro or protobuf writes a Kafka topic and needs \
                 spec.schemaRegistry (the key schema is registered there)"
                    .to_owned(),
            );
        }
        if let Some(problem) = self.schema_registry.as_ref().and_then(crate::SchemaRegistrySpec::access_problem) {
            problems.push(problem);
        }
        let mut names = HashSet::new();
        for (i, s) in self.sources.iter().enumerate() {
            let at = format!("spec.sources[{i}]");
            if !names.insert(s.name.to_ascii_lowercase()) {
                problems
                    .push(format!("spec.sources: source names must be unique, ignoring case (`{}` repeats)", s.name));
            }
            let kinds = [s.kafka.is_some(), s.file.is_some(), s.datagen.is_some()].iter().filter(|x| **x).count();
            if kinds != 1 {
                problems.push(format!("{at}: exactly one of kafka, file or datagen must be set"));
            }
            if s.format.needs_registry() && (s.kafka.is_none() || self.schema_registry.is_none()) {
                problems.push(format!(
                    "{at}.format: a source with format {} reads a Kafka topic and needs spec.schemaRegistry (its \
                     records name their writer schema by registry id)",
                    s.format.name()
                ));
            }
            // A registry subject's columns are derived before the spec is
            // planned (`StreamJobSpec::with_registry_columns`), which
            // clears `registry`; here it is still the user's.
            match &s.schema.registry {
                Some(_)
                    if !matches!(s.format, crate::SourceFormat::Avro | crate::SourceFormat::Protobuf)
                        || self.schema_registry.is_none() =>
                {
                    problems.push(format!(
                        "{at}.schema.registry: columns are derived from a subject's Avro or Protobuf schema: the \
                         source needs format avro or protobuf and the job spec.schemaRegistry"
                    ));
                }
                Some(r) => {
                    if let Err(e) = crate::requested_version(r.version.as_ref()) {
                        problems.push(format!("{at}.schema.registry.{e}"));
                    }
                }
                None => {}
            }
            if s.key_fields_prefix.is_some() && s.key_format.is_none() {
                problems.push(format!(
                    "{at}.keyFieldsPrefix: names key fields within a keyFormat: declare keyFormat (json, avro or \
                     protobuf) too"
                ));
            }
            if let Some(key) = s.key_format {
                if key.needs_registry() && (s.kafka.is_none() || self.schema_registry.is_none()) {
                    problems.push(format!(
                        "{at}.keyFormat: keys in {} name their schema by registry id: the source reads a Kafka \
                         topic and the job needs spec.schemaRegistry",
                        key.name()
                    ));
                }
                // A table's tombstones read its primary key from the key.
                if !s.schema.columns.iter().any(|c| c.metadata == Some(crate::RecordMetadata::Key))
                    && s.schema.registry.is_none()
                    && s.table.is_none()
                {
                    problems.push(format!(
                        "{at}.keyFormat: no column reads the key (declare the key's fields as columns with \
                         `metadata: key`)"
                    ));
                }
            }
            if s.format.is_debezium() && s.table.is_none() {
                problems.push(format!(
                    "{at}.format: a source with format {} is a table of the database's rows: declare \
                     table.primaryKey",
                    s.format.name()
                ));
            }
            if s.format == crate::SourceFormat::Raw {
                let values: Vec<&crate::ColumnSpec> =
                    s.schema.columns.iter().filter(|c| c.metadata.is_none()).collect();
                if values.len() != 1 || values[0].type_ != crate::ColumnType::String || values[0].name.contains('.') {
                    problems.push(format!(
                        "{at}.format: a source with format raw has one column of type string that holds the whole \
                         value (metadata columns besides)"
                    ));
                }
            }
            if s.schema.columns.is_empty() && s.schema.registry.is_none() {
                problems.push(format!(
                    "{at}.schema.columns: at least one column is required (or name a schema.registry subject to \
                     derive them from)"
                ));
            }
            let columns: HashSet<&str> = s.schema.columns.iter().map(|c| c.name.as_str()).collect();
            // Columns still to come from a registry subject: what names
            // them is checked once they are derived.
            let declared = |name: &str| s.schema.registry.is_some() || columns.contains(name);
            if columns.len() != s.schema.columns.len() {
                problems.push(format!("{at}.schema.columns: column names must be unique"));
            }
            for (c, column) in s.schema.columns.iter().enumerate() {
                let at = format!("{at}.schema.columns[{c}]");
                if column.name.split('.').any(str::is_empty) {
                    problems.push(format!(
                        "{at}.name: `{}` has an empty part between dots (a dot addresses a nested field)",
                        column.name
                    ));
                }
                let header_column = column.metadata == Some(crate::RecordMetadata::Header);
                if column.header.is_some() != header_column {
                    problems.push(format!(
                        "{at}: header names the header a `metadata: header` column reads, and only such a column"
                    ));
                }
                if column.metadata.is_some() && column.name.contains('.') {
                    problems.push(format!(
                        "{at}: a metadata column's name cannot hold a dot (a dot addresses a nested field of the value)"
                    ));
                }
            }
            for k in &s.partition_key {
                if !declared(k) {
                    problems.push(format!(
                        "{at}.partitionKey: every partitionKey column must be declared in schema.columns (`{k}` is not)"
                    ));
                }
            }
            if let Some(et) = &s.event_time
                && !declared(&et.column)
            {
                problems.push(format!(
                    "{at}.eventTime.column: eventTime.column must be declared in schema.columns (`{}` is not)",
                    et.column
                ));
            }
            if let Some(t) = &s.table {
                if t.primary_key.is_empty() {
                    problems.push(format!("{at}.table.primaryKey: at least one column is required"));
                }
                for k in &t.primary_key {
                    if !declared(k) {
                        problems.push(format!(
                            "{at}.table.primaryKey: every table.primaryKey column must be declared in \
                             schema.columns (`{k}` is not)"
                        ));
                    }
                }
            }
            if let Some(problem) = s.kafka.as_ref().and_then(|k| k.connection().security_problem()) {
                problems.push(format!("{at}.kafka: {problem}"));
            }
            if let Some(d) = &s.datagen
                && d.partitions < 1
            {
                problems.push(format!("{at}.datagen.partitions: must be at least 1"));
            }
        }
        let sinks = [self.sink.kafka.is_some(), self.sink.file.is_some(), self.sink.stdout == Some(true)]
            .iter()
            .filter(|x| **x)
            .count();
        if sinks != 1 {
            problems.push("spec.sink: exactly one of kafka, file or stdout: true must be set".to_owned());
        }
        if let Some(d) = &self.dead_letter
            && [d.kafka.is_some(), d.file.is_some()].iter().filter(|x| **x).count() != 1
        {
            problems.push("spec.deadLetter: exactly one of kafka or file must be set".to_owned());
        }
        let targets = [
            ("spec.sink.kafka", self.sink.kafka.as_ref()),
            ("spec.deadLetter.kafka", self.dead_letter.as_ref().and_then(|d| d.kafka.as_ref())),
        ];
        for (at, target) in targets {
            if let Some(problem) = target.and_then(crate::KafkaTarget::delivery_problem) {
                problems.push(format!("{at}: {problem}"));
            }
            if let Some(problem) = target.and_then(|t| t.connection().security_problem()) {
                problems.push(format!("{at}: {problem}"));
            }
        }
        if let Err(e) = self.engine.state_memory_limit_bytes() {
            problems.push(e.to_string());
        } else if let Some(problem) = self.memory_problem() {
            problems.push(problem);
        }
        problems.extend(self.engine.local_state_problems());
        if let Some(t) = &self.pod_template {
            problems.extend(t.problems());
        }
        if let Some(a) = &self.autoscaling
            && a.min_workers > a.max_workers
        {
            problems.push(format!(
                "spec.autoscaling: autoscaling.minWorkers must not exceed autoscaling.maxWorkers ({} > {})",
                a.min_workers, a.max_workers
            ));
        }
        if self.delivery == crate::Delivery::ExactlyOnce {
            problems.extend(self.exactly_once_problems());
        }
        if problems.is_empty() { Ok(()) } else { Err(CrdsError::invalid("StreamJob", problems.join("; "))) }
    }
}

impl StreamJobSpec {
    /// A memory limit of the worker pods that cannot hold what
    /// `stateMemoryLimit` lets each core keep: the kernel would kill the
    /// pod before the state limit could stop the job with a reason.
    fn memory_problem(&self) -> Option<String> {
        let limit = self.resources.as_ref()?.limits.as_ref()?.get("memory")?;
        let bytes = match crate::parse_quantity_bytes("spec.resources.limits.memory", &limit.0) {
            Ok(bytes) => bytes,
            Err(e) => return Some(e.to_string()),
        };
        let needed = self.engine.worker_memory_bytes(self.cores_per_worker).ok()?;
        (bytes < needed).then(|| {
            format!(
                "spec.resources.limits.memory: {} cannot hold what spec.engine.stateMemoryLimit ({}) lets each of \
                 the {} core(s) keep: a worker needs {}Mi (512Mi, and twice the limit per core); raise the \
                 memory limit or lower stateMemoryLimit",
                limit.0,
                self.engine.state_memory_limit,
                self.cores_per_worker.max(1),
                needed.div_ceil(1 << 20)
            )
        })
    }

    /// What a job on the cluster may not use: sources and outputs that
    /// read or write the worker pod's own files. A file source's lines that
    /// are not JSON go verbatim to the dead-letter output, which may be a
    /// topic the job's author reads: a StreamJob could read any file of its
    /// pod, mounted Secrets included. `sluice-worker run` (one machine, the
    /// user's own files) allows them; the operator and the CRD's rule do
    /// not. Generated input and a stdout sink touch no file: the quickstart
    /// runs on a cluster as it is.
    pub fn local_only_problems(&self) -> Vec<String> {
        let mut problems = Vec::new();
        for (i, s) in self.sources.iter().enumerate() {
            if s.file.is_some() {
                problems.push(format!("spec.sources[{i}].file: {}", crate::stream_job::LOCAL_ONLY));
            }
        }
        if self.sink.file.is_some() {
            problems.push(format!("spec.sink.file: {}", crate::stream_job::LOCAL_ONLY));
        }
        if self.dead_letter.as_ref().is_some_and(|d| d.file.is_some()) {
            problems.push(format!("spec.deadLetter.file: {}", crate::stream_job::LOCAL_ONLY));
        }
        problems
    }

    /// Why a job whose plan has a stage that keeps state and writes a
    /// repartition topic cannot run at least once with this spec: such a
    /// stage's output is written in one transaction per checkpoint (see
    /// docs/operations.md), and a transaction must commit within the
    /// broker's `transaction.max.timeout.ms` (15 minutes by default). The
    /// CRD cannot tell (it needs the plan): the operator and the worker
    /// ask.
    pub fn internal_transaction_problem(&self) -> Option<String> {
        let interval = self.engine.checkpoint_interval_millis;
        (i64::from(interval) >= 900_000).then(|| {
            format!(
                "spec.engine.checkpointIntervalMillis ({interval}) must be below 900000 for this query: a stage of \
                 it keeps state and writes a repartition topic, which is written in one transaction per \
                 checkpoint, and a transaction must commit within the broker's transaction.max.timeout.ms (15 \
                 minutes by default)"
            )
        })
    }

    /// What keeps `delivery: ExactlyOnce` from working: one transaction per
    /// core must hold the results, the dead letters, the internal topics'
    /// records and the input offsets, so all live on one cluster; and a
    /// transaction lasts a checkpoint interval.
    fn exactly_once_problems(&self) -> Vec<String> {
        let mut problems = Vec::new();
        let same_cluster = self.sink.kafka.as_ref().is_some_and(|sink| {
            self.sources.iter().all(|s| s.kafka.as_ref().is_some_and(|k| k.bootstrap_servers == sink.bootstrap_servers))
                && self
                    .dead_letter
                    .as_ref()
                    .is_none_or(|d| d.kafka.as_ref().is_some_and(|k| k.bootstrap_servers == sink.bootstrap_servers))
        });
        if !same_cluster {
            problems.push(
                "spec.delivery: delivery ExactlyOnce needs Kafka sources, a Kafka sink and a Kafka dead-letter topic \
                 (if any) with the same bootstrapServers: one transaction per core holds the results, the dead \
                 letters and the input offsets"
                    .to_owned(),
            );
        }
        let interval = i64::from(self.engine.checkpoint_interval_millis);
        if interval >= 900_000 {
            problems.push(
                "spec.delivery: delivery ExactlyOnce needs engine.checkpointIntervalMillis below 900000: a \
                 checkpoint's transaction must commit within the broker's transaction.max.timeout.ms (15 minutes \
                 by default)"
                    .to_owned(),
            );
        }
        let timeout = self.sink.kafka.as_ref().and_then(|k| k.properties.get("transaction.timeout.ms"));
        if let Some(t) = timeout
            && t.parse::<i64>().map_or(true, |t| t <= interval)
        {
            problems.push(format!(
                "spec.sink.kafka.properties: transaction.timeout.ms ({t}) must be longer than \
                 engine.checkpointIntervalMillis ({interval}): a transaction lasts a checkpoint interval"
            ));
        }
        problems
    }
}

#[cfg(test)]
mod tests {
    use crate::StreamJob;

    /// The fixtures the API server rejects (tests/fixtures/invalid) are
    /// rejected here too, naming the same fields.
    #[test]
    fn invalid_fixtures_are_rejected_naming_the_fields() {
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../tests/fixtures/invalid");
        let mut checked = 0;
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            let text = std::fs::read_to_string(&path).unwrap();
            // What a job on the cluster is refused for: a value its type
            // cannot hold (the schema's pattern at the API server), the
            // spec's rules, and what runs only on one machine.
            let problems: Vec<String> = match serde_saphyr::from_str::<StreamJob>(&text) {
                Err(e) => vec![e.to_string()],
                Ok(job) => {
                    let mut problems: Vec<String> =
                        job.spec.validate().err().map(|e| e.to_string()).into_iter().collect();
                    problems.extend(job.spec.local_only_problems());
                    problems
                }
            };
            assert!(!problems.is_empty(), "{} is accepted", path.display());
            let err = problems.join("; ");
            for expected in text.lines().filter_map(|l| l.strip_prefix("# expect:")) {
                assert!(err.contains(expected.trim()), "{}: {err} lacks {expected}", path.display());
            }
            checked += 1;
        }
        assert!(checked >= 2);
    }

    /// A pod memory limit that cannot hold what the state bound lets each
    /// core keep is refused, saying what would: the kernel would kill the
    /// pod before the state limit could stop the job with a reason.
    #[test]
    fn a_memory_limit_too_small_for_the_state_bound_is_refused() {
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../manifests/examples/s2-group-by.yaml");
        let mut job: StreamJob = serde_saphyr::from_str(&std::fs::read_to_string(dir).unwrap()).unwrap();
        let with_memory = |job: &mut StreamJob, memory: &str| {
            let limits = std::collections::BTreeMap::from([(
                "memory".to_owned(),
                k8s_openapi::apimachinery::pkg::api::resource::Quantity(memory.to_owned()),
            )]);
            job.spec.resources =
                Some(k8s_openapi::api::core::v1::ResourceRequirements { limits: Some(limits), ..Default::default() });
        };
        job.spec.cores_per_worker = 4;
        with_memory(&mut job, "1Gi");
        let err = job.spec.validate().unwrap_err().to_string();
        assert!(err.contains("spec.resources.limits.memory: 1Gi cannot hold"), "{err}");
        assert!(err.contains("needs 2560Mi"), "512Mi and 4 × 2 × 256Mi: {err}");
        with_memory(&mut job, "2560Mi");
        job.spec.validate().unwrap();
        job.spec.engine.state_memory_limit = "64Mi".into();
        with_memory(&mut job, "1Gi");
        job.spec.validate().unwrap();
        with_memory(&mut job, "lots");
        assert!(job.spec.validate().unwrap_err().to_string().contains("spec.resources.limits.memory"));
    }

    #[test]
    fn a_local_state_volume_is_checked_where_it_is_written() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../manifests/examples/s2-group-by.yaml");
        let mut job: StreamJob = serde_saphyr::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
        let mut problem = |yaml: &str| {
            job.spec.engine.local_state = serde_saphyr::from_str(yaml).unwrap();
            job.spec.validate().err().map(|e| e.to_string())
        };
        assert_eq!(problem("{ volume: Persistent, size: 10Gi, storageClassName: fast }"), None);
        assert_eq!(problem("{ size: 2Gi }"), None, "an emptyDir of a chosen size");
        let err = problem("{ size: ten gigs }").unwrap();
        assert!(err.contains("spec.engine.localState.size"), "{err}");
        let err = problem("{ size: 1Mi }").unwrap();
        assert!(err.contains("too small") && err.contains("64Mi"), "{err}");
        let err = problem("{ storageClassName: fast }").unwrap();
        assert!(err.contains("storageClassName applies to volume: Persistent"), "{err}");
        let err = problem("{ volume: None, size: 1Gi }").unwrap();
        assert!(err.contains("keeps no copy"), "{err}");
    }

    #[test]
    fn examples_are_valid() {
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../manifests/examples");
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            let job: StreamJob = serde_saphyr::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
            job.spec.validate().unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        }
    }
}
