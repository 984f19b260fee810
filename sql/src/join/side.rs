//! A join's sides: a source (pruned to the columns the query names), a
//! windowed subquery, or the rows of a join joined again, and how a name
//! of one of their columns reads. Every other file of the join works over
//! these sides, so this one imports only the names beneath it.

use std::borrow::Cow;
use std::collections::HashSet;
use std::ops::ControlFlow;

use sluice_crds::{ColumnSpec, ColumnType, EventTimeSpec, SchemaSpec, SourceSpec};
use sluice_plan::{EmitMode, SqlError};
use sqlparser::ast::{
    Expr, Ident, JoinConstraint, JoinOperator, ObjectNamePart, Query, SelectItem, SelectItemQualifiedWildcardKind,
    SetExpr, TableFactor, visit_expressions,
};

use crate::diagnostic::Located;
use crate::planner::WINDOW_END;
use crate::planner::{find_source, plan_parsed};
use crate::rewrite::{AsOf, ParsedQuery};
use crate::views::column_type;

use super::names::{DELETED, column_name};

/// One side of a join: a source, a windowed subquery (as a source of its
/// output columns), or the rows of a join joined again (`a JOIN b ON …
/// JOIN c ON …`: `a JOIN b` is the left side of the join with `c`).
pub(super) struct Side<'a> {
    pub(super) spec: Cow<'a, SourceSpec>,
    /// A subquery side: its query, and per output column the expression
    /// its SELECT list computes it with.
    pub(super) subquery: Option<(Query, Vec<Expr>)>,
    /// What its columns are prefixed with in the joined layout (for a
    /// join's rows: its leftmost source's).
    pub(super) prefix: String,
    /// Lower-case names a qualified reference may use.
    pub(super) names: Vec<String>,
    /// A join's rows: the sources they came from, and whose each column is.
    pub(super) chain: Option<Chain>,
    /// A source side: the source as declared (`spec` carries only the
    /// columns the query names), for suggestions when a name is wrong.
    pub(super) declared: Option<&'a SourceSpec>,
    /// A subquery side whose rows another plan computes: they are read, as
    /// this source, from the exchange that plan writes (`cascade`).
    pub(super) rows: Option<SourceSpec>,
}

/// The rows of a join, as the side of a further join: their columns are
/// named `prefix.column` after the sources they came from.
pub(super) struct Chain {
    pub(super) members: Vec<Member>,
    /// Per column: its member, and its name in that member.
    pub(super) columns: Vec<(usize, String)>,
}

pub(super) struct Member {
    prefix: String,
    pub(super) names: Vec<String>,
    pub(super) source: String,
}

