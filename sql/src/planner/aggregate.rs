//! Planning GROUP BY: group keys, aggregate calls, time windows (TUMBLE,
//! HOP, SESSION, and the WINDOW clause), and the scope the SELECT list and
//! HAVING of an aggregation are resolved in.

use crate::diagnostic::Located;
use sqlparser::ast::{Expr, Function, Ident, SelectItem};

use crate::compile::{Scope, call_args, compile};
use crate::rewrite::{WindowClause, WindowClauseKind, interval_millis};
use crate::typing::cast;
use sluice_plan::{
    AggFunc, AggregateCall, AggregatePlan, EmitMode, OperatorPlan, OutputColumn, Partitioning, TimeWindow,
};
use sluice_plan::{DataType, PhysExpr, Schema, SourceSchema, SqlError};

use super::query::Planner;
use super::scope::{
    InputScope, WINDOW_END, WINDOW_START, WindowSpanned, group_window_function, is_window_bound_function, output_name,
    resolve_input, split_column_ref,
};

impl Planner<'_> {
    #[allow(clippy::type_complexity)]
    pub(super) fn plan_aggregate(
        &mut self,
        group_by: &[Expr],
    ) -> Result<
        (OperatorPlan, Schema, Vec<OutputColumn>, Vec<OutputColumn>, Option<PhysExpr>, Partitioning, EmitMode),
        SqlError,
    > {
        // Time window: from a WINDOW clause or a TUMBLE/HOP/SESSION group item.
        let (mut window, mut window_zone): (Option<TimeWindow>, Option<String>) = match &self.parsed.window {
            Some(w) => {
                let (w, zone) = self.window_from_clause(w)?;
                (Some(w), zone)
            }
            None => (None, None),
        };
        let mut group_exprs = Vec::new();
        let mut group_names = Vec::new();
        let mut keyed_by = Vec::new();
        for g in group_by {
            if let Expr::Function(f) = g
                && let Some(kind) = group_window_function(f)
            {
                if window.is_some() {
                    return Err(SqlError::at_node(g, "only one time window per query"));
                }
                let (w, zone) = self.window_from_group_function(kind, f, g)?;
                (window, window_zone) = (Some(w), zone);
                continue;
            }
            if let Expr::Value(_) = g {
                return Err(SqlError::at_node(g, "GROUP BY a position is not supported: repeat the expression"));
            }
            let e = compile(g, &mut self.input_scope("GROUP BY"))?;
            if let Some(index) = e.as_column() {
                keyed_by.push(self.source.schema.fields[index].name.clone());
                group_names.push(self.source.schema.fields[index].name.clone());
            } else {
                group_names.push(g.to_string());
            }
            group_exprs.push(e);
        }
        if let (Some(et), Some(_)) = (self.source.event_time, window) {
            self.used[et.column] = true;
        }
        let mut intermediate = Schema::default();
        for (name, e) in group_names.iter().zip(&group_exprs) {
            intermediate.push(name.clone(), e.data_type());
        }
        let window_columns = window.map(|_| {
            let s = intermediate.push(WINDOW_START, DataType::Timestamp);
            let e = intermediate.push(WINDOW_END, DataType::Timestamp);
            (s, e)
        });
        let agg_base = intermediate.fields.len();
        let mut aggregates = Vec::new();
        let items = self.select.projection.clone();
        let mut outputs = Vec::new();
        let having = {
            let mut scope = AggScope {
                source: &self.source,
                qualifiers: &self.qualifiers,
                used: &mut self.used,
                group_exprs: &group_exprs,
                window_columns,
                agg_base,
                aggregates: &mut aggregates,
            };
            for (i, item) in items.iter().enumerate() {
                match item {
                    SelectItem::UnnamedExpr(e) | SelectItem::ExprWithAlias { expr: e, .. } => {
                        let expr = compile(e, &mut scope)?;
                        outputs.push(OutputColumn { name: output_name(item, i), expr });
                    }
                    other => {
                        return Err(SqlError::at_node(
                            other,
                            "SELECT * cannot be used with GROUP BY: list the columns",
                        ));
                    }
                }
            }
            match &self.select.having {
                Some(h) => {
                    let e = compile(h, &mut scope)?;
                    if !matches!(e.data_type(), DataType::Boolean | DataType::Null) {
                        return Err(SqlError::at_node(
                            h,
                            format!("HAVING needs a boolean condition, got {}", e.data_type()),
                        ));
                    }
                    Some(cast(e, DataType::Boolean))
                }
                None => None,
            }
        };
        for a in &aggregates {
            let name = match &a.arg {
                None => "count".to_owned(),
                Some(_) => format!("{:?}", a.func).to_ascii_lowercase(),
            };
            intermediate.push(name, a.data_type);
        }
        let mut keys: Vec<OutputColumn> = group_names
            .iter()
            .zip(&group_exprs)
            .enumerate()
            .map(|(index, (name, e))| {
                let expr = PhysExpr::Column { index, data_type: e.data_type() };
                // Named as the result names it, where it shows the group
                // as it is (`DATE_TRUNC('hour', ts) AS hour`), so a
                // deletion's key reads as the rows it deletes.
                let shown = outputs.iter().find(|o| o.expr == expr).map(|o| o.name.clone());
                OutputColumn { name: shown.unwrap_or_else(|| name.clone()), expr }
            })
            .collect();
        if let Some((start, _)) = window_columns {
            keys.push(OutputColumn {
                name: WINDOW_START.into(),
                expr: PhysExpr::Column { index: start, data_type: DataType::Timestamp },
            });
        }
        let emit = if window.is_some() { EmitMode::Final } else { EmitMode::Changes };
        Ok((
            OperatorPlan::Aggregate(AggregatePlan {
                group_exprs,
                aggregates,
                window,
                window_zone,
                upsert_key: Vec::new(),
                retract: None,
            }),
            intermediate,
            outputs,
            keys,
            having,
            Partitioning::KeyedBy(keyed_by),
            emit,
        ))
    }

    /// Checks that a window's time is the source's event time, and returns
    /// the zone whose wall clock it follows (`ts AT TIME ZONE 'zone'`;
    /// `None`: UTC).
    pub(super) fn event_time_for_window(
        &self,
        column: Option<&Expr>,
        at: &dyn sqlparser::ast::Spanned,
    ) -> Result<Option<String>, SqlError> {
        let Some(et) = self.source.event_time else {
            return Err(SqlError::at_span(
                at.span(),
                format!(
                    "time windows need event time: declare eventTime (column and watermarkDelayMillis) on source `{}`",
                    self.source.name
                ),
            ));
        };
        let mut zone = None;
        if let Some(mut c) = column {
            let mut probe_used = vec![false; self.source.schema.fields.len()];
            let mut probe = InputScope {
                source: &self.source,
                qualifiers: &self.qualifiers,
                used: &mut probe_used,
                context: "WINDOW",
            };
            if let Expr::AtTimeZone { timestamp, time_zone } = c {
                let name = compile(time_zone, &mut probe)?;
                zone = crate::functions::zone_named(name, "AT TIME ZONE", time_zone)?;
                c = timestamp;
            }
            let e = compile(c, &mut probe)?;
            if e.as_column() != Some(et.column) {
                return Err(SqlError::at_node(
                    c,
                    format!(
                        "windows must use the eventTime column `{}` of source `{}` (its watermark closes the windows), not `{c}`",
                        self.source.schema.fields[et.column].name, self.source.name
                    ),
                ));
            }
        }
        Ok(zone)
    }

    pub(super) fn window_from_clause(&self, w: &WindowClause) -> Result<(TimeWindow, Option<String>), SqlError> {
        let zone = self.event_time_for_window(w.time_column.as_ref(), &WindowSpanned(w.span))?;
        let window = match w.kind {
            WindowClauseKind::Tumbling { size_ms } => TimeWindow::Tumbling { size_ms },
            WindowClauseKind::Hopping { size_ms, advance_ms } => TimeWindow::Hopping { size_ms, advance_ms },
            WindowClauseKind::Session { gap_ms } => TimeWindow::Session { gap_ms },
        };
        Ok((window, window_zone_of(window, zone, &WindowSpanned(w.span))?))
    }

    pub(super) fn window_from_group_function(
        &self,
        kind: &str,
        f: &Function,
        node: &Expr,
    ) -> Result<(TimeWindow, Option<String>), SqlError> {
        let a = call_args(f, node)?;
        let (time, intervals) = match a.args.split_first() {
            Some((t, rest)) => (t, rest),
            None => return Err(SqlError::at_node(node, format!("{kind} needs a time column and an interval"))),
        };
        let zone = self.event_time_for_window(Some(time), node)?;
        let ms: Vec<i64> = intervals.iter().map(|e| interval_millis(e)).collect::<Result<_, _>>()?;
        let window = match (kind, ms.as_slice()) {
            ("TUMBLE", [size_ms]) => TimeWindow::Tumbling { size_ms: *size_ms },
            // Calcite order: HOP(time, slide, size).
            ("HOP", [advance_ms, size_ms]) => {
                if advance_ms > size_ms || size_ms / advance_ms > 1000 {
                    return Err(SqlError::at_node(
                        node,
                        "HOP slide must be at most the size, and size/slide at most 1000",
                    ));
                }
                TimeWindow::Hopping { size_ms: *size_ms, advance_ms: *advance_ms }
            }
            ("SESSION", [gap_ms]) => TimeWindow::Session { gap_ms: *gap_ms },
            _ => {
                return Err(SqlError::at_node(
                    node,
                    "expected TUMBLE(time, size), HOP(time, slide, size) or SESSION(time, gap) with INTERVAL arguments",
                ));
            }
        };
        Ok((window, window_zone_of(window, zone, node)?))
    }
}

