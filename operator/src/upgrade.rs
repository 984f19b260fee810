//! Which consumer group — and so which offsets and state — a job's query
//! runs with, when the query changes under a running job.
//!
//! The group is recorded in the job's status once the job has run, and is
//! kept for as long as the query's state means the same (its
//! [`query_state`] identity): edits to whitespace, comments, filters, the
//! SELECT list or sources the query does not read continue where the job
//! was. An edit that changes the state is refused (`KeepState`, the old
//! workers keep running) or starts over in a new group (`Fresh`). Flink
//! and ksqlDB users know the alternative: every edit silently replays the
//! topic or loses its state.

use sha2::{Digest, Sha256};
use sluice_crds::{StreamJob, UpgradeMode, contract};
use sluice_plan::{Dataflow, state_difference, state_layout};

use crate::validate::hex8;

/// The state a query keeps, and its identity.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueryState {
    /// Hash of `layout`: names the job's first consumer group.
    pub identity: String,
    /// One line per stateful operator ([`state_layout`]).
    pub layout: Vec<String>,
}

pub fn query_state(dataflow: &Dataflow) -> QueryState {
    let layout = state_layout(dataflow);
    let mut h = Sha256::new();
    for line in &layout {
        h.update(line.as_bytes());
        h.update([0]);
    }
    QueryState { identity: hex8(&h.finalize()), layout }
}

/// How the job's query takes over.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Upgrade {
    /// The group the job runs in: its own (new job), or the one it ran in.
    Continue { group: String },
    /// The state differs and `upgradeMode: Fresh`: a new group.
    Fresh { group: String, previous: String, why: String },
    /// The state differs and `upgradeMode: KeepState`: nothing changes.
    Refused { message: String },
}

pub fn decide(job: &StreamJob, query: &QueryState) -> Upgrade {
    let namespace = job.metadata.namespace.as_deref().unwrap_or("default");
    let name = job.metadata.name.as_deref().unwrap_or_default();
    let status = job.status.clone().unwrap_or_default();
    let Some(group) = status.consumer_group else {
        return Upgrade::Continue { group: contract::consumer_group(namespace, name, Some(&query.identity)) };
    };
    // A job an earlier operator release started records no identity: it
    // keeps its group (the workers still refuse a checkpoint that does not
    // fit the query).
    let Some(running) = status.query_identity else { return Upgrade::Continue { group } };
    if running == query.identity {
        return Upgrade::Continue { group };
    }
    let why = state_difference(&status.state_layout, &query.layout);
    match job.spec.upgrade_mode {
        UpgradeMode::KeepState => Upgrade::Refused {
            message: format!(
                "the edited query keeps different state than the running one ({why}): its saved state cannot be \
                 carried over, so the running query keeps running in consumer group {group}. Revert the edit, or set \
                 spec.upgradeMode: Fresh to start the new query over from its sources' startFrom"
            ),
        },
        UpgradeMode::Fresh => {
            // Unique to this job object and edit: a query the job ran
            // before, or a job of the same name deleted earlier, left its
            // group's offsets behind, and a fresh start must not find them.
            let mut h = Sha256::new();
            h.update(query.identity.as_bytes());
            h.update(job.metadata.uid.as_deref().unwrap_or_default().as_bytes());
            h.update(job.metadata.generation.unwrap_or(0).to_le_bytes());
            let fresh = format!("{}-{}", query.identity, &hex8(&h.finalize())[..4]);
            Upgrade::Fresh { group: contract::consumer_group(namespace, name, Some(&fresh)), previous: group, why }
        }
    }
}

#[cfg(test)]
mod tests {
    use sluice_crds::StreamJobStatus;

    use super::*;
    use crate::render::fixtures::job;

    fn state(j: &StreamJob) -> QueryState {
        query_state(&crate::validate::validate(&j.spec).unwrap())
    }

    /// A job that ran records what it ran; `decide` then compares with it.
    fn ran(mut j: StreamJob) -> StreamJob {
        let q = state(&j);
        let group = match decide(&j, &q) {
            Upgrade::Continue { group } => group,
            other => panic!("{other:?}"),
        };
        j.status = Some(StreamJobStatus {
            consumer_group: Some(group),
            query_identity: Some(q.identity),
            state_layout: q.layout,
            ..Default::default()
        });
        j.metadata.uid = Some("4d1c".into());
        j.metadata.generation = Some(3);
        j
    }

    #[test]
    fn a_new_job_gets_a_group_named_from_its_query_state() {
        let j = job("s2-group-by.yaml");
        let Upgrade::Continue { group } = decide(&j, &state(&j)) else { panic!() };
        assert_eq!(group, format!("sluice.prod.s2-group-by.{}", state(&j).identity));
    }

    #[test]
    fn an_edit_that_keeps_the_state_keeps_the_group() {
        let mut j = ran(job("s2-group-by.yaml"));
        let group = j.status.as_ref().unwrap().consumer_group.clone().unwrap();
        j.spec.sql = format!(
            "-- a comment\n{}\nHAVING COUNT(*) > 0",
            j.spec.sql.replace("FROM market_data", "FROM market_data WHERE quantity > 0")
        );
        assert_eq!(decide(&j, &state(&j)), Upgrade::Continue { group });
    }

    #[test]
    fn an_edit_that_changes_the_state_is_refused_saying_what_differs() {
        let mut j = ran(job("s2-group-by.yaml"));
        j.spec.sql = j.spec.sql.replace("SUM(quantity)", "MAX(quantity)");
        let Upgrade::Refused { message } = decide(&j, &state(&j)) else { panic!() };
        assert!(message.contains("stage 0 (aggregate): aggregates"), "{message}");
        assert!(message.contains("Max") && message.contains("upgradeMode: Fresh"), "{message}");
    }

    #[test]
    fn fresh_starts_a_group_no_earlier_run_used() {
        let mut j = ran(job("s2-group-by.yaml"));
        let previous = j.status.as_ref().unwrap().consumer_group.clone().unwrap();
        j.spec.upgrade_mode = UpgradeMode::Fresh;
        j.spec.sql = j.spec.sql.replace("SUM(quantity)", "MAX(quantity)");
        let q = state(&j);
        let Upgrade::Fresh { group, previous: p, why } = decide(&j, &q) else { panic!() };
        assert_eq!(p, previous);
        assert!(why.contains("aggregates"), "{why}");
        assert!(group.starts_with(&format!("sluice.prod.s2-group-by.{}-", q.identity)), "{group}");
        // Back to the first query, later: not the first query's group.
        let mut back = j;
        back.spec.sql = job("s2-group-by.yaml").spec.sql;
        back.status.as_mut().unwrap().query_identity = Some(q.identity.clone());
        back.status.as_mut().unwrap().state_layout = q.layout;
        back.metadata.generation = Some(5);
        let Upgrade::Fresh { group: again, .. } = decide(&back, &state(&back)) else { panic!() };
        assert_ne!(again, previous);
    }

    #[test]
    fn a_job_started_by_an_earlier_release_keeps_its_group() {
        let mut j = job("s2-group-by.yaml");
        j.status = Some(StreamJobStatus {
            consumer_group: Some("sluice.prod.s2-group-by.0badf00d".into()),
            ..Default::default()
        });
        assert_eq!(decide(&j, &state(&j)), Upgrade::Continue { group: "sluice.prod.s2-group-by.0badf00d".into() });
    }
}
