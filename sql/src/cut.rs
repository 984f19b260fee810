//! Cutting a plan where its state needs an exchange.
//!
//! A stateful plan whose source is not partitioned by its state key is cut
//! into stages: the first applies WHERE and forwards what the rest reads
//! (or, for a global aggregate whose aggregates merge, each partition's
//! partials), keyed by the state key; the exchange puts every record of a
//! key on one partition; the last stage is the plan itself over the
//! exchange. Used for a whole query (`dataflow.rs`) and for a windowed
//! subquery that is a side of a join (`join.rs`).

use sluice_plan::{
    AggFunc, AggregateCall, AggregatePlan, DataType, Dataflow, EmitMode, MergeCall, MergePlan, OperatorPlan,
    OutputColumn, Partitioning, PhysExpr, Plan, Schema, SourceSchema, SqlError, Stage, StageOutput, TimeWindow,
};

use crate::planner::{WINDOW_END, WINDOW_START};

/// One stage, or two when the plan's state needs an exchange.
pub(crate) fn cut(plan: Plan, partitions: i32) -> Result<Dataflow, SqlError> {
    match plan.check_partitioning(partitions) {
        Ok(()) => Ok(Dataflow::single(plan)),
        Err(misaligned) => match split_global(&plan) {
            Some(flow) => Ok(flow),
            None => split_at_state(plan).ok_or(misaligned),
        },
    }
}

/// A global aggregate (no GROUP BY, tumbling or hopping window or none)
/// whose every aggregate can be combined from partials, in two phases:
/// each partition aggregates its own rows, and only its running partials
/// cross the exchange — to one partition, or for a windowed query to the
/// partition of the window — where [`MergePlan`] combines the latest
/// partial of every upstream partition. `None` for any other query: the
/// rows themselves cross (to one partition, for a global aggregate).
fn split_global(plan: &Plan) -> Option<Dataflow> {
    let OperatorPlan::Aggregate(aggregate) = &plan.operator else { return None };
    if let Some(flow) = split_distinct(plan, aggregate) {
        return Some(flow);
    }
    let mergeable = aggregate.group_exprs.is_empty()
        && !aggregate.aggregates.is_empty()
        && aggregate.aggregates.iter().all(|a| a.func.merges() && !a.distinct)
        && !matches!(aggregate.window, Some(TimeWindow::Session { .. }));
    if !mergeable {
        return None;
    }
    let mut partial_calls = Vec::new();
    let mut calls = Vec::new();
    for call in &aggregate.aggregates {
        let first = partial_calls.len();
        if call.func == AggFunc::Avg {
            // The argument is already a DOUBLE (the planner casts it).
            partial_calls.push(AggregateCall { func: AggFunc::Sum, data_type: DataType::Double, ..call.clone() });
            partial_calls.push(AggregateCall { func: AggFunc::Count, data_type: DataType::Bigint, ..call.clone() });
        } else {
            partial_calls.push(call.clone());
        }
        let partials = (first..partial_calls.len()).map(|p| p + if aggregate.window.is_some() { 2 } else { 0 });
        calls.push(MergeCall { func: call.func, partials: partials.collect(), data_type: call.data_type });
    }
    // The layout of an aggregate's rows: the window, then the aggregates.
    let mut schema = Schema::default();
    let window = aggregate.window.map(|_| {
        let start = schema.push(WINDOW_START, DataType::Timestamp);
        (start, schema.push(WINDOW_END, DataType::Timestamp))
    });
    for (i, call) in partial_calls.iter().enumerate() {
        schema.push(format!("partial{i}"), call.data_type);
    }
    let columns = columns_of(&schema, |_| true);
    // A window's partials meet on the window's partition: windows spread
    // over the exchange's partitions.
    let keys = window.map(|(start, _)| vec![columns[start].clone()]).unwrap_or_default();
    let operator = OperatorPlan::Aggregate(AggregatePlan {
        group_exprs: Vec::new(),
        aggregates: partial_calls,
        window: aggregate.window,
        upsert_key: Vec::new(),
        retract: None,
    });
    let partial = first_stage(plan, operator, schema.clone(), columns, keys, plan.emit);
    let merge = last_stage(plan, schema, OperatorPlan::Merge(MergePlan { window, calls }));
    Some(Dataflow { stages: vec![partial, merge], branches: Vec::new() })
}

