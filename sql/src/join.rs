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

use std::borrow::Cow;
use std::collections::HashSet;
use std::ops::ControlFlow;

use sluice_crds::{ColumnSpec, ColumnType, EventTimeSpec, SchemaSpec, SourceSpec};
use sluice_plan::{
    Branch, DataType, Dataflow, EmitMode, JoinKind, JoinPlan, OperatorPlan, OutputColumn, Partitioning, Plan, SqlError,
    Stage, StageOutput, TableJoinPlan, TableVersion,
};
use sqlparser::ast::{
    BinaryOperator, Expr, GroupByExpr, Ident, Join, JoinConstraint, JoinOperator, ObjectNamePart, Query, SelectItem,
    SelectItemQualifiedWildcardKind, SetExpr, Spanned, TableFactor, TableWithJoins, visit_expressions,
    visit_expressions_mut,
};

use crate::cut::cut;
use crate::diagnostic::{Located, suggestion};
use crate::planner::{WINDOW_END, WINDOW_START};
use crate::planner::{compile_over, find_source, plan_parsed};
use crate::rewrite::{AsOf, ParsedQuery, interval_millis, parse};
use crate::views::{aggregates_rows, column_type, table_named};

/// The joined layout's BOOLEAN column: true on the right side's rows.
const RIGHT: &str = "__right";
/// The joined layout's event-time column: each row's own side's.
const TIME: &str = "__time";
/// The name the outer query reads the joined layout by.
const JOINED: &str = "__join";
/// A table's field, and the joined layout's BOOLEAN column, that marks a
/// deletion of the row with the key.
pub(crate) const DELETED: &str = "__deleted";

/// One side of a join: a source, a windowed subquery (as a source of its
/// output columns), or the rows of a join joined again (`a JOIN b ON …
/// JOIN c ON …`: `a JOIN b` is the left side of the join with `c`).
struct Side<'a> {
    spec: Cow<'a, SourceSpec>,
    /// A subquery side: its query, and per output column the expression
    /// its SELECT list computes it with.
    subquery: Option<(Query, Vec<Expr>)>,
    /// What its columns are prefixed with in the joined layout (for a
    /// join's rows: its leftmost source's).
    prefix: String,
    /// Lower-case names a qualified reference may use.
    names: Vec<String>,
    /// A join's rows: the sources they came from, and whose each column is.
    chain: Option<Chain>,
    /// A source side: the source as declared (`spec` carries only the
    /// columns the query names), for suggestions when a name is wrong.
    declared: Option<&'a SourceSpec>,
    /// A subquery side whose rows another plan computes: they are read, as
    /// this source, from the exchange that plan writes (`cascade`).
    rows: Option<SourceSpec>,
}

/// The rows of a join, as the side of a further join: their columns are
/// named `prefix.column` after the sources they came from.
struct Chain {
    members: Vec<Member>,
    /// Per column: its member, and its name in that member.
    columns: Vec<(usize, String)>,
}

struct Member {
    prefix: String,
    names: Vec<String>,
    source: String,
}

