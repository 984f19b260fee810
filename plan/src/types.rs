//! SQL data types and literal values.

use std::fmt;

use serde::{Deserialize, Serialize};
use sluice_crds::ColumnType;

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
}

impl DataType {
    pub fn is_numeric(self) -> bool {
        matches!(self, Self::Bigint | Self::Double)
    }

    /// The type both operands of an arithmetic or comparison are cast to, if any.
    pub fn common(self, other: Self) -> Option<Self> {
        use DataType::*;
        match (self, other) {
            (a, b) if a == b => Some(a),
            (Null, t) | (t, Null) => Some(t),
            (Bigint, Double) | (Double, Bigint) => Some(Double),
            (Timestamp, Bigint) | (Bigint, Timestamp) => Some(Timestamp),
            _ => None,
        }
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
        }
    }
}

impl fmt::Display for DataType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
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
}

impl Scalar {
    pub fn data_type(&self) -> DataType {
        match self {
            Self::Null => DataType::Null,
            Self::Bigint(_) => DataType::Bigint,
            Self::Double(_) => DataType::Double,
            Self::String(_) => DataType::String,
            Self::Boolean(_) => DataType::Boolean,
            Self::Timestamp(_) => DataType::Timestamp,
        }
    }

    pub fn is_null(&self) -> bool {
        matches!(self, Self::Null)
    }
}