/// `COUNT(DISTINCT x)` over everything (with MIN and MAX of the same `x`,
/// which distinct values also decide), without a window, in two phases:
/// each partition forwards a value the first time it sees it, and one
/// partition aggregates the values forwarded. A value crosses the
/// exchange once per partition that has it, not once per record.
fn split_distinct(plan: &Plan, aggregate: &AggregatePlan) -> Option<Dataflow> {
    let arg = aggregate.aggregates.first()?.arg.clone()?;
    let by_value = aggregate.aggregates.iter().all(|a| {
        a.arg.as_ref() == Some(&arg)
            && ((a.func == AggFunc::Count && a.distinct) || matches!(a.func, AggFunc::Min | AggFunc::Max))
    });
    if !aggregate.group_exprs.is_empty()
        || aggregate.window.is_some()
        || !by_value
        || !aggregate.aggregates.iter().any(|a| a.distinct)
    {
        return None;
    }
    let data_type = arg.data_type();
    let mut schema = Schema::default();
    schema.push("value", data_type);
    let value = PhysExpr::Column { index: 0, data_type };
    // GROUP BY the value without aggregates: a group's one row is emitted
    // when it first appears.
    let operator = OperatorPlan::Aggregate(AggregatePlan {
        group_exprs: vec![arg],
        aggregates: Vec::new(),
        window: None,
        upsert_key: Vec::new(),
        retract: None,
    });
    let outputs = vec![OutputColumn { name: "value".into(), expr: value.clone() }];
    let partial = first_stage(plan, operator, schema.clone(), outputs, Vec::new(), EmitMode::Changes);
    let aggregates =
        aggregate.aggregates.iter().map(|a| AggregateCall { arg: Some(value.clone()), ..a.clone() }).collect();
    let operator = OperatorPlan::Aggregate(AggregatePlan {
        group_exprs: Vec::new(),
        aggregates,
        window: None,
        upsert_key: Vec::new(),
        retract: None,
    });
    let merge = last_stage(plan, schema, operator);
    Some(Dataflow { stages: vec![partial, merge], branches: Vec::new() })
}

/// The two stages of a query whose state needs an exchange; `None` when
/// the query keeps no keyed state.
fn split_at_state(plan: Plan) -> Option<Dataflow> {
    let keys: Vec<OutputColumn> = match (&plan.operator, &plan.partitioning) {
        // Aggregates are keyed by their group expressions: every row of a
        // group has the same values, so lands in the same partition. No
        // group expression (a global aggregate): no key, one partition.
        // Windows are assigned after the exchange, from the forwarded event
        // time; the exchange carries the watermark (see Engine::advance_watermark).
        (OperatorPlan::Aggregate(a), _) => a
            .group_exprs
            .iter()
            .enumerate()
            .map(|(i, e)| OutputColumn { name: format!("key{i}"), expr: e.clone() })
            .collect(),
        // ROWS frames are keyed by the columns every PARTITION BY shares.
        (OperatorPlan::Rows(_) | OperatorPlan::TopN(_), Partitioning::KeyedBy(columns)) => columns
            .iter()
            .filter_map(|name| plan.source.schema.index_of(name))
            .map(|index| {
                let f = &plan.source.schema.fields[index];
                OutputColumn { name: f.name.clone(), expr: PhysExpr::Column { index, data_type: f.data_type } }
            })
            .collect(),
        _ => return None,
    };
    let forwarded = columns_of(&plan.source.schema, |i| plan.used_columns.get(i).copied().unwrap_or(false));
    let exchange =
        first_stage(&plan, OperatorPlan::Stateless, plan.source.schema.clone(), forwarded, keys, EmitMode::PerRecord);
    let mut stateful = plan;
    stateful.filter = None;
    // Records on the exchange were validated by the first stage; columns
    // the query does not read are not forwarded at all.
    stateful.source.required = vec![false; stateful.source.required.len()];
    stateful.partitioning = Partitioning::ByExchange;
    Some(Dataflow { stages: vec![exchange, Stage { plan: stateful, output: StageOutput::Sink }], branches: Vec::new() })
}

/// Each column of `schema` that `keep` keeps, as an output of that name.
fn columns_of(schema: &Schema, keep: impl Fn(usize) -> bool) -> Vec<OutputColumn> {
    schema
        .fields
        .iter()
        .enumerate()
        .filter(|(i, _)| keep(*i))
        .map(|(index, f)| OutputColumn {
            name: f.name.clone(),
            expr: PhysExpr::Column { index, data_type: f.data_type },
        })
        .collect()
}

/// The first stage of a cut `plan`: its source and WHERE, then `operator`
/// (complete per source partition), writing `outputs` to an exchange
/// partitioned by `keys`.
fn first_stage(
    plan: &Plan,
    operator: OperatorPlan,
    intermediate: Schema,
    outputs: Vec<OutputColumn>,
    keys: Vec<OutputColumn>,
    emit: EmitMode,
) -> Stage {
    let plan = Plan {
        source: plan.source.clone(),
        used_columns: plan.used_columns.clone(),
        filter: plan.filter.clone(),
        operator,
        intermediate,
        having: None,
        outputs,
        keys,
        emit,
        partitioning: Partitioning::Any,
        shared: Vec::new(),
    };
    Stage { plan, output: StageOutput::Exchange }
}

/// The last stage of a cut `plan`: `operator` over the rows of `schema`
/// the exchange brings, then the query's own HAVING and SELECT list.
fn last_stage(plan: &Plan, schema: Schema, operator: OperatorPlan) -> Stage {
    let columns = schema.fields.len();
    let source = SourceSchema {
        name: plan.source.name.clone(),
        schema,
        required: vec![false; columns],
        event_time: None,
        partition_key: Vec::new(),
        origins: Vec::new(),
    };
    let plan = Plan {
        source,
        used_columns: vec![true; columns],
        filter: None,
        operator,
        partitioning: Partitioning::ByExchange,
        ..plan.clone()
    };
    Stage { plan, output: StageOutput::Sink }
}
