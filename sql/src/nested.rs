//! Nested fields in SQL: `bid.price` reads the column a source declares as
//! `bid.price` — the field `price` of the object in the record's field
//! `bid` — as Flink reads a field of a `ROW` column.
//!
//! sqlparser reads `bid.price` as a qualified name (relation `bid`, column
//! `price`). This pass runs once on the parsed query, before anything else
//! looks at names, and turns each compound name that spells a declared
//! nested column into that column's plain name (`"bid.price"`), or after a
//! qualifier into the qualified plain name (`b."bid.price"` for
//! `b.bid.price`). The planner, the joins and the views then need no notion
//! of nesting. A relation's name wins where both readings exist: `b.price`
//! with `b` a table or alias of the query is `b`'s column `price`, unless no
//! source has a top-level column `price`.
//!
//! A selected nested field is named by its last part (`SELECT bid.price`
//! gives a column `price`), as Flink names it.

use std::collections::{HashMap, HashSet};
use std::ops::ControlFlow;

use sluice_crds::SourceSpec;
use sqlparser::ast::{Expr, Ident, Query, SelectItem, SetExpr, TableFactor, Visit, VisitMut, Visitor, VisitorMut};

use crate::rewrite::ParsedQuery;

/// Rewrites every reference to a nested column of `sources` in `parsed`.
pub(crate) fn resolve_nested_fields(parsed: &mut ParsedQuery, sources: &[SourceSpec]) {
    let names = Names::of(sources, &parsed.query);
    if names.nested.is_empty() {
        return;
    }
    let mut rewriter = Rewriter { names: &names };
    let _ = VisitMut::visit(&mut *parsed.query, &mut rewriter);
    if let Some(time) = parsed.window.as_mut().and_then(|w| w.time_column.as_mut()) {
        let _ = VisitMut::visit(time, &mut rewriter);
    }
    for as_of in &mut parsed.as_of {
        if let Some(Expr::CompoundIdentifier(parts)) = names.resolve(&as_of.column) {
            as_of.column = parts;
        }
    }
}

/// What a compound name may mean in this query.
struct Names {
    /// Declared nested columns by lower-cased name, as declared.
    nested: HashMap<String, String>,
    /// Lower-cased names of every source's top-level columns.
    flat: HashSet<String>,
    /// Lower-cased names of the relations the query names (tables,
    /// aliases, CTEs).
    relations: HashSet<String>,
}

impl Names {
    fn of(sources: &[SourceSpec], query: &Query) -> Self {
        let mut nested = HashMap::new();
        let mut flat = HashSet::new();
        for c in sources.iter().flat_map(|s| &s.schema.columns) {
            if c.name.contains('.') {
                nested.insert(c.name.to_ascii_lowercase(), c.name.clone());
            } else {
                flat.insert(c.name.to_ascii_lowercase());
            }
        }
        let mut relations = Relations(HashSet::new());
        let _ = query.visit(&mut relations);
        Self { nested, flat, relations: relations.0 }
    }

    /// The plain (or qualified plain) name `parts` spells, if it is a
    /// nested column.
    fn resolve(&self, parts: &[Ident]) -> Option<Expr> {
        if parts.len() < 2 {
            return None;
        }
        let joined =
            |from: usize| parts[from..].iter().map(|i| i.value.to_ascii_lowercase()).collect::<Vec<_>>().join(".");
        let qualified = self.relations.contains(&parts[0].value.to_ascii_lowercase());
        if qualified
            && parts.len() >= 3
            && let Some(declared) = self.nested.get(&joined(1))
        {
            return Some(Expr::CompoundIdentifier(vec![parts[0].clone(), plain(declared, &parts[1..])]));
        }
        let declared = self.nested.get(&joined(0))?;
        if qualified && self.flat.contains(&joined(1)) {
            return None;
        }
        Some(Expr::Identifier(plain(declared, parts)))
    }
}

/// The quoted one-part name `declared`, spanning `parts`.
fn plain(declared: &str, parts: &[Ident]) -> Ident {
    let span = parts.iter().map(|i| i.span).reduce(|a, b| a.union(&b)).unwrap_or(parts[0].span);
    Ident { value: declared.to_owned(), quote_style: Some('"'), span }
}

struct Relations(HashSet<String>);

impl Visitor for Relations {
    type Break = ();

    fn pre_visit_query(&mut self, query: &Query) -> ControlFlow<()> {
        for cte in query.with.iter().flat_map(|w| &w.cte_tables) {
            self.0.insert(cte.alias.name.value.to_ascii_lowercase());
        }
        ControlFlow::Continue(())
    }

