//! ARRAY_AGG and MAP_AGG calls: the values of a group collected into an
//! array or a map. The call's argument is packed into one row —
//! `ROW(x, order keys…)` for `ARRAY_AGG(x ORDER BY k…)`, `ROW(key, value)`
//! for `MAP_AGG(key, value)` — so every aggregate path (windows, updating
//! and signed inputs, checkpoints) carries one argument column as for any
//! other aggregate.

use sqlparser::ast::Expr;

use crate::compile::{CallArgs, Scope, compile};
use crate::diagnostic::Located;
use crate::nested_values::make_row;

use super::top_n::descending;
use sluice_plan::{AggFunc, AggregateCall, DataType, SqlError};

/// The call of ARRAY_AGG or MAP_AGG (`func`, written `name`) with `args`.
pub(super) fn collect_call(
    func: AggFunc,
    name: &str,
    args: &CallArgs<'_>,
    scope: &mut dyn Scope,
    node: &Expr,
) -> Result<AggregateCall, SqlError> {
    if args.distinct || args.star {
        return Err(SqlError::at_node(node, format!("{name}(DISTINCT …) and {name}(*) are not supported")));
    }
    let mut packed = Vec::with_capacity(1 + args.order_by.len());
    let mut order = Vec::with_capacity(args.order_by.len());
    match (func, args.args.as_slice()) {
        (AggFunc::ArrayAgg, [x]) => packed.push(compile(x, scope)?),
        (AggFunc::MapAgg, [k, v]) => {
            let (k, v) = (compile(k, scope)?, compile(v, scope)?);
            if !matches!(k.data_type(), DataType::String | DataType::Bigint) {
                return Err(SqlError::at_node(
                    node,
                    format!("MAP_AGG's keys are string or bigint (a map's keys), got {}", k.data_type()),
                ));
            }
            packed.extend([k, v]);
        }
        (AggFunc::MapAgg, _) => return Err(SqlError::at_node(node, "MAP_AGG takes a key and a value")),
        _ => return Err(SqlError::at_node(node, format!("{name} takes one argument"))),
    }
    for o in args.order_by {
        let key = compile(&o.expr, scope)?;
        order.push(descending(o, &key)?);
        packed.push(key);
    }
    let arg = make_row(packed, node)?;
    let data_type = func.result_type(arg.data_type());
    if data_type == DataType::Null {
        return Err(SqlError::at_node(node, format!("{name}: too many distinct nested types")));
    }
    Ok(AggregateCall { func, arg: Some(arg), distinct: false, data_type, order })
}
