//! SQL expressions → typed physical expressions.
//!
//! Names are resolved once, here, to column indices; types are checked and
//! implicit casts inserted, so evaluation never looks anything up by name and
//! every kernel sees operands of one type. Subexpressions without column
//! references are evaluated now (constant folding).
//!
//! What a name or a function call means depends on where the expression is
//! (a WHERE clause, a SELECT list under GROUP BY, an OVER clause...): a
//! [`Scope`] answers that.

use crate::diagnostic::Located;
use sqlparser::ast::{
    AccessExpr, BinaryOperator, CastKind, CeilFloorKind, DataType as AstType, DateTimeField, DuplicateTreatment, Expr,
    Function, FunctionArg, FunctionArgExpr, FunctionArguments, Ident, Subscript, TrimWhereField, TypedString,
    UnaryOperator, Value,
};

use super::functions::{compile_scalar_function, function_suggestion, is_known, time_part_named};
use super::nested_values::{element_at, row_field};
use crate::typing::{
    arith, cast, coerce_literal_to, compare, expect_bool, expect_string, expect_timestamp, fold, numeric_unary,
};
use sluice_plan::time::parse_timestamp_ms;
use sluice_plan::{ArithOp, CmpOp, LikePattern, LikeToken, PhysExpr, ScalarFunc, TimePart, TrimSide};
use sluice_plan::{DataType, Scalar, SqlError};

/// How names and calls resolve where an expression appears.
pub(crate) trait Scope {
    /// A column reference (`col` or `qualifier.col`).
    fn resolve_column(&mut self, idents: &[Ident], node: &Expr) -> Result<PhysExpr, SqlError>;
    /// An aggregate or window function call, if this scope handles it;
    /// `None` lets the compiler treat the call as a scalar function.
    fn resolve_call(&mut self, call: &Function, node: &Expr) -> Option<Result<PhysExpr, SqlError>>;
    /// A whole subexpression with a meaning of its own in this scope (such
    /// as a GROUP BY expression in a SELECT list), if any.
    fn resolve_whole(&mut self, _expr: &Expr) -> Option<PhysExpr> {
        None
    }
}

