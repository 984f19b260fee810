//! Name resolution over a join's two sides: which side and column a
//! reference names, which sides an expression reads, references
//! rewritten to the joined layout's names, bounds read off the sides'
//! event times, and `*` expanded to the sides' columns.

use std::collections::HashSet;
use std::ops::ControlFlow;

use sluice_crds::ColumnType;
use sluice_plan::{JoinKind, SqlError};
use sqlparser::ast::{
    BinaryOperator, Expr, Ident, JoinConstraint, ObjectNamePart, SelectItem, SelectItemQualifiedWildcardKind,
    visit_expressions, visit_expressions_mut,
};

use crate::diagnostic::{Located, suggestion};
use crate::rewrite::interval_millis;

use super::side::Side;

pub(super) struct Resolver<'s, 'a> {
    pub(super) sides: &'s [Side<'a>; 2],
}

impl Resolver<'_, '_> {
    /// The side and column a reference names; `None` for a bare name
    /// neither side has (left for the planner to report).
    pub(super) fn resolve(&self, idents: &[Ident], node: &Expr) -> Result<Option<(usize, usize)>, SqlError> {
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
    pub(super) fn only_side(&self, e: &Expr) -> Option<usize> {
        match self.sides_read(e)? {
            [true, false] => Some(0),
            [false, true] => Some(1),
            _ => None,
        }
    }

    /// Whether `e` reads both sides, and only columns of them.
    pub(super) fn reads_both(&self, e: &Expr) -> bool {
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
    pub(super) fn sides_of(&self, e: &Expr) -> Result<(bool, bool), SqlError> {
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
    pub(super) fn inline(&self, e: &mut Expr, exprs: &[Expr]) -> Result<(), SqlError> {
        self.replace_references(e, |_, c, _| Expr::Nested(Box::new(exprs[c].clone())))
    }

    /// Rewrites every reference to a side's column to its joined name.
    pub(super) fn rewrite(&self, e: &mut Expr) -> Result<(), SqlError> {
        self.replace_references(e, |s, c, idents| {
            let mut id = Ident::with_quote('"', self.sides[s].joined_name(c));
            id.span = idents.last().map_or(sqlparser::tokenizer::Span::empty(), |i| i.span);
            Expr::Identifier(id)
        })
    }

    /// Replaces each reference in `e` to a side's column (side, column, as
    /// written) with what `with` makes of it.
    pub(super) fn replace_references(
        &self,
        e: &mut Expr,
        with: impl Fn(usize, usize, &[Ident]) -> Expr,
    ) -> Result<(), SqlError> {
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

    pub(super) fn event_time_ref(&self, idents: &[Ident], node: &Expr) -> Result<Option<(usize, i64)>, SqlError> {
        Ok(self.resolve(idents, node)?.filter(|(s, c)| self.sides[*s].event_time() == Some(*c)).map(|(s, _)| (s, 0)))
    }

    /// `right.ts <= left.c` (or `<`, or written the other way round) with
    /// `left.c` a TIMESTAMP column of the left side: that column.
    pub(super) fn until_bound(&self, e: &Expr) -> Option<usize> {
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
    pub(super) fn until_between(&self, expr: &Expr, low: &Expr, high: &Expr) -> Result<Option<(usize, i64)>, SqlError> {
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
    pub(super) fn time_bound(&self, e: &Expr) -> Result<Option<Vec<(bool, i64)>>, SqlError> {
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
pub(super) fn expand_projection(
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
