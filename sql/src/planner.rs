//! Query → [`Plan`]: resolve the source, classify the query (stateless,
//! aggregate, ROWS window), compile every expression in the right scope, and
//! check the streaming rules (windows need event time, EMIT FINAL needs a
//! window, state must be partition-aligned).

use crate::diagnostic::Located;
use sluice_crds::SourceSpec;
use sqlparser::ast::{
    Expr, Function, GroupByExpr, Ident, ObjectNamePart, OrderBySort, Select, SelectItem, SetExpr, TableFactor,
    WindowFrameBound, WindowFrameUnits, WindowType,
};

use super::compile::{Scope, call_args, cast, compile};
use super::diagnostic::suggestion;
use super::rewrite::{self, EmitKind, ParsedQuery, WindowClause, WindowClauseKind, interval_millis};
use sluice_plan::{
    AggFunc, AggregateCall, AggregatePlan, EmitMode, OperatorPlan, OutputColumn, Partitioning, Plan, RowsFunction,
    RowsFunctionKind, RowsPlan, RowsSpec, TimeWindow,
};
use sluice_plan::{DataType, PhysExpr, Schema, SourceSchema, SqlError};

const WINDOW_START: &str = "window_start";
const WINDOW_END: &str = "window_end";

/// Plans `sql` against the declared sources.
pub fn plan_query(sql: &str, sources: &[SourceSpec]) -> Result<Plan, SqlError> {
    let parsed = rewrite::parse(sql)?;
    Planner::new(&parsed, sources)?.plan()
}

struct Planner<'q> {
    parsed: &'q ParsedQuery,
    select: &'q Select,
    source: SourceSchema,
    qualifiers: Vec<String>,
    used: Vec<bool>,
}