/// A window's zone, where the window takes one: tumbling and hopping
/// windows follow a zone's clock; session windows, which have no
/// alignment, stay in UTC (refused with a zone, rather than ignoring it).
fn window_zone_of(
    window: TimeWindow,
    zone: Option<String>,
    at: &dyn sqlparser::ast::Spanned,
) -> Result<Option<String>, SqlError> {
    match (window, zone) {
        (TimeWindow::Tumbling { .. } | TimeWindow::Hopping { .. }, zone) | (_, zone @ None) => Ok(zone),
        (_, Some(z)) => Err(SqlError::at_span(
            at.span(),
            format!(
                "a session window has no clock to follow (`AT TIME ZONE '{z}'` aligns tumbling and hopping \
                 windows): drop AT TIME ZONE"
            ),
        )),
    }
}

/// The SELECT list and HAVING of an aggregation: group expressions and
/// aggregate results, and the window bounds when windowed.
pub(super) struct AggScope<'a> {
    pub(super) source: &'a SourceSchema,
    pub(super) qualifiers: &'a [String],
    pub(super) used: &'a mut Vec<bool>,
    pub(super) group_exprs: &'a [PhysExpr],
    pub(super) window_columns: Option<(usize, usize)>,
    pub(super) agg_base: usize,
    pub(super) aggregates: &'a mut Vec<AggregateCall>,
}

