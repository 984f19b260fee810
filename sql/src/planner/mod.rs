//! Query → [`Plan`]: resolve the source, classify the query (stateless,
//! aggregate, ROWS window), compile every expression in the right scope, and
//! check the streaming rules (windows need event time, EMIT FINAL needs a
//! window, state must be partition-aligned).
//!
//! Split by concern, each file using only those listed after it: this file
//! classifies the query and assembles the plan; `aggregate` plans GROUP BY
//! and time windows, `rows` ROWS windows, `query` holds the query being
//! planned (its source, SELECT, used columns) and plans stateless outputs,
//! `scope` resolves names against the source.

mod aggregate;
mod collect;
mod query;
mod rows;
mod scope;
mod top_n;
mod unnest;

pub(crate) use query::find_source;
pub(crate) use scope::{WINDOW_END, WINDOW_START};

use query::Planner;

use crate::diagnostic::Located;
use sluice_crds::SourceSpec;
use sqlparser::ast::{Expr, GroupByExpr, SelectItem};

use crate::compile::{call_args, compile};
use crate::rewrite::{self, EmitKind};
use crate::typing::cast;
use sluice_plan::{AggFunc, EmitMode, OperatorPlan, Partitioning, Plan};
use sluice_plan::{DataType, SqlError};

/// Plans `sql` against the declared sources.
pub fn plan_query(sql: &str, sources: &[SourceSpec]) -> Result<Plan, SqlError> {
    let mut parsed = rewrite::parse(sql)?;
    crate::nested::resolve_nested_fields(&mut parsed, sources);
    let mut plan = plan_parsed(&mut parsed, sources)?;
    plan.share_subexpressions();
    Ok(plan)
}

/// Plans an already parsed query (views merged, DISTINCT rewritten first).
pub(crate) fn plan_parsed(parsed: &mut rewrite::ParsedQuery, sources: &[SourceSpec]) -> Result<Plan, SqlError> {
    if let Some(as_of) = parsed.as_of.first() {
        // A temporal join takes it out before planning its sides.
        return Err(SqlError::at_span(
            as_of.span,
            "FOR SYSTEM_TIME AS OF applies to a table joined to a stream: FROM s JOIN t FOR SYSTEM_TIME AS OF \
             s.ts ON …, where source t declares `table`",
        ));
    }
    crate::top_n::take_top_n(parsed)?;
    crate::views::inline_views(&mut parsed.query)?;
    crate::distinct::distinct_as_group_by(&mut parsed.query)?;
    Planner::new(parsed, sources)?.plan()
}

/// Compiles `expr` over `source`'s columns (a join's ON condition, over
/// the joined row).
pub(crate) fn compile_over(
    expr: &Expr,
    source: &sluice_plan::SourceSchema,
    context: &'static str,
) -> Result<sluice_plan::PhysExpr, SqlError> {
    let qualifiers = vec![source.name.to_ascii_lowercase()];
    let mut used = vec![false; source.schema.fields.len()];
    compile(expr, &mut scope::InputScope { source, qualifiers: &qualifiers, used: &mut used, context })
}

