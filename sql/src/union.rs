//! `UNION ALL` of sources:
//!
//! ```sql
//! SELECT symbol, price FROM nyse UNION ALL SELECT symbol, price FROM lse        -- one stage, to the sink
//! SELECT symbol, COUNT(*) FROM (SELECT symbol FROM nyse
//!                               UNION ALL SELECT symbol FROM lse) AS t GROUP BY symbol
//! ```
//!
//! Each branch filters and projects its own source (one plan per branch,
//! planned as any query); their rows are the union's, named and typed by
//! the first branch, as in PostgreSQL. At the top level the branches write
//! the sink side by side. Read from FROM, the union is a source to the
//! outer query, which is planned over it as over a source: the branches
//! write an exchange keyed by the outer query's state key, and the outer
//! query reads it (`sluice_plan::Dataflow::branches`).

use sluice_crds::{ColumnSpec, EventTimeSpec, SchemaSpec, SourceSpec};
use sluice_plan::{Branch, DataType, Dataflow, OperatorPlan, Partitioning, Plan, SqlError, Stage, StageOutput};
use sqlparser::ast::{Ident, SetExpr, SetOperator, SetQuantifier, Spanned, TableFactor};

use crate::diagnostic::Located;
use crate::planner::plan_parsed;
use crate::rewrite::ParsedQuery;
use crate::views::{column_type, table_named};

/// Plans `parsed` if it is a UNION ALL, or reads one in FROM.
pub fn plan_union(parsed: &mut ParsedQuery, sources: &[SourceSpec]) -> Result<Option<Dataflow>, SqlError> {
    if matches!(parsed.query.body.as_ref(), SetExpr::SetOperation { .. }) {
        let body = parsed.query.body.as_ref().clone();
        let plans = plan_branches(parsed, &body, sources)?;
        return Ok(Some(side_by_side(plans, StageOutput::Sink)));
    }
    let SetExpr::Select(outer) = parsed.query.body.as_mut() else { return Ok(None) };
    let [from] = outer.from.as_mut_slice() else { return Ok(None) };
    let TableFactor::Derived { lateral: false, subquery, alias, .. } = &from.relation else { return Ok(None) };
    if !matches!(subquery.body.as_ref(), SetExpr::SetOperation { .. }) || !from.joins.is_empty() {
        return Ok(None);
    }
    let name = alias.as_ref().map_or_else(|| Ident::new("union_all"), |a| a.name.clone());
    let mut inner = ParsedQuery {
        query: subquery.clone(),
        window: None,
        emit: None,
        clauses: parsed.clauses.clone(),
        top_n: None,
        as_of: Vec::new(),
        unnest: None,
    };
    inner.query.with.clone_from(&parsed.query.with);
    from.relation = table_named(name.clone());
    let body = inner.query.body.as_ref().clone();
    let mut plans = plan_branches(&inner, &body, sources)?;
    let Some(first) = plans.first() else { return Ok(None) };
    let columns = first
        .outputs
        .iter()
        .map(|o| ColumnSpec::field(o.name.clone(), column_type(o.expr.data_type()), false))
        .collect();
    let union = SourceSpec {
        schema: SchemaSpec { columns, registry: None },
        event_time: event_time(&plans)
            .map(|c| EventTimeSpec { column: first.outputs[c].name.clone(), watermark_delay_millis: 0 }),
        ..SourceSpec::table(&name.value, &[])
    };
    parsed.query.with = None;
    let timed = union.event_time.is_some();
    let mut outer_plan = plan_parsed(parsed, &[union]).map_err(|mut e| {
        if !timed && e.message.starts_with("time windows need event time") {
            e.message = format!(
                "time windows over UNION ALL need event time: each branch's source must declare eventTime, and \
                 every branch must select its event-time column, unchanged, at the same position (`{}` has none)",
                name.value
            );
        }
        e
    })?;
    // The union's rows go to the partition of the outer query's state key
    // (one partition for a global aggregate); a query that keeps no state
    // spreads them by the whole row.
    let key_columns: Vec<usize> = match &outer_plan.partitioning {
        Partitioning::KeyedBy(by) => by.iter().filter_map(|c| outer_plan.source.schema.index_of(c)).collect(),
        _ if matches!(outer_plan.operator, OperatorPlan::Stateless) => (0..first.outputs.len()).collect(),
        _ => Vec::new(),
    };
    for plan in &mut plans {
        plan.keys = key_columns.iter().filter_map(|&i| plan.outputs.get(i).cloned()).collect();
    }
    outer_plan.partitioning = Partitioning::ByExchange;
    let mut flow = side_by_side(plans, StageOutput::Exchange);
    flow.stages.push(Stage { plan: outer_plan, output: StageOutput::Sink });
    Ok(Some(flow))
}

