//! `reclaimPolicy: Delete`: what a deleted job kept in Kafka — its consumer
//! group, its state and repartition topics — deleted by the operator once
//! the job's workers drained, as a PersistentVolume's reclaim policy
//! deletes its volume. Only topics named exactly as the job's group names
//! its internal topics ([`contract::is_internal_topic`]) are deleted; the
//! job's sources, sink and dead-letter topic never are.
//!
//! The internal topics live where the workers create them: on the cluster
//! of the job's Kafka sources. Each distinct cluster the sources name is
//! cleaned (a topic or group that is not there is nothing to delete).

use std::collections::BTreeSet;
use std::time::Duration;

use kube::Client;
use rdkafka::ClientConfig;
use rdkafka::admin::{AdminClient, AdminOptions};
use rdkafka::client::DefaultClientContext;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::types::RDKafkaErrorCode;
use sluice_crds::{StreamJobSpec, contract};

use crate::Error;
use crate::partitions::{client_config, client_properties};

/// What a reclaim deleted.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Reclaimed {
    pub topics: Vec<String>,
    /// Whether the consumer group was there to delete.
    pub group: bool,
}

/// Deletes consumer group `group` and its internal topics on every cluster
/// the job's Kafka sources name. `Ok(Err(why))` when Kafka refused or did
/// not answer (retried by the caller); what was deleted before stays so.
pub async fn reclaim(
    client: &Client,
    namespace: &str,
    spec: &StreamJobSpec,
    group: &str,
    timeout: Duration,
) -> Result<Result<Reclaimed, String>, Error> {
    let mut done = Reclaimed::default();
    let mut clusters = BTreeSet::new();
    for s in &spec.sources {
        let Some(k) = &s.kafka else { continue };
        if !clusters.insert(k.bootstrap_servers.clone()) {
            continue;
        }
        let props = match client_properties(client, namespace, &format!("source {}", s.name), k.connection()).await? {
            Ok(props) => props,
            Err(invalid) => return Ok(Err(invalid.message)),
        };
        match delete_on(client_config(&k.bootstrap_servers, &props), group, timeout).await {
            Ok(r) => {
                done.topics.extend(r.topics);
                done.group |= r.group;
            }
            Err(why) => return Ok(Err(format!("{}: {why}", k.bootstrap_servers))),
        }
    }
    Ok(Ok(done))
}

/// Deletes the group's internal topics, then the group, on one cluster.
async fn delete_on(config: ClientConfig, group: &str, timeout: Duration) -> Result<Reclaimed, String> {
    let (listing, owner) = (config.clone(), group.to_owned());
    let topics = tokio::task::spawn_blocking(move || -> Result<Vec<String>, String> {
        let consumer: BaseConsumer = listing.create().map_err(|e| e.to_string())?;
        let metadata = consumer.fetch_metadata(None, timeout).map_err(|e| format!("listing topics: {e}"))?;
        Ok(metadata
            .topics()
            .iter()
            .map(|t| t.name().to_owned())
            .filter(|t| contract::is_internal_topic(&owner, t))
            .collect())
    })
    .await
    .map_err(|e| format!("listing topics: {e}"))??;
    let admin: AdminClient<DefaultClientContext> = config.create().map_err(|e| e.to_string())?;
    let options = AdminOptions::new().operation_timeout(Some(timeout)).request_timeout(Some(timeout));
    let mut done = Reclaimed::default();
    if !topics.is_empty() {
        let names: Vec<&str> = topics.iter().map(String::as_str).collect();
        for result in admin.delete_topics(&names, &options).await.map_err(|e| format!("deleting topics: {e}"))? {
            match result {
                Ok(topic) => done.topics.push(topic),
                // Deleted meanwhile (an earlier pass whose answer was lost).
                Err((_, RDKafkaErrorCode::UnknownTopicOrPartition)) => {}
                Err((topic, code)) => return Err(format!("deleting topic {topic}: {code}")),
            }
        }
    }
    let deleted = admin.delete_groups(&[group], &options).await.map_err(|e| format!("deleting group {group}: {e}"))?;
    match deleted.into_iter().next() {
        Some(Ok(_)) => done.group = true,
        Some(Err((_, RDKafkaErrorCode::GroupIdNotFound))) | None => {}
        Some(Err((_, code))) => return Err(format!("deleting consumer group {group}: {code}")),
    }
    Ok(done)
}
