//! The wiring of a job, worked out before anything is opened: which plan
//! reads which topic, how the partitions of a stage number as upstreams of
//! the exchange it writes, which core owns which partitions, and where each
//! partition's pipeline sits among a core's. Pure: the worker's cores, the
//! golden runner and the benchmarks build their stages from it, so the
//! order they read and number things in is the one the cluster uses (as
//! RisingWave's `from_proto` builders and Arroyo's logical-to-physical
//! program keep wiring apart from the operators' I/O).

use std::ops::Range;
use std::sync::Arc;

use sluice_crds::{SourcePartitions, SourceSpec, StartFrom, WorkerConfig, assign};
use sluice_plan::{Dataflow, OperatorPlan, Plan, StageOutput};

use crate::Error;
use crate::source::TopicInput;

/// One topic a core reads some partitions of.
#[derive(Debug, Clone)]
pub struct CoreInput {
    /// The stage whose engines process it.
    pub stage: usize,
    /// The plan its partitions run: a source's own (stage 0, branches) or
    /// the stage's.
    pub plan: Arc<Plan>,
    /// The source it is; none for a repartition topic.
    pub source: Option<SourceSpec>,
    pub topic: String,
    /// This core's partitions of it (none in a [`Topology`], which is not
    /// shared among cores yet).
    pub partitions: Vec<i32>,
    /// How many partitions the topic has.
    pub total: i32,
    /// Its partition `p` is upstream partition `upstream_offset + p` of the
    /// exchange its stage writes.
    pub upstream_offset: u32,
    /// For a repartition topic: how many upstream partitions write it.
    pub upstreams: Option<usize>,
    /// For a repartition topic: the names of the values of its rows (the
    /// previous stage's outputs, in order); empty for a source.
    pub writer: Vec<String>,
}

impl CoreInput {
    /// Whether it is a repartition topic (rows another stage wrote).
    pub fn reads_exchange(&self) -> bool {
        self.source.is_none()
    }
}

/// What a job reads, stage by stage: stage 0's source, or a later stage's
/// repartition topic; then what the branches beside the stage read (the
/// sources of UNION ALL branches and of the right sides of joins, or the
/// stage's own repartition topic again), whose partitions follow the
/// stage's own as upstreams of what it writes.
#[derive(Debug, Clone)]
pub struct Topology {
    pub inputs: Vec<CoreInput>,
    /// How many partitions each repartition topic has.
    pub exchange_partitions: i32,
}

impl Topology {
    /// The topology of `dataflow` over `sources`, `partitions_of` giving
    /// each source's partition count by name; repartition topics get
    /// `repartition_partitions`, or as many partitions as the largest
    /// source, and the names `repartition_topic` gives each stage's.
    pub fn new(
        dataflow: &Dataflow,
        sources: &[SourceSpec],
        partitions_of: impl Fn(&str) -> Option<i32>,
        repartition_partitions: Option<i32>,
        repartition_topic: impl Fn(usize) -> String,
    ) -> Result<Self, Error> {
        let source_of = |plan: &Plan| -> Result<(SourceSpec, i32), Error> {
            let name = &plan.source.name;
            let spec = sources
                .iter()
                .find(|s| s.name.eq_ignore_ascii_case(name))
                .cloned()
                .ok_or_else(|| Error::Config(format!("source {name} not declared")))?;
            let total = partitions_of(&spec.name)
                .ok_or_else(|| Error::Config(format!("no partition count for source {name}")))?;
            Ok((spec, total))
        };
        let mut max_partitions = 1;
        for plan in dataflow.source_plans() {
            max_partitions = max_partitions.max(source_of(plan)?.1);
        }
        let exchange_partitions = repartition_partitions.unwrap_or(max_partitions).max(1);
        let mut inputs: Vec<CoreInput> = Vec::new();
        // How many upstream partitions write the exchange the stage reads.
        let mut upstreams = 0u32;
        for (s, stage) in dataflow.stages.iter().enumerate() {
            // An exchange's rows are the previous stage's outputs, in order.
            let writer: Vec<String> = s
                .checked_sub(1)
                .map(|w| dataflow.stages[w].plan.outputs.iter().map(|o| o.name.clone()).collect())
                .unwrap_or_default();
            // Each plan, and whether it reads the stage's repartition topic.
            let plans =
                std::iter::once((&stage.plan, s > 0)).chain(dataflow.beside(s).map(|b| (&b.plan, b.reads_exchange)));
            let mut upstream_offset = 0u32;
            for (plan, reads_exchange) in plans {
                let input = if reads_exchange {
                    CoreInput {
                        stage: s,
                        plan: Arc::new(plan.clone()),
                        source: None,
                        topic: repartition_topic(s),
                        partitions: Vec::new(),
                        total: exchange_partitions,
                        upstream_offset,
                        upstreams: Some(usize::try_from(upstreams).unwrap_or(0)),
                        writer: writer.clone(),
                    }
                } else {
                    let (spec, total) = source_of(plan)?;
                    CoreInput {
                        stage: s,
                        plan: Arc::new(plan.clone()),
                        topic: spec.topic().to_owned(),
                        source: Some(spec),
                        partitions: Vec::new(),
                        total,
                        upstream_offset,
                        upstreams: None,
                        writer: Vec::new(),
                    }
                };
                upstream_offset += u32::try_from(input.total).unwrap_or(0);
                inputs.push(input);
            }
            upstreams = upstream_offset;
        }
        check_sources(&inputs)?;
        Ok(Self { inputs, exchange_partitions })
    }

