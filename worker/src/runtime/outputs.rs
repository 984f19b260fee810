//! Where a core writes: the job's sink and its encoder (a writer schema
//! registered for Avro), and the transactional producer of each
//! checkpoint's transaction, with the fencing of earlier owners of the
//! core's partitions. Opened once per core start.

use std::sync::Arc;

use sluice_crds::{KeyFormat, SinkFormat};
use sluice_formats::encode::{
    AvroEncoder, DebeziumJsonEncoder, JsonEncoder, KeyWriter, ProtobufEncoder, RowEncoder, key_record_full_name,
    key_schema, proto_key_schema, proto_schema, record_full_name, writer_schema,
};
use sluice_plan::DataType;

use super::setup::CoreSetup;
use crate::Error;
use crate::kafka::client_config;
use crate::registry::SchemaKind;
use crate::sink::{
    CoreProducer, DeadLetterSink, FileDeadLetter, KafkaDeadLetter, KafkaSink, LineSink, LogDeadLetter, Sink,
    producer_config,
};

/// How the job's results are written: JSON, Debezium events, or Avro or
/// Protobuf under the writer schema registered for the sink topic
/// (`<topic>-value`, Confluent's TopicNameStrategy, or the record's name)
/// when the core starts; their keys as JSON objects, or Avro records or
/// Protobuf messages under `<topic>-key` (`sink.keyFormat`).
pub(super) fn sink_encoder(
    setup: &CoreSetup,
    plan: &sluice_plan::Plan,
    names: &[String],
    keys: &[String],
) -> Result<RowEncoder, Error> {
    let spec = &setup.config.spec;
    let columns = |of: &[sluice_plan::OutputColumn]| -> Vec<(String, DataType)> {
        of.iter().map(|o| (o.name.clone(), o.expr.data_type())).collect()
    };
    let encoder = match spec.sink.format {
        SinkFormat::Json => RowEncoder::Json(JsonEncoder::new(names, keys)),
        SinkFormat::DebeziumJson => RowEncoder::DebeziumJson(DebeziumJsonEncoder::new(names, keys)),
        SinkFormat::Avro => {
            let outputs = columns(&plan.outputs);
            let id = register(setup, Half::Value, SchemaKind::Avro, &outputs)?;
            let types: Vec<DataType> = outputs.iter().map(|o| o.1).collect();
            RowEncoder::Avro(AvroEncoder::new(id, &types, keys))
        }
        SinkFormat::Protobuf => {
            let id = register(setup, Half::Value, SchemaKind::Protobuf, &columns(&plan.outputs))?;
            RowEncoder::Protobuf(ProtobufEncoder::new(id, keys))
        }
    };
    let kind = match spec.sink.key_format {
        _ if keys.is_empty() => return Ok(encoder),
        None | Some(KeyFormat::Json) => return Ok(encoder),
        Some(KeyFormat::Avro) => SchemaKind::Avro,
        Some(KeyFormat::Protobuf) => SchemaKind::Protobuf,
    };
    let key_columns = columns(&plan.keys);
    let id = register(setup, Half::Key, kind, &key_columns)?;
    Ok(encoder.with_keys(match kind {
        SchemaKind::Avro => KeyWriter::avro(id, &key_columns.iter().map(|c| c.1).collect::<Vec<_>>()),
        SchemaKind::Protobuf => KeyWriter::protobuf(id),
    }))
}

/// Which half of a result record a schema is for.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Half {
    Key,
    Value,
}

