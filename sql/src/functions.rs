//! Scalar functions: names, argument types, result types.

use crate::diagnostic::Located;
use sqlparser::ast::Expr;

use super::diagnostic::suggestion;
use crate::nested_values::NESTED_FUNCTIONS;
use crate::typing::{
    arith, cast, coerce_literal_to, common_type, compare, expect_bigint, expect_string, expect_timestamp, numeric_unary,
};
use sluice_plan::{ArithOp, CmpOp, DigestKind, PhysExpr, ScalarFunc, TimePart, TrimSide};
use sluice_plan::{DataType, Scalar, SqlError};

/// Every function name the engine knows, for "did you mean" suggestions,
/// beside [`NESTED_FUNCTIONS`] (see [`is_known`]). A test below keeps it in
/// step with the names the compilers take, both ways.
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
    "CONCAT_WS",
    "REPLACE",
    "LPAD",
    "RPAD",
    "JSON_VALUE",
    "JSON_QUERY",
    "POWER",
    "POW",
    "SQRT",
    "EXP",
    "LN",
    "LOG10",
    "SIGN",
    "LEFT",
    "RIGHT",
    "REVERSE",
    "REPEAT",
    "SPLIT_PART",
    "STARTS_WITH",
    "STARTSWITH",
    "STRPOS",
    "SPLIT_INDEX",
    "REGEXP_EXTRACT",
    "REGEXP_REPLACE",
    "MD5",
    "SHA1",
    "SHA256",
    "SHA2",
    "COUNT_CHAR",
    "DATE_FORMAT",
    "DATE_TRUNC",
    "TO_TIMESTAMP",
    "TIMESTAMPADD",
    "TIMESTAMPDIFF",
    "CONVERT_TZ",
    "FROM_UTC_TIMESTAMP",
    "TO_UTC_TIMESTAMP",
    "INITCAP",
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
    "GREATEST",
    "LEAST",
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

/// A number argument as a double (math over doubles, as PostgreSQL's
/// `double precision` functions).
fn expect_number(e: PhysExpr, node: &Expr, name: &str) -> Result<PhysExpr, SqlError> {
    match e.data_type() {
        DataType::Bigint | DataType::Double | DataType::Null => Ok(cast(e, DataType::Double)),
        t => Err(SqlError::at_node(node, format!("{name} needs a number, got {t}"))),
    }
}

/// Whether `name` (upper case) is a function some compiler takes.
pub(crate) fn is_known(name: &str) -> bool {
    KNOWN_FUNCTIONS.contains(&name) || NESTED_FUNCTIONS.contains(&name)
}

/// Names other SQL dialects and spreadsheets use for functions Sluice has
/// under another name: too far apart to be caught as typos.
const OTHER_NAMES: &[(&str, &str)] = &[
    ("AVERAGE", "AVG"),
    ("MEAN", "AVG"),
    ("MINIMUM", "MIN"),
    ("MAXIMUM", "MAX"),
    ("TOTAL", "SUM"),
    ("TO_CHAR", "DATE_FORMAT"),
    ("STRFTIME", "DATE_FORMAT"),
    ("FORMAT_TIMESTAMP", "DATE_FORMAT"),
];

/// " (did you mean `X`?)" for an unknown function `name` (upper case): the
/// function other dialects call so, or the nearest known name.
pub(crate) fn function_suggestion(name: &str) -> String {
    match OTHER_NAMES.iter().find(|(other, _)| *other == name) {
        Some((_, ours)) if is_known(ours) => format!(" (did you mean `{ours}`?)"),
        _ => suggestion(name, KNOWN_FUNCTIONS.iter().chain(NESTED_FUNCTIONS).copied()),
    }
}