impl Side<'_> {
    /// A column by its bare name (the first, if a join's rows have two).
    pub(super) fn column(&self, name: &str) -> Option<usize> {
        match &self.chain {
            None => self.spec.schema.columns.iter().position(|c| c.name.eq_ignore_ascii_case(name)),
            Some(ch) => ch.columns.iter().position(|(_, bare)| bare.eq_ignore_ascii_case(name)),
        }
    }

    /// How many of its columns have this bare name.
    pub(super) fn bare_count(&self, name: &str) -> usize {
        match &self.chain {
            None => usize::from(self.column(name).is_some()),
            Some(ch) => ch.columns.iter().filter(|(_, bare)| bare.eq_ignore_ascii_case(name)).count(),
        }
    }

    /// `q.name`: `None` if `q` (lower case) names nothing of this side,
    /// else the column, if it has one by that name.
    pub(super) fn qualified(&self, q: &str, name: &str) -> Option<Option<usize>> {
        match &self.chain {
            None => self.names.iter().any(|n| n == q).then(|| self.column(name)),
            Some(ch) => {
                let m = ch.members.iter().position(|m| m.names.iter().any(|n| n == q))?;
                Some(ch.columns.iter().position(|(mm, bare)| *mm == m && bare.eq_ignore_ascii_case(name)))
            }
        }
    }

    /// The columns `q.*` names (`q` lower case), if `q` is of this side.
    pub(super) fn columns_of(&self, q: &str) -> Option<Vec<usize>> {
        match &self.chain {
            None => self.names.iter().any(|n| n == q).then(|| (0..self.spec.schema.columns.len()).collect()),
            Some(ch) => {
                let m = ch.members.iter().position(|m| m.names.iter().any(|n| n == q))?;
                Some(ch.columns.iter().enumerate().filter(|(_, (mm, _))| *mm == m).map(|(c, _)| c).collect())
            }
        }
    }

    /// A column's own name, without its source's.
    pub(super) fn bare_name(&self, column: usize) -> &str {
        match &self.chain {
            None => &self.spec.schema.columns[column].name,
            Some(ch) => &ch.columns[column].1,
        }
    }

    /// What a column's name is qualified by, as a user writes it.
    fn qualifier(&self, column: usize) -> &str {
        match &self.chain {
            None => &self.prefix,
            Some(ch) => &ch.members[ch.columns[column].0].prefix,
        }
    }

    /// `prefix.column`, as a user writes it.
    pub(super) fn written(&self, column: usize) -> String {
        format!("{}.{}", self.qualifier(column), self.bare_name(column))
    }

    /// A reference to a column as a user writes it.
    pub(super) fn user_reference(&self, column: usize, span: Option<sqlparser::tokenizer::Span>) -> Expr {
        let mut name = Ident::with_quote('"', self.bare_name(column).to_owned());
        if let Some(span) = span {
            name.span = span;
        }
        Expr::CompoundIdentifier(vec![Ident::with_quote('"', self.qualifier(column).to_owned()), name])
    }

    /// A reference to a column in the query its side's stage runs: over
    /// its source (as `prefix.column`), or over the previous join's layout.
    pub(super) fn local_reference(&self, column: usize) -> Expr {
        match &self.chain {
            None => self.user_reference(column, None),
            Some(_) => Expr::Identifier(Ident::with_quote('"', self.joined_name(column))),
        }
    }

    pub(super) fn joined_name(&self, column: usize) -> String {
        match &self.chain {
            None => format!("{}.{}", self.prefix, self.spec.schema.columns[column].name),
            Some(_) => self.spec.schema.columns[column].name.clone(),
        }
    }

    pub(super) fn event_time(&self) -> Option<usize> {
        let et = self.spec.event_time.as_ref()?;
        self.spec.schema.columns.iter().position(|c| c.name.eq_ignore_ascii_case(&et.column))
    }

    /// The prefixes of its columns.
    pub(super) fn prefixes(&self) -> Vec<&str> {
        match &self.chain {
            None => vec![self.prefix.as_str()],
            Some(ch) => ch.members.iter().map(|m| m.prefix.as_str()).collect(),
        }
    }

    pub(super) fn members(&self) -> Vec<Member> {
        match &self.chain {
            None => {
                vec![Member { prefix: self.prefix.clone(), names: self.names.clone(), source: self.spec.name.clone() }]
            }
            Some(ch) => ch
                .members
                .iter()
                .map(|m| Member { prefix: m.prefix.clone(), names: m.names.clone(), source: m.source.clone() })
                .collect(),
        }
    }
}

/// A table source as its side of a join reads it: with the `__deleted`
/// field that marks a deletion, and its value columns optional (a
/// deletion carries only the key).
pub(crate) fn table_source(spec: &SourceSpec) -> SourceSpec {
    let primary_key = spec.table.as_ref().map(|t| t.primary_key.as_slice()).unwrap_or_default();
    let mut spec = spec.clone();
    for column in &mut spec.schema.columns {
        column.required &= primary_key.iter().any(|k| k == &column.name);
    }
    spec.schema.columns.push(ColumnSpec::field(DELETED, ColumnType::Boolean, false));
    spec
}

