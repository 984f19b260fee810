//! Subqueries in FROM and `WITH` (common table expressions), merged into
//! the query that reads them.
//!
//! A derived table or CTE whose body is a plain SELECT — filter and
//! project, no aggregate, window function, DISTINCT, ORDER BY or LIMIT — is
//! pulled up into its reader, as PostgreSQL's planner pulls up simple
//! subqueries: its WHERE is ANDed with the reader's, and every reference to
//! one of its output columns becomes the expression behind it. What is left
//! is one SELECT over the source, planned like any other, so a view costs
//! nothing at run time. Expressions keep their spans, so errors still point
//! into the text the user wrote.
//!
//! Subqueries that aggregate need a second stateful operator after the
//! first; they are refused here with their position until the engine chains
//! operators.

use std::collections::HashMap;
use std::ops::ControlFlow;

use sluice_plan::{AggFunc, SqlError};
use sqlparser::ast::{
    BinaryOperator, Cte, Expr, GroupByExpr, Ident, ObjectNamePart, Query, Select, SelectItem, SetExpr, TableAlias,
    TableFactor, visit_expressions_mut,
};

use crate::depth::{MAX_EXPR_NODES, check_nesting, count_nodes, too_many_nodes};
use crate::diagnostic::Located;

/// Merges every subquery in FROM and every CTE `query` reads into it.
pub fn inline_views(query: &mut Query) -> Result<(), SqlError> {
    let mut ctes: HashMap<String, Query> = HashMap::new();
    if let Some(with) = query.with.take() {
        if with.recursive {
            return Err(SqlError::at_span(with.with_token.0.span, "WITH RECURSIVE is not supported"));
        }
        for Cte { alias, query: body, materialized, .. } in with.cte_tables {
            if materialized.is_some() {
                return Err(SqlError::at_span(alias.name.span, "MATERIALIZED / NOT MATERIALIZED is not supported"));
            }
            if !alias.columns.is_empty() {
                return Err(SqlError::at_span(
                    alias.name.span,
                    "column lists on a CTE name are not supported: alias the columns in its SELECT",
                ));
            }
            let mut body = *body;
            // A CTE may read the ones declared before it.
            if let SetExpr::Select(select) = body.body.as_mut() {
                merge_from(select, &ctes)?;
            }
            ctes.insert(alias.name.value.to_ascii_lowercase(), body);
        }
    }
    if let SetExpr::Select(select) = query.body.as_mut() {
        merge_from(select, &ctes)?;
    }
    Ok(())
}

/// While `select` reads a subquery or a CTE, merges it in.
fn merge_from(select: &mut Select, ctes: &HashMap<String, Query>) -> Result<(), SqlError> {
    loop {
        let [from] = select.from.as_mut_slice() else { return Ok(()) };
        if !from.joins.is_empty() {
            return Ok(());
        }
        let (inner, alias, at) = match &mut from.relation {
            TableFactor::Derived { lateral, subquery, alias, .. } => {
                if *lateral {
                    return Err(SqlError::at_node(subquery.as_ref(), "LATERAL is not supported"));
                }
                let at = sqlparser::ast::Spanned::span(subquery.as_ref());
                (subquery.as_ref().clone(), alias.take(), at)
            }
            TableFactor::Table { name, alias, args: None, .. } => {
                let [ObjectNamePart::Identifier(id)] = name.0.as_slice() else { return Ok(()) };
                let Some(cte) = ctes.get(&id.value.to_ascii_lowercase()) else { return Ok(()) };
                let alias = alias
                    .take()
                    .or_else(|| Some(TableAlias { explicit: false, name: id.clone(), columns: Vec::new(), at: None }));
                (cte.clone(), alias, id.span)
            }
            _ => return Ok(()),
        };
        merge(select, inner, alias.as_ref(), at, ctes)?;
    }
}

