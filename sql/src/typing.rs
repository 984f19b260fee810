//! The typing rules shared by expressions and function calls: implicit
//! casts (constants folded at once), operand checks, arithmetic result
//! types and comparison coercions. PostgreSQL's rules where they apply.

use sqlparser::ast::Expr;

use crate::diagnostic::Located;
use sluice_plan::{ArithOp, CmpOp, DataType, PhysExpr, Scalar, ScalarFunc, SqlError, fold_constant};

/// Replaces an expression without column references by its value.
pub(crate) fn fold(expr: PhysExpr) -> PhysExpr {
    if expr.is_literal() || matches!(expr, PhysExpr::Column { .. }) {
        return expr;
    }
    let mut cols = Vec::new();
    expr.columns(&mut cols);
    if !cols.is_empty() {
        return expr;
    }
    match fold_constant(&expr) {
        Some(value) => {
            let data_type = expr.data_type();
            PhysExpr::Literal { value, data_type }
        }
        None => expr,
    }
}

/// Casts `expr` to `to` (folding literals right away).
pub(crate) fn cast(expr: PhysExpr, to: DataType) -> PhysExpr {
    if expr.data_type() == to {
        return expr;
    }
    if let PhysExpr::Literal { value: Scalar::Null, .. } = expr {
        return PhysExpr::Literal { value: Scalar::Null, data_type: to };
    }
    fold(PhysExpr::Cast { expr: Box::new(expr), to })
}

pub(crate) fn expect_bool(e: PhysExpr, node: &Expr, context: &str) -> Result<PhysExpr, SqlError> {
    match e.data_type() {
        DataType::Boolean => Ok(e),
        DataType::Null => Ok(cast(e, DataType::Boolean)),
        t => Err(SqlError::at_node(node, format!("{context} needs a boolean, got {t}"))),
    }
}

pub(crate) fn expect_string(e: PhysExpr, node: &Expr, context: &str) -> Result<PhysExpr, SqlError> {
    match e.data_type() {
        DataType::String => Ok(e),
        DataType::Null => Ok(cast(e, DataType::String)),
        t => Err(SqlError::at_node(node, format!("{context} needs a string, got {t}"))),
    }
}

pub(crate) fn expect_bigint(e: PhysExpr, node: &Expr, what: &str) -> Result<PhysExpr, SqlError> {
    match e.data_type() {
        DataType::Bigint | DataType::Null => Ok(cast(e, DataType::Bigint)),
        t => Err(SqlError::at_node(node, format!("{what} must be bigint, got {t}"))),
    }
}

/// A timestamp argument: a bigint is epoch milliseconds, and a string
/// constant is read as a timestamp (an error at plan time if it is none).
pub(crate) fn expect_timestamp(e: PhysExpr, node: &Expr, context: &str) -> Result<PhysExpr, SqlError> {
    match e.data_type() {
        DataType::Timestamp => Ok(e),
        DataType::Null | DataType::Bigint => Ok(cast(e, DataType::Timestamp)),
        DataType::String if e.is_literal() => coerce_literal_to(e, DataType::Timestamp, node),
        t => Err(SqlError::at_node(node, format!("{context} needs a timestamp, got {t}"))),
    }
}

/// The one type all of `args` convert to (the `Null` type when all are
/// NULL), for COALESCE, GREATEST and the like.
pub(crate) fn common_type(args: &[PhysExpr], name: &str, node: &Expr) -> Result<DataType, SqlError> {
    let mut common = DataType::Null;
    for a in args {
        common = common.common(a.data_type()).ok_or_else(|| {
            SqlError::at_node(node, format!("{name} arguments have different types: {common} and {}", a.data_type()))
        })?;
    }
    Ok(common)
}

