//! A join of a windowed aggregate with an aggregate over that aggregate's
//! own rows — Nexmark q5, the auctions with the most bids per window:
//!
//! ```sql
//! SELECT AuctionBids.auction, AuctionBids.num
//! FROM (SELECT auction, COUNT(*) AS num, window_start AS starttime, window_end AS endtime
//!       FROM bid GROUP BY auction, HOP(dateTime, INTERVAL '2' SECOND, INTERVAL '10' SECOND)) AuctionBids
//! JOIN (SELECT MAX(CountBids.num) AS maxn, CountBids.starttime, CountBids.endtime
//!       FROM (SELECT COUNT(*) AS num, window_start AS starttime, window_end AS endtime
//!             FROM bid GROUP BY auction, HOP(dateTime, …)) CountBids
//!       GROUP BY CountBids.starttime, CountBids.endtime) MaxBids
//! ON AuctionBids.starttime = MaxBids.starttime AND AuctionBids.endtime = MaxBids.endtime
//!    AND AuctionBids.num >= MaxBids.maxn
//! ```
//!
//! The inner subquery (`CountBids`) is the other side's (`AuctionBids`)
//! with fewer columns, so the counts are computed once, as Flink's planner
//! reuses a common sub-plan: the inner aggregate's stages end in an
//! exchange keyed by the outer aggregate's GROUP BY; the outer aggregate is
//! the stage reading it, and the other side's rows are a projection of the
//! same exchange beside it (`sluice_plan::Branch::reads_exchange`). Both
//! write the join's exchange.
//!
//! The outer aggregate groups by the inner one's window, so its rows are
//! final too — the window is carried through (Flink's window attributes).
//! The inner rows carry a hidden time, their window's end less 1 ms
//! ([`ROW_TIME`]); the outer aggregate adds a tumbling window of the inner
//! window's slide over it. Each inner window's rows fall in one such
//! window, which ends where the inner window ends (for a hopping window
//! it starts later: one slide before the end), so the outer aggregate
//! emits each group once, when the watermark passes that end, as the inner
//! aggregate did. Its `window_end` then stands for the inner window's end
//! column, which lets the join match the sides by window as a join of
//! windowed subqueries does; the inner window's start is read only as a
//! group column.

use sluice_crds::{ColumnSpec, EventTimeSpec, SchemaSpec, SourceSpec};
use sluice_plan::{Dataflow, EmitMode, OperatorPlan, Partitioning, SqlError, StageOutput, TimeWindow};
use std::ops::ControlFlow;

use sqlparser::ast::{Expr, GroupByExpr, Ident, Query, SelectItem, SetExpr, TableFactor, visit_expressions};

use crate::cut::cut;
use crate::diagnostic::Located;
use crate::planner::{WINDOW_END, WINDOW_START, plan_parsed};
use crate::rewrite::{ParsedQuery, parse};
use crate::views::{column_type, table_named};

/// The inner rows' hidden column: their window's end less 1 ms, the event
/// time the outer aggregate's window reads.
pub const ROW_TIME: &str = "__wtime";

/// The plan of a join side that aggregates the other side's rows.
pub struct Cascade {
    /// Which side aggregates (0: left, 1: right).
    pub over: usize,
    /// The other side's aggregate, with [`ROW_TIME`]: its stages, the last
    /// writing an exchange keyed by the outer aggregate's groups.
    pub inner: Dataflow,
    /// The inner rows as a source, named as the outer query's FROM names them.
    pub rows: SourceSpec,
    /// The aggregating side's query over `rows`, windowed by the inner window.
    pub outer: Query,
}

/// A join of two subqueries where one aggregates a subquery that computes
/// the other's rows (with some of its columns).
pub fn cascade(
    relations: [&TableFactor; 2],
    sources: &[SourceSpec],
    partitions: i32,
) -> Result<Option<Cascade>, SqlError> {
    for over in [1, 0] {
        let (TableFactor::Derived { subquery: a, .. }, TableFactor::Derived { subquery: b, .. }) =
            (relations[1 - over], relations[over])
        else {
            continue;
        };
        let Some((d, d_alias)) = derived_from(b) else { continue };
        if same_rows(a, d) {
            return plan(over, a, b, d, d_alias, sources, partitions).map(Some);
        }
    }
    Ok(None)
}

