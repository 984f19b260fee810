//! Deterministic partition ownership: partition → worker → core.
//!
//! One pure function decides which engine thread owns which partition, from
//! nothing but (partitions per source, workers, cores per worker). The
//! operator publishes its result in `status.assignment`; every worker computes
//! its own slice with the same call. No coordination is needed at run time,
//! and no partition can be read by two threads of one generation.
//!
//! Rule: there are `workers × cores` engine slots; partition `p` of every
//! source goes to slot `p % slots` (so equal partition numbers of different
//! sources meet on one thread), and slot `s` lives on worker `s % workers`,
//! core `s / workers` — workers fill up before cores do, which spreads load
//! across machines when there are fewer partitions than slots.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// A source and how many partitions its topic has.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SourcePartitions {
    pub source: String,
    pub partitions: i32,
}

/// Which partitions of every source each worker and core owns.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Assignment {
    pub workers: Vec<WorkerAssignment>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct WorkerAssignment {
    /// StatefulSet ordinal of the worker pod.
    pub worker: i32,
    pub cores: Vec<CoreAssignment>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CoreAssignment {
    /// Engine thread index within the worker (pinned to one CPU core).
    pub core: i32,
    pub partitions: Vec<PartitionSet>,
}

/// Partitions of one source.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PartitionSet {
    pub source: String,
    pub partitions: Vec<i32>,
}

/// Computes the ownership of every partition. `workers` and `cores` below 1
/// are treated as 1 (the CRD rejects them; this keeps the function total).
pub fn assign(sources: &[SourcePartitions], workers: i32, cores: i32) -> Assignment {
    let workers = workers.max(1);
    let cores = cores.max(1);
    let slots = i64::from(workers) * i64::from(cores);
    let mut result = Assignment {
        workers: (0..workers)
            .map(|worker| WorkerAssignment {
                worker,
                cores: (0..cores)
                    .map(|core| CoreAssignment {
                        core,
                        partitions: sources
                            .iter()
                            .map(|s| PartitionSet { source: s.source.clone(), partitions: Vec::new() })
                            .collect(),
                    })
                    .collect(),
            })
            .collect(),
    };
    for (source_index, source) in sources.iter().enumerate() {
        for partition in 0..source.partitions.max(0) {
            let slot = i64::from(partition) % slots;
            // Both casts are lossless: slot < workers * cores <= i32::MAX².
            let worker = usize::try_from(slot % i64::from(workers)).unwrap_or_default();
            let core = usize::try_from(slot / i64::from(workers)).unwrap_or_default();
            result.workers[worker].cores[core].partitions[source_index].partitions.push(partition);
        }
    }
    result
}

impl Assignment {
    /// The cores of one worker, or none if the ordinal is out of range.
    pub fn worker(&self, ordinal: i32) -> Option<&WorkerAssignment> {
        self.workers.iter().find(|w| w.worker == ordinal)
    }

    /// Number of engine threads that own no partition at all.
    pub fn idle_cores(&self) -> usize {
        self.workers
            .iter()
            .flat_map(|w| &w.cores)
            .filter(|c| c.partitions.iter().all(|p| p.partitions.is_empty()))
            .count()
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    fn sources(partitions: &[i32]) -> Vec<SourcePartitions> {
        partitions
            .iter()
            .enumerate()
            .map(|(i, &p)| SourcePartitions { source: format!("s{i}"), partitions: p })
            .collect()
    }

    /// Every (source, partition) pair is owned by exactly one (worker, core),
    /// for every shape from 1×1 up: the invariant the whole design rests on.
    #[test]
    fn every_partition_has_exactly_one_owner() {
        for workers in 1..=5 {
            for cores in 1..=4 {
                for parts in [1, 2, 3, 7, 8, 12, 64] {
                    let srcs = sources(&[parts, parts / 2 + 1]);
                    let a = assign(&srcs, workers, cores);
                    let mut owners: BTreeMap<(String, i32), Vec<(i32, i32)>> = BTreeMap::new();
                    for w in &a.workers {
                        for c in &w.cores {
                            for set in &c.partitions {
                                for &p in &set.partitions {
                                    owners.entry((set.source.clone(), p)).or_default().push((w.worker, c.core));
                                }
                            }
                        }
                    }
                    for s in &srcs {
                        for p in 0..s.partitions {
                            let o = owners.get(&(s.source.clone(), p)).cloned().unwrap_or_default();
                            assert_eq!(o.len(), 1, "{workers}x{cores}, {} partition {p}: owners {o:?}", s.source);
                        }
                    }
                    let total: usize = owners.values().map(Vec::len).sum();
                    assert_eq!(total, srcs.iter().map(|s| s.partitions as usize).sum::<usize>());
                }
            }
        }
    }

    #[test]
    fn workers_fill_before_cores_and_sources_are_co_partitioned() {
        // 4 partitions, 2 workers × 2 cores: one partition per thread, and
        // partitions 0 and 1 land on different machines.
        let a = assign(&sources(&[4, 4]), 2, 2);
        let owned = |w: usize, c: usize, s: usize| a.workers[w].cores[c].partitions[s].partitions.clone();
        assert_eq!(owned(0, 0, 0), vec![0]);
        assert_eq!(owned(1, 0, 0), vec![1]);
        assert_eq!(owned(0, 1, 0), vec![2]);
        assert_eq!(owned(1, 1, 0), vec![3]);
        for w in 0..2 {
            for c in 0..2 {
                assert_eq!(owned(w, c, 0), owned(w, c, 1), "same partition number, same thread");
            }
        }
        assert_eq!(a.idle_cores(), 0);
    }

    #[test]
    fn fewer_partitions_than_slots_leaves_idle_cores() {
        let a = assign(&sources(&[3]), 2, 2);
        assert_eq!(a.idle_cores(), 1);
        assert!(a.worker(1).is_some());
        assert!(a.worker(2).is_none());
    }

    #[test]
    fn is_deterministic() {
        let s = sources(&[16, 5]);
        assert_eq!(assign(&s, 3, 2), assign(&s, 3, 2));
    }
}
