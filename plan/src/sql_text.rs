//! A compiled expression written back as SQL, for people: `explain` shows
//! predicates, keys and aggregate arguments this way. Column indices
//! become names through a caller's function, so each caller decides what a
//! column is called (a source column, or what an exchange column was
//! computed from upstream). The text reads as SQL Sluice accepts, but it is
//! not a round trip: constants are folded and FILTER shows as the CASE it
//! compiles to.

use std::fmt::Write as _;

use super::{
    ArithOp, CmpOp, DigestKind, JsonStep, LikePattern, LikeToken, PhysExpr, Scalar, ScalarFunc, TimePart, TrimSide,
};

/// `expr` as SQL, its columns named by `name`.
pub fn expr_sql(expr: &PhysExpr, name: &dyn Fn(usize) -> String) -> String {
    let mut out = String::new();
    write_expr(expr, name, &mut out);
    out
}

/// A literal as SQL: strings quoted, timestamps as `TIMESTAMP '…'`.
pub fn scalar_sql(value: &Scalar) -> String {
    match value {
        Scalar::Null => "NULL".to_owned(),
        Scalar::Bigint(v) => v.to_string(),
        Scalar::Double(v) if v.is_finite() && v.fract() == 0.0 && v.abs() < 1e15 => format!("{v:.1}"),
        Scalar::Double(v) => v.to_string(),
        Scalar::String(s) => quote(s),
        Scalar::Boolean(b) => if *b { "TRUE" } else { "FALSE" }.to_owned(),
        Scalar::Decimal(v, scale) => {
            let (precision, _) = value.data_type().decimal_parts();
            format!("CAST('{}' AS DECIMAL({precision}, {scale}))", crate::decimal::to_text(*v, *scale))
        }
        Scalar::Timestamp(ms) => {
            let mut text = Vec::new();
            crate::time::format_timestamp(*ms, &mut text);
            format!("TIMESTAMP '{}'", String::from_utf8_lossy(&text))
        }
        Scalar::List(items) => format!("ARRAY[{}]", items.iter().map(scalar_sql).collect::<Vec<_>>().join(", ")),
        Scalar::Map(entries) => format!(
            "MAP[{}]",
            entries.iter().map(|(k, v)| format!("{}, {}", scalar_sql(k), scalar_sql(v))).collect::<Vec<_>>().join(", ")
        ),
        Scalar::Row(values) => format!("ROW({})", values.iter().map(scalar_sql).collect::<Vec<_>>().join(", ")),
    }
}

/// A duration in milliseconds as the shortest exact `INTERVAL`.
pub fn interval_sql(ms: i64) -> String {
    const UNITS: [(i64, &str); 5] =
        [(86_400_000, "DAY"), (3_600_000, "HOUR"), (60_000, "MINUTE"), (1000, "SECOND"), (1, "MILLISECOND")];
    let (size, unit) = UNITS.iter().copied().find(|(size, _)| ms % size == 0).unwrap_or((1, "MILLISECOND"));
    format!("INTERVAL '{}' {unit}", ms / size)
}

fn quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', "''"))
}

/// Binding strength, loosest first: a child binding looser than its parent
/// is parenthesised.
fn precedence(e: &PhysExpr) -> u8 {
    match e {
        PhysExpr::Or(..) => 1,
        PhysExpr::And(..) => 2,
        PhysExpr::Not(_) => 3,
        PhysExpr::Compare { .. } | PhysExpr::Like { .. } | PhysExpr::InList { .. } | PhysExpr::IsNull { .. } => 4,
        PhysExpr::ConcatOp(..) => 5,
        PhysExpr::Arith { op: ArithOp::Add | ArithOp::Sub, .. } => 6,
        PhysExpr::Arith { .. } => 7,
        PhysExpr::Negate(_) => 8,
        _ => 9,
    }
}

