//! Stream–stream interval joins:
//!
//! ```sql
//! SELECT o.id, o.amount, p.method
//! FROM orders o LEFT JOIN payments p
//!   ON o.id = p.order_id AND p.ts BETWEEN o.ts AND o.ts + INTERVAL '10' MINUTE
//! ```
//!
//! Planned as two sources writing one exchange, as a UNION ALL feeding an
//! aggregate is: each side's stage projects its source into one row layout
//! — the left side's columns, the right side's, a BOOLEAN saying which side
//! the row is from, and the row's event time — with the other side's
//! columns NULL, keyed by its side of the equality key, so both sides of a
//! key meet on one partition. The join's stage reads that exchange and
//! joins (`sluice_engine`'s `join.rs`); its WHERE applies to joined rows.
//!
//! Names: `alias.column` or `source.column`; a bare column name if only one
//! side has it. In the joined layout a column is named `alias.column`
//! (the alias, or the source's name), and references are rewritten to
//! those names before the outer query is planned over the layout.
//!
//! Split by idea, each file using only those listed after it: this file
//! plans a query's chain of joins; `step` makes one join's stages,
//! `conditions` sorts its ON into keys and bounds, `resolve` resolves
//! names against its sides, `side` holds the sides, and `names` the
//! layout's reserved names.

mod conditions;
mod names;
mod resolve;
mod side;
mod step;
#[cfg(test)]
mod tests;

pub(crate) use names::DELETED;
pub(crate) use side::table_source;

use sluice_crds::SourceSpec;
use sluice_plan::{Branch, Dataflow, OperatorPlan, OutputColumn, Partitioning, SqlError, Stage, StageOutput};
use sqlparser::ast::{
    BinaryOperator, Expr, GroupByExpr, Ident, JoinOperator, SelectItem, SetExpr, Spanned, TableFactor, TableWithJoins,
};

use crate::cut::cut;
use crate::diagnostic::Located;
use crate::planner::plan_parsed;
use crate::rewrite::{AsOf, ParsedQuery};
use crate::views::{aggregates_rows, table_named};

use conditions::split_and;
use names::{JOINED, column_name};
use resolve::{Resolver, expand_projection};
use side::{Side, referenced_names, side, windowed_side};
use step::{JoinStep, rows_spec};

/// Plans `parsed` if its FROM joins: `a JOIN b ON …`, or a chain `a JOIN
/// b ON … JOIN c ON …` (left-deep: each further join's left side is the
/// previous join's rows). Each join is a stage; the previous join's stage
/// writes its rows into the next join's exchange as that join's left side,
/// and the next source writes beside it as the right side.
pub fn plan_join(
    parsed: &mut ParsedQuery,
    sources: &[SourceSpec],
    partitions: i32,
) -> Result<Option<Dataflow>, SqlError> {
    let as_of = std::mem::take(&mut parsed.as_of);
    let referenced = referenced_names(&parsed.query, &as_of);
    let SetExpr::Select(select) = parsed.query.body.as_mut() else {
        parsed.as_of = as_of;
        return Ok(None);
    };
    let from = match select.from.as_slice() {
        [from] if !from.joins.is_empty() => from.clone(),
        _ => {
            parsed.as_of = as_of;
            return Ok(None);
        }
    };
    if let Some(w) = &parsed.window {
        return Err(SqlError::at_span(
            w.span,
            "a time window over a join's rows is not supported yet: aggregate them with GROUP BY (no window)",
        ));
    }
    let aggregating = aggregates_rows(select);
    // A top-N over the join's rows is a stage after the join's, as an
    // aggregate is.
    let ranking = parsed.top_n.is_some();
    // WHERE's conjuncts that read one stream source only filter its rows
    // before they cross the exchange, when every join is INNER (a
    // conjunct on an outer join's NULL-extended side must see the NULLs).
    // Not a table's: a filtered-out update would leave its key's previous
    // version in the table.
    let mut conjuncts: Vec<(Expr, bool)> = Vec::new();
    if let Some(w) = &select.selection {
        let mut parts = Vec::new();
        split_and(w, &mut parts);
        conjuncts = parts.into_iter().map(|c| (c.clone(), false)).collect();
    }
    let Chain { mut stages, branches, step } =
        chain(&from, sources, referenced.as_ref(), as_of, &mut conjuncts, partitions)?;
    let aggregate_select = join_select(select, &step, conjuncts, aggregating || ranking)?;
    let joined_rows = rows_spec(&step.sides);
    let aggregate = after_join(parsed, aggregate_select, &joined_rows, aggregating)?;
    let mut outer = plan_parsed(parsed, std::slice::from_ref(&step.joined_spec()))?;
    step.make_join_stage(&mut outer)?;
    last_stages(&mut stages, outer, aggregate)?;
    Ok(Some(Dataflow { stages, branches }))
}

