//! Whether a StreamJob can run, decided with the workers' own SQL front end (`sluice-sql`)
//! before anything is launched.

use sluice_crds::{StreamJobSpec, reasons};
use sluice_plan::Dataflow;
use sluice_sql::plan_dataflow;

/// Why a job cannot run: a condition reason and a message for the user.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Invalid {
    pub reason: &'static str,
    pub message: String,
}

/// Why a job cannot go on now, classified where the problem is found — so
/// that no caller has to tell the two apart from a reason string.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Blocked {
    /// The job's fault (a Secret it names is missing, a property the Kafka
    /// client rejects, a subject the registry does not have): reported,
    /// and not retried until the job changes.
    Invalid(Invalid),
    /// The cluster's (a broker or registry that does not answer, a topic
    /// not there yet): retried with backoff.
    Unavailable(Invalid),
}

/// Checks the spec (as the CRD's rules do) and plans the SQL against the
/// declared schemas, as the workers will. The message of a SQL error
/// carries its line:column.
pub fn validate(spec: &StreamJobSpec) -> Result<Dataflow, Invalid> {
    spec.validate().map_err(|e| Invalid { reason: reasons::INVALID_SPEC, message: e.to_string() })?;
    // The CRD's rule refuses these too; checked again for a CRD installed
    // without it (an older chart) or edited.
    let local = spec.local_only_problems();
    if !local.is_empty() {
        return Err(Invalid { reason: reasons::INVALID_SPEC, message: local.join("; ") });
    }
    let dataflow = plan_dataflow(&spec.sql, &spec.sources, 1)
        .map_err(|e| Invalid { reason: reasons::INVALID_SQL, message: e.to_string() })?;
    if let Some(stage) = dataflow.stages.last()
        && let Some(message) = stage.plan.results_problem(&spec.sink)
    {
        return Err(Invalid { reason: reasons::INVALID_SQL, message });
    }
    if spec.delivery != sluice_crds::Delivery::ExactlyOnce
        && dataflow.has_stateful_exchange_writer()
        && let Some(problem) = spec.internal_transaction_problem()
    {
        return Err(Invalid { reason: reasons::INVALID_SPEC, message: problem });
    }
    Ok(dataflow)
}

/// The source the planned query reads.
pub fn source_name(dataflow: &Dataflow) -> &str {
    dataflow.stages.first().map_or("", |s| s.plan.source.name.as_str())
}

/// Plans the query for the source's actual partition count: where its
/// state is keyed differently from the source, it is cut into stages
/// joined by a Kafka repartition topic — which a source that is not a
/// Kafka topic cannot have.
pub fn check_partitioning(spec: &StreamJobSpec, partitions: i32) -> Result<Dataflow, Invalid> {
    let dataflow = plan_dataflow(&spec.sql, &spec.sources, partitions)
        .map_err(|e| Invalid { reason: reasons::INVALID_SQL, message: e.to_string() })?;
    let source = source_name(&dataflow);
    if dataflow.has_exchange()
        && dataflow.source_plans().any(|p| spec.source(&p.source.name).is_some_and(|s| s.kafka.is_none()))
    {
        return Err(Invalid {
            reason: reasons::PARTITION_KEY_MISMATCH,
            message: format!(
                "source {source}: the query's state is not keyed by the source's partitionKey, so its rows are \
                 re-keyed through a Kafka repartition topic, which needs a Kafka source; key the source by the \
                 query's GROUP BY (partitionKey) or read it from Kafka"
            ),
        });
    }
    Ok(dataflow)
}

