//! Which offset a partition commits: the next one it reads — at idle,
//! the consumer's position, which is past records a `read_committed`
//! consumer never hands over.

use super::partition::PartitionPipeline;
use crate::source::Source;

/// The offset to commit for a partition at a checkpoint: its position when
/// it moved, and also when it did not but `again` — a refresh is due (Kafka
/// expires a standalone group's offsets some time after their last commit,
/// and an idle partition would otherwise lose its committed offset and
/// state pointer), or its state was saved anew (fed in process, it changes
/// without reading its topic: the commit is what points at the new state).
pub(super) fn to_commit(next: Option<i64>, committed: Option<i64>, again: bool) -> Option<i64> {
    next.filter(|n| again || committed != Some(*n))
}

/// A transaction's commit marker is never handed over, so an idle
/// partition's last record + 1 stops a marker or more short of the end (a
/// repartition topic is written in transactions), and a lag monitor would
/// show that lag for good: each idle partition moves to the consumer's
/// position where that is past it.
pub(super) fn past_markers(parts: &mut [PartitionPipeline], source: &mut dyn Source) {
    let idle: Vec<usize> =
        (0..parts.len()).filter(|&s| !parts[s].has_pending() && parts[s].next_offset().is_some()).collect();
    if idle.is_empty() {
        return;
    }
    let Some(offsets) = source.offsets_mut() else { return };
    for (&slot, position) in idle.iter().zip(offsets.consumed_positions(&idle)) {
        if let Some(position) = position {
            parts[slot].passed(position);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::to_commit;

    #[test]
    fn idle_partitions_are_committed_again_when_a_refresh_is_due() {
        assert_eq!(to_commit(Some(10), Some(5), false), Some(10), "moved");
        assert_eq!(to_commit(Some(10), Some(10), false), None, "idle, no refresh due");
        assert_eq!(to_commit(Some(10), Some(10), true), Some(10), "idle, refreshed");
        assert_eq!(to_commit(None, None, true), None, "nothing consumed and nothing committed");
    }
}