impl<'q> Planner<'q> {
    fn new(parsed: &'q ParsedQuery, sources: &[SourceSpec]) -> Result<Self, SqlError> {
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
                        "FROM must name one source (subqueries and table functions are not supported)",
                    ));
                }
            },
            [t] => {
                return Err(SqlError::at_node(&t.joins[0].relation, "JOIN is not supported yet: one source per query"));
            }
            [_, second, ..] => {
                return Err(SqlError::at_node(&second.relation, "one source per query (no comma joins)"));
            }
        };
        let Some(ObjectNamePart::Identifier(source_ident)) = table.0.last() else {
            return Err(SqlError::at_node(table, "expected a source name"));
        };
        let spec = sources.iter().find(|s| s.name.eq_ignore_ascii_case(&source_ident.value)).ok_or_else(|| {
            let names: Vec<&str> = sources.iter().map(|s| s.name.as_str()).collect();
            SqlError::at_span(
                source_ident.span,
                format!(
                    "unknown source `{}`{}; declared sources: {}",
                    source_ident.value,
                    suggestion(&source_ident.value, names.iter().copied()),
                    names.join(", ")
                ),
            )
        })?;
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
        Ok(Self { parsed, select, source, qualifiers, used })
    }

    fn input_scope(&mut self, context: &'static str) -> InputScope<'_> {
        InputScope { source: &self.source, qualifiers: &self.qualifiers, used: &mut self.used, context }
    }

    fn plan(mut self) -> Result<Plan, SqlError> {
        let filter = match &self.select.selection {
            Some(w) => {
                let e = compile(w, &mut self.input_scope("WHERE"))?;
                Some(match e.data_type() {
                    DataType::Boolean => e,
                    DataType::Null => cast(e, DataType::Boolean),
                    t => return Err(SqlError::at_node(w, format!("WHERE needs a boolean condition, got {t}"))),
                })
            }
            None => None,
        };
        let group_by = match &self.select.group_by {
            GroupByExpr::Expressions(exprs, modifiers) if modifiers.is_empty() => exprs.as_slice(),
            GroupByExpr::Expressions(..) => {
                return Err(match self.parsed.clause("ROLLUP") {
                    Some(span) => SqlError::at_span(span, "GROUP BY ROLLUP / CUBE / GROUPING SETS are not supported"),
                    None => SqlError::at_node(
                        &self.select.group_by,
                        "GROUP BY ROLLUP / CUBE / GROUPING SETS are not supported",
                    ),
                });
            }
            GroupByExpr::All(_) => {
                return Err(SqlError::at_span(
                    self.select.select_token.0.span,
                    "GROUP BY ALL is not supported: list the grouping expressions",
                ));
            }
        };
        let mut calls = CallKinds::default();
        for item in &self.select.projection {
            if let SelectItem::UnnamedExpr(e) | SelectItem::ExprWithAlias { expr: e, .. } = item {
                calls.scan(e);
            }
        }
        if let Some(h) = &self.select.having {
            calls.scan(h);
        }
        let is_aggregate = !group_by.is_empty() || calls.aggregate.is_some() || self.parsed.window.is_some();
        if let (true, Some(w)) = (is_aggregate, &calls.window) {
            return Err(SqlError::at_node(w, "window functions (OVER) cannot be combined with GROUP BY or aggregates"));
        }
        if !is_aggregate && let Some(h) = &self.select.having {
            return Err(SqlError::at_node(h, "HAVING needs GROUP BY or an aggregate"));
        }
        let emit = self.parsed.emit;
        let (operator, intermediate, outputs, keys, having, partitioning, emit_mode) = if is_aggregate {
            self.plan_aggregate(group_by)?
        } else if calls.window.is_some() {
            self.plan_rows()?
        } else {
            let outputs = self.stateless_outputs()?;
            (
                OperatorPlan::Stateless,
                self.source.schema.clone(),
                outputs,
                Vec::new(),
                None,
                Partitioning::Any,
                EmitMode::PerRecord,
            )
        };
        let emit_mode = match (emit.map(|e| e.kind), emit_mode) {
            (None, m) => m,
            (Some(EmitKind::Changes), EmitMode::Final) => EmitMode::Changes,
            (Some(EmitKind::Changes), m) => m,
            (Some(EmitKind::Final), EmitMode::Final) => EmitMode::Final,
            (Some(EmitKind::Final), EmitMode::Changes) => {
                return Err(SqlError::at_span(
                    emit.map_or(sqlparser::tokenizer::Span::empty(), |e| e.span),
                    "EMIT FINAL needs a time window (WINDOW TUMBLING/HOPPING/SESSION): without one a group never closes",
                ));
            }
            (Some(EmitKind::Final), EmitMode::PerRecord) => {
                return Err(SqlError::at_span(
                    emit.map_or(sqlparser::tokenizer::Span::empty(), |e| e.span),
                    "EMIT FINAL applies to windowed aggregations only",
                ));
            }
        };
        let mut seen = std::collections::HashSet::new();
        for (o, item) in outputs.iter().zip(&self.select.projection) {
            if !seen.insert(o.name.to_ascii_lowercase()) {
                return Err(SqlError::at_node(
                    item,
                    format!("duplicate output column `{}`: add an alias (AS name)", o.name),
                ));
            }
        }
        Ok(Plan {
            used_columns: self.used,
            source: self.source,
            filter,
            operator,
            intermediate,
            having,
            outputs,
            keys,
            emit: emit_mode,
            partitioning,
        })
    }

    fn stateless_outputs(&mut self) -> Result<Vec<OutputColumn>, SqlError> {
        let items = self.select.projection.clone();
        let mut outputs = Vec::new();
        for (i, item) in items.iter().enumerate() {
            match item {
                SelectItem::Wildcard(_) | SelectItem::QualifiedWildcard(..) => {
                    for (index, f) in self.source.schema.fields.iter().enumerate() {
                        self.used[index] = true;
                        outputs.push(OutputColumn {
                            name: f.name.clone(),
                            expr: PhysExpr::Column { index, data_type: f.data_type },
                        });
                    }
                }
                SelectItem::UnnamedExpr(e) | SelectItem::ExprWithAlias { expr: e, .. } => {
                    let expr = compile(e, &mut self.input_scope("SELECT"))?;
                    outputs.push(OutputColumn { name: output_name(item, i), expr });
                }
                SelectItem::ExprWithAliases { expr, .. } => {
                    return Err(SqlError::at_node(expr, "multiple aliases are not supported"));
                }
            }
        }
        Ok(outputs)
    }

    #[allow(clippy::type_complexity)]
    fn plan_aggregate(
        &mut self,
        group_by: &[Expr],
    ) -> Result<
        (OperatorPlan, Schema, Vec<OutputColumn>, Vec<OutputColumn>, Option<PhysExpr>, Partitioning, EmitMode),
        SqlError,
    > {
        // Time window: from a WINDOW clause or a TUMBLE/HOP/SESSION group item.
        let mut window: Option<TimeWindow> = match &self.parsed.window {
            Some(w) => Some(self.window_from_clause(w)?),
            None => None,
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
                window = Some(self.window_from_group_function(kind, f, g)?);
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
            .map(|(index, (name, e))| OutputColumn {
                name: name.clone(),
                expr: PhysExpr::Column { index, data_type: e.data_type() },
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
            OperatorPlan::Aggregate(AggregatePlan { group_exprs, aggregates, window }),
            intermediate,
            outputs,
            keys,
            having,
            Partitioning::KeyedBy(keyed_by),
            emit,
        ))
    }

    fn event_time_for_window(&self, column: Option<&Expr>, at: &dyn sqlparser::ast::Spanned) -> Result<(), SqlError> {
        let Some(et) = self.source.event_time else {
            return Err(SqlError::at_span(
                at.span(),
                format!(
                    "time windows need event time: declare eventTime (column and watermarkDelayMillis) on source `{}`",
                    self.source.name
                ),
            ));
        };
        if let Some(c) = column {
            let mut probe_used = vec![false; self.source.schema.fields.len()];
            let mut probe = InputScope {
                source: &self.source,
                qualifiers: &self.qualifiers,
                used: &mut probe_used,
                context: "WINDOW",
            };
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
        Ok(())
    }

    fn window_from_clause(&self, w: &WindowClause) -> Result<TimeWindow, SqlError> {
        self.event_time_for_window(w.time_column.as_ref(), &WindowSpanned(w.span))?;
        Ok(match w.kind {
            WindowClauseKind::Tumbling { size_ms } => TimeWindow::Tumbling { size_ms },
            WindowClauseKind::Hopping { size_ms, advance_ms } => TimeWindow::Hopping { size_ms, advance_ms },
            WindowClauseKind::Session { gap_ms } => TimeWindow::Session { gap_ms },
        })
    }

    fn window_from_group_function(&self, kind: &str, f: &Function, node: &Expr) -> Result<TimeWindow, SqlError> {
        let a = call_args(f, node)?;
        let (time, intervals) = match a.args.split_first() {
            Some((t, rest)) => (t, rest),
            None => return Err(SqlError::at_node(node, format!("{kind} needs a time column and an interval"))),
        };
        self.event_time_for_window(Some(time), node)?;
        let ms: Vec<i64> = intervals.iter().map(|e| interval_millis(e)).collect::<Result<_, _>>()?;
        Ok(match (kind, ms.as_slice()) {
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
        })
    }

    #[allow(clippy::type_complexity)]
    fn plan_rows(
        &mut self,
    ) -> Result<
        (OperatorPlan, Schema, Vec<OutputColumn>, Vec<OutputColumn>, Option<PhysExpr>, Partitioning, EmitMode),
        SqlError,
    > {
        let mut intermediate = self.source.schema.clone();
        let mut specs: Vec<RowsSpec> = Vec::new();
        let items = self.select.projection.clone();
        let mut outputs = Vec::new();
        {
            let mut scope = RowsScope {
                source: &self.source,
                qualifiers: &self.qualifiers,
                used: &mut self.used,
                specs: &mut specs,
                intermediate: &mut intermediate,
            };
            for (i, item) in items.iter().enumerate() {
                match item {
                    SelectItem::Wildcard(_) | SelectItem::QualifiedWildcard(..) => {
                        for (index, f) in scope.source.schema.fields.iter().enumerate() {
                            scope.used[index] = true;
                            outputs.push(OutputColumn {
                                name: f.name.clone(),
                                expr: PhysExpr::Column { index, data_type: f.data_type },
                            });
                        }
                    }
                    SelectItem::UnnamedExpr(e) | SelectItem::ExprWithAlias { expr: e, .. } => {
                        let expr = compile(e, &mut scope)?;
                        outputs.push(OutputColumn { name: output_name(item, i), expr });
                    }
                    SelectItem::ExprWithAliases { expr, .. } => {
                        return Err(SqlError::at_node(expr, "multiple aliases are not supported"));
                    }
                }
            }
        }
        // State is per PARTITION BY key: the source must be partitioned by a
        // subset of the columns every spec partitions by.
        let mut keyed: Option<Vec<String>> = None;
        for s in &specs {
            let cols: Vec<String> = s
                .partition_by
                .iter()
                .filter_map(PhysExpr::as_column)
                .map(|i| self.source.schema.fields[i].name.clone())
                .collect();
            keyed = Some(match keyed {
                None => cols,
                Some(k) => k.into_iter().filter(|c| cols.contains(c)).collect(),
            });
        }
        let keys = specs
            .first()
            .map(|s| {
                s.partition_by
                    .iter()
                    .filter_map(|e| e.as_column().map(|i| (i, e.data_type())))
                    .map(|(index, data_type)| OutputColumn {
                        name: self.source.schema.fields[index].name.clone(),
                        expr: PhysExpr::Column { index, data_type },
                    })
                    .collect()
            })
            .unwrap_or_default();
        Ok((
            OperatorPlan::Rows(RowsPlan { specs }),
            intermediate,
            outputs,
            keys,
            None,
            Partitioning::KeyedBy(keyed.unwrap_or_default()),
            EmitMode::PerRecord,
        ))
    }
}

/// A span-only node, to point errors at a clause the AST does not keep.
struct WindowSpanned(sqlparser::tokenizer::Span);

impl sqlparser::ast::Spanned for WindowSpanned {
    fn span(&self) -> sqlparser::tokenizer::Span {
        self.0
    }
}

/// The span of an unquoted identifier spelled `keyword` inside `e`.
fn find_keyword_ident(e: &Expr, keyword: &str) -> Option<sqlparser::tokenizer::Span> {
    match e {
        Expr::Identifier(id) if id.quote_style.is_none() && id.value.eq_ignore_ascii_case(keyword) => Some(id.span),
        Expr::BinaryOp { left, right, .. } => {
            find_keyword_ident(left, keyword).or_else(|| find_keyword_ident(right, keyword))
        }
        Expr::UnaryOp { expr, .. } | Expr::Nested(expr) => find_keyword_ident(expr, keyword),
        _ => None,
    }
}

fn output_name(item: &SelectItem, index: usize) -> String {
    match item {
        SelectItem::ExprWithAlias { alias, .. } => alias.value.clone(),
        SelectItem::UnnamedExpr(Expr::Identifier(id)) => id.value.clone(),
        SelectItem::UnnamedExpr(Expr::CompoundIdentifier(ids)) => {
            ids.last().map(|i| i.value.clone()).unwrap_or_default()
        }
        SelectItem::UnnamedExpr(Expr::Function(f)) => f.name.to_string().to_ascii_lowercase(),
        _ => format!("expr{index}"),
    }
}

fn group_window_function(f: &Function) -> Option<&'static str> {
    match f.name.to_string().to_ascii_uppercase().as_str() {
        "TUMBLE" => Some("TUMBLE"),
        "HOP" => Some("HOP"),
        "SESSION" => Some("SESSION"),
        _ => None,
    }
}

fn is_window_bound_function(name: &str) -> Option<&'static str> {
    match name {
        "TUMBLE_START" | "HOP_START" | "SESSION_START" => Some(WINDOW_START),
        "TUMBLE_END" | "HOP_END" | "SESSION_END" => Some(WINDOW_END),
        _ => None,
    }
}