/// The stages of a chain of joins, first to last, and the sources
/// writing beside them; the last join's step.
struct Chain<'a> {
    stages: Vec<Stage>,
    branches: Vec<Branch>,
    step: JoinStep<'a>,
}

/// Phase one: each join of `from` in turn, its sides' stages (a windowed
/// side re-keyed first, a side aggregating the other's rows computed once
/// with it), WHERE's conjuncts on one stream side pushed before the
/// exchange (`pushed` set on each), each `FOR SYSTEM_TIME AS OF` taken by
/// the table it follows.
fn chain<'a>(
    from: &'a TableWithJoins,
    sources: &'a [SourceSpec],
    referenced: Option<&'a std::collections::HashSet<String>>,
    mut as_of: Vec<AsOf>,
    conjuncts: &mut [(Expr, bool)],
    partitions: i32,
) -> Result<Chain<'a>, SqlError> {
    let all_inner =
        from.joins.iter().all(|j| matches!(j.join_operator, JoinOperator::Join(_) | JoinOperator::Inner(_)));
    // A side aggregating the other side's rows computes them once with it.
    let mut cascade = match from.joins.as_slice() {
        [join] => crate::cascade::cascade([&from.relation, &join.relation], sources, partitions)?,
        _ => None,
    };
    let cascade_side = |c: &crate::cascade::Cascade, i: usize, relation: &TableFactor| -> Result<Side<'_>, SqlError> {
        let TableFactor::Derived { subquery, alias: Some(alias), .. } = relation else {
            return Err(SqlError::unpositioned("internal: a cascaded side that is not an aliased subquery"));
        };
        if i == c.over {
            windowed_side(&c.outer, &alias.name, std::slice::from_ref(&c.rows))
        } else {
            Ok(Side { rows: Some(c.rows.clone()), ..windowed_side(subquery, &alias.name, sources)? })
        }
    };
    let mut left = Some(match &cascade {
        Some(c) => cascade_side(c, 0, &from.relation)?,
        None => side(&from.relation, sources, referenced)?,
    });
    let mut stages = Vec::with_capacity(from.joins.len() + 2);
    let mut branches = Vec::with_capacity(from.joins.len());
    let mut previous: Option<JoinStep<'_>> = None;
    for (k, join) in from.joins.iter().enumerate() {
        // `FOR SYSTEM_TIME AS OF` belongs to the table it follows.
        let starts = Spanned::span(&join.relation).start;
        let next = from.joins.get(k + 1).map(|j| Spanned::span(&j.relation).start);
        let (mine, rest): (Vec<AsOf>, Vec<AsOf>) =
            as_of.into_iter().partition(|a| a.span.start > starts && next.is_none_or(|n| a.span.start < n));
        as_of = rest;
        if let Some(twice) = mine.get(1) {
            return Err(SqlError::at_span(twice.span, "FOR SYSTEM_TIME AS OF given twice"));
        }
        let right = match &cascade {
            Some(c) => cascade_side(c, 1, &join.relation)?,
            None => side(&join.relation, sources, referenced)?,
        };
        let left_side = left.take().ok_or_else(|| SqlError::unpositioned("internal: a join without its left side"))?;
        let conjuncts_here = all_inner.then_some(&mut *conjuncts);
        let step = JoinStep::new(left_side, right, &from.relation, join, mine.first(), conjuncts_here)?;
        let mut filters: [Vec<Expr>; 2] = [Vec::new(), Vec::new()];
        if all_inner {
            let resolver = Resolver { sides: &step.sides };
            for (c, pushed) in conjuncts.iter_mut().filter(|(_, pushed)| !*pushed) {
                let Some(i) = resolver.only_side(c) else { continue };
                let s = &step.sides[i];
                if s.chain.is_none() && s.subquery.is_none() && s.spec.table.is_none() {
                    filters[i].push(c.clone());
                    *pushed = true;
                }
            }
        }
        if let Some(c) = cascade.take() {
            // The inner aggregate's stages; the outer aggregate reads their
            // exchange, and the other side's rows are projected from it
            // beside it (module `cascade`).
            let rows = std::slice::from_ref(&c.rows);
            let plans = [0, 1].map(|i| step.side_plan(i, if i == c.over { rows } else { sources }, None, &[]));
            let [left_plan, right_plan] = plans;
            let (left_plan, right_plan) = (left_plan?, right_plan?);
            step.check_key_types(&left_plan, &right_plan)?;
            let [mut outer, mut projected] =
                if c.over == 1 { [right_plan, left_plan] } else { [left_plan, right_plan] };
            // Both read an exchange: their watermark is its markers'.
            outer.partitioning = Partitioning::ByExchange;
            projected.partitioning = Partitioning::ByExchange;
            stages.extend(c.inner.stages);
            stages.push(Stage { plan: outer, output: StageOutput::Exchange });
            branches.push(Branch { plan: projected, beside: stages.len() - 1, reads_exchange: true });
            previous = Some(step);
            continue;
        }
        let left_plan = step.side_plan(0, sources, previous.as_ref(), &filters[0])?;
        let right_plan = step.side_plan(1, sources, None, &filters[1])?;
        step.check_key_types(&left_plan, &right_plan)?;
        // A windowed side whose source is not keyed by its GROUP BY is cut
        // as a query of its own would be: its rows cross an exchange keyed
        // by its state first, and its aggregate runs after it. The stages
        // are a chain, so that side goes first, as the stage, and the other
        // writes beside its last (which side a row is from travels with
        // the row, not with which one is the stage).
        let [left_flow, right_flow] = [left_plan, right_plan].map(|p| cut(p, partitions));
        let (left_flow, right_flow) = (left_flow?, right_flow?);
        let (mut chain, other) = match (left_flow.has_exchange(), right_flow.has_exchange()) {
            (false, true) if stages.is_empty() => (right_flow, left_flow),
            (true, true) | (false, true) => {
                return Err(SqlError::at_node(
                    if right_flow.has_exchange() { &join.relation } else { &from.relation },
                    format!(
                        "{}: a windowed side of a join is re-keyed by its GROUP BY before the join only when it is \
                         the one side that needs it, in the first join of a chain. Key its source by its GROUP BY \
                         (partitionKey)",
                        if stages.is_empty() {
                            "both sides of this join aggregate by a key their sources are not partitioned by"
                        } else {
                            "this side aggregates by a key its source is not partitioned by"
                        }
                    ),
                ));
            }
            _ => (left_flow, right_flow),
        };
        for stage in &mut chain.stages {
            stage.output = StageOutput::Exchange;
        }
        stages.append(&mut chain.stages);
        let Some(side) = other.stages.into_iter().next() else {
            return Err(SqlError::unpositioned("internal: a join side planned into no stage"));
        };
        branches.push(Branch { plan: side.plan, beside: stages.len() - 1, reads_exchange: false });
        if next.is_some() {
            // This join's rows are the next one's left side.
            left = Some(step.rows_as_side(&join.relation)?);
        }
        previous = Some(step);
    }
    if let Some(a) = as_of.first() {
        return Err(SqlError::at_span(
            a.span,
            "FOR SYSTEM_TIME AS OF follows the table joined to a stream: FROM s JOIN t FOR SYSTEM_TIME AS OF s.ts ON …",
        ));
    }
    let Some(step) = previous else { return Err(SqlError::unpositioned("internal: a join without its step")) };
    Ok(Chain { stages, branches, step })
}