    /// The inputs of stage `s`: the stage's own first, then its branches'.
    pub fn stage(&self, s: usize) -> impl Iterator<Item = &CoreInput> {
        self.inputs.iter().filter(move |i| i.stage == s)
    }

    /// Whether every input is local (a file, the generator, an exchange in
    /// process): a run without a broker.
    pub fn local(&self) -> bool {
        self.inputs.iter().all(|i| i.source.as_ref().is_none_or(|s| s.kafka.is_none()))
    }

    /// Per core of worker `ordinal` (of `workers` with `cores` each): its
    /// inputs, each with the partitions the core owns. Every topic's
    /// partitions go to cores by the one function the operator reports
    /// (`sluice_crds::assign`), the repartition topics' alike.
    pub fn for_worker(&self, workers: i32, cores: i32, ordinal: i32) -> Result<Vec<Vec<CoreInput>>, Error> {
        let topics: Vec<SourcePartitions> =
            self.inputs.iter().map(|i| SourcePartitions { source: i.topic.clone(), partitions: i.total }).collect();
        let assignment = assign(&topics, workers, cores);
        let mine = assignment.worker(ordinal).ok_or_else(|| {
            Error::Config(format!("this worker's ordinal is {ordinal} but the job has {workers} worker(s)"))
        })?;
        Ok(mine
            .cores
            .iter()
            .map(|c| {
                let mut inputs = self.inputs.clone();
                for (input, owned) in inputs.iter_mut().zip(&c.partitions) {
                    input.partitions.clone_from(&owned.partitions);
                }
                inputs
            })
            .collect())
    }
}

/// Where input `i`'s state is checkpointed: the job's state topic for
/// stage 0's source, one per later stage's repartition topic, one per
/// branch source that keeps state (a windowed side of a join).
pub fn state_topic(inputs: &[CoreInput], i: usize, config: &WorkerConfig) -> String {
    let input = &inputs[i];
    if input.source.is_none() || i == 0 {
        return config.stage_state_topic(input.stage);
    }
    let branch = inputs[..i].iter().filter(|x| x.source.is_some()).count();
    format!("{}-branch-{branch}", config.state_topic())
}