pub(crate) fn numeric_unary(name: &str, func: ScalarFunc, e: PhysExpr, node: &Expr) -> Result<PhysExpr, SqlError> {
    let data_type = match e.data_type() {
        DataType::Null => DataType::Double,
        t if t.is_numeric() => t,
        t => return Err(SqlError::at_node(node, format!("{name} needs a number, got {t}"))),
    };
    // FLOOR and CEIL of a decimal keep no places (PostgreSQL's scale).
    let result = match (&func, data_type) {
        (ScalarFunc::Floor | ScalarFunc::Ceil, t @ DataType::Decimal(..)) => t.decimal_round(0),
        _ => data_type,
    };
    Ok(PhysExpr::Func { func, args: vec![cast(e, data_type)], data_type: result })
}

/// A double constant beside a decimal becomes the exact decimal it reads
/// as, so `amount * 1.1` stays exact (PostgreSQL's `numeric` literal).
fn exact_beside_decimal(l: PhysExpr, r: PhysExpr) -> (PhysExpr, PhysExpr) {
    let exact = |e: PhysExpr| match e {
        PhysExpr::Literal { value: Scalar::Double(x), data_type: DataType::Double } => {
            match sluice_plan::decimal::literal(x) {
                Some((v, p, s)) => {
                    PhysExpr::Literal { value: Scalar::Decimal(v, s), data_type: DataType::Decimal(p, s) }
                }
                None => e,
            }
        }
        e => e,
    };
    match (l.data_type(), r.data_type()) {
        (DataType::Decimal(..), DataType::Double) => (l, exact(r)),
        (DataType::Double, DataType::Decimal(..)) => (exact(l), r),
        _ => (l, r),
    }
}

/// Both sides decimal, or a decimal and a bigint (or NULL): exact, each
/// side at its own scale (the kernels align them), a bigint as
/// `DECIMAL(18, 0)`.
fn decimal_pair(lt: DataType, rt: DataType) -> Option<(DataType, DataType)> {
    use DataType::*;
    let as_dec = |t: DataType| match t {
        Decimal(..) => Some(t),
        Bigint | Null => Some(DataType::BIGINT_AS_DECIMAL),
        _ => None,
    };
    (matches!(lt, Decimal(..)) || matches!(rt, Decimal(..))).then_some(())?;
    Some((as_dec(lt)?, as_dec(rt)?))
}

pub(crate) fn arith(l: PhysExpr, op: ArithOp, r: PhysExpr, node: &Expr) -> Result<PhysExpr, SqlError> {
    use DataType::*;
    let (l, r) = exact_beside_decimal(l, r);
    let (lt, rt) = (l.data_type(), r.data_type());
    if let Some((a, b)) = decimal_pair(lt, rt) {
        let data_type = op.decimal_result(a, b);
        return Ok(PhysExpr::Arith { op, left: Box::new(l), right: Box::new(r), data_type });
    }
    let mismatch = || {
        let hint = if lt == String || rt == String { "; use || or CONCAT to join strings" } else { "" };
        SqlError::at_node(node, format!("cannot apply {} to {lt} and {rt}{hint}", op.symbol()))
    };
    let data_type = match (lt, rt, op) {
        (Timestamp, Bigint | Null, ArithOp::Add | ArithOp::Sub) | (Bigint | Null, Timestamp, ArithOp::Add) => Timestamp,
        (Timestamp, Timestamp, ArithOp::Sub) => {
            // Difference in milliseconds.
            let l = cast(l, Bigint);
            let r = cast(r, Bigint);
            return Ok(PhysExpr::Arith { op, left: Box::new(l), right: Box::new(r), data_type: Bigint });
        }
        (_, _, ArithOp::Div) if (lt.is_numeric() || lt == Null) && (rt.is_numeric() || rt == Null) => Double,
        _ => match lt.common(rt) {
            Some(Bigint) => Bigint,
            Some(Double) => Double,
            Some(Null) => Double,
            _ => return Err(mismatch()),
        },
    };
    let operand_type = if data_type == Timestamp { Bigint } else { data_type };
    let (l, r) = if data_type == Timestamp {
        (cast(l, Bigint), cast(r, Bigint))
    } else {
        (cast(l, operand_type), cast(r, operand_type))
    };
    let e = PhysExpr::Arith { op, left: Box::new(l), right: Box::new(r), data_type: operand_type };
    Ok(if data_type == Timestamp { PhysExpr::Cast { expr: Box::new(e), to: Timestamp } } else { e })
}