/// Where aggregate and window-function calls appear in a query.
#[derive(Default)]
struct CallKinds {
    aggregate: Option<Expr>,
    window: Option<Expr>,
}

impl CallKinds {
    fn scan(&mut self, e: &Expr) {
        let mut stack = vec![e];
        while let Some(e) = stack.pop() {
            match e {
                Expr::Function(f) => {
                    let name = f.name.to_string().to_ascii_uppercase();
                    let is_agg = AggFunc::from_name(&name).is_some();
                    if f.over.is_some() {
                        self.window.get_or_insert_with(|| e.clone());
                        continue;
                    }
                    if is_agg {
                        self.aggregate.get_or_insert_with(|| e.clone());
                        continue;
                    }
                    if let Ok(a) = call_args(f, e) {
                        stack.extend(a.args);
                    }
                }
                Expr::BinaryOp { left, right, .. } => stack.extend([left.as_ref(), right.as_ref()]),
                Expr::UnaryOp { expr, .. }
                | Expr::Nested(expr)
                | Expr::IsNull(expr)
                | Expr::IsNotNull(expr)
                | Expr::IsTrue(expr)
                | Expr::IsFalse(expr)
                | Expr::IsNotTrue(expr)
                | Expr::IsNotFalse(expr)
                | Expr::Cast { expr, .. }
                | Expr::Extract { expr, .. }
                | Expr::Ceil { expr, .. }
                | Expr::Floor { expr, .. }
                | Expr::Trim { expr, .. }
                | Expr::Like { expr, .. }
                | Expr::ILike { expr, .. } => stack.push(expr),
                Expr::Substring { expr, substring_from, substring_for, .. } => {
                    stack.push(expr);
                    stack.extend(substring_from.as_deref());
                    stack.extend(substring_for.as_deref());
                }
                Expr::InList { expr, list, .. } => {
                    stack.push(expr);
                    stack.extend(list);
                }
                Expr::Between { expr, low, high, .. } => stack.extend([expr.as_ref(), low.as_ref(), high.as_ref()]),
                Expr::Case { operand, conditions, else_result, .. } => {
                    stack.extend(operand.as_deref());
                    for c in conditions {
                        stack.extend([&c.condition, &c.result]);
                    }
                    stack.extend(else_result.as_deref());
                }
                _ => {}
            }
        }
    }
}