/// Compiles `expr` in `scope`.
pub(crate) fn compile(expr: &Expr, scope: &mut dyn Scope) -> Result<PhysExpr, SqlError> {
    let _level = crate::depth::CompileLevel::enter(expr)?;
    if let Some(p) = scope.resolve_whole(expr) {
        return Ok(p);
    }
    let compiled = match expr {
        Expr::Identifier(id) => scope.resolve_column(std::slice::from_ref(id), expr)?,
        Expr::CompoundIdentifier(ids) => match scope.resolve_column(ids, expr) {
            Ok(e) => e,
            // `r.field`: a row column's field.
            Err(unknown) => field_path(ids, scope, expr).unwrap_or(Err(unknown))?,
        },
        Expr::CompoundFieldAccess { root, access_chain } => compound_access(root, access_chain, scope, expr)?,
        Expr::Array(a) => {
            let elements = a.elem.iter().map(|e| compile(e, scope)).collect::<Result<Vec<_>, _>>()?;
            crate::nested_values::make_array(elements, expr)?
        }
        Expr::Map(m) => {
            let mut args = Vec::with_capacity(m.entries.len() * 2);
            for e in &m.entries {
                args.push(compile(&e.key, scope)?);
                args.push(compile(&e.value, scope)?);
            }
            crate::nested_values::make_map(args, expr)?
        }
        Expr::Nested(inner) => compile(inner, scope)?,
        Expr::Value(v) => literal(&v.value, expr)?,
        Expr::TypedString(ts) => typed_string(ts, expr)?,
        Expr::Interval(_) => PhysExpr::literal(Scalar::Bigint(super::rewrite::interval_millis(expr)?)),
        Expr::BinaryOp { left, op, right } => {
            let l = compile(left, scope)?;
            let r = compile(right, scope)?;
            binary(l, op, r, expr)?
        }
        Expr::UnaryOp { op, expr: inner } => {
            let e = compile(inner, scope)?;
            match op {
                UnaryOperator::Not => PhysExpr::Not(Box::new(expect_bool(e, inner, "NOT")?)),
                UnaryOperator::Minus if e.data_type().is_numeric() || e.data_type() == DataType::Null => {
                    PhysExpr::Negate(Box::new(e))
                }
                UnaryOperator::Plus if e.data_type().is_numeric() => e,
                _ => return Err(SqlError::at_node(expr, format!("operator {op} does not apply to {}", e.data_type()))),
            }
        }
        Expr::IsNull(e) => PhysExpr::IsNull { expr: Box::new(compile(e, scope)?), negated: false },
        Expr::IsNotNull(e) => PhysExpr::IsNull { expr: Box::new(compile(e, scope)?), negated: true },
        Expr::IsTrue(e) | Expr::IsNotTrue(e) | Expr::IsFalse(e) | Expr::IsNotFalse(e) => {
            // IS [NOT] TRUE tests against TRUE, IS [NOT] FALSE against FALSE.
            let value = matches!(expr, Expr::IsTrue(_) | Expr::IsNotTrue(_));
            let negated = matches!(expr, Expr::IsNotTrue(_) | Expr::IsNotFalse(_));
            let b = expect_bool(compile(e, scope)?, e, "IS TRUE / IS FALSE")?;
            // x IS TRUE = COALESCE(x = TRUE, FALSE); negation applies after.
            let is = PhysExpr::Coalesce {
                args: vec![
                    PhysExpr::Compare { op: CmpOp::Eq, left: Box::new(b), right: Box::new(bool_lit(value)) },
                    bool_lit(false),
                ],
                data_type: DataType::Boolean,
            };
            if negated { PhysExpr::Not(Box::new(is)) } else { is }
        }
        Expr::InList { expr: inner, list, negated } => {
            let e = compile(inner, scope)?;
            let mut items = Vec::with_capacity(list.len());
            // Compared in the common type of the operand and every item, as `=` would.
            let mut common = e.data_type();
            for item in list {
                let v = compile(item, scope)?;
                if !v.is_literal() {
                    return Err(SqlError::at_node(item, "IN lists must hold constants"));
                }
                common = match (common, v.data_type()) {
                    (DataType::Timestamp, DataType::String) => DataType::Timestamp,
                    (c, t) => c.common(t).ok_or_else(|| {
                        SqlError::at_node(item, format!("cannot compare {} with {t} in IN", e.data_type()))
                    })?,
                };
                items.push((v, item));
            }
            let mut values = Vec::with_capacity(items.len());
            for (v, item) in items {
                if let PhysExpr::Literal { value, .. } = coerce_literal_to(v, common, item)? {
                    values.push(value);
                }
            }
            PhysExpr::InList { expr: Box::new(cast(e, common)), list: values, negated: *negated }
        }
        Expr::Between { expr: inner, negated, low, high } => {
            let e = compile(inner, scope)?;
            let lo = compile(low, scope)?;
            let hi = compile(high, scope)?;
            let ge = compare(e.clone(), CmpOp::GtEq, lo, expr)?;
            let le = compare(e, CmpOp::LtEq, hi, expr)?;
            let both = PhysExpr::And(Box::new(ge), Box::new(le));
            if *negated { PhysExpr::Not(Box::new(both)) } else { both }
        }
        Expr::Like { negated, any, expr: inner, pattern, escape_char }
        | Expr::ILike { negated, any, expr: inner, pattern, escape_char } => {
            if *any || escape_char.is_some() {
                return Err(SqlError::at_node(expr, "LIKE ANY and LIKE ... ESCAPE are not supported"));
            }
            let e = compile(inner, scope)?;
            if !matches!(e.data_type(), DataType::String | DataType::Null) {
                return Err(SqlError::at_node(inner.as_ref(), format!("LIKE needs a string, got {}", e.data_type())));
            }
            let case_insensitive = matches!(expr, Expr::ILike { .. });
            let p = match compile(pattern, scope)? {
                PhysExpr::Literal { value: Scalar::String(p), .. } => p,
                _ => return Err(SqlError::at_node(pattern.as_ref(), "the LIKE pattern must be a string constant")),
            };
            let p = if case_insensitive { p.to_lowercase() } else { p };
            PhysExpr::Like { expr: Box::new(e), pattern: compile_like(&p), negated: *negated, case_insensitive }
        }
        Expr::Cast { kind, expr: inner, data_type, format } => {
            if format.is_some() {
                return Err(SqlError::at_node(expr, "CAST ... FORMAT is not supported"));
            }
            let to =
                sql_type(data_type).map_err(|e| SqlError::at_node(expr, format!("cannot cast to {data_type}: {e}")))?;
            if matches!(kind, CastKind::DoubleColon | CastKind::Cast | CastKind::TryCast | CastKind::SafeCast) {
                cast(compile(inner, scope)?, to)
            } else {
                return Err(SqlError::at_node(expr, "unsupported cast syntax"));
            }
        }
        // PostgreSQL's `timestamptz AT TIME ZONE z`: the wall clock in z.
        Expr::AtTimeZone { timestamp, time_zone } => {
            let ts = expect_timestamp(compile(timestamp, scope)?, timestamp, "AT TIME ZONE")?;
            let zone = crate::functions::zone_named(compile(time_zone, scope)?, "AT TIME ZONE", time_zone)?;
            crate::functions::convert_tz(ts, None, zone)
        }
        Expr::Extract { field, expr: inner, .. } => {
            let part = time_part(field).ok_or_else(|| SqlError::at_node(expr, format!("cannot EXTRACT {field}")))?;
            extract(part, compile(inner, scope)?, inner)?
        }
        Expr::Ceil { expr: inner, field } | Expr::Floor { expr: inner, field } => {
            if !matches!(field, CeilFloorKind::DateTimeField(DateTimeField::NoDateTime)) {
                return Err(SqlError::at_node(expr, "CEIL/FLOOR take one numeric argument"));
            }
            let (name, func) = if matches!(expr, Expr::Ceil { .. }) {
                ("CEIL", ScalarFunc::Ceil)
            } else {
                ("FLOOR", ScalarFunc::Floor)
            };
            let e = compile(inner, scope)?;
            numeric_unary(name, func, e, inner)?
        }
        Expr::Substring { expr: inner, substring_from, substring_for, .. } => {
            let mut args = vec![compile(inner, scope)?];
            match substring_from {
                Some(f) => args.push(compile(f, scope)?),
                None => args.push(PhysExpr::literal(Scalar::Bigint(1))),
            }
            if let Some(f) = substring_for {
                args.push(compile(f, scope)?);
            }
            compile_scalar_function("SUBSTRING", args, expr)?
        }
        Expr::Trim { expr: inner, trim_where, trim_what, trim_characters } => {
            if trim_what.is_some() || trim_characters.is_some() {
                return Err(SqlError::at_node(expr, "TRIM of characters other than spaces is not supported"));
            }
            let side = match trim_where {
                None | Some(TrimWhereField::Both) => TrimSide::Both,
                Some(TrimWhereField::Leading) => TrimSide::Leading,
                Some(TrimWhereField::Trailing) => TrimSide::Trailing,
            };
            let e = expect_string(compile(inner, scope)?, inner, "TRIM")?;
            PhysExpr::Func { func: ScalarFunc::Trim(side), args: vec![e], data_type: DataType::String }
        }
        Expr::Case { operand, conditions, else_result, .. } => {
            let operand = operand.as_ref().map(|o| compile(o, scope).map(|c| (c, o))).transpose()?;
            let mut whens = Vec::with_capacity(conditions.len());
            for cw in conditions {
                let cond = compile(&cw.condition, scope)?;
                let cond = match &operand {
                    Some((o, o_node)) => compare(o.clone(), CmpOp::Eq, cond, o_node)?,
                    None => expect_bool(cond, &cw.condition, "CASE WHEN")?,
                };
                whens.push((cond, compile(&cw.result, scope)?, &cw.result));
            }
            let otherwise = match else_result {
                Some(e) => Some((compile(e, scope)?, e.as_ref())),
                None => None,
            };
            case(whens, otherwise, expr)?
        }
        Expr::Function(call) => match scope.resolve_call(call, expr) {
            Some(result) => result?,
            None => scalar_call(call, expr, scope)?,
        },
        // POSITION(sub IN s) is STRPOS(s, sub).
        Expr::Position { expr: sub, r#in } => {
            let s = expect_string(compile(r#in, scope)?, expr, "POSITION")?;
            let sub = expect_string(compile(sub, scope)?, expr, "POSITION")?;
            PhysExpr::Func { func: ScalarFunc::Strpos, args: vec![s, sub], data_type: DataType::Bigint }
        }
        other => return Err(unsupported(other)),
    };
    Ok(fold(compiled))
}

fn unsupported(expr: &Expr) -> SqlError {
    let what = match expr {
        Expr::Subquery(_) | Expr::InSubquery { .. } | Expr::Exists { .. } => "subqueries",
        Expr::Wildcard(_) | Expr::QualifiedWildcard(..) => "* here",
        Expr::Struct { .. } | Expr::Tuple(_) => "STRUCT(…) and tuples (ROW(…) makes a row)",
        Expr::JsonAccess { .. } => "JSON access operators (use JSON_VALUE)",
        Expr::Collate { .. } => "COLLATE",
        Expr::SimilarTo { .. } | Expr::RLike { .. } => "regular expressions",
        Expr::IsDistinctFrom(..) | Expr::IsNotDistinctFrom(..) => "IS [NOT] DISTINCT FROM",
        _ => "this construct",
    };
    let text: String = expr.to_string().chars().take(40).collect();
    SqlError::at_node(expr, format!("{what} ({text}) not supported"))
}

pub(crate) fn bool_lit(b: bool) -> PhysExpr {
    PhysExpr::literal(Scalar::Boolean(b))
}

fn literal(v: &Value, node: &Expr) -> Result<PhysExpr, SqlError> {
    Ok(PhysExpr::literal(match v {
        Value::Number(n, _) => {
            if let Ok(i) = n.parse::<i64>() {
                Scalar::Bigint(i)
            } else if n.bytes().all(|b| b.is_ascii_digit())
                && let Some(v) = sluice_plan::decimal::parse(n, sluice_plan::decimal::MAX_PRECISION, 0)
            {
                // An integer past a bigint is exact, as PostgreSQL's
                // `numeric` literal is (up to 38 digits).
                Scalar::Decimal(v, 0)
            } else {
                Scalar::Double(n.parse().map_err(|_| SqlError::at_node(node, format!("bad number {n}")))?)
            }
        }
        Value::SingleQuotedString(s) | Value::EscapedStringLiteral(s) | Value::NationalStringLiteral(s) => {
            Scalar::String(s.clone())
        }
        Value::Boolean(b) => Scalar::Boolean(*b),
        Value::Null => Scalar::Null,
        other => return Err(SqlError::at_node(node, format!("unsupported literal {other}"))),
    }))
}

fn typed_string(ts: &TypedString, node: &Expr) -> Result<PhysExpr, SqlError> {
    let text = match &ts.value.value {
        Value::SingleQuotedString(s) => s.as_str(),
        _ => return Err(SqlError::at_node(node, "expected a quoted string")),
    };
    match sql_type(&ts.data_type) {
        Ok(DataType::Timestamp) => {
            parse_timestamp_ms(text).map(|ms| PhysExpr::literal(Scalar::Timestamp(ms))).ok_or_else(|| {
                SqlError::at_node(node, format!("{text:?} is not a timestamp (use RFC 3339 or YYYY-MM-DD)"))
            })
        }
        Ok(t @ DataType::Decimal(p, s)) => sluice_plan::decimal::parse(text, p, s)
            .map(|v| PhysExpr::Literal { value: Scalar::Decimal(v, s), data_type: t })
            .ok_or_else(|| SqlError::at_node(node, format!("{text:?} is not a {t}"))),
        Ok(t) => Ok(cast(PhysExpr::literal(Scalar::String(text.to_owned())), t)),
        Err(e) => Err(SqlError::at_node(node, format!("unsupported type {}: {e}", ts.data_type))),
    }
}

/// `a.b.c` that names no column: the longest prefix that does, if it is
/// a row, followed into its fields. `None` when no prefix is a column (the
/// caller reports its own error).
fn field_path(ids: &[Ident], scope: &mut dyn Scope, node: &Expr) -> Option<Result<PhysExpr, SqlError>> {
    for split in (1..ids.len()).rev() {
        let Ok(base) = scope.resolve_column(&ids[..split], node) else { continue };
        return Some(ids[split..].iter().try_fold(base, |e, id| row_field(e, id, node)));
    }
    None
}

/// `root[…]…` and `root.field…` after a subscript.
fn compound_access(
    root: &Expr,
    chain: &[AccessExpr],
    scope: &mut dyn Scope,
    node: &Expr,
) -> Result<PhysExpr, SqlError> {
    // `o.attrs['k']` parses as `o` then `.attrs` then `['k']`: the leading
    // names are one compound name (a qualified column, then fields).
    let mut idents = match root {
        Expr::Identifier(id) => vec![id.clone()],
        Expr::CompoundIdentifier(ids) => ids.clone(),
        _ => Vec::new(),
    };
    let mut chain = chain;
    if !idents.is_empty() {
        while let Some(AccessExpr::Dot(Expr::Identifier(id))) = chain.first() {
            idents.push(id.clone());
            chain = &chain[1..];
        }
    }
    let mut e = match idents.len() {
        0 => compile(root, scope)?,
        1 => compile(&Expr::Identifier(idents.remove(0)), scope)?,
        _ => compile(&Expr::CompoundIdentifier(idents), scope)?,
    };
    for access in chain {
        e = match access {
            AccessExpr::Dot(Expr::Identifier(id)) => row_field(e, id, node)?,
            AccessExpr::Dot(other) => {
                return Err(SqlError::at_node(other, "a field is read by its name: `row.field`"));
            }
            AccessExpr::Subscript(Subscript::Index { index }) => {
                let at = compile(index, scope)?;
                element_at(e, at, index)?
            }
            AccessExpr::Subscript(Subscript::Slice { .. }) => {
                return Err(SqlError::at_node(node, "array slices (`arr[a:b]`) are not supported"));
            }
        };
    }
    Ok(e)
}

/// Maps a SQL type name to an engine type, or says why it cannot.
pub(crate) fn sql_type(t: &AstType) -> Result<DataType, String> {
    use sqlparser::ast::ArrayElemTypeDef as Elem;
    let nested = |r: Result<DataType, sluice_plan::TooManyTypes>| r.map_err(|e| e.to_string());
    match t {
        AstType::Array(Elem::AngleBracket(e) | Elem::SquareBracket(e, _) | Elem::Parenthesis(e)) => {
            return nested(DataType::array(sql_type(e)?));
        }
        AstType::Map(k, v, _) => {
            let k = sql_type(k)?;
            if !matches!(k, DataType::String | DataType::Bigint) {
                return Err(format!("a map's keys are string or bigint, not {k}"));
            }
            return nested(DataType::map(k, sql_type(v)?));
        }
        AstType::Struct(fields, _) => {
            let mut out = Vec::with_capacity(fields.len());
            for (i, f) in fields.iter().enumerate() {
                let name = f.field_name.as_ref().map_or_else(|| format!("f{}", i + 1), |n| n.value.clone());
                out.push((name, sql_type(&f.field_type)?));
            }
            return nested(DataType::row(out));
        }
        _ => {}
    }
    let name = t.to_string().to_ascii_uppercase();
    let base = name.split(['(', ' ']).next().unwrap_or_default();
    Ok(match base {
        "BIGINT" | "INT" | "INTEGER" | "SMALLINT" | "TINYINT" | "INT2" | "INT4" | "INT8" | "INT64" | "LONG" => {
            DataType::Bigint
        }
        "DOUBLE" | "FLOAT" | "FLOAT4" | "FLOAT8" | "FLOAT64" | "REAL" => DataType::Double,
        "DECIMAL" | "NUMERIC" | "DEC" => {
            let args = name[base.len()..].trim().trim_start_matches('(').trim_end_matches(')');
            if args.is_empty() {
                return Err(format!(
                    "give {base} a precision and scale, as in {base}(12, 2): Sluice's decimals are exact with a \
                     fixed scale (or use DOUBLE)"
                ));
            }
            let (p, s) = args.split_once(',').unwrap_or((args, "0"));
            match (p.trim().parse::<u8>(), s.trim().parse::<u8>()) {
                (Ok(p), Ok(s)) if (1..=sluice_plan::decimal::MAX_PRECISION).contains(&p) && s <= p => {
                    DataType::Decimal(p, s)
                }
                _ => {
                    return Err(format!(
                        "a {base}'s precision is 1 to {} digits and its scale 0 to the precision (for wider \
                         numbers use DOUBLE)",
                        sluice_plan::decimal::MAX_PRECISION
                    ));
                }
            }
        }
        "VARCHAR" | "TEXT" | "STRING" | "CHAR" | "CHARACTER" | "NVARCHAR" => DataType::String,
        "BOOLEAN" | "BOOL" => DataType::Boolean,
        "TIMESTAMP" | "DATETIME" | "DATE" | "TIMESTAMPTZ" => DataType::Timestamp,
        _ => {
            return Err("supported types are bigint, double, decimal(p, s), string, boolean, timestamp, \
                        ARRAY<T>, MAP(K, V) and STRUCT<name T, …>"
                .into());
        }
    })
}

fn binary(l: PhysExpr, op: &BinaryOperator, r: PhysExpr, node: &Expr) -> Result<PhysExpr, SqlError> {
    use BinaryOperator as B;
    match op {
        B::Plus => arith(l, ArithOp::Add, r, node),
        B::Minus => arith(l, ArithOp::Sub, r, node),
        B::Multiply => arith(l, ArithOp::Mul, r, node),
        B::Divide => arith(l, ArithOp::Div, r, node),
        B::Modulo => arith(l, ArithOp::Mod, r, node),
        B::Eq => compare(l, CmpOp::Eq, r, node),
        B::NotEq => compare(l, CmpOp::NotEq, r, node),
        B::Lt => compare(l, CmpOp::Lt, r, node),
        B::LtEq => compare(l, CmpOp::LtEq, r, node),
        B::Gt => compare(l, CmpOp::Gt, r, node),
        B::GtEq => compare(l, CmpOp::GtEq, r, node),
        B::And | B::Or => {
            let l = expect_bool(l, node, &format!("{op}"))?;
            let r = expect_bool(r, node, &format!("{op}"))?;
            Ok(if matches!(op, B::And) {
                PhysExpr::And(Box::new(l), Box::new(r))
            } else {
                PhysExpr::Or(Box::new(l), Box::new(r))
            })
        }
        B::StringConcat => {
            Ok(PhysExpr::ConcatOp(Box::new(cast(l, DataType::String)), Box::new(cast(r, DataType::String))))
        }
        other => Err(SqlError::at_node(node, format!("operator {other} is not supported"))),
    }
}

fn case(
    whens: Vec<(PhysExpr, PhysExpr, &Expr)>,
    otherwise: Option<(PhysExpr, &Expr)>,
    node: &Expr,
) -> Result<PhysExpr, SqlError> {
    let mut data_type = DataType::Null;
    for t in whens.iter().map(|(_, t, _)| t.data_type()).chain(otherwise.iter().map(|(e, _)| e.data_type())) {
        data_type = data_type.common(t).ok_or_else(|| {
            SqlError::at_node(node, format!("CASE branches have different types: {data_type} and {t}"))
        })?;
    }
    let whens = whens.into_iter().map(|(c, t, _)| (c, cast(t, data_type))).collect();
    let otherwise = match otherwise {
        Some((e, _)) => cast(e, data_type),
        None => PhysExpr::Literal { value: Scalar::Null, data_type },
    };
    Ok(PhysExpr::Case { whens, otherwise: Box::new(otherwise), data_type })
}

pub(crate) fn time_part(field: &DateTimeField) -> Option<TimePart> {
    Some(match field {
        DateTimeField::Year | DateTimeField::Years => TimePart::Year,
        DateTimeField::Quarter => TimePart::Quarter,
        DateTimeField::Month | DateTimeField::Months => TimePart::Month,
        DateTimeField::Week(_) | DateTimeField::Weeks | DateTimeField::IsoWeek => TimePart::Week,
        DateTimeField::Day | DateTimeField::Days => TimePart::Day,
        DateTimeField::DayOfWeek | DateTimeField::Dow => TimePart::DayOfWeek,
        DateTimeField::DayOfYear | DateTimeField::Doy => TimePart::DayOfYear,
        DateTimeField::Hour | DateTimeField::Hours => TimePart::Hour,
        DateTimeField::Minute | DateTimeField::Minutes => TimePart::Minute,
        DateTimeField::Second | DateTimeField::Seconds => TimePart::Second,
        DateTimeField::Millisecond | DateTimeField::Milliseconds => TimePart::Millisecond,
        DateTimeField::Epoch => TimePart::Epoch,
        DateTimeField::Custom(id) => return time_part_named(&id.value),
        _ => return None,
    })
}

/// The time part a shorthand function (`HOUR(ts)`) extracts.
fn time_part_function(name: &str) -> Option<TimePart> {
    Some(match name {
        "YEAR" => TimePart::Year,
        "MONTH" => TimePart::Month,
        "DAYOFMONTH" => TimePart::Day,
        "HOUR" => TimePart::Hour,
        "MINUTE" => TimePart::Minute,
        "SECOND" => TimePart::Second,
        _ => return None,
    })
}

pub(crate) fn extract(part: TimePart, e: PhysExpr, node: &Expr) -> Result<PhysExpr, SqlError> {
    let e = expect_timestamp(e, node, "EXTRACT")?;
    let data_type = if part == TimePart::Epoch { DataType::Double } else { DataType::Bigint };
    Ok(PhysExpr::Func { func: ScalarFunc::Extract(part), args: vec![e], data_type })
}

/// Arguments of a function call, or an error for syntax Sluice does not
/// support in calls (named arguments, FILTER, WITHIN GROUP...).
pub(crate) struct CallArgs<'a> {
    pub args: Vec<&'a Expr>,
    pub star: bool,
    pub distinct: bool,
    /// `ORDER BY` inside the call (ARRAY_AGG's only).
    pub order_by: &'a [sqlparser::ast::OrderByExpr],
}

pub(crate) fn call_args<'a>(call: &'a Function, node: &Expr) -> Result<CallArgs<'a>, SqlError> {
    let name = call.name.to_string().to_ascii_uppercase();
    if call.filter.is_some() || !call.within_group.is_empty() || call.null_treatment.is_some() {
        return Err(SqlError::at_node(
            node,
            format!("FILTER / WITHIN GROUP / null treatment on {name} are not supported"),
        ));
    }
    if !matches!(call.parameters, FunctionArguments::None) {
        return Err(SqlError::at_node(node, format!("parametric function {name} is not supported")));
    }
    let mut out = CallArgs { args: Vec::new(), star: false, distinct: false, order_by: &[] };
    match &call.args {
        FunctionArguments::None => {}
        FunctionArguments::Subquery(_) => return Err(SqlError::at_node(node, "subqueries are not supported")),
        FunctionArguments::List(list) => {
            match list.clauses.as_slice() {
                [] => {}
                [sqlparser::ast::FunctionArgumentClause::OrderBy(order)] if name == "ARRAY_AGG" => {
                    out.order_by = order;
                }
                _ => return Err(SqlError::at_node(node, format!("clauses inside {name}(...) are not supported"))),
            }
            out.distinct = matches!(list.duplicate_treatment, Some(DuplicateTreatment::Distinct));
            for a in &list.args {
                match a {
                    FunctionArg::Unnamed(FunctionArgExpr::Expr(e)) => out.args.push(e),
                    FunctionArg::Unnamed(FunctionArgExpr::Wildcard) => out.star = true,
                    _ => return Err(SqlError::at_node(node, format!("unsupported argument in {name}(...)"))),
                }
            }
        }
    }
    Ok(out)
}