/// Writes `child` of `parent`, in parentheses where it binds looser (or as
/// tightly, on the right: `a - (b - c)`).
fn operand(parent: &PhysExpr, child: &PhysExpr, right: bool, name: &dyn Fn(usize) -> String, out: &mut String) {
    let (p, c) = (precedence(parent), precedence(child));
    if c < p || (right && c == p && c < 9) {
        out.push('(');
        write_expr(child, name, out);
        out.push(')');
    } else {
        write_expr(child, name, out);
    }
}

fn call(func: &str, args: &[PhysExpr], extra: &[String], name: &dyn Fn(usize) -> String, out: &mut String) {
    out.push_str(func);
    out.push('(');
    let mut first = true;
    for a in args {
        if !first {
            out.push_str(", ");
        }
        first = false;
        write_expr(a, name, out);
    }
    for e in extra {
        if !first {
            out.push_str(", ");
        }
        first = false;
        out.push_str(e);
    }
    out.push(')');
}

fn like_text(pattern: &LikePattern) -> String {
    let escape = |s: &str| s.replace('%', "\\%").replace('_', "\\_");
    match pattern {
        LikePattern::Exact(s) => escape(s),
        LikePattern::Prefix(s) => format!("{}%", escape(s)),
        LikePattern::Suffix(s) => format!("%{}", escape(s)),
        LikePattern::Contains(s) => format!("%{}%", escape(s)),
        LikePattern::General(tokens) => tokens
            .iter()
            .map(|t| match t {
                LikeToken::Literal(s) => escape(s),
                LikeToken::AnyOne => "_".to_owned(),
                LikeToken::AnyRun => "%".to_owned(),
            })
            .collect(),
    }
}

fn part_name(part: TimePart) -> &'static str {
    match part {
        TimePart::Year => "YEAR",
        TimePart::Quarter => "QUARTER",
        TimePart::Month => "MONTH",
        TimePart::Week => "WEEK",
        TimePart::Day => "DAY",
        TimePart::DayOfWeek => "DOW",
        TimePart::DayOfYear => "DOY",
        TimePart::Hour => "HOUR",
        TimePart::Minute => "MINUTE",
        TimePart::Second => "SECOND",
        TimePart::Millisecond => "MILLISECOND",
        TimePart::Epoch => "EPOCH",
    }
}

fn json_path_text(steps: &[JsonStep]) -> String {
    let mut path = "$".to_owned();
    for s in steps {
        match s {
            JsonStep::Field(f) if f.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') => {
                let _ = write!(path, ".{f}");
            }
            JsonStep::Field(f) => {
                let _ = write!(path, "[{}]", quote(f));
            }
            JsonStep::Index(i) => {
                let _ = write!(path, "[{i}]");
            }
        }
    }
    path
}