/// One consumer reads all of a core's partitions, so a job's Kafka sources
/// must be on one cluster, with the same client settings; and a job reads
/// either Kafka topics or local sources, not both.
fn check_sources(inputs: &[CoreInput]) -> Result<(), Error> {
    let specs: Vec<&SourceSpec> = inputs.iter().filter_map(|i| i.source.as_ref()).collect();
    let Some((first, rest)) = specs.split_first() else { return Ok(()) };
    for other in rest {
        match (&first.kafka, &other.kafka) {
            (Some(a), Some(b))
                if a.bootstrap_servers != b.bootstrap_servers
                    || a.properties != b.properties
                    || a.secret_ref != b.secret_ref
                    || a.authentication != b.authentication
                    || a.tls != b.tls =>
            {
                return Err(Error::Config(format!(
                    "sources {} and {} are read by one consumer per core: they need the same bootstrapServers, \
                     properties, secretRef, authentication and tls",
                    first.name, other.name
                )));
            }
            (Some(_), None) | (None, Some(_)) => {
                return Err(Error::Config(format!(
                    "sources {} and {}: a job reads Kafka topics or local sources (file, datagen), not both",
                    first.name, other.name
                )));
            }
            _ => {}
        }
    }
    Ok(())
}

/// Per slot of what a core's source reads, the pipeline slots its records
/// go to (see `shared_source`).
pub type Readers = Vec<Vec<usize>>;

/// Where a core's partitions sit: one pipeline per owned partition, in
/// input order and each input's partitions in order (a slot), and what
/// follows from sharing a source among plans.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Layout {
    /// Per input, its partitions' slots.
    pub input_slots: Vec<Range<usize>>,
    /// Per stage, the slots of its inputs.
    pub stage_slots: Vec<Range<usize>>,
    /// Per input, whether the core's source reads it: each topic once, a
    /// later input of a source an earlier one reads is not read again.
    pub read: Vec<bool>,
    /// If some topic is read by more than one plan: per slot of what is
    /// read, the pipeline slots its records go to, the one that commits
    /// first (the plan that keeps state) first.
    pub readers: Option<Readers>,
    /// Per slot, the slots checkpointed with it: the exchange-fed plans
    /// that read its input after it (one commit of that input carries one
    /// state pointer).
    pub companions: Vec<Vec<usize>>,
    /// Per slot, whether its records are counted by another slot's
    /// pipeline (a second reader of a partition).
    pub counted_elsewhere: Vec<bool>,
    /// Per input, whether its partitions' state is checkpointed: its plan
    /// keeps state, or it numbers the rows it writes to an exchange.
    pub checkpointed: Vec<bool>,
}

impl Layout {
    /// The layout of a core's `inputs` to `dataflow`'s stages.
    pub fn new(inputs: &[CoreInput], dataflow: &Dataflow) -> Result<Self, Error> {
        let stages = &dataflow.stages;
        let mut input_slots = Vec::with_capacity(inputs.len());
        let mut stage_slots: Vec<Range<usize>> = stages.iter().map(|_| 0..0).collect();
        let mut next = 0;
        for input in inputs {
            let slots = next..next + input.partitions.len();
            let stage = stage_slots
                .get_mut(input.stage)
                .ok_or_else(|| Error::Internal(format!("an input of stage {} of {}", input.stage, stages.len())))?;
            if stage.start == stage.end {
                *stage = slots.clone();
            }
            stage.end = slots.end;
            next = slots.end;
            input_slots.push(slots);
        }
        let (read, readers) = shared_reads(inputs, &input_slots)?;
        let slot_input: Vec<usize> =
            input_slots.iter().enumerate().flat_map(|(i, r)| r.clone().map(move |_| i)).collect();
        let mut companions: Vec<Vec<usize>> = vec![Vec::new(); next];
        let mut counted_elsewhere = vec![false; next];
        for of in readers.iter().flatten() {
            for &slot in of.iter().skip(1) {
                counted_elsewhere[slot] = true;
            }
            if let Some((&first, rest)) = of.split_first() {
                companions[first] =
                    rest.iter().copied().filter(|&c| inputs[slot_input[c]].upstreams.is_some()).collect();
            }
        }
        // A plan fed by an exchange that writes one keeps its upstream
        // positions and its output count even when its operator keeps
        // nothing: a replay after a restart must number its rows as
        // before, or the next stage would take them for ones it already
        // had. Such a plan reading what another reads first is
        // checkpointed with that one (`companions`).
        let checkpointed = inputs
            .iter()
            .zip(&read)
            .map(|(input, read)| {
                let stateful = !matches!(input.plan.operator, OperatorPlan::Stateless);
                let numbers_rows = input.reads_exchange()
                    && *read
                    && stages.get(input.stage).is_some_and(|s| s.output == StageOutput::Exchange);
                stateful || numbers_rows
            })
            .collect();
        Ok(Self { input_slots, stage_slots, read, readers, companions, counted_elsewhere, checkpointed })
    }
}