/// Builds the call of scalar function `name` (upper case) on compiled `args`.
pub(crate) fn compile_scalar_function(name: &str, args: Vec<PhysExpr>, node: &Expr) -> Result<PhysExpr, SqlError> {
    if NESTED_FUNCTIONS.contains(&name) {
        return crate::nested_values::nested_function(name, args, node);
    }
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
            for a in args {
                list.push(expect_bigint(a, node, &format!("{name} positions"))?);
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
            let mut places = 0;
            if let Some(d) = args.next() {
                let d = expect_bigint(d, node, "ROUND digits")?;
                if matches!(data_type, DataType::Decimal(..)) {
                    // The result's scale is the digits kept: a constant.
                    places = constant_int(&d, name, "digits of a decimal", node)?;
                }
                list.push(d);
            }
            let data_type = match data_type {
                // ROUND of a decimal gets the scale of the places kept
                // (PostgreSQL's), not its argument's.
                t @ DataType::Decimal(..) => t.decimal_round(places),
                t => t,
            };
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
        "REGEXP_REPLACE" => {
            arity(3, 3)?;
            let s = expect_string(next(), node, name)?;
            let pattern = constant_string(next(), name, "pattern", node)?;
            let replacement = constant_string(next(), name, "replacement", node)?;
            regex::Regex::new(&pattern)
                .map_err(|e| SqlError::at_node(node, format!("REGEXP_REPLACE: invalid pattern {pattern:?}: {e}")))?;
            Ok(PhysExpr::Func {
                func: ScalarFunc::RegexpReplace { pattern, replacement },
                args: vec![s],
                data_type: DataType::String,
            })
        }
        "MD5" | "SHA1" | "SHA256" => {
            arity(1, 1)?;
            let kind = match name {
                "MD5" => DigestKind::Md5,
                "SHA1" => DigestKind::Sha1,
                _ => DigestKind::Sha256,
            };
            string_fn(ScalarFunc::Digest(kind), next(), DataType::String)
        }
        // Flink's, MySQL's and Spark's SHA2(s, bits); 0 is 256, as MySQL
        // and Spark read it. The length chooses the function: a constant.
        "SHA2" => {
            arity(2, 2)?;
            let s = next();
            let bits = constant_int(&next(), name, "bit length", node)?;
            let kind = match bits {
                224 => DigestKind::Sha224,
                0 | 256 => DigestKind::Sha256,
                384 => DigestKind::Sha384,
                512 => DigestKind::Sha512,
                _ => {
                    return Err(SqlError::at_node(
                        node,
                        format!("SHA2: a bit length of {bits}; use 224, 256, 384 or 512 (0 is 256)"),
                    ));
                }
            };
            string_fn(ScalarFunc::Digest(kind), s, DataType::String)
        }
        "INITCAP" => {
            arity(1, 1)?;
            string_fn(ScalarFunc::Initcap, next(), DataType::String)
        }
        // MySQL's CONVERT_TZ(ts, from, to) (Flink's takes and gives text);
        // Spark's and Hive's FROM_UTC_TIMESTAMP and TO_UTC_TIMESTAMP.
        "CONVERT_TZ" | "FROM_UTC_TIMESTAMP" | "TO_UTC_TIMESTAMP" => {
            let zones = if name == "CONVERT_TZ" { 2 } else { 1 };
            arity(1 + zones, 1 + zones)?;
            let ts = expect_timestamp(next(), node, name)?;
            let mut zone = || zone_named(next(), name, node);
            let (from, to) = match name {
                "CONVERT_TZ" => (zone()?, zone()?),
                "FROM_UTC_TIMESTAMP" => (None, zone()?),
                _ => (zone()?, None),
            };
            Ok(convert_tz(ts, from, to))
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
            let ts = expect_timestamp(next(), node, name)?;
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
            let data_type = common_type(&list, name, node)?;
            Ok(PhysExpr::Coalesce { args: list.into_iter().map(|a| cast(a, data_type)).collect(), data_type })
        }
        "REPLACE" => {
            arity(3, 3)?;
            let list = args.map(|a| expect_string(a, node, name)).collect::<Result<_, _>>()?;
            Ok(PhysExpr::Func { func: ScalarFunc::Replace, args: list, data_type: DataType::String })
        }
        "CONCAT_WS" => {
            if count == 0 {
                return Err(SqlError::at_node(node, "CONCAT_WS takes a separator and the strings to join"));
            }
            let list = args.map(|a| cast(a, DataType::String)).collect();
            Ok(PhysExpr::Func { func: ScalarFunc::ConcatWs, args: list, data_type: DataType::String })
        }
        "LPAD" | "RPAD" => {
            arity(3, 3)?;
            let s = expect_string(next(), node, name)?;
            let len = expect_bigint(next(), node, &format!("{name} length"))?;
            let fill = expect_string(next(), node, name)?;
            let func = if name == "LPAD" { ScalarFunc::Lpad } else { ScalarFunc::Rpad };
            Ok(PhysExpr::Func { func, args: vec![s, len, fill], data_type: DataType::String })
        }
        "GREATEST" | "LEAST" => {
            if count == 0 {
                return Err(SqlError::at_node(node, format!("{name} takes one or more arguments")));
            }
            // Among timestamps, a string constant is a timestamp, as in a
            // comparison.
            let list: Vec<PhysExpr> = args.collect();
            let list = if list.iter().any(|a| a.data_type() == DataType::Timestamp) {
                list.into_iter()
                    .map(|a| match a.data_type() {
                        DataType::String if a.is_literal() => coerce_literal_to(a, DataType::Timestamp, node),
                        _ => Ok(a),
                    })
                    .collect::<Result<_, _>>()?
            } else {
                list
            };
            let data_type = match common_type(&list, name, node)? {
                DataType::Boolean => {
                    return Err(SqlError::at_node(node, format!("{name} compares numbers, strings or timestamps")));
                }
                t => t,
            };
            let func = if name == "GREATEST" { ScalarFunc::Greatest } else { ScalarFunc::Least };
            Ok(PhysExpr::Func { func, args: list.into_iter().map(|a| cast(a, data_type)).collect(), data_type })
        }
        "DATE_TRUNC" => {
            arity(2, 2)?;
            let unit = constant_string(next(), name, "unit", node)?;
            let unit = time_part_named(&unit)
                .filter(|p| {
                    !matches!(p, TimePart::DayOfWeek | TimePart::DayOfYear | TimePart::Millisecond | TimePart::Epoch)
                })
                .ok_or_else(|| {
                    SqlError::at_node(
                        node,
                        format!(
                            "DATE_TRUNC: unknown unit {unit:?}; the units are second, minute, hour, day, week, \
                             month, quarter and year"
                        ),
                    )
                })?;
            let ts = expect_timestamp(next(), node, name)?;
            Ok(PhysExpr::Func { func: ScalarFunc::DateTrunc(unit), args: vec![ts], data_type: DataType::Timestamp })
        }
        // Flink's TO_TIMESTAMP(s [, format]). Without a format it is a CAST
        // (the same parser, NULL where it does not parse).
        "TO_TIMESTAMP" => {
            arity(1, 2)?;
            let s = expect_string(next(), node, name)?;
            if count == 1 {
                return Ok(cast(s, DataType::Timestamp));
            }
            let format = constant_string(next(), name, "format", node)?;
            Ok(PhysExpr::Func { func: ScalarFunc::ToTimestamp(format), args: vec![s], data_type: DataType::Timestamp })
        }
        "POWER" | "POW" => {
            arity(2, 2)?;
            let (x, y) = (expect_number(next(), node, name)?, expect_number(next(), node, name)?);
            Ok(PhysExpr::Func { func: ScalarFunc::Power, args: vec![x, y], data_type: DataType::Double })
        }
        "SQRT" | "EXP" | "LN" | "LOG10" => {
            arity(1, 1)?;
            let func = match name {
                "SQRT" => ScalarFunc::Sqrt,
                "EXP" => ScalarFunc::Exp,
                "LN" => ScalarFunc::Ln,
                _ => ScalarFunc::Log10,
            };
            Ok(PhysExpr::Func { func, args: vec![expect_number(next(), node, name)?], data_type: DataType::Double })
        }
        "SIGN" => {
            arity(1, 1)?;
            numeric_unary(name, ScalarFunc::Sign, next(), node)
        }
        "LEFT" | "RIGHT" | "REPEAT" => {
            arity(2, 2)?;
            let s = expect_string(next(), node, name)?;
            let k = expect_bigint(next(), node, &format!("{name} count"))?;
            let func = match name {
                "LEFT" => ScalarFunc::Left,
                "RIGHT" => ScalarFunc::Right,
                _ => ScalarFunc::Repeat,
            };
            Ok(PhysExpr::Func { func, args: vec![s, k], data_type: DataType::String })
        }
        "REVERSE" => {
            arity(1, 1)?;
            string_fn(ScalarFunc::Reverse, next(), DataType::String)
        }
        "SPLIT_PART" => {
            arity(3, 3)?;
            let (s, sep) = (expect_string(next(), node, name)?, expect_string(next(), node, name)?);
            let index = expect_bigint(next(), node, "SPLIT_PART index")?;
            Ok(PhysExpr::Func { func: ScalarFunc::SplitPart, args: vec![s, sep, index], data_type: DataType::String })
        }
        "STARTS_WITH" | "STARTSWITH" | "STRPOS" => {
            arity(2, 2)?;
            let (s, other) = (expect_string(next(), node, name)?, expect_string(next(), node, name)?);
            let (func, data_type) = if name == "STRPOS" {
                (ScalarFunc::Strpos, DataType::Bigint)
            } else {
                (ScalarFunc::StartsWith, DataType::Boolean)
            };
            Ok(PhysExpr::Func { func, args: vec![s, other], data_type })
        }
        "JSON_VALUE" | "JSON_QUERY" => {
            arity(2, 2)?;
            let json = expect_string(next(), node, name)?;
            let path = constant_string(next(), name, "path", node)?;
            let steps = sluice_plan::parse_json_path(&path)
                .map_err(|e| SqlError::at_node(node, format!("{name}: invalid path {path:?}: {e}")))?;
            let func = if name == "JSON_VALUE" { ScalarFunc::JsonValue(steps) } else { ScalarFunc::JsonQuery(steps) };
            Ok(PhysExpr::Func { func, args: vec![json], data_type: DataType::String })
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
        _ => Err(SqlError::at_node(node, format!("unknown function {name}{}", function_suggestion(name)))),
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

/// A time zone argument: a constant text naming a zone the bundled
/// database has, or an offset; `None` for UTC. An unknown name is an
/// error with the nearest known one.
pub(crate) fn zone_named(e: PhysExpr, name: &str, node: &Expr) -> Result<Option<String>, SqlError> {
    let zone = constant_string(e, name, "time zone", node)?;
    match sluice_plan::time_zone::time_zone(&zone) {
        Some(_) if sluice_plan::time_zone::is_utc(&zone) => Ok(None),
        Some(_) => Ok(Some(zone)),
        None => {
            let names = sluice_plan::time_zone::zone_names();
            let hint = suggestion(&zone, names.iter().map(String::as_str));
            Err(SqlError::at_node(
                node,
                format!(
                    "{name}: unknown time zone {zone:?}{hint}; a zone is an IANA name such as 'Europe/Paris', or an \
                     offset such as '+05:30'"
                ),
            ))
        }
    }
}

/// `ts` moved from zone `from`'s wall clock to `to`'s (`None`: UTC); the
/// same zone twice is `ts`.
pub(crate) fn convert_tz(ts: PhysExpr, from: Option<String>, to: Option<String>) -> PhysExpr {
    if from == to {
        return ts;
    }
    PhysExpr::Func { func: ScalarFunc::ConvertTz { from, to }, args: vec![ts], data_type: DataType::Timestamp }
}

/// A function argument that must be a constant integer (an index, a group).
fn constant_int(e: &PhysExpr, name: &str, what: &str, node: &Expr) -> Result<i64, SqlError> {
    match e {
        PhysExpr::Literal { value: Scalar::Bigint(i), .. } => Ok(*i),
        _ => Err(SqlError::at_node(node, format!("{name}: the {what} must be a constant integer"))),
    }
}

pub(crate) fn time_part_named(name: &str) -> Option<TimePart> {
    Some(match name.to_ascii_lowercase().trim_end_matches('s') {
        "year" => TimePart::Year,
        "quarter" => TimePart::Quarter,
        "month" => TimePart::Month,
        "week" => TimePart::Week,
        "day" => TimePart::Day,
        "dow" | "dayofweek" => TimePart::DayOfWeek,
        "doy" | "dayofyear" => TimePart::DayOfYear,
        "hour" => TimePart::Hour,
        "minute" => TimePart::Minute,
        "second" => TimePart::Second,
        "millisecond" => TimePart::Millisecond,
        "epoch" => TimePart::Epoch,
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use sluice_crds::{ColumnType, SourceSpec};
    use sluice_plan::{PhysExpr, Scalar, ScalarFunc, TimePart};

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

    fn source() -> SourceSpec {
        SourceSpec::table(
            "t",
            &[
                ("s", ColumnType::String, false),
                ("n", ColumnType::Bigint, false),
                ("d", ColumnType::Double, false),
                ("ts", ColumnType::Timestamp, false),
            ],
        )
    }

    /// The expression `expr` compiles to, over `t`.
    fn compiled(expr: &str) -> Result<PhysExpr, String> {
        let plan = crate::plan_query(&format!("SELECT {expr} AS v FROM t"), &[source()]).map_err(|e| e.to_string())?;
        Ok(plan.outputs[0].expr.clone())
    }

    /// The value of a constant expression, folded when the query is planned.
    fn folded(expr: &str) -> Scalar {
        match compiled(expr) {
            Ok(PhysExpr::Literal { value, .. }) => value,
            other => panic!("{expr}: not folded: {other:?}"),
        }
    }

    fn error(expr: &str) -> String {
        compiled(expr).expect_err(expr)
    }

    fn text(s: &str) -> Scalar {
        Scalar::String(s.into())
    }

    #[test]
    fn new_string_functions_fold_with_the_engine_kernels() {
        assert_eq!(folded("REPLACE('a.b.c', '.', '::')"), text("a::b::c"));
        assert_eq!(folded("REPLACE('abc', '', 'x')"), text("abc"));
        assert_eq!(folded("REPLACE(NULL, 'a', 'b')"), Scalar::Null);
        assert_eq!(folded("CONCAT_WS('-', 'a', NULL, 'b', 1)"), text("a-b-1"));
        assert_eq!(folded("CONCAT_WS(NULL, 'a', 'b')"), Scalar::Null);
        assert_eq!(folded("LPAD('hi', 4, '??')"), text("??hi"));
        assert_eq!(folded("RPAD('héllo', 2, '.')"), text("hé"));
        assert_eq!(folded("LPAD('hi', -1, '?')"), Scalar::Null);
        assert_eq!(folded("RPAD('hi', 3, '')"), Scalar::Null);
        assert_eq!(folded("JSON_VALUE('{\"a\": {\"b\": [7, \"x\"]}}', '$.a.b[1]')"), text("x"));
        assert_eq!(folded("JSON_VALUE('{\"a\": 1}', '$.b')"), Scalar::Null);
    }

    #[test]
    fn greatest_and_least_take_one_type_family() {
        assert_eq!(folded("GREATEST(1, 2.5, -3)"), Scalar::Double(2.5));
        assert_eq!(folded("LEAST(3, 2, 7)"), Scalar::Bigint(2));
        assert_eq!(folded("GREATEST('apple', 'pear')"), text("pear"));
        assert_eq!(folded("GREATEST(1, NULL)"), Scalar::Null);
        assert_eq!(
            folded("LEAST(TIMESTAMP '2024-01-15 10:00:00', '2024-01-01T00:00:00Z')"),
            Scalar::Timestamp(1_704_067_200_000)
        );
        // Over columns: bigint with double is double.
        let e = compiled("GREATEST(n, d)").unwrap();
        assert_eq!(e.data_type(), sluice_plan::DataType::Double);
        let batch = sluice_plan::Batch::new(
            vec![
                sluice_plan::Column::with_capacity(sluice_plan::DataType::String, 0),
                sluice_plan::Column::ints(sluice_plan::DataType::Bigint, vec![3, -1]),
                sluice_plan::Column::floats(vec![2.5, 0.5]),
                sluice_plan::Column::ints(sluice_plan::DataType::Timestamp, vec![0, 0]),
            ],
            2,
        );
        let got = sluice_plan::eval(&e, &batch).unwrap().into_column(2);
        assert_eq!((got.scalar(0), got.scalar(1)), (Scalar::Double(3.0), Scalar::Double(0.5)));
        assert_eq!(compiled("LEAST(ts, n)").unwrap().data_type(), sluice_plan::DataType::Timestamp);
    }

    #[test]
    fn date_trunc_and_to_timestamp() {
        let ts = |s: &str| Scalar::Timestamp(sluice_plan::time::parse_timestamp_ms(s).unwrap());
        let at = "TIMESTAMP '2024-08-14 13:45:07.250'";
        assert_eq!(folded(&format!("DATE_TRUNC('week', {at})")), ts("2024-08-12"));
        assert_eq!(folded(&format!("DATE_TRUNC('Quarter', {at})")), ts("2024-07-01"));
        assert_eq!(folded("DATE_TRUNC('minute', '2024-08-14 13:45:07')"), ts("2024-08-14T13:45:00Z"));
        assert!(matches!(
            compiled("DATE_TRUNC('HOUR', ts)"),
            Ok(PhysExpr::Func { func: ScalarFunc::DateTrunc(TimePart::Hour), .. })
        ));
        assert_eq!(folded("TO_TIMESTAMP('2024-01-15 01:00:00')"), ts("2024-01-15T01:00:00Z"));
        assert_eq!(folded("TO_TIMESTAMP('yesterday')"), Scalar::Null);
        assert_eq!(folded("TO_TIMESTAMP('15.01.2024 01:00', 'dd.MM.yyyy HH:mm')"), ts("2024-01-15T01:00:00Z"));
        assert_eq!(folded("TO_TIMESTAMP('2024-01-15', 'dd.MM.yyyy')"), Scalar::Null);
        assert_eq!(compiled("TO_TIMESTAMP(s)").unwrap().data_type(), sluice_plan::DataType::Timestamp);
    }

    /// Wrong argument counts and types are errors that name the function.
    #[test]
    fn new_functions_check_their_arguments() {
        let cases = [
            ("LPAD(s)", "LPAD takes 3 argument(s), got 1"),
            ("RPAD(s, 1, 'x', 'y')", "RPAD takes 3 argument(s), got 4"),
            ("LPAD(s, 'x', 'y')", "LPAD length must be bigint, got string"),
            ("RPAD(n, 1, 'x')", "RPAD needs a string, got bigint"),
            ("REPLACE(s, 'a')", "REPLACE takes 3 argument(s), got 2"),
            ("REPLACE(s, n, 'b')", "REPLACE needs a string, got bigint"),
            ("CONCAT_WS()", "CONCAT_WS takes a separator"),
            ("GREATEST()", "GREATEST takes one or more arguments"),
            ("GREATEST(s, n)", "GREATEST arguments have different types"),
            ("LEAST(ts, 'yesterday')", "cannot use a string constant where a timestamp is expected"),
            ("LEAST(true, false)", "LEAST compares numbers, strings or timestamps"),
            ("DATE_TRUNC('day')", "DATE_TRUNC takes 2 argument(s), got 1"),
            ("DATE_TRUNC('fortnight', ts)", "DATE_TRUNC: unknown unit \"fortnight\""),
            ("DATE_TRUNC('dow', ts)", "DATE_TRUNC: unknown unit"),
            ("DATE_TRUNC(s, ts)", "DATE_TRUNC: the unit must be a constant string"),
            ("DATE_TRUNC('day', s)", "DATE_TRUNC needs a timestamp, got string"),
            ("TO_TIMESTAMP(n)", "TO_TIMESTAMP needs a string, got bigint"),
            ("TO_TIMESTAMP(s, s)", "TO_TIMESTAMP: the format must be a constant string"),
            ("TO_TIMESTAMP()", "TO_TIMESTAMP takes 1 to 2 argument(s), got 0"),
            ("JSON_VALUE(s)", "JSON_VALUE takes 2 argument(s), got 1"),
            ("JSON_VALUE(n, '$.a')", "JSON_VALUE needs a string, got bigint"),
            ("JSON_VALUE(s, s)", "JSON_VALUE: the path must be a constant string"),
            ("JSON_VALUE(s, '$.a[')", "JSON_VALUE: invalid path \"$.a[\""),
            ("JSON_VALUE(s, 'a.b')", "a path starts with $"),
        ];
        for (expr, message) in cases {
            let e = error(expr);
            assert!(e.contains(message), "{expr}: {e}");
        }
    }
}