/// `SELECT … FROM (<query>) alias …`: the query and its alias.
fn derived_from(q: &Query) -> Option<(&Query, &Ident)> {
    let SetExpr::Select(s) = q.body.as_ref() else { return None };
    let [from] = s.from.as_slice() else { return None };
    if !from.joins.is_empty() {
        return None;
    }
    let TableFactor::Derived { lateral: false, subquery, alias: Some(alias), .. } = &from.relation else {
        return None;
    };
    Some((subquery, &alias.name))
}

/// Whether `d` is `a` with some of its SELECT items: the same rows.
fn same_rows(a: &Query, d: &Query) -> bool {
    let (SetExpr::Select(sa), SetExpr::Select(sd)) = (a.body.as_ref(), d.body.as_ref()) else { return false };
    if !sd.projection.iter().all(|item| sa.projection.contains(item)) {
        return false;
    }
    let without_items = |q: &Query| {
        let mut q = q.clone();
        if let SetExpr::Select(s) = q.body.as_mut() {
            s.projection.clear();
        }
        q
    };
    without_items(a) == without_items(d)
}

/// An item's output name, and its expression.
fn named(item: &SelectItem) -> Option<(&str, &Expr)> {
    match item {
        SelectItem::ExprWithAlias { expr, alias } => Some((alias.value.as_str(), expr)),
        SelectItem::UnnamedExpr(expr @ Expr::Identifier(id)) => Some((id.value.as_str(), expr)),
        SelectItem::UnnamedExpr(expr @ Expr::CompoundIdentifier(ids)) => ids.last().map(|id| (id.value.as_str(), expr)),
        _ => None,
    }
}

fn is_ident(e: &Expr, name: &str) -> bool {
    matches!(e, Expr::Identifier(id) if id.value.eq_ignore_ascii_case(name))
}

