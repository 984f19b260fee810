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
    AggFunc, AggregateCall, AggregatePlan, Branch, CmpOp, ColumnOrigin, DataType, Dataflow, EmitMode, Field, MergeCall,
    MergePlan, OperatorPlan, OutputColumn, Partitioning, PhysExpr, Plan, Scalar, Schema, SourceSchema, SqlError, Stage,
    StageOutput, TimeWindow,
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

/// [`cut`] for a whole query: an aggregate over few groups (GROUP BY
/// event time, by day or hour, say) whose rows would all cross to the
/// partition of a handful of groups, where one core would do all the
/// work, is cut in phases instead ([`split_few_groups`]).
pub(crate) fn cut_query(plan: Plan, partitions: i32) -> Result<Dataflow, SqlError> {
    if plan.check_partitioning(partitions).is_err()
        && split_global(&plan).is_none()
        && let Some(flow) = split_few_groups(&plan)
    {
        return Ok(flow);
    }
    cut(plan, partitions)
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
    let (partials, calls) = partial_calls(&aggregate.aggregates, if aggregate.window.is_some() { 2 } else { 0 });
    let (schema, window) = partial_schema(plan, aggregate, &[], &partials);
    let columns = columns_of(&schema, |_| true);
    // A window's partials meet on the window's partition: windows spread
    // over the exchange's partitions.
    let keys = group_keys(&columns, 0, window);
    let operator = OperatorPlan::Aggregate(AggregatePlan {
        group_exprs: Vec::new(),
        aggregates: partials,
        window: aggregate.window,
        window_zone: aggregate.window_zone.clone(),
        upsert_key: Vec::new(),
        retract: None,
    });
    let partial = first_stage(plan, operator, schema.clone(), columns, keys, plan.emit);
    let merge = last_stage(
        plan,
        schema,
        OperatorPlan::Merge(MergePlan { window, calls, groups: Vec::new(), parts: Vec::new() }),
    );
    Some(Dataflow { stages: vec![partial, merge], branches: Vec::new() })
}

/// `COUNT(DISTINCT x)` over everything (with MIN and MAX of the same `x`,
/// which distinct values also decide), without a window, in two phases:
/// each partition forwards a value the first time it sees it, and one
/// partition aggregates the values forwarded. A value crosses the
/// exchange once per partition that has it, not once per record.
fn split_distinct(plan: &Plan, aggregate: &AggregatePlan) -> Option<Dataflow> {
    if plan.unnest.is_some() {
        // Its phases forward the source's columns; an unnest's rows take
        // the general cut (`split_at_state`).
        return None;
    }
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
        window_zone: None,
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
        window_zone: None,
        upsert_key: Vec::new(),
        retract: None,
    });
    let merge = last_stage(plan, schema, operator);
    Some(Dataflow { stages: vec![partial, merge], branches: Vec::new() })
}

/// The name of the column that says which family of distinct values an
/// expanded row is for.
const FAMILY: &str = "__family";

/// The merge's count of first-family rows per group (see
/// [`split_distinct_families`]), read only by its HAVING.
const ROWS_SEEN: &str = "__rows";