fn write_func(func: &ScalarFunc, args: &[PhysExpr], name: &dyn Fn(usize) -> String, out: &mut String) {
    let simple = |f: &str, out: &mut String| call(f, args, &[], name, out);
    match func {
        ScalarFunc::Upper => simple("UPPER", out),
        ScalarFunc::Lower => simple("LOWER", out),
        ScalarFunc::Length => simple("CHAR_LENGTH", out),
        ScalarFunc::Trim(TrimSide::Both) => simple("TRIM", out),
        ScalarFunc::Trim(TrimSide::Leading) => simple("LTRIM", out),
        ScalarFunc::Trim(TrimSide::Trailing) => simple("RTRIM", out),
        ScalarFunc::Substring => simple("SUBSTRING", out),
        ScalarFunc::Abs => simple("ABS", out),
        ScalarFunc::Round => simple("ROUND", out),
        ScalarFunc::Floor => simple("FLOOR", out),
        ScalarFunc::Ceil => simple("CEIL", out),
        ScalarFunc::Extract(part) => {
            let _ = write!(out, "EXTRACT({} FROM ", part_name(*part));
            args.iter().for_each(|a| write_expr(a, name, out));
            out.push(')');
        }
        ScalarFunc::SplitIndex { sep, index } => call("SPLIT_INDEX", args, &[quote(sep), index.to_string()], name, out),
        ScalarFunc::RegexpExtract { pattern, group } => {
            call("REGEXP_EXTRACT", args, &[quote(pattern), group.to_string()], name, out);
        }
        ScalarFunc::CountChar(c) => call("COUNT_CHAR", args, &[quote(&c.to_string())], name, out),
        ScalarFunc::DateFormat(pattern) => call("DATE_FORMAT", args, &[quote(pattern)], name, out),
        ScalarFunc::Replace => simple("REPLACE", out),
        ScalarFunc::ConcatWs => simple("CONCAT_WS", out),
        ScalarFunc::Lpad => simple("LPAD", out),
        ScalarFunc::Rpad => simple("RPAD", out),
        ScalarFunc::Greatest => simple("GREATEST", out),
        ScalarFunc::Least => simple("LEAST", out),
        ScalarFunc::DateTrunc(unit) => {
            let _ = write!(out, "DATE_TRUNC('{}', ", part_name(*unit).to_ascii_lowercase());
            args.iter().for_each(|a| write_expr(a, name, out));
            out.push(')');
        }
        ScalarFunc::ToTimestamp(format) => call("TO_TIMESTAMP", args, &[quote(format)], name, out),
        ScalarFunc::JsonValue(steps) => call("JSON_VALUE", args, &[quote(&json_path_text(steps))], name, out),
        ScalarFunc::JsonQuery(steps) => call("JSON_QUERY", args, &[quote(&json_path_text(steps))], name, out),
        ScalarFunc::Power => simple("POWER", out),
        ScalarFunc::Sqrt => simple("SQRT", out),
        ScalarFunc::Exp => simple("EXP", out),
        ScalarFunc::Ln => simple("LN", out),
        ScalarFunc::Log10 => simple("LOG10", out),
        ScalarFunc::Sign => simple("SIGN", out),
        ScalarFunc::Left => simple("LEFT", out),
        ScalarFunc::Right => simple("RIGHT", out),
        ScalarFunc::Reverse => simple("REVERSE", out),
        ScalarFunc::Repeat => simple("REPEAT", out),
        ScalarFunc::SplitPart => simple("SPLIT_PART", out),
        ScalarFunc::StartsWith => simple("STARTS_WITH", out),
        ScalarFunc::Strpos => simple("STRPOS", out),
        ScalarFunc::RegexpReplace { pattern, replacement } => {
            call("REGEXP_REPLACE", args, &[quote(pattern), quote(replacement)], name, out);
        }
        ScalarFunc::Digest(DigestKind::Md5) => simple("MD5", out),
        ScalarFunc::Digest(DigestKind::Sha1) => simple("SHA1", out),
        ScalarFunc::Digest(DigestKind::Sha256) => simple("SHA256", out),
        ScalarFunc::Digest(DigestKind::Sha224) => call("SHA2", args, &["224".into()], name, out),
        ScalarFunc::Digest(DigestKind::Sha384) => call("SHA2", args, &["384".into()], name, out),
        ScalarFunc::Digest(DigestKind::Sha512) => call("SHA2", args, &["512".into()], name, out),
        ScalarFunc::Initcap => simple("INITCAP", out),
        ScalarFunc::RowField(i) => {
            if let Some(a) = args.first() {
                write_expr(a, name, out);
            }
            let field = args.first().and_then(|a| a.data_type().fields().get(*i)).map_or("?", |f| f.0.as_str());
            let _ = write!(out, ".{field}");
        }
        ScalarFunc::ElementAt => simple("ELEMENT_AT", out),
        ScalarFunc::Cardinality => simple("CARDINALITY", out),
        ScalarFunc::ArrayContains => simple("ARRAY_CONTAINS", out),
        ScalarFunc::ArrayPosition => simple("ARRAY_POSITION", out),
        ScalarFunc::ArrayJoin => simple("ARRAY_JOIN", out),
        ScalarFunc::MapKeys => simple("MAP_KEYS", out),
        ScalarFunc::MapValues => simple("MAP_VALUES", out),
        ScalarFunc::MakeArray => {
            out.push_str("ARRAY[");
            for (i, a) in args.iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                write_expr(a, name, out);
            }
            out.push(']');
        }
        ScalarFunc::MakeMap => {
            out.push_str("MAP {");
            for (i, a) in args.iter().enumerate() {
                out.push_str(match i {
                    0 => "",
                    i if i % 2 == 1 => ": ",
                    _ => ", ",
                });
                write_expr(a, name, out);
            }
            out.push('}');
        }
        ScalarFunc::MakeRow => simple("ROW", out),
        ScalarFunc::ConvertTz { from: None, to: Some(zone) } => {
            if let Some(a) = args.first() {
                write_expr(a, name, out);
            }
            let _ = write!(out, " AT TIME ZONE {}", quote(zone));
        }
        ScalarFunc::ConvertTz { from, to } => {
            let zone = |z: &Option<String>| quote(z.as_deref().unwrap_or("UTC"));
            call("CONVERT_TZ", args, &[zone(from), zone(to)], name, out);
        }
        ScalarFunc::TimestampAdd(unit) | ScalarFunc::TimestampDiff(unit) => {
            let function = if matches!(func, ScalarFunc::TimestampAdd(_)) { "TIMESTAMPADD" } else { "TIMESTAMPDIFF" };
            let _ = write!(out, "{function}({}, ", part_name(*unit));
            for (i, a) in args.iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                write_expr(a, name, out);
            }
            out.push(')');
        }
    }
}

