//! The query being planned: its one source, SELECT, the qualifiers it may
//! be named by, and which source columns are read; plus stateless outputs.

use sluice_crds::SourceSpec;
use sqlparser::ast::{ObjectNamePart, Select, SelectItem, SetExpr, TableFactor};

use super::scope::{InputScope, find_keyword_ident, select_list};

use crate::diagnostic::{Located, suggestion};
use crate::rewrite::ParsedQuery;
use sluice_plan::{OutputColumn, SourceSchema, SqlError};

pub(super) struct Planner<'q> {
    pub(super) parsed: &'q ParsedQuery,
    pub(super) select: &'q Select,
    pub(super) source: SourceSchema,
    pub(super) qualifiers: Vec<String>,
    pub(super) used: Vec<bool>,
    /// The query's UNNEST, how many columns the source has before the
    /// unnest's (`source` holds both while the query is planned), and the
    /// source columns its array reads.
    pub(super) unnest: Option<(sluice_plan::UnnestPlan, usize, Vec<bool>)>,
}

impl<'q> Planner<'q> {
    pub(super) fn new(parsed: &'q ParsedQuery, sources: &[SourceSpec]) -> Result<Self, SqlError> {
        let q = &parsed.query;
        let at = |keyword: &str, message: String| match parsed.clause(keyword) {
            Some(span) => SqlError::at_span(span, message),
            None => SqlError::unpositioned(message),
        };
        if q.with.is_some() {
            return Err(at("WITH", "WITH (common table expressions) is not supported".into()));
        }
        if let Some(o) = &q.order_by {
            return Err(at(
                "ORDER",
                format!("ORDER BY is not supported on a stream ({o}): results are emitted as they are computed"),
            ));
        }
        if q.limit_clause.is_some() || q.fetch.is_some() {
            let keyword =
                ["LIMIT", "OFFSET", "FETCH"].into_iter().find(|k| parsed.clause(k).is_some()).unwrap_or("LIMIT");
            return Err(at(keyword, "LIMIT / OFFSET / FETCH are not supported on a stream".into()));
        }
        if !q.locks.is_empty() || q.for_clause.is_some() || q.settings.is_some() || q.format_clause.is_some() {
            return Err(SqlError::at_node(q.as_ref(), "unsupported clause after SELECT (FOR, SETTINGS, FORMAT)"));
        }
        let select = match q.body.as_ref() {
            SetExpr::Select(s) => s.as_ref(),
            SetExpr::SetOperation { op, .. } => {
                let keyword = ["UNION", "EXCEPT", "INTERSECT"]
                    .into_iter()
                    .find(|k| parsed.clause(k).is_some())
                    .unwrap_or("UNION");
                return Err(at(keyword, format!("{op} is not supported: one SELECT per job")));
            }
            _ => return Err(SqlError::unpositioned("expected a SELECT ... FROM ... query")),
        };
        let unsupported =
            |what: &str| Err(SqlError::at_span(select.select_token.0.span, format!("{what} is not supported")));
        if select.distinct.is_some() {
            return unsupported("SELECT DISTINCT");
        }
        if select.top.is_some() || select.into.is_some() || select.exclude.is_some() {
            return unsupported("TOP / INTO / EXCLUDE");
        }
        if !select.lateral_views.is_empty() || select.prewhere.is_some() || !select.connect_by.is_empty() {
            return unsupported("LATERAL VIEW / PREWHERE / CONNECT BY");
        }
        if !select.cluster_by.is_empty() || !select.distribute_by.is_empty() || !select.sort_by.is_empty() {
            return unsupported("CLUSTER / DISTRIBUTE / SORT BY");
        }
        if select.qualify.is_some() || !select.named_window.is_empty() {
            return unsupported("QUALIFY and named windows");
        }
        let (table, alias) = match select.from.as_slice() {
            [] => {
                // `SELECT a, b *\nFROM t` parses FROM as a column name: say so.
                let stray_from = select.projection.iter().find_map(|item| match item {
                    SelectItem::UnnamedExpr(e) | SelectItem::ExprWithAlias { expr: e, .. } => {
                        find_keyword_ident(e, "FROM")
                    }
                    _ => None,
                });
                return Err(match stray_from {
                    Some(span) => SqlError::at_span(
                        span,
                        "syntax error: FROM is read as a column name here; is an expression missing before it?",
                    ),
                    None => SqlError::at_span(select.select_token.0.span, "a stream query needs FROM <source>"),
                });
            }
            [t] if t.joins.is_empty() => match &t.relation {
                TableFactor::Table { name, alias, args: None, .. } => (name, alias),
                other => {
                    return Err(SqlError::at_node(
                        other,
                        "FROM must name one source (table functions are not supported)",
                    ));
                }
            },
            [t] => {
                return Err(SqlError::at_node(
                    &t.joins[0].relation,
                    "JOIN is not supported here yet: a join's rows are read by the query that joins, or by an \
                     aggregate or a top-N over it — not by an OVER window, or through a further subquery",
                ));
            }
            [_, second, ..] => {
                return Err(SqlError::at_node(&second.relation, "one source per query (no comma joins)"));
            }
        };
        let Some(ObjectNamePart::Identifier(source_ident)) = table.0.last() else {
            return Err(SqlError::at_node(table, "expected a source name"));
        };
        let spec = find_source(source_ident, sources)?;
        let source = SourceSchema::from_spec(spec)?;
        let mut qualifiers = vec![source.name.to_ascii_lowercase(), source_ident.value.to_ascii_lowercase()];
        if let Some(a) = alias {
            qualifiers.push(a.name.value.to_ascii_lowercase());
        }
        let mut used = vec![false; source.schema.fields.len()];
        // The event-time column always drives the watermark (and its lag metric).
        if let Some(et) = source.event_time {
            used[et.column] = true;
        }
        let mut planner = Self { parsed, select, source, qualifiers, used, unnest: None };
        if let Some(clause) = &parsed.unnest {
            if spec.table.is_some() {
                return Err(SqlError::at_span(
                    clause.span,
                    format!("UNNEST over table `{}` is not supported: unnest a stream", spec.name),
                ));
            }
            let width = planner.source.schema.fields.len();
            let taken = planner.source.column_names();
            // The array's columns are noted apart: a row per element need
            // not carry what only the array read (the whole array, once
            // per element, would make unnesting quadratic).
            let mut array_reads = vec![false; width];
            let mut scope = InputScope {
                source: &planner.source,
                qualifiers: &planner.qualifiers,
                used: &mut array_reads,
                context: "UNNEST",
            };
            let columns = super::unnest::plan_unnest(clause, &mut scope, &taken)?;
            for f in columns.fields {
                planner.source.schema.fields.push(f);
                planner.source.required.push(false);
                planner.used.push(true);
            }
            planner.qualifiers.extend(columns.qualifier);
            planner.unnest = Some((columns.plan, width, array_reads));
        }
        Ok(planner)
    }

    pub(super) fn input_scope(&mut self, context: &'static str) -> InputScope<'_> {
        InputScope { source: &self.source, qualifiers: &self.qualifiers, used: &mut self.used, context }
    }

    pub(super) fn stateless_outputs(&mut self) -> Result<Vec<OutputColumn>, SqlError> {
        let items = self.select.projection.clone();
        let columns = self.source.column_names();
        select_list(&items, &columns, &mut self.input_scope("SELECT"))
    }
}

/// The declared source `ident` names, or an error at it listing them.
pub(crate) fn find_source<'s>(
    ident: &sqlparser::ast::Ident,
    sources: &'s [SourceSpec],
) -> Result<&'s SourceSpec, SqlError> {
    sources.iter().find(|s| s.name.eq_ignore_ascii_case(&ident.value)).ok_or_else(|| {
        let names: Vec<&str> = sources.iter().map(|s| s.name.as_str()).collect();
        SqlError::at_span(
            ident.span,
            format!(
                "unknown source `{}`{}; declared sources: {}",
                ident.value,
                suggestion(&ident.value, names.iter().copied()),
                names.join(", ")
            ),
        )
    })
}
