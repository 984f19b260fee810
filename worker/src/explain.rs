//! `sluice-worker explain`: a job's dataflow as its user reads it. Stage
//! by stage, each plan's input (a source topic or a repartition topic),
//! its predicate, its operator with keys, windows and join bounds, what it
//! emits and when, the state it keeps and where that is checkpointed, and
//! where its rows go. Pure: the text comes from the plan, the spec and the
//! topology the worker itself runs with ([`Topology`],
//! [`crate::runtime::topology::state_topic`]), so what it says is what
//! runs. Names are the user's: a column the planner added (`__k0`, a
//! partial aggregate, the join's row layout) is shown as the expression it
//! was computed from upstream.

use std::fmt::Write as _;
use std::sync::Arc;

use sluice_crds::{Delivery, LocalStateVolume, SinkSpec, SourceSpec, StartFrom, WorkerConfig};
use sluice_engine::{Engine, EngineOptions};
use sluice_plan::{
    AggFunc, AggregateCall, Dataflow, EmitMode, JoinKind, OperatorPlan, PhysExpr, Plan, RowsFunctionKind, Scalar,
    ScalarFunc, StageOutput, TableVersion, TimeWindow, expr_sql, interval_sql,
};

use crate::Error;
use crate::runtime::topology::{CoreInput, Topology, state_topic};

/// Whether a column name is one the planner made up rather than one the
/// query or a source declared: such a column is shown as what it holds.
fn made_up(name: &str) -> bool {
    let numbered = |prefix: &str| {
        name.strip_prefix(prefix).is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
    };
    name.starts_with("__") || numbered("key") || numbered("partial")
}

/// A made-up column that is not an expression of the user's: its name
/// without the planner's marks (`__family` is `family`).
fn shown_name(name: &str) -> String {
    name.strip_prefix("__").unwrap_or(name).to_owned()
}

/// Column names of one plan, resolved to the user's terms: a made-up
/// column of a repartition topic is the expression its writer computed.
struct Names<'a> {
    plan: &'a Plan,
    /// The plan that writes the repartition topic this plan reads, the
    /// one that writes what that one reads, and so on (the stages before,
    /// nearest first); empty for a plan that reads a source.
    upstream: &'a [&'a Plan],
}