fn scalar_call(call: &Function, node: &Expr, scope: &mut dyn Scope) -> Result<PhysExpr, SqlError> {
    let name = call.name.to_string().to_ascii_uppercase();
    // An unknown name is the error, before its arguments are judged
    // (`AVERAGE(price)` is a misspelt aggregate, not an ungrouped column).
    if !is_known(&name) && name != "DATEPART" {
        return Err(SqlError::at_node(node, format!("unknown function {name}{}", function_suggestion(&name))));
    }
    if call.over.is_some() {
        return Err(SqlError::at_node(node, format!("{name} cannot be used as a window function")));
    }
    let a = call_args(call, node)?;
    if a.star || a.distinct {
        return Err(SqlError::at_node(node, format!("{name}(*) / {name}(DISTINCT ...) is not valid")));
    }
    // DATE_PART('hour', ts) is EXTRACT(HOUR FROM ts).
    if name == "DATE_PART" || name == "DATEPART" {
        let (Some(part), Some(arg)) = (a.args.first(), a.args.get(1)) else {
            return Err(SqlError::at_node(node, "DATE_PART takes a part name and a timestamp"));
        };
        let part = match compile(part, scope)? {
            PhysExpr::Literal { value: Scalar::String(s), .. } => time_part_named(&s),
            _ => None,
        }
        .ok_or_else(|| SqlError::at_node(*part, "expected a part name such as 'hour'"))?;
        return extract(part, compile(arg, scope)?, arg);
    }
    // TIMESTAMPADD(DAY, n, ts) and TIMESTAMPDIFF(DAY, a, b): the unit is a
    // keyword (Flink, MySQL) or a string ('day').
    if name == "TIMESTAMPADD" || name == "TIMESTAMPDIFF" {
        let [unit, count, ts] = a.args[..] else {
            let what = if name == "TIMESTAMPADD" { "a count and a timestamp" } else { "two timestamps" };
            return Err(SqlError::at_node(node, format!("{name} takes a unit and {what}")));
        };
        let named = match unit {
            Expr::Identifier(ident) => time_part_named(&ident.value),
            other => match compile(other, scope)? {
                PhysExpr::Literal { value: Scalar::String(s), .. } => time_part_named(&s),
                _ => None,
            },
        };
        let unit = named
            .filter(|p| !matches!(p, TimePart::DayOfWeek | TimePart::DayOfYear | TimePart::Epoch))
            .ok_or_else(|| {
                SqlError::at_node(
                    unit,
                    format!(
                        "{name}: expected a unit: MILLISECOND, SECOND, MINUTE, HOUR, DAY, WEEK, MONTH, QUARTER or YEAR"
                    ),
                )
            })?;
        if name == "TIMESTAMPDIFF" {
            let from = expect_timestamp(compile(count, scope)?, count, "TIMESTAMPDIFF")?;
            let to = expect_timestamp(compile(ts, scope)?, ts, "TIMESTAMPDIFF")?;
            return Ok(PhysExpr::Func {
                func: ScalarFunc::TimestampDiff(unit),
                args: vec![from, to],
                data_type: DataType::Bigint,
            });
        }
        let count = crate::typing::expect_bigint(compile(count, scope)?, count, "TIMESTAMPADD count")?;
        let ts = expect_timestamp(compile(ts, scope)?, ts, "TIMESTAMPADD")?;
        return Ok(PhysExpr::Func {
            func: ScalarFunc::TimestampAdd(unit),
            args: vec![count, ts],
            data_type: DataType::Timestamp,
        });
    }
    // HOUR(ts), YEAR(ts), ...: Flink's and MySQL's shorthands for EXTRACT.
    if let Some(part) = time_part_function(&name) {
        let [arg] = a.args.as_slice() else {
            return Err(SqlError::at_node(node, format!("{name} takes one timestamp")));
        };
        return extract(part, compile(arg, scope)?, arg);
    }
    let mut args = Vec::with_capacity(a.args.len());
    for arg in &a.args {
        args.push(compile(arg, scope)?);
    }
    compile_scalar_function(&name, args, node)
}

