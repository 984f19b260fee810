//! `FROM s CROSS JOIN UNNEST(s.arr) [WITH ORDINALITY] AS t(…)` and `LEFT
//! JOIN UNNEST(…) ON TRUE` (Flink's forms; `FROM s, UNNEST(…)` too): an
//! array's elements, or a map's entries, as rows beside their source row.
//!
//! It is no join to plan: the clause is taken out of FROM when the query
//! is parsed ([`take_unnest`]), and the planner appends its columns to the
//! source's (`planner/unnest.rs`), so WHERE, GROUP BY, windows and the SELECT
//! list read them as they read the source's. The engine expands each batch
//! before the filter (`sluice_plan::UnnestPlan`).
//!
//! Its columns: an array of rows gives the row's fields (`AS i` then
//! `i.sku`), a map its key and value, any other array one column; `AS
//! t(a, b)` names them, and `WITH ORDINALITY` adds the element's 1-based
//! position last. A name the source already has must be renamed: `AS
//! i(item_id, …)`.

use sqlparser::ast::Spanned;
use sqlparser::ast::{Expr, JoinConstraint, JoinOperator, Query, SetExpr, TableAlias, TableFactor, Value};
use sqlparser::tokenizer::Span;

use crate::diagnostic::Located;
use sluice_plan::SqlError;

/// The UNNEST clause of a query, as written.
#[derive(Debug, Clone)]
pub struct UnnestClause {
    pub array: Expr,
    pub alias: Option<TableAlias>,
    pub ordinality: bool,
    pub left: bool,
    pub span: Span,
}

/// Takes the UNNEST out of `query`'s FROM, if it has one.
pub(crate) fn take_unnest(query: &mut Query) -> Result<Option<UnnestClause>, SqlError> {
    let SetExpr::Select(select) = query.body.as_mut() else { return Ok(None) };
    // `FROM s, UNNEST(…)`: a comma join.
    if let [_, second] = select.from.as_slice()
        && second.joins.is_empty()
        && matches!(second.relation, TableFactor::UNNEST { .. })
    {
        let second = select.from.remove(1);
        return clause(second.relation, false).map(Some);
    }
    let Some(first) = select.from.first_mut() else { return Ok(None) };
    let Some(at) = first.joins.iter().position(|j| matches!(j.relation, TableFactor::UNNEST { .. })) else {
        return Ok(None);
    };
    if first.joins.len() > 1 {
        return Err(SqlError::at_node(
            &first.joins[at].relation,
            "UNNEST beside a JOIN is not supported yet: unnest in a query of its own and join its results",
        ));
    }
    let join = first.joins.remove(at);
    let on_true = |c: &JoinConstraint| match c {
        JoinConstraint::None => true,
        JoinConstraint::On(Expr::Value(v)) => matches!(v.value, Value::Boolean(true)),
        _ => false,
    };
    let left = match &join.join_operator {
        JoinOperator::CrossJoin(c) | JoinOperator::Join(c) | JoinOperator::Inner(c) if on_true(c) => false,
        JoinOperator::Left(c) | JoinOperator::LeftOuter(c) if on_true(c) => true,
        _ => {
            return Err(SqlError::at_node(
                &join.relation,
                "UNNEST is joined with CROSS JOIN UNNEST(…), or LEFT JOIN UNNEST(…) ON TRUE to keep rows whose \
                 array is empty",
            ));
        }
    };
    clause(join.relation, left).map(Some)
}

fn clause(relation: TableFactor, left: bool) -> Result<UnnestClause, SqlError> {
    let span = relation.span();
    let TableFactor::UNNEST { alias, mut array_exprs, with_offset, with_ordinality, .. } = relation else {
        return Err(SqlError::unpositioned("internal: not an UNNEST"));
    };
    if with_offset {
        return Err(SqlError::at_span(span, "WITH OFFSET is not supported: use WITH ORDINALITY (1-based)"));
    }
    if array_exprs.len() != 1 {
        return Err(SqlError::at_span(
            span,
            "UNNEST takes one array or map (several arrays side by side are not supported)",
        ));
    }
    Ok(UnnestClause { array: array_exprs.remove(0), alias, ordinality: with_ordinality, left, span })
}