pub(super) fn side<'a>(
    relation: &TableFactor,
    sources: &'a [SourceSpec],
    referenced: Option<&HashSet<String>>,
) -> Result<Side<'a>, SqlError> {
    if let TableFactor::Derived { lateral: false, subquery, alias: Some(alias), .. } = relation {
        return windowed_side(subquery, &alias.name, sources);
    }
    let TableFactor::Table { name, alias, args: None, .. } = relation else {
        return Err(SqlError::at_node(
            relation,
            "each side of a join names a source, or an aliased subquery that aggregates per time window",
        ));
    };
    let Some(ObjectNamePart::Identifier(ident)) = name.0.last() else {
        return Err(SqlError::at_node(relation, "expected a source name"));
    };
    let spec = find_source(ident, sources)?;
    let prefix = alias.as_ref().map_or_else(|| spec.name.clone(), |a| a.name.value.clone());
    let mut names = vec![spec.name.to_ascii_lowercase(), ident.value.to_ascii_lowercase()];
    if let Some(a) = alias {
        names.push(a.name.value.to_ascii_lowercase());
    }
    let declared = spec;
    let spec = match referenced {
        Some(referenced) if !names.iter().any(|n| referenced.contains(&format!("{n}.*"))) => {
            Cow::Owned(pruned(spec, referenced))
        }
        _ => Cow::Borrowed(spec),
    };
    Ok(Side { spec, subquery: None, prefix, names, chain: None, declared: Some(declared), rows: None })
}

/// Every name the query writes, lower case, as each identifier's parts and
/// each dotted tail of them (a nested field's column is `bid.price`), and
/// `a.*` for each `a.*` it selects; `None` when it selects `*`, which reads
/// every column.
pub(super) fn referenced_names(query: &Query, as_of: &[AsOf]) -> Option<HashSet<String>> {
    let select = query.body.as_select()?;
    let mut names = HashSet::new();
    for item in &select.projection {
        match item {
            SelectItem::Wildcard(_) => return None,
            // `a.*` reads every column of `a`: `a.*` among the names.
            SelectItem::QualifiedWildcard(SelectItemQualifiedWildcardKind::ObjectName(name), _) => {
                names.insert(format!("{}.*", name.to_string().to_ascii_lowercase()));
            }
            SelectItem::QualifiedWildcard(..) => return None,
            _ => {}
        }
    }
    let mut add = |idents: &[Ident]| {
        for start in 0..idents.len() {
            let tail: Vec<String> = idents[start..].iter().map(|i| i.value.to_ascii_lowercase()).collect();
            names.insert(tail.join("."));
            names.insert(idents[start].value.to_ascii_lowercase());
        }
    };
    for a in as_of {
        add(&a.column);
    }
    let _ = visit_expressions(query, |x| {
        match x {
            Expr::Identifier(id) => add(std::slice::from_ref(id)),
            Expr::CompoundIdentifier(ids) => add(ids),
            _ => {}
        }
        ControlFlow::<()>::Continue(())
    });
    for from in &select.from {
        for join in &from.joins {
            let (JoinOperator::Join(c)
            | JoinOperator::Inner(c)
            | JoinOperator::Left(c)
            | JoinOperator::LeftOuter(c)
            | JoinOperator::Right(c)
            | JoinOperator::RightOuter(c)
            | JoinOperator::FullOuter(c)) = &join.join_operator
            else {
                continue;
            };
            if let JoinConstraint::Using(columns) = c {
                for n in columns {
                    if let Some(ObjectNamePart::Identifier(i)) = n.0.last() {
                        add(std::slice::from_ref(i));
                    }
                }
            }
        }
    }
    Some(names)
}

/// A source side's columns as the join carries them: those the query
/// names, its event time and a table's primary key (what a join needs of
/// a source whatever the query says).
fn pruned(spec: &SourceSpec, names: &HashSet<String>) -> SourceSpec {
    let mut spec = spec.clone();
    let event_time = spec.event_time.as_ref().map(|e| e.column.to_ascii_lowercase());
    let key: Vec<String> =
        spec.table.iter().flat_map(|t| t.primary_key.iter().map(|k| k.to_ascii_lowercase())).collect();
    spec.schema.columns.retain(|c| {
        let name = c.name.to_ascii_lowercase();
        names.contains(&name) || event_time.as_ref() == Some(&name) || key.contains(&name)
    });
    spec
}

