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
}