impl Scope for AggScope<'_> {
    fn resolve_whole(&mut self, expr: &Expr) -> Option<PhysExpr> {
        if self.group_exprs.is_empty() {
            return None;
        }
        let mut probe_used = vec![false; self.used.len()];
        let mut probe =
            InputScope { source: self.source, qualifiers: self.qualifiers, used: &mut probe_used, context: "GROUP BY" };
        let compiled = compile(expr, &mut probe).ok()?;
        if compiled.is_literal() {
            return None;
        }
        self.group_exprs
            .iter()
            .position(|g| *g == compiled)
            .map(|index| PhysExpr::Column { index, data_type: compiled.data_type() })
    }

    fn resolve_column(&mut self, idents: &[Ident], node: &Expr) -> Result<PhysExpr, SqlError> {
        let name = split_column_ref(idents, self.qualifiers, node)?;
        if let Some((start, end)) = self.window_columns {
            if name.value.eq_ignore_ascii_case(WINDOW_START) {
                return Ok(PhysExpr::Column { index: start, data_type: DataType::Timestamp });
            }
            if name.value.eq_ignore_ascii_case(WINDOW_END) {
                return Ok(PhysExpr::Column { index: end, data_type: DataType::Timestamp });
            }
        }
        // Known column, but neither grouped nor aggregated.
        resolve_input(self.source, self.qualifiers, self.used, idents, node)?;
        Err(SqlError::at_span(
            name.span,
            format!("column `{}` must appear in GROUP BY or be used in an aggregate function", name.value),
        ))
    }

    fn resolve_call(&mut self, call: &Function, node: &Expr) -> Option<Result<PhysExpr, SqlError>> {
        let name = call.name.to_string().to_ascii_uppercase();
        if let Some(bound) = is_window_bound_function(&name) {
            return Some(match self.window_columns {
                Some((start, end)) => Ok(PhysExpr::Column {
                    index: if bound == WINDOW_START { start } else { end },
                    data_type: DataType::Timestamp,
                }),
                None => Err(SqlError::at_node(node, format!("{name} needs a time window in GROUP BY"))),
            });
        }
        if group_window_function(call).is_some() {
            return Some(Err(SqlError::at_node(
                node,
                format!("{name}(...) belongs in GROUP BY; select window_start / window_end"),
            )));
        }
        let func = AggFunc::from_name(&name)?;
        if call.over.is_some() {
            return Some(Err(SqlError::at_node(node, "window functions (OVER) cannot be combined with GROUP BY")));
        }
        Some(self.aggregate(func, &name, call, node))
    }
}