impl Planner<'_> {
    fn plan(mut self) -> Result<Plan, SqlError> {
        let filter = match &self.select.selection {
            Some(w) => {
                let e = compile(w, &mut self.input_scope("WHERE"))?;
                Some(match e.data_type() {
                    DataType::Boolean => e,
                    DataType::Null => cast(e, DataType::Boolean),
                    t => return Err(SqlError::at_node(w, format!("WHERE needs a boolean condition, got {t}"))),
                })
            }
            None => None,
        };
        let group_by = match &self.select.group_by {
            GroupByExpr::Expressions(exprs, modifiers) if modifiers.is_empty() => exprs.as_slice(),
            GroupByExpr::Expressions(..) => {
                return Err(match self.parsed.clause("ROLLUP") {
                    Some(span) => SqlError::at_span(span, "GROUP BY ROLLUP / CUBE / GROUPING SETS are not supported"),
                    None => SqlError::at_node(
                        &self.select.group_by,
                        "GROUP BY ROLLUP / CUBE / GROUPING SETS are not supported",
                    ),
                });
            }
            GroupByExpr::All(_) => {
                return Err(SqlError::at_span(
                    self.select.select_token.0.span,
                    "GROUP BY ALL is not supported: list the grouping expressions",
                ));
            }
        };
        let mut calls = CallKinds::default();
        for item in &self.select.projection {
            if let SelectItem::UnnamedExpr(e) | SelectItem::ExprWithAlias { expr: e, .. } = item {
                calls.scan(e);
            }
        }
        if let Some(h) = &self.select.having {
            calls.scan(h);
        }
        let is_aggregate = !group_by.is_empty() || calls.aggregate.is_some() || self.parsed.window.is_some();
        if let (true, Some(w)) = (is_aggregate, &calls.window) {
            return Err(SqlError::at_node(w, "window functions (OVER) cannot be combined with GROUP BY or aggregates"));
        }
        if !is_aggregate && let Some(h) = &self.select.having {
            return Err(SqlError::at_node(h, "HAVING needs GROUP BY or an aggregate"));
        }
        let emit = self.parsed.emit;
        let (operator, intermediate, outputs, keys, having, partitioning, emit_mode) = if is_aggregate {
            self.plan_aggregate(group_by)?
        } else if self.parsed.top_n.is_some() {
            self.plan_top_n()?
        } else if calls.window.is_some() {
            self.plan_rows()?
        } else {
            let outputs = self.stateless_outputs()?;
            (
                OperatorPlan::Stateless,
                self.source.schema.clone(),
                outputs,
                Vec::new(),
                None,
                Partitioning::Any,
                EmitMode::PerRecord,
            )
        };
        let emit_mode = match (emit.map(|e| e.kind), emit_mode) {
            (None, m) => m,
            (Some(EmitKind::Changes), EmitMode::Final) => EmitMode::Changes,
            (Some(EmitKind::Changes), m) => m,
            (Some(EmitKind::Final), EmitMode::Final) => EmitMode::Final,
            (Some(EmitKind::Final), EmitMode::Changes) => {
                return Err(SqlError::at_span(
                    emit.map_or(sqlparser::tokenizer::Span::empty(), |e| e.span),
                    "EMIT FINAL needs a time window (WINDOW TUMBLING/HOPPING/SESSION): without one a group never closes",
                ));
            }
            (Some(EmitKind::Final), EmitMode::PerRecord) => {
                return Err(SqlError::at_span(
                    emit.map_or(sqlparser::tokenizer::Span::empty(), |e| e.span),
                    "EMIT FINAL applies to windowed aggregations only",
                ));
            }
        };
        let mut seen = std::collections::HashSet::new();
        for (o, item) in outputs.iter().zip(&self.select.projection) {
            if !seen.insert(o.name.to_ascii_lowercase()) {
                return Err(SqlError::at_node(
                    item,
                    format!("duplicate output column `{}`: add an alias (AS name)", o.name),
                ));
            }
        }
        // The source as its records have it: the unnest's columns are the
        // engine's to make.
        let mut source = self.source;
        let mut used_columns = self.used;
        let unnest = self.unnest.map(|(mut plan, width, array_reads)| {
            source.schema.fields.truncate(width);
            source.required.truncate(width);
            used_columns.truncate(width);
            // What the rows carry: the source columns the rest of the
            // query reads; the decoder also fills what the array reads.
            plan.keep = used_columns.clone();
            used_columns.iter_mut().zip(&array_reads).for_each(|(u, a)| *u |= *a);
            plan
        });
        Ok(Plan {
            used_columns,
            source,
            filter,
            operator,
            intermediate,
            having,
            outputs,
            keys,
            emit: emit_mode,
            partitioning,
            shared: Vec::new(),
            unnest,
        })
    }
}

/// Where aggregate and window-function calls appear in a query.
#[derive(Default)]
struct CallKinds {
    aggregate: Option<Expr>,
    window: Option<Expr>,
}

impl CallKinds {
    fn scan(&mut self, e: &Expr) {
        let mut stack = vec![e];
        while let Some(e) = stack.pop() {
            match e {
                Expr::Function(f) => {
                    let name = f.name.to_string().to_ascii_uppercase();
                    let is_agg = AggFunc::from_name(&name).is_some();
                    if f.over.is_some() {
                        self.window.get_or_insert_with(|| e.clone());
                        continue;
                    }
                    if is_agg {
                        self.aggregate.get_or_insert_with(|| e.clone());
                        continue;
                    }
                    if let Ok(a) = call_args(f, e) {
                        stack.extend(a.args);
                    }
                }
                Expr::BinaryOp { left, right, .. } => stack.extend([left.as_ref(), right.as_ref()]),
                Expr::UnaryOp { expr, .. }
                | Expr::Nested(expr)
                | Expr::IsNull(expr)
                | Expr::IsNotNull(expr)
                | Expr::IsTrue(expr)
                | Expr::IsFalse(expr)
                | Expr::IsNotTrue(expr)
                | Expr::IsNotFalse(expr)
                | Expr::Cast { expr, .. }
                | Expr::Extract { expr, .. }
                | Expr::Ceil { expr, .. }
                | Expr::Floor { expr, .. }
                | Expr::Trim { expr, .. }
                | Expr::Like { expr, .. }
                | Expr::ILike { expr, .. } => stack.push(expr),
                Expr::Substring { expr, substring_from, substring_for, .. } => {
                    stack.push(expr);
                    stack.extend(substring_from.as_deref());
                    stack.extend(substring_for.as_deref());
                }
                Expr::InList { expr, list, .. } => {
                    stack.push(expr);
                    stack.extend(list);
                }
                Expr::Between { expr, low, high, .. } => stack.extend([expr.as_ref(), low.as_ref(), high.as_ref()]),
                Expr::Case { operand, conditions, else_result, .. } => {
                    stack.extend(operand.as_deref());
                    for c in conditions {
                        stack.extend([&c.condition, &c.result]);
                    }
                    stack.extend(else_result.as_deref());
                }
                _ => {}
            }
        }
    }
}