pub fn hex8(bytes: &[u8]) -> String {
    bytes.iter().take(4).map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_crds::StreamJob;

    fn job(sql: &str) -> StreamJob {
        let text =
            std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../manifests/examples/s2-group-by.yaml"))
                .unwrap();
        let mut j: StreamJob = serde_saphyr::from_str(&text).unwrap();
        j.spec.sql = sql.into();
        j
    }

    #[test]
    fn bad_sql_is_invalid_sql_with_a_position() {
        let e =
            validate(&job("SELECT trader_id,\n  COUNT(*) AS n FROM market_data GROUP BY tradr_id").spec).unwrap_err();
        assert_eq!(e.reason, reasons::INVALID_SQL);
        assert!(e.message.starts_with("line 2, column"), "{}", e.message);
        assert!(e.message.contains("did you mean `trader_id`"), "{}", e.message);
    }

    #[test]
    fn a_transactional_hop_needs_a_checkpoint_interval_a_transaction_can_last() {
        let updating = "SELECT symbol, SUM(volume) AS total FROM (SELECT trader_id, symbol, SUM(quantity) AS volume \
                        FROM market_data GROUP BY trader_id, symbol) AS t GROUP BY symbol";
        let mut j = job(updating);
        j.spec.engine.checkpoint_interval_millis = 900_000;
        let e = validate(&j.spec).unwrap_err();
        assert!(e.message.contains("must be below 900000 for this query"), "{}", e.message);
        j.spec.engine.checkpoint_interval_millis = 899_999;
        validate(&j.spec).unwrap();
        // A query without such a stage may checkpoint as rarely as it likes.
        let mut j = job("SELECT trader_id, COUNT(*) AS n FROM market_data GROUP BY trader_id");
        j.spec.engine.checkpoint_interval_millis = 3_600_000;
        validate(&j.spec).unwrap();
    }

    #[test]
    fn a_job_reading_or_writing_the_pods_own_files_is_refused() {
        let mut j = job("SELECT trader_id FROM market_data");
        j.spec.sources[0].kafka = None;
        j.spec.sources[0].file = Some(sluice_crds::FileSource { path: "/etc/sluice/secrets/kafka/password".into() });
        let e = validate(&j.spec).unwrap_err();
        assert_eq!(e.reason, reasons::INVALID_SPEC);
        assert!(e.message.contains("spec.sources[0].file: file sources, a file sink"), "{}", e.message);
        let mut j = job("SELECT trader_id FROM market_data");
        j.spec.sink = serde_saphyr::from_str("file: { path: /etc/passwd }").unwrap();
        j.spec.dead_letter = Some(serde_saphyr::from_str("file: { path: /tmp/x }").unwrap());
        let e = validate(&j.spec).unwrap_err();
        assert!(e.message.contains("spec.sink.file") && e.message.contains("spec.deadLetter.file"), "{}", e.message);
        // Generated input and stdout touch no file of the pod.
        let text =
            std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../manifests/examples/quickstart.yaml"))
                .unwrap();
        let quickstart: StreamJob = serde_saphyr::from_str(&text).unwrap();
        validate(&quickstart.spec).unwrap();
    }

    /// An Avro sink's fields are the output columns: a name Avro cannot
    /// hold is refused before anything runs, naming it; with an alias the
    /// job is valid.
    #[test]
    fn an_avro_sink_needs_output_names_avro_can_hold() {
        let mut j = job("SELECT trader_id AS \"trader-id\" FROM market_data");
        j.spec.sink.format = sluice_crds::SinkFormat::Avro;
        j.spec.schema_registry = Some(serde_saphyr::from_str("url: http://registry:8081").unwrap());
        let e = validate(&j.spec).unwrap_err();
        assert!(e.message.contains("`trader-id` is not an Avro field name"), "{}", e.message);
        j.spec.sql = "SELECT trader_id AS trader FROM market_data".into();
        validate(&j.spec).unwrap();
        j.spec.schema_registry = None;
        assert!(validate(&j.spec).unwrap_err().message.contains("needs spec.schemaRegistry"));
    }

    /// Protobuf keys are messages of the key columns: a key named by an
    /// expression is refused before anything runs, naming it; shown in the
    /// SELECT list under an alias, it takes the alias.
    /// A key is flat: a nested GROUP BY key is refused for a Kafka sink,
    /// as is a nested result Protobuf cannot write.
    #[test]
    fn nested_keys_and_results_a_format_cannot_hold_are_refused() {
        let mut j = job("SELECT ARRAY[symbol] AS s, COUNT(*) AS n FROM market_data GROUP BY ARRAY[symbol]");
        let e = validate(&j.spec).unwrap_err();
        assert!(e.message.contains("key column `s` is array<string>, and a record key is flat"), "{}", e.message);
        j.spec.sql = "SELECT ARRAY[ARRAY[symbol]] AS s FROM market_data".into();
        validate(&j.spec).unwrap();
        j.spec.sink.format = sluice_crds::SinkFormat::Protobuf;
        j.spec.schema_registry = Some(serde_saphyr::from_str("url: http://registry:8081").unwrap());
        let e = validate(&j.spec).unwrap_err();
        assert!(
            e.message.contains("`s` is array<array<string>>") && e.message.contains("do not nest"),
            "{}",
            e.message
        );
        j.spec.sql = "SELECT ARRAY[symbol] AS s, MAP {symbol: 1} AS m FROM market_data".into();
        validate(&j.spec).unwrap();
    }

    #[test]
    fn protobuf_keys_need_key_names_protobuf_can_hold() {
        let mut j = job("SELECT COUNT(*) AS n FROM market_data GROUP BY UPPER(symbol)");
        j.spec.sink.format = sluice_crds::SinkFormat::Protobuf;
        j.spec.sink.key_format = Some(sluice_crds::KeyFormat::Protobuf);
        j.spec.schema_registry = Some(serde_saphyr::from_str("url: http://registry:8081").unwrap());
        let e = validate(&j.spec).unwrap_err();
        assert!(
            e.message.starts_with("spec.sink.keyFormat protobuf: key output column `UPPER(symbol)`"),
            "{}",
            e.message
        );
        j.spec.sql = "SELECT UPPER(symbol) AS sym, COUNT(*) AS n FROM market_data GROUP BY UPPER(symbol)".into();
        validate(&j.spec).unwrap();
    }

    /// What crash-looped the operator for every job: 2 KB of `x+x+…`,
    /// planned on a tokio worker's 2 MiB stack, overflowed it and aborted
    /// the process. Planned here on a thread of that size.
    #[test]
    fn sql_deep_enough_to_overflow_a_stack_is_invalid_sql_not_an_abort() {
        for chain in [vec!["price"; 1_000].join("+"), vec!["price > 0"; 3_000].join(" AND ")] {
            let spec = job(&format!("SELECT trader_id FROM market_data WHERE {chain} IS NOT NULL")).spec;
            let e = std::thread::Builder::new()
                .stack_size(2 << 20)
                .spawn(move || validate(&spec))
                .unwrap()
                .join()
                .unwrap()
                .unwrap_err();
            assert_eq!(e.reason, reasons::INVALID_SQL);
            assert!(e.message.contains("levels deep"), "{}", e.message);
            assert!(e.message.starts_with("line 1, column"), "{}", e.message);
        }
    }

    #[test]
    fn a_query_keyed_differently_from_its_kafka_source_is_cut_at_a_repartition_topic() {
        let spec = job("SELECT symbol, COUNT(*) AS n FROM market_data GROUP BY symbol").spec;
        assert!(!validate(&spec).unwrap().has_exchange(), "one partition: nothing to re-key");
        assert_eq!(check_partitioning(&spec, 4).unwrap().stages.len(), 2);
        let aligned = job("SELECT trader_id, COUNT(*) AS n FROM market_data GROUP BY trader_id").spec;
        assert_eq!(check_partitioning(&aligned, 4).unwrap().stages.len(), 1, "keyed right: no shuffle");
    }

    #[test]
    fn a_re_keyed_query_over_a_source_that_is_not_kafka_is_refused_with_why() {
        let mut spec = job("SELECT symbol, COUNT(*) AS n FROM market_data GROUP BY symbol").spec;
        let source = &mut spec.sources[0];
        source.kafka = None;
        source.file = Some(sluice_crds::FileSource { path: "/data/trades.jsonl".into() });
        let e = check_partitioning(&spec, 4).unwrap_err();
        assert_eq!(e.reason, reasons::PARTITION_KEY_MISMATCH);
        assert!(e.message.contains("needs a Kafka source"), "{}", e.message);
    }
}
