//! A job's consumer lag, read from Kafka by the operator itself: each
//! source partition's end offset against the offset the job's group
//! committed there (at its last checkpoint). Kafka keeps both, so the lag
//! is known while the workers are down, rescaling or unreachable — what
//! the LAG column and the autoscaler need.

use std::time::{Duration, Instant};

use kube::Client;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::{Offset, TopicPartitionList};
use sluice_crds::{SourcePartitions, StartFrom, StreamJobSpec};

use crate::Error;
use crate::partitions::{Properties, client_config, client_properties, rejected};

/// The sources' offsets, summed over their partitions.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SourceOffsets {
    /// End offsets (the next offset each partition will write).
    pub end: i64,
    /// Records not yet committed by the job.
    pub lag: i64,
}

/// Reads the lag of every Kafka source of `spec` for consumer group
/// `group`; `Ok(Err(why))` when Kafka could not tell.
pub async fn read(
    client: &Client,
    namespace: &str,
    spec: &StreamJobSpec,
    partitions: &[SourcePartitions],
    group: &str,
    timeout: Duration,
) -> Result<Result<SourceOffsets, String>, Error> {
    let mut total = SourceOffsets::default();
    for s in &spec.sources {
        let Some(k) = &s.kafka else { continue };
        let props = match client_properties(client, namespace, &format!("source {}", s.name), k.connection()).await? {
            Ok(props) => props,
            Err(invalid) => return Ok(Err(invalid.message)),
        };
        let count = partitions.iter().find(|p| p.source.eq_ignore_ascii_case(&s.name)).map_or(0, |p| p.partitions);
        let (bootstrap, topic, group, from) =
            (k.bootstrap_servers.clone(), k.topic.clone(), group.to_owned(), k.start_from);
        let read = tokio::task::spawn_blocking(move || {
            source_offsets(&bootstrap, &props, &group, &topic, count, from, timeout)
        })
        .await
        .map_err(|e| Error::Internal(format!("lag task: {e}")))?;
        match read {
            Ok(o) => {
                total.end += o.end;
                total.lag += o.lag;
            }
            Err(why) => return Ok(Err(format!("source {}: {why}", s.name))),
        }
    }
    Ok(Ok(total))
}

fn source_offsets(
    bootstrap: &str,
    props: &Properties,
    group: &str,
    topic: &str,
    partitions: i32,
    from: StartFrom,
    timeout: Duration,
) -> Result<SourceOffsets, String> {
    let mut config = client_config(bootstrap, props);
    // Only reads the group's committed offsets: never joins it, never commits.
    config.set("group.id", group).set("enable.auto.commit", "false");
    let consumer: BaseConsumer =
        config.create().map_err(|e| rejected(props, &e).map_or_else(|| e.to_string(), |i| i.message))?;
    let mut tpl = TopicPartitionList::new();
    for p in 0..partitions {
        tpl.add_partition(topic, p);
    }
    // One deadline for the whole read: a broker that does not answer costs
    // a reconcile `timeout`, not `timeout` per partition.
    let deadline = Instant::now() + timeout;
    let left = || deadline.saturating_duration_since(Instant::now());
    let committed = consumer.committed_offsets(tpl, left()).map_err(|e| format!("committed offsets: {e}"))?;
    // `startFrom: <time>` before the first commit: where the job will
    // start, by Kafka's offsets-for-times (a partition with no record at or
    // after it starts at its end).
    let by_time = match from {
        StartFrom::Timestamp(ms)
            if !committed.elements().iter().any(|e| matches!(e.offset(), Offset::Offset(o) if o >= 0)) =>
        {
            let mut times = TopicPartitionList::new();
            for p in 0..partitions {
                times.add_partition_offset(topic, p, Offset::Offset(ms)).map_err(|e| e.to_string())?;
            }
            Some(consumer.offsets_for_times(times, left()).map_err(|e| format!("offsets for {from}: {e}"))?)
        }
        _ => None,
    };
    let mut out = SourceOffsets::default();
    for p in 0..partitions {
        if left().is_zero() {
            return Err(format!("end offsets: no answer within {timeout:?}"));
        }
        let (low, high) = consumer.fetch_watermarks(topic, p, left()).map_err(|e| format!("end offsets: {e}"))?;
        let done = match committed.find_partition(topic, p).map(|e| e.offset()) {
            Some(Offset::Offset(o)) => o,
            // Nothing committed yet: the job starts where `startFrom` says.
            _ => match from {
                StartFrom::Earliest => low,
                StartFrom::Latest => high,
                StartFrom::Timestamp(_) => {
                    match by_time.as_ref().and_then(|t| t.find_partition(topic, p)).map(|e| e.offset()) {
                        Some(Offset::Offset(o)) if o >= 0 => o.clamp(low, high),
                        Some(_) => high,
                        // Committed elsewhere on the topic: a new partition is read from its start.
                        None => low,
                    }
                }
            },
        };
        out.end += high;
        out.lag += (high - done).max(0);
    }
    Ok(out)
}
