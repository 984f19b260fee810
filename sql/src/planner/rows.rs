//! Planning analytic functions over ROWS frames (`OVER (PARTITION BY …
//! ROWS n PRECEDING)`), and the scope they are resolved in.

use crate::diagnostic::Located;
use sqlparser::ast::{Expr, Function, Ident, OrderBySort, WindowFrameBound, WindowFrameUnits, WindowType};

use crate::compile::{Scope, call_args, compile};
use crate::typing::cast;
use sluice_plan::{
    AggFunc, EmitMode, OperatorPlan, OutputColumn, Partitioning, RowsFunction, RowsFunctionKind, RowsPlan, RowsSpec,
};
use sluice_plan::{DataType, PhysExpr, Schema, SourceSchema, SqlError};

use super::query::Planner;
use super::scope::{InputScope, resolve_input, select_list};

impl Planner<'_> {
    #[allow(clippy::type_complexity)]
    pub(super) fn plan_rows(
        &mut self,
    ) -> Result<
        (OperatorPlan, Schema, Vec<OutputColumn>, Vec<OutputColumn>, Option<PhysExpr>, Partitioning, EmitMode),
        SqlError,
    > {
        let mut intermediate = self.source.schema.clone();
        let mut specs: Vec<RowsSpec> = Vec::new();
        let items = self.select.projection.clone();
        let columns = self.source.column_names();
        let outputs = select_list(
            &items,
            &columns,
            &mut RowsScope {
                source: &self.source,
                qualifiers: &self.qualifiers,
                used: &mut self.used,
                specs: &mut specs,
                intermediate: &mut intermediate,
            },
        )?;
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
            OperatorPlan::Rows(RowsPlan { specs, upsert_key: Vec::new() }),
            intermediate,
            outputs,
            keys,
            None,
            Partitioning::KeyedBy(keyed.unwrap_or_default()),
            EmitMode::PerRecord,
        ))
    }
}

/// The SELECT list of a query with OVER (ROWS ...) window functions.
pub(super) struct RowsScope<'a> {
    pub(super) source: &'a SourceSchema,
    pub(super) qualifiers: &'a [String],
    pub(super) used: &'a mut Vec<bool>,
    pub(super) specs: &'a mut Vec<RowsSpec>,
    pub(super) intermediate: &'a mut Schema,
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
    pub(super) fn input(&mut self, context: &'static str) -> InputScope<'_> {
        InputScope { source: self.source, qualifiers: self.qualifiers, used: self.used, context }
    }

    pub(super) fn window_function(
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
            (_, Some(AggFunc::ArrayAgg | AggFunc::MapAgg)) => {
                return Err(SqlError::at_node(
                    node,
                    format!("{name} is not supported as a window function (OVER): aggregate with GROUP BY"),
                ));
            }
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
                if e.data_type().is_nested() {
                    return Err(SqlError::at_node(
                        &o.expr,
                        format!("{} values have no order: ORDER BY a field or an element", e.data_type()),
                    ));
                }
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
                if numeric && !e.data_type().is_numeric() && e.data_type() != DataType::Null {
                    return Err(SqlError::at_node(*x, format!("{name} needs a number, got {}", e.data_type())));
                }
                if matches!(f, AggFunc::Min | AggFunc::Max)
                    && !matches!(
                        e.data_type(),
                        DataType::Bigint | DataType::Double | DataType::Timestamp | DataType::Decimal(..)
                    )
                {
                    return Err(SqlError::at_node(
                        *x,
                        format!("{name} OVER needs a number or timestamp, got {}", e.data_type()),
                    ));
                }
                // SUM, MIN and MAX of a decimal stay exact; AVG and the
                // moments of one are doubles here. A frame keeps its values
                // as i64s, so a wider decimal is refused, naming the fix.
                let keep_int = f == AggFunc::Sum || !numeric;
                if keep_int && e.data_type().is_wide() {
                    return Err(SqlError::at_node(
                        *x,
                        format!(
                            "{name} OVER a ROWS frame takes decimals of up to 18 digits, got {}: cast the argument \
                             to DECIMAL(18, s) or DOUBLE",
                            e.data_type()
                        ),
                    ));
                }
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
            None => self.specs.push(RowsSpec { partition_by, order_by: None, preceding, functions: vec![function] }),
        }
        Ok(PhysExpr::Column { index: output, data_type })
    }
}
