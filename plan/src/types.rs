//! SQL data types and literal values.

use std::fmt;

use serde::{Deserialize, Serialize};
use sluice_crds::ColumnType;

use crate::decimal::{MAX_PRECISION, NARROW_PRECISION};

/// The types the engine computes with. `Timestamp` is epoch milliseconds
/// (UTC) stored like `Bigint`; `Null` is the type of a bare NULL literal
/// before it is coerced to a real type.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum DataType {
    Bigint,
    Double,
    String,
    Boolean,
    Timestamp,
    Null,
    /// `DECIMAL(precision, scale)`, exact: the unscaled value, in bigint
    /// storage up to 18 digits and `i128` storage beyond
    /// ([`crate::decimal`]); precision 1 to 38, scale 0 to precision.
    Decimal(u8, u8),
}

impl DataType {
    pub fn is_numeric(self) -> bool {
        matches!(self, Self::Bigint | Self::Double | Self::Decimal(..))
    }

    /// Whether values are stored as `i64` (bigint, timestamp, a decimal of
    /// up to 18 digits).
    pub fn is_int_stored(self) -> bool {
        match self {
            Self::Bigint | Self::Timestamp => true,
            Self::Decimal(p, _) => crate::decimal::is_narrow(p),
            _ => false,
        }
    }

    /// Whether values are stored as `i128` (a decimal of 19 to 38 digits).
    pub fn is_wide(self) -> bool {
        matches!(self, Self::Decimal(p, _) if !crate::decimal::is_narrow(p))
    }

    /// The type both operands of an arithmetic or comparison are cast to, if any.
    pub fn common(self, other: Self) -> Option<Self> {
        use DataType::*;
        match (self, other) {
            (a, b) if a == b => Some(a),
            (Null, t) | (t, Null) => Some(t),
            (Bigint, Double) | (Double, Bigint) => Some(Double),
            (Timestamp, Bigint) | (Bigint, Timestamp) => Some(Timestamp),
            (Decimal(..), Double) | (Double, Decimal(..)) => Some(Double),
            (Decimal(..), Decimal(..) | Bigint) | (Bigint, Decimal(..)) => Some(self.decimal_common(other)),
            _ => None,
        }
    }
}

/// The scale a quotient gets at least (Flink's and SQL Server's minimum).
pub(crate) const MIN_DIV_SCALE: u8 = 6;

/// The typing rules of `DECIMAL(p, s)`, whose values `crate::decimal`
/// computes with.
impl DataType {
    /// The type a bigint takes beside a decimal: every `i64` but the few
    /// beyond 18 digits fits it.
    pub const BIGINT_AS_DECIMAL: DataType = DataType::Decimal(NARROW_PRECISION, 0);

    /// `(precision, scale)` of a decimal type (a bigint's beside one).
    pub(crate) fn decimal_parts(self) -> (u8, u8) {
        match self {
            DataType::Decimal(p, s) => (p, s),
            _ => (NARROW_PRECISION, 0),
        }
    }

    /// The most digits a result computed from decimals of these types
    /// gets: 18 when every operand has at most 18 (so a job that never
    /// declares a wider decimal computes in `i64` storage throughout, and
    /// keeps the types, state and output schemas it had before wider
    /// decimals existed), 38 when one is wider.
    pub(crate) fn decimal_cap(types: &[DataType]) -> u8 {
        if types.iter().any(|t| t.is_wide()) { MAX_PRECISION } else { NARROW_PRECISION }
    }

    /// A decimal type with `int` digits before the point and `scale` after,
    /// cut to `cap` digits as SQL Server cuts to 38: places give way to
    /// integer digits, down to six (or the scale, if smaller), then the
    /// integer digits are cut (values beyond them are NULL).
    pub(crate) fn bounded_decimal(int: u8, scale: u8, cap: u8) -> DataType {
        let scale =
            if int.saturating_add(scale) > cap { cap.saturating_sub(int).max(scale.min(MIN_DIV_SCALE)) } else { scale };
        DataType::Decimal(int.saturating_add(scale).clamp(1, cap), scale)
    }

    /// The type two decimals (or a decimal and a bigint) share: the larger
    /// scale and the most integer digits.
    fn decimal_common(self, other: DataType) -> DataType {
        let ((pa, sa), (pb, sb)) = (self.decimal_parts(), other.decimal_parts());
        Self::bounded_decimal((pa - sa).max(pb - sb), sa.max(sb), Self::decimal_cap(&[self, other]))
    }

