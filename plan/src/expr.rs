//! Compiled expressions: typed, resolved to column indices, constant-folded.
//! Evaluation over batches lives in `engine::eval`.

use serde::{Deserialize, Serialize};

use super::{DataType, Scalar};

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum ArithOp {
    Add,
    Sub,
    Mul,
    Div,
    Mod,
}

impl ArithOp {
    /// The result type of decimal `a op b`, as SQL Server and Flink derive
    /// it (the scale PostgreSQL's exact `numeric` gives for `+ - * %`; for
    /// `/`, whose scale PostgreSQL picks per value, at least six places and
    /// both operands' scales).
    pub fn decimal_result(self, a: DataType, b: DataType) -> DataType {
        let ((pa, sa), (pb, sb)) = (a.decimal_parts(), b.decimal_parts());
        let cap = DataType::decimal_cap(&[a, b]);
        let bounded = |int, scale| DataType::bounded_decimal(int, scale, cap);
        match self {
            Self::Add | Self::Sub => bounded((pa - sa).max(pb - sb) + 1, sa.max(sb)),
            Self::Mul => bounded((pa - sa) + (pb - sb), sa + sb),
            Self::Div => bounded((pa - sa) + sb, sa.max(sb).max(crate::types::MIN_DIV_SCALE)),
            Self::Mod => bounded((pa - sa).min(pb - sb), sa.max(sb)),
        }
    }