pub(crate) fn compare(l: PhysExpr, op: CmpOp, r: PhysExpr, node: &Expr) -> Result<PhysExpr, SqlError> {
    use DataType::*;
    let (lt, rt) = (l.data_type(), r.data_type());
    // A string constant compared with a timestamp is a timestamp constant.
    let (l, r) = match (lt, rt) {
        (Timestamp, String) if r.is_literal() => (l, coerce_literal_to(r, Timestamp, node)?),
        (String, Timestamp) if l.is_literal() => (coerce_literal_to(l, Timestamp, node)?, r),
        _ => (l, r),
    };
    if lt.is_nested() || rt.is_nested() {
        // Equal or not, as PostgreSQL compares arrays and rows; no order.
        return match (op, nested_common(lt, rt)) {
            (CmpOp::Eq | CmpOp::NotEq, Some(common)) => {
                Ok(PhysExpr::Compare { op, left: Box::new(cast(l, common)), right: Box::new(cast(r, common)) })
            }
            (CmpOp::Eq | CmpOp::NotEq, None) => Err(SqlError::at_node(node, format!("cannot compare {lt} with {rt}"))),
            _ => Err(SqlError::at_node(
                node,
                format!("{lt} values are equal or not, with no order: compare a field or an element"),
            )),
        };
    }
    let (l, r) = exact_beside_decimal(l, r);
    let (lt, rt) = (l.data_type(), r.data_type());
    if decimal_pair(lt, rt).is_some() {
        // Compared exactly at their own scales: a common type could not
        // hold both a large value of one and the fraction of the other.
        return Ok(PhysExpr::Compare { op, left: Box::new(l), right: Box::new(r) });
    }
    let common = lt.common(rt).ok_or_else(|| SqlError::at_node(node, format!("cannot compare {lt} with {rt}")))?;
    let common = if common == Null { Boolean } else { common };
    Ok(PhysExpr::Compare { op, left: Box::new(cast(l, common)), right: Box::new(cast(r, common)) })
}

/// The type two nested values are compared as: the same type, or, as
/// PostgreSQL compares rows by position, rows of as many fields whose
/// fields share types (named as the left's), arrays and maps whose
/// elements do.
fn nested_common(l: DataType, r: DataType) -> Option<DataType> {
    if let Some(t) = l.common(r) {
        return Some(t);
    }
    match (l, r) {
        (DataType::Array(_), DataType::Array(_)) => DataType::array(nested_common(l.element()?, r.element()?)?).ok(),
        (DataType::Map(_), DataType::Map(_)) => {
            let ((lk, lv), (rk, rv)) = (l.map_types()?, r.map_types()?);
            DataType::map(lk.common(rk)?, nested_common(lv, rv)?).ok()
        }
        (DataType::Row(_), DataType::Row(_)) if l.fields().len() == r.fields().len() => {
            let fields = l
                .fields()
                .iter()
                .zip(r.fields())
                .map(|((name, a), (_, b))| Some((name.clone(), nested_common(*a, *b)?)))
                .collect::<Option<Vec<_>>>()?;
            DataType::row(fields).ok()
        }
        _ => None,
    }
}

/// A constant converted to `to` at compile time, with a clear error when it
/// does not convert (e.g. `'abc'` compared with a timestamp).
pub(crate) fn coerce_literal_to(e: PhysExpr, to: DataType, node: &Expr) -> Result<PhysExpr, SqlError> {
    let from = e.data_type();
    if from == to || from == DataType::Null {
        return Ok(cast(e, to));
    }
    let ok = matches!((from, to), (DataType::Bigint, DataType::Double) | (DataType::Bigint, DataType::Timestamp));
    let converted = cast(e, to);
    match &converted {
        PhysExpr::Literal { value, .. } if !value.is_null() || ok => Ok(converted),
        _ => Err(SqlError::at_node(node, format!("cannot use a {from} constant where a {to} is expected"))),
    }
}