/// Compiles a LIKE pattern, recognising the common shapes that need no
/// general matcher.
pub(crate) fn compile_like(pattern: &str) -> LikePattern {
    use LikeToken::{AnyOne, AnyRun, Literal};
    let mut tokens = Vec::new();
    let mut lit = String::new();
    for c in pattern.chars() {
        match c {
            '%' | '_' => {
                if !lit.is_empty() {
                    tokens.push(Literal(std::mem::take(&mut lit)));
                }
                let t = if c == '%' { AnyRun } else { AnyOne };
                if !(t == AnyRun && tokens.last() == Some(&AnyRun)) {
                    tokens.push(t);
                }
            }
            c => lit.push(c),
        }
    }
    if !lit.is_empty() {
        tokens.push(Literal(lit));
    }
    match tokens.as_slice() {
        [] => LikePattern::Exact(String::new()),
        [Literal(s)] => LikePattern::Exact(s.clone()),
        [Literal(s), AnyRun] => LikePattern::Prefix(s.clone()),
        [AnyRun, Literal(s)] => LikePattern::Suffix(s.clone()),
        [AnyRun, Literal(s), AnyRun] => LikePattern::Contains(s.clone()),
        _ => LikePattern::General(tokens),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan_error(sql: &str) -> String {
        use sluice_crds::{ColumnType, SourceSpec};
        let bid = SourceSpec::table("bid", &[("url", ColumnType::String, false), ("price", ColumnType::Bigint, false)]);
        match crate::plan_query(sql, &[bid]) {
            Ok(_) => String::new(),
            Err(e) => e.to_string(),
        }
    }

    /// The constant arguments of the string functions are checked when the
    /// query is planned, naming the function and the column.
    #[test]
    fn string_function_arguments_are_checked_at_plan_time() {
        let e = plan_error("SELECT REGEXP_EXTRACT(url, '(a', 1) FROM bid");
        assert!(e.contains("invalid pattern") && e.contains("column 8"), "{e}");
        let e = plan_error("SELECT REGEXP_EXTRACT(url, '(a)', 2) FROM bid");
        assert!(e.contains("group 2 does not exist"), "{e}");
        let e = plan_error("SELECT SPLIT_INDEX(url, url, 1) FROM bid");
        assert!(e.contains("SPLIT_INDEX: the separator must be a constant string"), "{e}");
        let e = plan_error("SELECT COUNT_CHAR(url, 'ab') FROM bid");
        assert!(e.contains("one character"), "{e}");
        let e = plan_error("SELECT UPPER(url) FILTER (WHERE price > 1) FROM bid");
        assert!(e.contains("FILTER"), "a FILTER on a scalar function stays an error: {e}");
        assert_eq!(plan_error("SELECT COUNT(*) FILTER (WHERE price > 1) AS n FROM bid"), "");
        assert!(plan_error("SELECT HOUR(url) FROM bid").contains("timestamp"));
    }

    #[test]
    fn like_patterns_take_fast_paths() {
        assert_eq!(compile_like("abc%"), LikePattern::Prefix("abc".into()));
        assert_eq!(compile_like("%abc"), LikePattern::Suffix("abc".into()));
        assert_eq!(compile_like("%%abc%"), LikePattern::Contains("abc".into()));
        assert_eq!(compile_like("abc"), LikePattern::Exact("abc".into()));
        assert!(matches!(compile_like("a_c%"), LikePattern::General(_)));
    }
}