/// Pulls the plain SELECT `inner`, read as `alias`, up into `outer`.
fn merge(
    outer: &mut Select,
    inner: Query,
    alias: Option<&TableAlias>,
    at: sqlparser::tokenizer::Span,
    ctes: &HashMap<String, Query>,
) -> Result<(), SqlError> {
    let refuse = |what: &str| {
        Err(SqlError::at_span(
            at,
            format!("{what} in a subquery or CTE is not supported yet: it may only filter and project its source"),
        ))
    };
    if inner.with.is_some() {
        return refuse("WITH");
    }
    if inner.order_by.is_some() || inner.limit_clause.is_some() || inner.fetch.is_some() {
        return refuse("ORDER BY / LIMIT");
    }
    let SetExpr::Select(mut body) = *inner.body else {
        return refuse("UNION / EXCEPT / INTERSECT");
    };
    if body.distinct.is_some() {
        return refuse("DISTINCT");
    }
    if aggregates_rows(&body) {
        return refuse("aggregation (GROUP BY, aggregate or window functions)");
    }
    if let Some(a) = alias
        && !a.columns.is_empty()
    {
        return Err(SqlError::at_span(
            a.name.span,
            "column lists on a subquery alias are not supported: alias the columns in its SELECT",
        ));
    }
    // The subquery may itself read one.
    merge_from(&mut body, ctes)?;

    // What each of its output names stands for, and how many nodes that is.
    let mut columns: HashMap<String, Expr> = HashMap::new();
    let mut sizes: HashMap<String, usize> = HashMap::new();
    let mut wildcard = false;
    for (i, item) in body.projection.iter().enumerate() {
        match item {
            SelectItem::Wildcard(_) | SelectItem::QualifiedWildcard(..) => wildcard = true,
            SelectItem::ExprWithAlias { expr, alias } => {
                let name = alias.value.to_ascii_lowercase();
                sizes.insert(name.clone(), node_count(expr));
                columns.insert(name, expr.clone());
            }
            SelectItem::UnnamedExpr(expr) => {
                let name = match expr {
                    Expr::Identifier(id) => id.value.clone(),
                    Expr::CompoundIdentifier(ids) => ids.last().map(|i| i.value.clone()).unwrap_or_default(),
                    _ => {
                        return Err(SqlError::at_node(
                            expr,
                            format!(
                                "name this column of the subquery (`{expr} AS name`): the query reading it refers to it by name (column {})",
                                i + 1
                            ),
                        ));
                    }
                };
                let name = name.to_ascii_lowercase();
                sizes.insert(name.clone(), node_count(expr));
                columns.insert(name, expr.clone());
            }
            SelectItem::ExprWithAliases { expr, .. } => {
                return Err(SqlError::at_node(expr, "multiple aliases are not supported"));
            }
        }
    }
    let qualifier = alias.map(|a| a.name.value.to_ascii_lowercase());

    // Every reference to the subquery's columns, replaced by its expression.
    let mut failure: Option<SqlError> = None;
    let mut copied = 0usize;
    let mut substitute = |expr: &mut Expr| {
        if failure.is_some() {
            return ControlFlow::Break(());
        }
        let name: Option<&Ident> = match expr {
            Expr::Identifier(id) => Some(id),
            Expr::CompoundIdentifier(ids) if ids.len() == 2 => {
                let q = ids[0].value.to_ascii_lowercase();
                (qualifier.as_deref() == Some(q.as_str())).then(|| &ids[1])
            }
            _ => None,
        };
        let Some(name) = name else { return ControlFlow::Continue(()) };
        let key = name.value.to_ascii_lowercase();
        copied = copied.saturating_add(sizes.get(&key).copied().unwrap_or(1));
        if copied > MAX_EXPR_NODES {
            failure = Some(too_many_nodes(at));
            return ControlFlow::Break(());
        }
        match columns.get(&key) {
            Some(Expr::Identifier(id)) => *expr = Expr::Identifier(id.clone()),
            Some(Expr::CompoundIdentifier(ids)) => *expr = Expr::CompoundIdentifier(ids.clone()),
            Some(e) => *expr = Expr::Nested(Box::new(e.clone())),
            // Behind `*`, the subquery's source columns pass through.
            None if wildcard => *expr = Expr::Identifier(name.clone()),
            None => {
                let mut known: Vec<&str> = columns.keys().map(String::as_str).collect();
                known.sort_unstable();
                failure.get_or_insert(SqlError::at_span(
                    name.span,
                    format!("column `{}` is not an output of the subquery (it has {})", name.value, known.join(", ")),
                ));
            }
        }
        ControlFlow::<()>::Continue(())
    };
    // The reader's SELECT list keeps its output names; its `*` is the
    // subquery's SELECT list (over the source: not substituted again).
    let mut projection = Vec::with_capacity(outer.projection.len());
    for item in std::mem::take(&mut outer.projection) {
        let mut item = match item {
            SelectItem::Wildcard(_) | SelectItem::QualifiedWildcard(..) => {
                projection.extend(body.projection.iter().cloned());
                continue;
            }
            SelectItem::UnnamedExpr(Expr::Identifier(id)) => {
                SelectItem::ExprWithAlias { expr: Expr::Identifier(id.clone()), alias: id }
            }
            SelectItem::UnnamedExpr(Expr::CompoundIdentifier(ids)) if ids.len() == 2 => {
                let name = ids[1].clone();
                SelectItem::ExprWithAlias { expr: Expr::CompoundIdentifier(ids), alias: name }
            }
            other => other,
        };
        if let SelectItem::UnnamedExpr(e) | SelectItem::ExprWithAlias { expr: e, .. } = &mut item {
            let _ = visit_expressions_mut(e, &mut substitute);
        }
        projection.push(item);
    }
    outer.projection = projection;
    if let Some(w) = &mut outer.selection {
        let _ = visit_expressions_mut(w, &mut substitute);
    }
    if let GroupByExpr::Expressions(exprs, _) = &mut outer.group_by {
        for e in exprs {
            let _ = visit_expressions_mut(e, &mut substitute);
        }
    }
    if let Some(h) = &mut outer.having {
        let _ = visit_expressions_mut(h, &mut substitute);
    }
    if let Some(e) = failure {
        return Err(e);
    }
    // Merged, its expressions nest under the reader's.
    check_nesting(outer)?;
    outer.selection = match (body.selection.take(), outer.selection.take()) {
        (Some(i), Some(o)) => Some(Expr::BinaryOp {
            left: Box::new(Expr::Nested(Box::new(i))),
            op: BinaryOperator::And,
            right: Box::new(Expr::Nested(Box::new(o))),
        }),
        (i, o) => i.or(o),
    };
    outer.from = std::mem::take(&mut body.from);
    Ok(())
}

