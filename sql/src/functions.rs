//! Scalar functions: names, argument types, result types.

use crate::diagnostic::Located;
use sqlparser::ast::Expr;

use super::diagnostic::suggestion;
use crate::typing::{arith, cast, compare, expect_string, numeric_unary};
use sluice_plan::{ArithOp, CmpOp, PhysExpr, ScalarFunc, TrimSide};
use sluice_plan::{DataType, Scalar, SqlError};

/// Every function name the engine knows, for "did you mean" suggestions.
/// A test below keeps it in step with the names the compilers take, both
/// ways.
pub const KNOWN_FUNCTIONS: &[&str] = &[
    "UPPER",
    "UCASE",
    "LOWER",
    "LCASE",
    "LENGTH",
    "CHAR_LENGTH",
    "CHARACTER_LENGTH",
    "LEN",
    "TRIM",
    "BTRIM",
    "LTRIM",
    "RTRIM",
    "SUBSTRING",
    "SUBSTR",
    "ABS",
    "MOD",
    "ROUND",
    "FLOOR",
    "CEIL",
    "CEILING",
    "CONCAT",
    "SPLIT_INDEX",
    "REGEXP_EXTRACT",
    "COUNT_CHAR",
    "DATE_FORMAT",
    "HOUR",
    "MINUTE",
    "SECOND",
    "YEAR",
    "MONTH",
    "DAYOFMONTH",
    "COALESCE",
    "IFNULL",
    "NVL",
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
        // Calcite's (and Flink's) MOD(a, b): `a % b`, as the Nexmark
        // reference queries write it.
        "MOD" => {
            arity(2, 2)?;
            let a = next();
            arith(a, ArithOp::Mod, next(), node)
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
        "SPLIT_INDEX" => {
            arity(3, 3)?;
            let s = expect_string(next(), node, name)?;
            let sep = constant_string(next(), name, "separator", node)?;
            let index = constant_int(&next(), name, "index", node)?;
            Ok(PhysExpr::Func {
                func: ScalarFunc::SplitIndex { sep, index },
                args: vec![s],
                data_type: DataType::String,
            })
        }
        "REGEXP_EXTRACT" => {
            arity(2, 3)?;
            let s = expect_string(next(), node, name)?;
            let pattern = constant_string(next(), name, "pattern", node)?;
            let group = if count == 3 { constant_int(&next(), name, "group", node)? } else { 0 };
            let re = regex::Regex::new(&pattern)
                .map_err(|e| SqlError::at_node(node, format!("REGEXP_EXTRACT: invalid pattern {pattern:?}: {e}")))?;
            let group = usize::try_from(group).ok().filter(|g| *g < re.captures_len()).ok_or_else(|| {
                SqlError::at_node(
                    node,
                    format!(
                        "REGEXP_EXTRACT: group {group} does not exist in {pattern:?} ({} groups)",
                        re.captures_len() - 1
                    ),
                )
            })?;
            Ok(PhysExpr::Func {
                func: ScalarFunc::RegexpExtract { pattern, group },
                args: vec![s],
                data_type: DataType::String,
            })
        }
        "COUNT_CHAR" => {
            arity(2, 2)?;
            let s = expect_string(next(), node, name)?;
            let c = constant_string(next(), name, "character", node)?;
            let mut chars = c.chars();
            let (Some(ch), None) = (chars.next(), chars.next()) else {
                return Err(SqlError::at_node(node, format!("COUNT_CHAR counts one character, got {c:?}")));
            };
            Ok(PhysExpr::Func { func: ScalarFunc::CountChar(ch), args: vec![s], data_type: DataType::Bigint })
        }
        "DATE_FORMAT" => {
            arity(2, 2)?;
            let ts = next();
            let ts = match ts.data_type() {
                DataType::Timestamp => ts,
                DataType::Null | DataType::Bigint => cast(ts, DataType::Timestamp),
                t => return Err(SqlError::at_node(node, format!("DATE_FORMAT needs a timestamp, got {t}"))),
            };
            let pattern = constant_string(next(), name, "pattern", node)?;
            Ok(PhysExpr::Func { func: ScalarFunc::DateFormat(pattern), args: vec![ts], data_type: DataType::String })
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
        // `EXTRACT(HOUR FROM ts)` is parsed as its own expression; written
        // as a call, it would otherwise be an "unknown function EXTRACT".
        "EXTRACT" => Err(SqlError::at_node(
            node,
            "EXTRACT is written EXTRACT(<field> FROM <timestamp>), for example EXTRACT(HOUR FROM ts)",
        )),
        "ROW_NUMBER" => Err(SqlError::at_node(
            node,
            "ROW_NUMBER needs OVER (PARTITION BY … ORDER BY …), filtered by its rank in an outer query (a top-N)",
        )),
        "TUMBLE" | "HOP" | "SESSION" => Err(SqlError::at_node(
            node,
            format!("{name}(…) is a window: it goes in GROUP BY, as in GROUP BY {name}(<event time>, INTERVAL …), key"),
        )),
        "TUMBLE_START" | "TUMBLE_END" | "HOP_START" | "HOP_END" | "SESSION_START" | "SESSION_END" => {
            Err(SqlError::at_node(
                node,
                format!("{name} is the bound of the window the query groups by: it needs that window in GROUP BY"),
            ))
        }
        _ => Err(SqlError::at_node(
            node,
            format!("unknown function {name}{}", suggestion(name, KNOWN_FUNCTIONS.iter().copied())),
        )),
    }
}

/// A function argument that must be a constant string (a separator, a
/// pattern): known when the query is planned, so checked then.
fn constant_string(e: PhysExpr, name: &str, what: &str, node: &Expr) -> Result<String, SqlError> {
    match e {
        PhysExpr::Literal { value: Scalar::String(s), .. } => Ok(s),
        _ => Err(SqlError::at_node(node, format!("{name}: the {what} must be a constant string"))),
    }
}

/// A function argument that must be a constant integer (an index, a group).
fn constant_int(e: &PhysExpr, name: &str, what: &str, node: &Expr) -> Result<i64, SqlError> {
    match e {
        PhysExpr::Literal { value: Scalar::Bigint(i), .. } => Ok(*i),
        _ => Err(SqlError::at_node(node, format!("{name}: the {what} must be a constant integer"))),
    }
}

#[cfg(test)]
mod tests {
    use sluice_crds::{ColumnType, SourceSpec};

    use super::KNOWN_FUNCTIONS;

    /// The names the scalar compiler's `match` takes, read from this file.
    fn compiled_names() -> Vec<&'static str> {
        let source = include_str!("functions.rs");
        let start = source.find("    match name {").unwrap();
        let end = start + source[start..].find("        _ => Err(").unwrap();
        let mut names = Vec::new();
        for line in source[start..end].lines().filter(|l| l.starts_with("        \"") && l.contains("=>")) {
            let arm = &line[..line.find("=>").unwrap()];
            names.extend(arm.split('|').map(|n| n.trim().trim_matches('"')));
        }
        names
    }

    #[test]
    fn the_known_names_are_the_names_the_compilers_take() {
        let compiled = compiled_names();
        assert!(compiled.len() > 25, "{compiled:?}");
        for name in &compiled {
            assert!(KNOWN_FUNCTIONS.contains(name), "{name} compiles but \"did you mean\" never offers it");
        }
        // Each known name is one some compiler takes (scalar, aggregate,
        // time part, window): never reported as unknown.
        let source = SourceSpec::table("t", &[("x", ColumnType::Bigint, true)]);
        for name in KNOWN_FUNCTIONS {
            if let Err(e) = crate::plan_query(&format!("SELECT {name}(x) FROM t"), std::slice::from_ref(&source)) {
                assert!(!e.message.contains("unknown function"), "{name}: {e}");
            }
        }
        let e = crate::plan_query("SELECT UPPPER(x) FROM t", &[source]).unwrap_err();
        assert!(e.message.contains("unknown function UPPPER") && e.message.contains("UPPER"), "{e}");
    }
}