fn plan(
    over: usize,
    a: &Query,
    b: &Query,
    d: &Query,
    d_alias: &Ident,
    sources: &[SourceSpec],
    partitions: i32,
) -> Result<Cascade, SqlError> {
    // The inner aggregate, its rows timed by their window.
    let mut inner = a.clone();
    let SetExpr::Select(select) = inner.body.as_mut() else {
        return Err(SqlError::unpositioned("internal: a joined subquery that is not a SELECT"));
    };
    let time = parse(&format!("SELECT {WINDOW_END} - INTERVAL '1' MILLISECOND AS {ROW_TIME}"))?;
    select.projection.extend(time.query.body.as_select().map(|s| s.projection.clone()).unwrap_or_default());
    let mut parsed = ParsedQuery::of(inner);
    let inner_plan = plan_parsed(&mut parsed, sources)?;
    let window = match &inner_plan.operator {
        // A zone's windows are not all `size_ms` long: the slide below
        // would not end one window.
        OperatorPlan::Aggregate(agg) if agg.window_zone.is_some() => {
            return Err(SqlError::at_node(
                d,
                "an aggregate over a subquery's rows, joined with them, needs the subquery's windows in UTC: drop \
                 AT TIME ZONE from its TUMBLE",
            ));
        }
        OperatorPlan::Aggregate(agg) if inner_plan.emit == EmitMode::Final => agg.window,
        _ => None,
    };
    let slide = match window {
        Some(TimeWindow::Tumbling { size_ms }) => size_ms,
        Some(TimeWindow::Hopping { size_ms, advance_ms }) if size_ms % advance_ms == 0 => advance_ms,
        Some(TimeWindow::Hopping { .. }) => {
            return Err(SqlError::at_node(
                d,
                "an aggregate over a hopping window's rows needs the window's size to be a multiple of its slide, \
                 so that each slide ends one window",
            ));
        }
        _ => {
            return Err(SqlError::at_node(
                d,
                "an aggregate over a subquery's rows, joined with them, needs the subquery to aggregate per TUMBLE \
                 or HOP window with EMIT FINAL",
            ));
        }
    };
    let columns = inner_plan
        .outputs
        .iter()
        .map(|o| ColumnSpec::field(o.name.clone(), column_type(o.expr.data_type()), false))
        .collect();
    let rows = SourceSpec {
        schema: SchemaSpec { columns, registry: None },
        event_time: Some(EventTimeSpec { column: ROW_TIME.into(), watermark_delay_millis: 0 }),
        ..SourceSpec::table(&d_alias.value, &[])
    };

    // The outer aggregate over them, windowed by their window.
    let SetExpr::Select(inner_select) = d.body.as_ref() else {
        return Err(SqlError::unpositioned("internal: a subquery that is not a SELECT"));
    };
    let d_columns: Vec<(&str, &Expr)> = inner_select.projection.iter().filter_map(named).collect();
    // The inner column `e` names (bare, or qualified by the inner alias)
    // if it is the inner window's `window_end` (`end`) or `window_start`.
    let window_column = |e: &Expr, end: bool| -> Option<String> {
        let name = match e {
            Expr::Identifier(id) => &id.value,
            Expr::CompoundIdentifier(ids) => match ids.as_slice() {
                [q, id] if q.value.eq_ignore_ascii_case(&d_alias.value) => &id.value,
                _ => return None,
            },
            _ => return None,
        };
        let bound = if end { WINDOW_END } else { WINDOW_START };
        d_columns
            .iter()
            .any(|(n, expr)| n.eq_ignore_ascii_case(name) && is_ident(expr, bound))
            .then(|| name.to_ascii_lowercase())
    };
    let mut outer = b.clone();
    let SetExpr::Select(select) = outer.body.as_mut() else {
        return Err(SqlError::unpositioned("internal: a joined subquery that is not a SELECT"));
    };
    if let Some(from) = select.from.first_mut() {
        from.relation = table_named(d_alias.clone());
    }
    let GroupByExpr::Expressions(groups, _) = &mut select.group_by else {
        return Err(SqlError::at_node(b, "GROUP BY ALL is not supported here: name the groups"));
    };
    if !groups.iter().any(|g| window_column(g, true).is_some()) {
        return Err(SqlError::at_node(
            b,
            format!(
                "this aggregate over {}'s rows is joined with them: it must group by their window's end (their \
                 window_end column), so that its rows are final when the window is",
                d_alias.value
            ),
        ));
    }
    // The window's start is read only as a group: the outer query's own
    // `window_start` would be the carried window's, which starts later
    // than the inner one when it hops.
    let grouped_starts: Vec<String> = groups.iter().filter_map(|g| window_column(g, false)).collect();
    let misread = |e: &Expr| -> ControlFlow<SqlError> {
        let last = match e {
            Expr::Identifier(id) => Some(id),
            Expr::CompoundIdentifier(ids) => ids.last(),
            _ => None,
        };
        let start_function = match e {
            Expr::Function(f) => f.name.0.last().and_then(|p| p.as_ident()).is_some_and(|id| {
                ["TUMBLE_START", "HOP_START", "SESSION_START"].iter().any(|n| id.value.eq_ignore_ascii_case(n))
            }),
            _ => false,
        };
        let wrong = match window_column(e, false) {
            Some(n) if grouped_starts.contains(&n) => None,
            Some(n) => Some(format!(
                "{n} is the window's start of {}'s rows: read it only as a GROUP BY column",
                d_alias.value
            )),
            None if start_function || last.is_some_and(|id| id.value.eq_ignore_ascii_case(WINDOW_START)) => {
                Some(format!(
                    "the window's start of {}'s rows is read by its column ({}.<its window_start column>), as a \
                     GROUP BY column",
                    d_alias.value, d_alias.value
                ))
            }
            None => None,
        };
        match wrong {
            Some(why) => ControlFlow::Break(SqlError::at_node(e, why)),
            None => ControlFlow::Continue(()),
        }
    };
    if let ControlFlow::Break(e) = visit_expressions(&select.projection, misread) {
        return Err(e);
    }
    if let ControlFlow::Break(e) = visit_expressions(&select.having, misread) {
        return Err(e);
    }
    let tumble = parse(&format!("SELECT 1 FROM t GROUP BY TUMBLE({ROW_TIME}, INTERVAL '{slide}' MILLISECOND)"))?;
    match tumble.query.body.as_select().map(|s| &s.group_by) {
        Some(GroupByExpr::Expressions(e, _)) => groups.extend(e.iter().cloned()),
        _ => return Err(SqlError::unpositioned("internal: the carried window did not parse")),
    }
    // Its window's end is the inner window's end: the join matches the
    // sides by it, as it matches two windowed subqueries.
    for item in &mut select.projection {
        match item {
            SelectItem::UnnamedExpr(e) if window_column(e, true).is_some() => {
                let alias = named(item).map(|(n, _)| Ident::new(n)).unwrap_or_else(|| Ident::new(WINDOW_END));
                *item = SelectItem::ExprWithAlias { expr: Expr::Identifier(Ident::new(WINDOW_END)), alias };
            }
            SelectItem::ExprWithAlias { expr, .. } if window_column(expr, true).is_some() => {
                *expr = Expr::Identifier(Ident::new(WINDOW_END));
            }
            _ => {}
        }
    }
    // Planned over the inner subquery's own columns first: the rows carry
    // the other side's too, which the outer query cannot name.
    let own = rows
        .schema
        .columns
        .iter()
        .filter(|c| c.name == ROW_TIME || d_columns.iter().any(|(n, _)| n.eq_ignore_ascii_case(&c.name)))
        .cloned()
        .collect();
    let visible = SourceSpec { schema: SchemaSpec { columns: own, registry: None }, ..rows.clone() };
    plan_parsed(&mut ParsedQuery::of(outer.clone()), std::slice::from_ref(&visible))?;
    let outer_plan = plan_parsed(&mut ParsedQuery::of(outer.clone()), std::slice::from_ref(&rows))?;

    // The inner rows cross to the partitions of the outer groups.
    let Partitioning::KeyedBy(by) = &outer_plan.partitioning else {
        return Err(SqlError::unpositioned("internal: an aggregate over windowed rows not keyed by its groups"));
    };
    let mut inner = cut(inner_plan, partitions)?;
    let Some(last) = inner.stages.last_mut() else {
        return Err(SqlError::unpositioned("internal: a dataflow without stages"));
    };
    let keys: Vec<_> =
        by.iter().filter_map(|c| last.plan.outputs.iter().find(|o| o.name.eq_ignore_ascii_case(c))).cloned().collect();
    if keys.len() != by.len() {
        return Err(SqlError::unpositioned("internal: an outer group that is not an inner column"));
    }
    last.plan.keys = keys;
    for stage in &mut inner.stages {
        stage.output = StageOutput::Exchange;
    }
    Ok(Cascade { over, inner, rows, outer })
}