fn split_column_ref<'a>(idents: &'a [Ident], qualifiers: &[String], node: &Expr) -> Result<&'a Ident, SqlError> {
    match idents {
        [name] => Ok(name),
        [q, name] => {
            if qualifiers.contains(&q.value.to_ascii_lowercase()) {
                Ok(name)
            } else {
                Err(SqlError::at_span(
                    q.span,
                    format!("unknown table `{}` (the query reads `{}`)", q.value, qualifiers[0]),
                ))
            }
        }
        _ => Err(SqlError::at_node(node, "nested field access is not supported")),
    }
}

/// Resolves names against the source (WHERE, GROUP BY, function arguments).
struct InputScope<'a> {
    source: &'a SourceSchema,
    qualifiers: &'a [String],
    used: &'a mut Vec<bool>,
    context: &'static str,
}

fn resolve_input(
    source: &SourceSchema,
    qualifiers: &[String],
    used: &mut [bool],
    idents: &[Ident],
    node: &Expr,
) -> Result<PhysExpr, SqlError> {
    let name = split_column_ref(idents, qualifiers, node)?;
    match source.schema.index_of(&name.value) {
        Some(index) => {
            used[index] = true;
            Ok(PhysExpr::Column { index, data_type: source.schema.fields[index].data_type })
        }
        None => {
            let extra = if name.value.eq_ignore_ascii_case(WINDOW_START) || name.value.eq_ignore_ascii_case(WINDOW_END)
            {
                " (window_start and window_end exist only in the SELECT list of a windowed GROUP BY)".to_owned()
            } else {
                suggestion(&name.value, source.schema.names())
            };
            Err(SqlError::at_span(
                name.span,
                format!("unknown column `{}` in source `{}`{extra}", name.value, source.name),
            ))
        }
    }
}