impl Names<'_> {
    /// Source column `i` (or the `i - n`-th shared subexpression).
    fn source(&self, i: usize) -> String {
        let fields = &self.plan.source.schema.fields;
        let Some(field) = fields.get(i) else {
            return self.plan.shared.get(i - fields.len()).map_or_else(|| format!("#{i}"), |e| self.source_expr(e));
        };
        // An exchange's rows are read by name: the column is the writer's
        // output of that name.
        let written = self.upstream.split_first().filter(|_| made_up(&field.name)).and_then(|(writer, upstream)| {
            let o = writer.outputs.iter().position(|o| o.name == field.name)?;
            // A constant differs between the plans that write the exchange
            // (a distinct count's family): the column is named, not valued.
            (!writer.outputs[o].expr.is_literal()).then(|| Names { plan: writer, upstream }.output(o))
        });
        written.unwrap_or_else(|| shown_name(&field.name))
    }

    fn source_expr(&self, e: &PhysExpr) -> String {
        expr_sql(e, &|i| self.source(i))
    }

    /// Intermediate column `i`: what the operator made it from. An
    /// aggregate's or OVER function's column is its call (the planner
    /// names it `count`, `avg_3`); a made-up column is resolved further.
    fn intermediate(&self, i: usize) -> String {
        let Some(field) = self.plan.intermediate.fields.get(i) else { return format!("#{i}") };
        let sources = self.plan.source.schema.fields.len() + self.plan.shared.len();
        match &self.plan.operator {
            OperatorPlan::Aggregate(a) => {
                let groups = a.group_exprs.len();
                let windows = if a.window.is_some() { 2 } else { 0 };
                if let Some(call) = i.checked_sub(groups + windows).and_then(|c| a.aggregates.get(c)) {
                    return self.call(call);
                }
                match a.group_exprs.get(i) {
                    Some(g) if made_up(&field.name) => self.source_expr(g),
                    _ => field.name.clone(),
                }
            }
            OperatorPlan::Rows(r) => {
                match r.specs.iter().flat_map(|s| s.functions.iter().map(move |f| (s, f))).find(|(_, f)| f.output == i)
                {
                    Some((spec, f)) => self.over(spec, f),
                    None if made_up(&field.name) && i < sources => self.source(i),
                    None => field.name.clone(),
                }
            }
            OperatorPlan::Merge(m) => {
                let windows = if m.window.is_some() { 2 } else { 0 };
                if let Some(call) = i.checked_sub(m.groups.len() + windows).and_then(|c| m.calls.get(c)) {
                    return self.merged(call);
                }
                match m.groups.get(i) {
                    Some(g) if made_up(&field.name) => self.source(*g),
                    _ => field.name.clone(),
                }
            }
            _ if made_up(&field.name) && i < sources => self.source(i),
            _ => shown_name(&field.name),
        }
    }

    /// A merged aggregate: what its partials are partials of (COUNT, SUM,
    /// MIN and MAX combine into the partial's own meaning; AVG from a sum
    /// and a count).
    fn merged(&self, call: &sluice_plan::MergeCall) -> String {
        let first = call.partials.first().map(|p| self.source(*p)).unwrap_or_default();
        match call.func {
            AggFunc::Avg => first.strip_prefix("SUM").map_or(first.clone(), |arg| format!("AVG{arg}")),
            _ => first,
        }
    }

    fn over(&self, spec: &sluice_plan::RowsSpec, f: &sluice_plan::RowsFunction) -> String {
        let call = match (f.kind, &f.arg) {
            (RowsFunctionKind::RowNumber, _) => "ROW_NUMBER()".to_owned(),
            (RowsFunctionKind::Aggregate(func), Some(arg)) => format!("{}({})", func.name(), self.source_expr(arg)),
            (RowsFunctionKind::Aggregate(func), None) => format!("{}(*)", func.name()),
        };
        let frame = spec.preceding.map_or_else(
            || "ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW".to_owned(),
            |n| format!("ROWS BETWEEN {n} PRECEDING AND CURRENT ROW"),
        );
        let by = list(spec.partition_by.iter().map(|p| self.source_expr(p)));
        let order = spec.order_by.as_ref().map(|o| format!(" ORDER BY {}", self.source_expr(o))).unwrap_or_default();
        format!("{call} OVER (PARTITION BY {by}{order} {frame})")
    }

    fn output(&self, i: usize) -> String {
        self.plan.outputs.get(i).map_or_else(|| format!("#{i}"), |o| expr_sql(&o.expr, &|j| self.intermediate(j)))
    }

    fn call(&self, call: &AggregateCall) -> String {
        match &call.arg {
            None => "COUNT(*)".to_owned(),
            // ARRAY_AGG's and MAP_AGG's arguments are packed in one row:
            // shown as written.
            Some(PhysExpr::Func { func: ScalarFunc::MakeRow, args, .. })
                if matches!(call.func, AggFunc::ArrayAgg | AggFunc::MapAgg) =>
            {
                let shown: Vec<String> = args.iter().map(|a| self.source_expr(a)).collect();
                match (call.func, shown.split_first()) {
                    (AggFunc::ArrayAgg, Some((x, keys))) if !keys.is_empty() => {
                        let keys: Vec<String> = keys
                            .iter()
                            .zip(&call.order)
                            .map(|(k, desc)| if *desc { format!("{k} DESC") } else { k.clone() })
                            .collect();
                        format!("ARRAY_AGG({x} ORDER BY {})", keys.join(", "))
                    }
                    _ => format!("{}({})", call.func.name(), shown.join(", ")),
                }
            }
            Some(arg) => {
                format!(
                    "{}({}{})",
                    call.func.name(),
                    if call.distinct { "DISTINCT " } else { "" },
                    self.source_expr(arg)
                )
            }
        }
    }

    /// The plan's output columns as the user named them; a made-up one as
    /// what it holds. The join's row layout columns (side, time) are left
    /// out: they say which side a row is and when, not what it carries;
    /// so are, with `join_layout`, the other side's columns (NULL).
    fn columns(&self, join_layout: bool) -> String {
        let shown: Vec<String> = self
            .plan
            .outputs
            .iter()
            .enumerate()
            .filter(|(_, o)| o.name != "__right" && o.name != "__time")
            .filter(|(_, o)| !(join_layout && matches!(o.expr, PhysExpr::Literal { value: Scalar::Null, .. })))
            .map(|(i, o)| {
                let text = self.output(i);
                if made_up(&o.name) && !o.expr.is_literal() || text == o.name {
                    text
                } else {
                    format!("{text} AS {}", if made_up(&o.name) { shown_name(&o.name) } else { o.name.clone() })
                }
            })
            .collect();
        if shown.is_empty() { "(none)".to_owned() } else { shown.join(", ") }
    }

    fn keys(&self) -> String {
        self.plan.keys.iter().map(|k| expr_sql(&k.expr, &|j| self.intermediate(j))).collect::<Vec<_>>().join(", ")
    }
}

