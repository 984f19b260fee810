//! Planning a top-N query (see `crate::top_n`): the subquery's SELECT list
//! over the source, its `ROW_NUMBER() OVER (PARTITION BY … ORDER BY …)` as
//! the operator's row-number column, and the outer SELECT's choice of the
//! subquery's columns.

use sqlparser::ast::{Expr, Function, Ident, OrderByExpr, OrderBySort, SelectItem, WindowType};

use crate::compile::{Scope, call_args, compile};
use crate::diagnostic::Located;
use sluice_plan::{DataType, PhysExpr, Schema, SourceSchema, SqlError};
use sluice_plan::{EmitMode, OperatorPlan, OutputColumn, Partitioning, SortKey, TopNPlan};

use super::query::Planner;
use super::scope::{InputScope, resolve_input, select_list};

/// The PARTITION BY and ORDER BY of the row number: the first key, its
/// direction, and the keys after it.
type Ranking = (Vec<PhysExpr>, PhysExpr, bool, Vec<SortKey>);

impl Planner<'_> {
    #[allow(clippy::type_complexity)]
    pub(super) fn plan_top_n(
        &mut self,
    ) -> Result<
        (OperatorPlan, Schema, Vec<OutputColumn>, Vec<OutputColumn>, Option<PhysExpr>, Partitioning, EmitMode),
        SqlError,
    > {
        let Some(spec) = self.parsed.top_n.clone() else {
            return Err(SqlError::unpositioned("internal: not a top-N query"));
        };
        let mut intermediate = self.source.schema.clone();
        let row_number = intermediate.push(spec.row_number.clone(), DataType::Bigint);
        let mut ranking: Option<Ranking> = None;
        let items = self.select.projection.clone();
        let columns = self.source.column_names();
        let inner = select_list(
            &items,
            &columns,
            &mut TopNScope {
                source: &self.source,
                qualifiers: &self.qualifiers,
                used: &mut self.used,
                ranking: &mut ranking,
                row_number,
            },
        )?;
        let Some((partition_by, order_by, descending, then_by)) = ranking else {
            return Err(SqlError::unpositioned("internal: a top-N query without its ROW_NUMBER"));
        };
        // The outer SELECT picks the subquery's columns by name.
        let mut outputs = Vec::new();
        for item in &spec.outer {
            let (e, alias) = match item {
                SelectItem::Wildcard(_) | SelectItem::QualifiedWildcard(..) => {
                    outputs.extend(inner.iter().cloned());
                    continue;
                }
                SelectItem::UnnamedExpr(e) => (e, None),
                SelectItem::ExprWithAlias { expr, alias } => (expr, Some(alias.value.clone())),
                SelectItem::ExprWithAliases { expr, .. } => (expr, None),
            };
            let name = match e {
                Expr::Identifier(i) => Some(&i.value),
                Expr::CompoundIdentifier(parts) => parts.last().map(|i| &i.value),
                _ => None,
            };
            let found = name.and_then(|n| {
                inner.iter().find(|o| o.name == *n).or_else(|| inner.iter().find(|o| o.name.eq_ignore_ascii_case(n)))
            });
            let Some(found) = found else {
                return Err(SqlError::at_node(
                    e,
                    "the outer SELECT of a top-N query lists columns of its subquery by name (or *); compute \
                     expressions in the subquery",
                ));
            };
            outputs.push(OutputColumn { name: alias.unwrap_or_else(|| found.name.clone()), expr: found.expr.clone() });
        }
        // State is per PARTITION BY key: plain columns, so the source (or
        // the exchange) can be partitioned by them.
        let mut keyed = Vec::new();
        let mut keys = Vec::new();
        for p in &partition_by {
            let Some(index) = p.as_column() else {
                return Err(SqlError::unpositioned(
                    "the PARTITION BY of a top-N query must name columns (compute expressions in a subquery)",
                ));
            };
            let f = &self.source.schema.fields[index];
            keyed.push(f.name.clone());
            keys.push(OutputColumn { name: f.name.clone(), expr: p.clone() });
        }
        keys.push(OutputColumn {
            name: spec.row_number.clone(),
            expr: PhysExpr::Column { index: row_number, data_type: DataType::Bigint },
        });
        Ok((
            OperatorPlan::TopN(TopNPlan { partition_by, order_by, descending, limit: spec.limit, then_by }),
            intermediate,
            outputs,
            keys,
            None,
            Partitioning::KeyedBy(keyed),
            EmitMode::Changes,
        ))
    }
}

