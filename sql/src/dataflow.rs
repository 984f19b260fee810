//! A query → the stages it needs on its partitioned input.
//!
//! A stateful query whose source is not partitioned by its state key (a
//! `GROUP BY symbol` over a topic keyed by trader, a global aggregate over
//! several partitions) is cut at the state: the first stage applies WHERE
//! and forwards the columns the query reads, keyed by the state key; an
//! exchange puts every record of a key in one partition; the second stage
//! is the query itself, minus the WHERE already applied. When the source is
//! already keyed right (`partitionKey`), there is one stage and no exchange.

use sluice_crds::{ColumnSpec, SchemaSpec, SourceSpec};
use sluice_plan::{
    DataType, Dataflow, EmitMode, OperatorPlan, OutputColumn, Partitioning, PhysExpr, Plan, SqlError, Stage,
    StageOutput,
};
use sqlparser::ast::{Expr, Ident, Query, SelectItem, SetExpr, Spanned, TableFactor, WindowSpec, WindowType};
use sqlparser::tokenizer::Span;

use crate::cut::cut_query;
use crate::diagnostic::Located;
use crate::planner::plan_parsed;
use crate::rewrite::{self, ParsedQuery};
use crate::views::{aggregates_rows, column_type, table_named};

/// Plans `sql` for sources of `partitions` partitions.
pub fn plan_dataflow(sql: &str, sources: &[SourceSpec], partitions: i32) -> Result<Dataflow, SqlError> {
    let mut flow = plan_stages(sql, sources, partitions)?;
    one_stateful_reader(&flow)?;
    // Last: nothing after this reads a plan's expressions but the engine.
    for stage in &mut flow.stages {
        stage.plan.share_subexpressions();
    }
    for branch in &mut flow.branches {
        branch.plan.share_subexpressions();
    }
    Ok(flow)
}

/// A source two plans read (a self-join) is read once for both, and its
/// offsets are committed once, with one plan's state pointer: at most one
/// of them may keep state.
fn one_stateful_reader(flow: &Dataflow) -> Result<(), SqlError> {
    let stateful: Vec<&Plan> = flow.source_plans().filter(|p| !matches!(p.operator, OperatorPlan::Stateless)).collect();
    for (i, p) in stateful.iter().enumerate() {
        if !stateful[i + 1..].iter().any(|q| q.source.name.eq_ignore_ascii_case(&p.source.name)) {
            continue;
        }
        return Err(SqlError::unpositioned(format!(
            "source `{}` is read by two parts of this query that both keep state right at the source (say, two \
             windowed aggregates of it that its partitionKey already keys): one read of a source keeps one \
             checkpoint, so this is not supported yet. Aggregate it once, or key the source differently",
            p.source.name
        )));
    }
    // A branch over its stage's exchange reads it with the stage, and only
    // the stage's plan may keep state there (its state topic is the stage's).
    if let Some(b) =
        flow.branches.iter().find(|b| b.reads_exchange && !matches!(b.plan.operator, OperatorPlan::Stateless))
    {
        return Err(SqlError::unpositioned(format!(
            "internal: the plan beside stage {} over its exchange keeps state",
            b.beside
        )));
    }
    Ok(())
}

fn plan_stages(sql: &str, sources: &[SourceSpec], partitions: i32) -> Result<Dataflow, SqlError> {
    let mut parsed = rewrite::parse(sql)?;
    crate::nested::resolve_nested_fields(&mut parsed, sources);
    plan_parsed_stages(parsed, sources, partitions)
}

/// The stages of a parsed query (the whole query, or an aggregating
/// subquery an outer aggregate reads).
fn plan_parsed_stages(mut parsed: ParsedQuery, sources: &[SourceSpec], partitions: i32) -> Result<Dataflow, SqlError> {
    // First: a top-N's subquery may join (Nexmark q9), or read a union.
    crate::top_n::take_top_n(&mut parsed)?;
    if parsed.unnest.is_some() {
        // One source expanded: what the planner takes (it refuses joins,
        // unions and subqueries beside an UNNEST).
        return cut_query(plan_parsed(&mut parsed, sources)?, partitions);
    }
    if let Some(flow) = crate::join::plan_join(&mut parsed, sources, partitions)? {
        return Ok(flow);
    }
    if let Some(flow) = crate::union::plan_union(&mut parsed, sources)? {
        return Ok(flow);
    }
    if let Some(flow) = crate::changelog::plan_over_table(&mut parsed, sources)? {
        return Ok(flow);
    }
    if let Some(inner) = take_top_n_subquery(&mut parsed.query) {
        return rows_over_top_one(parsed, inner, sources, partitions);
    }
    if let Some(inner) = take_aggregating_subquery(&mut parsed.query) {
        return aggregate_over_aggregate(parsed, inner, sources, partitions);
    }
    cut_query(plan_parsed(&mut parsed, sources)?, partitions)
}