/// The explanation of `dataflow`, the plan of `config`'s query, over the
/// partition counts in `config.partitions`.
pub fn explain(config: &WorkerConfig, dataflow: &Dataflow) -> Result<String, Error> {
    let spec = &config.spec;
    let partitions_of =
        |name: &str| config.partitions.iter().find(|p| p.source.eq_ignore_ascii_case(name)).map(|p| p.partitions);
    let topology = Topology::new(dataflow, &spec.sources, partitions_of, spec.engine.repartition_partitions, |s| {
        config.repartition_topic(s)
    })?;
    let mut out = String::new();
    let w = &mut out;
    let _ = writeln!(w, "job {} (namespace {})", config.job.name, config.job.namespace);
    let _ = writeln!(
        w,
        "  delivery: {}; checkpoints every {} ms; consumer group {}",
        match spec.delivery {
            Delivery::AtLeastOnce => "at least once",
            Delivery::ExactlyOnce => "exactly once (transactions; read committed)",
        },
        spec.engine.checkpoint_interval_millis,
        config.consumer_group(),
    );
    let _ = writeln!(
        w,
        "  {} worker(s) x {} core(s); each core runs one engine per partition it owns",
        spec.workers, spec.cores_per_worker
    );
    // The counts of Kafka topics are the ones planned with, not looked up:
    // say so, so that "4 partitions" is not read as the topic's own count.
    if let Some(n) = spec.sources.iter().filter(|s| s.kafka.is_some()).find_map(|s| partitions_of(&s.name)) {
        let _ =
            writeln!(w, "  Kafka topics are not looked up: planned with {n} partitions each (explain --partitions N)");
    }
    // The stages' own plans, last first: the chain of writers before
    // each stage.
    let stage_plans: Vec<&Plan> = dataflow.stages.iter().rev().map(|s| &s.plan).collect();
    for (i, input) in topology.inputs.iter().enumerate() {
        let upstream: &[&Plan] =
            if input.reads_exchange() { &stage_plans[dataflow.stages.len() - input.stage..] } else { &[] };
        let this = Names { plan: &input.plan, upstream };
        let plans_in_stage = topology.stage(input.stage).count();
        let nth = topology.inputs[..i].iter().filter(|x| x.stage == input.stage).count();
        let _ = writeln!(w);
        if plans_in_stage > 1 {
            let _ = writeln!(w, "stage {}, plan {} of {}", input.stage, nth + 1, plans_in_stage);
        } else {
            let _ = writeln!(w, "stage {}", input.stage);
        }
        describe(w, config, &topology, i, input, &this, dataflow);
    }
    Ok(out)
}

