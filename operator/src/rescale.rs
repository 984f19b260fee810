//! Changing who owns which partition without ever letting two workers
//! consume the same partition, and without losing or double-counting.
//!
//! Partition ownership is a function of (partitions, workers, cores), whose
//! hash is stamped on the StatefulSet. When the desired hash differs from
//! the running one, the old generation is stopped first — replicas to 0; each
//! worker finishes its batch, flushes, checkpoints state and commits offsets
//! on SIGTERM — and only when no pod of the job is left does the operator
//! write the new config and scale up. Changes that move no partition (image,
//! tuning, resources) roll pods one at a time instead: a pod and its
//! replacement share an ordinal, hence partitions, and a StatefulSet never
//! runs two pods of one ordinal.
//!
//! A change of the workers' volume claims is stopped first the same way:
//! a StatefulSet's claim templates cannot change, so once no pod is left
//! the StatefulSet is replaced.

/// What the reconcile should do next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// Write the desired children (config, workers).
    Apply,
    /// Stop the old generation: scale the StatefulSet to zero, keep its config.
    Drain,
    /// Old pods are still shutting down.
    WaitForDrain,
}

/// Decides the next step from the running StatefulSet's assignment hash and
/// replicas, how many of the job's pods still exist, the desired hash, and
/// whether the volume claims change.
pub fn next_step(
    running_hash: Option<&str>,
    running_replicas: i32,
    live_pods: usize,
    desired_hash: &str,
    claims_change: bool,
) -> Step {
    match running_hash {
        None => Step::Apply,
        Some(h) if h == desired_hash && !claims_change => Step::Apply,
        Some(_) if live_pods == 0 => Step::Apply,
        Some(_) if running_replicas > 0 => Step::Drain,
        Some(_) => Step::WaitForDrain,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scaling_drains_the_old_generation_before_starting_the_new_one() {
        // First start, and changes that keep the assignment: apply directly.
        assert_eq!(next_step(None, 0, 0, "b", false), Step::Apply);
        assert_eq!(next_step(Some("a"), 3, 3, "a", false), Step::Apply);
        // Ownership changes while 3 workers run: stop them first...
        assert_eq!(next_step(Some("a"), 3, 3, "b", false), Step::Drain);
        // ...wait while they drain and commit...
        assert_eq!(next_step(Some("a"), 0, 2, "b", false), Step::WaitForDrain);
        // ...and start the new generation once none is left.
        assert_eq!(next_step(Some("a"), 0, 0, "b", false), Step::Apply);
    }

    #[test]
    fn new_volume_claims_stop_the_workers_before_the_statefulset_is_replaced() {
        assert_eq!(next_step(Some("a"), 3, 3, "a", true), Step::Drain);
        assert_eq!(next_step(Some("a"), 0, 1, "a", true), Step::WaitForDrain);
        assert_eq!(next_step(Some("a"), 0, 0, "a", true), Step::Apply);
        assert_eq!(next_step(None, 0, 0, "a", true), Step::Apply, "nothing runs yet");
    }
}