    fn pre_visit_table_factor(&mut self, factor: &TableFactor) -> ControlFlow<()> {
        if let TableFactor::Table { name, .. } = factor
            && let Some(last) = name.0.last().and_then(|p| p.as_ident())
        {
            self.0.insert(last.value.to_ascii_lowercase());
        }
        let alias = match factor {
            TableFactor::Table { alias, .. } | TableFactor::Derived { alias, .. } => alias.as_ref(),
            _ => None,
        };
        if let Some(alias) = alias {
            self.0.insert(alias.name.value.to_ascii_lowercase());
        }
        ControlFlow::Continue(())
    }
}

struct Rewriter<'a> {
    names: &'a Names,
}

impl VisitorMut for Rewriter<'_> {
    type Break = ();

    /// Names a selected nested field by its last part, before its
    /// expression is rewritten.
    fn pre_visit_query(&mut self, query: &mut Query) -> ControlFlow<()> {
        name_selected_fields(&mut query.body, self.names);
        ControlFlow::Continue(())
    }

    fn pre_visit_expr(&mut self, expr: &mut Expr) -> ControlFlow<()> {
        if let Expr::CompoundIdentifier(parts) = expr
            && let Some(resolved) = self.names.resolve(parts)
        {
            *expr = resolved;
        }
        ControlFlow::Continue(())
    }
}

fn name_selected_fields(body: &mut SetExpr, names: &Names) {
    match body {
        SetExpr::Select(select) => {
            for item in &mut select.projection {
                if let SelectItem::UnnamedExpr(expr @ Expr::CompoundIdentifier(_)) = item {
                    let Expr::CompoundIdentifier(parts) = &*expr else { continue };
                    if let (Some(_), Some(last)) = (names.resolve(parts), parts.last().cloned()) {
                        *item = SelectItem::ExprWithAlias { expr: expr.clone(), alias: last };
                    }
                }
            }
        }
        SetExpr::SetOperation { left, right, .. } => {
            name_selected_fields(left, names);
            name_selected_fields(right, names);
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use sluice_crds::{ColumnType, SourceSpec};

    use crate::plan_query;

    fn events() -> SourceSpec {
        SourceSpec::table(
            "events",
            &[
                ("event_type", ColumnType::Bigint, true),
                ("bid.auction", ColumnType::Bigint, false),
                ("bid.price", ColumnType::Bigint, false),
                ("person.id", ColumnType::Bigint, false),
                ("price", ColumnType::Double, false),
            ],
        )
    }

    fn outputs(sql: &str) -> Vec<String> {
        plan_query(sql, &[events()]).unwrap().outputs.iter().map(|o| o.name.clone()).collect()
    }

    #[test]
    fn dotted_names_read_nested_columns_and_are_named_by_their_last_part() {
        assert_eq!(
            outputs("SELECT bid.auction, bid.price * 2 AS p2 FROM events WHERE event_type = 2"),
            ["auction", "p2"]
        );
        assert_eq!(outputs("SELECT e.bid.price FROM events e"), ["price"]);
        assert_eq!(outputs(r#"SELECT "bid.price" AS x FROM events"#), ["x"]);
        assert_eq!(outputs("SELECT BID.PRICE FROM events"), ["PRICE"]);
        assert_eq!(
            outputs("SELECT bid.auction, COUNT(*) AS n FROM events WHERE bid.price > 10 GROUP BY bid.auction"),
            ["auction", "n"]
        );
    }

    #[test]
    fn star_names_nested_columns_in_full_and_a_field_cannot_also_be_an_object() {
        let all = outputs("SELECT * FROM events");
        assert!(all.iter().any(|n| n == "bid.price"), "{all:?}");
        let both =
            SourceSpec::table("t", &[("bid", ColumnType::Bigint, false), ("bid.price", ColumnType::Bigint, false)]);
        let err = plan_query("SELECT 1 AS x FROM t", &[both]).unwrap_err();
        assert!(err.to_string().contains("cannot be a value when `bid.price` makes it an object"), "{err}");
    }

    #[test]
    fn a_qualifier_keeps_its_meaning() {
        // `events.price` is the top-level column `price`, not a field.
        let plan = plan_query("SELECT events.price FROM events", &[events()]).unwrap();
        assert_eq!(plan.outputs[0].expr.data_type(), sluice_plan::DataType::Double);
    }

    #[test]
    fn undeclared_nested_fields_are_unknown_columns() {
        let err = plan_query("SELECT bid.bidder FROM events", &[events()]).unwrap_err();
        assert!(err.to_string().contains("bid"), "{err}");
    }
}