impl Scope for InputScope<'_> {
    fn resolve_column(&mut self, idents: &[Ident], node: &Expr) -> Result<PhysExpr, SqlError> {
        resolve_input(self.source, self.qualifiers, self.used, idents, node)
    }

    fn resolve_call(&mut self, call: &Function, node: &Expr) -> Option<Result<PhysExpr, SqlError>> {
        let name = call.name.to_string().to_ascii_uppercase();
        if call.over.is_some() {
            return Some(Err(SqlError::at_node(node, format!("window functions are not allowed in {}", self.context))));
        }
        if AggFunc::from_name(&name).is_some() {
            return Some(Err(SqlError::at_node(
                node,
                format!("aggregate functions are not allowed in {}", self.context),
            )));
        }
        if group_window_function(call).is_some() || is_window_bound_function(&name).is_some() {
            return Some(Err(SqlError::at_node(node, format!("{name} is only allowed in a windowed GROUP BY query"))));
        }
        None
    }
}

/// The SELECT list and HAVING of an aggregation: group expressions and
/// aggregate results, and the window bounds when windowed.
struct AggScope<'a> {
    source: &'a SourceSchema,
    qualifiers: &'a [String],
    used: &'a mut Vec<bool>,
    group_exprs: &'a [PhysExpr],
    window_columns: Option<(usize, usize)>,
    agg_base: usize,
    aggregates: &'a mut Vec<AggregateCall>,
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
    fn aggregate(&mut self, func: AggFunc, name: &str, call: &Function, node: &Expr) -> Result<PhysExpr, SqlError> {
        let args = call_args(call, node)?;
        let mut scope = InputScope {
            source: self.source,
            qualifiers: self.qualifiers,
            used: self.used,
            context: "aggregate function arguments",
        };
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
                DataType::Bigint | DataType::Double | DataType::Null => arg.map(|a| cast(a, DataType::Double)),
                t => return Err(SqlError::at_node(node, format!("{name} needs a number, got {t}"))),
            },
            AggFunc::Min | AggFunc::Max if arg_type == DataType::Null => arg.map(|a| cast(a, DataType::Double)),
            _ => arg,
        };
        let input_type = arg.as_ref().map_or(DataType::Bigint, PhysExpr::data_type);
        let call = AggregateCall { func, data_type: func.result_type(input_type), arg, distinct: args.distinct };
        let index = match self.aggregates.iter().position(|a| *a == call) {
            Some(i) => i,
            None => {
                self.aggregates.push(call);
                self.aggregates.len() - 1
            }
        };
        Ok(PhysExpr::Column { index: self.agg_base + index, data_type: self.aggregates[index].data_type })
    }
}