/// An aggregate whose groups are few — every GROUP BY expression reads
/// the event-time column and nothing else, and is not the bare column
/// (`DATE_FORMAT(ts, 'yyyy-MM-dd')`, `DATE_TRUNC('hour', ts)`) — or a
/// global one with several distinct columns, in phases, as Flink's
/// local-global aggregation and split-distinct do. `None` for any other
/// query, or when an aggregate does not combine from partials (variances,
/// SUM or AVG of DISTINCT values, session windows, signed or upsert
/// input).
///
/// Without DISTINCT, two stages: each source partition aggregates its own
/// rows, and its running partials cross, keyed by group (and window), to
/// a [`MergePlan`] that keeps the latest partial of each upstream
/// partition per group.
///
/// With `COUNT(DISTINCT x)`, three: a value must be counted where every
/// row of it meets, so each row is sent once per family of distinct
/// values (`x`, or `x` under a FILTER — one family per column: q15's
/// bidder and auction make two), keyed by its group, the family and the
/// family's value. Each exchange partition aggregates its share per group
/// and family — the distinct values it holds are its own, so their counts
/// add up — the non-distinct aggregates from the rows of the first family
/// only; the partials cross keyed by group to the merge, whose parts are
/// (upstream partition, family).
fn split_few_groups(plan: &Plan) -> Option<Dataflow> {
    let OperatorPlan::Aggregate(aggregate) = &plan.operator else { return None };
    if plan.unnest.is_some() {
        return None;
    }
    let event_time = plan.source.event_time.map(|e| e.column);
    let few = aggregate.group_exprs.iter().all(|g| {
        let mut read = Vec::new();
        g.columns(&mut read);
        g.as_column().is_none() && !read.is_empty() && read.iter().all(|&c| Some(c) == event_time)
    });
    let combines = aggregate
        .aggregates
        .iter()
        .all(|a| a.func.merges() && (!a.distinct || matches!(a.func, AggFunc::Count | AggFunc::Min | AggFunc::Max)));
    if !few
        || !combines
        || aggregate.aggregates.is_empty()
        || !aggregate.upsert_key.is_empty()
        || aggregate.retract.is_some()
        || matches!(aggregate.window, Some(TimeWindow::Session { .. }))
    {
        return None;
    }
    // The families of distinct values: what each counted value is a value
    // of. `CASE WHEN p THEN x END` (a FILTER) counts values of `x`, so a
    // row keyed by `x` meets every other row of its value.
    let mut families: Vec<PhysExpr> = Vec::new();
    let mut family_of = Vec::new();
    for a in &aggregate.aggregates {
        let family = match (&a.arg, a.distinct && a.func == AggFunc::Count) {
            (Some(arg), true) => {
                let value = filtered_value(arg).unwrap_or(arg).clone();
                Some(families.iter().position(|f| *f == value).unwrap_or_else(|| {
                    families.push(value);
                    families.len() - 1
                }))
            }
            _ => None,
        };
        family_of.push(family);
    }
    if families.is_empty() {
        if aggregate.group_exprs.is_empty() {
            return None;
        }
        return Some(local_global(plan, aggregate));
    }
    Some(split_distinct_families(plan, aggregate, &families, &family_of))
}

/// `x` of `CASE WHEN p THEN x END`.
fn filtered_value(arg: &PhysExpr) -> Option<&PhysExpr> {
    match arg {
        PhysExpr::Case { whens, otherwise, .. }
            if whens.len() == 1 && matches!(otherwise.as_ref(), PhysExpr::Literal { value: Scalar::Null, .. }) =>
        {
            Some(&whens[0].1)
        }
        _ => None,
    }
}

/// The partial calls of `aggregates` (AVG as a sum and a count), and for
/// each aggregate the call that combines its partials, which sit in the
/// partial rows from column `base` on.
fn partial_calls(aggregates: &[AggregateCall], base: usize) -> (Vec<AggregateCall>, Vec<MergeCall>) {
    let mut partial_calls = Vec::new();
    let mut calls = Vec::new();
    for call in aggregates {
        let first = partial_calls.len();
        if call.func == AggFunc::Avg {
            // The argument is already a DOUBLE (the planner casts it).
            partial_calls.push(AggregateCall { func: AggFunc::Sum, data_type: DataType::Double, ..call.clone() });
            partial_calls.push(AggregateCall { func: AggFunc::Count, data_type: DataType::Bigint, ..call.clone() });
        } else {
            partial_calls.push(call.clone());
        }
        let partials = (first..partial_calls.len()).map(|p| p + base);
        calls.push(MergeCall { func: call.func, partials: partials.collect(), data_type: call.data_type });
    }
    (partial_calls, calls)
}

/// The layout of an aggregate's rows: its groups (named as the query's
/// intermediate names them), `extra`, the window, then the partials.
/// Returns the schema and the window's columns.
fn partial_schema(
    plan: &Plan,
    aggregate: &AggregatePlan,
    extra: &[(&str, DataType)],
    partials: &[AggregateCall],
) -> (Schema, Option<(usize, usize)>) {
    let mut schema = Schema::default();
    for (i, g) in aggregate.group_exprs.iter().enumerate() {
        let name = plan.intermediate.fields.get(i).map_or_else(|| format!("key{i}"), |f| f.name.clone());
        schema.push(name, g.data_type());
    }
    for (name, data_type) in extra {
        schema.push(*name, *data_type);
    }
    let window = aggregate.window.map(|_| {
        let start = schema.push(WINDOW_START, DataType::Timestamp);
        (start, schema.push(WINDOW_END, DataType::Timestamp))
    });
    for (i, call) in partials.iter().enumerate() {
        schema.push(format!("partial{i}"), call.data_type);
    }
    (schema, window)
}