/// Which inputs the core's source reads, and, if some topic is read by
/// more than one input, per slot of what is read the pipeline slots its
/// records go to (see [`Layout`]).
fn shared_reads(inputs: &[CoreInput], input_slots: &[Range<usize>]) -> Result<(Vec<bool>, Option<Readers>), Error> {
    let first_reader: Vec<Option<usize>> = inputs
        .iter()
        .enumerate()
        .map(|(i, input)| match &input.source {
            Some(spec) => inputs[..i]
                .iter()
                .position(|o| o.source.as_ref().is_some_and(|s| s.name.eq_ignore_ascii_case(&spec.name))),
            // A branch reading the repartition topic its stage reads.
            None => inputs[..i].iter().position(|o| o.source.is_none() && o.topic == input.topic),
        })
        .collect();
    let read: Vec<bool> = first_reader.iter().map(Option::is_none).collect();
    if read.iter().all(|r| *r) {
        return Ok((read, None));
    }
    let mut readers = Vec::new();
    for (i, input) in inputs.iter().enumerate().filter(|(i, _)| read[*i]) {
        let mut group = vec![i];
        group.extend((i + 1..inputs.len()).filter(|&t| first_reader[t] == Some(i)));
        if let Some(t) = group.iter().find(|&&t| inputs[t].partitions != input.partitions) {
            return Err(Error::Internal(format!(
                "two plans read source {} but own different partitions of it ({:?}, {:?})",
                input.topic, input.partitions, inputs[*t].partitions
            )));
        }
        if let Some(k) = group.iter().position(|&g| !matches!(inputs[g].plan.operator, OperatorPlan::Stateless)) {
            group.swap(0, k);
        }
        for k in 0..input.partitions.len() {
            readers.push(group.iter().map(|&g| input_slots[g].start + k).collect());
        }
    }
    Ok((read, Some(readers)))
}

