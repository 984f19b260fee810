//! A join's conditions: ON (and `USING`, and an INNER join's WHERE
//! conjuncts over both sides) sorted into equality keys, time bounds and
//! the rest, then checked into how the sides meet — an interval join's
//! bounds, a table's primary key, or two windowed subqueries' window.

use sluice_plan::{JoinKind, JoinPlan, SqlError, TableVersion};
use sqlparser::ast::{BinaryOperator, Expr, Ident, ObjectNamePart, TableFactor};

use crate::diagnostic::Located;
use crate::planner::{WINDOW_END, WINDOW_START};

use super::resolve::Resolver;
use super::side::Side;

/// The conjuncts of ON, sorted: equality keys between the sides (left
/// expression, right expression), bounds on the event times' difference,
/// and the rest.
pub(super) struct Conditions {
    keys: Vec<(Expr, Expr)>,
    lower: Option<i64>,
    upper: Option<i64>,
    /// A left-side TIMESTAMP column the right side's event time may not
    /// pass (`b.ts <= a.expires`): the comparison stays residual, and a
    /// left row is let go once the watermark passes its value.
    until: Option<usize>,
    residual: Vec<Expr>,
}

pub(super) fn classify(on: &Expr, resolver: &Resolver<'_, '_>, time_bounds: bool) -> Result<Conditions, SqlError> {
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
pub(super) enum Layout {
    Interval(Interval),
    Table(TableKeys),
}

pub(super) struct Interval {
    keys: Vec<(Expr, Expr)>,
    pub(super) lower: i64,
    pub(super) upper: i64,
    /// A left column bounding the right side's time from above (then
    /// `upper` is unbounded): `Conditions::until`.
    pub(super) until: Option<usize>,
    residual: Vec<Expr>,
}

pub(super) struct TableKeys {
    /// In the order of the table's primary key.
    keys: Vec<(Expr, Expr)>,
    residual: Vec<Expr>,
    pub(super) version: TableVersion,
}

impl Layout {
    pub(super) fn keys(&self) -> Vec<(Expr, Expr)> {
        match self {
            Self::Interval(i) => i.keys.clone(),
            Self::Table(t) => t.keys.clone(),
        }
    }

    pub(super) fn residual(&self) -> Vec<Expr> {
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
pub(super) fn interval_bounds(
    c: Conditions,
    sides: &[Side<'_>; 2],
    kind: JoinKind,
    on: &Expr,
) -> Result<Interval, SqlError> {
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
pub(super) fn time_or_placeholder(side: &Side<'_>) -> String {
    side.event_time().map_or_else(|| format!("{}.<eventTime>", side.prefix), |c| side.written(c))
}

/// A stream–table join: the equality keys must cover the table's primary
/// key — the rows of a key are on one partition, and a stream row meets
/// at most one table row — in its order; other equalities are residual.
pub(super) fn table_keys(
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

/// A join of two windowed subqueries: its keys must equate their windows
/// (a `window_start` or `window_end` column of each), so rows meet only
/// within one window; their times (the window's end) are then equal.
pub(super) fn window_keys(c: Conditions, sides: &[Side<'_>; 2], on: &Expr) -> Result<Interval, SqlError> {
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
pub(super) fn using(
    names: &[sqlparser::ast::ObjectName],
    sides: &[Side<'_>; 2],
    at: &TableFactor,
) -> Result<Expr, SqlError> {
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

pub(super) fn split_and<'e>(e: &'e Expr, out: &mut Vec<&'e Expr>) {
    match e {
        Expr::BinaryOp { left, op: BinaryOperator::And, right } => {
            split_and(left, out);
            split_and(right, out);
        }
        Expr::Nested(inner) => split_and(inner, out),
        other => out.push(other),
    }
}
