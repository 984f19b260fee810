//! SQL data types and literal values.

use std::collections::HashSet;
use std::fmt;
use std::hash::{Hash, Hasher};
use std::sync::{LazyLock, Mutex};

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
    // Appended after the flat types: a variant's number is part of the plan
    // fingerprint and of checkpointed state.
    /// `array<T>` ([`NestedType`]).
    Array(NestedType),
    /// `map<K, V>`.
    Map(NestedType),
    /// `row<name T, …>`.
    Row(NestedType),
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

impl DataType {
    /// The type a manifest's column type names.
    pub fn of_column(t: &ColumnType) -> Result<Self, TooManyTypes> {
        Ok(match t {
            ColumnType::Bigint => Self::Bigint,
            ColumnType::Double => Self::Double,
            ColumnType::String => Self::String,
            ColumnType::Boolean => Self::Boolean,
            ColumnType::Timestamp => Self::Timestamp,
            ColumnType::Decimal { precision, scale } => Self::Decimal(*precision, *scale),
            ColumnType::Array(e) => Self::array(Self::of_column(e)?)?,
            ColumnType::Map(k, v) => Self::map(Self::of_column(k)?, Self::of_column(v)?)?,
            ColumnType::Row(fields) => Self::row(
                fields
                    .iter()
                    .map(|(n, t)| Ok((n.clone(), Self::of_column(t)?)))
                    .collect::<Result<_, TooManyTypes>>()?,
            )?,
        })
    }
}

impl fmt::Display for DataType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Self::Decimal(p, s) = self {
            return write!(f, "decimal({p},{s})");
        }
        if self.is_nested() {
            return self.fmt_nested(f);
        }
        f.write_str(match self {
            Self::Decimal(..) => "decimal",
            Self::Bigint => "bigint",
            Self::Double => "double",
            Self::String => "string",
            Self::Boolean => "boolean",
            Self::Timestamp => "timestamp",
            Self::Null => "null",
            Self::Array(_) => "array",
            Self::Map(_) => "map",
            Self::Row(_) => "row",
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
    /// An `array<T>` value.
    List(Vec<Scalar>),
    /// A `map<K, V>` value: its entries, in order.
    Map(Vec<(Scalar, Scalar)>),
    /// A `row<…>` value: its fields, in order.
    Row(Vec<Scalar>),
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
    /// An array, map or row, read where it lies ([`NestedRef`]).
    List(NestedRef<'a>),
    Map(NestedRef<'a>),
    Row(NestedRef<'a>),
}

impl ScalarRef<'_> {
    pub fn to_scalar(self) -> Scalar {
        match self {
            Self::List(n) | Self::Map(n) | Self::Row(n) => n.to_scalar(),
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
            Self::List(_) => ScalarRef::List(NestedRef::Scalar(self)),
            Self::Map(_) => ScalarRef::Map(NestedRef::Scalar(self)),
            Self::Row(_) => ScalarRef::Row(NestedRef::Scalar(self)),
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
            // A nested value's type is the column's it came from: it is
            // never read off the value.
            Self::List(_) | Self::Map(_) | Self::Row(_) => DataType::Null,
        }
    }

    pub fn is_null(&self) -> bool {
        matches!(self, Self::Null)
    }
}

// The nested types, `array<T>`, `map<K, V>` and `row<name T, …>`, as the
// engine computes with them.
//
// [`DataType`] is `Copy`: the planner, every operator and every decoder
// pass types by value, and a flat type is a tag and two bytes. A nested
// type keeps that by pointing at an interned description: each distinct
// nested type is stored once per process and never freed, so equal
// types are the same pointer (comparing them is one instruction) and a
// type costs nothing to copy. The table is bounded
// ([`MAX_INTERNED_TYPES`]): a shared operator validating tenants'
// manifests for months keeps at most that many, and a manifest that would
// add one more is refused with the reason rather than growing memory.

/// The most distinct nested types one process interns.
pub const MAX_INTERNED_TYPES: usize = 100_000;

/// What a nested type holds.
#[derive(Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Nested {
    /// `array<T>`.
    Array(DataType),
    /// `map<K, V>`: laid out as an array of `row<key K, value V>`.
    Map(DataType, DataType),
    /// `row<name T, …>`: named fields, in order.
    Row(Vec<(String, DataType)>),
}

/// An interned [`Nested`]: equal types are the same pointer.
#[derive(Clone, Copy)]
pub struct NestedType(&'static Nested);

/// A nested type could not be made: the process holds
/// [`MAX_INTERNED_TYPES`] already.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TooManyTypes;

impl fmt::Display for TooManyTypes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "this process already holds {MAX_INTERNED_TYPES} distinct nested types")
    }
}