impl AggScope<'_> {
    pub(super) fn aggregate(
        &mut self,
        func: AggFunc,
        name: &str,
        call: &Function,
        node: &Expr,
    ) -> Result<PhysExpr, SqlError> {
        let args = call_args(call, node)?;
        let mut scope = InputScope {
            source: self.source,
            qualifiers: self.qualifiers,
            used: self.used,
            context: "aggregate function arguments",
        };
        if matches!(func, AggFunc::ArrayAgg | AggFunc::MapAgg) {
            let call = super::collect::collect_call(func, name, &args, &mut scope, node)?;
            return Ok(self.call_column(call));
        }
        let (func, arg) = match (func, args.star, args.args.as_slice()) {
            (AggFunc::Count, true, []) => (AggFunc::CountStar, None),
            (_, false, [a]) => (func, Some(compile(a, &mut scope)?)),
            _ => return Err(SqlError::at_node(node, format!("{name} takes one argument"))),
        };
        if args.distinct && func != AggFunc::Count {
            return Err(SqlError::at_node(
                node,
                format!("{name}(DISTINCT ...) is not supported; only COUNT(DISTINCT ...)"),
            ));
        }
        let arg_type = arg.as_ref().map_or(DataType::Bigint, PhysExpr::data_type);
        let arg = match func {
            AggFunc::Sum
            | AggFunc::Avg
            | AggFunc::StddevSamp
            | AggFunc::StddevPop
            | AggFunc::VarSamp
            | AggFunc::VarPop => match arg_type {
                DataType::Bigint if func == AggFunc::Sum => arg,
                DataType::Decimal(..) if func == AggFunc::Sum => arg,
                DataType::Decimal(..) if func == AggFunc::Avg => {
                    // Exact: SUM / COUNT, a decimal quotient (at least six
                    // places, rounded half away from zero), as the
                    // two-phase plan already splits an AVG.
                    let count = AggregateCall {
                        func: AggFunc::Count,
                        data_type: DataType::Bigint,
                        arg: arg.clone(),
                        distinct: false,
                        order: Vec::new(),
                    };
                    let sum = AggregateCall {
                        func: AggFunc::Sum,
                        data_type: AggFunc::Sum.result_type(arg_type),
                        arg,
                        distinct: false,
                        order: Vec::new(),
                    };
                    let (sum, count) = (self.call_column(sum), self.call_column(count));
                    return crate::typing::arith(sum, sluice_plan::ArithOp::Div, count, node);
                }
                DataType::Bigint | DataType::Double | DataType::Decimal(..) | DataType::Null => {
                    arg.map(|a| cast(a, DataType::Double))
                }
                t => return Err(SqlError::at_node(node, format!("{name} needs a number, got {t}"))),
            },
            AggFunc::Min | AggFunc::Max if arg_type == DataType::Null => arg.map(|a| cast(a, DataType::Double)),
            AggFunc::Min | AggFunc::Max if arg_type.is_nested() => {
                return Err(SqlError::at_node(
                    node,
                    format!(
                        "{name} orders its values; {arg_type} values have no order (take it of a field or element)"
                    ),
                ));
            }
            _ => arg,
        };
        let input_type = arg.as_ref().map_or(DataType::Bigint, PhysExpr::data_type);
        let call = AggregateCall {
            func,
            data_type: func.result_type(input_type),
            arg,
            distinct: args.distinct,
            order: Vec::new(),
        };
        Ok(self.call_column(call))
    }

    /// The column of aggregate `call`, computed once however often the
    /// query names it.
    fn call_column(&mut self, call: AggregateCall) -> PhysExpr {
        let index = match self.aggregates.iter().position(|a| *a == call) {
            Some(i) => i,
            None => {
                self.aggregates.push(call);
                self.aggregates.len() - 1
            }
        };
        PhysExpr::Column { index: self.agg_base + index, data_type: self.aggregates[index].data_type }
    }
}