/// A subquery in FROM that aggregates, taken out of `query` (its place
/// now names it by its alias, as a source).
struct InnerQuery {
    query: Query,
    name: String,
    span: Span,
}

fn take_aggregating_subquery(query: &mut Query) -> Option<InnerQuery> {
    take_subquery(query, |inner| matches!(inner.body.as_ref(), SetExpr::Select(s) if aggregates_rows(s)))
}

/// A top-N subquery in FROM read by a query with OVER windows (Nexmark
/// q6), taken out of `query` as [`take_aggregating_subquery`] takes one.
fn take_top_n_subquery(query: &mut Query) -> Option<InnerQuery> {
    let SetExpr::Select(select) = query.body.as_ref() else { return None };
    if !select.projection.iter().any(|item| over_window(item).is_some()) {
        return None;
    }
    take_subquery(query, |inner| {
        let mut probe = ParsedQuery::of(inner.clone());
        crate::top_n::take_top_n(&mut probe).is_ok() && probe.top_n.is_some()
    })
}

/// The one subquery `query` reads FROM, when `wanted` holds for it: taken
/// out, its place now naming it by its alias, as a source.
fn take_subquery(query: &mut Query, wanted: impl Fn(&Query) -> bool) -> Option<InnerQuery> {
    let SetExpr::Select(select) = query.body.as_mut() else { return None };
    let [from] = select.from.as_mut_slice() else { return None };
    if !from.joins.is_empty() {
        return None;
    }
    let TableFactor::Derived { lateral: false, subquery, alias, .. } = &from.relation else { return None };
    if !wanted(subquery) {
        return None;
    }
    let name = alias.as_ref().map_or_else(|| Ident::new("subquery"), |a| a.name.clone());
    let span = Spanned::span(subquery.as_ref());
    let inner = subquery.as_ref().clone();
    from.relation = table_named(name.clone());
    Some(InnerQuery { query: inner, name: name.value, span })
}

/// The OVER clause of a select item's window function, if it is one.
fn over_window(item: &SelectItem) -> Option<&WindowSpec> {
    let (SelectItem::UnnamedExpr(Expr::Function(f)) | SelectItem::ExprWithAlias { expr: Expr::Function(f), .. }) = item
    else {
        return None;
    };
    match &f.over {
        Some(WindowType::WindowSpec(spec)) => Some(spec),
        _ => None,
    }
}