/// Phase two: the outer query's SELECT over the last join's layout — its
/// names rewritten to the layout's, WHERE the conjuncts not pushed down.
/// A query that aggregates or ranks the joined rows (`after`) keeps the
/// joined rows here, and its own SELECT over them is returned, for a
/// stage after the join's.
fn join_select(
    select: &mut sqlparser::ast::Select,
    step: &JoinStep<'_>,
    conjuncts: Vec<(Expr, bool)>,
    after: bool,
) -> Result<Option<sqlparser::ast::Select>, SqlError> {
    let sides = &step.sides;
    let resolver = Resolver { sides };
    let rewrite = |e: &Expr| -> Result<Expr, SqlError> {
        let mut e = e.clone();
        resolver.rewrite(&mut e)?;
        Ok(e)
    };
    let projection = expand_projection(&select.projection, sides, &step.constraint, step.kind)?;
    let mut items = Vec::with_capacity(projection.len());
    for item in projection {
        items.push(match item {
            SelectItem::UnnamedExpr(e) => match column_name(&e) {
                Some(name) => SelectItem::ExprWithAlias { expr: rewrite(&e)?, alias: name },
                None => SelectItem::UnnamedExpr(rewrite(&e)?),
            },
            SelectItem::ExprWithAlias { expr, alias } => SelectItem::ExprWithAlias { expr: rewrite(&expr)?, alias },
            other => other,
        });
    }
    // An aggregate over the join's rows is a stage of its own after the
    // join's, planned over the joined rows; WHERE stays with the join.
    let joined_rows = rows_spec(sides);
    let mut aggregate_select = None;
    if after {
        let mut a = select.clone();
        a.projection = items;
        if let GroupByExpr::Expressions(exprs, _) = &mut a.group_by {
            for e in exprs {
                *e = rewrite(e)?;
            }
        }
        a.having = a.having.as_ref().map(rewrite).transpose()?;
        a.selection = None;
        a.from = vec![TableWithJoins { relation: table_named(Ident::new(JOINED)), joins: Vec::new() }];
        aggregate_select = Some(a);
        select.projection = joined_rows
            .schema
            .columns
            .iter()
            .map(|c| SelectItem::UnnamedExpr(Expr::Identifier(Ident::with_quote('"', c.name.clone()))))
            .collect();
        select.group_by = GroupByExpr::Expressions(Vec::new(), Vec::new());
        select.having = None;
    } else {
        select.projection = items;
    }
    select.selection = conjuncts
        .into_iter()
        .filter(|(_, pushed)| !pushed)
        .map(|(c, _)| rewrite(&c))
        .reduce(|a, b| Ok(Expr::BinaryOp { left: Box::new(a?), op: BinaryOperator::And, right: Box::new(b?) }))
        .transpose()?;
    select.from = vec![TableWithJoins { relation: table_named(Ident::new(JOINED)), joins: Vec::new() }];
    Ok(aggregate_select)
}