static INTERNED: LazyLock<Mutex<HashSet<&'static Nested>>> = LazyLock::new(|| Mutex::new(HashSet::new()));

impl NestedType {
    /// The one copy of `nested` this process keeps.
    pub fn intern(nested: Nested) -> Result<Self, TooManyTypes> {
        let mut table = INTERNED.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(&t) = table.get(&nested) {
            return Ok(Self(t));
        }
        if table.len() >= MAX_INTERNED_TYPES {
            return Err(TooManyTypes);
        }
        let t: &'static Nested = Box::leak(Box::new(nested));
        table.insert(t);
        Ok(Self(t))
    }

    pub fn get(self) -> &'static Nested {
        self.0
    }
}

impl PartialEq for NestedType {
    fn eq(&self, other: &Self) -> bool {
        std::ptr::eq(self.0, other.0)
    }
}

impl Eq for NestedType {}

impl Hash for NestedType {
    fn hash<H: Hasher>(&self, state: &mut H) {
        // By content, so a hash does not depend on where the type lives.
        self.0.hash(state);
    }
}

impl fmt::Debug for NestedType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

impl Serialize for NestedType {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.0.serialize(s)
    }
}

impl<'de> Deserialize<'de> for NestedType {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Self::intern(Nested::deserialize(d)?).map_err(serde::de::Error::custom)
    }
}

impl DataType {
    /// `array<element>`.
    pub fn array(element: DataType) -> Result<Self, TooManyTypes> {
        Ok(Self::Array(NestedType::intern(Nested::Array(element))?))
    }

    /// `map<key, value>`.
    pub fn map(key: DataType, value: DataType) -> Result<Self, TooManyTypes> {
        Ok(Self::Map(NestedType::intern(Nested::Map(key, value))?))
    }

    /// `row<name T, …>`.
    pub fn row(fields: Vec<(String, DataType)>) -> Result<Self, TooManyTypes> {
        Ok(Self::Row(NestedType::intern(Nested::Row(fields))?))
    }

    /// Whether values of this type are arrays, maps or rows.
    pub fn is_nested(self) -> bool {
        matches!(self, Self::Array(_) | Self::Map(_) | Self::Row(_))
    }

    /// Whether this type, or one it holds, is nested.
    pub fn holds_nested(types: &[DataType]) -> bool {
        types.iter().any(|t| t.is_nested())
    }

    /// An array's element type; a map's entry type (`row<key K, value V>`),
    /// the elements its layout holds.
    pub fn element(self) -> Option<DataType> {
        match self {
            Self::Array(t) => match t.get() {
                Nested::Array(e) => Some(*e),
                _ => None,
            },
            Self::Map(t) => match t.get() {
                Nested::Map(k, v) => Self::row(vec![("key".to_owned(), *k), ("value".to_owned(), *v)]).ok(),
                _ => None,
            },
            _ => None,
        }
    }

    /// A map's key and value types.
    pub fn map_types(self) -> Option<(DataType, DataType)> {
        match self {
            Self::Map(t) => match t.get() {
                Nested::Map(k, v) => Some((*k, *v)),
                _ => None,
            },
            _ => None,
        }
    }

