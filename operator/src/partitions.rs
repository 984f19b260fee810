//! Partition counts of a job's sources, from the Kafka cluster (bounded
//! time, off the async runtime). Missing topics and unreachable brokers come
//! back as status reasons, not as reconcile errors.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::core::v1::Secret;
use kube::{Api, Client};
use rdkafka::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use sluice_crds::{SourcePartitions, StreamJobSpec, reasons};

use crate::Error;
use crate::validate::Invalid;

/// Looks up every source's partition count.
pub async fn lookup(
    client: &Client,
    namespace: &str,
    spec: &StreamJobSpec,
    timeout: Duration,
) -> Result<Result<Vec<SourcePartitions>, Invalid>, Error> {
    let mut out = Vec::with_capacity(spec.sources.len());
    for s in &spec.sources {
        let partitions = match (&s.kafka, &s.datagen) {
            (Some(k), _) => {
                let mut props: BTreeMap<String, String> = k.properties.clone();
                if let Some(secret) = &k.secret_ref {
                    let api: Api<Secret> = Api::namespaced(client.clone(), namespace);
                    match api.get_opt(&secret.name).await? {
                        Some(sec) => {
                            for (key, value) in sec.data.unwrap_or_default() {
                                props.insert(key, String::from_utf8_lossy(&value.0).trim_end().to_owned());
                            }
                        }
                        None => {
                            return Ok(Err(Invalid {
                                reason: reasons::INVALID_SPEC,
                                message: format!(
                                    "source {}: Secret {} not found in namespace {namespace}",
                                    s.name, secret.name
                                ),
                            }));
                        }
                    }
                }
                let (bootstrap, topic) = (k.bootstrap_servers.clone(), k.topic.clone());
                let name = s.name.clone();
                let result = tokio::task::spawn_blocking(move || partition_count(&bootstrap, &props, &topic, timeout))
                    .await
                    .map_err(|e| Error::Internal(format!("lookup task: {e}")))?;
                match result {
                    Ok(n) => n,
                    Err(mut invalid) => {
                        invalid.message = format!("source {name}: {}", invalid.message);
                        return Ok(Err(invalid));
                    }
                }
            }
            (None, Some(d)) => d.partitions,
            (None, None) => 1,
        };
        out.push(SourcePartitions { source: s.name.clone(), partitions });
    }
    Ok(Ok(out))
}

fn partition_count(
    bootstrap: &str,
    props: &BTreeMap<String, String>,
    topic: &str,
    timeout: Duration,
) -> Result<i32, Invalid> {
    let mut config = ClientConfig::new();
    config.set("bootstrap.servers", bootstrap).set("client.id", "sluice-operator");
    for (k, v) in props {
        config.set(k, v);
    }
    let unreachable = |e: &dyn std::fmt::Display| Invalid {
        reason: reasons::BROKER_UNREACHABLE,
        message: format!("cannot read metadata of topic {topic} from {bootstrap}: {e}"),
    };
    let consumer: BaseConsumer = config.create().map_err(|e| unreachable(&e))?;
    let md = consumer.fetch_metadata(Some(topic), timeout).map_err(|e| match e {
        KafkaError::MetadataFetch(RDKafkaErrorCode::UnknownTopicOrPartition | RDKafkaErrorCode::UnknownTopic) => {
            not_found(topic, bootstrap)
        }
        other => unreachable(&other),
    })?;
    let Some(t) = md.topics().iter().find(|t| t.name() == topic) else {
        return Err(not_found(topic, bootstrap));
    };
    if let Some(err) = t.error() {
        let code = RDKafkaErrorCode::from(err);
        return Err(match code {
            RDKafkaErrorCode::UnknownTopicOrPartition | RDKafkaErrorCode::UnknownTopic => not_found(topic, bootstrap),
            other => unreachable(&other),
        });
    }
    if t.partitions().is_empty() {
        return Err(not_found(topic, bootstrap));
    }
    i32::try_from(t.partitions().len()).map_err(|e| unreachable(&e))
}

fn not_found(topic: &str, bootstrap: &str) -> Invalid {
    Invalid { reason: reasons::TOPIC_NOT_FOUND, message: format!("topic {topic} does not exist on {bootstrap}") }
}