/// The exchange keys of partial rows: their groups and window start.
fn group_keys(columns: &[OutputColumn], groups: usize, window: Option<(usize, usize)>) -> Vec<OutputColumn> {
    columns[..groups].iter().chain(window.map(|(start, _)| &columns[start])).cloned().collect()
}

/// Two phases without DISTINCT: partials per source partition, merged
/// per group.
fn local_global(plan: &Plan, aggregate: &AggregatePlan) -> Dataflow {
    let groups = aggregate.group_exprs.len();
    let (partials, calls) =
        partial_calls(&aggregate.aggregates, groups + if aggregate.window.is_some() { 2 } else { 0 });
    let (schema, window) = partial_schema(plan, aggregate, &[], &partials);
    let columns = columns_of(&schema, |_| true);
    let keys = group_keys(&columns, groups, window);
    let operator = OperatorPlan::Aggregate(AggregatePlan { aggregates: partials, ..aggregate.clone() });
    let partial = first_stage(plan, operator, schema.clone(), columns, keys, plan.emit);
    let merge = MergePlan { window, calls, groups: (0..groups).collect(), parts: Vec::new() };
    let merge = last_stage(plan, schema, OperatorPlan::Merge(merge));
    Dataflow { stages: vec![partial, merge], branches: Vec::new() }
}