    /// A row's fields.
    pub fn fields(self) -> &'static [(String, DataType)] {
        match self {
            Self::Row(t) => match t.get() {
                Nested::Row(f) => f,
                _ => &[],
            },
            _ => &[],
        }
    }

    /// The index and type of the row field `name` (an exact match first,
    /// then any case, as SQL names are matched).
    pub fn field(self, name: &str) -> Option<(usize, DataType)> {
        let fields = self.fields();
        fields
            .iter()
            .position(|(n, _)| n == name)
            .or_else(|| fields.iter().position(|(n, _)| n.eq_ignore_ascii_case(name)))
            .map(|i| (i, fields[i].1))
    }

    /// The name a type's text gives it, nested ones included.
    pub(crate) fn fmt_nested(self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Array(_) => write!(f, "array<{}>", self.element().unwrap_or(DataType::Null)),
            Self::Map(_) => {
                let (k, v) = self.map_types().unwrap_or((DataType::Null, DataType::Null));
                write!(f, "map<{k}, {v}>")
            }
            _ => {
                f.write_str("row<")?;
                for (i, (name, t)) in self.fields().iter().enumerate() {
                    if i > 0 {
                        f.write_str(", ")?;
                    }
                    write!(f, "{} {t}", sluice_crds::field_name(name))?;
                }
                f.write_str(">")
            }
        }
    }
}

/// A column of nested values, as a [`NestedRef`] reads one of its rows
/// (`crate::Column` is the one there is; the trait keeps a value's type
/// free of the column's).
pub trait NestedCells: fmt::Debug {
    /// Row `row`'s value.
    fn nested_scalar(&self, row: usize) -> Scalar;
    /// The column itself, for code that reads its layout
    /// (`downcast_ref::<Column>()`).
    fn as_any(&self) -> &dyn std::any::Any;
}

/// A nested value where it lies: row `.1` of a nested column, or a
/// [`Scalar`]. It serialises as the `Scalar` it stands for, so state
/// written from a column reads back as `Scalar`s.
#[derive(Clone, Copy, Debug)]
pub enum NestedRef<'a> {
    Cell(&'a dyn NestedCells, usize),
    Scalar(&'a Scalar),
    /// The value as postcard wrote its `Scalar`: a kept row's bytes
    /// ([`crate::row_bytes`]), checked when read.
    Encoded(&'a [u8]),
}

impl NestedRef<'_> {
    pub fn to_scalar(self) -> Scalar {
        match self {
            Self::Scalar(s) => s.clone(),
            Self::Encoded(b) => postcard::from_bytes(b).unwrap_or(Scalar::Null),
            Self::Cell(c, i) => c.nested_scalar(i),
        }
    }
}

impl PartialEq for NestedRef<'_> {
    fn eq(&self, other: &Self) -> bool {
        self.to_scalar() == other.to_scalar()
    }
}

impl Serialize for NestedRef<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let owned;
        let value = match *self {
            Self::Scalar(v) => v,
            _ => {
                owned = self.to_scalar();
                &owned
            }
        };
        match value {
            Scalar::List(v) | Scalar::Row(v) => v.serialize(s),
            Scalar::Map(v) => v.serialize(s),
            _ => Err(serde::ser::Error::custom("a flat value where a nested one was expected")),
        }
    }
}

impl<'de> Deserialize<'de> for NestedRef<'_> {
    fn deserialize<D: serde::Deserializer<'de>>(_: D) -> Result<Self, D::Error> {
        Err(serde::de::Error::custom("a nested value reads back as a Scalar, not borrowed"))
    }
}

#[cfg(test)]
mod tests {
    use super::DataType;

    #[test]
    fn equal_nested_types_are_one_interned_value() {
        let a = DataType::array(DataType::row(vec![("sku".into(), DataType::String)]).unwrap()).unwrap();
        let b = DataType::array(DataType::row(vec![("sku".into(), DataType::String)]).unwrap()).unwrap();
        assert_eq!(a, b);
        assert_ne!(a, DataType::array(DataType::String).unwrap());
        assert_eq!(a.to_string(), "array<row<sku string>>");
        let bytes = postcard::to_allocvec(&a).unwrap();
        assert_eq!(postcard::from_bytes::<DataType>(&bytes).unwrap(), a);
        let m = DataType::map(DataType::String, DataType::Bigint).unwrap();
        assert_eq!(m.to_string(), "map<string, bigint>");
        assert_eq!(m.element().unwrap().to_string(), "row<key string, value bigint>");
    }
}