/// Derives the schema of `columns` for the sink's `half` in `kind`,
/// registers it under the subject the job's naming strategy gives, and
/// returns its id.
fn register(setup: &CoreSetup, half: Half, kind: SchemaKind, columns: &[(String, DataType)]) -> Result<u32, Error> {
    let spec = &setup.config.spec;
    let field = match half {
        Half::Key => "spec.sink.keyFormat",
        Half::Value => "spec.sink.format",
    };
    let (Some(registry), Some(kafka)) = (&setup.registry, &spec.sink.kafka) else {
        return Err(Error::Config(format!(
            "{field} {} needs a Kafka sink topic and spec.schemaRegistry (its schema is registered there)",
            kind.name()
        )));
    };
    let job = &setup.config.job.name;
    let schema = match (half, kind) {
        (Half::Value, SchemaKind::Avro) => writer_schema(job, columns),
        (Half::Key, SchemaKind::Avro) => key_schema(job, columns),
        (Half::Value, SchemaKind::Protobuf) => proto_schema(job, columns),
        (Half::Key, SchemaKind::Protobuf) => proto_key_schema(job, columns),
    }
    .map_err(|e| Error::Config(format!("{field} {}: {e}", kind.name())))?;
    let strategy = spec.schema_registry.as_ref().map(|r| r.subject_name_strategy).unwrap_or_default();
    let subject = match half {
        Half::Value => strategy.value_subject(&kafka.topic, &record_full_name(job)),
        Half::Key => strategy.key_subject(&kafka.topic, &key_record_full_name(job)),
    };
    registry.register(&subject, &schema, kind)
}

/// What a core's transactional producer writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Writes {
    /// Exactly once: results, dead letters, exchanges, state and offsets.
    Everything,
    /// At least once, for a job whose stateful plan writes an exchange:
    /// exchanges, state and offsets (the results and dead letters go
    /// through producers of their own, flushed before each commit).
    Internal,
}

/// The core's transactional producer. Exactly once it writes with the
/// sink's client settings (validation puts every output on the sink's
/// cluster); at least once, with the source's, where the internal topics
/// are. Creating it fences any earlier producer of its id; then the
/// producers of the earlier generations that owned this core's partitions
/// (a rescale since) are fenced too, before anything is read.
pub(super) fn transactional_producer(
    setup: &CoreSetup,
    client: &rdkafka::ClientConfig,
    writes: Writes,
) -> Result<Arc<CoreProducer>, Error> {
    let spec = &setup.config.spec;
    let (mut config, latency) = match writes {
        Writes::Everything => {
            let sink = spec.sink.kafka.as_ref().ok_or_else(|| {
                Error::Config("spec.delivery: ExactlyOnce needs a Kafka sink (spec.sink.kafka)".into())
            })?;
            let config = client_config(sink.connection(), &setup.config.worker.secrets_dir)?;
            (config, Some(Arc::clone(&setup.metrics.latency)))
        }
        Writes::Internal => (client.clone(), None),
    };
    // Results are visible at commit, so fuller batches cost no latency.
    crate::kafka::set_default(&mut config, "linger.ms", "5");
    let interval = u64::try_from(spec.engine.checkpoint_interval_millis).unwrap_or(1000);
    let timeout = (interval * 10).clamp(60_000, 900_000);
    crate::kafka::set_default(&mut config, "transaction.timeout.ms", &timeout.to_string());
    let (slot, slots) = setup.slot();
    let id = setup.transactional_id(slot, slots);
    config.set("transactional.id", &id);
    let producer = CoreProducer::new(&producer_config(config.clone()), &id, latency, setup.health.drain.clone())?;
    for (old_slots, old_slot) in earlier_owners(setup, client, slots)? {
        let old = setup.transactional_id(old_slot, old_slots);
        config.set("transactional.id", &old);
        // Initialising an id fences its producer; this one is dropped at once.
        CoreProducer::new(&producer_config(config.clone()), &old, None, setup.health.drain.clone())?;
        tracing::info!(core = setup.core, fenced = %old, "fenced the producer of an earlier owner of this core's partitions");
    }
    match writes {
        Writes::Everything => {
            tracing::info!(core = setup.core, transactional_id = %id, "exactly once: writing in one transaction per checkpoint");
        }
        Writes::Internal => tracing::info!(
            core = setup.core, transactional_id = %id,
            "at least once, with a stateful stage before a repartition topic: the repartition topics, state and \
             offsets are written in one transaction per checkpoint, so a replay is never seen twice downstream"
        ),
    }
    Ok(producer)
}