/// The nodes of a subquery's column expression, saturated past the most a
/// merge may copy.
fn node_count(expr: &Expr) -> usize {
    count_nodes(expr, MAX_EXPR_NODES).unwrap_or(MAX_EXPR_NODES + 1)
}

/// Whether a SELECT has a GROUP BY (of any kind).
pub(crate) fn has_group_by(select: &Select) -> bool {
    match &select.group_by {
        GroupByExpr::Expressions(e, m) => !e.is_empty() || !m.is_empty(),
        GroupByExpr::All(_) => true,
    }
}

/// Whether a SELECT aggregates its rows: GROUP BY, HAVING, or an aggregate
/// or window function in its SELECT list.
pub(crate) fn aggregates_rows(select: &Select) -> bool {
    has_group_by(select)
        || select.having.is_some()
        || select.projection.iter().any(|item| select_item_expr(item).is_some_and(aggregates))
}

fn select_item_expr(item: &SelectItem) -> Option<&Expr> {
    match item {
        SelectItem::UnnamedExpr(e) | SelectItem::ExprWithAlias { expr: e, .. } => Some(e),
        _ => None,
    }
}

/// Whether `e` calls an aggregate or window function anywhere.
pub(crate) fn aggregates(e: &Expr) -> bool {
    let mut found = false;
    let _ = sqlparser::ast::visit_expressions(e, |x| {
        if let Expr::Function(f) = x
            && (f.over.is_some() || AggFunc::from_name(&f.name.to_string()).is_some())
        {
            found = true;
        }
        ControlFlow::<()>::Continue(())
    });
    found
}

