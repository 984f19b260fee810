//! A query as a chain of stages joined by exchanges.
//!
//! A stage is a [`Plan`] run by one engine per partition of its input. When
//! the operator of a query needs its rows grouped by a key its source is
//! not partitioned by, the query is cut in two: the first stage filters
//! and forwards the columns the rest needs, keyed by the state key; an
//! exchange moves every record to the partition its key hashes to
//! (`sluice_crds::partition_for_key`, Kafka's own partitioner); the second
//! stage runs the stateful operator on partitions that now hold every
//! record of a key. On a cluster the exchange is a Kafka repartition topic,
//! as in Kafka Streams; a local run exchanges in process.
//!
//! The exchange carries records in the job's JSON encoding: a stage's
//! output columns, which are plain source columns, so they round-trip
//! exactly (integers, shortest-form doubles, millisecond timestamps).

use serde::{Deserialize, Serialize};

use crate::Plan;

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Dataflow {
    /// In data order: stage 0 reads the source; each later stage reads the
    /// exchange written by the one before it; the last writes the sink.
    pub stages: Vec<Stage>,
    /// Plans over sources of their own that write where a stage writes:
    /// the other branches of a `UNION ALL`, the right side of a join (the
    /// right side of a join of a join writes beside the first join's stage).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub branches: Vec<Branch>,
}

/// A plan that reads a source and writes where stage `beside` writes (the
/// sink, or the exchange stage `beside + 1` reads), with the same output
/// columns. Its partitions follow the stage's own input partitions as
/// upstream partitions of that exchange: the stage's are upstreams 0‥n₀,
/// the first branch beside it n₀‥n₀+n₁, and so on.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Branch {
    pub plan: Plan,
    #[serde(default)]
    pub beside: usize,
    /// It reads what stage `beside` reads — the exchange stage `beside - 1`
    /// writes — rather than a source of its own: two plans over one
    /// intermediate result (Nexmark q5 joins per-window counts with their
    /// per-window maximum). Each record of that exchange is handed to both,
    /// read once (`shared_source` in the worker).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub reads_exchange: bool,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Stage {
    pub plan: Plan,
    /// Where the stage's results go.
    pub output: StageOutput,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum StageOutput {
    /// The job's sink.
    Sink,
    /// The next stage's exchange, partitioned by the plan's keys.
    Exchange,
}

impl Dataflow {
    /// A query that needs no exchange.
    pub fn single(plan: Plan) -> Self {
        Self { stages: vec![Stage { plan, output: StageOutput::Sink }], branches: Vec::new() }
    }

    /// The stage that writes the sink.
    pub fn last(&self) -> Option<&Plan> {
        self.stages.last().map(|s| &s.plan)
    }

    /// The plans that read sources: stage 0's, then the branches' that do.
    pub fn source_plans(&self) -> impl Iterator<Item = &Plan> {
        let branches = self.branches.iter().filter(|b| !b.reads_exchange).map(|b| &b.plan);
        self.stages.first().map(|s| &s.plan).into_iter().chain(branches)
    }

    /// The branches that write where stage `stage` writes.
    pub fn beside(&self, stage: usize) -> impl Iterator<Item = &Branch> {
        self.branches.iter().filter(move |b| b.beside == stage)
    }

    /// Whether records cross an exchange.
    pub fn has_exchange(&self) -> bool {
        self.stages.len() > 1
    }

    /// Whether some plan that keeps state writes an exchange. What such a
    /// plan emits depends on how its input was cut into batches, not on
    /// the input alone: an aggregate emits one coalesced change per group
    /// per batch, closes windows at batch ends. A replay after a restart
    /// cuts its backlog differently, so its rows cannot be numbered as
    /// before and recognised downstream as seen; the worker writes such an
    /// exchange in one transaction per checkpoint (read committed
    /// downstream) even at least once, so what a crash interrupted is
    /// never seen at all. A stateless plan emits per input row, in input
    /// order: its rows are numbered the same on a replay.
    pub fn has_stateful_exchange_writer(&self) -> bool {
        let writes_exchange = |stage: usize| self.stages.get(stage).is_some_and(|s| s.output == StageOutput::Exchange);
        let stateful = |p: &Plan| !matches!(p.operator, crate::OperatorPlan::Stateless);
        self.stages.iter().enumerate().any(|(i, s)| writes_exchange(i) && stateful(&s.plan))
            || self.branches.iter().any(|b| writes_exchange(b.beside) && stateful(&b.plan))
    }
}