/// The Kafka topics a core's consumer reads: its inputs that are read, a
/// repartition topic from its start (everything on it was written for
/// this job), a source from its `startFrom`; bounded runs stop at the end
/// offsets of the sources only.
pub fn topic_inputs(inputs: &[CoreInput], read: &[bool], bounded: bool) -> Vec<TopicInput> {
    inputs
        .iter()
        .zip(read)
        .filter(|(_, read)| **read)
        .map(|(i, _)| TopicInput {
            topic: i.topic.clone(),
            partitions: i.partitions.clone(),
            topic_partitions: i.total,
            start_from: i.source.as_ref().and_then(|s| s.kafka.as_ref()).map_or(StartFrom::Earliest, |k| k.start_from),
            bounded: bounded && i.source.is_some(),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use sluice_crds::{ColumnType, FileSource, SourceSpec};
    use sluice_sql::plan_dataflow;

    use super::*;

    fn source(name: &str, columns: &[(&str, ColumnType, bool)]) -> SourceSpec {
        SourceSpec {
            file: Some(FileSource { path: format!("/data/{name}.jsonl") }),
            ..SourceSpec::table(name, columns)
        }
    }

    fn orders() -> SourceSpec {
        use ColumnType::{Bigint, Double};
        source("orders", &[("order_id", Bigint, true), ("customer_id", Bigint, true), ("amount", Double, true)])
    }

    fn customers() -> SourceSpec {
        use ColumnType::{Bigint, String};
        source("customers", &[("id", Bigint, true), ("name", String, true)])
    }

    const JOIN: &str = "SELECT o.order_id, c.name FROM orders o JOIN customers c ON o.customer_id = c.id";
    const REKEYED: &str = "SELECT customer_id, SUM(amount) AS total FROM orders GROUP BY customer_id";

    /// `orders` has 3 partitions, `customers` 2.
    fn wired(sql: &str, sources: &[SourceSpec], repartition: Option<i32>) -> (Dataflow, Topology) {
        let counts = |name: &str| match name {
            "orders" => Some(3),
            "customers" => Some(2),
            _ => None,
        };
        let flow = plan_dataflow(sql, sources, 3).unwrap();
        let topology = Topology::new(&flow, sources, counts, repartition, |s| format!("job-repartition-{s}")).unwrap();
        (flow, topology)
    }

    #[test]
    fn a_stages_branches_number_after_it_and_the_next_stage_reads_them_all() {
        let (flow, t) = wired(JOIN, &[orders(), customers()], None);
        let seen: Vec<(usize, &str, i32, u32, Option<usize>)> =
            t.inputs.iter().map(|i| (i.stage, i.topic.as_str(), i.total, i.upstream_offset, i.upstreams)).collect();
        assert_eq!(
            seen,
            [
                (0, "/data/orders.jsonl", 3, 0, None),
                (0, "/data/customers.jsonl", 2, 3, None),
                // Its partitions are read by 3 + 2 upstream partitions.
                (1, "job-repartition-1", 3, 0, Some(5)),
            ],
            "{:#?}",
            t.inputs
        );
        let written: Vec<String> = flow.stages[0].plan.outputs.iter().map(|o| o.name.clone()).collect();
        assert_eq!(t.inputs[2].writer, written, "an exchange's rows are the previous stage's outputs");
        assert!(t.inputs[..2].iter().all(|i| i.writer.is_empty() && !i.reads_exchange()));
        assert_eq!(t.stage(1).count(), 1);
        assert!(t.local());
        // Repartition topics take the partition count they are given.
        assert_eq!(wired(JOIN, &[orders(), customers()], Some(8)).1.inputs[2].total, 8);
    }

    #[test]
    fn every_partition_of_every_topic_goes_to_exactly_one_core() {
        let (_, t) = wired(JOIN, &[orders(), customers()], Some(4));
        let mut owners: Vec<Vec<usize>> = t.inputs.iter().map(|i| vec![0; usize::try_from(i.total).unwrap()]).collect();
        for ordinal in 0..2 {
            let cores = t.for_worker(2, 2, ordinal).unwrap();
            assert_eq!(cores.len(), 2);
            for inputs in cores {
                assert_eq!(inputs.len(), t.inputs.len());
                for (i, input) in inputs.iter().enumerate() {
                    for &p in &input.partitions {
                        owners[i][usize::try_from(p).unwrap()] += 1;
                    }
                }
            }
        }
        assert!(owners.iter().flatten().all(|&n| n == 1), "{owners:?}");
        let e = t.for_worker(2, 2, 2).unwrap_err().to_string();
        assert!(e.contains("ordinal is 2 but the job has 2 worker(s)"), "{e}");
    }

    #[test]
    fn an_undeclared_source_or_kafka_beside_a_file_is_refused_with_names() {
        let flow = plan_dataflow(JOIN, &[orders(), customers()], 3).unwrap();
        let e = Topology::new(&flow, &[orders()], |_| Some(1), None, |s| s.to_string()).unwrap_err().to_string();
        assert!(e.contains("source customers not declared"), "{e}");
        let e =
            Topology::new(&flow, &[orders(), customers()], |n| (n == "orders").then_some(1), None, |s| s.to_string())
                .unwrap_err()
                .to_string();
        assert!(e.contains("no partition count for source customers"), "{e}");
        let kafka: SourceSpec = serde_json::from_value(serde_json::json!({
            "name": "customers",
            "kafka": { "bootstrapServers": "127.0.0.1:9092", "topic": "customers" },
            "schema": { "columns": [ { "name": "id", "type": "bigint" }, { "name": "name", "type": "string" } ] }
        }))
        .unwrap();
        let e = Topology::new(&flow, &[orders(), kafka], |_| Some(1), None, |s| s.to_string()).unwrap_err().to_string();
        assert!(e.contains("sources orders and customers: a job reads Kafka topics or local sources"), "{e}");
    }

    #[test]
    fn a_cores_slots_follow_its_inputs_and_only_state_is_checkpointed() {
        let (flow, t) = wired(REKEYED, &[orders()], Some(4));
        let mut inputs = t.inputs;
        inputs[0].partitions = vec![0, 2];
        inputs[1].partitions = vec![1, 3];
        let layout = Layout::new(&inputs, &flow).unwrap();
        assert_eq!(layout.input_slots, [0..2, 2..4]);
        assert_eq!(layout.stage_slots, [0..2, 2..4]);
        assert_eq!(layout.read, [true, true]);
        assert_eq!(layout.readers, None);
        // The stateless first stage keeps nothing; the aggregate does.
        assert_eq!(layout.checkpointed, [false, true]);
        assert_eq!(layout.counted_elsewhere, [false; 4]);
    }

    #[test]
    fn a_core_hands_over_the_first_exchange_where_it_owns_an_upstream_and_the_partition() {
        use crate::runtime::direct::Direct;
        let (flow, t) = wired(REKEYED, &[orders()], Some(4));
        let mut inputs = t.inputs;
        inputs[0].partitions = vec![0, 2];
        inputs[1].partitions = vec![1, 3];
        let slots = Layout::new(&inputs, &flow).unwrap().input_slots;
        let d = Direct::plan(&inputs, &slots, &flow.stages, 4).unwrap();
        // Exchange partitions 1 and 3 are this core's slots 2 and 3.
        assert_eq!(d.here, [vec![], vec![2], vec![], vec![3]]);
        assert_eq!(d.exchange_slots(), [2, 3]);
        assert_eq!(d.sources, [0, 1]);
        // Nothing to hand over without an upstream partition, or without an
        // exchange partition, of this core's.
        let mut none = inputs.clone();
        none[0].partitions.clear();
        assert_eq!(Direct::plan(&none, &Layout::new(&none, &flow).unwrap().input_slots, &flow.stages, 4), None);
        let mut none = inputs;
        none[1].partitions.clear();
        assert_eq!(Direct::plan(&none, &Layout::new(&none, &flow).unwrap().input_slots, &flow.stages, 4), None);
        // A join's two sources are both upstream of its exchange: both held.
        let (flow, t) = wired(JOIN, &[orders(), customers()], None);
        let mut inputs = t.inputs;
        inputs[0].partitions = vec![0, 1, 2];
        inputs[1].partitions = vec![1];
        inputs[2].partitions = vec![0];
        let slots = Layout::new(&inputs, &flow).unwrap().input_slots;
        let d = Direct::plan(&inputs, &slots, &flow.stages, 3).unwrap();
        assert_eq!(d.here, [vec![4], vec![], vec![]]);
        assert_eq!(d.sources, [0, 1, 2, 3]);
        // A query of one stage has no exchange.
        let flow = plan_dataflow("SELECT order_id FROM orders", &[orders()], 3).unwrap();
        let t = Topology::new(&flow, &[orders()], |_| Some(3), None, |s| s.to_string()).unwrap();
        let mut inputs = t.inputs;
        inputs[0].partitions = vec![0];
        let slots = Layout::new(&inputs, &flow).unwrap().input_slots;
        assert_eq!(Direct::plan(&inputs, &slots, &flow.stages, 3), None);
    }

    #[test]
    fn a_source_two_plans_read_is_read_once_for_both_stateful_plan_first() {
        let (flow, t) = wired(REKEYED, &[orders()], Some(4));
        // Stage 0's source read again beside it by a plan that keeps state.
        let mut forward = t.inputs[0].clone();
        forward.partitions = vec![0, 1];
        let mut stateful = forward.clone();
        stateful.plan = Arc::clone(&t.inputs[1].plan);
        let inputs = [forward, stateful];
        let layout = Layout::new(&inputs, &flow).unwrap();
        assert_eq!(layout.read, [true, false], "the second reader is not read again");
        assert_eq!(layout.readers, Some(vec![vec![2, 0], vec![3, 1]]), "the stateful reader commits first");
        assert_eq!(layout.counted_elsewhere, [true, true, false, false]);
        assert_eq!(layout.checkpointed, [false, true]);
        let mut other = inputs;
        other[1].partitions = vec![0];
        let e = Layout::new(&other, &flow).unwrap_err().to_string();
        assert!(e.contains("own different partitions"), "{e}");
    }
}