/// `FROM name`: where a derived table stood, the source its rows are
/// planned as.
pub(crate) fn table_named(name: Ident) -> TableFactor {
    TableFactor::Table {
        name: sqlparser::ast::ObjectName::from(vec![name]),
        alias: None,
        args: None,
        with_hints: Vec::new(),
        version: None,
        with_ordinality: false,
        partitions: Vec::new(),
        json_path: None,
        sample: None,
        index_hints: Vec::new(),
    }
}

/// The declared type a plan's output column travels as (across an exchange,
/// as the columns of a source).
pub(crate) fn column_type(t: sluice_plan::DataType) -> sluice_crds::ColumnType {
    use sluice_crds::ColumnType;
    use sluice_plan::DataType;
    match t {
        DataType::Bigint => ColumnType::Bigint,
        DataType::Double => ColumnType::Double,
        DataType::Boolean => ColumnType::Boolean,
        DataType::Timestamp => ColumnType::Timestamp,
        DataType::String | DataType::Null => ColumnType::String,
        DataType::Decimal(precision, scale) => ColumnType::Decimal { precision, scale },
        DataType::Array(_) => ColumnType::Array(Box::new(column_type(t.element().unwrap_or(DataType::Null)))),
        DataType::Map(_) => {
            let (k, v) = t.map_types().unwrap_or((DataType::String, DataType::Null));
            ColumnType::Map(Box::new(column_type(k)), Box::new(column_type(v)))
        }
        DataType::Row(_) => ColumnType::Row(t.fields().iter().map(|(n, t)| (n.clone(), column_type(*t))).collect()),
    }
}

#[cfg(test)]
mod tests {
    use super::inline_views;
    use crate::rewrite::parse;

    fn merged(sql: &str) -> Result<String, String> {
        let mut parsed = parse(sql).map_err(|e| e.to_string())?;
        inline_views(&mut parsed.query).map_err(|e| e.to_string())?;
        Ok(parsed.query.to_string())
    }

    #[test]
    fn references_become_the_expressions_behind_them_once() {
        // `price` inside the subquery is the source's; outside, the subquery's.
        assert_eq!(
            merged("SELECT price FROM (SELECT price * 2 AS price FROM trades WHERE qty > 0) AS t WHERE t.price > 1")
                .unwrap(),
            "SELECT (price * 2) AS price FROM trades WHERE (qty > 0) AND ((price * 2) > 1)"
        );
        assert_eq!(
            merged("SELECT * FROM (SELECT price * 2 AS price FROM trades) AS t").unwrap(),
            "SELECT price * 2 AS price FROM trades"
        );
    }

    #[test]
    fn ctes_may_read_earlier_ctes_and_keep_their_source_alias() {
        assert_eq!(
            merged("WITH a AS (SELECT s.symbol, qty FROM trades AS s), b AS (SELECT * FROM a WHERE qty > 1) SELECT symbol FROM b")
                .unwrap(),
            "SELECT s.symbol AS symbol FROM trades AS s WHERE qty > 1"
        );
    }

    #[test]
    fn what_cannot_be_merged_is_refused_with_its_position() {
        let err = merged("SELECT qty FROM (SELECT price FROM trades) AS t").unwrap_err();
        assert!(
            err.starts_with("line 1, column 8: column `qty` is not an output of the subquery (it has price)"),
            "{err}"
        );
        let err = merged("SELECT x FROM (SELECT price + 1 FROM trades) AS t").unwrap_err();
        assert!(err.contains("name this column of the subquery"), "{err}");
        let err = merged("WITH RECURSIVE r AS (SELECT 1 AS x) SELECT x FROM r").unwrap_err();
        assert!(err.contains("WITH RECURSIVE is not supported"), "{err}");
        let err = merged("SELECT n FROM (SELECT COUNT(*) AS n FROM trades) AS t").unwrap_err();
        assert!(err.starts_with("line 1, column 16: aggregation"), "{err}");
        let err = merged("SELECT x FROM (SELECT x FROM trades ORDER BY x) AS t").unwrap_err();
        assert!(err.contains("ORDER BY / LIMIT in a subquery"), "{err}");
    }
}