fn describe(
    w: &mut String,
    config: &WorkerConfig,
    topology: &Topology,
    i: usize,
    input: &CoreInput,
    names: &Names<'_>,
    dataflow: &Dataflow,
) {
    let plan = &*input.plan;
    let _ = writeln!(w, "  reads    {}", reads(input, topology));
    if let Some(f) = &plan.filter {
        let _ = writeln!(w, "  where    {}", names.source_expr(f));
    }
    operator(w, names);
    if let Some(h) = &plan.having {
        let _ = writeln!(w, "  having   {}", expr_sql(h, &|j| names.intermediate(j)));
    }
    let _ = writeln!(w, "  emits    {}", emits(plan, config));
    let _ = writeln!(w, "  state    {}", state(plan, topology, i, config));
    let output = dataflow.stages.get(input.stage).map_or(StageOutput::Sink, |s| s.output);
    match output {
        StageOutput::Exchange => {
            let topic = config.repartition_topic(input.stage + 1);
            let _ = writeln!(
                w,
                "  writes   repartition topic {topic} ({} partitions), keyed by {}",
                topology.exchange_partitions,
                names.keys()
            );
        }
        StageOutput::Sink => {
            let _ = writeln!(w, "  writes   {}", sink(&config.spec.sink, names));
        }
    }
    let joins_next = output == StageOutput::Exchange
        && dataflow
            .stages
            .get(input.stage + 1)
            .is_some_and(|s| matches!(s.plan.operator, OperatorPlan::Join(_) | OperatorPlan::TableJoin(_)));
    let _ = writeln!(
        w,
        "  columns  {}{}",
        names.columns(joins_next),
        if joins_next { " (in the join's row layout: the other side's columns empty)" } else { "" }
    );
}

fn reads(input: &CoreInput, topology: &Topology) -> String {
    let Some(source) = &input.source else {
        return format!(
            "repartition topic {} ({} partitions), written by stage {}",
            input.topic,
            topology.exchange_partitions,
            input.stage.saturating_sub(1)
        );
    };
    let mut text = format!("source {}: {}", source.name, source_place(source, input.total));
    if let Some(t) = &source.event_time {
        let _ = write!(text, "; event time {}, watermark {} ms behind", t.column, t.watermark_delay_millis);
    }
    if !source.partition_key.is_empty() {
        let _ = write!(text, "; keyed by {}", source.partition_key.join(", "));
    }
    text
}

fn value_name<T: serde::Serialize>(value: &T) -> String {
    serde_json::to_value(value).ok().and_then(|v| v.as_str().map(str::to_owned)).unwrap_or_else(|| "?".to_owned())
}

fn source_place(source: &SourceSpec, partitions: i32) -> String {
    let format = value_name(&source.format);
    if let Some(k) = &source.kafka {
        let start = match k.start_from {
            StartFrom::Earliest => "earliest".to_owned(),
            StartFrom::Latest => "latest".to_owned(),
            at @ StartFrom::Timestamp(_) => format!("the first record at or after {at}"),
        };
        format!("Kafka topic {} ({partitions} partitions, {format}, from {start} on first start)", k.topic)
    } else if let Some(f) = &source.file {
        format!("file {} ({format})", f.path)
    } else if let Some(d) = &source.datagen {
        format!("generator {} ({partitions} partitions)", value_name(&d.scenario))
    } else {
        "(no input)".to_owned()
    }
}

fn sink(sink: &SinkSpec, names: &Names<'_>) -> String {
    let format = value_name(&sink.format);
    let keys = names.keys();
    let keyed = if keys.is_empty() { String::new() } else { format!(", keyed by {keys}") };
    if let Some(k) = &sink.kafka {
        format!("the sink: Kafka topic {} ({format}{keyed})", k.topic)
    } else if let Some(f) = &sink.file {
        format!("the sink: file {} ({format}{keyed})", f.path)
    } else {
        format!("the sink: standard output ({format}{keyed})")
    }
}

