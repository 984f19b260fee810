//! Names, paths and ports both sides of the contract use — the operator
//! when it renders a pod, the worker when it reads what was rendered. Each
//! is defined here once, so the two cannot drift apart.

/// Port of every worker's /metrics, /healthz, /readyz.
pub const WORKER_HTTP_PORT: u16 = 9400;
/// Where the worker config is mounted in a pod.
pub const CONFIG_DIR: &str = "/etc/sluice/config";
/// The worker config's file name in [`CONFIG_DIR`].
pub const CONFIG_FILE: &str = "worker.yaml";
/// The worker config's full path in a pod: `sluice-worker serve`'s default.
pub const CONFIG_PATH: &str = "/etc/sluice/config/worker.yaml";
/// Where referenced Secrets are mounted, one directory each.
pub const SECRETS_DIR: &str = "/etc/sluice/secrets";
/// Where a worker's local state volume is mounted (`spec.engine.localState`).
pub const STATE_DIR: &str = "/var/lib/sluice/state";
/// Annotation on the pod template: hash of the worker config.
pub const CONFIG_HASH_ANNOTATION: &str = "sluice.dev/config-hash";
/// Annotation on the StatefulSet: hash of what decides partition ownership.
pub const ASSIGNMENT_HASH_ANNOTATION: &str = "sluice.dev/assignment-hash";
/// Finalizer that holds a job's deletion until its workers drained.
pub const FINALIZER: &str = "sluice.dev/drain";

/// The Kafka consumer group a job commits its offsets (and state
/// pointers) to: `sluice.<namespace>.<name>`, then `.<identity>` when the
/// query has one (a changed query starts a new group instead of restoring
/// state that does not fit it). Internal topics are named from it.
pub fn consumer_group(namespace: &str, name: &str, identity: Option<&str>) -> String {
    match identity {
        Some(id) => format!("sluice.{namespace}.{name}.{id}"),
        None => format!("sluice.{namespace}.{name}"),
    }
}

/// Whether `topic` is one of the internal topics a job running in consumer
/// group `group` creates: `<group>.state`, `<group>.state-<n>`,
/// `<group>.state-branch-<n>`, `<group>.repartition-<n>` (see
/// [`crate::WorkerConfig::state_topic`] and the names beside it). Exact,
/// not a prefix: a job's name may hold dots, so another job's group can
/// start with this one's.
pub fn is_internal_topic(group: &str, topic: &str) -> bool {
    let Some(rest) = topic.strip_prefix(group).and_then(|r| r.strip_prefix('.')) else { return false };
    let numbered = |prefix: &str| {
        rest.strip_prefix(prefix).is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
    };
    rest == "state" || numbered("state-") || numbered("state-branch-") || numbered("repartition-")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_config_path_is_the_mounted_file() {
        assert_eq!(CONFIG_PATH, format!("{CONFIG_DIR}/{CONFIG_FILE}"));
    }

    #[test]
    fn consumer_groups_are_named_from_namespace_name_and_query_identity() {
        assert_eq!(consumer_group("prod", "s2", Some("ab12")), "sluice.prod.s2.ab12");
        assert_eq!(consumer_group("prod", "s2", None), "sluice.prod.s2");
    }

    /// Every internal topic a worker config names is one, and nothing
    /// else is: not another job's whose name extends this one's with dots.
    #[test]
    fn internal_topics_are_told_exactly_from_their_group() {
        let mut config: crate::WorkerConfig = serde_json::from_value(serde_json::json!({
            "job": { "name": "s2", "namespace": "prod" },
            "spec": {
                "sql": "SELECT a FROM t",
                "sources": [{ "name": "t", "datagen": { "scenario": "Trades" }, "schema": { "columns": [{ "name": "a", "type": "bigint" }] } }],
                "sink": { "stdout": true },
            },
            "partitions": [],
        }))
        .unwrap();
        let group = consumer_group("prod", "s2", Some("ab12"));
        config.worker.consumer_group = Some(group.clone());
        let ours = [config.state_topic(), config.stage_state_topic(2), config.repartition_topic(1)];
        for topic in ours.iter().map(String::as_str).chain([&*format!("{group}.state-branch-3")]) {
            assert!(is_internal_topic(&group, topic), "{topic}");
        }
        let other = consumer_group("prod", "s2.ab12.x", Some("cd34"));
        for topic in [
            format!("{other}.state"),
            format!("{group}.x.state"),
            format!("{group}.state-"),
            format!("{group}.repartition-1a"),
            format!("{group}-ffff.state"),
            group.clone(),
            "orders".into(),
        ] {
            assert!(!is_internal_topic(&group, &topic), "{topic}");
        }
    }
}
