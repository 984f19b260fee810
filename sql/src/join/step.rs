//! One join of a query as stages: each side's stage projects its rows
//! into the joined layout keyed by its side of the key, and the join's
//! stage runs the join operator over that layout; a join's rows can be
//! the left side of the next join.

use std::borrow::Cow;

use sluice_crds::{ColumnSpec, ColumnType, EventTimeSpec, SchemaSpec, SourceSpec};
use sluice_plan::{
    DataType, JoinKind, JoinPlan, OperatorPlan, Partitioning, Plan, SqlError, TableJoinPlan, TableVersion,
};
use sqlparser::ast::{BinaryOperator, Expr, Ident, Join, JoinConstraint, JoinOperator, SetExpr, TableFactor};

use crate::diagnostic::Located;
use crate::planner::WINDOW_END;
use crate::planner::{compile_over, plan_parsed};
use crate::rewrite::{AsOf, ParsedQuery, parse};

use super::conditions::{
    Interval, Layout, TableKeys, classify, interval_bounds, table_keys, time_or_placeholder, using, window_keys,
};
use super::names::{DELETED, JOINED, RIGHT, TIME};
use super::resolve::Resolver;
use super::side::{Chain, Side, find_declared, table_source};

/// One join of a query: its sides, and how they meet.
pub(super) struct JoinStep<'a> {
    pub(super) sides: [Side<'a>; 2],
    pub(super) kind: JoinKind,
    /// The right side is a table.
    table: bool,
    layout: Layout,
    pub(super) constraint: JoinConstraint,
}

impl<'a> JoinStep<'a> {
    /// Checks the join of `left` and `right` and sorts out its ON.
    pub(super) fn new(
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
    pub(super) fn side_plan(
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
                    items.push(format!("CAST(NULL AS {}) AS {name}", sql_type(&column.type_)));
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
    pub(super) fn check_key_types(&self, left: &Plan, right: &Plan) -> Result<(), SqlError> {
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
    pub(super) fn joined_spec(&self) -> SourceSpec {
        joined_spec(&self.sides, self.table)
    }

    /// Makes `plan` — planned over [`Self::joined_spec`] as a projection —
    /// the join's stage: the join operator, then the plan's projection of
    /// the joined rows; its WHERE filters joined rows (for outer joins,
    /// after NULL-extension).
    pub(super) fn make_join_stage(&self, plan: &mut Plan) -> Result<(), SqlError> {
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
    pub(super) fn rows_as_side(&self, at: &TableFactor) -> Result<Side<'a>, SqlError> {
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
pub(super) fn rows_spec(sides: &[Side<'_>; 2]) -> SourceSpec {
    let columns = sides
        .iter()
        .flat_map(|s| {
            s.spec
                .schema
                .columns
                .iter()
                .enumerate()
                .map(|(c, column)| ColumnSpec::field(s.joined_name(c), column.type_.clone(), false))
        })
        .collect();
    SourceSpec { schema: SchemaSpec { columns, registry: None }, ..SourceSpec::table(JOINED, &[]) }
}

/// The joined layout as a source the outer query is planned over.
fn joined_spec(sides: &[Side<'_>; 2], table: bool) -> SourceSpec {
    let mut columns = Vec::new();
    for s in sides {
        for (c, column) in s.spec.schema.columns.iter().enumerate() {
            columns.push(ColumnSpec::field(s.joined_name(c), column.type_.clone(), false));
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

fn sql_type(t: &ColumnType) -> Cow<'static, str> {
    Cow::Borrowed(match t {
        ColumnType::Bigint => "BIGINT",
        ColumnType::Double => "DOUBLE",
        ColumnType::String => "VARCHAR",
        ColumnType::Boolean => "BOOLEAN",
        ColumnType::Timestamp => "TIMESTAMP",
        ColumnType::Decimal { precision, scale } => return format!("DECIMAL({precision}, {scale})").into(),
        ColumnType::Array(e) => return format!("ARRAY<{}>", sql_type(e)).into(),
        ColumnType::Map(k, v) => return format!("MAP({}, {})", sql_type(k), sql_type(v)).into(),
        ColumnType::Row(fields) => {
            let fields: Vec<String> = fields.iter().map(|(n, t)| format!("{} {}", quote(n), sql_type(t))).collect();
            return format!("STRUCT<{}>", fields.join(", ")).into();
        }
    })
}