#[cfg(test)]
mod tests {
    use sluice_crds::{ColumnType, EventTimeSpec, SourceSpec};
    use sluice_plan::{OperatorPlan, Partitioning, StageOutput, TimeWindow};

    use crate::plan_dataflow;

    fn bids() -> Vec<SourceSpec> {
        vec![SourceSpec {
            event_time: Some(EventTimeSpec { column: "ts".into(), watermark_delay_millis: 0 }),
            ..SourceSpec::table("bid", &[("auction", ColumnType::Bigint, true), ("ts", ColumnType::Timestamp, true)])
        }]
    }

    fn q5(inner_window: &str, outer_group: &str) -> String {
        format!(
            "SELECT A.auction, A.num FROM (SELECT auction, COUNT(*) AS num, window_start AS s, window_end AS e \
             FROM bid GROUP BY auction, {inner_window}) AS A \
             JOIN (SELECT MAX(C.num) AS maxn, C.s, C.e FROM (SELECT COUNT(*) AS num, window_start AS s, \
             window_end AS e FROM bid GROUP BY auction, {inner_window}) AS C GROUP BY {outer_group}) AS M \
             ON A.s = M.s AND A.e = M.e AND A.num >= M.maxn"
        )
    }

    const HOP: &str = "HOP(ts, INTERVAL '2' SECOND, INTERVAL '10' SECOND)";