/// Three phases with DISTINCT: rows expanded per family of distinct
/// values and spread by value, partials per exchange partition and
/// family, merged per group (see [`split_few_groups`]).
fn split_distinct_families(
    plan: &Plan,
    aggregate: &AggregatePlan,
    families: &[PhysExpr],
    family_of: &[Option<usize>],
) -> Dataflow {
    let source_columns = plan.source.schema.fields.len();
    let family_literal = |f: usize| PhysExpr::Literal {
        value: Scalar::Bigint(i64::try_from(f).unwrap_or(i64::MAX)),
        data_type: DataType::Bigint,
    };
    // Phase one: each source row once per family, with the family's
    // number, keyed by its group, family and value. The first family's
    // plan is the stage; the others read the same source beside it.
    let mut forwarded = columns_of(&plan.source.schema, |i| plan.used_columns.get(i).copied().unwrap_or(false));
    forwarded.push(OutputColumn { name: FAMILY.into(), expr: family_literal(0) });
    let expand = |f: usize| {
        let mut outputs = forwarded.clone();
        if let Some(last) = outputs.last_mut() {
            last.expr = family_literal(f);
        }
        let keys = aggregate
            .group_exprs
            .iter()
            .chain([&family_literal(f), &families[f]])
            .enumerate()
            .map(|(i, e)| OutputColumn { name: format!("key{i}"), expr: e.clone() })
            .collect();
        first_stage(plan, OperatorPlan::Stateless, plan.source.schema.clone(), outputs, keys, EmitMode::PerRecord)
    };
    let stage_one = expand(0);
    let branches = (1..families.len()).map(|f| Branch { plan: expand(f).plan, beside: 0, reads_exchange: false });

    // Phase two: per group and family, over the rows of this partition.
    // An aggregate reads only the rows of its family: a distinct count
    // those of its own, the others those of the first.
    let family_column = PhysExpr::Column { index: source_columns, data_type: DataType::Bigint };
    let of_family = |f: usize, arg: PhysExpr, data_type: DataType| PhysExpr::Case {
        whens: vec![(
            PhysExpr::Compare {
                op: CmpOp::Eq,
                left: Box::new(family_column.clone()),
                right: Box::new(family_literal(f)),
            },
            arg,
        )],
        otherwise: Box::new(PhysExpr::Literal { value: Scalar::Null, data_type }),
        data_type,
    };
    // The rows of the first family — every row, once — counted last and
    // kept out of the results: until a group's count of them reaches the
    // merge, its other partials (distinct counts from other partitions)
    // would show it with COUNT(*) 0 and SUM NULL, so it is not shown.
    let rows_seen = AggregateCall {
        func: AggFunc::CountStar,
        arg: None,
        distinct: false,
        data_type: DataType::Bigint,
        order: Vec::new(),
    };
    let gated: Vec<AggregateCall> = aggregate
        .aggregates
        .iter()
        .chain([&rows_seen])
        .zip(family_of.iter().chain([&None]))
        .map(|(a, family)| {
            let f = family.unwrap_or(0);
            match &a.arg {
                Some(arg) => {
                    let data_type = arg.data_type();
                    AggregateCall { arg: Some(of_family(f, arg.clone(), data_type)), ..a.clone() }
                }
                // COUNT(*) counts the rows of the first family.
                None => AggregateCall {
                    func: AggFunc::Count,
                    arg: Some(of_family(f, PhysExpr::literal(Scalar::Bigint(1)), DataType::Bigint)),
                    ..a.clone()
                },
            }
        })
        .collect();
    let groups = aggregate.group_exprs.len();
    let window_columns = if aggregate.window.is_some() { 2 } else { 0 };
    let (partials, calls) = partial_calls(&gated, groups + 1 + window_columns);
    let (schema, window) = partial_schema(plan, aggregate, &[(FAMILY, DataType::Bigint)], &partials);
    let columns = columns_of(&schema, |_| true);
    let mut source = plan.source.clone();
    source.schema.fields.push(Field { name: FAMILY.into(), data_type: DataType::Bigint });
    source.required = vec![false; source.schema.fields.len()];
    if !source.origins.is_empty() {
        source.origins.push(ColumnOrigin::Field(vec![FAMILY.into()]));
    }
    let mut used_columns = plan.used_columns.clone();
    used_columns.resize(source_columns, false);
    used_columns.push(true);
    let group_exprs = aggregate.group_exprs.iter().cloned().chain([family_column]).collect();
    let stage_two = Stage {
        plan: Plan {
            source,
            used_columns,
            filter: None,
            operator: OperatorPlan::Aggregate(AggregatePlan { group_exprs, aggregates: partials, ..aggregate.clone() }),
            intermediate: schema.clone(),
            having: None,
            keys: group_keys(&columns, groups, window),
            outputs: columns,
            partitioning: Partitioning::ByExchange,
            shared: Vec::new(),
            unnest: None,
            ..plan.clone()
        },
        output: StageOutput::Exchange,
    };

    // Phase three: the latest partial of each (upstream partition,
    // family), per group, combined; a group is shown once rows of the
    // first family have reached it.
    let merge = MergePlan { window, calls, groups: (0..groups).collect(), parts: vec![groups] };
    let mut merge = last_stage(plan, schema, OperatorPlan::Merge(merge));
    let rows = merge.plan.intermediate.push(ROWS_SEEN, DataType::Bigint);
    let seen = PhysExpr::Compare {
        op: CmpOp::Gt,
        left: Box::new(PhysExpr::Column { index: rows, data_type: DataType::Bigint }),
        right: Box::new(PhysExpr::literal(Scalar::Bigint(0))),
    };
    merge.plan.having = Some(match merge.plan.having.take() {
        Some(having) => PhysExpr::And(Box::new(seen), Box::new(having)),
        None => seen,
    });
    Dataflow { stages: vec![stage_one, stage_two, merge], branches: branches.collect() }
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
    // The source's columns the query reads, and an unnest's (the first
    // stage unnests; the second reads its rows).
    let input = plan.input_schema();
    let width = plan.source.schema.fields.len();
    let carried = |i: usize| match &plan.unnest {
        Some(u) => u.keep.get(i).copied().unwrap_or(false),
        None => plan.used_columns.get(i).copied().unwrap_or(false),
    };
    let forwarded = columns_of(&input, |i| i >= width || carried(i));
    let exchange = first_stage(&plan, OperatorPlan::Stateless, input.clone(), forwarded, keys, EmitMode::PerRecord);
    let mut stateful = plan;
    if stateful.unnest.take().is_some() {
        let added = input.fields.len() - width;
        if !stateful.source.origins.is_empty() {
            stateful.source.origins.extend(input.fields[width..].iter().map(|f| ColumnOrigin::field(&f.name)));
        }
        stateful.source.schema = input;
        stateful.used_columns.extend(std::iter::repeat_n(true, added));
        stateful.source.required.extend(std::iter::repeat_n(false, added));
    }
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
        unnest: plan.unnest.clone(),
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
        unnest: None,
        ..plan.clone()
    };
    Stage { plan, output: StageOutput::Sink }
}
