//! `SELECT DISTINCT` as `GROUP BY` its SELECT list without aggregates, as
//! PostgreSQL plans it (a hash aggregate over the output columns).
//!
//! On a stream the result is a changelog keyed by the row: each distinct
//! row is emitted once, when it first appears (the engine emits a group
//! without aggregates only when it is created). Its state is the set of
//! rows seen, so a DISTINCT over an unbounded key space grows without
//! bound: `stateMemoryLimit` applies.

use sluice_plan::SqlError;
use sqlparser::ast::{Distinct, GroupByExpr, Query, SelectItem, SetExpr};

use crate::diagnostic::Located;
use crate::views::{aggregates, has_group_by};

/// Rewrites a top-level `SELECT DISTINCT` into its `GROUP BY`.
pub fn distinct_as_group_by(query: &mut Query) -> Result<(), SqlError> {
    let SetExpr::Select(select) = query.body.as_mut() else { return Ok(()) };
    let at = select.select_token.0.span;
    match select.distinct.take() {
        None | Some(Distinct::All) => return Ok(()),
        Some(Distinct::Distinct) => {}
        Some(_) => return Err(SqlError::at_span(at, "DISTINCT ON is not supported")),
    }
    let mut exprs = Vec::with_capacity(select.projection.len());
    for item in &select.projection {
        match item {
            SelectItem::UnnamedExpr(e) | SelectItem::ExprWithAlias { expr: e, .. } => {
                if aggregates(e) {
                    return Err(SqlError::at_node(
                        e,
                        "SELECT DISTINCT with aggregate or window functions is not supported",
                    ));
                }
                exprs.push(e.clone());
            }
            SelectItem::ExprWithAliases { expr, .. } => {
                return Err(SqlError::at_node(expr, "multiple aliases are not supported"));
            }
            SelectItem::Wildcard(_) | SelectItem::QualifiedWildcard(..) => {
                return Err(SqlError::at_span(at, "SELECT DISTINCT * is not supported: list the columns"));
            }
        }
    }
    if has_group_by(select) || select.having.is_some() {
        return Err(SqlError::at_span(at, "SELECT DISTINCT with GROUP BY or HAVING is not supported"));
    }
    select.group_by = GroupByExpr::Expressions(exprs, Vec::new());
    Ok(())
}