    /// Nexmark q5: the counts are computed once, keyed by window for the
    /// maximum; the counts' projection reads the maximum's exchange beside
    /// it; the maximum carries the counts' window (a 2-second tumbling
    /// window over each count's window end less 1 ms), so its rows are
    /// final and the sides meet per window, at one time.
    #[test]
    fn a_join_with_an_aggregate_over_its_rows_computes_them_once() {
        let flow = plan_dataflow(&q5(HOP, "C.s, C.e"), &bids(), 4).unwrap();
        let [rekey, counts, maxima, join] = flow.stages.as_slice() else { panic!("four stages: {flow:?}") };
        assert!(matches!(rekey.plan.operator, OperatorPlan::Stateless) && rekey.plan.keys.len() == 1);
        assert!(counts.plan.is_windowed());
        let keys: Vec<&str> = counts.plan.keys.iter().map(|k| k.name.as_str()).collect();
        assert_eq!(keys, ["s", "e"], "the counts cross to the maximum's groups");
        assert_eq!(counts.plan.outputs.last().map(|o| o.name.as_str()), Some(super::ROW_TIME));
        let OperatorPlan::Aggregate(max) = &maxima.plan.operator else { panic!("{maxima:?}") };
        assert_eq!(max.window, Some(TimeWindow::Tumbling { size_ms: 2000 }), "the counts' slide");
        assert_eq!(maxima.plan.partitioning, Partitioning::ByExchange);
        let [branch] = flow.branches.as_slice() else { panic!("{:?}", flow.branches) };
        assert!(branch.reads_exchange && branch.beside == 2, "the counts' rows, beside the maximum");
        assert!(matches!(branch.plan.operator, OperatorPlan::Stateless));
        assert_eq!(branch.plan.partitioning, Partitioning::ByExchange, "its watermark is the exchange's");
        assert_eq!(branch.plan.source.schema.fields.len(), counts.plan.outputs.len(), "it reads what counts write");
        assert!(flow.stages[..3].iter().all(|s| s.output == StageOutput::Exchange));
        let OperatorPlan::Join(j) = &join.plan.operator else { panic!("{join:?}") };
        assert_eq!((j.lower, j.upper), (0, 0), "rows of one window have one time, its end");
        assert_eq!(flow.source_plans().count(), 1, "bid is read once");
    }

    #[test]
    fn an_aggregate_over_the_rows_must_group_by_their_window_of_whole_slides() {
        let err = plan_dataflow(&q5(HOP, "C.num"), &bids(), 4).unwrap_err();
        assert!(err.message.contains("must group by their window"), "{err}");
        let odd = "HOP(ts, INTERVAL '3' SECOND, INTERVAL '10' SECOND)";
        let err = plan_dataflow(&q5(odd, "C.s, C.e"), &bids(), 4).unwrap_err();
        assert!(err.message.contains("multiple of its slide"), "{err}");
        // Tumbling windows need no more than that.
        plan_dataflow(&q5("TUMBLE(ts, INTERVAL '10' SECOND)", "C.s, C.e"), &bids(), 4).unwrap();
        // A zone's windows are not all one size: no slide ends each one.
        let zoned = "TUMBLE(ts AT TIME ZONE 'Europe/Paris', INTERVAL '1' DAY)";
        let err = plan_dataflow(&q5(zoned, "C.s, C.e"), &bids(), 4).unwrap_err();
        assert!(err.message.contains("windows in UTC"), "{err}");
    }

    /// The outer query reads the inner window's start only as a group (its
    /// own `window_start` would be the carried window's, which starts a
    /// slide before the end), groups by the end, and names only the inner
    /// subquery's columns; the other side, read by name, names each column
    /// once (as any query must).
    #[test]
    fn the_outer_query_reads_what_the_inner_one_gives_it_as_it_is() {
        let refused = |sql: String, why: &str| {
            let err = plan_dataflow(&sql, &bids(), 4).unwrap_err();
            assert!(err.message.contains(why), "{sql}: {err}");
        };
        refused(q5(HOP, "C.e"), "read it only as a GROUP BY column");
        refused(q5(HOP, "C.s"), "must group by their window's end");
        for start in ["window_start", "C.window_start", "HOP_START(C.e)"] {
            let sql = q5(HOP, "C.s, C.e").replacen("C.s, C.e FROM", &format!("C.s, C.e, {start} AS st FROM"), 1);
            refused(sql, "read by its column");
        }
        refused(q5(HOP, "C.s, C.e HAVING MAX(C.auction) > 0"), "auction");
        refused(
            q5(HOP, "C.s, C.e").replacen("COUNT(*) AS num", "COUNT(*) AS num, MAX(ts) AS num", 1),
            "duplicate output column",
        );
    }

    /// An inner subquery that is not the other side's (here: another
    /// window) is an aggregate over an aggregate of its own, still refused.
    #[test]
    fn a_different_inner_subquery_is_not_shared() {
        let sql = q5(HOP, "C.s, C.e").replacen(HOP, "HOP(ts, INTERVAL '2' SECOND, INTERVAL '20' SECOND)", 1);
        let err = plan_dataflow(&sql, &bids(), 4).unwrap_err();
        assert!(err.message.contains("an aggregate over an aggregate"), "{err}");
    }
}