fn list(items: impl Iterator<Item = String>) -> String {
    let items: Vec<String> = items.collect();
    if items.is_empty() { "(none)".to_owned() } else { items.join(", ") }
}

fn operator(w: &mut String, names: &Names<'_>) {
    let plan = names.plan;
    let time = || plan.source.event_time.as_ref().map_or_else(|| "?".to_owned(), |t| names.source(t.column));
    match &plan.operator {
        OperatorPlan::Stateless => {
            let _ = writeln!(w, "  operator project (row by row; nothing kept)");
        }
        OperatorPlan::Aggregate(a) => {
            let kind = match (&a.window, a.upsert_key.is_empty(), a.retract.is_some()) {
                (Some(_), _, _) => "windowed aggregate",
                (None, false, _) => "aggregate over an updating input",
                (None, _, true) => "aggregate over signed rows (retractions)",
                (None, true, false) => "aggregate",
            };
            let _ = writeln!(w, "  operator {kind}");
            let groups = list(a.group_exprs.iter().map(|g| names.source_expr(g)));
            let _ = writeln!(w, "             group by   {groups}");
            if let Some(window) = a.window {
                let text = match window {
                    TimeWindow::Tumbling { size_ms } => match &a.window_zone {
                        Some(zone) => format!(
                            "TUMBLE({} AT TIME ZONE '{}', {}), aligned to {zone}'s wall clock (a day on a clock \
                             change is 23 or 25 hours)",
                            time(),
                            zone.replace('\'', "''"),
                            interval_sql(size_ms)
                        ),
                        None => format!("TUMBLE({}, {})", time(), interval_sql(size_ms)),
                    },
                    TimeWindow::Hopping { size_ms, advance_ms } => match &a.window_zone {
                        Some(zone) => format!(
                            "HOP({} AT TIME ZONE '{}', {}, {}), aligned to {zone}'s wall clock (a window across a \
                             clock change is an hour longer or shorter)",
                            time(),
                            zone.replace('\'', "''"),
                            interval_sql(advance_ms),
                            interval_sql(size_ms)
                        ),
                        None => format!("HOP({}, {}, {})", time(), interval_sql(advance_ms), interval_sql(size_ms)),
                    },
                    TimeWindow::Session { gap_ms } => format!("SESSION({}, {})", time(), interval_sql(gap_ms)),
                };
                let _ = writeln!(w, "             window     {text}");
            }
            let _ = writeln!(w, "             aggregates {}", list(a.aggregates.iter().map(|c| names.call(c))));
            if !a.upsert_key.is_empty() {
                let keys = list(a.upsert_key.iter().map(|k| names.source_expr(k)));
                let _ = writeln!(w, "             input      rows keyed by {keys}: each replaces its key's last row");
            }
        }
        OperatorPlan::Rows(r) => {
            let _ = writeln!(w, "  operator OVER (ROWS) window");
            for f in r.specs.iter().flat_map(|s| s.functions.iter().map(move |f| (s, f))) {
                let _ = writeln!(w, "             {}", names.over(f.0, f.1));
            }
            if !r.upsert_key.is_empty() {
                let keys = list(r.upsert_key.iter().map(|k| names.source_expr(k)));
                let _ = writeln!(
                    w,
                    "             input      rows keyed by {keys}: each replaces its key's last row, and every frame \
                     that held it or holds it now is computed again"
                );
            }
        }
        OperatorPlan::TopN(t) => {
            let by = list(t.partition_by.iter().map(|p| names.source_expr(p)));
            let mut order =
                vec![format!("{}{}", names.source_expr(&t.order_by), if t.descending { " DESC" } else { "" })];
            order.extend(
                t.then_by
                    .iter()
                    .map(|k| format!("{}{}", names.source_expr(&k.expr), if k.descending { " DESC" } else { "" })),
            );
            let what =
                if t.limit == 1 { "deduplication (one row per key, the first in this order)" } else { "top-N per key" };
            let _ = writeln!(w, "  operator {what}");
            let _ = writeln!(w, "             keep {} row(s) per {by}, ordered by {}", t.limit, order.join(", "));
        }
        OperatorPlan::Merge(m) => {
            let _ = writeln!(w, "  operator merge of partial aggregates (the last phase of a phased aggregate)");
            let groups = list(m.groups.iter().map(|g| names.source(*g)));
            let _ = writeln!(w, "             group by   {groups}{}", if m.window.is_some() { ", window" } else { "" });
            let parts = if m.parts.is_empty() {
                "each upstream partition".to_owned()
            } else {
                format!("each upstream partition and {}", list(m.parts.iter().map(|p| names.source(*p))))
            };
            let _ = writeln!(w, "             combines   the latest partial of {parts}");
            let _ = writeln!(w, "             aggregates {}", list(m.calls.iter().map(|c| names.merged(c))));
        }
        OperatorPlan::Join(j) => {
            let kind = join_kind(j.kind);
            let _ = writeln!(w, "  operator {kind} {}join", if j.unbounded() { "" } else { "interval " });
            let on = join_keys(names, &j.left_keys, &j.right_keys);
            let _ = writeln!(w, "             on         {on}");
            if !j.unbounded() {
                let bound = |ms: i64| match ms {
                    i64::MIN => "unbounded".to_owned(),
                    i64::MAX => "unbounded".to_owned(),
                    0 => "left time".to_owned(),
                    ms if ms < 0 => format!("left time - {}", interval_sql(-ms)),
                    ms => format!("left time + {}", interval_sql(ms)),
                };
                let until = j.until.map(|c| format!(" and before {}", names.source(c))).unwrap_or_default();
                let _ = writeln!(
                    w,
                    "             time       right time between {} and {}{until}",
                    bound(j.lower),
                    bound(j.upper)
                );
            }
            if let Some(r) = &j.residual {
                let _ = writeln!(w, "             and        {}", names.source_expr(r));
            }
        }
        OperatorPlan::TableJoin(j) => {
            let version = match j.version {
                TableVersion::Latest => "the table's latest row per key",
                TableVersion::AsOfEventTime => "the table's row as of each stream row's event time",
            };
            let _ = writeln!(w, "  operator {} stream–table join with {version}", join_kind(j.kind));
            let _ = writeln!(w, "             on         {}", join_keys(names, &j.left_keys, &j.right_keys));
            if let Some(r) = &j.residual {
                let _ = writeln!(w, "             and        {}", names.source_expr(r));
            }
        }
        OperatorPlan::Changelog(c) => {
            let _ = writeln!(
                w,
                "  operator changelog of a table: each new version takes the key's previous row back, then adds \
                 itself"
            );
            let _ = writeln!(w, "             key        {}", list(c.key.iter().map(|k| names.source_expr(k))));
        }
    }
}