impl Side<'_> {
    /// A column by its bare name (the first, if a join's rows have two).
    fn column(&self, name: &str) -> Option<usize> {
        match &self.chain {
            None => self.spec.schema.columns.iter().position(|c| c.name.eq_ignore_ascii_case(name)),
            Some(ch) => ch.columns.iter().position(|(_, bare)| bare.eq_ignore_ascii_case(name)),
        }
    }

    /// How many of its columns have this bare name.
    fn bare_count(&self, name: &str) -> usize {
        match &self.chain {
            None => usize::from(self.column(name).is_some()),
            Some(ch) => ch.columns.iter().filter(|(_, bare)| bare.eq_ignore_ascii_case(name)).count(),
        }
    }

    /// `q.name`: `None` if `q` (lower case) names nothing of this side,
    /// else the column, if it has one by that name.
    fn qualified(&self, q: &str, name: &str) -> Option<Option<usize>> {
        match &self.chain {
            None => self.names.iter().any(|n| n == q).then(|| self.column(name)),
            Some(ch) => {
                let m = ch.members.iter().position(|m| m.names.iter().any(|n| n == q))?;
                Some(ch.columns.iter().position(|(mm, bare)| *mm == m && bare.eq_ignore_ascii_case(name)))
            }
        }
    }

    /// The columns `q.*` names (`q` lower case), if `q` is of this side.
    fn columns_of(&self, q: &str) -> Option<Vec<usize>> {
        match &self.chain {
            None => self.names.iter().any(|n| n == q).then(|| (0..self.spec.schema.columns.len()).collect()),
            Some(ch) => {
                let m = ch.members.iter().position(|m| m.names.iter().any(|n| n == q))?;
                Some(ch.columns.iter().enumerate().filter(|(_, (mm, _))| *mm == m).map(|(c, _)| c).collect())
            }
        }
    }

    /// A column's own name, without its source's.
    fn bare_name(&self, column: usize) -> &str {
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
    fn written(&self, column: usize) -> String {
        format!("{}.{}", self.qualifier(column), self.bare_name(column))
    }

    /// A reference to a column as a user writes it.
    fn user_reference(&self, column: usize, span: Option<sqlparser::tokenizer::Span>) -> Expr {
        let mut name = Ident::with_quote('"', self.bare_name(column).to_owned());
        if let Some(span) = span {
            name.span = span;
        }
        Expr::CompoundIdentifier(vec![Ident::with_quote('"', self.qualifier(column).to_owned()), name])
    }

    /// A reference to a column in the query its side's stage runs: over
    /// its source (as `prefix.column`), or over the previous join's layout.
    fn local_reference(&self, column: usize) -> Expr {
        match &self.chain {
            None => self.user_reference(column, None),
            Some(_) => Expr::Identifier(Ident::with_quote('"', self.joined_name(column))),
        }
    }

    fn joined_name(&self, column: usize) -> String {
        match &self.chain {
            None => format!("{}.{}", self.prefix, self.spec.schema.columns[column].name),
            Some(_) => self.spec.schema.columns[column].name.clone(),
        }
    }

    fn event_time(&self) -> Option<usize> {
        let et = self.spec.event_time.as_ref()?;
        self.spec.schema.columns.iter().position(|c| c.name.eq_ignore_ascii_case(&et.column))
    }

    /// The prefixes of its columns.
    fn prefixes(&self) -> Vec<&str> {
        match &self.chain {
            None => vec![self.prefix.as_str()],
            Some(ch) => ch.members.iter().map(|m| m.prefix.as_str()).collect(),
        }
    }

    fn members(&self) -> Vec<Member> {
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
    let mut as_of = std::mem::take(&mut parsed.as_of);
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
        None => side(&from.relation, sources, referenced.as_ref())?,
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
            None => side(&join.relation, sources, referenced.as_ref())?,
        };
        let left_side = left.take().ok_or_else(|| SqlError::unpositioned("internal: a join without its left side"))?;
        let conjuncts_here = all_inner.then_some(conjuncts.as_mut_slice());
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
    let sides = &step.sides;
    let resolver = Resolver { sides };

    // The last join's stage: the outer query over its joined layout.
    let joined = step.joined_spec();
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
    if aggregating || ranking {
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
    let emit = if aggregating { parsed.emit.take() } else { None };
    let aggregate = match aggregate_select {
        None => None,
        Some(a) => {
            let mut query = parsed.query.clone();
            *query.body = SetExpr::Select(a);
            let mut p = ParsedQuery {
                query,
                window: None,
                emit,
                clauses: parsed.clauses.clone(),
                top_n: parsed.top_n.take(),
                as_of: Vec::new(),
            };
            let plan = plan_parsed(&mut p, std::slice::from_ref(&joined_rows))?;
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
            Some(plan)
        }
    };
    let mut outer = plan_parsed(parsed, std::slice::from_ref(&joined))?;
    step.make_join_stage(&mut outer)?;
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
    Ok(Some(Dataflow { stages, branches }))
}

/// One join of a query: its sides, and how they meet.
struct JoinStep<'a> {
    sides: [Side<'a>; 2],
    kind: JoinKind,
    /// The right side is a table.
    table: bool,
    layout: Layout,
    constraint: JoinConstraint,
}

impl<'a> JoinStep<'a> {
    /// Checks the join of `left` and `right` and sorts out its ON.
    fn new(
        left: Side<'a>,
        right: Side<'a>,
        left_relation: &TableFactor,
        join: &Join,
        as_of: Option<&AsOf>,
        where_conjuncts: Option<&mut [(Expr, bool)]>,
    ) -> Result<Self, SqlError> {
        // Two windowed subqueries meet per window (Nexmark q8); a stream
        // and a windowed subquery, as two streams do, by a time bound
        // between the stream's event time and the window's end (q7).
        let windowed = left.subquery.is_some() && right.subquery.is_some();
        if left.prefixes().iter().any(|p| p.eq_ignore_ascii_case(&right.prefix)) {
            return Err(SqlError::at_node(
                &join.relation,
                format!("two sides are named `{}`: alias one", right.prefix),
            ));
        }
        let (kind, constraint) = match &join.join_operator {
            JoinOperator::Join(c) | JoinOperator::Inner(c) => (JoinKind::Inner, c),
            JoinOperator::Left(c) | JoinOperator::LeftOuter(c) => (JoinKind::Left, c),
            JoinOperator::Right(c) | JoinOperator::RightOuter(c) => (JoinKind::Right, c),
            JoinOperator::FullOuter(c) => (JoinKind::Full, c),
            _ => {
                return Err(SqlError::at_node(
                    &join.relation,
                    "this kind of join is not supported: INNER, LEFT, RIGHT and FULL [OUTER] JOIN … ON are",
                ));
            }
        };
        let table = match (left.spec.table.is_some(), right.spec.table.is_some()) {
            (false, false) => false,
            (false, true) => true,
            (true, false) => {
                return Err(SqlError::at_node(
                    left_relation,
                    format!(
                        "`{}` is a table: a table is the right side of a join with a stream (FROM stream s JOIN {} t ON …)",
                        left.spec.name, left.spec.name
                    ),
                ));
            }
            (true, true) => {
                return Err(SqlError::at_node(&join.relation, "a join of two tables is not supported: join a stream"));
            }
        };
        if table && !matches!(kind, JoinKind::Inner | JoinKind::Left) {
            return Err(SqlError::at_node(
                &join.relation,
                "a join with a table is INNER or LEFT: each stream row is enriched from the table, and the table's \
                 rows are not emitted on their own",
            ));
        }
        if let (Some(a), false) = (as_of, table) {
            return Err(SqlError::at_span(
                a.span,
                format!(
                    "FOR SYSTEM_TIME AS OF applies to a table: `{}` is a stream (declare `table` on the source to read \
                     it as one)",
                    right.spec.name
                ),
            ));
        }
        let sides = [left, right];
        let on = match constraint {
            JoinConstraint::On(e) => e.clone(),
            JoinConstraint::Using(names) => using(names, &sides, &join.relation)?,
            JoinConstraint::Natural | JoinConstraint::None => {
                return Err(SqlError::at_node(
                    &join.relation,
                    "a join needs an equality key: add ON a.key = b.key (NATURAL and CROSS joins are not supported)",
                ));
            }
        };
        let resolver = Resolver { sides: &sides };
        // In an INNER join, a WHERE conjunct over both sides means what it
        // would in ON; there it can bound the sides' times (Nexmark q7's
        // `B.dateTime BETWEEN B1.dateTime - INTERVAL … AND B1.dateTime`),
        // so rows are let go instead of kept for good.
        let mut on = on;
        if let Some(conjuncts) = where_conjuncts
            && !table
        {
            for (c, pushed) in conjuncts.iter_mut().filter(|(_, pushed)| !*pushed) {
                if resolver.reads_both(c) {
                    on = Expr::BinaryOp { left: Box::new(on), op: BinaryOperator::And, right: Box::new(c.clone()) };
                    *pushed = true;
                }
            }
        }
        // Windows equated by key are not time bounds (q8's `P.endtime =
        // A.endtime` is part of its key).
        let conditions = classify(&on, &resolver, !table && !windowed)?;
        let layout = if windowed {
            Layout::Interval(window_keys(conditions, &sides, &on)?)
        } else if table {
            let version = match as_of {
                None => TableVersion::Latest,
                Some(a) => {
                    let time = Expr::CompoundIdentifier(a.column.clone());
                    match resolver.event_time_ref(&a.column, &time)? {
                        Some((0, _)) => TableVersion::AsOfEventTime,
                        _ => {
                            return Err(SqlError::at_span(
                                a.span,
                                format!(
                                    "FOR SYSTEM_TIME AS OF takes the stream's event-time column: {}",
                                    time_or_placeholder(&sides[0])
                                ),
                            ));
                        }
                    }
                }
            };
            Layout::Table(table_keys(conditions, &sides, version, &on)?)
        } else {
            Layout::Interval(interval_bounds(conditions, &sides, kind, &on)?)
        };
        Ok(Self { sides, kind, table, layout, constraint: constraint.clone() })
    }

    /// The plan of side `side`'s stage: its rows in the joined layout — its
    /// columns, the other side's NULL, which side it is, its event time —
    /// keyed by its side of the equality key. The left side of a join of a
    /// join is the `previous` join's stage, which writes its rows so.
    /// `filters`: WHERE's conjuncts that read only this side, a source.
    fn side_plan(
        &self,
        side: usize,
        sources: &[SourceSpec],
        previous: Option<&JoinStep<'_>>,
        filters: &[Expr],
    ) -> Result<Plan, SqlError> {
        let s = &self.sides[side];
        let keys = self.layout.keys();
        let resolver = Resolver { sides: &self.sides };
        let mut items = Vec::new();
        for (j, other) in self.sides.iter().enumerate() {
            for (c, column) in other.spec.schema.columns.iter().enumerate() {
                let name = quote(&other.joined_name(c));
                if side != j {
                    items.push(format!("CAST(NULL AS {}) AS {name}", sql_type(column.type_)));
                    continue;
                }
                match (&s.rows, &s.subquery) {
                    (Some(_), _) => items.push(format!("{} AS {name}", quote(&column.name))),
                    (None, Some((_, exprs))) => items.push(format!("{} AS {name}", exprs[c])),
                    (None, None) => items.push(format!("{} AS {name}", s.local_reference(c))),
                }
            }
        }
        items.push(format!("{} AS {RIGHT}", if side == 1 { "TRUE" } else { "FALSE" }));
        let key = |k: &(Expr, Expr)| if side == 0 { k.0.clone() } else { k.1.clone() };
        if let Some(rows) = &s.rows {
            // A projection of rows another plan aggregated: their columns
            // are the subquery's, by name, then their window's end less 1 ms.
            items.push(format!("({} + INTERVAL '1' MILLISECOND) AS {TIME}", quote(crate::cascade::ROW_TIME)));
            for (k, pair) in keys.iter().enumerate() {
                let mut e = key(pair);
                resolver.replace_references(&mut e, |i, c, _| {
                    Expr::Identifier(Ident::with_quote('"', self.sides[i].spec.schema.columns[c].name.clone()))
                })?;
                items.push(format!("({e}) AS __k{k}"));
            }
            let sql = format!("SELECT {} FROM {}", items.join(", "), quote(&rows.name));
            let mut plan = plan_parsed(&mut parse(&sql)?, std::slice::from_ref(rows))?;
            let width = plan.outputs.len() - keys.len();
            plan.keys = plan.outputs.split_off(width);
            return Ok(plan);
        }
        if let Some((query, exprs)) = &s.subquery {
            // A window's row is final once the watermark passes its end:
            // its time is the end, which no watermark before it passed.
            items.push(format!("{WINDOW_END} AS {TIME}"));
            for (k, pair) in keys.iter().enumerate() {
                let mut e = key(pair);
                resolver.inline(&mut e, exprs)?;
                items.push(format!("({e}) AS __k{k}"));
            }
            let mut query = query.clone();
            let SetExpr::Select(select) = query.body.as_mut() else {
                return Err(SqlError::unpositioned("internal: a windowed subquery that is not a SELECT"));
            };
            select.projection = parse(&format!("SELECT {}", items.join(", ")))?
                .query
                .body
                .as_select()
                .map(|s| s.projection.clone())
                .unwrap_or_default();
            let mut p = ParsedQuery::of(query);
            let mut plan = plan_parsed(&mut p, sources)?;
            let width = plan.outputs.len() - keys.len();
            plan.keys = plan.outputs.split_off(width);
            return Ok(plan);
        }
        match s.event_time() {
            Some(c) => items.push(format!("{} AS {TIME}", s.local_reference(c))),
            None => items.push(format!("CAST(NULL AS TIMESTAMP) AS {TIME}")),
        }
        // The source as declared: its layout carries only the columns the
        // query reads, but every record is checked as the source says.
        let mut spec = Cow::Borrowed(find_declared(sources, &s.spec));
        if self.table {
            if side == 1 {
                items.push(format!("COALESCE({}.{DELETED}, FALSE) AS {DELETED}", quote(&s.prefix)));
                spec = Cow::Owned(table_source(&spec));
            } else {
                items.push(format!("FALSE AS {DELETED}"));
            }
        }
        for (k, pair) in keys.iter().enumerate() {
            let mut e = key(pair);
            resolver.replace_references(&mut e, |i, c, _| self.sides[i].local_reference(c))?;
            items.push(format!("({e}) AS __k{k}"));
        }
        let mut plan = match (&s.chain, previous) {
            (Some(_), Some(previous)) => {
                let sql = format!("SELECT {} FROM {JOINED}", items.join(", "));
                let mut plan = plan_parsed(&mut parse(&sql)?, std::slice::from_ref(&previous.joined_spec()))?;
                previous.make_join_stage(&mut plan)?;
                plan
            }
            (None, None) => {
                let mut sql =
                    format!("SELECT {} FROM {} AS {}", items.join(", "), quote(&s.spec.name), quote(&s.prefix));
                for (k, f) in filters.iter().enumerate() {
                    let mut f = f.clone();
                    resolver.replace_references(&mut f, |i, c, _| self.sides[i].local_reference(c))?;
                    sql.push_str(if k == 0 { " WHERE " } else { " AND " });
                    sql.push_str(&format!("({f})"));
                }
                plan_parsed(&mut parse(&sql)?, std::slice::from_ref(spec.as_ref()))?
            }
            _ => return Err(SqlError::unpositioned("internal: a join's rows as a side without their join")),
        };
        let width = plan.outputs.len() - keys.len();
        plan.keys = plan.outputs.split_off(width);
        Ok(plan)
    }

    /// Both sides' keys must be of one type, or equal values could hash
    /// to different partitions.
    fn check_key_types(&self, left: &Plan, right: &Plan) -> Result<(), SqlError> {
        for (k, (left_key, _)) in self.layout.keys().iter().enumerate() {
            let (l, r) = (left.keys[k].expr.data_type(), right.keys[k].expr.data_type());
            if l != r && l != DataType::Null && r != DataType::Null {
                return Err(SqlError::at_node(
                    left_key,
                    format!("the sides of this join key are {l} and {r}: CAST one side so both are of one type"),
                ));
            }
        }
        Ok(())
    }

    /// The joined layout as a source the join's stage is planned over.
    fn joined_spec(&self) -> SourceSpec {
        joined_spec(&self.sides, self.table)
    }

    /// Makes `plan` — planned over [`Self::joined_spec`] as a projection —
    /// the join's stage: the join operator, then the plan's projection of
    /// the joined rows; its WHERE filters joined rows (for outer joins,
    /// after NULL-extension).
    fn make_join_stage(&self, plan: &mut Plan) -> Result<(), SqlError> {
        if !matches!(plan.operator, OperatorPlan::Stateless) {
            return Err(SqlError::unpositioned("internal: the query over a join planned as more than a projection"));
        }
        let resolver = Resolver { sides: &self.sides };
        let source = &plan.source;
        let index = |name: &str| source.schema.index_of(name).unwrap_or(0);
        let left_width = self.sides[0].spec.schema.columns.len();
        let right_width = self.sides[1].spec.schema.columns.len();
        let compile_side = |e: &Expr| {
            let mut e = e.clone();
            resolver.rewrite(&mut e)?;
            compile_over(&e, source, "ON")
        };
        let keys = self.layout.keys();
        let left_keys = keys.iter().map(|k| compile_side(&k.0)).collect::<Result<Vec<_>, _>>()?;
        let right_keys = keys.iter().map(|k| compile_side(&k.1)).collect::<Result<Vec<_>, _>>()?;
        let residual = match self.layout.residual().into_iter().reduce(|a, b| Expr::BinaryOp {
            left: Box::new(a),
            op: BinaryOperator::And,
            right: Box::new(b),
        }) {
            None => None,
            Some(e) => {
                let compiled = compile_side(&e)?;
                if !matches!(compiled.data_type(), DataType::Boolean | DataType::Null) {
                    return Err(SqlError::at_node(&e, "ON needs a boolean condition"));
                }
                Some(compiled)
            }
        };
        let (left, right) = ((0, left_width), (left_width, left_width + right_width));
        let (side, time) = (index(RIGHT), index(TIME));
        let kind = self.kind;
        let operator = match &self.layout {
            Layout::Interval(Interval { lower, upper, until, .. }) => OperatorPlan::Join(JoinPlan {
                kind,
                left,
                right,
                side,
                time,
                left_keys,
                right_keys,
                lower: *lower,
                upper: *upper,
                until: *until,
                residual,
            }),
            Layout::Table(TableKeys { version, .. }) => OperatorPlan::TableJoin(TableJoinPlan {
                kind,
                left,
                right,
                side,
                time,
                deleted: index(DELETED),
                left_keys,
                right_keys,
                residual,
                version: *version,
            }),
        };
        plan.operator = operator;
        plan.having = plan.filter.take();
        plan.intermediate = plan.source.schema.clone();
        plan.used_columns = vec![true; plan.used_columns.len()];
        plan.source.required = vec![false; plan.source.required.len()];
        plan.partitioning = Partitioning::ByExchange;
        Ok(())
    }

    /// This join's rows as the left side of the next join. Their event
    /// time is the left side's (a join without an upper bound has none): a joined row's watermark is held back by
    /// the join until no row older than it can still come out (see
    /// `sluice_engine`'s join operators), so the next join can judge time
    /// by it. A RIGHT or FULL join's rows may have no left side, so no time.
    fn rows_as_side(&self, at: &TableFactor) -> Result<Side<'a>, SqlError> {
        if matches!(self.kind, JoinKind::Right | JoinKind::Full) {
            return Err(SqlError::at_node(
                at,
                "the rows of a RIGHT or FULL join cannot be joined again yet (INNER and LEFT joins' can): a row \
                 without its left side has no event time",
            ));
        }
        let mut members = Vec::new();
        let mut columns = Vec::new();
        for s in &self.sides {
            let first = members.len();
            members.extend(s.members());
            for c in 0..s.spec.schema.columns.len() {
                let member = match &s.chain {
                    None => first,
                    Some(ch) => first + ch.columns[c].0,
                };
                columns.push((member, s.bare_name(c).to_owned()));
            }
        }
        let rows = rows_spec(&self.sides);
        // A join without an upper time bound (a regular one, or one bounded
        // by a column) holds its watermark back for good: no event time.
        let regular = matches!(&self.layout, Layout::Interval(i) if i.upper == i64::MAX);
        let event_time = self.sides[0]
            .event_time()
            .filter(|_| !regular)
            .map(|c| EventTimeSpec { column: self.sides[0].joined_name(c), watermark_delay_millis: 0 });
        let name = format!("{} JOIN {}", self.sides[0].spec.name, self.sides[1].spec.name);
        let spec = SourceSpec { schema: rows.schema, event_time, ..SourceSpec::table(&name, &[]) };
        Ok(Side {
            spec: Cow::Owned(spec),
            subquery: None,
            prefix: self.sides[0].prefix.clone(),
            names: members.iter().flat_map(|m| m.names.iter().cloned()).collect(),
            chain: Some(Chain { members, columns }),
            declared: None,
            rows: None,
        })
    }
}