/// The union's event-time column: the output every branch fills with its
/// own source's event time, unchanged. Its watermark needs no delay here:
/// the exchange carries each branch partition's own watermark (its
/// source's delay applied) and the reading partition takes the minimum
/// over them, so a window over the union closes when every branch passed
/// it (as after any repartition topic). None when a branch has no event
/// time or passes it elsewhere, or not at all.
fn event_time(plans: &[Plan]) -> Option<usize> {
    let passed = |p: &Plan| {
        let column = p.source.event_time.as_ref()?.column;
        p.outputs.iter().position(|o| o.expr.as_column() == Some(column))
    };
    let first = passed(plans.first()?)?;
    plans.iter().all(|p| passed(p) == Some(first)).then_some(first)
}

/// The first plan as stage 0, the others as its branches.
fn side_by_side(mut plans: Vec<Plan>, output: StageOutput) -> Dataflow {
    let first = plans.remove(0);
    let branches = plans.into_iter().map(|plan| Branch { plan, beside: 0, reads_exchange: false }).collect();
    Dataflow { stages: vec![Stage { plan: first, output }], branches }
}

/// Plans every branch of a UNION ALL: each filters and projects a source of
/// its own, with as many columns as the first and of the same types; the
/// first names them.
fn plan_branches(parsed: &ParsedQuery, body: &SetExpr, sources: &[SourceSpec]) -> Result<Vec<Plan>, SqlError> {
    let mut branches = Vec::new();
    flatten(body, &mut branches)?;
    let mut plans: Vec<Plan> = Vec::with_capacity(branches.len());
    for branch in branches {
        let mut query = parsed.query.as_ref().clone();
        *query.body = branch.clone();
        let mut one = ParsedQuery {
            query: Box::new(query),
            window: parsed.window.clone(),
            emit: parsed.emit,
            clauses: parsed.clauses.clone(),
            top_n: None,
            as_of: Vec::new(),
            unnest: None,
        };
        let mut plan = plan_parsed(&mut one, sources)?;
        if !matches!(plan.operator, OperatorPlan::Stateless) {
            return Err(SqlError::at_node(
                branch,
                "a branch of UNION ALL may only filter and project its source: aggregate over the union instead \
                 (SELECT … FROM (… UNION ALL …) AS t GROUP BY …)",
            ));
        }
        if let Some(first) = plans.first() {
            if plans.iter().any(|p| p.source.name.eq_ignore_ascii_case(&plan.source.name)) {
                return Err(SqlError::at_node(
                    branch,
                    format!(
                        "source {} appears twice in UNION ALL: each branch reads a source of its own",
                        plan.source.name
                    ),
                ));
            }
            if plan.outputs.len() != first.outputs.len() {
                return Err(SqlError::at_node(
                    branch,
                    format!(
                        "each UNION ALL branch has the same number of columns: this one has {}, the first {}",
                        plan.outputs.len(),
                        first.outputs.len()
                    ),
                ));
            }
            for (i, (o, f)) in plan.outputs.iter_mut().zip(&first.outputs).enumerate() {
                let (t, want) = (o.expr.data_type(), f.expr.data_type());
                if t != want && t != DataType::Null && want != DataType::Null {
                    return Err(SqlError::at_node(
                        branch,
                        format!(
                            "column {} of this UNION ALL branch is {t} where the first branch's `{}` is {want}",
                            i + 1,
                            f.name
                        ),
                    ));
                }
                if t == DataType::Null && want != DataType::Null {
                    o.expr = crate::typing::cast(o.expr.clone(), want);
                }
                o.name.clone_from(&f.name);
            }
        }
        plans.push(plan);
    }
    // A NULL column of the first branch takes its type from the others.
    let Some((first, rest)) = plans.split_first_mut() else {
        return Err(SqlError::unpositioned("internal: UNION ALL without branches"));
    };
    for (i, o) in first.outputs.iter_mut().enumerate() {
        if o.expr.data_type() == DataType::Null
            && let Some(t) = rest.iter().map(|p| p.outputs[i].expr.data_type()).find(|t| *t != DataType::Null)
        {
            o.expr = crate::typing::cast(o.expr.clone(), t);
        }
    }
    Ok(plans)
}

/// The SELECTs of `a UNION ALL b UNION ALL …`, left to right.
fn flatten<'a>(body: &'a SetExpr, out: &mut Vec<&'a SetExpr>) -> Result<(), SqlError> {
    match body {
        SetExpr::SetOperation { op: SetOperator::Union, set_quantifier: SetQuantifier::All, left, right } => {
            flatten(left, out)?;
            flatten(right, out)
        }
        SetExpr::SetOperation { op: SetOperator::Union, .. } => Err(SqlError::at_span(
            body.span(),
            "UNION without ALL removes duplicates, which a stream never can finish doing: write UNION ALL \
             (and SELECT DISTINCT over it if you need distinct rows)",
        )),
        SetExpr::SetOperation { op, .. } => {
            Err(SqlError::at_span(body.span(), format!("{op} is not supported: UNION ALL is")))
        }
        SetExpr::Select(_) => {
            out.push(body);
            Ok(())
        }
        SetExpr::Query(q) => flatten(&q.body, out),
        other => Err(SqlError::at_node(other, "a UNION ALL branch must be a SELECT")),
    }
}