    pub fn symbol(self) -> &'static str {
        match self {
            Self::Add => "+",
            Self::Sub => "-",
            Self::Mul => "*",
            Self::Div => "/",
            Self::Mod => "%",
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum CmpOp {
    Eq,
    NotEq,
    Lt,
    LtEq,
    Gt,
    GtEq,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum TrimSide {
    Both,
    Leading,
    Trailing,
}

/// Parts of a timestamp `EXTRACT` can return.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum TimePart {
    Year,
    Quarter,
    Month,
    Week,
    Day,
    DayOfWeek,
    DayOfYear,
    Hour,
    Minute,
    Second,
    Millisecond,
    Epoch,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum ScalarFunc {
    Upper,
    Lower,
    Length,
    Trim(TrimSide),
    /// SUBSTRING(s, start [, length]), 1-based, in characters.
    Substring,
    Abs,
    /// ROUND(x [, digits])
    Round,
    Floor,
    Ceil,
    Extract(TimePart),
    /// SPLIT_INDEX(s, sep, i): the `i`-th (0-based) piece of `s` split at
    /// `sep`; NULL past the last piece or for a negative `i` (Flink).
    SplitIndex {
        sep: String,
        index: i64,
    },
    /// REGEXP_EXTRACT(s, pattern [, group]): the text of capture `group`
    /// (0: the whole match) of the first match; NULL without one (Flink).
    RegexpExtract {
        pattern: String,
        group: usize,
    },
    /// COUNT_CHAR(s, c): how many times `c` occurs in `s` (Nexmark q14's
    /// function).
    CountChar(char),
    /// DATE_FORMAT(ts, pattern): `ts` (UTC) in a Java `SimpleDateFormat`
    /// pattern of `yyyy MM dd HH mm ss SSS` and literal text (Flink).
    DateFormat(String),
    // Appended after the first functions: a variant's number is part of the
    // plan fingerprint, so new ones go last.
    /// REPLACE(s, from, to): every occurrence of `from`, left to right and
    /// not overlapping, replaced by `to`. An empty `from` leaves `s` as it
    /// is (PostgreSQL; Java's `String.replace` would insert `to` between
    /// every character).
    Replace,
    /// CONCAT_WS(sep, a, ...): the non-NULL arguments joined by `sep`; NULL
    /// when `sep` is (Flink).
    ConcatWs,
    /// LPAD(s, len, pad): `s` left-padded with `pad`, repeated, to `len`
    /// characters, or its first `len` characters when longer; NULL for a
    /// negative `len` or an empty `pad` (Flink).
    Lpad,
    /// RPAD(s, len, pad): as [`ScalarFunc::Lpad`], padded on the right.
    Rpad,
    /// GREATEST(a, ...): the largest argument (all of one type); NULL if
    /// any argument is (Flink; PostgreSQL skips NULLs).
    Greatest,
    /// LEAST(a, ...): the smallest argument, as [`ScalarFunc::Greatest`].
    Least,
    /// DATE_TRUNC(unit, ts): the start (UTC) of the `unit` holding `ts`, for
    /// the units from `Second` to `Year` (`Week`: the ISO week, from
    /// Monday).
    DateTrunc(TimePart),
    /// TO_TIMESTAMP(s, format): `s` read with a DATE_FORMAT pattern (the
    /// same fields, each of fixed width); NULL when it does not match. The
    /// one-argument form is a CAST to timestamp.
    ToTimestamp(String),
    /// JSON_VALUE(json, path): the scalar at `path` in the JSON text, as a
    /// string; NULL where the text is not JSON, the path leads nowhere, or
    /// to an object, an array or a JSON null (Flink's default `NULL ON
    /// EMPTY`, `NULL ON ERROR`).
    JsonValue(Vec<JsonStep>),
    /// POWER(x, y), as a double; NULL where the result is not a finite
    /// number (PostgreSQL raises an error: a bad value must not stop a
    /// stream).
    Power,
    /// SQRT(x); NULL for a negative `x`.
    Sqrt,
    /// EXP(x); NULL where it overflows.
    Exp,
    /// LN(x); NULL for `x <= 0`.
    Ln,
    /// LOG10(x); NULL for `x <= 0`.
    Log10,
    /// SIGN(x): -1, 0 or 1, of the argument's type.
    Sign,
    /// LEFT(s, n): the first `n` characters; all but the last `-n` for a
    /// negative `n` (PostgreSQL).
    Left,
    /// RIGHT(s, n): the last `n` characters; all but the first `-n` for a
    /// negative `n` (PostgreSQL).
    Right,
    /// REVERSE(s), by characters.
    Reverse,
    /// REPEAT(s, n): `s` `n` times; empty for `n <= 0`; NULL past the
    /// LPAD bound of characters.
    Repeat,
    /// SPLIT_PART(s, sep, n): the `n`-th piece (1-based; from the end for
    /// a negative `n`) of `s` split at `sep`, empty past the last; NULL for
    /// `n = 0` (PostgreSQL).
    SplitPart,
    /// STARTS_WITH(s, prefix).
    StartsWith,
    /// STRPOS(s, sub) / POSITION(sub IN s): the 1-based character position
    /// of the first `sub` in `s`, 0 when there is none.
    Strpos,
    /// JSON_QUERY(json, path): the object or array at `path`, as compact
    /// JSON text; NULL where the text is not JSON, or the path leads
    /// nowhere or to a scalar (Flink's default `WITHOUT ARRAY WRAPPER`,
    /// `NULL ON EMPTY`, `NULL ON ERROR`).
    JsonQuery(Vec<JsonStep>),
    /// REGEXP_REPLACE(s, pattern, replacement): every match of `pattern`
    /// replaced by `replacement`, in which `$1` or `${1}` is capture 1
    /// (Flink replaces every match, as here; PostgreSQL and DuckDB only the
    /// first unless given the `g` flag).
    RegexpReplace {
        pattern: String,
        replacement: String,
    },
    /// MD5(s), SHA1(s), SHA256(s): the digest of the UTF-8 bytes of `s`,
    /// as lower-case hex (Flink, PostgreSQL's `md5`, DuckDB).
    Digest(DigestKind),
    /// TIMESTAMPADD(unit, n, ts): `ts` moved by `n` units. Months,
    /// quarters and years keep the day of the month, or take the month's
    /// last where it has fewer days (Jan 31 + 1 month = Feb 28 or 29), as
    /// Flink, PostgreSQL and DuckDB do; NULL past the range of a
    /// timestamp.
    TimestampAdd(TimePart),
    /// TIMESTAMPDIFF(unit, a, b): whole units from `a` to `b`, toward
    /// zero. Months, quarters and years count as TIMESTAMPADD moves: the
    /// largest `n` with `TIMESTAMPADD(unit, n, a) <= b` (Jan 31 to Feb 29
    /// is one month), as DuckDB's `date_sub` counts them.
    TimestampDiff(TimePart),
    /// A wall clock moved between zones (`None`: UTC, whose wall clock is
    /// the instant): `ts AT TIME ZONE z` and `FROM_UTC_TIMESTAMP(ts, z)`
    /// are `{from: None, to: z}`, `TO_UTC_TIMESTAMP(ts, z)` the reverse,
    /// `CONVERT_TZ(ts, a, b)` any pair. NULL past the years ±9999. See
    /// [`crate::time_zone`].
    ConvertTz {
        from: Option<String>,
        to: Option<String>,
    },
    /// INITCAP(s): each word's first letter upper case, the rest lower
    /// (a word: a run of letters and digits), as PostgreSQL.
    Initcap,
    /// `r.name`: field `.0` of a row (NULL where the row is).
    RowField(usize),
    /// `arr[i]` and ELEMENT_AT(arr, i): element `i`, 1-based, NULL out of
    /// range; `m[k]` and ELEMENT_AT(m, k): the value of key `k`, NULL
    /// without it.
    ElementAt,
    /// CARDINALITY(x): an array's elements or a map's entries.
    Cardinality,
    /// ARRAY_CONTAINS(arr, x): whether an element equals `x` (NULL when
    /// the array or `x` is).
    ArrayContains,
    /// ARRAY_POSITION(arr, x): the 1-based index of the first element
    /// equal to `x`, NULL without one (PostgreSQL, DuckDB).
    ArrayPosition,
    /// ARRAY_JOIN(arr, sep [, null_text]) / ARRAY_TO_STRING: the elements
    /// as text joined by `sep`; NULL elements skipped, or written as
    /// `null_text`.
    ArrayJoin,
    /// MAP_KEYS(m), MAP_VALUES(m): a map's keys or values as an array, in
    /// entry order.
    MapKeys,
    MapValues,
    /// `ARRAY[a, b, …]`: the arguments (of one type) as an array.
    MakeArray,
    /// `MAP {k: v, …}`: the arguments, keys and values alternating, as a
    /// map in that order.
    MakeMap,
    /// `ROW(a, b, …)`: the arguments as a row of fields `f1`, `f2`, …
    /// (PostgreSQL's names).
    MakeRow,
}

/// The digests [`ScalarFunc::Digest`] computes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum DigestKind {
    Md5,
    Sha1,
    Sha256,
    Sha224,
    Sha384,
    Sha512,
}

/// A step of a JSON_VALUE path (`$.a[0]` is `[Field("a"), Index(0)]`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum JsonStep {
    /// `.name`, `."name"` or `['name']`: a member of an object.
    Field(String),
    /// `[n]`: an element of an array, 0-based.
    Index(u64),
}

/// A `LIKE` pattern compiled once: `%` any run, `_` any one character.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum LikePattern {
    Exact(String),
    Prefix(String),
    Suffix(String),
    Contains(String),
    /// General case: the pattern split into literal pieces and wildcards.
    General(Vec<LikeToken>),
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum LikeToken {
    Literal(String),
    AnyOne,
    AnyRun,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum PhysExpr {
    Column {
        index: usize,
        data_type: DataType,
    },
    Literal {
        value: Scalar,
        data_type: DataType,
    },
    Cast {
        expr: Box<PhysExpr>,
        to: DataType,
    },
    /// Operands have the same type, which is also the result type (except
    /// `Div`, whose operands are cast to double).
    Arith {
        op: ArithOp,
        left: Box<PhysExpr>,
        right: Box<PhysExpr>,
        data_type: DataType,
    },
    /// Operands have the same type.
    Compare {
        op: CmpOp,
        left: Box<PhysExpr>,
        right: Box<PhysExpr>,
    },
    And(Box<PhysExpr>, Box<PhysExpr>),
    Or(Box<PhysExpr>, Box<PhysExpr>),
    Not(Box<PhysExpr>),
    Negate(Box<PhysExpr>),
    IsNull {
        expr: Box<PhysExpr>,
        negated: bool,
    },
    Case {
        whens: Vec<(PhysExpr, PhysExpr)>,
        otherwise: Box<PhysExpr>,
        data_type: DataType,
    },
    Like {
        expr: Box<PhysExpr>,
        pattern: LikePattern,
        negated: bool,
        case_insensitive: bool,
    },
    InList {
        expr: Box<PhysExpr>,
        list: Vec<Scalar>,
        negated: bool,
    },
    Coalesce {
        args: Vec<PhysExpr>,
        data_type: DataType,
    },
    /// String concatenation; NULL arguments are skipped (as CONCAT does).
    Concat(Vec<PhysExpr>),
    /// `a || b`: NULL if either side is.
    ConcatOp(Box<PhysExpr>, Box<PhysExpr>),
    Func {
        func: ScalarFunc,
        args: Vec<PhysExpr>,
        data_type: DataType,
    },
}

impl PhysExpr {
    pub fn data_type(&self) -> DataType {
        match self {
            Self::Column { data_type, .. }
            | Self::Literal { data_type, .. }
            | Self::Arith { data_type, .. }
            | Self::Case { data_type, .. }
            | Self::Coalesce { data_type, .. }
            | Self::Func { data_type, .. } => *data_type,
            Self::Cast { to, .. } => *to,
            Self::Compare { .. }
            | Self::And(..)
            | Self::Or(..)
            | Self::Not(_)
            | Self::IsNull { .. }
            | Self::Like { .. }
            | Self::InList { .. } => DataType::Boolean,
            Self::Negate(e) => e.data_type(),
            Self::Concat(_) | Self::ConcatOp(..) => DataType::String,
        }
    }

    pub fn literal(value: Scalar) -> Self {
        let data_type = value.data_type();
        Self::Literal { value, data_type }
    }

    pub fn as_column(&self) -> Option<usize> {
        match self {
            Self::Column { index, .. } => Some(*index),
            _ => None,
        }
    }

    pub fn is_literal(&self) -> bool {
        matches!(self, Self::Literal { .. })
    }

    /// Every column index this expression reads.
    pub fn columns(&self, out: &mut Vec<usize>) {
        match self {
            Self::Column { index, .. } => out.push(*index),
            _ => self.children().into_iter().for_each(|c| c.columns(out)),
        }
    }

    /// The direct subexpressions, in the order they are evaluated.
    pub fn children(&self) -> Vec<&PhysExpr> {
        match self {
            Self::Column { .. } | Self::Literal { .. } => Vec::new(),
            Self::Cast { expr, .. }
            | Self::Not(expr)
            | Self::Negate(expr)
            | Self::IsNull { expr, .. }
            | Self::Like { expr, .. }
            | Self::InList { expr, .. } => vec![expr],
            Self::Arith { left, right, .. }
            | Self::Compare { left, right, .. }
            | Self::And(left, right)
            | Self::Or(left, right)
            | Self::ConcatOp(left, right) => vec![left, right],
            Self::Case { whens, otherwise, .. } => {
                whens.iter().flat_map(|(w, t)| [w, t]).chain(std::iter::once(&**otherwise)).collect()
            }
            Self::Coalesce { args, .. } | Self::Concat(args) | Self::Func { args, .. } => args.iter().collect(),
        }
    }

    /// [`PhysExpr::children`], to rewrite them.
    pub fn children_mut(&mut self) -> Vec<&mut PhysExpr> {
        match self {
            Self::Column { .. } | Self::Literal { .. } => Vec::new(),
            Self::Cast { expr, .. }
            | Self::Not(expr)
            | Self::Negate(expr)
            | Self::IsNull { expr, .. }
            | Self::Like { expr, .. }
            | Self::InList { expr, .. } => vec![expr],
            Self::Arith { left, right, .. }
            | Self::Compare { left, right, .. }
            | Self::And(left, right)
            | Self::Or(left, right)
            | Self::ConcatOp(left, right) => vec![left, right],
            Self::Case { whens, otherwise, .. } => {
                whens.iter_mut().flat_map(|(w, t)| [w, t]).chain(std::iter::once(&mut **otherwise)).collect()
            }
            Self::Coalesce { args, .. } | Self::Concat(args) | Self::Func { args, .. } => args.iter_mut().collect(),
        }
    }
}

#[cfg(test)]
mod decimal_type_tests {
    use crate::{ArithOp, DataType};

    #[test]
    fn decimal_results_keep_their_places_within_eighteen_digits() {
        let (d92, d52) = (DataType::Decimal(9, 2), DataType::Decimal(5, 2));
        let arith = |op: ArithOp, a, b| op.decimal_result(a, b);
        assert_eq!(arith(ArithOp::Add, d92, DataType::Decimal(4, 3)), DataType::Decimal(11, 3));
        assert_eq!(arith(ArithOp::Mul, d92, d52), DataType::Decimal(14, 4));
        assert_eq!(arith(ArithOp::Div, d92, d52), DataType::Decimal(15, 6));
        assert_eq!(arith(ArithOp::Mod, d92, d52), DataType::Decimal(5, 2));
        let big = DataType::BIGINT_AS_DECIMAL;
        assert_eq!(arith(ArithOp::Mul, big, big), DataType::Decimal(18, 0));
        assert_eq!(arith(ArithOp::Div, big, DataType::Decimal(18, 18)), DataType::Decimal(18, 6));
        let d1810 = DataType::Decimal(18, 10);
        assert_eq!(arith(ArithOp::Mul, d1810, d1810), DataType::Decimal(18, 6), "16 integer digits, 6 places kept");
        assert_eq!(arith(ArithOp::Mul, DataType::Decimal(6, 5), DataType::Decimal(6, 5)), DataType::Decimal(12, 10));
        assert_eq!(arith(ArithOp::Add, d1810, DataType::Decimal(3, 3)), DataType::Decimal(18, 9));
        assert_eq!(d92.common(DataType::Decimal(4, 3)), Some(DataType::Decimal(10, 3)));
        assert_eq!(d92.common(DataType::Bigint), Some(DataType::Decimal(18, 2)));
        assert_eq!(DataType::Decimal(18, 10).common(DataType::Bigint), Some(DataType::Decimal(18, 6)));
        assert_eq!(d92.common(DataType::Double), Some(DataType::Double));
        assert_eq!(d92.decimal_round(1), DataType::Decimal(9, 1));
        assert_eq!(d92.decimal_round(-2), DataType::Decimal(8, 0));
        assert_eq!(d92.to_string(), "decimal(9,2)");
        // A wide operand lifts the cut to 38 digits; narrow ones keep 18.
        let d3810 = DataType::Decimal(38, 10);
        assert_eq!(arith(ArithOp::Mul, DataType::Decimal(20, 10), d92), DataType::Decimal(29, 12));
        assert_eq!(arith(ArithOp::Mul, d3810, d92), DataType::Decimal(38, 6), "35 integer digits: six places kept");
        assert_eq!(arith(ArithOp::Mul, d3810, d3810), DataType::Decimal(38, 6), "56 integer digits: six places kept");
        assert_eq!(arith(ArithOp::Add, DataType::Decimal(20, 2), d92), DataType::Decimal(21, 2));
        assert_eq!(arith(ArithOp::Div, DataType::Decimal(20, 0), DataType::Bigint), DataType::Decimal(26, 6));
        assert_eq!(d3810.common(DataType::Bigint), Some(DataType::Decimal(38, 10)));
        assert_eq!(DataType::Decimal(19, 0).decimal_round(2), DataType::Decimal(22, 2));
        assert_eq!(arith(ArithOp::Add, DataType::Decimal(18, 0), DataType::Decimal(18, 0)), DataType::Decimal(18, 0));
    }
}