/// The SELECT list of a query with OVER (ROWS ...) window functions.
struct RowsScope<'a> {
    source: &'a SourceSchema,
    qualifiers: &'a [String],
    used: &'a mut Vec<bool>,
    specs: &'a mut Vec<RowsSpec>,
    intermediate: &'a mut Schema,
}

impl Scope for RowsScope<'_> {
    fn resolve_column(&mut self, idents: &[Ident], node: &Expr) -> Result<PhysExpr, SqlError> {
        resolve_input(self.source, self.qualifiers, self.used, idents, node)
    }

    fn resolve_call(&mut self, call: &Function, node: &Expr) -> Option<Result<PhysExpr, SqlError>> {
        let name = call.name.to_string().to_ascii_uppercase();
        let over = match &call.over {
            Some(over) => over,
            None if AggFunc::from_name(&name).is_some() => {
                return Some(Err(SqlError::at_node(
                    node,
                    "aggregates without OVER cannot be mixed with window functions",
                )));
            }
            None => return None,
        };
        Some(self.window_function(&name, call, over, node))
    }
}

impl RowsScope<'_> {
    fn input(&mut self, context: &'static str) -> InputScope<'_> {
        InputScope { source: self.source, qualifiers: self.qualifiers, used: self.used, context }
    }

    fn window_function(
        &mut self,
        name: &str,
        call: &Function,
        over: &WindowType,
        node: &Expr,
    ) -> Result<PhysExpr, SqlError> {
        let WindowType::WindowSpec(spec) = over else {
            return Err(SqlError::at_node(node, "named windows are not supported: write OVER (...)"));
        };
        let kind = match (name, AggFunc::from_name(name)) {
            ("ROW_NUMBER", _) => RowsFunctionKind::RowNumber,
            (_, Some(f)) => RowsFunctionKind::Aggregate(f),
            _ => return Err(SqlError::at_node(node, format!("{name} is not supported as a window function"))),
        };
        let mut partition_by = Vec::with_capacity(spec.partition_by.len());
        for p in &spec.partition_by {
            partition_by.push(compile(p, &mut self.input("PARTITION BY"))?);
        }
        match spec.order_by.as_slice() {
            [] => {}
            [o] => {
                let e = compile(&o.expr, &mut self.input("ORDER BY"))?;
                if matches!(o.options.sort, Some(OrderBySort::Desc | OrderBySort::Using(_))) {
                    return Err(SqlError::at_node(
                        &o.expr,
                        "window ORDER BY must be ascending: rows are taken in arrival order",
                    ));
                }
                let Some(col) = e.as_column() else {
                    return Err(SqlError::at_node(&o.expr, "window ORDER BY must name a column"));
                };
                if let Some(et) = self.source.event_time
                    && et.column != col
                {
                    return Err(SqlError::at_node(
                        &o.expr,
                        format!(
                            "window ORDER BY must be the eventTime column `{}`: rows are taken in arrival (event-time) order",
                            self.source.schema.fields[et.column].name
                        ),
                    ));
                }
            }
            [_, second, ..] => return Err(SqlError::at_node(&second.expr, "window ORDER BY takes one column")),
        }
        let preceding = match &spec.window_frame {
            None => None,
            Some(frame) => {
                if frame.units != WindowFrameUnits::Rows {
                    return Err(SqlError::at_node(node, format!("{} frames are not supported: use ROWS", frame.units)));
                }
                if let Some(end) = &frame.end_bound
                    && !matches!(end, WindowFrameBound::CurrentRow)
                {
                    return Err(SqlError::at_node(
                        node,
                        "the frame must end at CURRENT ROW (a stream cannot look ahead)",
                    ));
                }
                match &frame.start_bound {
                    WindowFrameBound::CurrentRow => Some(0),
                    WindowFrameBound::Preceding(None) => None,
                    WindowFrameBound::Preceding(Some(n)) => {
                        // A bound that names a column is rejected below; resolving it
                        // still marks the column, so the probe needs the schema's width.
                        let mut probe_used = vec![false; self.source.schema.fields.len()];
                        let mut probe = InputScope {
                            source: self.source,
                            qualifiers: self.qualifiers,
                            used: &mut probe_used,
                            context: "ROWS",
                        };
                        match compile(n, &mut probe) {
                            Ok(PhysExpr::Literal { value: sluice_plan::Scalar::Bigint(v), .. })
                                if (0..=1_000_000).contains(&v) =>
                            {
                                Some(v.unsigned_abs())
                            }
                            _ => {
                                return Err(SqlError::at_node(
                                    n.as_ref(),
                                    "ROWS n PRECEDING needs a whole number from 0 to 1000000",
                                ));
                            }
                        }
                    }
                    WindowFrameBound::Following(_) => {
                        return Err(SqlError::at_node(node, "FOLLOWING is not supported (a stream cannot look ahead)"));
                    }
                }
            }
        };
        if let RowsFunctionKind::Aggregate(
            AggFunc::StddevSamp | AggFunc::StddevPop | AggFunc::VarSamp | AggFunc::VarPop,
        ) = kind
        {
            return Err(SqlError::at_node(
                node,
                format!("{name} is not supported over ROWS frames (COUNT, SUM, AVG, MIN, MAX, ROW_NUMBER are)"),
            ));
        }
        let a = call_args(call, node)?;
        if a.distinct {
            return Err(SqlError::at_node(node, "DISTINCT is not supported in window functions"));
        }
        let arg = match (kind, a.star, a.args.as_slice()) {
            (RowsFunctionKind::RowNumber, false, []) => None,
            (RowsFunctionKind::Aggregate(AggFunc::Count), true, []) => None,
            (RowsFunctionKind::Aggregate(f), false, [x]) => {
                let e = compile(x, &mut self.input("window function arguments"))?;
                let numeric = !matches!(f, AggFunc::Count | AggFunc::Min | AggFunc::Max);
                if numeric && !matches!(e.data_type(), DataType::Bigint | DataType::Double | DataType::Null) {
                    return Err(SqlError::at_node(*x, format!("{name} needs a number, got {}", e.data_type())));
                }
                if matches!(f, AggFunc::Min | AggFunc::Max)
                    && !matches!(e.data_type(), DataType::Bigint | DataType::Double | DataType::Timestamp)
                {
                    return Err(SqlError::at_node(
                        *x,
                        format!("{name} OVER needs a number or timestamp, got {}", e.data_type()),
                    ));
                }
                let keep_int = f == AggFunc::Sum || !numeric;
                Some(if keep_int || e.data_type() == DataType::Double { e } else { cast(e, DataType::Double) })
            }
            _ => return Err(SqlError::at_node(node, format!("wrong arguments for {name}"))),
        };
        let kind = match (kind, &arg) {
            (RowsFunctionKind::Aggregate(AggFunc::Count), None) => RowsFunctionKind::Aggregate(AggFunc::CountStar),
            (k, _) => k,
        };
        let data_type = match kind {
            RowsFunctionKind::RowNumber => DataType::Bigint,
            RowsFunctionKind::Aggregate(f) => f.result_type(arg.as_ref().map_or(DataType::Bigint, PhysExpr::data_type)),
        };
        let output = self
            .intermediate
            .push(format!("{}_{}", name.to_ascii_lowercase(), self.intermediate.fields.len()), data_type);
        let function = RowsFunction { kind, arg, data_type, output };
        match self.specs.iter_mut().find(|s| s.partition_by == partition_by && s.preceding == preceding) {
            Some(s) => s.functions.push(function),
            None => self.specs.push(RowsSpec { partition_by, preceding, functions: vec![function] }),
        }
        Ok(PhysExpr::Column { index: output, data_type })
    }
}