/// `SELECT k, AVG(x) OVER (PARTITION BY k ORDER BY t ROWS n PRECEDING)
/// FROM (<top-1 per key>)`: an OVER window over rows that keep being
/// replaced (Nexmark q6, the average of each seller's last winning bids).
/// The top-1 is planned as any top-N (it may join); its rows cross an
/// exchange keyed by the window's PARTITION BY, where each replaces its
/// key's last row and every frame it was or is in is computed again
/// ([`RowsPlan::upsert_key`](sluice_plan::RowsPlan)). Flink refuses this
/// shape (its OVER windows take no retractions).
fn rows_over_top_one(
    mut outer: ParsedQuery,
    inner: InnerQuery,
    sources: &[SourceSpec],
    partitions: i32,
) -> Result<Dataflow, SqlError> {
    let refused = |why: &str| {
        SqlError::at_span(
            inner.span,
            format!("an OVER window over this subquery's top-N, whose rows are replaced as better ones come: {why}"),
        )
    };
    let order = outer_order_by(&outer.query);
    let mut flow = plan_parsed_stages(ParsedQuery::of(inner.query), sources, partitions)?;
    let Some(last) = flow.stages.last_mut() else {
        return Err(SqlError::unpositioned("internal: a dataflow without stages"));
    };
    let OperatorPlan::TopN(top) = &last.plan.operator else {
        return Err(refused("the subquery must be the top-N itself"));
    };
    if top.limit != 1 {
        return Err(refused("it needs the top 1 (`rownum <= 1`), one row per key; with more, rows change rank"));
    }
    // The top-1's key: output columns of the subquery (hidden ones where
    // it does not select them).
    let mut key = Vec::with_capacity(top.partition_by.len());
    for (g, k) in top.partition_by.clone().iter().enumerate() {
        let at = match last.plan.outputs.iter().position(|o| &o.expr == k) {
            Some(at) => at,
            None => {
                last.plan.outputs.push(OutputColumn { name: format!("__key{g}"), expr: k.clone() });
                last.plan.outputs.len() - 1
            }
        };
        key.push(at);
    }
    let mut columns = Vec::with_capacity(last.plan.outputs.len());
    for o in &last.plan.outputs {
        columns.push(ColumnSpec::field(o.name.clone(), column_type(o.expr.data_type()), false));
    }
    let source = SourceSpec { schema: SchemaSpec { columns, registry: None }, ..SourceSpec::table(&inner.name, &[]) };
    let mut plan = plan_parsed(&mut outer, &[source])?;
    let OperatorPlan::Rows(rows) = &mut plan.operator else {
        return Err(refused("the outer query must be OVER windows alone (no GROUP BY)"));
    };
    let [spec] = rows.specs.as_mut_slice() else {
        return Err(refused("its OVER windows must share one PARTITION BY and frame"));
    };
    if spec.preceding.is_none() {
        return Err(refused(
            "the frame must be `ROWS BETWEEN n PRECEDING AND CURRENT ROW`, which bounds the rows a change touches",
        ));
    }
    if spec.partition_by.is_empty() || spec.partition_by.iter().any(|p| p.as_column().is_none_or(|c| !key.contains(&c)))
    {
        return Err(refused(
            "its PARTITION BY must name columns of the top-N's PARTITION BY, so that every version of a row meets in one partition",
        ));
    }
    let Some(at) = order.and_then(|o| last.plan.outputs.iter().position(|c| c.name.eq_ignore_ascii_case(&o))) else {
        return Err(refused("the window needs ORDER BY one of the subquery's columns"));
    };
    let data_type = last.plan.outputs[at].expr.data_type();
    if !matches!(data_type, DataType::Timestamp | DataType::Bigint) {
        return Err(refused(&format!("the window's ORDER BY column must be a timestamp or bigint, not {data_type}")));
    }
    spec.order_by = Some(PhysExpr::Column { index: at, data_type });
    rows.upsert_key =
        key.iter().map(|&c| PhysExpr::Column { index: c, data_type: last.plan.outputs[c].expr.data_type() }).collect();
    for c in key.iter().copied().chain([at]) {
        if let Some(u) = plan.used_columns.get_mut(c) {
            *u = true;
        }
    }
    // Results are upserts keyed by the top-1's key.
    plan.keys = key
        .iter()
        .map(|&c| OutputColumn {
            name: last.plan.outputs[c].name.clone(),
            expr: PhysExpr::Column { index: c, data_type: last.plan.outputs[c].expr.data_type() },
        })
        .collect();
    let by = match &plan.partitioning {
        Partitioning::KeyedBy(by) => by.clone(),
        _ => Vec::new(),
    };
    last.plan.keys =
        by.iter().filter_map(|c| last.plan.outputs.iter().find(|o| o.name.eq_ignore_ascii_case(c))).cloned().collect();
    last.output = StageOutput::Exchange;
    plan.partitioning = Partitioning::ByExchange;
    flow.stages.push(Stage { plan, output: StageOutput::Sink });
    Ok(flow)
}

/// The column name a query's (first) OVER window orders by.
fn outer_order_by(query: &Query) -> Option<String> {
    let SetExpr::Select(select) = query.body.as_ref() else { return None };
    select.projection.iter().filter_map(over_window).find_map(|spec| match spec.order_by.first().map(|o| &o.expr) {
        Some(Expr::Identifier(i)) => Some(i.value.clone()),
        Some(Expr::CompoundIdentifier(parts)) => parts.last().map(|i| i.value.clone()),
        _ => None,
    })
}