/// The declared source a source side reads (its layout may be pruned).
pub(super) fn find_declared<'s>(sources: &'s [SourceSpec], side: &'s SourceSpec) -> &'s SourceSpec {
    sources.iter().find(|s| s.name.eq_ignore_ascii_case(&side.name)).unwrap_or(side)
}

/// A subquery side, `(SELECT … GROUP BY …, TUMBLE(ts, …)) AS p` (Nexmark
/// q8's shape): a windowed aggregate emitting each window's rows once,
/// when the watermark passes its end, so its rows join as an interval
/// join's would. It runs on its source's partitions before the join's
/// exchange when its source is keyed by its GROUP BY; otherwise after an
/// exchange of its own (`plan_join`).
pub(super) fn windowed_side<'a>(subquery: &Query, alias: &Ident, sources: &[SourceSpec]) -> Result<Side<'a>, SqlError> {
    let SetExpr::Select(select) = subquery.body.as_ref() else {
        return Err(SqlError::at_node(subquery, "a subquery side of a join is one SELECT"));
    };
    if let Some(inner) = select.from.iter().find(|f| matches!(f.relation, TableFactor::Derived { .. })) {
        return Err(SqlError::at_node(
            &inner.relation,
            "a subquery side of a join aggregates a source per time window: one that reads a subquery of its own \
             (an aggregate over an aggregate) is not supported yet",
        ));
    }
    let mut exprs = Vec::with_capacity(select.projection.len());
    let mut names = Vec::with_capacity(select.projection.len());
    for item in &select.projection {
        let (expr, name) = match item {
            SelectItem::ExprWithAlias { expr, alias } => (expr, alias.value.clone()),
            SelectItem::UnnamedExpr(expr) => match column_name(expr) {
                Some(name) => (expr, name.value),
                None => {
                    return Err(SqlError::at_node(item, "name this column of a joined subquery: <expression> AS name"));
                }
            },
            _ => return Err(SqlError::at_node(item, "list the columns of a joined subquery (no *)")),
        };
        exprs.push(expr.clone());
        names.push(name);
    }
    let mut parsed = ParsedQuery::of(subquery.clone());
    let plan = plan_parsed(&mut parsed, sources)?;
    if !(plan.is_windowed() && plan.emit == EmitMode::Final) {
        return Err(SqlError::at_node(
            subquery,
            "a subquery side of a join aggregates per time window with EMIT FINAL (GROUP BY …, TUMBLE(ts, \
             INTERVAL …)): each of its rows must be final",
        ));
    }
    let columns = names
        .iter()
        .zip(&plan.outputs)
        .map(|(name, o)| ColumnSpec::field(name.clone(), column_type(o.expr.data_type()), false))
        .collect();
    // A window's rows are timed by its end (see `JoinStep::side_plan`):
    // the column that is `window_end` is its event time, which a time
    // bound against a stream reads.
    let event_time = exprs
        .iter()
        .position(|e| matches!(e, Expr::Identifier(id) if id.value.eq_ignore_ascii_case(WINDOW_END)))
        .map(|c| EventTimeSpec { column: names[c].clone(), watermark_delay_millis: 0 });
    let spec = SourceSpec {
        schema: SchemaSpec { columns, registry: None },
        event_time,
        ..SourceSpec::table(&alias.value, &[])
    };
    Ok(Side {
        spec: Cow::Owned(spec),
        subquery: Some((subquery.clone(), exprs)),
        prefix: alias.value.clone(),
        names: vec![alias.value.to_ascii_lowercase()],
        chain: None,
        declared: None,
        rows: None,
    })
}