fn join_kind(kind: JoinKind) -> &'static str {
    match kind {
        JoinKind::Inner => "INNER",
        JoinKind::Left => "LEFT",
        JoinKind::Right => "RIGHT",
        JoinKind::Full => "FULL",
    }
}

fn join_keys(names: &Names<'_>, left: &[PhysExpr], right: &[PhysExpr]) -> String {
    list(left.iter().zip(right).map(|(l, r)| format!("{} = {}", names.source_expr(l), names.source_expr(r))))
}

fn emits(plan: &Plan, config: &WorkerConfig) -> String {
    let late = match value_name(&config.spec.engine.late_records).as_str() {
        "DeadLetter" => "to the dead-letter output",
        _ => "dropped and counted",
    };
    let mut text = match plan.emit {
        _ if matches!(&plan.operator, OperatorPlan::Rows(r) if !r.upsert_key.is_empty()) => {
            "upserts per input key, once per batch: each changed row's frame, its own and those after it".to_owned()
        }
        _ if matches!(plan.operator, OperatorPlan::TopN(_)) => format!(
            "upserts keyed by the key and rank: {}",
            match value_name(&config.spec.engine.emit_changes).as_str() {
                "PerRecord" => "as each row enters its key's top N, the ranks it pushed down",
                _ =>
                    "after each batch, each rank the batch changed, with the row holding it then (at most one per rank a batch)",
            }
        ),
        _ if matches!(plan.operator, OperatorPlan::Changelog(_)) => {
            "signed rows: for each new version, the key's previous row taken back (retract TRUE), then the new row"
                .to_owned()
        }
        EmitMode::PerRecord => "a row per input row, as it arrives".to_owned(),
        EmitMode::Changes => format!(
            "changes: a group's new row as its input arrives ({} per group)",
            match value_name(&config.spec.engine.emit_changes).as_str() {
                "PerRecord" => "one per input row",
                _ => "at most one per batch",
            }
        ),
        EmitMode::Final => {
            "final rows: one per group and window, when the watermark passes the window's end".to_owned()
        }
    };
    // The operators that keep which groups HAVING showed (the engine's
    // `track_having`): a session window's do not.
    let keeps_shown = match &plan.operator {
        OperatorPlan::Aggregate(a) => !matches!(a.window, Some(TimeWindow::Session { .. })),
        OperatorPlan::Merge(_) => true,
        _ => false,
    };
    if plan.having.is_some() && plan.emit == EmitMode::Changes && keeps_shown {
        text.push_str("; a group shown before that fails HAVING is deleted (a tombstone)");
    }
    if plan.judges_lateness() {
        let _ = write!(text, "; rows behind the watermark are late: {late}");
    }
    text
}