/// `SELECT … FROM (SELECT … GROUP BY …) GROUP BY …`: an aggregate over
/// the rows of an aggregate. The inner query is planned as any query (it
/// may join: Nexmark q4); its rows cross an exchange keyed by the outer
/// query's state key, and the outer query is planned over them as over a
/// source named by the subquery's alias.
///
/// A windowed inner aggregate (EMIT FINAL: Nexmark q5's shape) emits each
/// row once, final: the outer one folds them as any rows. Any other inner
/// aggregate updates its rows: each is the latest of its group, so the
/// outer aggregate takes the group's last row back before folding the new
/// one (`AggregatePlan::upsert_key`, as Flink retracts and ksqlDB
/// aggregates a table). That needs outer aggregates that can take a value
/// back (COUNT, SUM, AVG), and outer groups the inner group decides (its
/// GROUP BY columns), so every version of an inner group meets on the
/// same partition, in the same outer group.
fn aggregate_over_aggregate(
    mut outer: ParsedQuery,
    inner: InnerQuery,
    sources: &[SourceSpec],
    partitions: i32,
) -> Result<Dataflow, SqlError> {
    let inner_parsed = ParsedQuery::of(inner.query);
    let mut flow = plan_parsed_stages(inner_parsed, sources, partitions)?;
    let Some(last) = flow.stages.last_mut() else {
        return Err(SqlError::unpositioned("internal: a dataflow without stages"));
    };
    let groups = match &last.plan.operator {
        OperatorPlan::Aggregate(a) if a.retract.is_some() => {
            return Err(SqlError::at_span(
                inner.span,
                "an aggregate over an aggregate of a table is not supported yet: the inner aggregate deletes \
                 groups, which the outer one cannot take back",
            ));
        }
        OperatorPlan::Aggregate(a) if last.plan.is_windowed() && last.plan.emit == EmitMode::Final => None,
        OperatorPlan::Aggregate(a) if a.window.is_none() && last.plan.having.is_none() => Some(a.group_exprs.len()),
        _ => {
            return Err(SqlError::at_span(
                inner.span,
                "an aggregate over a subquery's aggregate needs the subquery to GROUP BY (without HAVING), or to \
                 aggregate per time window with EMIT FINAL",
            ));
        }
    };
    // An updating inner aggregate also writes its group, which keys its rows.
    let visible = last.plan.outputs.len();
    if let Some(n) = groups {
        for g in 0..n {
            let data_type = last.plan.intermediate.fields[g].data_type;
            let expr = PhysExpr::Column { index: g, data_type };
            last.plan.outputs.push(OutputColumn { name: format!("__group{g}"), expr });
        }
    }
    let mut columns = Vec::with_capacity(last.plan.outputs.len());
    for o in &last.plan.outputs {
        columns.push(ColumnSpec::field(o.name.clone(), column_type(o.expr.data_type()), false));
    }
    let source = SourceSpec { schema: SchemaSpec { columns, registry: None }, ..SourceSpec::table(&inner.name, &[]) };
    let mut plan = plan_parsed(&mut outer, &[source])?;
    if groups.is_some() {
        updating_input(&mut plan, &last.plan, visible, inner.span)?;
    }
    // The inner rows go to the partition of the outer state key: the inner
    // output columns the outer query keeps state by (all of its rows on
    // one partition for a global aggregate; spread as before when it
    // keeps no state).
    let keys = match &plan.partitioning {
        Partitioning::KeyedBy(by) => by
            .iter()
            .filter_map(|c| last.plan.outputs.iter().find(|o| o.name.eq_ignore_ascii_case(c)))
            .cloned()
            .collect(),
        _ => last.plan.keys.clone(),
    };
    last.plan.keys = keys;
    last.output = StageOutput::Exchange;
    plan.partitioning = Partitioning::ByExchange;
    flow.stages.push(Stage { plan, output: StageOutput::Sink });
    Ok(flow)
}