/// The SELECT list of a top-N subquery.
struct TopNScope<'a> {
    source: &'a SourceSchema,
    qualifiers: &'a [String],
    used: &'a mut Vec<bool>,
    ranking: &'a mut Option<Ranking>,
    row_number: usize,
}

impl TopNScope<'_> {
    fn input(&mut self, context: &'static str) -> InputScope<'_> {
        InputScope { source: self.source, qualifiers: self.qualifiers, used: self.used, context }
    }
}

impl Scope for TopNScope<'_> {
    fn resolve_column(&mut self, idents: &[Ident], node: &Expr) -> Result<PhysExpr, SqlError> {
        resolve_input(self.source, self.qualifiers, self.used, idents, node)
    }

    fn resolve_call(&mut self, call: &Function, node: &Expr) -> Option<Result<PhysExpr, SqlError>> {
        let over = call.over.as_ref()?;
        Some(self.row_number(call, over, node))
    }
}

impl TopNScope<'_> {
    fn row_number(&mut self, call: &Function, over: &WindowType, node: &Expr) -> Result<PhysExpr, SqlError> {
        let name = call.name.to_string().to_ascii_uppercase();
        if name != "ROW_NUMBER" {
            return Err(SqlError::at_node(
                node,
                format!("{name} OVER is not supported in a top-N query (ROW_NUMBER is)"),
            ));
        }
        if self.ranking.is_some() {
            return Err(SqlError::at_node(node, "a top-N query ranks by one ROW_NUMBER"));
        }
        let WindowType::WindowSpec(spec) = over else {
            return Err(SqlError::at_node(node, "named windows are not supported: write OVER (...)"));
        };
        if spec.window_frame.is_some() {
            return Err(SqlError::at_node(node, "ROW_NUMBER takes no frame"));
        }
        let a = call_args(call, node)?;
        if a.star || !a.args.is_empty() {
            return Err(SqlError::at_node(node, "ROW_NUMBER takes no arguments"));
        }
        let mut partition_by = Vec::with_capacity(spec.partition_by.len());
        for p in &spec.partition_by {
            let e = compile(p, &mut self.input("PARTITION BY"))?;
            if e.as_column().is_none() {
                return Err(SqlError::at_node(p, "the PARTITION BY of a top-N query must name columns"));
            }
            partition_by.push(e);
        }
        let mut keys = Vec::with_capacity(spec.order_by.len());
        for o in &spec.order_by {
            let expr = compile(&o.expr, &mut self.input("ORDER BY"))?;
            if matches!(expr.data_type(), DataType::Null) {
                return Err(SqlError::at_node(&o.expr, "ORDER BY needs a typed expression, not NULL"));
            }
            let descending = descending(o, &expr)?;
            keys.push(SortKey { expr, descending });
        }
        let mut keys = keys.into_iter();
        let Some(SortKey { expr: order_by, descending }) = keys.next() else {
            return Err(SqlError::at_node(node, "ROW_NUMBER needs ORDER BY"));
        };
        *self.ranking = Some((partition_by, order_by, descending, keys.collect()));
        Ok(PhysExpr::Column { index: self.row_number, data_type: DataType::Bigint })
    }
}

/// Whether ORDER BY key `o`, compiled as `expr`, is descending; a key with
/// no order (a nested value), `USING` or `NULLS FIRST / LAST` is refused.
pub(super) fn descending(o: &OrderByExpr, expr: &PhysExpr) -> Result<bool, SqlError> {
    if expr.data_type().is_nested() {
        return Err(SqlError::at_node(
            &o.expr,
            format!("{} values have no order: ORDER BY a field or an element", expr.data_type()),
        ));
    }
    let descending = match o.options.sort {
        None | Some(OrderBySort::Asc) => false,
        Some(OrderBySort::Desc) => true,
        Some(OrderBySort::Using(_)) => {
            return Err(SqlError::at_node(&o.expr, "ORDER BY … USING is not supported"));
        }
    };
    if o.options.nulls_first.is_some() {
        return Err(SqlError::at_node(
            &o.expr,
            "NULLS FIRST / LAST is not supported: NULL sorts last ascending and first descending, as in PostgreSQL",
        ));
    }
    Ok(descending)
}