fn write_expr(e: &PhysExpr, name: &dyn Fn(usize) -> String, out: &mut String) {
    match e {
        PhysExpr::Column { index, .. } => out.push_str(&name(*index)),
        PhysExpr::Literal { value, .. } => out.push_str(&scalar_sql(value)),
        PhysExpr::Cast { expr, to } => {
            out.push_str("CAST(");
            write_expr(expr, name, out);
            let _ = write!(out, " AS {})", to.to_string().to_ascii_uppercase());
        }
        PhysExpr::Arith { op, left, right, .. } => {
            operand(e, left, false, name, out);
            let _ = write!(out, " {} ", op.symbol());
            operand(e, right, true, name, out);
        }
        PhysExpr::Compare { op, left, right } => {
            operand(e, left, false, name, out);
            out.push_str(match op {
                CmpOp::Eq => " = ",
                CmpOp::NotEq => " <> ",
                CmpOp::Lt => " < ",
                CmpOp::LtEq => " <= ",
                CmpOp::Gt => " > ",
                CmpOp::GtEq => " >= ",
            });
            operand(e, right, true, name, out);
        }
        PhysExpr::And(l, r) | PhysExpr::Or(l, r) => {
            operand(e, l, false, name, out);
            out.push_str(if matches!(e, PhysExpr::And(..)) { " AND " } else { " OR " });
            operand(e, r, true, name, out);
        }
        PhysExpr::ConcatOp(l, r) => {
            operand(e, l, false, name, out);
            out.push_str(" || ");
            operand(e, r, true, name, out);
        }
        PhysExpr::Not(inner) => {
            out.push_str("NOT ");
            operand(e, inner, true, name, out);
        }
        PhysExpr::Negate(inner) => {
            out.push('-');
            operand(e, inner, true, name, out);
        }
        PhysExpr::IsNull { expr, negated } => {
            operand(e, expr, false, name, out);
            out.push_str(if *negated { " IS NOT NULL" } else { " IS NULL" });
        }
        PhysExpr::Case { whens, otherwise, .. } => {
            out.push_str("CASE");
            for (when, then) in whens {
                out.push_str(" WHEN ");
                write_expr(when, name, out);
                out.push_str(" THEN ");
                write_expr(then, name, out);
            }
            if !matches!(**otherwise, PhysExpr::Literal { value: Scalar::Null, .. }) {
                out.push_str(" ELSE ");
                write_expr(otherwise, name, out);
            }
            out.push_str(" END");
        }
        PhysExpr::Like { expr, pattern, negated, case_insensitive } => {
            operand(e, expr, false, name, out);
            let op = if *case_insensitive { "ILIKE" } else { "LIKE" };
            let _ = write!(out, " {}{op} {}", if *negated { "NOT " } else { "" }, quote(&like_text(pattern)));
        }
        PhysExpr::InList { expr, list, negated } => {
            operand(e, expr, false, name, out);
            let items: Vec<String> = list.iter().map(scalar_sql).collect();
            let _ = write!(out, " {}IN ({})", if *negated { "NOT " } else { "" }, items.join(", "));
        }
        PhysExpr::Coalesce { args, .. } => call("COALESCE", args, &[], name, out),
        PhysExpr::Concat(args) => call("CONCAT", args, &[], name, out),
        PhysExpr::Func { func, args, .. } => write_func(func, args, name, out),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::DataType;

    fn col(index: usize, data_type: DataType) -> PhysExpr {
        PhysExpr::Column { index, data_type }
    }

    fn names(i: usize) -> String {
        ["price", "bidder", "dateTime"][i].to_owned()
    }

    #[test]
    fn operators_are_parenthesised_only_where_they_bind_looser() {
        let price = || Box::new(col(0, DataType::Double));
        let sum = PhysExpr::Arith {
            op: ArithOp::Add,
            left: price(),
            right: Box::new(PhysExpr::literal(Scalar::Double(1.0))),
            data_type: DataType::Double,
        };
        let times = PhysExpr::Arith {
            op: ArithOp::Mul,
            left: Box::new(sum.clone()),
            right: Box::new(PhysExpr::literal(Scalar::Double(0.5))),
            data_type: DataType::Double,
        };
        assert_eq!(expr_sql(&times, &names), "(price + 1.0) * 0.5");
        let minus = PhysExpr::Arith {
            op: ArithOp::Sub,
            left: price(),
            right: Box::new(sum.clone()),
            data_type: DataType::Double,
        };
        assert_eq!(expr_sql(&minus, &names), "price - (price + 1.0)");
        let gt = PhysExpr::Compare { op: CmpOp::Gt, left: Box::new(sum), right: price() };
        let either = PhysExpr::Or(Box::new(gt.clone()), Box::new(gt));
        let both = PhysExpr::And(Box::new(either), Box::new(PhysExpr::literal(Scalar::Boolean(true))));
        assert_eq!(expr_sql(&both, &names), "(price + 1.0 > price OR price + 1.0 > price) AND TRUE");
    }

    #[test]
    fn literals_functions_and_filters_read_as_sql() {
        let day = PhysExpr::Func {
            func: ScalarFunc::DateFormat("yyyy-MM-dd".to_owned()),
            args: vec![col(2, DataType::Timestamp)],
            data_type: DataType::String,
        };
        assert_eq!(expr_sql(&day, &names), "DATE_FORMAT(dateTime, 'yyyy-MM-dd')");
        let filtered = PhysExpr::Case {
            whens: vec![(
                PhysExpr::Compare {
                    op: CmpOp::Lt,
                    left: Box::new(col(0, DataType::Double)),
                    right: Box::new(PhysExpr::literal(Scalar::Double(10_000.0))),
                },
                col(1, DataType::Bigint),
            )],
            otherwise: Box::new(PhysExpr::Literal { value: Scalar::Null, data_type: DataType::Bigint }),
            data_type: DataType::Bigint,
        };
        assert_eq!(expr_sql(&filtered, &names), "CASE WHEN price < 10000.0 THEN bidder END");
        assert_eq!(scalar_sql(&Scalar::String("it's".to_owned())), "'it''s'");
        assert_eq!(scalar_sql(&Scalar::Timestamp(0)), "TIMESTAMP '1970-01-01T00:00:00.000Z'");
        let like = PhysExpr::Like {
            expr: Box::new(col(1, DataType::String)),
            pattern: LikePattern::Prefix("a_b".to_owned()),
            negated: true,
            case_insensitive: false,
        };
        assert_eq!(expr_sql(&like, &names), "bidder NOT LIKE 'a\\_b%'");
        assert_eq!(interval_sql(10_000), "INTERVAL '10' SECOND");
        assert_eq!(interval_sql(3_600_000), "INTERVAL '1' HOUR");
        assert_eq!(interval_sql(1500), "INTERVAL '1500' MILLISECOND");
    }
}