/// The engine slots of earlier scales (other `slots`) that owned this
/// core's partitions: those that committed them last, as their checkpoint
/// metadata says, and under every scale the operator says the job ran at
/// (`earlierSlots`: a scale that never committed is known only so) the slot
/// each partition went to.
fn earlier_owners(setup: &CoreSetup, client: &rdkafka::ClientConfig, slots: u32) -> Result<Vec<(u32, u32)>, Error> {
    let topics: Vec<(&str, &[i32])> = setup.inputs.iter().map(|i| (i.topic.as_str(), &i.partitions[..])).collect();
    let committed = crate::kafka::committed(client, &setup.config.consumer_group(), &topics)?;
    let mut owners: Vec<(u32, u32)> =
        committed.iter().filter_map(|metadata| super::state_store::owner(metadata)).collect();
    for earlier in setup.config.earlier_slots.iter().filter_map(|s| u32::try_from(*s).ok()).filter(|s| *s > 0) {
        for (_, partitions) in &topics {
            owners.extend(partitions.iter().filter_map(|p| u32::try_from(*p).ok()).map(|p| (earlier, p % earlier)));
        }
    }
    owners.retain(|(s, _)| *s != slots);
    owners.sort_unstable();
    owners.dedup();
    Ok(owners)
}

/// The job's sink for this core: exactly once, through the transaction.
pub(super) fn job_sink(setup: &CoreSetup, transaction: Option<&Arc<CoreProducer>>) -> Result<Box<dyn Sink>, Error> {
    let spec = &setup.config.spec;
    let secrets = &setup.config.worker.secrets_dir;
    if let Some(budget) = &setup.preview {
        return Ok(Box::new(LineSink::stdout_within(Arc::clone(budget))));
    }
    Ok(match (&spec.sink.kafka, &spec.sink.file, spec.sink.stdout) {
        (Some(k), _, _) => {
            let out = match transaction {
                Some(t) => Arc::clone(t),
                None => {
                    let config = client_config(k.connection(), secrets)?;
                    let latency = Some(Arc::clone(&setup.metrics.latency));
                    CoreProducer::new(&producer_config(config), &k.topic, latency, setup.health.drain.clone())?
                }
            };
            Box::new(KafkaSink::new(out, &k.topic)?)
        }
        (None, Some(f), _) => Box::new(LineSink::file(&f.path)?),
        (None, None, Some(true)) => Box::new(LineSink::stdout()),
        _ => return Err(Error::Config("spec.sink needs kafka, file or stdout".into())),
    })
}

/// The job's dead-letter output for this core: exactly once, through the
/// transaction; the log when the job names none.
pub(super) fn dead_letter(
    setup: &CoreSetup,
    transaction: Option<&Arc<CoreProducer>>,
) -> Result<Box<dyn DeadLetterSink>, Error> {
    // A preview writes nothing anywhere: its dead letters are logged.
    let Some(d) = setup.config.spec.dead_letter.as_ref().filter(|_| setup.preview.is_none()) else {
        return Ok(Box::new(LogDeadLetter::default()));
    };
    Ok(match (&d.kafka, &d.file) {
        (Some(k), _) => {
            let out = match transaction {
                Some(t) => Arc::clone(t),
                None => {
                    let config = client_config(k.connection(), &setup.config.worker.secrets_dir)?;
                    CoreProducer::new(&producer_config(config), &k.topic, None, setup.health.drain.clone())?
                }
            };
            Box::new(KafkaDeadLetter::new(out, &k.topic, &setup.config.job.name, setup.slot().0)?)
        }
        (None, Some(f)) => Box::new(FileDeadLetter::open(&f.path)?),
        _ => Box::new(LogDeadLetter::default()),
    })
}