/// Phase three: the aggregate or top-N over the joined rows (`select`,
/// from [`join_select`]), planned over them; only GROUP BY without a
/// window, or a top-N, for now.
fn after_join(
    parsed: &mut ParsedQuery,
    select: Option<sqlparser::ast::Select>,
    joined_rows: &SourceSpec,
    aggregating: bool,
) -> Result<Option<sluice_plan::Plan>, SqlError> {
    let emit = if aggregating { parsed.emit.take() } else { None };
    let Some(a) = select else { return Ok(None) };
    let mut query = parsed.query.clone();
    *query.body = SetExpr::Select(Box::new(a));
    let mut p = ParsedQuery {
        query,
        window: None,
        emit,
        clauses: parsed.clauses.clone(),
        top_n: parsed.top_n.take(),
        as_of: Vec::new(),
        unnest: None,
    };
    let plan = plan_parsed(&mut p, std::slice::from_ref(joined_rows))?;
    match &plan.operator {
        OperatorPlan::Aggregate(a) if a.window.is_some() => {
            return Err(SqlError::unpositioned(
                "a time window over a join's rows is not supported yet: aggregate them with GROUP BY (no \
                 window)",
            ));
        }
        OperatorPlan::Aggregate(_) | OperatorPlan::TopN(_) => {}
        _ => {
            return Err(SqlError::unpositioned(
                "only GROUP BY aggregates and top-N may read a join's rows (no OVER window) for now",
            ));
        }
    }
    Ok(Some(plan))
}

/// Phase four: the last join's stage, writing the sink — or, with an
/// aggregate or top-N after it, the columns that reads, keyed by its
/// group (or PARTITION BY), into that stage's exchange.
fn last_stages(
    stages: &mut Vec<Stage>,
    mut outer: sluice_plan::Plan,
    aggregate: Option<sluice_plan::Plan>,
) -> Result<(), SqlError> {
    match aggregate {
        None => stages.push(Stage { plan: outer, output: StageOutput::Sink }),
        Some(mut aggregate) => {
            // The joined rows' columns are the layout's first ones, in
            // order: the aggregate's expressions over them hold over the
            // layout too. Only the columns it reads cross, keyed by its
            // group expressions (one partition for a global aggregate).
            // Keyed by its group, or by the top-N's PARTITION BY.
            let keys = match &aggregate.operator {
                OperatorPlan::Aggregate(a) => &a.group_exprs,
                OperatorPlan::TopN(t) => &t.partition_by,
                _ => {
                    return Err(SqlError::unpositioned(
                        "internal: a stage over a join that neither aggregates nor ranks",
                    ));
                }
            };
            outer.keys = keys
                .iter()
                .enumerate()
                .map(|(i, e)| OutputColumn { name: format!("key{i}"), expr: e.clone() })
                .collect();
            let used = aggregate.used_columns.clone();
            let mut i = 0;
            outer.outputs.retain(|_| {
                i += 1;
                used.get(i - 1).copied().unwrap_or(false)
            });
            aggregate.source.required = vec![false; aggregate.source.required.len()];
            aggregate.partitioning = Partitioning::ByExchange;
            stages.push(Stage { plan: outer, output: StageOutput::Exchange });
            stages.push(Stage { plan: aggregate, output: StageOutput::Sink });
        }
    }
    Ok(())
}