fn state(plan: &Plan, topology: &Topology, i: usize, config: &WorkerConfig) -> String {
    let kept = match &plan.operator {
        OperatorPlan::Stateless => return "none".to_owned(),
        OperatorPlan::Aggregate(a) if a.aggregates.iter().any(|c| c.distinct) => {
            "per group: accumulators and each distinct value seen"
        }
        OperatorPlan::Aggregate(a) if !a.upsert_key.is_empty() => {
            "per group: accumulators; per input key: its last row"
        }
        OperatorPlan::Aggregate(a) if a.window.is_some() => "per group and open window: accumulators",
        OperatorPlan::Aggregate(_) => "per group: accumulators",
        OperatorPlan::Rows(r) if !r.upsert_key.is_empty() => {
            "per input key: its last row; per partition key: its rows in ORDER BY order"
        }
        OperatorPlan::Rows(_) => "per partition key: the rows of the frame",
        OperatorPlan::TopN(_) => "per key: the rows kept",
        OperatorPlan::Merge(_) => "per group: the latest partial of each part",
        OperatorPlan::Join(j) if j.unbounded() => "per key: every row of both sides, for good",
        OperatorPlan::Join(_) => "per key: each side's rows until the watermark passes their time range",
        OperatorPlan::TableJoin(j) if j.version == TableVersion::AsOfEventTime => {
            "per key: the table's row versions; stream rows until the watermark passes them"
        }
        OperatorPlan::TableJoin(_) => "per key: the table's latest row",
        OperatorPlan::Changelog(_) => "per key: the table's last row",
    };
    let engine = Engine::new(Arc::new(plan.clone()), EngineOptions::default());
    let how = if engine.paged() {
        "incremental checkpoints (the pages of keys that changed)"
    } else {
        "whole checkpoints (all of it each time)"
    };
    // With the worker's volume (the default), state that spills is not
    // bounded by the limit: past its share the cold keys go to disk.
    let limit = &config.spec.engine.state_memory_limit;
    let bound = if engine.spills() && config.spec.engine.local_state.volume != LocalStateVolume::None {
        format!("in memory up to its share of stateMemoryLimit {limit} per core, colder keys on the worker's volume")
    } else {
        format!("bounded by stateMemoryLimit {limit} per core")
    };
    format!("{kept}; {how} to {}; {bound}", state_topic(&topology.inputs, i, config))
}