/// Makes `plan` (the outer query) aggregate the rows of the updating
/// aggregate `inner`, whose first `visible` outputs the query reads and
/// whose group follows them (`__group0`, …): keyed by that group, if the
/// outer query can aggregate a changelog.
fn updating_input(plan: &mut Plan, inner: &Plan, visible: usize, at: Span) -> Result<(), SqlError> {
    let refused = |why: &str| {
        SqlError::at_span(
            at,
            format!(
                "this subquery's aggregate updates its rows (it has no time window), so the aggregate over it \
                 takes each group's last row back before adding its new one: {why}"
            ),
        )
    };
    let OperatorPlan::Aggregate(outer) = &mut plan.operator else {
        return Err(refused("the outer query must aggregate (GROUP BY, no OVER window or top-N)"));
    };
    if outer.window.is_some() {
        return Err(refused("the outer query cannot have a time window"));
    }
    if let Some(a) = outer.aggregates.iter().find(|a| !a.func.retracts() || a.distinct) {
        return Err(refused(&format!(
            "{}{} cannot take a value back (COUNT, SUM and AVG can)",
            a.func.name(),
            if a.distinct { " DISTINCT" } else { "" }
        )));
    }
    // An outer group must be one of the inner group's columns: then every
    // version of an inner group is in one outer group, on one partition.
    let inner_groups = inner.outputs.len() - visible;
    for e in &outer.group_exprs {
        let grouped = e.as_column().and_then(|c| inner.outputs.get(c)).is_some_and(|o| {
            o.expr.as_column().is_some_and(|g| g < inner_groups) && inner.outputs[..visible].contains(o)
        });
        if !grouped {
            return Err(refused("the outer GROUP BY may only name the subquery's GROUP BY columns"));
        }
    }
    outer.upsert_key = (visible..inner.outputs.len())
        .map(|c| PhysExpr::Column { index: c, data_type: inner.outputs[c].expr.data_type() })
        .collect();
    for c in visible..inner.outputs.len() {
        if let Some(u) = plan.used_columns.get_mut(c) {
            *u = true;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use sluice_crds::{ColumnType, EventTimeSpec, SourceSpec};
    use sluice_plan::{OperatorPlan, Partitioning, StageOutput};

    use super::plan_dataflow;

    fn trades() -> SourceSpec {
        SourceSpec {
            partition_key: vec!["trader".into()],
            event_time: Some(EventTimeSpec { column: "ts".into(), watermark_delay_millis: 0 }),
            ..SourceSpec::table(
                "trades",
                &[
                    ("trader", ColumnType::String, true),
                    ("symbol", ColumnType::String, true),
                    ("qty", ColumnType::Bigint, true),
                    ("ts", ColumnType::Timestamp, true),
                    ("note", ColumnType::String, false),
                ],
            )
        }
    }

    #[test]
    fn repeated_costly_subexpressions_are_evaluated_once() {
        // Nexmark q21's shape: the same REGEXP_EXTRACT in WHERE and SELECT,
        // lower() five times.
        let sql = "SELECT trader, CASE WHEN lower(symbol) = 'a' THEN '0' WHEN lower(symbol) = 'b' THEN '1' \
                   ELSE REGEXP_EXTRACT(note, 'id=([^&]*)', 1) END AS id, lower(symbol) || '!' AS x \
                   FROM trades WHERE REGEXP_EXTRACT(note, 'id=([^&]*)', 1) IS NOT NULL OR lower(symbol) IN ('a', 'b')";
        let d = plan_dataflow(sql, &[trades()], 4).unwrap();
        let plan = &d.stages[0].plan;
        let shared: Vec<String> = plan.shared.iter().map(|e| format!("{e:?}")).collect();
        assert_eq!(shared.len(), 2, "{shared:?}");
        assert!(shared.iter().any(|e| e.contains("Lower")), "{shared:?}");
        assert!(shared.iter().any(|e| e.contains("RegexpExtract")), "{shared:?}");
        // Every occurrence reads the shared columns (5 and 6, after the
        // source's five); none is left to evaluate.
        let rest = format!("{:?} {:?}", plan.filter, plan.outputs);
        assert!(!rest.contains("Lower") && !rest.contains("RegexpExtract"), "{rest}");
        assert!(rest.contains("index: 5") && rest.contains("index: 6"), "{rest}");
        // A stateful plan is left as written.
        let d = plan_dataflow(
            "SELECT trader, COUNT(*) FILTER (WHERE lower(symbol) = 'a') AS a, COUNT(*) FILTER (WHERE lower(symbol) = 'b') AS b \
             FROM trades GROUP BY trader",
            &[trades()],
            4,
        )
        .unwrap();
        assert!(d.stages.iter().all(|s| s.plan.shared.is_empty()));
    }

    /// A source two plans read is read once: both may not keep state at
    /// it (one read keeps one checkpoint). Re-keyed first, they may.
    #[test]
    fn two_stateful_plans_of_one_source_are_refused() {
        let side = |agg: &str, by: &str| {
            format!(
                "(SELECT {by}, window_end AS we, {agg} AS v FROM trades GROUP BY {by}, TUMBLE(ts, INTERVAL '1' MINUTE))"
            )
        };
        let sql = |by: &str, other: &str| {
            format!(
                "SELECT a.v, b.v AS w FROM {} a JOIN {} b ON a.{by} = b.{other} AND a.we = b.we",
                side("COUNT(*)", by),
                side("SUM(qty)", other)
            )
        };
        let err = plan_dataflow(&sql("trader", "trader"), &[trades()], 4).unwrap_err();
        assert!(err.message.contains("source `trades` is read by two parts of this query"), "{err}");
        // One side re-keyed by symbol: it keeps its state after the exchange.
        let d = plan_dataflow(&sql("trader", "symbol"), &[trades()], 4).unwrap();
        assert_eq!(d.source_plans().filter(|p| p.source.name == "trades").count(), 2);
    }

    #[test]
    fn a_source_keyed_by_the_state_key_needs_no_exchange() {
        let d = plan_dataflow("SELECT trader, COUNT(*) FROM trades GROUP BY trader", &[trades()], 4).unwrap();
        assert!(!d.has_exchange());
        // One partition holds every group whatever the key.
        let d = plan_dataflow("SELECT symbol, COUNT(*) FROM trades GROUP BY symbol", &[trades()], 1).unwrap();
        assert!(!d.has_exchange());
    }

    #[test]
    fn a_re_keyed_group_by_is_cut_at_its_state() {
        let d = plan_dataflow("SELECT symbol, SUM(qty) AS q FROM trades WHERE qty > 0 GROUP BY symbol", &[trades()], 4)
            .unwrap();
        let [first, second] = d.stages.as_slice() else { panic!("two stages: {d:?}") };
        assert_eq!(first.output, StageOutput::Exchange);
        assert!(matches!(first.plan.operator, OperatorPlan::Stateless));
        assert!(first.plan.filter.is_some(), "WHERE runs before the exchange");
        let forwarded: Vec<&str> = first.plan.outputs.iter().map(|o| o.name.as_str()).collect();
        // Only the columns the query reads cross, and the event time, which
        // the watermark is computed from.
        assert_eq!(forwarded, ["symbol", "qty", "ts"]);
        assert_eq!(first.plan.keys.len(), 1, "keyed by the group expression");
        assert_eq!(second.output, StageOutput::Sink);
        assert!(second.plan.filter.is_none(), "WHERE is not applied twice");
        assert!(matches!(second.plan.operator, OperatorPlan::Aggregate(_)));
        assert_eq!(second.plan.partitioning, Partitioning::ByExchange);
        assert!(second.plan.source.required.iter().all(|r| !r));
        assert!(second.plan.check_partitioning(4).is_ok());
    }

    #[test]
    fn a_global_aggregate_over_several_partitions_runs_in_two_phases() {
        let d = plan_dataflow("SELECT COUNT(*) AS n, AVG(qty) AS a FROM trades", &[trades()], 3).unwrap();
        let [partial, merge] = d.stages.as_slice() else { panic!("two stages: {d:?}") };
        let OperatorPlan::Aggregate(a) = &partial.plan.operator else { panic!("{partial:?}") };
        assert_eq!(a.aggregates.len(), 3, "COUNT(*), and a sum and a count for AVG");
        assert!(partial.plan.keys.is_empty(), "every partial goes to one partition");
        let OperatorPlan::Merge(m) = &merge.plan.operator else { panic!("{merge:?}") };
        assert_eq!(m.calls[1].partials, [1, 2]);
        assert_eq!(merge.plan.partitioning, Partitioning::ByExchange);
        let names: Vec<&str> = merge.plan.outputs.iter().map(|o| o.name.as_str()).collect();
        assert_eq!(names, ["n", "a"], "the query's own SELECT list, over the combined aggregates");
    }

    #[test]
    fn a_windowed_global_aggregate_sends_each_window_to_its_own_partition() {
        let d = plan_dataflow(
            "SELECT window_start, COUNT(*) AS n FROM trades GROUP BY TUMBLE(ts, INTERVAL '1' MINUTE)",
            &[trades()],
            3,
        )
        .unwrap();
        let keys: Vec<&str> = d.stages[0].plan.keys.iter().map(|k| k.name.as_str()).collect();
        assert_eq!(keys, ["window_start"]);
        let OperatorPlan::Merge(m) = &d.stages[1].plan.operator else { panic!("{d:?}") };
        assert_eq!((m.window, m.calls[0].partials.as_slice()), (Some((0, 1)), &[2][..]));
    }

    #[test]
    fn a_global_count_distinct_forwards_each_value_once_per_partition() {
        let d = plan_dataflow(
            "SELECT COUNT(DISTINCT symbol) AS n, MAX(symbol) AS last FROM trades WHERE qty > 0",
            &[trades()],
            3,
        )
        .unwrap();
        let [partial, merge] = d.stages.as_slice() else { panic!("two stages: {d:?}") };
        let OperatorPlan::Aggregate(a) = &partial.plan.operator else { panic!("{partial:?}") };
        assert_eq!((a.group_exprs.len(), a.aggregates.len()), (1, 0), "a GROUP BY of the value alone");
        assert!(partial.plan.filter.is_some() && merge.plan.filter.is_none());
        let OperatorPlan::Aggregate(m) = &merge.plan.operator else { panic!("{merge:?}") };
        assert!(m.aggregates[0].distinct && m.group_exprs.is_empty());
        assert_eq!(merge.plan.source.schema.fields.len(), 1);
    }

    #[test]
    fn a_global_aggregate_that_cannot_be_merged_sends_its_rows_to_one_partition() {
        for sql in [
            "SELECT STDDEV(qty) AS s FROM trades",
            "SELECT COUNT(*) AS n FROM trades GROUP BY SESSION(ts, INTERVAL '1' MINUTE)",
        ] {
            let d = plan_dataflow(sql, &[trades()], 3).unwrap();
            assert!(matches!(d.stages[0].plan.operator, OperatorPlan::Stateless), "{sql}");
            assert!(d.stages[0].plan.keys.is_empty(), "{sql}: every record goes to one partition");
        }
    }

    #[test]
    fn an_aggregate_over_few_groups_merges_partials_per_group() {
        // Grouped by the hour of the event time: partials per source
        // partition, merged per hour.
        let d = plan_dataflow(
            "SELECT DATE_TRUNC('hour', ts) AS h, COUNT(*) AS n, AVG(qty) AS q FROM trades GROUP BY DATE_TRUNC('hour', ts)",
            &[trades()],
            3,
        )
        .unwrap();
        let [partial, merge] = d.stages.as_slice() else { panic!("two stages: {d:?}") };
        let OperatorPlan::Aggregate(a) = &partial.plan.operator else { panic!("{partial:?}") };
        assert_eq!((a.group_exprs.len(), a.aggregates.len()), (1, 3), "AVG as a sum and a count");
        assert_eq!(partial.plan.keys.len(), 1, "keyed by the hour");
        let OperatorPlan::Merge(m) = &merge.plan.operator else { panic!("{merge:?}") };
        assert_eq!((m.groups.as_slice(), m.parts.as_slice()), (&[0][..], &[][..]));
        // Grouped by a column, or by the event time itself: many groups,
        // the rows cross.
        for sql in [
            "SELECT symbol, COUNT(*) AS n FROM trades GROUP BY symbol",
            "SELECT ts, COUNT(*) AS n FROM trades GROUP BY ts",
            "SELECT DATE_TRUNC('hour', ts) AS h, STDDEV(qty) AS s FROM trades GROUP BY DATE_TRUNC('hour', ts)",
        ] {
            let d = plan_dataflow(sql, &[trades()], 3).unwrap();
            assert!(matches!(d.stages[0].plan.operator, OperatorPlan::Stateless), "{sql}");
            assert_eq!(d.stages.len(), 2, "{sql}");
        }
    }

    #[test]
    fn distinct_counts_of_two_columns_cross_once_per_column_keyed_by_value() {
        let d = plan_dataflow(
            "SELECT COUNT(DISTINCT symbol) AS n, COUNT(DISTINCT qty) FILTER (WHERE qty > 1) AS q, COUNT(*) AS c \
             FROM trades WHERE qty > 0",
            &[trades()],
            3,
        )
        .unwrap();
        let [expand, partial, merge] = d.stages.as_slice() else { panic!("three stages: {d:?}") };
        let [beside] = d.branches.as_slice() else { panic!("one branch: {d:?}") };
        for (f, plan) in [&expand.plan, &beside.plan].into_iter().enumerate() {
            assert!(matches!(plan.operator, OperatorPlan::Stateless) && plan.filter.is_some());
            let family = &plan.outputs.last().unwrap();
            assert_eq!(family.name, "__family");
            assert_eq!(
                family.expr,
                sluice_plan::PhysExpr::literal(sluice_plan::Scalar::Bigint(i64::try_from(f).unwrap()))
            );
            // Keyed by the family and its value (symbol, then qty).
            assert_eq!(plan.keys.len(), 2);
            assert_eq!(plan.keys[1].expr.as_column(), Some([1, 2][f]), "{:?}", plan.keys);
        }
        let OperatorPlan::Aggregate(a) = &partial.plan.operator else { panic!("{partial:?}") };
        assert_eq!(a.group_exprs.len(), 1, "by family");
        assert!(partial.plan.keys.is_empty(), "partials of a global aggregate meet on one partition");
        let OperatorPlan::Merge(m) = &merge.plan.operator else { panic!("{merge:?}") };
        assert_eq!((m.groups.as_slice(), m.parts.as_slice()), (&[][..], &[0][..]));
    }

    #[test]
    fn a_windowed_aggregate_is_cut_with_the_event_time_forwarded() {
        let d = plan_dataflow(
            "SELECT symbol, COUNT(*) FROM trades GROUP BY symbol, TUMBLE(ts, INTERVAL '1' MINUTE)",
            &[trades()],
            4,
        )
        .unwrap();
        let [first, second] = d.stages.as_slice() else { panic!("two stages: {d:?}") };
        assert!(first.plan.outputs.iter().any(|o| o.name == "ts"));
        assert!(second.plan.is_windowed());
        assert_eq!(second.plan.partitioning, Partitioning::ByExchange);
    }

    #[test]
    fn an_aggregate_over_a_windowed_aggregate_is_three_stages_keyed_by_the_outer_group() {
        let d = plan_dataflow(
            "SELECT window_start, MAX(n) AS top FROM (SELECT symbol, window_start, COUNT(*) AS n FROM trades \
             GROUP BY symbol, TUMBLE(ts, INTERVAL '1' MINUTE)) AS c GROUP BY window_start",
            &[trades()],
            4,
        )
        .unwrap();
        assert_eq!(d.stages.len(), 3, "{d:?}");
        let counts = &d.stages[1].plan;
        assert_eq!(d.stages[1].output, StageOutput::Exchange);
        let keys: Vec<&str> = counts.keys.iter().map(|k| k.name.as_str()).collect();
        assert_eq!(keys, ["window_start"], "routed by the outer group key");
        assert_eq!(d.stages[2].plan.source.name, "c");
        assert_eq!(d.stages[2].plan.partitioning, Partitioning::ByExchange);
    }

    /// Over an updating aggregate: the outer aggregate is keyed by the
    /// inner group (its hidden `__group` columns), routed by its own group;
    /// what cannot take a value back, or groups by what the inner computes,
    /// is refused at the subquery.
    #[test]
    fn an_aggregate_over_an_updating_aggregate_takes_each_groups_last_row_back() {
        let inner = "(SELECT trader, symbol, SUM(qty) AS n FROM trades GROUP BY trader, symbol) AS c";
        let d =
            plan_dataflow(&format!("SELECT symbol, AVG(n) AS a FROM {inner} GROUP BY symbol"), &[trades()], 4).unwrap();
        let [sums, avg] = d.stages.as_slice() else { panic!("two stages: {d:?}") };
        let names: Vec<&str> = sums.plan.outputs.iter().map(|o| o.name.as_str()).collect();
        assert_eq!(names, ["trader", "symbol", "n", "__group0", "__group1"]);
        let keys: Vec<&str> = sums.plan.keys.iter().map(|k| k.name.as_str()).collect();
        assert_eq!(keys, ["symbol"], "routed by the outer group");
        let OperatorPlan::Aggregate(a) = &avg.plan.operator else { panic!("{avg:?}") };
        assert_eq!(a.upsert_key.len(), 2);
        assert!(avg.plan.used_columns[3] && avg.plan.used_columns[4], "the group columns are read");
        for (sql, message) in [
            (format!("SELECT MAX(n) FROM {inner}"), "MAX cannot take a value back"),
            (format!("SELECT n, COUNT(*) FROM {inner} GROUP BY n"), "may only name the subquery's GROUP BY columns"),
            (format!("SELECT symbol, n FROM {inner}"), "the outer query must aggregate"),
        ] {
            let err = plan_dataflow(&sql, &[trades()], 4).unwrap_err();
            assert_eq!((err.line, err.column), (1, sql.find("(SELECT").unwrap() as u64 + 2), "{err}");
            assert!(err.message.contains(message), "{sql}: {err}");
        }
    }

    /// Nexmark q6's shape over trades: the last trade per (symbol, trader)
    /// by time, then each symbol's average of its last 3 such rows.
    fn over_top_one(n: u32, over: &str) -> String {
        format!(
            "SELECT Q.trader, Q.symbol, AVG(Q.qty) OVER ({over}) AS a FROM (SELECT * FROM (SELECT trader, symbol, qty, \
             ts, ROW_NUMBER() OVER (PARTITION BY symbol, trader ORDER BY ts DESC) AS rn FROM trades) WHERE rn <= {n}) \
             AS Q"
        )
    }

    #[test]
    fn an_over_window_over_a_top_one_takes_its_rows_as_a_changelog() {
        let sql = over_top_one(1, "PARTITION BY Q.symbol ORDER BY Q.ts ROWS BETWEEN 2 PRECEDING AND CURRENT ROW");
        let d = plan_dataflow(&sql, &[trades()], 4).unwrap();
        let last = &d.stages.last().unwrap().plan;
        let OperatorPlan::Rows(rows) = &last.operator else { panic!("{:?}", last.operator) };
        assert_eq!(rows.upsert_key.len(), 2, "keyed by the top-1's (symbol, trader)");
        assert!(rows.specs[0].order_by.is_some());
        let keys: Vec<&str> = last.keys.iter().map(|k| k.name.as_str()).collect();
        assert_eq!(keys, ["symbol", "trader"], "upserts per top-1 key");
        assert_eq!(last.partitioning, Partitioning::ByExchange);
        for (over, n, why) in [
            ("PARTITION BY Q.symbol ORDER BY Q.ts ROWS BETWEEN 2 PRECEDING AND CURRENT ROW", 2, "top 1"),
            ("PARTITION BY Q.symbol ROWS BETWEEN 2 PRECEDING AND CURRENT ROW", 1, "ORDER BY"),
            ("PARTITION BY Q.symbol ORDER BY Q.ts ROWS UNBOUNDED PRECEDING", 1, "n PRECEDING"),
            ("PARTITION BY Q.qty ORDER BY Q.ts ROWS BETWEEN 2 PRECEDING AND CURRENT ROW", 1, "PARTITION BY must name"),
            ("PARTITION BY Q.symbol ORDER BY Q.qty ROWS BETWEEN 2 PRECEDING AND CURRENT ROW", 1, ""),
        ] {
            let planned = plan_dataflow(&over_top_one(n, over), &[trades()], 4);
            match planned {
                Ok(_) if why.is_empty() => {}
                Ok(_) => panic!("{over} (top {n}) plans"),
                Err(e) => assert!(!why.is_empty() && e.message.contains(why), "{over}: {e}"),
            }
        }
    }
}
