//! Scalar functions: names, argument types, result types.

use crate::diagnostic::Located;
use sqlparser::ast::Expr;

use super::diagnostic::suggestion;
use crate::typing::{cast, compare, expect_string, numeric_unary};
use sluice_plan::{CmpOp, PhysExpr, ScalarFunc, TrimSide};
use sluice_plan::{DataType, Scalar, SqlError};

/// Every function name the engine knows, for "did you mean" suggestions.
pub const KNOWN_FUNCTIONS: &[&str] = &[
    "UPPER",
    "LOWER",
    "LENGTH",
    "CHAR_LENGTH",
    "TRIM",
    "LTRIM",
    "RTRIM",
    "SUBSTRING",
    "SUBSTR",
    "ABS",
    "ROUND",
    "FLOOR",
    "CEIL",
    "CEILING",
    "CONCAT",
    "COALESCE",
    "IFNULL",
    "NULLIF",
    "DATE_PART",
    "EXTRACT",
    "COUNT",
    "SUM",
    "MIN",
    "MAX",
    "AVG",
    "STDDEV",
    "STDDEV_SAMP",
    "STDDEV_POP",
    "VARIANCE",
    "VAR_SAMP",
    "VAR_POP",
    "ROW_NUMBER",
    "TUMBLE",
    "HOP",
    "SESSION",
    "TUMBLE_START",
    "TUMBLE_END",
    "HOP_START",
    "HOP_END",
    "SESSION_START",
    "SESSION_END",
];

/// Builds the call of scalar function `name` (upper case) on compiled `args`.
pub(crate) fn compile_scalar_function(name: &str, args: Vec<PhysExpr>, node: &Expr) -> Result<PhysExpr, SqlError> {
    let count = args.len();
    let arity = |min: usize, max: usize| {
        if count < min || count > max {
            let expected = if min == max { format!("{min}") } else { format!("{min} to {max}") };
            Err(SqlError::at_node(node, format!("{name} takes {expected} argument(s), got {count}")))
        } else {
            Ok(())
        }
    };
    let mut args = args.into_iter();
    let mut next = || args.next().unwrap_or(PhysExpr::literal(Scalar::Null));
    let string_fn = |func: ScalarFunc, e: PhysExpr, data_type: DataType| -> Result<PhysExpr, SqlError> {
        Ok(PhysExpr::Func { func, args: vec![expect_string(e, node, name)?], data_type })
    };
    match name {
        "UPPER" | "UCASE" => {
            arity(1, 1)?;
            string_fn(ScalarFunc::Upper, next(), DataType::String)
        }
        "LOWER" | "LCASE" => {
            arity(1, 1)?;
            string_fn(ScalarFunc::Lower, next(), DataType::String)
        }
        "LENGTH" | "CHAR_LENGTH" | "CHARACTER_LENGTH" | "LEN" => {
            arity(1, 1)?;
            string_fn(ScalarFunc::Length, next(), DataType::Bigint)
        }
        "TRIM" | "BTRIM" => {
            arity(1, 1)?;
            string_fn(ScalarFunc::Trim(TrimSide::Both), next(), DataType::String)
        }
        "LTRIM" => {
            arity(1, 1)?;
            string_fn(ScalarFunc::Trim(TrimSide::Leading), next(), DataType::String)
        }
        "RTRIM" => {
            arity(1, 1)?;
            string_fn(ScalarFunc::Trim(TrimSide::Trailing), next(), DataType::String)
        }
        "SUBSTRING" | "SUBSTR" => {
            arity(2, 3)?;
            let s = expect_string(next(), node, name)?;
            let mut list = vec![s];
            for _ in 1..3 {
                if let Some(a) = args.next() {
                    if !matches!(a.data_type(), DataType::Bigint | DataType::Null) {
                        return Err(SqlError::at_node(
                            node,
                            format!("{name} positions must be bigint, got {}", a.data_type()),
                        ));
                    }
                    list.push(cast(a, DataType::Bigint));
                }
            }
            Ok(PhysExpr::Func { func: ScalarFunc::Substring, args: list, data_type: DataType::String })
        }
        "ABS" => {
            arity(1, 1)?;
            numeric_unary(name, ScalarFunc::Abs, next(), node)
        }
        "FLOOR" => {
            arity(1, 1)?;
            numeric_unary(name, ScalarFunc::Floor, next(), node)
        }
        "CEIL" | "CEILING" => {
            arity(1, 1)?;
            numeric_unary(name, ScalarFunc::Ceil, next(), node)
        }
        "ROUND" => {
            arity(1, 2)?;
            let x = next();
            let PhysExpr::Func { args: mut list, data_type, .. } = numeric_unary(name, ScalarFunc::Round, x, node)?
            else {
                return Err(SqlError::at_node(node, "ROUND"));
            };
            if let Some(d) = args.next() {
                if !matches!(d.data_type(), DataType::Bigint | DataType::Null) {
                    return Err(SqlError::at_node(node, format!("ROUND digits must be bigint, got {}", d.data_type())));
                }
                list.push(cast(d, DataType::Bigint));
            }
            Ok(PhysExpr::Func { func: ScalarFunc::Round, args: list, data_type })
        }
        "CONCAT" => {
            if args.len() == 0 {
                return Err(SqlError::at_node(node, "CONCAT takes at least one argument"));
            }
            Ok(PhysExpr::Concat(args.map(|a| cast(a, DataType::String)).collect()))
        }
        "COALESCE" | "IFNULL" | "NVL" => {
            let list: Vec<PhysExpr> = args.collect();
            if list.is_empty() || (name != "COALESCE" && list.len() != 2) {
                return Err(SqlError::at_node(
                    node,
                    format!("{name} takes {} arguments", if name == "COALESCE" { "one or more" } else { "2" }),
                ));
            }
            let mut data_type = DataType::Null;
            for a in &list {
                data_type = data_type.common(a.data_type()).ok_or_else(|| {
                    SqlError::at_node(
                        node,
                        format!("{name} arguments have different types: {data_type} and {}", a.data_type()),
                    )
                })?;
            }
            Ok(PhysExpr::Coalesce { args: list.into_iter().map(|a| cast(a, data_type)).collect(), data_type })
        }
        "NULLIF" => {
            arity(2, 2)?;
            let a = next();
            let b = next();
            let data_type = a.data_type();
            let eq = compare(a.clone(), CmpOp::Eq, b, node)?;
            Ok(PhysExpr::Case {
                whens: vec![(eq, PhysExpr::Literal { value: Scalar::Null, data_type })],
                otherwise: Box::new(a),
                data_type,
            })
        }
        _ => Err(SqlError::at_node(
            node,
            format!("unknown function {name}{}", suggestion(name, KNOWN_FUNCTIONS.iter().copied())),
        )),
    }
}