/// The joined rows as an aggregate after the join reads them: both
/// sides' columns, named `alias.column`, without the layout's own.
fn rows_spec(sides: &[Side<'_>; 2]) -> SourceSpec {
    let columns = sides
        .iter()
        .flat_map(|s| {
            s.spec
                .schema
                .columns
                .iter()
                .enumerate()
                .map(|(c, column)| ColumnSpec::field(s.joined_name(c), column.type_, false))
        })
        .collect();
    SourceSpec { schema: SchemaSpec { columns, registry: None }, ..SourceSpec::table(JOINED, &[]) }
}

/// The conjuncts of ON, sorted: equality keys between the sides (left
/// expression, right expression), bounds on the event times' difference,
/// and the rest.
struct Conditions {
    keys: Vec<(Expr, Expr)>,
    lower: Option<i64>,
    upper: Option<i64>,
    /// A left-side TIMESTAMP column the right side's event time may not
    /// pass (`b.ts <= a.expires`): the comparison stays residual, and a
    /// left row is let go once the watermark passes its value.
    until: Option<usize>,
    residual: Vec<Expr>,
}

fn classify(on: &Expr, resolver: &Resolver<'_, '_>, time_bounds: bool) -> Result<Conditions, SqlError> {
    let mut conjuncts = Vec::new();
    split_and(on, &mut conjuncts);
    let mut out = Conditions { keys: Vec::new(), lower: None, upper: None, until: None, residual: Vec::new() };
    for c in conjuncts {
        // `b.ts BETWEEN a.ts AND a.expires`: a time bound below, a column
        // above (Nexmark q4, q6, q9: a bid within its auction's life).
        if time_bounds
            && let Expr::Between { expr, negated: false, low, high } = c
            && let Some((until, lower)) = resolver.until_between(expr, low, high)?
        {
            out.until = Some(until);
            out.lower = Some(out.lower.map_or(lower, |l| l.max(lower)));
            out.residual.push(c.clone());
            continue;
        }
        if time_bounds && let Some(until) = resolver.until_bound(c) {
            out.until = Some(until);
            out.residual.push(c.clone());
            continue;
        }
        if time_bounds && let Some(bounds) = resolver.time_bound(c)? {
            for (is_lower, v) in bounds {
                if is_lower {
                    out.lower = Some(out.lower.map_or(v, |l| l.max(v)));
                } else {
                    out.upper = Some(out.upper.map_or(v, |u| u.min(v)));
                }
            }
            continue;
        }
        if let Expr::BinaryOp { left: a, op: BinaryOperator::Eq, right: b } = c {
            match (resolver.sides_of(a)?, resolver.sides_of(b)?) {
                ((true, false), (false, true)) => {
                    out.keys.push((a.as_ref().clone(), b.as_ref().clone()));
                    continue;
                }
                ((false, true), (true, false)) => {
                    out.keys.push((b.as_ref().clone(), a.as_ref().clone()));
                    continue;
                }
                _ => {}
            }
        }
        out.residual.push(c.clone());
    }
    if out.keys.is_empty() {
        return Err(SqlError::at_node(
            on,
            "a join needs an equality key between its sides (ON a.key = b.key): rows meet on the partition of their key",
        ));
    }
    Ok(out)
}

/// How a join's sides meet: its keys, the rest of ON, and what decides
/// which rows join.
enum Layout {
    Interval(Interval),
    Table(TableKeys),
}

struct Interval {
    keys: Vec<(Expr, Expr)>,
    lower: i64,
    upper: i64,
    /// A left column bounding the right side's time from above (then
    /// `upper` is unbounded): `Conditions::until`.
    until: Option<usize>,
    residual: Vec<Expr>,
}

struct TableKeys {
    /// In the order of the table's primary key.
    keys: Vec<(Expr, Expr)>,
    residual: Vec<Expr>,
    version: TableVersion,
}

impl Layout {
    fn keys(&self) -> Vec<(Expr, Expr)> {
        match self {
            Self::Interval(i) => i.keys.clone(),
            Self::Table(t) => t.keys.clone(),
        }
    }

    fn residual(&self) -> Vec<Expr> {
        match self {
            Self::Interval(i) => i.residual.clone(),
            Self::Table(t) => t.residual.clone(),
        }
    }
}

/// A stream–stream join: an interval join, whose sides need event time
/// and a bound on how far apart their times may be both ways; or, with no
/// time bound at all, an INNER regular join, which keeps every row for
/// good (as Flink's regular join does, with no state TTL).
fn interval_bounds(c: Conditions, sides: &[Side<'_>; 2], kind: JoinKind, on: &Expr) -> Result<Interval, SqlError> {
    if (c.lower, c.upper) == (None, None) {
        if kind != JoinKind::Inner {
            return Err(SqlError::at_node(
                on,
                format!(
                    "a {} join needs a time bound: without one a row's partner may come at any time, so its \
                     NULL-extended row could never be emitted for good (add AND {} BETWEEN {} - INTERVAL '1' MINUTE \
                     AND {} + INTERVAL '1' MINUTE, or write an INNER join)",
                    match kind {
                        JoinKind::Left => "LEFT",
                        JoinKind::Right => "RIGHT",
                        _ => "FULL",
                    },
                    time_or_placeholder(&sides[1]),
                    time_or_placeholder(&sides[0]),
                    time_or_placeholder(&sides[0]),
                ),
            ));
        }
        let (lower, upper) = JoinPlan::UNBOUNDED;
        return Ok(Interval { keys: c.keys, lower, upper, until: None, residual: c.residual });
    }
    // A bound was found, so both sides have event time: a bound is one
    // between their event-time columns (`Resolver::time_bound`).
    if let (Some(lower), None, Some(until), JoinKind::Inner) = (c.lower, c.upper, c.until, kind) {
        // Bounded above by a left column: a right row's partners all came
        // before `its time − lower`, a left row's before its column's value.
        return Ok(Interval { keys: c.keys, lower, upper: i64::MAX, until: Some(until), residual: c.residual });
    }
    let (Some(lower), Some(upper)) = (c.lower, c.upper) else {
        let (l, r) = (&sides[0], &sides[1]);
        let (lt, rt) = (l.written(l.event_time().unwrap_or(0)), r.written(r.event_time().unwrap_or(0)));
        return Err(SqlError::at_node(
            on,
            format!(
                "a stream–stream join's time bound needs both ends: add AND {rt} BETWEEN {lt} - INTERVAL '1' MINUTE \
                 AND {lt} + INTERVAL '1' MINUTE (the sides' event-time columns), or drop the bound for a regular \
                 join that keeps every row"
            ),
        ));
    };
    if lower > upper {
        return Err(SqlError::at_node(on, "the join's time bound is empty: its lower end is above its upper end"));
    }
    Ok(Interval { keys: c.keys, lower, upper, until: None, residual: c.residual })
}

/// A side's event-time column as a user writes it, for a suggestion.
fn time_or_placeholder(side: &Side<'_>) -> String {
    side.event_time().map_or_else(|| format!("{}.<eventTime>", side.prefix), |c| side.written(c))
}

/// A stream–table join: the equality keys must cover the table's primary
/// key — the rows of a key are on one partition, and a stream row meets
/// at most one table row — in its order; other equalities are residual.
fn table_keys(
    mut c: Conditions,
    sides: &[Side<'_>; 2],
    version: TableVersion,
    on: &Expr,
) -> Result<TableKeys, SqlError> {
    let table = &sides[1];
    let primary_key = table.spec.table.as_ref().map(|t| t.primary_key.as_slice()).unwrap_or_default();
    let resolver = Resolver { sides };
    let mut keys = Vec::with_capacity(primary_key.len());
    for column in primary_key {
        let at = table.column(column);
        let found = c.keys.iter().position(|(_, r)| {
            let idents: &[Ident] = match r {
                Expr::Identifier(id) => std::slice::from_ref(id),
                Expr::CompoundIdentifier(ids) => ids,
                _ => return false,
            };
            matches!(resolver.resolve(idents, r), Ok(Some((1, c))) if Some(c) == at)
        });
        let Some(found) = found else {
            return Err(SqlError::at_node(
                on,
                format!(
                    "a join with table `{}` equates each column of its primary key ({}) with the stream's: add \
                     AND {}.{column} = <a column of {}>",
                    table.spec.name,
                    primary_key.join(", "),
                    table.prefix,
                    sides[0].prefix
                ),
            ));
        };
        keys.push(c.keys.remove(found));
    }
    for (l, r) in c.keys {
        c.residual.push(Expr::BinaryOp { left: Box::new(l), op: BinaryOperator::Eq, right: Box::new(r) });
    }
    if version == TableVersion::AsOfEventTime {
        for s in sides {
            if s.event_time().is_none() {
                return Err(SqlError::at_node(
                    on,
                    format!(
                        "FOR SYSTEM_TIME AS OF joins the table version valid at the stream row's event time: \
                         source `{}` declares no eventTime",
                        s.spec.name
                    ),
                ));
            }
        }
    }
    Ok(TableKeys { keys, residual: c.residual, version })
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

fn side<'a>(
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
fn referenced_names(query: &Query, as_of: &[AsOf]) -> Option<HashSet<String>> {
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
fn find_declared<'s>(sources: &'s [SourceSpec], side: &'s SourceSpec) -> &'s SourceSpec {
    sources.iter().find(|s| s.name.eq_ignore_ascii_case(&side.name)).unwrap_or(side)
}

/// A subquery side, `(SELECT … GROUP BY …, TUMBLE(ts, …)) AS p` (Nexmark
/// q8's shape): a windowed aggregate emitting each window's rows once,
/// when the watermark passes its end, so its rows join as an interval
/// join's would. It runs on its source's partitions before the join's
/// exchange when its source is keyed by its GROUP BY; otherwise after an
/// exchange of its own (`plan_join`).
fn windowed_side<'a>(subquery: &Query, alias: &Ident, sources: &[SourceSpec]) -> Result<Side<'a>, SqlError> {
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

/// A join of two windowed subqueries: its keys must equate their windows
/// (a `window_start` or `window_end` column of each), so rows meet only
/// within one window; their times (the window's end) are then equal.
fn window_keys(c: Conditions, sides: &[Side<'_>; 2], on: &Expr) -> Result<Interval, SqlError> {
    let resolver = Resolver { sides };
    let is_window = |e: &Expr, side: usize| -> bool {
        let idents: &[Ident] = match e {
            Expr::Identifier(id) => std::slice::from_ref(id),
            Expr::CompoundIdentifier(ids) => ids,
            _ => return false,
        };
        match resolver.resolve(idents, e) {
            Ok(Some((s, col))) if s == side => sides[s].subquery.as_ref().is_some_and(|(_, exprs)| {
                matches!(&exprs[col], Expr::Identifier(id)
                    if id.value.eq_ignore_ascii_case(WINDOW_START) || id.value.eq_ignore_ascii_case(WINDOW_END))
            }),
            _ => false,
        }
    };
    if !c.keys.iter().any(|(l, r)| is_window(l, 0) && is_window(r, 1)) {
        return Err(SqlError::at_node(
            on,
            format!(
                "a join of windowed subqueries equates their windows: add AND {}.<its window_start> = {}.<its window_start>",
                sides[0].prefix, sides[1].prefix
            ),
        ));
    }
    Ok(Interval { keys: c.keys, lower: 0, upper: 0, until: None, residual: c.residual })
}

/// `USING (a, b)`: `l.a = r.a AND l.b = r.b`.
fn using(names: &[sqlparser::ast::ObjectName], sides: &[Side<'_>; 2], at: &TableFactor) -> Result<Expr, SqlError> {
    let mut on: Option<Expr> = None;
    for name in names {
        let Some(ObjectNamePart::Identifier(column)) = name.0.last() else {
            return Err(SqlError::at_node(at, "USING lists column names"));
        };
        let mut refer = Vec::with_capacity(2);
        for s in sides {
            match (s.column(&column.value), s.bare_count(&column.value)) {
                (Some(c), 1) => refer.push(s.user_reference(c, Some(column.span))),
                (Some(_), _) => {
                    return Err(SqlError::at_span(
                        column.span,
                        format!("USING column `{}` is in more than one source of `{}`", column.value, s.spec.name),
                    ));
                }
                (None, _) => {
                    return Err(SqlError::at_span(
                        column.span,
                        format!("USING column `{}` is not a column of `{}`", column.value, s.spec.name),
                    ));
                }
            }
        }
        let right = refer.pop().unwrap_or(Expr::Value(sqlparser::ast::Value::Null.into()));
        let left = refer.pop().unwrap_or(Expr::Value(sqlparser::ast::Value::Null.into()));
        let eq = Expr::BinaryOp { left: Box::new(left), op: BinaryOperator::Eq, right: Box::new(right) };
        on = Some(match on {
            None => eq,
            Some(prev) => Expr::BinaryOp { left: Box::new(prev), op: BinaryOperator::And, right: Box::new(eq) },
        });
    }
    on.ok_or_else(|| SqlError::at_node(at, "USING needs at least one column"))
}

fn split_and<'e>(e: &'e Expr, out: &mut Vec<&'e Expr>) {
    match e {
        Expr::BinaryOp { left, op: BinaryOperator::And, right } => {
            split_and(left, out);
            split_and(right, out);
        }
        Expr::Nested(inner) => split_and(inner, out),
        other => out.push(other),
    }
}

struct Resolver<'s, 'a> {
    sides: &'s [Side<'a>; 2],
}

impl Resolver<'_, '_> {
    /// The side and column a reference names; `None` for a bare name
    /// neither side has (left for the planner to report).
    fn resolve(&self, idents: &[Ident], node: &Expr) -> Result<Option<(usize, usize)>, SqlError> {
        match idents {
            [name] => {
                let mut found: Vec<(usize, usize)> = Vec::new();
                for (i, s) in self.sides.iter().enumerate() {
                    let columns = 0..s.spec.schema.columns.len();
                    found.extend(columns.filter(|&c| s.bare_name(c).eq_ignore_ascii_case(&name.value)).map(|c| (i, c)));
                }
                match found.as_slice() {
                    [] => Ok(None),
                    [one] => Ok(Some(*one)),
                    many => {
                        let written: Vec<String> = many.iter().map(|&(i, c)| self.sides[i].written(c)).collect();
                        Err(SqlError::at_span(
                            name.span,
                            format!(
                                "column `{}` is in more than one source of the join: write {}",
                                name.value,
                                written.join(" or ")
                            ),
                        ))
                    }
                }
            }
            [q, name] => {
                let lower = q.value.to_ascii_lowercase();
                for (i, s) in self.sides.iter().enumerate() {
                    match s.qualified(&lower, &name.value) {
                        None => {}
                        Some(Some(c)) => return Ok(Some((i, c))),
                        Some(None) => {
                            let source = match &s.chain {
                                None => s.spec.name.as_str(),
                                Some(ch) => ch
                                    .members
                                    .iter()
                                    .find(|m| m.names.contains(&lower))
                                    .map_or(q.value.as_str(), |m| m.source.as_str()),
                            };
                            let columns = s.columns_of(&lower).unwrap_or_default();
                            let hint = match s.declared {
                                Some(d) => suggestion(&name.value, d.schema.columns.iter().map(|c| c.name.as_str())),
                                None => suggestion(&name.value, columns.iter().map(|&c| s.bare_name(c))),
                            };
                            return Err(SqlError::at_span(
                                name.span,
                                format!("unknown column `{}` in source `{source}`{hint}", name.value),
                            ));
                        }
                    }
                }
                let known: Vec<&str> = self.sides.iter().flat_map(Side::prefixes).collect();
                Err(SqlError::at_span(
                    q.span,
                    format!("unknown table `{}` (the join reads `{}`)", q.value, known.join("`, `")),
                ))
            }
            _ => Err(SqlError::at_node(node, "nested field access is not supported")),
        }
    }

    /// The one side whose columns `e` reads, if it reads some and every
    /// name in it is a column of that side (so it means the same before
    /// the join as after it).
    fn only_side(&self, e: &Expr) -> Option<usize> {
        match self.sides_read(e)? {
            [true, false] => Some(0),
            [false, true] => Some(1),
            _ => None,
        }
    }

    /// Whether `e` reads both sides, and only columns of them.
    fn reads_both(&self, e: &Expr) -> bool {
        self.sides_read(e) == Some([true, true])
    }

    /// Which sides `e` reads, if every name in it is a column of one.
    fn sides_read(&self, e: &Expr) -> Option<[bool; 2]> {
        let mut found = [false; 2];
        let flow = visit_expressions(e, |x| {
            let idents: &[Ident] = match x {
                Expr::Identifier(id) => std::slice::from_ref(id),
                Expr::CompoundIdentifier(ids) => ids,
                _ => return ControlFlow::Continue(()),
            };
            match self.resolve(idents, x) {
                Ok(Some((s, _))) => {
                    found[s] = true;
                    ControlFlow::Continue(())
                }
                _ => ControlFlow::Break(()),
            }
        });
        flow.is_continue().then_some(found)
    }

    /// Whether `e` reads the left side, the right side.
    fn sides_of(&self, e: &Expr) -> Result<(bool, bool), SqlError> {
        let mut found = (false, false);
        let mut error = None;
        let _ = visit_expressions(e, |x| {
            let idents: &[Ident] = match x {
                Expr::Identifier(id) => std::slice::from_ref(id),
                Expr::CompoundIdentifier(ids) => ids,
                _ => return ControlFlow::<()>::Continue(()),
            };
            match self.resolve(idents, x) {
                Ok(Some((0, _))) => found.0 = true,
                Ok(Some(_)) => found.1 = true,
                Ok(None) => {}
                Err(e) => {
                    error = Some(e);
                    return ControlFlow::Break(());
                }
            }
            ControlFlow::Continue(())
        });
        error.map_or(Ok(found), Err)
    }

    /// Replaces every reference to a subquery side's column in `e` with
    /// the expression its SELECT list computes it with.
    fn inline(&self, e: &mut Expr, exprs: &[Expr]) -> Result<(), SqlError> {
        self.replace_references(e, |_, c, _| Expr::Nested(Box::new(exprs[c].clone())))
    }

    /// Rewrites every reference to a side's column to its joined name.
    fn rewrite(&self, e: &mut Expr) -> Result<(), SqlError> {
        self.replace_references(e, |s, c, idents| {
            let mut id = Ident::with_quote('"', self.sides[s].joined_name(c));
            id.span = idents.last().map_or(sqlparser::tokenizer::Span::empty(), |i| i.span);
            Expr::Identifier(id)
        })
    }

    /// Replaces each reference in `e` to a side's column (side, column, as
    /// written) with what `with` makes of it.
    fn replace_references(&self, e: &mut Expr, with: impl Fn(usize, usize, &[Ident]) -> Expr) -> Result<(), SqlError> {
        let mut error = None;
        let _ = visit_expressions_mut(e, |x| {
            let idents: Vec<Ident> = match x {
                Expr::Identifier(id) => vec![id.clone()],
                Expr::CompoundIdentifier(ids) => ids.clone(),
                _ => return ControlFlow::<()>::Continue(()),
            };
            match self.resolve(&idents, x) {
                Ok(Some((s, c))) => *x = with(s, c, &idents),
                Ok(None) => {}
                Err(e) => {
                    error = Some(e);
                    return ControlFlow::Break(());
                }
            }
            ControlFlow::Continue(())
        });
        error.map_or(Ok(()), Err)
    }

    /// `side.time ± INTERVAL …` for a side's event-time column: the side
    /// and the offset in milliseconds.
    fn time_term(&self, e: &Expr) -> Result<Option<(usize, i64)>, SqlError> {
        Ok(match e {
            Expr::Nested(inner) => self.time_term(inner)?,
            Expr::BinaryOp { left, op: op @ (BinaryOperator::Plus | BinaryOperator::Minus), right } => {
                let Some((side, offset)) = self.time_term(left)? else { return Ok(None) };
                if !matches!(right.as_ref(), Expr::Interval(_)) {
                    return Ok(None);
                }
                let ms = interval_millis(right)?;
                Some((
                    side,
                    if *op == BinaryOperator::Plus { offset.saturating_add(ms) } else { offset.saturating_sub(ms) },
                ))
            }
            Expr::Identifier(id) => self.event_time_ref(std::slice::from_ref(id), e)?,
            Expr::CompoundIdentifier(ids) => self.event_time_ref(ids, e)?,
            _ => None,
        })
    }

    fn event_time_ref(&self, idents: &[Ident], node: &Expr) -> Result<Option<(usize, i64)>, SqlError> {
        Ok(self.resolve(idents, node)?.filter(|(s, c)| self.sides[*s].event_time() == Some(*c)).map(|(s, _)| (s, 0)))
    }

    /// `right.ts <= left.c` (or `<`, or written the other way round) with
    /// `left.c` a TIMESTAMP column of the left side: that column.
    fn until_bound(&self, e: &Expr) -> Option<usize> {
        let Expr::BinaryOp { left, op, right } = e else { return None };
        let (time, column) = match op {
            BinaryOperator::LtEq | BinaryOperator::Lt => (left, right),
            BinaryOperator::GtEq | BinaryOperator::Gt => (right, left),
            _ => return None,
        };
        self.until_column(time, column)
    }

    /// `right.ts BETWEEN left.ts [± INTERVAL] AND left.c`: the column, and
    /// the lower bound on `right − left` the low end gives.
    fn until_between(&self, expr: &Expr, low: &Expr, high: &Expr) -> Result<Option<(usize, i64)>, SqlError> {
        let Some(until) = self.until_column(expr, high) else { return Ok(None) };
        let at_least =
            Expr::BinaryOp { left: Box::new(expr.clone()), op: BinaryOperator::GtEq, right: Box::new(low.clone()) };
        match self.time_bound(&at_least)?.as_deref() {
            Some([(true, lower)]) => Ok(Some((until, *lower))),
            _ => Ok(None),
        }
    }

    /// `time` is the right side's event time (no offset) and `column` a
    /// left TIMESTAMP column other than its event time.
    fn until_column(&self, time: &Expr, column: &Expr) -> Option<usize> {
        let idents = |e: &Expr| -> Option<Vec<Ident>> {
            match e {
                Expr::Identifier(id) => Some(vec![id.clone()]),
                Expr::CompoundIdentifier(ids) => Some(ids.clone()),
                Expr::Nested(inner) => match inner.as_ref() {
                    Expr::Identifier(id) => Some(vec![id.clone()]),
                    Expr::CompoundIdentifier(ids) => Some(ids.clone()),
                    _ => None,
                },
                _ => None,
            }
        };
        let (t, c) = (idents(time)?, idents(column)?);
        let (1, tc) = self.resolve(&t, time).ok()?? else { return None };
        let (0, cc) = self.resolve(&c, column).ok()?? else { return None };
        let (right, left) = (&self.sides[1], &self.sides[0]);
        let timestamp = left.spec.schema.columns.get(cc).is_some_and(|x| x.type_ == ColumnType::Timestamp);
        (right.event_time() == Some(tc) && left.event_time() != Some(cc) && timestamp).then_some(cc)
    }

    /// A conjunct comparing the sides' event times: bounds on `right −
    /// left`, each `(is_lower, value)`; `None` if it is not one.
    fn time_bound(&self, e: &Expr) -> Result<Option<Vec<(bool, i64)>>, SqlError> {
        let compare = |x: &Expr, op: &BinaryOperator, y: &Expr| -> Result<Option<(bool, i64)>, SqlError> {
            let (Some((sx, ox)), Some((sy, oy))) = (self.time_term(x)?, self.time_term(y)?) else { return Ok(None) };
            if sx == sy {
                return Ok(None);
            }
            // t_x + ox  op  t_y + oy. As right − left:
            let (d, flip) = if sx == 1 { (oy.saturating_sub(ox), false) } else { (ox.saturating_sub(oy), true) };
            let op = match (op, flip) {
                (BinaryOperator::GtEq, false) | (BinaryOperator::LtEq, true) => (true, d),
                (BinaryOperator::Gt, false) | (BinaryOperator::Lt, true) => (true, d.saturating_add(1)),
                (BinaryOperator::LtEq, false) | (BinaryOperator::GtEq, true) => (false, d),
                (BinaryOperator::Lt, false) | (BinaryOperator::Gt, true) => (false, d.saturating_sub(1)),
                _ => return Ok(None),
            };
            Ok(Some(op))
        };
        match e {
            Expr::Between { expr, negated: false, low, high } => {
                let (Some(a), Some(b)) =
                    (compare(expr, &BinaryOperator::GtEq, low)?, compare(expr, &BinaryOperator::LtEq, high)?)
                else {
                    return Ok(None);
                };
                Ok(Some(vec![a, b]))
            }
            Expr::BinaryOp { left, op, right } => Ok(compare(left, op, right)?.map(|b| vec![b])),
            _ => Ok(None),
        }
    }
}

/// `*` and `side.*` expanded to each column, named by its bare name (the
/// `USING` columns once, and `alias.column` where both sides have a name).
fn expand_projection(
    items: &[SelectItem],
    sides: &[Side<'_>; 2],
    constraint: &JoinConstraint,
    kind: JoinKind,
) -> Result<Vec<SelectItem>, SqlError> {
    let using: HashSet<String> = match constraint {
        JoinConstraint::Using(names) => names
            .iter()
            .filter_map(|n| match n.0.last() {
                Some(ObjectNamePart::Identifier(i)) => Some(i.value.to_ascii_lowercase()),
                _ => None,
            })
            .collect(),
        _ => HashSet::new(),
    };
    // A name more than one source has is qualified in the output.
    let shared_name = |name: &str| sides.iter().map(|s| s.bare_count(name)).sum::<usize>() > 1;
    let mut out = Vec::with_capacity(items.len());
    for item in items {
        let chosen: Vec<(usize, Vec<usize>)> = match item {
            SelectItem::Wildcard(_) => {
                sides.iter().enumerate().map(|(i, s)| (i, (0..s.spec.schema.columns.len()).collect())).collect()
            }
            SelectItem::QualifiedWildcard(SelectItemQualifiedWildcardKind::ObjectName(name), _) => {
                let q = name.to_string().to_ascii_lowercase().trim_matches('"').to_owned();
                match sides.iter().enumerate().find_map(|(i, s)| s.columns_of(&q).map(|c| (i, c))) {
                    Some(found) => vec![found],
                    None => return Err(SqlError::at_node(item, format!("unknown table `{name}` in {name}.*"))),
                }
            }
            other => {
                out.push(other.clone());
                continue;
            }
        };
        let every = chosen.len() == 2;
        for (i, columns) in &chosen {
            let s = &sides[*i];
            for &c in columns {
                let bare = s.bare_name(c);
                let shared = every && using.contains(&bare.to_ascii_lowercase());
                if shared && *i == 1 {
                    continue;
                }
                let expr = match (shared, sides[0].column(bare), sides[1].column(bare)) {
                    // The USING column once: either side's value, as PostgreSQL.
                    (true, Some(lc), Some(rc)) => {
                        let (l, r) = (sides[0].user_reference(lc, None), sides[1].user_reference(rc, None));
                        match kind {
                            JoinKind::Inner | JoinKind::Left => l,
                            JoinKind::Right => r,
                            JoinKind::Full => Expr::Function(coalesce(l, r)),
                        }
                    }
                    _ => s.user_reference(c, None),
                };
                let name = if !shared && every && shared_name(bare) { s.written(c) } else { bare.to_owned() };
                out.push(SelectItem::ExprWithAlias { expr, alias: Ident::with_quote('"', name) });
            }
        }
    }
    Ok(out)
}

fn coalesce(a: Expr, b: Expr) -> sqlparser::ast::Function {
    use sqlparser::ast::{Function, FunctionArg, FunctionArgExpr, FunctionArgumentList, FunctionArguments, ObjectName};
    Function {
        name: ObjectName::from(vec![Ident::new("COALESCE")]),
        uses_odbc_syntax: false,
        parameters: FunctionArguments::None,
        args: FunctionArguments::List(FunctionArgumentList {
            duplicate_treatment: None,
            args: vec![FunctionArg::Unnamed(FunctionArgExpr::Expr(a)), FunctionArg::Unnamed(FunctionArgExpr::Expr(b))],
            clauses: Vec::new(),
        }),
        filter: None,
        null_treatment: None,
        over: None,
        within_group: Vec::new(),
    }
}

/// The output name of an unaliased column reference: the column's own.
fn column_name(e: &Expr) -> Option<Ident> {
    match e {
        Expr::Identifier(id) => Some(id.clone()),
        Expr::CompoundIdentifier(ids) => ids.last().cloned(),
        _ => None,
    }
}

/// The joined layout as a source the outer query is planned over.
fn joined_spec(sides: &[Side<'_>; 2], table: bool) -> SourceSpec {
    let mut columns = Vec::new();
    for s in sides {
        for (c, column) in s.spec.schema.columns.iter().enumerate() {
            columns.push(ColumnSpec::field(s.joined_name(c), column.type_, false));
        }
    }
    columns.push(ColumnSpec::field(RIGHT, ColumnType::Boolean, false));
    columns.push(ColumnSpec::field(TIME, ColumnType::Timestamp, false));
    if table {
        columns.push(ColumnSpec::field(DELETED, ColumnType::Boolean, false));
    }
    SourceSpec {
        schema: SchemaSpec { columns, registry: None },
        event_time: Some(EventTimeSpec { column: TIME.into(), watermark_delay_millis: 0 }),
        ..SourceSpec::table(JOINED, &[])
    }
}

fn quote(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

fn sql_type(t: ColumnType) -> &'static str {
    match t {
        ColumnType::Bigint => "BIGINT",
        ColumnType::Double => "DOUBLE",
        ColumnType::String => "VARCHAR",
        ColumnType::Boolean => "BOOLEAN",
        ColumnType::Timestamp => "TIMESTAMP",
    }
}

#[cfg(test)]
mod tests {
    use sluice_crds::{ColumnSpec, ColumnType, EventTimeSpec, SourceSpec, TableSpec};
    use sluice_plan::{OperatorPlan, Partitioning, StageOutput, TableVersion};

    use crate::plan_dataflow;

    fn sources() -> Vec<SourceSpec> {
        let time = Some(EventTimeSpec { column: "ts".into(), watermark_delay_millis: 0 });
        vec![
            SourceSpec {
                event_time: time.clone(),
                ..SourceSpec::table(
                    "orders",
                    &[
                        ("id", ColumnType::Bigint, true),
                        ("cid", ColumnType::Bigint, false),
                        ("ts", ColumnType::Timestamp, true),
                    ],
                )
            },
            SourceSpec {
                event_time: time,
                table: Some(TableSpec { primary_key: vec!["id".into()] }),
                ..SourceSpec::table(
                    "customers",
                    &[
                        ("id", ColumnType::Bigint, true),
                        ("name", ColumnType::String, true),
                        ("ts", ColumnType::Timestamp, true),
                    ],
                )
            },
        ]
    }

    /// Nexmark q7's shape: a stream joined with a windowed aggregate of
    /// itself. Both plans read `orders` (the runtime reads it once for
    /// both); WHERE's bound between the stream's time and the window's end
    /// (its `window_end` column) becomes the join's time bound, so the
    /// join lets rows go; a one-sided conjunct still filters its side.
    #[test]
    fn a_stream_joins_a_windowed_aggregate_of_itself_bounded_by_where() {
        let sql = "SELECT o.id, o.cid FROM orders o JOIN (SELECT MAX(cid) AS top, window_end AS wend FROM orders \
                   GROUP BY TUMBLE(ts, INTERVAL '10' SECOND)) m ON o.cid = m.top \
                   WHERE o.ts BETWEEN m.wend - INTERVAL '10' SECOND AND m.wend AND o.id > 0";
        let flow = plan_dataflow(sql, &sources(), 2).unwrap();
        let reads: Vec<&str> = flow.source_plans().map(|p| p.source.name.as_str()).collect();
        assert_eq!(reads, ["orders", "orders"]);
        let OperatorPlan::Join(join) = &flow.stages.last().unwrap().plan.operator else { panic!("{flow:?}") };
        // right − left: the window's end is 0 to 10 s after the order.
        assert_eq!((join.lower, join.upper), (0, 10_000), "{join:?}");
        assert!(join.residual.is_none(), "the bound is no residual: {join:?}");
        let last = &flow.stages.last().unwrap().plan;
        assert!(last.filter.is_none(), "WHERE is all taken: {last:?}");
        let stream = flow.branches.iter().find(|b| matches!(b.plan.operator, OperatorPlan::Stateless)).unwrap();
        assert!(stream.plan.filter.is_some(), "`o.id > 0` filters the stream side before the exchange");
        // A self-join of two streams plans too, each side under its alias.
        let flow = plan_dataflow(
            "SELECT a.id, b.id AS other FROM orders a JOIN orders b ON a.cid = b.cid \
             WHERE b.ts BETWEEN a.ts AND a.ts + INTERVAL '1' MINUTE",
            &sources(),
            2,
        )
        .unwrap();
        let OperatorPlan::Join(join) = &flow.stages[1].plan.operator else { panic!("{flow:?}") };
        assert_eq!((join.lower, join.upper), (0, 60_000));
        // An outer join keeps WHERE after it: the NULL-extended rows must
        // meet it. Without a bound in ON it is refused.
        let err = plan_dataflow(
            "SELECT a.id FROM orders a LEFT JOIN orders b ON a.cid = b.cid \
             WHERE b.ts BETWEEN a.ts AND a.ts + INTERVAL '1' MINUTE",
            &sources(),
            2,
        )
        .unwrap_err();
        assert!(err.message.contains("needs a time bound"), "{err}");
    }

    /// Nexmark q9's bound, `b.ts BETWEEN a.ts AND a.expires`: the low end
    /// bounds `right − left`, the high end is a left column (kept as a
    /// residual) by which left rows are let go; an outer join with it, or
    /// an upper end on a right column, is not one.
    #[test]
    fn a_bound_by_a_left_column_lets_left_rows_go_by_it() {
        let mut sources = sources();
        sources[1].table = None;
        sources[0].schema.columns.push(ColumnSpec::field("until", ColumnType::Timestamp, false));
        let sql = "SELECT o.id FROM orders o JOIN customers c ON o.cid = c.id AND c.ts BETWEEN o.ts AND o.until";
        let flow = plan_dataflow(sql, &sources, 2).unwrap();
        let OperatorPlan::Join(join) = &flow.stages[1].plan.operator else { panic!("{flow:?}") };
        assert_eq!((join.lower, join.upper, join.until), (0, i64::MAX, Some(3)), "{join:?}");
        assert!(join.residual.is_some(), "the column comparison stays a residual");
        let flow = plan_dataflow(&sql.replace("BETWEEN o.ts AND o.until", "<= o.until AND c.ts >= o.ts"), &sources, 2);
        let OperatorPlan::Join(join) = &flow.unwrap().stages[1].plan.operator else { panic!() };
        assert_eq!((join.lower, join.until), (0, Some(3)));
        let err = plan_dataflow(&sql.replace(" JOIN ", " LEFT JOIN "), &sources, 2).unwrap_err();
        assert!(err.message.contains("needs both ends"), "{err}");
        let flow = plan_dataflow(
            &sql.replace("BETWEEN o.ts AND o.until", "BETWEEN o.ts AND o.ts + INTERVAL '1' SECOND"),
            &sources,
            2,
        );
        let OperatorPlan::Join(join) = &flow.unwrap().stages[1].plan.operator else { panic!() };
        assert_eq!((join.upper, join.until), (1_000, None));
    }

    /// Without a time bound an INNER join of two streams is a regular
    /// join, whose rows have no event time to join again by; an outer one,
    /// or a bound with one end, is refused with what to add.
    #[test]
    fn an_inner_join_without_a_time_bound_is_a_regular_join_and_an_outer_one_is_refused() {
        let mut sources = sources();
        sources[1].table = None;
        let flow =
            plan_dataflow("SELECT o.id, c.name FROM orders o JOIN customers c ON o.cid = c.id", &sources, 2).unwrap();
        let OperatorPlan::Join(join) = &flow.stages[1].plan.operator else { panic!("{flow:?}") };
        assert!(join.unbounded(), "{join:?}");
        for (sql, message) in [
            ("SELECT o.id FROM orders o LEFT JOIN customers c ON o.cid = c.id", "a LEFT join needs a time bound"),
            ("SELECT o.id FROM orders o FULL JOIN customers c ON o.cid = c.id", "a FULL join needs a time bound"),
            ("SELECT o.id FROM orders o JOIN customers c ON o.cid = c.id AND c.ts >= o.ts", "needs both ends"),
        ] {
            let err = plan_dataflow(sql, &sources, 2).unwrap_err();
            assert!(err.message.contains(message), "{sql}: {err}");
        }
        sources.push(SourceSpec {
            event_time: Some(EventTimeSpec { column: "ts".into(), watermark_delay_millis: 0 }),
            ..SourceSpec::table(
                "payments",
                &[("order_id", ColumnType::Bigint, true), ("ts", ColumnType::Timestamp, true)],
            )
        });
        // A regular join's rows have no event time, so `o.ts` bounds nothing
        // after it: the next join is a regular one too, `BETWEEN` its residual.
        let flow = plan_dataflow(
            "SELECT o.id FROM orders o JOIN customers c ON o.cid = c.id \
             JOIN payments p ON o.id = p.order_id AND p.ts BETWEEN o.ts AND o.ts",
            &sources,
            2,
        )
        .unwrap();
        let OperatorPlan::Join(join) = &flow.stages[2].plan.operator else { panic!("{flow:?}") };
        assert!(join.unbounded() && join.residual.is_some(), "{join:?}");
        assert_eq!(
            flow.stages[1].plan.outputs.last().map(|o| &o.expr),
            Some(&sluice_plan::PhysExpr::Literal {
                value: sluice_plan::Scalar::Null,
                data_type: sluice_plan::DataType::Timestamp
            }),
            "the first join's rows cross with no time"
        );
    }

    #[test]
    fn a_join_with_a_table_is_a_table_join_as_of_event_time_only_when_asked() {
        for (sql, version) in [
            ("SELECT o.id, c.name FROM orders o JOIN customers c ON o.cid = c.id", TableVersion::Latest),
            (
                "SELECT o.id, c.name FROM orders o JOIN customers FOR SYSTEM_TIME AS OF o.ts AS c ON o.cid = c.id",
                TableVersion::AsOfEventTime,
            ),
        ] {
            let flow = plan_dataflow(sql, &sources(), 2).unwrap();
            let OperatorPlan::TableJoin(join) = &flow.stages[1].plan.operator else { panic!("{flow:?}") };
            assert_eq!(join.version, version, "{sql}");
            let table = &flow.branches[0].plan;
            assert!(table.source.schema.index_of("__deleted").is_some(), "the table's side reads the deletion marker");
            assert!(
                table.source.required.iter().filter(|r| **r).count() == 2,
                "only the key and the event time are required of a table row"
            );
        }
    }

    #[test]
    fn a_join_of_a_join_is_a_stage_per_join_with_each_right_side_beside_the_stage_before() {
        let mut sources = sources();
        sources.push(SourceSpec {
            event_time: Some(EventTimeSpec { column: "ts".into(), watermark_delay_millis: 0 }),
            ..SourceSpec::table(
                "payments",
                &[
                    ("order_id", ColumnType::Bigint, true),
                    ("name", ColumnType::String, false),
                    ("ts", ColumnType::Timestamp, true),
                ],
            )
        });
        let flow = plan_dataflow(
            "SELECT o.id, c.name AS customer, p.name AS payer FROM orders o \
             JOIN customers c ON o.cid = c.id \
             LEFT JOIN payments p ON o.id = p.order_id AND p.ts BETWEEN o.ts AND o.ts + INTERVAL '1' MINUTE",
            &sources,
            2,
        )
        .unwrap();
        let [orders, first, second] = flow.stages.as_slice() else { panic!("a stage per join: {flow:?}") };
        assert_eq!(orders.plan.source.name, "orders");
        let beside: Vec<(usize, &str)> =
            flow.branches.iter().map(|b| (b.beside, b.plan.source.name.as_str())).collect();
        assert_eq!(beside, [(0, "customers"), (1, "payments")]);
        assert!(matches!(first.plan.operator, OperatorPlan::TableJoin(_)));
        assert_eq!(first.output, StageOutput::Exchange);
        assert_eq!(first.plan.keys.len(), 1, "the first join's rows are keyed by the second join's key");
        let layout = |p: &sluice_plan::Plan| p.outputs.iter().map(|o| o.name.clone()).collect::<Vec<_>>();
        assert_eq!(
            layout(&first.plan),
            layout(&flow.branches[1].plan),
            "both sides of the second join write one layout"
        );
        let OperatorPlan::Join(join) = &second.plan.operator else {
            panic!("an interval join: {:?}", second.plan.operator)
        };
        assert_eq!((join.lower, join.upper), (0, 60_000));
        let names: Vec<&str> = second.plan.outputs.iter().map(|o| o.name.as_str()).collect();
        assert_eq!(names, ["id", "customer", "payer"]);
        // A bound on a column that is not the rows' event time (the table's
        // `c.ts`; the rows' is `o.ts`) bounds nothing the join can let go
        // by: a regular join, with the comparison as its residual (Flink
        // plans it so too).
        let flow = plan_dataflow(
            "SELECT o.id FROM orders o JOIN customers c ON o.cid = c.id \
             JOIN payments p ON o.id = p.order_id AND p.ts BETWEEN c.ts AND c.ts",
            &sources,
            2,
        )
        .unwrap();
        let OperatorPlan::Join(join) = &flow.stages[2].plan.operator else { panic!("{flow:?}") };
        assert!(join.unbounded() && join.residual.is_some(), "{join:?}");
        for (sql, message) in [
            (
                "SELECT name FROM orders o JOIN customers c ON o.cid = c.id \
              JOIN payments p ON o.id = p.order_id AND p.ts BETWEEN o.ts AND o.ts",
                "write c.name or p.name",
            ),
            (
                "SELECT o.id FROM orders o JOIN customers c ON o.cid = c.id \
              JOIN payments c ON o.id = c.order_id AND c.ts BETWEEN o.ts AND o.ts",
                "two sides are named `c`",
            ),
        ] {
            let err = plan_dataflow(sql, &sources, 2).unwrap_err();
            assert!(err.message.contains(message), "{sql}: {err}");
        }
    }

    #[test]
    fn an_aggregate_over_a_join_is_a_third_stage_keyed_by_its_group() {
        let flow = plan_dataflow(
            "SELECT c.name, COUNT(*) AS n FROM orders o JOIN customers c ON o.cid = c.id \
             WHERE o.id > 0 AND o.id <> c.id GROUP BY c.name",
            &sources(),
            2,
        )
        .unwrap();
        let [orders, join, aggregate] = flow.stages.as_slice() else { panic!("three stages: {flow:?}") };
        assert!(orders.plan.filter.is_some(), "a conjunct on one stream filters it before the join");
        assert!(flow.branches[0].plan.filter.is_none(), "the table's updates are never filtered");
        assert!(matches!(join.plan.operator, OperatorPlan::TableJoin(_)));
        assert!(join.plan.having.is_some(), "WHERE filters the joined rows before they cross");
        let forwarded: Vec<&str> = join.plan.outputs.iter().map(|o| o.name.as_str()).collect();
        assert_eq!(forwarded, ["c.name"], "only what the aggregate reads crosses");
        assert_eq!(join.plan.keys.len(), 1, "keyed by the group");
        assert!(matches!(aggregate.plan.operator, OperatorPlan::Aggregate(_)));
        assert!(aggregate.plan.filter.is_none());
        let err = plan_dataflow(
            "SELECT COUNT(*) AS n FROM orders o JOIN customers c ON o.cid = c.id \
             WINDOW TUMBLING (o.ts, INTERVAL '1' MINUTE)",
            &sources(),
            2,
        )
        .unwrap_err();
        assert!(err.message.contains("time window over a join"), "{err}");
    }

    /// Nexmark q3's shape: each side's WHERE conjunct filters its source
    /// before the exchange, and only the columns the query names (with
    /// the event time) cross and are kept; the rest of WHERE stays with
    /// the join. An outer join keeps WHERE after it; `*` carries every column.
    #[test]
    fn where_on_one_stream_filters_it_before_the_join_and_only_named_columns_cross() {
        let nexmark = vec![
            SourceSpec::table(
                "auction",
                &[
                    ("id", ColumnType::Bigint, true),
                    ("seller", ColumnType::Bigint, true),
                    ("category", ColumnType::Bigint, true),
                    ("description", ColumnType::String, false),
                ],
            ),
            SourceSpec::table(
                "person",
                &[
                    ("id", ColumnType::Bigint, true),
                    ("name", ColumnType::String, false),
                    ("state", ColumnType::String, false),
                    ("extra", ColumnType::String, false),
                ],
            ),
        ];
        let sql = "SELECT P.name, A.id FROM auction A JOIN person P ON A.seller = P.id \
                   WHERE A.category = 10 AND (P.state = 'OR' OR P.state = 'CA') AND A.id <> P.id";
        let flow = plan_dataflow(sql, &nexmark, 2).unwrap();
        let [auctions, join] = flow.stages.as_slice() else { panic!("two stages: {flow:?}") };
        let people = &flow.branches[0].plan;
        assert!(auctions.plan.filter.is_some() && people.filter.is_some(), "{flow:?}");
        let layout: Vec<&str> = join.plan.source.schema.fields.iter().map(|f| f.name.as_str()).collect();
        assert_eq!(layout, ["A.id", "A.seller", "A.category", "P.id", "P.name", "P.state", "__right", "__time"]);
        // `A.id <> P.id` reads both sides: in an INNER join it is ON's.
        let OperatorPlan::Join(j) = &join.plan.operator else { panic!("{join:?}") };
        assert!(join.plan.having.is_none() && j.residual.is_some(), "A.id <> P.id is the join's condition");
        assert_eq!(auctions.plan.source.schema.fields.len(), 4, "records are still checked against the whole schema");
        let mut streams = sources();
        streams[1].table = None;
        let outer = plan_dataflow(
            "SELECT o.id FROM orders o LEFT JOIN customers c ON o.cid = c.id AND c.ts BETWEEN o.ts AND o.ts \
             WHERE o.id > 0 AND c.name = 'x'",
            &streams,
            2,
        )
        .unwrap();
        assert!(outer.stages[0].plan.filter.is_none() && outer.branches[0].plan.filter.is_none(), "{outer:?}");
        assert!(outer.stages[1].plan.having.is_some());
        let err = plan_dataflow("SELECT P.nmae FROM auction A JOIN person P ON A.seller = P.id", &nexmark, 2);
        assert!(err.unwrap_err().message.contains("did you mean `name`?"), "suggested from every declared column");
        let flow = plan_dataflow("SELECT A.*, P.name FROM auction A JOIN person P ON A.seller = P.id", &nexmark, 2);
        let layout = flow.unwrap().stages[1].plan.source.schema.fields.len();
        assert_eq!(layout, 4 + 2 + 2, "every column of A, the two of P it names, and the layout's two");
        let flow = plan_dataflow("SELECT * FROM auction A JOIN person P ON A.seller = P.id", &nexmark, 2).unwrap();
        assert_eq!(flow.stages[1].plan.source.schema.fields.len(), 10, "every column, and the layout's two");
    }

    fn people_and_auctions() -> Vec<SourceSpec> {
        let time = Some(EventTimeSpec { column: "ts".into(), watermark_delay_millis: 0 });
        vec![
            SourceSpec {
                event_time: time.clone(),
                partition_key: vec!["id".into()],
                ..SourceSpec::table("person", &[("id", ColumnType::Bigint, true), ("ts", ColumnType::Timestamp, true)])
            },
            SourceSpec {
                event_time: time,
                partition_key: vec!["seller".into()],
                ..SourceSpec::table(
                    "auction",
                    &[("seller", ColumnType::Bigint, true), ("ts", ColumnType::Timestamp, true)],
                )
            },
        ]
    }

    const Q8: &str = "SELECT p.id, p.s FROM (SELECT id, window_start AS s FROM person GROUP BY id, \
        TUMBLE(ts, INTERVAL '10' SECOND)) AS p JOIN (SELECT seller, window_start AS s FROM auction GROUP BY seller, \
        TUMBLE(ts, INTERVAL '10' SECOND)) AS a ON p.id = a.seller";

    #[test]
    fn a_join_of_windowed_aggregates_aggregates_each_side_on_its_partitions_then_joins_by_window() {
        let flow = plan_dataflow(&format!("{Q8} AND p.s = a.s"), &people_and_auctions(), 4).unwrap();
        let [side, join] = flow.stages.as_slice() else { panic!("two stages: {flow:?}") };
        assert!(
            side.plan.is_windowed() && flow.branches[0].plan.is_windowed(),
            "each side aggregates before the exchange"
        );
        assert_eq!(side.plan.keys.len(), 2, "keyed by the id and the window");
        let OperatorPlan::Join(j) = &join.plan.operator else { panic!("{join:?}") };
        assert_eq!((j.lower, j.upper), (0, 0), "rows of one window have one time, its end");
        let err = plan_dataflow(Q8, &people_and_auctions(), 4).unwrap_err();
        assert!(err.message.contains("equates their windows"), "{err}");
        // Auctions keyed otherwise than by seller (Nexmark's are keyed by
        // id): that side crosses an exchange keyed by seller first, and,
        // being the chain's, goes first; people write beside its aggregate.
        let mut misaligned = people_and_auctions();
        misaligned[1].partition_key = vec!["ts".into()];
        let flow = plan_dataflow(&format!("{Q8} AND p.s = a.s"), &misaligned, 4).unwrap();
        let [rekey, sellers, join] = flow.stages.as_slice() else { panic!("three stages: {flow:?}") };
        assert_eq!(rekey.plan.source.name, "auction");
        assert!(matches!(rekey.plan.operator, OperatorPlan::Stateless));
        assert_eq!(rekey.plan.keys.len(), 1, "keyed by seller");
        assert!(sellers.plan.is_windowed() && sellers.plan.partitioning == Partitioning::ByExchange);
        assert_eq!(sellers.plan.keys.len(), 2, "the join's keys: seller and window");
        assert!(rekey.output == StageOutput::Exchange && sellers.output == StageOutput::Exchange);
        let [people] = flow.branches.as_slice() else { panic!("one branch: {flow:?}") };
        assert_eq!((people.plan.source.name.as_str(), people.beside), ("person", 1));
        assert!(matches!(join.plan.operator, OperatorPlan::Join(_)));
        // With one partition, nothing is re-keyed.
        assert_eq!(plan_dataflow(&format!("{Q8} AND p.s = a.s"), &misaligned, 1).unwrap().stages.len(), 2);
        misaligned[0].partition_key = vec!["ts".into()];
        let err = plan_dataflow(&format!("{Q8} AND p.s = a.s"), &misaligned, 4).unwrap_err();
        assert!(err.message.contains("both sides of this join aggregate by a key"), "{err}");
        let err = plan_dataflow(
            "SELECT p.id FROM (SELECT id, COUNT(*) AS n FROM person GROUP BY id) AS p JOIN \
             (SELECT seller, COUNT(*) AS n FROM auction GROUP BY seller) AS a ON p.id = a.seller",
            &people_and_auctions(),
            4,
        )
        .unwrap_err();
        assert!(err.message.contains("per time window"), "{err}");
    }

    #[test]
    fn for_system_time_as_of_outside_a_table_join_is_refused_where_it_is() {
        let err = plan_dataflow("SELECT id FROM orders FOR SYSTEM_TIME AS OF ts", &sources(), 1).unwrap_err();
        assert_eq!((err.line, err.column), (1, 23), "{err}");
        assert!(err.message.contains("applies to a table joined to a stream"), "{err}");
    }
}
