//! Top-N and deduplication, written as in Flink SQL and PostgreSQL:
//!
//! ```sql
//! SELECT * FROM (
//!   SELECT symbol, price, ROW_NUMBER() OVER (PARTITION BY symbol ORDER BY price DESC) AS rn
//!   FROM trades) WHERE rn <= 3
//! ```
//!
//! The outer query only filters on the row number and picks the
//! subquery's columns; it is folded into the subquery, which is then
//! planned as a top-N operator per PARTITION BY key (see
//! `planner::top_n`). `rn = 1` is deduplication.

use sqlparser::ast::{BinaryOperator, Expr, GroupByExpr, SelectItem, SetExpr, TableFactor, Value};

use crate::diagnostic::Located;
use crate::rewrite::{ParsedQuery, TopNSpec};
use sluice_plan::SqlError;

/// If `parsed` is a top-N query, replaces it by its subquery and records
/// the rest in `parsed.top_n`.
pub fn take_top_n(parsed: &mut ParsedQuery) -> Result<(), SqlError> {
    if parsed.top_n.is_some() {
        return Ok(());
    }
    let SetExpr::Select(outer) = parsed.query.body.as_ref() else { return Ok(()) };
    let [from] = outer.from.as_slice() else { return Ok(()) };
    let TableFactor::Derived { lateral: false, subquery, .. } = &from.relation else { return Ok(()) };
    if !from.joins.is_empty() {
        return Ok(());
    }
    let SetExpr::Select(inner) = subquery.body.as_ref() else { return Ok(()) };
    // The subquery's ROW_NUMBER() OVER (… ORDER BY …), by its alias.
    let Some(row_number) = inner.projection.iter().find_map(|item| match item {
        SelectItem::ExprWithAlias { expr: Expr::Function(f), alias }
            if f.name.to_string().eq_ignore_ascii_case("ROW_NUMBER")
                && f.over.as_ref().is_some_and(
                    |o| matches!(o, sqlparser::ast::WindowType::WindowSpec(s) if !s.order_by.is_empty()),
                ) =>
        {
            Some(alias.value.clone())
        }
        _ => None,
    }) else {
        return Ok(());
    };
    let Some(selection) = &outer.selection else {
        return Err(SqlError::at_span(
            outer.select_token.0.span,
            format!("a top-N query needs `WHERE {row_number} <= N` on the ROW_NUMBER of its subquery"),
        ));
    };
    let limit = row_number_limit(selection, &row_number)?;
    if !matches!(&outer.group_by, GroupByExpr::Expressions(e, _) if e.is_empty()) || outer.having.is_some() {
        return Err(SqlError::at_node(selection, "a top-N query's outer SELECT cannot aggregate"));
    }
    let outer_items = outer.projection.clone();
    let mut inner_query = subquery.as_ref().clone();
    if inner_query.with.is_none() {
        inner_query.with = parsed.query.with.take();
    }
    *parsed.query = inner_query;
    parsed.top_n = Some(TopNSpec { limit, row_number, outer: outer_items });
    Ok(())
}

/// N from `rn <= N`, `rn < N + 1`, `rn = 1` (or the same written the other way round).
fn row_number_limit(e: &Expr, rn: &str) -> Result<u64, SqlError> {
    let refused = || {
        SqlError::at_node(
            e,
            format!(
                "the outer WHERE of a top-N query must be `{rn} <= N` (or `{rn} < N`, `{rn} = 1`) with N from 1 to 10000"
            ),
        )
    };
    let Expr::BinaryOp { left, op, right } = e else { return Err(refused()) };
    let names_rn = |x: &Expr| match x {
        Expr::Identifier(i) => i.value.eq_ignore_ascii_case(rn),
        Expr::CompoundIdentifier(parts) => parts.last().is_some_and(|i| i.value.eq_ignore_ascii_case(rn)),
        _ => false,
    };
    let number = |x: &Expr| match x {
        Expr::Value(v) => match &v.value {
            Value::Number(n, _) => n.parse::<u64>().ok(),
            _ => None,
        },
        _ => None,
    };
    let (op, n) = match (names_rn(left), names_rn(right)) {
        (true, false) => (op.clone(), number(right)),
        (false, true) => (
            match op {
                BinaryOperator::GtEq => BinaryOperator::LtEq,
                BinaryOperator::Gt => BinaryOperator::Lt,
                other => other.clone(),
            },
            number(left),
        ),
        _ => return Err(refused()),
    };
    let limit = match (op, n) {
        (BinaryOperator::LtEq, Some(n)) => n,
        (BinaryOperator::Lt, Some(n)) => n.saturating_sub(1),
        (BinaryOperator::Eq, Some(1)) => 1,
        _ => return Err(refused()),
    };
    if !(1..=10_000).contains(&limit) {
        return Err(refused());
    }
    Ok(limit)
}