    /// The type of `ROUND(x, digits)` (`FLOOR`/`CEIL`/`ROUND(x)`: digits 0)
    /// for `x` of this decimal type: PostgreSQL's scale (`digits` places,
    /// none when negative), and a digit more before the point, which
    /// rounding up can take.
    pub fn decimal_round(self, digits: i64) -> DataType {
        let (p, s) = self.decimal_parts();
        let scale = u8::try_from(digits.clamp(0, i64::from(MAX_PRECISION))).unwrap_or(0);
        Self::bounded_decimal(p - s + 1, scale, Self::decimal_cap(&[self]))
    }
}

impl From<ColumnType> for DataType {
    fn from(t: ColumnType) -> Self {
        match t {
            ColumnType::Bigint => Self::Bigint,
            ColumnType::Double => Self::Double,
            ColumnType::String => Self::String,
            ColumnType::Boolean => Self::Boolean,
            ColumnType::Timestamp => Self::Timestamp,
            ColumnType::Decimal { precision, scale } => Self::Decimal(precision, scale),
        }
    }
}

impl fmt::Display for DataType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Self::Decimal(p, s) = self {
            return write!(f, "decimal({p},{s})");
        }
        f.write_str(match self {
            Self::Decimal(..) => "decimal",
            Self::Bigint => "bigint",
            Self::Double => "double",
            Self::String => "string",
            Self::Boolean => "boolean",
            Self::Timestamp => "timestamp",
            Self::Null => "null",
        })
    }
}

/// A single value: literals in a plan, and group keys in state.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum Scalar {
    Null,
    Bigint(i64),
    Double(f64),
    String(String),
    Boolean(bool),
    Timestamp(i64),
    /// An unscaled value and its scale (`Decimal(1234, 2)` is 12.34). An
    /// `i128` whatever the value's width: postcard writes every integer as
    /// a zigzag varint, so state saved when this was an `i64` reads back.
    Decimal(i128, u8),
}

/// A [`Scalar`] that borrows its string: what a kept row's bytes
/// ([`crate::row_bytes`]) and a column's cell read as without allocating.
/// It serialises exactly as the `Scalar` it stands for (same name, same
/// variants in the same order), so state written from one reads as the
/// other; and it reads state written as `Scalar`s with its strings
/// borrowed from the bytes (a join's page read back allocates none).
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename = "Scalar")]
pub enum ScalarRef<'a> {
    Null,
    Bigint(i64),
    Double(f64),
    String(&'a str),
    Boolean(bool),
    Timestamp(i64),
    Decimal(i128, u8),
}

impl ScalarRef<'_> {
    pub fn to_scalar(self) -> Scalar {
        match self {
            Self::Null => Scalar::Null,
            Self::Bigint(x) => Scalar::Bigint(x),
            Self::Double(x) => Scalar::Double(x),
            Self::String(x) => Scalar::String(x.to_owned()),
            Self::Boolean(x) => Scalar::Boolean(x),
            Self::Timestamp(x) => Scalar::Timestamp(x),
            Self::Decimal(x, s) => Scalar::Decimal(x, s),
        }
    }
}

impl Scalar {
    /// This value, its string borrowed.
    pub fn borrowed(&self) -> ScalarRef<'_> {
        match self {
            Self::Null => ScalarRef::Null,
            Self::Bigint(x) => ScalarRef::Bigint(*x),
            Self::Double(x) => ScalarRef::Double(*x),
            Self::String(x) => ScalarRef::String(x),
            Self::Boolean(x) => ScalarRef::Boolean(*x),
            Self::Timestamp(x) => ScalarRef::Timestamp(*x),
            Self::Decimal(x, s) => ScalarRef::Decimal(*x, *s),
        }
    }

    pub fn data_type(&self) -> DataType {
        match self {
            Self::Null => DataType::Null,
            Self::Bigint(_) => DataType::Bigint,
            Self::Double(_) => DataType::Double,
            Self::String(_) => DataType::String,
            Self::Boolean(_) => DataType::Boolean,
            Self::Timestamp(_) => DataType::Timestamp,
            Self::Decimal(v, s) => DataType::Decimal(
                if *s <= NARROW_PRECISION && crate::decimal::fit(*v, NARROW_PRECISION).is_some() {
                    NARROW_PRECISION
                } else {
                    MAX_PRECISION
                },
                *s,
            ),
        }
    }

    pub fn is_null(&self) -> bool {
        matches!(self, Self::Null)
    }
}
